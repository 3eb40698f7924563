//! Crate-private decoders of on-disk bytes, reachable from the property tests in
//! `tests/recovery/decoders.rs`. Not part of the API: hidden from the docs, no stability promise.
//!
//! The public decoders (`format`, `ring::format`, `stage::sink_batch`) are used directly; this
//! module adds the ones behind private modules, with thin wrappers where a decoder needs an
//! extent or a directory around it.
#![allow(missing_docs, missing_debug_implementations)]

use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::extent::Extent;
use crate::file::DataFile;
use crate::format::{FrameError, FrameView, IndexEntry, Progress};
use crate::io::StdStorage;
use crate::record::Append;

pub use crate::cursor::{
    CursorRecord, decode_slot as decode_cursor_slot, encode_slot as encode_cursor_slot,
};

/// Decodes and validates a journal entry: `(topic, first offset, records)`.
pub fn decode_journal_entry(
    body: &[u8],
) -> std::result::Result<(&str, u64, Vec<Append<'_>>), String> {
    crate::ring::entry::decode(body).map(|e| (e.topic, e.first, e.records))
}

/// Encodes the journal entry of `records` of topic `name`, the first at offset `first`.
pub fn encode_journal_entry(
    name: &str,
    first: u64,
    records: &[Append<'_>],
    now_us: u64,
) -> Vec<u8> {
    let mut buf = Vec::new();
    crate::ring::entry::encode(&mut buf, name, first, records, now_us);
    buf
}

pub use crate::stage::segment::SegmentHeader;

/// Bytes of a staged segment's header, and where its checksum sits.
pub const SEGMENT_HEADER_LEN: usize = crate::stage::segment::SH_LEN;
pub const SEGMENT_HEADER_CRC_AT: usize = crate::stage::segment::SH_CRC;

/// Encodes a staged segment's header (`SH_LEN` bytes).
pub fn encode_segment_header(h: &SegmentHeader) -> Vec<u8> {
    h.encode().to_vec()
}

/// Decodes and checks a staged segment's header.
pub fn decode_segment_header(b: &[u8]) -> std::result::Result<SegmentHeader, &'static str> {
    SegmentHeader::decode(b)
}

/// One segment line of a part manifest and its topic lines: `(index, records,
/// max_record_bytes, [(topic, count)])`.
pub type ManifestSegment = (u32, u64, u64, Vec<(String, u64)>);

/// Encodes a part manifest (`PART.stage`).
pub fn encode_part_manifest(segments: &[ManifestSegment]) -> String {
    crate::stage::PartManifest {
        segments: segments
            .iter()
            .map(|(index, records, max, counts)| crate::stage::SegmentEntry {
                index: *index,
                records: *records,
                max_record_bytes: *max,
                counts: counts.clone(),
            })
            .collect(),
    }
    .encode()
}

/// Decodes and checks a part manifest.
pub fn decode_part_manifest(text: &str) -> Result<Vec<ManifestSegment>> {
    let m = crate::stage::PartManifest::decode(Path::new("PART.stage"), text)?;
    Ok(m.segments
        .into_iter()
        .map(|s| (s.index, s.records, s.max_record_bytes, s.counts))
        .collect())
}

/// Reads `job_dir/COMMIT`: `(parts, sink)`, `None` when there is no such file.
#[expect(clippy::type_complexity, reason = "a test hook")]
pub fn read_commit(job_dir: &Path) -> Result<Option<(Vec<String>, Option<(String, u64)>)>> {
    Ok(crate::stage::read_commit(&crate::io::StdStorage, job_dir)?.map(|m| (m.parts, m.sink)))
}

/// Reads `job_dir/INGEST`: each topic's first offset for the job.
pub fn read_ingest(job_dir: &Path) -> Result<Option<Vec<(String, u64)>>> {
    crate::stage::read_ingest(&crate::io::StdStorage, job_dir)
}

/// One extent of `extent_count` blocks of 16 KiB at the start of a fresh data file in a
/// caller's directory, for the decoders that need an extent around them.
pub struct ExtentFixture {
    block: Extent,
}

/// Block size of an [`ExtentFixture`]'s file.
pub const FIXTURE_BLOCK_BYTES: u64 = 16 << 10;
/// Blocks in an [`ExtentFixture`]'s file.
pub const FIXTURE_BLOCKS: u32 = 4;

impl ExtentFixture {
    /// Creates data file 1 of `version` in `dir` (1 to 4: `format::VERSION_*`; 2 and 4 are
    /// adopted files, whose frames and footers carry offsets relative to the extent) and an
    /// extent of `extent_count` blocks at block 0.
    pub fn create(
        dir: &Path,
        version: u32,
        extent_count: u32,
        topic_id: u32,
        salt: u32,
        first_offset: u64,
    ) -> Result<ExtentFixture> {
        let extent_count = extent_count.clamp(1, FIXTURE_BLOCKS);
        let mut file = DataFile::create(
            &StdStorage,
            dir,
            1,
            crate::format::FILE_HEADER_BYTES + u64::from(FIXTURE_BLOCKS) * FIXTURE_BLOCK_BYTES,
            FIXTURE_BLOCK_BYTES,
            crate::format::VERSION_ABSOLUTE,
        )?;
        assert!(
            (1..=crate::format::FORMAT_VERSION).contains(&version),
            "a data-file version"
        );
        // Files of the adopted versions are never created, only renamed into place.
        if let Some(f) = Arc::get_mut(&mut file) {
            f.header.version = version;
        }
        let block = Extent::new(
            file,
            0,
            extent_count,
            topic_id,
            salt,
            first_offset,
            4096,
            None,
        );
        Ok(ExtentFixture { block })
    }

    /// Extent length in bytes.
    pub fn extent_bytes(&self) -> u64 {
        self.block.len
    }

    /// Overwrites the extent's bytes at `at` (clamped to the extent).
    pub fn write(&self, at: u64, bytes: &[u8]) {
        let at = at.min(self.block.len) as usize;
        let n = bytes.len().min(self.block.len as usize - at);
        self.block
            .file
            .map
            .write_header(self.block.abs(at as u64), &bytes[..n]);
    }

    /// [`Extent::decode_frame`] over `bytes`.
    pub fn decode_frame(
        &self,
        bytes: &[u8],
        position: u64,
        offset: u64,
        verify: bool,
    ) -> std::result::Result<FrameView, FrameError> {
        self.block.decode_frame(bytes, position, offset, verify)
    }

    /// [`Extent::decode_walking`] over `bytes`.
    pub fn decode_walking(
        &self,
        bytes: &[u8],
        position: u64,
        offset: u64,
        verify: bool,
        checked: &mut crate::format::Checked,
    ) -> std::result::Result<FrameView, FrameError> {
        self.block
            .decode_walking(bytes, position, offset, verify, checked)
    }

    /// [`Extent::read_footer`] of the extent as written, as `progress` describes it.
    pub fn read_footer(&self, progress: &Progress) -> Result<Vec<IndexEntry>> {
        self.block.read_footer("fixture", progress)
    }
}

/// Where the shared state file (`tidelog.state`) keeps the allocator's next block (a `u64`,
/// little-endian), for the test that damages it.
pub const STATE_ALLOC_NEXT_BLOCK_AT: usize = crate::shared::H_ALLOC_NEXT_BLOCK;

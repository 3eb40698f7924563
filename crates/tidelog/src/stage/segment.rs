//! A staged segment: one file of a staged part, laid out like a data file whose extents
//! belong to no topic yet (`docs/FORMAT.md`, "Staged appends").
//!
//! Its frames carry topic id 0 and their index in the extent (extents of
//! `format::VERSION_RELATIVE_BATCHED`, batch frames; `format::VERSION_RELATIVE`, record frames,
//! in segments of staging version 2), so a publish can *adopt* the whole file as a data file by
//! rewriting its header page and each extent's slots, without reading or writing a record;
//! small segments are *copied* into their topics instead (`Segment::for_each_extent`).

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::{
    self, BlockIdentity, FileHeader, FrameError, FrameView, Progress, ProgressState, get_u32,
    get_u64, put_u32, put_u64,
};
use crate::headers::HeaderBlock;
use crate::io::Storage;
use crate::mmap::FrozenFile;
use crate::record::Append;

/// Suffix of a segment file: `PART.INDEX.seg`.
pub const SEGMENT_SUFFIX: &str = ".seg";
/// Block size of staged segments (the default data block).
pub const SEGMENT_BLOCK_BYTES: u64 = 10 << 20;
/// Blocks in a full segment: a part goes on in a new segment past them.
pub const SEGMENT_BLOCKS_MAX: u32 = 102;
/// Largest segment file, header page included (about 1 GiB, like a default data file).
pub const SEGMENT_BYTES_MAX: u64 =
    format::FILE_HEADER_BYTES + SEGMENT_BLOCKS_MAX as u64 * SEGMENT_BLOCK_BYTES;
/// Index interval of staged extents: `Config::index_interval_bytes`' default (an extent
/// keeps the footer reserve of the interval it was written with, whatever the directory's).
pub const SEGMENT_INDEX_INTERVAL_BYTES: u64 = 4096;
const _: () = assert!(SEGMENT_BYTES_MAX <= crate::config::FILE_SIZE_MAX);
const _: () = assert!(SEGMENT_BLOCK_BYTES.is_multiple_of(format::PAGE_BYTES));

/// Segment header magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"TDLSTAGE";
/// Version of the staging format (parts, segments) this build writes: extents of batch frames.
pub const STAGING_VERSION: u32 = 3;
/// The oldest staging version this build reads: extents of record frames, one per record.
pub const STAGING_VERSION_RECORD_FRAMES: u32 = 2;

/// The data-file version of the extents of a segment of `staging_version` (2 or 3), which
/// its adoption makes the file's.
pub(crate) const fn extent_version(staging_version: u32) -> u32 {
    if staging_version == STAGING_VERSION_RECORD_FRAMES {
        format::VERSION_RELATIVE
    } else {
        format::VERSION_RELATIVE_BATCHED
    }
}
pub const SH_MAGIC: usize = 0;
pub const SH_VERSION: usize = SH_MAGIC + 8;
pub const SH_FLAGS: usize = SH_VERSION + 4;
pub const SH_INDEX: usize = SH_FLAGS + 4;
pub const SH_FILE_SIZE: usize = SH_INDEX + 8;
pub const SH_BLOCK_SIZE: usize = SH_FILE_SIZE + 8;
pub const SH_CREATED_US: usize = SH_BLOCK_SIZE + 8;
pub const SH_RECORDS: usize = SH_CREATED_US + 8;
pub const SH_EXTENTS: usize = SH_RECORDS + 8;
pub const SH_CRC: usize = SH_EXTENTS + 4;
/// Bytes of the segment header (the rest of the first page is zero).
pub const SH_LEN: usize = SH_CRC + 4;
const _: () = assert!(SH_LEN == 64);
// The adoption replaces the header page with a data-file header: both fit in it.
const _: () = assert!(SH_LEN as u64 <= format::FILE_HEADER_BYTES);
// A cut adoption leaves a data-file header where the segment header was: one read gets either.
const _: () = assert!(format::FH_LEN <= SH_LEN);
// Both slots of an extent are read and written in one I/O.
const SLOTS_LEN: usize = format::PG_SLOT_AT + format::PG_LEN;
const _: () = assert!(format::ID_SLOT_AT + format::ID_LEN <= format::PG_SLOT_AT);

/// The file name of segment `index` of `part`.
pub fn segment_name(part: &str, index: u32) -> String {
    format!("{part}.{index}{SEGMENT_SUFFIX}")
}

/// The first page of a segment that no publish has touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Staging version: [`STAGING_VERSION`], or [`STAGING_VERSION_RECORD_FRAMES`] for a
    /// segment of record frames.
    pub version: u32,
    /// The segment's index in its part.
    pub index: u32,
    /// The segment's size.
    pub file_size_bytes: u64,
    /// Its block size.
    pub block_size_bytes: u64,
    /// When the writer finished it.
    pub created_us: u64,
    /// Records in all its extents.
    pub records: u64,
    /// Its extents.
    pub extents: u32,
}

impl SegmentHeader {
    /// The header page's first `SH_LEN` bytes.
    pub fn encode(&self) -> [u8; SH_LEN] {
        let mut b = [0u8; SH_LEN];
        b[SH_MAGIC..SH_VERSION].copy_from_slice(&SEGMENT_MAGIC);
        put_u32(&mut b, SH_VERSION, self.version);
        put_u64(&mut b, SH_INDEX, u64::from(self.index));
        put_u64(&mut b, SH_FILE_SIZE, self.file_size_bytes);
        put_u64(&mut b, SH_BLOCK_SIZE, self.block_size_bytes);
        put_u64(&mut b, SH_CREATED_US, self.created_us);
        put_u64(&mut b, SH_RECORDS, self.records);
        put_u32(&mut b, SH_EXTENTS, self.extents);
        let crc = crc32fast::hash(&b[..SH_CRC]);
        put_u32(&mut b, SH_CRC, crc);
        b
    }

    /// The staging version of a sound header page (magic and checksum) when it is newer than
    /// this build reads: a part staged by a later build, not damage.
    pub fn newer_version(b: &[u8]) -> Option<u32> {
        let b = b.get(..SH_LEN)?;
        let sound = b[SH_MAGIC..SH_VERSION] == SEGMENT_MAGIC
            && crc32fast::hash(&b[..SH_CRC]) == get_u32(b, SH_CRC);
        let version = get_u32(b, SH_VERSION);
        (sound && version > STAGING_VERSION).then_some(version)
    }

    /// Decodes and checks a header page (magic, checksum, version and flags).
    pub fn decode(b: &[u8]) -> std::result::Result<SegmentHeader, &'static str> {
        let b = b.get(..SH_LEN).ok_or("segment header is cut")?;
        if b[SH_MAGIC..SH_VERSION] != SEGMENT_MAGIC {
            return Err("not a staged segment");
        }
        if crc32fast::hash(&b[..SH_CRC]) != get_u32(b, SH_CRC) {
            return Err("segment header checksum mismatch");
        }
        let version = get_u32(b, SH_VERSION);
        if !(STAGING_VERSION_RECORD_FRAMES..=STAGING_VERSION).contains(&version)
            || get_u32(b, SH_FLAGS) != 0
        {
            return Err("unknown segment version or flags");
        }
        let index = u32::try_from(get_u64(b, SH_INDEX)).map_err(|_| "segment index too large")?;
        Ok(SegmentHeader {
            version,
            index,
            file_size_bytes: get_u64(b, SH_FILE_SIZE),
            block_size_bytes: get_u64(b, SH_BLOCK_SIZE),
            created_us: get_u64(b, SH_CREATED_US),
            records: get_u64(b, SH_RECORDS),
            extents: get_u32(b, SH_EXTENTS),
        })
    }
}

/// The two slots of a staged extent, as the writer seals it: the identity knows the topic by
/// name only (id 0, file 0, first offset 0) and the progress slot says `Sealed`.
pub(crate) fn staged_slots(id: &BlockIdentity, progress: &Progress) -> [u8; SLOTS_LEN] {
    let mut b = [0u8; SLOTS_LEN];
    b[format::ID_SLOT_AT..format::ID_SLOT_AT + format::ID_LEN].copy_from_slice(&id.encode());
    b[format::PG_SLOT_AT..].copy_from_slice(&progress.encode());
    b
}

/// One extent of a segment, as its slots describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StagedExtent {
    pub block_index: u32,
    pub extent_count: u32,
    pub salt: u32,
    pub topic: String,
    pub records: u64,
    /// End of its records (the footer starts here).
    pub durable_end: u64,
    /// Largest timestamp of the topic's records in the part up to this extent's last.
    pub max_timestamp_us: u64,
    pub footer_count: u64,
    pub footer_crc: u32,
}

/// What an adoption writes into one extent's slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement {
    pub topic_id: u32,
    pub first_offset: u64,
    /// The topic's largest timestamp up to this extent's last record (extent maxima are
    /// running maxima of the topic, so seeks by time can bisect the chain).
    pub max_timestamp_us: u64,
}

/// A segment checked for a publish: what its header page and slots say. No file handle is
/// kept (a job may have thousands of segments); each step opens the file again.
#[derive(Debug)]
pub(crate) struct Segment {
    pub path: PathBuf,
    pub file_size_bytes: u64,
    pub block_size_bytes: u64,
    created_us: u64,
    /// The data-file version of its extents (`format::VERSION_RELATIVE_BATCHED`, or
    /// `VERSION_RELATIVE` in a segment of staging version 2): an adoption keeps it.
    extent_version: u32,
    pub extents: Vec<StagedExtent>,
}

impl Segment {
    /// Opens and checks the segment at `path`: its header page (or the data-file header that
    /// an adoption cut short wrote in its place), then every extent's identity and progress
    /// slot and footer checksum. Records are checked by whoever reads them: the copy path
    /// here, readers of an adopted extent (as for any sealed extent recovery trusts).
    pub fn open(storage: &dyn Storage, path: &Path) -> Result<Segment> {
        let corrupt = |reason: String| staged_corruption(path, &reason);
        let file = storage
            .open(path, false)
            .map_err(|e| Error::io("open staged segment", path, e))?;
        let mut page = [0u8; SH_LEN];
        let n = storage
            .read_at(&file, path, &mut page, 0)
            .map_err(|e| Error::io("read staged segment", path, e))?;
        if n < page.len() {
            return Err(corrupt("the segment is shorter than its header".into()));
        }
        let (geometry, header) = match SegmentHeader::decode(&page) {
            Ok(h) => (
                (
                    h.file_size_bytes,
                    h.block_size_bytes,
                    h.created_us,
                    extent_version(h.version),
                ),
                Some(h),
            ),
            Err(reason) => match FileHeader::decode(&page) {
                // Prepared for adoption by a publish that stopped before the rename.
                Ok(h) if format::version_relative(h.version) => (
                    (
                        h.file_size_bytes,
                        h.block_size_bytes,
                        h.created_us,
                        h.version,
                    ),
                    None,
                ),
                // A later build's segment is not damage.
                _ => match SegmentHeader::newer_version(&page) {
                    Some(found) => {
                        return Err(Error::UnsupportedVersion {
                            path: path.to_owned(),
                            found,
                            supported: STAGING_VERSION,
                        });
                    }
                    None => return Err(corrupt(reason.into())),
                },
            },
        };
        let (file_size_bytes, block_size_bytes, created_us, extent_version) = geometry;
        let geometry_ok = block_size_bytes >= 2 * format::PAGE_BYTES
            && block_size_bytes.is_multiple_of(format::PAGE_BYTES)
            && file_size_bytes >= format::FILE_HEADER_BYTES + block_size_bytes
            && (file_size_bytes - format::FILE_HEADER_BYTES).is_multiple_of(block_size_bytes)
            && file_size_bytes <= SEGMENT_BYTES_MAX;
        if !geometry_ok {
            return Err(corrupt(format!(
                "impossible geometry (file {file_size_bytes} bytes, block {block_size_bytes} bytes)"
            )));
        }
        let len = storage
            .file_metadata(&file, path)
            .map_err(|e| Error::io("stat staged segment", path, e))?
            .len();
        if len < file_size_bytes {
            return Err(corrupt(format!(
                "the segment has {len} bytes, its header says {file_size_bytes}"
            )));
        }
        let blocks = ((file_size_bytes - format::FILE_HEADER_BYTES) / block_size_bytes) as u32;
        let mut segment = Segment {
            path: path.to_owned(),
            file_size_bytes,
            block_size_bytes,
            created_us,
            extent_version,
            extents: Vec::new(),
        };
        let mut slot = 0u32;
        while slot < blocks {
            let extent = segment.read_extent(storage, &file, slot, blocks)?;
            slot += extent.extent_count;
            segment.extents.push(extent);
        }
        if let Some(h) = header
            && (h.records != segment.records() || h.extents as usize != segment.extents.len())
        {
            return Err(corrupt(format!(
                "the header counts {} records in {} extents, the extents hold {} in {}",
                h.records,
                h.extents,
                segment.records(),
                segment.extents.len()
            )));
        }
        Ok(segment)
    }

    /// Reads and checks the extent starting at block `slot`.
    fn read_extent(
        &self,
        storage: &dyn Storage,
        file: &File,
        slot: u32,
        blocks: u32,
    ) -> Result<StagedExtent> {
        let corrupt = |reason: &str| {
            staged_corruption(&self.path, &format!("extent at block {slot}: {reason}"))
        };
        let at = self.block_position(slot);
        let mut slots = [0u8; SLOTS_LEN];
        storage
            .read_at(file, &self.path, &mut slots, at)
            .map_err(|e| Error::io("read staged segment", &self.path, e))?;
        let id = BlockIdentity::decode(&slots[format::ID_SLOT_AT..])
            .ok_or_else(|| corrupt("no valid identity slot"))?;
        let fits = id.extent_count >= 1
            && u64::from(slot) + u64::from(id.extent_count) <= u64::from(blocks);
        if id.version != self.extent_version || id.block_index != slot || !fits {
            return Err(corrupt("the identity slot does not describe this extent"));
        }
        let progress = Progress::decode(&slots[format::PG_SLOT_AT..])
            .filter(|p| p.state == ProgressState::Sealed)
            .ok_or_else(|| corrupt("no sealed progress slot"))?;
        let extent_len = u64::from(id.extent_count) * self.block_size_bytes;
        let footer_len = progress.footer_count.saturating_mul(format::IX_LEN as u64);
        let sane = progress.record_count > 0
            && progress.durable_end > format::BLOCK_HEADER_BYTES
            && progress
                .durable_end
                .checked_add(footer_len)
                .is_some_and(|end| end <= extent_len);
        if !sane {
            return Err(corrupt("the progress slot's counts are impossible"));
        }
        let mut footer = vec![0u8; footer_len as usize];
        storage
            .read_at(file, &self.path, &mut footer, at + progress.durable_end)
            .map_err(|e| Error::io("read staged segment", &self.path, e))?;
        if crc32fast::hash(&footer) != progress.footer_crc {
            return Err(corrupt("index footer checksum mismatch"));
        }
        Ok(StagedExtent {
            block_index: slot,
            extent_count: id.extent_count,
            salt: id.salt,
            topic: id.topic,
            records: progress.record_count,
            durable_end: progress.durable_end,
            max_timestamp_us: progress.max_timestamp_us,
            footer_count: progress.footer_count,
            footer_crc: progress.footer_crc,
        })
    }

    /// Byte position of block `index` in the file.
    fn block_position(&self, index: u32) -> u64 {
        block_position(self.block_size_bytes, index)
    }

    /// Whether its extents hold batch frames (staging version 3) rather than record frames.
    pub fn batched(&self) -> bool {
        format::version_batched(self.extent_version)
    }

    /// Records in the segment.
    pub fn records(&self) -> u64 {
        self.extents.iter().map(|e| e.records).sum()
    }

    /// Bytes of record frames in the segment.
    pub fn data_bytes(&self) -> u64 {
        self.extents
            .iter()
            .map(|e| e.durable_end - format::BLOCK_HEADER_BYTES)
            .sum()
    }

    /// Records per topic, topics in order of first appearance.
    pub fn counts(&self) -> Vec<(String, u64)> {
        let mut counts: Vec<(String, u64)> = Vec::new();
        for e in &self.extents {
            match counts.iter_mut().find(|(t, _)| *t == e.topic) {
                Some((_, n)) => *n += e.records,
                None => counts.push((e.topic.clone(), e.records)),
            }
        }
        counts
    }

    /// Turns the segment into data file `seq` in place: each extent's slots get the topic id,
    /// first offset and running maximum timestamp of `placements[i]`, the header page a
    /// data-file header; then the file is synced. Renaming it into the data directory is the
    /// caller's step. A crash before that leaves a segment that opens and is prepared again.
    pub fn prepare_adoption(
        &self,
        storage: &dyn Storage,
        seq: u64,
        placements: &[Placement],
    ) -> Result<()> {
        assert_eq!(
            placements.len(),
            self.extents.len(),
            "one placement per extent"
        );
        let io = |e| Error::io("prepare staged segment for adoption", &self.path, e);
        let file = storage.open(&self.path, true).map_err(io)?;
        for (e, p) in self.extents.iter().zip(placements) {
            let id = BlockIdentity {
                version: self.extent_version,
                topic_id: p.topic_id,
                block_index: e.block_index,
                extent_count: e.extent_count,
                salt: e.salt,
                file_seq: seq,
                first_offset: p.first_offset,
                topic: e.topic.clone(),
            };
            let progress = Progress {
                state: ProgressState::Sealed,
                durable_end: e.durable_end,
                record_count: e.records,
                max_timestamp_us: p.max_timestamp_us,
                footer_count: e.footer_count,
                footer_crc: e.footer_crc,
            };
            storage
                .write_at(
                    &file,
                    &self.path,
                    &staged_slots(&id, &progress),
                    self.block_position(e.block_index),
                )
                .map_err(io)?;
        }
        let header = FileHeader {
            version: self.extent_version,
            file_seq: seq,
            file_size_bytes: self.file_size_bytes,
            block_size_bytes: self.block_size_bytes,
            created_us: self.created_us,
        };
        // The whole page: no byte of the segment header survives next to the file header.
        let mut page = vec![0u8; format::FILE_HEADER_BYTES as usize];
        page[..format::FH_LEN].copy_from_slice(&header.encode());
        storage.write_at(&file, &self.path, &page, 0).map_err(io)?;
        storage.sync_file(&file, &self.path).map_err(io)
    }

    /// Calls `visit` with each extent and its records, decoded and checked (magic, lengths,
    /// checksum, offsets), in file order: the copy path of a publish.
    pub fn for_each_extent(
        &self,
        storage: &dyn Storage,
        mut visit: impl FnMut(&StagedExtent, &[Append<'_>]) -> Result<()>,
    ) -> Result<()> {
        let file = storage
            .open(&self.path, false)
            .map_err(|e| Error::io("open staged segment", &self.path, e))?;
        let len = storage
            .file_metadata(&file, &self.path)
            .map_err(|e| Error::io("map staged segment", &self.path, e))?
            .len();
        #[expect(unsafe_code, reason = "mapping a file relies on nobody changing it")]
        // SAFETY: a segment is complete before its part's manifest names it, and only the
        // publish holding the job's lock writes it again (`prepare_adoption`), never while
        // this mapping lives; removal only unlinks it.
        let map = unsafe { FrozenFile::map(&file, len) }
            .map_err(|e| Error::io("map staged segment", &self.path, e))?;
        let bytes = map.bytes();
        let mut records = Vec::new();
        let mut checked = format::Checked::default();
        for e in &self.extents {
            let start = self.block_position(e.block_index) as usize;
            let extent = &bytes[start..start + (e.durable_end as usize)];
            records.clear();
            checked.clear();
            let mut pos = format::BLOCK_HEADER_BYTES as usize;
            for i in 0..e.records {
                let view = self
                    .decode_staged(extent, pos, e.salt, i, &mut checked)
                    .map_err(|err| {
                        staged_corruption(
                            &self.path,
                            &format!(
                                "extent at block {}, record {i}: {}",
                                e.block_index,
                                err.describe()
                            ),
                        )
                    })?;
                records.push(Append {
                    key: view.key.map(|k| &extent[k]),
                    value: &extent[view.value],
                    timestamp_us: Some(view.timestamp_us),
                    headers: view.headers.map(|h| HeaderBlock::checked(&extent[h])),
                });
                pos = view.next_position;
            }
            if pos as u64 != e.durable_end {
                return Err(staged_corruption(
                    &self.path,
                    &format!(
                        "extent at block {}: its records end at {pos}, its slot says {}",
                        e.block_index, e.durable_end
                    ),
                ));
            }
            visit(e, &records)?;
        }
        Ok(())
    }

    /// Record `index` of a staged extent (`extent`: its bytes) at `pos`, checked: a batch
    /// frame's checksum once, at its first record (`checked` remembers the frame).
    fn decode_staged(
        &self,
        extent: &[u8],
        pos: usize,
        salt: u32,
        index: u64,
        checked: &mut format::Checked,
    ) -> std::result::Result<FrameView, FrameError> {
        if !self.batched() {
            let view = format::decode_frame(extent, pos, salt, 0, index, true)?;
            // In a segment of record frames each record is its own batch.
            return if view.batch_count == 1 {
                Ok(view)
            } else {
                Err(FrameError::BadLength)
            };
        }
        crate::batch::decode_walking(extent, pos, salt, 0, index, true, checked)
    }
}

/// A corruption error naming a staged file.
pub(crate) fn staged_corruption(path: &Path, reason: &str) -> Error {
    super::corrupt(path, &format!("staged segment: {reason}"))
}

/// Byte position of block `index` in a segment of `block_bytes` blocks.
pub(crate) fn block_position(block_bytes: u64, index: u32) -> u64 {
    format::FILE_HEADER_BYTES + u64::from(index) * block_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_damage() {
        let h = SegmentHeader {
            version: STAGING_VERSION,
            index: 3,
            file_size_bytes: format::FILE_HEADER_BYTES + 2 * SEGMENT_BLOCK_BYTES,
            block_size_bytes: SEGMENT_BLOCK_BYTES,
            created_us: 42,
            records: 1000,
            extents: 2,
        };
        let b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        for byte in 0..SH_LEN {
            let mut d = b;
            d[byte] ^= 0x10;
            assert!(SegmentHeader::decode(&d).is_err(), "byte {byte}");
        }
        assert!(SegmentHeader::decode(&b[..SH_LEN - 1]).is_err());
    }

    #[test]
    fn names() {
        assert_eq!(segment_name("p0-a1", 0), "p0-a1.0.seg");
        assert_eq!(segment_name("p.1", 12), "p.1.12.seg");
    }
}

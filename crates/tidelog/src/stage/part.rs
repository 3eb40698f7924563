//! One part of a staged job: [`StagedWriter`] writes its segments (`segment`) and, once they
//! are durable, its manifest `PART.stage`, the part's proof of completeness. Bytes:
//! `docs/FORMAT.md`, "Staged appends".

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::segment::{
    SEGMENT_BLOCK_BYTES, SEGMENT_BLOCKS_MAX, SEGMENT_BYTES_MAX, SEGMENT_INDEX_INTERVAL_BYTES,
    SEGMENT_SUFFIX, SH_LEN, STAGING_VERSION, STAGING_VERSION_RECORD_FRAMES, SegmentHeader,
    block_position, extent_version, segment_name, staged_slots,
};
use super::{COMMIT_FILE, job_dir};
use crate::batch::{self, BatchHead};
use crate::clock;
use crate::config::{RecordFormat, validate_name};
use crate::dio::AlignedBuf;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::format::{self, BlockIdentity, FrameFields, IndexEntry, Progress, ProgressState};
use crate::io::{self, StdStorage, Storage};
use crate::record::{self, Append};

/// Suffix of a part's manifest: `PART.stage`.
pub const PART_SUFFIX: &str = ".stage";
const PART_HEADER: &str = "tidelog part v2\n";
/// Manifest line opening a segment: `@segment INDEX RECORDS MAX_RECORD_BYTES`.
const SEGMENT_LINE: &str = "@segment ";
/// Manifest line closing the list: `@records TOTAL`.
const RECORDS_LINE: &str = "@records ";
/// Frames are gathered into page-aligned writes of about this size.
const WRITE_BYTES: usize = 4 << 20;
/// A batch frame takes the records of one `append` up to about this many bytes: its header
/// and checksum cost a few bytes per thousand records, and a reader that starts inside it
/// checks it whole.
const FRAME_BYTES_MAX: u64 = 64 << 10;
/// Largest key plus value a staged record may have with the default segment geometry: one
/// frame in a whole segment's extent.
pub const STAGED_RECORD_BYTES_MAX: u64 = record_bytes_max(SEGMENT_BLOCK_BYTES, SEGMENT_BLOCKS_MAX);

/// Largest key plus value in segments of `blocks_max` blocks of `block_bytes`.
const fn record_bytes_max(block_bytes: u64, blocks_max: u32) -> u64 {
    let extent = blocks_max as u64 * block_bytes;
    extent
        - format::BLOCK_HEADER_BYTES
        - format::footer_bytes_max(extent, SEGMENT_INDEX_INTERVAL_BYTES)
        - crate::batch::RECORD_OVERHEAD_MAX
}

/// A part that [`StagedWriter::finish`] made durable: name it in the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StagedPart {
    /// The part's name.
    pub part: String,
    /// Records in it.
    pub records: u64,
}

/// One segment as its part's manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentEntry {
    pub index: u32,
    pub records: u64,
    /// Largest key plus value in the segment (checked against the directory's limit).
    pub max_record_bytes: u64,
    /// Records per topic, topics in order of first appearance.
    pub counts: Vec<(String, u64)>,
}

/// A part's manifest: its segments, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PartManifest {
    pub segments: Vec<SegmentEntry>,
}

impl PartManifest {
    pub(crate) fn encode(&self) -> String {
        let mut text = String::from(PART_HEADER);
        let mut total = 0;
        for s in &self.segments {
            text.push_str(&format!(
                "{SEGMENT_LINE}{} {} {}\n",
                s.index, s.records, s.max_record_bytes
            ));
            for (topic, n) in &s.counts {
                text.push_str(&format!("{topic} {n}\n"));
            }
            total += s.records;
        }
        text.push_str(&format!("{RECORDS_LINE}{total}\n"));
        text
    }

    pub(crate) fn decode(path: &Path, text: &str) -> Result<PartManifest> {
        let corrupt = |reason: &str| super::corrupt(path, reason);
        let body = text
            .strip_prefix(PART_HEADER)
            .ok_or_else(|| corrupt("not a tidelog part manifest (version 2)"))?;
        let number = |s: &str| s.parse::<u64>().ok();
        let mut segments: Vec<SegmentEntry> = Vec::new();
        let mut total = None;
        for line in body.lines() {
            if total.is_some() {
                return Err(corrupt("lines after the record total"));
            }
            if let Some(rest) = line.strip_prefix(SEGMENT_LINE) {
                let f: Vec<&str> = rest.split(' ').collect();
                let [index, records, max] = f[..] else {
                    return Err(corrupt(
                        "a segment line is not `@segment index records max`",
                    ));
                };
                let index = index
                    .parse::<u32>()
                    .ok()
                    .filter(|&i| i as usize == segments.len())
                    .ok_or_else(|| corrupt("segments are not numbered 0, 1, ..."))?;
                let (Some(records), Some(max_record_bytes)) = (number(records), number(max)) else {
                    return Err(corrupt("a segment line holds a bad number"));
                };
                segments.push(SegmentEntry {
                    index,
                    records,
                    max_record_bytes,
                    counts: Vec::new(),
                });
            } else if let Some(rest) = line.strip_prefix(RECORDS_LINE) {
                total = Some(number(rest).ok_or_else(|| corrupt("a bad record total"))?);
            } else {
                let segment = segments
                    .last_mut()
                    .ok_or_else(|| corrupt("a topic line before any segment"))?;
                let (topic, n) = line
                    .split_once(' ')
                    .and_then(|(t, n)| Some((t, number(n)?)))
                    .filter(|(t, n)| *n > 0 && validate_name(t).is_ok())
                    .ok_or_else(|| corrupt("a topic line is not `topic records`"))?;
                if segment.counts.iter().any(|(t, _)| t == topic) {
                    return Err(corrupt("a topic is listed twice in one segment"));
                }
                segment.counts.push((topic.to_owned(), n));
            }
        }
        let total = total.ok_or_else(|| corrupt("the manifest is cut (no record total)"))?;
        // Counts come from the file: summed with checks, so a sum past u64 is corruption.
        fn sum(mut counts: impl Iterator<Item = u64>) -> Option<u64> {
            counts.try_fold(0u64, u64::checked_add)
        }
        let consistent = segments
            .iter()
            .all(|s| sum(s.counts.iter().map(|(_, n)| *n)) == Some(s.records) && s.records > 0)
            && sum(segments.iter().map(|s| s.records)) == Some(total);
        if !consistent {
            return Err(corrupt("the manifest's counts do not add up"));
        }
        Ok(PartManifest { segments })
    }
}

/// The manifest of `part` in `job_dir`. A part staged by an older build (a binary
/// version 1 part) is `UnsupportedVersion`: publish it with that build.
pub(crate) fn read_manifest(
    storage: &dyn Storage,
    job_dir: &Path,
    part: &str,
) -> Result<PartManifest> {
    let path = job_dir.join(format!("{part}{PART_SUFFIX}"));
    let bytes = storage
        .read_file(&path)
        .map_err(|e| Error::io("read staged part", &path, e))?;
    if bytes.starts_with(b"TLSG") {
        return Err(Error::UnsupportedVersion {
            path,
            found: 1,
            supported: super::segment::STAGING_VERSION,
        });
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| super::corrupt(&path, "not a tidelog part manifest (version 2)"))?;
    PartManifest::decode(&path, &text)
}

/// The open extent of one topic in the current segment.
#[derive(Debug)]
struct OpenExtent {
    topic: String,
    block_index: u32,
    extent_count: u32,
    salt: u32,
    /// Records may not pass this position (the footer reserve follows).
    data_limit: u64,
    /// Next free position (relative to the extent).
    pos: u64,
    count: u64,
    /// Sparse index: offsets are record indexes in the extent.
    index: Vec<IndexEntry>,
    last_index_pos: Option<u64>,
    /// Largest key plus value in the extent.
    max_record_bytes: u64,
    /// The bytes already written of the page `pos` is in (every write covers whole pages,
    /// so the next one starts with them again).
    tail: Vec<u8>,
}

/// The segment being written.
#[derive(Debug)]
struct OpenSegment {
    index: u32,
    path: PathBuf,
    /// For the size, the sync and, where direct I/O is refused, the writes.
    file: File,
    /// The same file opened with `O_DIRECT`: a segment is written once, sequentially, in
    /// large writes, and a publish reads back a page per extent at most, so caching it would
    /// only cost a fresh page of memory per 4 KiB written (expensive on VMs) and evict what
    /// readers use. `None` where the file system has no direct I/O.
    direct: Option<File>,
    blocks_used: u32,
    extents_sealed: u32,
    entry: SegmentEntry,
}

impl OpenSegment {
    /// Writes `bytes` (whole pages, from a page-aligned buffer) at page-aligned `at`.
    fn write(&mut self, storage: &dyn Storage, bytes: &[u8], at: u64) -> Result<()> {
        debug_assert!(at.is_multiple_of(PAGE) && (bytes.len() as u64).is_multiple_of(PAGE));
        if let Some(direct) = &self.direct {
            match storage.write_at(direct, &self.path, bytes, at) {
                // Opened, but refused at the first write: go on buffered.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.direct = None,
                other => {
                    return other.map_err(|e| Error::io("write staged segment", &self.path, e));
                }
            }
        }
        storage
            .write_at(&self.file, &self.path, bytes, at)
            .map_err(|e| Error::io("write staged segment", &self.path, e))
    }
}

/// The unit of every segment write's offset and length.
const PAGE: u64 = format::PAGE_BYTES;

/// Writes one part of a job. Needs no lock: each task attempt writes its own part.
///
/// Records go into segments laid out like data files (one extent per topic at a time; the
/// records of each `append` in batch frames of up to 64 KiB), written in large page-aligned
/// writes (direct I/O where the file system allows it); nothing is readable or committable
/// until [`StagedWriter::finish`] has made the segments durable and written the part's
/// manifest.
#[derive(Debug)]
pub struct StagedWriter {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    part: String,
    /// Segment geometry: block size and blocks per segment.
    block_bytes: u64,
    blocks_max: u32,
    /// Batch frames (staging version 3), or a record frame per record (version 2).
    format: RecordFormat,
    done: Vec<SegmentEntry>,
    segment: Option<OpenSegment>,
    extents: Vec<OpenExtent>,
    /// Running maximum timestamp per topic over the part (what index entries and extent
    /// maxima record, as in a data file).
    max_ts: Vec<(String, u64)>,
    /// Encoded frames not yet written: `buf[..buf_len]` goes at `buf_at` (page-aligned) in
    /// the segment, inside the extent starting at block `buf_owner`. Allocated on first use.
    buf: Option<AlignedBuf>,
    buf_len: usize,
    buf_at: u64,
    buf_owner: u32,
    records: u64,
}

impl StagedWriter {
    /// Starts part `part` of job `job` in the data directory `dir` (which must exist).
    /// A part of that name that is already complete is an error.
    pub fn create(dir: &Path, job: &str, part: &str) -> Result<StagedWriter> {
        Self::create_with_storage(dir, job, part, Arc::new(StdStorage))
    }

    /// As [`StagedWriter::create`], doing all I/O through `storage`.
    pub fn create_with_storage(
        dir: &Path,
        job: &str,
        part: &str,
        storage: Arc<dyn Storage>,
    ) -> Result<StagedWriter> {
        validate_name(part)?;
        if !io::is_dir(storage.as_ref(), dir)? {
            return Err(Error::io(
                "open directory",
                dir,
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let job_dir = job_dir(dir, job)?;
        storage
            .create_dir_all(&job_dir)
            .map_err(|e| Error::io("create staging directory", &job_dir, e))?;
        if io::exists(storage.as_ref(), &job_dir.join(COMMIT_FILE))? {
            return Err(Error::invalid(
                "job",
                format!("job {job:?} is already committed"),
            ));
        }
        if io::exists(
            storage.as_ref(),
            &job_dir.join(format!("{part}{PART_SUFFIX}")),
        )? {
            return Err(Error::invalid(
                "part",
                format!("part {part:?} of job {job:?} already exists"),
            ));
        }
        // A job of that name published earlier is another job.
        super::forget_published(storage.as_ref(), dir, job)?;
        remove_unfinished(storage.as_ref(), &job_dir, part)?;
        Ok(StagedWriter {
            storage,
            dir: job_dir,
            part: part.to_owned(),
            block_bytes: SEGMENT_BLOCK_BYTES,
            blocks_max: SEGMENT_BLOCKS_MAX,
            format: RecordFormat::default(),
            done: Vec::new(),
            segment: None,
            extents: Vec::new(),
            max_ts: Vec::new(),
            buf: None,
            buf_len: 0,
            buf_at: 0,
            buf_owner: 0,
            records: 0,
        })
    }

    /// Sets the segment geometry (before the first append): blocks of `block_bytes` (a
    /// multiple of 4096, at least two pages) and at most `blocks_max` blocks per segment
    /// file, at most about 1 GiB in all. The defaults, 10 MiB blocks and 102 blocks, match
    /// the data files; smaller segments make more, smaller data files when adopted.
    pub fn segment_geometry(mut self, block_bytes: u64, blocks_max: u32) -> Result<Self> {
        if block_bytes < 2 * PAGE || !block_bytes.is_multiple_of(PAGE) {
            return Err(Error::invalid(
                "block_bytes",
                format!(
                    "{block_bytes} is not a multiple of {PAGE} of at least {}",
                    2 * PAGE
                ),
            ));
        }
        let bytes = format::FILE_HEADER_BYTES + u64::from(blocks_max) * block_bytes;
        if blocks_max == 0 || bytes > SEGMENT_BYTES_MAX {
            return Err(Error::invalid(
                "blocks_max",
                format!(
                    "{blocks_max} blocks of {block_bytes} bytes: a segment holds 1 to {SEGMENT_BYTES_MAX} bytes"
                ),
            ));
        }
        if self.segment.is_some() || !self.done.is_empty() {
            return Err(Error::invalid(
                "segment geometry",
                "set it before the first append",
            ));
        }
        self.block_bytes = block_bytes;
        self.blocks_max = blocks_max;
        Ok(self)
    }

    /// Sets how the segments store records (before the first append): batch frames
    /// ([`RecordFormat::V2`], the default, staging version 3) or one record frame per record
    /// ([`RecordFormat::V1`], staging version 2, which builds before batch frames publish,
    /// and which a directory of `RecordFormat::V1` adopts).
    pub fn record_format(mut self, format: RecordFormat) -> Result<Self> {
        if self.segment.is_some() || !self.done.is_empty() {
            return Err(Error::invalid(
                "record format",
                "set it before the first append",
            ));
        }
        self.format = format;
        Ok(self)
    }

    /// The staging version of the segments this writer makes.
    fn staging_version(&self) -> u32 {
        match self.format {
            RecordFormat::V1 => STAGING_VERSION_RECORD_FRAMES,
            _ => STAGING_VERSION,
        }
    }

    /// Whether its extents hold batch frames.
    fn batched(&self) -> bool {
        format::version_batched(extent_version(self.staging_version()))
    }

    /// Stages `records` for `topic` (records without a timestamp get the time of this call).
    pub fn append(&mut self, topic: &str, records: &[Append<'_>]) -> Result<()> {
        validate_name(topic)?;
        if records.is_empty() {
            return Ok(());
        }
        crate::record::check_timestamps(records)?;
        let max = record_bytes_max(self.block_bytes, self.blocks_max);
        if let Some(big) = records.iter().map(Append::payload_len).find(|&n| n > max) {
            return Err(Error::limit("staged record bytes", big, max));
        }
        let now = clock::now_us();
        let ts_slot = match self.max_ts.iter().position(|(t, _)| t == topic) {
            Some(i) => i,
            None => {
                self.max_ts.push((topic.to_owned(), 0));
                self.max_ts.len() - 1
            }
        };
        let mut rest = records;
        while !rest.is_empty() {
            let (i, taken, frame_bytes) = self.next_frame(topic, rest, now)?;
            self.push_frame(i, &rest[..taken], frame_bytes, now, ts_slot)?;
            rest = &rest[taken..];
        }
        Ok(())
    }

    /// The open extent of `topic` that the next frame of `records` (of one topic) goes into,
    /// how many records that frame takes (at least one) and its padded bytes: one record in a
    /// record frame; in a batch frame as many as fit the extent, up to [`FRAME_BYTES_MAX`].
    fn next_frame(
        &mut self,
        topic: &str,
        records: &[Append<'_>],
        now: u64,
    ) -> Result<(usize, usize, u64)> {
        if !self.batched() {
            let frame_bytes = format::frame_padded_len(records[0].payload_len());
            return Ok((self.extent_for(topic, frame_bytes)?, 1, frame_bytes));
        }
        let first = batch::frame_len(record::batch_records(&records[..1], now));
        let i = self.extent_for(topic, first)?;
        let room = self.extents[i].data_limit - self.extents[i].pos;
        let limit = room.min(FRAME_BYTES_MAX).max(first);
        let (taken, frame_bytes) = batch::frame_prefix(record::batch_records(records, now), limit);
        debug_assert!(frame_bytes <= room);
        Ok((i, taken, frame_bytes))
    }

    /// Records staged so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Writes what is left, makes every segment durable, then the part's manifest (written
    /// atomically, with the directory synced): from then on the part exists.
    pub fn finish(mut self) -> Result<StagedPart> {
        self.finish_segment()?;
        let manifest = PartManifest {
            segments: std::mem::take(&mut self.done),
        };
        let path = self.dir.join(format!("{}{PART_SUFFIX}", self.part));
        crate::io::replace_file(
            self.storage.as_ref(),
            &self.dir,
            &path,
            manifest.encode().as_bytes(),
            "write staged part",
        )?;
        Ok(StagedPart {
            part: self.part,
            records: self.records,
        })
    }

    /// The open extent of `topic` with room for a frame of `frame_bytes`: the current one, or
    /// a new one (sealing the full one, and finishing a full segment first).
    fn extent_for(&mut self, topic: &str, frame_bytes: u64) -> Result<usize> {
        if let Some(i) = self.extents.iter().position(|e| e.topic == topic) {
            if self.extents[i].pos + frame_bytes <= self.extents[i].data_limit {
                return Ok(i);
            }
            self.seal(i)?;
        }
        let blocks =
            Extent::blocks_needed(frame_bytes, self.block_bytes, SEGMENT_INDEX_INTERVAL_BYTES);
        // `append` bounded the record by a whole segment's extent.
        let blocks = u32::try_from(blocks)
            .ok()
            .filter(|&b| b <= self.blocks_max)
            .ok_or_else(|| Error::limit("staged extent blocks", blocks, self.blocks_max.into()))?;
        let blocks_max = self.blocks_max;
        if self
            .segment
            .as_ref()
            .is_none_or(|s| s.blocks_used + blocks > blocks_max)
        {
            self.finish_segment()?;
            self.open_segment()?;
        }
        let Some(segment) = self.segment.as_mut() else {
            return Err(Error::Closed);
        };
        let block_index = segment.blocks_used;
        segment.blocks_used += blocks;
        // Topics in order of first extent, as a reader of the segment lists them.
        if !segment.entry.counts.iter().any(|(t, _)| t == topic) {
            segment.entry.counts.push((topic.to_owned(), 0));
        }
        let len = u64::from(blocks) * self.block_bytes;
        self.extents.push(OpenExtent {
            topic: topic.to_owned(),
            block_index,
            extent_count: blocks,
            salt: crate::topic::new_salt(),
            data_limit: len - format::footer_bytes_max(len, SEGMENT_INDEX_INTERVAL_BYTES),
            pos: format::BLOCK_HEADER_BYTES,
            count: 0,
            index: Vec::new(),
            last_index_pos: None,
            max_record_bytes: 0,
            tail: Vec::new(),
        });
        Ok(self.extents.len() - 1)
    }

    /// Encodes `records` (of the topic of `max_ts[ts_slot]`) as the next frame of open extent
    /// `i`, `padded` bytes long: a batch frame, or a record frame of one record.
    fn push_frame(
        &mut self,
        i: usize,
        records: &[Append<'_>],
        padded: u64,
        now: u64,
        ts_slot: usize,
    ) -> Result<()> {
        let padded = padded as usize;
        let batched = self.batched();
        let at =
            block_position(self.block_bytes, self.extents[i].block_index) + self.extents[i].pos;
        let owner = self.extents[i].block_index;
        let capacity = WRITE_BYTES + PAGE as usize;
        let contiguous = self.buf_len > 0
            && self.buf_owner == owner
            && self.buf_at + self.buf_len as u64 == at
            && self.buf_len + padded <= capacity;
        if self.buf_len > 0 && !contiguous {
            self.flush_buf()?;
        }
        // A frame too large for the buffer gets one of its own.
        let need = self.extents[i].tail.len() + padded;
        let big = need > capacity;
        // A frame that fits the buffer together with what it holds never counts as big.
        debug_assert!(!big || self.buf_len == 0);
        let buf = match &mut self.buf {
            Some(b) if !big => b,
            slot => slot.insert(
                AlignedBuf::zeroed(align_up(need.max(capacity)))
                    .map_err(|e| Error::io("allocate a staged write buffer", &self.dir, e))?,
            ),
        };
        let e = &mut self.extents[i];
        if self.buf_len == 0 {
            // Start at the page holding `at`, with that page's bytes already written.
            self.buf_at = at - e.tail.len() as u64;
            self.buf_owner = owner;
            buf[..e.tail.len()].copy_from_slice(&e.tail);
            self.buf_len = e.tail.len();
            debug_assert!(self.buf_at.is_multiple_of(PAGE));
        }
        let first_ts = records[0].timestamp_us.unwrap_or(now);
        let running_ts = &mut self.max_ts[ts_slot].1;
        // Index entries point at frame starts; the maximum counts the frame's first record.
        if e.last_index_pos
            .is_none_or(|last| e.pos - last >= SEGMENT_INDEX_INTERVAL_BYTES)
        {
            e.index.push(IndexEntry {
                offset: e.count,
                position: e.pos,
                max_timestamp_us: (*running_ts).max(first_ts),
            });
            e.last_index_pos = Some(e.pos);
        }
        for r in records {
            *running_ts = (*running_ts).max(r.timestamp_us.unwrap_or(now));
            e.max_record_bytes = e.max_record_bytes.max(r.payload_len());
        }
        let out = &mut buf[self.buf_len..self.buf_len + padded];
        if batched {
            let head = BatchHead {
                topic_id: 0,
                base_offset: e.count,
                base_timestamp_us: first_ts,
            };
            batch::encode(out, &head, e.salt, record::batch_records(records, now));
        } else {
            debug_assert_eq!(records.len(), 1, "a record frame holds one record");
            let fields = FrameFields {
                topic_id: 0,
                offset: e.count,
                timestamp_us: first_ts,
                batch_count: 1,
            };
            let n = format::encode_frame_into(out, &fields, e.salt, &records[0].parts());
            debug_assert_eq!(n, padded);
        }
        self.buf_len += padded;
        e.pos += padded as u64;
        e.count += records.len() as u64;
        debug_assert!(e.pos <= e.data_limit);
        self.records += records.len() as u64;
        if big {
            // Written now, so the next frame finds the usual buffer.
            self.flush_buf()?;
            self.buf = None;
        }
        Ok(())
    }

    /// Writes the buffered frames (whole pages, the last one zero-padded) and keeps the
    /// bytes of its last, partial page as the owner extent's tail.
    fn flush_buf(&mut self) -> Result<()> {
        if self.buf_len == 0 {
            return Ok(());
        }
        let (Some(buf), Some(segment)) = (self.buf.as_mut(), self.segment.as_mut()) else {
            return Err(Error::Closed);
        };
        let end = self.buf_len;
        let aligned = align_up(end);
        buf[end..aligned].fill(0);
        segment.write(self.storage.as_ref(), &buf[..aligned], self.buf_at)?;
        let partial = end - end % PAGE as usize;
        if let Some(e) = self
            .extents
            .iter_mut()
            .find(|e| e.block_index == self.buf_owner)
        {
            e.tail.clear();
            e.tail.extend_from_slice(&buf[partial..end]);
        }
        self.buf_len = 0;
        Ok(())
    }

    /// Seals open extent `i`: its frames, then its footer, then its two slots.
    fn seal(&mut self, i: usize) -> Result<()> {
        if self.buf_len > 0 && self.buf_owner == self.extents[i].block_index {
            self.flush_buf()?;
        }
        let e = self.extents.remove(i);
        let version = extent_version(self.staging_version());
        let storage = Arc::clone(&self.storage);
        let segment = self.segment.as_mut().ok_or(Error::Closed)?;
        let start = block_position(self.block_bytes, e.block_index);
        // The footer follows the last record, after the bytes of its partial page.
        let mut footer = Vec::with_capacity(e.index.len() * format::IX_LEN);
        for entry in &e.index {
            footer.extend_from_slice(&entry.encode());
        }
        if !footer.is_empty() || !e.tail.is_empty() {
            let len = e.tail.len() + footer.len();
            let mut page = AlignedBuf::zeroed(align_up(len))
                .map_err(|err| Error::io("allocate a staged write buffer", &self.dir, err))?;
            page[..e.tail.len()].copy_from_slice(&e.tail);
            page[e.tail.len()..len].copy_from_slice(&footer);
            segment.write(storage.as_ref(), &page, start + e.pos - e.tail.len() as u64)?;
        }
        let max_ts = self
            .max_ts
            .iter()
            .find(|(t, _)| *t == e.topic)
            .map_or(0, |(_, m)| *m);
        let id = BlockIdentity {
            version,
            topic_id: 0,
            block_index: e.block_index,
            extent_count: e.extent_count,
            salt: e.salt,
            file_seq: 0,
            first_offset: 0,
            topic: e.topic.clone(),
        };
        let progress = Progress {
            state: ProgressState::Sealed,
            durable_end: e.pos,
            record_count: e.count,
            max_timestamp_us: max_ts,
            footer_count: e.index.len() as u64,
            footer_crc: crc32fast::hash(&footer),
        };
        let slots = staged_slots(&id, &progress);
        let mut page = AlignedBuf::zeroed(PAGE as usize)
            .map_err(|err| Error::io("allocate a staged write buffer", &self.dir, err))?;
        page[..slots.len()].copy_from_slice(&slots);
        segment.write(storage.as_ref(), &page, start)?;
        segment.extents_sealed += 1;
        let entry = &mut segment.entry;
        entry.records += e.count;
        entry.max_record_bytes = entry.max_record_bytes.max(e.max_record_bytes);
        if let Some((_, n)) = entry.counts.iter_mut().find(|(t, _)| *t == e.topic) {
            *n += e.count;
        }
        Ok(())
    }

    /// Seals the open extents, writes the header page, sizes and syncs the current segment.
    fn finish_segment(&mut self) -> Result<()> {
        if self.segment.is_none() {
            return Ok(());
        }
        while !self.extents.is_empty() {
            self.seal(0)?;
        }
        let Some(mut segment) = self.segment.take() else {
            return Ok(());
        };
        let storage = self.storage.as_ref();
        let file_size_bytes = block_position(self.block_bytes, segment.blocks_used);
        let header = SegmentHeader {
            version: self.staging_version(),
            index: segment.index,
            file_size_bytes,
            block_size_bytes: self.block_bytes,
            created_us: clock::now_us(),
            records: segment.entry.records,
            extents: segment.extents_sealed,
        };
        let mut page = AlignedBuf::zeroed(PAGE as usize)
            .map_err(|e| Error::io("allocate a staged write buffer", &self.dir, e))?;
        page[..SH_LEN].copy_from_slice(&header.encode());
        segment.write(storage, &page, 0)?;
        let io = |e| Error::io("write staged segment", &segment.path, e);
        storage
            .set_len(&segment.file, &segment.path, file_size_bytes)
            .map_err(io)?;
        storage
            .sync_file(&segment.file, &segment.path)
            .map_err(io)?;
        self.done.push(segment.entry);
        Ok(())
    }

    /// Starts the next segment file.
    fn open_segment(&mut self) -> Result<()> {
        let index = u32::try_from(self.done.len()).map_err(|_| {
            Error::limit("staged segments", self.done.len() as u64, u32::MAX.into())
        })?;
        let path = self.dir.join(segment_name(&self.part, index));
        let file = self
            .storage
            .create_new(&path)
            .map_err(|e| Error::io("create staged segment", &path, e))?;
        // Direct I/O is an optimisation: without it the same aligned writes go buffered.
        let direct = self.storage.open_direct(&path).ok();
        self.segment = Some(OpenSegment {
            index,
            path,
            file,
            direct,
            blocks_used: 0,
            extents_sealed: 0,
            entry: SegmentEntry {
                index,
                records: 0,
                max_record_bytes: 0,
                counts: Vec::new(),
            },
        });
        Ok(())
    }
}

/// `len` rounded up to whole pages.
fn align_up(len: usize) -> usize {
    format::align_up(len as u64, PAGE) as usize
}

/// Removes what an earlier, unfinished writer of `part` left in `job_dir` (its segments and
/// a manifest being written): a part exists only once its manifest does.
fn remove_unfinished(storage: &dyn Storage, job_dir: &Path, part: &str) -> Result<()> {
    let entries = storage
        .read_dir(job_dir)
        .map_err(|e| Error::io("list staging directory", job_dir, e))?;
    let tmp = format!("{part}{PART_SUFFIX}.tmp");
    for entry in entries {
        let Some(name) = entry.name.to_str() else {
            continue;
        };
        let is_segment = name
            .strip_suffix(SEGMENT_SUFFIX)
            .and_then(|rest| rest.rsplit_once('.'))
            .is_some_and(|(p, index)| p == part && index.parse::<u32>().is_ok());
        if is_segment || name == tmp {
            let path = job_dir.join(name);
            match storage.remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove unfinished staged part", &path, e)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trip_and_damage() {
        let m = PartManifest {
            segments: vec![
                SegmentEntry {
                    index: 0,
                    records: 5,
                    max_record_bytes: 100,
                    counts: vec![("a".into(), 3), ("b.x".into(), 2)],
                },
                SegmentEntry {
                    index: 1,
                    records: 1,
                    max_record_bytes: 0,
                    counts: vec![("a".into(), 1)],
                },
            ],
        };
        let text = m.encode();
        let path = Path::new("p.stage");
        assert_eq!(PartManifest::decode(path, &text).expect("decode"), m);
        assert_eq!(
            PartManifest::decode(path, &PartManifest::default().encode()).expect("empty"),
            PartManifest::default()
        );
        for bad in [
            text.replace("@records 6", "@records 7"),
            text.replace("@segment 1", "@segment 2"),
            text.replace("a 3", "a 4"),
            text.replace("b.x 2", "b/x 2"),
            text.replace("@records 6\n", ""),
            text.replace("tidelog part v2", "tidelog part v3"),
            format!("{text}a 1\n"),
        ] {
            assert!(PartManifest::decode(path, &bad).is_err(), "{bad:?}");
        }
    }
}

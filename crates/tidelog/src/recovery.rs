//! Rebuilding state from the data files: at open (writable or read-only) and on a read-only
//! refresh.
//!
//! Cost is one identity and one progress slot per extent, plus a scan of each extent that is
//! not sealed on disk. Sealed extents are trusted from their progress slot (it is written only
//! after their data is durable) and their index is loaded from the footer on first seek.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::file::{self, DataFile};
use crate::format::{
    self, BlockIdentity, FrameError, FrameView, IndexEntry, Progress, ProgressState,
};
use crate::io::Storage;
use crate::topic::Tail;

/// What recovery found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Data files found.
    pub files: u64,
    /// Extents holding records.
    pub extents: u64,
    /// Extents trusted from their seal without scanning.
    pub sealed_extents: u64,
    /// Extents scanned record by record.
    pub scanned_extents: u64,
    /// Bytes of records scanned.
    pub scanned_bytes: u64,
    /// Torn tails cut off (an extent whose scan ended on an invalid or incomplete record).
    pub torn_tails: u64,
    /// Records dropped from torn tails: the complete records of an incomplete batch.
    pub torn_records: u64,
    /// Valid records found past a torn tail, cut with it: appends that were in flight when
    /// the process died (another appender's copy finished before the torn one's), or damage
    /// past the durable point. Never acknowledged as durable: every acknowledged record lies
    /// below its extent's durable point, where a bad frame is `Corruption`.
    pub records_past_tear: u64,
    /// Progress slots that failed their checks (a torn slot write, or damage): their extents
    /// were scanned instead of trusted, and a writable open rewrites the slot.
    pub damaged_progress_slots: u64,
    /// Extents of a deleted topic found under the name of a newer topic of the same name (a
    /// crash cut the deletion short): skipped, and marked deleted by a writable open.
    pub deleted_remnants: u64,
    /// Extents dropped because they followed a gap in their topic's offsets.
    pub dropped_extents: u64,
    /// Ring backend: records replayed from the ring into the data files.
    pub ring_records_replayed: u64,
    /// Ring backend: records in the ring that the data files already held.
    pub ring_records_held: u64,
}

/// One topic as recovered.
#[derive(Debug)]
pub struct RecoveredTopic {
    pub name: String,
    pub id: u32,
    pub chain: Vec<Arc<Extent>>,
    pub unsynced: Vec<Arc<Extent>>,
    pub tail: Tail,
}

/// Everything recovery hands to the `Wal`.
#[derive(Debug, Default)]
pub struct Recovered {
    pub files: BTreeMap<u64, Arc<DataFile>>,
    pub topics: Vec<RecoveredTopic>,
    /// The file new extents continue in, and its first free block.
    pub alloc_current: Option<(Arc<DataFile>, u32)>,
    pub spare: Option<Arc<DataFile>>,
    pub next_seq: u64,
    /// Above every topic id found on disk, those of deleted and consumed extents included:
    /// a new topic must never take the id of a deleted one whose marks remain.
    pub next_topic_id: u32,
    pub report: RecoveryReport,
}

/// Result of scanning an extent's records.
#[derive(Debug)]
struct Scan {
    count: u64,
    end: u64,
    max_ts: u64,
    index: Vec<IndexEntry>,
    last_index_pos: Option<u64>,
    /// Why the scan stopped (End for clean zero bytes or reaching the limit).
    stop: FrameError,
    /// Records of an incomplete batch that were cut.
    cut_records: u64,
}

/// Where a scan of an extent stands: the next record's position and offset (as a count of
/// records before it), the running maximum timestamp, and the sparse index built so far.
#[derive(Debug)]
struct ScanPoint {
    pos: u64,
    count: u64,
    max_ts: u64,
    index: Vec<IndexEntry>,
    last_index_pos: Option<u64>,
}

/// A copy of a [`ScanPoint`] taken at a batch's head, with the index as a length, so an
/// incomplete batch can be cut back to it.
#[derive(Debug, Clone, Copy)]
struct BatchMark {
    pos: u64,
    count: u64,
    max_ts: u64,
    index_len: usize,
    last_index_pos: Option<u64>,
}

impl ScanPoint {
    /// The mark to cut back to if the batch starting here turns out incomplete.
    fn mark(&self) -> BatchMark {
        BatchMark {
            pos: self.pos,
            count: self.count,
            max_ts: self.max_ts,
            index_len: self.index.len(),
            last_index_pos: self.last_index_pos,
        }
    }

    /// Returns to `mark`, dropping every record read since.
    fn cut_to(&mut self, mark: BatchMark) {
        self.pos = mark.pos;
        self.count = mark.count;
        self.max_ts = mark.max_ts;
        self.index.truncate(mark.index_len);
        self.last_index_pos = mark.last_index_pos;
    }

    /// Takes the record `view` at offset `offset`: its timestamp joins the running maximum,
    /// an index entry is added once `interval` bytes passed since the last, and the scan
    /// moves past it.
    fn take(&mut self, view: &FrameView, offset: u64, interval: u64) {
        self.max_ts = self.max_ts.max(view.timestamp_us);
        if self
            .last_index_pos
            .is_none_or(|last| self.pos - last >= interval)
        {
            self.index.push(IndexEntry {
                offset,
                position: self.pos,
                max_timestamp_us: self.max_ts,
            });
            self.last_index_pos = Some(self.pos);
        }
        debug_assert!(view.next_position as u64 > self.pos, "a frame has length");
        self.pos = view.next_position as u64;
        self.count += 1;
    }
}

/// The batch a scan is inside: records left in it, and where it started if it holds more
/// than one record (a batch is all or nothing).
#[derive(Debug, Default)]
struct OpenBatch {
    left: u64,
    start: Option<BatchMark>,
}

impl OpenBatch {
    /// Accounts for a record whose frame says `batch_count` (the batch's size on its first
    /// record, 0 on the others), read at `at`. False when the frame breaks the batch
    /// structure: a first record that claims no batch, or a batch head inside a batch.
    fn enter(&mut self, batch_count: u32, at: &ScanPoint) -> bool {
        if self.left == 0 {
            if batch_count == 0 {
                return false;
            }
            if batch_count > 1 {
                self.start = Some(at.mark());
            }
            self.left = u64::from(batch_count);
        } else if batch_count != 0 {
            return false;
        }
        self.left -= 1;
        if self.left == 0 {
            self.start = None;
        }
        true
    }
}

/// Why a scan that found no room for another frame header at `pos` stopped: the clean end of
/// the extent (`End`) when only zeros follow, else a truncated frame.
fn stop_at_limit(extent: &[u8], pos: u64) -> FrameError {
    if extent
        .get(pos as usize..)
        .is_some_and(|r| r.iter().all(|&b| b == 0))
    {
        FrameError::End
    } else {
        FrameError::Truncated
    }
}

/// Scans records of `block` from `at` up to `limit` (relative).
fn scan(block: &Extent, limit: u64, mut at: ScanPoint, interval: u64) -> Scan {
    let extent = block.recovery_bytes(limit);
    let mut batch = OpenBatch::default();
    let stop = loop {
        let offset = block.first_offset + at.count;
        let view = match block.decode_frame(extent, at.pos, offset, true) {
            Ok(view) => view,
            // Not even a header fits before the limit: the clean end of the extent.
            Err(FrameError::Truncated) if at.pos + format::FRAME_HEADER_BYTES > limit => {
                break stop_at_limit(extent, at.pos);
            }
            Err(e) => break e,
        };
        if !batch.enter(view.batch_count, &at) {
            break FrameError::WrongOffset;
        }
        at.take(&view, offset, interval);
    };
    let mut cut_records = 0;
    if let Some(mark) = batch.start {
        // An incomplete batch: none of it survives.
        cut_records = at.count - mark.count;
        at.cut_to(mark);
    }
    Scan {
        count: at.count,
        end: at.pos,
        max_ts: at.max_ts,
        index: at.index,
        last_index_pos: at.last_index_pos,
        stop,
        cut_records,
    }
}

/// Counts the valid records of `block` that lie past `from` (where a scan stopped on a bad
/// frame), up to `limit`: frames at any 8-byte position that pass every check, with an offset
/// at or past `next_offset`. Stale bytes never pass (the salt), so a count above zero means
/// records were written after the bad frame: appends in flight at a crash, or damage.
fn records_past(block: &Extent, limit: u64, from: u64, next_offset: u64) -> u64 {
    let extent = block.recovery_bytes(limit);
    let magic = format::FRAME_MAGIC.to_le_bytes();
    let base = if block.relative() {
        block.first_offset
    } else {
        0
    };
    let mut found = 0;
    let mut pos = from as usize + format::FRAME_ALIGN as usize;
    while pos + format::FRAME_HEADER_BYTES as usize <= extent.len() {
        let at = pos + format::FR_MAGIC;
        if extent[at..at + 2] != magic {
            pos += format::FRAME_ALIGN as usize;
            continue;
        }
        let stored = format::get_u64(extent, pos + format::FR_OFFSET);
        let offset = stored.saturating_add(base);
        match block.decode_frame(extent, pos as u64, offset, true) {
            Ok(view) if offset >= next_offset => {
                found += 1;
                pos = view.next_position;
            }
            _ => pos += format::FRAME_ALIGN as usize,
        }
    }
    found
}

/// An extent found on disk.
#[derive(Debug)]
struct Found {
    file: Arc<DataFile>,
    id: BlockIdentity,
    progress: Option<Progress>,
    /// The progress slot is not blank but fails its checks.
    progress_damaged: bool,
}

/// What the first page of a block slot holds.
#[derive(Debug)]
struct Slots {
    id: Option<BlockIdentity>,
    progress: Option<Progress>,
    /// The identity slot's bytes are all zero: the block was never handed out.
    id_blank: bool,
    /// The progress slot's bytes are all zero.
    progress_blank: bool,
}

/// The identity and progress slots of the extent that would start at block `index`.
///
/// Read with `pread`, not through the mapping: a fault on a sparse file's hole reads around
/// it (`read_ahead_kb`, 8 MiB on some VMs) and zero-fills every page of that window, so
/// touching each block's first page through the mapping cost a cold open of a 1 GiB file
/// about 0.2 s and as much page cache as the file's size. A small `pread` reads a few pages.
fn read_slots(storage: &dyn Storage, file: &DataFile, index: u32) -> Result<Slots> {
    const SLOTS_LEN: usize = format::PG_SLOT_AT + format::PG_LEN;
    const _: () = assert!(format::ID_SLOT_AT + format::ID_LEN <= format::PG_SLOT_AT);
    let at = file.block_position(index);
    let mut buf = [0u8; SLOTS_LEN];
    // The file's length was checked against its header at open, so the read is whole.
    storage
        .read_at(&file.file, &file.path, &mut buf, at)
        .map_err(|e| Error::io("read extent slots", &file.path, e))?;
    let id = &buf[format::ID_SLOT_AT..format::ID_SLOT_AT + format::ID_LEN];
    let pg = &buf[format::PG_SLOT_AT..];
    Ok(Slots {
        id: BlockIdentity::decode(id),
        progress: Progress::decode(pg),
        id_blank: id.iter().all(|&b| b == 0),
        progress_blank: pg.iter().all(|&b| b == 0),
    })
}

/// Whether the first frame header of the extent at block `index` is all zeros (no record
/// was ever written there).
fn first_frame_blank(storage: &dyn Storage, file: &DataFile, index: u32) -> Result<bool> {
    let mut buf = [0u8; format::FRAME_HEADER_BYTES as usize];
    let at = file.block_position(index) + format::BLOCK_HEADER_BYTES;
    storage
        .read_at(&file.file, &file.path, &mut buf, at)
        .map_err(|e| Error::io("read extent", &file.path, e))?;
    Ok(buf.iter().all(|&b| b == 0))
}

/// What a block slot is: the start of an extent, a block never handed out, or damage.
#[derive(Debug)]
enum SlotKind {
    /// An extent's identity, its progress slot, and whether that slot is damaged (not
    /// blank, yet failing its checks).
    Extent(BlockIdentity, Option<Progress>, bool),
    Unused,
}

/// Classifies block slot `index` of `file`. A blank identity slot is a block never handed
/// out. An identity slot that is not blank but fails its checks is an allocation torn by a
/// crash only when nothing else of the extent was ever written (its identity is written
/// before its first record and before its first progress slot); anything else is damage,
/// reported, never read as unused.
fn classify_slot(storage: &dyn Storage, file: &DataFile, index: u32) -> Result<SlotKind> {
    // A read-only handle may read a slot while the writer rewrites it: a slot that fails its
    // checks is read again before it counts as damaged.
    const READS_MAX: u32 = 3;
    let mut slots = read_slots(storage, file, index)?;
    for _ in 1..READS_MAX {
        let suspect = (slots.id.is_none() && !slots.id_blank)
            || (slots.progress.is_none() && !slots.progress_blank);
        if !suspect {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        slots = read_slots(storage, file, index)?;
    }
    let position = file.block_position(index);
    if let Some(id) = slots.id {
        // A file holds extents of its own version only (see `format::VERSION_RELATIVE`).
        let fits = id.extent_count >= 1
            && u64::from(index) + u64::from(id.extent_count) <= u64::from(file.extent_count);
        if id.version == file.header.version
            && id.block_index == index
            && id.file_seq == file.seq
            && fits
        {
            let damaged = slots.progress.is_none() && !slots.progress_blank;
            return Ok(SlotKind::Extent(id, slots.progress, damaged));
        }
        return Err(Error::Corruption {
            topic: id.topic.clone(),
            offset: id.first_offset,
            path: file.path.clone(),
            position,
            reason: format!(
                "identity slot of block {index} names another place (version {}, block {} \
                 of {}, file {})",
                id.version, id.block_index, id.extent_count, id.file_seq
            ),
        });
    }
    if slots.id_blank {
        return Ok(SlotKind::Unused);
    }
    if slots.progress_blank && first_frame_blank(storage, file, index)? {
        return Ok(SlotKind::Unused);
    }
    Err(Error::Corruption {
        topic: String::new(),
        offset: 0,
        path: file.path.clone(),
        position,
        reason: format!("identity slot of block {index} is damaged"),
    })
}

/// Counts an extent that holds nothing to read (empty, dropped, or of a deleted topic) as
/// handed out and consumed, so it never keeps its file alive.
fn count_unused(file: &DataFile, blocks: u32) {
    file.counters.recovered(blocks, false);
    // The file is not fully allocated yet, so this cannot make it deletable here; the
    // open checks every file once recovery is done.
    let _ = file.counters.consume(blocks);
}

/// Drops an extent for good (a writable open): its progress slot is marked `state` and
/// synced, so later opens skip it (its identity stays, so the blocks it spans are never read
/// as slots of their own), and its blocks count as consumed. `Deleted` only for extents of a
/// deleted topic (one such mark means its deletion began); `Consumed` for an extent dropped
/// because it held nothing to keep.
fn forget_extent(storage: &dyn Storage, f: &Found, state: ProgressState) -> Result<()> {
    count_unused(&f.file, f.id.extent_count);
    let progress = Progress {
        state,
        durable_end: format::BLOCK_HEADER_BYTES,
        record_count: 0,
        max_timestamp_us: 0,
        footer_count: 0,
        footer_crc: 0,
    };
    let at = f.file.block_position(f.id.block_index) as usize + format::PG_SLOT_AT;
    f.file.map.write_header(at, &progress.encode());
    storage
        .sync_map(&f.file.map, &f.file.path, at, format::PG_LEN)
        .map_err(|e| Error::io("msync", &f.file.path, e))
}

/// Data files by sequence number.
type Listed = Vec<(u64, PathBuf)>;

/// Lists data files in sequence order, and the `.tmp` leftovers of creations a crash cut
/// short (see `DataFile::create`).
fn list_files(storage: &dyn Storage, dir: &Path) -> Result<(Listed, Vec<PathBuf>)> {
    let entries = storage
        .read_dir(dir)
        .map_err(|e| Error::io("list directory", dir, e))?;
    let mut files = Vec::new();
    let mut unfinished = Vec::new();
    for entry in entries {
        let Some(name) = entry.name.to_str() else {
            continue;
        };
        if !entry.is_file {
            continue;
        }
        if let Some(seq) = file::parse_data_file_name(name) {
            files.push((seq, dir.join(name)));
        } else if name
            .strip_suffix(file::TMP_SUFFIX)
            .and_then(|n| n.strip_suffix('.'))
            .and_then(file::parse_data_file_name)
            .is_some()
        {
            unfinished.push(dir.join(name));
        }
    }
    files.sort();
    Ok((files, unfinished))
}

/// Blocks already known to a read-only handle, reused so live readers see them grow.
pub type Known = HashMap<(u64, u32), Arc<Extent>>;

/// Recovers the directory. `writable` repairs (cuts torn tails, drops orphan extents, removes
/// half-created files); read-only never writes and shows only durable records.
///
/// The steps: list the files, read each one's identity and progress slots, group the
/// extents by topic, build and check each topic's chain (repairing as it goes when
/// `writable`), then place the allocator.
pub fn recover(
    dir: &Path,
    config: &Config,
    storage: &dyn Storage,
    writable: bool,
    known_files: &BTreeMap<u64, Arc<DataFile>>,
    known: &Known,
) -> Result<Recovered> {
    let mut out = Recovered::default();
    let (listed, unfinished) = list_files(storage, dir)?;
    if writable {
        remove_unfinished(storage, &unfinished)?;
    }
    let listing = open_files(storage, &listed, writable, known_files, &mut out)?;
    let grouped = group_by_topic(listing.found, writable, &mut out.next_topic_id)?;
    let recovery = Recovery {
        storage,
        writable,
        known,
        interval: config.index_interval_bytes,
    };
    for (name, extents) in grouped.by_topic {
        let topic = recovery.recover_topic(name, extents, &grouped.deleting, &mut out.report)?;
        out.topics.extend(topic);
    }
    place_allocation(storage, writable, &listing.used_end, &mut out)?;
    Ok(out)
}

/// Removes the `.tmp` leftovers of data file creations a crash cut short.
fn remove_unfinished(storage: &dyn Storage, unfinished: &[PathBuf]) -> Result<()> {
    for path in unfinished {
        storage
            .remove_file(path)
            .map_err(|e| Error::io("remove unfinished data file", path, e))?;
    }
    Ok(())
}

/// The extents found in the data files, in file and block order, and per file (by
/// sequence) the end of its last used block.
#[derive(Debug, Default)]
struct Listing {
    found: Vec<Found>,
    used_end: BTreeMap<u64, u32>,
}

/// Opens every listed data file (a read-only refresh reuses those it knows) and finds its
/// extents. `out` takes the files, the next file sequence, and the report's counts of files
/// and damaged progress slots.
fn open_files(
    storage: &dyn Storage,
    listed: &Listed,
    writable: bool,
    known_files: &BTreeMap<u64, Arc<DataFile>>,
    out: &mut Recovered,
) -> Result<Listing> {
    let mut listing = Listing::default();
    for (seq, path) in listed {
        out.next_seq = out.next_seq.max(seq + 1);
        let Some(file) = open_listed(storage, *seq, path, writable, known_files)? else {
            continue;
        };
        out.report.files += 1;
        find_extents(storage, &file, &mut listing, &mut out.report)?;
        out.files.insert(file.seq, file);
    }
    Ok(listing)
}

/// The data file `seq` at `path`: the one a read-only handle knows, or opened now. `None`
/// when it was deleted since it was listed (a read-only handle racing the writer). A file
/// whose header names another sequence than its name is corruption.
fn open_listed(
    storage: &dyn Storage,
    seq: u64,
    path: &Path,
    writable: bool,
    known_files: &BTreeMap<u64, Arc<DataFile>>,
) -> Result<Option<Arc<DataFile>>> {
    let file = match known_files.get(&seq) {
        Some(f) => Arc::clone(f),
        None => match DataFile::open(storage, path, writable)? {
            Some(f) => f,
            None => return Ok(None),
        },
    };
    if file.seq != seq {
        return Err(Error::Corruption {
            topic: String::new(),
            offset: 0,
            path: path.to_owned(),
            position: 0,
            reason: format!(
                "file header says sequence {} but the name says {seq}",
                file.seq
            ),
        });
    }
    Ok(Some(file))
}

/// Walks the block slots of `file`, adding each extent that starts in one to `listing`
/// (skipping the blocks it spans) and noting where the last one ends.
fn find_extents(
    storage: &dyn Storage,
    file: &Arc<DataFile>,
    listing: &mut Listing,
    report: &mut RecoveryReport,
) -> Result<()> {
    let mut slot = 0u32;
    while slot < file.extent_count {
        let SlotKind::Extent(id, progress, damaged) = classify_slot(storage, file, slot)? else {
            slot += 1;
            continue;
        };
        report.damaged_progress_slots += u64::from(damaged);
        let next_slot = slot + id.extent_count;
        debug_assert!(
            next_slot <= file.extent_count,
            "classify_slot checks the fit"
        );
        listing.used_end.insert(file.seq, next_slot);
        listing.found.push(Found {
            file: Arc::clone(file),
            id,
            progress,
            progress_damaged: damaged,
        });
        slot = next_slot;
    }
    Ok(())
}

/// The extents of live topics grouped by name, and the `(name, id)` of topics whose
/// deletion began (one extent marked `Deleted` is enough).
#[derive(Debug, Default)]
struct Grouped {
    by_topic: BTreeMap<String, Vec<Found>>,
    deleting: HashSet<(String, u32)>,
}

/// Groups the extents by topic, checking that names and ids agree. Extents marked deleted
/// or consumed only count in their files' counters (a writable open), as consumed; every
/// extent's topic id raises `next_topic_id`.
fn group_by_topic(found: Vec<Found>, writable: bool, next_topic_id: &mut u32) -> Result<Grouped> {
    let mut grouped = Grouped::default();
    let mut id_names: HashMap<u32, String> = HashMap::new();
    for f in found {
        *next_topic_id = (*next_topic_id).max(f.id.topic_id.saturating_add(1));
        if f.progress
            .is_some_and(|p| matches!(p.state, ProgressState::Deleted | ProgressState::Consumed))
        {
            if f.progress
                .is_some_and(|p| p.state == ProgressState::Deleted)
            {
                grouped.deleting.insert((f.id.topic.clone(), f.id.topic_id));
            }
            if writable {
                count_unused(&f.file, f.id.extent_count);
            }
            continue;
        }
        if let Some(name) = id_names.get(&f.id.topic_id)
            && *name != f.id.topic
        {
            return Err(Error::Corruption {
                topic: f.id.topic.clone(),
                offset: f.id.first_offset,
                path: f.file.path.clone(),
                position: f.file.block_position(f.id.block_index),
                reason: format!("topic id {} also names topic {name:?}", f.id.topic_id),
            });
        }
        id_names.insert(f.id.topic_id, f.id.topic.clone());
        grouped
            .by_topic
            .entry(f.id.topic.clone())
            .or_default()
            .push(f);
    }
    Ok(grouped)
}

/// The id of the live topic among `extents` (all named `name`): the highest not being
/// deleted. A deletion a crash cut short is finished by recovery: its topic's extents not
/// yet marked are remnants (a deletion is all or nothing, never a topic that lost its
/// head). And several ids under one name: the topic was deleted and appends created it
/// again before every extent of the old one was marked; ids only grow, so the highest is
/// the live topic and the rest are remnants too.
fn live_topic_id(name: &str, extents: &[Found], deleting: &HashSet<(String, u32)>) -> Option<u32> {
    extents
        .iter()
        .map(|f| f.id.topic_id)
        .filter(|id| !deleting.contains(&(name.to_owned(), *id)))
        .max()
}

/// What every step of one recovery works with.
struct Recovery<'a> {
    storage: &'a dyn Storage,
    /// Repair what is found (a writable open), or only read.
    writable: bool,
    /// Blocks a read-only handle already holds.
    known: &'a Known,
    /// This open's `index_interval_bytes`.
    interval: u64,
}

/// A topic's chain as recovery builds it, one extent at a time in offset order.
#[derive(Debug)]
struct TopicChain {
    name: String,
    chain: Vec<Arc<Extent>>,
    unsynced: Vec<Arc<Extent>>,
    tail: Tail,
    /// The offset the next extent must start at, once an extent was placed.
    expected: Option<u64>,
    /// An extent followed a gap: it and every later one are dropped.
    dropping: bool,
}

impl Recovery<'_> {
    /// Recovers topic `name` from its extents: the remnants of deleted topics of that name
    /// are forgotten (a writable open), then the live topic's extents are chained in offset
    /// order. `None` when no live topic remains.
    fn recover_topic(
        &self,
        name: String,
        mut extents: Vec<Found>,
        deleting: &HashSet<(String, u32)>,
        report: &mut RecoveryReport,
    ) -> Result<Option<RecoveredTopic>> {
        let live = live_topic_id(&name, &extents, deleting);
        for f in extents.iter().filter(|f| Some(f.id.topic_id) != live) {
            report.deleted_remnants += 1;
            if self.writable {
                forget_extent(self.storage, f, ProgressState::Deleted)?;
            }
        }
        let Some(topic_id) = live else {
            return Ok(None);
        };
        extents.retain(|f| f.id.topic_id == topic_id);
        extents.sort_by_key(|f| (f.id.first_offset, f.file.seq, f.id.block_index));
        let mut topic = TopicChain {
            name,
            chain: Vec::new(),
            unsynced: Vec::new(),
            tail: Tail::default(),
            expected: None,
            dropping: false,
        };
        let last = extents.len() - 1;
        for (i, f) in extents.into_iter().enumerate() {
            self.add_extent(&mut topic, f, i == last, report)?;
        }
        topic.tail.next_offset = topic.expected.unwrap_or(0);
        Ok(Some(RecoveredTopic {
            name: topic.name,
            id: topic_id,
            chain: topic.chain,
            unsynced: topic.unsynced,
            tail: topic.tail,
        }))
    }

    /// The block of extent `f`: the one a read-only handle holds, or a new one.
    fn block_of(&self, f: &Found) -> Arc<Extent> {
        match self.known.get(&(f.file.seq, f.id.block_index)) {
            Some(b) => Arc::clone(b),
            None => Arc::new(Extent::new(
                Arc::clone(&f.file),
                f.id.block_index,
                f.id.extent_count,
                f.id.topic_id,
                f.id.salt,
                f.id.first_offset,
                self.interval,
                None,
            )),
        }
    }

    /// Adds extent `f` (the topic's last when `is_last`) to `topic`: dropped after a gap,
    /// trusted from its seal, or scanned.
    fn add_extent(
        &self,
        topic: &mut TopicChain,
        f: Found,
        is_last: bool,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let block = self.block_of(&f);
        if topic.dropping || topic.expected.is_some_and(|e| e != f.id.first_offset) {
            return self.drop_after_gap(topic, &f, &block, report);
        }
        let kept = match f.progress {
            Some(p) if p.state == ProgressState::Sealed => {
                self.restore_sealed(topic, &f, &block, p, report)?
            }
            _ => self.restore_scanned(topic, &f, &block, is_last, report)?,
        };
        if kept {
            report.extents += 1;
            topic.chain.push(block);
        }
        Ok(())
    }

    /// Drops extent `f`, which follows a gap in its topic's offsets (a writable open marks
    /// it consumed). An extent whose progress slot claims durable records cannot follow a
    /// gap: that is lost records, corruption.
    fn drop_after_gap(
        &self,
        topic: &mut TopicChain,
        f: &Found,
        block: &Extent,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let durable_claim = f.progress.map_or(0, |p| p.record_count);
        if durable_claim > 0
            && f.progress
                .is_some_and(|p| p.durable_end > format::BLOCK_HEADER_BYTES)
        {
            return Err(block.corruption(
                &topic.name,
                topic.expected.unwrap_or(f.id.first_offset),
                format::BLOCK_HEADER_BYTES,
                FrameError::WrongOffset,
            ));
        }
        topic.dropping = true;
        report.dropped_extents += 1;
        if self.writable {
            forget_extent(self.storage, f, ProgressState::Consumed)?;
        }
        Ok(())
    }

    /// Restores a sealed extent from its progress slot `p`, without a scan. True when it
    /// joins the chain (an extent sealed empty does not).
    fn restore_sealed(
        &self,
        topic: &mut TopicChain,
        f: &Found,
        block: &Extent,
        p: Progress,
        report: &mut RecoveryReport,
    ) -> Result<bool> {
        // Against the extent itself, not this open's footer reserve: the extent may have
        // been written with another index interval.
        let footer_bytes = p.footer_count.saturating_mul(format::IX_LEN as u64);
        if p.durable_end < format::BLOCK_HEADER_BYTES
            || p.durable_end.saturating_add(footer_bytes) > block.len
        {
            return Err(block.corruption(&topic.name, f.id.first_offset, 0, FrameError::BadLength));
        }
        block.restore(
            p.record_count,
            p.durable_end,
            p.max_timestamp_us,
            p.durable_end,
            ProgressState::Sealed,
        );
        block.set_final(p.record_count, p.durable_end);
        report.sealed_extents += 1;
        if p.record_count == 0 {
            if self.writable {
                count_unused(&f.file, f.id.extent_count);
            }
            return Ok(false);
        }
        if self.writable {
            f.file.counters.recovered(f.id.extent_count, false);
        }
        topic.tail.max_ts = topic.tail.max_ts.max(p.max_timestamp_us);
        topic.expected = Some(f.id.first_offset + p.record_count);
        Ok(true)
    }

    /// Restores an extent that is not sealed by scanning its records: torn tails are cut
    /// (and counted, a writable open), an extent left empty is forgotten. True when it joins
    /// the chain.
    fn restore_scanned(
        &self,
        topic: &mut TopicChain,
        f: &Found,
        block: &Arc<Extent>,
        is_last: bool,
        report: &mut RecoveryReport,
    ) -> Result<bool> {
        let progress = f.progress;
        let watermark = progress.map_or(format::BLOCK_HEADER_BYTES, |p| p.durable_end);
        // Records may reach past this open's footer reserve (an extent written with a
        // coarser index interval), never past the extent. A damaged progress slot says
        // nothing of what is durable: the extent is read as far as its records check,
        // read-only too.
        let limit = if self.writable || f.progress_damaged {
            block.len
        } else {
            watermark.min(block.len)
        };
        let mut s = self.scan_extent(f, block, limit, topic.tail.max_ts, report);
        check_durable_reached(&topic.name, f, block, &s, watermark)?;
        // After a clean close nothing was written past `durable_end`: bytes there are
        // stale (reused blocks), not a torn write.
        let clean_end =
            progress.is_some_and(|p| p.state == ProgressState::Clean && p.durable_end == s.end);
        let torn = !clean_end && (s.stop != FrameError::End || s.cut_records > 0);
        if torn && self.writable {
            count_tear(f, block, limit, &s, report);
        }
        block.set_index(std::mem::take(&mut s.index));
        let synced = progress.map_or(0, |p| p.durable_end.min(s.end));
        block.restore(
            s.count,
            s.end,
            s.max_ts,
            synced,
            progress.map_or(ProgressState::Open, |p| p.state),
        );
        let clean = progress.is_some_and(|p| p.state == ProgressState::Clean);
        if s.count == 0 && !(self.writable && is_last && !torn && clean) {
            if self.writable {
                // Nothing to keep: forget the extent, so a torn first record is cut (and
                // counted) once, not at every later open.
                forget_extent(self.storage, f, ProgressState::Consumed)?;
            }
            // A later extent of the topic must continue from here: one that claims durable
            // records after this empty one means records were lost, which is corruption,
            // not a topic that starts later.
            topic.expected = Some(f.id.first_offset);
            return Ok(false);
        }
        topic.tail.max_ts = topic.tail.max_ts.max(s.max_ts);
        topic.expected = Some(f.id.first_offset + s.count);
        let resumable = self.writable && is_last && !torn && clean_end;
        self.place_scanned(topic, f, block, &s, is_last, resumable);
        Ok(true)
    }

    /// Scans extent `f` up to `limit`, resuming where a read-only handle's last refresh
    /// stopped, with `max_ts` the topic's running maximum so far. The report counts it.
    fn scan_extent(
        &self,
        f: &Found,
        block: &Extent,
        limit: u64,
        max_ts: u64,
        report: &mut RecoveryReport,
    ) -> Scan {
        let (count, pos) = block.published();
        let index = if self.known.contains_key(&(f.file.seq, f.id.block_index)) {
            block.index_snapshot()
        } else {
            Vec::new()
        };
        let last_index_pos = index.last().map(|e| e.position);
        let from = ScanPoint {
            pos,
            count,
            // Index entries and extent maxima are running maxima of the topic.
            max_ts: max_ts.max(block.max_timestamp_us()),
            index,
            last_index_pos,
        };
        let s = scan(block, limit, from, self.interval);
        report.scanned_extents += 1;
        report.scanned_bytes += s.end - pos;
        s
    }

    /// Settles a scanned extent that joins the chain: the topic's tail continues in it when
    /// `resumable` (the writable open's last extent, closed cleanly where its records
    /// end); otherwise it is final, unless it is a read-only handle's last extent, which
    /// the writer may still be filling.
    fn place_scanned(
        &self,
        topic: &mut TopicChain,
        f: &Found,
        block: &Arc<Extent>,
        s: &Scan,
        is_last: bool,
        resumable: bool,
    ) {
        if self.writable {
            f.file.counters.recovered(f.id.extent_count, resumable);
        }
        if resumable {
            block.hold();
            topic.tail.block = Some(Arc::clone(block));
            topic.tail.pos = s.end;
            topic.tail.count = s.count;
            topic.tail.last_index_pos = s.last_index_pos;
        } else if self.writable || !is_last {
            // Never append after a recovered tail: stale bytes may follow it. In a
            // read-only handle an extent followed by another is complete: the writer moved
            // on, so readers move on too.
            block.set_final(s.count, s.end);
        }
        if self.writable {
            topic.unsynced.push(Arc::clone(block));
        }
    }
}

/// Fails when the scan `s` of extent `f` stopped short of `watermark`, what its progress
/// slot says is durable: acknowledged records are damaged, which is corruption, never a
/// torn tail.
fn check_durable_reached(
    topic: &str,
    f: &Found,
    block: &Extent,
    s: &Scan,
    watermark: u64,
) -> Result<()> {
    if s.end < watermark.min(block.len) {
        return Err(block.corruption(
            topic,
            f.id.first_offset + s.count,
            s.end,
            if s.stop == FrameError::End {
                FrameError::BadMagic
            } else {
                s.stop
            },
        ));
    }
    Ok(())
}

/// Counts the torn tail that the scan `s` of extent `f` (up to `limit`) ended on: the
/// records of an incomplete batch it cut, and the valid records past a bad frame.
fn count_tear(f: &Found, block: &Extent, limit: u64, s: &Scan, report: &mut RecoveryReport) {
    report.torn_tails += 1;
    report.torn_records += s.cut_records;
    if s.stop != FrameError::End {
        report.records_past_tear += records_past(block, limit, s.end, f.id.first_offset + s.count);
    }
}

/// Places the allocator: new extents continue after the last used block of the newest file
/// holding any. A writable open keeps the first later (empty) file as the spare and removes
/// the others.
fn place_allocation(
    storage: &dyn Storage,
    writable: bool,
    used_end: &BTreeMap<u64, u32>,
    out: &mut Recovered,
) -> Result<()> {
    let newest_used = used_end.keys().next_back().copied();
    for (seq, f) in &out.files {
        if Some(*seq) == newest_used {
            out.alloc_current = Some((Arc::clone(f), used_end[seq]));
        }
    }
    if !writable {
        return Ok(());
    }
    let empties: Vec<u64> = out
        .files
        .keys()
        .copied()
        .filter(|s| newest_used.is_none_or(|n| *s > n))
        .collect();
    for (i, seq) in empties.into_iter().enumerate() {
        if i == 0 {
            out.spare = out.files.get(&seq).cloned();
        } else if let Some(f) = out.files.remove(&seq) {
            storage
                .remove_file(&f.path)
                .map_err(|e| Error::io("remove empty data file", &f.path, e))?;
        }
    }
    Ok(())
}

//! Rebuilding state from the data files: at open (writable or read-only) and on a read-only
//! refresh.
//!
//! Cost is one identity and one progress slot per extent, plus a scan of each extent that is
//! not sealed on disk. Sealed extents are trusted from their progress slot (it is written only
//! after their data is durable) and their index is loaded from the footer on first seek.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::block::Block;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::file::{self, DataFile};
use crate::format::{self, BlockIdentity, FrameError, IndexEntry, Progress, ProgressState};
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
    pub chain: Vec<Arc<Block>>,
    pub unsynced: Vec<Arc<Block>>,
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

/// Scans records of `block` from `(pos, offset)` up to `limit` (relative).
#[expect(clippy::too_many_arguments, reason = "scan resume state")]
fn scan(
    block: &Block,
    limit: u64,
    mut pos: u64,
    mut count: u64,
    mut max_ts: u64,
    mut index: Vec<IndexEntry>,
    mut last_index_pos: Option<u64>,
    interval: u64,
) -> Scan {
    let extent = block.recovery_bytes(limit);
    let mut batch_left = 0u64;
    // (position, count, max_ts, index length, last index position) at the open batch's head.
    let mut batch_start: Option<(u64, u64, u64, usize, Option<u64>)> = None;
    let stop;
    loop {
        let offset = block.first_offset + count;
        match block.decode_frame(extent, pos, offset, true) {
            Ok(view) => {
                if batch_left == 0 {
                    if view.batch_count == 0 {
                        stop = FrameError::WrongOffset;
                        break;
                    }
                    if view.batch_count > 1 {
                        batch_start = Some((pos, count, max_ts, index.len(), last_index_pos));
                    }
                    batch_left = u64::from(view.batch_count);
                } else if view.batch_count != 0 {
                    stop = FrameError::WrongOffset;
                    break;
                }
                batch_left -= 1;
                if batch_left == 0 {
                    batch_start = None;
                }
                max_ts = max_ts.max(view.timestamp_us);
                if last_index_pos.is_none_or(|last| pos - last >= interval) {
                    index.push(IndexEntry {
                        offset,
                        position: pos,
                        max_timestamp_us: max_ts,
                    });
                    last_index_pos = Some(pos);
                }
                pos = view.next_position as u64;
                count += 1;
            }
            Err(FrameError::Truncated) if pos + format::FRAME_HEADER_BYTES > limit => {
                // Not even a header fits before the limit: the clean end of the extent.
                stop = if extent
                    .get(pos as usize..)
                    .is_some_and(|r| r.iter().all(|&b| b == 0))
                {
                    FrameError::End
                } else {
                    FrameError::Truncated
                };
                break;
            }
            Err(e) => {
                stop = e;
                break;
            }
        }
    }
    let mut cut_records = 0;
    if let Some((bpos, bcount, bmax, blen, blast)) = batch_start {
        // An incomplete batch: none of it survives.
        cut_records = count - bcount;
        pos = bpos;
        count = bcount;
        max_ts = bmax;
        index.truncate(blen);
        last_index_pos = blast;
    }
    Scan {
        count,
        end: pos,
        max_ts,
        index,
        last_index_pos,
        stop,
        cut_records,
    }
}

/// Counts the valid records of `block` that lie past `from` (where a scan stopped on a bad
/// frame), up to `limit`: frames at any 8-byte position that pass every check, with an offset
/// at or past `next_offset`. Stale bytes never pass (the salt), so a count above zero means
/// records were written after the bad frame: appends in flight at a crash, or damage.
fn records_past(block: &Block, limit: u64, from: u64, next_offset: u64) -> u64 {
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
        let fits = id.block_count >= 1
            && u64::from(index) + u64::from(id.block_count) <= u64::from(file.block_count);
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
                id.version, id.block_index, id.block_count, id.file_seq
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
    count_unused(&f.file, f.id.block_count);
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
pub type Known = HashMap<(u64, u32), Arc<Block>>;

/// Recovers the directory. `writable` repairs (cuts torn tails, drops orphan extents, removes
/// half-created files); read-only never writes and shows only durable records.
pub fn recover(
    dir: &Path,
    config: &Config,
    storage: &dyn Storage,
    writable: bool,
    known_files: &BTreeMap<u64, Arc<DataFile>>,
    known: &Known,
) -> Result<Recovered> {
    let mut out = Recovered::default();
    let interval = config.index_interval_bytes;
    let (listed, unfinished) = list_files(storage, dir)?;
    if writable {
        for path in &unfinished {
            storage
                .remove_file(path)
                .map_err(|e| Error::io("remove unfinished data file", path, e))?;
        }
    }
    let mut found: Vec<Found> = Vec::new();
    // Highest used block end per file.
    let mut used_end: BTreeMap<u64, u32> = BTreeMap::new();
    for (seq, path) in &listed {
        out.next_seq = out.next_seq.max(seq + 1);
        let file = match known_files.get(seq) {
            Some(f) => Arc::clone(f),
            None => match DataFile::open(storage, path, writable)? {
                Some(f) => f,
                // Deleted since it was listed (a read-only handle racing the writer).
                None => continue,
            },
        };
        if file.seq != *seq {
            return Err(Error::Corruption {
                topic: String::new(),
                offset: 0,
                path: path.clone(),
                position: 0,
                reason: format!(
                    "file header says sequence {} but the name says {seq}",
                    file.seq
                ),
            });
        }
        out.report.files += 1;
        let mut slot = 0u32;
        while slot < file.block_count {
            let SlotKind::Extent(id, progress, damaged) = classify_slot(storage, &file, slot)?
            else {
                slot += 1;
                continue;
            };
            out.report.damaged_progress_slots += u64::from(damaged);
            let next_slot = slot + id.block_count;
            used_end.insert(file.seq, next_slot);
            found.push(Found {
                file: Arc::clone(&file),
                id,
                progress,
                progress_damaged: damaged,
            });
            slot = next_slot;
        }
        out.files.insert(file.seq, file);
    }

    // Group by topic, checking that names and ids agree. Extents of deleted topics only
    // count in their files' counters, as consumed.
    let mut by_topic: BTreeMap<String, Vec<Found>> = BTreeMap::new();
    let mut id_names: HashMap<u32, String> = HashMap::new();
    // (name, id) of topics whose deletion began: one extent marked `Deleted` is enough.
    let mut deleting: std::collections::HashSet<(String, u32)> = Default::default();
    for f in found {
        out.next_topic_id = out.next_topic_id.max(f.id.topic_id.saturating_add(1));
        if f.progress
            .is_some_and(|p| matches!(p.state, ProgressState::Deleted | ProgressState::Consumed))
        {
            if f.progress
                .is_some_and(|p| p.state == ProgressState::Deleted)
            {
                deleting.insert((f.id.topic.clone(), f.id.topic_id));
            }
            if writable {
                count_unused(&f.file, f.id.block_count);
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
        by_topic.entry(f.id.topic.clone()).or_default().push(f);
    }

    for (name, mut extents) in by_topic {
        // A deletion a crash cut short is finished here: its topic's extents not yet marked
        // are remnants (a deletion is all or nothing, never a topic that lost its head). And
        // several ids under one name: the topic was deleted and appends created it again
        // before every extent of the old one was marked; ids only grow, so the highest is
        // the live topic and the rest are remnants too.
        let live = extents
            .iter()
            .map(|f| f.id.topic_id)
            .filter(|id| !deleting.contains(&(name.clone(), *id)))
            .max();
        for f in extents.iter().filter(|f| Some(f.id.topic_id) != live) {
            out.report.deleted_remnants += 1;
            if writable {
                forget_extent(storage, f, ProgressState::Deleted)?;
            }
        }
        let Some(topic_id) = live else {
            continue;
        };
        extents.retain(|f| f.id.topic_id == topic_id);
        extents.sort_by_key(|f| (f.id.first_offset, f.file.seq, f.id.block_index));
        let mut chain: Vec<Arc<Block>> = Vec::new();
        let mut unsynced = Vec::new();
        let mut tail = Tail::default();
        let mut expected: Option<u64> = None;
        let mut dropping = false;
        let last = extents.len() - 1;
        for (i, f) in extents.into_iter().enumerate() {
            let key = (f.file.seq, f.id.block_index);
            let block = match known.get(&key) {
                Some(b) => Arc::clone(b),
                None => Arc::new(Block::new(
                    Arc::clone(&f.file),
                    f.id.block_index,
                    f.id.block_count,
                    f.id.topic_id,
                    f.id.salt,
                    f.id.first_offset,
                    interval,
                    None,
                )),
            };
            let durable_claim = f.progress.map_or(0, |p| p.record_count);
            if dropping || expected.is_some_and(|e| e != f.id.first_offset) {
                if durable_claim > 0
                    && f.progress
                        .is_some_and(|p| p.durable_end > format::BLOCK_HEADER_BYTES)
                {
                    return Err(block.corruption(
                        &name,
                        expected.unwrap_or(f.id.first_offset),
                        format::BLOCK_HEADER_BYTES,
                        FrameError::WrongOffset,
                    ));
                }
                dropping = true;
                out.report.dropped_extents += 1;
                if writable {
                    forget_extent(storage, &f, ProgressState::Consumed)?;
                }
                continue;
            }
            match f.progress {
                Some(p) if p.state == ProgressState::Sealed => {
                    // Against the extent itself, not this open's footer reserve: the extent
                    // may have been written with another index interval.
                    let footer_bytes = p.footer_count.saturating_mul(format::IX_LEN as u64);
                    if p.durable_end < format::BLOCK_HEADER_BYTES
                        || p.durable_end.saturating_add(footer_bytes) > block.len
                    {
                        return Err(block.corruption(
                            &name,
                            f.id.first_offset,
                            0,
                            FrameError::BadLength,
                        ));
                    }
                    block.restore(
                        p.record_count,
                        p.durable_end,
                        p.max_timestamp_us,
                        p.durable_end,
                        ProgressState::Sealed,
                    );
                    block.set_final(p.record_count, p.durable_end);
                    out.report.sealed_extents += 1;
                    if p.record_count == 0 {
                        if writable {
                            count_unused(&f.file, f.id.block_count);
                        }
                        continue;
                    }
                    if writable {
                        f.file.counters.recovered(f.id.block_count, false);
                    }
                    tail.max_ts = tail.max_ts.max(p.max_timestamp_us);
                    expected = Some(f.id.first_offset + p.record_count);
                }
                progress => {
                    let watermark = progress.map_or(format::BLOCK_HEADER_BYTES, |p| p.durable_end);
                    // Records may reach past this open's footer reserve (an extent written
                    // with a coarser index interval), never past the extent.
                    // A damaged progress slot says nothing of what is durable: the extent is
                    // read as far as its records check, read-only too.
                    let limit = if writable || f.progress_damaged {
                        block.len
                    } else {
                        watermark.min(block.len)
                    };
                    // Resume a read-only scan where the last refresh stopped.
                    let (count0, end0) = block.published();
                    let index0 = if known.contains_key(&key) {
                        block.index_snapshot()
                    } else {
                        Vec::new()
                    };
                    let last0 = index0.last().map(|e| e.position);
                    let s = scan(
                        &block,
                        limit,
                        end0,
                        count0,
                        // Index entries and extent maxima are running maxima of the topic.
                        tail.max_ts.max(block.max_timestamp_us()),
                        index0,
                        last0,
                        interval,
                    );
                    out.report.scanned_extents += 1;
                    out.report.scanned_bytes += s.end - end0;
                    if s.end < watermark.min(block.len) {
                        return Err(block.corruption(
                            &name,
                            f.id.first_offset + s.count,
                            s.end,
                            if s.stop == FrameError::End {
                                FrameError::BadMagic
                            } else {
                                s.stop
                            },
                        ));
                    }
                    // After a clean close nothing was written past `durable_end`: bytes there are
                    // stale (reused blocks), not a torn write.
                    let clean_end = progress
                        .is_some_and(|p| p.state == ProgressState::Clean && p.durable_end == s.end);
                    let torn = !clean_end && (s.stop != FrameError::End || s.cut_records > 0);
                    if torn && writable {
                        out.report.torn_tails += 1;
                        out.report.torn_records += s.cut_records;
                        if s.stop != FrameError::End {
                            out.report.records_past_tear +=
                                records_past(&block, limit, s.end, f.id.first_offset + s.count);
                        }
                    }
                    block.set_index(s.index);
                    let synced = progress.map_or(0, |p| p.durable_end.min(s.end));
                    block.restore(
                        s.count,
                        s.end,
                        s.max_ts,
                        synced,
                        progress.map_or(ProgressState::Open, |p| p.state),
                    );
                    if s.count == 0
                        && !(writable
                            && i == last
                            && !torn
                            && progress.is_some_and(|p| p.state == ProgressState::Clean))
                    {
                        if writable {
                            // Nothing to keep: forget the extent, so a torn first record is
                            // cut (and counted) once, not at every later open.
                            forget_extent(storage, &f, ProgressState::Consumed)?;
                        }
                        // A later extent of the topic must continue from here: one that
                        // claims durable records after this empty one means records were
                        // lost, which is corruption, not a topic that starts later.
                        expected = Some(f.id.first_offset);
                        continue;
                    }
                    tail.max_ts = tail.max_ts.max(s.max_ts);
                    expected = Some(f.id.first_offset + s.count);
                    let resumable = writable
                        && i == last
                        && !torn
                        && progress.is_some_and(|p| {
                            p.state == ProgressState::Clean && p.durable_end == s.end
                        });
                    if writable {
                        f.file.counters.recovered(f.id.block_count, resumable);
                    }
                    if resumable {
                        block.hold();
                        tail.block = Some(Arc::clone(&block));
                        tail.pos = s.end;
                        tail.count = s.count;
                        tail.last_index_pos = s.last_index_pos;
                    } else if writable || i != last {
                        // Never append after a recovered tail: stale bytes may follow it. In a
                        // read-only handle an extent followed by another is complete: the
                        // writer moved on, so readers move on too.
                        block.set_final(s.count, s.end);
                    }
                    if writable {
                        unsynced.push(Arc::clone(&block));
                    }
                }
            }
            out.report.extents += 1;
            chain.push(block);
        }
        tail.next_offset = expected.unwrap_or(0);
        out.topics.push(RecoveredTopic {
            name,
            id: topic_id,
            chain,
            unsynced,
            tail,
        });
    }

    // New extents continue after the last used block of the newest file holding any; later
    // empty files become the spare (one) or are removed.
    let newest_used = used_end.keys().next_back().copied();
    for (seq, f) in &out.files {
        if Some(*seq) == newest_used {
            out.alloc_current = Some((Arc::clone(f), used_end[seq]));
        }
    }
    if writable {
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
    }
    Ok(out)
}

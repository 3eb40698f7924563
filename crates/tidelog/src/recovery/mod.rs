//! Rebuilding state from the data files: at open (writable or read-only) and on a read-only
//! refresh.
//!
//! Cost is one identity and one progress slot per extent, plus a scan of each extent that is
//! not sealed on disk. Sealed extents are trusted from their progress slot (it is written only
//! after their data is durable) and their index is loaded from the footer on first seek.
//! An open hints those pages to the kernel ahead of its reads (`ahead`), and checks topics
//! on a few threads (`workers`), so a cold open waits for many reads at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::file::{self, DataFile};
use crate::format::{
    self, BlockIdentity, FrameError, FrameView, IndexEntry, Progress, ProgressState,
};
use crate::io::Storage;
use crate::topic::Tail;

mod ahead;
mod chain;
mod scan;
mod slots;
mod workers;

pub use slots::{file_retired, mark_topic_deleted};

use ahead::*;
use chain::*;
use scan::*;
use slots::*;

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
    /// Records dropped from torn tails: the complete records of an incomplete batch of
    /// version-1 frames (a batch frame is checked whole, so none of its records is complete
    /// on its own).
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
    /// Extents whose newest records differed from the commit copy a group commit wrote
    /// beside them (a power loss during that commit's sync, or damage) and were rewritten
    /// from it (a writable open), or are read from it (a read-only open, which writes
    /// nothing: its handle keeps the repaired bytes in memory).
    pub repaired_from_copies: u64,
    /// Commit-copy slots that carry the copy magic but fail their checks (a torn write of
    /// an extent's header, or damage): ignored, their records read from their own frames.
    /// The flush that next claims the extent's records clears them.
    pub damaged_commit_copies: u64,
    /// Ring backend: records replayed from the ring into the data files.
    pub ring_records_replayed: u64,
    /// Ring backend: records in the ring that the data files already held.
    pub ring_records_held: u64,
}

impl RecoveryReport {
    /// Adds `other`'s counts (a topic's, recovered on another thread).
    fn add(&mut self, other: &RecoveryReport) {
        // Every field named: a new one must be added here too.
        let RecoveryReport {
            files,
            extents,
            sealed_extents,
            scanned_extents,
            scanned_bytes,
            torn_tails,
            torn_records,
            records_past_tear,
            damaged_progress_slots,
            deleted_remnants,
            dropped_extents,
            repaired_from_copies,
            damaged_commit_copies,
            ring_records_replayed,
            ring_records_held,
        } = other;
        self.files += files;
        self.extents += extents;
        self.sealed_extents += sealed_extents;
        self.scanned_extents += scanned_extents;
        self.scanned_bytes += scanned_bytes;
        self.torn_tails += torn_tails;
        self.torn_records += torn_records;
        self.records_past_tear += records_past_tear;
        self.damaged_progress_slots += damaged_progress_slots;
        self.deleted_remnants += deleted_remnants;
        self.dropped_extents += dropped_extents;
        self.repaired_from_copies += repaired_from_copies;
        self.damaged_commit_copies += damaged_commit_copies;
        self.ring_records_replayed += ring_records_replayed;
        self.ring_records_held += ring_records_held;
    }
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

/// What the writer reported published through the shared state file: a read-only
/// refresh reads those records too, durable or not (published bytes are never written
/// again).
#[derive(Debug, Default)]
pub struct Published {
    /// Where an extent's published records end, by file sequence and block.
    pub ends: HashMap<(u64, u32), u64>,
    /// Each topic's next offset, by topic id: the extents a topic left below it hold only
    /// published records.
    pub next: HashMap<u32, u64>,
}

impl Published {
    /// Records that the extent at `block` of file `file_seq` holds published records up to
    /// `end` (the furthest report wins).
    pub fn add_end(&mut self, file_seq: u64, block: u32, end: u64) {
        let known = self.ends.entry((file_seq, block)).or_insert(0);
        *known = (*known).max(end);
    }
}

/// What a recovery that does not repair covers: every topic, or one (a shared-mode handle
/// lining one topic up with other processes' appends, while its other topics may be
/// appended to), and whether new files are mapped writable (shared mode appends to them).
#[derive(Debug, Default, Clone, Copy)]
pub struct Scope {
    pub only_topic: Option<u32>,
    pub map_writable: bool,
}

/// Recovers the directory. `writable` repairs (cuts torn tails, drops orphan extents, removes
/// half-created files); read-only never writes and shows only durable records.
///
/// The steps: list the files, read each one's identity and progress slots, group the
/// extents by topic, build and check each topic's chain (repairing as it goes when
/// `writable`; topics on up to `recovery_threads` threads, the report and the first error as
/// one by one), then place the allocator.
#[expect(
    clippy::too_many_arguments,
    reason = "what a recovery reuses and covers, each from its caller's state"
)]
pub fn recover(
    dir: &Path,
    config: &Config,
    storage: &dyn Storage,
    writable: bool,
    known_files: &BTreeMap<u64, Arc<DataFile>>,
    known: &Known,
    published: &Published,
    scope: Scope,
) -> Result<Recovered> {
    // A recovery that does not repair reads while writers hand out, fill, roll and sync
    // extents: a block it read blank may hold an extent by the time it reads a later one
    // that claims durable records, which looks like a gap. Such a gap is read again (damage
    // stays, and is reported at the last read).
    let mut reads = 1;
    loop {
        let gap = AtomicBool::new(false);
        let result = recover_once(
            dir,
            config,
            storage,
            writable,
            known_files,
            known,
            published,
            scope,
            &gap,
        );
        if result.is_ok() || writable || !gap.load(Ordering::Relaxed) || reads >= GAP_READS {
            return result;
        }
        reads += 1;
    }
}

/// How many times a recovery that does not repair reads the directory while it finds a
/// durable extent after a gap (see [`recover`]).
const GAP_READS: u32 = 4;

/// One read of the directory (see [`recover`]); sets `gap` when an extent that claims
/// durable records followed a gap in its topic's offsets.
#[expect(
    clippy::too_many_arguments,
    reason = "what a recovery reuses and covers, each from its caller's state"
)]
fn recover_once(
    dir: &Path,
    config: &Config,
    storage: &dyn Storage,
    writable: bool,
    known_files: &BTreeMap<u64, Arc<DataFile>>,
    known: &Known,
    published: &Published,
    scope: Scope,
    gap: &AtomicBool,
) -> Result<Recovered> {
    let mut out = Recovered::default();
    let (listed, unfinished) = list_files(storage, dir)?;
    if writable {
        remove_unfinished(storage, &unfinished)?;
    }
    let map_writable = writable || scope.map_writable;
    // An open reads ahead (see `ahead`); a refresh, knowing the files, finds what it reads
    // in the page cache: the writer wrote it.
    let read_ahead = known_files.is_empty();
    let listing = open_files(
        storage,
        &listed,
        map_writable,
        writable,
        known_files,
        read_ahead,
        &mut out,
    )?;
    let mut grouped = group_by_topic(listing.found, writable, &mut out.next_topic_id)?;
    if let Some(id) = scope.only_topic {
        grouped
            .by_topic
            .retain(|_, extents| extents.iter().any(|f| f.id.topic_id == id));
    }
    let ahead = if read_ahead {
        scan_ranges(storage, writable, known, published, &grouped)
    } else {
        Ahead::none(storage)
    };
    let recovery = Recovery {
        storage,
        writable,
        known,
        published,
        interval: config.index_interval_bytes,
        track_unsynced: map_writable,
        ahead: std::sync::Mutex::new(ahead),
        gap,
    };
    let threads = config.effective_recovery_threads();
    let topics: Vec<_> = std::mem::take(&mut grouped.by_topic).into_iter().collect();
    let recovered = workers::map(topics, threads, "recovery thread", |(name, extents)| {
        let mut report = RecoveryReport::default();
        let topic = recovery.recover_topic(name, extents, &grouped, &mut report)?;
        Ok((topic, report))
    })?;
    for (topic, report) in recovered {
        out.report.add(&report);
        out.topics.extend(topic);
    }
    if writable {
        resume_in_place(storage, &out.topics, threads)?;
    }
    place_allocation(storage, writable, &listing.used_end, &mut out)?;
    Ok(out)
}

/// A writable open: the topics that resume in their last extent (closed cleanly where its
/// records end) have its slot rewritten `Open`, synced, before anything is appended there.
/// `Clean` says nothing was written past its end since the mark, and the appends to come
/// break that: were the mark still on disk, a crash that lost the page at that end while
/// writeback had flushed later ones would read as a clean close again, and the next appends
/// over the same positions could end right before a frame of the lost ones, which a later
/// scan reads as records. Each slot is synced on its own: with one msync over the span of
/// a file's slots, the file's block count moved by a page after the open had read it for
/// the disk account (`deletion/retention.rs` failed every time; probably that msync also
/// wrote the zero pages the prefault thread dirties ahead of each tail). Slots are synced
/// on up to `threads` threads at once.
fn resume_in_place(storage: &dyn Storage, topics: &[RecoveredTopic], threads: usize) -> Result<()> {
    let resumed: Vec<_> = topics
        .iter()
        .filter_map(|t| t.tail.block.as_ref().map(|b| (t, b)))
        .collect();
    // Each sync waits for the device (a write and a cache flush): several at once.
    workers::map(resumed, threads, "recovery thread", |(t, block)| {
        let (count, end) = block.published();
        let progress = Progress {
            state: ProgressState::Open,
            durable_end: end,
            record_count: count,
            max_timestamp_us: block.max_timestamp_us(),
            footer_count: 0,
            footer_crc: 0,
        };
        block.write_progress(storage, &t.name, &progress)
    })?;
    Ok(())
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
    repair: bool,
    known_files: &BTreeMap<u64, Arc<DataFile>>,
    read_ahead: bool,
    out: &mut Recovered,
) -> Result<Listing> {
    let mut listing = Listing::default();
    // Every file is opened first, so the slots of the files after the one being walked are
    // read ahead; an error opening one is reported in its turn, as if opened then.
    let opened: Vec<_> = listed
        .iter()
        .map(|(seq, path)| {
            (
                *seq,
                open_listed(storage, *seq, path, writable, known_files),
            )
        })
        .collect();
    let mut ahead = if read_ahead {
        let files = opened
            .iter()
            .filter_map(|(_, f)| f.as_ref().ok().and_then(Option::as_ref).cloned())
            .collect();
        slot_pages(storage, files)
    } else {
        Ahead::none(storage)
    };
    let mut step = 0;
    for (seq, file) in opened {
        out.next_seq = out.next_seq.max(seq + 1);
        let Some(file) = file? else {
            continue;
        };
        ahead.reach(step);
        step += 1;
        out.report.files += 1;
        find_extents(storage, &file, repair, &mut listing, &mut out.report)?;
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
    repair: bool,
    listing: &mut Listing,
    report: &mut RecoveryReport,
) -> Result<()> {
    let mut slot = 0u32;
    while slot < file.extent_count {
        let SlotKind::Extent(id, progress, damaged, (copies, damaged_copies)) =
            classify_slot(storage, file, slot)?
        else {
            slot += 1;
            continue;
        };
        report.damaged_progress_slots += u64::from(damaged);
        let mut patches = Vec::new();
        let progress = if damaged {
            progress
        } else {
            report.damaged_commit_copies += damaged_copies;
            extend_by_copies(
                storage,
                file,
                slot,
                &id,
                progress,
                &copies,
                repair,
                &mut patches,
                report,
            )?
        };
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
            patches,
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
    /// Per topic id, the highest first offset of its extents marked `Consumed`: retention
    /// or the groups passed every offset below it.
    consumed_to: HashMap<u32, u64>,
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
            } else {
                let to = grouped.consumed_to.entry(f.id.topic_id).or_insert(0);
                *to = (*to).max(f.id.first_offset);
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

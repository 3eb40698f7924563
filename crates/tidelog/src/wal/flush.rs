//! The data files' flush: a pass that makes everything published so far durable, catches up
//! the progress slots and seals finished extents, and a group commit's narrower I/O.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::topics::Topics;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::format;
use crate::io::Storage;
use crate::poison::Recover;
use crate::shared::TopicSlot;
use crate::sync::SyncQueue;
use crate::topic::Topic;

/// Longest a sync waits for a topic's append lock (shared mode) before it leaves the
/// progress slot to the next pass (the data is durable without it).
const PROGRESS_LOCK_WAIT: Duration = Duration::from_secs(1);
/// Longest a sync waits for another process's sync turn on a topic before it syncs on its
/// own.
const SYNC_TURN_WAIT: Duration = Duration::from_secs(1);
/// Longest a seal waits for another process's seal of the topic (shared mode): enough to
/// notice a dead holder; a live one is mid-seal (milliseconds), or stopped, and this pass
/// claims the extent instead and leaves its seals to a later one rather than wait.
const SEAL_LOCK_WAIT: Duration = Duration::from_millis(20);
/// Longest a group commit's sync waits for the records it expects (shared mode; see
/// `Flusher::gather`), and the share of its previous sync's duration it may wait at most.
const GATHER_MAX: Duration = Duration::from_micros(200);
const GATHER_SHARE: u32 = 2;

/// Why a flush runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// The periodic pass, or a flush asked for.
    Flush,
    /// Appends have stopped: active extents are marked `Clean` in the same write.
    Close,
    /// A group commit (`Always`) in shared mode.
    Group,
}

/// What the last group commit this process synced in a topic saw (shared mode).
#[derive(Debug, Clone, Copy)]
struct Gathered {
    /// Records its sync covered plus those published while it ran: how many the next
    /// group commit waits for.
    records: u64,
    /// How long its sync took.
    sync: Duration,
}

/// Flushes the data files of one handle; one pass at a time.
#[derive(Debug)]
pub(crate) struct Flusher {
    topics: Arc<Topics>,
    storage: Arc<dyn Storage>,
    sync: Arc<SyncQueue>,
    lock: Mutex<()>,
    /// Per topic id; only the holder of `lock` touches it.
    gathered: Mutex<HashMap<u32, Gathered>>,
}

impl Flusher {
    pub fn new(topics: Arc<Topics>, storage: Arc<dyn Storage>, sync: Arc<SyncQueue>) -> Flusher {
        Flusher {
            topics,
            storage,
            sync,
            lock: Mutex::new(()),
            gathered: Mutex::new(HashMap::new()),
        }
    }

    /// Holds off every pass (a topic's deletion marks its extents meanwhile).
    pub fn hold(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().recover()
    }

    /// Makes everything published so far durable and catches up progress slots; seals
    /// finished extents. Completes the tickets it covers; a failure poisons the Wal.
    pub fn flush(&self) -> Result<()> {
        self.flush_pass(false)
    }

    /// [`Flusher::flush`]; `closing`: appends have stopped, and active extents are marked
    /// `Clean` in the same write.
    pub fn flush_pass(&self, closing: bool) -> Result<()> {
        self.sync.check()?;
        let upto = self.sync.begin_pass();
        let result = self.flush_extents(if closing { Pass::Close } else { Pass::Flush });
        self.sync.end_pass(upto, &result);
        result
    }

    fn flush_extents(&self, pass: Pass) -> Result<()> {
        let closing = pass == Pass::Close;
        let _flushing = self.hold();
        for topic in self.topics.all() {
            // Another process deleted it and marked its extents: a sync here would write
            // over the marks.
            if self.topics.deleted_elsewhere(&topic) {
                continue;
            }
            if self.topics.is_shared_mode()
                && let Some(slot) = topic.slot()
            {
                self.flush_topic_shared(&topic, slot, pass)?;
                continue;
            }
            // Loaded before the extents' publication words: the pass covers at least this.
            let published = topic.next_offset();
            let mut sealed = Vec::new();
            for block in topic.unsynced() {
                // A consumed extent's file may already be gone: nothing left to make durable.
                if block.is_consumed()
                    || self.sync_extent(&topic, &block, closing, &Cell::new(false))?
                {
                    sealed.push(block);
                }
            }
            if !sealed.is_empty() {
                topic.forget_synced(&sealed);
            }
            topic.note_durable(published);
        }
        Ok(())
    }

    /// Shared mode: makes the records this handle sees in `topic` durable, taking turns with
    /// the other processes (a group commit across them): a process that finds another
    /// syncing waits, and is done when that sync covered its records (`durable next`);
    /// the one whose turn it is syncs what every process published in the topic's newest
    /// extent so far, then moves `durable next` for all. Extents that ended are still
    /// sealed by the process that holds them. A group commit's sync first gathers the
    /// records it expects (`Flusher::gather`).
    fn flush_topic_shared(&self, topic: &Topic, slot: &TopicSlot, pass: Pass) -> Result<()> {
        let closing = pass == Pass::Close;
        let unsynced = topic.unsynced_in_order();
        if unsynced.is_empty() {
            return Ok(());
        }
        let target = topic.next_offset();
        let covered = || !closing && slot.durable_next() >= target;
        // A holder that keeps the turn (stopped, stuck) only costs the batching: this
        // process then syncs on its own (progress slots stay under the append lock).
        let turn = match slot.sync_turn(covered, SYNC_TURN_WAIT) {
            Ok(Some(turn)) => Some(Some(turn)),
            Ok(None) => None,
            Err(Error::LockTimeout { .. }) => Some(None),
            Err(e) => return Err(e),
        };
        let mut sealed = Vec::new();
        // Once the seal lock is not had in time, this pass seals nothing more of the topic.
        let seals_blocked = Cell::new(false);
        if turn.is_none() {
            for block in unsynced.iter().filter(|b| b.final_state().is_some()) {
                if block.is_consumed() || self.sync_extent(topic, block, closing, &seals_blocked)? {
                    sealed.push(Arc::clone(block));
                }
            }
            topic.forget_synced(&sealed);
            topic.note_durable(slot.durable_next().min(target));
            return Ok(());
        }
        crate::process::crash_point("sync-turn");
        // A group commit first gathers what it expects: `(durable next then, sync start)`.
        let group = (pass == Pass::Group).then(|| {
            let durable_before = slot.durable_next();
            self.gather(topic.id, slot, durable_before);
            (durable_before, Instant::now())
        });
        // What the others published in the newest extent, this sync covers too.
        if let Some(snap) = slot.snapshot_held()
            && let Some(last) = topic.with_chain(|c| c.last().cloned())
            && (last.file.seq, last.block_index) == (snap.tail.file_seq, snap.tail.block_index)
        {
            topic.follow_published(&last, &snap);
        }
        let published = topic.next_offset();
        for block in topic.unsynced_in_order() {
            if block.is_consumed() || self.sync_extent(topic, &block, closing, &seals_blocked)? {
                sealed.push(block);
            }
        }
        topic.forget_synced(&sealed);
        // Loaded before the others are woken: their next appends belong to the next group.
        let gathered = group.map(|(durable_before, started)| Gathered {
            records: slot.next_offset().saturating_sub(durable_before),
            sync: started.elapsed(),
        });
        // Only as far as every extent below is synced (extents this handle only follows
        // are made durable by their writers).
        topic.note_durable(topic.synced_through(published));
        if let Some(gathered) = gathered {
            self.gathered.lock().recover().insert(topic.id, gathered);
        }
        drop(turn);
        Ok(())
    }

    /// A group commit's sync turn in shared mode, before its sync: waits until as many
    /// records wait for durability as the last group commit this process synced in the
    /// topic covered or saw published while it ran, for at most `GATHER_MAX` and
    /// `1 / GATHER_SHARE` of that sync's duration. Without it, processes whose records a
    /// sync covered append again while the next one already runs with the others' records,
    /// and the groups stay split in two. The expectation follows the appenders within one
    /// group: one fewer costs one wait to the bound, and the next waits for one fewer.
    fn gather(&self, topic_id: u32, slot: &TopicSlot, durable_before: u64) {
        let Some(last) = self.gathered.lock().recover().get(&topic_id).copied() else {
            return;
        };
        let window = (last.sync / GATHER_SHARE).min(GATHER_MAX);
        let enough = || slot.next_offset().saturating_sub(durable_before) >= last.records;
        let deadline = Instant::now() + window;
        // Yields rather than sleeps: the others need the CPU to append (on few CPUs), and a
        // sleep would have every publish wake this thread with a system call.
        while !enough() && Instant::now() < deadline {
            std::thread::yield_now();
        }
    }

    /// Syncs `block` of `topic` (see `Extent::sync`); in shared mode its progress slot is
    /// written under the topic's append lock, if it comes within `PROGRESS_LOCK_WAIT`, and
    /// its seal under the seal lock, if it comes within `SEAL_LOCK_WAIT` and did not fail to
    /// come earlier in the pass (`seals_blocked`); see `Extent::sync_shared`.
    fn sync_extent(
        &self,
        topic: &Topic,
        block: &Extent,
        closing: bool,
        seals_blocked: &Cell<bool>,
    ) -> Result<bool> {
        let storage = self.storage.as_ref();
        match topic.slot().filter(|_| self.topics.is_shared_mode()) {
            Some(slot) => {
                let durable = slot.durable_next().max(topic.durable_next());
                let seal_lock = || {
                    if seals_blocked.get() {
                        return None;
                    }
                    let guard = slot.seal_lock(SEAL_LOCK_WAIT).ok();
                    seals_blocked.set(guard.is_none());
                    guard
                };
                let locks = (seal_lock, || slot.lock(PROGRESS_LOCK_WAIT).ok());
                block.sync_shared(storage, &topic.name, closing, durable, locks)
            }
            None => block.sync(storage, &topic.name, closing),
        }
    }

    /// A group commit's I/O. Per data file: the extents whose new bytes fit a commit copy
    /// get their claim and copy written (`Extent::stage_commit`), then one msync over the
    /// span of the file's new data (and those headers) makes records, claims and copies
    /// durable together; the other extents get their progress slot written after it, and
    /// synced with one more msync. So what is on disk claims every record this commit
    /// acknowledges: recovery and read-only handles see them as durable.
    pub fn sync_group(&self) -> Result<()> {
        if self.topics.is_shared_mode() {
            // Other processes write these progress slots too: one extent at a time, each
            // under its topic's append lock.
            return self.flush_extents(Pass::Group);
        }
        let _flushing = self.hold();
        let (spans, published) = self.unsynced_spans();
        for (lo, hi, blocks) in spans.into_values() {
            let Some((first, ..)) = blocks.first() else {
                continue;
            };
            let file = Arc::clone(&first.file);
            // Extents whose new bytes fit a commit copy get it (and their claim) in this
            // msync: one sync for them. The others are claimed after it, in a second one.
            let mut lo = lo;
            let mut staged = Vec::with_capacity(blocks.len());
            for (block, count, end, topic) in &blocks {
                let copy = block.stage_commit(&topic.name, *count, *end, topic.durable_next())?;
                if copy == Some(true) {
                    lo = lo.min(block.abs(0));
                }
                staged.push(copy.is_some());
            }
            self.storage
                .sync_map(&file.map, &file.path, lo, hi - lo)
                .map_err(|e| Error::io("msync", &file.path, e))?;
            let mut slots: Option<(usize, usize)> = None;
            for ((block, count, end, _), staged) in blocks.iter().zip(staged) {
                if staged {
                    block.note_committed(*end);
                } else if let Some(at) = block.note_synced(*count, *end) {
                    let (slo, shi) = slots.get_or_insert((at, at));
                    *slo = (*slo).min(at);
                    *shi = (*shi).max(at + format::PG_LEN);
                }
            }
            if let Some((slo, shi)) = slots {
                self.storage
                    .sync_map(&file.map, &file.path, slo, shi - slo)
                    .map_err(|e| Error::io("msync", &file.path, e))?;
            }
        }
        for (topic, next) in published {
            topic.note_durable(next);
        }
        Ok(())
    }

    /// Per data file: the span holding unsynced records and the extents (with their new
    /// count and end) it covers; and each topic's next offset, loaded before its extents'
    /// publication words, so the spans cover every record below it.
    fn unsynced_spans(&self) -> (BTreeMap<u64, Span>, Published) {
        let mut spans: BTreeMap<u64, Span> = BTreeMap::new();
        let topics = self.topics.all();
        let mut published = Vec::with_capacity(topics.len());
        for topic in topics {
            let next = topic.next_offset();
            for block in topic.unsynced() {
                let Some((from, count, end)) = block.unsynced_range() else {
                    continue;
                };
                let (lo, hi) = (block.abs(from), block.abs(end));
                let span = spans
                    .entry(block.file.seq)
                    .or_insert_with(|| (lo, hi, Vec::new()));
                span.0 = span.0.min(lo);
                span.1 = span.1.max(hi);
                span.2.push((block, count, end, Arc::clone(&topic)));
            }
            published.push((topic, next));
        }
        (spans, published)
    }
}

/// Each topic and its next offset as loaded before a sync: the records the sync covers.
type Published = Vec<(Arc<Topic>, u64)>;

/// A file's span to sync, `(from, to)` in file bytes, and its extents with new records
/// (their count and end, and their topic).
type Span = (usize, usize, Vec<(Arc<Extent>, u64, u64, Arc<Topic>)>);

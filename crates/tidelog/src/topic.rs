//! A topic: its chain of extents, its append path (reserve under a short lock, then checksum
//! and copy with no lock held, then publish in offset order) and offset/time lookup.
//!
//! Two locks guard the writer's state. The tail lock, a spin lock, is held only for the few
//! loads and stores of a reservation (no syscall, no wait, no blocking allocation under it).
//! The slow work on the tail is done with it released, by a holder of the topic's `slow`
//! mutex (which parks its waiters): a roll's allocation (which may wait up to `space_wait`
//! for disk space, create a data file, `fallocate`) and the new extent's set-up, and a
//! ring-fronted append's journal write (which may wait up to the ring's buffer wait). While
//! that work runs the tail is marked busy: nobody else reserves, and appenders that find it
//! busy sleep on `slow` until it is done. Close, deletion and the start of an ingest take
//! `slow` first, so they never change the tail under that work.

use std::hash::{BuildHasher, Hasher};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Duration;

use crate::alloc::BlockAllocator;
use crate::batch::{self, BatchHead};
use crate::clock::{self, Clock};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::format::{self, FrameError, FrameFields, IndexEntry};
use crate::io::Storage;
use crate::poison::Recover;
use crate::prefault::{PREFAULT_AHEAD_BYTES, Prefaulter};
use crate::record;
pub use crate::record::Append;
use crate::ring::RingAppend;
use crate::shared::{ExtentEnd, NO_EXTENT, Snapshot, TopicSlot, Watch};
use crate::spin::{SpinGuard, SpinLock};
use crate::sync::SyncQueue;

/// Spins, then yields, before an appender waiting for its predecessors parks.
const PUBLISH_SPINS: u32 = 128;
const PUBLISH_YIELDS: u32 = 8;
/// Bound on a missed wake-up of a parked appender.
const PARK_TIMEOUT: Duration = Duration::from_micros(200);
/// How long an append sleeps between looks while a staged job is being published.
const INGEST_WAIT: Duration = Duration::from_micros(200);
/// Padded bytes an append's records take in an extent of either frame version: one batch
/// frame (counted once), or one version-1 frame per record (counted when an extent of those
/// or a roll asks).
#[derive(Debug, Clone, Copy)]
struct FramesLen<'r, 'a> {
    records: &'r [Append<'a>],
    batch: u64,
}

impl<'r, 'a> FramesLen<'r, 'a> {
    fn new(records: &'r [Append<'a>], now: u64) -> Self {
        FramesLen {
            records,
            batch: batch::frame_len(record::batch_records(records, now)),
        }
    }

    fn frames(self) -> u64 {
        self.records
            .iter()
            .map(|r| format::frame_padded_len(r.payload_len()))
            .sum()
    }

    /// The bytes in `block`.
    fn in_extent(self, block: &Extent) -> u64 {
        if block.batched() {
            self.batch
        } else {
            self.frames()
        }
    }

    /// The bytes in whichever extent a roll gets.
    fn most(self) -> u64 {
        self.frames().max(self.batch)
    }
}

/// Everything an append needs from its `Wal`.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub storage: &'a dyn Storage,
    pub alloc: &'a BlockAllocator,
    pub config: &'a Config,
    pub clock: &'a Clock,
    /// How long a roll waits for disk space under the cap.
    pub space_wait: Duration,
    /// Copy frames into the file with `pwrite` instead of through the mapping (`Always`
    /// appends: see `Topic::write_through`).
    pub write_through: bool,
    /// Poisoned when a `pwrite` fails.
    pub sync: &'a SyncQueue,
    /// Populates pages ahead of the tail (`None` for handles without the thread).
    pub prefault: Option<&'a Prefaulter>,
    /// The write each append makes under its reservation before its frames (the ring
    /// backend's journal entry); `None` when the data files are the only copy.
    pub reserved: Option<&'a dyn ReservedWrite>,
    /// The append publishes a staged job (it alone may append while the topic ingests).
    pub ingest: bool,
}

/// Offsets an append reserved and has not published yet; dropped unpublished (a panic
/// between the reservation and the publish), it publishes them anyway.
struct Reserved<'a> {
    topic: &'a Topic,
    block: &'a Extent,
    first: u64,
    n: u64,
    count_after: u64,
    end: u64,
}

impl Reserved<'_> {
    /// Publishes the records, in offset order.
    #[inline]
    fn publish(self) {
        let this = std::mem::ManuallyDrop::new(self);
        this.topic
            .publish(this.block, this.first, this.n, this.count_after, this.end);
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.topic
            .publish(self.block, self.first, self.n, self.count_after, self.end);
    }
}

/// A write an append makes under its topic's reservation, before its frames are copied, so
/// that a topic's writes there are in offset order (the ring backend's journal). The topic
/// layer knows no backend beyond this.
pub trait ReservedWrite: Sync + std::fmt::Debug {
    /// Writes `records` of `topic`, the first at offset `first`, stamped `now_us` where they
    /// carry no timestamp; returns the handle that completes once the write is durable.
    fn write(
        &self,
        topic: &str,
        first: u64,
        records: &[Append<'_>],
        now_us: u64,
    ) -> Result<RingAppend>;
}

/// Writer-side state, under the topic lock.
#[derive(Debug, Default)]
pub struct Tail {
    pub block: Option<Arc<Extent>>,
    /// Next free position in `block`.
    pub pos: u64,
    /// Records reserved in `block`.
    pub count: u64,
    /// Offset the next append gets.
    pub next_offset: u64,
    /// Position of the last index entry in `block`.
    pub last_index_pos: Option<u64>,
    /// Largest timestamp reserved in the topic so far.
    pub max_ts: u64,
    /// Set on close and on deletion: no more appends.
    pub closed: bool,
    /// A staged job is being published into the topic: other appends wait.
    pub ingesting: bool,
    /// Position in `block` up to which pages were asked to be prefaulted.
    pub prefaulted_to: u64,
    /// A holder of `Topic::slow` works on the tail with the tail lock released (a roll, a
    /// journal write): nobody else reserves until it is cleared; appenders wait on `slow`.
    pub busy: bool,
}

impl Tail {
    /// Lets the open extent go, with its reserved records and end: the next append starts a
    /// new extent.
    fn take_block(&mut self) -> (Option<Arc<Extent>>, u64, u64) {
        let taken = (self.block.take(), self.count, self.pos);
        self.pos = 0;
        self.count = 0;
        self.last_index_pos = None;
        self.prefaulted_to = 0;
        taken
    }
}

/// A topic and its extents.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: u32,
    /// Held only for the loads and stores of a reservation or of a roll's install (see the
    /// module doc).
    tail: SpinLock<Tail>,
    /// Serializes the slow work on the tail (rolls, journal writes) and the changes that must
    /// not interleave with it (close, deletion, the start of an ingest). Held across waits,
    /// so it parks.
    slow: Mutex<()>,
    /// Offset after the last published record.
    published_next: AtomicU64,
    /// Extents in offset order.
    chain: RwLock<Vec<Arc<Extent>>>,
    /// Extents the flusher still has to make durable or seal.
    unsynced: Mutex<Vec<Arc<Extent>>>,
    /// Serializes passes that drop consumed extents from the chain's front.
    reclaim: Mutex<()>,
    /// The topic was deleted (readers report it as unknown).
    deleted: AtomicBool,
    /// Appenders parked until their predecessors publish: `(first offset, thread)`.
    parking: Mutex<Vec<(u64, std::thread::Thread)>>,
    /// `parking.len()`, read without the lock on every publish.
    parked: AtomicU32,
    /// Offset after the last durable record (as far as this process knows).
    durable_next: AtomicU64,
    /// The topic's slot in the shared state file: the writer reports each publish, roll and
    /// sync there, and wakes readers of every process.
    slot: OnceLock<TopicSlot>,
    /// Shared mode: the slot's publish sequence after this handle's last publish or
    /// line-up; the same value under the append lock means nobody published since.
    lined_seq: AtomicU64,
    /// The log start as this handle knows it (`Wal::delete_records`; only grows); the
    /// slot's word carries other processes' moves.
    log_start: AtomicU64,
}

impl Topic {
    pub fn new(name: String, id: u32) -> Topic {
        Topic {
            name,
            id,
            tail: SpinLock::new(Tail::default()),
            slow: Mutex::new(()),
            published_next: AtomicU64::new(0),
            chain: RwLock::new(Vec::new()),
            unsynced: Mutex::new(Vec::new()),
            reclaim: Mutex::new(()),
            deleted: AtomicBool::new(false),
            parking: Mutex::new(Vec::new()),
            parked: AtomicU32::new(0),
            durable_next: AtomicU64::new(0),
            slot: OnceLock::new(),
            lined_seq: AtomicU64::new(u64::MAX),
            log_start: AtomicU64::new(0),
        }
    }

    /// The first offset readers may read after `Wal::delete_records` (0: never moved). It
    /// may lie inside the first extent of the chain, or past it until retention drops it.
    pub fn log_start(&self) -> u64 {
        let own = self.log_start.load(Ordering::Acquire);
        self.slot().map_or(own, |s| own.max(s.log_start()))
    }

    /// Raises the log start to `offset` (never lowers it), in this handle and for every
    /// process sharing the directory.
    pub fn raise_log_start(&self, offset: u64) {
        self.log_start.fetch_max(offset, Ordering::AcqRel);
        if let Some(slot) = self.slot() {
            slot.raise_log_start(offset);
        }
    }

    /// Gives the topic its slot in the shared state file (once), and reports there what is
    /// published and durable now.
    pub fn attach_slot(&self, slot: TopicSlot) {
        let next = self.next_offset();
        // An extent with no record published is named as none: another process that
        // recovers the directory drops it.
        if let Some(last) = self.chain().last().filter(|b| b.published().0 > 0) {
            // A recovered extent the writer does not continue in is closed.
            let closed = self.tail().block.is_none();
            slot.publish(extent_end(last), next, last.max_timestamp_us(), closed);
        } else {
            slot.publish(
                ExtentEnd {
                    file_seq: NO_EXTENT,
                    block_index: 0,
                    first_offset: next,
                    records: 0,
                    end: format::BLOCK_HEADER_BYTES,
                },
                next,
                0,
                false,
            );
        }
        slot.note_durable(self.durable_next());
        slot.raise_log_start(self.log_start.load(Ordering::Acquire));
        let _ = self.slot.set(slot);
    }

    /// Gives the topic the slot another process reports it in (shared mode), reporting
    /// nothing: that process's report is newer than this handle's.
    pub fn set_slot(&self, slot: TopicSlot) {
        self.note_durable(slot.durable_next().min(self.next_offset()));
        let _ = self.slot.set(slot);
    }

    /// Shared mode, under the topic's append lock: true unless the slot's publish sequence
    /// is the one this handle left (nobody published since its own last publish or
    /// line-up: the common case, one load).
    #[inline]
    pub fn published_since(&self, slot: &TopicSlot) -> bool {
        slot.publish_seq() != self.lined_seq.load(Ordering::Relaxed)
    }

    /// Shared mode, under the append lock: records that the tail is lined up with the slot
    /// as of publish sequence `seq`.
    pub fn note_lined_up(&self, seq: u64) {
        self.lined_seq.store(seq, Ordering::Relaxed);
    }

    /// Shared mode, under the topic's append lock: true when the tail is where the slot
    /// `snap` says.
    #[inline]
    pub fn is_lined_up(&self, snap: &Snapshot) -> bool {
        let tail = self.tail();
        !snap.closed
            && tail.next_offset == snap.next_offset
            && tail.block.as_ref().is_some_and(|b| {
                (b.file.seq, b.block_index) == (snap.tail.file_seq, snap.tail.block_index)
                    && tail.pos == snap.tail.end
            })
    }

    /// Shared mode, under the topic's append lock: moves the tail to what the slot `snap`
    /// reports (other processes appended meanwhile). `block` is this handle's copy of the
    /// extent `snap` names (`None`: the topic has no extent yet). False when the report does
    /// not fit it (nothing is moved).
    pub fn line_up(&self, block: Option<&Arc<Extent>>, snap: &Snapshot) -> bool {
        let mut tail = self.tail();
        let Some(block) = block else {
            // No extent, or this handle's own empty one (recovered, not reported).
            let fits = snap.next_offset >= tail.next_offset
                && (tail.block.is_none()
                    || (tail.count == 0 && tail.next_offset == snap.next_offset));
            if fits {
                tail.next_offset = snap.next_offset;
                drop(tail);
                self.published_next
                    .fetch_max(snap.next_offset, Ordering::AcqRel);
            }
            return fits;
        };
        let (records, end) = (snap.tail.records, snap.tail.end);
        // A closed extent's records may reach past this open's footer reserve (written
        // under a coarser index interval), never past the extent.
        // An extent this handle knows as final where the slot's snapshot ends (a roll whose
        // writer died before its first publish, seen by this handle) is closed too.
        let closed = snap.closed || block.final_state() == Some((records, end));
        let limit = if closed { block.len } else { block.data_limit };
        let fits = end <= limit
            && end >= format::BLOCK_HEADER_BYTES
            && block.first_offset.checked_add(records) == Some(snap.next_offset)
            && (closed || block.final_state().is_none());
        if !fits {
            return false;
        }
        if closed {
            // Nobody appends there again: the next append here rolls.
            if block.final_state().is_none() {
                block.publish_at_least(records, end);
                block.set_final(records, end);
            }
            if let Some(old) = tail.block.take() {
                old.release_writer();
            }
            tail.pos = 0;
            tail.count = 0;
            tail.last_index_pos = None;
            tail.prefaulted_to = 0;
            tail.next_offset = snap.next_offset;
            tail.max_ts = tail.max_ts.max(snap.max_timestamp_us);
            drop(tail);
            self.published_next
                .fetch_max(snap.next_offset, Ordering::AcqRel);
            return true;
        }
        let same = tail.block.as_ref().is_some_and(|b| Arc::ptr_eq(b, block));
        if !same {
            // Held only where this handle allocated it (its file's counts have it); the
            // file's deletion is decided by a handle alone anyway.
            if let Some(old) = tail.block.take() {
                old.release_writer();
            }
            tail.last_index_pos = None;
            tail.prefaulted_to = 0;
            self.unsynced.lock().recover().push(Arc::clone(block));
        }
        if !same || tail.pos != end {
            // Index entries of records other processes wrote are not known here: the next
            // record this handle writes gets one.
            if tail.pos != end {
                tail.last_index_pos = None;
            }
            tail.block = Some(Arc::clone(block));
            tail.pos = end;
            tail.count = records;
            tail.next_offset = snap.next_offset;
            tail.max_ts = tail.max_ts.max(snap.max_timestamp_us);
            block.set_max_timestamp(block.max_timestamp_us().max(snap.max_timestamp_us));
            block.publish_at_least(records, end);
            self.published_next
                .fetch_max(snap.next_offset, Ordering::AcqRel);
        }
        true
    }

    /// The topic's slot in the shared state file, if it has one.
    pub fn slot(&self) -> Option<&TopicSlot> {
        self.slot.get()
    }

    /// Deleted, by this handle or (its slot released or marked `deleting`) by another
    /// process: its readers and writers get `UnknownTopic`.
    #[inline]
    pub fn is_gone(&self) -> bool {
        self.is_deleted() || self.slot().is_some_and(TopicSlot::is_gone)
    }

    /// Offset after the last record known to be durable.
    #[inline]
    pub fn durable_next(&self) -> u64 {
        self.durable_next.load(Ordering::Acquire)
    }

    /// Every record below `next_offset` is durable: wakes readers that wait for that.
    pub fn note_durable(&self, next_offset: u64) {
        let before = self.durable_next.fetch_max(next_offset, Ordering::AcqRel);
        if next_offset > before
            && let Some(slot) = self.slot.get()
        {
            slot.note_durable(next_offset);
        }
    }

    /// The offset below which recovery found every record on disk: an extent with records
    /// past its durable point counts as durable from its first offset on (the first sync
    /// moves it on).
    pub fn durable_from_recovery(&self) -> u64 {
        for block in self.chain() {
            let (_, end) = block.published();
            if block.sync_state().synced_end < end {
                return block.first_offset;
            }
        }
        self.next_offset()
    }

    /// The offset below which every record this handle holds is durable, up to `published`:
    /// the first offset of the first extent not synced through its published end (shared
    /// mode, where a handle also holds extents other processes write and sync).
    pub fn synced_through(&self, published: u64) -> u64 {
        self.with_chain(|chain| {
            chain
                .iter()
                .find(|b| !b.is_synced())
                .map_or(published, |b| b.first_offset.min(published))
        })
    }

    /// A read-only handle moves to what the writer reported in the shared state `snap`: its
    /// records published in `block` (this handle's last extent), and the next offset. False
    /// when the report does not fit the extent (a stale or damaged state file): nothing is
    /// moved.
    pub fn follow_published(&self, block: &Extent, snap: &Snapshot) -> bool {
        let (records, end, next_offset) = (snap.tail.records, snap.tail.end, snap.next_offset);
        let (known_records, known_end) = block.published();
        let fits = end <= block.data_limit
            && end >= known_end
            && records >= known_records
            && block.first_offset.checked_add(records) == Some(next_offset)
            && (records > known_records) == (end > known_end);
        if fits && records > known_records {
            block.set_max_timestamp(block.max_timestamp_us().max(snap.max_timestamp_us));
            block.publish_at_least(records, end);
            self.published_next.fetch_max(next_offset, Ordering::AcqRel);
        }
        fits
    }

    /// Wakes this topic's readers in every process (close and deletion: they then see it).
    pub fn wake_readers(&self) {
        if let Some(slot) = self.slot.get() {
            slot.wake(Watch::Published);
            slot.wake(Watch::Durable);
        }
    }

    /// Refuses further appends (close, or deletion when `deleting`) and waits until every
    /// append already reserved is published. False when the topic was already deleted.
    pub fn stop_appends(&self, deleting: bool) -> bool {
        // After the slow work in progress (a roll's space wait ends at close: the allocator
        // was shut down first).
        let slow = self.slow_lock();
        let mut tail = self.tail();
        if deleting && self.deleted.swap(true, Ordering::AcqRel) {
            return false;
        }
        tail.closed = true;
        let reserved = tail.next_offset;
        drop(tail);
        drop(slow);
        // Bounded: between its reservation and its publish an append only checksums and
        // copies (or `pwrite`s) its records and waits for its predecessors to publish. In
        // shared mode other processes' records may be published past this handle's tail.
        while self.next_offset() < reserved {
            std::thread::yield_now();
        }
        true
    }

    /// Another process deleted the topic: appends stop (as [`Topic::stop_appends`]) and its
    /// extents leave this handle's view. False when it was deleted here already.
    pub fn drop_deleted(&self) -> bool {
        if !self.stop_appends(true) {
            return false;
        }
        self.trim_front(|_| false);
        true
    }

    /// Makes the topic exclusive to a staged job's ingest: later appends wait, and this
    /// returns once every append already reserved is published, with the next offset.
    pub fn begin_ingest(&self) -> Result<u64> {
        let slow = self.slow_lock();
        let mut tail = self.tail();
        if tail.closed {
            drop(tail);
            return Err(self.closed_error());
        }
        tail.ingesting = true;
        let reserved = tail.next_offset;
        drop(tail);
        drop(slow);
        // Bounded as in `stop_appends`.
        while self.next_offset() < reserved {
            std::thread::yield_now();
        }
        Ok(reserved)
    }

    /// Ends [`Topic::begin_ingest`]: waiting appends go on.
    pub fn end_ingest(&self) {
        self.tail().ingesting = false;
    }

    /// Ends the current extent ahead of extents adopted from a staged segment (the caller
    /// made the topic exclusive with [`Topic::begin_ingest`]): the extent takes no more
    /// records and its writer lets it go, so the next append starts a new extent after the
    /// adopted ones. An empty extent leaves the chain (retired on disk), so no two extents
    /// start at one offset. Returns the next offset and the topic's largest timestamp.
    pub fn end_tail_for_adoption(&self, ctx: &Ctx<'_>) -> Result<(u64, u64)> {
        let mut tail = self.tail();
        debug_assert!(tail.ingesting, "adoption needs the topic exclusive");
        if tail.closed {
            return Err(Error::Closed);
        }
        let (next, max_ts) = (tail.next_offset, tail.max_ts);
        let (old, count, end) = tail.take_block();
        drop(tail);
        let Some(old) = old else {
            return Ok((next, max_ts));
        };
        old.set_final(count, end);
        self.note_final(&old);
        if count == 0 {
            self.chain
                .write()
                .recover()
                .retain(|b| !Arc::ptr_eq(b, &old));
            self.forget_synced(std::slice::from_ref(&old));
            old.retire(ctx.storage, &self.name, format::ProgressState::Consumed)?;
        }
        if old.release_writer() | (count == 0 && old.mark_consumed()) {
            ctx.alloc.doom(&old.file);
        }
        Ok((next, max_ts))
    }

    /// Ends the open extent when it holds records below `target`, so a flush can seal it;
    /// the next append starts a new extent (`Wal::tier_flush`). In shared mode the caller
    /// holds the topic's append lock with the tail lined up.
    #[cfg(feature = "tier")]
    pub fn end_tail_below(&self, ctx: &Ctx<'_>, target: u64) -> Result<()> {
        // Rolls and journal writes hold it while the tail is busy.
        let _slow = self.slow_lock();
        let mut tail = self.tail();
        let ends = tail
            .block
            .as_ref()
            .is_some_and(|b| b.first_offset < target && tail.count > 0);
        if tail.closed || tail.ingesting || !ends {
            return Ok(());
        }
        debug_assert!(!tail.busy, "busy only under `slow`");
        let next = tail.next_offset;
        let (old, count, end) = tail.take_block();
        drop(tail);
        let Some(old) = old else {
            return Ok(());
        };
        old.set_final(count, end);
        self.note_final(&old);
        // Shared mode: other processes line up to a closed extent, so their next append
        // rolls (no append of this process is in flight under the lock).
        if ctx.alloc.is_shared()
            && let Some(slot) = self.slot.get()
        {
            let seq = slot.publish(extent_end(&old), next, old.max_timestamp_us(), true);
            self.lined_seq.store(seq, Ordering::Relaxed);
        }
        if old.release_writer() {
            ctx.alloc.doom(&old.file);
        }
        Ok(())
    }

    /// Appends `blocks`, extents adopted from a staged segment (sealed and durable, their
    /// slots naming this topic), after the topic's records: `records` records from the next
    /// offset on, with timestamps up to `max_ts`. Follows [`Topic::end_tail_for_adoption`].
    pub fn push_adopted(&self, blocks: Vec<Arc<Extent>>, records: u64, max_ts: u64) {
        debug_assert!({
            let tail = self.tail();
            tail.ingesting
                && tail.block.is_none()
                && blocks.first().map(|b| b.first_offset) == Some(tail.next_offset)
        });
        // Into the chain before the tail lock: readers look at none of their records until
        // they are published below.
        self.chain.write().recover().extend(blocks);
        let mut tail = self.tail();
        tail.next_offset += records;
        tail.max_ts = tail.max_ts.max(max_ts);
        // No append is in flight (the topic is exclusive): the records are published at once.
        let next = tail.next_offset;
        drop(tail);
        let slot = self.slot.get();
        if let (Some(slot), Some(last)) = (slot, self.chain().last()) {
            slot.publish(extent_end(last), next, last.max_timestamp_us(), true);
        }
        self.published_next.store(next, Ordering::Release);
        if let Some(slot) = slot {
            slot.wake(Watch::Published);
        }
    }

    /// Reports a rolled extent's end in the shared state, for readers in other processes.
    fn note_final(&self, old: &Extent) {
        if let (Some(slot), Some((records, end))) = (self.slot.get(), old.final_state()) {
            slot.note_final(ExtentEnd {
                records,
                end,
                ..extent_end(old)
            });
        }
    }

    /// What an append or an ingest gets once appends were stopped.
    fn closed_error(&self) -> Error {
        if self.is_deleted() {
            Error::UnknownTopic {
                topic: self.name.clone(),
            }
        } else {
            Error::Closed
        }
    }

    /// True once the topic was deleted.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Taken by a pass that drops consumed extents (one at a time per topic).
    pub fn reclaim_lock(&self) -> MutexGuard<'_, ()> {
        self.reclaim.lock().recover()
    }

    /// Runs `f` over the chain without copying it.
    pub fn with_chain<R>(&self, f: impl FnOnce(&[Arc<Extent>]) -> R) -> R {
        f(&self.chain.read().recover())
    }

    /// Removes the first `n` extents (consumed) from the chain and returns them.
    pub fn drop_front(&self, n: usize) -> Vec<Arc<Extent>> {
        let mut chain = self.chain.write().recover();
        let n = n.min(chain.len());
        chain.drain(..n).collect()
    }

    /// Keeps only the chain's extents for which `keep` holds, from the first such one on
    /// (a read-only refresh after the writer deleted files).
    pub fn trim_front(&self, keep: impl Fn(&Extent) -> bool) {
        let mut chain = self.chain.write().recover();
        let n = chain.iter().take_while(|b| !keep(b)).count();
        chain.drain(..n);
    }

    /// Shared mode, under the append lock with the tail lined up, after a holder of the
    /// lock died: erases what it copied past the published end and never published.
    pub fn erase_unpublished(&self, storage: &dyn Storage) -> Result<()> {
        let (block, pos) = {
            let tail = self.tail();
            (tail.block.clone(), tail.pos)
        };
        match block {
            Some(block) => block.erase_frames_from(storage, pos),
            None => Ok(()),
        }
    }

    /// Shared mode: drops the extents at the front of the chain that the housekeeping
    /// leader retired on disk (never the newest: it carries the next offset), and lets the
    /// flusher forget them.
    pub fn drop_retired_front(&self) {
        // Judged outside the chain's lock (each look takes the extent's sync state).
        let front: Vec<Arc<Extent>> = {
            let chain = self.chain.read().recover();
            let candidates = chain.len().saturating_sub(1);
            chain[..candidates].to_vec()
        };
        let retired: Vec<Arc<Extent>> = front
            .into_iter()
            .take_while(|b| b.final_state().is_some() && b.check_retired_on_disk())
            .collect();
        let dropped: Vec<Arc<Extent>> = {
            let mut chain = self.chain.write().recover();
            let n = chain
                .iter()
                .zip(&retired)
                .take_while(|(a, b)| Arc::ptr_eq(a, b))
                .count();
            chain.drain(..n).collect()
        };
        self.forget_synced(&dropped);
    }

    /// Empties the chain and the flusher's list (topic deletion); returns the chain.
    pub fn take_all(&self) -> Vec<Arc<Extent>> {
        self.unsynced.lock().recover().clear();
        std::mem::take(&mut *self.chain.write().recover())
    }

    pub fn tail(&self) -> SpinGuard<'_, Tail> {
        self.tail.lock()
    }

    fn slow_lock(&self) -> MutexGuard<'_, ()> {
        self.slow.lock().recover()
    }

    /// Offset the next published record will have.
    #[inline]
    pub fn next_offset(&self) -> u64 {
        self.published_next.load(Ordering::Acquire)
    }

    /// First offset still stored on disk (the chain's first; records below the log start
    /// may still be stored, unreadable, until their extent goes).
    pub fn first_offset(&self) -> u64 {
        let chain = self.chain.read().recover();
        chain
            .first()
            .map_or_else(|| self.next_offset(), |b| b.first_offset)
    }

    /// Bytes of published records (frames with padding) across the chain.
    pub fn bytes(&self) -> u64 {
        let chain = self.chain.read().recover();
        chain
            .iter()
            .map(|b| b.published().1 - format::BLOCK_HEADER_BYTES)
            .sum()
    }

    pub fn extent_count(&self) -> usize {
        self.chain.read().recover().len()
    }

    /// Installs recovered state (recovery, before the topic is shared).
    pub fn restore(&self, chain: Vec<Arc<Extent>>, unsynced: Vec<Arc<Extent>>, tail: Tail) {
        self.published_next
            .store(tail.next_offset, Ordering::Release);
        *self.chain.write().recover() = chain;
        *self.unsynced.lock().recover() = unsynced;
        *self.tail() = tail;
    }

    /// Adds extents a read-only refresh discovered and moves the published offset.
    pub fn extend_read_only(&self, blocks: Vec<Arc<Extent>>, next_offset: u64, flush: bool) {
        if flush {
            self.unsynced
                .lock()
                .recover()
                .extend(blocks.iter().filter(|b| !b.is_synced()).cloned());
        }
        if !blocks.is_empty() {
            self.chain.write().recover().extend(blocks);
        }
        self.published_next.fetch_max(next_offset, Ordering::AcqRel);
    }

    /// The chain, for the flusher and recovery.
    pub fn chain(&self) -> Vec<Arc<Extent>> {
        self.chain.read().recover().clone()
    }

    /// Extents waiting for the flusher.
    pub fn unsynced(&self) -> Vec<Arc<Extent>> {
        self.unsynced.lock().recover().clone()
    }

    /// Extents waiting for the flusher, in offset order: a sync claims an extent's records
    /// durable only after those of every earlier one.
    pub fn unsynced_in_order(&self) -> Vec<Arc<Extent>> {
        let mut list = self.unsynced();
        list.sort_by_key(|b| b.first_offset);
        list
    }

    /// Drops sealed extents from the flusher's list.
    pub fn forget_synced(&self, sealed: &[Arc<Extent>]) {
        let mut list = self.unsynced.lock().recover();
        list.retain(|b| !sealed.iter().any(|s| Arc::ptr_eq(s, b)));
    }

    /// Appends `records` as one crash-atomic batch; returns their offsets, and with a
    /// journal the ring append that makes them durable.
    pub fn append(
        &self,
        ctx: &Ctx<'_>,
        records: &[Append<'_>],
    ) -> Result<(Range<u64>, Option<RingAppend>)> {
        let n = records.len() as u64;
        debug_assert!(n > 0);
        let now = if records.iter().any(|r| r.timestamp_us.is_none()) {
            ctx.clock.now_us()
        } else {
            0
        };
        let sizes = FramesLen::new(records, now);
        let interval = ctx.config.index_interval_bytes;

        // A ring-fronted append holds `slow` from here to its reservation: its journal write
        // runs with the tail lock released (see below).
        let mut slow = ctx.reserved.map(|_| self.slow_lock());
        let mut reserved_ahead = false;
        // Reserve: offsets, positions and index entries, under the tail lock.
        let mut tail = loop {
            let tail = self.tail();
            if tail.closed {
                break tail;
            }
            if tail.ingesting && !ctx.ingest {
                // A staged job is being published into the topic: wait with no lock held.
                // The wait ends with the publish: its guard (`wal::publish`'s `Exclusive`)
                // ends the ingest however the publish ends, error or panic included, and
                // the publish's own waits are bounded; close and deletion (`closed`) end it
                // at once with their error.
                drop(tail);
                let held = slow.take().is_some();
                std::thread::sleep(INGEST_WAIT);
                if held {
                    slow = Some(self.slow_lock());
                }
                continue;
            }
            if tail.busy {
                // Another appender rolls or writes its journal entry: sleep until it is done.
                debug_assert!(slow.is_none(), "busy only under `slow`");
                drop(tail);
                drop(self.slow_lock());
                continue;
            }
            let fits = tail
                .block
                .as_ref()
                .is_some_and(|b| tail.pos + sizes.in_extent(b) <= b.data_limit);
            if fits {
                // Disk space ahead of the records is reserved in steps, with the tail lock
                // released (a `fallocate`); then the reservation is looked at again. Once
                // tried, only bytes not backed yet make it try again (a disk that is full
                // ahead but not here lets the append go on).
                let end = tail.pos + tail.block.as_ref().map_or(0, |b| sizes.in_extent(b));
                let short = tail
                    .block
                    .as_ref()
                    .filter(|b| b.reserve_due(end) && (!reserved_ahead || end > b.reserved()))
                    .map(Arc::clone);
                let Some(block) = short else {
                    break tail;
                };
                drop(tail);
                block.ensure_reserved(ctx.storage, end)?;
                reserved_ahead = true;
                continue;
            }
            drop(tail);
            if let Some(tail) = self.roll(ctx, sizes, &mut slow)? {
                break tail;
            }
        };
        if tail.closed {
            drop(tail);
            return Err(self.closed_error());
        }
        let Some(block) = tail.block.clone() else {
            return Err(Error::Closed);
        };
        let first = tail.next_offset;
        // The journal entry goes in before the reservation, with `slow` held and the tail
        // busy, so no other append takes offsets meanwhile and a topic's entries lie in the
        // ring in offset order. The ring may wait for a free block buffer, up to its bound
        // (`ring::writer::BUFFER_WAIT`), then fails with `RingFull`: nothing is reserved, so
        // a failure leaves the topic as it was (a roll only moved it to an empty extent).
        let ring = match ctx.reserved {
            Some(reserved) => {
                tail.busy = true;
                drop(tail);
                let busy = Busy(self);
                let written = reserved.write(&self.name, first, records, now);
                tail = self.tail();
                tail.busy = false;
                busy.done();
                debug_assert_eq!(tail.next_offset, first);
                Some(written?)
            }
            None => None,
        };
        let start_pos = tail.pos;
        let total = sizes.in_extent(&block);
        // A batch frame's records after its first have no index entry (nor position) of
        // their own.
        let batched = block.batched();
        let mut pos = start_pos;
        for (i, r) in records.iter().enumerate() {
            tail.max_ts = tail.max_ts.max(r.timestamp_us.unwrap_or(now));
            if (i == 0 || !batched)
                && tail
                    .last_index_pos
                    .is_none_or(|last| pos - last >= interval)
            {
                block.push_index(IndexEntry {
                    offset: first + i as u64,
                    position: pos,
                    max_timestamp_us: tail.max_ts,
                });
                tail.last_index_pos = Some(pos);
            }
            if !batched {
                pos += format::frame_padded_len(r.payload_len());
            }
        }
        debug_assert!(batched || pos == start_pos + total);
        pos = start_pos + total;
        // Only lock holders write it, so a plain store suffices.
        block.set_max_timestamp(tail.max_ts);
        tail.pos = pos;
        tail.count += n;
        tail.next_offset += n;
        let count_after = tail.count;
        let prefault = self.prefault_window(ctx, &mut tail, &block);
        drop(tail);
        drop(slow);
        if let (Some(prefaulter), Some((position, len))) = (ctx.prefault, prefault) {
            prefaulter.request(&block.file, position, len);
        }

        // From here to the publish, a panic (in the copy, or in a storage that panics) must
        // not leave these offsets reserved for ever: every later appender of the topic and
        // close wait for them. The guard publishes them as they stand; the panic poisons the
        // handle, so nothing after them is acknowledged.
        let reserved = Reserved {
            topic: self,
            block: &block,
            first,
            n,
            count_after,
            end: start_pos + total,
        };

        // Checksum and copy, no lock held.
        if ctx.write_through {
            let result = self.write_through(ctx, &block, records, first, now, start_pos, total);
            reserved.publish();
            return result.map(|()| (first..first + n, ring));
        }
        if block.batched() {
            block.write_in_place(start_pos, total, |out| {
                self.encode_frames(&block, records, first, now, out);
            });
            crate::process::crash_point("append-copied");
            reserved.publish();
            return Ok((first..first + n, ring));
        }
        let mut pos = start_pos;
        let mut small = [0u8; format::SMALL_FRAME_MAX];
        for (i, r) in records.iter().enumerate() {
            let fields = self.frame_fields(records, i, first, now);
            let parts = r.parts();
            if r.payload_len() as usize <= format::SMALL_PAYLOAD_MAX {
                // One checksum pass and one copy for the whole frame.
                let len = format::encode_small_frame(&fields, block.salt, &parts, &mut small);
                block.write_encoded(pos, &small[..len]);
            } else {
                let header = format::encode_frame_header(&fields, block.salt, &parts);
                block.write_frame(pos, &header, &parts);
            }
            pos += format::frame_padded_len(r.payload_len());
        }
        debug_assert_eq!(pos, start_pos + total);
        crate::process::crash_point("append-copied");
        reserved.publish();
        Ok((first..first + n, ring))
    }

    /// Encodes the frames of `records` into one buffer and writes it at `start_pos` with one
    /// `pwrite`. Used for `Always` appends: the page cache is shared with the mapping, so
    /// readers see the bytes as if copied through it, but a `pwrite` takes no page fault and
    /// does not re-dirty a write-protected page after every sync (each msync cleans the pages
    /// it wrote and the next store into them would fault again, with a TLB shootdown).
    /// A failed `pwrite` falls back to the mapping (so the offsets can still be published),
    /// poisons the Wal and returns the error: nothing after it is acknowledged.
    #[expect(clippy::too_many_arguments, reason = "the append's reserved state")]
    fn write_through(
        &self,
        ctx: &Ctx<'_>,
        block: &Extent,
        records: &[Append<'_>],
        first: u64,
        now: u64,
        start_pos: u64,
        total: u64,
    ) -> Result<()> {
        let mut buf = vec![0u8; total as usize];
        self.encode_frames(block, records, first, now, &mut buf);
        let file = &block.file;
        let at = block.start + start_pos;
        match ctx.storage.write_at(&file.file, &file.path, &buf, at) {
            Ok(()) => Ok(()),
            Err(e) => {
                block.write_encoded(start_pos, &buf);
                let err = Error::io("pwrite", &file.path, e);
                ctx.sync.poison(&err);
                Err(err)
            }
        }
    }

    /// Encodes the frames of `records` (offsets from `first`) as `block` stores them into
    /// `buf`, exactly their length: one batch frame, or a frame each.
    fn encode_frames(
        &self,
        block: &Extent,
        records: &[Append<'_>],
        first: u64,
        now: u64,
        buf: &mut [u8],
    ) {
        if block.batched() {
            let head = BatchHead {
                topic_id: self.id,
                base_offset: first,
                base_timestamp_us: records[0].timestamp_us.unwrap_or(now),
            };
            batch::encode(buf, &head, block.salt, record::batch_records(records, now));
            return;
        }
        let mut at = 0;
        for (i, r) in records.iter().enumerate() {
            let fields = self.frame_fields(records, i, first, now);
            at += format::encode_frame_into(&mut buf[at..], &fields, block.salt, &r.parts());
        }
        debug_assert_eq!(at, buf.len());
    }

    /// Header fields of record `i` of a batch starting at offset `first` (its head record
    /// carries the batch size).
    #[inline]
    fn frame_fields(&self, records: &[Append<'_>], i: usize, first: u64, now: u64) -> FrameFields {
        let r = &records[i];
        FrameFields {
            topic_id: self.id,
            offset: first + i as u64,
            timestamp_us: r.timestamp_us.unwrap_or(now),
            batch_count: if i == 0 { records.len() as u32 } else { 0 },
        }
    }

    /// Publishes `[first, first + n)` once every earlier offset is published.
    #[inline]
    fn publish(&self, block: &Extent, first: u64, n: u64, count_after: u64, end: u64) {
        let mut spins = 0u32;
        while self.published_next.load(Ordering::Acquire) != first {
            spins += 1;
            if spins < PUBLISH_SPINS {
                std::hint::spin_loop();
            } else if spins < PUBLISH_SPINS + PUBLISH_YIELDS {
                // A predecessor is still copying, maybe descheduled on a busy core.
                std::thread::yield_now();
            } else {
                // Many appenders on few cores: sleep until our predecessor wakes us, rather
                // than all of them yielding to each other.
                self.park_until_published(first);
            }
        }
        block.publish(count_after, end);
        let next = first + n;
        let slot = self.slot.get();
        if let Some(slot) = slot {
            // Before the topic's own next offset: the next publisher waits for that, so
            // the slot has one writer at a time.
            let tail = ExtentEnd {
                records: count_after,
                end,
                ..extent_end(block)
            };
            let seq = slot.publish(tail, next, block.max_timestamp_us(), false);
            self.lined_seq.store(seq, Ordering::Relaxed);
        }
        self.published_next.store(next, Ordering::Release);
        if self.parked.load(Ordering::Relaxed) > 0 {
            self.unpark(next);
        }
        if let Some(slot) = slot {
            slot.wake(Watch::Published);
        }
    }

    /// Parks the calling thread until the records before `first` are published.
    #[cold]
    fn park_until_published(&self, first: u64) {
        let me = std::thread::current();
        self.parking.lock().recover().push((first, me.clone()));
        self.parked.fetch_add(1, Ordering::SeqCst);
        // The publisher stores, then reads `parked` without a full fence: a wake-up it misses
        // costs at most the park timeout.
        while self.published_next.load(Ordering::SeqCst) != first {
            std::thread::park_timeout(PARK_TIMEOUT);
        }
        let mut list = self.parking.lock().recover();
        if let Some(i) = list
            .iter()
            .position(|(f, t)| *f == first && t.id() == me.id())
        {
            list.swap_remove(i);
        }
        self.parked.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes the appender waiting to publish at `next`.
    #[cold]
    fn unpark(&self, next: u64) {
        let list = self.parking.lock().recover();
        for (_, t) in list.iter().filter(|(f, _)| *f == next) {
            t.unpark();
        }
    }

    /// Moves the topic to a new extent with room for `need` bytes and returns the tail lock,
    /// held, for the caller to reserve there; `None` when the caller is to look again
    /// (another appender rolled meanwhile, or the topic closed or ingests). Takes `slow`
    /// into `slow` unless held already (the caller lets it go after the tail lock), marks
    /// the tail busy, and does the slow part with the tail lock released: the allocation (it
    /// may wait up to `ctx.space_wait` for disk space, which close ends with `Closed`; create
    /// a data file; `fallocate`) and the new extent's identity slot and chain entry. The
    /// install is a few stores under the tail lock.
    fn roll<'t>(
        &'t self,
        ctx: &Ctx<'_>,
        sizes: FramesLen<'_, '_>,
        slow: &mut Option<MutexGuard<'t, ()>>,
    ) -> Result<Option<SpinGuard<'t, Tail>>> {
        let took = slow.is_none();
        if took {
            *slow = Some(self.slow_lock());
        }
        let (first, ending) = {
            let mut tail = self.tail();
            let fits = tail
                .block
                .as_ref()
                .is_some_and(|b| tail.pos + sizes.in_extent(b) <= b.data_limit);
            if fits || tail.closed || (tail.ingesting && !ctx.ingest) {
                drop(tail);
                if took {
                    *slow = None;
                }
                return Ok(None);
            }
            debug_assert!(!tail.busy, "busy only under `slow`");
            tail.busy = true;
            (tail.next_offset, tail.block.clone().map(|b| (b, tail.pos)))
        };
        // Nobody reserves, closes or starts an ingest until the tail is no longer busy.
        let busy = Busy(self);
        // The extent that ends gets its index footer's space now: its seal then stores
        // nothing where disk space may lack. A full disk fails this append, nothing changed.
        if let Some((old, end)) = &ending {
            old.ensure_reserved(ctx.storage, *end + old.footer_bytes_bound(*end))?;
        }
        let interval = ctx.config.index_interval_bytes;
        let extent = ctx
            .alloc
            .allocate(ctx.storage, sizes.most(), interval, ctx.space_wait)?;
        let block = Arc::new(Extent::new(
            extent.file,
            extent.block_index,
            extent.extent_count,
            self.id,
            new_salt(),
            first,
            interval,
            Some(Vec::new()),
        ));
        block.note_reserved(extent.reserved_bytes);
        let written = block.write_identity(&self.name);
        ctx.alloc.identity_written(block.file.seq);
        written?;
        crate::process::crash_point("roll-identity");
        block.hold();
        // In the chain before the install: no offset of it is published until then, and the
        // current extent is not final yet, so readers do not look for it.
        self.chain.write().recover().push(Arc::clone(&block));
        self.unsynced.lock().recover().push(Arc::clone(&block));
        // The old extent ends where its reservations end (none is made while the tail is
        // busy), and its writer lets it go, with the tail lock released: that may queue its
        // file for deletion (a mutex) or drop the last reference to it.
        let (old, count, end) = {
            let mut tail = self.tail();
            (tail.block.take(), tail.count, tail.pos)
        };
        if let Some(old) = old {
            old.set_final(count, end);
            self.note_final(&old);
            if old.release_writer() {
                ctx.alloc.doom(&old.file);
            }
        }
        // Shared mode: the new extent is named before any record is copied into it, so a
        // holder that dies copying leaves frames past a published end (erased at the next
        // line-up), never an extent nobody knows that holds records.
        if ctx.alloc.is_shared()
            && let Some(slot) = self.slot.get()
        {
            let seq = slot.publish(extent_end(&block), first, block.max_timestamp_us(), false);
            self.lined_seq.store(seq, Ordering::Relaxed);
        }
        let mut tail = self.tail();
        debug_assert_eq!(tail.next_offset, first);
        tail.block = Some(block);
        tail.pos = format::BLOCK_HEADER_BYTES;
        tail.count = 0;
        tail.last_index_pos = None;
        tail.prefaulted_to = 0;
        tail.busy = false;
        busy.done();
        Ok(Some(tail))
    }

    /// The file range to prefault once the tail is within half a window of the pages
    /// already asked for (none for `pwrite` appends, which take no page faults).
    fn prefault_window(
        &self,
        ctx: &Ctx<'_>,
        tail: &mut Tail,
        block: &Extent,
    ) -> Option<(u64, u64)> {
        if ctx.prefault.is_none()
            || ctx.write_through
            || tail.pos + PREFAULT_AHEAD_BYTES / 2 < tail.prefaulted_to
        {
            return None;
        }
        let from = tail.prefaulted_to.max(tail.pos);
        // Never past the disk space reserved (a populate there would allocate it).
        let to = (tail.pos + PREFAULT_AHEAD_BYTES)
            .min(block.data_limit)
            .min(block.reserved());
        if to <= from {
            return None;
        }
        tail.prefaulted_to = to;
        Some((block.start + from, to - from))
    }

    /// The extent holding `offset` (the last whose first offset is at or below it).
    pub fn extent_for(&self, offset: u64) -> Option<Arc<Extent>> {
        let chain = self.chain.read().recover();
        let i = chain.partition_point(|b| b.first_offset <= offset);
        (i > 0).then(|| Arc::clone(&chain[i - 1]))
    }

    /// The extent after `block`, once it exists.
    pub fn extent_after(&self, block: &Extent) -> Option<Arc<Extent>> {
        let (count, _) = block.final_state()?;
        let next_first = block.first_offset + count;
        let chain = self.chain.read().recover();
        let i = chain.partition_point(|b| b.first_offset < next_first);
        chain
            .get(i)
            .filter(|b| b.first_offset == next_first && !std::ptr::eq(b.as_ref(), block))
            .cloned()
    }

    /// The first extent whose records may reach `timestamp_us`.
    pub fn extent_for_time(&self, timestamp_us: u64) -> Option<Arc<Extent>> {
        let chain = self.chain.read().recover();
        let i = chain.partition_point(|b| b.max_timestamp_us() < timestamp_us);
        chain.get(i).cloned()
    }

    /// Position of `offset` (which must be published) inside `block`.
    pub fn position_in(&self, block: &Extent, offset: u64) -> Result<u64> {
        let (mut pos, mut at) = block.index_floor_offset(&self.name, offset)?;
        while at < offset {
            let view = block
                .frame_at(pos, at, false)
                .map_err(|e| block.corruption(&self.name, at, pos, e))?;
            pos = view.next_position as u64;
            at += 1;
        }
        Ok(pos)
    }

    /// Finds the first offset at or after which records have `timestamp >= timestamp_us`.
    /// Returns `(block, position, offset)`, or `None` when no stored record qualifies.
    pub fn seek_time(&self, timestamp_us: u64) -> Result<Option<(Arc<Extent>, u64, u64)>> {
        let Some(mut block) = self.extent_for_time(timestamp_us) else {
            return Ok(None);
        };
        let (mut pos, mut at) = block.index_floor_time(&self.name, timestamp_us)?;
        loop {
            match block.frame_at(pos, at, false) {
                Ok(view) => {
                    if view.timestamp_us >= timestamp_us {
                        return Ok(Some((block, pos, at)));
                    }
                    pos = view.next_position as u64;
                    at += 1;
                }
                Err(FrameError::End) => {
                    let Some(next) = self.extent_after(&block) else {
                        return Ok(None);
                    };
                    if block.final_state().map(|f| f.1) != Some(pos) {
                        return Ok(None);
                    }
                    block = next;
                    pos = format::BLOCK_HEADER_BYTES;
                    at = block.first_offset;
                }
                Err(e) => return Err(block.corruption(&self.name, at, pos, e)),
            }
        }
    }
}

/// Clears [`Tail::busy`] when dropped, however the slow work that set it ended (an error,
/// a panic), so appenders waiting on `slow` do not wait for ever.
struct Busy<'a>(&'a Topic);

impl Busy<'_> {
    /// The work cleared the flag itself (under the tail lock, which the drop would take).
    fn done(self) {
        std::mem::forget(self);
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.tail().busy = false;
    }
}

/// A fresh checksum seed for a new extent.
pub(crate) fn new_salt() -> u32 {
    // RandomState is seeded per process and advanced per instance; mixing in the time keeps
    // salts distinct across restarts too.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(clock::now_us());
    h.finish() as u32
}

/// `block` and what of it is published, as the shared state file reports it.
fn extent_end(block: &Extent) -> ExtentEnd {
    let (records, end) = block.published();
    ExtentEnd {
        file_seq: block.file.seq,
        block_index: block.block_index,
        first_offset: block.first_offset,
        records,
        end,
    }
}

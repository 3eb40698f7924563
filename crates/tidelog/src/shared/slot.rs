//! One topic's slot in the shared state file: the published snapshot (two copies, so a
//! publisher that dies half-way leaves the last complete one current), the durable offset,
//! the futex words readers sleep on, the lock words of the topic's appends and progress
//! slots, and the ring of extents the last rolls closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

use super::lock::{self, Acquired};
use super::{SharedState, WAIT_SLICE};
use crate::error::Result;
use crate::extent::{pack, unpack};
use crate::futex;

/// `KEY_TAG | topic id`; 0 is a free slot, `KEY_TOMBSTONE` a released one.
pub const S_KEY: usize = 0;
/// Sequence of the published snapshot: bumped by 2 after each publish; the current copy is
/// `(seq / 2) % 2`. A publisher writes the other copy, then bumps the sequence.
pub const S_PUB_SEQ: usize = 8;
/// The two copies of the published snapshot, each `COPY_BYTES`: see `C_*`.
pub const S_COPIES: usize = 16;
pub const COPY_BYTES: usize = 48;
/// In a copy: the extent holding the newest published record, its file's sequence number
/// plus one (0: the topic has no extent yet)...
pub const C_FILE_SEQ: usize = 0;
/// ...its first block in that file (bit 63: `CLOSED`)...
pub const C_BLOCK: usize = 8;
/// In `C_BLOCK`: the extent takes no more records (recovered as final, or adopted): the next
/// append starts a new one.
pub const CLOSED: u64 = 1 << 63;
/// ...and its first offset.
pub const C_FIRST_OFFSET: usize = 16;
/// `pack(records, end)` published in that extent.
pub const C_PUBLISHED: usize = 24;
/// The offset after the newest published record.
pub const C_NEXT_OFFSET: usize = 32;
/// The largest timestamp published in that extent (an upper bound).
pub const C_MAX_TIMESTAMP: usize = 40;
/// The offset after the newest durable record (only grows).
pub const S_DURABLE_NEXT: usize = 112;
/// Futex words: bumped on a publish (when someone waits), and readers waiting on it.
pub const S_PUB_NOTIFY: usize = 120;
pub const S_PUB_WAITERS: usize = 124;
/// Futex words: bumped when the durable offset moves (when someone waits), and readers.
pub const S_DURABLE_NOTIFY: usize = 128;
pub const S_DURABLE_WAITERS: usize = 132;
/// Lock word of the topic's appends (shared mode): its holder alone reserves, copies, rolls
/// and publishes.
pub const S_APPEND_LOCK: usize = 136;
/// Lock word of the topic's sync turn (shared mode): its holder makes what is published
/// durable and moves `durable next`; others wait for that instead of syncing themselves.
pub const S_SYNC_TURN: usize = 140;
/// Sequence of the finals ring (odd while a roll writes an entry).
pub const S_ROLL_SEQ: usize = 144;
/// Rolls recorded so far; entry `rolls % FINALS` is the next to write.
pub const S_ROLLS: usize = 152;
/// The ring of the last `FINALS` extents closed by a roll: file sequence, block, first
/// offset and `pack(records, end)` at which each ended.
pub const S_FINALS: usize = 160;
pub const FINAL_BYTES: usize = 32;
pub const FINALS: usize = 2;
/// Set (1) when a holder of the append lock died: it may have copied frames past the
/// published end that it never published. The next holder that lines the topic up erases
/// them (`Topic::erase_unpublished`) before anything is appended, then clears it.
pub const S_REPAIR: usize = S_FINALS + FINALS * FINAL_BYTES;
/// The lock-word value of the process publishing a staged job into the topic (0: none),
/// set under the append lock from before the job's start offset is taken until the job is
/// published. Appenders wait while it is set, also after that process died: the job's
/// ledger counts the records after its start as the job's, so nothing else may follow
/// them until the next publisher has finished the job (`wal::publish`).
pub const S_PUBLISHER: usize = S_REPAIR + 4;
/// The lock-word value of the process deleting the topic (0: none), set under the append
/// lock once the deletion begins, until the slot is released at its end. Every process
/// treats a topic so marked as deleted; after that process died, the next holder of the
/// publish turn finishes the deletion (`wal::delete`).
pub const S_DELETING: usize = S_PUBLISHER + 4;
/// Lock word of the topic's seals (shared mode): only its holder writes an extent's index
/// footer and the `Sealed` slot that names the footer's checksum, so a seal's msyncs run
/// without the append lock and no other process writes a footer of its own meanwhile.
pub const S_SEAL_LOCK: usize = S_DELETING + 4;
/// The topic's log start (`Wal::delete_records`; only grows): every process reads no record
/// below it. Its durable copy is the topic's log start file (`crate::start`).
pub const S_LOG_START: usize = S_SEAL_LOCK + 4;

pub const SLOT_BYTES: usize = 256;
pub const KEY_TAG: u64 = 1 << 32;
pub const KEY_TOMBSTONE: u64 = u64::MAX;

const _: () = assert!(S_COPIES + 2 * COPY_BYTES == S_DURABLE_NEXT);
const _: () = assert!(C_MAX_TIMESTAMP + 8 == COPY_BYTES);
const _: () = assert!(S_SYNC_TURN + 4 == S_ROLL_SEQ);
const _: () = assert!(S_PUBLISHER == S_REPAIR + 4);
const _: () = assert!(S_DELETING == S_PUBLISHER + 4);
const _: () = assert!(S_SEAL_LOCK == S_DELETING + 4);
const _: () = assert!(S_LOG_START == S_SEAL_LOCK + 4 && S_LOG_START.is_multiple_of(8));
const _: () = assert!(S_LOG_START + 8 <= SLOT_BYTES);

/// `file_seq` of an [`ExtentEnd`] that names no extent (a topic with none yet).
pub const NO_EXTENT: u64 = u64::MAX;

/// Where an extent's published records end, as the writer reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentEnd {
    /// [`NO_EXTENT`] when the topic has no extent yet.
    pub file_seq: u64,
    pub block_index: u32,
    pub first_offset: u64,
    pub records: u64,
    pub end: u64,
}

/// A consistent read of a topic slot's published snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The extent of the newest published record.
    pub tail: ExtentEnd,
    pub next_offset: u64,
    /// An upper bound of the timestamps in `tail`.
    pub max_timestamp_us: u64,
    /// `tail` takes no more records: the next append starts a new extent.
    pub closed: bool,
}

/// What a reader waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    Published,
    Durable,
}

/// One topic's slot in one process's mapping.
#[derive(Debug, Clone)]
pub struct TopicSlot {
    pub(super) shared: Arc<SharedState>,
    pub(super) at: usize,
    pub(super) key: u64,
}

/// Longest sleep of a process waiting for the sync turn between two looks.
const TURN_SLEEP: Duration = Duration::from_millis(2);
/// A sync turn held by the same owner this long is checked for a dead holder.
const TURN_STALE: Duration = Duration::from_millis(20);

/// The sync turn of a topic (see [`TopicSlot::sync_turn`]); released when dropped, which
/// wakes the processes waiting for it.
#[derive(Debug)]
pub struct SyncTurn<'a> {
    slot: &'a TopicSlot,
}

impl Drop for SyncTurn<'_> {
    fn drop(&mut self) {
        self.slot.word32(S_SYNC_TURN).store(0, Ordering::Release);
        self.slot.wake(Watch::Durable);
    }
}

/// A held append lock of a topic; released when dropped.
#[derive(Debug)]
pub struct TopicGuard<'a> {
    slot: &'a TopicSlot,
}

impl Drop for TopicGuard<'_> {
    fn drop(&mut self) {
        lock::release(self.slot.word32(S_APPEND_LOCK));
    }
}

/// A held seal lock of a topic (see [`S_SEAL_LOCK`]); released when dropped.
#[derive(Debug)]
pub struct SealGuard<'a> {
    slot: &'a TopicSlot,
}

impl Drop for SealGuard<'_> {
    fn drop(&mut self) {
        lock::release(self.slot.word32(S_SEAL_LOCK));
    }
}

impl TopicSlot {
    fn word64(&self, field: usize) -> &AtomicU64 {
        self.shared.map.atomic_u64(self.at + field)
    }

    fn word32(&self, field: usize) -> &AtomicU32 {
        self.shared.map.atomic_u32(self.at + field)
    }

    fn load(&self, field: usize, order: Ordering) -> u64 {
        self.shared.map.load_u64(self.at + field, order)
    }

    /// Takes the topic's append lock (shared mode), waiting up to `wait` for a live holder.
    /// A publisher that died holding it left the snapshot it was writing in the copy that is
    /// not current, so nothing needs repair there; frames it copied past the published end
    /// are marked for erasing (`S_REPAIR`, done at the next line-up); a roll it cut short
    /// left the finals ring's sequence odd (evened here) and maybe an extent with no
    /// record, never published, which recovery skips.
    pub fn lock(&self, wait: Duration) -> Result<TopicGuard<'_>> {
        let acquired = self
            .shared
            .acquire(self.word32(S_APPEND_LOCK), "topic", wait)?;
        if acquired == Acquired::FromDead {
            self.word32(S_REPAIR).store(1, Ordering::Release);
            let seq = self.word64(S_ROLL_SEQ);
            let s = seq.load(Ordering::Relaxed);
            if s & 1 == 1 {
                // A roll died writing its entry, which may be the older one readers read:
                // the ring is emptied (nobody read the entry under an odd sequence, and
                // readers find extents' ends in the directory without it).
                self.word64(S_ROLLS).store(0, Ordering::Relaxed);
                seq.store(s.wrapping_add(1), Ordering::Release);
            }
        }
        Ok(TopicGuard { slot: self })
    }

    /// Takes the topic's seal lock (shared mode), waiting up to `wait` for a live holder. A
    /// holder that died left at most a footer that no `Sealed` slot names yet (the next
    /// sealer writes its own over it) or a `Sealed` slot in the page cache, which writeback
    /// makes durable: nothing to repair.
    pub fn seal_lock(&self, wait: Duration) -> Result<SealGuard<'_>> {
        self.shared
            .acquire(self.word32(S_SEAL_LOCK), "topic seal", wait)?;
        Ok(SealGuard { slot: self })
    }

    /// Under the append lock: true while frames a dead holder may have left past the
    /// published end still wait to be erased.
    pub fn needs_repair(&self) -> bool {
        self.word32(S_REPAIR).load(Ordering::Acquire) != 0
    }

    /// Under the append lock: the frames past the published end are erased.
    pub fn repaired(&self) {
        self.word32(S_REPAIR).store(0, Ordering::Release);
    }

    /// Under the append lock: the topic is reserved for this process's publish of a staged
    /// job (see [`S_PUBLISHER`]).
    pub fn reserve_for_publish(&self) {
        self.word32(S_PUBLISHER)
            .store(self.shared.owner(), Ordering::Release);
    }

    /// The lock-word value of the process whose publish reserved the topic, or 0.
    pub fn publisher(&self) -> u32 {
        self.word32(S_PUBLISHER).load(Ordering::Acquire)
    }

    /// The reservation ends: the job is published (or a later publisher found it so).
    pub fn end_publish(&self) {
        self.word32(S_PUBLISHER).store(0, Ordering::Release);
    }

    /// Under the append lock: the topic's deletion begins (see [`S_DELETING`]).
    pub fn mark_deleting(&self) {
        self.word32(S_DELETING)
            .store(self.shared.owner(), Ordering::Release);
    }

    /// The pid of the process whose deletion of the topic began (0 when none).
    pub fn deleter_pid(&self) -> u32 {
        self.shared
            .pid_of_owner(self.word32(S_DELETING).load(Ordering::Acquire))
    }

    /// Whether a deletion of the topic began (it ends with [`TopicSlot::release`]).
    pub fn is_deleting(&self) -> bool {
        self.word32(S_DELETING).load(Ordering::Acquire) != 0
    }

    /// True once the topic is deleted for every process: its slot released, or its
    /// deletion begun.
    pub fn is_gone(&self) -> bool {
        self.load(S_KEY, Ordering::Acquire) != self.key || self.is_deleting()
    }

    /// The pid of the process whose publish reserved the topic (0 when unknown).
    pub fn publisher_pid(&self) -> u32 {
        self.shared.pid_of_owner(self.publisher())
    }

    /// Waits for the topic's sync turn (shared mode): `None` once `covered` holds (another
    /// process's sync made this one's records durable meanwhile), or the turn, whose holder
    /// syncs and then moves `durable next` (waking the others) before it drops the guard.
    /// Waiters sleep on the durable word; a holder that died is taken over, a live one
    /// that keeps it past `wait` is `LockTimeout`.
    pub fn sync_turn(
        &self,
        covered: impl Fn() -> bool,
        wait: Duration,
    ) -> Result<Option<SyncTurn<'_>>> {
        let word = self.word32(S_SYNC_TURN);
        let start = std::time::Instant::now();
        let mut seen: Option<(u32, std::time::Instant)> = None;
        loop {
            if covered() {
                return Ok(None);
            }
            let cur = word.load(Ordering::Acquire);
            let taken = if cur == 0 {
                self.shared.try_take(word, 0)
            } else if seen.is_some_and(|(v, at)| v == cur && at.elapsed() >= TURN_STALE)
                && !self.shared.holder_alive(cur)
            {
                self.shared.try_take(word, cur)
            } else {
                false
            };
            if taken {
                return Ok(Some(SyncTurn { slot: self }));
            }
            if seen.is_none_or(|(v, _)| v != cur) {
                seen = Some((cur, std::time::Instant::now()));
            }
            let waited = start.elapsed();
            if waited >= wait {
                return Err(crate::error::Error::LockTimeout {
                    lock: "topic sync",
                    holder_pid: self.shared.pid_of_owner(cur),
                    waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            }
            self.wait(Watch::Durable, TURN_SLEEP, || {
                covered() || word.load(Ordering::Acquire) == 0
            });
        }
    }

    /// The writer records that the records of `tail` up to its end are published, and the
    /// topic's next offset. Publishers of a topic call this one at a time, in offset order
    /// (each after its predecessor's publish, or under the append lock in shared mode),
    /// before they advance the topic's own next offset; [`TopicSlot::wake`] follows.
    #[inline]
    pub fn publish(
        &self,
        tail: ExtentEnd,
        next_offset: u64,
        max_timestamp_us: u64,
        closed: bool,
    ) -> u64 {
        let seq = self.word64(S_PUB_SEQ);
        let s = seq.load(Ordering::Relaxed);
        let copy = S_COPIES + ((s / 2 + 1) % 2) as usize * COPY_BYTES;
        let file = if tail.file_seq == NO_EXTENT {
            0
        } else {
            tail.file_seq + 1
        };
        self.word64(copy + C_FILE_SEQ)
            .store(file, Ordering::Relaxed);
        let closed = if closed { CLOSED } else { 0 };
        self.word64(copy + C_BLOCK)
            .store(u64::from(tail.block_index) | closed, Ordering::Relaxed);
        self.word64(copy + C_FIRST_OFFSET)
            .store(tail.first_offset, Ordering::Relaxed);
        self.word64(copy + C_PUBLISHED)
            .store(pack(tail.records, tail.end), Ordering::Relaxed);
        self.word64(copy + C_NEXT_OFFSET)
            .store(next_offset, Ordering::Relaxed);
        self.word64(copy + C_MAX_TIMESTAMP)
            .store(max_timestamp_us, Ordering::Relaxed);
        let next = (s & !1).wrapping_add(2);
        seq.store(next, Ordering::Release);
        next
    }

    /// The published snapshot's sequence: it moves with every publish, by any process.
    #[inline]
    pub fn publish_seq(&self) -> u64 {
        self.load(S_PUB_SEQ, Ordering::Acquire)
    }

    /// Wakes the readers waiting for `watch`, if any. Called after what they wait for is
    /// visible: the full fence orders those stores before the look at the waiter count, as
    /// a waiter counts itself before it looks at them, so one of the two always sees the
    /// other.
    #[inline]
    pub fn wake(&self, watch: Watch) {
        let (notify, waiters) = words(watch);
        fence(Ordering::SeqCst);
        if self.word32(waiters).load(Ordering::Relaxed) > 0 {
            self.word32(notify).fetch_add(1, Ordering::SeqCst);
            futex::wake_all(self.word32(notify));
        }
    }

    /// The writer records that every record below `next_offset` is durable.
    pub fn note_durable(&self, next_offset: u64) {
        let before = self
            .word64(S_DURABLE_NEXT)
            .fetch_max(next_offset, Ordering::AcqRel);
        if next_offset > before {
            self.wake(Watch::Durable);
        }
    }

    /// Raises the topic's log start to `offset` (never lowers it).
    pub fn raise_log_start(&self, offset: u64) {
        self.word64(S_LOG_START).fetch_max(offset, Ordering::AcqRel);
    }

    /// The topic's log start as any process raised it (0: none).
    pub fn log_start(&self) -> u64 {
        self.load(S_LOG_START, Ordering::Acquire)
    }

    /// The writer records that a roll closed `extent` at its end.
    pub fn note_final(&self, extent: ExtentEnd) {
        let seq = self.word64(S_ROLL_SEQ);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let rolls = self.word64(S_ROLLS).load(Ordering::Relaxed);
        let at = S_FINALS + (rolls as usize % FINALS) * FINAL_BYTES;
        self.word64(at).store(extent.file_seq, Ordering::Relaxed);
        self.word64(at + 8)
            .store(u64::from(extent.block_index), Ordering::Relaxed);
        self.word64(at + 16)
            .store(extent.first_offset, Ordering::Relaxed);
        self.word64(at + 24)
            .store(pack(extent.records, extent.end), Ordering::Relaxed);
        self.word64(S_ROLLS)
            .store(rolls.wrapping_add(1), Ordering::Relaxed);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
    }

    /// The writer gives the slot up (the topic was deleted): lookups pass over it, a later
    /// topic may take it, and its readers find it gone.
    pub fn release(&self) {
        let key = self.word64(S_KEY);
        if key
            .compare_exchange(self.key, KEY_TOMBSTONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.shared.topic_released();
            self.wake(Watch::Published);
            self.wake(Watch::Durable);
        }
    }

    /// True while the slot is still this topic's in the generation it was found in.
    pub fn is_valid(&self) -> bool {
        self.shared.is_current() && self.load(S_KEY, Ordering::Acquire) == self.key
    }

    /// A consistent read of the published snapshot; `None` while publishers overtake the
    /// read for longer than a few tries, or once the slot is no longer this topic's.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let snap = self.read_snapshot()?;
        self.is_valid().then_some(snap)
    }

    /// [`TopicSlot::snapshot`] for the holder of the append lock of a shared-mode handle:
    /// its file cannot be rebuilt while it is open, so only the key is checked.
    pub fn snapshot_held(&self) -> Option<Snapshot> {
        let snap = self.read_snapshot()?;
        (self.load(S_KEY, Ordering::Acquire) == self.key).then_some(snap)
    }

    fn read_snapshot(&self) -> Option<Snapshot> {
        self.read_consistent(S_PUB_SEQ, |s| {
            let copy = S_COPIES + ((s / 2) % 2) as usize * COPY_BYTES;
            let block_word = self.load(copy + C_BLOCK, Ordering::Relaxed);
            let block = u32::try_from(block_word & !CLOSED).ok()?;
            let (records, end) = unpack(self.load(copy + C_PUBLISHED, Ordering::Relaxed));
            let file = self.load(copy + C_FILE_SEQ, Ordering::Relaxed);
            Some(Snapshot {
                tail: ExtentEnd {
                    file_seq: file.checked_sub(1).unwrap_or(NO_EXTENT),
                    block_index: block,
                    first_offset: self.load(copy + C_FIRST_OFFSET, Ordering::Relaxed),
                    records,
                    end,
                },
                next_offset: self.load(copy + C_NEXT_OFFSET, Ordering::Relaxed),
                max_timestamp_us: self.load(copy + C_MAX_TIMESTAMP, Ordering::Relaxed),
                closed: block_word & CLOSED != 0,
            })
        })?
    }

    /// The last `FINALS` extents a roll closed, newest first, read consistently (none while
    /// a roll writes for longer than a few tries).
    pub fn finals(&self) -> Vec<ExtentEnd> {
        self.read_consistent(S_ROLL_SEQ, |_| {
            let rolls = self.load(S_ROLLS, Ordering::Relaxed);
            let mut out = Vec::new();
            for back in 1..=rolls.min(FINALS as u64) {
                let at = S_FINALS + ((rolls - back) as usize % FINALS) * FINAL_BYTES;
                let (records, end) = unpack(self.load(at + 24, Ordering::Relaxed));
                let Ok(block_index) = u32::try_from(self.load(at + 8, Ordering::Relaxed)) else {
                    continue;
                };
                out.push(ExtentEnd {
                    file_seq: self.load(at, Ordering::Relaxed),
                    block_index,
                    first_offset: self.load(at + 16, Ordering::Relaxed),
                    records,
                    end,
                });
            }
            out
        })
        .unwrap_or_default()
    }

    /// Runs `read` (given the sequence) between two loads of the sequence word `seq` until
    /// both are the same even value (nothing it read was changed meanwhile); `None` after a
    /// few tries.
    fn read_consistent<T>(&self, seq: usize, read: impl Fn(u64) -> T) -> Option<T> {
        for _ in 0..64 {
            let before = self.load(seq, Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let value = read(before);
            fence(Ordering::Acquire);
            if self.load(seq, Ordering::Relaxed) == before {
                return Some(value);
            }
        }
        None
    }

    /// The offset after the newest published record.
    pub fn next_offset(&self) -> u64 {
        self.snapshot().map_or(0, |s| s.next_offset)
    }

    /// The offset after the newest durable record.
    pub fn durable_next(&self) -> u64 {
        self.load(S_DURABLE_NEXT, Ordering::Acquire)
    }

    /// Sleeps until the writer wakes `watch` waiters, `timeout` passes (at most
    /// [`WAIT_SLICE`]), or at once when `ready` holds after this reader counted itself as a
    /// waiter. A read-only mapping cannot count itself: it sleeps briefly instead.
    pub fn wait(&self, watch: Watch, timeout: Duration, ready: impl FnOnce() -> bool) {
        let timeout = timeout.min(WAIT_SLICE);
        if !self.shared.writable {
            if !ready() {
                std::thread::sleep(timeout.min(Duration::from_micros(200)));
            }
            return;
        }
        let (notify, waiters) = words(watch);
        self.word32(waiters).fetch_add(1, Ordering::SeqCst);
        let seen = self.word32(notify).load(Ordering::SeqCst);
        if !ready() {
            futex::wait(self.word32(notify), seen, timeout);
        }
        self.word32(waiters).fetch_sub(1, Ordering::SeqCst);
    }

    /// Resets the slot to `key` with nothing published (a claim), keeping its futex words
    /// (sleepers re-check what they wait for).
    pub(super) fn reset(&self, key: u64) {
        for field in [S_DURABLE_NEXT, S_ROLLS, S_LOG_START] {
            self.word64(field).store(0, Ordering::Relaxed);
        }
        for field in (S_COPIES..S_DURABLE_NEXT).step_by(8) {
            self.word64(field).store(0, Ordering::Relaxed);
        }
        let seq = self.word64(S_ROLL_SEQ);
        seq.store(
            (seq.load(Ordering::Relaxed) | 1).wrapping_add(1),
            Ordering::Relaxed,
        );
        self.word32(S_APPEND_LOCK).store(0, Ordering::Relaxed);
        self.word32(S_SYNC_TURN).store(0, Ordering::Relaxed);
        self.word32(S_REPAIR).store(0, Ordering::Relaxed);
        self.word32(S_PUBLISHER).store(0, Ordering::Relaxed);
        self.word32(S_DELETING).store(0, Ordering::Relaxed);
        self.word32(S_SEAL_LOCK).store(0, Ordering::Relaxed);
        self.word64(S_KEY).store(key, Ordering::Release);
    }
}

/// The notify and waiter-count words of `watch`.
fn words(watch: Watch) -> (usize, usize) {
    match watch {
        Watch::Published => (S_PUB_NOTIFY, S_PUB_WAITERS),
        Watch::Durable => (S_DURABLE_NOTIFY, S_DURABLE_WAITERS),
    }
}

//! The shared state file, `tidelog.state`: one `MAP_SHARED` page of header and a table of
//! topic slots through which the writing process tells readers in every process, within
//! microseconds, what it published and what is durable, and wakes those that wait (a futex
//! on a slot word). Nothing in it is durable data: the writer rebuilds it at every open, and
//! a reader trusts it only while its header names this boot and says it is ready. Readers
//! check every record they read against its checksum as before. `docs/FORMAT.md` describes
//! every byte.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::extent::{pack, unpack};
use crate::futex;
use crate::io::Storage;
use crate::mmap::Mapping;

/// The file's name inside the directory.
pub const STATE_FILE: &str = "tidelog.state";

/// `b"TIDESHM1"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TIDESHM1");
/// Bumped whenever a byte of the layout below changes meaning.
pub const LAYOUT_VERSION: u32 = 1;
/// Bytes of the header page; the slot table follows it.
pub const HEADER_BYTES: usize = 4096;
/// Bytes of one topic slot (four cache lines).
pub const SLOT_BYTES: usize = 256;
/// Topic slots in the table (a power of two). Topics beyond it have no slot: readers in
/// other processes see them by polling the directory, as without the file.
pub const SLOTS: usize = 4096;
/// Bytes of the whole file.
pub const FILE_BYTES: usize = HEADER_BYTES + SLOTS * SLOT_BYTES;

// Header fields (byte offsets; every field little-endian, naturally aligned).
pub const H_MAGIC: usize = 0;
pub const H_LAYOUT: usize = 8;
pub const H_SLOTS: usize = 12;
pub const H_SLOT_BYTES: usize = 16;
/// `STATE_BUILDING` while the writer rebuilds the table, `STATE_READY` after.
pub const H_STATE: usize = 20;
/// Bumped by every writer's rebuild: a reader's slot lookups are good for one generation.
pub const H_GENERATION: usize = 24;
/// The kernel's boot id (16 bytes): a file from an earlier boot describes page-cache
/// contents that are gone.
pub const H_BOOT_ID: usize = 32;
/// The writing process's pid, for people (never trusted).
pub const H_WRITER_PID: usize = 48;
pub const STATE_BUILDING: u32 = 1;
pub const STATE_READY: u32 = 2;

// Topic slot fields, relative to the slot.
/// `KEY_TAG | topic id`; 0 is a free slot, `KEY_TOMBSTONE` a released one.
pub const S_KEY: usize = 0;
/// Sequence of the published snapshot below (odd while the writer changes it).
pub const S_PUB_SEQ: usize = 8;
/// The extent holding the newest published record: its file's sequence number...
pub const S_FILE_SEQ: usize = 16;
/// ...its first block in that file...
pub const S_BLOCK: usize = 24;
/// ...and its first offset.
pub const S_FIRST_OFFSET: usize = 32;
/// `pack(records, end)` published in that extent.
pub const S_PUBLISHED: usize = 40;
/// The offset after the newest published record.
pub const S_NEXT_OFFSET: usize = 48;
/// The offset after the newest durable record.
pub const S_DURABLE_NEXT: usize = 56;
/// Futex words: bumped on a publish (when someone waits), and readers waiting on it.
pub const S_PUB_NOTIFY: usize = 64;
pub const S_PUB_WAITERS: usize = 68;
/// Futex words: bumped when the durable offset moves (when someone waits), and readers.
pub const S_DURABLE_NOTIFY: usize = 72;
pub const S_DURABLE_WAITERS: usize = 76;
/// Sequence of the finals ring (odd while a roll writes an entry).
pub const S_ROLL_SEQ: usize = 80;
/// Rolls recorded so far; entry `rolls % FINALS` is the newest.
pub const S_ROLLS: usize = 88;
/// The largest timestamp reserved in the extent of `S_FILE_SEQ` (an upper bound for what
/// is published there), under `S_PUB_SEQ`.
pub const S_MAX_TIMESTAMP: usize = 96;
/// The ring of the last `FINALS` extents closed by a roll: file sequence, block, first
/// offset and `pack(records, end)` at which each ended.
pub const S_FINALS: usize = 128;
pub const FINAL_BYTES: usize = 32;
pub const FINALS: usize = 4;

pub const KEY_TAG: u64 = 1 << 32;
pub const KEY_TOMBSTONE: u64 = u64::MAX;

const _: () = assert!(S_FINALS + FINALS * FINAL_BYTES == SLOT_BYTES);
const _: () = assert!(H_WRITER_PID + 4 <= HEADER_BYTES);
const _: () = assert!(SLOTS.is_power_of_two());
const _: () = assert!(HEADER_BYTES.is_multiple_of(SLOT_BYTES));

/// Longest single futex sleep: a wake lost to a writer that died between its publish and
/// its wake costs at most this.
pub const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Where an extent's published records end, as the writer reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentEnd {
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
}

/// What a reader waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    Published,
    Durable,
}

/// One process's mapping of the shared state file.
#[derive(Debug)]
pub struct SharedState {
    map: Mapping,
    /// Keeps the descriptor the mapping was made from.
    _file: File,
    writable: bool,
    /// The header's generation when this handle built or checked it.
    generation: u64,
    /// This boot's id, read once.
    boot: [u64; 2],
}

impl SharedState {
    /// The writer's open: creates the file (or takes the one there, whatever it holds) and
    /// rebuilds it for this boot and this writer, every slot free. The caller holds the
    /// directory's lock, so no other writer uses the file meanwhile.
    pub fn rebuild(storage: &dyn Storage, dir: &Path) -> Result<SharedState> {
        let path = dir.join(STATE_FILE);
        let file = match storage.open(&path, true) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => storage
                .create_new(&path)
                .or_else(|_| storage.open(&path, true))
                .map_err(|e| Error::io("create shared state file", &path, e))?,
            Err(e) => return Err(Error::io("open shared state file", &path, e)),
        };
        let len = storage
            .file_metadata(&file, &path)
            .map_err(|e| Error::io("stat shared state file", &path, e))?
            .len();
        // Never shrink: readers may map the file, and a shrunk mapping faults.
        if len < FILE_BYTES as u64 {
            storage
                .set_len(&file, &path, FILE_BYTES as u64)
                .map_err(|e| Error::io("size shared state file", &path, e))?;
        }
        let map = Mapping::map(&file, FILE_BYTES as u64, true)
            .map_err(|e| Error::io("map shared state file", &path, e))?;
        let mut state = SharedState {
            map,
            _file: file,
            writable: true,
            generation: 0,
            boot: boot_id(storage),
        };
        state.reset();
        Ok(state)
    }

    /// Marks the file as being rebuilt, wakes every waiter, frees every slot, then writes the
    /// header of this boot and marks it ready under a new generation.
    fn reset(&mut self) {
        let m = &self.map;
        m.atomic_u32(H_STATE)
            .store(STATE_BUILDING, Ordering::SeqCst);
        for i in 0..SLOTS {
            let at = slot_at(i);
            m.atomic_u64(at + S_KEY).store(0, Ordering::Release);
            for (notify, waiters) in [
                (S_PUB_NOTIFY, S_PUB_WAITERS),
                (S_DURABLE_NOTIFY, S_DURABLE_WAITERS),
            ] {
                if m.atomic_u32(at + waiters).load(Ordering::SeqCst) > 0 {
                    m.atomic_u32(at + notify).fetch_add(1, Ordering::SeqCst);
                    futex::wake_all(m.atomic_u32(at + notify));
                }
            }
        }
        m.atomic_u64(H_MAGIC).store(MAGIC, Ordering::Relaxed);
        m.atomic_u32(H_LAYOUT)
            .store(LAYOUT_VERSION, Ordering::Relaxed);
        m.atomic_u32(H_SLOTS).store(SLOTS as u32, Ordering::Relaxed);
        m.atomic_u32(H_SLOT_BYTES)
            .store(SLOT_BYTES as u32, Ordering::Relaxed);
        let boot = self.boot;
        m.atomic_u64(H_BOOT_ID).store(boot[0], Ordering::Relaxed);
        m.atomic_u64(H_BOOT_ID + 8)
            .store(boot[1], Ordering::Relaxed);
        m.atomic_u32(H_WRITER_PID)
            .store(std::process::id(), Ordering::Relaxed);
        self.generation = m
            .atomic_u64(H_GENERATION)
            .fetch_add(1, Ordering::SeqCst)
            .wrapping_add(1);
        m.atomic_u32(H_STATE).store(STATE_READY, Ordering::SeqCst);
    }

    /// A reader's attach: maps the file if a writer of this boot built it (read-write when
    /// the directory lets us, so waits can sleep on a futex; read-only otherwise). `None`
    /// when there is no such file, or it is not ready: the caller polls the directory.
    pub fn attach(storage: &dyn Storage, dir: &Path) -> Option<SharedState> {
        let path = dir.join(STATE_FILE);
        let (file, writable) = match storage.open(&path, true) {
            Ok(f) => (f, true),
            Err(_) => (storage.open(&path, false).ok()?, false),
        };
        let len = storage.file_metadata(&file, &path).ok()?.len();
        if len < FILE_BYTES as u64 {
            return None;
        }
        let map = Mapping::map(&file, FILE_BYTES as u64, writable).ok()?;
        let mut state = SharedState {
            map,
            _file: file,
            writable,
            generation: 0,
            boot: boot_id(storage),
        };
        state.generation = state.current_generation()?;
        Some(state)
    }

    /// The header's generation if the header is ready, of this layout and of this boot.
    fn current_generation(&self) -> Option<u64> {
        let m = &self.map;
        let before = m.load_u64(H_GENERATION, Ordering::Acquire);
        let boot = self.boot;
        let ok = m.load_u32(H_STATE, Ordering::Acquire) == STATE_READY
            && m.load_u64(H_MAGIC, Ordering::Acquire) == MAGIC
            && m.load_u32(H_LAYOUT, Ordering::Acquire) == LAYOUT_VERSION
            && m.load_u32(H_SLOTS, Ordering::Acquire) as usize == SLOTS
            && m.load_u32(H_SLOT_BYTES, Ordering::Acquire) as usize == SLOT_BYTES
            && m.load_u64(H_BOOT_ID, Ordering::Acquire) == boot[0]
            && m.load_u64(H_BOOT_ID + 8, Ordering::Acquire) == boot[1];
        let after = m.load_u64(H_GENERATION, Ordering::Acquire);
        (ok && before == after).then_some(after)
    }

    /// True while the header is ready and of the generation this handle saw.
    pub fn is_current(&self) -> bool {
        self.current_generation() == Some(self.generation)
    }

    /// The writer's claim of a slot for topic `id` (at open and at the topic's creation).
    /// `None` when the table is full.
    pub fn claim(self: &Arc<Self>, id: u32) -> Option<TopicSlot> {
        assert!(self.writable, "only the writer claims slots");
        let key = KEY_TAG | u64::from(id);
        for i in probe(id) {
            let at = slot_at(i);
            let k = self.map.atomic_u64(at + S_KEY).load(Ordering::Acquire);
            if k == 0 || k == KEY_TOMBSTONE || k == key {
                let m = &self.map;
                // Even again, whatever a writer that died mid-publish left.
                let seq = m.atomic_u64(at + S_PUB_SEQ);
                seq.store(
                    (seq.load(Ordering::Relaxed) | 1).wrapping_add(1),
                    Ordering::Relaxed,
                );
                let seq = m.atomic_u64(at + S_ROLL_SEQ);
                seq.store(
                    (seq.load(Ordering::Relaxed) | 1).wrapping_add(1),
                    Ordering::Relaxed,
                );
                for field in [
                    S_FILE_SEQ,
                    S_BLOCK,
                    S_FIRST_OFFSET,
                    S_PUBLISHED,
                    S_NEXT_OFFSET,
                    S_DURABLE_NEXT,
                    S_MAX_TIMESTAMP,
                    S_ROLLS,
                ] {
                    m.atomic_u64(at + field).store(0, Ordering::Relaxed);
                }
                m.atomic_u64(at + S_KEY).store(key, Ordering::Release);
                return Some(self.slot(at, key));
            }
        }
        None
    }

    /// The slot of topic `id`, as a reader finds it; `None` when it has none (the table was
    /// full, or the writer has not created the topic) or the file is not current.
    pub fn find(self: &Arc<Self>, id: u32) -> Option<TopicSlot> {
        if !self.is_current() {
            return None;
        }
        let key = KEY_TAG | u64::from(id);
        for i in probe(id) {
            let at = slot_at(i);
            match self.map.load_u64(at + S_KEY, Ordering::Acquire) {
                0 => return None,
                k if k == key => return Some(self.slot(at, key)),
                _ => {}
            }
        }
        None
    }

    /// Every extent end the slots report (each topic's newest extent and those its last
    /// rolls closed), and each topic's next offset by id; nothing when the file is not
    /// current.
    pub fn reported(self: &Arc<Self>) -> (Vec<ExtentEnd>, Vec<(u32, u64)>) {
        let mut out = Vec::new();
        let mut next = Vec::new();
        if !self.is_current() {
            return (out, next);
        }
        for i in 0..SLOTS {
            let at = slot_at(i);
            let key = self.map.load_u64(at + S_KEY, Ordering::Acquire);
            if key == 0 || key == KEY_TOMBSTONE {
                continue;
            }
            let slot = self.slot(at, key);
            if let Some(snap) = slot.snapshot() {
                out.push(snap.tail);
                out.extend(slot.finals());
                next.push(((key & u64::from(u32::MAX)) as u32, snap.next_offset));
            }
        }
        (out, next)
    }

    fn slot(self: &Arc<Self>, at: usize, key: u64) -> TopicSlot {
        TopicSlot {
            shared: Arc::clone(self),
            at,
            key,
        }
    }
}

/// Position of slot `i` in the file.
fn slot_at(i: usize) -> usize {
    HEADER_BYTES + i * SLOT_BYTES
}

/// The slots topic `id` may occupy, in the order a lookup tries them.
fn probe(id: u32) -> impl Iterator<Item = usize> {
    let home = (u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % SLOTS;
    (0..SLOTS).map(move |i| (home + i) % SLOTS)
}

/// The kernel's boot id as two words; zeros where the kernel does not say (then a reader
/// that reads it does not trust a writer that could not, and falls back to the directory).
fn boot_id(storage: &dyn Storage) -> [u64; 2] {
    let bytes = storage
        .read_file(Path::new("/proc/sys/kernel/random/boot_id"))
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let hex: String = text.chars().filter(char::is_ascii_hexdigit).collect();
    let word = |r: std::ops::Range<usize>| {
        hex.get(r)
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .unwrap_or(0)
    };
    [word(0..16), word(16..32)]
}

/// One topic's slot in one process's mapping.
#[derive(Debug, Clone)]
pub struct TopicSlot {
    shared: Arc<SharedState>,
    at: usize,
    key: u64,
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

    /// The writer records that the records of `tail` up to its end are published, and the
    /// topic's next offset. Publishers of a topic call this one at a time, in offset order
    /// (each after its predecessor's publish), before they advance the topic's own next
    /// offset; [`TopicSlot::wake`] follows that.
    #[inline]
    pub fn publish(&self, tail: ExtentEnd, next_offset: u64, max_timestamp_us: u64) {
        let seq = self.word64(S_PUB_SEQ);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.word64(S_FILE_SEQ)
            .store(tail.file_seq, Ordering::Relaxed);
        self.word64(S_BLOCK)
            .store(u64::from(tail.block_index), Ordering::Relaxed);
        self.word64(S_FIRST_OFFSET)
            .store(tail.first_offset, Ordering::Relaxed);
        self.word64(S_PUBLISHED)
            .store(pack(tail.records, tail.end), Ordering::Relaxed);
        self.word64(S_NEXT_OFFSET)
            .store(next_offset, Ordering::Relaxed);
        self.word64(S_MAX_TIMESTAMP)
            .store(max_timestamp_us, Ordering::Relaxed);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
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
        self.word64(S_DURABLE_NEXT)
            .fetch_max(next_offset, Ordering::AcqRel);
        self.wake(Watch::Durable);
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
            self.wake(Watch::Published);
            self.wake(Watch::Durable);
        }
    }

    /// True while the slot is still this topic's in the generation it was found in.
    pub fn is_valid(&self) -> bool {
        self.shared.is_current() && self.load(S_KEY, Ordering::Acquire) == self.key
    }

    /// A consistent read of the published snapshot; `None` while the writer changes it for
    /// longer than a few tries, or once the slot is no longer this topic's.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let snap = self.read_consistent(S_PUB_SEQ, || {
            let block = u32::try_from(self.load(S_BLOCK, Ordering::Relaxed)).ok()?;
            let (records, end) = unpack(self.load(S_PUBLISHED, Ordering::Relaxed));
            Some(Snapshot {
                tail: ExtentEnd {
                    file_seq: self.load(S_FILE_SEQ, Ordering::Relaxed),
                    block_index: block,
                    first_offset: self.load(S_FIRST_OFFSET, Ordering::Relaxed),
                    records,
                    end,
                },
                next_offset: self.load(S_NEXT_OFFSET, Ordering::Relaxed),
                max_timestamp_us: self.load(S_MAX_TIMESTAMP, Ordering::Relaxed),
            })
        })??;
        self.is_valid().then_some(snap)
    }

    /// The last `FINALS` extents a roll closed, newest first, read consistently (none while
    /// a roll writes for longer than a few tries).
    pub fn finals(&self) -> Vec<ExtentEnd> {
        self.read_consistent(S_ROLL_SEQ, || {
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

    /// Runs `read` between two loads of the sequence word `seq` until both are the same
    /// even value (the writer changed nothing meanwhile); `None` after a few tries.
    fn read_consistent<T>(&self, seq: usize, read: impl Fn() -> T) -> Option<T> {
        for _ in 0..64 {
            let before = self.load(seq, Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let value = read();
            fence(Ordering::Acquire);
            if self.load(seq, Ordering::Relaxed) == before {
                return Some(value);
            }
        }
        None
    }

    /// The offset after the newest published record (one word: no snapshot).
    pub fn next_offset(&self) -> u64 {
        self.load(S_NEXT_OFFSET, Ordering::Acquire)
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
}

/// The notify and waiter-count words of `watch`.
fn words(watch: Watch) -> (usize, usize) {
    match watch {
        Watch::Published => (S_PUB_NOTIFY, S_PUB_WAITERS),
        Watch::Durable => (S_DURABLE_NOTIFY, S_DURABLE_WAITERS),
    }
}

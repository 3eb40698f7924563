//! The shared state file, `tidelog.state`: a `MAP_SHARED` file through which the processes
//! that hold a directory tell each other, and readers in every process, within
//! microseconds, what they published and what is durable, wake those that wait (a futex on
//! a slot word), and take turns (lock words). Nothing in it is durable data: the first
//! process to open a directory rebuilds it from the data files, and a reader trusts it only
//! while its header names this boot and says it is ready. Readers check every record they
//! read against its checksum as before. `docs/FORMAT.md` describes every byte.
//!
//! Layout: a header page (shared-mode allocator cursor and topic ids, their lock words), a
//! page of process slots (each process's generation and pid), the topic slots (`slot`), and
//! the topic names (one entry per slot, so another process can find a topic by name).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::futex;
use crate::io::Storage;
use crate::mmap::Mapping;

pub mod lock;
mod slot;

pub use lock::{Acquired, Liveness, PROCESS_BYTE, PROCESSES};
pub use slot::{ExtentEnd, NO_EXTENT, Snapshot, TopicGuard, TopicSlot, Watch};

use slot::{
    KEY_TAG, KEY_TOMBSTONE, S_DURABLE_NOTIFY, S_DURABLE_WAITERS, S_KEY, S_PUB_NOTIFY,
    S_PUB_WAITERS, SLOT_BYTES,
};

/// The file's name inside the directory.
pub const STATE_FILE: &str = "tidelog.state";

/// `b"TIDESHM1"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TIDESHM1");
/// Bumped whenever a byte of the layout below changes meaning.
pub const LAYOUT_VERSION: u32 = 7;
/// Bytes of the header page.
pub const HEADER_BYTES: usize = 4096;
/// Where the process table starts, and the bytes of one process slot.
pub const PROCESS_TABLE: usize = HEADER_BYTES;
pub const PROCESS_SLOT_BYTES: usize = 16;
/// Where the topic slots start.
pub const SLOT_TABLE: usize = PROCESS_TABLE + PROCESSES * PROCESS_SLOT_BYTES;
/// Topic slots in the table (a power of two). Topics beyond it have no slot: readers in
/// other processes see them by polling the directory, and shared mode cannot create them.
pub const SLOTS: usize = 16384;
/// Where the topic names start: entry `i` names the topic of slot `i`.
pub const NAME_TABLE: usize = SLOT_TABLE + SLOTS * SLOT_BYTES;
/// Bytes of one name entry: the name's length (u32), then the name.
pub const NAME_BYTES: usize = 256;
/// Bytes of the whole file.
pub const FILE_BYTES: usize = NAME_TABLE + SLOTS * NAME_BYTES;

// Header fields (byte offsets; every field little-endian, naturally aligned).
pub const H_MAGIC: usize = 0;
pub const H_LAYOUT: usize = 8;
pub const H_SLOTS: usize = 12;
pub const H_SLOT_BYTES: usize = 16;
/// `STATE_BUILDING` while the first opener rebuilds the file, `STATE_READY` after.
pub const H_STATE: usize = 20;
/// Bumped by every rebuild: a reader's slot lookups are good for one generation.
pub const H_GENERATION: usize = 24;
/// The kernel's boot id (16 bytes): a file from an earlier boot describes page-cache
/// contents that are gone.
pub const H_BOOT_ID: usize = 32;
/// The pid of the process that rebuilt the file, for people (never trusted).
pub const H_WRITER_PID: usize = 48;
/// Lock word of the allocator's cursor below (shared mode).
pub const H_ALLOC_LOCK: usize = 64;
/// Lock word of the topic table: creating a topic, its id and name (shared mode).
pub const H_TOPIC_LOCK: usize = 68;
/// The data file new extents continue in, as its sequence number plus one (0: none yet)...
pub const H_ALLOC_FILE: usize = 72;
/// ...and its first free block.
pub const H_ALLOC_NEXT_BLOCK: usize = 80;
/// The sequence number the next data file gets.
pub const H_NEXT_FILE_SEQ: usize = 88;
/// The id the next topic gets.
pub const H_NEXT_TOPIC_ID: usize = 96;
/// Live topics with a slot.
pub const H_TOPICS: usize = 104;
/// Shared-mode opens since the rebuild: a handle that sees it move knows another process
/// joined since its own open (its per-file counts no longer cover every extent).
pub const H_OPENS: usize = 112;
/// The spare data file, made ahead of need (its sequence number plus one; 0: none): the
/// allocation that finds the current file full continues there instead of creating one.
pub const H_SPARE_FILE: usize = 120;
/// One bit per page of topic slots (16 slots; the page of their names with it): set once
/// the pages are reserved. Pages without it are never touched (on tmpfs even a read of a
/// hole allocates, and faults when the file system is full).
pub const H_PAGES: usize = 128;
/// Topic slots (and names) per page.
pub const SLOTS_PER_PAGE: usize = 4096 / SLOT_BYTES;
/// Bumped by each process that becomes the housekeeping leader (elected by `LEADER_BYTE`
/// of `LOCK`).
pub const H_LEADER_EPOCH: usize = 256;
/// The leader's pid, for people and errors (never trusted).
pub const H_LEADER_PID: usize = 264;
/// Bumped by the leader after it retired extents or deleted data files: the other
/// processes then drop them from their views.
pub const H_RETIRED: usize = 272;
/// When the leader last began a pass (wall clock, microseconds): a leader that stopped
/// (`SIGSTOP`, stuck) keeps the lead, and this shows it.
pub const H_LEADER_BEAT: usize = 280;
pub const STATE_BUILDING: u32 = 1;
pub const STATE_READY: u32 = 2;

// Process slot fields, relative to the slot.
/// Bumped by each process that takes the slot.
pub const P_GENERATION: usize = 0;
/// The process's pid, for errors that name a lock's holder.
pub const P_PID: usize = 4;
/// The data file (sequence number plus one; 0: none) in which this process holds an
/// allocation whose extent identity it has not written yet: set under the allocator lock,
/// cleared once the identity is in place. The leader never deletes such a file.
pub const P_ALLOCATING: usize = 8;

const _: () = assert!(H_PAGES + SLOTS / SLOTS_PER_PAGE / 8 <= H_LEADER_EPOCH);
const _: () = assert!(H_LEADER_BEAT + 8 <= HEADER_BYTES);
const _: () = assert!(P_ALLOCATING + 8 <= PROCESS_SLOT_BYTES);
const _: () = assert!(NAME_BYTES == SLOT_BYTES);
const _: () = assert!(SLOTS.is_power_of_two());
const _: () = assert!(SLOT_TABLE.is_multiple_of(4096));
const _: () = assert!(NAME_TABLE.is_multiple_of(4096));
const _: () = assert!(4 + crate::format::TOPIC_NAME_MAX <= NAME_BYTES);

/// Longest single futex sleep: a wake lost to a writer that died between its publish and
/// its wake costs at most this.
pub const WAIT_SLICE: Duration = Duration::from_millis(100);

/// The shared allocator cursor: where new extents go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The data file new extents continue in, and its first free block.
    pub current: Option<(u64, u32)>,
    /// The sequence number of the next data file.
    pub next_file_seq: u64,
}

/// One process's mapping of the shared state file.
#[derive(Debug)]
pub struct SharedState {
    map: Mapping,
    /// The descriptor the mapping was made from (pages are reserved through it).
    file: File,
    path: std::path::PathBuf,
    storage: Arc<dyn Storage>,
    writable: bool,
    /// The header's generation when this handle built or checked it.
    generation: u64,
    /// This boot's id, read once.
    boot: [u64; 2],
    /// This process's slot in the process table (shared mode), for lock words.
    liveness: OnceLock<Liveness>,
    /// `H_OPENS` after this handle's own open.
    opens: std::sync::atomic::AtomicU64,
}

impl SharedState {
    /// The writer's open: creates the file (or takes the one there, whatever it holds) and
    /// rebuilds it for this boot and this writer, every slot free. The caller holds the
    /// directory's lock, so no other writer uses the file meanwhile.
    pub fn rebuild(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        cursor: Cursor,
        next_topic_id: u32,
    ) -> Result<SharedState> {
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
            file,
            path,
            storage: Arc::clone(storage),
            writable: true,
            generation: 0,
            boot: boot_id(storage.as_ref())?,
            liveness: OnceLock::new(),
            opens: std::sync::atomic::AtomicU64::new(0),
        };
        // The header and process table are written at once; a slot's pages when it is
        // claimed (a store to a page the file system cannot back would be SIGBUS).
        state.reserve(0, SLOT_TABLE)?;
        // Pages the header says were reserved are reserved again (a file from before may
        // say so wrongly): nothing below touches an unbacked page.
        for page in 0..SLOTS / SLOTS_PER_PAGE {
            let i = page * SLOTS_PER_PAGE;
            if state.page_reserved(i) {
                state.reserve(slot_at(i), 4096)?;
                state.reserve(NAME_TABLE + i * NAME_BYTES, 4096)?;
            }
        }
        state.reset(cursor, next_topic_id);
        Ok(state)
    }

    /// Marks the file as being rebuilt, wakes every waiter, frees every slot, then writes the
    /// header of this boot and marks it ready under a new generation.
    fn reset(&mut self, cursor: Cursor, next_topic_id: u32) {
        let m = &self.map;
        m.atomic_u32(H_STATE)
            .store(STATE_BUILDING, Ordering::SeqCst);
        m.atomic_u32(H_ALLOC_LOCK).store(0, Ordering::Relaxed);
        m.atomic_u32(H_TOPIC_LOCK).store(0, Ordering::Relaxed);
        self.store_cursor(cursor);
        m.atomic_u64(H_NEXT_TOPIC_ID)
            .store(u64::from(next_topic_id), Ordering::Relaxed);
        m.atomic_u64(H_TOPICS).store(0, Ordering::Relaxed);
        m.atomic_u64(H_OPENS).store(0, Ordering::Relaxed);
        m.atomic_u64(H_SPARE_FILE).store(0, Ordering::Relaxed);
        m.atomic_u32(H_LEADER_PID).store(0, Ordering::Relaxed);
        m.atomic_u64(H_RETIRED).store(0, Ordering::Relaxed);
        m.atomic_u64(H_LEADER_BEAT).store(0, Ordering::Relaxed);
        for slot in 0..PROCESSES {
            let at = PROCESS_TABLE + slot * PROCESS_SLOT_BYTES + P_ALLOCATING;
            m.atomic_u64(at).store(0, Ordering::Relaxed);
        }
        for i in 0..SLOTS {
            let at = slot_at(i);
            // Only slots ever claimed: the others may be holes, which a store would back.
            if self.key_at(i) == 0 {
                continue;
            }
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
    pub fn attach(storage: &Arc<dyn Storage>, dir: &Path) -> Option<SharedState> {
        let path = dir.join(STATE_FILE);
        let (file, writable) = match storage.open(&path, true) {
            Ok(f) => (f, true),
            Err(_) => (storage.open(&path, false).ok()?, false),
        };
        Self::map_current(storage, path, file, writable)
            .ok()
            .flatten()
    }

    /// A writable handle's join beside other processes: the file mapped read-write (it
    /// registers its process and claims slots there). `None` when the file is not ready or
    /// not of this boot; an error when it cannot be opened or mapped for writing (never a
    /// read-only fallback, which the first write would find).
    pub fn attach_writable(storage: &Arc<dyn Storage>, dir: &Path) -> Result<Option<SharedState>> {
        let path = dir.join(STATE_FILE);
        let file = storage
            .open(&path, true)
            .map_err(|e| Error::io("open shared state", &path, e))?;
        Self::map_current(storage, path, file, true)
    }

    /// Maps the open state `file` if its header is ready, of this layout and of this boot.
    fn map_current(
        storage: &Arc<dyn Storage>,
        path: std::path::PathBuf,
        file: File,
        writable: bool,
    ) -> Result<Option<SharedState>> {
        let len = storage
            .file_metadata(&file, &path)
            .map_err(|e| Error::io("read metadata", &path, e))?
            .len();
        if len < FILE_BYTES as u64 {
            return Ok(None);
        }
        let map = Mapping::map(&file, FILE_BYTES as u64, writable)
            .map_err(|e| Error::io("map shared state", &path, e))?;
        let mut state = SharedState {
            map,
            file,
            path,
            storage: Arc::clone(storage),
            writable,
            generation: 0,
            boot: boot_id(storage.as_ref())?,
            liveness: OnceLock::new(),
            opens: std::sync::atomic::AtomicU64::new(0),
        };
        let Some(generation) = state.current_generation() else {
            return Ok(None);
        };
        state.generation = generation;
        Ok(Some(state))
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

    /// A claim of a slot for topic `id` named `name` (at open, and at the topic's creation,
    /// under the topic lock in shared mode). `None` when the table is full.
    pub fn claim(self: &Arc<Self>, id: u32, name: &str) -> Result<Option<TopicSlot>> {
        assert!(self.writable, "only writers claim slots");
        let key = KEY_TAG | u64::from(id);
        for i in probe(id) {
            let at = slot_at(i);
            // Free slots of pages never claimed read as zero without being backed.
            let k = self.key_at(i);
            if k == 0 || k == KEY_TOMBSTONE || k == key {
                self.reserve_page(i)?;
                // The name first: a lookup by name trusts it once the key is there.
                self.write_name(i, name);
                let slot = self.slot(at, key);
                slot.reset(key);
                if k != key {
                    self.map.atomic_u64(H_TOPICS).fetch_add(1, Ordering::AcqRel);
                }
                return Ok(Some(slot));
            }
        }
        Ok(None)
    }

    /// The key of slot `i`; 0 (free) for a slot whose page was never reserved.
    fn key_at(&self, i: usize) -> u64 {
        if !self.page_reserved(i) {
            return 0;
        }
        self.map.load_u64(slot_at(i) + S_KEY, Ordering::Acquire)
    }

    fn page_reserved(&self, i: usize) -> bool {
        let page = i / SLOTS_PER_PAGE;
        let word = self
            .map
            .load_u64(H_PAGES + page / 64 * 8, Ordering::Acquire);
        word & (1 << (page % 64)) != 0
    }

    /// Reserves the page of slot `i` and the page of its name, and marks them reserved.
    fn reserve_page(&self, i: usize) -> Result<()> {
        if self.page_reserved(i) {
            return Ok(());
        }
        let first = i / SLOTS_PER_PAGE * SLOTS_PER_PAGE;
        self.reserve(slot_at(first), 4096)?;
        self.reserve(NAME_TABLE + first * NAME_BYTES, 4096)?;
        let page = i / SLOTS_PER_PAGE;
        self.map
            .atomic_u64(H_PAGES + page / 64 * 8)
            .fetch_or(1 << (page % 64), Ordering::AcqRel);
        Ok(())
    }

    /// Reserves the file's pages holding `[at, at + len)` (`DiskFull` when the file
    /// system has no room for them).
    fn reserve(&self, at: usize, len: usize) -> Result<()> {
        let page = 4096;
        let from = at / page * page;
        let to = (at + len).div_ceil(page) * page;
        match self
            .storage
            .allocate(&self.file, &self.path, from as u64, (to - from) as u64)
        {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Err(Error::DiskFull {
                path: self.path.clone(),
                requested_bytes: (to - from) as u64,
            }),
            Err(e) => Err(Error::io("fallocate shared state file", &self.path, e)),
        }
    }

    fn write_name(&self, i: usize, name: &str) {
        let at = Self::name_entry(i);
        let mut entry = [0u8; NAME_BYTES];
        entry[..4].copy_from_slice(&(name.len() as u32).to_le_bytes());
        entry[4..4 + name.len()].copy_from_slice(name.as_bytes());
        self.map.write_header(at, &entry);
    }

    /// Where slot `i`'s name entry starts: a u32 length, then the name's bytes.
    fn name_entry(i: usize) -> usize {
        NAME_TABLE + i * NAME_BYTES
    }

    /// The length slot `i`'s name entry gives (not checked against the limit).
    fn name_len(&self, i: usize) -> usize {
        let mut len = [0u8; 4];
        self.map.copy_out(Self::name_entry(i), &mut len);
        u32::from_le_bytes(len) as usize
    }

    fn name_at(&self, i: usize) -> Option<String> {
        let len = self.name_len(i);
        if len == 0 || len > crate::format::TOPIC_NAME_MAX {
            return None;
        }
        let mut name = vec![0u8; len];
        self.map.copy_out(Self::name_entry(i) + 4, &mut name);
        String::from_utf8(name).ok()
    }

    /// Whether slot `i`'s name entry is `name`: its length first, so a lookup reads four
    /// bytes of most entries and allocates nothing.
    fn name_is(&self, i: usize, name: &str) -> bool {
        if name.is_empty() || name.len() > crate::format::TOPIC_NAME_MAX {
            return false;
        }
        if self.name_len(i) != name.len() {
            return false;
        }
        let mut entry = [0u8; crate::format::TOPIC_NAME_MAX];
        let stored = &mut entry[..name.len()];
        self.map.copy_out(Self::name_entry(i) + 4, stored);
        stored == name.as_bytes()
    }

    /// The live topic named `name` and its slot, as another process created it; `None`
    /// when no slot names it (or the file is not current).
    pub fn find_name(self: &Arc<Self>, name: &str) -> Option<(u32, TopicSlot)> {
        if !self.is_current() {
            return None;
        }
        for i in 0..SLOTS {
            let at = slot_at(i);
            let key = self.key_at(i);
            if key == 0 || key == KEY_TOMBSTONE {
                continue;
            }
            if self.name_is(i, name) {
                let id = (key & u64::from(u32::MAX)) as u32;
                return Some((id, self.slot(at, key)));
            }
        }
        None
    }

    /// Every live topic with a slot: its name and id (a process's refresh of the table).
    /// With `deleting`, only the topics whose deletion began instead (see
    /// [`TopicSlot::is_deleting`]), which are no longer live.
    pub fn named(self: &Arc<Self>, deleting: bool) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        if !self.is_current() {
            return out;
        }
        for i in 0..SLOTS {
            let key = self.key_at(i);
            if key == 0 || key == KEY_TOMBSTONE {
                continue;
            }
            if self.slot(slot_at(i), key).is_deleting() != deleting {
                continue;
            }
            if let Some(name) = self.name_at(i) {
                out.push((name, (key & u64::from(u32::MAX)) as u32));
            }
        }
        out
    }

    /// Ends every staged publish's reservation (see [`slot::S_PUBLISHER`]): the caller holds
    /// the publish turn, so no publish holds one.
    pub fn end_publishes(self: &Arc<Self>) {
        for i in 0..SLOTS {
            let key = self.key_at(i);
            if key == 0 || key == KEY_TOMBSTONE {
                continue;
            }
            let slot = self.slot(slot_at(i), key);
            if slot.publisher() != 0 {
                slot.end_publish();
            }
        }
    }

    /// A slot was released (its topic deleted).
    fn topic_released(&self) {
        let _ =
            self.map
                .atomic_u64(H_TOPICS)
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    Some(n.saturating_sub(1))
                });
    }

    /// Live topics with a slot.
    pub fn topic_count(&self) -> u64 {
        self.map.load_u64(H_TOPICS, Ordering::Acquire)
    }

    /// Takes the next topic id (under the topic lock).
    pub fn take_topic_id(&self) -> Option<u32> {
        let word = self.map.atomic_u64(H_NEXT_TOPIC_ID);
        let id = u32::try_from(word.load(Ordering::Acquire)).ok()?;
        word.store(u64::from(id) + 1, Ordering::Release);
        Some(id)
    }

    /// The allocator's cursor (read under the allocator lock).
    pub fn cursor(&self) -> Cursor {
        let file = self.map.load_u64(H_ALLOC_FILE, Ordering::Acquire);
        let block = self.map.load_u64(H_ALLOC_NEXT_BLOCK, Ordering::Acquire);
        Cursor {
            current: file
                .checked_sub(1)
                .map(|seq| (seq, u32::try_from(block).unwrap_or(u32::MAX))),
            next_file_seq: self.map.load_u64(H_NEXT_FILE_SEQ, Ordering::Acquire),
        }
    }

    /// Moves the allocator's cursor (under the allocator lock). The words are stored so
    /// that a holder that dies between them leaves a cursor that never hands out a block
    /// twice: the next file's sequence first, the block before the file.
    pub fn store_cursor(&self, cursor: Cursor) {
        let m = &self.map;
        let next = m.atomic_u64(H_NEXT_FILE_SEQ);
        next.store(
            next.load(Ordering::Acquire).max(cursor.next_file_seq),
            Ordering::Release,
        );
        match cursor.current {
            Some((seq, block)) => {
                let same = m.load_u64(H_ALLOC_FILE, Ordering::Acquire) == seq + 1;
                if same {
                    m.atomic_u64(H_ALLOC_NEXT_BLOCK)
                        .store(u64::from(block), Ordering::Release);
                } else {
                    // A new file: no block of it was handed out, so 0 until its file is
                    // current is safe, and the block moves after.
                    m.atomic_u64(H_ALLOC_NEXT_BLOCK)
                        .store(u64::MAX, Ordering::Release);
                    m.atomic_u64(H_ALLOC_FILE).store(seq + 1, Ordering::Release);
                    m.atomic_u64(H_ALLOC_NEXT_BLOCK)
                        .store(u64::from(block), Ordering::Release);
                }
            }
            None => m.atomic_u64(H_ALLOC_FILE).store(0, Ordering::Release),
        }
    }

    /// The spare data file's sequence number, if one was made (read under the allocator
    /// lock, or as a hint).
    pub fn spare(&self) -> Option<u64> {
        self.map
            .load_u64(H_SPARE_FILE, Ordering::Acquire)
            .checked_sub(1)
    }

    /// Records the spare data file (`None`: it became the current one). Under the
    /// allocator lock.
    pub fn set_spare(&self, seq: Option<u64>) {
        self.map
            .atomic_u64(H_SPARE_FILE)
            .store(seq.map_or(0, |s| s + 1), Ordering::Release);
    }

    /// Gives this process slot `slot` of the process table (it holds the slot's liveness
    /// byte through `file`): bumps the slot's generation and records the pid.
    /// `counts_all`: this handle recovered the directory alone (its per-file counts cover
    /// every extent until another process joins).
    pub fn register(&self, file: File, slot: u32, counts_all: bool) -> Result<()> {
        let at = PROCESS_TABLE + slot as usize * PROCESS_SLOT_BYTES;
        let generation = self
            .map
            .atomic_u32(at + P_GENERATION)
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1);
        self.map
            .atomic_u32(at + P_PID)
            .store(std::process::id(), Ordering::Release);
        let opens = self.map.atomic_u64(H_OPENS).fetch_add(1, Ordering::AcqRel) + 1;
        self.opens
            .store(if counts_all { opens } else { u64::MAX }, Ordering::Release);
        self.liveness
            .set(Liveness::new(file, slot, generation))
            .map_err(|_| Error::invalid("shared state", "the process registered twice".to_owned()))
    }

    /// True when another shared-mode handle opened the directory since this one did.
    pub fn joined_since(&self) -> bool {
        self.map.load_u64(H_OPENS, Ordering::Acquire) != self.opens.load(Ordering::Acquire)
    }

    /// Takes lock word `word` of this file for this process (see `lock::acquire`).
    pub fn acquire(
        &self,
        word: &AtomicU32,
        what: &'static str,
        wait: Duration,
    ) -> Result<Acquired> {
        let live = self.liveness.get().ok_or_else(|| {
            Error::invalid("shared state", "lock words need shared mode".to_owned())
        })?;
        let generation_of = |slot: u32| {
            self.map.load_u32(
                PROCESS_TABLE + slot as usize * PROCESS_SLOT_BYTES + P_GENERATION,
                Ordering::Acquire,
            )
        };
        let pid_of = |slot: u32| {
            if (slot as usize) < PROCESSES {
                self.map.load_u32(
                    PROCESS_TABLE + slot as usize * PROCESS_SLOT_BYTES + P_PID,
                    Ordering::Acquire,
                )
            } else {
                0
            }
        };
        lock::acquire(word, live, generation_of, pid_of, what, wait)
    }

    /// Takes `word` for this process if it holds `expected` (0: free; a dead holder's
    /// value: taken over).
    pub fn try_take(&self, word: &AtomicU32, expected: u32) -> bool {
        let Some(live) = self.liveness.get() else {
            return false;
        };
        word.compare_exchange(expected, live.owner(), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// This process's value in a lock word (0 before it registered).
    pub fn owner(&self) -> u32 {
        self.liveness.get().map_or(0, lock::Liveness::owner)
    }

    /// Whether the holder `owner` (a lock word's value) may be alive.
    pub fn holder_alive(&self, owner: u32) -> bool {
        self.liveness
            .get()
            .is_none_or(|live| live.is_alive(owner, |slot| self.generation_of(slot)))
    }

    /// The pid recorded for the holder `owner` of a lock word (0 when unknown).
    pub fn pid_of_owner(&self, owner: u32) -> u32 {
        let slot = (owner & 0xFFFF).saturating_sub(1) as usize;
        if slot >= PROCESSES {
            return 0;
        }
        self.map.load_u32(
            PROCESS_TABLE + slot * PROCESS_SLOT_BYTES + P_PID,
            Ordering::Acquire,
        )
    }

    fn generation_of(&self, slot: u32) -> u32 {
        self.map.load_u32(
            PROCESS_TABLE + slot as usize * PROCESS_SLOT_BYTES + P_GENERATION,
            Ordering::Acquire,
        )
    }

    /// This process became the housekeeping leader: a new epoch, and its pid for people.
    pub fn note_leader(&self) {
        self.map
            .atomic_u32(H_LEADER_PID)
            .store(std::process::id(), Ordering::Release);
        self.map
            .atomic_u64(H_LEADER_EPOCH)
            .fetch_add(1, Ordering::AcqRel);
    }

    /// The leader's epoch, pid (of the last process that became leader) and the wall
    /// clock time of its last pass (microseconds).
    pub fn leader(&self) -> (u64, u32, u64) {
        (
            self.map.load_u64(H_LEADER_EPOCH, Ordering::Acquire),
            self.map.load_u32(H_LEADER_PID, Ordering::Acquire),
            self.map.load_u64(H_LEADER_BEAT, Ordering::Acquire),
        )
    }

    /// The leader begins a pass now.
    pub fn note_leader_pass(&self) {
        self.map
            .atomic_u64(H_LEADER_BEAT)
            .store(crate::clock::now_us(), Ordering::Release);
    }

    /// The leader retired extents or deleted files (see [`SharedState::retired`]).
    pub fn note_retired(&self) {
        self.map
            .atomic_u64(H_RETIRED)
            .fetch_add(1, Ordering::AcqRel);
    }

    /// Moves each time the leader retired extents or deleted files.
    pub fn retired(&self) -> u64 {
        self.map.load_u64(H_RETIRED, Ordering::Acquire)
    }

    /// The lowest data file in which an allocation of this process awaits its identity
    /// (`Some`; set under the allocator lock when it grows), or none does (`None`). A no-op
    /// before the process registered.
    pub fn set_allocating(&self, seq: Option<u64>) {
        let Some(live) = self.liveness.get() else {
            return;
        };
        let at = PROCESS_TABLE + live.slot() as usize * PROCESS_SLOT_BYTES + P_ALLOCATING;
        self.map
            .atomic_u64(at)
            .store(seq.map_or(0, |s| s + 1), Ordering::Release);
    }

    /// Per live process, the lowest data file in which it holds an allocation whose identity
    /// is not written yet (read under the allocator lock). A dead one's allocation holds no
    /// record.
    pub fn allocating(&self) -> Vec<u64> {
        (0..PROCESSES as u32)
            .filter_map(|slot| {
                let at = PROCESS_TABLE + slot as usize * PROCESS_SLOT_BYTES;
                let seq = self
                    .map
                    .load_u64(at + P_ALLOCATING, Ordering::Acquire)
                    .checked_sub(1)?;
                self.holder_alive(lock::owner_value(slot, self.generation_of(slot)))
                    .then_some(seq)
            })
            .collect()
    }

    /// Takes one of the header's lock words; released when the guard drops.
    pub fn lock(&self, which: HeaderLock, wait: Duration) -> Result<HeaderGuard<'_>> {
        let (at, what) = match which {
            HeaderLock::Alloc => (H_ALLOC_LOCK, "allocator"),
            HeaderLock::Topics => (H_TOPIC_LOCK, "topic table"),
        };
        let word = self.map.atomic_u32(at);
        // Their holders' stores leave the words consistent at every step (see
        // `store_cursor`, `claim`): a dead holder's lock is taken over as it is.
        self.acquire(word, what, wait)?;
        Ok(HeaderGuard { word })
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
            match self.key_at(i) {
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
            let key = self.key_at(i);
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
    SLOT_TABLE + i * SLOT_BYTES
}

/// One of the header's lock words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderLock {
    /// The allocator's cursor, and data file creation.
    Alloc,
    /// Topic creation: ids, slots and names.
    Topics,
}

/// A held header lock; released when dropped.
#[derive(Debug)]
pub struct HeaderGuard<'a> {
    word: &'a AtomicU32,
}

impl Drop for HeaderGuard<'_> {
    fn drop(&mut self) {
        lock::release(self.word);
    }
}

/// The slots topic `id` may occupy, in the order a lookup tries them.
fn probe(id: u32) -> impl Iterator<Item = usize> {
    let home = (u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % SLOTS;
    (0..SLOTS).map(move |i| (home + i) % SLOTS)
}

/// The kernel's boot id as two words; zeros where the kernel does not say (no such file:
/// then a reader that reads it does not trust a writer that could not, and falls back to
/// the directory). Any other error reading it is returned: a writer that took it for zeros
/// would mark the state file with a boot no other process computes, and none could join.
fn boot_id(storage: &dyn Storage) -> Result<[u64; 2]> {
    let path = Path::new("/proc/sys/kernel/random/boot_id");
    let bytes = match storage.read_file(path) {
        Ok(bytes) => bytes,
        Err(e) if crate::io::is_absent(&e) => Vec::new(),
        Err(e) => return Err(Error::io("read boot id", path, e)),
    };
    let text = String::from_utf8_lossy(&bytes);
    let hex: String = text.chars().filter(char::is_ascii_hexdigit).collect();
    let word = |r: std::ops::Range<usize>| {
        hex.get(r)
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .unwrap_or(0)
    };
    Ok([word(0..16), word(16..32)])
}

//! The block allocator: hands out `(file, block index, block count)` behind a spin lock.
//!
//! The critical section only moves a cursor (no syscall, no wait, no lock taken under it).
//! Files are created outside the lock, by the background thread ahead of need (the "spare")
//! or, if none is ready, by the allocating thread before it retakes the lock. Disk space is
//! reserved (fallocate) after the lock is released, before the extent is handed to a writer.
//!
//! The allocator also owns the end of a file's life: the disk-space account that the optional
//! cap checks, and the queue of files whose counters say they may be deleted.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::file::DataFile;
use crate::format;
use crate::io::Storage;
use crate::poison::Recover;
use crate::shared::{Cursor, HeaderLock, SharedState};
use crate::spin::SpinLock;

/// Longest an allocation waits for another process's hold of the allocator (a live holder
/// creates a file at most: a stopped one is reported).
pub const SHARED_LOCK_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct AllocState {
    current: Option<Arc<DataFile>>,
    next_block: u32,
    spare: Option<Arc<DataFile>>,
}

/// A reserved extent, disk space included.
#[derive(Debug)]
pub struct Allocation {
    pub file: Arc<DataFile>,
    pub block_index: u32,
    pub extent_count: u32,
    /// Bytes from the extent's start backed by disk space: the block header, the first
    /// frame and [`crate::extent::RESERVE_AHEAD_BYTES`] (at most the extent); the rest is
    /// reserved as records reach it (`Extent::ensure_reserved`).
    pub reserved_bytes: u64,
}

/// Hands out extents of consecutive blocks, file after file.
#[derive(Debug)]
pub struct BlockAllocator {
    dir: PathBuf,
    file_size_bytes: u64,
    block_size_bytes: u64,
    /// Version of the files it creates (`Config::record_format`).
    file_version: u32,
    state: SpinLock<AllocState>,
    next_seq: AtomicU64,
    /// Serializes file creation, so two threads that both find no spare make one file.
    create: Mutex<()>,
    /// Bytes the live data files occupy on disk (headers and reserved extents).
    disk_bytes: AtomicU64,
    disk_bytes_max: Option<u64>,
    /// Appenders waiting for space wait here; deletions and close notify.
    space: (Mutex<()>, Condvar),
    /// Close started: space waiters give up.
    shutting_down: std::sync::atomic::AtomicBool,
    /// Files whose counters say they may go, for the deletion worker.
    doomed: Mutex<Vec<Arc<DataFile>>>,
    /// Every live data file by sequence number (the spare included).
    files: RwLock<BTreeMap<u64, Arc<DataFile>>>,
    /// Shared mode: the cursor lives in the shared state file, under its allocator lock.
    /// `None` once cleared (close).
    shared: RwLock<Option<Arc<SharedState>>>,
    /// Shared mode: the files of this process's allocations whose identity is not written
    /// yet, one entry each (several threads may allocate at once). The shared state file
    /// holds the lowest (see [`BlockAllocator::passed_files`]).
    in_flight: Mutex<Vec<u64>>,
}

impl BlockAllocator {
    pub fn new(
        dir: PathBuf,
        config: &Config,
        files: BTreeMap<u64, Arc<DataFile>>,
        next_seq: u64,
        current: Option<(Arc<DataFile>, u32)>,
        spare: Option<Arc<DataFile>>,
    ) -> Self {
        let (current, next_block) = match current {
            Some((f, n)) => (Some(f), n),
            None => (None, 0),
        };
        BlockAllocator {
            dir,
            file_size_bytes: config.file_size_bytes,
            block_size_bytes: config.block_size_bytes,
            file_version: config.record_format.file_version(),
            state: SpinLock::new(AllocState {
                current,
                next_block,
                spare,
            }),
            next_seq: AtomicU64::new(next_seq),
            create: Mutex::new(()),
            disk_bytes: AtomicU64::new(0),
            disk_bytes_max: config.disk_bytes_max,
            space: (Mutex::new(()), Condvar::new()),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            doomed: Mutex::new(Vec::new()),
            files: RwLock::new(files),
            shared: RwLock::new(None),
            in_flight: Mutex::new(Vec::new()),
        }
    }

    /// Shared mode: allocations move the cursor of `shared` (under its allocator lock)
    /// instead of this handle's, and create data files on demand (no spare).
    pub fn share(&self, shared: Arc<SharedState>) {
        for file in self.files.read().recover().values() {
            file.counters.share();
        }
        *self.shared.write().recover() = Some(shared);
    }

    /// The shared state file in shared mode.
    fn shared(&self) -> Option<Arc<SharedState>> {
        self.shared.read().recover().clone()
    }

    /// Shared mode: other processes allocate from the same cursor.
    pub fn is_shared(&self) -> bool {
        self.shared.read().recover().is_some()
    }

    /// Whether this handle's view covers every extent and every group: always for an
    /// exclusive handle; in shared mode only while no other process opened the directory
    /// since this handle opened it alone. Otherwise its per-file counts may miss extents
    /// other processes allocated, and its groups theirs: only the housekeeping leader
    /// reclaims then, from what is on disk.
    pub fn sees_everything(&self) -> bool {
        self.shared().is_none_or(|s| !s.joined_since())
    }

    /// Every live data file, by sequence number.
    pub fn files(&self) -> RwLockReadGuard<'_, BTreeMap<u64, Arc<DataFile>>> {
        self.files.read().recover()
    }

    /// Adds a file another process made (shared mode), unless it is known.
    pub fn add_file(&self, file: Arc<DataFile>) {
        file.counters.share();
        self.files.write().recover().entry(file.seq).or_insert(file);
    }

    /// Replaces the file table (a read-only refresh).
    pub fn replace_files(&self, files: BTreeMap<u64, Arc<DataFile>>) {
        *self.files.write().recover() = files;
    }

    /// Close started: appenders waiting for space give up with `Closed`.
    pub fn shut_down(&self) {
        self.shutting_down.store(true, Ordering::Release);
        let _guard = self.space.0.lock().recover();
        self.space.1.notify_all();
    }

    /// Drops every file reference the allocator holds (close), the shared state file's
    /// included.
    pub fn clear(&self) {
        drop(self.shared.write().recover().take());
        self.files.write().recover().clear();
        // Dropped after the lock is released: a last reference unmaps and closes the file.
        let files = {
            let mut st = self.state.lock();
            (st.current.take(), st.spare.take())
        };
        drop(files);
    }

    /// Counts a recovered file's bytes towards the disk account.
    pub fn account_file(&self, file: &DataFile) {
        self.disk_bytes.fetch_add(
            file.counters.disk_bytes.load(Ordering::Acquire),
            Ordering::AcqRel,
        );
    }

    /// Bytes the live data files occupy on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.disk_bytes.load(Ordering::Acquire)
    }

    /// Queues `file` for deletion (its counters said so).
    pub fn doom(&self, file: &Arc<DataFile>) {
        self.doomed.lock().recover().push(Arc::clone(file));
    }

    /// Files waiting for the deletion worker.
    pub fn take_doomed(&self) -> Vec<Arc<DataFile>> {
        std::mem::take(&mut *self.doomed.lock().recover())
    }

    /// True when files wait for deletion.
    pub fn has_doomed(&self) -> bool {
        !self.doomed.lock().recover().is_empty()
    }

    /// A deleted file leaves the table and its bytes the account; space waiters retry.
    pub fn forget_file(&self, file: &DataFile) {
        self.files.write().recover().remove(&file.seq);
        let bytes = file.counters.disk_bytes.load(Ordering::Acquire);
        // Saturating: an account rebuilt from st_blocks may differ by a page from what we add.
        let _ = self
            .disk_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.saturating_sub(bytes))
            });
        let _guard = self.space.0.lock().recover();
        self.space.1.notify_all();
    }

    /// Reserves `bytes` in the disk account under the cap, waiting up to `wait` for
    /// deletions to make room.
    fn reserve_space(&self, bytes: u64, wait: Duration) -> Result<()> {
        let Some(max) = self.disk_bytes_max else {
            self.disk_bytes.fetch_add(bytes, Ordering::AcqRel);
            return Ok(());
        };
        let deadline = crate::clock::deadline_after(wait);
        let mut guard = self.space.0.lock().recover();
        loop {
            let reserved = self
                .disk_bytes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                    (b + bytes <= max).then_some(b + bytes)
                });
            match reserved {
                Ok(_) => return Ok(()),
                Err(_) if self.shutting_down.load(Ordering::Acquire) => return Err(Error::Closed),
                Err(used) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(Error::limit("disk_bytes_max", used + bytes, max));
                    }
                    guard = self.space.1.wait_timeout(guard, deadline - now).recover().0;
                }
            }
        }
    }

    /// Reserves an extent with room for `frame_bytes` of records (disk space included),
    /// waiting up to `space_wait` when the disk cap is reached.
    pub fn allocate(
        &self,
        storage: &dyn Storage,
        frame_bytes: u64,
        index_interval_bytes: u64,
        space_wait: Duration,
    ) -> Result<Allocation> {
        // Checked against the configured geometry; the extent's own file decides the rest.
        let want = Extent::blocks_needed(frame_bytes, self.block_size_bytes, index_interval_bytes)
            * self.block_size_bytes;
        self.reserve_space(want, space_wait)?;
        let taken = self.take(storage, frame_bytes, index_interval_bytes);
        let (file, block_index, extent_count) = match taken {
            Ok(t) => t,
            Err(e) => {
                self.disk_bytes.fetch_sub(want, Ordering::AcqRel);
                return Err(e);
            }
        };
        let start = file.block_position(block_index);
        let len = u64::from(extent_count) * file.header.block_size_bytes;
        // Settle the estimate against the real extent length.
        if len >= want {
            self.disk_bytes.fetch_add(len - want, Ordering::AcqRel);
        } else {
            self.disk_bytes.fetch_sub(want - len, Ordering::AcqRel);
        }
        file.counters.disk_bytes.fetch_add(len, Ordering::AcqRel);
        let reserved_bytes = format::align_up(
            format::BLOCK_HEADER_BYTES + frame_bytes + crate::extent::RESERVE_AHEAD_BYTES,
            format::PAGE_BYTES,
        )
        .min(len);
        if let Err(e) = storage.allocate(&file.file, &file.path, start, reserved_bytes) {
            self.identity_written(file.seq);
            // The blocks stay unused (never holding our identity slot, recovery skips them)
            // and count as consumed, so the file can still be deleted.
            if file.counters.release(extent_count) | file.counters.consume(extent_count) {
                self.doom(&file);
            }
            if e.raw_os_error() == Some(libc::ENOSPC) {
                return Err(Error::DiskFull {
                    path: file.path.clone(),
                    requested_bytes: reserved_bytes,
                });
            }
            return Err(Error::io("fallocate", &file.path, e));
        }
        Ok(Allocation {
            file,
            block_index,
            extent_count,
            reserved_bytes,
        })
    }

    /// Shared mode: an extent this process was handed in data file `seq` has its identity
    /// written (or was given up): the leader may judge that file from the disk again, once
    /// no other allocation of this process awaits its identity there or below.
    pub fn identity_written(&self, seq: u64) {
        if let Some(shared) = self.shared() {
            let mut in_flight = self.in_flight.lock().recover();
            if let Some(i) = in_flight.iter().position(|&s| s == seq) {
                in_flight.swap_remove(i);
            }
            shared.set_allocating(in_flight.iter().min().copied());
        }
    }

    /// Shared mode, under the allocator lock: an extent of data file `seq` is handed to
    /// this process, its identity not written yet.
    fn allocating(&self, shared: &SharedState, seq: u64) {
        let mut in_flight = self.in_flight.lock().recover();
        in_flight.push(seq);
        shared.set_allocating(in_flight.iter().min().copied());
    }

    fn take(
        &self,
        storage: &dyn Storage,
        frame_bytes: u64,
        interval: u64,
    ) -> Result<(Arc<DataFile>, u32, u32)> {
        // Each file carries its own geometry, so the block count is computed per file.
        let count_for =
            |f: &DataFile| Extent::blocks_needed(frame_bytes, f.header.block_size_bytes, interval);
        if let Some(shared) = self.shared() {
            return self.take_shared(&shared, storage, count_for);
        }
        loop {
            // Under the spin lock: move the cursor, or switch to the spare. The file that stops
            // being current is sealed and queued (a mutex) after the lock is released.
            let switched = {
                let mut st = self.state.lock();
                if let Some(cur) = st.current.clone() {
                    let count = count_for(&cur);
                    if u64::from(st.next_block) + count <= u64::from(cur.extent_count) {
                        let index = st.next_block;
                        st.next_block += count as u32;
                        cur.counters.allocate(count as u32);
                        return Ok((cur, index, count as u32));
                    }
                }
                match st.spare.take() {
                    Some(spare) if count_for(&spare) > u64::from(spare.extent_count) => {
                        let count = count_for(&spare);
                        let err = too_big_for_a_file(&spare, count);
                        st.spare = Some(spare);
                        drop(st);
                        return Err(err);
                    }
                    Some(spare) => {
                        st.next_block = 0;
                        Some(st.current.replace(spare))
                    }
                    None => None,
                }
            };
            match switched {
                Some(old) => {
                    if let Some(old) = old
                        && old.counters.seal_allocation()
                    {
                        self.doom(&old);
                    }
                }
                None => self.prepare_spare(storage)?,
            }
        }
    }

    /// Shared mode's [`BlockAllocator::take`]: under the allocator lock of the shared state
    /// file, the extent continues after the cursor's file's last block handed out (by any
    /// process), or starts a new file.
    fn take_shared(
        &self,
        shared: &SharedState,
        storage: &dyn Storage,
        count_for: impl Fn(&DataFile) -> u64,
    ) -> Result<(Arc<DataFile>, u32, u32)> {
        let _lock = shared.lock(HeaderLock::Alloc, SHARED_LOCK_WAIT)?;
        crate::process::crash_point("alloc-locked");
        let cursor = shared.cursor();
        if let Some((seq, next_block)) = cursor.current
            && let Some(file) = self.file_by_seq(storage, seq)?
        {
            let count = count_for(&file);
            if u64::from(next_block) + count <= u64::from(file.extent_count) {
                let count = count as u32;
                shared.store_cursor(Cursor {
                    current: Some((seq, next_block + count)),
                    ..cursor
                });
                self.allocating(shared, seq);
                file.counters.allocate(count);
                return Ok((file, next_block, count));
            }
            // No extent goes there any more (whether this handle's counts cover them all
            // decides whether it may delete the file: see `BlockAllocator::sees_everything`).
            if file.counters.seal_allocation() {
                self.doom(&file);
            }
        }
        // The spare another process (or this one) made ahead of need, or a new file.
        let spare = match shared.spare() {
            Some(seq) => self.file_by_seq(storage, seq)?,
            None => None,
        };
        let (file, from_spare) = match spare {
            Some(file) => (file, true),
            None => (self.create_shared(shared, storage, cursor)?, false),
        };
        let seq = file.seq;
        let count = count_for(&file);
        if count > u64::from(file.extent_count) {
            return Err(too_big_for_a_file(&file, count));
        }
        if from_spare {
            shared.set_spare(None);
        }
        let count = count as u32;
        shared.store_cursor(Cursor {
            current: Some((seq, count)),
            next_file_seq: seq + 1,
        });
        self.allocating(shared, seq);
        file.counters.allocate(count);
        Ok((file, 0, count))
    }

    /// Shared mode, under the allocator lock: creates the next data file, its number taken
    /// first so that a creation cut short never hands it out twice.
    fn create_shared(
        &self,
        shared: &SharedState,
        storage: &dyn Storage,
        cursor: Cursor,
    ) -> Result<Arc<DataFile>> {
        let seq = cursor.next_file_seq;
        shared.store_cursor(Cursor {
            next_file_seq: seq + 1,
            ..cursor
        });
        self.reserve_space(format::FILE_HEADER_BYTES, Duration::ZERO)?;
        let file = DataFile::create(
            storage,
            &self.dir,
            seq,
            self.file_size_bytes,
            self.block_size_bytes,
            self.file_version,
        )
        .inspect_err(|_| {
            self.disk_bytes
                .fetch_sub(format::FILE_HEADER_BYTES, Ordering::AcqRel);
        })?;
        self.next_seq.fetch_max(seq + 1, Ordering::AcqRel);
        file.counters.share();
        self.files.write().recover().insert(seq, Arc::clone(&file));
        Ok(file)
    }

    /// Shared mode: makes the spare data file under the allocator lock, unless one is
    /// there (another process made it) or the current file is less than half used.
    fn prepare_spare_shared(&self, shared: &SharedState, storage: &dyn Storage) -> Result<()> {
        let _lock = shared.lock(HeaderLock::Alloc, SHARED_LOCK_WAIT)?;
        let cursor = shared.cursor();
        if shared.spare().is_some() || !self.half_used(cursor) {
            return Ok(());
        }
        let file = self.create_shared(shared, storage, cursor)?;
        shared.set_spare(Some(file.seq));
        Ok(())
    }

    /// The cursor's current file is at least half handed out (by this open's geometry).
    fn half_used(&self, cursor: Cursor) -> bool {
        let blocks = (self.file_size_bytes - format::FILE_HEADER_BYTES) / self.block_size_bytes;
        cursor
            .current
            .is_some_and(|(_, next_block)| u64::from(next_block) * 2 >= blocks)
    }

    /// Shared mode, the housekeeping leader: the data files the allocator moved past, below
    /// every file in which a live process holds an allocation whose identity it has not
    /// written yet (both read under the allocator lock; the allocator never returns to such
    /// a file, and every extent handed out there before is then on disk; each process
    /// reports the lowest file of its allocations in flight). The caller judges each from
    /// its block slots. Files this handle does not know yet are opened; gone ones skipped.
    pub fn passed_files(&self, storage: &dyn Storage) -> Result<Vec<Arc<DataFile>>> {
        let Some(shared) = self.shared() else {
            return Ok(Vec::new());
        };
        // Files are numbered in creation order: below the first this handle knows, none
        // is left.
        let first = self.files.read().recover().keys().next().copied();
        let (seqs, busy) = {
            let _lock = shared.lock(HeaderLock::Alloc, SHARED_LOCK_WAIT)?;
            let Some((current, _)) = shared.cursor().current else {
                return Ok(Vec::new());
            };
            (first.unwrap_or(current)..current, shared.allocating())
        };
        let mut out = Vec::new();
        let below = busy.into_iter().min().unwrap_or(u64::MAX);
        for seq in seqs.filter(|&seq| seq < below) {
            if let Some(file) = self.file_by_seq(storage, seq)? {
                out.push(file);
            }
        }
        Ok(out)
    }

    /// Shared mode: forgets the data files another process (the housekeeping leader)
    /// deleted, so this handle's mapping of them goes and their space comes back.
    pub fn forget_deleted_files(&self, storage: &dyn Storage) {
        let files: Vec<Arc<DataFile>> = self.files.read().recover().values().cloned().collect();
        for file in files {
            if storage
                .metadata(&file.path)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            {
                self.forget_file(&file);
            }
        }
    }

    /// The data file `seq`: the one this handle has, or opened now (another process made
    /// it); `None` when it is gone.
    pub fn file_by_seq(&self, storage: &dyn Storage, seq: u64) -> Result<Option<Arc<DataFile>>> {
        if let Some(f) = self.files.read().recover().get(&seq) {
            return Ok(Some(Arc::clone(f)));
        }
        let path = self.dir.join(crate::file::data_file_name(seq));
        let Some(file) = DataFile::open(storage, &path, true)? else {
            return Ok(None);
        };
        file.counters.share();
        let mut files = self.files.write().recover();
        Ok(Some(Arc::clone(files.entry(seq).or_insert(file))))
    }

    /// Creates the next data file unless a spare is already waiting. Called by the background
    /// thread ahead of need, and by an allocating thread that found none.
    pub fn prepare_spare(&self, storage: &dyn Storage) -> Result<()> {
        if let Some(shared) = self.shared() {
            return self.prepare_spare_shared(&shared, storage);
        }
        let _create = self.create.lock().recover();
        if self.state.lock().spare.is_some() {
            return Ok(());
        }
        let seq = self.next_seq.load(Ordering::Acquire);
        // The header page counts against the cap like any extent.
        self.reserve_space(format::FILE_HEADER_BYTES, Duration::ZERO)?;
        let created = DataFile::create(
            storage,
            &self.dir,
            seq,
            self.file_size_bytes,
            self.block_size_bytes,
            self.file_version,
        );
        let file = match created {
            Ok(f) => f,
            Err(e) => {
                self.disk_bytes
                    .fetch_sub(format::FILE_HEADER_BYTES, Ordering::AcqRel);
                return Err(e);
            }
        };
        self.next_seq.store(seq + 1, Ordering::Release);
        self.files.write().recover().insert(seq, Arc::clone(&file));
        self.state.lock().spare = Some(file);
        Ok(())
    }

    /// Makes the next data file out of a staged segment: `install(seq)` puts the segment in
    /// place as file `seq` and opens it. The file then counts like any other (table, disk
    /// account) and is fully allocated, every block of it handed out: its extents are the
    /// adopted ones, which the topics now hold. Serialized with file creation, so no spare
    /// takes the same number.
    pub fn adopt_file(
        &self,
        install: impl FnOnce(u64) -> Result<Arc<DataFile>>,
    ) -> Result<Arc<DataFile>> {
        let _create = self.create.lock().recover();
        let shared = self.shared();
        let lock = match &shared {
            Some(shared) => Some((shared, shared.lock(HeaderLock::Alloc, SHARED_LOCK_WAIT)?)),
            None => None,
        };
        let seq = match &lock {
            Some((shared, _)) => {
                let cursor = shared.cursor();
                shared.store_cursor(Cursor {
                    next_file_seq: cursor.next_file_seq + 1,
                    ..cursor
                });
                cursor.next_file_seq
            }
            None => self.next_seq.load(Ordering::Acquire),
        };
        let file = install(seq)?;
        drop(lock);
        self.next_seq.store(seq + 1, Ordering::Release);
        self.files.write().recover().insert(seq, Arc::clone(&file));
        self.account_file(&file);
        file.counters.recovered(file.extent_count, false);
        // Not deletable: nothing of it is consumed yet.
        let deletable = file.counters.seal_allocation();
        debug_assert!(!deletable);
        Ok(file)
    }

    /// True when the current file is at least half used and no spare is ready: time for the
    /// background thread to make one.
    pub fn wants_spare(&self) -> bool {
        if let Some(shared) = self.shared() {
            // A hint without the lock: `prepare_spare` looks again under it.
            return shared.spare().is_none() && self.half_used(shared.cursor());
        }
        let st = self.state.lock();
        st.spare.is_none()
            && st
                .current
                .as_ref()
                .is_some_and(|cur| st.next_block * 2 >= cur.extent_count)
    }
}

/// An extent of `count` blocks (one batch's frames and index footer) does not fit a data
/// file like `file`: the limit to raise is `file_size_bytes`, the size such a file would need
/// against the one configured.
fn too_big_for_a_file(file: &DataFile, count: u64) -> Error {
    let block = file.header.block_size_bytes;
    let needed = format::FILE_HEADER_BYTES.saturating_add(count.saturating_mul(block));
    Error::limit("file_size_bytes", needed, file.header.file_size_bytes)
}

//! The `Wal` handle: open (lock, recover), topics, writers, readers, flush, close, and the
//! background flush thread.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::alloc::BlockAllocator;
use crate::block::Block;
use crate::clock::Clock;
use crate::config::{self, Config};
use crate::cursor::{CURSOR_DIR, CursorTable};
use crate::error::{Error, Result};
use crate::file::DataFile;
use crate::io::{StdStorage, Storage};
use crate::reader::{self, Reader, ReaderOptions, Record};
use crate::recovery::{self, Known, RecoveryReport};
use crate::topic::{Append, Ctx, Topic};

/// Name of the lock file in a data directory.
pub const LOCK_FILE: &str = "LOCK";

#[derive(Debug, Default)]
struct TopicTable {
    by_name: HashMap<String, Arc<Topic>>,
    next_id: u32,
}

#[derive(Debug, Default)]
struct Background {
    stop: bool,
}

/// State shared by a `Wal` and every writer and reader made from it.
#[derive(Debug)]
pub(crate) struct Shared {
    pub dir: PathBuf,
    pub config: Config,
    pub storage: Arc<dyn Storage>,
    pub read_only: bool,
    lock_file: Mutex<Option<File>>,
    topics: RwLock<TopicTable>,
    alloc: BlockAllocator,
    files: RwLock<BTreeMap<u64, Arc<DataFile>>>,
    closed: AtomicBool,
    flush_lock: Mutex<()>,
    cursors: CursorTable,
    clock: Clock,
    /// `config.record_bytes_max()` and `config.batch_bytes_max()`, computed once.
    record_bytes_max: u64,
    batch_bytes_max: u64,
    report: Mutex<RecoveryReport>,
    /// Extents a read-only handle has seen, reused by refresh.
    known: Mutex<Known>,
    background: Mutex<Background>,
    wake: Condvar,
    /// First error the background flush hit, returned by the next `flush`.
    background_error: Mutex<Option<Error>>,
}

impl Shared {
    #[inline]
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            storage: self.storage.as_ref(),
            alloc: &self.alloc,
            config: &self.config,
            clock: &self.clock,
        }
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>> {
        config::validate_name(name)?;
        let table = self.topics.read().unwrap_or_else(|p| p.into_inner());
        table
            .by_name
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopic {
                topic: name.to_owned(),
            })
    }

    fn topic_or_create(&self, name: &str) -> Result<Arc<Topic>> {
        if let Some(t) = self
            .topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .get(name)
        {
            return Ok(Arc::clone(t));
        }
        config::validate_name(name)?;
        let mut table = self.topics.write().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = table.by_name.get(name) {
            return Ok(Arc::clone(t));
        }
        let count = table.by_name.len() as u64;
        if count >= self.config.max_topics {
            return Err(Error::limit(
                "max_topics",
                count + 1,
                self.config.max_topics,
            ));
        }
        let id = table.next_id;
        table.next_id = table.next_id.checked_add(1).ok_or_else(|| {
            Error::limit("topic ids", u64::from(u32::MAX) + 1, u64::from(u32::MAX))
        })?;
        let topic = Arc::new(Topic::new(name.to_owned(), id));
        table.by_name.insert(name.to_owned(), Arc::clone(&topic));
        Ok(topic)
    }

    fn all_topics(&self) -> Vec<Arc<Topic>> {
        let table = self.topics.read().unwrap_or_else(|p| p.into_inner());
        table.by_name.values().cloned().collect()
    }

    /// Makes everything published so far durable; seals finished extents.
    fn flush(&self) -> Result<()> {
        self.flush_inner(false)
    }

    /// `closing`: appends have stopped; active extents are marked `Clean` in the same write.
    fn flush_inner(&self, closing: bool) -> Result<()> {
        let _flushing = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        for topic in self.all_topics() {
            let mut sealed = Vec::new();
            for block in topic.unsynced() {
                if block.sync(self.storage.as_ref(), &topic.name, closing)? {
                    sealed.push(block);
                }
            }
            if !sealed.is_empty() {
                topic.forget_synced(&sealed);
            }
        }
        Ok(())
    }

    fn validate_records(&self, records: &[Append<'_>]) -> Result<()> {
        let cfg = &self.config;
        if records.is_empty() {
            return Err(Error::invalid(
                "records",
                "a batch needs at least one record",
            ));
        }
        if records.len() as u64 > cfg.max_batch_records {
            return Err(Error::limit(
                "max_batch_records",
                records.len() as u64,
                cfg.max_batch_records,
            ));
        }
        let record_max = self.record_bytes_max;
        let mut total = 0u64;
        for r in records {
            let len = r.payload_len();
            if len > record_max {
                return Err(Error::limit("max_record_bytes", len, record_max));
            }
            total += len;
        }
        let batch_max = self.batch_bytes_max;
        if records.len() > 1 && total > batch_max {
            return Err(Error::limit("max_batch_bytes", total, batch_max));
        }
        Ok(())
    }

    fn append(&self, topic: &Topic, records: &[Append<'_>]) -> Result<Range<u64>> {
        self.check_writable()?;
        self.validate_records(records)?;
        topic.append(&self.ctx(), records)
    }

    /// Closes: stops appends, waits for in-flight ones, flushes, marks active extents clean.
    fn close(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut result = Ok(());
        if !self.read_only {
            let topics = self.all_topics();
            for topic in &topics {
                let mut tail = topic.tail();
                tail.closed = true;
                let reserved = tail.next_offset;
                drop(tail);
                while topic.next_offset() != reserved {
                    std::thread::yield_now();
                }
            }
            result = self.flush_inner(true);
        }
        self.closed.store(true, Ordering::Release);
        // Release mappings held by the tables; records still alive keep theirs.
        self.topics
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .clear();
        self.files
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.known.lock().unwrap_or_else(|p| p.into_inner()).clear();
        release_lock(
            self.lock_file
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        result
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Covers opens that fail after taking the lock; `close` has usually released it.
        release_lock(
            self.lock_file
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }
}

/// Summary of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicInfo {
    /// The topic name.
    pub name: String,
    /// First offset still stored.
    pub first_offset: u64,
    /// Offset the next append gets.
    pub next_offset: u64,
    /// Bytes of record frames stored (headers and padding included).
    pub bytes: u64,
    /// Extents in the topic's chain.
    pub extents: usize,
    /// Consumer groups with a cursor file.
    pub groups: Vec<String>,
}

/// An open log directory.
///
/// Cheap to share: wrap it in an `Arc`, or make [`Writer`]s and [`Reader`]s, which are
/// `Send` and hold the directory open.
#[derive(Debug)]
pub struct Wal {
    shared: Arc<Shared>,
    background: Mutex<Option<JoinHandle<()>>>,
}

impl Wal {
    /// Opens (creating if missing) `dir` for writing with the default [`Config`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Wal> {
        Self::open_with(dir, Config::default())
    }

    /// Opens `dir` for writing with `config`.
    pub fn open_with(dir: impl AsRef<Path>, config: Config) -> Result<Wal> {
        Self::open_with_storage(dir, config, Arc::new(StdStorage))
    }

    /// Opens `dir` for writing with `config`, doing all file I/O through `storage`.
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        config: Config,
        storage: Arc<dyn Storage>,
    ) -> Result<Wal> {
        Self::open_inner(dir.as_ref(), config, storage, false)
    }

    /// Opens `dir` read-only: no lock is taken; records appear as the writer makes them
    /// durable, after [`Wal::refresh`].
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Wal> {
        Self::open_read_only_with(dir, Config::default())
    }

    /// Opens `dir` read-only with `config` (its limits and index interval apply).
    pub fn open_read_only_with(dir: impl AsRef<Path>, config: Config) -> Result<Wal> {
        Self::open_inner(dir.as_ref(), config, Arc::new(StdStorage), true)
    }

    fn open_inner(
        dir: &Path,
        config: Config,
        storage: Arc<dyn Storage>,
        read_only: bool,
    ) -> Result<Wal> {
        config.validate()?;
        let lock_file = if read_only {
            if !dir.is_dir() {
                return Err(Error::io(
                    "open directory",
                    dir,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
            None
        } else {
            Some(lock_dir(storage.as_ref(), dir)?)
        };
        let recovered = match recovery::recover(
            dir,
            &config,
            storage.as_ref(),
            !read_only,
            &BTreeMap::new(),
            &HashMap::new(),
        ) {
            Ok(r) => r,
            Err(e) => {
                release_lock(lock_file);
                return Err(e);
            }
        };
        let mut table = TopicTable::default();
        let mut known = Known::new();
        for t in recovered.topics {
            let topic = Arc::new(Topic::new(t.name.clone(), t.id));
            if read_only {
                for b in &t.chain {
                    known.insert((b.file.seq, b.block_index), Arc::clone(b));
                }
            }
            topic.restore(t.chain, t.unsynced, t.tail);
            table.next_id = table.next_id.max(t.id + 1);
            table.by_name.insert(t.name, topic);
        }
        let alloc = BlockAllocator::new(
            dir.to_owned(),
            config.file_size_bytes,
            config.block_size_bytes,
            recovered.next_seq,
            recovered.alloc_current,
            recovered.spare,
        );
        let (record_bytes_max, batch_bytes_max) =
            (config.record_bytes_max(), config.batch_bytes_max());
        let shared = Arc::new(Shared {
            dir: dir.to_owned(),
            config,
            storage,
            read_only,
            lock_file: Mutex::new(lock_file),
            topics: RwLock::new(table),
            alloc,
            files: RwLock::new(recovered.files),
            closed: AtomicBool::new(false),
            flush_lock: Mutex::new(()),
            cursors: CursorTable::default(),
            clock: Clock::new(),
            record_bytes_max,
            batch_bytes_max,
            report: Mutex::new(recovered.report),
            known: Mutex::new(known),
            background: Mutex::new(Background::default()),
            wake: Condvar::new(),
            background_error: Mutex::new(None),
        });
        let background = if read_only {
            None
        } else {
            // Seal what recovery cut, before new appends make more work.
            shared.flush()?;
            let bg = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name("tidelog-sync".to_owned())
                .spawn(move || background_loop(&bg))
                .map_err(|e| Error::io("spawn sync thread", dir, e))?;
            Some(handle)
        };
        Ok(Wal {
            shared,
            background: Mutex::new(background),
        })
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.shared.dir
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// True for a handle from [`Wal::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// What recovery found when this handle opened (and at the last refresh).
    pub fn recovery_report(&self) -> RecoveryReport {
        self.shared
            .report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A writer for `topic`, creating the topic if needed.
    pub fn writer(&self, topic: &str) -> Result<Writer> {
        self.shared.check_writable()?;
        let topic = self.shared.topic_or_create(topic)?;
        Ok(Writer {
            shared: Arc::clone(&self.shared),
            topic,
        })
    }

    /// Appends `value` to `topic` (created if needed); returns its offset.
    pub fn append(&self, topic: &str, value: &[u8]) -> Result<u64> {
        self.append_record(topic, Append::value(value))
    }

    /// Appends one record with optional key and timestamp; returns its offset.
    pub fn append_record(&self, topic: &str, record: Append<'_>) -> Result<u64> {
        self.shared.check_writable()?;
        let t = self.shared.topic_or_create(topic)?;
        Ok(self.shared.append(&t, &[record])?.start)
    }

    /// Appends `values` as one crash-atomic batch; returns their offsets.
    pub fn append_batch<V: AsRef<[u8]>>(&self, topic: &str, values: &[V]) -> Result<Range<u64>> {
        self.writer(topic)?.append_batch(values)
    }

    /// A reader of `topic` for consumer `group`, starting at its committed offset.
    pub fn reader(&self, topic: &str, group: &str) -> Result<Reader> {
        self.reader_with(topic, ReaderOptions::group(group))
    }

    /// A reader with explicit options (anonymous readers, start positions, commit modes).
    pub fn reader_with(&self, topic: &str, options: ReaderOptions) -> Result<Reader> {
        self.shared.check_open()?;
        let t = self.shared.topic(topic)?;
        let cursor = match &options.group {
            Some(group) => {
                config::validate_name(group)?;
                Some(self.shared.cursors.get(
                    self.shared.storage.as_ref(),
                    &self.shared.dir,
                    topic,
                    group,
                )?)
            }
            None => None,
        };
        Reader::new(Arc::clone(&self.shared), t, cursor, &options)
    }

    /// The record at `offset` of `topic`, zero-copy.
    pub fn read(&self, topic: &str, offset: u64) -> Result<Record> {
        self.shared.check_open()?;
        let topic = self.shared.topic(topic)?;
        reader::read_at(&topic, offset)
    }

    /// Makes every record appended so far durable (msync of the dirty ranges of each
    /// extent, then its progress slot). Returns the background flush's error, if it hit one.
    pub fn flush(&self) -> Result<()> {
        self.shared.check_open()?;
        if self.shared.read_only {
            return Ok(());
        }
        if let Some(e) = self
            .shared
            .background_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(e);
        }
        self.shared.flush()
    }

    /// Names of all topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        let table = self.shared.topics.read().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = table.by_name.keys().cloned().collect();
        names.sort();
        names
    }

    /// Offsets, size and groups of `topic`.
    pub fn topic_info(&self, topic: &str) -> Result<TopicInfo> {
        self.shared.check_open()?;
        let t = self.shared.topic(topic)?;
        Ok(TopicInfo {
            name: t.name.clone(),
            first_offset: t.first_offset(),
            next_offset: t.next_offset(),
            bytes: t.bytes(),
            extents: t.block_count(),
            groups: CursorTable::list(&self.shared.dir, topic),
        })
    }

    /// Picks up records made durable by the writing process since the last refresh
    /// (read-only handles; a no-op for the writer, which sees its own records at once).
    pub fn refresh(&self) -> Result<()> {
        self.shared.check_open()?;
        if !self.shared.read_only {
            return Ok(());
        }
        let shared = &self.shared;
        let files = shared
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut known = shared.known.lock().unwrap_or_else(|p| p.into_inner());
        let recovered = recovery::recover(
            &shared.dir,
            &shared.config,
            shared.storage.as_ref(),
            false,
            &files,
            &known,
        )?;
        for t in recovered.topics {
            let topic = {
                let mut table = shared.topics.write().unwrap_or_else(|p| p.into_inner());
                let next_id = table.next_id.max(t.id + 1);
                table.next_id = next_id;
                Arc::clone(
                    table
                        .by_name
                        .entry(t.name.clone())
                        .or_insert_with(|| Arc::new(Topic::new(t.name.clone(), t.id))),
                )
            };
            let existing = topic.chain();
            let mut added = Vec::new();
            for b in &t.chain {
                known.insert((b.file.seq, b.block_index), Arc::clone(b));
                if !existing.iter().any(|e| Arc::ptr_eq(e, b)) {
                    added.push(Arc::clone(b));
                }
            }
            topic.extend_read_only(added, t.tail.next_offset);
        }
        *shared.files.write().unwrap_or_else(|p| p.into_inner()) = recovered.files;
        *shared.report.lock().unwrap_or_else(|p| p.into_inner()) = recovered.report;
        Ok(())
    }

    /// Stops the background thread, flushes, marks active extents clean and releases the
    /// directory. Later calls on this handle (and its writers and readers) fail with
    /// [`Error::Closed`]; records already read stay valid.
    pub fn close(&self) -> Result<()> {
        self.stop_background();
        let result = self.shared.close();
        let background_error = self
            .shared
            .background_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match (result, background_error) {
            (Err(e), _) | (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        }
    }

    fn stop_background(&self) {
        self.shared
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stop = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            // A panic in the sync thread already lost its work; nothing more to report here.
            let _ = handle.join();
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; `close()` reports them.
        let _ = self.close();
    }
}

/// Appends to one topic. Cheap to clone; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Writer {
    shared: Arc<Shared>,
    topic: Arc<Topic>,
}

impl Writer {
    /// The topic this writer appends to.
    pub fn topic(&self) -> &str {
        &self.topic.name
    }

    /// Appends `value`; returns its offset.
    #[inline]
    pub fn append(&self, value: &[u8]) -> Result<u64> {
        Ok(self
            .shared
            .append(&self.topic, &[Append::value(value)])?
            .start)
    }

    /// Appends one record with an optional key and timestamp; returns its offset.
    #[inline]
    pub fn append_record(&self, record: Append<'_>) -> Result<u64> {
        Ok(self.shared.append(&self.topic, &[record])?.start)
    }

    /// Appends `values` as one batch: after a crash either all of them are there or none.
    pub fn append_batch<V: AsRef<[u8]>>(&self, values: &[V]) -> Result<Range<u64>> {
        let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v.as_ref())).collect();
        self.shared.append(&self.topic, &records)
    }

    /// Appends `records` (keys, values, timestamps) as one crash-atomic batch.
    pub fn append_batch_records(&self, records: &[Append<'_>]) -> Result<Range<u64>> {
        self.shared.append(&self.topic, records)
    }

    /// The offset the next append gets.
    pub fn next_offset(&self) -> u64 {
        self.topic.next_offset()
    }

    /// Makes everything appended so far (to every topic) durable.
    pub fn flush(&self) -> Result<()> {
        self.shared.check_writable()?;
        self.shared.flush()
    }
}

/// Releases the directory lock explicitly: a child process being spawned at this moment holds a
/// copy of the descriptor until its exec, and a flock belongs to the shared open file, so only
/// an explicit unlock frees it at once.
fn release_lock(file: Option<File>) {
    if let Some(file) = file {
        // Closing the file below releases the lock anyway once every copy is gone.
        let _ = file.unlock();
    }
}

/// Takes the directory's advisory lock, creating the directory and lock file if needed.
fn lock_dir(storage: &dyn Storage, dir: &Path) -> Result<File> {
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            storage
                .sync_dir(parent)
                .map_err(|e| Error::io("fsync directory", parent, e))?;
        }
    }
    if !dir.is_dir() {
        return Err(Error::invalid(
            "path",
            format!("{} is not a directory", dir.display()),
        ));
    }
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io("open lock file", &path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(Error::Locked {
                path: dir.to_owned(),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("lock directory", &path, e)),
    }
    let cursors = dir.join(CURSOR_DIR);
    if !cursors.exists() {
        std::fs::create_dir_all(&cursors)
            .map_err(|e| Error::io("create directory", &cursors, e))?;
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(file)
}

fn background_loop(shared: &Shared) {
    let interval = shared.config.sync_interval_ms;
    let tick = Duration::from_millis(interval.unwrap_or(200));
    let mut guard = shared.background.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if guard.stop {
            return;
        }
        let (g, _) = shared
            .wake
            .wait_timeout(guard, tick)
            .unwrap_or_else(|p| p.into_inner());
        guard = g;
        if guard.stop {
            return;
        }
        drop(guard);
        shared.clock.recalibrate();
        if shared.alloc.wants_spare() {
            // A failure here is retried by the allocating thread, which reports it.
            let _ = shared.alloc.prepare_spare(shared.storage.as_ref());
        }
        if interval.is_some()
            && let Err(e) = shared.flush()
        {
            let mut slot = shared
                .background_error
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert(e);
        }
        guard = shared.background.lock().unwrap_or_else(|p| p.into_inner());
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Wal>();
    is::<Writer>();
    is::<Reader>();
    is::<Record>();
    is::<Block>();
}

//! The `Wal` handle: open (lock, recover), topics, writers, readers, flush, close, deletion,
//! and its threads: the sync thread (group commits, periodic flush), the housekeeping thread
//! (spare files, clock, retention, file deletion), the prefault thread (pages ahead of each
//! topic's tail) and, with the ring backend, the uploader (checkpoints, see `journal`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::alloc::BlockAllocator;
use crate::block::Block;
use crate::clock::Clock;
use crate::config::{self, Config, Durability};
use crate::cursor::{CURSOR_DIR, CursorTable};
use crate::error::{Error, Result};
use crate::file::{DataFile, FileState};
use crate::format::{self, ProgressState};
use crate::io::{StdStorage, Storage};
use crate::journal::{self, Journal};
use crate::prefault::Prefaulter;
use crate::process;
use crate::reader::{self, Reader, ReaderOptions, Record};
use crate::reclaim;
use crate::recovery::{self, Known, RecoveryReport};
use crate::ring::{RingAppend, format::RING_START};
use crate::stage;
use crate::sync::{AppendHandle, GroupLimits, SyncQueue, Wake};
use crate::topic::{Append, Ctx, Topic};

mod publish;

/// Name of the lock file in a data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Longest an append waits for checkpoints to make room in a full ring (the ring backend).
const RING_FULL_WAIT: Duration = Duration::from_secs(60);

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
    /// First error the housekeeping thread hit (deleting a file), returned by the next
    /// `flush`. Sync errors poison `sync` instead.
    background_error: Mutex<Option<Error>>,
    /// Tickets, group commit and poison.
    sync: Arc<SyncQueue>,
    /// A writer asked for `Interval` while the Wal default is `Never`: run the periodic flush.
    interval_writers: AtomicBool,
    /// Populates pages ahead of each topic's tail (its thread runs for writable handles).
    prefault: Prefaulter,
    /// The process that opened the handle and its fork generation (see `process`).
    opener_pid: u32,
    fork_generation: u64,
    /// The ring in front of the data files (the ring backend; writable handles only).
    journal: Option<Journal>,
    /// One staged job is published at a time.
    ingest_lock: Mutex<()>,
}

/// How one append becomes durable and waits for space: the Wal's defaults or a writer's.
#[derive(Debug, Clone, Copy)]
struct WriteOpts {
    durability: Durability,
    space_wait: Duration,
}

impl Shared {
    #[inline]
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.check_not_forked()
    }

    #[inline]
    fn check_not_forked(&self) -> Result<()> {
        if process::is_forked(self.fork_generation) {
            return Err(Error::Forked {
                opener_pid: self.opener_pid,
            });
        }
        Ok(())
    }

    #[inline]
    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        self.sync.check()
    }

    fn ctx(&self, opts: WriteOpts) -> Ctx<'_> {
        Ctx {
            storage: self.storage.as_ref(),
            alloc: &self.alloc,
            config: &self.config,
            clock: &self.clock,
            space_wait: opts.space_wait,
            // With a ring, durability is the ring's: the data files are synced by checkpoints.
            write_through: opts.durability == Durability::Always && self.journal.is_none(),
            sync: &self.sync,
            prefault: Some(&self.prefault),
            journal: self.journal.as_ref(),
            ingest: false,
        }
    }

    fn default_opts(&self) -> WriteOpts {
        WriteOpts {
            durability: self.config.durability,
            space_wait: Duration::from_millis(self.config.space_wait_ms),
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

    /// Makes everything published so far durable and catches up progress slots; seals
    /// finished extents. Completes the tickets it covers; a failure poisons the Wal.
    fn flush(&self) -> Result<()> {
        self.flush_pass(false)
    }

    /// `closing`: appends have stopped; active extents are marked `Clean` in the same write.
    fn flush_pass(&self, closing: bool) -> Result<()> {
        self.sync.check()?;
        let upto = self.sync.begin_pass();
        let result = self.flush_inner(closing);
        self.sync.end_pass(upto, &result);
        result
    }

    fn flush_inner(&self, closing: bool) -> Result<()> {
        let _flushing = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        for topic in self.all_topics() {
            let mut sealed = Vec::new();
            for block in topic.unsynced() {
                // A consumed extent's file may already be gone: nothing left to make durable.
                if block.is_consumed() || block.sync(self.storage.as_ref(), &topic.name, closing)? {
                    sealed.push(block);
                }
            }
            if !sealed.is_empty() {
                topic.forget_synced(&sealed);
            }
        }
        Ok(())
    }

    /// A group commit's I/O: makes the data published so far durable with one msync per
    /// data file, over the span of its extents with new data (one journal commit per file,
    /// however many topics wrote to it), then writes the progress slots that claim it and
    /// syncs them (one more msync per file), so the durable point on disk covers every record
    /// this commit acknowledges: recovery and read-only handles see them as durable.
    fn sync_group_data(&self) -> Result<()> {
        let _flushing = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        // Per file: the span to sync and the extents (with their new count and end) it covers.
        type Span = (usize, usize, Vec<(Arc<Block>, u64, u64)>);
        let mut spans: BTreeMap<u64, Span> = BTreeMap::new();
        for topic in self.all_topics() {
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
                span.2.push((block, count, end));
            }
        }
        for (lo, hi, blocks) in spans.into_values() {
            let Some((first, _, _)) = blocks.first() else {
                continue;
            };
            let file = Arc::clone(&first.file);
            self.storage
                .sync_map(&file.map, &file.path, lo, hi - lo)
                .map_err(|e| Error::io("msync", &file.path, e))?;
            let mut slots: Option<(usize, usize)> = None;
            for (block, count, end) in &blocks {
                if let Some(at) = block.note_synced(*count, *end) {
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
        Ok(())
    }

    fn group_limits(&self) -> GroupLimits {
        GroupLimits {
            wait: Duration::from_micros(self.config.group_wait_us),
            bytes_max: self.config.group_bytes_max,
        }
    }

    /// Whether the sync thread's periodic pass runs (with a ring, checkpoints do its work).
    fn periodic_flush(&self) -> bool {
        self.journal.is_none()
            && (self.config.durability != Durability::Never
                || self.interval_writers.load(Ordering::Acquire))
    }

    /// Makes everything appended so far durable in the data files (and, with a ring,
    /// trims the ring past it).
    fn flush_all(&self) -> Result<()> {
        match &self.journal {
            Some(journal) => {
                // Ring first, so every append handle taken so far completes too.
                journal.ring().flush()?;
                journal.checkpoint(&|| self.flush())
            }
            None => self.flush(),
        }
    }

    /// Replays the ring into the data files at open: every record an entry holds that the
    /// files do not (a topic's entries are in offset order, so the files hold a prefix).
    /// Returns `(records replayed, records the files already held)`.
    fn replay_journal(&self) -> Result<(u64, u64)> {
        let Some(journal) = &self.journal else {
            return Ok((0, 0));
        };
        let ctx = Ctx {
            write_through: false,
            prefault: None,
            journal: None,
            ..self.ctx(self.default_opts())
        };
        let ring = journal.ring();
        let corrupt = |topic: &str, offset: u64, reason: String| Error::Corruption {
            topic: topic.to_owned(),
            offset,
            path: journal.device().to_owned(),
            position: RING_START + offset % ring.ring_bytes(),
            reason,
        };
        let (mut replayed, mut held) = (0, 0);
        for item in ring.recover()? {
            let (at, body) = item?;
            let entry = journal::decode(&body)
                .map_err(|reason| corrupt("", at, format!("journal entry: {reason}")))?;
            let topic = self.topic_or_create(entry.topic)?;
            let next = topic.next_offset();
            let n = entry.records.len() as u64;
            if entry.first > next {
                return Err(corrupt(
                    entry.topic,
                    at,
                    format!(
                        "the ring continues the topic at offset {} but its data files end at {next}",
                        entry.first
                    ),
                ));
            }
            let have = (next - entry.first).min(n);
            held += have;
            if have < n {
                topic.append(&ctx, &entry.records[have as usize..])?;
                replayed += n - have;
            }
        }
        Ok((replayed, held))
    }

    /// Removes staged jobs that were never committed and have been idle past
    /// `staged_ttl_ms`.
    fn remove_abandoned_staged(&self) -> Result<()> {
        let Some(ttl_ms) = self.config.staged_ttl_ms else {
            return Ok(());
        };
        stage::remove_abandoned(
            self.storage.as_ref(),
            &self.dir,
            Duration::from_millis(ttl_ms),
        )
        .map(drop)
    }

    /// One append into the topic, through the ring when there is one. A full ring waits for
    /// the uploader's checkpoints to make room, while they do.
    fn append_to(
        &self,
        topic: &Topic,
        records: &[Append<'_>],
        opts: WriteOpts,
    ) -> Result<(Range<u64>, Option<RingAppend>)> {
        let Some(journal) = &self.journal else {
            return topic.append(&self.ctx(opts), records);
        };
        journal.check_fits(&topic.name, records)?;
        let deadline = crate::clock::deadline_after(RING_FULL_WAIT.max(opts.space_wait));
        // Trim offset at the last full ring, and whether a checkpoint since moved nothing.
        let mut last_trim = None;
        let mut stalled = false;
        loop {
            let seen = journal.checkpoints();
            let result = {
                let _gate = journal.gate();
                topic.append(&self.ctx(opts), records)
            };
            let Err(Error::RingFull { .. }) = result else {
                return result;
            };
            let trim = journal.ring().trim_offset();
            if last_trim == Some(trim) {
                // The last checkpoint moved nothing: let the ring's writes in flight land
                // (padding among them, which a trim then passes over) and checkpoint here.
                // If even that frees nothing, the ring is stuck.
                if stalled {
                    return result;
                }
                stalled = true;
                journal.ring().flush()?;
                journal.checkpoint(&|| self.flush())?;
            } else {
                stalled = false;
                if !journal.wait_checkpoint(seen, deadline) {
                    return result;
                }
            }
            last_trim = Some(trim);
            self.sync.check()?;
        }
    }

    /// Drops the consumed extents at the front of `topic` and queues the files that frees.
    pub(crate) fn reclaim_topic(&self, topic: &Topic) {
        if self.read_only {
            return;
        }
        let _pass = topic.reclaim_lock();
        let committed = self.cursors.min_committed(&topic.name);
        let retention = self.config.retention_for(&topic.name);
        if committed.is_none() && retention.is_unlimited() {
            return;
        }
        let now = crate::clock::now_us();
        let n =
            topic.with_chain(|chain| reclaim::consumable_prefix(chain, committed, retention, now));
        if n == 0 {
            return;
        }
        // The first extent kept carries the topic's next offset over a restart once the ones
        // before it are gone: make it durable first. Otherwise a crash loses it when its
        // records were not synced yet, the topic comes back without extents, and its offsets
        // start again at 0 below the groups' committed offsets.
        if let Some(kept) = topic.with_chain(|chain| chain.get(n).cloned())
            && let Err(e) = kept.sync(self.storage.as_ref(), &topic.name, false)
        {
            self.sync.poison(&e);
            self.report_background(e);
            return;
        }
        let mut doomed = false;
        let dropped = topic.drop_front(n);
        // Consumed extents need no seal; releasing them here lets their mapping go with the
        // file even when no periodic flush runs.
        topic.forget_synced(&dropped);
        for block in dropped {
            // Marked on disk first, front to back: a file is only deleted after, so a topic's
            // extents on disk never have a gap, and a restart does not bring them back.
            if let Err(e) = block.retire(self.storage.as_ref(), ProgressState::Consumed) {
                self.sync.poison(&e);
                self.report_background(e);
                return;
            }
            if block.mark_consumed() {
                self.alloc.doom(&block.file);
                doomed = true;
            }
        }
        if doomed {
            self.wake.notify_all();
        }
    }

    /// Deletes the files whose counters said so: unlinked, then out of the table and the disk
    /// account, our mapping and handle dropped (the space returns once no record still maps
    /// the file). A file whose unlink fails stays known and counted; it is returned for a
    /// retry, with the first error.
    fn delete_doomed(&self) -> (Vec<Arc<DataFile>>, Result<()>) {
        let doomed = self.alloc.take_doomed();
        let mut failed = Vec::new();
        let mut first_error = Ok(());
        let mut removed = false;
        for file in doomed {
            match self.storage.remove_file(&file.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    if first_error.is_ok() {
                        first_error = Err(Error::io("remove data file", &file.path, e));
                    }
                    failed.push(file);
                    continue;
                }
            }
            removed = true;
            self.alloc.forget_file(&file);
        }
        if removed
            && let Err(e) = self.storage.sync_dir(&self.dir)
            && first_error.is_ok()
        {
            first_error = Err(Error::io("fsync directory", &self.dir, e));
        }
        (failed, first_error)
    }

    /// Keeps the first housekeeping error for the next `flush` to return.
    fn report_background(&self, e: Error) {
        let mut slot = self
            .background_error
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(e);
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

    fn append(&self, topic: &Topic, records: &[Append<'_>], opts: WriteOpts) -> Result<Range<u64>> {
        self.check_writable()?;
        self.validate_records(records)?;
        if opts.durability != Durability::Always || self.journal.is_some() {
            let (offsets, ring) = self.append_to(topic, records, opts)?;
            if let Some(ring) = ring
                && opts.durability == Durability::Always
            {
                ring.wait()?;
            }
            return Ok(offsets);
        }
        let in_flight = self.sync.begin_write();
        let (offsets, _) = topic.append(&self.ctx(opts), records)?;
        let bytes = records.iter().map(Append::payload_len).sum();
        let ticket = self.sync.ticket(bytes, false, Some(in_flight));
        self.sync
            .wait_or_lead(ticket, &self.group_limits(), &|| self.sync_group_data())?;
        Ok(offsets)
    }

    fn append_async(
        &self,
        topic: &Topic,
        records: &[Append<'_>],
        opts: WriteOpts,
    ) -> Result<AppendHandle> {
        self.check_writable()?;
        self.validate_records(records)?;
        if self.journal.is_some() {
            let (offsets, ring) = self.append_to(topic, records, opts)?;
            let ring = ring.ok_or_else(|| {
                Error::invalid("backend", "a ring-fronted append returned no ring handle")
            })?;
            return Ok(AppendHandle::ring(offsets, ring));
        }
        let in_flight = self.sync.begin_write();
        let (offsets, _) = topic.append(&self.ctx(opts), records)?;
        let bytes = records.iter().map(Append::payload_len).sum();
        let urgent = opts.durability == Durability::Always;
        let ticket = self.sync.ticket(bytes, urgent, Some(in_flight));
        Ok(AppendHandle::new(Arc::clone(&self.sync), offsets, ticket))
    }

    /// Deletes `name`: its cursors first, then its extents marked `Deleted` oldest first
    /// (a crash part way leaves a topic that lost a prefix), then its files are freed.
    fn delete_topic(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        let topic = self.topic(name)?;
        if !topic.stop_appends(true) {
            return Err(Error::UnknownTopic {
                topic: name.to_owned(),
            });
        }
        self.topics
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .remove(name);
        // Its entries leave the ring before its extents are marked deleted, so a replay
        // never brings back records of a deleted topic.
        if let Some(journal) = &self.journal {
            journal.checkpoint(&|| self.flush())?;
        }
        self.cursors
            .remove_topic(self.storage.as_ref(), &self.dir, name)?;
        let _flushing = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let _pass = topic.reclaim_lock();
        let chain = topic.take_all();
        let active = topic.tail().block.take();
        for block in &chain {
            if let Err(e) = block.retire(self.storage.as_ref(), ProgressState::Deleted) {
                self.sync.poison(&e);
                return Err(e);
            }
        }
        if let Some(block) = active {
            let (count, end) = block.published();
            block.set_final(count, end);
            if block.release_writer() {
                self.alloc.doom(&block.file);
            }
        }
        for block in &chain {
            if block.mark_consumed() {
                self.alloc.doom(&block.file);
            }
        }
        self.wake.notify_all();
        Ok(())
    }

    /// Closes: stops appends, waits for in-flight ones, flushes, marks active extents clean,
    /// and fails waiters that no sync can cover any more.
    fn close(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut result = Ok(());
        if !self.read_only {
            self.alloc.shut_down();
            for topic in self.all_topics() {
                topic.stop_appends(false);
            }
            self.sync.wait_idle();
            result = self.flush_pass(true);
            if let Some(journal) = &self.journal {
                let closed = journal.close(self.storage.as_ref(), result.is_ok());
                result = result.and(closed);
            }
        }
        self.sync.close();
        self.closed.store(true, Ordering::Release);
        // Release mappings held by the tables; records still alive keep theirs.
        self.topics
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .clear();
        self.alloc.clear();
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
        let lock_file = self
            .lock_file
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if process::is_forked(self.fork_generation) {
            // The lock is the parent's too (flock belongs to the shared open file
            // description): closing our descriptor leaves it held, unlocking would not.
            drop(lock_file);
            return;
        }
        // Covers opens that fail after taking the lock; `close` has usually released it.
        release_lock(lock_file);
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

/// Disk space the data files of a directory occupy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskUsage {
    /// Data files (including the spare prepared ahead of need).
    pub files: u64,
    /// Bytes reserved on disk: file headers and every extent handed out.
    pub bytes: u64,
}

/// The ring in front of a directory's data files (the ring backend), as of one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RingStats {
    /// The ring's block device or file.
    pub device: PathBuf,
    /// Its size, header slots included.
    pub capacity_bytes: u64,
    /// Entries below this ring offset are in the durable data files and gone from the ring.
    pub trim_offset: u64,
    /// The ring offset the next entry gets.
    pub next_offset: u64,
    /// Everything below this ring offset is durable in the ring.
    pub flushed_offset: u64,
    /// Ring bytes free for new entries.
    pub free_bytes: u64,
    /// Checkpoints run since open.
    pub checkpoints: u64,
    /// True when the ring writes with `O_DIRECT`.
    pub direct_io: bool,
}

/// An open log directory.
///
/// Cheap to share: wrap it in an `Arc`, or make [`Writer`]s and [`Reader`]s, which are
/// `Send` and hold the directory open.
#[derive(Debug)]
pub struct Wal {
    shared: Arc<Shared>,
    /// The sync and housekeeping threads (none for a read-only handle).
    threads: Mutex<Vec<JoinHandle<()>>>,
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
            if !storage.metadata(dir).is_ok_and(|m| m.is_dir()) {
                let errno = if crate::io::exists(storage.as_ref(), dir) {
                    libc::ENOTDIR
                } else {
                    libc::ENOENT
                };
                return Err(Error::io(
                    "open directory",
                    dir,
                    std::io::Error::from_raw_os_error(errno),
                ));
            }
            None
        } else {
            Some(lock_dir(storage.as_ref(), dir)?)
        };
        let journal = match (&config.ring, read_only) {
            (_, true) => Ok(None),
            (None, false) => Journal::check_unfronted(storage.as_ref(), dir).map(|()| None),
            (Some(backend), false) => {
                Journal::open(dir, &config, backend, Arc::clone(&storage)).map(Some)
            }
        };
        let journal = match journal {
            Ok(j) => j,
            Err(e) => {
                release_lock(lock_file);
                return Err(e);
            }
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
        let mut table = TopicTable {
            next_id: recovered.next_topic_id,
            ..TopicTable::default()
        };
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
        let current_seq = recovered.alloc_current.as_ref().map(|(f, _)| f.seq);
        let spare_seq = recovered.spare.as_ref().map(|f| f.seq);
        let alloc = BlockAllocator::new(
            dir.to_owned(),
            &config,
            recovered.files,
            recovered.next_seq,
            recovered.alloc_current,
            recovered.spare,
        );
        if !read_only {
            // Every file but the one new extents continue in (and the spare) is fully
            // allocated; one holding nothing but consumed extents can go at once.
            for (seq, file) in alloc.files().iter() {
                alloc.account_file(file);
                if Some(*seq) != current_seq
                    && Some(*seq) != spare_seq
                    && file.counters.seal_allocation()
                {
                    alloc.doom(file);
                }
            }
        }
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
            closed: AtomicBool::new(false),
            opener_pid: std::process::id(),
            fork_generation: process::generation(),
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
            sync: Arc::new(SyncQueue::default()),
            interval_writers: AtomicBool::new(false),
            prefault: Prefaulter::default(),
            journal,
            ingest_lock: Mutex::new(()),
        });
        let mut threads = Vec::new();
        if !read_only {
            // What the ring holds beyond the data files goes into them before anything else.
            let (replayed, held) = shared.replay_journal()?;
            {
                let mut report = shared.report.lock().unwrap_or_else(|p| p.into_inner());
                report.ring_records_replayed = replayed;
                report.ring_records_held = held;
            }
            // Seal what recovery cut, before new appends make more work. With a ring, the data
            // files now hold everything it held: empty it.
            shared.flush()?;
            if let Some(journal) = &shared.journal {
                journal.ring().reset()?;
            }
            // Committed staged jobs (one cut by a crash resumes from its ledger) go in before
            // any new append could take the offsets the ledger gives them.
            shared.ingest_committed()?;
            shared.remove_abandoned_staged()?;
            // Rebuild consumption from the persisted cursors and retention; delete what is
            // done, so space from before the restart comes back now.
            shared
                .cursors
                .load_all(shared.storage.as_ref(), &shared.dir)?;
            for topic in shared.all_topics() {
                shared.reclaim_topic(&topic);
            }
            // A file that cannot be unlinked now is retried by the housekeeping thread.
            let (failed, result) = shared.delete_doomed();
            for file in &failed {
                shared.alloc.doom(file);
            }
            if let Err(e) = result {
                shared.report_background(e);
            }
            let mut work_loops = vec![
                ("tidelog-sync", sync_loop as fn(&Shared)),
                ("tidelog-housekeeping", housekeeping_loop),
                ("tidelog-prefault", |shared: &Shared| shared.prefault.run()),
            ];
            if shared.journal.is_some() {
                work_loops.push(("tidelog-upload", upload_loop));
            }
            for (name, work) in work_loops {
                let bg = Arc::clone(&shared);
                let handle = std::thread::Builder::new()
                    .name(name.to_owned())
                    .spawn(move || work(&bg));
                match handle {
                    Ok(h) => threads.push(h),
                    Err(e) => {
                        let wal = Wal {
                            shared,
                            threads: Mutex::new(threads),
                        };
                        let _ = wal.close();
                        return Err(Error::io("spawn thread", dir, e));
                    }
                }
            }
        }
        Ok(Wal {
            shared,
            threads: Mutex::new(threads),
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

    /// True once [`Wal::close`] has run.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// `Ok` while this handle may be used: [`Error::Closed`] after close,
    /// [`Error::Forked`] in a process forked after it was opened.
    pub fn ensure_open(&self) -> Result<()> {
        self.shared.check_open()
    }

    /// True for a handle from [`Wal::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// The ring in front of the data files: `None` without the ring backend (and for
    /// read-only handles, which read the data files alone).
    pub fn ring_stats(&self) -> Option<RingStats> {
        let journal = self.shared.journal.as_ref()?;
        let ring = journal.ring();
        Some(RingStats {
            device: journal.device().to_owned(),
            capacity_bytes: ring.capacity_bytes(),
            trim_offset: ring.trim_offset(),
            next_offset: ring.next_offset(),
            flushed_offset: ring.flushed_offset(),
            free_bytes: ring.free_bytes(),
            checkpoints: journal.checkpoints(),
            direct_io: ring.direct_io(),
        })
    }

    /// What recovery found when this handle opened (and at the last refresh).
    pub fn recovery_report(&self) -> RecoveryReport {
        self.shared
            .report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A writer for `topic`, creating the topic if needed. It uses the Wal's durability
    /// and space wait until told otherwise ([`Writer::with_durability`],
    /// [`Writer::wait_for_space`]).
    pub fn writer(&self, topic: &str) -> Result<Writer> {
        self.shared.check_writable()?;
        let topic = self.shared.topic_or_create(topic)?;
        Ok(Writer {
            opts: self.shared.default_opts(),
            shared: Arc::clone(&self.shared),
            topic,
        })
    }

    /// Appends `value` to `topic` (created if needed); returns its offset. With
    /// [`Durability::Always`] it returns once the record is durable.
    pub fn append(&self, topic: &str, value: &[u8]) -> Result<u64> {
        self.append_record(topic, Append::value(value))
    }

    /// Appends one record with optional key and timestamp; returns its offset.
    pub fn append_record(&self, topic: &str, record: Append<'_>) -> Result<u64> {
        let records = [record];
        let t = self.topic_for(topic, &records)?;
        Ok(self
            .shared
            .append(&t, &records, self.shared.default_opts())?
            .start)
    }

    /// Appends `value` and returns at once with its offset and a handle to wait on for
    /// durability.
    pub fn append_async(&self, topic: &str, value: &[u8]) -> Result<AppendHandle> {
        self.append_batch_async(topic, &[Append::value(value)])
    }

    /// Appends `records` as one crash-atomic batch and returns at once with their offsets
    /// and a handle to wait on for durability.
    pub fn append_batch_async(&self, topic: &str, records: &[Append<'_>]) -> Result<AppendHandle> {
        let t = self.topic_for(topic, records)?;
        self.shared
            .append_async(&t, records, self.shared.default_opts())
    }

    /// Appends `values` as one crash-atomic batch; returns their offsets.
    pub fn append_batch<V: AsRef<[u8]>>(&self, topic: &str, values: &[V]) -> Result<Range<u64>> {
        let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v.as_ref())).collect();
        self.append_batch_records(topic, &records)
    }

    /// Appends `records` (keys, values, timestamps) as one crash-atomic batch.
    pub fn append_batch_records(&self, topic: &str, records: &[Append<'_>]) -> Result<Range<u64>> {
        let t = self.topic_for(topic, records)?;
        self.shared.append(&t, records, self.shared.default_opts())
    }

    /// The topic `records` go to, created if needed, but only once they passed validation:
    /// a rejected append leaves no empty topic behind.
    fn topic_for(&self, topic: &str, records: &[Append<'_>]) -> Result<Arc<Topic>> {
        self.shared.check_writable()?;
        self.shared.validate_records(records)?;
        self.shared.topic_or_create(topic)
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
    /// extent, then its progress slot). Fails with [`Error::Poisoned`] once any sync failed,
    /// and returns the housekeeping thread's error, if it hit one.
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
        self.shared.flush_all()
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
            groups: CursorTable::list(self.shared.storage.as_ref(), &self.shared.dir, topic),
        })
    }

    /// Publishes the staged parts `parts` of `job` (see [`crate::stage`]) into their topics,
    /// in order, exactly once: after this returns every record of those parts is appended
    /// and durable, and none of another part of the job is; after a crash in between, the
    /// next open finishes the job without appending a record twice. Returns the offsets the
    /// job got in each topic. The parts are checked first (each named once, staged, sound,
    /// within the directory's limits); a job whose segments fail their checks is set aside,
    /// not published (see [`crate::stage::jobs`]). Committing a published job again with the
    /// same parts returns the offsets it got. Other appends to the job's topics wait while
    /// it is published, so each topic's share of the job is one contiguous offset range.
    pub fn commit_staged(&self, job: &str, parts: &[&str]) -> Result<Vec<(String, Range<u64>)>> {
        self.shared.check_writable()?;
        stage::job_dir(&self.shared.dir, job)?;
        if parts.is_empty() {
            return Ok(Vec::new());
        }
        // Held across both steps, so the housekeeping thread cannot publish it in between.
        let _one = self
            .shared
            .ingest_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let committed = stage::write_commit(
            self.shared.storage.as_ref(),
            &self.shared.dir,
            job,
            parts,
            None,
            Some(self.shared.staged_limits()),
        )?;
        match committed {
            stage::Committed::Published(ranges) => Ok(ranges),
            stage::Committed::Recorded => self.shared.ingest_job(job),
        }
    }

    /// Deletes `topic`: its records, its cursors, and (once no other topic needs them) its
    /// files. Its writers and readers fail with [`Error::UnknownTopic`] from now on; a later
    /// append creates a new, empty topic of that name.
    pub fn delete_topic(&self, topic: &str) -> Result<()> {
        self.shared.delete_topic(topic)
    }

    /// Deletes the cursor of `group` on `topic`: the group no longer holds records back.
    /// Its open readers fail with [`Error::UnknownGroup`] on their next commit.
    pub fn delete_group(&self, topic: &str, group: &str) -> Result<()> {
        let shared = &self.shared;
        shared.check_writable()?;
        config::validate_name(topic)?;
        config::validate_name(group)?;
        if !shared
            .cursors
            .remove(shared.storage.as_ref(), &shared.dir, topic, group)?
        {
            return Err(Error::UnknownGroup {
                topic: topic.to_owned(),
                group: group.to_owned(),
            });
        }
        if let Ok(t) = shared.topic(topic) {
            shared.reclaim_topic(&t);
        }
        Ok(())
    }

    /// Disk space held by the data files.
    pub fn disk_usage(&self) -> DiskUsage {
        let files = self.shared.alloc.files();
        let bytes = if self.shared.read_only {
            files
                .values()
                .map(|f| f.counters.disk_bytes.load(Ordering::Acquire))
                .sum()
        } else {
            self.shared.alloc.disk_bytes()
        };
        DiskUsage {
            files: files.len() as u64,
            bytes,
        }
    }

    /// The deletion counters of every data file, oldest first.
    pub fn file_states(&self) -> Vec<FileState> {
        let files = self.shared.alloc.files();
        files
            .values()
            .map(|f| f.counters.state(f.seq, &f.path))
            .collect()
    }

    /// Picks up records made durable by the writing process since the last refresh
    /// (read-only handles; a no-op for the writer, which sees its own records at once).
    pub fn refresh(&self) -> Result<()> {
        self.shared.check_open()?;
        if !self.shared.read_only {
            return Ok(());
        }
        let shared = &self.shared;
        let files = shared.alloc.files().clone();
        let mut known = shared.known.lock().unwrap_or_else(|p| p.into_inner());
        let recovered = recovery::recover(
            &shared.dir,
            &shared.config,
            shared.storage.as_ref(),
            false,
            &files,
            &known,
        )?;
        let mut seen = HashSet::new();
        let mut all_present = HashSet::new();
        for t in recovered.topics {
            let topic = {
                let mut table = shared.topics.write().unwrap_or_else(|p| p.into_inner());
                let next_id = table.next_id.max(t.id + 1);
                table.next_id = next_id;
                // Another id under a known name: the writer deleted the topic and created it
                // again. The new topic starts afresh (its offsets from 0); readers of the old
                // one keep their own handle.
                if table.by_name.get(&t.name).is_some_and(|old| old.id != t.id) {
                    table.by_name.remove(&t.name);
                }
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
            // Extents the writer deleted (consumed, retention) leave from the front.
            let present: HashSet<(u64, u32)> = t
                .chain
                .iter()
                .map(|b| (b.file.seq, b.block_index))
                .collect();
            topic.trim_front(|b| present.contains(&(b.file.seq, b.block_index)));
            all_present.extend(present);
            seen.insert(t.name);
        }
        // Topics the writer deleted: nothing of theirs is left to read, and they are no
        // longer listed.
        for topic in shared.all_topics() {
            if !seen.contains(&topic.name) {
                topic.trim_front(|_| false);
                let mut table = shared.topics.write().unwrap_or_else(|p| p.into_inner());
                if table
                    .by_name
                    .get(&topic.name)
                    .is_some_and(|t| Arc::ptr_eq(t, &topic))
                {
                    table.by_name.remove(&topic.name);
                }
            }
        }
        known.retain(|key, _| all_present.contains(key));
        shared.alloc.replace_files(recovered.files);
        *shared.report.lock().unwrap_or_else(|p| p.into_inner()) = recovered.report;
        Ok(())
    }

    /// Stops the background threads, flushes, marks active extents clean and releases the
    /// directory. Later calls on this handle (and its writers and readers) fail with
    /// [`Error::Closed`]; records already read stay valid.
    pub fn close(&self) -> Result<()> {
        // In a forked child the background threads do not exist and the parent still
        // owns the files: there is nothing this handle may flush or release.
        self.shared.check_not_forked()?;
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
        self.shared.sync.stop_thread();
        self.shared.prefault.stop();
        if let Some(journal) = &self.shared.journal {
            journal.stop_uploader();
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in threads {
            // A panicked thread already lost its work; close's own flush reports the state.
            let _ = handle.join();
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if process::is_forked(self.shared.fork_generation) {
            // The thread handles name threads of the parent: neither join nor detach them.
            std::mem::forget(std::mem::take(
                &mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()),
            ));
            return;
        }
        // Errors cannot be returned from drop; `close()` reports them.
        let _ = self.close();
    }
}

/// Appends to one topic. Cheap to clone; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Writer {
    shared: Arc<Shared>,
    topic: Arc<Topic>,
    opts: WriteOpts,
}

impl Writer {
    /// The topic this writer appends to.
    pub fn topic(&self) -> &str {
        &self.topic.name
    }

    /// This writer with its own durability instead of the Wal's.
    pub fn with_durability(mut self, durability: Durability) -> Writer {
        if durability == Durability::Interval {
            self.shared.interval_writers.store(true, Ordering::Release);
        }
        self.opts.durability = durability;
        self
    }

    /// The durability this writer's appends get.
    pub fn durability(&self) -> Durability {
        self.opts.durability
    }

    /// This writer waiting up to `wait` for space when the disk cap is reached, instead of
    /// the Wal's `space_wait_ms`.
    pub fn wait_for_space(mut self, wait: Duration) -> Writer {
        self.opts.space_wait = wait;
        self
    }

    /// Appends `value`; returns its offset. With [`Durability::Always`] it returns once the
    /// record is durable.
    #[inline]
    pub fn append(&self, value: &[u8]) -> Result<u64> {
        Ok(self
            .shared
            .append(&self.topic, &[Append::value(value)], self.opts)?
            .start)
    }

    /// Appends one record with an optional key and timestamp; returns its offset.
    #[inline]
    pub fn append_record(&self, record: Append<'_>) -> Result<u64> {
        Ok(self.shared.append(&self.topic, &[record], self.opts)?.start)
    }

    /// Appends `values` as one batch: after a crash either all of them are there or none.
    pub fn append_batch<V: AsRef<[u8]>>(&self, values: &[V]) -> Result<Range<u64>> {
        let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v.as_ref())).collect();
        self.shared.append(&self.topic, &records, self.opts)
    }

    /// Appends `records` (keys, values, timestamps) as one crash-atomic batch.
    pub fn append_batch_records(&self, records: &[Append<'_>]) -> Result<Range<u64>> {
        self.shared.append(&self.topic, records, self.opts)
    }

    /// Appends `value` and returns at once with its offset and a handle that completes when
    /// it is durable: at once requested with [`Durability::Always`], else at the next
    /// periodic flush or [`Wal::flush`].
    pub fn append_async(&self, value: &[u8]) -> Result<AppendHandle> {
        self.shared
            .append_async(&self.topic, &[Append::value(value)], self.opts)
    }

    /// [`Writer::append_async`] for a crash-atomic batch.
    pub fn append_batch_async(&self, records: &[Append<'_>]) -> Result<AppendHandle> {
        self.shared.append_async(&self.topic, records, self.opts)
    }

    /// The offset the next append gets.
    pub fn next_offset(&self) -> u64 {
        self.topic.next_offset()
    }

    /// Makes everything appended so far (to every topic) durable.
    pub fn flush(&self) -> Result<()> {
        self.shared.check_writable()?;
        self.shared.flush_all()
    }
}

/// Commits the staged parts `parts` of `job` in `dir` from a process that may not hold the
/// directory: records the commit (checked against `config`'s limits), then publishes it with
/// a handle opened with `config`, or, while another process holds the directory for writing,
/// waits up to `wait` for that process (its housekeeping thread) to publish it, opening the
/// directory itself should the holder let go first. A job that cannot be published is an
/// error that says why (see [`stage::wait_published`]).
pub fn commit_staged(
    dir: impl AsRef<Path>,
    config: Config,
    job: &str,
    parts: &[&str],
    wait: Duration,
) -> Result<()> {
    let dir = dir.as_ref();
    if parts.is_empty() {
        return Ok(());
    }
    let limits = stage::Limits {
        record_bytes_max: config.record_bytes_max(),
        batch_bytes_max: config.batch_bytes_max(),
    };
    let committed = stage::write_commit(&StdStorage, dir, job, parts, None, Some(limits))?;
    if let stage::Committed::Published(_) = committed {
        return Ok(());
    }
    let deadline = Instant::now() + wait;
    loop {
        let slice = deadline
            .saturating_duration_since(Instant::now())
            .min(COMMIT_WAIT_SLICE);
        match Wal::open_with(dir, config.clone()) {
            // Opening publishes every committed job (or sets it aside).
            // Still there after that: an abort held it; look again after a while.
            Ok(wal) => {
                wal.close()?;
                slice_wait(dir, job, slice)?;
            }
            // A holder that closed before it saw the commit leaves it to the next opener.
            Err(Error::Locked { .. }) => slice_wait(dir, job, slice)?,
            Err(e) => return Err(e),
        }
        if !stage::job_dir(dir, job)?.join(stage::COMMIT_FILE).exists() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return stage::wait_published(dir, job, Duration::ZERO);
        }
    }
}

/// How long a committer waits for the directory's holder before it tries to open it again.
const COMMIT_WAIT_SLICE: Duration = Duration::from_millis(100);

/// Waits up to `wait` for `job` to be published; a wait that runs out is no error here.
fn slice_wait(dir: &Path, job: &str, wait: Duration) -> Result<()> {
    match stage::wait_published(dir, job, wait) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::TimedOut => Ok(()),
        other => other,
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
    if !crate::io::exists(storage, dir) {
        storage
            .create_dir_all(dir)
            .map_err(|e| Error::io("create directory", dir, e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            storage
                .sync_dir(parent)
                .map_err(|e| Error::io("fsync directory", parent, e))?;
        }
    }
    if !storage.metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Err(Error::io(
            "open directory",
            dir,
            std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    let path = dir.join(LOCK_FILE);
    let file = match storage.lock_file(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            return Err(Error::Locked {
                path: dir.to_owned(),
            });
        }
        Err(e) => return Err(Error::io("lock directory", &path, e)),
    };
    let cursors = dir.join(CURSOR_DIR);
    if !crate::io::exists(storage, &cursors) {
        storage
            .create_dir_all(&cursors)
            .map_err(|e| Error::io("create directory", &cursors, e))?;
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(file)
}

/// The sync thread: group commits for `Always` appenders, and the periodic flush (data in
/// `Interval` mode, progress slots and seals in both).
fn sync_loop(shared: &Shared) {
    let interval = Duration::from_millis(shared.config.sync_interval_ms);
    let limits = shared.group_limits();
    let mut tick = Instant::now() + interval;
    loop {
        match shared.sync.next_wake(tick) {
            Wake::Stop => return,
            // Failures poison the queue and reach every caller through it.
            Wake::Group => shared.sync.run_group(&limits, &|| shared.sync_group_data()),
            Wake::Tick => {
                tick = Instant::now() + interval;
                if shared.periodic_flush() {
                    let _ = shared.flush();
                }
            }
        }
    }
}

/// The uploader thread (ring backend): checkpoints that move the ring's contents into the
/// durable data files and trim the ring.
fn upload_loop(shared: &Shared) {
    if let Some(journal) = &shared.journal {
        journal.run_uploader(
            Duration::from_millis(shared.config.sync_interval_ms),
            &|| shared.flush(),
            &|e| shared.report_background(e),
        );
    }
}

/// The housekeeping thread: spare files, the clock, retention, and file deletion.
/// How often the housekeeping thread looks for abandoned staged jobs (they are a day old).
const STAGED_CHECK_EVERY: Duration = Duration::from_secs(60);

fn housekeeping_loop(shared: &Shared) {
    let tick = Duration::from_millis(shared.config.sync_interval_ms);
    let mut retry: Vec<Arc<DataFile>> = Vec::new();
    let mut staged_checked = Instant::now();
    let mut guard = shared.background.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if guard.stop {
            return;
        }
        if !shared.alloc.has_doomed() {
            guard = shared
                .wake
                .wait_timeout(guard, tick)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if guard.stop {
                return;
            }
        }
        drop(guard);
        shared.clock.recalibrate();
        if shared.alloc.wants_spare() {
            // A failure here is retried by the allocating thread, which reports it.
            let _ = shared.alloc.prepare_spare(shared.storage.as_ref());
        }
        for topic in shared.all_topics() {
            if !shared.config.retention_for(&topic.name).is_unlimited() {
                shared.reclaim_topic(&topic);
            }
        }
        // Staged jobs another process committed while we hold the directory.
        if let Err(e) = shared.ingest_committed() {
            shared.report_background(e);
        }
        if staged_checked.elapsed() >= STAGED_CHECK_EVERY {
            staged_checked = Instant::now();
            if let Err(e) = shared.remove_abandoned_staged() {
                shared.report_background(e);
            }
        }
        // Failed unlinks wait for the next tick, so a persistent failure does not spin.
        for file in retry.drain(..) {
            shared.alloc.doom(&file);
        }
        let (failed, result) = shared.delete_doomed();
        retry = failed;
        if let Err(e) = result {
            shared.report_background(e);
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

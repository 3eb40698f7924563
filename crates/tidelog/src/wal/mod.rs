//! The `Wal` facade: open a directory, append through writers, read through readers, flush,
//! delete and close. Each duty lives in its own file below; this one only routes.
//!
//! - `state`: what a handle shares with its writers, readers and threads;
//! - `open`: open (lock, recovery, replay), a read-only refresh, close;
//! - `writer`: [`Writer`] and the append entry points;
//! - `durability`: the durability strategy chosen at open (data files alone, or a ring);
//! - `flush`: the data files' flush pass and a group commit's I/O;
//! - `topics`: the topic table;
//! - `delete`: topic and group deletion;
//! - `threads`: the background threads;
//! - `publish`: publishing staged jobs ([`commit_staged`] is here);
//! - `lock`: the directory lock; `info`: the report types.

mod delete;
mod durability;
mod flush;
mod follow;
mod info;
mod lead;
mod link;
mod lock;
mod open;
mod publish;
mod state;
mod threads;
#[cfg(feature = "tier")]
mod tier;
#[cfg(feature = "tier")]
pub use tier::TierFlush;
mod topics;
mod writer;

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use info::{DiskUsage, Leader, RingStats, TopicInfo};
pub use lock::LOCK_FILE;
pub use writer::Writer;

use crate::config::ReaderOptions;
use crate::config::{Config, validate_name};
use crate::cursor::CursorTable;
use crate::error::{Error, Result};
use crate::file::FileState;
use crate::io::{self, StdStorage, Storage};
use crate::poison::{PanicGuard, Recover};
use crate::reader::{self, Reader, ReaderHandle, Record};
use crate::record::Append;
use crate::recovery::RecoveryReport;
use crate::stage;
use crate::sync::AppendHandle;
use crate::topic::Topic;
use state::State;
use threads::Threads;

/// An open log directory.
///
/// Cheap to share: wrap it in an `Arc`, or make [`Writer`]s and [`Reader`]s, which are
/// `Send` and hold the directory open.
#[derive(Debug)]
pub struct Wal {
    state: Arc<State>,
    /// The background threads (none for a read-only handle).
    threads: Threads,
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

    /// Opens `dir` read-only: no lock is taken, nothing is written. Records the writer
    /// publishes (in another process) appear after [`Wal::refresh`] or during
    /// [`Wal::wait_for_records`], through the shared state file the writer keeps; without
    /// one (no writer of this boot), as the writer makes them durable.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Wal> {
        Self::open_read_only_with(dir, Config::default())
    }

    /// Opens `dir` read-only with `config` (its limits and index interval apply).
    pub fn open_read_only_with(dir: impl AsRef<Path>, config: Config) -> Result<Wal> {
        Self::open_read_only_with_storage(dir, config, Arc::new(StdStorage))
    }

    /// Opens `dir` read-only with `config`, doing all file I/O through `storage`.
    pub fn open_read_only_with_storage(
        dir: impl AsRef<Path>,
        config: Config,
        storage: Arc<dyn Storage>,
    ) -> Result<Wal> {
        Self::open_inner(dir.as_ref(), config, storage, true)
    }

    fn open_inner(
        dir: &Path,
        config: Config,
        storage: Arc<dyn Storage>,
        read_only: bool,
    ) -> Result<Wal> {
        let state = open::open_state(dir, config, storage, read_only)?;
        if read_only {
            follow::note_reported_durable(&state);
            return Ok(Wal {
                state,
                threads: Threads::default(),
            });
        }
        // A failure here drops the state unclosed: nothing is flushed or marked clean over
        // what could not be recovered, and the lock is released.
        open::prepare_writable(&state)?;
        let (threads, started) = Threads::spawn(&state);
        let wal = Wal { state, threads };
        if let Err(e) = started {
            let _ = wal.close();
            return Err(e);
        }
        Ok(wal)
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.state.dir
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.state.config
    }

    /// True once [`Wal::close`] has run.
    pub fn is_closed(&self) -> bool {
        self.state.status.is_closed()
    }

    /// `Ok` while this handle may be used: [`Error::Closed`](crate::Error::Closed) after close,
    /// [`Error::Forked`](crate::Error::Forked) in a process forked after it was opened.
    pub fn ensure_open(&self) -> Result<()> {
        self.state.check_open()
    }

    /// True for a handle from [`Wal::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.state.status.is_read_only()
    }

    /// The ring in front of the data files: `None` without the ring backend (and for
    /// read-only handles, which read the data files alone).
    pub fn ring_stats(&self) -> Option<RingStats> {
        let journal = self.state.durable.journal()?;
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
        self.state.recovered.lock().recover().report.clone()
    }

    /// A writer for `topic`, creating the topic if needed. It uses the Wal's durability
    /// and space wait until told otherwise ([`Writer::with_durability`],
    /// [`Writer::wait_for_space`]).
    pub fn writer(&self, topic: &str) -> Result<Writer> {
        self.state.check_writable()?;
        let topic = self.state.topic_or_create(topic)?;
        Ok(Writer::new(Arc::clone(&self.state), topic))
    }

    /// Appends `value` to `topic` (created if needed); returns its offset. With
    /// [`crate::Durability::Always`] it returns once the record is durable.
    pub fn append(&self, topic: &str, value: &[u8]) -> Result<u64> {
        self.append_record(topic, Append::value(value))
    }

    /// Appends one record with optional key and timestamp; returns its offset.
    pub fn append_record(&self, topic: &str, record: Append<'_>) -> Result<u64> {
        Ok(self.append_batch_records(topic, &[record])?.start)
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
        writer::append_async_checked(&self.state, &t, records, self.state.default_opts())
    }

    /// Appends `values` as one crash-atomic batch; returns their offsets.
    pub fn append_batch<V: AsRef<[u8]>>(&self, topic: &str, values: &[V]) -> Result<Range<u64>> {
        let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v.as_ref())).collect();
        self.append_batch_records(topic, &records)
    }

    /// Appends `records` (keys, values, timestamps) as one crash-atomic batch.
    pub fn append_batch_records(&self, topic: &str, records: &[Append<'_>]) -> Result<Range<u64>> {
        let t = self.topic_for(topic, records)?;
        writer::append_checked(&self.state, &t, records, self.state.default_opts())
    }

    /// The topic `records` go to, created if needed, but only once the handle and the
    /// records passed their checks (which the append then does not repeat): a rejected
    /// append leaves no empty topic behind.
    fn topic_for(&self, topic: &str, records: &[Append<'_>]) -> Result<Arc<Topic>> {
        self.state.check_writable()?;
        self.state.validate_records(records)?;
        self.state.topic_or_create(topic)
    }

    /// A reader of `topic` for consumer `group`, starting at its committed offset.
    pub fn reader(&self, topic: &str, group: &str) -> Result<Reader> {
        self.reader_with(topic, ReaderOptions::group(group))
    }

    /// A reader with explicit options (anonymous readers, start positions, commit modes).
    pub fn reader_with(&self, topic: &str, options: ReaderOptions) -> Result<Reader> {
        let state = &self.state;
        state.check_open()?;
        let mut t = self.lookup(topic)?;
        // What other processes published so far: a reader from the latest starts after it.
        self.follow_others(&t)?;
        if t.is_deleted() {
            // Another process deleted it: the topic of that name now, if any.
            t = state.topics.get_live(topic)?;
            self.follow_others(&t)?;
        }
        let cursor = match &options.group {
            Some(group) => {
                validate_name(group)?;
                Some(
                    state
                        .cursors
                        .get(state.storage.as_ref(), &state.dir, topic, group)?,
                )
            }
            None => None,
        };
        let handle = ReaderHandle {
            status: Arc::clone(&state.status),
            reclaim: Arc::clone(&state.reclaim),
            tier: state.tier.clone(),
        };
        Reader::new(handle, t, cursor, &options)
    }

    /// The record at `offset` of `topic`, zero-copy.
    pub fn read(&self, topic: &str, offset: u64) -> Result<Record> {
        self.state.check_open()?;
        let topic = self.state.topics.get(topic)?;
        if offset >= topic.next_offset() {
            self.follow_others(&topic)?;
        }
        reader::read_at(&topic, self.state.tier.as_ref(), offset)
    }

    /// True when other processes append to what this handle reads: a read-only handle, or
    /// a shared-mode one. Its readers see their records after a catch-up, which
    /// [`Wal::wait_for_records`] makes (with a zero timeout, at once) and every new reader
    /// makes at its start.
    pub fn follows_others(&self) -> bool {
        self.state.status.is_read_only() || self.state.topics.is_shared_mode()
    }

    /// Catches `topic` up with other processes' appends (shared mode and read-only handles).
    /// The topic `name` to read or describe. A read-only handle reads the directory again
    /// first when it does not know the name (the writer may have created it since) or the
    /// current shared state file has no slot for the topic it knows (the writer may have
    /// deleted it, and created it again).
    fn lookup(&self, name: &str) -> Result<Arc<Topic>> {
        let state = &self.state;
        let found = state.topics.get_live(name);
        if !state.status.is_read_only() {
            return found;
        }
        match found {
            Ok(t) if !state.follow.lacks_slot(&t) => return Ok(t),
            Ok(_) | Err(Error::UnknownTopic { .. }) => {}
            Err(e) => return Err(e),
        }
        follow::refresh(state)?;
        state.topics.get_live(name)
    }

    fn follow_others(&self, topic: &Arc<Topic>) -> Result<()> {
        if self.follows_others() {
            follow::catch_up(&self.state, topic)?;
        }
        Ok(())
    }

    /// Makes every record appended so far durable (msync of the dirty ranges of each
    /// extent, then its progress slot). Fails with [`Error::Poisoned`](crate::Error::Poisoned) once any sync failed,
    /// and returns the housekeeping thread's error, if it hit one.
    pub fn flush(&self) -> Result<()> {
        self.state.check_open()?;
        if self.state.status.is_read_only() {
            return Ok(());
        }
        if let Some(e) = self.state.reclaim.take_error() {
            return Err(e);
        }
        let _panic = PanicGuard::new(&self.state.sync.poison, "flush (it panicked)");
        self.state.durable.flush_all(&self.state.flusher)
    }

    /// Names of all topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        self.state.topics.names()
    }

    /// Offsets, size and groups of `topic`.
    pub fn topic_info(&self, topic: &str) -> Result<TopicInfo> {
        let state = &self.state;
        state.check_open()?;
        let t = self.lookup(topic)?;
        if state.topics.is_shared_mode() {
            follow::catch_up(state, &t)?;
        }
        Ok(TopicInfo {
            name: t.name.clone(),
            first_offset: reader::first_readable(&t, state.tier.as_deref()),
            local_first_offset: t.first_offset().max(t.log_start()),
            next_offset: t.next_offset(),
            durable_offset: t.durable_next().min(t.next_offset()),
            bytes: t.bytes(),
            extents: t.extent_count(),
            groups: CursorTable::list(state.storage.as_ref(), &state.dir, topic)?,
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
        let state = &self.state;
        state.check_writable()?;
        stage::job_dir(&state.dir, job)?;
        if parts.is_empty() {
            return Ok(Vec::new());
        }
        let _panic = PanicGuard::new(&state.sync.poison, "staged publish (it panicked)");
        // Held across both steps, so no other publisher (this process's housekeeping
        // thread, another process) publishes it in between.
        let Some(_turn) = state.dir_lock.publish_turn(COMMIT_TURN_WAIT)? else {
            return Err(crate::Error::Locked {
                path: state.dir.clone(),
            });
        };
        // Alone (no other process may join meanwhile), segments are adopted; beside
        // others, the job's topics are reserved and every segment copied.
        let alone = state.housekeeping_turn();
        let across = alone.is_none();
        // A deletion a dead process cut short holds its topic's name until it is finished,
        // which needs this turn.
        if state.topics.is_shared_mode() {
            delete::finish_cut_short(state)?;
        }
        let committed = stage::write_commit(
            state.storage.as_ref(),
            &state.dir,
            job,
            parts,
            None,
            Some(state.limits),
        )?;
        match committed {
            stage::Committed::Published(ranges) => Ok(ranges),
            stage::Committed::Recorded => {
                state.resume_cut_short(across)?;
                state.ingest_job(job, across)
            }
        }
    }

    /// Deletes `topic`: its records, its cursors, and (once no other topic needs them) its
    /// files. Its writers and readers fail with [`Error::UnknownTopic`](crate::Error::UnknownTopic) from now on; a later
    /// append creates a new, empty topic of that name.
    pub fn delete_topic(&self, topic: &str) -> Result<()> {
        delete::delete_topic(&self.state, topic)
    }

    /// Deletes the records of `topic` below `before_offset` (Kafka's DeleteRecords): the
    /// topic's first offset becomes `before_offset` (at most its next offset), reads below it
    /// fail with [`Error::OffsetOutOfRange`](crate::Error::OffsetOutOfRange) in every
    /// process, groups committed below it resume there, and the extents wholly below it are
    /// freed. Durable when it returns (the records below are synced first). Returns the
    /// topic's first offset after the call; a `before_offset` at or below the current start
    /// changes nothing.
    pub fn delete_records(&self, topic: &str, before_offset: u64) -> Result<u64> {
        delete::delete_records(&self.state, topic, before_offset)
    }

    /// Deletes the cursor of `group` on `topic`: the group no longer holds records back.
    /// Its open readers fail with [`Error::UnknownGroup`](crate::Error::UnknownGroup) on their next commit.
    pub fn delete_group(&self, topic: &str, group: &str) -> Result<()> {
        delete::delete_group(&self.state, topic, group)
    }

    /// Ends every topic's open extent and returns once the tier's bucket and manifest hold
    /// every record appended to this handle's topics before the call (`timeout`: at most
    /// that long, then [`Error::TierTimeout`](crate::Error::TierTimeout)). Beside other
    /// processes, the one that leads housekeeping uploads; this one waits for its deltas.
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) without a tier,
    /// [`Error::Fenced`](crate::Error::Fenced) once another producer took the prefix.
    pub fn tier_flush(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        #[cfg(feature = "tier")]
        {
            let _panic = PanicGuard::new(&self.state.sync.poison, "tier flush (it panicked)");
            tier::tier_flush(&self.state, timeout)
        }
        #[cfg(not(feature = "tier"))]
        {
            let _ = timeout;
            self.state.check_writable()?;
            Err(crate::Error::invalid("tier", "this handle has no tier"))
        }
    }

    /// Begins a [`Wal::tier_flush`] whose waits the caller slices itself (to check for
    /// interrupts between them): see [`TierFlush::wait_until`].
    #[cfg(feature = "tier")]
    pub fn tier_flush_begin(&self) -> Result<TierFlush> {
        TierFlush::begin(&self.state)
    }

    /// What this handle knows of its tier (`None` without one): uploads, lag, retries and
    /// the last error.
    pub fn tier_status(&self) -> Result<Option<crate::TierStatus>> {
        self.state.check_open()?;
        #[cfg(feature = "tier")]
        {
            tier::tier_status(&self.state)
        }
        #[cfg(not(feature = "tier"))]
        {
            Ok(None)
        }
    }

    /// Shared mode: the process that leads housekeeping among those sharing the
    /// directory (a read-only handle reads it too). `None` for an exclusive handle, before
    /// the first shared-mode process's housekeeping took the lead, and once closed.
    pub fn leader(&self) -> Option<Leader> {
        let shared = self.state.follow.state()?;
        let (epoch, pid, beat_us) = shared.leader();
        if epoch == 0 {
            return None;
        }
        let idle_ms = crate::clock::now_us().saturating_sub(beat_us) / 1000;
        Some(Leader {
            pid,
            epoch,
            idle_ms,
        })
    }

    /// Disk space held by the data files.
    pub fn disk_usage(&self) -> DiskUsage {
        let files = self.state.alloc.files();
        let bytes = if self.state.status.is_read_only() {
            files
                .values()
                .map(|f| f.counters.disk_bytes.load(Ordering::Acquire))
                .sum()
        } else {
            self.state.alloc.disk_bytes()
        };
        DiskUsage {
            files: files.len() as u64,
            bytes,
        }
    }

    /// The deletion counters of every data file, oldest first.
    pub fn file_states(&self) -> Vec<FileState> {
        let files = self.state.alloc.files();
        files
            .values()
            .map(|f| f.counters.state(f.seq, &f.path))
            .collect()
    }

    /// Picks up what other processes published since the last refresh: at once through the
    /// shared state file where the writers keep one, else what they made durable
    /// (read-only handles). A shared-mode handle catches every topic up, those other
    /// processes created included; a no-op for an exclusive handle, which sees its own
    /// records at once.
    pub fn refresh(&self) -> Result<()> {
        self.state.check_open()?;
        if self.state.topics.is_shared_mode() {
            // Every topic, those other processes created included.
            for topic in self.state.topics.every()? {
                follow::catch_up(&self.state, &topic)?;
            }
            return Ok(());
        }
        if !self.state.status.is_read_only() {
            return Ok(());
        }
        follow::refresh(&self.state)
    }

    /// Waits until `reader` has a record to return (true) or `timeout` passes (false),
    /// without polling: the reader sleeps on its topic's word in the shared state file
    /// (`tidelog.state`), which the writer's publish wakes, in this process or another,
    /// within microseconds. A read-only handle catches up with the writer on the way
    /// (as [`Wal::refresh`] does). `Closed` when the handle closes meanwhile; each sleep
    /// lasts at most 100 ms, so a lost wake-up costs no more. With a zero `timeout` it
    /// only catches up: the cheap way for a read-only handle to see what the writer
    /// published since (no syscall while the writer stays in the same extent), where
    /// [`Wal::refresh`] always reads the directory again.
    pub fn wait_for_records(&self, reader: &Reader, timeout: Duration) -> Result<bool> {
        follow::wait(&self.state, reader, timeout)
    }

    /// Stops the background threads, flushes, marks active extents clean and releases the
    /// directory. Later calls on this handle (and its writers and readers) fail with
    /// [`Error::Closed`](crate::Error::Closed); records already read stay valid.
    pub fn close(&self) -> Result<()> {
        // In a forked child the background threads do not exist and the parent still
        // owns the files: there is nothing this handle may flush or release.
        self.state.status.check_not_forked()?;
        self.threads.stop(&self.state);
        let result = open::close(&self.state);
        let background_error = self.state.reclaim.take_error();
        match (result, background_error) {
            (Err(e), _) | (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if self.state.status.is_forked() {
            // The thread handles name threads of the parent: neither join nor detach them.
            self.threads.forget();
            return;
        }
        // Errors cannot be returned from drop; `close()` reports them.
        let _ = self.close();
    }
}

/// How long a committer waits for the directory's holder before it tries to open it again.
const COMMIT_WAIT_SLICE: Duration = Duration::from_millis(100);
/// Longest `commit_staged` waits for another publish (of this process's housekeeping or of
/// another process) to end.
const COMMIT_TURN_WAIT: Duration = Duration::from_secs(60);

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
        record_bytes_max: config.effective_max_record_bytes(),
        batch_bytes_max: config.effective_max_batch_bytes(),
    };
    let committed = stage::write_commit(&StdStorage, dir, job, parts, None, Some(limits))?;
    if let stage::Committed::Published(_) = committed {
        return Ok(());
    }
    let deadline = crate::clock::deadline_after(wait);
    loop {
        let slice = deadline
            .saturating_duration_since(Instant::now())
            .min(COMMIT_WAIT_SLICE);
        // Exclusive: beside a holder this waits for it to publish, and joins no other
        // process's shared directory (which would leave its file deletion to the next open).
        match Wal::open_with(dir, config.clone().exclusive(true)) {
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
        let commit = stage::job_dir(dir, job)?.join(stage::COMMIT_FILE);
        // Gone: published as its record says, or aborted (an error).
        if !io::exists(&StdStorage, &commit)? || Instant::now() >= deadline {
            return stage::wait_published(dir, job, Duration::ZERO);
        }
    }
}

/// Waits up to `wait` for `job` to be published; a wait that runs out is no error here.
fn slice_wait(dir: &Path, job: &str, wait: Duration) -> Result<()> {
    match stage::wait_published(dir, job, wait) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::TimedOut => Ok(()),
        other => other,
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Wal>();
    is::<Writer>();
    is::<Reader>();
    is::<Record>();
    is::<crate::extent::Extent>();
}

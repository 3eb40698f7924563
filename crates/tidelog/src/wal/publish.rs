//! Publishing committed staged jobs (`crate::stage`): the directory holder's side of Spark's
//! write protocol. Large segments are adopted whole as data files (their records are never
//! copied: the publish rewrites a page per extent); small ones are copied into the topics.
//!
//! Publishes take turns (`DirLock::publish_turn`: a mutex in the process, `PUBLISH_BYTE`
//! across processes). Beside other processes (shared mode, not alone) a publish copies
//! every segment, and reserves each of its topics in the shared state file before it takes
//! the job's start there (`S_PUBLISHER`): appenders of every process wait until the job is
//! published, so each topic's share of the job is one contiguous range and a resumed
//! publish may count every record after the start as the job's. A reservation whose
//! publisher died stays until the next turn's holder finished the job.

use std::ops::{ControlFlow, Range};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::follow;
use super::state::State;
use super::topics::slot_of;
use crate::alloc::SHARED_LOCK_WAIT;
use crate::config::RecordFormat;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::file::{DataFile, data_file_name};
use crate::format::ProgressState;
use crate::io;
use crate::stage::segment::{Placement, Segment, StagedExtent};
use crate::stage::{self, Manifest, PartManifest, SegmentEntry};
use crate::topic::{Append, Ctx, Topic};

/// The topics of a job being published, made exclusive, released however the publish ends.
struct Exclusive(Vec<Arc<Topic>>);

impl Drop for Exclusive {
    fn drop(&mut self) {
        for t in &self.0 {
            t.end_ingest();
        }
    }
}

/// Beside other processes: the job's topics reserved in the shared state file (see the
/// module's doc). Dropped without [`Reserved::finish`], the reservations end only while
/// the job owns no offsets yet (`keep` false): from its ledger on, they stay for the next
/// publisher.
struct Reserved {
    topics: Vec<Arc<Topic>>,
    keep: bool,
}

impl Reserved {
    /// The job is published: every reservation ends.
    fn finish(mut self) {
        self.keep = false;
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        for t in &self.topics {
            if let Some(slot) = t.slot() {
                slot.end_publish();
            }
        }
    }
}

/// A job's topics during its publish: names in order of first appearance, their topics, and
/// per topic how many of the job's records the data files already hold and are yet to be
/// met in the walk over the segments (a resumed publish skips them). `across`: other
/// processes share the directory (their appends wait on the reservations; every segment is
/// copied, each batch under its topic's append lock).
struct JobTopics {
    names: Vec<(String, u64)>,
    topics: Vec<Arc<Topic>>,
    skip: Vec<u64>,
    across: bool,
}

impl JobTopics {
    fn index(&self, topic: &str) -> Option<usize> {
        self.names.iter().position(|(t, _)| t == topic)
    }
}

/// How a committed job's publish ended.
pub(super) enum Outcome {
    /// Published (or a sink's replay, dropped): the offsets it got per topic, when known.
    Published(Vec<(String, Range<u64>)>),
    /// It cannot be published: set aside (see [`stage::set_aside`]), the error says why.
    SetAside(Error),
    /// Not published by this call: its commit was gone (published meanwhile, or aborted),
    /// or its lock stayed held (an abort removing it, a forked child's copy of the lock).
    Passed,
}

/// Longest [`State::ingest_job`] waits for a job's lock: its caller is told the job's fate.
const COMMIT_JOB_LOCK_WAIT: Duration = Duration::from_secs(2);

/// What a publish found checked: each segment's manifest entry and, unless an earlier
/// publish of the job adopted it, the segment; the job's records per topic.
struct Plan {
    segments: Vec<(SegmentEntry, Option<Segment>)>,
    names: Vec<(String, u64)>,
}

/// Whether `e`, met while checking a job, is the job's own fault (its bytes or its commit
/// are unsound, or its records exceed the directory's limits), not the system's (an I/O
/// error that may pass, a full disk, a lock held too long, a poisoned or closed handle).
/// Only the kinds listed are the job's: any other leaves it committed, to be tried again,
/// since a job set aside is never published.
fn is_input_error(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => matches!(
            source.kind(),
            std::io::ErrorKind::NotFound
                | std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::InvalidData
        ),
        Error::Corruption { .. }
        | Error::InvalidTopic { .. }
        | Error::LimitExceeded { .. }
        | Error::InvalidArgument { .. }
        | Error::UnsupportedVersion { .. } => true,
        _ => false,
    }
}

impl State {
    /// Publishes every committed staged job found in the directory (`across`: beside
    /// other processes). A job that cannot be published is set aside and passed by: it is
    /// reported through `stage::wait_published` and `stage::jobs`, and blocks neither the
    /// directory nor the other jobs. The caller holds the publish turn.
    pub(super) fn ingest_committed(&self, across: bool) -> Result<()> {
        self.publish_jobs(false, across)
    }

    /// Finishes the publishes cut short (jobs with a ledger), before another job may take
    /// offsets in their topics. The caller holds the publish turn.
    pub(super) fn resume_cut_short(&self, across: bool) -> Result<()> {
        self.publish_jobs(true, across)
    }

    /// Publishes the committed jobs, those cut short first (only those: `cut_short`).
    fn publish_jobs(&self, cut_short: bool, across: bool) -> Result<()> {
        for job in self.committed_jobs(cut_short)? {
            self.publish_job(&job, across, stage::JOB_LOCK_WAIT)?;
        }
        Ok(())
    }

    /// Housekeeping's publish (`across`: beside other processes): every committed job,
    /// then the end of the reservations no publish holds any more (their publisher died
    /// after its job was done, or before it took offsets; a job it cut short was just
    /// finished). The caller holds the publish turn.
    pub(super) fn publish_committed(&self, across: bool) -> Result<()> {
        self.ingest_committed(across)?;
        if let Some(shared) = self.follow.writer_state()
            && self.topics.is_shared_mode()
        {
            shared.end_publishes();
        }
        Ok(())
    }

    /// The committed jobs in the directory, in the order they are published (only those
    /// with a ledger when `cut_short`).
    fn committed_jobs(&self, cut_short: bool) -> Result<Vec<String>> {
        let storage = self.storage.as_ref();
        stage::remove_leftovers(storage, &self.dir)?;
        let staging = self.dir.join(stage::STAGING_DIR);
        let entries = match storage.read_dir(&staging) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list staging directory", &staging, e)),
        };
        // A publish cut short resumes first: its ledger gives it the offsets after each of
        // its topics' records as they were then, and another job published before it would
        // take them (the resume would count that job's records as its own and skip as many
        // of its own). Then the others, by name.
        let mut jobs: Vec<(bool, String)> = Vec::new();
        for entry in entries {
            // Not a job: the sinks' ledgers, a removal cut short.
            let Some(name) = entry.name.to_str().filter(|n| !n.starts_with('.')) else {
                continue;
            };
            let path = staging.join(name);
            if !io::exists(storage, &path.join(stage::COMMIT_FILE))?
                || io::exists(storage, &path.join(stage::FAILED_FILE))?
            {
                continue;
            }
            let fresh = !io::exists(storage, &path.join(stage::INGEST_FILE))?;
            if !(cut_short && fresh) {
                jobs.push((fresh, name.to_owned()));
            }
        }
        jobs.sort();
        Ok(jobs.into_iter().map(|(_, job)| job).collect())
    }

    /// Publishes committed job `job` (see [`State::publish_job`]); a job set aside is its
    /// error. Passed by, it is published only as its record says (published meanwhile);
    /// otherwise a job still locked is a timed-out error (it stays committed) and one gone
    /// is [`stage::not_published_error`] (aborted). The caller holds the publish turn.
    pub(super) fn ingest_job(&self, job: &str, across: bool) -> Result<Vec<(String, Range<u64>)>> {
        match self.publish_job(job, across, COMMIT_JOB_LOCK_WAIT)? {
            Outcome::Published(ranges) => Ok(ranges),
            Outcome::SetAside(e) => Err(e),
            Outcome::Passed => {
                let storage = self.storage.as_ref();
                if let Some(ranges) = stage::published_ranges(storage, &self.dir, job, None)? {
                    return Ok(ranges);
                }
                let job_dir = stage::job_dir(&self.dir, job)?;
                if io::exists(storage, &job_dir.join(stage::COMMIT_FILE))? {
                    return Err(Error::io(
                        "lock staged job (held by an abort, or a child process's copy)",
                        &job_dir,
                        std::io::Error::from(std::io::ErrorKind::TimedOut),
                    ));
                }
                Err(stage::not_published_error(job))
            }
        }
    }

    /// Removes staged jobs that were never committed and have been idle past
    /// `staged_ttl_ms`.
    pub(super) fn remove_abandoned_staged(&self) -> Result<()> {
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

    /// Sets job `job_dir` aside when `e` is the job's own fault (the outcome then carries
    /// `e`, later ones [`stage::failed_error`]); otherwise `e` stands.
    fn set_aside_or(&self, job_dir: &Path, e: Error) -> Result<Outcome> {
        if !is_input_error(&e) {
            return Err(e);
        }
        stage::set_aside(self.storage.as_ref(), job_dir, &e.to_string())?;
        Ok(Outcome::SetAside(e))
    }

    /// Checks committed job `job_dir` before anything of it is published: its part list,
    /// every manifest, every segment still in the directory (its slots and footers, and the
    /// records of one too small to adopt, which will be copied), and its records against the
    /// directory's limits.
    fn plan(&self, job_dir: &Path, manifest: &stage::Manifest, across: bool) -> Result<Plan> {
        for (i, part) in manifest.parts.iter().enumerate() {
            if manifest.parts[..i].contains(part) {
                return Err(stage::staged_corruption(
                    &job_dir.join(stage::COMMIT_FILE),
                    &format!("the commit names part {part:?} twice"),
                ));
            }
        }
        // Only an adoption takes a segment away, and only after the ledger is written.
        let resumed = io::exists(self.storage.as_ref(), &job_dir.join(stage::INGEST_FILE))?;
        let limits = self.limits;
        let mut segments = Vec::new();
        let mut names: Vec<(String, u64)> = Vec::new();
        for part in &manifest.parts {
            let part_manifest: PartManifest =
                stage::read_manifest(self.storage.as_ref(), job_dir, part)?;
            for entry in part_manifest.segments {
                limits.check(entry.max_record_bytes)?;
                for (topic, n) in &entry.counts {
                    match names.iter_mut().find(|(t, _)| t == topic) {
                        Some((_, count)) => {
                            *count = count.checked_add(*n).ok_or_else(|| {
                                Error::limit("staged records of a topic", u64::MAX, u64::MAX)
                            })?;
                        }
                        None => names.push((topic.clone(), *n)),
                    }
                }
                let storage = self.storage.as_ref();
                let Some(segment) = stage::listed_segment(storage, job_dir, part, &entry, resumed)?
                else {
                    // Adopted by an earlier publish of this job that stopped part way: its
                    // records are in the data files.
                    segments.push((entry, None));
                    continue;
                };
                // Checked whole here if it will be copied: nothing is published of a job
                // whose records do not read.
                if across || !self.adoptable(&segment) {
                    segment.for_each_extent(self.storage.as_ref(), |_, _| Ok(()))?;
                }
                segments.push((entry, Some(segment)));
            }
        }
        Ok(Plan { segments, names })
    }

    /// Publishes committed job `job`: it is checked ([`State::plan`]; one that fails is set
    /// aside, nothing of it published), each of its topics is made exclusive (and, beside
    /// other processes, reserved), the offset where the job starts in each is recorded
    /// (once), its segments are adopted or copied after whatever of them the data files
    /// already hold, the data files are made durable and the job's directory is removed.
    /// The job's lock held longer than `lock_wait` passes it by. The caller holds the
    /// publish turn.
    fn publish_job(&self, job: &str, across: bool, lock_wait: Duration) -> Result<Outcome> {
        let job_dir = stage::job_dir(&self.dir, job)?;
        // Still held after a while: an abort is removing the job, not to be published.
        let job_lock = stage::lock_job_within(self.storage.as_ref(), &job_dir, lock_wait);
        let Some(_job_lock) = job_lock? else {
            return Ok(Outcome::Passed);
        };
        let manifest = match self.read_job(job, &job_dir)? {
            ControlFlow::Continue(manifest) => manifest,
            ControlFlow::Break(outcome) => return Ok(outcome),
        };
        let Plan { segments, names } = match self.plan(&job_dir, &manifest, across) {
            Ok(plan) => plan,
            Err(e) => return self.set_aside_or(&job_dir, e),
        };
        let topics = names
            .iter()
            .map(|(name, _)| self.topic_or_create(name))
            .collect::<Result<Vec<_>>>()?;
        let mut reserved = self.reserve(&job_dir, &topics, across)?;
        // Exclusive from here; released however this ends.
        let (_exclusive, next) = make_exclusive(&topics)?;
        let starts = self.job_starts(&job_dir, &names, &next)?;
        if let Some(r) = reserved.as_mut() {
            // The job owns the offsets after its starts now.
            r.keep = true;
        }
        let skip = names
            .iter()
            .zip(starts.iter().zip(&next))
            .map(|((_, count), ((_, start), n))| (n - start).min(*count))
            .collect();
        let mut held = JobTopics {
            names,
            topics,
            skip,
            across,
        };
        self.publish_segments(&job_dir, &segments, &mut held)?;
        let ranges: Vec<(String, Range<u64>)> = held
            .names
            .iter()
            .zip(&starts)
            .map(|((_, count), (name, start))| (name.clone(), *start..*start + count))
            .collect();
        self.flusher.flush().map_err(|e| self.poisoning(e))?;
        self.record_published(job, &job_dir, &manifest, &ranges)?;
        if let Some(r) = reserved {
            r.finish();
        }
        Ok(Outcome::Published(ranges))
    }

    /// Shared mode: lines each of `topics` up, under its append lock, with what other
    /// processes appended (a dead appender's leftovers erased), and beside them (`across`)
    /// reserves it for this publish. Alone, the processes gone since this handle last looked
    /// may have appended too: the job starts after their records. A job cut short keeps
    /// the reservations its publisher left until it is done. `None` without reservations.
    fn reserve(
        &self,
        job_dir: &Path,
        topics: &[Arc<Topic>],
        across: bool,
    ) -> Result<Option<Reserved>> {
        if !self.topics.is_shared_mode() {
            return Ok(None);
        }
        let resumed = io::exists(self.storage.as_ref(), &job_dir.join(stage::INGEST_FILE))?;
        let mut reserved = Reserved {
            topics: Vec::with_capacity(topics.len()),
            keep: resumed,
        };
        for topic in topics {
            let slot = slot_of(topic)?;
            let _lock = slot.lock(SHARED_LOCK_WAIT)?;
            follow::line_up(self, topic, slot)?;
            if across {
                slot.reserve_for_publish();
                reserved.topics.push(Arc::clone(topic));
            }
        }
        if !across {
            return Ok(None);
        }
        crate::process::crash_point("publish-reserved");
        Ok(Some(reserved))
    }

    /// Reads job `job`'s commit. Breaks with the outcome when there is nothing to publish:
    /// the job was set aside before, published or aborted meanwhile, or is a micro-batch
    /// its sink already published (a replay committed twice, whose directory goes). A
    /// commit that does not read is set aside.
    fn read_job(&self, job: &str, job_dir: &Path) -> Result<ControlFlow<Outcome, Manifest>> {
        let storage = self.storage.as_ref();
        if let Some(reason) = stage::read_failed(storage, job_dir)? {
            return Ok(ControlFlow::Break(Outcome::SetAside(stage::failed_error(
                job, &reason,
            ))));
        }
        let manifest = match stage::read_commit(storage, job_dir) {
            Ok(Some(manifest)) => manifest,
            // Published meanwhile (by this handle's housekeeping thread), or aborted.
            Ok(None) => return Ok(ControlFlow::Break(Outcome::Passed)),
            Err(e) => return self.set_aside_or(job_dir, e).map(ControlFlow::Break),
        };
        if let Some((sink, batch)) = &manifest.sink
            && stage::read_sink_batch(storage, &self.dir, sink)?.is_some_and(|last| last >= *batch)
        {
            // Answered as published (its micro-batch is), with no offsets of its own.
            stage::write_published(storage, &self.dir, job, &manifest.text, &[])?;
            self.remove_job(job_dir)?;
            return Ok(ControlFlow::Break(Outcome::Published(Vec::new())));
        }
        Ok(ControlFlow::Continue(manifest))
    }

    /// `e`, after poisoning the handle with it: for failures once the job owns the offsets
    /// after its starts (see [`State::job_starts`]).
    fn poisoning(&self, e: Error) -> Error {
        self.sync.poison(&e);
        e
    }

    /// The offset where the job starts in each of its topics (`names`, in order): the ones
    /// its ledger recorded when an earlier publish began, else where each topic ends now
    /// (`next`). A topic that lost records below the job's start (appends that were never
    /// durable) starts the job where it now ends: that is recorded before appending.
    ///
    /// From the ledger on, the job owns the offsets after its starts: a publish that stops
    /// part way poisons the handle, so no append takes them before a reopen resumes the job
    /// (jobs with a ledger are published first at open).
    fn job_starts(
        &self,
        job_dir: &Path,
        names: &[(String, u64)],
        next: &[u64],
    ) -> Result<Vec<(String, u64)>> {
        let recorded = stage::read_ingest(self.storage.as_ref(), job_dir)?;
        let mut starts: Vec<(String, u64)> = match &recorded {
            Some(ledger) => starts_from_ledger(job_dir, names, ledger)?,
            None => names
                .iter()
                .zip(next)
                .map(|((name, _), n)| (name.clone(), *n))
                .collect(),
        };
        let mut moved = false;
        for ((_, start), n) in starts.iter_mut().zip(next) {
            if *n < *start {
                *start = *n;
                moved = true;
            }
        }
        if recorded.is_none() || moved {
            stage::write_ingest(self.storage.as_ref(), job_dir, &starts)
                .map_err(|e| self.poisoning(e))?;
            crate::process::crash_point("publish-ledger");
        }
        Ok(starts)
    }

    /// Adopts or copies each of the job's segments into its topics, in order. A segment an
    /// earlier publish adopted only takes its records off those the data files hold. A
    /// failure to write poisons the handle (see [`State::job_starts`]).
    fn publish_segments(
        &self,
        job_dir: &Path,
        segments: &[(SegmentEntry, Option<Segment>)],
        held: &mut JobTopics,
    ) -> Result<()> {
        let ctx = Ctx {
            write_through: false,
            reserved: None,
            ingest: true,
            ..self.ctx(self.default_opts())
        };
        for (entry, segment) in segments {
            let Some(segment) = segment else {
                skip_adopted(job_dir, entry, held)?;
                continue;
            };
            let fresh = entry
                .counts
                .iter()
                .all(|(t, _)| held.index(t).is_some_and(|i| held.skip[i] == 0));
            if fresh && !held.across && self.adoptable(segment) {
                self.adopt(&ctx, job_dir, segment, held)
                    .map_err(|e| self.poisoning(e))?;
            } else {
                self.copy(&ctx, segment, held)
                    .map_err(|e| self.poisoning(e))?;
            }
        }
        Ok(())
    }

    /// Records that the job is published, once its records are durable: the sink's ledger
    /// takes its batch, or the published record its offsets; then the job's directory goes.
    /// A crash between two steps repeats only steps that append nothing.
    fn record_published(
        &self,
        job: &str,
        job_dir: &Path,
        manifest: &Manifest,
        ranges: &[(String, Range<u64>)],
    ) -> Result<()> {
        if let Some((sink, batch)) = &manifest.sink {
            stage::write_sink_batch(self.storage.as_ref(), &self.dir, sink, *batch)?;
        }
        // A commit repeated after this, and a wait for the job, are answered from the record.
        stage::write_published(
            self.storage.as_ref(),
            &self.dir,
            job,
            &manifest.text,
            ranges,
        )?;
        crate::process::crash_point("publish-recorded");
        self.remove_job(job_dir)
    }

    /// Whether `segment` is adopted rather than copied: it is large enough to be worth a
    /// file of its own, and its frames are of a version the directory writes (a directory
    /// kept readable by builds before batch frames, `RecordFormat::V1`, copies those).
    fn adoptable(&self, segment: &Segment) -> bool {
        let format_ok = !segment.batched() || self.config.record_format != RecordFormat::V1;
        format_ok && segment.data_bytes() >= self.config.staged_adopt_bytes_min
    }

    /// Adopts `segment` as the next data file: its extents follow their topics' records,
    /// taking the next offsets, without a record being copied.
    fn adopt(
        &self,
        ctx: &Ctx<'_>,
        job_dir: &Path,
        segment: &Segment,
        job: &JobTopics,
    ) -> Result<()> {
        let counts = segment.counts();
        // Each extent's topic, as a position in `counts`.
        let topic_of: Vec<usize> = segment
            .extents
            .iter()
            .map(|e| counts.iter().position(|(t, _)| *t == e.topic).unwrap_or(0))
            .collect();
        let mut ends = Vec::with_capacity(counts.len());
        for (topic, _) in &counts {
            let i = job.index(topic).ok_or_else(|| {
                stage::staged_corruption(job_dir, "a segment names an unknown topic")
            })?;
            let (next_offset, max_ts) = job.topics[i].end_tail_for_adoption(ctx)?;
            ends.push(TopicEnd {
                topic: i,
                next_offset,
                max_ts,
            });
        }
        // Each topic's records before the segment's must be durable (their extent sealed)
        // before the segment's extents follow them on disk: a gap after a crash would be
        // corruption to recovery.
        self.flusher.flush()?;
        let placements = placements(segment, &topic_of, &mut ends, job);
        let file = self.install_adopted(job_dir, segment, &placements)?;
        let mut adopted: Vec<Vec<Arc<Extent>>> = vec![Vec::new(); counts.len()];
        for ((e, p), &at) in segment.extents.iter().zip(&placements).zip(&topic_of) {
            adopted[at].push(self.adopted_block(&file, e, p));
        }
        for ((blocks, (_, records)), end) in adopted.into_iter().zip(&counts).zip(ends) {
            job.topics[end.topic].push_adopted(blocks, *records, end.max_ts);
        }
        Ok(())
    }

    /// Rewrites `segment`'s extents for `placements` and renames it into the data directory
    /// as the allocator's next file. Once renamed, the file may be in the directory or not,
    /// as the next sync says: a failure from there poisons the handle, so nothing more is
    /// acknowledged until a reopen has looked.
    fn install_adopted(
        &self,
        job_dir: &Path,
        segment: &Segment,
        placements: &[Placement],
    ) -> Result<Arc<DataFile>> {
        let storage = self.storage.as_ref();
        self.alloc.adopt_file(|seq| {
            segment.prepare_adoption(storage, seq, placements)?;
            let to = self.dir.join(data_file_name(seq));
            storage
                .rename(&segment.path, &to)
                .map_err(|e| Error::io("rename staged segment into place", &to, e))?;
            let installed = (|| {
                storage
                    .sync_dir(&self.dir)
                    .map_err(|e| Error::io("fsync directory", &self.dir, e))?;
                storage
                    .sync_dir(job_dir)
                    .map_err(|e| Error::io("fsync directory", job_dir, e))?;
                DataFile::open(storage, &to, true)?
                    .ok_or_else(|| stage::staged_corruption(&to, "the adopted file does not open"))
            })();
            installed.inspect_err(|e| self.sync.poison(e))
        })
    }

    /// The block of extent `e` of the adopted `file`, sealed at its place `p`.
    fn adopted_block(&self, file: &Arc<DataFile>, e: &StagedExtent, p: &Placement) -> Arc<Extent> {
        let block = Arc::new(Extent::new(
            Arc::clone(file),
            e.block_index,
            e.extent_count,
            p.topic_id,
            e.salt,
            p.first_offset,
            self.config.index_interval_bytes,
            None,
        ));
        block.restore(
            e.records,
            e.durable_end,
            p.max_timestamp_us,
            e.durable_end,
            ProgressState::Sealed,
        );
        block.set_final(e.records, e.durable_end);
        block
    }

    /// Copies `segment`'s records into their topics, skipping those the data files already
    /// hold (a resumed publish).
    fn copy(&self, ctx: &Ctx<'_>, segment: &Segment, job: &mut JobTopics) -> Result<()> {
        segment.for_each_extent(self.storage.as_ref(), |e, records| {
            let i = job
                .index(&e.topic)
                .ok_or_else(|| stage::staged_corruption(&segment.path, "an unknown topic"))?;
            let held = (job.skip[i] as usize).min(records.len());
            job.skip[i] -= held as u64;
            for batch in self.batches(&records[held..]) {
                self.copy_batch(ctx, &job.topics[i], batch, job.across)?;
            }
            Ok(())
        })
    }

    /// Appends one batch of a job's records; beside other processes under the topic's
    /// append lock, lined up first (the reservation keeps their appends out, not their
    /// rolls' reports, and a flush's progress slots).
    fn copy_batch(
        &self,
        ctx: &Ctx<'_>,
        topic: &Topic,
        batch: &[Append<'_>],
        across: bool,
    ) -> Result<()> {
        if !across {
            return topic.append(ctx, batch).map(drop);
        }
        let slot = slot_of(topic)?;
        let _lock = slot.lock(SHARED_LOCK_WAIT)?;
        follow::line_up(self, topic, slot)?;
        crate::process::crash_point("publish-copy");
        topic.append(ctx, batch).map(drop)
    }

    /// Removes a published job's directory, durably.
    fn remove_job(&self, job_dir: &Path) -> Result<()> {
        stage::remove_job_dir(self.storage.as_ref(), job_dir).map(drop)
    }

    /// `records` cut into batches within the batch limits.
    fn batches<'r, 'a>(&self, records: &'r [Append<'a>]) -> Vec<&'r [Append<'a>]> {
        let mut out = Vec::new();
        let (mut from, mut bytes) = (0, 0u64);
        for (i, r) in records.iter().enumerate() {
            let len = r.payload_len();
            let count = (i - from) as u64;
            if i > from
                && (bytes + len > self.limits.batch_bytes_max
                    || count >= self.config.max_batch_records)
            {
                out.push(&records[from..i]);
                (from, bytes) = (i, 0);
            }
            bytes += len;
        }
        if from < records.len() {
            out.push(&records[from..]);
        }
        out
    }
}

/// Where one topic of a segment being adopted continues: its position in the job, the
/// next offset, and its running maximum timestamp.
struct TopicEnd {
    topic: usize,
    next_offset: u64,
    max_ts: u64,
}

/// Makes each of `topics` exclusive to the publish, in order, returning the guard that
/// releases them and the offset where each ends now. Those taken before a failure are
/// released.
fn make_exclusive(topics: &[Arc<Topic>]) -> Result<(Exclusive, Vec<u64>)> {
    let mut exclusive = Exclusive(Vec::new());
    let mut next = Vec::with_capacity(topics.len());
    for t in topics {
        next.push(t.begin_ingest()?);
        exclusive.0.push(Arc::clone(t));
    }
    Ok((exclusive, next))
}

/// The starts `ledger` recorded for the job's topics `names`, in their order. A ledger that
/// lacks one of them is corruption.
fn starts_from_ledger(
    job_dir: &Path,
    names: &[(String, u64)],
    ledger: &[(String, u64)],
) -> Result<Vec<(String, u64)>> {
    names
        .iter()
        .map(|(name, _)| {
            ledger
                .iter()
                .find(|(t, _)| t == name)
                .map(|(t, s)| (t.clone(), *s))
                .ok_or_else(|| {
                    stage::staged_corruption(job_dir, "the ledger lacks one of its topics")
                })
        })
        .collect()
}

/// Takes the records of `entry`, a segment an earlier publish of the job adopted, off those
/// the data files hold for its topics (`held.skip`). More than they hold means the adopted
/// records are missing: corruption.
fn skip_adopted(job_dir: &Path, entry: &SegmentEntry, held: &mut JobTopics) -> Result<()> {
    for (topic, n) in &entry.counts {
        let i = held
            .index(topic)
            .ok_or_else(|| stage::staged_corruption(job_dir, "a segment names an unknown topic"))?;
        held.skip[i] = held.skip[i].checked_sub(*n).ok_or_else(|| {
            stage::staged_corruption(
                job_dir,
                "an adopted segment's records are missing from the data files",
            )
        })?;
    }
    Ok(())
}

/// Where each extent of `segment` goes: its topic's id, the next offsets after `ends`
/// (extent `i` belongs to `ends[topic_of[i]]`), and the running maximum timestamp. `ends`
/// moves past every extent.
fn placements(
    segment: &Segment,
    topic_of: &[usize],
    ends: &mut [TopicEnd],
    job: &JobTopics,
) -> Vec<Placement> {
    segment
        .extents
        .iter()
        .zip(topic_of)
        .map(|(e, &at)| {
            let end = &mut ends[at];
            let placement = Placement {
                topic_id: job.topics[end.topic].id,
                first_offset: end.next_offset,
                max_timestamp_us: end.max_ts.max(e.max_timestamp_us),
            };
            end.next_offset += e.records;
            end.max_ts = placement.max_timestamp_us;
            placement
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_jobs_own_faults_set_it_aside() {
        let io = |kind: std::io::ErrorKind| Error::io("read", "segment", kind.into());
        let eio = Error::io(
            "read",
            "segment",
            std::io::Error::from_raw_os_error(libc::EIO),
        );
        let the_jobs = [
            io(std::io::ErrorKind::NotFound),
            io(std::io::ErrorKind::UnexpectedEof),
            stage::staged_corruption(Path::new("segment"), "a flipped bit"),
            Error::limit("max_record_bytes", 2, 1),
            Error::invalid("job", "named twice"),
        ];
        for e in &the_jobs {
            assert!(is_input_error(e), "{e:?} is the job's fault");
        }
        let passing = [
            eio,
            io(std::io::ErrorKind::PermissionDenied),
            Error::DiskFull {
                path: "segment".into(),
                requested_bytes: 1,
            },
            Error::LockTimeout {
                lock: "topic",
                holder_pid: 1,
                waited_ms: 1,
            },
            Error::Closed,
            Error::UnknownTopic { topic: "a".into() },
        ];
        for e in &passing {
            assert!(
                !is_input_error(e),
                "{e:?} may pass: the job stays committed"
            );
        }
    }
}

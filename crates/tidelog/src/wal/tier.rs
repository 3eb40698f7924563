//! A writable handle's tier: the upload thread (sealed extents to the bucket, then one
//! manifest delta per batch), `Wal::tier_flush` and `Wal::tier_status`. The bucket and
//! the manifest are `crate::tier`'s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::follow;
use super::state::State;
use super::writer;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::io::Storage;
use crate::stage::{self, Committed};
use crate::tier::manifest::{Entry, ExtentObject};
use crate::tier::staging;
use crate::tier::{Pending, Tier, TierStatus};
use crate::topic::Topic;

/// Most extent objects, and bytes, one upload pass puts before it commits their delta.
const BATCH_OBJECTS: usize = 16;
const BATCH_BYTES: u64 = 256 << 20;
/// Back-off after a failed pass: doubled from the first to the last, then kept.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often a handle that does not upload reads the manifest again (its reclaim keeps
/// only what the manifest holds, so a stale view only keeps more).
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// Longest a `tier_flush` waits between two looks at the manifest.
const FLUSH_LOOK: Duration = Duration::from_millis(20);
/// How often the uploading handle looks for staged jobs committed in the bucket (one LIST).
const STAGING_LOOK_EVERY: Duration = Duration::from_secs(1);
/// ... and while jobs it took in wait for their publish, so their answer follows it soon:
/// up to `STAGING_BUSY_MAX` after they began to wait or after the last answer (a job that
/// stays unpublished is then looked at every second again).
const STAGING_LOOK_BUSY: Duration = Duration::from_millis(100);
const STAGING_BUSY_MAX: Duration = Duration::from_secs(10);
/// How often the uploading handle sweeps the bucket for objects the manifest no longer
/// names: half the delete delay, within these bounds (each sweep lists every object).
const SWEEP_EVERY_MIN: Duration = Duration::from_millis(100);
const SWEEP_EVERY_MAX: Duration = Duration::from_secs(60);
/// Longest the upload pass waits for a topic's append lock (a stopped appender holds it):
/// the topic waits for the next pass.
const TOPIC_LOCK_WAIT: Duration = Duration::from_millis(200);

/// The upload thread: while this handle uploads, a pass every sync interval (or when
/// kicked); otherwise the manifest is read now and then. Failures are retried with
/// back-off and reported in the status, never poisoning the handle: local data is sound.
pub(super) fn upload_loop(state: &State) {
    let Some(tier) = state.tier.clone() else {
        return;
    };
    let tick = Duration::from_millis(state.config.sync_interval_ms);
    let settings = state.config.tier.clone().unwrap_or_default();
    let delete_delay = settings.delete_delay();
    let sweep_every = (delete_delay / 2).clamp(SWEEP_EVERY_MIN, SWEEP_EVERY_MAX);
    let tail_after = settings.tail_upload_ms.map(Duration::from_millis);
    let mut tails = Tails::default();
    let mut swept: Option<Instant> = None;
    let mut looks = Looks::default();
    let mut retry: Option<Duration> = None;
    let mut refreshed = Some(Instant::now());
    loop {
        let wait = match tail_after {
            Some(after) => tick.min(after),
            None => tick,
        };
        tier.wait_for_work(retry.unwrap_or(wait));
        if tier.stopping() || state.sync.check().is_err() {
            return;
        }
        let failures_before = tier.failures();
        // `None`: a round that sent no request, which tells nothing of a failure.
        let result = if tier.is_uploading() {
            let sweep_due = swept.is_none_or(|t| t.elapsed() >= sweep_every);
            let ingest_due = looks.due();
            let rounds = Rounds {
                tail_after,
                sweep: sweep_due.then_some(delete_delay),
                ingest: ingest_due,
            };
            Some(
                housekeeping(state, &tier, &rounds, &mut tails).map(|looked| {
                    if sweep_due {
                        swept = Some(Instant::now());
                    }
                    if ingest_due {
                        looks.done(looked);
                    }
                }),
            )
        } else if tier.take_refresh_wanted()
            || refreshed.is_none_or(|t| t.elapsed() >= REFRESH_EVERY)
        {
            // A failed refresh is due again at the retry: only a refresh clears its error.
            let result = tier.refresh();
            refreshed = result.is_ok().then(Instant::now);
            Some(result)
        } else {
            None
        };
        // Every step that failed runs again the next round (the uploading handle's sweep
        // and ingest stay due, its upload and trim run each round): a round without an
        // error means the failure is over.
        retry = match result {
            None | Some(Err(Error::Fenced { .. })) => None,
            Some(Ok(())) => {
                tier.note_success(failures_before);
                None
            }
            Some(Err(e)) => {
                tier.note_failure(&e);
                Some(retry.map_or(RETRY_FIRST, |r| (r * 2).min(RETRY_MAX)))
            }
        };
    }
}

/// One round of the uploading handle: ends open extents held long enough
/// (`tail_upload_ms`), uploads, trims the manifest by retention and, when `sweep` gives the
/// delay, deletes the objects it no longer names.
/// Each step runs whatever another's outcome (a topic that cannot be uploaded must not
/// hold staged jobs back); the first error is the round's. Says what the ingest found of
/// the bucket's jobs.
fn housekeeping(state: &State, tier: &Tier, rounds: &Rounds, tails: &mut Tails) -> Result<Looked> {
    let tailed = match rounds.tail_after {
        Some(after) => end_old_tails(state, after, tails),
        None => Ok(()),
    };
    let uploaded = upload_pass(state, tier);
    let trimmed = match tier.claimed() {
        Some(epoch) => trim_pass(state, tier, epoch),
        None => Ok(()),
    };
    let swept = match rounds.sweep {
        Some(delay) => tier.sweep(delay).map(drop),
        None => Ok(()),
    };
    let ingested = if rounds.ingest {
        ingest_pass(state, tier)
    } else {
        Ok(Looked::default())
    };
    tailed.and(uploaded).and(trimmed).and(swept).and(ingested)
}

/// What one round of [`housekeeping`] does besides uploading and trimming.
#[derive(Debug)]
struct Rounds {
    /// `tail_upload_ms`.
    tail_after: Option<Duration>,
    /// Sweep, with this delete delay.
    sweep: Option<Duration>,
    /// Look for staged jobs committed in the bucket.
    ingest: bool,
}

/// Brings the staged jobs committed in the bucket into the directory, committing each there
/// (the directory's housekeeping publishes it, exactly once), and answers in the bucket
/// those published (`PUBLISHED`, the sink's micro-batch) or that cannot be (`FAILED`).
fn ingest_pass(state: &State, tier: &Tier) -> Result<Looked> {
    // Only the producer that holds the prefix publishes its jobs.
    if tier.claimed().is_none() {
        return Ok(Looked::default());
    }
    let mut looked = Looked::default();
    let bucket = tier.bucket();
    let storage = state.storage.as_ref();
    let jobs = staging::committed_jobs(bucket)?;
    if !jobs.is_empty() {
        // A takeover since this handle last looked fences it: then it takes in nothing.
        tier.refresh()?;
        tier.check_fenced()?;
    }
    for job in jobs {
        let parts: Vec<&str> = job.parts.iter().map(String::as_str).collect();
        let sink = job.sink.as_ref().map(|(s, b)| (s.as_str(), *b));
        let status = stage::commit_status(storage, &state.dir, &job.job, &parts, sink);
        let refused = match status {
            Ok(Some(Committed::Published(ranges))) => {
                crate::process::crash_point("tier-answer");
                tier.check_fenced()?;
                staging::answer_published(bucket, &job, &ranges)?;
                stage::forget_bucket_job(storage, &state.dir, &job.job)?;
                looked.answered += 1;
                continue;
            }
            // Committed here: the directory's housekeeping publishes it.
            Ok(Some(Committed::Recorded)) => {
                looked.waiting += 1;
                continue;
            }
            Ok(None) => {
                crate::process::crash_point("tier-ingest");
                tier.check_fenced()?;
                let committed = staging::download_parts(bucket, storage, &state.dir, &job)
                    // Its published record must outlive a long stop before the answer.
                    .and_then(|()| stage::note_bucket_job(storage, &state.dir, &job.job))
                    .and_then(|()| {
                        stage::write_commit(
                            storage,
                            &state.dir,
                            &job.job,
                            &parts,
                            sink,
                            Some(state.limits),
                        )
                    });
                match committed {
                    Ok(_) => {
                        looked.waiting += 1;
                        continue;
                    }
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        match refused {
            // The job itself is at fault (a part missing or damaged, over the limits, set
            // aside here): it never publishes, and its committer learns why.
            Error::InvalidArgument { .. }
            | Error::LimitExceeded { .. }
            | Error::Corruption { .. }
            | Error::UnsupportedVersion { .. } => {
                staging::set_aside(bucket, &job.job, &refused.to_string())?;
                stage::forget_bucket_job(storage, &state.dir, &job.job)?;
                looked.answered += 1;
            }
            other => return Err(other),
        }
    }
    Ok(looked)
}

/// When the uploading handle looks for bucket jobs: every `STAGING_LOOK_EVERY`, sooner
/// while jobs it took in wait for their publish.
#[derive(Debug, Default)]
struct Looks {
    last: Option<Instant>,
    /// Since when jobs have waited with none answered (a job answered is progress).
    waiting_since: Option<Instant>,
}

impl Looks {
    fn due(&self) -> bool {
        let every = if self
            .waiting_since
            .is_some_and(|t| t.elapsed() < STAGING_BUSY_MAX)
        {
            STAGING_LOOK_BUSY
        } else {
            STAGING_LOOK_EVERY
        };
        self.last.is_none_or(|t| t.elapsed() >= every)
    }

    /// A look that found `looked`.
    fn done(&mut self, looked: Looked) {
        let now = Instant::now();
        self.last = Some(now);
        self.waiting_since = match (looked.waiting, looked.answered) {
            (0, _) => None,
            (_, 0) => self.waiting_since.or(Some(now)),
            _ => Some(now),
        };
    }
}

/// What one [`ingest_pass`] found of the bucket's jobs.
#[derive(Debug, Default, Clone, Copy)]
struct Looked {
    /// Taken in, waiting for their publish here.
    waiting: usize,
    /// Answered in the bucket (published or set aside).
    answered: usize,
}

/// Per topic, the open extent (by first offset) first seen holding records, and when.
type Tails = BTreeMap<String, (u64, Instant)>;

/// Ends each topic's open extent that has held records for `after` or longer, and flushes,
/// so the pass that follows seals and uploads it.
fn end_old_tails(state: &State, after: Duration, tails: &mut Tails) -> Result<()> {
    let now = Instant::now();
    let mut ended = false;
    let mut live = BTreeMap::new();
    for topic in state.topics.every()? {
        let open = topic.with_chain(|chain| {
            chain
                .last()
                .filter(|b| b.final_state().is_none() && b.published().0 > 0)
                .map(|b| b.first_offset)
        });
        let Some(first) = open else {
            continue;
        };
        let since = match tails.get(&topic.name) {
            Some(&(seen, since)) if seen == first => since,
            _ => now,
        };
        if now.duration_since(since) >= after {
            end_tail_below(state, &topic, topic.next_offset())?;
            ended = true;
            continue;
        }
        live.insert(topic.name.clone(), (first, since));
    }
    *tails = live;
    if ended {
        state.flusher.flush()?;
    }
    Ok(())
}

/// Trims each topic of the manifest by its retention (the directory's, `retention_ms` /
/// `retention_bytes` and per topic) and by its log start (`Wal::delete_records`): one delta
/// for all of them.
fn trim_pass(state: &State, tier: &Tier, epoch: u64) -> Result<()> {
    let now_us = crate::clock::now_us();
    let entries: Vec<Entry> = tier.with_manifest(|m| {
        m.topics
            .iter()
            .filter_map(|(id, t)| {
                let retention = state.config.retention_for(&t.name);
                let by_retention = if retention.is_unlimited() {
                    None
                } else {
                    t.trim_point(retention, now_us)
                };
                let start = state.topics.get_live(&t.name).map_or(0, |l| l.log_start());
                let by_start = (start > 0).then(|| t.trim_below(start)).flatten();
                by_retention.max(by_start).map(|first_offset| Entry::Trim {
                    topic: *id,
                    first_offset,
                })
            })
            .collect()
    });
    if !entries.is_empty() {
        crate::process::crash_point("tier-trim");
        tier.commit(epoch, entries)?;
    }
    Ok(())
}

/// One pass: claims the prefix if this handle has not, then puts the sealed extents the
/// manifest does not hold, oldest first per topic, and commits them in one delta. A topic
/// whose local offsets overlap objects another directory uploaded is left out (and
/// reported); the others go on.
fn upload_pass(state: &State, tier: &Tier) -> Result<()> {
    tier.check_fenced()?;
    let epoch = match tier.claimed() {
        Some(epoch) => epoch,
        None => tier.claim()?,
    };
    let mut entries = Vec::new();
    let mut batch_bytes = 0u64;
    let mut left = Pending::default();
    let mut added: BTreeMap<String, u32> = BTreeMap::new();
    let mut next_id = tier.next_topic_id();
    let mut conflicts = BTreeMap::new();
    for topic in topics(state)? {
        let found = match uploadable(state.storage.as_ref(), tier, &topic) {
            Ok(found) => found,
            Err(conflict) => {
                conflicts.insert(topic.name.clone(), conflict);
                continue;
            }
        };
        for (block, object, bytes) in found {
            if entries.len() >= BATCH_OBJECTS || batch_bytes >= BATCH_BYTES {
                left.extents += 1;
                left.bytes += object.bytes;
                continue;
            }
            let id = match tier
                .topic_id(&topic.name)
                .or(added.get(&topic.name).copied())
            {
                Some(id) => id,
                None => {
                    let id = next_id;
                    next_id += 1;
                    added.insert(topic.name.clone(), id);
                    entries.push(Entry::Topic {
                        id,
                        name: topic.name.clone(),
                    });
                    id
                }
            };
            let key = Tier::object_key(id, block.first_offset, epoch);
            crate::process::crash_point("tier-put");
            tier.put_object(&key, bytes)?;
            batch_bytes += object.bytes;
            entries.push(Entry::Add(ExtentObject {
                topic: id,
                key,
                ..object
            }));
        }
    }
    if !entries.is_empty() {
        crate::process::crash_point("tier-commit");
        if !tier.commit(epoch, entries)? {
            // Another commit took the version: the next pass judges again (or is fenced).
            tier.check_fenced()?;
        }
    }
    tier.note_pending(left);
    if left.extents > 0 {
        tier.kick();
    }
    let first = conflicts.iter().next().map(|(name, message)| Error::Tier {
        op: "upload",
        key: name.clone(),
        message: message.clone(),
    });
    tier.set_conflicts(conflicts);
    first.map_or(Ok(()), Err)
}

/// The topics to upload: every live topic; in shared mode each that another process
/// published in since this handle last looked is lined up under its append lock first, so
/// the extents it appended are in the chain.
fn topics(state: &State) -> Result<Vec<Arc<Topic>>> {
    let topics = state.topics.every()?;
    if !state.topics.is_shared_mode() {
        return Ok(topics);
    }
    let mut out = Vec::with_capacity(topics.len());
    for topic in topics {
        let Some(slot) = state.follow.slot(&topic) else {
            continue;
        };
        if slot.is_gone() {
            continue;
        }
        // A hint without the lock: a publish after it is seen by the next pass.
        if !topic.published_since(&slot) {
            out.push(topic);
            continue;
        }
        if follow::lock_lined_up(state, &topic, &slot, TOPIC_LOCK_WAIT)?.is_some() {
            out.push(topic);
        }
    }
    Ok(out)
}

/// The extents of `topic` to upload next, in order: from where the manifest's objects of
/// the topic end, each sealed, up to the first that is not. Each comes with what its
/// manifest entry says (but its topic id and key) and its bytes. `Err` with the reason
/// when the topic cannot be uploaded: its offsets overlap objects this directory did not
/// upload (another producer's, before a takeover), or an extent fails its checks.
fn uploadable(
    storage: &dyn Storage,
    tier: &Tier,
    topic: &Topic,
) -> std::result::Result<Vec<Uploadable>, String> {
    let mut next = tier.remote_next(&topic.name);
    let chain = topic.chain();
    // Extents below the manifest's end are in it (reclaim keeps the others), but for the
    // one the end falls in or after: it must be the manifest's own.
    let start = next.map_or(0, |n| chain.partition_point(|b| b.first_offset < n));
    let below = start.checked_sub(1).and_then(|i| chain.get(i));
    let mut out = Vec::new();
    for block in below.into_iter().chain(&chain[start..]) {
        let empty = block.final_state().is_some_and(|(count, _)| count == 0);
        if block.is_consumed() || empty || tier.holds(&topic.name, block) {
            continue;
        }
        if let Some(n) = next
            && block.first_offset < n
        {
            return Err(format!(
                "its records from offset {} overlap the bucket's up to {n}, which this \
                 directory did not upload",
                block.first_offset
            ));
        }
        let sealed = block
            .sealed_object(storage, &topic.name)
            .map_err(|e| e.to_string())?;
        let Some((progress, bytes)) = sealed else {
            break;
        };
        if progress.record_count == 0 {
            continue;
        }
        // A gap in the chain would be a gap in the bucket: stop at it.
        if next.is_some_and(|n| block.first_offset != n) {
            break;
        }
        next = Some(block.first_offset + progress.record_count);
        let object = ExtentObject {
            topic: 0,
            key: String::new(),
            first_offset: block.first_offset,
            salt: block.salt,
            records: progress.record_count,
            bytes: bytes.len() as u64,
            max_timestamp_us: progress.max_timestamp_us,
            footer_position: progress.durable_end,
            footer_count: progress.footer_count,
            footer_crc: progress.footer_crc,
        };
        out.push((Arc::clone(block), object, bytes));
    }
    Ok(out)
}

/// An extent to upload, what its manifest entry says (but its key) and its bytes.
type Uploadable = (Arc<Extent>, ExtentObject, Vec<u8>);

/// Records of `topic` below `target` that the manifest does not hold yet.
fn records_pending(tier: &Tier, topic: &Topic, target: u64) -> u64 {
    topic.with_chain(|chain| {
        chain
            .iter()
            .filter(|b| !b.is_consumed() && b.first_offset < target)
            .filter(|b| !tier.holds(&topic.name, b))
            .map(|b| b.published().0.min(target - b.first_offset))
            .sum()
    })
}

/// A `tier_flush` under way: every topic of the handle and its next offset when it began.
#[derive(Debug)]
pub struct TierFlush {
    state: Arc<State>,
    targets: Vec<(Arc<Topic>, u64)>,
    start: Instant,
}

impl TierFlush {
    /// Begins a flush of `state`'s records to its tier: what it must wait for.
    pub(super) fn begin(state: &Arc<State>) -> Result<TierFlush> {
        state.check_writable()?;
        let tier = tier_of(state)?;
        tier.check_fenced()?;
        let mut targets = Vec::new();
        for topic in state.topics.every()? {
            let target = {
                let _held = writer::lock_topic(state, &topic)?;
                topic.next_offset()
            };
            targets.push((topic, target));
        }
        Ok(TierFlush {
            state: Arc::clone(state),
            targets,
            start: Instant::now(),
        })
    }

    /// Ends the open extents that hold records the flush waits for, seals them, and waits
    /// until `until` at most for the manifest to hold every such record: true once it does.
    /// A topic that cannot be uploaded, a fenced or poisoned handle are errors.
    pub fn wait_until(&self, until: Instant) -> Result<bool> {
        let state = &self.state;
        let tier = tier_of(state)?;
        loop {
            state.check_writable()?;
            let pending = self.pending(tier)?;
            if pending.is_empty() {
                return Ok(true);
            }
            for (topic, target, _) in pending {
                end_tail_below(state, topic, target)?;
            }
            state.flusher.flush()?;
            tier.kick();
            tier.check_fenced()?;
            let now = Instant::now();
            if now >= until {
                return Ok(false);
            }
            if !tier.is_uploading() {
                // Another process uploads: its deltas show what it did. The upload thread
                // reads them, so this wait ends by `until` however the bucket answers.
                tier.request_refresh();
            }
            tier.wait_for_change((until - now).min(FLUSH_LOOK));
        }
    }

    /// The topics the flush still waits for, with their targets and the records missing;
    /// `Err` naming a topic that cannot be uploaded.
    fn pending(&self, tier: &Tier) -> Result<Vec<(&Topic, u64, u64)>> {
        let mut pending = Vec::new();
        for (topic, target) in &self.targets {
            let records = records_pending(tier, topic, *target);
            if records == 0 {
                continue;
            }
            if let Some(message) = tier.conflict(&topic.name) {
                return Err(Error::Tier {
                    op: "upload",
                    key: topic.name.clone(),
                    message,
                });
            }
            pending.push((topic.as_ref(), *target, records));
        }
        Ok(pending)
    }

    /// The error of a flush that ran out of time: how long it waited, what is left.
    pub fn timed_out(&self) -> Error {
        let pending = tier_of(&self.state)
            .and_then(|tier| self.pending(tier))
            .map_or(0, |p| p.iter().map(|(_, _, records)| records).sum());
        Error::TierTimeout {
            waited_ms: u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX),
            pending_records: pending,
            waiting_for: format!(
                "{pending} records of the tier flush to reach the bucket's manifest"
            ),
        }
    }
}

fn tier_of(state: &State) -> Result<&Tier> {
    state
        .tier
        .as_deref()
        .ok_or_else(|| Error::invalid("tier", "this handle has no tier"))
}

/// `Wal::tier_flush`.
pub(super) fn tier_flush(state: &Arc<State>, timeout: Option<Duration>) -> Result<()> {
    let flush = TierFlush::begin(state)?;
    let until = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        // Without a timeout, one look a second (the wait itself has no end).
        let look = until.unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
        if flush.wait_until(look)? {
            return Ok(());
        }
        if until.is_some() {
            return Err(flush.timed_out());
        }
    }
}

/// Ends `topic`'s open extent when it holds records below `target` (in shared mode under
/// its append lock, lined up), so it can be sealed.
fn end_tail_below(state: &State, topic: &Topic, target: u64) -> Result<()> {
    let _held = writer::lock_topic(state, topic)?;
    topic.end_tail_below(&state.ctx(state.default_opts()), target)
}

/// `Wal::tier_status`.
pub(super) fn tier_status(state: &State) -> Result<Option<TierStatus>> {
    let Some(tier) = state.tier.as_ref() else {
        return Ok(None);
    };
    let mut lag = 0;
    for topic in state.topics.all() {
        lag += records_pending(tier, &topic, topic.next_offset());
    }
    Ok(Some(tier.status(lag)))
}

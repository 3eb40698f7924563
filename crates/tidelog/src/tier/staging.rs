//! Staged jobs through a tier's bucket, for writers that cannot reach the producer's
//! directory (Spark tasks on a cluster). A task stages its part in a directory of its own
//! ([`crate::StagedWriter`]) and puts the part's files under `_tidelog/staging/JOB/`, its
//! manifest last; the driver's commit writes `COMMIT` there, put-if-absent, and waits; the
//! producer whose tier the bucket is brings the parts into its directory and commits the job
//! there (`wal::tier`), where its housekeeping publishes it exactly once by the directory's
//! staging rules; then the producer writes `PUBLISHED` (or `FAILED`) beside the commit and
//! deletes the parts. Bytes: docs/FORMAT.md, "Staged jobs in the bucket".

use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use super::bucket::Bucket;
use crate::config::{TierConfig, validate_name};
use crate::error::{Error, Result};
use crate::io::{self, StdStorage, Storage};
use crate::stage::{self, PART_SUFFIX, PartManifest};

/// Where staged jobs live under the prefix, one directory per job.
pub const STAGING_PREFIX: &str = "_tidelog/staging";
/// Jobs committed and not yet answered, one empty object per job: what the producer lists
/// (the staging directory holds every job's parts and answers).
pub const PENDING_PREFIX: &str = "_tidelog/pending";
/// Where the streaming sinks' last published micro-batches live, one object per sink.
pub const SINKS_PREFIX: &str = "_tidelog/sinks";
/// A job's commit (the parts, in order; the sink's micro-batch), as the `COMMIT` file.
pub const COMMIT_OBJECT: &str = "COMMIT";
/// A published job's record: the offsets it got, then its commit.
pub const PUBLISHED_OBJECT: &str = "PUBLISHED";
/// Why a committed job cannot be published.
pub const FAILED_OBJECT: &str = "FAILED";
/// How often a commit waiting for its publish looks (one GET each).
const WAIT_LOOK: Duration = Duration::from_millis(100);

/// The key of `name` in `job`'s directory.
pub(crate) fn job_key(job: &str, name: &str) -> String {
    format!("{STAGING_PREFIX}/{job}/{name}")
}

fn sink_key(sink: &str) -> String {
    format!("{SINKS_PREFIX}/{sink}")
}

fn pending_key(job: &str) -> String {
    format!("{PENDING_PREFIX}/{job}")
}

/// Puts part `part` of `job`, which a `StagedWriter` finished in the directory `dir`, into
/// the bucket: its segments, then its manifest (whose presence says the part is whole).
/// Putting it again puts the same bytes.
pub fn upload_part(config: &TierConfig, dir: &Path, job: &str, part: &str) -> Result<()> {
    validate_name(part)?;
    let storage = &StdStorage;
    let job_dir = stage::job_dir(dir, job)?;
    let manifest_name = format!("{part}{PART_SUFFIX}");
    if !io::exists(storage, &job_dir.join(&manifest_name))? {
        return Err(Error::invalid(
            "part",
            format!("part {part:?} of job {job:?} was not staged (or not finished) in {dir:?}"),
        ));
    }
    let manifest = stage::read_manifest(storage, &job_dir, part)?;
    let bucket = Bucket::open(config)?;
    for segment in segment_names(part, &manifest) {
        bucket.put_file(storage, &job_dir.join(&segment), &job_key(job, &segment))?;
    }
    bucket.put_file(
        storage,
        &job_dir.join(&manifest_name),
        &job_key(job, &manifest_name),
    )
}

/// The file names of `part`'s segments.
fn segment_names(part: &str, manifest: &PartManifest) -> Vec<String> {
    manifest
        .segments
        .iter()
        .map(|s| stage::segment_name(part, s.index))
        .collect()
}

/// Commits `job` in the bucket: its `parts` (each put whole by [`upload_part`]), in
/// order, and for a streaming sink its micro-batch. The same commit again does nothing; a
/// different one is an error, but for another commit of the same sink's micro-batch (a
/// replay), which is [`Commit::Replayed`]: the first one stands.
pub fn commit(
    config: &TierConfig,
    job: &str,
    parts: &[&str],
    sink: Option<(&str, u64)>,
) -> Result<Commit> {
    let (text, bytes) = stage::commit_record(job, parts, sink)?;
    let bucket = Bucket::open(config)?;
    let key = job_key(job, COMMIT_OBJECT);
    // A commit there already is judged first: once published, the parts are gone.
    if let Some(existing) = bucket.get_bytes(&key)? {
        return judge(&bucket, &key, &existing, &text, sink, job);
    }
    for part in parts {
        let name = format!("{part}{PART_SUFFIX}");
        if bucket.get_bytes(&job_key(job, &name))?.is_none() {
            return Err(Error::invalid(
                "parts",
                format!("part {part:?} of job {job:?} is not in the bucket (not staged there)"),
            ));
        }
    }
    if bucket.put_new(&key, bytes)? {
        bucket.put(&pending_key(job), Vec::new())?;
        return Ok(Commit::Recorded);
    }
    let existing = bucket.get_bytes(&key)?.unwrap_or_default();
    judge(&bucket, &key, &existing, &text, sink, job)
}

/// What a commit with `text` finds when the job's commit `existing` is there already.
fn judge(
    bucket: &Bucket,
    key: &str,
    existing: &[u8],
    text: &str,
    sink: Option<(&str, u64)>,
    job: &str,
) -> Result<Commit> {
    let existing = stage::parse_commit(existing).ok_or_else(|| Error::TierCorruption {
        key: key.to_owned(),
        reason: "a staged job's commit fails its checks".into(),
    })?;
    let replay = match (&existing.sink, sink) {
        (Some((s, b)), Some((sink, batch))) => s == sink && *b == batch,
        _ => false,
    };
    if existing.text != text && !replay {
        return Err(Error::invalid(
            "parts",
            format!("job {job:?} was committed in the bucket with other parts"),
        ));
    }
    // The first commit stands: its failure is this one's too.
    if let Some(bytes) = bucket.get_bytes(&job_key(job, FAILED_OBJECT))? {
        let reason = stage::parse_failed(&bytes)
            .unwrap_or_else(|| "the reason it was set aside is damaged".into());
        return Err(stage::failed_error(job, &reason));
    }
    // The first committer may have died before it said the job waits.
    if bucket.get_bytes(&job_key(job, PUBLISHED_OBJECT))?.is_none() {
        bucket.put(&pending_key(job), Vec::new())?;
    }
    Ok(if existing.text == text {
        Commit::Recorded
    } else {
        Commit::Replayed
    })
}

/// What [`commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// This commit is the job's: the producer publishes its parts.
    Recorded,
    /// Another commit of the same sink micro-batch came first: that one stands (wait for
    /// it with [`wait_published`]), and this one's parts are for [`abort_parts`].
    Replayed,
}

/// Waits up to `wait` until the producer has published committed `job`: the offsets it
/// got per topic. A job the producer set aside is `InvalidArgument` with its reason; a
/// producer that does not publish it in time is `TierTimeout`, which says what the bucket
/// shows of the producer.
pub fn wait_published(
    config: &TierConfig,
    job: &str,
    wait: Duration,
) -> Result<Vec<(String, Range<u64>)>> {
    validate_name(job)?;
    let bucket = Bucket::open(config)?;
    let deadline = crate::clock::deadline_after(wait);
    let started = Instant::now();
    // Once: a commit never goes away unanswered (an abort refuses it).
    if bucket.get_bytes(&job_key(job, COMMIT_OBJECT))?.is_none()
        && bucket.get_bytes(&job_key(job, PUBLISHED_OBJECT))?.is_none()
    {
        return Err(Error::invalid(
            "job",
            format!("job {job:?} is not committed in the bucket"),
        ));
    }
    loop {
        if let Some(bytes) = bucket.get_bytes(&job_key(job, PUBLISHED_OBJECT))? {
            let (_, ranges) =
                stage::parse_published(&bytes).ok_or_else(|| Error::TierCorruption {
                    key: job_key(job, PUBLISHED_OBJECT),
                    reason: "a published job's record fails its checks".into(),
                })?;
            return Ok(ranges);
        }
        if let Some(bytes) = bucket.get_bytes(&job_key(job, FAILED_OBJECT))? {
            let reason = stage::parse_failed(&bytes)
                .unwrap_or_else(|| "the reason it was set aside is damaged".into());
            return Err(stage::failed_error(job, &reason));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::TierTimeout {
                waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                pending_records: 0,
                waiting_for: no_publisher(&bucket, job),
            });
        }
        std::thread::sleep(WAIT_LOOK.min(deadline - now));
    }
}

/// Why nobody has published `job` yet, as far as the bucket tells.
fn no_publisher(bucket: &Bucket, job: &str) -> String {
    let mut manifest = super::manifest::Manifest::default();
    match manifest.refresh(bucket) {
        Ok(()) => match manifest.producer {
            Some(producer) => format!(
                "job {job:?} is committed in the bucket and waits for its producer \
                 {producer} (epoch {}) to publish it: is a process with this bucket as its \
                 tier (tidelog.open(dir, tier=URL)) running, and uploading?",
                manifest.epoch
            ),
            None => format!(
                "job {job:?} is committed in the bucket, but no producer has ever claimed \
                 it: open the producer's directory with this bucket as its tier \
                 (tidelog.open(dir, tier=URL)) to publish staged jobs"
            ),
        },
        Err(e) => format!("job {job:?} is committed; the bucket's manifest cannot be read: {e}"),
    }
}

/// Discards `job` from the bucket: every object of its directory. An uncommitted job, or
/// one its producer set aside (`FAILED`); a committed job is the producer's to publish:
/// that is an error.
pub fn abort(config: &TierConfig, job: &str) -> Result<()> {
    validate_name(job)?;
    let bucket = Bucket::open(config)?;
    let committed = bucket.get_bytes(&job_key(job, COMMIT_OBJECT))?.is_some();
    let failed = bucket.get_bytes(&job_key(job, FAILED_OBJECT))?.is_some();
    if committed && !failed {
        return Err(Error::invalid(
            "job",
            format!("job {job:?} is committed in the bucket: its producer publishes it"),
        ));
    }
    bucket.delete(&pending_key(job))?;
    for key in bucket.list_all(&format!("{STAGING_PREFIX}/{job}"))? {
        bucket.delete(&key)?;
    }
    Ok(())
}

/// Deletes `parts` of `job` from the bucket (a replayed micro-batch's own parts).
pub fn abort_parts(config: &TierConfig, job: &str, parts: &[&str]) -> Result<()> {
    validate_name(job)?;
    let bucket = Bucket::open(config)?;
    delete_parts(&bucket, job, parts)
}

/// Deletes the objects of `parts` of `job`: manifests first, so a part is never whole
/// without its segments.
pub(crate) fn delete_parts(bucket: &Bucket, job: &str, parts: &[&str]) -> Result<()> {
    let listed = bucket.list_all(&format!("{STAGING_PREFIX}/{job}"))?;
    for part in parts {
        validate_name(part)?;
        bucket.delete(&job_key(job, &format!("{part}{PART_SUFFIX}")))?;
    }
    let prefix = format!("{STAGING_PREFIX}/{job}/");
    for key in listed {
        let Some(name) = key.strip_prefix(&prefix) else {
            continue;
        };
        // `PART.N.seg` exactly: part `a` does not own `a.b.0.seg` (dots are legal in names).
        let ours = parts.iter().any(|p| {
            name.strip_prefix(&format!("{p}."))
                .and_then(|rest| rest.strip_suffix(stage::SEGMENT_SUFFIX))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
        if ours {
            bucket.delete(&key)?;
        }
    }
    Ok(())
}

/// The last micro-batch of streaming sink `sink` its producer published, as the bucket
/// says.
pub fn sink_batch(config: &TierConfig, sink: &str) -> Result<Option<u64>> {
    validate_name(sink)?;
    let bucket = Bucket::open(config)?;
    let key = sink_key(sink);
    match bucket.get_bytes(&key)? {
        None => Ok(None),
        Some(bytes) => stage::parse_sink(&bytes)
            .map(Some)
            .ok_or_else(|| Error::TierCorruption {
                key,
                reason: "a sink's record fails its checks".into(),
            }),
    }
}

/// A job committed in the bucket that its producer has not answered yet.
#[derive(Debug)]
pub(crate) struct BucketJob {
    pub job: String,
    pub parts: Vec<String>,
    pub sink: Option<(String, u64)>,
}

/// The jobs committed in the bucket and not answered yet (those named under
/// [`PENDING_PREFIX`]; one answered meanwhile loses its name there). A commit that fails its
/// checks is set aside with the reason.
pub(crate) fn committed_jobs(bucket: &Bucket) -> Result<Vec<BucketJob>> {
    let mut out = Vec::new();
    let prefix = format!("{PENDING_PREFIX}/");
    for key in bucket.list_all(PENDING_PREFIX)? {
        let Some(job) = key.strip_prefix(&prefix) else {
            continue;
        };
        if validate_name(job).is_err() || job.contains('/') {
            continue;
        }
        let answered = bucket.get_bytes(&job_key(job, PUBLISHED_OBJECT))?.is_some()
            || bucket.get_bytes(&job_key(job, FAILED_OBJECT))?.is_some();
        if answered {
            bucket.delete(&key)?;
            continue;
        }
        let Some(bytes) = bucket.get_bytes(&job_key(job, COMMIT_OBJECT))? else {
            // Named as waiting but never committed: nothing to publish.
            bucket.delete(&key)?;
            continue;
        };
        match stage::parse_commit(&bytes) {
            Some(m) => out.push(BucketJob {
                job: job.to_owned(),
                parts: m.parts,
                sink: m.sink,
            }),
            None => set_aside(bucket, job, "its commit in the bucket fails its checks")?,
        }
    }
    // A sink's micro-batches in their order: a later one published first would make the
    // sink's record pass an earlier one, which would then count as a replay.
    out.sort_by_key(|j| match &j.sink {
        Some((sink, batch)) => (sink.clone(), *batch, j.job.clone()),
        None => (j.job.clone(), 0, String::new()),
    });
    Ok(out)
}

/// Brings the parts of `job` from the bucket into the directory `dir` (those not there
/// already): segments, then the manifest, each whole under a temporary name first.
pub(crate) fn download_parts(
    bucket: &Bucket,
    storage: &dyn Storage,
    dir: &Path,
    job: &BucketJob,
) -> Result<()> {
    let job_dir = stage::job_dir(dir, &job.job)?;
    storage
        .create_dir_all(&job_dir)
        .map_err(|e| Error::io("create staged job directory", &job_dir, e))?;
    for part in &job.parts {
        let manifest_name = format!("{part}{PART_SUFFIX}");
        if io::exists(storage, &job_dir.join(&manifest_name))? {
            continue;
        }
        let key = job_key(&job.job, &manifest_name);
        let bytes = bucket.get_bytes(&key)?.ok_or_else(|| {
            Error::invalid(
                "parts",
                format!("part {part:?} of job {:?} is not in the bucket", job.job),
            )
        })?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| stage::corrupt(&job_dir.join(&manifest_name), "not a part manifest"))?;
        let manifest = PartManifest::decode(&job_dir.join(&manifest_name), text)?;
        for segment in segment_names(part, &manifest) {
            download(
                bucket,
                storage,
                &job_dir,
                &job_key(&job.job, &segment),
                &segment,
            )?;
        }
        io::replace_file(
            storage,
            &job_dir,
            &job_dir.join(&manifest_name),
            &bytes,
            "write downloaded part manifest",
        )?;
    }
    Ok(())
}

/// Downloads `key` to `name` in `job_dir`, through a temporary name.
fn download(
    bucket: &Bucket,
    storage: &dyn Storage,
    job_dir: &Path,
    key: &str,
    name: &str,
) -> Result<()> {
    let path = job_dir.join(name);
    let tmp = job_dir.join(format!("{name}.download"));
    match storage.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove partial download", &tmp, e)),
    }
    if !bucket.get_file(storage, key, &tmp)? {
        return Err(Error::invalid(
            "parts",
            format!("{key} is named by its part's manifest but not in the bucket"),
        ));
    }
    storage
        .rename(&tmp, &path)
        .map_err(|e| Error::io("rename downloaded segment", &path, e))
}

/// Records in the bucket that `job` was published with `ranges` (its commit's text
/// `commit`), updates its sink's last micro-batch, and deletes its parts.
pub(crate) fn answer_published(
    bucket: &Bucket,
    job: &BucketJob,
    ranges: &[(String, Range<u64>)],
) -> Result<()> {
    let parts: Vec<&str> = job.parts.iter().map(String::as_str).collect();
    let sink = job.sink.as_ref().map(|(s, b)| (s.as_str(), *b));
    let (text, _) = stage::commit_record(&job.job, &parts, sink)?;
    if let Some((sink, batch)) = sink {
        let key = sink_key(sink);
        let last = bucket.get_bytes(&key)?.and_then(|b| stage::parse_sink(&b));
        if last.is_none_or(|last| last < batch) {
            bucket.put(&key, stage::sink_record(batch))?;
        }
    }
    bucket.put(
        &job_key(&job.job, PUBLISHED_OBJECT),
        stage::published_record(&text, ranges),
    )?;
    delete_parts(bucket, &job.job, &parts)?;
    bucket.delete(&pending_key(&job.job))
}

/// Records in the bucket that `job` cannot be published, and why.
pub(crate) fn set_aside(bucket: &Bucket, job: &str, reason: &str) -> Result<()> {
    bucket.put(&job_key(job, FAILED_OBJECT), stage::failed_record(reason))?;
    bucket.delete(&pending_key(job))
}

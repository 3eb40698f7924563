//! Staged appends: records written by many processes without the directory's lock, invisible
//! until one commit publishes them into their topics, exactly once (Spark's write protocol:
//! tasks stage, the driver commits or aborts).
//!
//! A job's files live in `staging/JOB/`. Each task attempt writes one part through
//! [`StagedWriter`] (no lock): segments laid out like data files (`segment`), then the
//! part's manifest `PART.stage` once they are durable (`part`). The commit writes `COMMIT`
//! (the parts it accepted, atomically); the holder of the directory's lock publishes the job
//! (`Wal`'s publish path): it makes each of the job's topics exclusive (other appends to it
//! wait), records in `INGEST` where the job starts in each, then adopts each large segment
//! as a data file (its records are not copied) or copies a small one's records, and removes
//! the job's directory. After a crash the ledger and the segments still in the directory say
//! which records the data files already hold, so the publish resumes and no record is
//! appended twice. Bytes: `docs/FORMAT.md`, "Staged appends".

use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::validate_name;
use crate::error::{Error, Result};
use crate::io::{self, StdStorage, Storage};

mod part;
pub(crate) mod segment;

pub use part::{PART_SUFFIX, STAGED_RECORD_BYTES_MAX, StagedPart, StagedWriter};
pub(crate) use part::{PartManifest, SegmentEntry, read_manifest};
pub use segment::{SEGMENT_SUFFIX, STAGING_VERSION, segment_name};

/// Directory of staged jobs inside a data directory.
pub const STAGING_DIR: &str = "staging";
/// A committed job's manifest.
pub const COMMIT_FILE: &str = "COMMIT";
/// An ingesting job's ledger.
pub const INGEST_FILE: &str = "INGEST";
const COMMIT_HEADER: &str = "tidelog commit v2\n";
/// Commits of older builds: no checksum line.
const COMMIT_HEADER_V1: &str = "tidelog commit v1\n";
/// Manifest line naming the streaming sink and micro-batch a job publishes.
const SINK_LINE: &str = "@sink ";
/// Directory of the sinks' ledgers (a name no job can have).
pub const SINKS_DIR: &str = ".sinks";
const SINK_HEADER: &str = "tidelog sink v2\n";
const SINK_HEADER_V1: &str = "tidelog sink v1\n";
const INGEST_HEADER: &str = "tidelog ingest v2\n";
const INGEST_HEADER_V1: &str = "tidelog ingest v1\n";
/// The last line of every text file of version 2 (and of `FAILED` and published records):
/// the CRC-32 of every byte before it, 8 hex digits. A file cut short or damaged fails it.
const CRC_LINE: &str = "@crc ";
/// A committed job that cannot be published: the reason, set aside until it is aborted.
pub const FAILED_FILE: &str = "FAILED";
const FAILED_HEADER: &str = "tidelog failed v1\n";
/// Directory of the records of published jobs (a name no job can have): what a job's
/// commit named and the offsets it got, so that committing it again is answered, not redone.
pub const PUBLISHED_DIR: &str = ".published";
const PUBLISHED_HEADER: &str = "tidelog published v1\n";
/// Directory of the names of jobs a tier's bucket brought here whose publish the bucket has
/// not been told of yet (a name no job can have): their published records outlive the TTL
/// until it is, so a restart never publishes such a job twice.
pub const BUCKET_JOBS_DIR: &str = ".bucket";
/// Published-record line: `@range TOPIC START END`.
const RANGE_LINE: &str = "@range ";

/// `text` followed by its checksum line (see [`CRC_LINE`]).
fn seal(mut text: String) -> String {
    let crc = crc32fast::hash(text.as_bytes());
    text.push_str(&format!("{CRC_LINE}{crc:08x}\n"));
    text
}

/// What follows the header line of the text file at `path`, if the file exists: `header`
/// (sealed: its checksum line is checked and dropped) or `legacy` (an older build's, as it
/// is). Anything else, a missing or wrong checksum line included, is corruption.
fn read_sealed(
    storage: &dyn Storage,
    path: &Path,
    what: &'static str,
    header: &str,
    legacy: Option<&str>,
) -> Result<Option<String>> {
    let Some(text) = io::read_text_optional(storage, path, what)? else {
        return Ok(None);
    };
    unseal(&text, header, legacy)
        .map(Some)
        .map_err(|reason| corrupt(path, reason))
}

/// What follows `header` in `text`, its checksum line checked and dropped (or what follows
/// `legacy`, as it is); why not, when it fails.
fn unseal(
    text: &str,
    header: &str,
    legacy: Option<&str>,
) -> std::result::Result<String, &'static str> {
    if let Some(body) = legacy.and_then(|l| text.strip_prefix(l)) {
        return Ok(body.to_owned());
    }
    let body = text
        .strip_prefix(header)
        .ok_or("not the tidelog file it should be (bad header line)")?;
    let cut = body
        .strip_suffix('\n')
        .map_or(0, |b| b.rfind('\n').map_or(0, |i| i + 1));
    let (payload, last) = body.split_at(cut);
    let crc = last
        .strip_prefix(CRC_LINE)
        .and_then(|l| l.strip_suffix('\n'))
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or("the file is cut short or damaged (no checksum line)")?;
    if crc != crc32fast::hash(&text.as_bytes()[..header.len() + cut]) {
        return Err("checksum mismatch");
    }
    Ok(payload.to_owned())
}

/// The text of a staged-job record kept elsewhere (a tier's bucket) as `bytes`, checked as
/// the file would be; `None` when it fails.
fn unseal_bytes(bytes: &[u8], header: &str) -> Option<String> {
    unseal(std::str::from_utf8(bytes).ok()?, header, None).ok()
}

/// A commit of `job` as the `COMMIT` file holds it: its text (what commits are compared by)
/// and its bytes.
#[cfg_attr(
    not(feature = "tier"),
    expect(dead_code, reason = "for staged jobs in a tier's bucket")
)]
pub(crate) fn commit_record(
    job: &str,
    parts: &[&str],
    sink: Option<(&str, u64)>,
) -> Result<(String, Vec<u8>)> {
    let text = commit_text(job, parts, sink)?;
    let bytes = seal(format!("{COMMIT_HEADER}{text}")).into_bytes();
    Ok((text, bytes))
}

/// A commit's bytes read back; `None` when they fail their checks.
#[cfg_attr(
    not(feature = "tier"),
    expect(dead_code, reason = "for staged jobs in a tier's bucket")
)]
pub(crate) fn parse_commit(bytes: &[u8]) -> Option<Manifest> {
    parse_commit_body(&unseal_bytes(bytes, COMMIT_HEADER)?).ok()
}

/// A published job's record (its commit's text and the offsets it got) as bytes, and read
/// back.
pub(crate) fn published_record(commit: &str, ranges: &[(String, Range<u64>)]) -> Vec<u8> {
    seal(published_text(commit, ranges)).into_bytes()
}

#[cfg_attr(
    not(feature = "tier"),
    expect(dead_code, reason = "for staged jobs in a tier's bucket")
)]
#[allow(clippy::type_complexity)]
pub(crate) fn parse_published(bytes: &[u8]) -> Option<(String, Vec<(String, Range<u64>)>)> {
    parse_published_body(&unseal_bytes(bytes, PUBLISHED_HEADER)?).ok()
}

/// Why a job was set aside, as bytes, and read back.
pub(crate) fn failed_record(reason: &str) -> Vec<u8> {
    seal(format!("{FAILED_HEADER}{}\n", reason.replace('\n', " "))).into_bytes()
}

#[cfg_attr(
    not(feature = "tier"),
    expect(dead_code, reason = "for staged jobs in a tier's bucket")
)]
pub(crate) fn parse_failed(bytes: &[u8]) -> Option<String> {
    unseal_bytes(bytes, FAILED_HEADER).map(|r| r.trim_end().to_owned())
}

/// A sink's last published micro-batch, as bytes, and read back.
pub(crate) fn sink_record(batch: u64) -> Vec<u8> {
    seal(format!("{SINK_HEADER}{batch}\n")).into_bytes()
}

#[cfg_attr(
    not(feature = "tier"),
    expect(dead_code, reason = "for staged jobs in a tier's bucket")
)]
pub(crate) fn parse_sink(bytes: &[u8]) -> Option<u64> {
    unseal_bytes(bytes, SINK_HEADER)?
        .strip_suffix('\n')
        .and_then(|b| b.parse().ok())
}

/// What a commit of `job` with `parts` would find in `dir` now: `None` when it is new
/// there, else as [`write_commit`] would answer (a job set aside is its error).
#[cfg_attr(
    not(feature = "tier"),
    expect(dead_code, reason = "for staged jobs in a tier's bucket")
)]
pub(crate) fn commit_status(
    storage: &dyn Storage,
    dir: &Path,
    job: &str,
    parts: &[&str],
    sink: Option<(&str, u64)>,
) -> Result<Option<Committed>> {
    let job_dir = job_dir(dir, job)?;
    let text = commit_text(job, parts, sink)?;
    committed_before(storage, dir, &job_dir, job, &text, sink)
}

/// The directory of `job` in the data directory `dir`.
pub fn job_dir(dir: &Path, job: &str) -> Result<PathBuf> {
    validate_name(job)?;
    Ok(dir.join(STAGING_DIR).join(job))
}

/// A staged job as found in a data directory (for inspection: `tidelog stat`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StagedJob {
    /// The job's name.
    pub job: String,
    /// A commit names its parts: the directory's holder publishes it.
    pub committed: bool,
    /// Its publish has begun (an `INGEST` ledger exists) and resumes at the next open.
    pub publishing: bool,
    /// It cannot be published, and why: set aside (its files kept) until it is aborted.
    pub failed: Option<String>,
    /// Complete parts in it.
    pub parts: u64,
    /// Bytes of its files.
    pub bytes: u64,
    /// Time since any of its files last changed.
    pub idle: std::time::Duration,
}

/// The staged jobs of data directory `dir`, by name (the sinks' ledgers, and anything else
/// that is not a job's directory, are not jobs).
pub fn jobs(dir: &Path) -> Result<Vec<StagedJob>> {
    list_jobs(&StdStorage, dir)
}

/// As [`jobs`], through `storage`.
fn list_jobs(storage: &dyn Storage, dir: &Path) -> Result<Vec<StagedJob>> {
    let staging = dir.join(STAGING_DIR);
    let entries = match storage.read_dir(&staging) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list staging directory", &staging, e)),
    };
    let now = std::time::SystemTime::now();
    let mut jobs = Vec::new();
    for entry in entries {
        let Some(job) = entry.name.to_str().map(str::to_owned) else {
            continue;
        };
        let job_dir = staging.join(&job);
        if job.starts_with('.') || !io::is_dir(storage, &job_dir)? {
            continue;
        }
        let (mut parts, mut bytes) = (0, 0);
        let files = match storage.read_dir(&job_dir) {
            Ok(files) => files,
            // Removed since the listing (published, aborted).
            Err(e) if io::is_absent(&e) => continue,
            Err(e) => return Err(Error::io("list staged job", &job_dir, e)),
        };
        let Some(own) = io::metadata_if_present(storage, &job_dir)? else {
            continue;
        };
        let mut newest = own.modified().unwrap_or(now);
        for f in files {
            if f.name.to_str().is_some_and(|n| n.ends_with(PART_SUFFIX)) {
                parts += 1;
            }
            // Removed since the listing.
            let Some(meta) = io::metadata_if_present(storage, &job_dir.join(&f.name))? else {
                continue;
            };
            // Blocks on disk: segments are sparse.
            bytes += meta.blocks() * 512;
            if let Ok(modified) = meta.modified() {
                newest = newest.max(modified);
            }
        }
        jobs.push(StagedJob {
            committed: io::exists(storage, &job_dir.join(COMMIT_FILE))?,
            publishing: io::exists(storage, &job_dir.join(INGEST_FILE))?,
            failed: read_failed(storage, &job_dir)?,
            parts,
            bytes,
            idle: now.duration_since(newest).unwrap_or_default(),
            job,
        });
    }
    jobs.sort_by(|a, b| a.job.cmp(&b.job));
    Ok(jobs)
}

/// Removes the jobs of `dir` that nobody committed (no `COMMIT`, no `INGEST`) and whose
/// files have not changed for `ttl`: parts a dead Spark driver left behind. A job whose lock
/// another process holds is left alone. Returns the jobs removed.
pub(crate) fn remove_abandoned(
    storage: &dyn Storage,
    dir: &Path,
    ttl: std::time::Duration,
) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for job in list_jobs(storage, dir)? {
        if job.committed || job.publishing || job.idle < ttl {
            continue;
        }
        let job_dir = dir.join(STAGING_DIR).join(&job.job);
        let Some(_lock) = try_lock_job(storage, &job_dir)? else {
            continue;
        };
        // A commit written while we looked wins.
        if is_committed(storage, &job_dir)? {
            continue;
        }
        if remove_job_dir(storage, &job_dir)? {
            removed.push(job.job);
        }
    }
    remove_old_published(storage, dir, ttl)?;
    Ok(removed)
}

/// Removes the records of jobs published longer than `ttl` ago: a commit repeated later
/// than that is no retry.
fn remove_old_published(storage: &dyn Storage, dir: &Path, ttl: std::time::Duration) -> Result<()> {
    let published = dir.join(STAGING_DIR).join(PUBLISHED_DIR);
    let entries = match storage.read_dir(&published) {
        Ok(e) => e,
        Err(e) if io::is_absent(&e) => return Ok(()),
        Err(e) => return Err(Error::io("list published jobs", &published, e)),
    };
    let now = std::time::SystemTime::now();
    let waiting = dir.join(STAGING_DIR).join(BUCKET_JOBS_DIR);
    for entry in entries {
        if io::exists(storage, &waiting.join(&entry.name))? {
            continue;
        }
        let path = published.join(&entry.name);
        let old = storage
            .metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age >= ttl);
        if old {
            match storage.remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove published job record", &path, e)),
            }
        }
    }
    Ok(())
}

/// Prefix a job's directory is renamed to before its files are removed.
const REMOVING_PREFIX: &str = ".removing-";

/// Removes a job's directory: renamed first (atomically, then the staging directory synced),
/// so a crash part way through the removal never leaves a job with some of its files gone
/// (a commit whose parts are missing); what such a crash leaves is no job at all, and
/// [`remove_leftovers`] clears it. False when the job was not there.
pub(crate) fn remove_job_dir(storage: &dyn Storage, job_dir: &Path) -> Result<bool> {
    let (Some(staging), Some(name)) = (job_dir.parent(), job_dir.file_name()) else {
        return Err(Error::invalid(
            "job",
            "a job directory has a parent and a name",
        ));
    };
    let mut removing = std::ffi::OsString::from(REMOVING_PREFIX);
    removing.push(name);
    let removing = staging.join(removing);
    remove_tree(storage, &removing)?;
    match storage.rename(job_dir, &removing) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("remove staged job", job_dir, e)),
    }
    storage
        .sync_dir(staging)
        .map_err(|e| Error::io("fsync directory", staging, e))?;
    remove_tree(storage, &removing)?;
    Ok(true)
}

/// Clears what removals cut short by a crash left in the staging directory of `dir`.
pub(crate) fn remove_leftovers(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let staging = dir.join(STAGING_DIR);
    let entries = match storage.read_dir(&staging) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("list staging directory", &staging, e)),
    };
    for entry in entries {
        if entry
            .name
            .to_str()
            .is_some_and(|n| n.starts_with(REMOVING_PREFIX))
        {
            remove_tree(storage, &staging.join(&entry.name))?;
        }
    }
    Ok(())
}

fn remove_tree(storage: &dyn Storage, path: &Path) -> Result<()> {
    match storage.remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove staged job", path, e)),
    }
}

fn is_committed(storage: &dyn Storage, job_dir: &Path) -> Result<bool> {
    Ok(io::exists(storage, &job_dir.join(COMMIT_FILE))?
        || io::exists(storage, &job_dir.join(INGEST_FILE))?)
}

/// The segment `entry` of `part` lists in `job_dir`, opened and its topics' counts checked
/// against the manifest's: what a publish checks of each segment before it publishes any.
/// `None` for a segment a publish cut short already adopted (`resumed`: the job's ledger
/// exists); missing otherwise, it is damage.
pub(crate) fn listed_segment(
    storage: &dyn Storage,
    job_dir: &Path,
    part: &str,
    entry: &SegmentEntry,
    resumed: bool,
) -> Result<Option<segment::Segment>> {
    let path = job_dir.join(segment_name(part, entry.index));
    if !io::exists(storage, &path)? {
        if resumed {
            return Ok(None);
        }
        return Err(staged_corruption(
            &path,
            "a segment its part's manifest lists is missing",
        ));
    }
    let segment = segment::Segment::open(storage, &path)?;
    let mut found = segment.counts();
    let mut listed = entry.counts.clone();
    found.sort();
    listed.sort();
    if found != listed {
        return Err(staged_corruption(
            &path,
            "the segment disagrees with its part's manifest",
        ));
    }
    Ok(Some(segment))
}

/// A staged job's damage at `path`: its publish sets the job aside.
pub(crate) fn staged_corruption(path: &Path, reason: &str) -> Error {
    corrupt(path, &format!("staged job: {reason}"))
}

/// Checks committed job `job` of `dir` as its publish will, without publishing or changing
/// anything: its commit, each part's manifest, and every record of every segment. False
/// when the job is not committed (or already published).
pub fn check_committed(dir: &Path, job: &str) -> Result<bool> {
    let storage = &StdStorage;
    let job_dir = job_dir(dir, job)?;
    let Some(manifest) = read_commit(storage, &job_dir)? else {
        return Ok(false);
    };
    let resumed = io::exists(storage, &job_dir.join(INGEST_FILE))?;
    for part in &manifest.parts {
        for entry in read_manifest(storage, &job_dir, part)?.segments {
            if let Some(segment) = listed_segment(storage, &job_dir, part, &entry, resumed)? {
                segment.for_each_extent(storage, |_, _| Ok(()))?;
            }
        }
    }
    Ok(true)
}

/// Name of the lock file a publish or an abort holds (`flock`) inside a job's directory.
pub const JOB_LOCK_FILE: &str = "LOCK";

/// Takes the job's lock without waiting: `None` when another process (or handle) holds it,
/// or the job's directory is gone. A publish holds it from start to end; an abort while it
/// removes the job.
pub(crate) fn try_lock_job(storage: &dyn Storage, job_dir: &Path) -> Result<Option<std::fs::File>> {
    let path = job_dir.join(JOB_LOCK_FILE);
    match storage.lock_file(&path) {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(Error::io("lock staged job", &path, e)),
    }
}

/// Longest a publish waits for a job's lock before it passes the job by (housekeeping looks
/// again on a later tick).
pub(crate) const JOB_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// [`try_lock_job`], trying again for up to `wait` while another holds the lock and the
/// job's directory is there. An abort holds it only while it removes the job; a child
/// forked in this process holds a copy of the lock's descriptor, and so the lock, until its
/// exec: a publish that met either a moment ago need not leave the job for later.
pub(crate) fn lock_job_within(
    storage: &dyn Storage,
    job_dir: &Path,
    wait: std::time::Duration,
) -> Result<Option<std::fs::File>> {
    let deadline = crate::clock::deadline_after(wait);
    loop {
        if let Some(file) = try_lock_job(storage, job_dir)? {
            return Ok(Some(file));
        }
        if std::time::Instant::now() >= deadline || !io::exists(storage, job_dir)? {
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Discards job `job` of `dir`: its parts, and its commit if publishing has not started or
/// the job was set aside as one that cannot be published. Fails for a job being published
/// (or whose publish started and was cut: the directory's holder finishes it).
pub fn abort(dir: &Path, job: &str) -> Result<()> {
    let storage = &StdStorage;
    let job_dir = job_dir(dir, job)?;
    if !io::exists(storage, &job_dir)? {
        return Ok(());
    }
    let Some(_lock) = try_lock_job(storage, &job_dir)? else {
        return Err(Error::invalid(
            "job",
            format!("job {job:?} is being published and cannot be aborted"),
        ));
    };
    if io::exists(storage, &job_dir.join(INGEST_FILE))?
        && !io::exists(storage, &job_dir.join(FAILED_FILE))?
    {
        return Err(Error::invalid(
            "job",
            format!("job {job:?} is being published and cannot be aborted"),
        ));
    }
    remove_job_dir(storage, &job_dir).map(drop)
}

/// Records the commit of `job` in `dir`: the parts to publish, in order. The process that
/// holds the directory (or the next to open it) publishes the job. The parts are checked
/// first: each named once, staged, and its manifest sound. Committing a published job again
/// with the same parts does nothing.
pub fn commit(dir: &Path, job: &str, parts: &[&str]) -> Result<()> {
    if parts.is_empty() {
        // Nothing to publish: whatever the job staged goes.
        return abort(dir, job);
    }
    write_commit(&StdStorage, dir, job, parts, None, None).map(drop)
}

/// As [`commit`], for micro-batch `batch` of streaming sink `sink`: publishing the job also
/// records `batch` as the sink's last ([`sink_batch`]), in the same crash-safe step, so a
/// replayed micro-batch can be recognised and dropped.
pub fn commit_for_sink(
    dir: &Path,
    job: &str,
    parts: &[&str],
    sink: &str,
    batch: u64,
) -> Result<()> {
    validate_name(sink)?;
    if parts.is_empty() {
        return abort(dir, job);
    }
    write_commit(&StdStorage, dir, job, parts, Some((sink, batch)), None).map(drop)
}

/// The last micro-batch of `sink` published in `dir`, if any.
pub fn sink_batch(dir: &Path, sink: &str) -> Result<Option<u64>> {
    read_sink_batch(&StdStorage, dir, sink)
}

/// As [`sink_batch`], through `storage`.
pub(crate) fn read_sink_batch(
    storage: &dyn Storage,
    dir: &Path,
    sink: &str,
) -> Result<Option<u64>> {
    validate_name(sink)?;
    let path = dir.join(STAGING_DIR).join(SINKS_DIR).join(sink);
    let Some(body) = read_sealed(
        storage,
        &path,
        "read sink ledger",
        SINK_HEADER,
        Some(SINK_HEADER_V1),
    )?
    else {
        return Ok(None);
    };
    body.strip_suffix('\n')
        .and_then(|b| b.parse().ok())
        .map(Some)
        .ok_or_else(|| corrupt(&path, "not a tidelog sink ledger"))
}

/// Records `batch` as the last published micro-batch of `sink` (never moving it back).
pub(crate) fn write_sink_batch(
    storage: &dyn Storage,
    dir: &Path,
    sink: &str,
    batch: u64,
) -> Result<()> {
    if read_sink_batch(storage, dir, sink)?.is_some_and(|last| last >= batch) {
        return Ok(());
    }
    let sinks = dir.join(STAGING_DIR).join(SINKS_DIR);
    storage
        .create_dir_all(&sinks)
        .map_err(|e| Error::io("create sinks directory", &sinks, e))?;
    crate::io::replace_file(
        storage,
        &sinks,
        &sinks.join(sink),
        &sink_record(batch),
        "write sink ledger",
    )
}

/// The directory's limits a staged record must fit to be published.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub record_bytes_max: u64,
    pub batch_bytes_max: u64,
}

impl Limits {
    /// Whether a segment whose largest record is `max_record_bytes` fits.
    pub(crate) fn check(&self, max_record_bytes: u64) -> Result<()> {
        if max_record_bytes > self.record_bytes_max {
            return Err(Error::limit(
                "max_record_bytes",
                max_record_bytes,
                self.record_bytes_max,
            ));
        }
        // Each copied record is at least a batch of its own.
        if max_record_bytes > self.batch_bytes_max {
            return Err(Error::limit(
                "max_batch_bytes",
                max_record_bytes,
                self.batch_bytes_max,
            ));
        }
        Ok(())
    }
}

/// What recording a commit found.
#[derive(Debug)]
pub(crate) enum Committed {
    /// The commit is recorded: the job is for the directory's holder to publish.
    Recorded,
    /// The job was published already with these parts: the offsets it got, per topic (none
    /// known for a sink's micro-batch, which its sink's ledger recognises).
    Published(Vec<(String, Range<u64>)>),
}

/// Records the commit of `job`: the parts to publish, in order. The part list is checked
/// first (each part named once, staged, its manifest sound, its records within `limits`
/// when the directory's are known): nothing is written for a list that fails. Idempotent
/// for the same parts, before the publish and after it; a different list for a committed
/// job is an error.
pub(crate) fn write_commit(
    storage: &dyn Storage,
    dir: &Path,
    job: &str,
    parts: &[&str],
    sink: Option<(&str, u64)>,
    limits: Option<Limits>,
) -> Result<Committed> {
    let job_dir = job_dir(dir, job)?;
    let text = commit_text(job, parts, sink)?;
    if let Some(committed) = committed_before(storage, dir, &job_dir, job, &text, sink)? {
        return Ok(committed);
    }
    check_parts(storage, &job_dir, job, parts, limits)?;
    // The job's directory, and the staging directory holding it, are durable before its
    // commit is: a power loss must not take a job its committer was told is committed.
    let staging = dir.join(STAGING_DIR);
    for parent in [&staging, dir] {
        storage
            .sync_dir(parent)
            .map_err(|e| Error::io("fsync directory", parent, e))?;
    }
    crate::io::replace_file(
        storage,
        &job_dir,
        &job_dir.join(COMMIT_FILE),
        seal(format!("{COMMIT_HEADER}{text}")).as_bytes(),
        "write staged commit",
    )?;
    Ok(Committed::Recorded)
}

/// The lines of a commit after its header: the sink line if any, then each part. What a
/// commit is compared by, whatever its version. Names are checked, and a part named twice
/// is an error.
fn commit_text(job: &str, parts: &[&str], sink: Option<(&str, u64)>) -> Result<String> {
    let mut text = String::new();
    if let Some((sink, batch)) = sink {
        validate_name(sink)?;
        text.push_str(&format!("{SINK_LINE}{sink} {batch}\n"));
    }
    for (i, part) in parts.iter().enumerate() {
        validate_name(part)?;
        if parts[..i].contains(part) {
            return Err(Error::invalid(
                "parts",
                format!("part {part:?} of job {job:?} is named twice"),
            ));
        }
        text.push_str(part);
        text.push('\n');
    }
    Ok(text)
}

/// What a commit of `job` with `text` answers when the job was committed or published
/// before: the same commit again is answered as it was (or with the job's failure), a
/// different one is an error. A sink's micro-batch whose job is gone and that its sink
/// already published counts as published. `None` when the commit is new.
fn committed_before(
    storage: &dyn Storage,
    dir: &Path,
    job_dir: &Path,
    job: &str,
    text: &str,
    sink: Option<(&str, u64)>,
) -> Result<Option<Committed>> {
    match read_commit(storage, job_dir)?.map(|m| m.text) {
        Some(existing) if existing == text => {
            return match read_failed(storage, job_dir)? {
                Some(reason) => Err(failed_error(job, &reason)),
                None => Ok(Some(Committed::Recorded)),
            };
        }
        Some(_) => {
            return Err(Error::invalid(
                "parts",
                format!("job {job:?} was committed with other parts"),
            ));
        }
        None => {}
    }
    // Published already (a job staged again since is another job: staging forgets this).
    if let Some((committed, ranges)) = read_published(storage, dir, job)? {
        if committed == text {
            // A retried commit.
            return Ok(Some(Committed::Published(ranges)));
        }
        return Err(Error::invalid(
            "job",
            format!("job {job:?} was published already, with other parts"),
        ));
    }
    if let Some((sink, batch)) = sink
        && !io::exists(storage, job_dir)?
        && read_sink_batch(storage, dir, sink)?.is_some_and(|last| last >= batch)
    {
        return Ok(Some(Committed::Published(Vec::new())));
    }
    Ok(None)
}

/// Checks that each of `parts` was staged and finished, that its manifest reads, and that
/// its records are within `limits` when given.
fn check_parts(
    storage: &dyn Storage,
    job_dir: &Path,
    job: &str,
    parts: &[&str],
    limits: Option<Limits>,
) -> Result<()> {
    for part in parts {
        if !io::exists(storage, &job_dir.join(format!("{part}{PART_SUFFIX}")))? {
            return Err(Error::invalid(
                "parts",
                format!("part {part:?} of job {job:?} was not staged (or not finished)"),
            ));
        }
        let manifest = read_manifest(storage, job_dir, part)?;
        if let Some(limits) = limits {
            for segment in &manifest.segments {
                limits.check(segment.max_record_bytes)?;
            }
        }
    }
    Ok(())
}

/// The error of a job set aside for `reason`.
pub(crate) fn failed_error(job: &str, reason: &str) -> Error {
    Error::invalid(
        "job",
        format!(
            "job {job:?} cannot be published and was set aside (abort it to remove it): {reason}"
        ),
    )
}

/// Why committed job `job_dir` was set aside, if it was.
pub(crate) fn read_failed(storage: &dyn Storage, job_dir: &Path) -> Result<Option<String>> {
    let path = job_dir.join(FAILED_FILE);
    // A damaged marker still sets the job aside: it says so instead of the reason.
    match read_sealed(
        storage,
        &path,
        "read staged job failure",
        FAILED_HEADER,
        None,
    ) {
        Ok(reason) => Ok(reason.map(|r| r.trim_end().to_owned())),
        Err(Error::Corruption { reason, .. }) => Ok(Some(format!(
            "the reason it was set aside is lost: {reason}"
        ))),
        Err(e) => Err(e),
    }
}

/// Sets committed job `job_dir` aside: it cannot be published, for `reason`. Its files stay
/// (nothing of it is published, nothing deleted) until it is aborted; publishes pass it by.
pub(crate) fn set_aside(storage: &dyn Storage, job_dir: &Path, reason: &str) -> Result<()> {
    crate::io::replace_file(
        storage,
        job_dir,
        &job_dir.join(FAILED_FILE),
        &failed_record(reason),
        "set a staged job aside",
    )
}

/// Records that `job` was published: the text of its commit and the offsets it got, so that
/// committing it again answers with them.
pub(crate) fn write_published(
    storage: &dyn Storage,
    dir: &Path,
    job: &str,
    commit: &str,
    ranges: &[(String, Range<u64>)],
) -> Result<()> {
    let published = dir.join(STAGING_DIR).join(PUBLISHED_DIR);
    storage
        .create_dir_all(&published)
        .map_err(|e| Error::io("create published jobs directory", &published, e))?;
    crate::io::replace_file(
        storage,
        &published,
        &published.join(job),
        &published_record(commit, ranges),
        "write published job record",
    )
}

/// A published record's text before its checksum line.
fn published_text(commit: &str, ranges: &[(String, Range<u64>)]) -> String {
    let mut text = String::from(PUBLISHED_HEADER);
    for (topic, range) in ranges {
        text.push_str(&format!(
            "{RANGE_LINE}{topic} {} {}\n",
            range.start, range.end
        ));
    }
    text.push_str(commit);
    text
}

/// The commit text and offsets of published job `job`, if it is recorded.
#[allow(clippy::type_complexity)]
fn read_published(
    storage: &dyn Storage,
    dir: &Path,
    job: &str,
) -> Result<Option<(String, Vec<(String, Range<u64>)>)>> {
    let path = dir.join(STAGING_DIR).join(PUBLISHED_DIR).join(job);
    let Some(text) = read_sealed(
        storage,
        &path,
        "read published job record",
        PUBLISHED_HEADER,
        None,
    )?
    else {
        return Ok(None);
    };
    parse_published_body(&text)
        .map(Some)
        .map_err(|reason| corrupt(&path, reason))
}

/// A published record's commit text and ranges, from the text after its header.
#[allow(clippy::type_complexity)]
fn parse_published_body(
    text: &str,
) -> std::result::Result<(String, Vec<(String, Range<u64>)>), &'static str> {
    let bad = "not a tidelog published job record";
    let mut body = text;
    let mut ranges = Vec::new();
    while let Some(rest) = body.strip_prefix(RANGE_LINE) {
        let (line, next) = rest.split_once('\n').ok_or(bad)?;
        let f: Vec<&str> = line.split(' ').collect();
        let [topic, start, end] = f[..] else {
            return Err(bad);
        };
        let (Ok(start), Ok(end)) = (start.parse(), end.parse()) else {
            return Err(bad);
        };
        ranges.push((topic.to_owned(), start..end));
        body = next;
    }
    Ok((body.to_owned(), ranges))
}

/// Waits up to `wait` until committed job `job` of `dir` is published, as the process
/// holding the directory does it. A job set aside as one that cannot be published is an
/// `InvalidArgument` error that gives the reason. Published means recorded so: the job's
/// published record (kept [`crate::Config::staged_ttl_ms`]), or for a streaming sink's
/// micro-batch (named in the commit while it was there) the sink's ledger at or past it. A
/// job whose commit is gone with neither (aborted, never committed, or published too long
/// ago to tell) is an `InvalidArgument` error, never a publish.
pub fn wait_published(dir: &Path, job: &str, wait: std::time::Duration) -> Result<()> {
    wait_for_publish(dir, job, None, wait)
}

/// As [`wait_published`], for micro-batch `batch` of streaming sink `sink` (as committed
/// with [`commit_for_sink`]): the sink's ledger at or past `batch` is a publish too, also
/// when the job's commit was gone before this looked (a replayed micro-batch).
pub fn wait_published_for_sink(
    dir: &Path,
    job: &str,
    sink: &str,
    batch: u64,
    wait: std::time::Duration,
) -> Result<()> {
    validate_name(sink)?;
    wait_for_publish(dir, job, Some((sink.to_owned(), batch)), wait)
}

fn wait_for_publish(
    dir: &Path,
    job: &str,
    mut sink: Option<(String, u64)>,
    wait: std::time::Duration,
) -> Result<()> {
    let storage = &StdStorage;
    let job_dir = job_dir(dir, job)?;
    let deadline = crate::clock::deadline_after(wait);
    let mut seen = false;
    loop {
        if !seen {
            // The sink a commit names tells a replay dropped from an abort.
            match read_commit(storage, &job_dir) {
                Ok(Some(manifest)) => {
                    seen = true;
                    sink = sink.or(manifest.sink);
                }
                Ok(None) => break,
                // A damaged commit: the publisher sets it aside, and that is the answer.
                Err(Error::Corruption { .. }) => seen = true,
                Err(e) => return Err(e),
            }
        } else if !io::exists(storage, &job_dir.join(COMMIT_FILE))? {
            break;
        }
        if let Some(reason) = read_failed(storage, &job_dir)? {
            return Err(failed_error(job, &reason));
        }
        if std::time::Instant::now() >= deadline {
            return Err(Error::io(
                "wait for the directory's writer to publish the staged job",
                &job_dir,
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let sink = sink.as_ref().map(|(name, batch)| (name.as_str(), *batch));
    published_ranges(storage, dir, job, sink)?
        .map(drop)
        .ok_or_else(|| not_published_error(job))
}

/// The offsets job `job` got, when its publish is recorded: its published record, or (its
/// ranges unknown, so none) micro-batch `sink` of a sink's ledger at or past it.
#[allow(clippy::type_complexity)]
pub(crate) fn published_ranges(
    storage: &dyn Storage,
    dir: &Path,
    job: &str,
    sink: Option<(&str, u64)>,
) -> Result<Option<Vec<(String, Range<u64>)>>> {
    if let Some((_, ranges)) = read_published(storage, dir, job)? {
        return Ok(Some(ranges));
    }
    if let Some((sink, batch)) = sink
        && read_sink_batch(storage, dir, sink)?.is_some_and(|last| last >= batch)
    {
        return Ok(Some(Vec::new()));
    }
    Ok(None)
}

/// The error of a job with no commit and no record of its publish.
pub(crate) fn not_published_error(job: &str) -> Error {
    Error::invalid(
        "job",
        format!(
            "job {job:?} is not committed and its publish is not recorded: it was aborted, \
             never committed, or published longer than staged_ttl_ms ago"
        ),
    )
}

/// What a commit manifest says: the parts, and the sink micro-batch it publishes.
#[derive(Debug)]
pub(crate) struct Manifest {
    pub parts: Vec<String>,
    pub sink: Option<(String, u64)>,
    /// The manifest as written.
    pub text: String,
}

/// The parts a commit lists.
pub(crate) fn read_commit(storage: &dyn Storage, job_dir: &Path) -> Result<Option<Manifest>> {
    let path = job_dir.join(COMMIT_FILE);
    let Some(text) = read_sealed(
        storage,
        &path,
        "read staged commit",
        COMMIT_HEADER,
        Some(COMMIT_HEADER_V1),
    )?
    else {
        return Ok(None);
    };
    parse_commit_body(&text)
        .map(Some)
        .map_err(|reason| corrupt(&path, reason))
}

/// A commit's parts and sink, from the text after its header.
fn parse_commit_body(text: &str) -> std::result::Result<Manifest, &'static str> {
    let mut sink = None;
    let mut parts = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(SINK_LINE) {
            let (name, batch) = rest
                .rsplit_once(' ')
                .and_then(|(n, b)| Some((n, b.parse::<u64>().ok()?)))
                .filter(|(n, _)| validate_name(n).is_ok())
                .ok_or("a sink line is not `@sink name batch`")?;
            sink = Some((name.to_owned(), batch));
            continue;
        }
        validate_name(line).map_err(|_| "a part name is not valid")?;
        parts.push(line.to_owned());
    }
    Ok(Manifest {
        parts,
        sink,
        text: text.to_owned(),
    })
}

/// Each topic's first offset for the job, as recorded before its records were appended.
pub(crate) fn read_ingest(
    storage: &dyn Storage,
    job_dir: &Path,
) -> Result<Option<Vec<(String, u64)>>> {
    let path = job_dir.join(INGEST_FILE);
    let Some(body) = read_sealed(
        storage,
        &path,
        "read staged ingest ledger",
        INGEST_HEADER,
        Some(INGEST_HEADER_V1),
    )?
    else {
        return Ok(None);
    };
    body.lines()
        .map(|line| {
            let (topic, start) = line
                .rsplit_once(' ')
                .ok_or_else(|| corrupt(&path, "a ledger line is not `topic offset`"))?;
            validate_name(topic).map_err(|_| corrupt(&path, "a topic name is not valid"))?;
            let start = start
                .parse()
                .map_err(|_| corrupt(&path, "a ledger offset is not a number"))?;
            Ok((topic.to_owned(), start))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Records each topic's first offset for the job before any of its records is appended.
pub(crate) fn write_ingest(
    storage: &dyn Storage,
    job_dir: &Path,
    starts: &[(String, u64)],
) -> Result<()> {
    let mut text = String::from(INGEST_HEADER);
    for (topic, start) in starts {
        text.push_str(&format!("{topic} {start}\n"));
    }
    crate::io::replace_file(
        storage,
        job_dir,
        &job_dir.join(INGEST_FILE),
        seal(text).as_bytes(),
        "write staged ingest ledger",
    )
}

pub(crate) fn corrupt(path: &Path, reason: &str) -> Error {
    Error::Corruption {
        topic: String::new(),
        offset: 0,
        path: path.to_owned(),
        position: 0,
        reason: reason.to_owned(),
    }
}

/// Notes that `job` came from a tier's bucket, which waits to be told of its publish.
#[cfg_attr(
    not(feature = "tier"),
    expect(dead_code, reason = "for staged jobs in a tier's bucket")
)]
pub(crate) fn note_bucket_job(storage: &dyn Storage, dir: &Path, job: &str) -> Result<()> {
    validate_name(job)?;
    let waiting = dir.join(STAGING_DIR).join(BUCKET_JOBS_DIR);
    storage
        .create_dir_all(&waiting)
        .map_err(|e| Error::io("create bucket jobs directory", &waiting, e))?;
    crate::io::replace_file(
        storage,
        &waiting,
        &waiting.join(job),
        b"",
        "note a bucket's staged job",
    )
}

/// The bucket has been told of `job`'s publish: its published record may expire.
#[cfg_attr(
    not(feature = "tier"),
    expect(dead_code, reason = "for staged jobs in a tier's bucket")
)]
pub(crate) fn forget_bucket_job(storage: &dyn Storage, dir: &Path, job: &str) -> Result<()> {
    let path = dir.join(STAGING_DIR).join(BUCKET_JOBS_DIR).join(job);
    match storage.remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("forget a bucket's staged job", &path, e)),
    }
}

/// Forgets that `job` of `dir` was published: its name is being used for a new job.
pub(crate) fn forget_published(storage: &dyn Storage, dir: &Path, job: &str) -> Result<()> {
    let path = dir.join(STAGING_DIR).join(PUBLISHED_DIR).join(job);
    match storage.remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove published job record", &path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_job_lock_let_go_a_moment_later_is_taken_and_one_held_on_is_passed_by() {
        let dir = tempfile::tempdir().expect("temp dir");
        let job_dir = dir.path().join("job");
        let storage = &StdStorage;
        storage.create_dir_all(&job_dir).expect("job dir");
        let held = try_lock_job(storage, &job_dir)
            .expect("lock")
            .expect("free");
        // Held throughout: passed by once the wait is over.
        let began = Instant::now();
        let got = lock_job_within(storage, &job_dir, Duration::from_millis(30)).expect("lock");
        assert!(got.is_none());
        assert!(began.elapsed() >= Duration::from_millis(30));
        // Let go a moment later (an exec closing a forked child's copy): taken.
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            drop(held);
        });
        let got = lock_job_within(storage, &job_dir, Duration::from_secs(60)).expect("lock");
        assert!(got.is_some());
        drop(got);
        release.join().expect("release");
        // The job removed meanwhile: passed by at once.
        storage.remove_dir_all(&job_dir).expect("remove");
        let began = Instant::now();
        let got = lock_job_within(storage, &job_dir, Duration::from_secs(60)).expect("lock");
        assert!(got.is_none());
        assert!(began.elapsed() < Duration::from_secs(30));
    }

    /// A directory with job `job`'s part `p0` (one record) staged and finished, through a
    /// fault-injecting storage.
    fn staged_part() -> (tempfile::TempDir, Arc<crate::io::FaultStorage>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = Arc::new(crate::io::FaultStorage::new());
        let mut writer = crate::StagedWriter::create_with_storage(
            dir.path(),
            "job",
            "p0",
            Arc::clone(&storage) as Arc<dyn Storage>,
        )
        .expect("create");
        writer
            .append("t", &[crate::Append::value(b"v")])
            .expect("append");
        writer.finish().expect("finish");
        (dir, storage)
    }

    /// A job directory made since the last sync of the staging directory is not durable:
    /// the commit syncs the job's directory, the staging directory and the data directory.
    #[test]
    fn a_commit_makes_the_jobs_directory_durable_before_it_is_committed() {
        use crate::io::points;
        let (dir, storage) = staged_part();
        let synced_before = storage.paths(points::SYNC_DIR).len();
        write_commit(storage.as_ref(), dir.path(), "job", &["p0"], None, None).expect("commit");
        let synced = &storage.paths(points::SYNC_DIR)[synced_before..];
        let staging = dir.path().join(STAGING_DIR);
        for expected in [dir.path().to_owned(), staging.clone(), staging.join("job")] {
            assert!(synced.contains(&expected), "{expected:?} not in {synced:?}");
        }
        // The staging directory cannot be synced: no commit.
        storage
            .remove_file(&staging.join("job").join(COMMIT_FILE))
            .expect("uncommit");
        storage.arm_for(points::SYNC_DIR, None, crate::io::Fault::Once(libc::EIO));
        assert!(write_commit(storage.as_ref(), dir.path(), "job", &["p0"], None, None).is_err());
        assert!(
            !io::exists(storage.as_ref(), &staging.join("job").join(COMMIT_FILE)).expect("stat")
        );
    }

    /// A commit whose metadata does not read (EIO) is an error, not "uncommitted": the
    /// clean-up of abandoned jobs removed such a committed job before.
    #[test]
    fn a_commit_that_does_not_stat_keeps_its_job() {
        use crate::io::{Fault, points};
        let (dir, storage) = staged_part();
        write_commit(storage.as_ref(), dir.path(), "job", &["p0"], None, None).expect("commit");
        storage.arm_for(
            points::METADATA,
            Some(COMMIT_FILE),
            Fault::Always(libc::EIO),
        );
        let err = remove_abandoned(storage.as_ref(), dir.path(), Duration::ZERO)
            .expect_err("a commit that does not stat");
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        storage.disarm_all();
        let job_dir = dir.path().join(STAGING_DIR).join("job");
        assert!(io::exists(storage.as_ref(), &job_dir.join(COMMIT_FILE)).expect("stat"));
        assert!(
            remove_abandoned(storage.as_ref(), dir.path(), Duration::ZERO)
                .expect("clean-up")
                .is_empty()
        );
    }
}

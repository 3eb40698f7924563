//! Staged appends: records written by many processes without the directory's lock, invisible
//! until one commit publishes them into their topics, exactly once (Spark's write protocol:
//! tasks stage, the driver commits or aborts).
//!
//! A job's files live in `staging/JOB/`: one `PART.stage` per task attempt, written through
//! [`StagedWriter`] (no lock; the name appears only once the part is complete and durable),
//! then `COMMIT` (the parts the commit accepted, written atomically), then, while its records
//! are appended, `INGEST` (each topic's first offset for the job). The holder of the
//! directory's lock ingests a committed job: it makes each of the job's topics exclusive
//! (other appends to it wait), records where the job starts in each, appends the records,
//! makes the data files durable and removes the job's directory. After a crash the `INGEST`
//! ledger says which offsets are the job's, so the ingest resumes where the data files end
//! and no record is appended twice. Bytes: `docs/FORMAT.md`, "Staged appends".

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock;
use crate::config::validate_name;
use crate::error::{Error, Result};
use crate::io::{StdStorage, Storage, read_optional};
use crate::journal;
use crate::mmap::FrozenFile;
use crate::topic::Append;

/// Directory of staged jobs inside a data directory.
pub const STAGING_DIR: &str = "staging";
/// A committed job's manifest.
pub const COMMIT_FILE: &str = "COMMIT";
/// An ingesting job's ledger.
pub const INGEST_FILE: &str = "INGEST";
/// Suffix of a complete part.
pub const PART_SUFFIX: &str = ".stage";

const PART_MAGIC: u32 = u32::from_le_bytes(*b"TLSG");
const PART_END_MAGIC: u32 = u32::from_le_bytes(*b"TLSE");
const PART_VERSION: u32 = 1;
/// Part header: magic u32, version u32.
pub const SP_HEADER_LEN: usize = 8;
/// Chunk header: body length u32, CRC-32 of the body u32; the body is a journal entry.
pub const SC_HEADER_LEN: usize = 8;
/// Trailer: magic u32, chunk count u32, record count u64.
pub const SP_TRAILER_LEN: usize = 16;
/// Largest chunk body: one journal entry of at most this many bytes.
pub const CHUNK_BYTES_MAX: usize = 64 << 20;
const COMMIT_HEADER: &str = "tidelog commit v1\n";
/// Manifest line naming the streaming sink and micro-batch a job publishes.
const SINK_LINE: &str = "@sink ";
/// Directory of the sinks' ledgers (a name no job can have).
pub const SINKS_DIR: &str = ".sinks";
const SINK_HEADER: &str = "tidelog sink v1\n";
const INGEST_HEADER: &str = "tidelog ingest v1\n";

/// The directory of `job` in the data directory `dir`.
pub fn job_dir(dir: &Path, job: &str) -> Result<PathBuf> {
    validate_name(job)?;
    Ok(dir.join(STAGING_DIR).join(job))
}

/// A part that [`StagedWriter::finish`] made durable: name it in the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StagedPart {
    /// The part's name.
    pub part: String,
    /// Records in it.
    pub records: u64,
}

/// Writes one part of a job. Needs no lock: each task attempt writes its own part.
#[derive(Debug)]
pub struct StagedWriter {
    storage: Arc<dyn Storage>,
    file: std::fs::File,
    dir: PathBuf,
    tmp: PathBuf,
    path: PathBuf,
    part: String,
    pos: u64,
    chunks: u32,
    records: u64,
    buf: Vec<u8>,
}

impl StagedWriter {
    /// Starts part `part` of job `job` in the data directory `dir` (which must exist).
    /// A part of that name that is already complete is an error.
    pub fn create(dir: &Path, job: &str, part: &str) -> Result<StagedWriter> {
        Self::create_with_storage(dir, job, part, Arc::new(StdStorage))
    }

    /// As [`StagedWriter::create`], doing all I/O through `storage`.
    pub fn create_with_storage(
        dir: &Path,
        job: &str,
        part: &str,
        storage: Arc<dyn Storage>,
    ) -> Result<StagedWriter> {
        validate_name(part)?;
        if !dir.is_dir() {
            return Err(Error::io(
                "open directory",
                dir,
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let job_dir = job_dir(dir, job)?;
        std::fs::create_dir_all(&job_dir)
            .map_err(|e| Error::io("create staging directory", &job_dir, e))?;
        if job_dir.join(COMMIT_FILE).exists() {
            return Err(Error::invalid(
                "job",
                format!("job {job:?} is already committed"),
            ));
        }
        let path = job_dir.join(format!("{part}{PART_SUFFIX}"));
        if path.exists() {
            return Err(Error::invalid(
                "part",
                format!("part {part:?} of job {job:?} already exists"),
            ));
        }
        let tmp = job_dir.join(format!("{part}{PART_SUFFIX}.tmp"));
        match storage.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove staged part", &tmp, e)),
        }
        let file = storage
            .create_new(&tmp)
            .map_err(|e| Error::io("create staged part", &tmp, e))?;
        let mut header = [0u8; SP_HEADER_LEN];
        header[..4].copy_from_slice(&PART_MAGIC.to_le_bytes());
        header[4..].copy_from_slice(&PART_VERSION.to_le_bytes());
        storage
            .write_at(&file, &tmp, &header, 0)
            .map_err(|e| Error::io("write staged part", &tmp, e))?;
        Ok(StagedWriter {
            storage,
            file,
            dir: job_dir,
            tmp,
            path,
            part: part.to_owned(),
            pos: SP_HEADER_LEN as u64,
            chunks: 0,
            records: 0,
            buf: Vec::new(),
        })
    }

    /// Stages `records` for `topic` (records without a timestamp get the time of this call).
    pub fn append(&mut self, topic: &str, records: &[Append<'_>]) -> Result<()> {
        validate_name(topic)?;
        if records.is_empty() {
            return Ok(());
        }
        let len = journal::entry_len(topic, records);
        if len > CHUNK_BYTES_MAX as u64 {
            return Err(Error::limit(
                "staged chunk bytes",
                len,
                CHUNK_BYTES_MAX as u64,
            ));
        }
        self.chunks = self.chunks.checked_add(1).ok_or_else(|| {
            Error::limit(
                "staged chunks",
                u64::from(u32::MAX) + 1,
                u64::from(u32::MAX),
            )
        })?;
        // The chunk header, then the entry encoded right after it: one copy of the records.
        let frame = &mut self.buf;
        frame.clear();
        frame.extend_from_slice(&[0u8; SC_HEADER_LEN]);
        journal::encode_after(frame, topic, 0, records, clock::now_us());
        let body_len = (frame.len() - SC_HEADER_LEN) as u32;
        let crc = crc32fast::hash(&frame[SC_HEADER_LEN..]);
        frame[..4].copy_from_slice(&body_len.to_le_bytes());
        frame[4..SC_HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        self.storage
            .write_at(&self.file, &self.tmp, frame, self.pos)
            .map_err(|e| Error::io("write staged part", &self.tmp, e))?;
        self.pos += frame.len() as u64;
        self.records += records.len() as u64;
        Ok(())
    }

    /// Records staged so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Writes the trailer, makes the part durable and gives it its name.
    pub fn finish(self) -> Result<StagedPart> {
        let mut trailer = [0u8; SP_TRAILER_LEN];
        trailer[..4].copy_from_slice(&PART_END_MAGIC.to_le_bytes());
        trailer[4..8].copy_from_slice(&self.chunks.to_le_bytes());
        trailer[8..].copy_from_slice(&self.records.to_le_bytes());
        let io = |op, e| Error::io(op, &self.tmp, e);
        self.storage
            .write_at(&self.file, &self.tmp, &trailer, self.pos)
            .map_err(|e| io("write staged part", e))?;
        self.storage
            .sync_file(&self.file, &self.tmp)
            .map_err(|e| io("fsync staged part", e))?;
        self.storage
            .rename(&self.tmp, &self.path)
            .map_err(|e| Error::io("rename staged part", &self.path, e))?;
        self.storage
            .sync_dir(&self.dir)
            .map_err(|e| Error::io("fsync directory", &self.dir, e))?;
        Ok(StagedPart {
            part: self.part,
            records: self.records,
        })
    }
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
    let staging = dir.join(STAGING_DIR);
    let entries = match std::fs::read_dir(&staging) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list staging directory", &staging, e)),
    };
    let now = std::time::SystemTime::now();
    let mut jobs = Vec::new();
    for entry in entries.flatten() {
        let Some(job) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let job_dir = entry.path();
        if job.starts_with('.') || !job_dir.is_dir() {
            continue;
        }
        let (mut parts, mut bytes) = (0, 0);
        for f in std::fs::read_dir(&job_dir).into_iter().flatten().flatten() {
            let name = f.file_name();
            if name.to_str().is_some_and(|n| n.ends_with(PART_SUFFIX)) {
                parts += 1;
            }
            bytes += f.metadata().map_or(0, |m| m.len());
        }
        jobs.push(StagedJob {
            committed: job_dir.join(COMMIT_FILE).exists(),
            publishing: job_dir.join(INGEST_FILE).exists(),
            parts,
            bytes,
            idle: newest_change(&job_dir)
                .and_then(|t| now.duration_since(t).ok())
                .unwrap_or_default(),
            job,
        });
    }
    jobs.sort_by(|a, b| a.job.cmp(&b.job));
    Ok(jobs)
}

/// Removes the jobs of `dir` that nobody committed (no `COMMIT`, no `INGEST`) and whose
/// files have not changed for `ttl`: parts a dead Spark driver left behind. A job whose lock
/// another process holds is left alone. Returns the jobs removed.
pub(crate) fn remove_abandoned(dir: &Path, ttl: std::time::Duration) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for job in jobs(dir)? {
        if job.committed || job.publishing || job.idle < ttl {
            continue;
        }
        let job_dir = dir.join(STAGING_DIR).join(&job.job);
        let Some(_lock) = try_lock_job(&job_dir)? else {
            continue;
        };
        // A commit written while we looked wins.
        if is_committed(&job_dir) {
            continue;
        }
        match std::fs::remove_dir_all(&job_dir) {
            Ok(()) => removed.push(job.job),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove abandoned staged job", &job_dir, e)),
        }
    }
    Ok(removed)
}

fn is_committed(job_dir: &Path) -> bool {
    job_dir.join(COMMIT_FILE).exists() || job_dir.join(INGEST_FILE).exists()
}

/// The latest modification time of `job_dir` and the files in it.
fn newest_change(job_dir: &Path) -> Option<std::time::SystemTime> {
    let own = std::fs::metadata(job_dir).and_then(|m| m.modified()).ok()?;
    let files = std::fs::read_dir(job_dir).ok()?;
    Some(
        files
            .flatten()
            .filter_map(|f| f.metadata().and_then(|m| m.modified()).ok())
            .fold(own, std::cmp::max),
    )
}

/// Name of the lock file a publish or an abort holds (`flock`) inside a job's directory.
pub const JOB_LOCK_FILE: &str = "LOCK";

/// Takes the job's lock without waiting: `None` when another process (or handle) holds it,
/// or the job's directory is gone. A publish holds it from start to end; an abort while it
/// removes the job.
pub(crate) fn try_lock_job(job_dir: &Path) -> Result<Option<std::fs::File>> {
    let path = job_dir.join(JOB_LOCK_FILE);
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open staged job lock", &path, e)),
    };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock staged job", &path, e)),
    }
}

/// Discards job `job` of `dir`: its parts, and its commit if publishing has not started.
/// Fails for a job being published (or whose publish started and was cut: the directory's
/// holder finishes it).
pub fn abort(dir: &Path, job: &str) -> Result<()> {
    let job_dir = job_dir(dir, job)?;
    if !job_dir.exists() {
        return Ok(());
    }
    let Some(_lock) = try_lock_job(&job_dir)? else {
        return Err(Error::invalid(
            "job",
            format!("job {job:?} is being published and cannot be aborted"),
        ));
    };
    if job_dir.join(INGEST_FILE).exists() {
        return Err(Error::invalid(
            "job",
            format!("job {job:?} is being published and cannot be aborted"),
        ));
    }
    match std::fs::remove_dir_all(&job_dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove staged job", &job_dir, e)),
    }
}

/// Records the commit of `job` in `dir`: the parts to publish, in order. The process that
/// holds the directory (or the next to open it) publishes the job.
pub fn commit(dir: &Path, job: &str, parts: &[&str]) -> Result<()> {
    if parts.is_empty() {
        // Nothing to publish: whatever the job staged goes.
        return abort(dir, job);
    }
    write_commit(&StdStorage, dir, job, parts, None)
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
    write_commit(&StdStorage, dir, job, parts, Some((sink, batch)))
}

/// The last micro-batch of `sink` published in `dir`, if any.
pub fn sink_batch(dir: &Path, sink: &str) -> Result<Option<u64>> {
    validate_name(sink)?;
    let path = dir.join(STAGING_DIR).join(SINKS_DIR).join(sink);
    let Some(text) = read_optional(&path, "read sink ledger")? else {
        return Ok(None);
    };
    text.strip_prefix(SINK_HEADER)
        .and_then(|b| b.trim_end().parse().ok())
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
    if sink_batch(dir, sink)?.is_some_and(|last| last >= batch) {
        return Ok(());
    }
    let sinks = dir.join(STAGING_DIR).join(SINKS_DIR);
    std::fs::create_dir_all(&sinks).map_err(|e| Error::io("create sinks directory", &sinks, e))?;
    let text = format!("{SINK_HEADER}{batch}\n");
    crate::io::replace_file(
        storage,
        &sinks,
        &sinks.join(sink),
        text.as_bytes(),
        "write sink ledger",
    )
}

/// Records the commit of `job`: the parts to publish, in order. Idempotent for the same
/// parts; a different list for a committed job is an error.
pub(crate) fn write_commit(
    storage: &dyn Storage,
    dir: &Path,
    job: &str,
    parts: &[&str],
    sink: Option<(&str, u64)>,
) -> Result<()> {
    let job_dir = job_dir(dir, job)?;
    let mut text = String::from(COMMIT_HEADER);
    if let Some((sink, batch)) = sink {
        text.push_str(&format!("{SINK_LINE}{sink} {batch}\n"));
    }
    for part in parts {
        validate_name(part)?;
        let path = job_dir.join(format!("{part}{PART_SUFFIX}"));
        if !path.exists() {
            return Err(Error::invalid(
                "parts",
                format!("part {part:?} of job {job:?} was not staged (or not finished)"),
            ));
        }
        text.push_str(part);
        text.push('\n');
    }
    let commit = job_dir.join(COMMIT_FILE);
    match read_optional(&commit, "read staged commit")? {
        Some(existing) if existing == text => return Ok(()),
        Some(_) => {
            return Err(Error::invalid(
                "parts",
                format!("job {job:?} was committed with other parts"),
            ));
        }
        None => {}
    }
    crate::io::replace_file(
        storage,
        &job_dir,
        &commit,
        text.as_bytes(),
        "write staged commit",
    )
}

/// Waits up to `wait` until committed job `job` of `dir` is published (its directory gone),
/// as the process holding the directory does it.
pub fn wait_published(dir: &Path, job: &str, wait: std::time::Duration) -> Result<()> {
    let job_dir = job_dir(dir, job)?;
    let deadline = std::time::Instant::now() + wait;
    while job_dir.join(COMMIT_FILE).exists() {
        if std::time::Instant::now() >= deadline {
            return Err(Error::io(
                "wait for the directory's writer to publish the staged job",
                &job_dir,
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(())
}

/// What a commit manifest says: the parts, and the sink micro-batch it publishes.
#[derive(Debug)]
pub(crate) struct Manifest {
    pub parts: Vec<String>,
    pub sink: Option<(String, u64)>,
}

/// The parts a commit lists.
pub(crate) fn read_commit(job_dir: &Path) -> Result<Option<Manifest>> {
    let path = job_dir.join(COMMIT_FILE);
    let Some(text) = read_optional(&path, "read staged commit")? else {
        return Ok(None);
    };
    let body = text
        .strip_prefix(COMMIT_HEADER)
        .ok_or_else(|| corrupt(&path, "not a tidelog commit manifest"))?;
    let mut sink = None;
    let mut parts = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix(SINK_LINE) {
            let (name, batch) = rest
                .rsplit_once(' ')
                .and_then(|(n, b)| Some((n, b.parse::<u64>().ok()?)))
                .filter(|(n, _)| validate_name(n).is_ok())
                .ok_or_else(|| corrupt(&path, "a sink line is not `@sink name batch`"))?;
            sink = Some((name.to_owned(), batch));
            continue;
        }
        validate_name(line).map_err(|_| corrupt(&path, "a part name is not valid"))?;
        parts.push(line.to_owned());
    }
    Ok(Some(Manifest { parts, sink }))
}

/// Each topic's first offset for the job, as recorded before its records were appended.
pub(crate) fn read_ingest(job_dir: &Path) -> Result<Option<Vec<(String, u64)>>> {
    let path = job_dir.join(INGEST_FILE);
    let Some(text) = read_optional(&path, "read staged ingest ledger")? else {
        return Ok(None);
    };
    let body = text
        .strip_prefix(INGEST_HEADER)
        .ok_or_else(|| corrupt(&path, "not a tidelog ingest ledger"))?;
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
        text.as_bytes(),
        "write staged ingest ledger",
    )
}

/// Every record of the committed parts, grouped by topic in first-appearance order, each
/// group in staging order. The parts' bytes are returned too: the records borrow them.
pub(crate) fn read_parts(job_dir: &Path, parts: &[String]) -> Result<Vec<FrozenFile>> {
    parts
        .iter()
        .map(|part| {
            let path = job_dir.join(format!("{part}{PART_SUFFIX}"));
            let file =
                std::fs::File::open(&path).map_err(|e| Error::io("open staged part", &path, e))?;
            let len = file
                .metadata()
                .map_err(|e| Error::io("stat staged part", &path, e))?
                .len();
            if len < (SP_HEADER_LEN + SP_TRAILER_LEN) as u64 {
                return Err(corrupt(&path, "not a tidelog staged part (version 1)"));
            }
            // Mapped, not read: no copy of the parts into fresh memory.
            #[expect(unsafe_code, reason = "mapping a file relies on nobody changing it")]
            // SAFETY: a part's name appears only once it is complete and durable (written as
            // `.tmp`, synced, renamed); after that nothing writes or truncates it, and
            // removal only unlinks it (a rename over it leaves this inode as it was).
            let map = unsafe { FrozenFile::map(&file) }
                .map_err(|e| Error::io("map staged part", &path, e))?;
            check_part(&path, map.bytes())?;
            Ok(map)
        })
        .collect()
}

/// Validates a part's header, chunk framing and checksums, and trailer.
fn check_part(path: &Path, bytes: &[u8]) -> Result<()> {
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if bytes.len() < SP_HEADER_LEN + SP_TRAILER_LEN
        || u32_at(0) != PART_MAGIC
        || u32_at(4) != PART_VERSION
    {
        return Err(corrupt(path, "not a tidelog staged part (version 1)"));
    }
    let end = bytes.len() - SP_TRAILER_LEN;
    if u32_at(end) != PART_END_MAGIC {
        return Err(corrupt(path, "the part has no trailer"));
    }
    let mut chunks = 0u32;
    let mut records = 0u64;
    for chunk in chunks_of(bytes, true) {
        let entry = journal::decode(chunk.map_err(|r| corrupt(path, r))?)
            .map_err(|r| corrupt(path, &format!("chunk {chunks}: {r}")))?;
        chunks += 1;
        records += entry.records.len() as u64;
    }
    let mut count = [0u8; 8];
    count.copy_from_slice(&bytes[end + 8..]);
    if u32_at(end + 4) != chunks || u64::from_le_bytes(count) != records {
        return Err(corrupt(
            path,
            "the trailer's counts disagree with the chunks",
        ));
    }
    Ok(())
}

/// The chunk bodies of a part, in order; with `verify`, each checked against its CRC-32 (a
/// part [`read_parts`] returned was checked in full already).
pub(crate) fn chunks_of(
    bytes: &[u8],
    verify: bool,
) -> impl Iterator<Item = std::result::Result<&[u8], &'static str>> {
    let end = bytes.len().saturating_sub(SP_TRAILER_LEN);
    let mut at = SP_HEADER_LEN;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let Some(head) = bytes
            .get(at..at + SC_HEADER_LEN)
            .filter(|_| at + SC_HEADER_LEN <= end)
        else {
            at = end;
            return Some(Err("a chunk header is cut"));
        };
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let body_at = at + SC_HEADER_LEN;
        let Some(body) = bytes
            .get(body_at..body_at + len)
            .filter(|_| body_at + len <= end)
        else {
            at = end;
            return Some(Err("a chunk is cut"));
        };
        if verify && crc32fast::hash(body) != crc {
            at = end;
            return Some(Err("a chunk's checksum does not match"));
        }
        at = body_at + len;
        Some(Ok(body))
    })
}

fn corrupt(path: &Path, reason: &str) -> Error {
    Error::Corruption {
        topic: String::new(),
        offset: 0,
        path: path.to_owned(),
        position: 0,
        reason: reason.to_owned(),
    }
}

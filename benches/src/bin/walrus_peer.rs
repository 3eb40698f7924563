//! The walrus peer of `tidelog bench`: drives the crates.io `walrus-rust` 0.2 crate through
//! its public API and prints one JSON row per measurement (the comparison benchmark's row
//! contract: `--dir`, `--sizes`, `--threads`, `--seconds`, `--max-bytes`, `--only`,
//! `--list`; JSON Lines on stdout, diagnostics on stderr, exit 0 even when rows are skipped).
//!
//! Every job (one write row, plus the read row that reads back a no-fsync write) runs in a
//! child process: this binary re-executes itself with an internal `--child-job N`. Walrus
//! keeps process-global state that a fresh instance in the same process would inherit: the
//! first instance's fsync schedule decides whether files are opened `O_SYNC`, its files stay
//! open in a global cache after the instance is dropped (so deleting them would not free
//! the disk), and every instance leaks a background thread that never ends. The child gets
//! `WALRUS_DATA_DIR` (walrus 0.2 has no other way to place its files) pointing at a fresh
//! row directory under `--dir`, and `WALRUS_QUIET` (without it walrus prints debug lines to
//! stdout on every append); the parent forwards the rows the child prints, deletes the row
//! directory when the child has exited, and turns a child that dies or hangs into skipped
//! rows.
//!
//! Rows, per record size and thread count (each thread appends to its own topic):
//! - D0: `append_for_topic` with `FsyncSchedule::NoFsync`, then (op "read") every topic read
//!   back with `batch_read_for_topic`, one reader thread per topic, summing entry lengths;
//! - D1: `batch_append_for_topic` of one contract batch per call, which always fsyncs the
//!   files it touched before returning (the schedule is `NoFsync`, so nothing else syncs);
//! - D2: `append_for_topic` with `FsyncSchedule::SyncEach` (`O_SYNC` file plus an fsync per
//!   append).
//!
//! And walrus's own write benchmark's workload: 10 writer threads on `topic_0`..`topic_9`,
//! records of random size 500..=1024 bytes, `append_for_topic`, with `NoFsync` (D0) and with
//! `SyncEach` (D2), time-budgeted by `--seconds` and without its 500 ms sleeps between bursts.
//!
//! All instances use `ReadConsistency::AtLeastOnce { persist_every: 5000 }` (as walrus's
//! benchmark does) and the default fd backend (pwrite, io_uring for batches).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Barrier;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use walrus_rust::{FsyncSchedule, ReadConsistency, Walrus};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// The contract's default payload cap per row.
const DEFAULT_MAX_BYTES: u64 = 256 * MIB as u64;
/// A contract batch: this many records or 4 MiB of payload, whichever is fewer records.
const BATCH_RECORDS: usize = 1000;
const BATCH_BYTES: usize = 4 * MIB;
/// Random records per size, cycled through.
const POOL_RECORDS: usize = 64;
/// Walrus's write benchmark: thread count and record size range (mean 762 bytes).
const ITS_THREADS: usize = 10;
const ITS_MIN_BYTES: usize = 500;
const ITS_MAX_BYTES: usize = 1024;
const ITS_MEAN_BYTES: usize = (ITS_MIN_BYTES + ITS_MAX_BYTES) / 2;
/// Walrus's benchmark uses this; it only matters for `read_next`, which no row calls.
const PERSIST_EVERY: u32 = 5000;
/// walrus 0.2.0's entry header (`PREFIX_META_SIZE`) and most entries per batch read.
const WALRUS_HEADER_BYTES: usize = 64;
const WALRUS_READ_MAX_ENTRIES: usize = 2000;
/// Most bytes one `batch_read_for_topic` call plans to read.
const READ_CALL_MAX_BYTES: usize = 64 * MIB;
/// Key (a subdirectory of `WALRUS_DATA_DIR`) the instance lives under.
const INSTANCE_KEY: &str = "wal";
/// Marks a row on the child's stdout, so nothing else printed there can pass for one.
const ROW_PREFIX: &str = "walrus_peer-row\t";
const CHILD_FLAG: &str = "--child-job";

const USAGE: &str = "\
walrus_peer: benchmark rows (JSON Lines) for the walrus-rust crate, for `tidelog bench`

  --dir DIR        scratch directory (exists, empty); each row uses and deletes a subdirectory
  --sizes LIST     record sizes in bytes, comma-separated   [100,1024,65536,1048576]
  --threads LIST   writer thread counts, comma-separated    [1,2]
  --seconds F      time budget per row                      [1.0]
  --max-bytes N    payload cap per row, split across threads [268435456]
  --only SUBSTR    run only rows whose system or config contains SUBSTR
  --list           print the planned rows and exit
";

#[derive(Debug, Clone)]
struct Options {
    dir: Option<PathBuf>,
    sizes: Vec<usize>,
    threads: Vec<usize>,
    seconds: f64,
    max_bytes: u64,
    only: Option<String>,
    list: bool,
    child_job: Option<usize>,
}

fn parse_list(flag: &str, value: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<usize>() {
            Ok(n) if n > 0 => out.push(n),
            _ => return Err(format!("{flag}: {part:?} is not a positive integer")),
        }
    }
    if out.is_empty() {
        return Err(format!("{flag}: empty list"));
    }
    Ok(out)
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut opts = Options {
        dir: None,
        sizes: vec![100, KIB, 64 * KIB, MIB],
        threads: vec![1, 2],
        seconds: 1.0,
        max_bytes: DEFAULT_MAX_BYTES,
        only: None,
        list: false,
        child_job: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        if flag == "--list" {
            opts.list = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let known = [
            "--dir",
            "--sizes",
            "--threads",
            "--seconds",
            "--max-bytes",
            "--only",
            CHILD_FLAG,
        ];
        if !known.contains(&flag) {
            return Err(format!("unknown argument {arg:?}"));
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))?,
        };
        match flag {
            "--dir" => opts.dir = Some(PathBuf::from(value)),
            "--sizes" => opts.sizes = parse_list(flag, &value)?,
            "--threads" => opts.threads = parse_list(flag, &value)?,
            "--seconds" => match value.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 => opts.seconds = s,
                _ => return Err(format!("--seconds: {value:?} is not a positive number")),
            },
            "--max-bytes" => match value.parse::<u64>() {
                Ok(n) if n > 0 => opts.max_bytes = n,
                _ => return Err(format!("--max-bytes: {value:?} is not a positive integer")),
            },
            "--only" => opts.only = Some(value),
            CHILD_FLAG => match value.parse::<usize>() {
                Ok(n) => opts.child_job = Some(n),
                Err(_) => return Err(format!("{CHILD_FLAG}: {value:?} is not an index")),
            },
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(opts)
}

/// How the write phase appends and what it makes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `append_for_topic`, `FsyncSchedule::NoFsync`.
    NoFsync,
    /// `append_for_topic`, `FsyncSchedule::SyncEach`.
    SyncEach,
    /// `batch_append_for_topic` of this many records, `FsyncSchedule::NoFsync`.
    Batch(usize),
}

impl Mode {
    fn schedule(self) -> FsyncSchedule {
        match self {
            Mode::SyncEach => FsyncSchedule::SyncEach,
            Mode::NoFsync | Mode::Batch(_) => FsyncSchedule::NoFsync,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Sizing {
    Fixed(usize),
    /// Uniformly random in `min..=max`, drawn per record.
    Random {
        min: usize,
        max: usize,
    },
}

impl Sizing {
    fn min(self) -> usize {
        match self {
            Sizing::Fixed(n) => n,
            Sizing::Random { min, .. } => min,
        }
    }
    fn max(self) -> usize {
        match self {
            Sizing::Fixed(n) => n,
            Sizing::Random { max, .. } => max,
        }
    }
}

#[derive(Debug, Clone)]
struct RowMeta {
    config: String,
    class: &'static str,
    op: &'static str,
    record_bytes: usize,
    threads: usize,
    latency_of: &'static str,
    selected: bool,
}

#[derive(Debug, Clone)]
struct Job {
    mode: Mode,
    sizing: Sizing,
    threads: usize,
    topic_prefix: &'static str,
    write: RowMeta,
    /// Read back what the write phase wrote (D0 jobs only).
    read: Option<RowMeta>,
}

fn batch_records(size: usize) -> usize {
    (BATCH_BYTES / size).clamp(1, BATCH_RECORDS)
}

fn row(
    config: String,
    class: &'static str,
    op: &'static str,
    bytes: usize,
    threads: usize,
) -> RowMeta {
    let latency_of = if op == "read" || class == "D1" {
        "batch"
    } else {
        "record"
    };
    RowMeta {
        config,
        class,
        op,
        record_bytes: bytes,
        threads,
        latency_of,
        selected: true,
    }
}

/// Every job, in run order, with the rows `--only` selects marked; jobs without a selected
/// row are dropped. The child rebuilds this from the same flags and runs job `N` of it.
fn plan(opts: &Options) -> Vec<Job> {
    let mut jobs = Vec::new();
    for &size in &opts.sizes {
        for &threads in &opts.threads {
            let batch = batch_records(size);
            let fixed = Sizing::Fixed(size);
            jobs.push(Job {
                mode: Mode::NoFsync,
                sizing: fixed,
                threads,
                topic_prefix: "t",
                write: row(
                    "append_for_topic, NoFsync".into(),
                    "D0",
                    "append",
                    size,
                    threads,
                ),
                read: Some(row(
                    "batch_read_for_topic after the NoFsync write, one reader per topic".into(),
                    "D0",
                    "read",
                    size,
                    threads,
                )),
            });
            jobs.push(Job {
                mode: Mode::Batch(batch),
                sizing: fixed,
                threads,
                topic_prefix: "t",
                write: row(
                    format!(
                        "batch_append_for_topic of {batch} (io_uring writes, fsync per call), NoFsync"
                    ),
                    "D1",
                    "append",
                    size,
                    threads,
                ),
                read: None,
            });
            jobs.push(Job {
                mode: Mode::SyncEach,
                sizing: fixed,
                threads,
                topic_prefix: "t",
                write: row(
                    "append_for_topic, SyncEach (O_SYNC + fsync per append)".into(),
                    "D2",
                    "append",
                    size,
                    threads,
                ),
                read: None,
            });
        }
    }
    let its = Sizing::Random {
        min: ITS_MIN_BYTES,
        max: ITS_MAX_BYTES,
    };
    for (mode, class, schedule) in [
        (Mode::NoFsync, "D0", "NoFsync"),
        (Mode::SyncEach, "D2", "SyncEach"),
    ] {
        jobs.push(Job {
            mode,
            sizing: its,
            threads: ITS_THREADS,
            topic_prefix: "topic_",
            write: row(
                format!(
                    "its benchmark: topic_0..9, {ITS_MIN_BYTES}-{ITS_MAX_BYTES} B random, \
                     append_for_topic, {schedule}, no sleeps between bursts"
                ),
                class,
                "append",
                ITS_MEAN_BYTES,
                ITS_THREADS,
            ),
            read: None,
        });
    }
    if let Some(only) = &opts.only {
        let matches =
            |r: &RowMeta| "walrus".contains(only.as_str()) || r.config.contains(only.as_str());
        for job in &mut jobs {
            job.write.selected = matches(&job.write);
            if let Some(read) = &mut job.read {
                read.selected = matches(read);
            }
        }
    }
    jobs.retain(|j| j.write.selected || j.read.as_ref().is_some_and(|r| r.selected));
    jobs
}

fn selected_rows(job: &Job) -> Vec<&RowMeta> {
    std::iter::once(&job.write)
        .chain(job.read.as_ref())
        .filter(|r| r.selected)
        .collect()
}

// ---- JSON rows ----

fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(q, "\\u{:04x}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A JSON number with `decimals` places, or null where it is not finite.
fn num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "null".into()
    }
}

fn row_head(meta: &RowMeta) -> String {
    format!(
        "{{\"system\":\"walrus\",\"config\":{},\"lang\":\"rust\",\"kind\":\"peer\",\"class\":\"{}\",\
         \"op\":\"{}\",\"record_bytes\":{},\"threads\":{}",
        quote(&meta.config),
        meta.class,
        meta.op,
        meta.record_bytes,
        meta.threads
    )
}

fn planned_row(meta: &RowMeta) -> String {
    format!(
        "{},\"latency_of\":\"{}\",\"planned\":true}}",
        row_head(meta),
        meta.latency_of
    )
}

fn skipped_row(meta: &RowMeta, reason: &str) -> String {
    format!("{},\"skipped\":{}}}", row_head(meta), quote(reason))
}

/// What one phase (all its threads together) measured.
#[derive(Debug, Default)]
struct Measured {
    records: u64,
    bytes: u64,
    seconds: f64,
    /// Nanoseconds per acknowledged call (record or batch).
    latencies_ns: Vec<u64>,
}

/// Nearest-rank percentile in microseconds; `sorted` is ascending.
fn percentile_us(sorted: &[u64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1] as f64 / 1e3)
}

fn measured_row(meta: &RowMeta, m: &mut Measured, disk_bytes: Option<u64>) -> String {
    m.latencies_ns.sort_unstable();
    let opt = |v: Option<f64>| v.map_or_else(|| "null".to_string(), |x| num(x, 3));
    format!(
        "{},\"records\":{},\"seconds\":{},\"records_per_s\":{},\"mb_per_s\":{},\"p50_us\":{},\
         \"p99_us\":{},\"latency_of\":\"{}\",\"disk_bytes\":{}}}",
        row_head(meta),
        m.records,
        num(m.seconds, 6),
        num(m.records as f64 / m.seconds, 1),
        num(m.bytes as f64 / 1e6 / m.seconds, 3),
        opt(percentile_us(&m.latencies_ns, 0.50)),
        opt(percentile_us(&m.latencies_ns, 0.99)),
        meta.latency_of,
        disk_bytes.map_or_else(|| "null".to_string(), |b| b.to_string()),
    )
}

/// Prints one line and flushes; false once stdout is gone (the reader quit).
fn emit(line: &str) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

// ---- Payloads ----

/// xorshift64*: enough for incompressible payloads and size draws; no crate needed.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `min..=max` (modulo bias is irrelevant at these ranges).
    fn range(&mut self, min: usize, max: usize) -> usize {
        let span = (max - min + 1) as u64;
        min + (self.next_u64() % span) as usize
    }
}

/// `POOL_RECORDS` random records of `len` bytes.
fn record_pool(len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    (0..POOL_RECORDS)
        .map(|_| {
            let mut rec = vec![0u8; len];
            for chunk in rec.chunks_mut(8) {
                let word = rng.next_u64().to_le_bytes();
                chunk.copy_from_slice(&word[..chunk.len()]);
            }
            rec
        })
        .collect()
}

// ---- Measurement (child process) ----

#[derive(Debug)]
struct ThreadResult {
    start: Instant,
    end: Instant,
    records: u64,
    bytes: u64,
    latencies_ns: Vec<u64>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What every writer thread of a job shares.
#[derive(Debug, Clone, Copy)]
struct WriteLimits<'a> {
    job: &'a Job,
    pool: &'a [Vec<u8>],
    /// Time budget per thread.
    budget: Duration,
    /// This thread's share of `--max-bytes`.
    cap_bytes: u64,
}

/// One writer thread: waits at the barrier, then appends to `topic` until the time budget
/// or its share of `--max-bytes` is spent, always at least one call.
fn write_thread(
    wal: &Walrus,
    topic: &str,
    limits: &WriteLimits<'_>,
    seed: u64,
    barrier: &Barrier,
) -> Result<ThreadResult, String> {
    let WriteLimits {
        job,
        pool,
        budget,
        cap_bytes,
    } = *limits;
    let mut rng = Rng::new(seed);
    let per_call = match job.mode {
        Mode::Batch(n) => n,
        Mode::NoFsync | Mode::SyncEach => 1,
    };
    let expected_calls = cap_bytes / (job.sizing.min() * per_call) as u64 + 1;
    let mut latencies_ns =
        Vec::with_capacity(usize::try_from(expected_calls.min(1 << 22)).unwrap_or(0));
    let mut batch: Vec<&[u8]> = Vec::with_capacity(per_call);
    let mut next = 0usize;
    let (mut records, mut bytes) = (0u64, 0u64);
    barrier.wait();
    let start = Instant::now();
    let mut end = start;
    loop {
        batch.clear();
        let mut call_bytes = 0u64;
        for _ in 0..per_call {
            let rec = &pool[next % POOL_RECORDS];
            next += 1;
            let len = match job.sizing {
                Sizing::Fixed(n) => n,
                Sizing::Random { min, max } => rng.range(min, max),
            };
            batch.push(&rec[..len]);
            call_bytes += len as u64;
        }
        if records > 0 && (end - start >= budget || bytes + call_bytes > cap_bytes) {
            break;
        }
        let t0 = Instant::now();
        let result = match job.mode {
            Mode::Batch(_) => wal.batch_append_for_topic(topic, &batch),
            Mode::NoFsync | Mode::SyncEach => wal.append_for_topic(topic, batch[0]),
        };
        end = Instant::now();
        result.map_err(|e| format!("append to {topic} after {records} records: {e}"))?;
        latencies_ns.push(nanos(end - t0));
        records += per_call as u64;
        bytes += call_bytes;
    }
    Ok(ThreadResult {
        start,
        end,
        records,
        bytes,
        latencies_ns,
    })
}

/// The `max_bytes` for each `batch_read_for_topic` call. walrus 0.2.0 plans up to this
/// many bytes of sealed blocks and then also the whole active block; if the plan ends
/// inside the last sealed block and parsing goes on into the active block, the cursor
/// jumps there and the rest of that sealed block is never returned. So plan whole entries
/// only (entries are `header + size` bytes from an entry boundary), and few enough that
/// either the 2000-entry cap or the byte budget (which the next entry would exceed: the
/// planned headers total less than one record) ends the call before the active block.
fn read_call_bytes(size: usize) -> usize {
    let entry = size + WALRUS_HEADER_BYTES;
    let entries = if WALRUS_READ_MAX_ENTRIES * entry <= READ_CALL_MAX_BYTES {
        WALRUS_READ_MAX_ENTRIES
    } else {
        let by_budget = READ_CALL_MAX_BYTES / entry;
        let by_headers = (size - 1) / WALRUS_HEADER_BYTES;
        by_budget.min(by_headers).max(1)
    };
    entries * entry
}

/// One reader thread: reads `topic` from its start with `batch_read_for_topic` until it has
/// seen `expected` records. The cursor only moves in memory: with `AtLeastOnce`, walrus 0.2
/// never persists the position of batch reads (`checkpoint: false` would not move it).
fn read_thread(
    wal: &Walrus,
    topic: &str,
    max_bytes: usize,
    expected: u64,
    barrier: &Barrier,
) -> Result<ThreadResult, String> {
    let mut latencies_ns = Vec::new();
    let (mut records, mut bytes) = (0u64, 0u64);
    barrier.wait();
    let start = Instant::now();
    let mut end = start;
    while records < expected {
        let t0 = Instant::now();
        let entries = wal
            .batch_read_for_topic(topic, max_bytes, true)
            .map_err(|e| format!("batch_read_for_topic({topic}) after {records} records: {e}"))?;
        end = Instant::now();
        if entries.is_empty() {
            break;
        }
        latencies_ns.push(nanos(end - t0));
        records += entries.len() as u64;
        bytes += entries.iter().map(|e| e.data.len() as u64).sum::<u64>();
    }
    Ok(ThreadResult {
        start,
        end,
        records,
        bytes,
        latencies_ns,
    })
}

/// Runs `work(t)` on `threads` scoped threads that start together and merges the results.
fn run_threads<F>(threads: usize, work: F) -> Result<(Measured, Vec<ThreadResult>), String>
where
    F: Fn(usize, &Barrier) -> Result<ThreadResult, String> + Sync,
{
    let barrier = Barrier::new(threads);
    let results: Vec<Result<ThreadResult, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (work, barrier) = (&work, &barrier);
                s.spawn(move || work(t, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    let results: Vec<ThreadResult> = results.into_iter().collect::<Result<_, _>>()?;
    let mut m = Measured::default();
    let first = results.iter().map(|r| r.start).min();
    let last = results.iter().map(|r| r.end).max();
    if let (Some(first), Some(last)) = (first, last) {
        m.seconds = (last - first).as_secs_f64();
    }
    for r in &results {
        m.records += r.records;
        m.bytes += r.bytes;
        m.latencies_ns.extend_from_slice(&r.latencies_ns);
    }
    Ok((m, results))
}

/// Allocated bytes of every file under `dir` (`st_blocks * 512`: walrus's files are sparse).
fn disk_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            total += disk_bytes(&entry.path())?;
        } else {
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
}

fn topic_name(job: &Job, t: usize) -> String {
    format!("{}{t}", job.topic_prefix)
}

/// A row from the child to the parent, printed as soon as it is known (so a crash in the
/// read phase keeps the write row). If stdout is gone the parent is too; nothing to do.
fn emit_child(row: &str) {
    let _ = emit(&format!("{ROW_PREFIX}{row}"));
}

/// The child's work: one job in a fresh instance; emits its selected rows.
fn run_job(job: &Job, opts: &Options, row_dir: &Path) {
    let fail_all = |reason: &str| {
        for meta in selected_rows(job) {
            emit_child(&skipped_row(meta, reason));
        }
    };
    let wal = match Walrus::with_consistency_and_schedule_for_key(
        INSTANCE_KEY,
        ReadConsistency::AtLeastOnce {
            persist_every: PERSIST_EVERY,
        },
        job.mode.schedule(),
    ) {
        Ok(w) => w,
        Err(e) => return fail_all(&format!("creating the walrus instance: {e}")),
    };
    let pool = record_pool(job.sizing.max(), job.sizing.max() as u64);
    let limits = WriteLimits {
        job,
        pool: &pool,
        budget: Duration::from_secs_f64(opts.seconds),
        cap_bytes: (opts.max_bytes / job.threads as u64).max(1),
    };
    let written = run_threads(job.threads, |t, barrier| {
        let seed = (t as u64 + 1) * 0x1000_0001;
        write_thread(&wal, &topic_name(job, t), &limits, seed, barrier)
    });
    let (mut wm, per_topic) = match written {
        Ok(w) => w,
        Err(e) => return fail_all(&format!("write phase: {e}")),
    };
    let disk = match disk_bytes(row_dir) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("walrus_peer: measuring {}: {e}", row_dir.display());
            None
        }
    };
    if job.write.selected {
        emit_child(&measured_row(&job.write, &mut wm, disk));
    }
    let Some(read) = job.read.as_ref().filter(|r| r.selected) else {
        return;
    };
    let max_bytes = read_call_bytes(job.sizing.max());
    let outcome = run_threads(job.threads, |t, barrier| {
        read_thread(
            &wal,
            &topic_name(job, t),
            max_bytes,
            per_topic[t].records,
            barrier,
        )
    });
    emit_child(&match outcome {
        Ok((mut rm, got)) => {
            let short = got
                .iter()
                .zip(&per_topic)
                .enumerate()
                .find(|(_, (g, w))| g.records != w.records || g.bytes != w.bytes);
            match short {
                Some((t, (g, w))) => skipped_row(
                    read,
                    &format!(
                        "read back {} records ({} B) of {} ({} B) from {}",
                        g.records,
                        g.bytes,
                        w.records,
                        w.bytes,
                        topic_name(job, t)
                    ),
                ),
                None => measured_row(read, &mut rm, None),
            }
        }
        Err(e) => skipped_row(read, &format!("read phase: {e}")),
    });
}

fn child_main(opts: &Options, index: usize) -> ExitCode {
    let Some(row_dir) = opts.dir.as_deref() else {
        eprintln!("walrus_peer: {CHILD_FLAG} needs --dir");
        return ExitCode::from(2);
    };
    if std::env::var_os("WALRUS_QUIET").is_none() || std::env::var_os("WALRUS_DATA_DIR").is_none() {
        eprintln!(
            "walrus_peer: {CHILD_FLAG} is internal (the parent sets WALRUS_QUIET and WALRUS_DATA_DIR)"
        );
        return ExitCode::from(2);
    }
    let jobs = plan(opts);
    let Some(job) = jobs.get(index) else {
        eprintln!("walrus_peer: no job {index} in the plan");
        return ExitCode::from(2);
    };
    run_job(job, opts, row_dir);
    ExitCode::SUCCESS
}

// ---- Orchestration (parent process) ----

/// The child's flags: the parent's, normalised, so it rebuilds the same plan.
fn child_args(opts: &Options, index: usize, row_dir: &Path) -> Vec<String> {
    let join = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let mut args = vec![
        "--dir".into(),
        row_dir.display().to_string(),
        "--sizes".into(),
        join(&opts.sizes),
        "--threads".into(),
        join(&opts.threads),
        "--seconds".into(),
        opts.seconds.to_string(),
        "--max-bytes".into(),
        opts.max_bytes.to_string(),
    ];
    if let Some(only) = &opts.only {
        args.extend(["--only".into(), only.clone()]);
    }
    args.extend([CHILD_FLAG.into(), index.to_string()]);
    args
}

fn kill_and_reap(child: &mut Child) {
    if let Err(e) = child.kill() {
        eprintln!("walrus_peer: killing child {}: {e}", child.id());
    }
    let _ = child.wait();
}

/// Runs job `index` in a child; forwards its rows as they come and returns how many it
/// printed, with the reason it stopped early if it did.
fn run_child(exe: &Path, opts: &Options, index: usize, row_dir: &Path) -> (usize, Option<String>) {
    let timeout = Duration::from_secs_f64(120.0 + 4.0 * opts.seconds);
    let spawned = Command::new(exe)
        .args(child_args(opts, index, row_dir))
        .env("WALRUS_QUIET", "1")
        .env("WALRUS_DATA_DIR", row_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return (0, Some(format!("spawning {}: {e}", exe.display()))),
    };
    let Some(stdout) = child.stdout.take() else {
        kill_and_reap(&mut child);
        return (0, Some("child has no stdout pipe".into()));
    };
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + timeout;
    let mut rows = 0;
    let mut stopped = None;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => match line.strip_prefix(ROW_PREFIX) {
                Some(json) => {
                    if !emit(json) {
                        kill_and_reap(&mut child);
                        return (rows, Some("stdout closed".into()));
                    }
                    rows += 1;
                }
                None => eprintln!("walrus_peer child: {line}"),
            },
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                kill_and_reap(&mut child);
                stopped = Some(format!(
                    "child process timed out after {} s",
                    timeout.as_secs()
                ));
                break;
            }
        }
    }
    let _ = reader.join();
    if stopped.is_none() {
        match child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => stopped = Some(format!("child process failed ({status}); see stderr")),
            Err(e) => stopped = Some(format!("waiting for the child process: {e}")),
        }
    }
    (rows, stopped)
}

fn parent_main(opts: &Options) -> ExitCode {
    let jobs = plan(opts);
    if opts.list {
        for job in &jobs {
            for meta in selected_rows(job) {
                if !emit(&planned_row(meta)) {
                    return ExitCode::from(1);
                }
            }
        }
        return ExitCode::SUCCESS;
    }
    let Some(dir) = opts.dir.as_deref() else {
        eprintln!("walrus_peer: --dir is required\n\n{USAGE}");
        return ExitCode::from(2);
    };
    if !dir.is_dir() {
        eprintln!("walrus_peer: --dir {} is not a directory", dir.display());
        return ExitCode::from(2);
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("walrus_peer: cannot find its own executable: {e}");
            return ExitCode::from(1);
        }
    };
    for (index, job) in jobs.iter().enumerate() {
        let row_dir = dir.join(format!("walrus-{index}"));
        let (printed, stopped) = match std::fs::create_dir_all(&row_dir) {
            Ok(()) => run_child(&exe, opts, index, &row_dir),
            Err(e) => (0, Some(format!("creating {}: {e}", row_dir.display()))),
        };
        if let Err(e) = std::fs::remove_dir_all(&row_dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("walrus_peer: deleting {}: {e}", row_dir.display());
        }
        if printed < selected_rows(job).len() {
            let reason = stopped.unwrap_or_else(|| "child process reported no row".into());
            for meta in selected_rows(job).into_iter().skip(printed) {
                if !emit(&skipped_row(meta, &reason)) {
                    return ExitCode::from(1);
                }
            }
        }
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse_args(&args) {
        Ok(o) => o,
        Err(msg) if msg.is_empty() => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("walrus_peer: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match opts.child_job {
        Some(index) => child_main(&opts, index),
        None => parent_main(&opts),
    }
}

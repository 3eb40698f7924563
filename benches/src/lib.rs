//! Shared helpers for the tidelog benchmarks: the bench geometry, a rig that appends into a
//! fresh log and replaces it before the page cache or the disk fills, a rig that reads a
//! pre-written topic, and the plain baselines tidelog is measured against ([`baseline`],
//! shared by the criterion benches and the comparison benchmark's ceilings); and the
//! comparison benchmark itself ([`compare`], the `tidelog-bench` program).

use std::sync::Barrier;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tidelog::{Config, Reader, ReaderOptions, StartPosition, Wal, Writer};

pub mod baseline;
pub mod compare;

pub use baseline::{MmapBaseline, PageCacheSource, fdatasync_appends, memcpy_chunks};

/// Errors of the bench helpers (tidelog's, I/O, a panicked thread).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Result of the bench helpers.
pub type Result<T> = std::result::Result<T, BoxError>;

/// One KiB.
pub const KIB: usize = 1024;
/// One MiB.
pub const MIB: usize = 1024 * KIB;
/// Data file size of the bench geometry (tidelog's default).
pub const FILE_SIZE: u64 = 1 << 30;
/// Block size of the bench geometry (tidelog's default).
pub const BLOCK_SIZE: u64 = 10 << 20;
/// Frame bytes one log (or baseline directory) takes before it is replaced. Keeps dirty page
/// cache below the kernel's background writeback threshold and disk use bounded.
pub const RECYCLE_BYTES: u64 = 1 << 30;

/// Untimed pause after a log is opened and pre-warmed, so work that starts with the log is
/// done before timing: its background thread calibrates the TSC clock over its first second
/// (until then every append reads the OS clock). Long-running logs are in that steady state.
/// The baselines pause as long after their setup: on the VMs measured, page faults got
/// markedly slower when timing started 1.5 s after the previous run freed its page cache
/// rather than at once, so both sides must wait alike for their ratio to mean anything.
pub const SETTLE: Duration = Duration::from_millis(1500);

/// [`SETTLE`] under `cargo bench`, nothing under `cargo test --benches`.
pub(crate) fn default_settle() -> Duration {
    if is_bench_run() {
        SETTLE
    } else {
        Duration::ZERO
    }
}

/// The record sizes the issue asks for, with their labels.
pub const RECORD_SIZES: [(usize, &str); 4] = [
    (100, "100B"),
    (KIB, "1KiB"),
    (64 * KIB, "64KiB"),
    (MIB, "1MiB"),
];

/// The bench geometry: default file and block size, background flush as given.
pub fn config(sync_interval_ms: Option<u64>) -> Config {
    let cfg = Config::default()
        .file_size_bytes(FILE_SIZE)
        .block_size_bytes(BLOCK_SIZE);
    match sync_interval_ms {
        Some(ms) => cfg.sync_interval_ms(ms),
        None => cfg.durability(tidelog::Durability::Never),
    }
}

/// True under `cargo bench` (`--bench` without `--test`); false under `cargo test --benches`,
/// where benches only smoke-test their code with tiny volumes.
pub fn is_bench_run() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test")
}

/// A value of `len` non-zero, non-constant bytes.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 + 1).collect()
}

/// Bytes one record of `value_len` takes in a tidelog extent (header and padding included).
pub fn frame_bytes(value_len: usize) -> u64 {
    tidelog::format::frame_padded_len(value_len as u64)
}

/// Median of `values` (sorts them); 0 when empty.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Appends into a fresh log, replacing it (untimed) once it holds `budget` frame bytes.
///
/// Each log is pre-warmed: every topic has its first extent and the first data file exists,
/// and [`SETTLE`] has passed (under `cargo bench`) before timing starts. Thread `t` of `n` appends round-robin to topics `t, t + n, ...`;
/// with fewer topics than threads, threads share topics.
#[derive(Debug)]
pub struct AppendRig {
    config: Config,
    topics: usize,
    budget: u64,
    settle: Duration,
    written: u64,
    // Dropped in this order: writers, then the log (close flushes), then its directory.
    writers: Vec<Writer>,
    wal: Option<Wal>,
    dir: Option<TempDir>,
}

impl AppendRig {
    /// A rig for `topics` topics; the first log is made on the first append.
    pub fn new(config: Config, topics: usize) -> Self {
        AppendRig {
            config,
            topics: topics.max(1),
            budget: RECYCLE_BYTES,
            settle: default_settle(),
            written: 0,
            writers: Vec::new(),
            wal: None,
            dir: None,
        }
    }

    /// Sets how many frame bytes one log takes before it is replaced.
    pub fn with_budget(mut self, bytes: u64) -> Self {
        self.budget = bytes.max(1);
        self
    }

    /// Sets the untimed pause after each log is opened (default [`SETTLE`] under `cargo bench`).
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// Opens a fresh log unless the current one is less than half used, so the (untimed but
    /// slow) open, settle and close happen here rather than in a timed call. Criterion's
    /// warm-up times whole calls by wall clock: call this before `iter_custom`.
    pub fn prepare(&mut self) -> Result<()> {
        if self.wal.is_none() || self.written > self.budget / 2 {
            self.reset()?;
        }
        Ok(())
    }

    /// Closes the current log (flushing it) and deletes its directory.
    pub fn finish(&mut self) -> Result<()> {
        self.writers.clear();
        if let Some(wal) = self.wal.take() {
            wal.close()?;
        }
        self.dir = None;
        self.written = 0;
        Ok(())
    }

    fn reset(&mut self) -> Result<()> {
        self.finish()?;
        let dir = tempfile::tempdir()?;
        let wal = Wal::open_with(dir.path(), self.config.clone())?;
        for i in 0..self.topics {
            let writer = wal.writer(&format!("topic-{i:03}"))?;
            // Pre-warm: the topic's first extent and the first file exist before timing.
            writer.append(b"warm-up")?;
            self.writers.push(writer);
        }
        self.written = self.topics as u64 * frame_bytes(7);
        self.wal = Some(wal);
        self.dir = Some(dir);
        std::thread::sleep(self.settle);
        Ok(())
    }

    /// Appends `count` copies of `value` with `threads` threads; returns the time spent
    /// appending, log replacement excluded.
    pub fn append(&mut self, threads: usize, count: u64, value: &[u8]) -> Result<Duration> {
        let frame = frame_bytes(value.len());
        let mut timed = Duration::ZERO;
        let mut left = count;
        while left > 0 {
            if self.wal.is_none() || self.written + frame > self.budget {
                self.reset()?;
            }
            let room = (self.budget.saturating_sub(self.written) / frame).max(1);
            let n = left.min(room);
            timed += run_appends(&self.writers, threads.max(1), n, value)?;
            self.written += n * frame;
            left -= n;
        }
        Ok(timed)
    }
}

/// Runs `n` appends split over `threads` threads; the wall time from a common start.
fn run_appends(writers: &[Writer], threads: usize, n: u64, value: &[u8]) -> Result<Duration> {
    if threads == 1 {
        let start = Instant::now();
        append_share(writers, 0, 1, n, value)?;
        return Ok(start.elapsed());
    }
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let share = n / threads as u64 + u64::from((t as u64) < n % threads as u64);
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    append_share(writers, t, threads, share, value)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for h in handles {
            h.join().map_err(|_| "append thread panicked")??;
        }
        Ok(start.elapsed())
    })
}

/// Thread `t`'s appends: round-robin over its topics.
fn append_share(writers: &[Writer], t: usize, threads: usize, n: u64, value: &[u8]) -> Result<()> {
    let mut mine: Vec<&Writer> = writers.iter().skip(t).step_by(threads).collect();
    if mine.is_empty() {
        mine.extend(writers.get(t % writers.len().max(1)));
    }
    let Some(&first) = mine.first() else {
        return Err("no topic to append to".into());
    };
    if mine.len() == 1 {
        for _ in 0..n {
            std::hint::black_box(first.append(value)?);
        }
        return Ok(());
    }
    let mut i = 0;
    for _ in 0..n {
        std::hint::black_box(mine[i].append(value)?);
        i += 1;
        if i == mine.len() {
            i = 0;
        }
    }
    Ok(())
}

/// A topic of equal records, pre-written once, for sequential read benches.
#[derive(Debug)]
pub struct ReadRig {
    // Dropped before the directory holding its files.
    wal: Wal,
    records: u64,
    value_len: usize,
    _dir: TempDir,
}

/// Name of the topic a [`ReadRig`] writes.
const READ_TOPIC: &str = "read";

impl ReadRig {
    /// Writes about `total_bytes` of `value_len`-byte values (at least one record).
    pub fn new(value_len: usize, total_bytes: u64) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let wal = Wal::open_with(dir.path(), config(None))?;
        let writer = wal.writer(READ_TOPIC)?;
        let value = payload(value_len);
        let records = (total_bytes / value_len.max(1) as u64).max(1);
        for _ in 0..records {
            writer.append(&value)?;
        }
        Ok(ReadRig {
            wal,
            records,
            value_len,
            _dir: dir,
        })
    }

    /// Records in the topic.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Value bytes in the topic.
    pub fn value_bytes(&self) -> u64 {
        self.records * self.value_len as u64
    }

    /// An anonymous reader from the first record; `verify` checks every record's crc.
    pub fn reader(&self, verify: bool) -> Result<Reader> {
        let options = ReaderOptions {
            skip_checksums: !verify,
            ..ReaderOptions::default().start(StartPosition::Earliest)
        };
        Ok(self.wal.reader_with(READ_TOPIC, options)?)
    }
}

/// Reads `count` records with `reader`, wrapping to offset 0 at the end; returns the sum of
/// value lengths (the value is borrowed, never copied).
pub fn read_records(reader: &mut Reader, count: u64) -> Result<u64> {
    let mut sum = 0u64;
    let mut left = count;
    let mut empty_in_a_row = 0;
    while left > 0 {
        match reader.next()? {
            Some(record) => {
                sum += std::hint::black_box(record.value).len() as u64;
                left -= 1;
                empty_in_a_row = 0;
            }
            None => {
                empty_in_a_row += 1;
                if empty_in_a_row > 1 {
                    return Err("the topic has no records".into());
                }
                reader.seek(0)?;
            }
        }
    }
    Ok(sum)
}

/// One timed run: records done, wall time, and per-append latencies in ns (if measured).
#[derive(Debug)]
pub struct TimedRun {
    /// Records appended (or written, for a baseline).
    pub records: u64,
    /// Wall time of the run.
    pub secs: f64,
    /// One entry per append (or per baseline batch), in ns.
    pub latencies_ns: Vec<u64>,
}

impl TimedRun {
    /// Records per second.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.secs
    }
}

/// Appends `value` from one thread per writer, all released at once, until `run` has
/// passed; each thread times every append.
pub fn timed_appends(writers: &[Writer], value: &[u8], run: Duration) -> Result<TimedRun> {
    timed_threads(writers.len(), run, |t| {
        std::hint::black_box(writers[t].append(value)?);
        Ok(())
    })
}

/// Runs `op(thread)` in a loop on `threads` threads, all released at once, until `run` has
/// passed; each thread times every call, and every call counts as one record.
pub fn timed_threads(
    threads: usize,
    run: Duration,
    op: impl Fn(usize) -> Result<()> + Sync,
) -> Result<TimedRun> {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| -> Result<TimedRun> {
        let (barrier, op) = (&barrier, &op);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<Vec<u64>> {
                    let mut latencies_ns = Vec::with_capacity(1 << 14);
                    barrier.wait();
                    let deadline = Instant::now() + run;
                    loop {
                        let start = Instant::now();
                        if start >= deadline {
                            break;
                        }
                        op(t)?;
                        latencies_ns.push(start.elapsed().as_nanos() as u64);
                    }
                    Ok(latencies_ns)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut latencies_ns = Vec::new();
        for h in handles {
            latencies_ns.extend(h.join().map_err(|_| "benchmark thread panicked")??);
        }
        Ok(TimedRun {
            records: latencies_ns.len() as u64,
            secs: start.elapsed().as_secs_f64(),
            latencies_ns,
        })
    })
}

/// A fresh directory named `prefix...` under `root` (pass the bench's
/// `CARGO_TARGET_TMPDIR`: a real disk, unlike a tmpfs `/tmp`).
pub fn scratch_dir(root: &std::path::Path, prefix: &str) -> Result<TempDir> {
    std::fs::create_dir_all(root)?;
    Ok(tempfile::Builder::new().prefix(prefix).tempdir_in(root)?)
}

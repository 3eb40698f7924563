//! The durability targets of issue 3, measured in one run against same-run baselines on the
//! same file system, printed as a markdown table:
//!  1. `Always`, 1 appender, 4 KiB records: records/s over a plain loop of a 4 KiB `pwrite`
//!     at the end of a file plus `fdatasync` per record (goal >= 0.9);
//!  2. `Always`, 64 appender threads (each its own `Writer`; all on one topic, then one topic
//!     each), 4 KiB records: records/s over a plain single thread that writes 64 x 4 KiB (one
//!     `pwrite`) and then `fdatasync`s once (goal >= 0.7); as context (2c, no goal), the same 64 appenders
//!     on one topic against plain code with the same threads: 64 threads, each a 4 KiB
//!     `pwrite` at its own place at the end of one file, then a shared `fdatasync` (a leader
//!     syncs, the others wait), which is what thread hand-offs alone cost here;
//!  3. `Interval` (the default) 100 B appends from 1 thread over the same with `Never`: the
//!     background sync must not slow writers (goal ~1).
//!
//! Method: each figure is the median of 3 repetitions of a fixed time each (appenders loop
//! until a deadline), in a fresh directory each, tidelog and its baseline interleaved (the
//! order alternates); the ratio is the median of the per-repetition ratios. Every directory is
//! under the target directory (`CARGO_TARGET_TMPDIR`), never `/tmp`, which may be a tmpfs
//! where syncs cost nothing. p50/p99 are per-append latencies measured in each appender thread,
//! all repetitions pooled. Under `cargo test --benches` it runs tiny volumes as a smoke test
//! and says so. Run: `cargo bench -p tidelog-benches --bench durability`; a trailing argument
//! (`-- 2`) runs only the cases whose number starts with it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tidelog::{Config, Durability, Wal, Writer};
use tidelog_benches::{
    BLOCK_SIZE, FILE_SIZE, KIB, Result, SETTLE, TimedRun, is_bench_run, median, payload,
};

/// Records per `fdatasync` in the batched baseline, and appender threads in case 2.
const THREADS: usize = 64;
/// Record size of cases 1 and 2.
const RECORD: usize = 4 * KIB;
/// Value size of case 3.
const SMALL: usize = 100;

/// Volumes of one run.
struct Plan {
    reps: usize,
    /// Timed length of one repetition of cases 1 and 2.
    sync_run: Duration,
    /// Timed length of one repetition of case 3 (bounded so `Never` keeps its dirty pages
    /// under the kernel's background writeback threshold).
    small_run: Duration,
    /// Untimed pause after each fresh directory of cases 1 and 2, on both sides alike, so
    /// writeback of the previous repetition is done.
    pause: Duration,
    /// Untimed pause after each log of case 3 opens: its clock calibrates in the first second.
    settle: Duration,
}

const FULL: Plan = Plan {
    reps: 3,
    sync_run: Duration::from_millis(1500),
    small_run: Duration::from_millis(1000),
    pause: Duration::from_millis(300),
    settle: SETTLE,
};

const SMOKE: Plan = Plan {
    reps: 1,
    sync_run: Duration::from_millis(20),
    small_run: Duration::from_millis(20),
    pause: Duration::ZERO,
    settle: Duration::ZERO,
};

/// One timed run: records done, wall time, and per-append latencies in ns (if measured).
type Run = TimedRun;

/// A fresh directory under the target directory (a real disk, unlike a tmpfs `/tmp`).
fn scratch_dir() -> Result<TempDir> {
    tidelog_benches::scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "durability-")
}

/// The bench geometry (tidelog's defaults) with `durability`.
fn config(durability: Durability) -> Config {
    Config::default()
        .file_size_bytes(FILE_SIZE)
        .block_size_bytes(BLOCK_SIZE)
        .durability(durability)
}

/// Baseline: a fresh file grown by `batch` 4 KiB records at its end (gathered into one
/// `pwrite`), then one `fdatasync`, until `run` has passed: the benches' shared
/// [`tidelog_benches::fdatasync_appends`] loop. Latencies are per batch (write plus sync).
fn baseline_sync(plan: &Plan, batch: usize) -> Result<Run> {
    let dir = scratch_dir()?;
    let file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.path().join("baseline.log"))?;
    let pool = [payload(RECORD)];
    std::thread::sleep(plan.pause);
    Ok(tidelog_benches::fdatasync_appends(
        &file,
        &pool,
        batch as u64,
        plan.sync_run,
        u64::MAX,
    )?)
}

/// Baseline 2c: `THREADS` threads, each writing 4 KiB records with `pwrite` at its own
/// place at the end of one file and then waiting until an `fdatasync` that started after its
/// write has finished; a waiter that finds no sync running runs one (plain group commit).
/// Latencies are per record (write plus wait).
fn baseline_threads_group(plan: &Plan) -> Result<Run> {
    #[derive(Default)]
    struct Group {
        written: u64,
        synced: u64,
        syncing: bool,
    }
    let dir = scratch_dir()?;
    let file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.path().join("group.log"))?;
    let record = payload(RECORD);
    let next = AtomicU64::new(0);
    let group = Mutex::new(Group::default());
    let synced = Condvar::new();
    std::thread::sleep(plan.pause);
    tidelog_benches::timed_threads(THREADS, plan.sync_run, |_| {
        let at = next.fetch_add(RECORD as u64, Ordering::Relaxed);
        file.write_all_at(&record, at)?;
        let mut g = group.lock().unwrap_or_else(|p| p.into_inner());
        g.written += 1;
        let mine = g.written;
        while g.synced < mine {
            if g.syncing {
                g = synced.wait(g).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            g.syncing = true;
            let upto = g.written;
            drop(g);
            let result = file.sync_data();
            g = group.lock().unwrap_or_else(|p| p.into_inner());
            g.syncing = false;
            if result.is_ok() {
                g.synced = upto;
            }
            synced.notify_all();
            result?;
        }
        Ok(())
    })
}

/// `threads` appenders with `Durability::Always`, each its own `Writer`, on `topics` topics
/// (thread `t` on topic `t % topics`), each appending 4 KiB records until `run` has passed.
fn tidelog_always(plan: &Plan, threads: usize, topics: usize) -> Result<Run> {
    let dir = scratch_dir()?;
    let wal = Wal::open_with(dir.path(), config(Durability::Always))?;
    let writers = (0..threads)
        .map(|t| wal.writer(&format!("topic-{:03}", t % topics.max(1))))
        .collect::<tidelog::Result<Vec<Writer>>>()?;
    // Pre-warm: every topic has its first extent before timing.
    for w in writers.iter().take(topics.max(1)) {
        w.append(b"warm-up")?;
    }
    std::thread::sleep(plan.pause);
    let value = payload(RECORD);
    let run = tidelog_benches::timed_appends(&writers, &value, plan.sync_run)?;
    drop(writers);
    wal.close()?;
    Ok(run)
}

/// One thread appending 100 B values with `durability` until `run` has passed (the clock is
/// read once per 1024 appends, so it costs nothing measurable).
fn tidelog_small(plan: &Plan, durability: Durability) -> Result<Run> {
    let dir = scratch_dir()?;
    let wal = Wal::open_with(dir.path(), config(durability))?;
    let writer = wal.writer("small")?;
    writer.append(b"warm-up")?;
    std::thread::sleep(plan.settle);
    let value = payload(SMALL);
    let mut records = 0u64;
    let start = Instant::now();
    let deadline = start + plan.small_run;
    while Instant::now() < deadline {
        for _ in 0..1024 {
            std::hint::black_box(writer.append(&value)?);
        }
        records += 1024;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(writer);
    wal.close()?;
    Ok(Run {
        records,
        secs,
        latencies_ns: Vec::new(),
    })
}

/// The `q` quantile of sorted `values` (nearest rank), in microseconds; 0 when empty.
fn quantile_us(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e3
}

/// Pooled latencies of `runs` as "p50", "p99" strings in microseconds.
fn percentiles(runs: &[Run]) -> (String, String) {
    let mut all: Vec<u64> = runs
        .iter()
        .flat_map(|r| r.latencies_ns.iter().copied())
        .collect();
    if all.is_empty() {
        return ("-".to_owned(), "-".to_owned());
    }
    all.sort_unstable();
    (
        format!("{:.0} µs", quantile_us(&all, 0.50)),
        format!("{:.0} µs", quantile_us(&all, 0.99)),
    )
}

fn rates(runs: &[Run]) -> Vec<f64> {
    runs.iter().map(Run::rate).collect()
}

fn fmt_reps(values: &[f64], scale: f64, unit: &str) -> String {
    let parts: Vec<String> = values.iter().map(|v| format!("{:.0}", v / scale)).collect();
    format!("[{}] {unit}", parts.join(", "))
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews every figure.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

struct Row {
    case: &'static str,
    tidelog: String,
    baseline: String,
    ratio: f64,
    goal: String,
    p50: String,
    p99: String,
}

/// Runs `ours` and `theirs` `reps` times, interleaved with alternating order; returns both
/// sides' runs and the per-repetition ratios of their rates.
fn paired(
    reps: usize,
    mut ours: impl FnMut() -> Result<Run>,
    mut theirs: impl FnMut() -> Result<Run>,
) -> Result<(Vec<Run>, Vec<Run>, Vec<f64>)> {
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let (x, y) = if rep % 2 == 0 {
            let x = ours()?;
            (x, theirs()?)
        } else {
            let y = theirs()?;
            (ours()?, y)
        };
        ratios.push(x.rate() / y.rate());
        a.push(x);
        b.push(y);
    }
    Ok((a, b, ratios))
}

fn goal(ratio: f64, min: f64) -> String {
    format!(">= {min} ({})", if ratio >= min { "met" } else { "missed" })
}

fn main() -> Result<()> {
    let full = is_bench_run();
    let plan = if full { &FULL } else { &SMOKE };
    // A trailing non-flag argument selects cases by number prefix (e.g. `-- 2`).
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let wanted = |case: &str| case.starts_with(filter.as_str());
    let started = Instant::now();
    let load_before = load_average();
    println!("# tidelog durability");
    println!();
    println!("reproduce: `cargo bench -p tidelog-benches --bench durability`");
    println!(
        "geometry: file {} MiB, block {} MiB; {} CPUs; median of {}; {} ms per repetition \
         (case 3: {} ms); directories under the target directory",
        FILE_SIZE >> 20,
        BLOCK_SIZE >> 20,
        std::thread::available_parallelism().map_or(0, usize::from),
        plan.reps,
        plan.sync_run.as_millis(),
        plan.small_run.as_millis(),
    );
    if !full {
        println!("SMOKE RUN (not under `cargo bench`): tiny volumes, the numbers mean nothing");
    }
    println!();

    let mut rows = Vec::new();
    let mut notes = Vec::new();

    if wanted("1") {
        let (ours, base, mut ratios) = paired(
            plan.reps,
            || tidelog_always(plan, 1, 1),
            || baseline_sync(plan, 1),
        )?;
        let (p50, p99) = percentiles(&ours);
        let (b50, b99) = percentiles(&base);
        let (mut o, mut b) = (rates(&ours), rates(&base));
        notes.push(format!(
            "1: tidelog {}; baseline {} (pwrite + fdatasync p50 {b50}, p99 {b99})",
            fmt_reps(&o, 1.0, "records/s"),
            fmt_reps(&b, 1.0, "records/s"),
        ));
        let ratio = median(&mut ratios);
        rows.push(Row {
            case: "1. `always`, 1 appender, 4 KiB",
            tidelog: format!("{:.0} records/s", median(&mut o)),
            baseline: format!(
                "{:.0} records/s (4 KiB pwrite + fdatasync each)",
                median(&mut b)
            ),
            ratio,
            goal: goal(ratio, 0.9),
            p50,
            p99,
        });
    }

    let mut batched: Vec<Run> = Vec::new();
    for (case, label, topics) in [
        ("2a", "2a. `always`, 64 appenders, 1 topic, 4 KiB", 1),
        (
            "2b",
            "2b. `always`, 64 appenders, 64 topics, 4 KiB",
            THREADS,
        ),
    ] {
        if !wanted(case) {
            continue;
        }
        let (ours, base, mut ratios) = paired(
            plan.reps,
            || tidelog_always(plan, THREADS, topics),
            || baseline_sync(plan, THREADS),
        )?;
        let (p50, p99) = percentiles(&ours);
        let (mut o, mut b) = (rates(&ours), rates(&base));
        notes.push(format!(
            "{case}: tidelog {}; baseline {}",
            fmt_reps(&o, 1.0, "records/s"),
            fmt_reps(&b, 1.0, "records/s"),
        ));
        batched.extend(base);
        let ratio = median(&mut ratios);
        rows.push(Row {
            case: label,
            tidelog: format!("{:.0} records/s", median(&mut o)),
            baseline: format!(
                "{:.0} records/s (1 thread: 64 x 4 KiB in 1 pwrite + 1 fdatasync)",
                median(&mut b)
            ),
            ratio,
            goal: goal(ratio, 0.7),
            p50,
            p99,
        });
    }
    if !batched.is_empty() {
        let (b50, b99) = percentiles(&batched);
        notes.push(format!(
            "2: baseline per batch of 64 (1 pwrite of 64 x 4 KiB + fdatasync): p50 {b50}, p99 {b99}"
        ));
    }

    if wanted("2c") {
        let (ours, base, mut ratios) = paired(
            plan.reps,
            || tidelog_always(plan, THREADS, 1),
            || baseline_threads_group(plan),
        )?;
        let (p50, p99) = percentiles(&ours);
        let (b50, b99) = percentiles(&base);
        let (mut o, mut b) = (rates(&ours), rates(&base));
        notes.push(format!(
            "2c: tidelog {}; 64-thread group commit {} (p50 {b50}, p99 {b99})",
            fmt_reps(&o, 1.0, "records/s"),
            fmt_reps(&b, 1.0, "records/s"),
        ));
        let ratio = median(&mut ratios);
        rows.push(Row {
            case: "2c. as 2a, against plain code with the same 64 threads",
            tidelog: format!("{:.0} records/s", median(&mut o)),
            baseline: format!(
                "{:.0} records/s (64 threads: pwrite each + shared fdatasync)",
                median(&mut b)
            ),
            ratio,
            goal: "- (context)".to_owned(),
            p50,
            p99,
        });
    }

    if wanted("3") {
        let (ours, base, mut ratios) = paired(
            plan.reps,
            || tidelog_small(plan, Durability::Interval),
            || tidelog_small(plan, Durability::Never),
        )?;
        let (mut o, mut b) = (rates(&ours), rates(&base));
        notes.push(format!(
            "3: `interval` {}; `never` {}",
            fmt_reps(&o, 1e3, "k appends/s"),
            fmt_reps(&b, 1e3, "k appends/s"),
        ));
        let ratio = median(&mut ratios);
        rows.push(Row {
            case: "3. `interval` (200 ms), 1 thread, 100 B",
            tidelog: format!("{:.2} M appends/s", median(&mut o) / 1e6),
            baseline: format!("{:.2} M appends/s (tidelog, `never`)", median(&mut b) / 1e6),
            ratio,
            goal: format!("~1 ({})", if ratio >= 0.9 { "met" } else { "missed" }),
            p50: "-".to_owned(),
            p99: "-".to_owned(),
        });
    }

    notes.push(format!(
        "load average before / after: {load_before} / {}",
        load_average()
    ));
    println!("| case | tidelog | baseline | ratio | goal | p50 | p99 |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2} | {} | {} | {} |",
            r.case, r.tidelog, r.baseline, r.ratio, r.goal, r.p50, r.p99
        );
    }
    println!();
    println!("ratio: median of the per-repetition ratios (tidelog ÷ baseline, run back to back)");
    for note in &notes {
        println!("- {note}");
    }
    println!("- total run time: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

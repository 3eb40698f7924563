//! The topic log on the ring against the topic log on its mmap data files alone, both with
//! `Durability::Always`: durable small-record throughput and per-append latency, side by
//! side, printed as a markdown table. Cases (each on both backends in one run):
//!  1. 1 appender, 100 B values;
//!  2. 16 appender threads on 16 topics (one `Writer` each), 100 B values;
//!  3. 16 appender threads on one topic (one `Writer` each), 100 B values;
//!  4. 1 appender, 4 KiB values.
//!
//! The ring is `RingBackend::default()`: a ring file of 256 MiB in the log's directory,
//! direct I/O where the file system allows it (the `direct_io` line says whether it did). An
//! append on the ring returns once its ring block is durable; on mmap, once the range holding
//! it is msynced.
//!
//! Method (as `durability.rs`): each figure is the median of 3 repetitions of a fixed time each
//! (appenders loop until a deadline), in a fresh directory each, the two backends back to back
//! in alternating order; the ratio is the median of the per-repetition ratios. Directories are
//! under the target directory (`CARGO_TARGET_TMPDIR`), never `/tmp`, which may be a tmpfs
//! where syncs cost nothing and `O_DIRECT` is refused. p50/p99 are per-append latencies
//! measured in each appender thread, all repetitions pooled. Under `cargo test --benches` it
//! runs tiny volumes as a smoke test and says so. Run: `cargo bench -p tidelog-benches --bench
//! ring_backend`; a trailing argument (`-- 2`) runs only the cases whose number starts with it.

use std::path::Path;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tidelog::{Config, Durability, RingBackend, RingConfig, RingStats, Wal, Writer};
use tidelog_benches::{
    BLOCK_SIZE, FILE_SIZE, KIB, MIB, Result, TimedRun, is_bench_run, median, payload,
};

/// Volumes of one run.
struct Plan {
    reps: usize,
    /// Timed length of one repetition.
    run: Duration,
    /// Untimed pause after each log opens and is pre-warmed, on both backends alike, so
    /// writeback of the previous repetition (and of the new ring file's zero fill) is done.
    pause: Duration,
    /// Size of the ring file.
    ring_capacity: u64,
}

const FULL: Plan = Plan {
    reps: 3,
    run: Duration::from_millis(1500),
    pause: Duration::from_millis(300),
    ring_capacity: tidelog::RING_CAPACITY_DEFAULT,
};

/// Smoke runs use a small ring: each fresh ring file is written once with zeros.
const SMOKE: Plan = Plan {
    reps: 1,
    run: Duration::from_millis(20),
    pause: Duration::ZERO,
    ring_capacity: 16 * MIB as u64,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Mmap,
    Ring,
}

/// One case: `threads` appenders (each its own `Writer`) on `topics` topics, thread `t` on
/// topic `t % topics`.
struct Case {
    id: &'static str,
    label: &'static str,
    threads: usize,
    topics: usize,
    value_len: usize,
}

const CASES: [Case; 4] = [
    Case {
        id: "1",
        label: "1. 1 appender, 100 B",
        threads: 1,
        topics: 1,
        value_len: 100,
    },
    Case {
        id: "2",
        label: "2. 16 appenders, 16 topics, 100 B",
        threads: 16,
        topics: 16,
        value_len: 100,
    },
    Case {
        id: "3",
        label: "3. 16 appenders, 1 topic, 100 B",
        threads: 16,
        topics: 1,
        value_len: 100,
    },
    Case {
        id: "4",
        label: "4. 1 appender, 4 KiB",
        threads: 1,
        topics: 1,
        value_len: 4 * KIB,
    },
];

/// One timed run: records done, wall time, per-append latencies in ns, and the ring's state
/// at the end of timing (ring backend only).
struct Run {
    timed: TimedRun,
    ring: Option<RingStats>,
}

/// A fresh directory under the target directory (a real disk, unlike a tmpfs `/tmp`).
fn scratch_dir() -> Result<TempDir> {
    tidelog_benches::scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ring-backend-")
}

/// The bench geometry (tidelog's defaults) with `Always`, on `backend`.
fn config(plan: &Plan, backend: Backend) -> Config {
    let cfg = Config::default()
        .file_size_bytes(FILE_SIZE)
        .block_size_bytes(BLOCK_SIZE)
        .durability(Durability::Always);
    match backend {
        Backend::Mmap => cfg,
        Backend::Ring => cfg.ring(
            RingBackend::default().ring(RingConfig::default().capacity_bytes(plan.ring_capacity)),
        ),
    }
}

/// Runs `case` on `backend` in a fresh directory until `plan.run` has passed.
fn run_case(plan: &Plan, backend: Backend, case: &Case) -> Result<Run> {
    let dir = scratch_dir()?;
    let wal = Wal::open_with(dir.path(), config(plan, backend))?;
    let topics = case.topics.max(1);
    let writers = (0..case.threads)
        .map(|t| wal.writer(&format!("topic-{:03}", t % topics)))
        .collect::<tidelog::Result<Vec<Writer>>>()?;
    // Pre-warm: every topic has its first extent before timing.
    for w in writers.iter().take(topics) {
        w.append(b"warm-up")?;
    }
    std::thread::sleep(plan.pause);
    let value = payload(case.value_len);
    let timed = tidelog_benches::timed_appends(&writers, &value, plan.run)?;
    let run = Run {
        timed,
        ring: wal.ring_stats(),
    };
    if (backend == Backend::Ring) != run.ring.is_some() {
        return Err(format!("{backend:?} log reports ring stats {:?}", run.ring).into());
    }
    drop(writers);
    wal.close()?;
    Ok(run)
}

/// The `q` quantile of sorted `values` (nearest rank), in microseconds; 0 when empty.
fn quantile_us(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e3
}

/// Pooled latencies of `runs` as "p50 / p99" in microseconds.
fn percentiles(runs: &[Run]) -> String {
    let mut all: Vec<u64> = runs
        .iter()
        .flat_map(|r| r.timed.latencies_ns.iter().copied())
        .collect();
    if all.is_empty() {
        return "-".to_owned();
    }
    all.sort_unstable();
    format!(
        "{:.0} / {:.0}",
        quantile_us(&all, 0.50),
        quantile_us(&all, 0.99)
    )
}

fn rates(runs: &[Run]) -> Vec<f64> {
    runs.iter().map(|r| r.timed.rate()).collect()
}

fn fmt_reps(values: &[f64]) -> String {
    let parts: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
    format!("[{}]", parts.join(", "))
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews every figure.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// Runs `case` on both backends `reps` times, interleaved with alternating order; returns
/// the mmap runs, the ring runs and the per-repetition ratios (ring ÷ mmap) of their rates.
fn paired(plan: &Plan, case: &Case) -> Result<(Vec<Run>, Vec<Run>, Vec<f64>)> {
    let (mut mmap, mut ring, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..plan.reps {
        let (m, r) = if rep % 2 == 0 {
            let m = run_case(plan, Backend::Mmap, case)?;
            (m, run_case(plan, Backend::Ring, case)?)
        } else {
            let r = run_case(plan, Backend::Ring, case)?;
            (run_case(plan, Backend::Mmap, case)?, r)
        };
        ratios.push(r.timed.rate() / m.timed.rate());
        mmap.push(m);
        ring.push(r);
    }
    Ok((mmap, ring, ratios))
}

fn main() -> Result<()> {
    let full = is_bench_run();
    let plan = if full { &FULL } else { &SMOKE };
    // A trailing non-flag argument selects cases by number prefix (e.g. `-- 2`).
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let started = Instant::now();
    let load_before = load_average();
    println!("# tidelog on the ring vs on mmap, `Durability::Always`");
    println!();
    println!("reproduce: `cargo bench -p tidelog-benches --bench ring_backend`");
    println!(
        "geometry: file {} MiB, block {} MiB; ring file {} MiB in the log's directory; {} CPUs; \
         median of {}; {} ms per repetition; directories under the target directory",
        FILE_SIZE >> 20,
        BLOCK_SIZE >> 20,
        plan.ring_capacity >> 20,
        std::thread::available_parallelism().map_or(0, usize::from),
        plan.reps,
        plan.run.as_millis(),
    );
    if !full {
        println!("SMOKE RUN (not under `cargo bench`): tiny volumes, the numbers mean nothing");
    }
    println!();

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut direct_io = Vec::new();
    for case in CASES.iter().filter(|c| c.id.starts_with(filter.as_str())) {
        let (mmap, ring, mut ratios) = paired(plan, case)?;
        let (mut m, mut r) = (rates(&mmap), rates(&ring));
        let checkpoints: Vec<String> = ring
            .iter()
            .filter_map(|run| run.ring.as_ref())
            .map(|s| s.checkpoints.to_string())
            .collect();
        direct_io.extend(
            ring.iter()
                .filter_map(|run| run.ring.as_ref())
                .map(|s| s.direct_io),
        );
        notes.push(format!(
            "{}: mmap {} records/s; ring {} records/s; ring checkpoints per repetition [{}]",
            case.id,
            fmt_reps(&m),
            fmt_reps(&r),
            checkpoints.join(", "),
        ));
        rows.push(format!(
            "| {} | {:.0} | {:.0} | {:.2} | {} | {} |",
            case.label,
            median(&mut m),
            median(&mut r),
            median(&mut ratios),
            percentiles(&mmap),
            percentiles(&ring),
        ));
    }

    println!(
        "| case | mmap records/s | ring records/s | ring/mmap | mmap p50 / p99 µs | ring p50 / p99 µs |"
    );
    println!("|---|---|---|---|---|---|");
    for row in &rows {
        println!("{row}");
    }
    println!();
    println!("ring/mmap: median of the per-repetition ratios (run back to back)");
    let direct = match (direct_io.iter().all(|&d| d), direct_io.iter().any(|&d| d)) {
        _ if direct_io.is_empty() => "no ring opened".to_owned(),
        (true, _) => "true (O_DIRECT)".to_owned(),
        (false, false) => "false (buffered: the file system refused O_DIRECT)".to_owned(),
        (false, true) => "mixed across repetitions".to_owned(),
    };
    println!("- ring file direct_io (from `Wal::ring_stats()`): {direct}");
    for note in &notes {
        println!("- {note}");
    }
    println!(
        "- load average before / after: {load_before} / {}",
        load_average()
    );
    println!("- total run time: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

//! `append_stalls`: how long appends of one process stall, in shared mode (the default) and
//! in exclusive mode, alternating in one run (each mode first every other round). Each round opens a fresh log, appends 100-byte
//! records to one topic from one thread for `--seconds` with `fsync="interval"` (the flush
//! thread syncs and seals behind it), and times every append. An append slower than
//! `--stall-us` counts as a stall: the appender waited for something (a lock another thread
//! held across a sync, a page fault on a page under writeback, a block allocation). Prints
//! each round, then the medians and shared mode's over exclusive mode's.
//!
//! `cargo run --release -p tidelog-benches --bin append_stalls -- --rounds 5`

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use tidelog::{Config, Durability, Wal};

#[derive(Parser, Debug)]
#[command(about = "Appends of one process in shared and exclusive mode: rate and stalls")]
struct Args {
    /// Directory for the scratch logs (a subdirectory per round, removed after it).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// Rounds of each mode (alternating; each goes first every other round).
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Seconds of appends per round.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// An append slower than this (µs) is a stall.
    #[arg(long, default_value_t = 200)]
    stall_us: u64,
}

/// Bytes of every record's value.
const RECORD_BYTES: usize = 100;
/// Appends between two looks at the clock's deadline.
const BURST: u32 = 256;

/// One round of one mode.
#[derive(Debug, Clone, Copy)]
struct Round {
    records_per_s: f64,
    stalls: u64,
    stalled_ms: f64,
    max_ms: f64,
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    if !(args.seconds > 0.0 && args.seconds <= 600.0) || args.rounds == 0 {
        return Err("--seconds must be in (0, 600] and --rounds positive".into());
    }
    let stall = Duration::from_micros(args.stall_us);
    let (mut shared, mut exclusive) = (Vec::new(), Vec::new());
    println!("| round | mode | records/s | stalls | stalled ms | longest ms |");
    println!("|---|---|---|---|---|---|");
    for i in 0..args.rounds {
        // Each mode goes first every other round: the first log of a round meets the page
        // cache and the disk as the previous round left them.
        let mut order = [("shared", &mut shared), ("exclusive", &mut exclusive)];
        if i % 2 == 1 {
            order.reverse();
        }
        for (mode, out) in order {
            let dir = args
                .dir
                .join(format!("append-stalls-{}-{i}-{mode}", std::process::id()));
            let round = run(&dir, mode == "exclusive", args.seconds, stall);
            let _ = std::fs::remove_dir_all(&dir);
            let r = round?;
            println!(
                "| {i} | {mode} | {:.2} M | {} | {:.1} | {:.2} |",
                r.records_per_s / 1e6,
                r.stalls,
                r.stalled_ms,
                r.max_ms
            );
            out.push(r);
        }
    }
    let (s, e) = (medians(&shared), medians(&exclusive));
    println!();
    println!("| median | records/s | stalls | stalled ms | longest ms |");
    println!("|---|---|---|---|---|");
    for (mode, m) in [("shared", s), ("exclusive", e)] {
        println!(
            "| {mode} | {:.2} M | {} | {:.1} | {:.2} |",
            m.records_per_s / 1e6,
            m.stalls,
            m.stalled_ms,
            m.max_ms
        );
    }
    println!(
        "shared over exclusive: records/s {:.2}x, stalled time {:.2}x",
        s.records_per_s / e.records_per_s,
        s.stalled_ms / e.stalled_ms.max(f64::MIN_POSITIVE)
    );
    Ok(())
}

/// Appends for `seconds` to a fresh log in `dir`.
fn run(dir: &Path, exclusive: bool, seconds: f64, stall: Duration) -> Result<Round, String> {
    let err = |e: tidelog::Error| e.to_string();
    let config = Config::default()
        .durability(Durability::Interval)
        .exclusive(exclusive);
    let wal = Wal::open_with(dir, config).map_err(err)?;
    let writer = wal.writer("t").map_err(err)?;
    let record = [0x5Au8; RECORD_BYTES];
    // Untimed: the first append creates the topic and its first extent.
    writer.append(&record).map_err(err)?;
    let deadline = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let (mut records, mut stalls) = (0u64, 0u64);
    let (mut stalled, mut longest) = (Duration::ZERO, Duration::ZERO);
    while start.elapsed() < deadline {
        for _ in 0..BURST {
            let t = Instant::now();
            writer.append(&record).map_err(err)?;
            let took = t.elapsed();
            if took > stall {
                stalls += 1;
                stalled += took;
            }
            longest = longest.max(took);
            records += 1;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(writer);
    wal.close().map_err(err)?;
    Ok(Round {
        records_per_s: records as f64 / elapsed,
        stalls,
        stalled_ms: stalled.as_secs_f64() * 1e3,
        max_ms: longest.as_secs_f64() * 1e3,
    })
}

/// Each figure's median over the rounds.
fn medians(rounds: &[Round]) -> Round {
    let median = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        tidelog_benches::median(&mut v)
    };
    Round {
        records_per_s: median(|r| r.records_per_s),
        stalls: median(|r| r.stalls as f64) as u64,
        stalled_ms: median(|r| r.stalled_ms),
        max_ms: median(|r| r.max_ms),
    }
}

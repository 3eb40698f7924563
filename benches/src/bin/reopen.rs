//! `reopen`: how long a cold reopen takes. Writes `--topics` topics of `--topic-mib` MiB
//! each (records of `--record-bytes`, appended round-robin in 64 KiB runs so the topics'
//! extents interleave in the files, as live topics' do), closes the log, then for
//! `--rounds` rounds drops the page cache (`sync` and `echo 3 > /proc/sys/vm/drop_caches`;
//! where that is refused, `posix_fadvise(DONTNEED)` on every file of the log, said so in the
//! output; `--cache-drop fadvise` asks for that one) and times `Wal::open_with` and
//! `Wal::close`. Prints each round, the medians and the recovery report's counts.
//!
//! `cargo run --release -p tidelog-benches --bin reopen -- --rounds 3`
//!
//! `--data DIR` keeps the log in `DIR` and reuses it when it is there already, so two builds
//! can be timed on the same files (the 1,000 topics of 10 MiB is the default: 10 GiB
//! of records, about 1 MiB of disk beyond each topic's data).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Parser, ValueEnum};
use tidelog::{Config, Durability, Wal};

#[derive(Parser, Debug)]
#[command(about = "Cold reopen of a log of many topics: Wal::open and close after a cache drop")]
struct Args {
    /// Directory for the scratch log (a subdirectory, removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// Keep the log here and reuse it when it exists (its shape flags are then ignored).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Topics to write.
    #[arg(long, default_value_t = 1000)]
    topics: u32,
    /// MiB of record bytes per topic.
    #[arg(long, default_value_t = 10)]
    topic_mib: u64,
    /// Bytes of every record's value.
    #[arg(long, default_value_t = 1000)]
    record_bytes: usize,
    /// Timed reopens.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Open with `exclusive=true` instead of shared mode (the default).
    #[arg(long)]
    exclusive: bool,
    /// `Config::recovery_threads` of the timed opens (0: tidelog's default).
    #[arg(long, default_value_t = 0)]
    recovery_threads: usize,
    /// How the page cache is dropped before each open.
    #[arg(long, value_enum, default_value_t = CacheDrop::Auto)]
    cache_drop: CacheDrop,
}

/// How the page cache is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CacheDrop {
    /// The whole machine's (`drop_caches`) where this process may, else `fadvise`.
    Auto,
    /// `posix_fadvise(DONTNEED)` on every file of the log only.
    Fadvise,
}

/// Bytes of values each topic gets per turn of the round-robin.
const RUN_BYTES: usize = 64 << 10;

const MIB: f64 = (1u64 << 20) as f64;

/// One timed reopen.
#[derive(Debug, Clone, Copy)]
struct Round {
    open_ms: f64,
    close_ms: f64,
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    if args.rounds == 0 || args.topics == 0 || args.record_bytes == 0 {
        return Err("--rounds, --topics and --record-bytes must be positive".into());
    }
    let config = Config::default()
        .durability(Durability::Never)
        .exclusive(args.exclusive);
    let (dir, scratch) = match &args.data {
        Some(d) => (d.clone(), false),
        None => (
            args.dir
                .join(format!("reopen-bench-{}", std::process::id())),
            true,
        ),
    };
    if !dir.join("LOCK").exists() {
        let t = Instant::now();
        write_log(&dir, &config, &args)?;
        println!(
            "wrote {} topics x {} MiB in {:.1} s",
            args.topics,
            args.topic_mib,
            t.elapsed().as_secs_f64()
        );
    }
    let result = measure(
        &dir,
        &config.recovery_threads(args.recovery_threads),
        args.rounds,
        args.cache_drop,
    );
    if scratch {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// Times `rounds` cold reopens of the log in `dir`.
fn measure(dir: &Path, config: &Config, rounds: u32, cache: CacheDrop) -> Result<(), String> {
    let err = |e: tidelog::Error| e.to_string();
    let mut done = Vec::new();
    println!(
        "| round | cache drop | open ms | close ms | extents | sealed | scanned | scanned MiB | read by open MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for i in 0..rounds {
        let how = drop_cache(dir, cache)?;
        let read_before = read_bytes();
        let t = Instant::now();
        let wal = Wal::open_with(dir, config.clone()).map_err(err)?;
        let open = t.elapsed();
        let read = read_bytes().saturating_sub(read_before);
        let report = wal.recovery_report();
        let t = Instant::now();
        wal.close().map_err(err)?;
        let close = t.elapsed();
        let r = Round {
            open_ms: open.as_secs_f64() * 1e3,
            close_ms: close.as_secs_f64() * 1e3,
        };
        println!(
            "| {i} | {how} | {:.1} | {:.1} | {} | {} | {} | {:.1} | {:.1} |",
            r.open_ms,
            r.close_ms,
            report.extents,
            report.sealed_extents,
            report.scanned_extents,
            report.scanned_bytes as f64 / MIB,
            read as f64 / MIB
        );
        done.push(r);
    }
    let median = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = done.iter().map(f).collect();
        tidelog_benches::median(&mut v)
    };
    println!(
        "median: open {:.1} ms, close {:.1} ms, open + close {:.1} ms",
        median(|r| r.open_ms),
        median(|r| r.close_ms),
        median(|r| r.open_ms + r.close_ms)
    );
    Ok(())
}

/// Writes the topics into a fresh log in `dir` and closes it.
fn write_log(dir: &Path, config: &Config, args: &Args) -> Result<(), String> {
    let err = |e: tidelog::Error| e.to_string();
    let wal = Wal::open_with(dir, config.clone()).map_err(err)?;
    let value = tidelog_benches::payload(args.record_bytes);
    let per_run = (RUN_BYTES / args.record_bytes).max(1);
    let batch: Vec<&[u8]> = vec![&value[..]; per_run];
    let per_topic = (args.topic_mib << 20) / args.record_bytes as u64;
    let mut written = 0u64;
    while written < per_topic {
        let n = per_run.min(usize::try_from(per_topic - written).unwrap_or(per_run));
        for t in 0..args.topics {
            wal.append_batch(&format!("topic-{t:05}"), &batch[..n])
                .map_err(err)?;
        }
        written += n as u64;
    }
    wal.close().map_err(err)
}

/// Drops the page cache: the whole machine's where this process may (root) and `how` allows,
/// else each file of `dir` with `posix_fadvise(DONTNEED)` (clean pages only: `sync` runs
/// first). Returns which one ran.
fn drop_cache(dir: &Path, how: CacheDrop) -> Result<&'static str, String> {
    sync_all();
    if how == CacheDrop::Auto && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok() {
        return Ok("drop_caches");
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("list {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_file() {
            let file =
                std::fs::File::open(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
            fadvise_dontneed(&file).map_err(|e| format!("fadvise {}: {e}", path.display()))?;
        }
    }
    Ok("fadvise")
}

/// Bytes this process had read from storage so far (`read_bytes` of `/proc/self/io`: page
/// cache misses, read-ahead included); 0 where the file is missing.
fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[expect(unsafe_code, reason = "sync(2) has no wrapper in std")]
fn sync_all() {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() }
}

#[expect(unsafe_code, reason = "posix_fadvise has no wrapper in std")]
fn fadvise_dontneed(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a descriptor this frame owns; no pointers.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
    }
}

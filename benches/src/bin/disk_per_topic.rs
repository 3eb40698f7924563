//! `disk_per_topic`: the disk a directory takes for many topics, against the bytes of their
//! records. Appends `--bytes` of 100-byte records to each of `--topics` topics (default
//! geometry: 10 MiB blocks in 1 GiB files), flushes, and reports the data files' allocated
//! bytes (`st_blocks`), the records' bytes, and the disk taken per topic beyond its data.
//! The baseline is the data itself: the ratio says how much more than its records a
//! directory holds.
//!
//! `cargo run --release -p tidelog-benches --bin disk_per_topic -- --topics 1000 --bytes 100`

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use tidelog::{Config, Wal};

#[derive(Parser, Debug)]
#[command(about = "Disk taken by many topics against the bytes of their records")]
struct Args {
    /// Directory for the scratch log (a subdirectory, removed after the run).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// Topics.
    #[arg(long, default_value_t = 1000)]
    topics: u32,
    /// Bytes of record values per topic (100-byte records; at least one record).
    #[arg(long, default_value_t = 100)]
    bytes: u64,
}

const RECORD_BYTES: usize = 100;
const MIB: f64 = (1u64 << 20) as f64;

fn main() -> Result<(), String> {
    let args = Args::parse();
    if args.topics == 0 || u64::from(args.topics) > Config::default().max_topics {
        return Err("--topics must be between 1 and the default max_topics".into());
    }
    let dir = args
        .dir
        .join(format!("tidelog-disk-per-topic-{}", std::process::id()));
    let records = args.bytes.div_ceil(RECORD_BYTES as u64).max(1);
    let config = Config::default();
    let started = Instant::now();
    let wal = Wal::open_with(&dir, config).map_err(|e| e.to_string())?;
    let value = [0x5Au8; RECORD_BYTES];
    let names: Vec<String> = (0..args.topics).map(|t| format!("t{t:06}")).collect();
    for name in &names {
        let w = wal.writer(name).map_err(|e| e.to_string())?;
        for _ in 0..records {
            w.append(&value).map_err(|e| e.to_string())?;
        }
    }
    wal.flush().map_err(|e| e.to_string())?;
    let mut data = 0u64;
    for name in &names {
        data += wal.topic_info(name).map_err(|e| e.to_string())?.bytes;
    }
    let mut allocated = 0u64;
    for entry in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        if entry.path().extension().is_some_and(|x| x == "tdl") {
            allocated += entry.metadata().map_err(|e| e.to_string())?.blocks() * 512;
        }
    }
    wal.close().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let topics = f64::from(args.topics);
    println!(
        "| topics | data per topic | disk | data | disk per topic beyond its data | disk / data | s |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} B | {:.1} MiB | {:.1} MiB | {:.2} MiB | {:.2}x | {:.1} |",
        args.topics,
        records * RECORD_BYTES as u64,
        allocated as f64 / MIB,
        data as f64 / MIB,
        (allocated.saturating_sub(data)) as f64 / MIB / topics,
        allocated as f64 / data.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

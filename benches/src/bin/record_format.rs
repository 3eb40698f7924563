//! `record_format`: the engine's cost per record in each record format, measured in one run.
//! For format 2 (batch frames) and format 1 (a frame per record), in turn for `--rounds`
//! rounds: appends `--records` records of `--record-bytes` in batches of `--batch` to a new
//! log (`Durability::Never`: the copy, not the device, is timed), then reads them back with
//! `Reader::scan` (checksums checked, the bulk path Arrow uses) and with `Reader::next`, and
//! counts the log's bytes; then stages the same records in a `StagedWriter` of the same
//! format (what a Spark task writes: segments made durable by `finish`) and counts the
//! segments' bytes on disk. Prints the best round of each and format 2 / format 1.
//!
//! `cargo run --release -p tidelog-benches --bin record_format`

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use tidelog::{
    Append, Config, Durability, ReaderOptions, RecordFormat, StagedWriter, StartPosition, Wal,
};

#[derive(Parser, Debug)]
#[command(about = "Appends and reads per record in record formats 2 and 1")]
struct Args {
    /// Directory for the scratch logs (subdirectories, removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// Records per round.
    #[arg(long, default_value_t = 2_000_000)]
    records: usize,
    /// Bytes of every record's value.
    #[arg(long, default_value_t = 100)]
    record_bytes: usize,
    /// Records per append.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Rounds; the best of each measure is reported.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Measure only this format (1 or 2; a profile of one), not both.
    #[arg(long)]
    only: Option<u8>,
}

/// Best records per second of each measure, and bytes per record, for one format.
#[derive(Debug, Default, Clone, Copy)]
struct Rates {
    append: f64,
    scan: f64,
    next: f64,
    bytes_per_record: f64,
    stage: f64,
    staged_bytes_per_record: f64,
}

const TOPIC: &str = "t";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let values: Vec<Vec<u8>> = (0..4096u64)
        .map(|i| {
            (0..args.record_bytes)
                .map(|j| (i.wrapping_mul(31).wrapping_add(j as u64 * 7) % 251) as u8)
                .collect()
        })
        .collect();
    let mut best = [Rates::default(); 2];
    for round in 1..=args.rounds {
        for (slot, format) in [(0, RecordFormat::V2), (1, RecordFormat::V1)] {
            if args.only.is_some_and(|only| usize::from(only) != 2 - slot) {
                continue;
            }
            let r = one_round(&args, format, &values)?;
            let b = &mut best[slot];
            b.append = b.append.max(r.append);
            b.scan = b.scan.max(r.scan);
            b.next = b.next.max(r.next);
            b.stage = b.stage.max(r.stage);
            b.bytes_per_record = r.bytes_per_record;
            b.staged_bytes_per_record = r.staged_bytes_per_record;
            println!(
                "round {round} {format:?}: append {:.2} M/s, scan {:.2} M/s, next {:.2} M/s, \
                 stage {:.2} M/s",
                r.append / 1e6,
                r.scan / 1e6,
                r.next / 1e6,
                r.stage / 1e6
            );
        }
    }
    let [v2, v1] = best;
    println!(
        "\n{} records of {} B, {} per append, best of {}",
        args.records, args.record_bytes, args.batch, args.rounds
    );
    println!("| measure | format 2 | format 1 | 2 / 1 |");
    println!("|---|---|---|---|");
    for (name, a, b) in [
        ("append (M records/s)", v2.append / 1e6, v1.append / 1e6),
        ("Reader::scan (M records/s)", v2.scan / 1e6, v1.scan / 1e6),
        ("Reader::next (M records/s)", v2.next / 1e6, v1.next / 1e6),
        ("bytes per record", v2.bytes_per_record, v1.bytes_per_record),
        ("StagedWriter (M records/s)", v2.stage / 1e6, v1.stage / 1e6),
        (
            "staged bytes per record",
            v2.staged_bytes_per_record,
            v1.staged_bytes_per_record,
        ),
    ] {
        println!("| {name} | {a:.2} | {b:.2} | {:.2} |", a / b);
    }
    Ok(())
}

fn one_round(
    args: &Args,
    format: RecordFormat,
    values: &[Vec<u8>],
) -> Result<Rates, Box<dyn std::error::Error>> {
    let dir = tempfile::Builder::new()
        .prefix("tidelog-record-format-")
        .tempdir_in(&args.dir)?;
    let config = Config::default()
        .durability(Durability::Never)
        .record_format(format);
    let wal = Wal::open_with(dir.path(), config)?;
    let writer = wal.writer(TOPIC)?;
    let n = args.records;
    let batches: Vec<Vec<&[u8]>> = (0..n)
        .step_by(args.batch)
        .map(|i| {
            (i..(i + args.batch).min(n))
                .map(|j| values[j % values.len()].as_slice())
                .collect()
        })
        .collect();
    let t = Instant::now();
    for b in &batches {
        writer.append_batch(b)?;
    }
    let append = n as f64 / t.elapsed().as_secs_f64();
    let bytes_per_record = wal.topic_info(TOPIC)?.bytes as f64 / n as f64;
    let options = ReaderOptions {
        start: StartPosition::Earliest,
        ..ReaderOptions::default()
    };
    let mut reader = wal.reader_with(TOPIC, options.clone())?;
    let t = Instant::now();
    let mut sum = 0usize;
    let mut got = 0;
    while got < n {
        got += reader.scan(65_536, |r| {
            sum += r.value.len();
            true
        })?;
    }
    let scan = n as f64 / t.elapsed().as_secs_f64();
    assert_eq!(sum, n * args.record_bytes);
    let mut reader = wal.reader_with(TOPIC, options)?;
    let t = Instant::now();
    let mut count = 0;
    while let Some(r) = reader.next()? {
        count += r.value.len().min(1);
    }
    let next = n as f64 / t.elapsed().as_secs_f64();
    assert_eq!(count, n);
    wal.close()?;
    let (stage, staged_bytes) = stage_round(dir.path(), format, &batches)?;
    Ok(Rates {
        append,
        scan,
        next,
        bytes_per_record,
        stage,
        staged_bytes_per_record: staged_bytes as f64 / n as f64,
    })
}

/// Stages `batches` (one `append` call each) into a part of a new job in `dir`, made durable
/// by `finish`: records per second, and the bytes its segments take on disk.
fn stage_round(
    dir: &Path,
    format: RecordFormat,
    batches: &[Vec<&[u8]>],
) -> Result<(f64, u64), Box<dyn std::error::Error>> {
    let appends: Vec<Vec<Append<'_>>> = batches
        .iter()
        .map(|b| b.iter().map(|v| Append::value(v)).collect())
        .collect();
    let n: usize = appends.iter().map(Vec::len).sum();
    let t = Instant::now();
    let mut writer = StagedWriter::create(dir, "bench", "p0")?.record_format(format)?;
    for records in &appends {
        writer.append(TOPIC, records)?;
    }
    writer.finish()?;
    let rate = n as f64 / t.elapsed().as_secs_f64();
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir.join(tidelog::stage::STAGING_DIR).join("bench"))? {
        let entry = entry?;
        let name = entry.file_name();
        if name
            .to_string_lossy()
            .ends_with(tidelog::stage::SEGMENT_SUFFIX)
        {
            bytes += entry.metadata()?.blocks() * 512;
        }
    }
    Ok((rate, bytes))
}

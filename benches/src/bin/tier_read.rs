//! `tier_read`: how fast a topic reads back from a tier's bucket through `RemoteLog` (the
//! remote reader `open_remote(...).read_arrow` runs on), against plain `object_store` GETs
//! of the same objects at the same concurrency, in one run.
//!
//! Setup, once: a log appends `--mib` MiB of `--record-bytes` records to one topic with a
//! tier at `BUCKET/read`, then `tier_flush` (every extent sealed and in the manifest). Each
//! round, in alternating order: (remote) `RemoteLog::open` (the manifest read), a reader
//! from the earliest offset, and `scan` of 65,536 records a call until the end; every
//! record's CRC-32 is checked, the reader keeps `READAHEAD_OBJECTS` GETs in flight ahead of
//! the object it decodes; (plain) a LIST of the extent objects under the prefix, then GETs
//! of each, `--in-flight` of them under way at a time on a 2-thread tokio runtime (the
//! tier's own runtime has 2 threads), and `crc32fast::hash` over each object's bytes as it
//! arrives (the remote reader checksums every byte of each record, so the plain path
//! touches every byte once too). MB/s are the objects' bytes over each one's time.
//!
//! A `memory://NAME/...` bucket lives inside tidelog, out of `object_store`'s reach from
//! here: the plain GETs then read copies of the same objects (the same closed log uploaded
//! again to a `file://` prefix: the same sealed extents, so the same bytes) put into an
//! `object_store` `InMemory` store of the bench's own. Either way the plain store's objects
//! are checked against the manifest's count and bytes before the rounds.
//!
//! Prints each round, then the medians and ranges: the target is remote ≥ 0.9x plain.
//!
//! `cargo run --release -p tidelog-benches --bin tier_read -- --rounds 5`

use std::collections::VecDeque;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tidelog::{Config, READAHEAD_OBJECTS, ReaderOptions, RemoteLog, TierConfig, Wal};

type BoxError = Box<dyn std::error::Error>;

/// The topic the bench writes and reads.
const TOPIC: &str = "bench";
/// Records each `scan` call visits at most.
const SCAN_RECORDS: usize = 65_536;
/// Values each `append_batch` of the setup appends.
const APPEND_BATCH: usize = 64;

#[derive(Parser, Debug)]
#[command(about = "Remote reads of a tier's bucket against plain object_store GETs")]
struct Args {
    /// Directory for the scratch log and, without `--bucket`, the `file://` bucket.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// The bucket URL (`file://`, `memory://NAME/PREFIX`, `s3://BUCKET/PREFIX`); the bench
    /// writes under `read/` below it.
    #[arg(long)]
    bucket: Option<String>,
    /// A store option `KEY=VALUE` (`object_store`'s keys: `aws_endpoint`, ...), repeated.
    #[arg(long = "option", value_parser = parse_option)]
    options: Vec<(String, String)>,
    /// Rounds (remote and plain alternate which goes first).
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// MiB of record values the topic holds.
    #[arg(long, default_value_t = 1024)]
    mib: u64,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 4096)]
    record_bytes: usize,
    /// Plain GETs under way at a time (default: `READAHEAD_OBJECTS`, the GETs the remote
    /// reader keeps in flight: while it decodes object i, objects i+1 to i+4).
    #[arg(long, default_value_t = READAHEAD_OBJECTS)]
    in_flight: usize,
    /// Skip the checksums on both sides (the reader's per-record CRC-32, the plain path's
    /// hash of each object): the transport and the walk over the frames alone.
    #[arg(long)]
    skip_checksums: bool,
}

fn parse_option(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// One round's figures.
#[derive(Debug, Clone, Copy)]
struct Round {
    remote_mb_s: f64,
    plain_mb_s: f64,
}

impl Round {
    /// Remote MB/s over plain MB/s.
    fn ratio(&self) -> f64 {
        self.remote_mb_s / self.plain_mb_s
    }
}

/// Where the plain GETs read: a store and the prefix of the tier under it.
struct Plain {
    store: Arc<dyn ObjectStore>,
    root: Path,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.in_flight == 0 || args.record_bytes == 0 {
        return Err("--in-flight and --record-bytes must be at least 1".into());
    }
    let scratch = tempfile::tempdir_in(&args.dir)?;
    let bucket = match &args.bucket {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let dir = scratch.path().join("bucket");
            std::fs::create_dir_all(&dir)?;
            format!("file://{}", dir.display())
        }
    };
    let url = format!("{bucket}/read");
    let tier = |url: &str| {
        args.options
            .iter()
            .fold(TierConfig::new(url), |t, (k, v)| t.option(k, v))
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let log = scratch.path().join("log");
    let (records, produce_secs) = produce(&log, tier(&url), &args)?;
    let info = RemoteLog::open(&tier(&url))?.topic_info(TOPIC)?;
    if info.next_offset - info.first_offset != records {
        return Err(format!(
            "the bucket holds {} records, {records} were appended",
            info.next_offset - info.first_offset
        )
        .into());
    }
    let plain = if url.starts_with("memory://") {
        // The same closed log uploaded again to a file:// prefix, then into our own store.
        let copy = scratch.path().join("copy");
        std::fs::create_dir_all(&copy)?;
        let copy_url = format!("file://{}", copy.display());
        let wal = Wal::open_with(
            &log,
            Config::default()
                .exclusive(true)
                .tier(TierConfig::new(copy_url.clone())),
        )?;
        wal.tier_flush(None)?;
        wal.close()?;
        let from = store_at(&copy_url, &[])?;
        let mem = Plain {
            store: Arc::new(InMemory::new()),
            root: Path::from("read"),
        };
        rt.block_on(async {
            for key in list_objects(&from).await? {
                let bytes = from.store.get(&key).await?.bytes().await?;
                let rel: Path = key.prefix_match(&from.root).into_iter().flatten().collect();
                let to: Path = mem.root.parts().chain(rel.parts()).collect();
                mem.store.put(&to, PutPayload::from(bytes)).await?;
            }
            Ok::<(), object_store::Error>(())
        })?;
        std::fs::remove_dir_all(&copy)?;
        mem
    } else {
        store_at(&url, &args.options)?
    };
    std::fs::remove_dir_all(&log)?;
    let keys = rt.block_on(list_objects(&plain))?;
    let listed: u64 = rt.block_on(async {
        let mut total = 0;
        for key in &keys {
            total += plain.store.head(key).await?.size;
        }
        Ok::<u64, object_store::Error>(total)
    })?;
    if keys.len() != info.objects || listed != info.bytes {
        return Err(format!(
            "the plain store lists {} objects of {listed} bytes, the manifest {} of {}",
            keys.len(),
            info.objects,
            info.bytes
        )
        .into());
    }
    println!(
        "bucket {}: {records} records of {} B in {} objects, {:.1} MiB of objects \
         (produced and uploaded in {produce_secs:.1} s); plain GETs {} in flight",
        kind(&url),
        args.record_bytes,
        info.objects,
        info.bytes as f64 / f64::from(1u32 << 20),
        args.in_flight
    );
    println!("| round | first | remote MB/s | plain MB/s | remote/plain |");
    println!("|---|---|---|---|---|");
    let mb = info.bytes as f64 / 1e6;
    let mut rounds = Vec::new();
    for r in 0..args.rounds {
        let (remote_secs, plain_secs) = if r % 2 == 0 {
            let remote = remote(&tier(&url), records, &args)?;
            (remote, plain_gets(&rt, &plain, &args, info.bytes)?)
        } else {
            let plain = plain_gets(&rt, &plain, &args, info.bytes)?;
            (remote(&tier(&url), records, &args)?, plain)
        };
        let round = Round {
            remote_mb_s: mb / remote_secs,
            plain_mb_s: mb / plain_secs,
        };
        println!(
            "| {r} | {} | {:.0} | {:.0} | {:.2} |",
            if r % 2 == 0 { "remote" } else { "plain" },
            round.remote_mb_s,
            round.plain_mb_s,
            round.ratio()
        );
        rounds.push(round);
    }
    if rounds.is_empty() {
        return Ok(());
    }
    let ratios: Vec<f64> = rounds.iter().map(Round::ratio).collect();
    let figures = [
        (
            "remote MB/s",
            rounds.iter().map(|r| r.remote_mb_s).collect(),
            0,
        ),
        (
            "plain MB/s",
            rounds.iter().map(|r| r.plain_mb_s).collect(),
            0,
        ),
        ("remote/plain", ratios.clone(), 2),
    ];
    println!();
    for (name, values, digits) in figures {
        let (median, low, high) = stats(values);
        println!(
            "median {name}: {median:.digits$} (range {low:.digits$} to {high:.digits$}, {} rounds)",
            rounds.len()
        );
    }
    let (ratio, _, _) = stats(ratios);
    println!(
        "target remote >= 0.9x plain: {}",
        if ratio >= 0.9 { "met" } else { "not met" }
    );
    Ok(())
}

/// The median, the lowest and the highest of `values` (not empty).
fn stats(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

/// `file`, `memory`, `s3`, ...: the URL's scheme.
fn kind(url: &str) -> &str {
    url.split_once("://").map_or(url, |(scheme, _)| scheme)
}

/// Appends `args.mib` MiB to a fresh log at `dir` with a tier, flushes it to the bucket and
/// closes it (the log is kept); returns the records and the seconds it all took.
fn produce(dir: &FsPath, tier: TierConfig, args: &Args) -> Result<(u64, f64), BoxError> {
    let start = Instant::now();
    let wal = Wal::open_with(dir, Config::default().exclusive(true).tier(tier))?;
    let writer = wal.writer(TOPIC)?;
    let count = (args.mib << 20) / args.record_bytes as u64;
    let mut batch: Vec<Vec<u8>> = Vec::with_capacity(APPEND_BATCH);
    let mut appended = 0u64;
    while appended < count {
        batch.clear();
        let n = (count - appended).min(APPEND_BATCH as u64);
        for i in 0..n {
            // Values differ record to record, so a misread record would not pass as another.
            let mut value = vec![0x5au8; args.record_bytes];
            let seq = (appended + i).to_le_bytes();
            let at = seq.len().min(value.len());
            value[..at].copy_from_slice(&seq[..at]);
            batch.push(value);
        }
        writer.append_batch(&batch)?;
        appended += n;
    }
    wal.tier_flush(None)?;
    wal.close()?;
    Ok((count, start.elapsed().as_secs_f64()))
}

/// Reads the whole topic through a fresh `RemoteLog` (no object kept from a round before);
/// returns the seconds, from the open (the manifest read) to the last record.
fn remote(tier: &TierConfig, records: u64, args: &Args) -> Result<f64, BoxError> {
    let start = Instant::now();
    let log = RemoteLog::open(tier)?;
    let options = ReaderOptions {
        skip_checksums: args.skip_checksums,
        ..ReaderOptions::default()
    };
    let mut reader = log.reader_with(TOPIC, &options)?;
    let mut read = 0u64;
    let mut value_bytes = 0u64;
    loop {
        let n = reader.scan(SCAN_RECORDS, |rec| {
            value_bytes += rec.value.len() as u64;
            true
        })?;
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    if read != records || value_bytes != records * args.record_bytes as u64 {
        return Err(format!(
            "the remote reader read {read} records of {value_bytes} bytes, not {records}"
        )
        .into());
    }
    Ok(secs)
}

/// The store and prefix `url` names, as `object_store` parses it.
fn store_at(url: &str, options: &[(String, String)]) -> Result<Plain, BoxError> {
    let parsed: url::Url = url.parse()?;
    // The HTTPS client has no TLS provider of its own (see the workspace's Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (store, root) = object_store::parse_url_opts(&parsed, options.iter().cloned())?;
    Ok(Plain {
        store: Arc::from(store),
        root,
    })
}

/// The keys of the extent objects under the prefix's `topics/`, sorted (LISTs with a
/// delimiter: one for the topics, one per topic).
async fn list_objects(plain: &Plain) -> object_store::Result<Vec<Path>> {
    let topics: Path = plain
        .root
        .parts()
        .chain(Path::from("topics").parts())
        .collect();
    let mut keys = Vec::new();
    for dir in plain
        .store
        .list_with_delimiter(Some(&topics))
        .await?
        .common_prefixes
    {
        let listed = plain.store.list_with_delimiter(Some(&dir)).await?;
        keys.extend(
            listed
                .objects
                .into_iter()
                .map(|m| m.location)
                .filter(|p| p.extension() == Some("extent")),
        );
    }
    keys.sort();
    Ok(keys)
}

/// LISTs the objects, then GETs each, `args.in_flight` under way at a time, and hashes
/// each one's bytes in order as it arrives (unless `args.skip_checksums`); returns the
/// seconds.
fn plain_gets(
    rt: &tokio::runtime::Runtime,
    plain: &Plain,
    args: &Args,
    expect_bytes: u64,
) -> Result<f64, BoxError> {
    let start = Instant::now();
    let keys = rt.block_on(list_objects(plain))?;
    let spawn = |key: &Path| {
        let store = Arc::clone(&plain.store);
        let key = key.clone();
        rt.spawn(async move { store.get(&key).await?.bytes().await })
    };
    let mut pending = keys.iter();
    let mut ahead: VecDeque<_> = pending.by_ref().take(args.in_flight).map(spawn).collect();
    let mut crc = 0u32;
    let mut bytes = 0u64;
    while let Some(task) = ahead.pop_front() {
        let got = rt.block_on(task)??;
        if let Some(key) = pending.next() {
            ahead.push_back(spawn(key));
        }
        if !args.skip_checksums {
            crc ^= crc32fast::hash(&got);
        }
        bytes += got.len() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(crc);
    if bytes != expect_bytes {
        return Err(format!("the plain GETs read {bytes} bytes, not {expect_bytes}").into());
    }
    Ok(secs)
}

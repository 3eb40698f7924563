//! `tier_upload`: what the tier (`Config::tier`) costs appends, and how fast it uploads,
//! against plain `object_store` puts and multipart uploads of the same bytes to the same
//! bucket, in one run. Each
//! round: (off) a fresh log appends `--mib` MiB of `--record-bytes` records to one topic
//! with no tier and closes; (on) the same with a tier, uploading as extents seal, then
//! `tier_flush`; (upload) the closed "off" log opened again with a tier at a fresh prefix,
//! and `tier_flush` timed: every extent sealed already, so this is the upload thread's own
//! rate (read from the mapping, put, one delta per batch); (plain) puts of as many objects
//! of the same sizes, one at a time as the upload thread puts them, from memory; (multipart)
//! the same objects, one after another, each as an `object_store` multipart upload
//! (`put_multipart`, `WriteMultipart` of 16 MiB parts with at most 4 in flight, `finish`),
//! from memory. Off and on alternate which goes first, and so do plain and multipart.
//! Prints each round, then the medians and ranges over the rounds: appends/s with the tier
//! over without (target ≥ 0.95x), and the upload's MB/s over the plain puts' and over the
//! multipart uploads' (target ≥ 0.9x). `--option KEY=VALUE` passes a store option (an S3
//! endpoint and credentials) to the tier and to the plain store alike.
//!
//! `cargo run --release -p tidelog-benches --bin tier_upload -- --rounds 3`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tidelog::{Config, TierConfig, Wal};

#[derive(Parser, Debug)]
#[command(about = "Appends with and without a tier, and uploads against plain puts and multipart")]
struct Args {
    /// Directory for the scratch logs and, without `--bucket`, the `file://` bucket.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// The bucket URL (`file://`, `memory://NAME/PREFIX`, `s3://BUCKET/PREFIX`; each round
    /// uses a prefix of its own under it).
    #[arg(long)]
    bucket: Option<String>,
    /// A store option `KEY=VALUE` (`object_store`'s keys: `aws_endpoint`, ...), repeated;
    /// the tier and the plain store both get it.
    #[arg(long = "option", value_parser = parse_option)]
    options: Vec<(String, String)>,
    /// Rounds (off and on alternate which goes first).
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// MiB of record values each log appends.
    #[arg(long, default_value_t = 256)]
    mib: u64,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
}

fn parse_option(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// The multipart uploads' part size and the parts each keeps in flight (the tier's own
/// `put_file` uses the same for files over one part).
const PART_BYTES: usize = 16 << 20;
const PARTS_IN_FLIGHT: usize = 4;

/// One round's figures.
#[derive(Debug, Clone, Copy)]
struct Round {
    off_records_s: f64,
    on_records_s: f64,
    tier_mb_s: f64,
    plain_mb_s: f64,
    multipart_mb_s: f64,
    objects: u64,
}

/// A tier at `url` with the `--option`s.
fn tier_at(url: &str, args: &Args) -> TierConfig {
    args.options
        .iter()
        .fold(TierConfig::new(url), |t, (k, v)| t.option(k, v))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let scratch = tempfile::tempdir_in(&args.dir)?;
    let bucket = match &args.bucket {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let dir = scratch.path().join("bucket");
            std::fs::create_dir_all(&dir)?;
            format!("file://{}", dir.display())
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "| round | off records/s | on records/s | on/off | tier MB/s | plain MB/s | tier/plain | multipart MB/s | tier/multipart | objects |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut rounds = Vec::new();
    for r in 0..args.rounds {
        let log = |name: &str| scratch.path().join(format!("{name}-{r}"));
        let (off, on) = if r % 2 == 0 {
            let off = appends(&log("off"), None, &args)?;
            (
                off,
                appends(&log("on"), Some(format!("{bucket}/on-{r}")), &args)?,
            )
        } else {
            let on = appends(&log("on"), Some(format!("{bucket}/on-{r}")), &args)?;
            (appends(&log("off"), None, &args)?, on)
        };
        let (tier_bytes, tier_secs, sizes) =
            upload(&log("off"), &format!("{bucket}/up-{r}"), &args)?;
        std::fs::remove_dir_all(log("off"))?;
        let plain = format!("{bucket}/plain-{r}");
        let multipart = format!("{bucket}/multipart-{r}");
        let (plain_secs, multipart_secs) = if r % 2 == 0 {
            let plain_secs = plain_puts(&rt, &plain, &sizes, &args)?;
            (plain_secs, plain_multipart(&rt, &multipart, &sizes, &args)?)
        } else {
            let multipart_secs = plain_multipart(&rt, &multipart, &sizes, &args)?;
            (plain_puts(&rt, &plain, &sizes, &args)?, multipart_secs)
        };
        let mb = tier_bytes as f64 / 1e6;
        let round = Round {
            off_records_s: off,
            on_records_s: on,
            tier_mb_s: mb / tier_secs,
            plain_mb_s: mb / plain_secs,
            multipart_mb_s: mb / multipart_secs,
            objects: sizes.len() as u64,
        };
        println!(
            "| {r} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} | {:.2} | {} |",
            round.off_records_s,
            round.on_records_s,
            round.on_records_s / round.off_records_s,
            round.tier_mb_s,
            round.plain_mb_s,
            round.tier_mb_s / round.plain_mb_s,
            round.multipart_mb_s,
            round.tier_mb_s / round.multipart_mb_s,
            round.objects
        );
        rounds.push(round);
    }
    if rounds.is_empty() {
        return Ok(());
    }
    // The median, lowest and highest over the rounds.
    let stats = |f: &dyn Fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        format!(
            "{:.2}x ({:.2} to {:.2})",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1]
        )
    };
    println!(
        "\nmedians (range over rounds): appends with the tier over without {} (target >= 0.95x); tier upload over plain puts {} (target >= 0.9x); tier upload over plain multipart {} (target >= 0.9x)",
        stats(&|r| r.on_records_s / r.off_records_s),
        stats(&|r| r.tier_mb_s / r.plain_mb_s),
        stats(&|r| r.tier_mb_s / r.multipart_mb_s)
    );
    Ok(())
}

/// What an upload put: bytes, seconds, and each object's size.
type Uploaded = (u64, f64, Vec<u64>);

/// Opens the closed log at `dir` with a tier at `url` and times its `tier_flush`.
fn upload(
    dir: &std::path::Path,
    url: &str,
    args: &Args,
) -> Result<Uploaded, Box<dyn std::error::Error>> {
    let config = Config::default().exclusive(true).tier(tier_at(url, args));
    let wal = Wal::open_with(dir, config)?;
    let start = Instant::now();
    wal.tier_flush(None)?;
    let secs = start.elapsed().as_secs_f64();
    let status = wal.tier_status()?.expect("a tiered log has a status");
    wal.close()?;
    Ok((status.uploaded_bytes, secs, object_sizes(url, args)?))
}

/// The sizes of the extent objects under a tier URL, as its manifest says (objects of
/// one topic: their mean size each; the puts' count and bytes are what matter).
fn object_sizes(url: &str, args: &Args) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let remote = tidelog::RemoteLog::open(&tier_at(url, args))?;
    let info = remote.topic_info("bench")?;
    let objects = info.objects.max(1) as u64;
    Ok(vec![info.bytes / objects; info.objects])
}

/// Appends `args.mib` MiB to a fresh log at `dir` (with a tier at `tier`, then flushed to
/// it) and closes it; returns appends/s. The log without a tier is kept for `upload`.
fn appends(
    dir: &std::path::Path,
    tier: Option<String>,
    args: &Args,
) -> Result<f64, Box<dyn std::error::Error>> {
    let mut config = Config::default().exclusive(true);
    if let Some(url) = &tier {
        config = config.tier(tier_at(url, args));
    }
    let wal = Wal::open_with(dir, config)?;
    let writer = wal.writer("bench")?;
    let value = vec![0x5au8; args.record_bytes];
    let count = (args.mib << 20) / args.record_bytes as u64;
    let start = Instant::now();
    for _ in 0..count {
        writer.append(&value)?;
    }
    let append_secs = start.elapsed().as_secs_f64();
    if tier.is_some() {
        wal.tier_flush(None)?;
    }
    wal.close()?;
    if tier.is_some() {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(count as f64 / append_secs)
}

/// The store and prefix `url` names, with the `--option`s (a `file://` prefix's directory
/// made first).
fn store_at(
    url: &str,
    args: &Args,
) -> Result<(Arc<dyn ObjectStore>, Path), Box<dyn std::error::Error>> {
    let parsed: url::Url = url.parse()?;
    if let Ok(dir) = parsed.to_file_path() {
        std::fs::create_dir_all(dir)?;
    }
    // `memory://NAME/...` (tidelog's form) is object_store's `memory:///...`.
    let parsed = if parsed.scheme() == "memory" {
        format!("memory:///{}", parsed.path().trim_start_matches('/')).parse()?
    } else {
        parsed
    };
    // The HTTPS client has no TLS provider of its own (see the workspace's Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (store, root) = object_store::parse_url_opts(&parsed, args.options.iter().cloned())?;
    Ok((Arc::from(store), root))
}

/// Objects of `sizes`, in memory.
fn payloads(sizes: &[u64]) -> Vec<PutPayload> {
    sizes
        .iter()
        .map(|&n| PutPayload::from(vec![0x5au8; n as usize]))
        .collect()
}

/// Puts objects of `sizes` under `url`, one at a time, from memory; returns the seconds.
fn plain_puts(
    rt: &tokio::runtime::Runtime,
    url: &str,
    sizes: &[u64],
    args: &Args,
) -> Result<f64, Box<dyn std::error::Error>> {
    let (store, root) = store_at(url, args)?;
    let payloads = payloads(sizes);
    let start = Instant::now();
    rt.block_on(async {
        for (i, payload) in payloads.into_iter().enumerate() {
            let path = root.clone().join(format!("{i:020}.object"));
            store.put(&path, payload).await?;
        }
        Ok::<(), object_store::Error>(())
    })?;
    Ok(start.elapsed().as_secs_f64())
}

/// Uploads objects of `sizes` under `url`, one after another, each as a multipart upload
/// of `PART_BYTES` parts with at most `PARTS_IN_FLIGHT` in flight, from memory (the parts
/// are slices of the object's buffer, not copies); returns the seconds.
fn plain_multipart(
    rt: &tokio::runtime::Runtime,
    url: &str,
    sizes: &[u64],
    args: &Args,
) -> Result<f64, Box<dyn std::error::Error>> {
    let (store, root) = store_at(url, args)?;
    let payloads = payloads(sizes);
    let start = Instant::now();
    rt.block_on(async {
        for (i, payload) in payloads.into_iter().enumerate() {
            let path = root.clone().join(format!("{i:020}.object"));
            let upload = store.put_multipart(&path).await?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
            for mut rest in payload {
                while !rest.is_empty() {
                    let part = rest.split_to(rest.len().min(PART_BYTES));
                    writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                    writer.put(part);
                }
            }
            writer.finish().await?;
        }
        Ok::<(), object_store::Error>(())
    })?;
    Ok(start.elapsed().as_secs_f64())
}

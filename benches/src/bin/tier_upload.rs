//! `tier_upload`: what the tier (`Config::tier`) costs appends, and how fast it uploads,
//! against plain `object_store` puts of the same bytes to the same bucket, in one run. Each
//! round: (off) a fresh log appends `--mib` MiB of `--record-bytes` records to one topic
//! with no tier and closes; (on) the same with a tier, uploading as extents seal, then
//! `tier_flush`; (upload) the closed "off" log opened again with a tier at a fresh prefix,
//! and `tier_flush` timed: every extent sealed already, so this is the upload thread's own
//! rate (read from the mapping, put, one delta per batch); (plain) puts of as many objects
//! of the same sizes, one at a time as the upload thread puts them, from memory. Off and on
//! alternate which goes first. Prints each round, then the medians: appends/s with the
//! tier over without (target ≥ 0.95x), and the upload's MB/s over the plain puts'
//! (target ≥ 0.9x).
//!
//! `cargo run --release -p tidelog-benches --bin tier_upload -- --rounds 3`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tidelog::{Config, TierConfig, Wal};

#[derive(Parser, Debug)]
#[command(about = "Appends with and without a tier, and uploads against plain puts")]
struct Args {
    /// Directory for the scratch logs and, without `--bucket`, the `file://` bucket.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    dir: PathBuf,
    /// The bucket URL (each round uses a prefix of its own under it).
    #[arg(long)]
    bucket: Option<String>,
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

/// One round's figures.
#[derive(Debug, Clone, Copy)]
struct Round {
    off_records_s: f64,
    on_records_s: f64,
    tier_mb_s: f64,
    plain_mb_s: f64,
    objects: u64,
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
        "| round | off records/s | on records/s | on/off | tier MB/s | plain MB/s | tier/plain | objects |"
    );
    println!("|---|---|---|---|---|---|---|---|");
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
        let (tier_bytes, tier_secs, sizes) = upload(&log("off"), &format!("{bucket}/up-{r}"))?;
        std::fs::remove_dir_all(log("off"))?;
        let plain_secs = plain_puts(&rt, &format!("{bucket}/plain-{r}"), &sizes)?;
        let mb = tier_bytes as f64 / 1e6;
        let round = Round {
            off_records_s: off,
            on_records_s: on,
            tier_mb_s: mb / tier_secs,
            plain_mb_s: mb / plain_secs,
            objects: sizes.len() as u64,
        };
        println!(
            "| {r} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} | {} |",
            round.off_records_s,
            round.on_records_s,
            round.on_records_s / round.off_records_s,
            round.tier_mb_s,
            round.plain_mb_s,
            round.tier_mb_s / round.plain_mb_s,
            round.objects
        );
        rounds.push(round);
    }
    let median = |f: &dyn Fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "\nmedians: appends with the tier over without {:.2}x (target >= 0.95x); tier upload over plain puts {:.2}x (target >= 0.9x)",
        median(&|r| r.on_records_s / r.off_records_s),
        median(&|r| r.tier_mb_s / r.plain_mb_s)
    );
    Ok(())
}

/// What an upload put: bytes, seconds, and each object's size.
type Uploaded = (u64, f64, Vec<u64>);

/// Opens the closed log at `dir` with a tier at `url` and times its `tier_flush`.
fn upload(dir: &std::path::Path, url: &str) -> Result<Uploaded, Box<dyn std::error::Error>> {
    let config = Config::default().exclusive(true).tier(TierConfig::new(url));
    let wal = Wal::open_with(dir, config)?;
    let start = Instant::now();
    wal.tier_flush(None)?;
    let secs = start.elapsed().as_secs_f64();
    let status = wal.tier_status()?.expect("a tiered log has a status");
    wal.close()?;
    Ok((status.uploaded_bytes, secs, object_sizes(url)?))
}

/// The sizes of the extent objects under a tier URL, as its manifest says (objects of
/// one topic: their mean size each; the puts' count and bytes are what matter).
fn object_sizes(url: &str) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let remote = tidelog::RemoteLog::open(&TierConfig::new(url))?;
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
        config = config.tier(TierConfig::new(url.clone()));
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

/// Puts objects of `sizes` under `url`, one at a time, from memory; returns the seconds.
fn plain_puts(
    rt: &tokio::runtime::Runtime,
    url: &str,
    sizes: &[u64],
) -> Result<f64, Box<dyn std::error::Error>> {
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
    let (store, root) = object_store::parse_url(&parsed)?;
    let store: Arc<dyn ObjectStore> = Arc::from(store);
    let payloads: Vec<PutPayload> = sizes
        .iter()
        .map(|&n| PutPayload::from(vec![0x5au8; n as usize]))
        .collect();
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

//! One benchmark result (a row), the workload every row producer shares, and the timing
//! helpers. The JSON shape is the contract with the two external producers (the walrus peer
//! binary and `python_rows.py`); docs/BENCHMARKS.md describes it.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * KIB;

/// A batch (durability class D1) holds this many records at most...
pub(crate) const BATCH_RECORDS_MAX: u64 = 1000;
/// ...and at most this many payload bytes, whichever is fewer records.
pub(crate) const BATCH_BYTES_MAX: u64 = 4 * MIB;
/// Random records per size in the payload pool, cycled through by every row.
const POOL_RECORDS: u64 = 64;
/// Keeps the pool small for large records (16 MiB at 1 MiB records).
const POOL_BYTES_MAX: u64 = 16 * MIB;
/// Rows writing through a fresh mapping wait this long before timing. A Wal's clock reads
/// the OS clock until its background thread has calibrated the TSC (one second), and on
/// some VMs page faults slow down for a while after a previous run freed its page cache: the
/// mmap ceiling waits just as long, so both meet the same host.
pub(crate) const SETTLE: Duration = Duration::from_millis(1100);
/// A D0 row times one append in this many: timing each would cost a third of a 100 B append.
pub(crate) const LATENCY_SAMPLE_EVERY: u64 = 64;

/// One measured (or skipped) row. Field names and meanings are the producers' contract.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Row {
    pub system: String,
    pub config: String,
    pub lang: String,
    /// "tidelog", "peer" or "ceiling".
    pub kind: String,
    /// Durability class: D0 (nothing durable per record or batch), D1 (durable per batch),
    /// D2 (each record durable before it is acknowledged), D2a (each record acknowledged
    /// durable, asynchronously: the appender does not wait; no peer offers it).
    pub class: String,
    /// "append" or "read".
    pub op: String,
    pub record_bytes: u64,
    pub threads: u32,
    #[serde(default)]
    pub records: Option<u64>,
    #[serde(default)]
    pub seconds: Option<f64>,
    #[serde(default)]
    pub records_per_s: Option<f64>,
    #[serde(default)]
    pub mb_per_s: Option<f64>,
    #[serde(default)]
    pub p50_us: Option<f64>,
    #[serde(default)]
    pub p99_us: Option<f64>,
    #[serde(default)]
    pub latency_of: Option<String>,
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// Why the row did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The ceiling this row is compared with, when its producer knows better than the
    /// class rule (`report::ceiling_for`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<String>,
}

impl Row {
    /// A row with its identity set and no measurement yet.
    pub(crate) fn new(
        kind: &str,
        system: &str,
        config: &str,
        class: &str,
        op: &str,
        record_bytes: u64,
        threads: u32,
    ) -> Row {
        Row {
            system: system.to_owned(),
            config: config.to_owned(),
            lang: "rust".to_owned(),
            kind: kind.to_owned(),
            class: class.to_owned(),
            op: op.to_owned(),
            record_bytes,
            threads,
            records: None,
            seconds: None,
            records_per_s: None,
            mb_per_s: None,
            p50_us: None,
            p99_us: None,
            latency_of: None,
            disk_bytes: None,
            skipped: None,
            ceiling: None,
        }
    }

    /// Fills in the rates of `records` records of `payload_bytes` in all, taken in `seconds`.
    pub(crate) fn measured(mut self, records: u64, payload_bytes: u64, seconds: f64) -> Row {
        let seconds = seconds.max(1e-9);
        self.records = Some(records);
        self.seconds = Some(seconds);
        self.records_per_s = Some(records as f64 / seconds);
        self.mb_per_s = Some(payload_bytes as f64 / seconds / 1e6);
        self
    }

    /// Adds p50/p99 of `latencies_ns`, one per acknowledged operation of kind `of`.
    pub(crate) fn latency(mut self, mut latencies_ns: Vec<u32>, of: &str) -> Row {
        if latencies_ns.is_empty() {
            return self;
        }
        latencies_ns.sort_unstable();
        let at = |q: f64| {
            let i = ((latencies_ns.len() - 1) as f64 * q).round() as usize;
            f64::from(latencies_ns[i]) / 1000.0
        };
        self.p50_us = Some(at(0.50));
        self.p99_us = Some(at(0.99));
        self.latency_of = Some(of.to_owned());
        self
    }

    pub(crate) fn skip(mut self, why: impl Into<String>) -> Row {
        self.skipped = Some(why.into());
        self
    }

    pub(crate) fn against(mut self, ceiling: &str) -> Row {
        self.ceiling = Some(ceiling.to_owned());
        self
    }

    /// The row's identity across rounds.
    pub(crate) fn key(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}|{}|{}",
            self.kind,
            self.system,
            self.config,
            self.lang,
            self.class,
            self.op,
            self.record_bytes,
            self.threads
        )
    }
}

/// Records per D1 batch at `record_bytes`.
pub(crate) fn batch_records(record_bytes: u64) -> u64 {
    (BATCH_BYTES_MAX / record_bytes.max(1)).clamp(1, BATCH_RECORDS_MAX)
}

/// Random, incompressible records of `record_bytes`, the same for every row of a run.
pub(crate) fn pool(record_bytes: u64, seed: u64) -> Vec<Vec<u8>> {
    let count = (POOL_BYTES_MAX / record_bytes.max(1)).clamp(1, POOL_RECORDS);
    let mut state = seed | 1;
    (0..count)
        .map(|_| {
            let mut record = Vec::with_capacity(record_bytes as usize);
            while (record.len() as u64) < record_bytes {
                // xorshift64: fast, and enough to defeat compression.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                record.extend_from_slice(&state.to_le_bytes());
            }
            record.truncate(record_bytes as usize);
            record
        })
        .collect()
}

/// How long a row may run and how much it may write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub seconds: f64,
    pub bytes_max: u64,
}

impl Budget {
    /// Records one of `threads` threads may write: its share of the byte cap, at least one
    /// batch.
    pub(crate) fn records_per_thread(&self, record_bytes: u64, threads: u32) -> u64 {
        (self.bytes_max / u64::from(threads.max(1)) / record_bytes.max(1))
            .max(batch_records(record_bytes))
    }

    pub(crate) fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }
}

/// What one thread of a row did.
#[derive(Debug, Default)]
pub(crate) struct ThreadRun {
    pub records: u64,
    pub bytes: u64,
    pub started: Option<Instant>,
    pub ended: Option<Instant>,
    pub latencies_ns: Vec<u32>,
}

/// Runs `work(thread_index, deadline)` on `threads` threads that start together, and sums
/// what they did. The row's time runs from the first start to the last end.
pub(crate) fn run_threads<F>(
    threads: u32,
    budget: Budget,
    work: F,
) -> Result<(ThreadRun, f64), String>
where
    F: Fn(u32, Instant) -> Result<ThreadRun, String> + Sync,
{
    let barrier = Barrier::new(threads as usize);
    let results: Vec<Result<ThreadRun, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let mut run = work(t, start + budget.duration())?;
                    run.started = Some(start);
                    run.ended.get_or_insert_with(Instant::now);
                    Ok(run)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a benchmark thread panicked".into()))
            })
            .collect()
    });
    let mut total = ThreadRun::default();
    for run in results {
        let run = run?;
        total.records += run.records;
        total.bytes += run.bytes;
        total.started = match (total.started, run.started) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        total.ended = match (total.ended, run.ended) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        total.latencies_ns.extend(run.latencies_ns);
    }
    let seconds = match (total.started, total.ended) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    Ok((total, seconds))
}

/// Nanoseconds since `t`, saturated into a `u32` (4.2 s).
pub(crate) fn ns_since(t: Instant) -> u32 {
    u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX)
}

/// Bytes a directory tree occupies on disk (allocated blocks, not apparent sizes).
pub(crate) fn disk_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.blocks() * 512;
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| disk_bytes(&e.path()))
                .sum::<u64>()
        })
        .unwrap_or(0)
}

/// "100 B", "1 KiB", "64 KiB", "1 MiB".
pub(crate) fn size_label(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_1000_records_or_4_mib() {
        assert_eq!(batch_records(100), 1000);
        assert_eq!(batch_records(65536), 64);
        assert_eq!(batch_records(MIB), 4);
        assert_eq!(batch_records(64 * MIB), 1);
    }

    #[test]
    fn pool_records_have_the_size_and_differ() {
        let p = pool(100, 7);
        assert_eq!(p.len(), 64);
        assert!(p.iter().all(|r| r.len() == 100));
        assert_ne!(p[0], p[1]);
        assert_eq!(pool(MIB, 7).len(), 16);
    }

    #[test]
    fn latency_percentiles() {
        let row = Row::new("tidelog", "t", "c", "D2", "append", 1, 1)
            .latency((1..=100).map(|n| n * 1000).collect(), "record");
        assert_eq!(row.p50_us, Some(51.0));
        assert_eq!(row.p99_us, Some(99.0));
    }

    #[test]
    fn rows_round_trip_through_json_and_tolerate_missing_fields() {
        let line = r#"{"system":"lmdb","config":"x","lang":"python","kind":"peer","class":"D1","op":"append","record_bytes":100,"threads":1,"skipped":"lmdb is not installed"}"#;
        let row: Row = serde_json::from_str(line).expect("parse");
        assert_eq!(row.skipped.as_deref(), Some("lmdb is not installed"));
        assert!(row.records_per_s.is_none());
        let back: Row =
            serde_json::from_str(&serde_json::to_string(&row).expect("json")).expect("parse");
        assert_eq!(back.key(), row.key());
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(100), "100 B");
        assert_eq!(size_label(1024), "1 KiB");
        assert_eq!(size_label(MIB), "1 MiB");
        assert_eq!(size_label(762), "762 B");
    }
}

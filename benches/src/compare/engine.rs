//! tidelog's own rows, driven through the engine's Rust API: the mmap backend in each
//! durability mode, the ring alone, and the topic log on the ring.

use std::path::Path;
use std::time::{Duration, Instant};

use tidelog::{
    Config, Durability, ReaderOptions, RingBackend, RingConfig, RingWal, StartPosition, Wal, Writer,
};

use super::ceiling;
use super::row::{
    Budget, LATENCY_SAMPLE_EVERY, Row, SETTLE, ThreadRun, batch_records, disk_bytes, ns_since,
    run_threads,
};

/// How long a ring append may wait for room (rows reset the ring and stay under half of
/// it, so it never has to).
const RING_SPACE_WAIT: Duration = Duration::from_secs(5);

/// How the mmap backend's rows append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// D0: `Durability::Never`, one record per call.
    Never,
    /// D0: `Durability::Interval` (the default, a flush every 200 ms), one record per call.
    Interval,
    /// D1: `Durability::Always`, one batch per call.
    Batch,
    /// D2: `Durability::Always`, one record per call.
    Always,
}

impl Mode {
    pub(crate) const ALL: [Mode; 4] = [Mode::Never, Mode::Interval, Mode::Batch, Mode::Always];

    fn durability(self) -> Durability {
        match self {
            Mode::Never => Durability::Never,
            Mode::Interval => Durability::Interval,
            Mode::Batch | Mode::Always => Durability::Always,
        }
    }

    fn class(self) -> &'static str {
        match self {
            Mode::Never | Mode::Interval => "D0",
            Mode::Batch => "D1",
            Mode::Always => "D2",
        }
    }

    fn config(self) -> &'static str {
        match self {
            Mode::Never => "mmap, fsync never, Writer::append",
            Mode::Interval => "mmap, fsync interval (200 ms), Writer::append",
            Mode::Batch => "mmap, fsync always, Writer::append_batch",
            Mode::Always => "mmap, fsync always, Writer::append",
        }
    }

    fn ceiling(self) -> &'static str {
        match self {
            Mode::Never | Mode::Interval => ceiling::MMAP_WRITE,
            Mode::Batch => ceiling::FSYNC_BATCH,
            Mode::Always => ceiling::FSYNC_RECORD,
        }
    }
}

fn err(e: tidelog::Error) -> String {
    e.to_string()
}

/// The record thread `t` appends as its `i`-th: threads start at different pool entries.
fn pick(pool: &[Vec<u8>], t: u32, i: u64) -> &[u8] {
    &pool[((i + u64::from(t) * 7) % pool.len() as u64) as usize]
}

/// Appends from `threads` threads, each on its own topic, through the mmap backend; with
/// `read_back`, then reads every topic back from the start, checksums verified.
pub(crate) fn mmap(
    dir: &Path,
    pool: &[Vec<u8>],
    threads: u32,
    mode: Mode,
    budget: Budget,
    read_back: bool,
    wants: &dyn Fn(&Row) -> bool,
) -> Vec<Row> {
    let size = pool[0].len() as u64;
    let row = Row::new(
        "tidelog",
        "tidelog",
        mode.config(),
        mode.class(),
        "append",
        size,
        threads,
    )
    .against(mode.ceiling());
    let read_row = Row::new(
        "tidelog",
        "tidelog",
        "mmap, Reader::next, checksums verified",
        "D0",
        "read",
        size,
        1,
    )
    .against(ceiling::PAGE_CACHE_READ);
    if !wants(&row) {
        return Vec::new();
    }
    let result = (|| -> Result<Vec<Row>, String> {
        let wal = Wal::open_with(dir, Config::default()).map_err(err)?;
        let writers = (0..threads)
            .map(|t| {
                wal.writer(&format!("t{t}"))
                    .map(|w| w.with_durability(mode.durability()))
            })
            .collect::<Result<Vec<Writer>, _>>()
            .map_err(err)?;
        if matches!(mode, Mode::Never | Mode::Interval) {
            std::thread::sleep(SETTLE);
        }
        let per_thread = budget.records_per_thread(size, threads);
        let batch = batch_records(size);
        let (run, seconds) = run_threads(threads, budget, |t, deadline| {
            let writer = &writers[t as usize];
            let mut run = ThreadRun::default();
            let mut i = 0u64;
            match mode {
                Mode::Never | Mode::Interval => {
                    while i < per_thread {
                        if i.is_multiple_of(LATENCY_SAMPLE_EVERY) {
                            if Instant::now() >= deadline {
                                break;
                            }
                            let t0 = Instant::now();
                            writer.append(pick(pool, t, i)).map_err(err)?;
                            run.latencies_ns.push(ns_since(t0));
                        } else {
                            writer.append(pick(pool, t, i)).map_err(err)?;
                        }
                        i += 1;
                    }
                }
                Mode::Always => {
                    while i < per_thread && Instant::now() < deadline {
                        let t0 = Instant::now();
                        writer.append(pick(pool, t, i)).map_err(err)?;
                        run.latencies_ns.push(ns_since(t0));
                        i += 1;
                    }
                }
                Mode::Batch => {
                    let mut values: Vec<&[u8]> = Vec::with_capacity(batch as usize);
                    while i < per_thread && Instant::now() < deadline {
                        values.clear();
                        values.extend((0..batch).map(|k| pick(pool, t, i + k)));
                        let t0 = Instant::now();
                        writer.append_batch(&values).map_err(err)?;
                        run.latencies_ns.push(ns_since(t0));
                        i += batch;
                    }
                }
            }
            run.records = i;
            run.bytes = i * size;
            Ok(run)
        })?;
        let of = match mode {
            Mode::Batch => "batch",
            Mode::Always => "record",
            Mode::Never | Mode::Interval => "record (1 in 64 timed)",
        };
        let mut rows = vec![
            row.clone()
                .measured(run.records, run.bytes, seconds)
                .latency(run.latencies_ns, of),
        ];
        if read_back {
            let start = Instant::now();
            let (mut records, mut bytes) = (0u64, 0u64);
            for t in 0..threads {
                let options = ReaderOptions::default().start(StartPosition::Earliest);
                let mut reader = wal.reader_with(&format!("t{t}"), options).map_err(err)?;
                while let Some(r) = reader.next().map_err(err)? {
                    records += 1;
                    bytes += r.value.len() as u64;
                }
            }
            let seconds = start.elapsed().as_secs_f64();
            rows.push(read_row.clone().measured(records, bytes, seconds));
        }
        wal.close().map_err(err)?;
        rows[0].disk_bytes = Some(disk_bytes(dir));
        Ok(rows)
    })();
    let _ = std::fs::remove_dir_all(dir);
    result.unwrap_or_else(|e| {
        let mut rows = vec![row.skip(e.clone())];
        if read_back {
            rows.push(read_row.skip(e));
        }
        rows
    })
}

/// Opens the ring the `RingWal` rows of a round share: a preallocated, fully written file
/// of `capacity_bytes`.
pub(crate) fn open_ring(path: &Path, capacity_bytes: u64) -> Result<RingWal, String> {
    RingWal::open(
        path,
        RingConfig::default()
            .capacity_bytes(capacity_bytes)
            .format(true),
    )
    .map_err(err)
}

/// Appends to the ring alone (`RingWal`, AutoMQ's Delta WAL interface) from `threads`
/// threads. Pipelined: every append returns at once and the thread waits only for its last
/// record at the end, as AutoMQ's WriteBench does; otherwise each thread waits for each
/// record to be durable before the next.
pub(crate) fn ring(
    ring: &RingWal,
    pool: &[Vec<u8>],
    threads: u32,
    pipelined: bool,
    budget: Budget,
    wants: &dyn Fn(&Row) -> bool,
) -> Option<Row> {
    let size = pool[0].len() as u64;
    let (config, class, ceiling) = if pipelined {
        (
            "RingWal::append, pipelined, wait for the last",
            "D2a",
            ceiling::DIRECT_BLOCKS,
        )
    } else {
        (
            "RingWal::append, wait for each",
            "D2",
            ceiling::DSYNC_RECORD,
        )
    };
    let row =
        Row::new("tidelog", "tidelog", config, class, "append", size, threads).against(ceiling);
    if !wants(&row) {
        return None;
    }
    let budget = Budget {
        bytes_max: budget.bytes_max.min(ring.capacity_bytes() / 2),
        ..budget
    };
    let result = (|| -> Result<Row, String> {
        ring.reset().map_err(err)?;
        let per_thread = budget.records_per_thread(size, threads);
        let (run, seconds) = run_threads(threads, budget, |t, deadline| {
            let mut run = ThreadRun::default();
            let mut i = 0u64;
            let mut last = None;
            while i < per_thread && (!i.is_multiple_of(16) || Instant::now() < deadline) {
                let t0 = Instant::now();
                let handle = ring
                    .append_wait(pick(pool, t, i), RING_SPACE_WAIT)
                    .map_err(err)?;
                if pipelined {
                    last = Some(handle);
                } else {
                    handle.wait().map_err(err)?;
                    run.latencies_ns.push(ns_since(t0));
                }
                i += 1;
            }
            if let Some(h) = last {
                h.wait().map_err(err)?;
            }
            run.records = i;
            run.bytes = i * size;
            Ok(run)
        })?;
        Ok(row
            .clone()
            .measured(run.records, run.bytes, seconds)
            .latency(run.latencies_ns, "record"))
    })();
    Some(result.unwrap_or_else(|e| row.skip(e)))
}

/// Appends through the topic log with the ring in front of the data files (the AutoMQ
/// layout): `Durability::Always`, one record or one batch per call, a topic per thread;
/// the ring is a file of `ring_bytes` in the log's directory.
pub(crate) fn ring_topic_log(
    dir: &Path,
    pool: &[Vec<u8>],
    threads: u32,
    batch: bool,
    budget: Budget,
    ring_bytes: u64,
    wants: &dyn Fn(&Row) -> bool,
) -> Option<Row> {
    let size = pool[0].len() as u64;
    let (config, class, ceiling, of) = if batch {
        (
            "topic log on the ring, fsync always, Writer::append_batch",
            "D1",
            ceiling::FSYNC_BATCH,
            "batch",
        )
    } else {
        (
            "topic log on the ring, fsync always, Writer::append",
            "D2",
            ceiling::DSYNC_RECORD,
            "record",
        )
    };
    let row =
        Row::new("tidelog", "tidelog", config, class, "append", size, threads).against(ceiling);
    if !wants(&row) {
        return None;
    }
    let result = (|| -> Result<Row, String> {
        let ring = RingBackend::default().ring(RingConfig::default().capacity_bytes(ring_bytes));
        let config = Config::default().ring(ring);
        let wal = Wal::open_with(dir, config).map_err(err)?;
        let writers = (0..threads)
            .map(|t| {
                wal.writer(&format!("t{t}"))
                    .map(|w| w.with_durability(Durability::Always))
            })
            .collect::<Result<Vec<Writer>, _>>()
            .map_err(err)?;
        let per_thread = budget.records_per_thread(size, threads);
        let batch_len = if batch { batch_records(size) } else { 1 };
        let (run, seconds) = run_threads(threads, budget, |t, deadline| {
            let writer = &writers[t as usize];
            let mut run = ThreadRun::default();
            let mut values: Vec<&[u8]> = Vec::with_capacity(batch_len as usize);
            let mut i = 0u64;
            while i < per_thread && Instant::now() < deadline {
                let t0 = Instant::now();
                if batch {
                    values.clear();
                    values.extend((0..batch_len).map(|k| pick(pool, t, i + k)));
                    writer.append_batch(&values).map_err(err)?;
                } else {
                    writer.append(pick(pool, t, i)).map_err(err)?;
                }
                run.latencies_ns.push(ns_since(t0));
                i += batch_len;
            }
            run.records = i;
            run.bytes = i * size;
            Ok(run)
        })?;
        wal.close().map_err(err)?;
        let mut row = row
            .clone()
            .measured(run.records, run.bytes, seconds)
            .latency(run.latencies_ns, of);
        row.disk_bytes = Some(disk_bytes(dir));
        Ok(row)
    })();
    let _ = std::fs::remove_dir_all(dir);
    Some(result.unwrap_or_else(|e| row.skip(e)))
}

/// The thread count and record sizes of walrus's own write benchmark (10 writers, each on
/// its own topic, values of 500 to 1024 bytes), with tidelog's default durability.
pub(crate) const WALRUS_THREADS: u32 = 10;
pub(crate) const WALRUS_MEAN_BYTES: u64 = 762;

pub(crate) fn walrus_workload(
    dir: &Path,
    budget: Budget,
    wants: &dyn Fn(&Row) -> bool,
) -> Option<Row> {
    let row = Row::new(
        "tidelog",
        "tidelog",
        "walrus's workload: 500-1024 B random, 10 threads, fsync interval",
        "D0",
        "append",
        WALRUS_MEAN_BYTES,
        WALRUS_THREADS,
    )
    .against(ceiling::MMAP_WRITE);
    if !wants(&row) {
        return None;
    }
    // Sizes from the same xorshift as the pool, uniform in 500..=1024.
    let big = super::row::pool(1024, 0x5eed);
    let pool: Vec<&[u8]> = big
        .iter()
        .map(|r| &r[..500 + (usize::from(r[0]) * 256 + usize::from(r[1])) % 525])
        .collect();
    let mean_bytes = pool.iter().map(|r| r.len() as u64).sum::<u64>() / pool.len() as u64;
    let result = (|| -> Result<Row, String> {
        let wal = Wal::open_with(dir, Config::default()).map_err(err)?;
        let writers = (0..WALRUS_THREADS)
            .map(|t| wal.writer(&format!("topic_{t}")))
            .collect::<Result<Vec<Writer>, _>>()
            .map_err(err)?;
        std::thread::sleep(SETTLE);
        let per_thread = budget.records_per_thread(mean_bytes, WALRUS_THREADS);
        let (run, seconds) = run_threads(WALRUS_THREADS, budget, |t, deadline| {
            let writer = &writers[t as usize];
            let mut run = ThreadRun::default();
            let mut i = 0u64;
            while i < per_thread && (!i.is_multiple_of(64) || Instant::now() < deadline) {
                let value = pool[((i + u64::from(t) * 7) % pool.len() as u64) as usize];
                writer.append(value).map_err(err)?;
                run.bytes += value.len() as u64;
                i += 1;
            }
            run.records = i;
            Ok(run)
        })?;
        wal.close().map_err(err)?;
        Ok(row.clone().measured(run.records, run.bytes, seconds))
    })();
    let _ = std::fs::remove_dir_all(dir);
    Some(result.unwrap_or_else(|e| row.skip(e)))
}

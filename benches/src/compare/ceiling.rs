//! The machine's ceilings, measured in the same run as everything else: what the hardware
//! and kernel allow for each way of writing and reading, with no log format on top.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use super::row::{Budget, MIB, Row, SETTLE, batch_records, ns_since, run_threads};
use crate::baseline::{MmapBaseline, fdatasync_appends};

/// The names the report matches rows against.
pub(crate) const MMAP_WRITE: &str = "mmap write";
pub(crate) const BUFFERED_WRITE: &str = "buffered write";
pub(crate) const FSYNC_RECORD: &str = "write+fdatasync per record";
pub(crate) const FSYNC_BATCH: &str = "write+fdatasync per batch";
pub(crate) const DSYNC_RECORD: &str = "O_DIRECT+O_DSYNC write per record";
pub(crate) const DIRECT_BLOCKS: &str = "O_DIRECT+O_DSYNC 256 KiB x4";
pub(crate) const PAGE_CACHE_READ: &str = "page-cache read";
pub(crate) const MEMCPY: &str = "memcpy";

/// The mmap ceiling's file and block geometry: tidelog's defaults.
const MAP_FILE_BYTES: u64 = 1024 * MIB;
const MAP_BLOCK_BYTES: u64 = 10 * MIB;
/// The ring's block size and writes in flight (its defaults).
const RING_BLOCK_BYTES: u64 = 256 * 1024;
const RING_INFLIGHT: u32 = 4;
/// Direct I/O alignment.
const ALIGN_BYTES: usize = 4096;
/// Bandwidth ceilings move data in pieces of this size.
const CHUNK_BYTES: usize = MIB as usize;

fn io_err(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

/// Memory copy bandwidth, MB/s: the host's speed probe, taken at the start and end of every
/// round to see whether the machine drifted.
pub(crate) fn memcpy_mb_per_s(budget: Budget) -> f64 {
    let src = vec![7u8; 64 * CHUNK_BYTES];
    let mut dst = vec![0u8; 64 * CHUNK_BYTES];
    let deadline = Instant::now() + budget.duration();
    let start = Instant::now();
    let mut bytes = 0u64;
    while Instant::now() < deadline {
        for (d, s) in dst
            .chunks_exact_mut(CHUNK_BYTES)
            .zip(src.chunks_exact(CHUNK_BYTES))
        {
            d.copy_from_slice(s);
        }
        bytes += src.len() as u64;
        std::hint::black_box(&mut dst);
    }
    bytes as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// Rows for bandwidth ceilings measured once: one per record size, rates derived from MB/s.
pub(crate) fn per_size(
    name: &str,
    config: &str,
    class: &str,
    op: &str,
    mb_per_s: f64,
    sizes: &[u64],
) -> Vec<Row> {
    sizes
        .iter()
        .map(|&size| {
            let seconds = 1.0;
            let bytes = (mb_per_s * 1e6) as u64;
            Row::new("ceiling", name, config, class, op, size, 1).measured(
                bytes / size,
                bytes,
                seconds,
            )
        })
        .collect()
}

/// Copies records into a fresh sparse 1 GiB mapping, reserving each 10 MiB block on disk
/// first, as tidelog's writers do, minus the frame, the checksum and the bookkeeping: the
/// benches' [`MmapBaseline`] with one file, in the scratch directory.
pub(crate) fn mmap_write(dir: &Path, pool: &[Vec<u8>], budget: Budget) -> Result<Row, String> {
    let size = pool[0].len() as u64;
    let err = |e: crate::BoxError| format!("mmap baseline: {e}");
    let mut base = MmapBaseline::with_geometry(MAP_FILE_BYTES, MAP_BLOCK_BYTES)
        .in_dir(dir)
        .with_settle(SETTLE);
    base.prepare().map_err(err)?;
    let limit = budget.bytes_max.clamp(size, base.file_capacity());
    let deadline = Instant::now() + budget.duration();
    let start = Instant::now();
    let (mut pos, mut n, mut check_at) = (0u64, 0u64, 0u64);
    while pos + size <= limit {
        // The clock is read once per block's worth of records.
        if pos >= check_at {
            if Instant::now() >= deadline {
                break;
            }
            check_at = pos + MAP_BLOCK_BYTES;
        }
        base.write(&pool[(n % pool.len() as u64) as usize])
            .map_err(err)?;
        pos += size;
        n += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    base.finish();
    Ok(Row::new(
        "ceiling",
        MMAP_WRITE,
        "sparse 1 GiB file, 10 MiB fallocate",
        "D0",
        "append",
        size,
        1,
    )
    .measured(n, pos, seconds))
}

/// Copies records into a 4 MiB buffer and writes it with one `write(2)` when full.
pub(crate) fn buffered_write(dir: &Path, pool: &[Vec<u8>], budget: Budget) -> Result<Row, String> {
    let size = pool[0].len() as u64;
    let path = dir.join("ceiling-buffered");
    let file = create(&path)?;
    let mut out = std::io::BufWriter::with_capacity(4 * MIB as usize, file);
    let max = budget.records_per_thread(size, 1);
    let deadline = Instant::now() + budget.duration();
    let start = Instant::now();
    let mut n = 0u64;
    while n < max && (!n.is_multiple_of(64) || Instant::now() < deadline) {
        out.write_all(&pool[(n % pool.len() as u64) as usize])
            .map_err(|e| io_err("write", e))?;
        n += 1;
    }
    out.flush().map_err(|e| io_err("write", e))?;
    let seconds = start.elapsed().as_secs_f64();
    drop(out);
    remove(&path);
    Ok(Row::new(
        "ceiling",
        BUFFERED_WRITE,
        "4 MiB user buffer, write(2)",
        "D0",
        "append",
        size,
        1,
    )
    .measured(n, n * size, seconds))
}

/// Appends records to a file and makes each one (or each batch) durable with `fdatasync`:
/// the benches' [`fdatasync_appends`] loop.
pub(crate) fn fsync_write(
    dir: &Path,
    pool: &[Vec<u8>],
    budget: Budget,
    per_batch: bool,
) -> Result<Row, String> {
    let size = pool[0].len() as u64;
    let batch = if per_batch { batch_records(size) } else { 1 };
    let path = dir.join("ceiling-fsync");
    let file = create(&path)?;
    let max = budget.records_per_thread(size, 1);
    let run = fdatasync_appends(&file, pool, batch, budget.duration(), max);
    drop(file);
    remove(&path);
    let run = run.map_err(|e| io_err("write+fdatasync", e))?;
    let (name, class, config, of) = if per_batch {
        (
            FSYNC_BATCH,
            "D1",
            "pwrite of the batch at the end of the file, fdatasync",
            "batch",
        )
    } else {
        (
            FSYNC_RECORD,
            "D2",
            "pwrite at the end of the file, fdatasync",
            "record",
        )
    };
    let latencies = run
        .latencies_ns
        .iter()
        .map(|&ns| u32::try_from(ns).unwrap_or(u32::MAX))
        .collect();
    Ok(Row::new("ceiling", name, config, class, "append", size, 1)
        .measured(run.records, run.records * size, run.secs)
        .latency(latencies, of))
}

/// A file written in full once, so direct writes overwrite allocated blocks (as the ring
/// does); `None` where the file system refuses `O_DIRECT`.
pub(crate) struct DirectFile {
    file: File,
    path: std::path::PathBuf,
    bytes: u64,
}

impl std::fmt::Debug for DirectFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectFile")
            .field("path", &self.path)
            .finish()
    }
}

impl DirectFile {
    /// A file of `bytes` (rounded down to whole MiB, at least one).
    pub(crate) fn create(dir: &Path, bytes: u64) -> Result<Option<DirectFile>, String> {
        let path = dir.join("ceiling-direct");
        let bytes = (bytes / MIB).max(1) * MIB;
        {
            let mut f = create(&path)?;
            let zeros = vec![0u8; CHUNK_BYTES];
            for _ in 0..bytes / MIB {
                f.write_all(&zeros).map_err(|e| io_err("write", e))?;
            }
            f.sync_all().map_err(|e| io_err("fsync", e))?;
        }
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
            .open(&path)
        {
            Ok(file) => Ok(Some(DirectFile { file, path, bytes })),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                remove(&path);
                Ok(None)
            }
            Err(e) => Err(io_err("open O_DIRECT", e)),
        }
    }

    /// 256 KiB writes, 4 in flight (4 threads taking the next block in turn), sequential
    /// over the file and wrapping: the ring's write pattern with no records in it. MB/s.
    pub(crate) fn blocks_mb_per_s(&self, budget: Budget) -> Result<f64, String> {
        let next = std::sync::atomic::AtomicU64::new(0);
        let blocks = self.bytes / RING_BLOCK_BYTES;
        let (total, seconds) = run_threads(RING_INFLIGHT, budget, |_, deadline| {
            let mut raw = vec![0x5au8; RING_BLOCK_BYTES as usize + ALIGN_BYTES];
            let buf = aligned(&mut raw, RING_BLOCK_BYTES as usize);
            let mut run = super::row::ThreadRun::default();
            while Instant::now() < deadline {
                let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % blocks;
                self.file
                    .write_all_at(buf, b * RING_BLOCK_BYTES)
                    .map_err(|e| io_err("write", e))?;
                run.bytes += RING_BLOCK_BYTES;
            }
            Ok(run)
        })?;
        Ok(total.bytes as f64 / seconds.max(1e-9) / 1e6)
    }

    /// One durable direct write per record (the record rounded up to 4 KiB), one at a time:
    /// what a ring append that waits for its record costs at best.
    pub(crate) fn per_record(&self, record_bytes: u64, budget: Budget) -> Result<Row, String> {
        let len = (record_bytes as usize).div_ceil(ALIGN_BYTES) * ALIGN_BYTES;
        let mut raw = vec![0xa5u8; len + ALIGN_BYTES];
        let buf = aligned(&mut raw, len);
        let slots = (self.bytes / len as u64).max(1);
        let max = budget.records_per_thread(record_bytes, 1);
        let deadline = Instant::now() + budget.duration();
        let mut latencies = Vec::new();
        let start = Instant::now();
        let mut n = 0u64;
        while n < max && Instant::now() < deadline {
            let t = Instant::now();
            self.file
                .write_all_at(buf, (n % slots) * len as u64)
                .map_err(|e| io_err("write", e))?;
            latencies.push(ns_since(t));
            n += 1;
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(Row::new(
            "ceiling",
            DSYNC_RECORD,
            "overwrite, rounded up to 4 KiB, one at a time",
            "D2",
            "append",
            record_bytes,
            1,
        )
        .measured(n, n * record_bytes, seconds)
        .latency(latencies, "record"))
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

/// Reads a file of `file_bytes` (whole MiB) that is in the page cache with 1 MiB `read(2)`
/// calls. MB/s.
pub(crate) fn page_cache_read_mb_per_s(
    dir: &Path,
    file_bytes: u64,
    budget: Budget,
) -> Result<f64, String> {
    let path = dir.join("ceiling-read");
    let file_bytes = (file_bytes / MIB).max(1) * MIB;
    {
        let mut f = create(&path)?;
        let chunk = vec![3u8; CHUNK_BYTES];
        for _ in 0..file_bytes / CHUNK_BYTES as u64 {
            f.write_all(&chunk).map_err(|e| io_err("write", e))?;
        }
    }
    let file = File::open(&path).map_err(|e| io_err("open", e))?;
    let mut buf = vec![0u8; CHUNK_BYTES];
    // One untimed pass so every page is cached.
    let read_all = |buf: &mut [u8]| -> Result<u64, String> {
        let mut pos = 0;
        while pos < file_bytes {
            let n = file.read_at(buf, pos).map_err(|e| io_err("read", e))?;
            if n == 0 {
                break;
            }
            pos += n as u64;
        }
        Ok(pos)
    };
    read_all(&mut buf)?;
    let deadline = Instant::now() + budget.duration();
    let start = Instant::now();
    let mut bytes = 0;
    while bytes == 0 || Instant::now() < deadline {
        bytes += read_all(&mut buf)?;
    }
    let mb = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    drop(file);
    remove(&path);
    Ok(mb)
}

/// The `len`-byte part of `raw` that starts on a 4 KiB boundary (`raw` has 4 KiB spare).
fn aligned(raw: &mut [u8], len: usize) -> &mut [u8] {
    let skip = raw.as_ptr().align_offset(ALIGN_BYTES);
    &mut raw[skip..skip + len]
}

fn create(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| io_err(&format!("create {}", path.display()), e))
}

fn remove(path: &Path) {
    // Scratch files: a failed removal only leaves garbage in the scratch directory, which
    // the run removes as a whole at the end.
    let _ = std::fs::remove_file(path);
}

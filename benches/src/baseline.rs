//! The plain baselines tidelog is measured against, one implementation each, shared by the
//! criterion benches (`benches/benches`) and the ceilings of the comparison benchmark
//! (`compare::ceiling`): memcpy into fresh mmapped files, a page-cache-resident source to copy
//! from, and the `pwrite` + `fdatasync` append loop.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memmap2::{Mmap, MmapMut, MmapOptions};
use tempfile::TempDir;
use tidelog::io::{StdStorage, Storage};

use crate::{BLOCK_SIZE, FILE_SIZE, MIB, RECYCLE_BYTES, Result, TimedRun, default_settle, payload};

/// Header page of a data file; blocks start after it (as in tidelog's files).
const FILE_HEADER: u64 = 4096;

/// Baseline (a): plain memcpy of records into mmaps of fresh sparse files of tidelog's
/// geometry, each block fallocated when first reached (as tidelog reserves an extent),
/// records packed from the end of the header page. Full files stay mapped (as tidelog keeps
/// them) until the directory is replaced, untimed, after `budget` bytes; each new directory
/// is followed by the same untimed [`SETTLE`](crate::SETTLE) as an
/// [`AppendRig`](crate::AppendRig) log.
///
/// The comparison benchmark's "mmap write" ceiling is this baseline too: one file of 1 GiB
/// with 10 MiB blocks, in its scratch directory, written with [`MmapBaseline::write`].
#[derive(Debug)]
pub struct MmapBaseline {
    file_size: u64,
    block_size: u64,
    budget: u64,
    settle: Duration,
    /// Where the directories are made (default: the system's temporary directory).
    parent: Option<PathBuf>,
    written: u64,
    seq: u64,
    current: Option<MappedFile>,
    full: Vec<MappedFile>,
    dir: Option<TempDir>,
}

#[derive(Debug)]
struct MappedFile {
    map: MmapMut,
    file: File,
    path: PathBuf,
    pos: u64,
    allocated: u64,
    end: u64,
}

impl MmapBaseline {
    /// A baseline with the bench geometry.
    pub fn new() -> Self {
        Self::with_geometry(FILE_SIZE, BLOCK_SIZE)
    }

    /// A baseline with files of `file_size` and blocks of `block_size` bytes.
    pub fn with_geometry(file_size: u64, block_size: u64) -> Self {
        MmapBaseline {
            file_size,
            block_size,
            budget: RECYCLE_BYTES,
            settle: default_settle(),
            parent: None,
            written: 0,
            seq: 0,
            current: None,
            full: Vec::new(),
            dir: None,
        }
    }

    /// Sets how many bytes one directory takes before it is replaced.
    pub fn with_budget(mut self, bytes: u64) -> Self {
        self.budget = bytes.max(1);
        self
    }

    /// Sets the untimed pause after each new directory (default [`SETTLE`](crate::SETTLE)
    /// under `cargo bench`).
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// Makes the directories under `parent` (the file system to measure) instead of the
    /// system's temporary directory.
    pub fn in_dir(mut self, parent: &Path) -> Self {
        self.parent = Some(parent.to_path_buf());
        self
    }

    /// Record bytes one file holds: its whole blocks after the header page.
    pub fn file_capacity(&self) -> u64 {
        (self.file_size.saturating_sub(FILE_HEADER) / self.block_size.max(1)) * self.block_size
    }

    /// Starts a fresh directory unless the current one is less than half used (see
    /// [`AppendRig::prepare`](crate::AppendRig::prepare)).
    pub fn prepare(&mut self) -> Result<()> {
        if self.dir.is_none() || self.written > self.budget / 2 {
            self.start_directory()?;
        }
        Ok(())
    }

    fn start_directory(&mut self) -> Result<()> {
        self.finish();
        self.dir = Some(match &self.parent {
            Some(parent) => tempfile::tempdir_in(parent)?,
            None => tempfile::tempdir()?,
        });
        let first = self.new_file()?;
        self.current = Some(first);
        std::thread::sleep(self.settle);
        Ok(())
    }

    /// Unmaps and deletes every file (dirty pages of deleted files are never written back).
    pub fn finish(&mut self) {
        self.current = None;
        self.full.clear();
        self.dir = None;
        self.written = 0;
    }

    /// Starts writing the current file from its first record again: its pages are then
    /// already faulted in, so a second pass measures the copy alone.
    pub fn rewind(&mut self) {
        if let Some(cur) = &mut self.current {
            cur.pos = FILE_HEADER;
        }
    }

    fn new_file(&mut self) -> Result<MappedFile> {
        let Some(dir) = &self.dir else {
            return Err("baseline directory missing".into());
        };
        let path = dir.path().join(format!("{:020}.bin", self.seq));
        self.seq += 1;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        file.set_len(self.file_size)?;
        // Reserved as tidelog reserves: the engine's own `fallocate`.
        StdStorage.allocate(&file, &path, 0, FILE_HEADER)?;
        let map = map_mut(&file, self.file_size)?;
        Ok(MappedFile {
            map,
            file,
            path,
            pos: FILE_HEADER,
            allocated: FILE_HEADER,
            end: FILE_HEADER + self.file_capacity(),
        })
    }

    /// Copies `record` `count` times; returns the time spent, directory replacement excluded.
    pub fn append(&mut self, count: u64, record: &[u8]) -> Result<Duration> {
        let len = record.len() as u64;
        if len > self.file_capacity() {
            return Err("record larger than a file".into());
        }
        let mut timed = Duration::ZERO;
        let mut left = count;
        while left > 0 {
            if self.dir.is_none() || self.written + len > self.budget {
                self.start_directory()?;
            }
            let room = (self.budget.saturating_sub(self.written) / len.max(1)).max(1);
            let n = left.min(room);
            let start = Instant::now();
            for _ in 0..n {
                self.copy_one(record)?;
            }
            timed += start.elapsed();
            self.written += n * len;
            left -= n;
        }
        Ok(timed)
    }

    /// Copies one record after the last (into a new file when it does not fit), with no
    /// timing and no directory replacement: for callers that time their own loop, after
    /// [`MmapBaseline::prepare`].
    pub fn write(&mut self, record: &[u8]) -> Result<()> {
        if record.len() as u64 > self.file_capacity() {
            return Err("record larger than a file".into());
        }
        self.copy_one(record)?;
        self.written += record.len() as u64;
        Ok(())
    }

    #[inline]
    fn copy_one(&mut self, record: &[u8]) -> Result<()> {
        let len = record.len() as u64;
        let needs_new = self.current.as_ref().is_none_or(|c| c.pos + len > c.end);
        if needs_new {
            let next = self.new_file()?;
            if let Some(old) = self.current.replace(next) {
                self.full.push(old);
            }
        }
        let block_size = self.block_size;
        let Some(cur) = self.current.as_mut() else {
            return Err("no current baseline file".into());
        };
        while cur.pos + len > cur.allocated {
            StdStorage.allocate(&cur.file, &cur.path, cur.allocated, block_size)?;
            cur.allocated += block_size;
        }
        let at = cur.pos as usize;
        cur.map[at..at + record.len()].copy_from_slice(record);
        cur.pos += len;
        Ok(())
    }
}

impl Default for MmapBaseline {
    fn default() -> Self {
        Self::new()
    }
}

/// Baseline (b): a page-cache-resident file mapped read-only and pre-faulted, to copy from.
#[derive(Debug)]
pub struct PageCacheSource {
    map: Mmap,
    _file: File,
    _dir: TempDir,
}

impl PageCacheSource {
    /// A file of `len` pattern bytes, written through the page cache and mapped.
    pub fn new(len: usize) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("source.bin");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let chunk = payload(MIB);
        let mut left = len.max(1);
        while left > 0 {
            let n = left.min(chunk.len());
            file.write_all(&chunk[..n])?;
            left -= n;
        }
        let map = map_read(&file, len.max(1) as u64)?;
        // Fault every page in now, as the writer's own mapping already is for tidelog.
        let mut sum = 0u64;
        for page in map.chunks(4096) {
            sum += u64::from(page[0]);
        }
        std::hint::black_box(sum);
        Ok(PageCacheSource {
            map,
            _file: file,
            _dir: dir,
        })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// Copies `count` chunks of `dst.len()` bytes from `src` into `dst`, sequentially from
/// `*at`, wrapping at the end of `src`; returns the bytes copied.
pub fn memcpy_chunks(src: &[u8], dst: &mut [u8], count: u64, at: &mut usize) -> u64 {
    let len = dst.len();
    if len == 0 || len > src.len() {
        return 0;
    }
    for _ in 0..count {
        if *at + len > src.len() {
            *at = 0;
        }
        dst.copy_from_slice(&src[*at..*at + len]);
        std::hint::black_box(&mut *dst);
        *at += len;
    }
    count * len as u64
}

/// The plain durable append loop: records from `pool` (cycled) go to the end of `file`
/// `batch` at a time, each batch gathered into one buffer and written with one `pwrite`, then
/// made durable with one `fdatasync`, until `run` has passed or at least `max_records` are
/// written. One latency per batch (its write and its sync); every record counts.
///
/// The `durability` bench's baseline (1 or 64 records of 4 KiB per sync) and the comparison
/// benchmark's "write+fdatasync per record / per batch" ceilings.
pub fn fdatasync_appends(
    file: &File,
    pool: &[Vec<u8>],
    batch: u64,
    run: Duration,
    max_records: u64,
) -> io::Result<TimedRun> {
    let Some(first) = pool.first() else {
        return Err(io::Error::other("no records to append"));
    };
    let batch = batch.max(1);
    let mut buf = Vec::with_capacity(batch as usize * first.len());
    let mut latencies_ns = Vec::new();
    let (mut records, mut at) = (0u64, 0u64);
    let start = Instant::now();
    let deadline = start + run;
    while records < max_records {
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        buf.clear();
        for i in 0..batch {
            buf.extend_from_slice(&pool[((records + i) % pool.len() as u64) as usize]);
        }
        file.write_all_at(&buf, at)?;
        file.sync_data()?;
        latencies_ns.push(t.elapsed().as_nanos() as u64);
        at += buf.len() as u64;
        records += batch;
    }
    Ok(TimedRun {
        records,
        secs: start.elapsed().as_secs_f64(),
        latencies_ns,
    })
}

#[expect(unsafe_code, reason = "mapping a file is unsafe in memmap2")]
fn map_mut(file: &File, len: u64) -> io::Result<MmapMut> {
    let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: the file was created by this process (`create_new`) in a directory of its own,
    // is never truncated or resized while mapped, and nothing else writes it, so no one
    // changes or shrinks the bytes behind the `&mut [u8]` memmap2 hands out.
    unsafe { MmapOptions::new().len(len).map_mut(file) }
}

#[expect(unsafe_code, reason = "mapping a file is unsafe in memmap2")]
fn map_read(file: &File, len: u64) -> io::Result<Mmap> {
    let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: as in `map_mut`: a private file of this process, never changed while mapped.
    unsafe { MmapOptions::new().len(len).map(file) }
}

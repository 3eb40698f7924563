//! The ring backend: a write-ahead ring buffer on a raw block device or a preallocated file,
//! in the style of AutoMQ's Delta WAL, written with direct I/O in 4 KiB-aligned blocks.
//!
//! [`RingWal::append`] returns at once with the record's logical offset and a handle that
//! completes when the record is durable. Logical offsets grow without bound; byte `o` lives
//! at device byte `8192 + o % ring_bytes`. [`RingWal::trim`] persists the first live offset
//! in the header, which frees the space below it; [`RingWal::recover`] reads every live
//! record back. Reopening continues the log where the valid prefix ends: nothing untrimmed
//! is dropped (a per-open epoch in every block keeps stale blocks of an earlier session
//! from passing as current, so no lap has to be skipped).
//!
//! Module map: [`format`](mod@format) (every byte), `device` (open, create, probe), `writer`
//! (blocks, window, workers, completion), `scan` (recovery and read-back), `inspect`
//! (read-only inspection: [`inspect()`]).

/// The ring's bytes (docs/FORMAT.md): for the tools and tests, hidden from the docs.
#[doc(hidden)]
pub mod format;

mod config;
mod device;
pub(crate) mod entry;
mod inspect;
mod scan;
mod writer;

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::dio::AlignedBuf;
use crate::error::{Error, Result};
use crate::io::{StdStorage, Storage};
use crate::poison::Recover;
use crate::uring::Uring;
use device::Device;
use format::{
    ALIGN_BYTES, HEADER_SLOT_BYTES, HeaderProblem, RING_START, RING_VERSION, RingHeader, Shutdown,
    align_down,
};
pub use inspect::{
    CorruptionKind, HeaderSlot, InspectedRecord, JournalEntrySummary, RingCorruption,
    RingInspection, RingRecords, RingScan, inspect, inspect_with_storage,
};
pub use scan::{RecoverIter, RingRecovery};
use scan::{Scanner, Step};
use writer::{Shared, State};

pub use config::{
    BLOCK_DELAY_MAX_US, DirectIo, INFLIGHT_BLOCKS_MAX, IoEngine, RECORD_BYTES_MAX, RingConfig,
};

/// The slot holding the newest header, that header, and the aligned buffer header writes use.
#[derive(Debug)]
struct HeaderState {
    current: RingHeader,
    slot: u64,
    buf: AlignedBuf,
}

/// A write-ahead ring on a block device or file. Safe to share between threads.
#[derive(Debug)]
pub struct RingWal {
    shared: Arc<Shared>,
    header: Mutex<HeaderState>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    report: RingRecovery,
    capacity_bytes: u64,
    io_engine: &'static str,
}

/// An appended record: its offset now, its durability later.
#[derive(Debug, Clone)]
pub struct RingAppend {
    /// The record's logical offset (of its header).
    pub offset: u64,
    end: u64,
    shared: Arc<Shared>,
}

impl RingAppend {
    /// Logical offset just past the record.
    pub fn end_offset(&self) -> u64 {
        self.end
    }
    /// True once the record is durable.
    pub fn is_durable(&self) -> bool {
        self.shared.durable() >= self.end
    }
    /// Waits until the record is durable; returns the flushed offset (everything below it is
    /// durable). Fails if the write of its block (or of one before it) failed.
    pub fn wait(&self) -> Result<u64> {
        self.shared
            .wait_durable(self.end, None)
            .map(|d| d.unwrap_or(self.end))
    }
    /// As [`RingAppend::wait`], giving up after `timeout` (`Ok(None)`).
    pub fn wait_timeout(&self, timeout: Duration) -> Result<Option<u64>> {
        self.shared
            .wait_durable(self.end, Some(crate::clock::deadline_after(timeout)))
    }
}

impl RingWal {
    /// Opens (or creates, or formats) the ring at `path`, recovers where its log ends, and
    /// starts the I/O workers.
    pub fn open(path: impl AsRef<Path>, config: RingConfig) -> Result<RingWal> {
        Self::open_with_storage(path, config, Arc::new(StdStorage))
    }

    /// As [`RingWal::open`], doing all I/O through `storage`.
    ///
    /// The steps: read (or format) the header, find where the valid log ends, start a
    /// session (a header with a new epoch), then set up the writer and start its workers.
    pub fn open_with_storage(
        path: impl AsRef<Path>,
        config: RingConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<RingWal> {
        config.validate()?;
        let path = path.as_ref();
        let dev = Arc::new(Device::open(
            path,
            config.capacity_bytes,
            config.direct_io,
            storage,
        )?);
        let buffer_bytes = config.buffer_bytes();
        let buffers = config.buffer_count();
        let window_max_bytes = buffer_bytes * buffers as u64;
        let (mut hs, formatted, epoch_max) = read_or_format(&dev, &config)?;
        let header = hs.current;
        let capacity_bytes = header.capacity_bytes;
        let ring_bytes = capacity_bytes - RING_START;
        let window_max_bytes = window_max_bytes.min(ring_bytes);
        let clean_before = header.shutdown == Shutdown::Clean && !formatted;
        let (report, block_starts) = find_log_end(&dev, path, &header, clean_before, epoch_max)?;
        let epoch = start_session(&dev, &mut hs, epoch_max, window_max_bytes)?;
        let bufs = block_buffers(buffers, buffer_bytes, path)?;
        let state = State::new(
            report.end_offset,
            header.trim_offset,
            header.trim_block_offset,
            block_starts,
            bufs,
        );
        let uring = set_up_uring(&config, &dev, path)?;
        let shared = Arc::new(Shared::new(
            dev,
            ring_bytes,
            header.ring_id,
            epoch,
            config.block_bytes as usize,
            Duration::from_micros(config.block_delay_us),
            config.seal_when_idle,
            config.max_record_bytes as usize,
            state,
            uring.as_ref().map(|(u, _)| u.waker()),
        ));
        let io_engine = if uring.is_some() {
            "io_uring"
        } else {
            "threads"
        };
        let workers = start_workers(&shared, uring, config.inflight_blocks, path)?;
        Ok(RingWal {
            shared,
            header: Mutex::new(hs),
            workers: Mutex::new(workers),
            report,
            capacity_bytes,
            io_engine,
        })
    }

    /// Appends one record. Fails at once with [`Error::RingFull`] when the ring has no room.
    /// While every block buffer is out (writes in flight), waits for one up to 5 s, then
    /// fails with [`Error::RingFull`] too.
    pub fn append(&self, data: &[u8]) -> Result<RingAppend> {
        self.append_inner(data, None)
    }

    /// Appends one record, waiting up to `space_wait` for a trim to make room (and for a free
    /// block buffer up to `space_wait` or 5 s, whichever is longer).
    pub fn append_wait(&self, data: &[u8], space_wait: Duration) -> Result<RingAppend> {
        self.append_inner(data, Some(space_wait))
    }

    fn append_inner(&self, data: &[u8], space_wait: Option<Duration>) -> Result<RingAppend> {
        let (offset, end) = self.shared.append(data, space_wait)?;
        Ok(RingAppend {
            offset,
            end,
            shared: self.shared.clone(),
        })
    }

    /// Writes the open block now and waits until everything appended is durable; returns the
    /// flushed offset.
    pub fn flush(&self) -> Result<u64> {
        let end = self.shared.seal_for_flush()?;
        self.shared
            .wait_durable(end, None)
            .map(|d| d.unwrap_or(end))
    }

    /// Discards every record at an offset below `offset` and persists that in the header;
    /// the space is reusable once this returns. `offset` must not pass the flushed offset.
    /// A smaller offset than the current trim is a no-op. When no record lies at or past
    /// `offset` and everything is durable, the trim moves on to the flushed offset, so the
    /// space of the last block's tail and of padding is freed too.
    pub fn trim(&self, offset: u64) -> Result<()> {
        self.shared.check_not_forked()?;
        let mut hs = self.header.lock().recover();
        let (offset, block) = {
            let st = self.shared.lock();
            if let Some(f) = st.failure {
                return Err(self.shared.poisoned(f));
            }
            if st.closing {
                return Err(Error::Closed);
            }
            if offset < st.trim_offset {
                return Ok(());
            }
            let durable = self.shared.durable();
            if offset > durable {
                return Err(Error::invalid(
                    "offset",
                    format!("{offset} is past the flushed offset {durable}"),
                ));
            }
            let (offset, block) = if offset >= st.appended_end && st.all_written(durable) {
                (durable, durable)
            } else {
                // The last block starting at or below `offset`: a point recovery can parse
                // from.
                let i = st.block_starts.partition_point(|&s| s <= offset);
                let listed = i.checked_sub(1).map(|i| st.block_starts[i]);
                let block = match listed {
                    Some(s) if durable > offset || s == durable => s,
                    _ => durable,
                };
                (offset, block)
            };
            if offset == st.trim_offset && block <= st.trim_block {
                return Ok(());
            }
            (offset, block)
        };
        let next = RingHeader {
            trim_offset: offset,
            trim_block_offset: block,
            ..hs.current
        };
        if let Err(e) = write_header(&self.shared.dev, &mut hs, next) {
            let mut st = self.shared.lock();
            self.shared
                .fail(&mut st, "ring header write", e.errno(), u64::MAX);
            return Err(e);
        }
        let mut st = self.shared.lock();
        self.shared.trimmed(&mut st, offset, block);
        Ok(())
    }

    /// Discards every record: flushes, then trims to the flushed offset. Returns it.
    pub fn reset(&self) -> Result<u64> {
        let end = self.flush()?;
        self.trim(end)?;
        Ok(end)
    }

    /// Reads back every live record, `(offset, body)`, from the trim offset up to the
    /// flushed offset as of this call. Each record is validated again as it is read.
    pub fn recover(&self) -> Result<RecoverIter> {
        self.shared.check_not_forked()?;
        let (trim_offset, trim_block) = {
            let st = self.shared.lock();
            if st.closing {
                return Err(Error::Closed);
            }
            (st.trim_offset, st.trim_block)
        };
        let scanner = Scanner::new(
            self.shared.dev.clone(),
            self.shared.ring_bytes,
            self.shared.ring_id,
            self.shared.epoch,
            trim_block,
            self.shared.durable(),
        )?;
        let shared = self.shared.clone();
        Ok(RecoverIter::new(
            scanner,
            trim_offset,
            Box::new(move |at| shared.lock().trim_block > at),
        ))
    }

    /// The ring's id, chosen at format time (never that of the ring formatted before).
    pub fn ring_id(&self) -> u32 {
        self.shared.ring_id
    }

    /// What the scan at open found.
    pub fn recovery_report(&self) -> &RingRecovery {
        &self.report
    }
    /// Total bytes of the device or file in use, header slots included.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
    /// Bytes of the record ring (capacity less the two header slots).
    pub fn ring_bytes(&self) -> u64 {
        self.shared.ring_bytes
    }
    /// The persisted trim offset: records below it are gone.
    pub fn trim_offset(&self) -> u64 {
        self.shared.lock().trim_offset
    }
    /// The logical offset just past the last appended record.
    pub fn next_offset(&self) -> u64 {
        self.shared.lock().appended_end
    }
    /// Everything below this logical offset is durable.
    pub fn flushed_offset(&self) -> u64 {
        self.shared.durable()
    }
    /// Ring bytes free for new blocks.
    pub fn free_bytes(&self) -> u64 {
        let st = self.shared.lock();
        self.shared.free_bytes(&st)
    }
    /// True when the ring writes with `O_DIRECT`.
    pub fn direct_io(&self) -> bool {
        self.shared.dev.direct
    }
    /// How block writes are issued: `"io_uring"` or `"threads"`.
    pub fn io_engine(&self) -> &'static str {
        self.io_engine
    }
    /// The device or file.
    pub fn path(&self) -> &Path {
        &self.shared.dev.path
    }
    /// True after [`RingWal::close`] (false in a forked child, which cannot close it).
    pub fn is_closed(&self) -> bool {
        !self.shared.is_forked() && self.shared.lock().closing
    }

    /// Writes every appended record, stops the workers and records a clean shutdown.
    /// Idempotent. Fails if a write failed (the header then still says unclean).
    ///
    /// Every call on a ring inherited across `fork` fails with
    /// [`Error::Forked`](crate::Error::Forked) in the child, and dropping it there writes
    /// nothing and joins no thread: the parent's workers, header and records stay the
    /// parent's.
    pub fn close(&self) -> Result<()> {
        self.shared.check_not_forked()?;
        let mut hs = self.header.lock().recover();
        let first = self.shared.begin_close();
        let workers = std::mem::take(&mut *self.workers.lock().recover());
        for h in workers {
            let _ = h.join();
        }
        if !first {
            return Ok(());
        }
        let failure = self.shared.lock().failure;
        let result = match failure {
            Some(f) => Err(self.shared.poisoned(f)),
            None => {
                let end = self.shared.lock().reserved_end();
                debug_assert_eq!(self.shared.durable(), end);
                let clean = RingHeader {
                    shutdown: Shutdown::Clean,
                    clean_end_offset: end,
                    ..hs.current
                };
                write_header(&self.shared.dev, &mut hs, clean)
            }
        };
        self.shared.dev.unlock();
        result
    }
}

impl Drop for RingWal {
    fn drop(&mut self) {
        if self.shared.is_forked() {
            // The handles name the parent's threads: neither join nor detach them.
            let workers = self.workers.get_mut().recover();
            std::mem::forget(std::mem::take(workers));
            return;
        }
        let _ = self.close();
    }
}

/// Finds where the valid log ends: scans the blocks from the trim point, counts the
/// well-formed blocks past the end, and fails when the block the scan stopped on was
/// acknowledged. Returns the report and the start of every block before the end.
/// `clean_before`: the ring was closed cleanly (and not formatted by this open).
fn find_log_end(
    dev: &Arc<Device>,
    path: &Path,
    header: &RingHeader,
    clean_before: bool,
    epoch_max: u32,
) -> Result<(RingRecovery, VecDeque<u64>)> {
    let ring_bytes = header.capacity_bytes - RING_START;
    let mut report = RingRecovery {
        records: 0,
        record_bytes: 0,
        blocks: 0,
        start_offset: header.trim_block_offset,
        end_offset: header.trim_block_offset,
        stop_reason: String::new(),
        blocks_past_end: 0,
        clean_shutdown: clean_before,
        clean_end_offset: clean_before.then_some(header.clean_end_offset),
    };
    let limit = header.trim_block_offset + ring_bytes;
    let mut scanner = Scanner::new(
        Arc::clone(dev),
        ring_bytes,
        header.ring_id,
        epoch_max,
        header.trim_block_offset,
        limit,
    )?;
    let block_starts = scan_blocks(&mut scanner, header.trim_offset, &mut report)?;
    debug_assert!(report.end_offset <= limit, "the scan stops at its limit");
    let room = limit - report.end_offset;
    report.blocks_past_end =
        scanner.count_blocks_past(report.end_offset, header.window_max_bytes.min(room))?;
    check_end_unacknowledged(&mut scanner, header, &report, path)?;
    Ok((report, block_starts))
}

/// Reads blocks until the scan ends, counting into `report` the blocks and the records at
/// or past `trim_offset`, and setting where and why it ended. Returns each block's start.
fn scan_blocks(
    scanner: &mut Scanner,
    trim_offset: u64,
    report: &mut RingRecovery,
) -> Result<VecDeque<u64>> {
    let mut block_starts = VecDeque::new();
    loop {
        match scanner.next_block()? {
            Step::Data { start, records, .. } => {
                block_starts.push_back(start);
                report.blocks += 1;
                for r in records {
                    if r.offset >= trim_offset {
                        report.records += 1;
                        report.record_bytes += r.body.len() as u64;
                    }
                }
            }
            Step::Pad { start } => {
                block_starts.push_back(start);
                report.blocks += 1;
            }
            Step::End { at, reason } => {
                report.end_offset = at;
                report.stop_reason = reason;
                return Ok(block_starts);
            }
        }
    }
}

/// Fails when the block the scan stopped on (`report.end_offset`) was acknowledged. A block
/// that failed is the end of the log only if it was never acknowledged: a clean close past
/// it, or a later block, proving otherwise means damage, reported, never a log cut short.
fn check_end_unacknowledged(
    scanner: &mut Scanner,
    header: &RingHeader,
    report: &RingRecovery,
    path: &Path,
) -> Result<()> {
    let proof = if report.clean_shutdown {
        (report.end_offset < header.clean_end_offset)
            .then(|| format!("the ring was closed cleanly at {}", header.clean_end_offset))
    } else {
        scanner
            .acknowledged_past(report.end_offset, header.window_max_bytes)?
            .map(|at| format!("the block at {at}, written after it, shows it was acknowledged"))
    };
    let Some(proof) = proof else {
        return Ok(());
    };
    let ring_bytes = header.capacity_bytes - RING_START;
    Err(Error::Corruption {
        topic: String::new(),
        offset: report.end_offset,
        path: path.to_owned(),
        position: RING_START + report.end_offset % ring_bytes,
        reason: format!(
            "ring block at logical offset {} is damaged ({}); {proof}",
            report.end_offset, report.stop_reason
        ),
    })
}

/// Starts a new session: writes a header whose epoch is above any block the scan accepted
/// (`epoch_max`), marked unclean, its window at least `window_max_bytes`. Returns the
/// epoch the session's blocks carry.
fn start_session(
    dev: &Device,
    hs: &mut HeaderState,
    epoch_max: u32,
    window_max_bytes: u64,
) -> Result<u32> {
    let header = hs.current;
    let epoch = epoch_max
        .checked_add(1)
        .ok_or_else(|| Error::invalid("epoch", "the ring was opened 2^32 times"))?;
    write_header(
        dev,
        hs,
        RingHeader {
            epoch,
            shutdown: Shutdown::Unclean,
            window_max_bytes: header.window_max_bytes.max(window_max_bytes),
            clean_end_offset: 0,
            ..header
        },
    )?;
    Ok(epoch)
}

/// Allocates the writer's `count` block buffers of `bytes` each.
fn block_buffers(count: usize, bytes: u64, path: &Path) -> Result<Vec<AlignedBuf>> {
    let mut bufs = Vec::with_capacity(count);
    for _ in 0..count {
        bufs.push(
            AlignedBuf::zeroed(bytes as usize)
                .map_err(|e| Error::io("allocate block buffers", path, e))?,
        );
    }
    Ok(bufs)
}

/// The io_uring instance and the device's descriptor when `config.io_engine` asks for
/// io_uring and it can be set up; `None` for threads. `IoUring` fails where io_uring
/// cannot be used; `Auto` falls back to threads.
fn set_up_uring(config: &RingConfig, dev: &Device, path: &Path) -> Result<Option<(Uring, RawFd)>> {
    match (config.io_engine, dev.raw_fd()) {
        (IoEngine::Threads, _) => Ok(None),
        (IoEngine::Auto, None) => Ok(None),
        (IoEngine::IoUring, None) => Err(Error::invalid(
            "io_engine",
            "io_uring needs the real file system storage layer",
        )),
        (engine, Some(fd)) => match Uring::new(config.inflight_blocks as u32) {
            Ok(u) => Ok(Some((u, fd))),
            Err(e) if engine == IoEngine::IoUring => Err(Error::io("set up io_uring", path, e)),
            Err(_) => Ok(None),
        },
    }
}

/// Starts the I/O workers: one io_uring thread, or `inflight_blocks` threads. If a thread
/// fails to start, the ones started are closed and joined.
fn start_workers(
    shared: &Arc<Shared>,
    uring: Option<(Uring, RawFd)>,
    inflight_blocks: usize,
    path: &Path,
) -> Result<Vec<JoinHandle<()>>> {
    let spawn =
        |name: String, f: Box<dyn FnOnce() + Send>| std::thread::Builder::new().name(name).spawn(f);
    let mut spawned = Vec::new();
    match uring {
        Some((u, fd)) => {
            let (s, depth) = (shared.clone(), inflight_blocks);
            spawned.push(spawn(
                "tidelog-ring-uring".into(),
                Box::new(move || writer::uring_worker(s, u, fd, depth)),
            ));
        }
        None => {
            for i in 0..inflight_blocks {
                let s = shared.clone();
                spawned.push(spawn(
                    format!("tidelog-ring-io-{i}"),
                    Box::new(move || writer::worker(s)),
                ));
            }
        }
    }
    let mut workers = Vec::with_capacity(inflight_blocks);
    for r in spawned {
        match r {
            Ok(h) => workers.push(h),
            Err(e) => {
                shared.begin_close();
                for h in workers {
                    let _ = h.join();
                }
                return Err(Error::io("spawn ring I/O thread", path, e));
            }
        }
    }
    Ok(workers)
}

/// A random ring id, never 0 and never `avoid`.
fn new_ring_id(avoid: &[u32]) -> u32 {
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let id = (h.finish() >> 32) as u32;
        if id != 0 && !avoid.contains(&id) {
            return id;
        }
    }
}

/// Both header slots as decoded: each the header or why it is not one.
type Slots = [std::result::Result<RingHeader, HeaderProblem>; 2];

/// Reads and decodes both header slots.
fn read_slots(dev: &Device) -> Result<Slots> {
    let mut slots = AlignedBuf::zeroed((2 * HEADER_SLOT_BYTES) as usize)
        .map_err(|e| Error::io("allocate header buffer", &dev.path, e))?;
    let got = dev
        .read_at(&mut slots, 0)
        .map_err(|e| Error::io("read ring header", &dev.path, e))?;
    let unit = HEADER_SLOT_BYTES as usize;
    Ok([
        RingHeader::decode(&slots[..got.min(unit)]),
        RingHeader::decode(&slots[unit..got.max(unit)]),
    ])
}

/// The valid slot with the largest generation, and its header.
fn newest_slot(decoded: &Slots) -> Option<(u64, RingHeader)> {
    decoded
        .iter()
        .enumerate()
        .filter_map(|(i, h)| h.as_ref().ok().map(|h| (i as u64, *h)))
        .max_by_key(|(_, h)| h.generation)
}

/// Reads both header slots and returns the newest valid header, or formats the target.
/// The bool is true when this call formatted it; the `u32` is the highest epoch a block may
/// carry: the header's, or one more when the other slot is damaged (it may have been the
/// newer header, written by an open whose session's blocks carry the next epoch; without
/// this, those acknowledged blocks would read as the end of the log).
fn read_or_format(dev: &Device, config: &RingConfig) -> Result<(HeaderState, bool, u32)> {
    let decoded = read_slots(dev)?;
    let newest = newest_slot(&decoded);
    let unit = HEADER_SLOT_BYTES as usize;

    if dev.created || config.format {
        let capacity = match config.capacity_bytes {
            Some(c) => c,
            None if dev.is_block_device => align_down(dev.size_bytes),
            None => dev.size_bytes,
        };
        if capacity < format::CAPACITY_MIN || capacity % ALIGN_BYTES != 0 {
            return Err(Error::invalid(
                "capacity",
                format!("{capacity} bytes is not a valid ring capacity"),
            ));
        }
        let old_ids: Vec<u32> = decoded
            .iter()
            .filter_map(|h| h.as_ref().ok().map(|h| h.ring_id))
            .collect();
        let header = RingHeader {
            version: RING_VERSION,
            capacity_bytes: capacity,
            align_bytes: ALIGN_BYTES as u32,
            ring_id: new_ring_id(&old_ids),
            generation: newest.map_or(0, |(_, h)| h.generation) + 1,
            epoch: 0,
            shutdown: Shutdown::Clean,
            trim_offset: 0,
            trim_block_offset: 0,
            window_max_bytes: 0,
            clean_end_offset: 0,
        };
        // Slot 1 is cleared first, so a crash mid-format leaves no mix of old and new.
        let zero = AlignedBuf::zeroed(unit)
            .map_err(|e| Error::io("allocate header buffer", &dev.path, e))?;
        dev.write_at(&zero, HEADER_SLOT_BYTES)
            .map_err(|e| Error::io("format ring header", &dev.path, e))?;
        let mut hs = HeaderState {
            current: header,
            slot: 1,
            buf: zero,
        };
        write_header(dev, &mut hs, header)?;
        return Ok((hs, true, 0));
    }

    let (slot, header) = current_header(dev, &decoded, config.capacity_bytes)?;
    let other_damaged = match &decoded[1 - slot as usize] {
        Ok(_) | Err(HeaderProblem::Zero) => false,
        Err(_) => true,
    };
    let epoch_max = if other_damaged {
        header.epoch.saturating_add(1)
    } else {
        header.epoch
    };
    Ok((
        HeaderState {
            current: header,
            slot,
            buf: AlignedBuf::zeroed(unit)
                .map_err(|e| Error::io("allocate header buffer", &dev.path, e))?,
        },
        false,
        epoch_max,
    ))
}

/// The current header of an existing ring (the newest valid slot), checked against the
/// target's size, `capacity_bytes` if given, and itself.
fn current_header(
    dev: &Device,
    decoded: &Slots,
    capacity_bytes: Option<u64>,
) -> Result<(u64, RingHeader)> {
    for h in decoded {
        if let Err(HeaderProblem::Version(found)) = h {
            return Err(Error::UnsupportedVersion {
                path: dev.path.clone(),
                found: *found,
                supported: RING_VERSION,
            });
        }
    }
    let Some((slot, header)) = newest_slot(decoded) else {
        return Err(not_formatted(dev, decoded));
    };
    check_capacity(dev, &header, capacity_bytes)?;
    let sane = u64::from(header.align_bytes) == ALIGN_BYTES
        && header.capacity_bytes >= format::CAPACITY_MIN
        && header.capacity_bytes % ALIGN_BYTES == 0
        && header.trim_block_offset % ALIGN_BYTES == 0
        && header.trim_block_offset <= header.trim_offset;
    if !sane {
        return Err(Error::Corruption {
            topic: String::new(),
            offset: header.trim_offset,
            path: dev.path.clone(),
            position: slot * HEADER_SLOT_BYTES,
            reason: "ring header fields are inconsistent".into(),
        });
    }
    Ok((slot, header))
}

/// The error for a target whose header slots hold no valid header: both empty, or why each
/// fails.
fn not_formatted(dev: &Device, decoded: &Slots) -> Error {
    let reason = match *decoded {
        [Err(HeaderProblem::Zero), Err(HeaderProblem::Zero)] => {
            "both header slots are empty".to_owned()
        }
        [a, b] => {
            let why = |h: &std::result::Result<RingHeader, HeaderProblem>| match h {
                Ok(_) => "valid".to_owned(),
                Err(p) => p.to_string(),
            };
            format!("no valid header (slot 0: {}, slot 1: {})", why(&a), why(&b))
        }
    };
    Error::NotFormatted {
        path: dev.path.clone(),
        reason,
    }
}

/// Checks the header's capacity against `capacity_bytes` if given, and against the
/// target: a file's size must match it, a device must hold it.
fn check_capacity(dev: &Device, header: &RingHeader, capacity_bytes: Option<u64>) -> Result<()> {
    let mismatch = |what, expected, found| {
        Err(Error::CapacityMismatch {
            path: dev.path.clone(),
            what,
            expected,
            found,
        })
    };
    if let Some(c) = capacity_bytes
        && c != header.capacity_bytes
    {
        return mismatch(
            "capacity and the ring header's capacity",
            c,
            header.capacity_bytes,
        );
    }
    if !dev.is_block_device && header.capacity_bytes != dev.size_bytes {
        return mismatch(
            "the ring header's capacity and the file size",
            header.capacity_bytes,
            dev.size_bytes,
        );
    }
    if dev.is_block_device && header.capacity_bytes > dev.size_bytes {
        return mismatch(
            "the ring header's capacity and the device size",
            header.capacity_bytes,
            dev.size_bytes,
        );
    }
    Ok(())
}

/// Writes `next` (with the next generation) to the slot that does not hold the newest header,
/// so a torn write never loses it. Durable on return.
fn write_header(dev: &Device, hs: &mut HeaderState, next: RingHeader) -> Result<()> {
    let header = RingHeader {
        generation: hs.current.generation + 1,
        ..next
    };
    let target = 1 - hs.slot;
    hs.buf.fill(0);
    hs.buf[..format::RH_LEN].copy_from_slice(&header.encode());
    dev.write_at(&hs.buf, target * HEADER_SLOT_BYTES)
        .map_err(|e| Error::io("write ring header", &dev.path, e))?;
    hs.current = header;
    hs.slot = target;
    Ok(())
}

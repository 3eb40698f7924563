//! The write path: records packed into aligned blocks, a bounded window of blocks in flight,
//! I/O workers, and completion strictly in offset order.
//!
//! An append checksums its record outside any lock, then, under the state lock, copies it
//! into the open block (one `memcpy`). A block is sealed when it reaches the size threshold,
//! or by a worker once it has been open for the time threshold. Workers write sealed blocks
//! with `O_DSYNC` (durable on return), at most one block each, so at most
//! `inflight_blocks` are in flight. A completed block is acknowledged only once every block
//! before it is: the durable offset is the end of the contiguous written prefix.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::device::Device;
use super::format::{
    ALIGN_BYTES, BH_LEN, BLOCK_KIND_DATA, BLOCK_KIND_PAD, BlockHeader, RING_START, RR_HEADER_LEN,
    align_up, encode_record,
};
use crate::dio::AlignedBuf;
use crate::error::{Error, Result};
use crate::poison::Recover;
use crate::status::Status as Opener;
use crate::uring::{Uring, Waker};
use std::os::fd::RawFd;

/// Longest an append waits for a free block buffer while every buffer is out (the window's
/// back-pressure), unless its own space wait is longer. A completed block write frees one at
/// once; a device that completes none for this long fails the append with
/// [`Error::RingFull`] (nothing written), which callers retry like a full ring, instead of
/// holding its caller, and the topic lock the journal writes under, without end.
pub(crate) const BUFFER_WAIT: Duration = Duration::from_secs(5);

/// Everything the appenders, workers and handles share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub dev: Arc<Device>,
    pub ring_bytes: u64,
    pub ring_id: u32,
    pub epoch: u32,
    pub soft_block_bytes: usize,
    pub block_delay: Duration,
    /// Seal the open block at once when no block is queued or in flight.
    pub seal_when_idle: bool,
    pub max_record_bytes: usize,
    pub state: Mutex<State>,
    /// Workers wait here for a block to write.
    work_cv: Condvar,
    /// Appenders wait here for a free buffer or for ring space.
    space_cv: Condvar,
    /// End of the contiguous durable prefix (a block boundary).
    durable: AtomicU64,
    /// Set once a write failed; the details are in [`State::failure`].
    failed: AtomicBool,
    done_lock: Mutex<()>,
    done_cv: Condvar,
    /// Wakes the io_uring worker out of the kernel (threads wait on `work_cv` only).
    waker: Option<Waker>,
    /// The opening process: a forked child has none of the workers, and its copies of the
    /// locks may be frozen mid-critical-section, so it takes none of them.
    opener: Opener,
}

/// The first failed write: nothing at or past `at` is durable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failure {
    pub op: &'static str,
    pub errno: Option<i32>,
    pub at: u64,
}

#[derive(Debug)]
struct OpenBlock {
    start: u64,
    buf: AlignedBuf,
    /// Bytes filled, block header included.
    used: usize,
    records: u32,
    /// Aligned size this block may grow to (buffer, lap end and free space).
    max_bytes: usize,
    opened: Instant,
}

impl OpenBlock {
    fn fits(&self, record_bytes: usize, soft_bytes: usize) -> bool {
        let grown = self.used + record_bytes;
        align_up(grown as u64) as usize <= self.max_bytes
            && (self.records == 0 || grown <= soft_bytes)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Queued,
    Writing,
    Done,
}

#[derive(Debug)]
struct Pending {
    start: u64,
    /// Aligned logical end (for padding: the lap end).
    end: u64,
    write_bytes: usize,
    buf: Option<AlignedBuf>,
    status: Status,
}

/// State under [`Shared::state`].
#[derive(Debug)]
pub(crate) struct State {
    cur: Option<OpenBlock>,
    /// Where the block after `cur` (or the next block, if none is open) starts.
    next_block_start: u64,
    free_bufs: Vec<AlignedBuf>,
    /// Sealed blocks not yet acknowledged, in offset order.
    pending: VecDeque<Pending>,
    /// Starts of the blocks not yet trimmed away, in offset order.
    pub block_starts: VecDeque<u64>,
    /// Persisted trim offset and the block holding it.
    pub trim_offset: u64,
    pub trim_block: u64,
    /// End of the last appended record.
    pub appended_end: u64,
    pub failure: Option<Failure>,
    pub closing: bool,
}

impl State {
    pub fn new(
        end: u64,
        trim_offset: u64,
        trim_block: u64,
        block_starts: VecDeque<u64>,
        bufs: Vec<AlignedBuf>,
    ) -> State {
        State {
            cur: None,
            next_block_start: end,
            free_bufs: bufs,
            pending: VecDeque::new(),
            block_starts,
            trim_offset,
            trim_block,
            appended_end: end,
            failure: None,
            closing: false,
        }
    }

    /// True when no block is open and every sealed block is durable (`durable` reached
    /// the next block's start).
    pub fn all_written(&self, durable: u64) -> bool {
        self.cur.is_none() && durable == self.next_block_start
    }

    /// Logical end of everything reserved so far (the open block rounded up).
    pub fn reserved_end(&self) -> u64 {
        match &self.cur {
            Some(c) => c.start + align_up(c.used as u64),
            None => self.next_block_start,
        }
    }

    /// Where the durable prefix ends as the block at `start` is sealed: the first sealed
    /// block not yet acknowledged, or `start` when none is pending (every block before it
    /// is durable). Blocks leave `pending` only once they and all before them are durable.
    fn durable_frontier(&self, start: u64) -> u64 {
        self.pending.front().map_or(start, |p| p.start).min(start)
    }

    fn seal_current(&mut self, ring_id: u32, epoch: u32) {
        let Some(mut cur) = self.cur.take() else {
            return;
        };
        debug_assert!(cur.records > 0);
        let aligned = align_up(cur.used as u64) as usize;
        BlockHeader {
            kind: BLOCK_KIND_DATA,
            start_offset: cur.start,
            ring_id,
            epoch,
            payload_bytes: (cur.used - BH_LEN) as u32,
            record_count: cur.records,
            durable_before: Some(self.durable_frontier(cur.start)),
        }
        .encode_into(&mut cur.buf[..BH_LEN]);
        // Zero the alignment tail: no stale bytes from earlier blocks reach the device.
        cur.buf[cur.used..aligned].fill(0);
        let end = cur.start + aligned as u64;
        self.pending.push_back(Pending {
            start: cur.start,
            end,
            write_bytes: aligned,
            buf: Some(cur.buf),
            status: Status::Queued,
        });
        self.next_block_start = end;
    }

    fn push_padding(&mut self, start: u64, lap_end: u64, mut buf: AlignedBuf, id: (u32, u32)) {
        let unit = ALIGN_BYTES as usize;
        buf[..unit].fill(0);
        BlockHeader {
            kind: BLOCK_KIND_PAD,
            start_offset: start,
            ring_id: id.0,
            epoch: id.1,
            payload_bytes: 0,
            record_count: 0,
            durable_before: Some(self.durable_frontier(start)),
        }
        .encode_into(&mut buf[..BH_LEN]);
        self.block_starts.push_back(start);
        self.pending.push_back(Pending {
            start,
            end: lap_end,
            write_bytes: unit,
            buf: Some(buf),
            status: Status::Queued,
        });
        self.next_block_start = lap_end;
    }

    fn take_queued(&mut self) -> Option<Job> {
        let p = self
            .pending
            .iter_mut()
            .find(|p| p.status == Status::Queued)?;
        p.status = Status::Writing;
        let buf = p.buf.take()?;
        Some((p.start, p.write_bytes, buf))
    }

    fn has_queued(&self) -> bool {
        self.pending.iter().any(|p| p.status == Status::Queued)
    }
}

impl Shared {
    #[expect(clippy::too_many_arguments, reason = "one constructor for one struct")]
    pub fn new(
        dev: Arc<Device>,
        ring_bytes: u64,
        ring_id: u32,
        epoch: u32,
        soft_block_bytes: usize,
        block_delay: Duration,
        seal_when_idle: bool,
        max_record_bytes: usize,
        state: State,
        waker: Option<Waker>,
    ) -> Shared {
        let durable = state.next_block_start;
        Shared {
            dev,
            ring_bytes,
            ring_id,
            epoch,
            soft_block_bytes,
            block_delay,
            seal_when_idle,
            max_record_bytes,
            state: Mutex::new(state),
            work_cv: Condvar::new(),
            space_cv: Condvar::new(),
            durable: AtomicU64::new(durable),
            failed: AtomicBool::new(false),
            done_lock: Mutex::new(()),
            done_cv: Condvar::new(),
            waker,
            opener: Opener::new(false),
        }
    }

    /// [`Error::Forked`] in a process forked after the ring was opened.
    pub fn check_not_forked(&self) -> Result<()> {
        self.opener.check_not_forked()
    }

    /// True in a process forked after the ring was opened.
    pub fn is_forked(&self) -> bool {
        self.opener.is_forked()
    }

    /// Tells the workers there is work: a sealed block, a block whose timer started, a close.
    fn notify_work(&self, all: bool) {
        if all {
            self.work_cv.notify_all();
        } else {
            self.work_cv.notify_one();
        }
        if let Some(w) = &self.waker {
            w.wake();
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().recover()
    }

    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    pub fn poisoned(&self, f: Failure) -> Error {
        Error::Poisoned {
            op: f.op,
            path: self.dev.path.clone(),
            errno: f.errno,
        }
    }

    fn check_open(&self, st: &State) -> Result<()> {
        if let Some(f) = st.failure {
            return Err(self.poisoned(f));
        }
        if st.closing {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Records a failed durable write at logical `at` and wakes everyone who waits.
    pub fn fail(&self, st: &mut State, op: &'static str, errno: Option<i32>, at: u64) {
        if st.failure.is_none_or(|f| at < f.at) {
            st.failure = Some(Failure { op, errno, at });
        }
        self.failed.store(true, Ordering::Release);
        self.space_cv.notify_all();
        self.notify_work(true);
        self.notify_done();
    }

    fn notify_done(&self) {
        let _g = self.done_lock.lock().recover();
        self.done_cv.notify_all();
    }

    /// Ring bytes free for new blocks.
    pub fn free_bytes(&self, st: &State) -> u64 {
        self.ring_bytes
            .saturating_sub(st.reserved_end().saturating_sub(st.trim_block))
    }

    /// Appends one record; returns its offset and end. With `space_wait`, waits up to that
    /// long for a trim to make room instead of failing with [`Error::RingFull`] at once.
    /// Waits for a free block buffer up to [`BUFFER_WAIT`] (or `space_wait`, if longer), then
    /// fails with [`Error::RingFull`] too.
    pub fn append(&self, data: &[u8], space_wait: Option<Duration>) -> Result<(u64, u64)> {
        self.check_not_forked()?;
        if data.len() > self.max_record_bytes {
            return Err(Error::limit(
                "max_record_bytes",
                data.len() as u64,
                self.max_record_bytes as u64,
            ));
        }
        let record_bytes = RR_HEADER_LEN + data.len();
        let block_bytes = align_up((BH_LEN + record_bytes) as u64);
        if block_bytes > self.ring_bytes {
            return Err(Error::limit("ring_bytes", block_bytes, self.ring_bytes));
        }
        let crc = crc32fast::hash(data);
        let deadline = space_wait.map(crate::clock::deadline_after);
        let buffer_deadline =
            crate::clock::deadline_after(BUFFER_WAIT.max(space_wait.unwrap_or(Duration::ZERO)));
        let mut st = self.lock();
        loop {
            self.check_open(&st)?;
            if let Some(cur) = st.cur.as_mut() {
                if cur.fits(record_bytes, self.soft_block_bytes) {
                    let offset = cur.start + cur.used as u64;
                    encode_record(
                        &mut cur.buf[cur.used..cur.used + record_bytes],
                        offset,
                        data,
                        crc,
                    );
                    cur.used += record_bytes;
                    cur.records += 1;
                    let first = cur.records == 1;
                    let full = cur.used >= self.soft_block_bytes;
                    let end = offset + record_bytes as u64;
                    st.appended_end = end;
                    if full {
                        st.seal_current(self.ring_id, self.epoch);
                    }
                    if full || first {
                        self.notify_work(false);
                    }
                    return Ok((offset, end));
                }
                st.seal_current(self.ring_id, self.epoch);
                self.notify_work(false);
            }
            let start = st.next_block_start;
            let lap_end = start - start % self.ring_bytes + self.ring_bytes;
            let need = align_up((BH_LEN + record_bytes) as u64);
            let pad = need > lap_end - start;
            // Padding goes in as soon as it fits on its own: the record then waits at the
            // lap start for a trim past the padding (demanding room for both at once would
            // never succeed for a record longer than the ring's used part).
            let end_needed = if pad { lap_end } else { start + need };
            if end_needed > st.trim_block + self.ring_bytes {
                let full = Error::RingFull {
                    requested_bytes: end_needed - start,
                    free_bytes: self.free_bytes(&st),
                };
                let Some(deadline) = deadline else {
                    return Err(full);
                };
                let now = Instant::now();
                if now >= deadline {
                    return Err(full);
                }
                st = self.space_cv.wait_timeout(st, deadline - now).recover().0;
                continue;
            }
            let Some(buf) = st.free_bufs.pop() else {
                // Every buffer is out: a completion, a failure or close wakes this.
                let now = Instant::now();
                if now >= buffer_deadline {
                    return Err(Error::RingFull {
                        requested_bytes: end_needed - start,
                        free_bytes: self.free_bytes(&st),
                    });
                }
                st = self
                    .space_cv
                    .wait_timeout(st, buffer_deadline - now)
                    .recover()
                    .0;
                continue;
            };
            if pad {
                st.push_padding(start, lap_end, buf, (self.ring_id, self.epoch));
                self.notify_work(false);
                continue;
            }
            let max_bytes = (buf.len() as u64)
                .min(lap_end - start)
                .min(st.trim_block + self.ring_bytes - start) as usize;
            st.block_starts.push_back(start);
            st.cur = Some(OpenBlock {
                start,
                buf,
                used: BH_LEN,
                records: 0,
                max_bytes,
                opened: Instant::now(),
            });
        }
    }

    /// Seals the open block and returns the offset everything appended so far ends at.
    pub fn seal_for_flush(&self) -> Result<u64> {
        self.check_not_forked()?;
        let mut st = self.lock();
        self.check_open(&st)?;
        if st.cur.is_some() {
            st.seal_current(self.ring_id, self.epoch);
            self.notify_work(true);
        }
        Ok(st.next_block_start)
    }

    /// Waits until everything below `end` is durable, or `deadline` passes (`Ok(None)`).
    pub fn wait_durable(&self, end: u64, deadline: Option<Instant>) -> Result<Option<u64>> {
        // A forked child has no worker that could make anything durable.
        self.check_not_forked()?;
        loop {
            let d = self.durable();
            if d >= end {
                return Ok(Some(d));
            }
            if self.failed.load(Ordering::Acquire)
                && let Some(f) = self.lock().failure
                && end > f.at
            {
                return Err(self.poisoned(f));
            }
            let g = self.done_lock.lock().recover();
            if self.durable() >= end || self.failed.load(Ordering::Acquire) {
                continue;
            }
            match deadline {
                // No deadline asked for (`flush`, `RingAppend::wait`): the block write's
                // completion or failure ends it (both notify `done_cv`).
                None => drop(self.done_cv.wait(g).recover()),
                Some(dl) => {
                    let now = Instant::now();
                    if now >= dl {
                        return Ok(None);
                    }
                    drop(self.done_cv.wait_timeout(g, dl - now).recover());
                }
            }
        }
    }

    /// Marks the ring closing and wakes every worker and appender.
    pub fn begin_close(&self) -> bool {
        let mut st = self.lock();
        let first = !st.closing;
        st.closing = true;
        self.notify_work(true);
        self.space_cv.notify_all();
        first
    }

    /// Frees ring space after a persisted trim.
    pub fn trimmed(&self, st: &mut State, offset: u64, block: u64) {
        st.trim_offset = st.trim_offset.max(offset);
        // A trim past the last record (over a block tail or padding) moves the next offset
        // with it: the next record starts at or past the trim.
        st.appended_end = st.appended_end.max(st.trim_offset);
        st.trim_block = st.trim_block.max(block);
        while st.block_starts.front().is_some_and(|&s| s < st.trim_block) {
            st.block_starts.pop_front();
        }
        self.space_cv.notify_all();
    }
}

/// A sealed block to write: its logical start, the bytes to write, and its buffer.
type Job = (u64, usize, AlignedBuf);

impl Shared {
    /// Takes up to `room` sealed blocks to write, sealing the open block once it is old
    /// enough (or the ring is closing). Waits while there is nothing to do, unless
    /// `in_flight` writes are out (their owner must go reap them). Also returns how long
    /// the open block's timer has left. `None`: closing and nothing left to write.
    fn next_work(&self, room: usize, in_flight: usize) -> Option<(Vec<Job>, Option<Duration>)> {
        let mut st = self.lock();
        let mut jobs = Vec::new();
        loop {
            if st.failure.is_none() && jobs.len() < room {
                if let Some(job) = st.take_queued() {
                    jobs.push(job);
                    continue;
                }
                // An idle device writes the open block at once: a lone appender waits for one
                // write, not for the timer; under load blocks fill while writes are out.
                if let Some(cur) = &st.cur
                    && (st.closing
                        || cur.opened.elapsed() >= self.block_delay
                        || (self.seal_when_idle && st.pending.is_empty()))
                {
                    st.seal_current(self.ring_id, self.epoch);
                    continue;
                }
            }
            let timer = match (&st.cur, st.failure) {
                (Some(cur), None) => Some(self.block_delay.saturating_sub(cur.opened.elapsed())),
                _ => None,
            };
            if !jobs.is_empty() || in_flight > 0 {
                return Some((jobs, timer));
            }
            if st.closing && (st.failure.is_some() || (!st.has_queued() && st.cur.is_none())) {
                return None;
            }
            st = match timer {
                Some(left) => self.work_cv.wait_timeout(st, left).recover().0,
                // A worker's idle wait: a sealed block, a new open block, a failure or close
                // wakes it (`notify_work`).
                None => self.work_cv.wait(st).recover(),
            };
        }
    }
}

/// One I/O worker of the threads engine: writes one block at a time and acknowledges the
/// contiguous written prefix. Exits when closing and drained.
pub(crate) fn worker(shared: Arc<Shared>) {
    while let Some((jobs, _)) = shared.next_work(1, 0) {
        for (start, len, buf) in jobs {
            let pos = RING_START + start % shared.ring_bytes;
            let res = shared.dev.write_at(&buf[..len], pos);
            complete(&shared, start, buf, res);
        }
    }
}

/// Longest sleep of the io_uring worker in the kernel with writes in flight and no timer
/// running: a safety net only, as completions and [`Waker::wake`] end it.
const URING_WAIT_MAX: Duration = Duration::from_millis(100);

/// The io_uring worker: one thread keeps up to `depth` blocks in flight.
pub(crate) fn uring_worker(shared: Arc<Shared>, mut uring: Uring, fd: RawFd, depth: usize) {
    loop {
        let room = depth.saturating_sub(uring.in_flight());
        let Some((jobs, timer)) = shared.next_work(room, uring.in_flight()) else {
            return;
        };
        for (start, len, buf) in jobs {
            let pos = RING_START + start % shared.ring_bytes;
            if let Err(e) = uring.submit_write(fd, start, buf, len, pos) {
                let mut st = shared.lock();
                shared.fail(
                    &mut st,
                    "ring block write (io_uring submit)",
                    e.raw_os_error(),
                    start,
                );
            }
        }
        // Sleep until a completion, a wake-up (a block sealed meanwhile), or the open block's
        // timer, if there is room to write it when it fires.
        let timeout = match timer {
            Some(left) if uring.in_flight() < depth => left,
            _ => URING_WAIT_MAX,
        };
        match uring.reap(timeout) {
            Ok(done) => {
                for (start, buf, res) in done {
                    complete(&shared, start, buf, res);
                }
            }
            Err(e) => {
                let mut st = shared.lock();
                let at = st.pending.front().map_or(0, |p| p.start);
                shared.fail(
                    &mut st,
                    "ring block write (io_uring wait)",
                    e.raw_os_error(),
                    at,
                );
                drop(st);
                // The buffers stay with the queue (its drop waits for or leaks them).
                return;
            }
        }
    }
}

fn complete(shared: &Shared, start: u64, buf: AlignedBuf, res: std::io::Result<()>) {
    let mut st = shared.lock();
    // The buffer is reused only once its block is acknowledged (below), so the blocks past
    // the flushed offset never span more than the buffers: the window's bound.
    match st.pending.iter_mut().find(|p| p.start == start) {
        Some(p) => {
            p.status = Status::Done;
            p.buf = Some(buf);
        }
        None => st.free_bufs.push(buf),
    }
    if let Err(e) = res {
        shared.fail(&mut st, "ring block write", e.raw_os_error(), start);
    }
    let limit = st.failure.map_or(u64::MAX, |f| f.at);
    let mut advanced = None;
    while let Some(front) = st.pending.front() {
        if front.status != Status::Done || front.start >= limit {
            break;
        }
        advanced = Some(front.end);
        if let Some(buf) = st.pending.pop_front().and_then(|p| p.buf) {
            st.free_bufs.push(buf);
        }
    }
    shared.space_cv.notify_all();
    drop(st);
    if let Some(end) = advanced {
        // A max, not a store: another completion may have advanced further since this one
        // dropped the lock, and a store of the older end would move the durable offset back
        // (its waiters would then wait for a write that already completed, for ever).
        shared.durable.fetch_max(end, Ordering::AcqRel);
        shared.notify_done();
    }
}

//! Prefaulting the pages just ahead of each topic's tail, off the append path.
//!
//! The first store into a page of a sparse file mapping takes a page fault that zeroes (or
//! reads) the page: for 100-byte records that is one fault every 40 appends, 10–20% of an
//! append's time. Appenders ask for the next [`PREFAULT_AHEAD_BYTES`] of their extent to be
//! populated (`MADV_POPULATE_WRITE`) by the prefault thread before they get there. The window
//! is short so an idle topic's extent stays sparse: a populated page is a dirty page of
//! zeros, written back like any other. Only reserved (fallocated) ranges are requested, so a
//! populate never allocates disk space or raises `SIGBUS`. Best effort: a failed or late
//! populate only means the appender takes the faults itself.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::file::DataFile;
use crate::poison::Recover;

/// How far ahead of the tail pages are populated.
pub const PREFAULT_AHEAD_BYTES: u64 = 1024 * 1024;
/// Requests waiting at most; older ones are dropped (their pages fault the usual way).
const QUEUE_MAX: usize = 256;
/// Populated per `madvise` call, so `stop` is noticed quickly.
const CHUNK_BYTES: u64 = 256 * 1024;

#[derive(Debug)]
struct Request {
    file: Arc<DataFile>,
    position: u64,
    len: u64,
}

/// The queue between appenders and the prefault thread.
#[derive(Debug, Default)]
pub struct Prefaulter {
    queue: Mutex<VecDeque<Request>>,
    ready: Condvar,
    stop: AtomicBool,
}

impl Prefaulter {
    /// Asks for `[position, position + len)` of `file` to be populated. Never blocks on the
    /// populate itself.
    pub fn request(&self, file: &Arc<DataFile>, position: u64, len: u64) {
        if len == 0 || self.stop.load(Ordering::Acquire) {
            return;
        }
        let mut queue = self.queue.lock().recover();
        if queue.len() >= QUEUE_MAX {
            queue.pop_front();
        }
        queue.push_back(Request {
            file: Arc::clone(file),
            position,
            len,
        });
        drop(queue);
        self.ready.notify_one();
    }

    /// The prefault thread: populates requests until [`Prefaulter::stop`].
    pub fn run(&self) {
        loop {
            let request = {
                let mut queue = self.queue.lock().recover();
                loop {
                    if self.stop.load(Ordering::Acquire) {
                        return;
                    }
                    if let Some(r) = queue.pop_front() {
                        break r;
                    }
                    // The thread's idle wait: a request or `stop` wakes it.
                    queue = self.ready.wait(queue).recover();
                }
            };
            let end = request.position + request.len;
            let mut at = request.position;
            while at < end && !self.stop.load(Ordering::Acquire) {
                let len = CHUNK_BYTES.min(end - at);
                // Best effort (old kernels lack MADV_POPULATE_WRITE): the appender's own
                // stores fault the pages in if this did not.
                if request.file.map.populate_write(at, len).is_err() {
                    break;
                }
                at += len;
            }
        }
    }

    /// Stops the thread and drops waiting requests (and their file references).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.queue.lock().recover().clear();
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::io::StdStorage;

    #[test]
    fn populating_keeps_bytes_and_the_thread_drains_then_stops() {
        let dir = tempfile::tempdir().unwrap();
        let block = 64 * 1024;
        let file = DataFile::create(
            &StdStorage,
            dir.path(),
            0,
            4096 + 4 * block,
            block,
            crate::format::VERSION_BATCHED,
        )
        .unwrap();
        let at = 4096 + block;
        file.map
            .write_header(usize::try_from(at).unwrap() + 10, b"kept");
        // Unaligned and past-the-end ranges are clamped, not errors.
        file.map.populate_write(at + 5, 3 * block).unwrap();
        file.map.populate_write(at, 100 * block).unwrap();
        let mut out = [0u8; 4];
        file.map
            .copy_out(usize::try_from(at).unwrap() + 10, &mut out);
        assert_eq!(&out, b"kept");

        let prefaulter = Arc::new(Prefaulter::default());
        let worker = {
            let p = Arc::clone(&prefaulter);
            std::thread::spawn(move || p.run())
        };
        for i in 0..(QUEUE_MAX as u64 + 10) {
            prefaulter.request(&file, 4096 + (i % 4) * block, block);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !prefaulter.queue.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "queue not drained");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        prefaulter.stop();
        worker.join().unwrap();
        // After stop, requests are ignored (no thread would serve them).
        prefaulter.request(&file, 4096, block);
        assert!(prefaulter.queue.lock().unwrap().is_empty());
        file.map
            .copy_out(usize::try_from(at).unwrap() + 10, &mut out);
        assert_eq!(&out, b"kept");
    }
}

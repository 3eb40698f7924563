//! An io_uring queue of positioned writes, for the ring's block writes.
//!
//! The only unsafe operation is pushing a submission entry, whose buffer the kernel reads
//! until the matching completion arrives. [`Uring`] owns every submitted buffer until it has
//! reaped that completion (the buffer lives in `in_flight`), and its `Drop` waits for the
//! outstanding completions, or leaks their buffers if it cannot, so no buffer is ever freed
//! under a pending write. The file descriptor must stay open until then; the ring keeps its
//! `Device` alive for as long as the `Uring`.

#![expect(
    unsafe_code,
    reason = "an io_uring submission borrows its buffer until the kernel completes it"
)]

use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::{IoUring, opcode, types};

use crate::dio::AlignedBuf;

/// A completed write: the tag it was submitted with, its buffer back, and its result.
pub type Completion = (u64, AlignedBuf, io::Result<()>);

/// A submission and completion queue for at most `depth` writes in flight.
pub struct Uring {
    ring: IoUring,
    in_flight: HashMap<u64, (AlignedBuf, usize)>,
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uring")
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl Uring {
    /// A queue for `depth` writes; fails where io_uring is unavailable or too old to wait with
    /// a timeout.
    pub fn new(depth: u32) -> io::Result<Uring> {
        let ring = IoUring::new(depth.next_power_of_two())?;
        if !ring.params().is_feature_ext_arg() {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        }
        Ok(Uring {
            ring,
            in_flight: HashMap::new(),
        })
    }

    /// Writes submitted and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Submits a write of `buf[..len]` at byte `pos` of `fd`, tagged `tag` (unique among the
    /// writes in flight). The buffer comes back from [`Uring::reap`]. An error here means the
    /// queue is unusable; a buffer it kept is returned by a later reap or never freed.
    pub fn submit_write(
        &mut self,
        fd: RawFd,
        tag: u64,
        buf: AlignedBuf,
        len: usize,
        pos: u64,
    ) -> io::Result<()> {
        assert!(len <= buf.len() && !self.in_flight.contains_key(&tag));
        let len32 = u32::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let entry = opcode::Write::new(types::Fd(fd), buf.as_ptr(), len32)
            .offset(pos)
            .build()
            .user_data(tag);
        // SAFETY: the buffer's heap allocation does not move when `buf` moves into
        // `in_flight` below, and it stays there until the completion for `tag` is reaped
        // (or, failing that, is leaked in `Drop`), so the kernel never reads freed memory.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            // Not submitted: the buffer may be freed.
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.in_flight.insert(tag, (buf, len));
        self.ring.submit()?;
        Ok(())
    }

    /// Waits up to `timeout` for at least one completion, then returns all that are ready.
    pub fn reap(&mut self, timeout: Duration) -> io::Result<Vec<Completion>> {
        if self.in_flight.is_empty() {
            return Ok(Vec::new());
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        let mut done = Vec::new();
        for cqe in self.ring.completion() {
            let tag = cqe.user_data();
            let Some((buf, len)) = self.in_flight.remove(&tag) else {
                continue;
            };
            let res = match cqe.result() {
                n if n < 0 => Err(io::Error::from_raw_os_error(-n)),
                n if n as usize == len => Ok(()),
                // A short write of a preallocated, aligned range: report it as an I/O error.
                _ => Err(io::Error::from_raw_os_error(libc::EIO)),
            };
            done.push((tag, buf, res));
        }
        Ok(done)
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        while !self.in_flight.is_empty() {
            if self.reap(Duration::from_secs(1)).is_err() {
                // The kernel may still read these buffers: never free them.
                for (_, (buf, _)) in self.in_flight.drain() {
                    std::mem::forget(buf);
                }
            }
        }
    }
}

//! An io_uring queue of positioned writes, for the ring's block writes.
//!
//! The unsafe operations are creating the wake-up eventfd and pushing submission entries. A
//! write entry's buffer is read by the kernel
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
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use io_uring::{IoUring, opcode, types};

use crate::dio::AlignedBuf;

/// A completed write: the tag it was submitted with, its buffer back, and its result.
pub type Completion = (u64, AlignedBuf, io::Result<()>);

/// The tag of the eventfd poll that [`Waker::wake`] completes.
const WAKE_TAG: u64 = u64::MAX;

/// Wakes a thread sleeping in [`Uring::reap`] (an eventfd the queue polls).
#[derive(Debug, Clone)]
pub struct Waker(Arc<File>);

impl Waker {
    /// Makes the current or next `reap` return at once.
    pub fn wake(&self) {
        // A full counter (EAGAIN) already means "wake"; nothing else can fail here.
        let _ = (&*self.0).write(&eventfd_one());
    }
}

#[expect(
    clippy::host_endian_bytes,
    reason = "an eventfd counter is a native-endian u64"
)]
fn eventfd_one() -> [u8; 8] {
    1u64.to_ne_bytes()
}

/// A submission and completion queue for at most `depth` writes in flight.
pub struct Uring {
    ring: IoUring,
    in_flight: HashMap<u64, (AlignedBuf, usize)>,
    wake: Arc<File>,
    poll_armed: bool,
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
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nothing else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Uring {
            ring,
            in_flight: HashMap::new(),
            wake: Arc::new(File::from(owned)),
            poll_armed: false,
        })
    }

    /// A handle other threads use to end a wait in [`Uring::reap`] early.
    pub fn waker(&self) -> Waker {
        Waker(self.wake.clone())
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

    /// Waits up to `timeout` for at least one completion or a [`Waker::wake`], then returns
    /// the completions that are ready.
    pub fn reap(&mut self, timeout: Duration) -> io::Result<Vec<Completion>> {
        if self.in_flight.is_empty() {
            return Ok(Vec::new());
        }
        if !self.poll_armed {
            let entry = opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(WAKE_TAG);
            // SAFETY: a poll reads no user memory; the eventfd stays open as long as `self`
            // (and the kernel holds its own reference while the poll is armed).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.poll_armed = true;
            }
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
        let mut woken = false;
        for cqe in self.ring.completion() {
            let tag = cqe.user_data();
            if tag == WAKE_TAG {
                woken = true;
                continue;
            }
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
        if woken {
            self.poll_armed = false;
            // Reset the counter; EAGAIN (already zero) is fine.
            let mut counter = [0u8; 8];
            let _ = (&*self.wake).read(&mut counter);
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

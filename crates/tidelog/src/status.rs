//! Whether a handle may still be used: not closed, not inherited across `fork`, and, for
//! writes, not read-only. Shared by the `Wal` and every writer and reader made from it; a
//! `RingWal` keeps one for its fork check.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};
use crate::process;

/// The open/forked/read-only state of one `Wal` handle.
#[derive(Debug)]
pub(crate) struct Status {
    closed: AtomicBool,
    read_only: bool,
    /// The process that opened the handle and its fork generation (see `process`).
    opener_pid: u32,
    fork_generation: u64,
}

impl Status {
    pub fn new(read_only: bool) -> Status {
        Status {
            closed: AtomicBool::new(false),
            read_only,
            opener_pid: std::process::id(),
            fork_generation: process::generation(),
        }
    }

    /// `Ok` while the handle may be used: [`Error::Closed`] after close, [`Error::Forked`]
    /// in a process forked after it was opened.
    #[inline]
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.check_not_forked()
    }

    /// [`Status::check_open`], then [`Error::ReadOnly`] for a read-only handle.
    #[inline]
    pub fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    #[inline]
    pub fn check_not_forked(&self) -> Result<()> {
        if self.is_forked() {
            return Err(Error::Forked {
                opener_pid: self.opener_pid,
            });
        }
        Ok(())
    }

    /// True in a process forked after the handle was opened.
    pub fn is_forked(&self) -> bool {
        process::is_forked(self.fork_generation)
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn set_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

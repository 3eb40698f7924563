//! The poison: the first failure after which a handle no longer knows what is durable, so
//! every later write fails with [`Error::Poisoned`] until the directory is reopened (as
//! fjall's poison dart does). Three things poison a handle:
//! - a failed sync or write of data (fsyncgate: a retried sync may "succeed" over lost
//!   pages), recorded with its errno;
//! - a panic inside the engine, caught by a [`PanicGuard`] at every entry point that
//!   changes state and by the wrapper around every background thread;
//! - hence a poisoned lock: a lock is only poisoned by such a panic, which has already
//!   poisoned the handle. The lock helpers below recover the guard, so a shutdown can still
//!   read the state under it, and every write path checks the poison first.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LockResult, OnceLock, PoisonError};

use crate::error::{Error, Result};

/// The first failure of a handle (later ones are ignored), and a flag for the fast check.
#[derive(Debug, Default)]
pub(crate) struct Poison {
    poisoned: AtomicBool,
    first: OnceLock<Cause>,
}

/// What poisoned a handle, kept to fail every later caller with the same errno.
#[derive(Debug)]
struct Cause {
    op: &'static str,
    path: PathBuf,
    errno: Option<i32>,
    kind: io::ErrorKind,
    message: String,
}

impl Poison {
    /// Fails with [`Error::Poisoned`] once the handle is poisoned.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(self.poisoned_error());
        }
        Ok(())
    }

    #[inline]
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Records `e` as the cause (the first one wins).
    pub fn set(&self, e: &Error) {
        let _ = self.first.set(Cause::from_error(e));
        self.poisoned.store(true, Ordering::Release);
    }

    /// Records a panic in `op` (a thread's name or an entry point) as the cause.
    pub fn set_panicked(&self, op: &'static str) {
        self.set(&Error::Poisoned {
            op,
            path: PathBuf::new(),
            errno: None,
        });
    }

    /// What every later write gets.
    pub fn poisoned_error(&self) -> Error {
        match self.first.get() {
            Some(c) => Error::Poisoned {
                op: c.op,
                path: c.path.clone(),
                errno: c.errno,
            },
            None => Error::Closed,
        }
    }

    /// The failure itself, for the callers whose records the failed operation covered.
    pub fn original(&self) -> Option<Error> {
        let c = self.first.get()?;
        if c.kind == io::ErrorKind::Other && c.message.is_empty() {
            // A panic: there is no I/O error to give back.
            return Some(self.poisoned_error());
        }
        let source = match c.errno {
            Some(errno) => io::Error::from_raw_os_error(errno),
            None => io::Error::new(c.kind, c.message.clone()),
        };
        Some(Error::Io {
            op: c.op,
            path: c.path.clone(),
            source,
        })
    }
}

impl Cause {
    fn from_error(e: &Error) -> Cause {
        match e {
            Error::Io { op, path, source } => Cause {
                op,
                path: path.clone(),
                errno: source.raw_os_error(),
                kind: source.kind(),
                message: source.to_string(),
            },
            Error::Poisoned { op, path, errno } => Cause {
                op,
                path: path.clone(),
                errno: *errno,
                kind: io::ErrorKind::Other,
                message: String::new(),
            },
            other => Cause {
                op: "sync",
                path: PathBuf::new(),
                errno: other.errno(),
                kind: io::ErrorKind::Other,
                message: other.to_string(),
            },
        }
    }
}

/// Poisons `poison` if the thread unwinds from a panic while this guard lives: held by every
/// entry point that changes state, so a panic halfway through leaves the handle refusing
/// writes instead of running on over half-updated state.
#[derive(Debug)]
pub(crate) struct PanicGuard<'a> {
    poison: &'a Poison,
    op: &'static str,
}

impl<'a> PanicGuard<'a> {
    #[inline]
    pub fn new(poison: &'a Poison, op: &'static str) -> PanicGuard<'a> {
        PanicGuard { poison, op }
    }
}

impl Drop for PanicGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.poison.set_panicked(self.op);
        }
    }
}

/// Recovers the guard of a poisoned lock or condition-variable wait: see the module comment
/// for why that is sound. Every `lock()`, `read()`, `write()` and `wait*()` in the engine
/// goes through it.
pub(crate) trait Recover<G> {
    fn recover(self) -> G;
}

impl<G> Recover<G> for LockResult<G> {
    #[inline]
    fn recover(self) -> G {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cause_wins_and_a_panic_poisons() {
        let p = Poison::default();
        assert!(p.check().is_ok());
        p.set(&Error::io(
            "msync",
            "a",
            io::Error::from_raw_os_error(libc::EIO),
        ));
        p.set_panicked("tidelog-sync");
        match p.check() {
            Err(Error::Poisoned { op, errno, .. }) => {
                assert_eq!((op, errno), ("msync", Some(libc::EIO)));
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
        let q = Poison::default();
        let caught = std::panic::catch_unwind(|| {
            let _guard = PanicGuard::new(&q, "append");
            panic!("boom");
        });
        assert!(caught.is_err());
        assert!(matches!(
            q.check(),
            Err(Error::Poisoned {
                op: "append",
                errno: None,
                ..
            })
        ));
        assert!(matches!(q.original(), Some(Error::Poisoned { .. })));
    }
}

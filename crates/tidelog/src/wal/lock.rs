//! The data directory's advisory locks. An exclusive handle holds an exclusive `flock` on
//! `LOCK`. Shared-mode handles hold a shared `flock` there (so neither kind opens beside
//! the other) and byte locks of their own open file description (`ofd`): `INIT_BYTE` while
//! they open (one opener at a time), `ALONE_BYTE` shared for their life (an opener that can
//! take it exclusively is the only one: it recovers and rebuilds the shared state), their
//! process slot's byte (`shared::PROCESS_BYTE + slot`), which tells other processes they
//! are alive, and, for one of them, `LEADER_BYTE`: the housekeeping leader.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, TryLockError};
use std::time::{Duration, Instant};

use crate::cursor::CURSOR_DIR;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::ofd::{self, Kind};
use crate::poison::Recover;
use crate::shared::{PROCESS_BYTE, PROCESSES, SharedState};

/// Name of the lock file in a data directory.
pub const LOCK_FILE: &str = "LOCK";
/// Held exclusively by a shared-mode open from its lock to its last step.
pub const INIT_BYTE: u64 = 0;
/// Held shared by every shared-mode handle; exclusively only by one alone.
pub const ALONE_BYTE: u64 = 1;
/// Held exclusively by the housekeeping leader, for its life: the kernel releases it when
/// the leader dies, and another process's next try takes it.
pub const LEADER_BYTE: u64 = 2;
/// Held exclusively by the one process publishing staged jobs while others share the
/// directory (`DirLock::publish_turn`): publishes never interleave, and the next holder
/// first finishes a publish whose process died.
pub const PUBLISH_BYTE: u64 = 3;
/// Between two tries for `PUBLISH_BYTE`.
const PUBLISH_POLL: Duration = Duration::from_millis(1);
/// Longest a shared-mode open waits for another open (its recovery) to finish.
const OPEN_WAIT: Duration = Duration::from_secs(120);

/// The lock a writing handle holds on its directory (none for a read-only handle).
#[derive(Debug)]
pub(crate) struct DirLock {
    file: Mutex<Option<File>>,
    shared: bool,
    /// This process's publisher: byte locks belong to the open file description, which
    /// every thread shares.
    publishing: Mutex<()>,
}

impl DirLock {
    /// No lock: a read-only handle, after checking that `dir` is a directory.
    pub fn none(storage: &dyn Storage, dir: &Path) -> Result<DirLock> {
        let errno = match crate::io::metadata_if_present(storage, dir)? {
            Some(m) if m.is_dir() => None,
            Some(_) => Some(libc::ENOTDIR),
            None => Some(libc::ENOENT),
        };
        if let Some(errno) = errno {
            return Err(Error::io(
                "open directory",
                dir,
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        Ok(DirLock {
            file: Mutex::new(None),
            shared: false,
            publishing: Mutex::new(()),
        })
    }

    /// Takes the directory's lock, creating the directory and lock file if needed.
    pub fn take(storage: &dyn Storage, dir: &Path) -> Result<DirLock> {
        create_dir(storage, dir)?;
        let path = dir.join(LOCK_FILE);
        let file = match storage.lock_file(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(Error::Locked {
                    path: dir.to_owned(),
                });
            }
            Err(e) => return Err(Error::io("lock directory", &path, e)),
        };
        let lock = DirLock {
            file: Mutex::new(Some(file)),
            shared: false,
            publishing: Mutex::new(()),
        };
        make_cursor_dir(storage, dir)?;
        Ok(lock)
    }

    /// Shared mode: takes the shared `flock` (`Locked` beside an exclusive handle), then the
    /// open's turn (waiting for another open's recovery), then tries `ALONE_BYTE`
    /// exclusively. Returns the lock and whether this handle is the only one: it then
    /// recovers the directory and rebuilds the shared state, and calls
    /// [`DirLock::opened`] after.
    pub fn take_shared(storage: &dyn Storage, dir: &Path) -> Result<(DirLock, bool)> {
        create_dir(storage, dir)?;
        let path = dir.join(LOCK_FILE);
        let file = match storage.lock_file_shared(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(Error::Locked {
                    path: dir.to_owned(),
                });
            }
            Err(e) => return Err(Error::io("lock directory", &path, e)),
        };
        let lock_err = |e| Error::io("lock directory", &path, e);
        let start = Instant::now();
        while !ofd::try_lock(&file, INIT_BYTE, Kind::Exclusive).map_err(lock_err)? {
            if start.elapsed() >= OPEN_WAIT {
                return Err(Error::Locked {
                    path: dir.to_owned(),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let alone = ofd::try_lock(&file, ALONE_BYTE, Kind::Exclusive).map_err(lock_err)?;
        if !alone && !ofd::try_lock(&file, ALONE_BYTE, Kind::Shared).map_err(lock_err)? {
            // Only a handle alone holds it exclusively, and only while it opens, which the
            // init byte excludes.
            return Err(Error::Locked {
                path: dir.to_owned(),
            });
        }
        crate::process::detach_in_children(file.as_raw_fd());
        let lock = DirLock {
            file: Mutex::new(Some(file)),
            shared: true,
            publishing: Mutex::new(()),
        };
        make_cursor_dir(storage, dir)?;
        Ok((lock, alone))
    }

    /// Shared mode, near the open's end: takes a free process slot (its byte), registers it
    /// in `shared` and lets other handles join (`ALONE_BYTE` shared). The turn lasts until
    /// [`DirLock::end_open_turn`].
    pub fn opened(&self, shared: &SharedState, dir: &Path, alone: bool) -> Result<()> {
        let guard = self.file.lock().recover();
        let Some(file) = guard.as_ref() else {
            return Err(Error::Closed);
        };
        let path = dir.join(LOCK_FILE);
        let lock_err = |e| Error::io("lock directory", &path, e);
        let mut slot = None;
        for i in 0..PROCESSES as u32 {
            if ofd::try_lock(file, PROCESS_BYTE + u64::from(i), Kind::Exclusive)
                .map_err(lock_err)?
            {
                slot = Some(i);
                break;
            }
        }
        let Some(slot) = slot else {
            return Err(Error::limit(
                "processes sharing a directory",
                PROCESSES as u64 + 1,
                PROCESSES as u64,
            ));
        };
        shared.register(file.try_clone().map_err(lock_err)?, slot, alone)?;
        ofd::try_lock(file, ALONE_BYTE, Kind::Shared).map_err(lock_err)?;
        Ok(())
    }

    /// Shared mode, the open's last step: ends its turn, once a handle alone has claimed a
    /// slot for every topic it recovered (a joiner before that would find none and start
    /// the topic again under a new id).
    pub fn end_open_turn(&self, dir: &Path) -> Result<()> {
        let guard = self.file.lock().recover();
        let Some(file) = guard.as_ref() else {
            return Err(Error::Closed);
        };
        ofd::unlock(file, INIT_BYTE)
            .map_err(|e| Error::io("lock directory", dir.join(LOCK_FILE), e))
    }

    /// True when no other shared-mode handle holds the directory now (always for an
    /// exclusive one): work that needs every process's view to agree (deleting files,
    /// publishing staged jobs, marking an extent clean) runs only then. Takes the open's
    /// turn while it looks, so no handle joins meanwhile; the caller gets it back to hold
    /// while it works, released when dropped.
    pub fn alone(&self) -> Option<AloneGuard<'_>> {
        if !self.shared {
            return Some(AloneGuard { lock: None });
        }
        let guard = self.file.lock().recover();
        let file = guard.as_ref()?;
        // Another handle's share of the alone byte answers without the open's turn: a
        // process stopped (SIGSTOP) inside this look would hold that turn, and every open
        // of the directory would wait for it.
        if ofd::held_by_other(file, ALONE_BYTE).unwrap_or(true) {
            return None;
        }
        if !ofd::try_lock(file, INIT_BYTE, Kind::Exclusive).unwrap_or(false) {
            return None;
        }
        let alone = ofd::try_lock(file, ALONE_BYTE, Kind::Exclusive).unwrap_or(false);
        if alone {
            let _ = ofd::try_lock(file, ALONE_BYTE, Kind::Shared);
            drop(guard);
            return Some(AloneGuard { lock: Some(self) });
        }
        let _ = ofd::unlock(file, INIT_BYTE);
        None
    }

    /// Shared mode: tries to become (or stay) the housekeeping leader, holding
    /// `LEADER_BYTE` exclusively until the handle closes or the process dies. True for the
    /// leader. An exclusive handle leads always.
    pub fn try_lead(&self) -> bool {
        if !self.shared {
            return true;
        }
        let guard = self.file.lock().recover();
        let Some(file) = guard.as_ref() else {
            return false;
        };
        // Taking a byte this description already holds succeeds again.
        ofd::try_lock(file, LEADER_BYTE, Kind::Exclusive).unwrap_or(false)
    }

    /// Gives the lead up (a poisoned handle's housekeeping can do nothing): another
    /// process's next try takes it.
    pub fn step_down(&self) {
        if let Some(file) = self.file.lock().recover().as_ref() {
            let _ = ofd::unlock(file, LEADER_BYTE);
        }
    }

    /// The turn to publish staged jobs or delete a topic: this process's `publishing` mutex,
    /// and in shared mode `PUBLISH_BYTE`, waiting up to `wait` for whoever has them (`None`
    /// after that). A publish of this process that panicked left the mutex poisoned (and
    /// the handle too): `Poisoned`.
    pub fn publish_turn(&self, wait: Duration) -> Result<Option<PublishTurn<'_>>> {
        let deadline = crate::clock::deadline_after(wait);
        let local = poll_until(deadline, || match self.publishing.try_lock() {
            Ok(guard) => Ok(Some(guard)),
            Err(TryLockError::Poisoned(_)) => Err(Error::Poisoned {
                op: "staged publish or topic deletion (it panicked)",
                path: PathBuf::new(),
                errno: None,
            }),
            Err(TryLockError::WouldBlock) => Ok(None),
        })?;
        let Some(local) = local else {
            return Ok(None);
        };
        if !self.shared {
            return Ok(Some(PublishTurn {
                lock: None,
                _local: local,
            }));
        }
        let held = poll_until(deadline, || {
            let file = self.file.lock().recover();
            let file = file.as_ref().ok_or(Error::Closed)?;
            Ok(ofd::try_lock(file, PUBLISH_BYTE, Kind::Exclusive)
                .unwrap_or(false)
                .then_some(()))
        })?;
        Ok(held.map(|()| PublishTurn {
            lock: Some(self),
            _local: local,
        }))
    }

    /// Shared mode.
    pub fn is_shared(&self) -> bool {
        self.shared
    }
}

/// Tries `try_once` every `PUBLISH_POLL` until it has a value or `deadline` passes (`None`).
fn poll_until<T>(
    deadline: Instant,
    mut try_once: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    loop {
        if let Some(value) = try_once()? {
            return Ok(Some(value));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(PUBLISH_POLL);
    }
}

/// The turn to publish staged jobs or delete a topic (see [`DirLock::publish_turn`]);
/// released when dropped.
#[derive(Debug)]
pub(crate) struct PublishTurn<'a> {
    lock: Option<&'a DirLock>,
    _local: std::sync::MutexGuard<'a, ()>,
}

impl Drop for PublishTurn<'_> {
    fn drop(&mut self) {
        if let Some(lock) = self.lock
            && let Some(file) = lock.file.lock().recover().as_ref()
        {
            let _ = ofd::unlock(file, PUBLISH_BYTE);
        }
    }
}

/// While held, no shared-mode handle opens the directory (see [`DirLock::alone`]).
#[derive(Debug)]
pub(crate) struct AloneGuard<'a> {
    lock: Option<&'a DirLock>,
}

impl Drop for AloneGuard<'_> {
    fn drop(&mut self) {
        if let Some(lock) = self.lock
            && let Some(file) = lock.file.lock().recover().as_ref()
        {
            let _ = ofd::unlock(file, INIT_BYTE);
        }
    }
}

/// Creates the cursor directory of `dir` if it is missing.
fn make_cursor_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    {
        let cursors = dir.join(CURSOR_DIR);
        if !crate::io::exists(storage, &cursors)? {
            storage
                .create_dir_all(&cursors)
                .map_err(|e| Error::io("create directory", &cursors, e))?;
            storage
                .sync_dir(dir)
                .map_err(|e| Error::io("fsync directory", dir, e))?;
        }
    }
    Ok(())
}

impl DirLock {
    /// Releases the lock explicitly: a child process being spawned at this moment holds a
    /// copy of the descriptor until its exec, and a flock belongs to the shared open file,
    /// so only an explicit unlock frees it at once.
    pub fn release(&self) {
        if let Some(file) = self.file.lock().recover().take() {
            crate::process::keep_in_children(file.as_raw_fd());
            // Closing the file below releases the lock anyway once every copy is gone.
            let _ = file.unlock();
            if self.shared {
                // The shared state's copy of this description (its liveness) may outlive the
                // handle in a reader: drop every byte lock now.
                let _ = ofd::unlock_all(&file);
            }
        }
    }

    /// Closes our descriptor without unlocking: in a forked child the lock is the parent's
    /// too (flock belongs to the shared open file description), and unlocking would free it.
    pub fn forget(&self) {
        if let Some(file) = self.file.lock().recover().take() {
            crate::process::keep_in_children(file.as_raw_fd());
        }
    }
}

impl Drop for DirLock {
    /// Covers opens that fail after taking the lock; `close` has usually released it.
    fn drop(&mut self) {
        self.release();
    }
}

/// Creates `dir` (and makes its entry durable) if it does not exist; fails unless it is a
/// directory.
fn create_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    if !crate::io::exists(storage, dir)? {
        storage
            .create_dir_all(dir)
            .map_err(|e| Error::io("create directory", dir, e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            storage
                .sync_dir(parent)
                .map_err(|e| Error::io("fsync directory", parent, e))?;
        }
    }
    if !crate::io::is_dir(storage, dir)? {
        return Err(Error::io(
            "open directory",
            dir,
            std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    Ok(())
}

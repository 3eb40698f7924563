//! Unsafe island: open-file-description byte locks (`F_OFD_SETLK`, `F_OFD_GETLK`) on the
//! directory's `LOCK` file. The kernel releases them when the last descriptor of the open
//! file description closes, a process's death included, so they tell the living from the
//! dead without pids: the shared-mode open's first-opener test, each process's liveness
//! byte, and the lock words' owners (see `shared::lock`).
//!
//! OFD locks are owned by the open file description, not the process: two descriptions in
//! one process conflict with each other, and `F_OFD_GETLK` through the holder's own
//! description reports its lock as absent.

#![expect(unsafe_code, reason = "fcntl(2) lock commands have no safe wrapper")]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// A lock's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Shared,
    Exclusive,
}

fn flock_for(kind: i16, byte: u64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct of integers; all-zero is a valid value of it
    // (and `l_pid` must be 0 for the OFD commands).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = i64::try_from(byte).unwrap_or(i64::MAX);
    fl.l_len = 1;
    fl
}

fn lock_type(kind: Kind) -> i16 {
    match kind {
        Kind::Shared => libc::F_RDLCK as i16,
        Kind::Exclusive => libc::F_WRLCK as i16,
    }
}

/// Takes (or converts to) a `kind` lock on `byte` of `file` without waiting: false when
/// another open file description holds a conflicting lock.
pub fn try_lock(file: &File, byte: u64, kind: Kind) -> io::Result<bool> {
    let fl = flock_for(lock_type(kind), byte);
    // SAFETY: the descriptor is live for the call (borrowed from `file`); `fl` is a valid
    // `flock` on this frame that F_OFD_SETLK only reads.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &raw const fl) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

/// Releases this description's lock on `byte` (nothing when it holds none).
pub fn unlock(file: &File, byte: u64) -> io::Result<()> {
    let fl = flock_for(libc::F_UNLCK as i16, byte);
    // SAFETY: as in `try_lock`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &raw const fl) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Releases every byte lock this description holds.
pub fn unlock_all(file: &File) -> io::Result<()> {
    let mut fl = flock_for(libc::F_UNLCK as i16, 0);
    // Length 0: from the start to the end of any file size.
    fl.l_len = 0;
    // SAFETY: as in `try_lock`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &raw const fl) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// True when another open file description holds any lock on `byte` that an exclusive lock
/// would conflict with (a process that holds its liveness byte is alive).
pub fn held_by_other(file: &File, byte: u64) -> io::Result<bool> {
    let mut fl = flock_for(libc::F_WRLCK as i16, byte);
    // SAFETY: the descriptor is live for the call; `fl` is a valid `flock` on this frame
    // that F_OFD_GETLK reads and overwrites in place.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &raw mut fl) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as i16)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test")]
mod tests {
    use super::*;

    fn open(path: &std::path::Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    #[test]
    fn descriptions_conflict_and_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let (a, b) = (open(&path), open(&path));
        assert!(try_lock(&a, 7, Kind::Exclusive).unwrap());
        assert!(!try_lock(&b, 7, Kind::Exclusive).unwrap());
        assert!(!try_lock(&b, 7, Kind::Shared).unwrap());
        assert!(held_by_other(&b, 7).unwrap());
        assert!(
            !held_by_other(&a, 7).unwrap(),
            "its own lock is not another's"
        );
        // Converting down is atomic: a shared lock beside it is possible at once.
        assert!(try_lock(&a, 7, Kind::Shared).unwrap());
        assert!(try_lock(&b, 7, Kind::Shared).unwrap());
        assert!(!try_lock(&a, 7, Kind::Exclusive).unwrap());
        unlock(&b, 7).unwrap();
        assert!(try_lock(&a, 7, Kind::Exclusive).unwrap());
        drop(a);
        assert!(!held_by_other(&b, 7).unwrap(), "closing releases");
    }
}

//! The data directory's advisory lock: one writing handle per directory.

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use crate::cursor::CURSOR_DIR;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::poison::Recover;

/// Name of the lock file in a data directory.
pub const LOCK_FILE: &str = "LOCK";

/// The lock a writing handle holds on its directory (none for a read-only handle).
#[derive(Debug)]
pub(crate) struct DirLock {
    file: Mutex<Option<File>>,
}

impl DirLock {
    /// No lock: a read-only handle, after checking that `dir` is a directory.
    pub fn none(storage: &dyn Storage, dir: &Path) -> Result<DirLock> {
        if !storage.metadata(dir).is_ok_and(|m| m.is_dir()) {
            let errno = if crate::io::exists(storage, dir) {
                libc::ENOTDIR
            } else {
                libc::ENOENT
            };
            return Err(Error::io(
                "open directory",
                dir,
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        Ok(DirLock {
            file: Mutex::new(None),
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
        };
        let cursors = dir.join(CURSOR_DIR);
        if !crate::io::exists(storage, &cursors) {
            storage
                .create_dir_all(&cursors)
                .map_err(|e| Error::io("create directory", &cursors, e))?;
            storage
                .sync_dir(dir)
                .map_err(|e| Error::io("fsync directory", dir, e))?;
        }
        Ok(lock)
    }

    /// Releases the lock explicitly: a child process being spawned at this moment holds a
    /// copy of the descriptor until its exec, and a flock belongs to the shared open file,
    /// so only an explicit unlock frees it at once.
    pub fn release(&self) {
        if let Some(file) = self.file.lock().recover().take() {
            // Closing the file below releases the lock anyway once every copy is gone.
            let _ = file.unlock();
        }
    }

    /// Closes our descriptor without unlocking: in a forked child the lock is the parent's
    /// too (flock belongs to the shared open file description), and unlocking would free it.
    pub fn forget(&self) {
        drop(self.file.lock().recover().take());
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
    if !crate::io::exists(storage, dir) {
        storage
            .create_dir_all(dir)
            .map_err(|e| Error::io("create directory", dir, e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            storage
                .sync_dir(parent)
                .map_err(|e| Error::io("fsync directory", parent, e))?;
        }
    }
    if !storage.metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Err(Error::io(
            "open directory",
            dir,
            std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    Ok(())
}

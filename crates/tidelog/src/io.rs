//! The one small trait every file operation goes through, so tests can inject faults.
//!
//! [`StdStorage`] is the real implementation. [`FaultStorage`] wraps it and fails named
//! points ([`points`]) on demand: an errno once or forever, or a short write.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The shared mapping of a data file, as [`Storage::sync_map`] receives it.
pub use crate::mmap::Mapping;
use crate::poison::Recover;

/// Names of the fault points, one per kind of operation (test support, hidden from the docs).
#[doc(hidden)]
pub mod points {
    /// Creating a data file, a cursor file or the shared state file.
    pub const CREATE: &str = "create";
    /// Opening an existing file (data files, the shared state file).
    pub const OPEN: &str = "open";
    /// Setting a new file's length.
    pub const SET_LEN: &str = "set_len";
    /// Reserving disk space for a block (`fallocate`).
    pub const ALLOCATE: &str = "allocate";
    /// A positional write (file headers, cursor slots).
    pub const WRITE: &str = "write";
    /// `fdatasync` of a file.
    pub const SYNC_FILE: &str = "sync_file";
    /// `msync` of a mapped range.
    pub const SYNC_MAP: &str = "sync_map";
    /// `fsync` of a directory.
    pub const SYNC_DIR: &str = "sync_dir";
    /// Unlinking a file.
    pub const REMOVE: &str = "remove";
    /// Renaming a file (matched against the old name).
    pub const RENAME: &str = "rename";
    /// A positional read (ring recovery and scans).
    pub const READ: &str = "read";
    /// Opening a ring device or file for synchronous (and maybe direct) I/O.
    pub const OPEN_DEVICE: &str = "open_device";
    /// Opening a file for direct writes (staged segments).
    pub const OPEN_DIRECT: &str = "open_direct";
    /// Creating a directory (and its missing parents).
    pub const CREATE_DIR: &str = "create_dir";
    /// Listing a directory.
    pub const READ_DIR: &str = "read_dir";
    /// Reading a whole small file (cursor files, the ring marker).
    pub const READ_FILE: &str = "read_file";
    /// Reading an open file's metadata (length, allocated blocks).
    pub const FILE_METADATA: &str = "file_metadata";
    /// Reading a path's metadata (existence, type).
    pub const METADATA: &str = "metadata";
    /// Resolving a path to its canonical form.
    pub const CANONICALIZE: &str = "canonicalize";
    /// Taking an exclusive advisory lock (the directory lock file, a ring device).
    pub const LOCK: &str = "lock";
    /// Removing a directory and everything in it (a staged job's files).
    pub const REMOVE_DIR_ALL: &str = "remove_dir_all";
    /// A read-ahead hint (recovery's pages ahead of its reads).
    pub const PREFETCH: &str = "prefetch";
}

/// One entry of a directory listing ([`Storage::read_dir`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name (not its path).
    pub name: std::ffi::OsString,
    /// True for a regular file (symbolic links are not followed).
    pub is_file: bool,
}

/// File operations used by the engine. Implementations must be thread-safe.
pub trait Storage: Send + Sync + fmt::Debug + 'static {
    /// Creates a new file (fails if it exists), opened read-write.
    fn create_new(&self, path: &Path) -> io::Result<File>;
    /// Opens an existing file.
    fn open(&self, path: &Path, writable: bool) -> io::Result<File>;
    /// Opens an existing ring device or file read-write with `O_DSYNC` (every completed
    /// write is durable), and with `O_DIRECT` when `direct`.
    fn open_device(&self, path: &Path, direct: bool) -> io::Result<File>;
    /// Opens an existing file for writing with `O_DIRECT` (page-aligned buffers, offsets and
    /// lengths; no `O_DSYNC`: the caller syncs). Fails (`EINVAL`) where the file system has
    /// no direct I/O.
    fn open_direct(&self, path: &Path) -> io::Result<File>;
    /// Sets the file length (sparse extension).
    fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()>;
    /// Reserves disk blocks for `[offset, offset + len)` so later writes cannot hit ENOSPC.
    fn allocate(&self, file: &File, path: &Path, offset: u64, len: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Reads into `buf` at `offset`; returns the bytes read.
    fn read_at(&self, file: &File, path: &Path, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// `fdatasync`.
    fn sync_file(&self, file: &File, path: &Path) -> io::Result<()>;
    /// `msync(MS_SYNC)` of `[offset, offset + len)` of a mapping.
    fn sync_map(&self, map: &Mapping, path: &Path, offset: usize, len: usize) -> io::Result<()>;
    /// `fsync` of a directory, so created or removed names are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Atomically renames a file.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Unlinks a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Creates `dir` and its missing parents (no directory sync: the caller syncs parents).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
    /// Removes `dir` and everything in it (no directory sync: the caller syncs the parent).
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::remove_dir_all(dir)
    }
    /// The entries of `dir`, in no particular order.
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let is_file = entry.file_type()?.is_file();
            out.push(DirEntry {
                name: entry.file_name(),
                is_file,
            });
        }
        Ok(out)
    }
    /// The whole content of a small file.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }
    /// The metadata of an open file (`fstat`).
    fn file_metadata(&self, file: &File, _path: &Path) -> io::Result<fs::Metadata> {
        file.metadata()
    }
    /// The metadata of `path` (symbolic links followed).
    fn metadata(&self, path: &Path) -> io::Result<fs::Metadata> {
        fs::metadata(path)
    }
    /// The canonical, absolute form of `path` (symbolic links resolved); fails where it
    /// does not exist.
    fn canonicalize(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        fs::canonicalize(path)
    }
    /// Takes an exclusive, non-blocking advisory lock on `file`. Fails with
    /// [`io::ErrorKind::WouldBlock`] when another descriptor holds it.
    fn try_lock(&self, file: &File, _path: &Path) -> io::Result<()> {
        match file.try_lock() {
            Ok(()) => Ok(()),
            Err(fs::TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
    /// Opens (creating, never truncating) `path` read-write and locks it as
    /// [`Storage::try_lock`] does; [`io::ErrorKind::WouldBlock`] when the lock is held.
    fn lock_file(&self, path: &Path) -> io::Result<File> {
        let file = open_lock_file(path)?;
        self.try_lock(&file, path)?;
        Ok(file)
    }
    /// Opens `path` as [`Storage::lock_file`] does and takes a shared lock on it (shared-mode
    /// handles: they exclude exclusive ones, not each other).
    fn lock_file_shared(&self, path: &Path) -> io::Result<File> {
        let file = open_lock_file(path)?;
        match file.try_lock_shared() {
            Ok(()) => Ok(file),
            Err(fs::TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
    /// Hints that `[offset, offset + len)` of `file` will be read soon, so the kernel reads
    /// it into the page cache in the background, many such ranges at once. Only a hint: it
    /// reads nothing for the caller, and a failure costs only time. The default does nothing.
    fn prefetch(&self, _file: &File, _path: &Path, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// True when callers may bypass this trait and submit writes on the file descriptor
    /// directly (the ring's io_uring path). Only the real file system says yes, so every
    /// fault-injecting implementation sees all I/O.
    fn allows_direct_submission(&self) -> bool {
        false
    }
}

/// The text of `path` read through `storage`, or `None` when it does not exist. `what`
/// names the file in errors.
/// Opens a lock file read-write, creating it, never truncating it.
fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

pub(crate) fn read_text_optional(
    storage: &dyn Storage,
    path: &Path,
    what: &'static str,
) -> crate::Result<Option<String>> {
    match storage.read_file(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| crate::Error::io(what, path, io::Error::from(io::ErrorKind::InvalidData))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(crate::Error::io(what, path, e)),
    }
}

/// The metadata of `path`, asked through `storage`; `None` only when it is not there (see
/// [`is_absent`]). Any other error reading it (EIO, EACCES) is returned, never taken for
/// absent, unlike `Path::exists`.
pub(crate) fn metadata_if_present(
    storage: &dyn Storage,
    path: &Path,
) -> crate::error::Result<Option<fs::Metadata>> {
    match storage.metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(crate::error::Error::io("read metadata", path, e)),
    }
}

/// Whether `path` exists; errors as [`metadata_if_present`].
pub(crate) fn exists(storage: &dyn Storage, path: &Path) -> crate::error::Result<bool> {
    Ok(metadata_if_present(storage, path)?.is_some())
}

/// Whether `path` is a directory; errors as [`metadata_if_present`].
pub(crate) fn is_dir(storage: &dyn Storage, path: &Path) -> crate::error::Result<bool> {
    Ok(metadata_if_present(storage, path)?.is_some_and(|m| m.is_dir()))
}

/// An error that says the path is not there: no such entry, or a component of it is not a
/// directory.
pub(crate) fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Replaces `path` (in `dir`) with `bytes` atomically: written to `path.tmp`, synced,
/// renamed over `path`, and the directory synced. `what` names the file in errors.
pub(crate) fn replace_file(
    storage: &dyn Storage,
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    what: &'static str,
) -> crate::Result<()> {
    use crate::Error;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    match storage.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(what, &tmp, e)),
    }
    let file = storage
        .create_new(&tmp)
        .map_err(|e| Error::io(what, &tmp, e))?;
    storage
        .write_at(&file, &tmp, bytes, 0)
        .map_err(|e| Error::io(what, &tmp, e))?;
    storage
        .sync_file(&file, &tmp)
        .map_err(|e| Error::io(what, &tmp, e))?;
    storage
        .rename(&tmp, path)
        .map_err(|e| Error::io(what, path, e))?;
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("fsync directory", dir, e))
}

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdStorage;

impl Storage for StdStorage {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
    }

    fn open(&self, path: &Path, writable: bool) -> io::Result<File> {
        OpenOptions::new().read(true).write(writable).open(path)
    }

    fn open_direct(&self, path: &Path) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
    }

    fn open_device(&self, path: &Path, direct: bool) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = libc::O_DSYNC | if direct { libc::O_DIRECT } else { 0 };
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(path)
    }

    fn set_len(&self, file: &File, _path: &Path, len: u64) -> io::Result<()> {
        file.set_len(len)
    }

    fn allocate(&self, file: &File, _path: &Path, offset: u64, len: u64) -> io::Result<()> {
        let (Ok(off), Ok(l)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        };
        // `libc::fallocate` is a plain syscall wrapper; the fd is valid for the call.
        let rc = fallocate(file.as_raw_fd(), off, l);
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
            // Filesystems without fallocate: write a zero into every page so blocks exist.
            let zero = [0u8; 1];
            let mut at = offset;
            while at < offset + len {
                file.write_all_at(&zero, at)?;
                at += crate::format::PAGE_BYTES;
            }
            return Ok(());
        }
        Err(err)
    }

    fn write_at(&self, file: &File, _path: &Path, buf: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(buf, offset)
    }

    fn read_at(&self, file: &File, _path: &Path, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn sync_file(&self, file: &File, _path: &Path) -> io::Result<()> {
        file.sync_data()
    }

    fn sync_map(&self, map: &Mapping, _path: &Path, offset: usize, len: usize) -> io::Result<()> {
        map.sync_range(offset, len)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn prefetch(&self, file: &File, _path: &Path, offset: u64, len: u64) -> io::Result<()> {
        // One `WILLNEED` reads at most the device's read-ahead window (as little as 128 KiB),
        // silently dropping the rest: longer ranges go in pieces of that size.
        const PIECE: u64 = 128 << 10;
        let end = offset.saturating_add(len);
        let mut at = offset;
        while at < end {
            let piece = PIECE.min(end - at);
            let (Ok(off), Ok(l)) = (i64::try_from(at), i64::try_from(piece)) else {
                return Err(io::Error::from_raw_os_error(libc::EFBIG));
            };
            let rc = fadvise_willneed(file.as_raw_fd(), off, l);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            at += piece;
        }
        Ok(())
    }

    fn allows_direct_submission(&self) -> bool {
        true
    }
}

#[expect(unsafe_code, reason = "posix_fadvise has no safe wrapper in std")]
fn fadvise_willneed(fd: i32, offset: i64, len: i64) -> i32 {
    // SAFETY: posix_fadvise takes no pointers; an invalid fd only yields EBADF.
    unsafe { libc::posix_fadvise(fd, offset, len, libc::POSIX_FADV_WILLNEED) }
}

#[expect(unsafe_code, reason = "fallocate has no safe wrapper in std")]
fn fallocate(fd: i32, offset: i64, len: i64) -> i32 {
    // SAFETY: fallocate takes no pointers; an invalid fd only yields EBADF.
    unsafe { libc::fallocate(fd, 0, offset, len) }
}

/// The file system type (`statfs`'s `f_type`) of the one holding `path`.
pub(crate) fn fs_magic(path: &Path) -> io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    statfs_type(&c)
}

#[expect(unsafe_code, reason = "statfs has no safe wrapper in std")]
fn statfs_type(path: &std::ffi::CStr) -> io::Result<i64> {
    // SAFETY: `statfs` is a plain C struct of integers; all-zero is a valid value of it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string alive for the call; `st` is a valid, writable
    // `statfs` on this frame.
    let rc = unsafe { libc::statfs(path.as_ptr(), &raw mut st) };
    if rc == 0 {
        Ok(st.f_type as i64)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The name of the network file system of type `magic` (`statfs`), if it is one: NFS,
/// SMB/CIFS, 9p, AFS, Ceph, Lustre, GlusterFS and other FUSE mounts.
pub(crate) fn network_fs_name(magic: i64) -> Option<&'static str> {
    match magic {
        0x6969 => Some("NFS"),
        0x517B => Some("SMB"),
        0xFE53_4D42 => Some("SMB2"),
        0xFF53_4D42 => Some("CIFS"),
        0x0102_1997 => Some("9p"),
        0x5346_414F => Some("AFS"),
        0x00C3_6400 => Some("Ceph"),
        0x0BD0_0BD0 => Some("Lustre"),
        0x6573_5546 => Some("FUSE"),
        _ => None,
    }
}

/// How an armed fault point fails (test support, hidden from the docs).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fail the next matching call with this errno, then behave normally.
    Once(i32),
    /// Fail every matching call with this errno until disarmed.
    Always(i32),
    /// Write only the first `n` bytes of the next matching write, then report `EIO`.
    ShortWrite(usize),
    /// Panic in the next matching call, as a bug would: a panic inside the engine must
    /// poison the handle, not leave it running over half-updated state.
    Panic,
    /// Let `skip` matching calls through, then fail the next one with `errno` (a sweep over
    /// every I/O of an operation fails each in turn).
    After {
        /// Matching calls that succeed first.
        skip: u64,
        /// The errno of the call that fails.
        errno: i32,
    },
}

#[derive(Debug)]
struct Armed {
    point: &'static str,
    path_contains: Option<String>,
    fault: Fault,
}

/// A [`Storage`] that fails named points on demand; everything else goes to [`StdStorage`]
/// (test support, hidden from the docs).
#[doc(hidden)]
#[derive(Debug, Default, Clone)]
pub struct FaultStorage {
    armed: Arc<Mutex<Vec<Armed>>>,
    /// Calls failed per point, by any fault armed since the layer was made.
    failed: Arc<Mutex<std::collections::HashMap<&'static str, u64>>>,
    /// The path of every call per point, in order, failed or not (tests count syncs and
    /// check what was synced with it).
    paths: Arc<Mutex<std::collections::HashMap<&'static str, Vec<std::path::PathBuf>>>>,
}

impl FaultStorage {
    /// A fault layer with nothing armed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `point` (one of [`points`]) for every path.
    pub fn arm(&self, point: &'static str, fault: Fault) {
        self.arm_for(point, None, fault);
    }

    /// Arms `point` for paths containing `path_contains`.
    pub fn arm_for(&self, point: &'static str, path_contains: Option<&str>, fault: Fault) {
        let mut armed = self.armed.lock().recover();
        armed.push(Armed {
            point,
            path_contains: path_contains.map(str::to_owned),
            fault,
        });
    }

    /// Disarms every point.
    pub fn disarm_all(&self) {
        self.armed.lock().recover().clear();
    }

    /// How many calls of `point` the faults armed so far have failed (one-shot faults that
    /// fired included).
    pub fn hits(&self, point: &str) -> u64 {
        let failed = self.failed.lock().recover();
        failed.get(point).copied().unwrap_or(0)
    }

    /// How many calls reached `point` so far, failed or not.
    pub fn calls(&self, point: &str) -> u64 {
        let paths = self.paths.lock().recover();
        paths.get(point).map_or(0, |p| p.len() as u64)
    }

    /// The paths `point` was called with so far, in order, failed or not.
    pub fn paths(&self, point: &str) -> Vec<std::path::PathBuf> {
        let paths = self.paths.lock().recover();
        paths.get(point).cloned().unwrap_or_default()
    }

    fn check(&self, point: &'static str, path: &Path) -> Option<Fault> {
        self.paths
            .lock()
            .recover()
            .entry(point)
            .or_default()
            .push(path.to_owned());
        let mut armed = self.armed.lock().recover();
        let path = path.to_string_lossy();
        let idx = armed.iter().position(|a| {
            a.point == point && a.path_contains.as_deref().is_none_or(|s| path.contains(s))
        })?;
        let a = &mut armed[idx];
        if let Fault::After { skip, errno } = a.fault {
            if skip > 0 {
                a.fault = Fault::After {
                    skip: skip - 1,
                    errno,
                };
                return None;
            }
            a.fault = Fault::Once(errno);
        }
        let fault = a.fault;
        if !matches!(fault, Fault::Always(_)) {
            armed.remove(idx);
        }
        *self.failed.lock().recover().entry(point).or_insert(0) += 1;
        Some(fault)
    }

    fn fail(&self, point: &'static str, path: &Path) -> io::Result<()> {
        match self.check(point, path) {
            // `check` hands out an `After` fault as `Once` when its turn comes.
            Some(Fault::Once(errno) | Fault::Always(errno) | Fault::After { errno, .. }) => {
                Err(io::Error::from_raw_os_error(errno))
            }
            Some(Fault::ShortWrite(_)) => Err(io::Error::from_raw_os_error(libc::EIO)),
            Some(Fault::Panic) => panic!("injected panic at {point}"),
            None => Ok(()),
        }
    }
}

impl Storage for FaultStorage {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        self.fail(points::CREATE, path)?;
        StdStorage.create_new(path)
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<File> {
        self.fail(points::OPEN, path)?;
        StdStorage.open(path, writable)
    }
    fn open_direct(&self, path: &Path) -> io::Result<File> {
        self.fail(points::OPEN_DIRECT, path)?;
        StdStorage.open_direct(path)
    }
    fn open_device(&self, path: &Path, direct: bool) -> io::Result<File> {
        self.fail(points::OPEN_DEVICE, path)?;
        StdStorage.open_device(path, direct)
    }
    fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        self.fail(points::SET_LEN, path)?;
        StdStorage.set_len(file, path, len)
    }
    fn allocate(&self, file: &File, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        self.fail(points::ALLOCATE, path)?;
        StdStorage.allocate(file, path, offset, len)
    }
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.check(points::WRITE, path) {
            Some(Fault::ShortWrite(n)) => {
                StdStorage.write_at(file, path, &buf[..n.min(buf.len())], offset)?;
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            Some(Fault::Once(e) | Fault::Always(e) | Fault::After { errno: e, .. }) => {
                Err(io::Error::from_raw_os_error(e))
            }
            Some(Fault::Panic) => panic!("injected panic at {}", points::WRITE),
            None => StdStorage.write_at(file, path, buf, offset),
        }
    }
    fn read_at(&self, file: &File, path: &Path, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.fail(points::READ, path)?;
        StdStorage.read_at(file, path, buf, offset)
    }
    fn sync_file(&self, file: &File, path: &Path) -> io::Result<()> {
        self.fail(points::SYNC_FILE, path)?;
        StdStorage.sync_file(file, path)
    }
    fn sync_map(&self, map: &Mapping, path: &Path, offset: usize, len: usize) -> io::Result<()> {
        self.fail(points::SYNC_MAP, path)?;
        StdStorage.sync_map(map, path, offset, len)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.fail(points::SYNC_DIR, dir)?;
        StdStorage.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.fail(points::RENAME, from)?;
        StdStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.fail(points::REMOVE, path)?;
        StdStorage.remove_file(path)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.fail(points::CREATE_DIR, dir)?;
        StdStorage.create_dir_all(dir)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.fail(points::REMOVE_DIR_ALL, dir)?;
        StdStorage.remove_dir_all(dir)
    }
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.fail(points::READ_DIR, dir)?;
        StdStorage.read_dir(dir)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.fail(points::READ_FILE, path)?;
        StdStorage.read_file(path)
    }
    fn file_metadata(&self, file: &File, path: &Path) -> io::Result<fs::Metadata> {
        self.fail(points::FILE_METADATA, path)?;
        StdStorage.file_metadata(file, path)
    }
    fn metadata(&self, path: &Path) -> io::Result<fs::Metadata> {
        self.fail(points::METADATA, path)?;
        StdStorage.metadata(path)
    }
    fn canonicalize(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        self.fail(points::CANONICALIZE, path)?;
        StdStorage.canonicalize(path)
    }
    fn try_lock(&self, file: &File, path: &Path) -> io::Result<()> {
        self.fail(points::LOCK, path)?;
        StdStorage.try_lock(file, path)
    }
    fn prefetch(&self, file: &File, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        self.fail(points::PREFETCH, path)?;
        StdStorage.prefetch(file, path, offset, len)
    }
}

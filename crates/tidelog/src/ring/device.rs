//! The ring's target: a block device or a preallocated regular file, opened for synchronous
//! (and where possible direct) I/O. Everything goes through [`Storage`] so tests can inject
//! faults.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use super::DirectIo;
use super::format::{ALIGN_BYTES, CAPACITY_MIN};
use crate::dio;
use crate::error::{Error, Result};
use crate::io::Storage;

/// How long an open waits for the writer lock of a ring whose last writer is exiting.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Bytes written per call while zero-filling a new file.
const ZERO_FILL_CHUNK_BYTES: usize = 1 << 20;

/// An open ring target.
#[derive(Debug)]
pub(crate) struct Device {
    pub path: PathBuf,
    /// Also holds the writer lock (not when opened read-only). `None` once closed, so a
    /// closed ring releases its descriptor while handles still reference it.
    file: RwLock<Option<File>>,
    storage: Arc<dyn Storage>,
    /// `O_DIRECT` is on.
    pub direct: bool,
    /// The target is a block device (not a regular file).
    pub is_block_device: bool,
    /// Bytes of the file, or of the device.
    pub size_bytes: u64,
    /// True when this open created the file.
    pub created: bool,
}

impl Device {
    /// Opens (or, for a missing regular file with a capacity, creates) `path`.
    pub fn open(
        path: &Path,
        capacity_bytes: Option<u64>,
        direct_io: DirectIo,
        storage: Arc<dyn Storage>,
    ) -> Result<Device> {
        if let Some(cap) = capacity_bytes {
            validate_capacity(cap)?;
        }
        let (is_block_device, created) = match storage.metadata(path) {
            Ok(meta) if meta.file_type().is_block_device() => (true, false),
            Ok(meta) if meta.is_file() => (false, false),
            Ok(_) => {
                return Err(Error::invalid(
                    "path",
                    format!(
                        "{} is neither a regular file nor a block device",
                        path.display()
                    ),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let Some(cap) = capacity_bytes else {
                    return Err(Error::invalid(
                        "capacity",
                        format!(
                            "{} does not exist; pass a capacity to create it",
                            path.display()
                        ),
                    ));
                };
                create_file(storage.as_ref(), path, cap)?;
                (false, true)
            }
            Err(e) => return Err(Error::io("stat ring path", path, e)),
        };

        let opened = Self::open_created(
            path,
            capacity_bytes,
            direct_io,
            storage.clone(),
            is_block_device,
        );
        match opened {
            Ok(mut dev) => {
                dev.created = created;
                Ok(dev)
            }
            Err(e) => {
                // Do not leave a half-made ring behind: the next open would call it unformatted.
                if created {
                    let _ = storage.remove_file(path);
                }
                Err(e)
            }
        }
    }

    fn open_created(
        path: &Path,
        capacity_bytes: Option<u64>,
        direct_io: DirectIo,
        storage: Arc<dyn Storage>,
        is_block_device: bool,
    ) -> Result<Device> {
        let (mut file, direct) = open_file(storage.as_ref(), path, direct_io)?;
        // One writer per ring: a second one would interleave blocks and lose acknowledged
        // records. The advisory lock sits on the I/O descriptor on purpose: after a killed
        // writer exits, the kernel may still hold that descriptor for its last io_uring
        // writes, and the lock is released only once they are done, so a restart can never
        // race a write of the dead process. Such a lock clears within milliseconds; a
        // live writer's does not.
        let waited = std::time::Instant::now();
        loop {
            match storage.try_lock(&file, path) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && waited.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(Error::Locked {
                        path: path.to_owned(),
                    });
                }
                Err(e) => {
                    return Err(Error::io("lock ring", path, e));
                }
            }
        }
        let size_bytes = file
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::io("size ring device", path, e))?;
        if direct {
            check_alignment(path, is_block_device)?;
        }
        if let Some(cap) = capacity_bytes {
            if !is_block_device && cap != size_bytes {
                return Err(Error::CapacityMismatch {
                    path: path.to_owned(),
                    what: "capacity and file size",
                    expected: cap,
                    found: size_bytes,
                });
            }
            if is_block_device && cap > size_bytes {
                return Err(Error::CapacityMismatch {
                    path: path.to_owned(),
                    what: "capacity and device size (capacity is larger)",
                    expected: cap,
                    found: size_bytes,
                });
            }
        }
        Ok(Device {
            path: path.to_owned(),
            file: RwLock::new(Some(file)),
            storage,
            direct,
            is_block_device,
            size_bytes,
            created: false,
        })
    }

    /// Opens an existing `path` read-only with buffered I/O, taking no lock: for inspection
    /// alongside a writer, which may hold the writer lock.
    pub fn open_read_only(path: &Path, storage: Arc<dyn Storage>) -> Result<Device> {
        let meta = storage
            .metadata(path)
            .map_err(|e| Error::io("stat ring path", path, e))?;
        let is_block_device = meta.file_type().is_block_device();
        if !is_block_device && !meta.is_file() {
            return Err(Error::invalid(
                "path",
                format!(
                    "{} is neither a regular file nor a block device",
                    path.display()
                ),
            ));
        }
        let mut file = storage
            .open(path, false)
            .map_err(|e| Error::io("open ring", path, e))?;
        let size_bytes = file
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::io("size ring device", path, e))?;
        Ok(Device {
            path: path.to_owned(),
            file: RwLock::new(Some(file)),
            storage,
            direct: false,
            is_block_device,
            size_bytes,
            created: false,
        })
    }

    /// Writes all of `buf` (aligned, a multiple of [`ALIGN_BYTES`]) at device byte `pos`;
    /// durable when it returns (`O_DSYNC`).
    pub fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        debug_assert!(
            pos.is_multiple_of(ALIGN_BYTES) && (buf.len() as u64).is_multiple_of(ALIGN_BYTES)
        );
        let file = self.file.read().unwrap_or_else(PoisonError::into_inner);
        self.storage
            .write_at(open_file_of(&file)?, &self.path, buf, pos)
    }

    /// Releases the writer lock and closes the descriptor (at close: handles that still
    /// reference the ring must not keep it open).
    pub fn unlock(&self) {
        let file = self
            .file
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(file) = file {
            let _ = file.unlock();
        }
    }

    /// The descriptor for direct submission (io_uring), if the storage layer allows it.
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        let file = self.file.read().unwrap_or_else(PoisonError::into_inner);
        let file = file.as_ref()?;
        self.storage
            .allows_direct_submission()
            .then(|| file.as_raw_fd())
    }

    /// Fills `buf` (aligned) from device byte `pos`; returns the bytes read.
    pub fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        debug_assert!(
            pos.is_multiple_of(ALIGN_BYTES) && (buf.len() as u64).is_multiple_of(ALIGN_BYTES)
        );
        let file = self.file.read().unwrap_or_else(PoisonError::into_inner);
        self.storage
            .read_at(open_file_of(&file)?, &self.path, buf, pos)
    }
}

/// The device's file, or an error once the ring closed it.
fn open_file_of(file: &Option<File>) -> io::Result<&File> {
    file.as_ref()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "the ring is closed"))
}

fn validate_capacity(cap: u64) -> Result<()> {
    if cap < CAPACITY_MIN {
        return Err(Error::invalid(
            "capacity",
            format!("{cap} bytes is below the minimum of {CAPACITY_MIN}"),
        ));
    }
    if !cap.is_multiple_of(ALIGN_BYTES) {
        return Err(Error::invalid(
            "capacity",
            format!("{cap} bytes is not a multiple of {ALIGN_BYTES}"),
        ));
    }
    Ok(())
}

/// Creates `path` at `cap` bytes, allocated and written once with zeros: direct writes into
/// holes or unwritten extents are slow and need metadata commits to be durable.
fn create_file(storage: &dyn Storage, path: &Path, cap: u64) -> Result<()> {
    let file = storage
        .create_new(path)
        .map_err(|e| Error::io("create ring file", path, e))?;
    let fill = || -> io::Result<()> {
        storage.allocate(&file, path, 0, cap)?;
        let zeros = vec![0u8; ZERO_FILL_CHUNK_BYTES];
        let mut at = 0u64;
        while at < cap {
            let n = (cap - at).min(ZERO_FILL_CHUNK_BYTES as u64) as usize;
            storage.write_at(&file, path, &zeros[..n], at)?;
            at += n as u64;
        }
        storage.sync_file(&file, path)
    };
    if let Err(e) = fill() {
        drop(file);
        let _ = storage.remove_file(path);
        return Err(match e.raw_os_error() {
            Some(libc::ENOSPC) => Error::DiskFull {
                path: path.to_owned(),
                requested_bytes: cap,
            },
            _ => Error::io("preallocate ring file", path, e),
        });
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("sync ring directory", dir, e))
}

fn open_file(storage: &dyn Storage, path: &Path, mode: DirectIo) -> Result<(File, bool)> {
    let open = |direct| storage.open_device(path, direct);
    match mode {
        DirectIo::Off => Ok((
            open(false).map_err(|e| Error::io("open ring", path, e))?,
            false,
        )),
        DirectIo::Required => Ok((
            open(true).map_err(|e| Error::io("open ring with O_DIRECT", path, e))?,
            true,
        )),
        DirectIo::Auto => match open(true) {
            Ok(f) => Ok((f, true)),
            // tmpfs and some FUSE file systems refuse O_DIRECT with EINVAL.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((
                open(false).map_err(|e| Error::io("open ring", path, e))?,
                false,
            )),
            Err(e) => Err(Error::io("open ring with O_DIRECT", path, e)),
        },
    }
}

/// Direct I/O needs every offset, length and buffer aligned to the device's unit; ours is
/// [`ALIGN_BYTES`], so the device's must divide it.
fn check_alignment(path: &Path, is_block_device: bool) -> Result<()> {
    let align = dio::dio_alignment(path)
        .or_else(|| {
            is_block_device
                .then(|| sysfs_logical_block_size(path))
                .flatten()
        })
        .unwrap_or(512);
    if !align.is_power_of_two() || align > ALIGN_BYTES {
        return Err(Error::invalid(
            "direct_io",
            format!(
                "{} needs {align}-byte aligned direct I/O; tidelog's unit is {ALIGN_BYTES}",
                path.display()
            ),
        ));
    }
    Ok(())
}

fn sysfs_logical_block_size(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(path).ok()?.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let text = std::fs::read_to_string(format!(
        "/sys/dev/block/{major}:{minor}/queue/logical_block_size"
    ))
    .ok()?;
    text.trim().parse().ok()
}

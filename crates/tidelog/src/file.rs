//! Data files: creation (sparse, header written and synced before use), opening, and the one
//! shared mapping per file.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::clock;
use crate::error::{Error, Result};
use crate::format::{self, FORMAT_VERSION, FileHeader};
use crate::io::Storage;
use crate::mmap::Mapping;

/// Suffix of data file names: `<20-digit sequence>.tdl`, so names sort in creation order.
pub const DATA_SUFFIX: &str = "tdl";

/// Suffix a data file carries while it is created (see [`DataFile::create`]).
pub const TMP_SUFFIX: &str = "tmp";

/// Name of the data file with sequence number `seq`.
pub fn data_file_name(seq: u64) -> String {
    format!("{seq:020}.{DATA_SUFFIX}")
}

/// Parses a data file name back into its sequence number.
pub fn parse_data_file_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".tdl")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// One data file and its mapping, shared by every writer and reader of its blocks.
#[derive(Debug)]
pub struct DataFile {
    pub seq: u64,
    pub path: PathBuf,
    pub file: File,
    pub map: Mapping,
    pub header: FileHeader,
    /// Blocks in this file (from its own header, so files of an older geometry still work).
    pub extent_count: u32,
    /// When the file may be deleted.
    pub counters: FileCounters,
}

/// The four counters that decide when a file may be deleted (walrus's design): blocks held by
/// writers, blocks consumed, blocks handed out, and whether the allocator has moved past the
/// file. Every change checks the rule; the one change that makes it true (and only that one)
/// returns true, and its caller queues the deletion.
///
/// Early deletion is impossible by construction: `total` only grows while `fully_allocated` is
/// false; once it is true every counter moves one way (held down, consumed up), each extent
/// adds to `consumed` once (its own flag) and only after its writer released it.
#[derive(Debug, Default)]
pub struct FileCounters {
    held_blocks: AtomicU32,
    consumed_blocks: AtomicU32,
    total_blocks: AtomicU32,
    fully_allocated: AtomicBool,
    /// Set by the change that satisfied the rule, so the deletion is queued once.
    doomed: AtomicBool,
    /// Shared mode: other processes allocate and consume extents of this file too, so these
    /// counts may not cover them; a count they contradict makes the file `uncounted`.
    shared: AtomicBool,
    /// The counts do not cover every extent of the file: this handle never deletes it
    /// (the next open alone counts it from the disk).
    uncounted: AtomicBool,
    /// Bytes the file occupies on disk (header and reserved extents), for the disk cap.
    pub disk_bytes: AtomicU64,
}

/// A snapshot of one file's counters (for `stat` tools and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileState {
    /// The file's sequence number.
    pub seq: u64,
    /// The file.
    pub path: PathBuf,
    /// Blocks of extents a writer still appends to.
    pub held_blocks: u32,
    /// Blocks of extents every consumer is done with (or outside retention, or of a
    /// deleted topic).
    pub consumed_blocks: u32,
    /// Blocks handed out so far.
    pub total_blocks: u32,
    /// The allocator moved on: no more blocks will be handed out from this file.
    pub fully_allocated: bool,
    /// All four counters say the file may go (its deletion is queued or done).
    pub deletable: bool,
}

impl FileCounters {
    /// The allocator handed out `blocks` to a writer.
    pub fn allocate(&self, blocks: u32) {
        if self.fully_allocated.load(Ordering::Acquire) {
            // Shared mode: another process's view sealed it (a spare it did not know as one).
            debug_assert!(
                self.shared.load(Ordering::Acquire),
                "file counters: allocated from a file the allocator moved past"
            );
            self.uncounted.store(true, Ordering::Release);
        }
        self.total_blocks.fetch_add(blocks, Ordering::AcqRel);
        self.held_blocks.fetch_add(blocks, Ordering::AcqRel);
    }

    /// Recovery found an extent of `blocks`; `held` when a writer resumes it.
    pub fn recovered(&self, blocks: u32, held: bool) {
        self.total_blocks.fetch_add(blocks, Ordering::AcqRel);
        if held {
            self.held_blocks.fetch_add(blocks, Ordering::AcqRel);
        }
    }

    /// Shared mode: other processes' extents in this file may be missing from the counts.
    pub fn share(&self) {
        self.shared.store(true, Ordering::Release);
    }

    /// A writer is done with an extent of `blocks`. True when the file became deletable.
    pub fn release(&self, blocks: u32) -> bool {
        let before = self.held_blocks.fetch_sub(blocks, Ordering::AcqRel);
        self.expect(before >= blocks, "released more blocks than held");
        self.check()
    }

    /// An extent of `blocks` is consumed. True when the file became deletable.
    pub fn consume(&self, blocks: u32) -> bool {
        let after = self.consumed_blocks.fetch_add(blocks, Ordering::AcqRel) + blocks;
        self.expect(
            after <= self.total_blocks.load(Ordering::Acquire),
            "consumed more blocks than handed out",
        );
        self.check()
    }

    /// A count that must hold: a bug of this handle's bookkeeping when it does not, unless
    /// other processes share the file (shared mode), whose extents it does not count: then
    /// the file is left uncounted, never deleted by this handle.
    fn expect(&self, holds: bool, what: &str) {
        if holds {
            return;
        }
        assert!(self.shared.load(Ordering::Acquire), "file counters: {what}");
        self.uncounted.store(true, Ordering::Release);
    }

    /// The allocator moved past this file. True when the file became deletable.
    pub fn seal_allocation(&self) -> bool {
        self.fully_allocated.store(true, Ordering::Release);
        self.check()
    }

    fn rule_holds(&self) -> bool {
        // `fully_allocated` first: after it, `total` no longer moves.
        self.fully_allocated.load(Ordering::Acquire)
            && !self.uncounted.load(Ordering::Acquire)
            && self.held_blocks.load(Ordering::Acquire) == 0
            && self.consumed_blocks.load(Ordering::Acquire)
                == self.total_blocks.load(Ordering::Acquire)
    }

    /// Checks the rule; true only for the one caller that first sees it hold.
    pub fn check(&self) -> bool {
        self.rule_holds() && !self.doomed.swap(true, Ordering::AcqRel)
    }

    /// A snapshot for `file_states`.
    pub fn state(&self, seq: u64, path: &Path) -> FileState {
        FileState {
            seq,
            path: path.to_owned(),
            held_blocks: self.held_blocks.load(Ordering::Acquire),
            consumed_blocks: self.consumed_blocks.load(Ordering::Acquire),
            total_blocks: self.total_blocks.load(Ordering::Acquire),
            fully_allocated: self.fully_allocated.load(Ordering::Acquire),
            deletable: self.doomed.load(Ordering::Acquire),
        }
    }
}

impl DataFile {
    /// Byte position of block `index` inside the file.
    pub fn block_position(&self, index: u32) -> u64 {
        format::FILE_HEADER_BYTES + u64::from(index) * self.header.block_size_bytes
    }

    /// Creates file `seq` in `dir`: under a temporary name (`NAME.tmp`), sparse at full
    /// length, its header written and synced, then renamed to its name and the directory
    /// synced. A data file therefore never exists under its name without a valid header: one
    /// that lacks it is damage (reported), never a creation that did not finish, and a crash
    /// leaves at most a `.tmp` file, which holds no record and is removed at the next open.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        seq: u64,
        file_size_bytes: u64,
        block_size_bytes: u64,
        version: u32,
    ) -> Result<Arc<DataFile>> {
        debug_assert!(
            version == format::VERSION_ABSOLUTE || version == format::VERSION_BATCHED,
            "created files hold a writer's extents"
        );
        let path = dir.join(data_file_name(seq));
        let tmp = dir.join(format!("{}.{TMP_SUFFIX}", data_file_name(seq)));
        // A leftover of a crash at this very step of an earlier run (the open removes them
        // first, but another creator may have crashed since): it never held a record.
        match storage.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove unfinished data file", &tmp, e)),
        }
        let file = storage
            .create_new(&tmp)
            .map_err(|e| Error::io("create data file", &tmp, e))?;
        let header = FileHeader {
            version,
            file_seq: seq,
            file_size_bytes,
            block_size_bytes,
            created_us: clock::now_us(),
        };
        let setup = (|| {
            storage.set_len(&file, &tmp, file_size_bytes)?;
            storage.allocate(&file, &tmp, 0, format::FILE_HEADER_BYTES)?;
            storage.write_at(&file, &tmp, &header.encode(), 0)?;
            storage.sync_file(&file, &tmp)?;
            storage.rename(&tmp, &path)?;
            storage.sync_dir(dir)
        })();
        if let Err(e) = setup {
            // Leave no half-made file behind; a failed unlink here changes nothing we report
            // (the next open removes a `.tmp` leftover). After the rename the file is whole
            // and empty: removing it loses nothing.
            let _ = storage.remove_file(&tmp);
            let _ = storage.remove_file(&path);
            if e.raw_os_error() == Some(libc::ENOSPC) {
                return Err(Error::DiskFull {
                    path,
                    requested_bytes: format::FILE_HEADER_BYTES,
                });
            }
            return Err(Error::io("create data file", path, e));
        }
        let map =
            Mapping::map(&file, file_size_bytes, true).map_err(|e| Error::io("mmap", &path, e))?;
        let extent_count =
            ((file_size_bytes - format::FILE_HEADER_BYTES) / block_size_bytes) as u32;
        let counters = FileCounters::default();
        counters
            .disk_bytes
            .store(format::FILE_HEADER_BYTES, Ordering::Release);
        Ok(Arc::new(DataFile {
            seq,
            path,
            file,
            map,
            header,
            extent_count,
            counters,
        }))
    }

    /// Opens an existing data file. `Ok(None)` for a file deleted since it was listed (by
    /// retention in another process). A file without a valid header, or shorter than its header says,
    /// is damaged: `Corruption` (files are renamed into place only once their header is
    /// durable, see [`DataFile::create`]).
    pub fn open(
        storage: &dyn Storage,
        path: &Path,
        writable: bool,
    ) -> Result<Option<Arc<DataFile>>> {
        let file = match storage.open(path, writable) {
            Ok(f) => f,
            // Deleted since it was listed (retention, by the writer or the housekeeping
            // leader of the processes sharing the directory).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("open data file", path, e)),
        };
        let header = read_header(storage, &file, path)?;
        let meta = storage
            .file_metadata(&file, path)
            .map_err(|e| Error::io("stat data file", path, e))?;
        let len = meta.len();
        if len < header.file_size_bytes {
            // The creator sizes a file before it writes the header, so a valid header on a
            // short file means the file was cut: records may be gone.
            return Err(damaged(
                path,
                len,
                format!(
                    "data file is {len} bytes but its header says {}",
                    header.file_size_bytes
                ),
            ));
        }
        let map = Mapping::map(&file, header.file_size_bytes, writable)
            .map_err(|e| Error::io("mmap", path, e))?;
        let extent_count =
            ((header.file_size_bytes - format::FILE_HEADER_BYTES) / header.block_size_bytes) as u32;
        Ok(Some(Arc::new(DataFile {
            seq: header.file_seq,
            path: path.to_owned(),
            file,
            map,
            header,
            extent_count,
            counters: FileCounters {
                // st_blocks counts 512-byte units whatever the filesystem block size.
                disk_bytes: AtomicU64::new(meta.blocks() * 512),
                ..FileCounters::default()
            },
        })))
    }
}

/// Reads and checks the header of the data file `file` at `path`: one that does not decode
/// is damaged (the error says whether the file holds data at all), a version this build
/// does not know is unsupported, and impossible geometry is damage.
fn read_header(storage: &dyn Storage, file: &File, path: &Path) -> Result<FileHeader> {
    let mut buf = [0u8; format::FH_LEN];
    let n = storage
        .read_at(file, path, &mut buf, 0)
        .map_err(|e| Error::io("read data file header", path, e))?;
    let header = match FileHeader::decode(&buf[..n]) {
        Ok(header) => header,
        Err(why) => {
            let holds = match first_nonzero(storage, file, path, 0)? {
                Some(_) => "the file holds data",
                None => "the file holds only zeros",
            };
            return Err(damaged(
                path,
                0,
                format!("data file header is damaged ({why}); {holds}"),
            ));
        }
    };
    if header.version > FORMAT_VERSION || header.version == 0 {
        return Err(Error::UnsupportedVersion {
            path: path.to_owned(),
            found: header.version,
            supported: FORMAT_VERSION,
        });
    }
    let geometry_ok = header.block_size_bytes >= 2 * format::PAGE_BYTES
        && header.block_size_bytes.is_multiple_of(format::PAGE_BYTES)
        && header.file_size_bytes >= format::FILE_HEADER_BYTES + header.block_size_bytes
        && header.file_size_bytes <= u64::from(u32::MAX) + 1;
    if !geometry_ok {
        return Err(damaged(
            path,
            0,
            format!(
                "file header has impossible geometry (file {} bytes, block {} bytes)",
                header.file_size_bytes, header.block_size_bytes
            ),
        ));
    }
    Ok(header)
}

/// A `Corruption` error about a data file as a whole (no topic known).
fn damaged(path: &Path, position: u64, reason: String) -> Error {
    Error::Corruption {
        topic: String::new(),
        offset: 0,
        path: path.to_owned(),
        position,
        reason,
    }
}

/// Position of the first non-zero byte of `file` at or after `from`, if any. Reads the file
/// in 1 MiB chunks: only called for a file without a valid header, to tell an unfinished
/// creation (all zeros, safe to remove) from a damaged file (never removed).
pub fn first_nonzero(
    storage: &dyn Storage,
    file: &File,
    path: &Path,
    from: u64,
) -> Result<Option<u64>> {
    const CHUNK_BYTES: usize = 1 << 20;
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut at = from;
    loop {
        let n = storage
            .read_at(file, path, &mut buf, at)
            .map_err(|e| Error::io("read data file", path, e))?;
        if let Some(i) = buf[..n].iter().position(|&b| b != 0) {
            return Ok(Some(at + i as u64));
        }
        if n < CHUNK_BYTES {
            return Ok(None);
        }
        at += n as u64;
    }
}

//! Data files: creation (sparse, header written and synced before use), opening, and the one
//! shared mapping per file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock;
use crate::error::{Error, Result};
use crate::format::{self, FORMAT_VERSION, FileHeader};
use crate::io::Storage;
use crate::mmap::Mapping;

/// Suffix of data file names: `<20-digit sequence>.tdl`, so names sort in creation order.
pub const DATA_SUFFIX: &str = "tdl";

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
    pub block_count: u32,
}

impl DataFile {
    /// Byte position of block `index` inside the file.
    pub fn block_position(&self, index: u32) -> u64 {
        format::FILE_HEADER_BYTES + u64::from(index) * self.header.block_size_bytes
    }

    /// Creates file `seq` in `dir`: sparse at full length, header written and synced, then
    /// the directory synced, so a crash never leaves a file without a valid header that a
    /// block of ours points into.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        seq: u64,
        file_size_bytes: u64,
        block_size_bytes: u64,
    ) -> Result<Arc<DataFile>> {
        let path = dir.join(data_file_name(seq));
        let file = storage
            .create_new(&path)
            .map_err(|e| Error::io("create data file", &path, e))?;
        let header = FileHeader {
            version: FORMAT_VERSION,
            file_seq: seq,
            file_size_bytes,
            block_size_bytes,
            created_us: clock::now_us(),
        };
        let setup = (|| {
            storage.set_len(&file, &path, file_size_bytes)?;
            storage.allocate(&file, &path, 0, format::FILE_HEADER_BYTES)?;
            storage.write_at(&file, &path, &header.encode(), 0)?;
            storage.sync_file(&file, &path)?;
            storage.sync_dir(dir)
        })();
        if let Err(e) = setup {
            // Leave no half-made file behind; a failed unlink here changes nothing we report.
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
        let block_count = ((file_size_bytes - format::FILE_HEADER_BYTES) / block_size_bytes) as u32;
        Ok(Arc::new(DataFile {
            seq,
            path,
            file,
            map,
            header,
            block_count,
        }))
    }

    /// Opens an existing data file. `Ok(None)` means the file has no valid header yet (a
    /// creation that crashed or is in progress in another process).
    pub fn open(
        storage: &dyn Storage,
        path: &Path,
        writable: bool,
    ) -> Result<Option<Arc<DataFile>>> {
        let file = storage
            .open(path, writable)
            .map_err(|e| Error::io("open data file", path, e))?;
        let mut buf = [0u8; format::FH_LEN];
        let n = storage
            .read_at(&file, path, &mut buf, 0)
            .map_err(|e| Error::io("read data file header", path, e))?;
        if n < buf.len() {
            return Ok(None);
        }
        let Ok(header) = FileHeader::decode(&buf) else {
            return Ok(None);
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
            return Err(Error::Corruption {
                topic: String::new(),
                offset: 0,
                path: path.to_owned(),
                position: 0,
                reason: format!(
                    "file header has impossible geometry (file {} bytes, block {} bytes)",
                    header.file_size_bytes, header.block_size_bytes
                ),
            });
        }
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat data file", path, e))?
            .len();
        if len < header.file_size_bytes {
            // Still being sized by its creator (another process), or damaged: not usable yet.
            return Ok(None);
        }
        let map = Mapping::map(&file, header.file_size_bytes, writable)
            .map_err(|e| Error::io("mmap", path, e))?;
        let block_count =
            ((header.file_size_bytes - format::FILE_HEADER_BYTES) / header.block_size_bytes) as u32;
        Ok(Some(Arc::new(DataFile {
            seq: header.file_seq,
            path: path.to_owned(),
            file,
            map,
            header,
            block_count,
        })))
    }
}

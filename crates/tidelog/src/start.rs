//! Log starts: the first offset a topic keeps after [`crate::Wal::delete_records`] (Kafka's
//! log start offset), which may lie inside an extent. One small file per topic that has one,
//! `starts/TOPIC.start`, in the cursor file's format (two slots, the newest valid wins) with
//! an empty group name; it only moves forward. Bytes in `docs/FORMAT.md` ("Log start file").

use std::path::{Path, PathBuf};

use crate::cursor::{CursorFile, newest_in_dir};
use crate::error::{Error, Result};
use crate::io::Storage;

/// Directory (inside the data directory) holding log start files.
pub const START_DIR: &str = "starts";
const START_SUFFIX: &str = "start";

fn path_of(data_dir: &Path, topic: &str) -> PathBuf {
    // A topic name has at most 249 bytes: the name fits a file name.
    data_dir
        .join(START_DIR)
        .join(format!("{topic}.{START_SUFFIX}"))
}

/// Durably moves the log start of `topic` forward to `offset` (never back; another process
/// may have moved it further). Returns the log start now recorded.
pub fn advance(storage: &dyn Storage, data_dir: &Path, topic: &str, offset: u64) -> Result<u64> {
    let dir = data_dir.join(START_DIR);
    match storage.metadata(&dir) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Made durable before a file in it is: a crash never loses a start with it.
            storage
                .create_dir_all(&dir)
                .map_err(|e| Error::io("create directory", &dir, e))?;
            storage
                .sync_dir(data_dir)
                .map_err(|e| Error::io("fsync directory", data_dir, e))?;
        }
        Err(e) => return Err(Error::io("stat", &dir, e)),
    }
    let file = CursorFile::load_at(storage, path_of(data_dir, topic), topic, "")?;
    file.advance(storage, offset)
}

/// Every recorded log start: `(topic, offset)`. A file that names another topic than its
/// name says is skipped; one without a valid slot is corruption (never read as "no start",
/// which would bring deleted records back).
pub fn read_all(storage: &dyn Storage, data_dir: &Path) -> Result<Vec<(String, u64)>> {
    let dir = data_dir.join(START_DIR);
    let suffix = format!(".{START_SUFFIX}");
    Ok(newest_in_dir(storage, &dir, START_SUFFIX)?
        .into_iter()
        .filter(|(name, r)| {
            name.strip_suffix(&suffix) == Some(r.topic.as_str()) && r.group.is_empty()
        })
        .map(|(_, r)| (r.topic, r.offset))
        .collect())
}

/// Removes the log start file of `topic` (its deletion), if there is one.
pub fn remove(storage: &dyn Storage, data_dir: &Path, topic: &str) -> Result<()> {
    let path = path_of(data_dir, topic);
    match storage.remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("remove log start", &path, e)),
    }
    let dir = data_dir.join(START_DIR);
    storage
        .sync_dir(&dir)
        .map_err(|e| Error::io("fsync directory", &dir, e))
}

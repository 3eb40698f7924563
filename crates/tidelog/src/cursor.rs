//! Named consumer cursors: one small file per (topic, group), two alternating slots.
//!
//! A commit writes the slot that does not hold the newest state (rkyv archive, length and
//! CRC-32), then fdatasyncs. A torn slot write leaves the other slot intact, so a cursor is
//! never lost and never rewound past its previous commit. No map of all cursors is rewritten.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::clock;
use crate::error::{Error, Result};
use crate::format::{self, CURSOR_SLOT_BYTES};
use crate::io::Storage;
use crate::poison::Recover;

/// Directory (inside the data directory) holding cursor files.
pub const CURSOR_DIR: &str = "cursors";
const CURSOR_SUFFIX: &str = "cur";

/// The persisted content of one slot.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct CursorRecord {
    /// The topic.
    pub topic: String,
    /// The consumer group.
    pub group: String,
    /// Next offset the group will read (everything below is consumed).
    pub offset: u64,
    /// Increases by one per commit; the newer valid slot wins.
    pub generation: u64,
    /// When the commit was made, microseconds since the Unix epoch.
    pub updated_us: u64,
}

/// Encodes a slot: magic, body length, CRC-32 of the body, body, zero padding.
pub fn encode_slot(record: &CursorRecord) -> Result<Vec<u8>> {
    let body = rkyv::to_bytes::<rkyv::rancor::Error>(record)
        .map_err(|e| Error::invalid("cursor", format!("cannot encode: {e}")))?;
    if body.len() > format::CS_BODY_MAX {
        return Err(Error::limit(
            "cursor slot bytes",
            body.len() as u64,
            format::CS_BODY_MAX as u64,
        ));
    }
    let mut slot = vec![0u8; CURSOR_SLOT_BYTES];
    format::put_u32(&mut slot, format::CS_MAGIC, format::CURSOR_MAGIC);
    format::put_u32(&mut slot, format::CS_LEN, body.len() as u32);
    format::put_u32(&mut slot, format::CS_CRC, crc32fast::hash(&body));
    slot[format::CS_BODY..format::CS_BODY + body.len()].copy_from_slice(&body);
    Ok(slot)
}

/// Decodes a slot; `None` when empty, torn or not ours.
pub fn decode_slot(slot: &[u8]) -> Option<CursorRecord> {
    if slot.len() < format::CS_BODY
        || format::get_u32(slot, format::CS_MAGIC) != format::CURSOR_MAGIC
    {
        return None;
    }
    let len = format::get_u32(slot, format::CS_LEN) as usize;
    let body = slot.get(format::CS_BODY..format::CS_BODY + len)?;
    if crc32fast::hash(body) != format::get_u32(slot, format::CS_CRC) {
        return None;
    }
    // rkyv wants an aligned buffer; validation (bytecheck) runs in `from_bytes`.
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(len);
    aligned.extend_from_slice(body);
    rkyv::from_bytes::<CursorRecord, rkyv::rancor::Error>(&aligned).ok()
}

/// The newest valid slot of a cursor file's bytes. A cursor file is renamed into place
/// only with its first commit in both slots (see `CursorFile::commit`), so a file without a
/// valid slot was cut or damaged: `Corruption`, never read as "no group" (whose records
/// retention could then drop).
pub fn newest_slot(bytes: &[u8], path: &Path) -> Result<CursorRecord> {
    bytes
        .chunks(CURSOR_SLOT_BYTES)
        .filter_map(decode_slot)
        .max_by_key(|r| r.generation)
        .ok_or_else(|| Error::Corruption {
            topic: String::new(),
            offset: 0,
            path: path.to_owned(),
            position: 0,
            reason: "no slot of the cursor file is valid".to_owned(),
        })
}

/// The newest valid slot of every `*.SUFFIX` file in `dir`, with the file's name (none when
/// `dir` does not exist). A file removed since it was listed (its group or topic deleted by
/// another process) is skipped; one with no valid slot is `Corruption`.
pub(crate) fn newest_in_dir(
    storage: &dyn Storage,
    dir: &Path,
    suffix: &str,
) -> Result<Vec<(String, CursorRecord)>> {
    let entries = match storage.read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let suffix = format!(".{suffix}");
    let mut found = Vec::new();
    for entry in entries {
        let Ok(name) = entry.name.into_string() else {
            continue;
        };
        if !name.ends_with(&suffix) {
            continue;
        }
        let path = dir.join(&name);
        let bytes = match storage.read_file(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        found.push((name, newest_slot(&bytes, &path)?));
    }
    Ok(found)
}

/// Longest file name most Linux filesystems accept.
const FILE_NAME_MAX: usize = 255;

/// File name of the cursor of `group` on `topic`: `TOPIC@GROUP.cur` (`@` cannot occur in
/// either name), or `#` and a 64-bit FNV-1a hash of both when that would exceed 255 bytes. The
/// slots record topic and group in full, and loading ignores slots of another pair.
pub fn cursor_file_name(topic: &str, group: &str) -> String {
    let plain = format!("{topic}@{group}.{CURSOR_SUFFIX}");
    if plain.len() <= FILE_NAME_MAX {
        return plain;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in topic.bytes().chain([0u8]).chain(group.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("#{hash:016x}.{CURSOR_SUFFIX}")
}

/// Longest a commit waits for another process's commit to the same cursor.
const COMMIT_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A commit's turn on a cursor file (an open-file-description lock on its first byte,
/// released when dropped): commits of one group from several processes take turns.
struct CommitTurn(File);

impl CommitTurn {
    /// Takes the turn through a copy of `file`'s descriptor (the same open file description).
    fn take(file: &File, path: &Path) -> Result<CommitTurn> {
        let file = file
            .try_clone()
            .map_err(|e| Error::io("lock cursor", path, e))?;
        let start = std::time::Instant::now();
        loop {
            match crate::ofd::try_lock(&file, 0, crate::ofd::Kind::Exclusive) {
                Ok(true) => return Ok(CommitTurn(file)),
                Ok(false) if start.elapsed() < COMMIT_TURN_WAIT => {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                Ok(false) => {
                    return Err(Error::LockTimeout {
                        lock: "cursor",
                        holder_pid: 0,
                        waited_ms: COMMIT_TURN_WAIT.as_millis() as u64,
                    });
                }
                Err(e) => return Err(Error::io("lock cursor", path, e)),
            }
        }
    }
}

impl Drop for CommitTurn {
    fn drop(&mut self) {
        let _ = crate::ofd::unlock(&self.0, 0);
    }
}

#[derive(Debug)]
struct CursorInner {
    file: Option<File>,
    /// The inode of the cursor file as this handle found or made it: another process that
    /// deleted the group (or its topic) removed that file, and a later commit there may
    /// have made a new one (see [`CursorFile::replaced`]).
    inode: Option<u64>,
    newest: Option<CursorRecord>,
    /// The group was deleted: commits fail instead of recreating the file.
    deleted: bool,
}

/// One persisted cursor, shared by every reader of its group in this process.
#[derive(Debug)]
pub struct CursorFile {
    topic: String,
    group: String,
    path: PathBuf,
    dir: PathBuf,
    inner: Mutex<CursorInner>,
}

impl CursorFile {
    fn load(storage: &dyn Storage, dir: &Path, topic: &str, group: &str) -> Result<CursorFile> {
        CursorFile::load_at(
            storage,
            dir.join(cursor_file_name(topic, group)),
            topic,
            group,
        )
    }

    /// The two-slot file at `path` (in an existing directory) of `topic` and `group`, read
    /// if it exists (another use of the same format: `crate::start`).
    pub(crate) fn load_at(
        storage: &dyn Storage,
        path: PathBuf,
        topic: &str,
        group: &str,
    ) -> Result<CursorFile> {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut newest = None;
        let mut inode = None;
        // Read-only here; the first commit opens the file for writing.
        match storage.open(&path, false) {
            Ok(f) => {
                inode = Some(inode_of_file(storage, &f, &path)?);
                let mut buf = vec![0u8; 2 * CURSOR_SLOT_BYTES];
                let n = storage
                    .read_at(&f, &path, &mut buf, 0)
                    .map_err(|e| Error::io("read cursor", &path, e))?;
                buf.truncate(n);
                newest = Some(newest_slot(&buf, &path)?)
                    .filter(|r| r.topic == topic && r.group == group);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("open cursor", &path, e)),
        }
        Ok(CursorFile {
            topic: topic.to_owned(),
            group: group.to_owned(),
            path,
            dir,
            inner: Mutex::new(CursorInner {
                file: None,
                inode,
                newest,
                deleted: false,
            }),
        })
    }

    /// Whether the file this handle found or made is no longer the one at the cursor's path:
    /// another process removed it (deleting the group or its topic), and maybe made a new
    /// one since. The cached commit and open file then belong to a deleted group.
    fn replaced(&self, storage: &dyn Storage) -> Result<bool> {
        let inner = self.inner.lock().recover();
        let Some(known) = inner.inode else {
            return Ok(false);
        };
        Ok(inode_of(storage, &self.path)? != Some(known))
    }

    /// The committed offset, if the group ever committed.
    pub fn committed(&self) -> Option<u64> {
        let inner = self.inner.lock().recover();
        inner.newest.as_ref().map(|r| r.offset)
    }

    /// Durably records `offset` as the group's position. Commits of one group from several
    /// processes (shared mode) take turns on the file, each after reading the newest commit
    /// on disk: the newest is never overwritten, and the last commit wins.
    pub fn commit(&self, storage: &dyn Storage, offset: u64) -> Result<()> {
        self.write(storage, offset, false).map(drop)
    }

    /// Durably moves the offset forward to `offset`, never back: a newer commit already at
    /// or past it (from any process) stays. Returns the offset now committed.
    pub(crate) fn advance(&self, storage: &dyn Storage, offset: u64) -> Result<u64> {
        self.write(storage, offset, true)
    }

    fn write(&self, storage: &dyn Storage, offset: u64, forward_only: bool) -> Result<u64> {
        let mut inner = self.inner.lock().recover();
        if inner.deleted {
            return Err(Error::UnknownGroup {
                topic: self.topic.clone(),
                group: self.group.clone(),
            });
        }
        if inner.file.is_none() {
            match storage.open(&self.path, true) {
                Ok(f) => {
                    inner.inode = Some(inode_of_file(storage, &f, &self.path)?);
                    inner.file = Some(f);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("open cursor", &self.path, e)),
            }
        }
        let turn = match inner.file.as_ref() {
            Some(file) => {
                let turn = CommitTurn::take(file, &self.path)?;
                inner.newest = Some(self.read_newest(storage, file)?);
                Some(turn)
            }
            None => None,
        };
        if let Some(newest) = inner
            .newest
            .as_ref()
            .filter(|r| r.offset == offset || (forward_only && r.offset > offset))
        {
            return Ok(newest.offset);
        }
        let generation = inner.newest.as_ref().map_or(0, |r| r.generation + 1);
        let record = CursorRecord {
            topic: self.topic.clone(),
            group: self.group.clone(),
            offset,
            generation,
            updated_us: clock::now_us(),
        };
        let slot = encode_slot(&record)?;
        if inner.file.is_none() {
            let file = self.open_for_write(storage, &slot)?;
            inner.inode = Some(inode_of_file(storage, &file, &self.path)?);
            inner.file = Some(file);
        }
        let Some(file) = inner.file.as_ref() else {
            return Err(Error::Closed);
        };
        let at = (generation % 2) * CURSOR_SLOT_BYTES as u64;
        storage
            .write_at(file, &self.path, &slot, at)
            .map_err(|e| Error::io("write cursor", &self.path, e))?;
        storage
            .sync_file(file, &self.path)
            .map_err(|e| Error::io("fdatasync cursor", &self.path, e))?;
        drop(turn);
        inner.newest = Some(record);
        Ok(offset)
    }

    /// Reads the newest commit on disk again (when the file exists).
    fn reload(&self, storage: &dyn Storage) -> Result<()> {
        let mut inner = self.inner.lock().recover();
        if inner.deleted {
            return Ok(());
        }
        let newest = match inner.file.as_ref() {
            Some(f) => self.read_newest(storage, f)?,
            None => match storage.open(&self.path, false) {
                Ok(f) => self.read_newest(storage, &f)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(Error::io("open cursor", &self.path, e)),
            },
        };
        if newest.topic == self.topic && newest.group == self.group {
            inner.newest = Some(newest);
        }
        Ok(())
    }

    /// The newest valid commit in `file`, as any process left it.
    fn read_newest(&self, storage: &dyn Storage, file: &File) -> Result<CursorRecord> {
        let mut buf = vec![0u8; 2 * CURSOR_SLOT_BYTES];
        let n = storage
            .read_at(file, &self.path, &mut buf, 0)
            .map_err(|e| Error::io("read cursor", &self.path, e))?;
        buf.truncate(n);
        newest_slot(&buf, &self.path)
    }

    /// Opens the cursor file for the next commit. A missing one is created whole: written
    /// under a temporary name with `first` in both slots, synced, renamed into place and the
    /// directory synced, so a cursor file never exists without a valid slot and one damaged
    /// slot always leaves the other. (Rewriting `first` over slot 0 afterwards is harmless.)
    fn open_for_write(&self, storage: &dyn Storage, first: &[u8]) -> Result<File> {
        match storage.open(&self.path, true) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("open cursor", &self.path, e)),
        }
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        match storage.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove cursor leftover", &tmp, e)),
        }
        let f = storage
            .create_new(&tmp)
            .map_err(|e| Error::io("create cursor", &tmp, e))?;
        let both = [first, first].concat();
        storage
            .write_at(&f, &tmp, &both, 0)
            .map_err(|e| Error::io("write cursor", &tmp, e))?;
        storage
            .sync_file(&f, &tmp)
            .map_err(|e| Error::io("fdatasync cursor", &tmp, e))?;
        storage
            .rename(&tmp, &self.path)
            .map_err(|e| Error::io("rename cursor", &tmp, e))?;
        storage
            .sync_dir(&self.dir)
            .map_err(|e| Error::io("fsync directory", &self.dir, e))?;
        Ok(f)
    }
}

/// Every registered cursor of one `Wal`, by topic and group, so readers of one group share
/// one file and deletion knows the slowest group of each topic.
#[derive(Debug, Default)]
pub struct CursorTable {
    open: Mutex<HashMap<String, HashMap<String, Arc<CursorFile>>>>,
}

impl CursorTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Arc<CursorFile>>>> {
        self.open.lock().recover()
    }

    /// The cursor of `group` on `topic`, loaded (and registered) on first use; a registered
    /// one reads its newest commit again (another process may have committed since).
    pub fn get(
        &self,
        storage: &dyn Storage,
        data_dir: &Path,
        topic: &str,
        group: &str,
    ) -> Result<Arc<CursorFile>> {
        let mut open = self.lock();
        if let Some(c) = open.get(topic).and_then(|groups| groups.get(group)) {
            if !c.replaced(storage)? {
                c.reload(storage)?;
                return Ok(Arc::clone(c));
            }
            // Another process deleted the group or its topic: its readers here fail their
            // next commit, and the group starts afresh.
            c.inner.lock().recover().deleted = true;
        }
        let dir = data_dir.join(CURSOR_DIR);
        let c = Arc::new(CursorFile::load(storage, &dir, topic, group)?);
        open.entry(topic.to_owned())
            .or_default()
            .insert(group.to_owned(), Arc::clone(&c));
        Ok(c)
    }

    /// Registers every group that has committed at least once (a writable open).
    pub fn load_all(&self, storage: &dyn Storage, data_dir: &Path) -> Result<()> {
        let dir = data_dir.join(CURSOR_DIR);
        for (name, r) in newest_in_dir(storage, &dir, CURSOR_SUFFIX)? {
            if cursor_file_name(&r.topic, &r.group) == name {
                self.get(storage, data_dir, &r.topic, &r.group)?;
            }
        }
        Ok(())
    }

    /// The lowest committed offset over the registered groups of `topic` (a group that has
    /// not committed yet counts as 0); `None` when the topic has no group.
    pub fn min_committed(&self, topic: &str) -> Option<u64> {
        let open = self.lock();
        open.get(topic)?
            .values()
            .map(|c| c.committed().unwrap_or(0))
            .min()
    }

    /// Unregisters `group` on `topic` and deletes its file. False when it was neither
    /// registered nor on disk.
    pub fn remove(
        &self,
        storage: &dyn Storage,
        data_dir: &Path,
        topic: &str,
        group: &str,
    ) -> Result<bool> {
        let removed = {
            let mut open = self.lock();
            let c = open.get_mut(topic).and_then(|groups| groups.remove(group));
            if open.get(topic).is_some_and(HashMap::is_empty) {
                open.remove(topic);
            }
            c
        };
        if let Some(c) = &removed {
            let mut inner = c.inner.lock().recover();
            inner.deleted = true;
            inner.file = None;
        }
        let dir = data_dir.join(CURSOR_DIR);
        let path = dir.join(cursor_file_name(topic, group));
        let on_disk = match storage.remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io("remove cursor", &path, e)),
        };
        if on_disk {
            storage
                .sync_dir(&dir)
                .map_err(|e| Error::io("fsync directory", &dir, e))?;
        }
        Ok(removed.is_some() || on_disk)
    }

    /// Unregisters and deletes every group of `topic` (topic deletion).
    pub fn remove_topic(&self, storage: &dyn Storage, data_dir: &Path, topic: &str) -> Result<()> {
        let mut groups: Vec<String> = self
            .lock()
            .get(topic)
            .map(|g| g.keys().cloned().collect())
            .unwrap_or_default();
        groups.extend(Self::list(storage, data_dir, topic)?);
        groups.sort();
        groups.dedup();
        for group in groups {
            self.remove(storage, data_dir, topic, &group)?;
        }
        Ok(())
    }

    /// Groups with a cursor file for `topic`, sorted. A directory or hashed cursor file that
    /// does not read is an error, not "no groups": a topic's deletion must find them all.
    pub fn list(storage: &dyn Storage, data_dir: &Path, topic: &str) -> Result<Vec<String>> {
        let dir = data_dir.join(CURSOR_DIR);
        let prefix = format!("{topic}@");
        let suffix = format!(".{CURSOR_SUFFIX}");
        let entries = match storage.read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if crate::io::is_absent(&e) => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list", &dir, e)),
        };
        let mut groups: Vec<String> = Vec::new();
        for name in entries
            .into_iter()
            .filter_map(|e| e.name.into_string().ok())
        {
            if let Some(group) = name
                .strip_prefix(&prefix)
                .and_then(|n| n.strip_suffix(&suffix))
            {
                groups.push(group.to_owned());
            } else if name.starts_with('#') && name.ends_with(&suffix) {
                // A hashed name: the slots say whose cursor it is.
                let path = dir.join(&name);
                let bytes = match storage.read_file(&path) {
                    Ok(bytes) => bytes,
                    // Removed since the listing.
                    Err(e) if crate::io::is_absent(&e) => continue,
                    Err(e) => return Err(Error::io("read cursor", &path, e)),
                };
                if let Some(r) = bytes
                    .chunks(CURSOR_SLOT_BYTES)
                    .filter_map(decode_slot)
                    .find(|r| r.topic == topic)
                {
                    groups.push(r.group);
                }
            }
        }
        groups.sort();
        groups.dedup();
        Ok(groups)
    }
}

/// The inode of the file at `path`, `None` when there is none; any other error reading its
/// metadata is returned (a cursor replaced by another process must not go unnoticed).
fn inode_of(storage: &dyn Storage, path: &Path) -> Result<Option<u64>> {
    use std::os::unix::fs::MetadataExt;
    Ok(crate::io::metadata_if_present(storage, path)?.map(|m| m.ino()))
}

/// The inode of the open `file` (at `path`): the one this handle reads and writes, even if
/// another process replaced the name since it was opened.
fn inode_of_file(storage: &dyn Storage, file: &std::fs::File, path: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    storage
        .file_metadata(file, path)
        .map(|m| m.ino())
        .map_err(|e| Error::io("read metadata", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_hashed_within_the_file_name_limit() {
        let topic = "t".repeat(249);
        assert_eq!(cursor_file_name("orders", "billing"), "orders@billing.cur");
        let long = cursor_file_name(&topic, &"g".repeat(249));
        assert!(long.len() <= FILE_NAME_MAX && long.starts_with('#'));
        assert_ne!(long, cursor_file_name(&topic, &"h".repeat(249)));
    }

    #[test]
    fn slot_round_trip_and_torn_slot() {
        let r = CursorRecord {
            topic: "orders".into(),
            group: "billing".into(),
            offset: 42,
            generation: 3,
            updated_us: 7,
        };
        let slot = encode_slot(&r).expect("encode");
        assert_eq!(decode_slot(&slot), Some(r));
        let mut torn = slot.clone();
        torn[format::CS_BODY + 2] ^= 0xFF;
        assert_eq!(decode_slot(&torn), None);
        assert_eq!(decode_slot(&[0u8; CURSOR_SLOT_BYTES]), None);
    }
}

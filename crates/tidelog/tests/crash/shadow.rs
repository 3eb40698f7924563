//! [`ShadowStorage`]: a `Storage` that models a power loss across processes. Every process
//! of a campaign opens the directory through it, and all of them keep one durable image in
//! files beside the directory (`<dir>.durable/`), so a sync by one process makes durable what
//! every process wrote to that range, as the one page cache does.
//!
//! The image holds, per file (an id given at creation, kept across renames), the bytes a
//! power loss would leave: `msync` copies the pages of its range, `fsync`/`fdatasync` the
//! whole file, each with its length. A directory's entries become durable at its sync.
//! [`ShadowStorage::power_loss_image`] writes the image into a new directory, optionally
//! with a random half of the pages written since their last sync (writeback may have flushed
//! them). A lock file serialises every change of the image, so two processes syncing one
//! range never leave the older copy last.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::common::Rng;
use tidelog::io::{DirEntry, Mapping, StdStorage, Storage};

const PAGE: usize = 4096;

/// The shadow directory of `dir`: `<dir>.durable` beside it.
pub fn shadow_of(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap().to_owned();
    name.push(".durable");
    dir.with_file_name(name)
}

#[derive(Debug, Clone)]
pub struct ShadowStorage {
    root: PathBuf,
    shadow: PathBuf,
}

impl ShadowStorage {
    /// A new image of `root`, whose present content counts as durable.
    pub fn init(root: &Path) -> ShadowStorage {
        fs::create_dir_all(root).unwrap();
        let root = fs::canonicalize(root).unwrap();
        let shadow = shadow_of(&root);
        for sub in ["data", "inos", "dirs"] {
            fs::create_dir_all(shadow.join(sub)).unwrap();
        }
        let storage = ShadowStorage { root, shadow };
        let _lock = storage.lock();
        storage.scan(&storage.root.clone());
        storage
    }

    /// The image [`ShadowStorage::init`] made for `root`, from another process.
    pub fn attach(root: &Path) -> ShadowStorage {
        let root = fs::canonicalize(root).unwrap();
        let shadow = shadow_of(&root);
        assert!(
            shadow.join("dirs").is_dir(),
            "no image for {}",
            root.display()
        );
        ShadowStorage { root, shadow }
    }

    /// Removes the image.
    pub fn discard(self) {
        fs::remove_dir_all(&self.shadow).unwrap();
    }

    fn scan(&self, dir: &Path) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                self.scan(&entry.path());
            } else {
                let id = self.new_id(entry.metadata().unwrap().ino());
                fs::write(self.data(id), fs::read(entry.path()).unwrap()).unwrap();
            }
        }
        self.write_listing(dir);
    }

    /// Held while the image changes: an exclusive `flock` on a descriptor of its own (threads
    /// of one process exclude each other too); dropping it closes the descriptor, which unlocks.
    fn lock(&self) -> File {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.shadow.join("lock"))
            .unwrap();
        file.lock().unwrap();
        file
    }

    fn data(&self, id: u64) -> PathBuf {
        self.shadow.join("data").join(id.to_string())
    }

    /// A fresh id for the file whose inode is `ino` (under the lock).
    fn new_id(&self, ino: u64) -> u64 {
        let next = self.shadow.join("next");
        let id = fs::read_to_string(&next)
            .map(|s| s.trim().parse::<u64>().unwrap())
            .unwrap_or(0);
        write_whole(&next, (id + 1).to_string().as_bytes());
        write_whole(
            &self.shadow.join("inos").join(ino.to_string()),
            id.to_string().as_bytes(),
        );
        id
    }

    /// The id of the file whose inode is `ino`; a file made outside `create_new` (a lock
    /// file) gets one at its first sync (under the lock).
    fn id_of(&self, ino: u64) -> u64 {
        match fs::read_to_string(self.shadow.join("inos").join(ino.to_string())) {
            Ok(s) => s.trim().parse().unwrap(),
            Err(_) => self.new_id(ino),
        }
    }

    fn listing_path(&self, dir: &Path) -> Option<PathBuf> {
        let rel = dir.strip_prefix(&self.root).ok()?;
        let key: String = rel
            .to_str()
            .unwrap()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        Some(self.shadow.join("dirs").join(format!("d{key}")))
    }

    /// Makes `dir`'s present file entries its durable ones (under the lock).
    fn write_listing(&self, dir: &Path) {
        let Some(path) = self.listing_path(dir) else {
            return;
        };
        let mut text = String::new();
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            // Gone since the listing (another process removed it): not an entry now.
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_file() {
                let id = self.id_of(meta.ino());
                text.push_str(&format!("{id}\t{}\n", entry.file_name().to_str().unwrap()));
            }
        }
        write_whole(&path, text.as_bytes());
    }

    /// Writes `bytes`, the live file's from `start`, into the image of the file whose inode
    /// is `ino`; the image's length becomes the live one, `live_len` (under the lock).
    fn make_durable(&self, ino: u64, live_len: u64, start: usize, bytes: &[u8]) {
        let image = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.data(self.id_of(ino)))
            .unwrap();
        image.set_len(live_len).unwrap();
        image.write_all_at(bytes, start as u64).unwrap();
    }

    /// Writes what a power loss now would leave into `dst` (a new directory). With `torn`,
    /// each page whose live bytes differ from its image's takes the live ones with
    /// probability 1/2 (drawn from the seed).
    pub fn power_loss_image(&self, dst: &Path, torn: Option<u64>) {
        let _lock = self.lock();
        let mut rng = torn.map(Rng::new);
        let live_ids: BTreeMap<u64, PathBuf> = self.live_files(&self.root.clone());
        for listing in fs::read_dir(self.shadow.join("dirs")).unwrap() {
            let listing = listing.unwrap();
            let name = listing.file_name().into_string().unwrap();
            let Some(hex) = name.strip_prefix('d').filter(|h| !h.ends_with(".tmp")) else {
                continue;
            };
            let rel: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let to_dir = dst.join(String::from_utf8(rel).unwrap());
            fs::create_dir_all(&to_dir).unwrap();
            for line in fs::read_to_string(listing.path()).unwrap().lines() {
                let (id, file) = line.split_once('\t').unwrap();
                let id: u64 = id.parse().unwrap();
                let mut bytes = fs::read(self.data(id)).unwrap_or_default();
                if let (Some(rng), Some(live)) = (rng.as_mut(), live_ids.get(&id)) {
                    let live = fs::read(live).unwrap_or_default();
                    for start in (0..bytes.len().min(live.len())).step_by(PAGE) {
                        let end = (start + PAGE).min(bytes.len()).min(live.len());
                        if bytes[start..end] != live[start..end] && rng.range(0, 1) == 1 {
                            bytes[start..end].copy_from_slice(&live[start..end]);
                        }
                    }
                }
                fs::write(to_dir.join(file), bytes).unwrap();
            }
        }
    }

    /// Every live file under `dir` by its id (files without one were never synced).
    fn live_files(&self, dir: &Path) -> BTreeMap<u64, PathBuf> {
        let mut out = BTreeMap::new();
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                out.extend(self.live_files(&entry.path()));
            } else if let Ok(id) =
                fs::read_to_string(self.shadow.join("inos").join(meta.ino().to_string()))
            {
                out.insert(id.trim().parse().unwrap(), entry.path());
            }
        }
        out
    }
}

/// Replaces `path` by `bytes` whole, even if this process is killed meanwhile (the campaign's
/// children die holding the lock).
fn write_whole(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, bytes).unwrap();
    fs::rename(&tmp, path).unwrap();
}

impl Storage for ShadowStorage {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        let file = StdStorage.create_new(path)?;
        let _lock = self.lock();
        let id = self.new_id(file.metadata()?.ino());
        // Durable as an empty file until its first sync.
        File::create(self.data(id))?;
        Ok(file)
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<File> {
        StdStorage.open(path, writable)
    }
    fn open_device(&self, path: &Path, direct: bool) -> io::Result<File> {
        StdStorage.open_device(path, direct)
    }
    fn open_direct(&self, path: &Path) -> io::Result<File> {
        StdStorage.open_direct(path)
    }
    fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        StdStorage.set_len(file, path, len)
    }
    fn allocate(&self, file: &File, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        StdStorage.allocate(file, path, offset, len)
    }
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], offset: u64) -> io::Result<()> {
        StdStorage.write_at(file, path, buf, offset)
    }
    fn read_at(&self, file: &File, path: &Path, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        StdStorage.read_at(file, path, buf, offset)
    }
    fn sync_file(&self, file: &File, path: &Path) -> io::Result<()> {
        StdStorage.sync_file(file, path)?;
        let _lock = self.lock();
        let meta = file.metadata()?;
        // Through the descriptor: the name may be another file's by now.
        let mut live = vec![0u8; meta.len() as usize];
        if file.read_exact_at(&mut live, 0).is_err() {
            // Opened for writing only: the name, if it is still this file.
            live = fs::read(path)?;
            if fs::metadata(path)?.ino() != meta.ino() {
                return Ok(());
            }
        }
        self.make_durable(meta.ino(), live.len() as u64, 0, &live);
        Ok(())
    }
    fn sync_map(&self, map: &Mapping, path: &Path, offset: usize, len: usize) -> io::Result<()> {
        StdStorage.sync_map(map, path, offset, len)?;
        let _lock = self.lock();
        let meta = match fs::metadata(path) {
            Ok(meta) => meta,
            // Deleted meanwhile (by the leader, in another process): the kernel's msync of an
            // unlinked file's mapping succeeds, and its name is gone at the next directory
            // sync, which follows the unlink at once.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        // msync writes whole pages.
        let start = offset / PAGE * PAGE;
        let end = ((offset + len).div_ceil(PAGE) * PAGE)
            .min(map.len())
            .min(meta.len() as usize);
        let mut pages = vec![0u8; end.saturating_sub(start)];
        map.copy_out(start, &mut pages);
        self.make_durable(meta.ino(), meta.len(), start, &pages);
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdStorage.sync_dir(dir)?;
        let _lock = self.lock();
        self.write_listing(dir);
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdStorage.remove_file(path)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        StdStorage.create_dir_all(dir)?;
        // A directory counts as durable at once, empty (its parent is synced right after).
        let _lock = self.lock();
        if let Some(path) = self.listing_path(dir)
            && !path.exists()
        {
            fs::write(path, "")?;
        }
        Ok(())
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        StdStorage.remove_dir_all(dir)?;
        // Gone at once with everything under it, as its creation was durable at once.
        let _lock = self.lock();
        let Some(ours) = self.listing_path(dir) else {
            return Ok(());
        };
        let ours = ours.file_name().unwrap().to_str().unwrap().to_owned();
        let below = format!("{ours}2f");
        for listing in fs::read_dir(self.shadow.join("dirs"))? {
            let listing = listing?;
            let name = listing.file_name().into_string().unwrap();
            if name == ours || name.starts_with(&below) {
                fs::remove_file(listing.path())?;
            }
        }
        Ok(())
    }
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        StdStorage.read_dir(dir)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        StdStorage.read_file(path)
    }
    fn file_metadata(&self, file: &File, path: &Path) -> io::Result<fs::Metadata> {
        StdStorage.file_metadata(file, path)
    }
    fn metadata(&self, path: &Path) -> io::Result<fs::Metadata> {
        StdStorage.metadata(path)
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        StdStorage.canonicalize(path)
    }
    fn try_lock(&self, file: &File, path: &Path) -> io::Result<()> {
        StdStorage.try_lock(file, path)
    }
}

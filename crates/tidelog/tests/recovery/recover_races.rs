//! Goal: a recovery that does not repair (a read-only open, a process joining a shared
//! directory) reads the extents' slots while the housekeeping leader of the processes
//! sharing the directory retires extents front to back: a view that caught extents live
//! and, a moment later, later ones retired is no gap, and reads as the topic from the first
//! extent kept.
//!
//! Method: a storage layer retires (as the leader does, front to back) the first extents of
//! a closed directory at the moment the open reads the slots of one in the middle.

#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{geometry, tempdir};
use tidelog::format::{self, Progress, ProgressState};
use tidelog::io::{Mapping, StdStorage, Storage};
use tidelog::{ReaderOptions, StartPosition, Wal};

const BLOCK: u64 = 64 * 1024;
/// Extents the leader retires, all at once, when the open reads `TRIGGER`'s slots.
const RETIRED: u64 = 6;
const TRIGGER: u64 = 4;

/// Retires extents `0..RETIRED` (one block each) of data file 0 when the slots of extent
/// `TRIGGER` are read, once.
#[derive(Debug, Default)]
struct RetireWhileRead {
    fired: AtomicBool,
}

impl RetireWhileRead {
    fn retire_front(path: &Path) {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        let retired = Progress {
            state: ProgressState::Consumed,
            durable_end: format::BLOCK_HEADER_BYTES,
            record_count: 0,
            max_timestamp_us: 0,
            footer_count: 0,
            footer_crc: 0,
        };
        for i in 0..RETIRED {
            let at = format::FILE_HEADER_BYTES + i * BLOCK + format::PG_SLOT_AT as u64;
            file.write_all_at(&retired.encode(), at).unwrap();
        }
    }
}

impl Storage for RetireWhileRead {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        StdStorage.create_new(path)
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
        let slots = format::FILE_HEADER_BYTES + TRIGGER * BLOCK;
        if path.file_name() == Some(tidelog_file(0).as_ref())
            && offset == slots
            && !self.fired.swap(true, Ordering::AcqRel)
        {
            Self::retire_front(path);
        }
        StdStorage.read_at(file, path, buf, offset)
    }
    fn sync_file(&self, file: &File, path: &Path) -> io::Result<()> {
        StdStorage.sync_file(file, path)
    }
    fn sync_map(&self, map: &Mapping, path: &Path, offset: usize, len: usize) -> io::Result<()> {
        StdStorage.sync_map(map, path, offset, len)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdStorage.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdStorage.remove_file(path)
    }
}

/// The name of data file `seq`.
fn tidelog_file(seq: u64) -> String {
    format!("{seq:020}.tdl")
}

#[test]
fn a_read_only_open_that_races_retirement_starts_at_the_first_extent_kept() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), geometry(16, BLOCK).exclusive(true)).unwrap();
    // About 60 records an extent: ten extents of one block in file 0.
    let value = vec![7u8; 1000];
    let mut firsts = Vec::new();
    for _ in 0..600 {
        let offset = wal.append("t", &value).unwrap();
        let extents = wal.topic_info("t").unwrap().extents;
        if firsts.len() < extents {
            firsts.push(offset);
        }
    }
    assert!(firsts.len() as u64 > RETIRED + 1, "{firsts:?}");
    wal.close().unwrap();

    let storage = Arc::new(RetireWhileRead::default());
    let ro =
        Wal::open_read_only_with_storage(dir.path(), geometry(16, BLOCK), storage.clone()).unwrap();
    assert!(
        storage.fired.load(Ordering::Acquire),
        "the open read the slots"
    );
    let info = ro.topic_info("t").unwrap();
    assert_eq!(info.first_offset, firsts[RETIRED as usize]);
    assert_eq!(info.next_offset, 600);
    let mut reader = ro
        .reader_with("t", ReaderOptions::default().start(StartPosition::Earliest))
        .unwrap();
    let mut offset = info.first_offset;
    while let Some(rec) = reader.next().unwrap() {
        assert_eq!((rec.offset, rec.value), (offset, &value[..]));
        offset += 1;
    }
    assert_eq!(offset, 600);
}

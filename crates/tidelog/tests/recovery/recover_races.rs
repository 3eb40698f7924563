//! Goal: a recovery that does not repair (a read-only open, a process joining a shared
//! directory) reads the extents' slots while the housekeeping leader of the processes
//! sharing the directory retires extents front to back: a view that caught extents live
//! and, a moment later, later ones retired is no gap, and reads as the topic from the first
//! extent kept.
//!
//! Method: a storage layer's read hook retires (as the leader does, front to back) the first
//! extents of a closed directory at the moment the open reads the slots of one in the middle.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{GateStorage, geometry, tempdir};
use tidelog::format::{self, Progress, ProgressState};
use tidelog::{ReaderOptions, StartPosition, Wal};

const BLOCK: u64 = 64 * 1024;
/// Extents the leader retires, all at once, when the open reads `TRIGGER`'s slots.
const RETIRED: u64 = 6;
const TRIGGER: u64 = 4;

/// Retires extents `0..RETIRED` (one block each) of data file `path`, as the leader does.
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

/// A storage that retires the front extents of data file 0 when the slots of extent
/// `TRIGGER` are read, once; and whether it did.
fn retire_while_read() -> (Arc<GateStorage>, Arc<AtomicBool>) {
    let fired = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&fired);
    let storage = GateStorage::on_read(Box::new(move |path, offset| {
        let slots = format::FILE_HEADER_BYTES + TRIGGER * BLOCK;
        if path.file_name() == Some(format!("{:020}.tdl", 0).as_ref())
            && offset == slots
            && !seen.swap(true, Ordering::AcqRel)
        {
            retire_front(path);
        }
    }));
    (Arc::new(storage), fired)
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

    let (storage, fired) = retire_while_read();
    let ro = Wal::open_read_only_with_storage(dir.path(), geometry(16, BLOCK), storage).unwrap();
    assert!(fired.load(Ordering::Acquire), "the open read the slots");
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

/// Goal: a read-only refresh reads the ends the writer reported, then the extents' slots.
/// When the writer fills the reported tail extent, rolls and flushes between those two
/// reads, the refresh holds an end of that extent from before the roll, next to a later
/// extent that claims durable records. Every record of the earlier extent was published
/// before those, so the refresh reads it whole, and reports no gap.
///
/// Method: a read hook lets the writer (in this process) fill extent 0, roll to block 1 and
/// flush, at the moment the refresh reads block 1's slots.
#[test]
fn a_refresh_that_races_a_roll_and_a_flush_reads_the_extent_rolled_from_whole() {
    refresh_while_the_writer_rolls(1);
}

/// Goal: a read-only refresh that reads a block before the writer hands it out, and the
/// block after it once the writer filled the first, rolled to the second and flushed, sees
/// a gap before an extent that claims durable records. That is the directory changing under
/// the read, not damage: the refresh reads the directory again and finds every record.
///
/// Method: a read hook lets the writer fill extent 0 and the extent it rolls to at block 1,
/// roll again to block 2 and flush, at the moment the refresh reads block 2's slots (block
/// 1's it read blank).
#[test]
fn a_refresh_that_read_a_block_before_its_allocation_reads_the_directory_again() {
    refresh_while_the_writer_rolls(2);
}

/// A writer appends ten records to topic `t` (one extent, at block 0), a read-only handle
/// opens, then refreshes. When the refresh reads the slots of block `trigger`, a read hook
/// has the writer append until its extent at that block exists, five records more, and
/// flush. The refresh must then see every record, each whole and in order.
fn refresh_while_the_writer_rolls(trigger: u64) {
    let dir = tempdir();
    // No periodic flush: the slots keep their first claims until the hook's flush.
    let config = geometry(16, BLOCK).sync_interval_ms(3_600_000);
    let wal = Arc::new(Wal::open_with(dir.path(), config.clone()).unwrap());
    let value = vec![3u8; 1000];
    for _ in 0..10 {
        wal.append("t", &value).unwrap();
    }
    let armed = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicBool::new(false));
    let storage = {
        let (wal, armed, fired, value) = (
            Arc::clone(&wal),
            Arc::clone(&armed),
            Arc::clone(&fired),
            value.clone(),
        );
        GateStorage::on_read(Box::new(move |path, offset| {
            let slots = format::FILE_HEADER_BYTES + trigger * BLOCK;
            if path.file_name() == Some(format!("{:020}.tdl", 0).as_ref())
                && offset == slots
                && armed.load(Ordering::Acquire)
                && !fired.swap(true, Ordering::AcqRel)
            {
                while (wal.topic_info("t").unwrap().extents as u64) <= trigger {
                    wal.append("t", &value).unwrap();
                }
                for _ in 0..5 {
                    wal.append("t", &value).unwrap();
                }
                wal.flush().unwrap();
            }
        }))
    };
    let ro = Wal::open_read_only_with_storage(dir.path(), config, Arc::new(storage)).unwrap();
    assert_eq!(ro.topic_info("t").unwrap().extents, 1);
    armed.store(true, Ordering::Release);
    ro.refresh().unwrap();
    assert!(
        fired.load(Ordering::Acquire),
        "the refresh read block {trigger}'s slots"
    );
    let next = wal.topic_info("t").unwrap().next_offset;
    assert_eq!(ro.topic_info("t").unwrap().next_offset, next);
    let mut reader = ro
        .reader_with("t", ReaderOptions::default().start(StartPosition::Earliest))
        .unwrap();
    let mut offset = 0;
    while let Some(rec) = reader.next().unwrap() {
        assert_eq!((rec.offset, rec.value), (offset, &value[..]));
        offset += 1;
    }
    assert_eq!(offset, next);
}

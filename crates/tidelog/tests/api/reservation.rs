//! Goal: disk space reserved for a topic follows its data, about 1 MiB ahead of it, not a
//! whole extent; a full disk met while reserving ahead is a clean `DiskFull` that consumes
//! nothing, and appends go on once space is back.
//!
//! Method: the default geometry (10 MiB blocks); disk use is the data files' allocated
//! blocks (`st_blocks`); `FaultStorage` fails `fallocate` with ENOSPC part way through an
//! extent.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use crate::common::{data_files, tempdir};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{Config, Error, Wal};

const MIB: u64 = 1 << 20;

/// Bytes of disk the data files of `dir` hold.
fn allocated(dir: &Path) -> u64 {
    data_files(dir)
        .iter()
        .map(|f| std::fs::metadata(f).expect("stat").blocks() * 512)
        .sum()
}

#[test]
fn many_small_topics_take_little_disk() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), Config::default()).expect("open");
    let topics = 100u64;
    for t in 0..topics {
        wal.append(&format!("t{t}"), &[7u8; 100]).expect("append");
    }
    wal.flush().expect("flush");
    let used = allocated(dir.path());
    // A whole 10 MiB extent each before; now the header page and 1 MiB ahead each.
    assert!(
        used <= topics * (MIB + 64 * 1024) + 2 * MIB,
        "{topics} topics of one record take {used} bytes"
    );
    wal.close().expect("close");
}

#[test]
fn one_topic_stays_about_a_mebibyte_ahead_of_its_data() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), Config::default()).expect("open");
    let value = vec![3u8; 4000];
    // 25 MiB of records: two full extents and a part of a third.
    for _ in 0..6_500 {
        wal.append("big", &value).expect("append");
    }
    wal.flush().expect("flush");
    let data = wal.topic_info("big").expect("info").bytes;
    let used = allocated(dir.path());
    assert!(used >= data, "{used} < {data}");
    assert!(
        used <= data + 2 * MIB,
        "{used} bytes on disk for {data} bytes of records"
    );
    wal.close().expect("close");
    // Reopened, the extent goes on from where it was: its reservation starts again.
    let wal = Wal::open_with(dir.path(), Config::default()).expect("reopen");
    for _ in 0..500 {
        wal.append("big", &value).expect("append");
    }
    assert_eq!(wal.topic_info("big").expect("info").next_offset, 7_000);
}

#[test]
fn a_full_disk_while_reserving_ahead_is_disk_full_and_consumes_nothing() {
    let dir = tempdir();
    let fs = FaultStorage::new();
    let wal =
        Wal::open_with_storage(dir.path(), Config::default(), Arc::new(fs.clone())).expect("open");
    let value = vec![5u8; 10_000];
    wal.append("t", &value).expect("append");
    fs.arm(points::ALLOCATE, Fault::Always(libc::ENOSPC));
    // The extent (10 MiB) has room; the first reservation ran out after about 1 MiB.
    let mut next = 1;
    let err = loop {
        match wal.append("t", &value) {
            Ok(o) => assert_eq!(o, next),
            Err(e) => break e,
        }
        next += 1;
        assert!(next < 200, "no reservation past 2 MiB was needed");
    };
    assert!(matches!(err, Error::DiskFull { .. }), "{err}");
    assert!(next < 1_000, "stopped inside the first extent: {next}");
    assert_eq!(wal.topic_info("t").expect("info").next_offset, next);
    fs.disarm_all();
    assert_eq!(wal.append("t", &value).expect("append"), next);
    for offset in 0..=next {
        assert_eq!(wal.read("t", offset).expect("read").value(), value);
    }
    wal.close().expect("close");
}

//! Goal: failed syscalls surface as errors that carry the OS errno and lose nothing already
//! written. A failed sync poisons the Wal (fsyncgate: a retried sync proves nothing) until
//! it is reopened; a failed file creation does not (nothing was acknowledged), so the log is
//! usable again once the fault is gone.
//! Method: `FaultStorage` fails `msync` (explicit and background flush) and data file
//! creation (the first file and a later one); each time the test checks the error and what
//! later calls get, then disarms and checks everything after a reopen.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{check_dense, data_files, payload, small, tempdir};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{Config, Durability, Error, Wal};

const TOPIC: &str = "faults";
const VALUE: usize = 1000;

fn value(i: u64) -> Vec<u8> {
    payload(i * 3 + 1, VALUE)
}

fn assert_io(err: &Error, errno: i32, ctx: &str) {
    assert!(
        matches!(err, Error::Io { .. }),
        "{ctx}: expected Io, got {err}"
    );
    assert_eq!(err.errno(), Some(errno), "{ctx}: {err}");
}

fn append_range(wal: &Wal, range: std::ops::Range<u64>) {
    for i in range {
        assert_eq!(wal.append(TOPIC, &value(i)).unwrap(), i);
    }
}

fn reopen_and_check(dir: &std::path::Path, count: u64) {
    let wal = Wal::open_with(dir, small()).unwrap();
    check_dense(&wal, TOPIC, count, value, "reopen");
}

fn assert_poisoned(err: &Error, errno: i32, ctx: &str) {
    assert!(
        matches!(err, Error::Poisoned { .. }),
        "{ctx}: expected Poisoned, got {err}"
    );
    assert_eq!(err.errno(), Some(errno), "{ctx}: {err}");
}

#[test]
fn failed_msync_fails_flush_with_eio_and_poisons() {
    let dir = tempdir();
    let fs = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), small(), Arc::new(fs.clone())).unwrap();
    append_range(&wal, 0..10);
    fs.arm(points::SYNC_MAP, Fault::Once(libc::EIO));
    assert_io(
        &wal.flush().unwrap_err(),
        libc::EIO,
        "flush with failing msync",
    );
    // Never retried: the fault is gone, yet every later flush and append is refused.
    assert_poisoned(&wal.flush().unwrap_err(), libc::EIO, "second flush");
    assert_poisoned(
        &wal.append(TOPIC, &value(10)).unwrap_err(),
        libc::EIO,
        "append after the failure",
    );
    assert_poisoned(
        &wal.writer(TOPIC).unwrap_err(),
        libc::EIO,
        "new writer after the failure",
    );
    // What was written is still readable, and close reports the poison.
    check_dense(&wal, TOPIC, 10, value, "after failed flush");
    assert_poisoned(&wal.close().unwrap_err(), libc::EIO, "close");
    // A reopen recovers from disk and takes appends again.
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    check_dense(&wal, TOPIC, 10, value, "reopen");
    append_range(&wal, 10..20);
    wal.close().unwrap();
    reopen_and_check(dir.path(), 20);
}

#[test]
fn failed_background_msync_poisons_the_next_flush() {
    let dir = tempdir();
    let fs = FaultStorage::new();
    let cfg: Config = small()
        .durability(Durability::Interval)
        .sync_interval_ms(10);
    let wal = Wal::open_with_storage(dir.path(), cfg, Arc::new(fs.clone())).unwrap();
    append_range(&wal, 0..10);
    fs.arm(points::SYNC_MAP, Fault::Once(libc::EIO));
    append_range(&wal, 10..20);
    // The background flush hits the fault; a later flush must report it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        assert!(
            Instant::now() < deadline,
            "the background flush error was never reported"
        );
        match wal.flush() {
            Err(e) => break e,
            Ok(()) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    // Whichever flush hit the fault (ours or the background's), the errno is the original.
    assert_eq!(
        err.errno(),
        Some(libc::EIO),
        "background flush error: {err}"
    );
    assert_poisoned(&wal.flush().unwrap_err(), libc::EIO, "again");
    check_dense(&wal, TOPIC, 20, value, "after background failure");
    drop(wal);
    reopen_and_check(dir.path(), 20);
}

#[test]
fn failed_first_file_creation_fails_append() {
    let dir = tempdir();
    let fs = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), small(), Arc::new(fs.clone())).unwrap();
    fs.arm(points::CREATE, Fault::Always(libc::EIO));
    assert_io(
        &wal.append(TOPIC, &value(0)).unwrap_err(),
        libc::EIO,
        "first append",
    );
    assert_io(
        &wal.append(TOPIC, &value(0)).unwrap_err(),
        libc::EIO,
        "second try",
    );
    assert!(fs.hits(points::CREATE) >= 2);
    assert!(data_files(dir.path()).is_empty());
    fs.disarm_all();
    append_range(&wal, 0..5);
    wal.close().unwrap();
    reopen_and_check(dir.path(), 5);
}

#[test]
fn failed_next_file_creation_fails_append() {
    let dir = tempdir();
    let fs = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), small(), Arc::new(fs.clone())).unwrap();
    append_range(&wal, 0..1);
    // Armed before the first file is half used, so no spare file exists yet.
    fs.arm(points::CREATE, Fault::Always(libc::EIO));
    let mut next = 1;
    let err = loop {
        match wal.append(TOPIC, &value(next)) {
            Ok(o) => assert_eq!(o, next),
            Err(e) => break e,
        }
        next += 1;
        assert!(next < 10_000, "the first file never filled up");
    };
    assert_io(&err, libc::EIO, "append needing a new file");
    assert_eq!(data_files(dir.path()).len(), 1);
    assert_eq!(wal.topic_info(TOPIC).unwrap().next_offset, next);
    check_dense(&wal, TOPIC, next, value, "after failed creation");
    fs.disarm_all();
    append_range(&wal, next..next + 50);
    assert!(data_files(dir.path()).len() >= 2);
    wal.close().unwrap();
    reopen_and_check(dir.path(), next + 50);
}

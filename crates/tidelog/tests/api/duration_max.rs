//! Goal: every wait that takes a `Duration` accepts `Duration::MAX` as "as long as needed"
//! and never panics on `Instant + Duration` overflow.
//!
//! Method: each API is called with `Duration::MAX` where the wait ends at once or soon (the
//! record is made durable by a flush from another thread, the job is already published,
//! space is free), so the test finishes while proving the deadline arithmetic saturates.

use std::time::Duration;

use crate::common::{small, tempdir};
use tidelog::{Durability, RingConfig, RingWal, Wal};

#[test]
fn append_handle_wait_timeout_accepts_duration_max() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small().durability(Durability::Never)).expect("open");
    let handle = wal.append_async("t", b"x").expect("append");
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            wal.flush().expect("flush");
        });
        assert!(handle.wait_timeout(Duration::MAX).expect("wait"));
    });
    wal.close().expect("close");
}

#[test]
fn writer_space_wait_accepts_duration_max() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small().disk_bytes_max(64 << 20)).expect("open");
    let writer = wal
        .writer("t")
        .expect("writer")
        .wait_for_space(Duration::MAX);
    assert_eq!(writer.append(b"x").expect("append"), 0);
    wal.close().expect("close");
}

#[test]
fn ring_waits_accept_duration_max() {
    let dir = tempdir();
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, RingConfig::default().capacity_bytes(1 << 20)).expect("open");
    let append = ring.append_wait(b"x", Duration::MAX).expect("append");
    assert!(append.wait_timeout(Duration::MAX).expect("wait").is_some());
    ring.close().expect("close");
}

#[test]
fn stage_wait_published_accepts_duration_max() {
    let dir = tempdir();
    let mut part = tidelog::stage::StagedWriter::create(dir.path(), "job", "p0").expect("part");
    part.append("t", &[tidelog::Append::value(b"x")])
        .expect("stage");
    part.finish().expect("finish");
    let wal = Wal::open_with(dir.path(), small()).expect("open");
    wal.commit_staged("job", &["p0"]).expect("publish");
    // Published already: the wait ends at once, and its deadline must still be computable.
    tidelog::stage::wait_published(dir.path(), "job", Duration::MAX).expect("wait");
}

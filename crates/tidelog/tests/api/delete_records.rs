//! Goal: `Wal::delete_records` is Kafka's DeleteRecords: the first offset moves to the
//! given one (inside an extent too), nothing below it is read again by any path, in this
//! handle, another handle on the directory, after a reopen and in a crash image; groups
//! committed below resume at it; extents wholly below it are freed whatever the groups
//! say; a deleted topic takes its start with it.
//!
//! Method: records of about 200 bytes in 64 KiB blocks (a few hundred per extent); each
//! read path is tried on both sides of the start.

use crate::common::{BLOCK, copy_dir, geometry, tempdir};
use tidelog::{Config, Error, ReaderOptions, StartPosition, Wal};

const N: u64 = 2_000;
const CUT: u64 = 1_234;

fn config() -> Config {
    geometry(16, BLOCK)
}

fn value(i: u64) -> Vec<u8> {
    format!("{i:08}|{}", "x".repeat(190)).into_bytes()
}

fn fill(wal: &Wal, topic: &str) {
    for i in 0..N {
        // Timestamps one millisecond apart, so a seek by time lands on a known offset.
        let record = tidelog::Append {
            key: None,
            value: &value(i),
            timestamp_us: Some(1_000_000 + 1_000 * i),
            headers: None,
        };
        assert_eq!(wal.append_record(topic, record).expect("append"), i);
    }
}

fn out_of_range<T: std::fmt::Debug>(r: tidelog::Result<T>) -> bool {
    matches!(r, Err(Error::OffsetOutOfRange { .. }))
}

/// Everything a reader of `wal` may see of topic `t` once the start is `CUT`.
fn check_cut(wal: &Wal, t: &str) {
    let info = wal.topic_info(t).expect("info");
    assert_eq!((info.first_offset, info.next_offset), (CUT, N), "{info:?}");
    assert!(info.local_first_offset >= CUT, "{info:?}");
    assert!(out_of_range(wal.read(t, CUT - 1)), "read below the start");
    assert!(out_of_range(wal.read(t, 0)));
    assert_eq!(wal.read(t, CUT).expect("read").value(), value(CUT));
    let mut earliest = wal
        .reader_with(t, ReaderOptions::default().start(StartPosition::Earliest))
        .expect("reader");
    assert_eq!(earliest.position(), CUT);
    assert_eq!(earliest.next().expect("next").expect("record").offset, CUT);
    assert!(out_of_range(earliest.seek(CUT - 1)));
    // By time: a time before the start lands on the start.
    assert_eq!(earliest.seek_time(0).expect("seek_time"), CUT);
    assert_eq!(
        earliest
            .seek_time(1_000_000 + 1_000 * (CUT + 5))
            .expect("seek_time"),
        CUT + 5
    );
    assert!(out_of_range(wal.reader_with(
        t,
        ReaderOptions::default().start(StartPosition::Offset(CUT - 1))
    )));
}

#[test]
fn records_below_the_start_are_gone_for_every_reader() {
    let dir = tempdir();
    let image = tempdir();
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    fill(&wal, "t");
    // A group committed far below the cut, and a reader positioned below it.
    let mut group = wal.reader("t", "g").expect("group reader");
    group.commit_offset(100).expect("commit");
    let mut behind = wal
        .reader_with(
            "t",
            ReaderOptions::default().start(StartPosition::Offset(300)),
        )
        .expect("reader");
    let extents_before = wal.topic_info("t").expect("info").extents;

    assert_eq!(wal.delete_records("t", CUT).expect("delete_records"), CUT);
    check_cut(&wal, "t");
    // The reader below fails as after retention; once moved, it reads on.
    assert!(out_of_range(behind.next()));
    behind.seek(CUT).expect("seek");
    assert_eq!(behind.next().expect("next").expect("record").offset, CUT);
    // The group resumes at the start.
    let resumed = wal.reader("t", "g").expect("group reader");
    assert_eq!(resumed.position(), CUT);
    // Whole extents below the start are freed although the group committed only 100.
    let extents_after = wal.topic_info("t").expect("info").extents;
    assert!(
        extents_after < extents_before,
        "{extents_before} -> {extents_after}"
    );
    // Not backwards, not past the end.
    assert_eq!(wal.delete_records("t", 10).expect("no-op"), CUT);
    assert!(out_of_range(wal.delete_records("t", N + 1)));
    assert!(matches!(
        wal.delete_records("nope", 1),
        Err(Error::UnknownTopic { .. })
    ));
    // Appends go on; a crash image taken now keeps the start (durable on return).
    wal.append("t", b"after").expect("append");
    copy_dir(dir.path(), image.path());
    drop(group);
    wal.close().expect("close");

    for path in [dir.path(), image.path()] {
        let wal = Wal::open_with(path, config()).expect("reopen");
        let info = wal.topic_info("t").expect("info");
        assert_eq!((info.first_offset, info.next_offset), (CUT, N + 1));
        assert!(out_of_range(wal.read("t", CUT - 1)));
        assert_eq!(wal.read("t", N).expect("read").value(), b"after");
        wal.close().expect("close");
    }
    let ro = Wal::open_read_only(dir.path()).expect("read-only");
    assert!(out_of_range(ro.read("t", CUT - 1)));
    assert_eq!(ro.topic_info("t").expect("info").first_offset, CUT);
}

#[test]
fn another_handle_sees_the_start_at_once() {
    let dir = tempdir();
    let first = Wal::open_with(dir.path(), config()).expect("open");
    fill(&first, "t");
    let second = Wal::open_with(dir.path(), config()).expect("second shared handle");
    let mut reader = second
        .reader_with(
            "t",
            ReaderOptions::default().start(StartPosition::Offset(10)),
        )
        .expect("reader");
    assert_eq!(first.delete_records("t", CUT).expect("delete_records"), CUT);
    check_cut(&second, "t");
    assert!(out_of_range(reader.next()));
    second.close().expect("close");
    first.close().expect("close");
}

#[test]
fn a_deleted_topic_takes_its_start_with_it() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    fill(&wal, "t");
    wal.delete_records("t", CUT).expect("delete_records");
    wal.delete_topic("t").expect("delete_topic");
    wal.append("t", b"new").expect("append");
    let info = wal.topic_info("t").expect("info");
    assert_eq!((info.first_offset, info.next_offset), (0, 1));
    assert_eq!(wal.read("t", 0).expect("read").value(), b"new");
    wal.close().expect("close");
    let wal = Wal::open_with(dir.path(), config()).expect("reopen");
    assert_eq!(wal.topic_info("t").expect("info").first_offset, 0);
    assert_eq!(wal.read("t", 0).expect("read").value(), b"new");
}

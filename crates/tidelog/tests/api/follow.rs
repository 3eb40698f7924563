//! Goal: a reader waiting in `Wal::wait_for_records` sees every record as soon as its append
//! returns, in this process and in another (a read-only handle), without a flush or a
//! directory poll, across rolls to new extents and files; durable readers wake when a sync
//! covers their records; waits end on close and on their timeout; a writer that restarts,
//! and a damaged or stale `tidelog.state`, are followed without a wrong record.
//!
//! Method: the writer runs with `Durability::Never` and never flushes while the readers
//! read, so the only way another process can see a record is the shared state file. The
//! cross-process test re-executes this binary as a read-only child that waits and reads, and
//! reports the count and a checksum of everything it read; the parent compares them with
//! what it appended. Lost wake-ups would show as the child's wait running into its (long)
//! timeout and failing the test; timings belong to the benchmarks.

use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::common::{
    ChildSession, Fnv, child_command, child_commands, child_env, earliest, geometry, reply, small,
    stream_payload, tempdir,
};
use tidelog::{Config, Error, Reader, ReaderOptions, StartPosition, Visibility, Wal};

const WAIT: Duration = Duration::from_secs(30);
const STATE_FILE: &str = "tidelog.state";

fn value(i: u64) -> Vec<u8> {
    stream_payload(7, i, 10 + (i * 37 % 700) as usize)
}

/// Reads records `from..to` of topic "t" in order through waits (each bounded by `WAIT`);
/// panics on a gap, a wrong value or a wait that times out.
fn read_on(wal: &Wal, reader: &mut Reader, from: u64, to: u64) {
    let mut next = from;
    while next < to {
        match reader.next().expect("next") {
            Some(rec) => {
                assert_eq!((rec.offset, rec.value), (next, value(next).as_slice()));
                next += 1;
            }
            None => assert!(
                wal.wait_for_records(reader, WAIT).expect("wait"),
                "no record {next} within {WAIT:?}"
            ),
        }
    }
}

/// [`read_on`], then the checksum of records `0..want` read again from the start.
fn read_through_waits(wal: &Wal, reader: &mut Reader, from: u64, want: u64) -> u64 {
    read_on(wal, reader, from, want);
    let mut sum = Fnv::default();
    let mut check = earliest(wal, "t", Visibility::Published);
    for i in 0..want {
        let rec = check.next().expect("next").expect("record");
        sum.record("t", i, rec.value);
    }
    sum.0
}

fn expected_sum(n: u64) -> u64 {
    let mut sum = Fnv::default();
    for i in 0..n {
        sum.record("t", i, &value(i));
    }
    sum.0
}

/// Child: opens `dir` read-only and, for each `read N` on stdin, waits and reads until it
/// has read N records of topic "t", then replies with N and their checksum.
#[test]
fn child_process_entry() {
    let Some((dir, _mode)) = child_env() else {
        return;
    };
    let wal = Wal::open_read_only_with(&dir, small()).expect("child: read-only open");
    let mut reader: Option<Reader> = None;
    let mut read = 0;
    for command in child_commands() {
        let want: u64 = command
            .strip_prefix("read ")
            .and_then(|n| n.parse().ok())
            .expect("child: read N");
        while reader.is_none() {
            match wal.reader_with("t", ReaderOptions::default().start(StartPosition::Earliest)) {
                Ok(r) => reader = Some(r),
                Err(Error::UnknownTopic { .. }) => {
                    thread::sleep(Duration::from_millis(1));
                    wal.refresh().expect("child: refresh");
                }
                Err(e) => panic!("child: reader: {e}"),
            }
        }
        let r = reader.as_mut().expect("reader");
        let sum = read_through_waits(&wal, r, read, want);
        read = want;
        reply(&format!("read={want} sum={sum:x}"));
    }
}

#[test]
fn a_reader_in_another_process_sees_each_append_without_a_flush() {
    let dir = tempdir();
    // Small extents and files: the child follows many rolls and new files.
    let config = geometry(4, 64 * 1024);
    let wal = Wal::open_with(dir.path(), config).expect("open");
    wal.append("t", &value(0)).expect("append");
    let mut child = ChildSession::spawn(&mut child_command(module_path!(), dir.path(), ""));
    child.send("read 1");
    assert_eq!(
        child.recv(WAIT),
        format!("read=1 sum={:x}", expected_sum(1))
    );
    // One at a time: the child must wake for each.
    for i in 1..50 {
        assert_eq!(wal.append("t", &value(i)).expect("append"), i);
        child.send(&format!("read {}", i + 1));
        assert_eq!(
            child.recv(WAIT),
            format!("read={} sum={:x}", i + 1, expected_sum(i + 1))
        );
    }
    // Many at once, across many extents and files, while the child waits for the last.
    let total = 3_000;
    child.send(&format!("read {total}"));
    for i in 50..total {
        assert_eq!(wal.append("t", &value(i)).expect("append"), i);
    }
    assert_eq!(
        child.recv(WAIT),
        format!("read={total} sum={:x}", expected_sum(total))
    );
    assert!(wal.topic_info("t").expect("info").extents > 8, "many rolls");
    child.finish(WAIT);
}

#[test]
fn a_waiting_reader_in_this_process_wakes_on_an_append_and_on_close() {
    let dir = tempdir();
    let wal = std::sync::Arc::new(Wal::open_with(dir.path(), small()).expect("open"));
    wal.append("t", b"first").expect("append");
    let mut reader = earliest(&wal, "t", Visibility::Published);
    assert!(reader.next().expect("next").is_some());
    // Nothing new: the wait times out.
    assert!(
        !wal.wait_for_records(&reader, Duration::from_millis(20))
            .expect("wait")
    );
    let (tx, rx) = mpsc::channel();
    let w = std::sync::Arc::clone(&wal);
    let waiter = thread::spawn(move || {
        let got = w.wait_for_records(&reader, WAIT);
        let rec = reader.next_record().expect("next");
        tx.send(()).expect("send");
        let again = w.wait_for_records(&reader, WAIT);
        (got, rec.map(|r| r.value().to_vec()), again)
    });
    thread::sleep(Duration::from_millis(20));
    wal.append("t", b"second").expect("append");
    rx.recv_timeout(WAIT)
        .expect("the waiter woke for the append");
    thread::sleep(Duration::from_millis(20));
    wal.close().expect("close");
    let (got, rec, again) = waiter.join().expect("waiter");
    assert!(got.expect("wait"));
    assert_eq!(rec.as_deref(), Some(&b"second"[..]));
    assert!(matches!(again, Err(Error::Closed)), "{again:?}");
}

#[test]
fn a_durable_reader_waits_for_the_sync() {
    let dir = tempdir();
    let wal = std::sync::Arc::new(Wal::open_with(dir.path(), small()).expect("open"));
    wal.append("t", b"a").expect("append");
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("read-only open");
    for handle in [&*wal, &ro] {
        let mut r = earliest(handle, "t", Visibility::Durable);
        assert!(r.next().expect("next").is_none(), "not durable yet");
        assert!(
            !handle
                .wait_for_records(&r, Duration::from_millis(20))
                .expect("wait")
        );
        let mut published = earliest(handle, "t", Visibility::Published);
        assert_eq!(published.next().expect("next").expect("record").value, b"a");
    }
    let mut in_process = earliest(&wal, "t", Visibility::Durable);
    let mut other = earliest(&ro, "t", Visibility::Durable);
    let w = std::sync::Arc::clone(&wal);
    let flusher = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        w.flush().expect("flush");
    });
    assert!(wal.wait_for_records(&in_process, WAIT).expect("wait"));
    assert!(ro.wait_for_records(&other, WAIT).expect("wait"));
    flusher.join().expect("flusher");
    assert_eq!(
        in_process.next().expect("next").expect("record").value,
        b"a"
    );
    assert_eq!(other.next().expect("next").expect("record").value, b"a");
    assert!(other.next().expect("next").is_none());
}

#[test]
fn a_read_only_handle_follows_a_restarted_writer() {
    let dir = tempdir();
    let first = Wal::open_with(dir.path(), small()).expect("open");
    first.append("t", &value(0)).expect("append");
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("read-only open");
    let mut reader = earliest(&ro, "t", Visibility::Published);
    assert!(reader.next().expect("next").is_some());
    // Dropped without close: the next writer rebuilds the state file under a new
    // generation, and the reader attaches to it again.
    drop(first);
    let second = Wal::open_with(dir.path(), small()).expect("reopen");
    for i in 1..200 {
        assert_eq!(second.append("t", &value(i)).expect("append"), i);
    }
    read_on(&ro, &mut reader, 1, 200);
}

/// Overwrites the whole state file with `byte`.
fn fill_state_file(dir: &Path, byte: u8) {
    let path = dir.join(STATE_FILE);
    let len = std::fs::metadata(&path).expect("state file").len();
    std::fs::write(&path, vec![byte; len as usize]).expect("overwrite");
}

#[test]
fn a_damaged_state_file_is_never_trusted_and_the_writer_rebuilds_it() {
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), small()).expect("open");
        for i in 0..100 {
            wal.append("t", &value(i)).expect("append");
        }
        wal.close().expect("close");
    }
    for byte in [0xFF, 0x00, 0x5A] {
        fill_state_file(dir.path(), byte);
        // No writer: a reader ignores what the file says and reads the durable records.
        let ro = Wal::open_read_only_with(dir.path(), small()).expect("read-only open");
        let mut r = earliest(&ro, "t", Visibility::Published);
        for i in 0..100 {
            let rec = r.next().expect("next").expect("record");
            assert_eq!((rec.offset, rec.value), (i, value(i).as_slice()));
        }
        assert!(r.next().expect("next").is_none());
        assert!(
            !ro.wait_for_records(&r, Duration::from_millis(10))
                .expect("wait")
        );
        // A writer rebuilds the file, and the reader follows it from then on.
        let wal = Wal::open_with(dir.path(), small()).expect("open over a damaged file");
        wal.append("t", &value(100)).expect("append");
        assert!(ro.wait_for_records(&r, WAIT).expect("wait"));
        assert_eq!(r.next().expect("next").expect("record").value, value(100));
        wal.close().expect("close");
        // Back to 100 records for the next round.
        let wal = Wal::open_with(dir.path(), small()).expect("open");
        wal.delete_topic("t").expect("delete");
        for i in 0..100 {
            wal.append("t", &value(i)).expect("append");
        }
        wal.close().expect("close");
    }
}

#[test]
fn a_truncated_state_file_is_grown_not_trusted() {
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), small()).expect("open");
        wal.append("t", b"x").expect("append");
        wal.close().expect("close");
    }
    let path = dir.path().join(STATE_FILE);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open state file")
        .set_len(100)
        .expect("truncate");
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("read-only open");
    assert_eq!(ro.read("t", 0).expect("read").value(), b"x");
    let wal = Wal::open_with(dir.path(), small()).expect("open over a short file");
    wal.append("t", b"y").expect("append");
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("read-only open");
    assert_eq!(ro.read("t", 1).expect("read").value(), b"y");
}

#[test]
fn the_state_file_holds_no_records_and_its_loss_loses_nothing() {
    let dir = tempdir();
    let config = Config::default().durability(tidelog::Durability::Always);
    {
        let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
        for i in 0..20 {
            wal.append("t", &value(i)).expect("append");
        }
    }
    std::fs::remove_file(dir.path().join(STATE_FILE)).expect("remove");
    let wal = Wal::open_with(dir.path(), config).expect("reopen");
    let mut r = earliest(&wal, "t", Visibility::Durable);
    for i in 0..20 {
        assert_eq!(r.next().expect("next").expect("record").value, value(i));
    }
}

#[test]
fn a_writer_that_cannot_build_the_state_file_does_not_open() {
    use tidelog::io::{Fault, FaultStorage, points};
    let dir = tempdir();
    for point in [points::CREATE, points::SET_LEN] {
        let faults = std::sync::Arc::new(FaultStorage::new());
        faults.arm_for(point, Some(STATE_FILE), Fault::Always(libc::EIO));
        let err = Wal::open_with_storage(dir.path(), small(), faults.clone())
            .expect_err("the writer needs its state file");
        assert!(
            matches!(err, Error::Io { .. }) && err.to_string().contains("shared state file"),
            "{point}: {err}"
        );
        assert!(faults.hits(point) > 0);
        // Nothing was lost: the next open (without the fault) works.
        let wal = Wal::open_with(dir.path(), small()).expect("open");
        wal.append("t", b"x").expect("append");
        wal.close().expect("close");
        std::fs::remove_file(dir.path().join(STATE_FILE)).expect("remove");
    }
}

#[test]
fn a_reader_that_may_not_write_the_state_file_still_follows_the_writer() {
    use tidelog::io::{Fault, FaultStorage, points};
    let dir = tempdir();
    let wal = std::sync::Arc::new(Wal::open_with(dir.path(), small()).expect("open"));
    wal.append("t", &value(0)).expect("append");
    // Opening the state file for writing is refused (a directory without write
    // permission): the reader maps it read-only and polls its words instead of sleeping
    // on a futex it cannot count itself on.
    let faults = std::sync::Arc::new(FaultStorage::new());
    faults.arm_for(points::OPEN, Some(STATE_FILE), Fault::Once(libc::EACCES));
    let ro = Wal::open_read_only_with_storage(dir.path(), small(), faults.clone())
        .expect("read-only open");
    assert_eq!(faults.hits(points::OPEN), 1);
    let mut reader = earliest(&ro, "t", Visibility::Published);
    let w = std::sync::Arc::clone(&wal);
    let writer = thread::spawn(move || {
        for i in 1..300 {
            w.append("t", &value(i)).expect("append");
            if i % 50 == 0 {
                thread::sleep(Duration::from_millis(2));
            }
        }
    });
    read_on(&ro, &mut reader, 0, 300);
    writer.join().expect("writer");
}

#[test]
fn damage_past_the_durable_point_is_never_read_and_reported_once_durable() {
    let dir = tempdir();
    let config = geometry(4, 64 * 1024);
    let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
    wal.append("t", &value(0)).expect("append");
    wal.flush().expect("flush");
    let ro = Wal::open_read_only_with(dir.path(), config.clone()).expect("read-only open");
    let mut reader = earliest(&ro, "t", Visibility::Published);
    assert!(reader.next().expect("next").is_some());
    // Record 1 is published, not durable, and then damaged in the page cache (a flipped
    // bit in memory, or a stray write): the writer rolls on past it.
    wal.append("t", &value(1)).expect("append");
    let frame = crate::common::frame_of(dir.path(), "t", 1);
    let byte = std::fs::read(&frame.file).expect("read")[frame.value_pos() as usize];
    // In place (a positional write), never a rewrite of the whole file: it is mapped.
    crate::common::patch(&frame.file, frame.value_pos(), &[!byte]);
    let mut i = 2;
    while wal.topic_info("t").expect("info").extents < 2 {
        wal.append("t", &value(i)).expect("append");
        i += 1;
    }
    // The reader never returns the damaged record nor anything past it, and its wait ends
    // at the timeout.
    assert!(
        !ro.wait_for_records(&reader, Duration::from_millis(50))
            .expect("wait")
    );
    assert!(reader.next().expect("next").is_none());
    assert_eq!(reader.position(), 1);
    // Once the writer makes the damage durable (and seals the extent), reading it reports
    // it, and the reader stays put.
    wal.flush().expect("flush");
    ro.refresh().expect("refresh");
    for _ in 0..2 {
        assert!(
            matches!(reader.next(), Err(Error::Corruption { offset: 1, .. })),
            "damage below the durable point is corruption"
        );
    }
}

/// A reader that spins before it sleeps (`ReaderOptions::spin`) reads the same records, in
/// order, whether they arrive while it spins or after it fell asleep; a wait with nothing to
/// see still ends at its timeout (the spin is bounded by it); a spin beyond `SPIN_MAX` is
/// refused.
#[test]
fn a_spinning_reader_reads_every_record_and_its_wait_still_times_out() {
    let dir = tempdir();
    let wal = std::sync::Arc::new(Wal::open_with(dir.path(), small()).expect("open"));
    wal.append("t", &value(0)).expect("append");
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("read-only open");
    let too_long = ReaderOptions::default().spin(tidelog::SPIN_MAX + Duration::from_micros(1));
    match ro.reader_with("t", too_long) {
        Err(Error::InvalidArgument { name: "spin", .. }) => {}
        other => panic!("a spin beyond SPIN_MAX: {other:?}"),
    }
    let options = ReaderOptions::default()
        .start(StartPosition::Earliest)
        .spin(tidelog::SPIN_MAX);
    let mut readers = [
        wal.reader_with("t", options.clone()).expect("reader"),
        ro.reader_with("t", options).expect("reader"),
    ];
    for (handle, reader) in [&*wal, &ro].into_iter().zip(&mut readers) {
        read_on(handle, reader, 0, 1);
        // Nothing new: the wait ends at its timeout, shorter than the spin.
        assert!(
            !handle
                .wait_for_records(reader, Duration::from_millis(2))
                .expect("wait")
        );
    }
    const N: u64 = 300;
    let w = std::sync::Arc::clone(&wal);
    let writer = thread::spawn(move || {
        for i in 1..N {
            w.append("t", &value(i)).expect("append");
            // Some arrive while the readers spin, some after they fell asleep.
            if i % 30 == 0 {
                thread::sleep(Duration::from_millis(15));
            }
        }
    });
    thread::scope(|s| {
        let [a, b] = &mut readers;
        s.spawn(|| read_on(&wal, a, 1, N));
        s.spawn(|| read_on(&ro, b, 1, N));
    });
    writer.join().expect("writer");
}

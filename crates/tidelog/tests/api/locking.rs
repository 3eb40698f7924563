//! Goal: an exclusive handle (`Config::exclusive`) is the directory's only writable handle,
//! in this process or any other, until it is closed; separate directories are fully
//! independent. (Shared mode, the default: `processes.rs`.)
//!
//! Method: a second `Wal::open` of a held directory must fail with `Error::Locked`, in the
//! same process and in a child process (this test binary re-executed; the child reports its
//! result on stdout). After close (explicit, or by dropping the `Wal` while writers are still
//! alive) the directory opens again, in both places. Two handles on two directories are then
//! driven from two threads at once and must each hold only their own records.
//!
//! `child_process_entry` is the child's side; in a normal run, without the environment
//! variable `TIDELOG_CHILD_DIR`, it returns at once.

use std::time::Duration;

use crate::common::{
    ChildSession, child_command, child_env, parse_tagged, reply, small, tagged_value, tempdir,
};
use tidelog::{Error, ReaderOptions, StartPosition, Wal};

/// Child: tries one writable open of the directory and reports `locked`, `opened` or the error.
#[test]
fn child_process_entry() {
    let Some((dir, _mode)) = child_env() else {
        return;
    };
    match Wal::open_with(&dir, small().exclusive(true)) {
        Ok(wal) => {
            let next = wal.topic_info("t").map(|i| i.next_offset).unwrap_or(0);
            wal.close().expect("child close");
            reply(&format!("opened next={next}"));
        }
        Err(Error::Locked { path }) => {
            assert_eq!(path, dir, "Locked names the directory");
            reply("locked");
        }
        Err(e) => reply(&format!("error {e}")),
    }
}

fn open_in_child(dir: &std::path::Path) -> String {
    let mut child = ChildSession::spawn(&mut child_command(module_path!(), dir, ""));
    let answer = child.recv(Duration::from_secs(60));
    child.finish(Duration::from_secs(30));
    answer
}

#[test]
fn second_open_in_the_same_process_is_locked() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small().exclusive(true)).expect("open");
    wal.append("t", b"one").expect("append");
    for _ in 0..3 {
        match Wal::open_with(dir.path(), small().exclusive(true)) {
            Err(Error::Locked { path }) => assert_eq!(path, dir.path()),
            other => panic!("expected Locked, got {other:?}"),
        }
    }
    // The default config and a different geometry are refused the same way.
    assert!(matches!(Wal::open(dir.path()), Err(Error::Locked { .. })));
    // A refused open leaves the holder working.
    assert_eq!(wal.append("t", b"two").expect("append"), 1);
    // Read-only handles take no lock.
    let ro = Wal::open_read_only_with(dir.path(), small().exclusive(true)).expect("read-only open");
    drop(ro);

    wal.close().expect("close");
    let wal = Wal::open_with(dir.path(), small().exclusive(true)).expect("reopen after close");
    assert_eq!(wal.topic_info("t").expect("info").next_offset, 2);
    assert!(matches!(
        Wal::open_with(dir.path(), small().exclusive(true)),
        Err(Error::Locked { .. })
    ));
    drop(wal);
    let wal = Wal::open_with(dir.path(), small().exclusive(true)).expect("reopen after drop");
    drop(wal);
}

#[test]
fn closing_releases_the_lock_even_with_live_writers_and_readers() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small().exclusive(true)).expect("open");
    let writer = wal.writer("t").expect("writer");
    writer.append(b"x").expect("append");
    let mut reader = wal
        .reader_with("t", ReaderOptions::default().start(StartPosition::Earliest))
        .expect("reader");
    drop(wal);

    // The writer and reader outlive the dropped (closed) handle but no longer hold the lock.
    let wal =
        Wal::open_with(dir.path(), small().exclusive(true)).expect("reopen while old writer lives");
    assert!(matches!(writer.append(b"late"), Err(Error::Closed)));
    assert!(matches!(reader.next(), Err(Error::Closed)));
    assert_eq!(wal.append("t", b"y").expect("append"), 1);
}

#[test]
fn second_open_from_another_process_is_locked() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small().exclusive(true)).expect("open");
    for i in 0..5 {
        wal.append("t", &[i]).expect("append");
    }
    wal.flush().expect("flush");
    assert_eq!(open_in_child(dir.path()), "locked");
    // Still ours after the child's attempt.
    assert_eq!(wal.append("t", b"more").expect("append"), 5);
    wal.close().expect("close");

    assert_eq!(open_in_child(dir.path()), "opened next=6");
    // And ours again after the child closed.
    let wal = Wal::open_with(dir.path(), small().exclusive(true)).expect("reopen");
    assert_eq!(wal.topic_info("t").expect("info").next_offset, 6);
}

#[test]
fn two_directories_in_two_threads() {
    const RECORDS: u64 = 5_000;
    let dirs = [tempdir(), tempdir()];
    std::thread::scope(|s| {
        for (tag, dir) in dirs.iter().enumerate() {
            s.spawn(move || {
                let tag = tag as u32;
                let wal = Wal::open_with(dir.path(), small().exclusive(true)).expect("open");
                for seq in 0..RECORDS {
                    let topic = if seq % 2 == 0 { "shared-name" } else { "own" };
                    wal.append(topic, &tagged_value(tag, seq, 200))
                        .expect("append");
                }
                wal.close().expect("close");
            });
        }
    });
    for (tag, dir) in dirs.iter().enumerate() {
        let wal = Wal::open_with(dir.path(), small().exclusive(true)).expect("reopen");
        assert_eq!(wal.topics(), ["own", "shared-name"]);
        for (topic, parity) in [("shared-name", 0), ("own", 1)] {
            let mut r = wal
                .reader_with(
                    topic,
                    ReaderOptions::default().start(StartPosition::Earliest),
                )
                .expect("reader");
            let mut n = 0u64;
            while let Some(rec) = r.next().expect("next") {
                let seq = 2 * n + parity;
                assert_eq!(
                    parse_tagged(rec.value),
                    Some((tag as u32, seq)),
                    "{topic}@{n}"
                );
                n += 1;
            }
            assert_eq!(n, RECORDS / 2);
        }
    }
}

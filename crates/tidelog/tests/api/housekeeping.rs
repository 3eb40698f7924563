//! Goal: while several processes share a directory (shared mode), housekeeping still runs,
//! in exactly one of them: retention deletes old extents and their data files; a group's
//! commit in one process never frees records a group of another process has not consumed;
//! when the leader dies (killed, or at any step of retiring extents and deleting files)
//! another process takes over, and nothing above the first offset is lost or damaged, in
//! any process's view and after every process closed.
//!
//! Method: the test binary re-executes itself as a child (`child_process_entry`) that
//! opens the directory and obeys commands on stdin; named crash points
//! (`TIDELOG_CRASH_AT`) kill it inside the leader's pass.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{self, ChildSession, child_commands, child_env, tempdir};
use tidelog::{Config, Error, Retention, Visibility, Wal};

const TOPIC: &str = "t";
/// 16 blocks of 64 KiB per file: each file holds about 10,000 of these records.
const BLOCK: u64 = 64 * 1024;
const RETAINED_BYTES: u64 = 2 * BLOCK;

fn cfg() -> Config {
    let mut c = common::geometry(16, BLOCK)
        .topic_retention(TOPIC, Retention::default().max_bytes(RETAINED_BYTES));
    // Housekeeping ticks every sync interval.
    c.sync_interval_ms = 20;
    c
}

/// Without retention: only consumer groups free records.
fn cfg_groups() -> Config {
    let mut c = common::geometry(16, BLOCK);
    c.sync_interval_ms = 20;
    c
}

fn value(seq: u64) -> Vec<u8> {
    let mut v = format!("{seq}:").into_bytes();
    v.resize(64 + (seq % 29) as usize, b'v');
    v
}

/// Appends records `from..to` to the topic.
fn append_range(wal: &Wal, from: u64, to: u64) {
    for seq in from..to {
        let offset = wal.append(TOPIC, &value(seq)).unwrap();
        assert_eq!(offset, seq, "one appender: offset is the sequence");
    }
}

/// Child: opens the directory (`retention` or `groups` configuration) and obeys commands:
/// `leader` replies whether this process leads, `append FROM TO`, `commit GROUP OFFSET`;
/// closes when stdin closes.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let config = if mode == "groups" {
        cfg_groups()
    } else {
        cfg()
    };
    let wal = Wal::open_with(&dir, config).unwrap();
    println!("@@reply open @@");
    for line in child_commands() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["leader"] => {
                let me = wal.leader().is_some_and(|l| l.pid == std::process::id());
                println!("@@reply {me} @@");
            }
            ["append", from, to] => {
                append_range(&wal, from.parse().unwrap(), to.parse().unwrap());
                println!("@@reply appended @@");
            }
            ["commit", group, offset] => {
                let mut reader = wal.reader(TOPIC, group).unwrap();
                reader.commit_offset(offset.parse().unwrap()).unwrap();
                println!("@@reply committed @@");
            }
            other => panic!("unknown command {other:?}"),
        }
    }
    wal.close().unwrap();
}

/// Generous: CI machines are slow and busy.
const WAIT: Duration = Duration::from_secs(30);

fn child(dir: &Path, mode: &str, crash_at: Option<&str>) -> ChildSession {
    common::open_child(module_path!(), dir, mode, crash_at, WAIT)
}

/// Waits until `done` holds, at most `WAIT`.
#[track_caller]
fn eventually(what: &str, done: impl FnMut() -> bool) {
    common::eventually(what, WAIT, done);
}

/// Every record from the first offset on is there and is the one appended at its offset.
/// Retention may still move the first offset meanwhile: a read that it overtook starts
/// again.
fn check_records(wal: &Wal, next: u64) {
    let (info, records) = common::read_retained(wal, TOPIC);
    assert_eq!(info.next_offset, next);
    let first = records.first().map_or(next, |r| r.0);
    assert!(
        first >= info.first_offset,
        "reading starts at the first offset"
    );
    for (offset, v) in &records {
        assert_eq!(*v, value(*offset), "record {offset} differs");
    }
    let end = records.last().map_or(first, |r| r.0 + 1);
    assert_eq!(end, next, "every record up to the next offset");
}

fn leads(session: &mut ChildSession) -> bool {
    session.send("leader");
    session.recv(WAIT) == "true"
}

#[test]
fn retention_deletes_files_while_processes_share_the_directory() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    let mut other = child(dir.path(), "retention", None);
    // Both append, one after the other; far more than the files' worth kept.
    const N: u64 = 60_000;
    for part in 0..6 {
        let (from, to) = (part * N / 6, (part + 1) * N / 6);
        if part % 2 == 0 {
            append_range(&wal, from, to);
        } else {
            other.send(&format!("append {from} {to}"));
            assert_eq!(other.recv(WAIT), "appended");
        }
    }
    eventually("retention deleted the old files", || {
        common::data_files(dir.path()).len() <= 3
            && wal.topic_info(TOPIC).unwrap().first_offset > N / 2
    });
    // The one that is not the leader follows: it drops what the leader retired.
    check_records(&wal, N);
    other.finish(WAIT);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    check_records(&wal, N);
    wal.close().unwrap();
}

/// Two threads of one process allocate at once: one's `fallocate` is held (its extent's
/// identity not written yet) while the other's allocations come and go, the allocator
/// moves past that file and retention retires every other extent in it. The leader keeps
/// the file until the held allocation is written, so its record is not lost.
#[test]
fn the_leader_keeps_a_file_an_allocation_of_another_thread_awaits() {
    let dir = tempdir();
    let storage = std::sync::Arc::new(common::GateStorage::default());
    let wal =
        std::sync::Arc::new(Wal::open_with_storage(dir.path(), cfg(), storage.clone()).unwrap());
    // A second handle joins: from now on only the leader deletes files, judging them from
    // their block slots.
    let other = Wal::open_with(dir.path(), cfg()).unwrap();
    append_range(&wal, 0, 1);
    let first_file = common::data_files(dir.path())[0].clone();
    // The first append to "late" rolls to its first extent, in the first file; its
    // `fallocate` is held.
    storage.hold_next_allocates(1);
    let late = {
        let wal = std::sync::Arc::clone(&wal);
        std::thread::spawn(move || wal.append("late", b"held"))
    };
    storage.wait_held(1);
    // Files' worth of records: this thread rolls many times, in the first file and after.
    append_range(&wal, 1, 40_000);
    eventually("retention retired the first file's extents", || {
        wal.topic_info(TOPIC).unwrap().first_offset > 20_000
    });
    // A few more leader passes.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        first_file.exists(),
        "the leader deleted a file an allocation awaits"
    );
    storage.open();
    assert_eq!(late.join().unwrap().unwrap(), 0);
    drop(other);
    std::sync::Arc::try_unwrap(wal).unwrap().close().unwrap();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    let mut reader = common::earliest(&wal, "late", Visibility::Published);
    assert_eq!(reader.next().unwrap().unwrap().value, b"held");
}

#[test]
fn a_group_of_another_process_holds_back_consumption() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg_groups()).unwrap();
    const N: u64 = 40_000;
    append_range(&wal, 0, N);
    // "slow" consumed nothing; "fast", in another process, everything (each group is made
    // after the other process opened: neither knew it then).
    let mut other = child(dir.path(), "groups", None);
    wal.reader(TOPIC, "slow").unwrap().commit_offset(0).unwrap();
    other.send(&format!("commit fast {N}"));
    assert_eq!(other.recv(WAIT), "committed");
    let files = common::data_files(dir.path()).len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        wal.topic_info(TOPIC).unwrap().first_offset,
        0,
        "a group at 0 holds every record"
    );
    assert_eq!(common::data_files(dir.path()).len(), files);
    check_records(&wal, N);
    // Once "slow" caught up too, the leader frees what both consumed.
    wal.reader(TOPIC, "slow").unwrap().commit_offset(N).unwrap();
    eventually("consumed files went", || {
        common::data_files(dir.path()).len() < files
    });
    check_records(&wal, N);
    other.finish(WAIT);
    wal.close().unwrap();
}

#[test]
fn a_killed_leader_is_replaced() {
    let dir = tempdir();
    // The child opens first: it is alone, and leads from its first housekeeping pass.
    let mut leader = child(dir.path(), "retention", None);
    eventually("the child leads", || leads(&mut leader));
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    let before = wal.leader().unwrap();
    assert_ne!(before.pid, std::process::id());
    leader.kill();
    eventually("this process took the lead", || {
        wal.leader()
            .is_some_and(|l| l.pid == std::process::id() && l.epoch > before.epoch)
    });
    const N: u64 = 40_000;
    append_range(&wal, 0, N);
    eventually("the new leader deleted old files", || {
        wal.topic_info(TOPIC).unwrap().first_offset > 0 && common::data_files(dir.path()).len() <= 3
    });
    check_records(&wal, N);
    wal.close().unwrap();
}

/// The leader is killed after marking an extent retired, or before deleting a file whose
/// extents all are: the next leader finishes the work, and nothing kept is lost.
#[test]
fn a_leader_killed_inside_its_pass_loses_nothing() {
    for point in ["kill:retired:3", "kill:leader-delete:1"] {
        let dir = tempdir();
        let mut leader = child(dir.path(), "retention", Some(point));
        eventually("the child leads", || leads(&mut leader));
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        const N: u64 = 40_000;
        append_range(&wal, 0, N);
        eventually("the child died at its crash point", || leader.has_exited());
        eventually("this process took over and retention settled", || {
            wal.leader().is_some_and(|l| l.pid == std::process::id())
                && common::data_files(dir.path()).len() <= 3
        });
        check_records(&wal, N);
        wal.close().unwrap();
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        check_records(&wal, N);
        let report = wal.recovery_report();
        assert_eq!(report.dropped_extents, 0, "{point}: {report:?}");
        wal.close().unwrap();
    }
}

/// A read-only reader left behind while retention deleted the extent it stood in (its
/// handle never saw that extent end) is told so (`OffsetOutOfRange`) instead of waiting for
/// records that are gone.
#[test]
fn a_follower_passed_by_retention_is_told_so() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    append_range(&wal, 0, 1);
    let ro = Wal::open_read_only_with(dir.path(), cfg()).unwrap();
    let mut reader = common::earliest(&ro, TOPIC, Visibility::Published);
    assert_eq!(reader.next().unwrap().map(|r| r.offset), Some(0));
    const N: u64 = 40_000;
    append_range(&wal, 1, N);
    eventually("retention deleted the first files", || {
        wal.topic_info(TOPIC).unwrap().first_offset > N / 2
    });
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < WAIT,
            "the reader never learned it was passed"
        );
        match reader.next() {
            Err(Error::OffsetOutOfRange { first, .. }) => {
                assert!(first > 0);
                break;
            }
            Ok(Some(r)) => assert_eq!(r.value, value(r.offset)),
            Ok(None) => {
                ro.wait_for_records(&reader, Duration::from_millis(20))
                    .unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    }
    wal.close().unwrap();
}

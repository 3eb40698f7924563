//! Goal: with `Config::disk_bytes_max`, appends that need space beyond the cap fail with
//! `Error::LimitExceeded { limit: "disk_bytes_max", .. }` (or wait for it, when asked)
//! instead of filling the disk; nothing already written is harmed, and once consumers free
//! files appends work again.
//!
//! Method: two topics (so files hold mixed extents) with one consumer group are appended
//! until each topic's next append fails (small geometry: 8 blocks of 64 KiB per file, a cap
//! of three files). The failure must name the cap, the disk usage (the engine's account and
//! the blocks the files occupy on disk) must stay within it, offsets must not skip, and every
//! record must read back. The group then reads and commits everything; once the background
//! thread deleted the consumed files, appends succeed again, up to the cap again. For the
//! waiting variant, a thread appends through `Writer::wait_for_space` while the disk is at the
//! cap; the test checks (by a flag, not by timing) that it had not returned when the main
//! thread commits the group, and that it then succeeds with the next offset. Two tests pin
//! the edges of the account: the spare file's header, and a file whose unlink fails
//! (`FaultStorage`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{self, data_files, small, tempdir, topic_value};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{Config, Error, ReaderOptions, StartPosition, Wal, Writer};

const TOPICS: [&str; 2] = ["left", "right"];
const GROUP: &str = "consumer";
/// One data file with every block handed out.
const FILE_BYTES: u64 = 4096 + 8 * 64 * 1024;
const CAP: u64 = 3 * FILE_BYTES;
/// Generous bound on the appends that fit under the cap (about 24 blocks of ~60 records).
const MAX_APPENDS: u64 = 10_000;
use crate::common::DELETE_DEADLINE as DEADLINE;

fn capped() -> Config {
    small().disk_bytes_max(CAP)
}

fn is_cap_error(e: &Error) -> bool {
    matches!(e, Error::LimitExceeded { limit: "disk_bytes_max", value, max } if *max == CAP && *value > CAP)
}

/// Bytes the data files occupy on disk.
fn real_bytes(wal: &Wal) -> u64 {
    common::real_bytes(&data_files(wal.path()))
}

/// Usage is within the cap by the engine's account and on disk. The
/// filesystem may spend a page per file on its own metadata (an extent tree block), which the
/// engine cannot see while running; after a reopen its account is the files' allocated
/// blocks (`reopened`), so it includes those pages.
fn check_within(wal: &Wal, reopened: bool) {
    // A file leaves the account just before it is unlinked: let deletions in flight finish.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let listed: Vec<_> = wal.file_states().into_iter().map(|s| s.path).collect();
        if data_files(wal.path()) == listed {
            break;
        }
        assert!(Instant::now() < deadline, "a deletion did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    let usage = wal.disk_usage();
    let metadata = usage.files * 4096;
    assert!(
        usage.bytes <= CAP + if reopened { metadata } else { 0 },
        "disk usage {usage:?} is over the cap {CAP}: {:#?}",
        wal.file_states()
    );
    let real = real_bytes(wal);
    assert!(
        real <= CAP + metadata,
        "the data files occupy {real} bytes on disk, over the cap {CAP}"
    );
}

fn check_within_cap(wal: &Wal) {
    check_within(wal, false);
}

/// Appends round-robin until every topic's next append fails at the cap; returns the next
/// offset of each topic.
fn fill_to_cap(writers: &[Writer]) -> Vec<u64> {
    let mut next = vec![0u64; writers.len()];
    let mut full = vec![false; writers.len()];
    for _ in 0..MAX_APPENDS {
        if full.iter().all(|&f| f) {
            break;
        }
        for (i, w) in writers.iter().enumerate() {
            if full[i] {
                continue;
            }
            match w.append(&topic_value(w.topic(), next[i])) {
                Ok(offset) => {
                    assert_eq!(offset, next[i]);
                    next[i] += 1;
                }
                Err(e) => {
                    assert!(is_cap_error(&e), "{}: unexpected error {e:?}", w.topic());
                    full[i] = true;
                }
            }
        }
    }
    assert!(full.iter().all(|&f| f), "the cap was never reached");
    for (w, &n) in writers.iter().zip(&next) {
        // Still full, and a failed append took no offset.
        let e = w
            .append(&topic_value(w.topic(), n))
            .expect_err("at the cap");
        assert!(is_cap_error(&e), "{e:?}");
        assert_eq!(w.next_offset(), n);
    }
    next
}

fn read_back(wal: &Wal, topic: &str, next: u64) {
    let mut reader = wal
        .reader_with(
            topic,
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .expect("reader");
    let first = reader.position();
    let mut expect = first;
    while let Some(rec) = reader.next().expect("next") {
        assert_eq!(rec.offset, expect);
        assert_eq!(rec.value, topic_value(topic, expect), "{topic}@{expect}");
        expect += 1;
    }
    assert_eq!(expect, next, "{topic} reads to its end");
}

/// The group reads and commits everything of every topic.
fn consume_all(wal: &Wal, next: &[u64]) {
    for (t, &n) in TOPICS.iter().zip(next) {
        let mut reader = wal.reader(t, GROUP).expect("reader");
        while reader.position() < n {
            let rec = reader.next().expect("next").expect("a record");
            assert_eq!(rec.value, topic_value(t, rec.offset));
        }
        reader.commit().expect("commit");
    }
}

/// Writers of every topic, after registering the group so it holds everything.
fn setup(wal: &Wal) -> Vec<Writer> {
    TOPICS
        .iter()
        .map(|t| {
            let w = wal.writer(t).expect("writer");
            drop(wal.reader(t, GROUP).expect("register the group"));
            w
        })
        .collect()
}

#[test]
fn appends_fail_at_the_cap_and_work_again_once_files_are_deleted() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), capped()).expect("open");
    let writers = setup(&wal);
    let next = fill_to_cap(&writers);
    check_within_cap(&wal);
    let full = wal.disk_usage();
    assert!(
        full.bytes > CAP - 2 * 64 * 1024,
        "appends stopped well before the cap: {full:?}"
    );
    for (t, &n) in TOPICS.iter().zip(&next) {
        read_back(&wal, t, n);
    }
    // The failures wrote nothing: a reopen finds the same records and still no room.
    wal.close().expect("close");
    let wal = Wal::open_with(dir.path(), capped()).expect("reopen");
    let writers: Vec<Writer> = TOPICS
        .iter()
        .map(|t| wal.writer(t).expect("writer"))
        .collect();
    for (w, &n) in writers.iter().zip(&next) {
        assert_eq!(w.next_offset(), n);
        read_back(&wal, w.topic(), n);
    }
    check_within(&wal, true);

    consume_all(&wal, &next);
    let deadline = Instant::now() + DEADLINE;
    while wal.disk_usage().bytes + FILE_BYTES > CAP {
        assert!(
            Instant::now() < deadline,
            "no file was deleted: {:#?}",
            wal.file_states()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Room again: both topics append, up to the cap again.
    let mut more = next.clone();
    for (w, n) in writers.iter().zip(&mut more) {
        assert_eq!(
            w.append(&topic_value(w.topic(), *n))
                .expect("append after deletion"),
            *n
        );
        *n += 1;
    }
    let mut again = vec![false; writers.len()];
    for _ in 0..MAX_APPENDS {
        if again.iter().all(|&f| f) {
            break;
        }
        for (i, w) in writers.iter().enumerate() {
            if again[i] {
                continue;
            }
            match w.append(&topic_value(w.topic(), more[i])) {
                Ok(o) => {
                    assert_eq!(o, more[i]);
                    more[i] += 1;
                }
                Err(e) => {
                    assert!(is_cap_error(&e), "{e:?}");
                    again[i] = true;
                }
            }
        }
    }
    assert!(again.iter().all(|&f| f), "the cap was never reached again");
    check_within_cap(&wal);
    for (t, &n) in TOPICS.iter().zip(&more) {
        read_back(&wal, t, n);
    }
    wal.close().expect("close");
}

#[test]
fn an_append_waits_for_space_until_a_commit_frees_it() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), capped()).expect("open");
    let writers = setup(&wal);
    let next = fill_to_cap(&writers);
    check_within_cap(&wal);

    let waiter = writers[0].clone().wait_for_space(Duration::from_secs(30));
    let expected = next[0];
    let returned = Arc::new(AtomicBool::new(false));
    let (started_tx, started) = mpsc::channel();
    let (result_tx, result) = mpsc::channel();
    let flag = Arc::clone(&returned);
    let handle = std::thread::spawn(move || {
        started_tx.send(()).expect("signal the start");
        let r = waiter.append(&topic_value("left", expected));
        flag.store(true, Ordering::SeqCst);
        result_tx.send(r).expect("send the result");
    });
    started
        .recv_timeout(DEADLINE)
        .expect("the appending thread started");
    // Give it time to reach the wait; correctness does not depend on how long.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !returned.load(Ordering::SeqCst),
        "the append returned although no space was freed: {:?}",
        result.try_recv()
    );
    consume_all(&wal, &next);
    let r = result
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiting append returned after the commit");
    assert_eq!(r.expect("the waiting append succeeded"), expected);
    handle.join().expect("appending thread");
    check_within_cap(&wal);
    read_back(&wal, "left", expected + 1);
    wal.close().expect("close");
}

#[test]
fn a_configured_space_wait_still_fails_when_nothing_is_freed() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), capped().space_wait_ms(50)).expect("open");
    let writers = setup(&wal);
    // Every append at the cap waits 50 ms, then fails: nothing frees space.
    let next = fill_to_cap(&writers);
    check_within_cap(&wal);
    for (t, &n) in TOPICS.iter().zip(&next) {
        read_back(&wal, t, n);
    }
    wal.close().expect("close");
}

/// No periodic housekeeping pass (a one-hour tick), so files are only created on demand
/// and the fill reaches the cap exactly; then one housekeeping pass runs (deleting an empty
/// topic wakes it) and finds the current file full with no spare ready.
#[test]
fn the_spare_file_counts_against_the_cap() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), capped().sync_interval_ms(3_600_000)).expect("open");
    let writers = setup(&wal);
    fill_to_cap(&writers);
    check_within(&wal, false);
    let files = wal.disk_usage().files;
    wal.writer("wake").expect("writer");
    wal.delete_topic("wake").expect("delete an empty topic");
    // Watch for a spare for a while; a fixed engine may well make none.
    let deadline = Instant::now() + Duration::from_secs(2);
    while wal.disk_usage().files == files && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Regression: the spare's header page was once added to the account outside the cap.
    check_within(&wal, false);
    wal.close().expect("close");
}

/// A consumed file whose unlink fails is still on disk: it must go on counting against the
/// cap (and stay known, to be retried), and the failure is reported by the next `flush`.
#[test]
fn a_data_file_that_cannot_be_removed_still_counts_against_the_cap() {
    let dir = tempdir();
    let storage = Arc::new(FaultStorage::new());
    let wal =
        Wal::open_with_storage(dir.path(), capped(), Arc::clone(&storage) as _).expect("open");
    let writers = setup(&wal);
    let next = fill_to_cap(&writers);
    storage.arm_for(points::REMOVE, Some(".tdl"), Fault::Always(libc::EIO));
    consume_all(&wal, &next);
    let deadline = Instant::now() + DEADLINE;
    while storage.hits(points::REMOVE) == 0 {
        assert!(Instant::now() < deadline, "no deletion was attempted");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The background failure surfaces at the next flush.
    let e = loop {
        match wal.flush() {
            Err(e) => break e,
            Ok(()) => {
                assert!(
                    Instant::now() < deadline,
                    "flush never reported the failure"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    assert!(
        matches!(
            e,
            Error::Io {
                op: "remove data file",
                ..
            }
        ),
        "{e:?}"
    );
    let on_disk = data_files(dir.path());
    let listed: Vec<_> = wal.file_states().into_iter().map(|s| s.path).collect();
    // Regression: the file once left the table and the account before its unlink, so a
    // failed unlink left it on disk, unlisted and uncounted, and appends could pass the cap.
    assert_eq!(
        on_disk, listed,
        "a data file still on disk is no longer known to the Wal"
    );
    check_within_cap(&wal);
    wal.close().ok();
}

/// One unlink fails once: the deletion must be retried, both for that file and for the other
/// files queued with it, so that in the end exactly the live files remain on disk.
#[test]
fn a_failed_deletion_is_retried() {
    let dir = tempdir();
    let storage = Arc::new(FaultStorage::new());
    let wal =
        Wal::open_with_storage(dir.path(), capped(), Arc::clone(&storage) as _).expect("open");
    let writers = setup(&wal);
    let next = fill_to_cap(&writers);
    storage.arm_for(points::REMOVE, Some(".tdl"), Fault::Once(libc::EIO));
    consume_all(&wal, &next);
    let deadline = Instant::now() + DEADLINE;
    // A `Once` fault is disarmed when it fires; the failure shows at the next flush.
    let mut failed = false;
    loop {
        if let Err(e) = wal.flush() {
            assert!(
                matches!(
                    e,
                    Error::Io {
                        op: "remove data file",
                        ..
                    }
                ),
                "{e:?}"
            );
            failed = true;
        }
        let states = wal.file_states();
        let listed: Vec<_> = states.iter().map(|s| s.path.clone()).collect();
        if failed && data_files(dir.path()) == listed && states.iter().all(|s| !s.deletable) {
            break;
        }
        // Regression: deletion once stopped at the first failed unlink, leaving that file
        // forgotten and the rest of its batch deletable but never deleted until a reopen.
        assert!(
            Instant::now() < deadline,
            "deletion was not retried (failure seen: {failed}): on disk {:?}, {states:#?}",
            data_files(dir.path())
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    check_within_cap(&wal);
    wal.close().expect("close");
}

#[test]
fn a_cap_below_one_file_header_and_block_is_rejected() {
    let dir = tempdir();
    let e = Wal::open_with(dir.path(), small().disk_bytes_max(4096 + 64 * 1024 - 1))
        .expect_err("a cap that holds nothing");
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                name: "disk_bytes_max",
                ..
            }
        ),
        "{e:?}"
    );
}

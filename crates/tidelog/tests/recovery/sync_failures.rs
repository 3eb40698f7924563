//! Goal: a failed sync reaches every caller whose records it covered, with the original
//! errno, and poisons the Wal: every later append, flush, writer and handle fails with
//! `Error::Poisoned` carrying that errno until the directory is reopened, and no append is
//! acknowledged once anyone has seen the failure. Failures that acknowledged nothing (a full
//! disk at block reservation, a failed data file creation) are clean errors that do not
//! poison. After every failure a reopen works and holds every acknowledged record intact.
//!
//! Method: `FaultStorage` fails `msync` under one `Always` appender, under many concurrent
//! ones (sync and async), and under `append_async` handles waiting for a flush; `fallocate`
//! with ENOSPC in `Always` mode; and each step of data file creation (`set_len`, the header
//! write cut short, `fdatasync`, the directory `fsync`). Each case checks the errors, what
//! later calls get, then reopens with plain storage and reads everything back.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{data_files, payload, read_all, small, tempdir};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{Config, Durability, Error, Wal};

const TOPIC: &str = "syncfail";
const VALUE: usize = 300;
/// A sync interval no test outlives: only the syncs a test asks for run.
const QUIET_MS: u64 = 60_000;

fn value(i: u64) -> Vec<u8> {
    payload(i * 5 + 11, VALUE)
}

fn always() -> Config {
    small()
        .durability(Durability::Always)
        .sync_interval_ms(QUIET_MS)
}

fn open_faulty(dir: &Path, cfg: Config) -> (Wal, FaultStorage) {
    let fs = FaultStorage::new();
    let wal = Wal::open_with_storage(dir, cfg, Arc::new(fs.clone())).expect("open the Wal");
    (wal, fs)
}

fn assert_msync_eio(err: &Error, ctx: &str) {
    assert!(
        matches!(err, Error::Io { op: "msync", .. }),
        "{ctx}: expected the msync error, got {err}"
    );
    assert_eq!(err.errno(), Some(libc::EIO), "{ctx}: {err}");
}

fn assert_poisoned(err: &Error, ctx: &str) {
    assert!(
        matches!(
            err,
            Error::Poisoned {
                op: "msync",
                errno: Some(libc::EIO),
                ..
            }
        ),
        "{ctx}: expected Poisoned by msync/EIO, got {err}"
    );
    assert_eq!(err.errno(), Some(libc::EIO), "{ctx}");
}

fn assert_io_eio(err: &Error, ctx: &str) {
    assert!(
        matches!(err, Error::Io { .. }),
        "{ctx}: expected Io, got {err}"
    );
    assert_eq!(err.errno(), Some(libc::EIO), "{ctx}: {err}");
}

/// Checks that `wal` holds at least `acked` records, dense from 0, each `value(offset)`, and
/// at most `acked + extra` (records written but never acknowledged may survive).
fn check_prefix(wal: &Wal, acked: u64, extra: u64, ctx: &str) -> u64 {
    let got = read_all(wal, TOPIC);
    let n = got.len() as u64;
    assert!(
        (acked..=acked + extra).contains(&n),
        "{ctx}: {n} records, expected {acked}..={}",
        acked + extra
    );
    for (i, (offset, _, v)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "{ctx}: offsets must be dense");
        assert!(*v == value(*offset), "{ctx}: record {offset} differs");
    }
    n
}

/// Reopens `dir` with plain storage, checks the records and that appends continue.
fn reopen_and_continue(dir: &Path, acked: u64, extra: u64, ctx: &str) {
    let wal = Wal::open_with(dir, always()).expect("reopen");
    let n = check_prefix(&wal, acked, extra, ctx);
    let w = wal.writer(TOPIC).expect("writer after reopen");
    for i in n..n + 5 {
        assert_eq!(
            w.append(&value(i)).expect("append after reopen"),
            i,
            "{ctx}"
        );
    }
    wal.close().expect("close after reopen");
    let wal = Wal::open_with(dir, small()).expect("second reopen");
    check_prefix(&wal, n + 5, 0, ctx);
}

#[test]
fn failed_msync_under_one_always_appender_poisons() {
    let dir = tempdir();
    let (wal, fs) = open_faulty(dir.path(), always());
    let w = wal.writer(TOPIC).expect("writer");
    for i in 0..10 {
        assert_eq!(w.append(&value(i)).expect("append"), i);
    }
    fs.arm(points::SYNC_MAP, Fault::Once(libc::EIO));
    assert_msync_eio(
        &w.append(&value(10)).expect_err("its msync fails"),
        "append whose sync failed",
    );
    // The fault is gone, yet everything that writes or syncs is refused from now on.
    assert_poisoned(&w.append(&value(11)).expect_err("poisoned"), "append");
    assert_poisoned(
        &wal.append(TOPIC, &value(11)).expect_err("poisoned"),
        "Wal::append",
    );
    assert_poisoned(
        &w.append_async(&value(11)).expect_err("poisoned"),
        "append_async",
    );
    assert_poisoned(
        &wal.append_async(TOPIC, &value(11)).expect_err("poisoned"),
        "Wal::append_async",
    );
    assert_poisoned(
        &w.append_batch(&[value(11)]).expect_err("poisoned"),
        "append_batch",
    );
    assert_poisoned(&wal.flush().expect_err("poisoned"), "flush");
    assert_poisoned(&w.flush().expect_err("poisoned"), "Writer::flush");
    assert_poisoned(&wal.writer(TOPIC).expect_err("poisoned"), "writer");
    assert_poisoned(&wal.writer("other").expect_err("poisoned"), "new topic");
    // Reading is unaffected: the acknowledged records and perhaps the failed one, which
    // was published before its sync.
    check_prefix(&wal, 10, 1, "poisoned Wal");
    assert_poisoned(&wal.close().expect_err("close reports the poison"), "close");
    reopen_and_continue(dir.path(), 10, 1, "reopen after one failed sync");
}

/// What one appender thread saw.
#[derive(Debug, Default)]
struct Seen {
    /// `(offset, value seed)` of every acknowledged append.
    acked: Vec<(u64, u64)>,
    errors: Vec<Error>,
}

#[test]
fn failed_msync_under_concurrent_always_appenders() {
    const THREADS: u64 = 8;
    /// Acknowledged appends before the fault is armed.
    const ARM_AFTER: u64 = 200;
    /// Safety bound: the fault must hit long before this.
    const MAX_PER_THREAD: u64 = 20_000;
    let dir = tempdir();
    let (wal, fs) = open_faulty(dir.path(), always());
    let w = wal.writer(TOPIC).expect("writer");
    let acked = AtomicU64::new(0);
    // Set by any thread that got an error, after the call returned.
    let failure_seen = AtomicBool::new(false);
    let seen: Vec<Seen> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (w, acked, failure_seen) = (w.clone(), &acked, &failure_seen);
                s.spawn(move || {
                    let mut seen = Seen::default();
                    for i in 0..MAX_PER_THREAD {
                        if seen.errors.len() >= 3 {
                            break;
                        }
                        let seed = t * MAX_PER_THREAD + i;
                        // The offset is known only on return: the value names the call.
                        let v = payload(seed, VALUE);
                        let started_after_failure = failure_seen.load(Ordering::SeqCst);
                        // Odd threads use handles: the same rules apply to `wait`.
                        let result = if t % 2 == 0 {
                            w.append(&v)
                        } else {
                            w.append_async(&v)
                                .and_then(|h| h.wait().map(|()| h.offset()))
                        };
                        match result {
                            Ok(offset) => {
                                assert!(
                                    !started_after_failure,
                                    "thread {t}: append {i} acknowledged (offset {offset}) \
                                     though it started after a sync failure was seen"
                                );
                                seen.acked.push((offset, seed));
                                acked.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => {
                                failure_seen.store(true, Ordering::SeqCst);
                                seen.errors.push(e);
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while acked.load(Ordering::SeqCst) < ARM_AFTER {
            assert!(Instant::now() < deadline, "appenders made no progress");
            std::thread::sleep(Duration::from_millis(1));
        }
        fs.arm(points::SYNC_MAP, Fault::Once(libc::EIO));
        workers
            .into_iter()
            .map(|h| h.join().expect("appender thread"))
            .collect()
    });
    let mut covered = 0;
    for (t, s) in seen.iter().enumerate() {
        assert_eq!(
            s.errors.len(),
            3,
            "thread {t} never saw the failure (acked {})",
            s.acked.len()
        );
        // Its first error: the failed sync itself (its record was in that group) or the
        // poison; every later call started after the failure, so it is the poison.
        let first = &s.errors[0];
        if matches!(first, Error::Io { .. }) {
            assert_msync_eio(first, &format!("thread {t}, first error"));
            covered += 1;
        } else {
            assert_poisoned(first, &format!("thread {t}, first error"));
        }
        for e in &s.errors[1..] {
            assert_poisoned(e, &format!("thread {t}, later error"));
        }
    }
    eprintln!("{covered} of {THREADS} threads were in the failed group");
    // Every acknowledged record is there, intact, at the offset it was acknowledged with.
    let check = |wal: &Wal, ctx: &str| {
        let got = read_all(wal, TOPIC);
        for (i, (offset, _, _)) in got.iter().enumerate() {
            assert_eq!(*offset, i as u64, "{ctx}: offsets must be dense");
        }
        for s in &seen {
            for &(offset, seed) in &s.acked {
                let (_, _, v) = got
                    .get(offset as usize)
                    .unwrap_or_else(|| panic!("{ctx}: acknowledged record {offset} lost"));
                assert!(*v == payload(seed, VALUE), "{ctx}: record {offset} differs");
            }
        }
    };
    check(&wal, "poisoned Wal");
    assert_poisoned(&wal.close().expect_err("close reports the poison"), "close");
    let wal = Wal::open_with(dir.path(), always()).expect("reopen");
    check(&wal, "after reopen");
    let next = wal.topic_info(TOPIC).expect("topic").next_offset;
    assert_eq!(
        wal.append(TOPIC, &value(0)).expect("append after reopen"),
        next
    );
}

#[test]
fn pending_handles_get_the_failed_flush_error() {
    let dir = tempdir();
    let cfg = small()
        .durability(Durability::Interval)
        .sync_interval_ms(QUIET_MS);
    let (wal, fs) = open_faulty(dir.path(), cfg);
    let w = wal.writer(TOPIC).expect("writer");
    let done = w.append_async(&value(0)).expect("append_async");
    wal.flush().expect("flush");
    assert!(done.is_durable());
    let pending: Vec<_> = (1..6)
        .map(|i| w.append_async(&value(i)).expect("append_async"))
        .collect();
    assert!(pending.iter().all(|h| !h.is_durable()));
    // A waiter blocked in `wait` when the sync fails gets the error too.
    let blocked = pending[4].clone();
    let waiter = std::thread::spawn(move || blocked.wait());
    fs.arm(points::SYNC_MAP, Fault::Once(libc::EIO));
    assert_msync_eio(&wal.flush().expect_err("msync fails"), "flush");
    assert_msync_eio(
        &waiter
            .join()
            .expect("waiter thread")
            .expect_err("the failed flush covered the waiting handle"),
        "blocked waiter",
    );
    for h in &pending {
        assert!(!h.is_durable(), "a failed sync made {h:?} durable");
        assert_msync_eio(&h.wait().expect_err("covered by the failure"), "wait");
        assert_msync_eio(
            &h.wait_timeout(Duration::from_secs(1))
                .expect_err("covered by the failure"),
            "wait_timeout",
        );
    }
    // Made durable before the failure: still fine.
    done.wait().expect("durable before the failure");
    assert_poisoned(
        &w.append_async(&value(6)).expect_err("poisoned"),
        "append_async",
    );
    drop(w);
    drop(wal);
    reopen_and_continue(dir.path(), 6, 0, "reopen after failed flush");
}

#[test]
fn enospc_at_block_reservation_is_disk_full_not_poison() {
    let dir = tempdir();
    let (wal, fs) = open_faulty(dir.path(), always());
    let w = wal.writer(TOPIC).expect("writer");
    let fill_until_full = |from: u64| -> u64 {
        let mut next = from;
        loop {
            match w.append(&value(next)) {
                Ok(offset) => assert_eq!(offset, next),
                Err(e) => {
                    assert!(
                        matches!(e, Error::DiskFull { .. }),
                        "expected DiskFull, got {e}"
                    );
                    assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
                    return next;
                }
            }
            next += 1;
            assert!(next < from + 10_000, "the block never filled up");
        }
    };
    for i in 0..5 {
        assert_eq!(w.append(&value(i)).expect("append"), i);
    }
    fs.arm(points::ALLOCATE, Fault::Always(libc::ENOSPC));
    let mut next = fill_until_full(5);
    // Nothing was acknowledged by the failing appends: no poison, only more DiskFull.
    for _ in 0..3 {
        let e = w.append(&value(next)).expect_err("still full");
        assert!(matches!(e, Error::DiskFull { .. }), "{e}");
    }
    let e = w.append_async(&value(next)).expect_err("still full");
    assert!(matches!(e, Error::DiskFull { .. }), "append_async: {e}");
    wal.flush().expect("a full disk does not poison flush");
    wal.writer(TOPIC).expect("nor new writers");
    check_prefix(&wal, next, 0, "while full");
    // Space back: the same handle takes appends again, each durable on return.
    fs.disarm_all();
    for _ in 0..50 {
        assert_eq!(w.append(&value(next)).expect("append after disarm"), next);
        next += 1;
    }
    // Full again, then the process ends; after space is freed a reopen works.
    fs.arm(points::ALLOCATE, Fault::Always(libc::ENOSPC));
    next = fill_until_full(next);
    drop(w);
    wal.close().expect("close while full");
    reopen_and_continue(dir.path(), next, 0, "reopen after full disk");
}

/// Fails one step of creating the first data file: a clean error, no file left behind, no
/// poison, and the next append (the fault is gone) creates the file.
fn failed_file_creation_step(point: &'static str, fault: Fault) {
    let ctx = format!("{point} {fault:?}");
    let dir = tempdir();
    let (wal, fs) = open_faulty(dir.path(), always());
    fs.arm(point, fault);
    let e = wal
        .append(TOPIC, &value(0))
        .expect_err("the first append creates a data file");
    assert_io_eio(&e, &ctx);
    assert!(
        matches!(
            e,
            Error::Io {
                op: "create data file",
                ..
            }
        ),
        "{ctx}: {e}"
    );
    assert!(
        data_files(dir.path()).is_empty(),
        "{ctx}: a half-made data file was left behind"
    );
    wal.flush().expect("no poison: nothing was acknowledged");
    let w = wal.writer(TOPIC).expect("writer");
    for i in 0..20 {
        assert_eq!(
            w.append(&value(i)).expect("append after the fault"),
            i,
            "{ctx}"
        );
    }
    drop(w);
    wal.close().expect("close");
    reopen_and_continue(dir.path(), 20, 0, &ctx);
}

#[test]
fn failed_set_len_of_a_new_file() {
    failed_file_creation_step(points::SET_LEN, Fault::Once(libc::EIO));
}

#[test]
fn short_header_write_of_a_new_file() {
    failed_file_creation_step(points::WRITE, Fault::ShortWrite(16));
}

#[test]
fn failed_fdatasync_of_a_new_file() {
    failed_file_creation_step(points::SYNC_FILE, Fault::Once(libc::EIO));
}

#[test]
fn failed_directory_fsync_after_a_new_file() {
    failed_file_creation_step(points::SYNC_DIR, Fault::Once(libc::EIO));
}

#[test]
fn failed_directory_fsync_for_the_next_file() {
    let dir = tempdir();
    let (wal, fs) = open_faulty(dir.path(), always());
    let w = wal.writer(TOPIC).expect("writer");
    assert_eq!(w.append(&value(0)).expect("append"), 0);
    // Armed before the first file is half used: the background spare fails too, and the
    // append that needs the next file makes it itself and reports the failure.
    fs.arm(points::SYNC_DIR, Fault::Always(libc::EIO));
    let mut next = 1;
    let e = loop {
        match w.append(&value(next)) {
            Ok(offset) => assert_eq!(offset, next),
            Err(e) => break e,
        }
        next += 1;
        assert!(next < 10_000, "the first file never filled up");
    };
    assert_io_eio(&e, "append needing a new file");
    assert_eq!(data_files(dir.path()).len(), 1, "a half-made file was left");
    wal.flush().expect("no poison");
    fs.disarm_all();
    for _ in 0..20 {
        assert_eq!(w.append(&value(next)).expect("append after disarm"), next);
        next += 1;
    }
    assert!(data_files(dir.path()).len() >= 2);
    drop(w);
    wal.close().expect("close");
    reopen_and_continue(dir.path(), next, 0, "reopen after failed directory fsync");
}

#[test]
fn failed_fdatasync_of_a_cursor_commit_reaches_the_caller() {
    let dir = tempdir();
    let (wal, fs) = open_faulty(dir.path(), small());
    for i in 0..10 {
        assert_eq!(wal.append(TOPIC, &value(i)).expect("append"), i);
    }
    wal.flush().expect("flush");
    let mut reader = wal.reader(TOPIC, "group").expect("reader");
    for _ in 0..5 {
        reader.next().expect("next").expect("a record");
    }
    reader.commit().expect("commit at 5");
    while reader.next().expect("next").is_some() {}
    fs.arm(points::SYNC_FILE, Fault::Once(libc::EIO));
    let e = reader.commit().expect_err("the cursor's fdatasync fails");
    assert_io_eio(&e, "commit");
    // Not acknowledged, so not reported as committed.
    assert_eq!(reader.committed(), Some(5));
    drop(reader);
    drop(wal);
    // The acknowledged commit holds; the failed one may have reached the disk anyway.
    let wal = Wal::open_with(dir.path(), small()).expect("reopen");
    let reader = wal.reader(TOPIC, "group").expect("reader");
    assert!(
        [5, 10].contains(&reader.position()),
        "group resumes at {}",
        reader.position()
    );
    check_prefix(&wal, 10, 0, "after reopen");
}

/// Regression: poisoning outside a sync pass (a failed msync while `delete_topic` marks
/// extents) once set the flag without waking waiters, so a handle blocked in `wait()` slept
/// until `close` instead of failing with `Poisoned` at once.
#[test]
fn poison_from_delete_topic_wakes_waiting_handles() {
    let dir = tempdir();
    let cfg = small()
        .durability(Durability::Interval)
        .sync_interval_ms(QUIET_MS);
    let (wal, fs) = open_faulty(dir.path(), cfg);
    wal.append("doomed", &value(0)).expect("append");
    wal.flush().expect("flush");
    let h = wal.append_async(TOPIC, &value(0)).expect("append_async");
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let h = h.clone();
        std::thread::spawn(move || {
            let _ = tx.send(h.wait());
        })
    };
    // Let the waiter block in `wait` (were it late, it would see the poison at once).
    std::thread::sleep(Duration::from_millis(50));
    fs.arm(points::SYNC_MAP, Fault::Once(libc::EIO));
    // Marking the topic's extents deleted msyncs their progress slots: the failure poisons.
    assert_msync_eio(
        &wal.delete_topic("doomed").expect_err("its msync fails"),
        "delete_topic",
    );
    assert_poisoned(&wal.flush().expect_err("poisoned"), "flush");
    // The waiter's records can never be synced now: it must fail, not sleep until close.
    let got = rx.recv_timeout(Duration::from_secs(10));
    let _ = wal.close();
    waiter.join().expect("waiter thread");
    let result = got.expect("a handle waiting when the Wal was poisoned was never woken");
    assert_poisoned(&result.expect_err("poisoned"), "waiting handle");
}

/// `Always` appends copy with `pwrite`: a failed one is returned to its appender and poisons
/// the Wal like a failed sync, yet its offsets are still published (the frame goes in through
/// the mapping instead), so later appenders never wait on a hole.
#[test]
fn failed_pwrite_of_an_always_append_poisons() {
    let dir = tempdir();
    let (wal, fs) = open_faulty(dir.path(), always());
    let w = wal.writer(TOPIC).expect("writer");
    for i in 0..5 {
        assert_eq!(w.append(&value(i)).expect("append"), i);
    }
    fs.arm_for(points::WRITE, Some(".tdl"), Fault::Once(libc::EIO));
    let err = w.append(&value(5)).expect_err("the pwrite fails");
    assert!(
        matches!(err, Error::Io { op: "pwrite", .. }),
        "expected the pwrite error, got {err}"
    );
    assert_eq!(err.errno(), Some(libc::EIO));
    let later = w.append(&value(6)).expect_err("poisoned");
    assert!(
        matches!(
            later,
            Error::Poisoned {
                op: "pwrite",
                errno: Some(libc::EIO),
                ..
            }
        ),
        "expected Poisoned by pwrite, got {later}"
    );
    // The failed record's offset was published with its bytes, so reads see no hole.
    check_prefix(&wal, 5, 1, "after the failed pwrite");
    drop(wal);
    reopen_and_continue(dir.path(), 5, 1, "reopen after the failed pwrite");
}

//! Goal: no thread waits while holding a spin lock, and every wait on the write path has a
//! bound. A roll (a new extent: the allocator may wait for disk space, create a file,
//! `fallocate`) and a ring-fronted append's journal write (the ring may wait for a free block
//! buffer) run with the topic's tail spin lock released; the topic's other appenders wait
//! for them on a lock that parks.
//!
//! Method: a `Storage` that holds chosen calls at a gate until the test opens it.
//! (1) The `fallocate` of a topic's roll is held for a second: a second appender of that topic,
//! queued behind the roll, sleeps (its thread uses next to no CPU time; a spin lock would
//! burn the second) and goes on once the roll does, while appends to other topics (their own
//! rolls included) and `topic_info` proceed meanwhile. (2) The ring's block writes are held:
//! once every block buffer is out, the next append fails with `RingFull` after the ring's
//! buffer wait (5 s) instead of hanging, nothing of it written; once writes complete again,
//! the appends before it are durable and appends work. (3) With a disk cap, a roll that waits
//! for space gives up after `space_wait`, and an appender queued behind it waits no longer
//! than that roll and its own.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::GateStorage;
use tidelog::{Config, Durability, Error, RingConfig, RingWal, Wal};

/// How long the gate holds a call in the tests that time a queued appender.
const HOLD: Duration = Duration::from_secs(1);
/// The ring's bound on a wait for a free block buffer (`ring::writer::BUFFER_WAIT`).
const RING_BUFFER_WAIT: Duration = Duration::from_secs(5);

/// 8 blocks of 64 KiB per file, no background flush.
fn small() -> Config {
    Config::default()
        .file_size_bytes(tidelog::format::FILE_HEADER_BYTES + 8 * 64 * 1024)
        .block_size_bytes(64 * 1024)
        .durability(Durability::Never)
}

/// CPU time the calling thread has used so far (`/proc/thread-self/stat`, in clock ticks of
/// 10 ms).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // Fields after the command name (in parentheses): state is field 3, utime and stime 14
    // and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Times the calling thread was switched out while it could still run
/// (`/proc/thread-self/status`): a thread that spins and yields on a busy machine is, many
/// times a second; one asleep on a lock is not.
fn thread_preemptions() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
        .unwrap();
    line.trim().parse().unwrap()
}

#[test]
fn an_appender_queued_behind_a_waiting_roll_sleeps_and_other_topics_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(GateStorage::default());
    let wal = Arc::new(Wal::open_with_storage(dir.path(), small(), storage.clone()).unwrap());
    wal.append("other", b"warm").unwrap();

    // The first append to "t" rolls to its first extent; its fallocate is held.
    storage.hold_next_allocates(1);
    let roller = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || wal.append("t", b"first"))
    };
    storage.wait_held(1);
    let queued = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || {
            let (cpu, preempted, started) = (thread_cpu(), thread_preemptions(), Instant::now());
            let offset = wal.append("t", b"second");
            let waited = started.elapsed();
            (
                offset,
                waited,
                thread_cpu() - cpu,
                thread_preemptions() - preempted,
            )
        })
    };

    // Meanwhile other topics append, one of them rolling to its first extent, and the waiting
    // topic answers questions.
    let started = Instant::now();
    assert_eq!(wal.append("other", b"meanwhile").unwrap(), 1);
    assert_eq!(wal.append("third", b"rolls too").unwrap(), 0);
    let info = wal.topic_info("t").unwrap();
    assert_eq!((info.first_offset, info.next_offset), (0, 0));
    assert!(
        started.elapsed() < HOLD / 2,
        "other topics waited {:?} for a roll of \"t\"",
        started.elapsed()
    );

    std::thread::sleep(HOLD.saturating_sub(started.elapsed()));
    assert!(!roller.is_finished() && !queued.is_finished());
    storage.open();
    assert_eq!(roller.join().unwrap().unwrap(), 0);
    let (offset, waited, cpu, preempted) = queued.join().unwrap();
    assert_eq!(offset.unwrap(), 1);
    assert!(
        waited >= HOLD / 2,
        "the queued append returned after {waited:?}"
    );
    // A waiter that spins and yields uses about as much CPU time as it waits on an idle
    // machine, and on a busy one is switched out again and again; a parked one neither.
    assert!(
        cpu < HOLD / 10 && preempted < 20,
        "the queued append used {cpu:?} of CPU time and was preempted {preempted} times in \
         {waited:?} of waiting"
    );
    let wal = Arc::into_inner(wal).unwrap();
    wal.close().unwrap();
}

#[test]
fn a_ring_append_whose_block_buffers_never_come_back_fails_with_ring_full() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring");
    let storage = Arc::new(GateStorage::default());
    // One write in flight, two buffers; each record fills a block.
    let config = RingConfig::default()
        .capacity_bytes(16 << 20)
        .inflight_blocks(1)
        .block_bytes(64 * 1024);
    let ring = RingWal::open_with_storage(&path, config, storage.clone()).unwrap();
    storage.hold_writes_to(&path);
    let body = vec![7u8; 64 * 1024];
    let mut appended = Vec::new();
    let started = Instant::now();
    let err = loop {
        match ring.append(&body) {
            Ok(a) => appended.push(a),
            Err(e) => break e,
        }
        assert!(
            appended.len() <= 4,
            "appends never ran out of block buffers"
        );
    };
    let waited = started.elapsed();
    assert!(matches!(err, Error::RingFull { .. }), "{err}");
    assert_eq!(appended.len(), 2, "one block written, one queued");
    assert!(
        waited >= RING_BUFFER_WAIT - Duration::from_millis(500),
        "gave up after {waited:?}"
    );
    assert!(waited < RING_BUFFER_WAIT * 4, "gave up after {waited:?}");

    storage.open();
    for a in &appended {
        a.wait().unwrap();
    }
    ring.append(&body).unwrap().wait().unwrap();
    ring.close().unwrap();
}

#[test]
fn an_appender_queued_behind_a_roll_waiting_for_space_waits_no_longer_than_the_rolls() {
    const SPACE_WAIT: Duration = Duration::from_millis(300);
    let dir = tempfile::tempdir().unwrap();
    // Room for one data file: its header and 8 blocks.
    let config = small()
        .disk_bytes_max(tidelog::format::FILE_HEADER_BYTES + 8 * 64 * 1024)
        .space_wait_ms(SPACE_WAIT.as_millis() as u64);
    let wal = Arc::new(Wal::open_with(dir.path(), config).unwrap());
    let value = vec![1u8; 1000];
    let mut appended = 0u64;
    let is_cap = |e: &Error| {
        matches!(
            e,
            Error::LimitExceeded {
                limit: "disk_bytes_max",
                ..
            }
        )
    };
    loop {
        match wal.append("t", &value) {
            Ok(offset) => assert_eq!(offset, appended),
            Err(e) if is_cap(&e) => break,
            Err(e) => panic!("{e}"),
        }
        appended += 1;
        assert!(appended < 10_000, "the cap never stopped the appends");
    }
    // Two appenders that both need a roll: the second waits for the first's roll, then for
    // its own.
    let appenders: Vec<_> = (0..2)
        .map(|_| {
            let wal = Arc::clone(&wal);
            let value = value.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let result = wal.append("t", &value);
                (result, started.elapsed())
            })
        })
        .collect();
    for a in appenders {
        let (result, waited) = a.join().unwrap();
        let err = result.unwrap_err();
        assert!(is_cap(&err), "{err}");
        assert!(
            waited >= SPACE_WAIT - Duration::from_millis(50),
            "gave up after {waited:?}"
        );
        assert!(
            waited < SPACE_WAIT * 2 + Duration::from_secs(5),
            "gave up after {waited:?}"
        );
    }
    // Nothing was reserved by the failed appends.
    assert_eq!(wal.topic_info("t").unwrap().next_offset, appended);
    let wal = Arc::into_inner(wal).unwrap();
    wal.close().unwrap();
}

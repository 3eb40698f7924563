//! The topic log on the ring: appends are durable through the ring, checkpoints move them
//! into the data files and trim the ring, and opening replays what the data files lack.
//! (The generic API tests run on both backends in the Python suite; the kill -9 campaign
//! in `crash_kill9.rs` has a ring variant.)

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;

use crate::common::{BLOCK, child_command, child_env, data_files, geometry, read_values, tempdir};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{
    Append, Config, Durability, Error, RING_CAPACITY_DEFAULT, RING_FILE, RING_MARKER_FILE,
    ReaderOptions, RingBackend, RingConfig, StartPosition, Wal,
};

const TOPICS: [&str; 3] = ["orders", "events", "audit"];
const RING_BYTES: u64 = 8 << 20;

fn ring_config() -> Config {
    geometry(8, BLOCK)
        .durability(Durability::Always)
        .ring(RingBackend::default().ring(RingConfig::default().capacity_bytes(RING_BYTES)))
}

/// The deterministic value of `offset` of `topic`.
fn value(topic: usize, offset: u64) -> Vec<u8> {
    let len = 1 + (offset as usize * 37 + topic * 11) % 700;
    let seed = format!("{topic}:{offset}|");
    seed.bytes().cycle().take(len).collect()
}

/// Checks that every topic holds exactly `counts[t]` records, each its deterministic value.
fn check_topics(wal: &Wal, counts: &[u64]) {
    for (t, &n) in counts.iter().enumerate() {
        let got = read_values(wal, TOPICS[t]);
        assert_eq!(got.len() as u64, n, "{}: record count", TOPICS[t]);
        for (offset, v) in got {
            assert!(
                v == value(t, offset),
                "{} offset {offset} differs",
                TOPICS[t]
            );
        }
    }
}

/// Child side (a no-op unless re-executed with `TIDELOG_CHILD_DIR`): appends `mode` records
/// to each topic (every third append a batch of three, every fifth async), prints
/// `@@done`, then kills itself: no close, no checkpoint (the interval is an hour).
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let n: u64 = mode.parse().expect("child: record count");
    let wal = Wal::open_with(&dir, ring_config().sync_interval_ms(3_600_000)).expect("open");
    for (t, topic) in TOPICS.iter().enumerate() {
        let writer = wal.writer(topic).expect("writer");
        let mut offset = 0;
        while offset < n {
            if offset % 3 == 0 && offset + 3 <= n {
                let vals: Vec<Vec<u8>> = (offset..offset + 3).map(|o| value(t, o)).collect();
                assert_eq!(
                    writer.append_batch(&vals).expect("batch"),
                    offset..offset + 3
                );
                offset += 3;
            } else if offset % 5 == 0 {
                let h = writer.append_async(&value(t, offset)).expect("async");
                h.wait().expect("durable");
                assert_eq!(h.offset(), offset);
                offset += 1;
            } else {
                assert_eq!(writer.append(&value(t, offset)).expect("append"), offset);
                offset += 1;
            }
        }
    }
    let stats = wal.ring_stats().expect("ring stats");
    assert_eq!(
        stats.trim_offset, 0,
        "no checkpoint may have run: {stats:?}"
    );
    println!("@@done");
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status();
    std::thread::sleep(std::time::Duration::from_secs(60));
    unreachable!("SIGKILL did not end the child");
}

#[test]
fn acknowledged_appends_survive_losing_every_data_file() {
    let dir = tempdir();
    let n = 200;
    let out = child_command(module_path!(), dir.path(), &n.to_string())
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "child: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("@@done"), "child did not finish: {stdout}");
    assert!(dir.path().join(RING_MARKER_FILE).exists());

    // The data files lose everything the crash did not make durable: here, everything.
    for f in data_files(dir.path()) {
        std::fs::remove_file(f).expect("remove data file");
    }
    let wal = Wal::open_with(dir.path(), ring_config()).expect("reopen");
    let report = wal.recovery_report();
    assert_eq!(report.ring_records_replayed, 3 * n, "{report:?}");
    assert_eq!(report.ring_records_held, 0);
    check_topics(&wal, &[n; 3]);
    // The replay is durable and the ring empty: a second crash image loses nothing.
    let stats = wal.ring_stats().expect("stats");
    assert_eq!(stats.trim_offset, stats.next_offset);
    for (t, topic) in TOPICS.iter().enumerate() {
        assert_eq!(wal.append(topic, &value(t, n)).expect("append"), n);
    }
    wal.close().expect("close");
    assert!(!dir.path().join(RING_MARKER_FILE).exists());
    // Closed cleanly: the mmap backend opens it and sees everything.
    let wal = Wal::open_with(dir.path(), geometry(8, BLOCK)).expect("open without ring");
    check_topics(&wal, &[n + 1; 3]);
}

#[test]
fn a_crash_leaves_data_files_and_ring_agreeing() {
    // The data files kept the pages the child wrote (a kill, not a power loss): the replay
    // finds every record already there and appends nothing twice.
    let dir = tempdir();
    let out = child_command(module_path!(), dir.path(), "50")
        .output()
        .expect("run child");
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    let wal = Wal::open_with(dir.path(), ring_config()).expect("reopen");
    let report = wal.recovery_report();
    assert_eq!(report.ring_records_held + report.ring_records_replayed, 150);
    check_topics(&wal, &[50; 3]);
}

#[test]
fn a_fronted_directory_needs_its_ring() {
    let dir = tempdir();
    let out = child_command(module_path!(), dir.path(), "10")
        .output()
        .expect("run child");
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    match Wal::open_with(dir.path(), geometry(8, BLOCK)) {
        Err(Error::InvalidArgument {
            name: "backend", ..
        }) => {}
        r => panic!("expected InvalidArgument(backend), got {r:?}"),
    }
    let elsewhere = tempdir();
    let other = RingBackend::device(elsewhere.path().join("other.wal"))
        .ring(RingConfig::default().capacity_bytes(RING_BYTES));
    match Wal::open_with(dir.path(), geometry(8, BLOCK).ring(other)) {
        Err(Error::InvalidArgument { name: "device", .. }) => {}
        r => panic!("expected InvalidArgument(device), got {r:?}"),
    }
    assert!(!elsewhere.path().join("other.wal").exists());
    // Formatting would drop what the ring holds.
    let formatting = geometry(8, BLOCK).ring(
        RingBackend::default().ring(
            RingConfig::default()
                .capacity_bytes(RING_BYTES)
                .format(true),
        ),
    );
    match Wal::open_with(dir.path(), formatting) {
        Err(Error::InvalidArgument { name: "format", .. }) => {}
        r => panic!("expected InvalidArgument(format), got {r:?}"),
    }
    // Its ring is gone: no new, empty one takes its place.
    let ring = dir.path().join(RING_FILE);
    let kept = dir.path().join("ring.kept");
    std::fs::rename(&ring, &kept).expect("move the ring away");
    match Wal::open_with(dir.path(), ring_config()) {
        Err(Error::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        r => panic!("expected a NotFound I/O error, got {r:?}"),
    }
    assert!(!ring.exists());
    std::fs::rename(&kept, &ring).expect("bring the ring back");
    // Read-only handles read the data files alone.
    let ro = Wal::open_read_only_with(dir.path(), geometry(8, BLOCK)).expect("read-only");
    assert!(ro.ring_stats().is_none());
    drop(ro);
    let wal = Wal::open_with(dir.path(), ring_config()).expect("with its ring");
    check_topics(&wal, &[10; 3]);
}

#[test]
fn an_explicit_device_outside_the_directory() {
    let dir = tempdir();
    let devices = tempdir();
    let device = devices.path().join("ring.dev");
    let config = geometry(8, BLOCK)
        .ring(RingBackend::device(&device).ring(RingConfig::default().capacity_bytes(RING_BYTES)));
    let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
    assert!(!dir.path().join(RING_FILE).exists());
    assert_eq!(
        std::fs::metadata(&device).expect("device").len(),
        RING_BYTES
    );
    let stats = wal.ring_stats().expect("stats");
    assert_eq!(
        (stats.device.as_path(), stats.capacity_bytes),
        (device.as_path(), RING_BYTES)
    );
    wal.append("t", b"x").expect("append");
    wal.close().expect("close");
    let wal = Wal::open_with(dir.path(), config).expect("reopen");
    assert_eq!(read_values(&wal, "t"), vec![(0, b"x".to_vec())]);
}

#[test]
fn a_small_ring_fills_and_appenders_wait_for_checkpoints() {
    let dir = tempdir();
    // 160 KiB of ring for 8 MiB of records: many checkpoints, none by time.
    let config = geometry(8, BLOCK).sync_interval_ms(3_600_000).ring(
        RingBackend::default().ring(
            RingConfig::default()
                .capacity_bytes(160 * 1024)
                .block_bytes(16 * 1024),
        ),
    );
    let config = config.max_record_bytes(8 * 1024).max_batch_bytes(8 * 1024);
    let wal = Arc::new(Wal::open_with(dir.path(), config).expect("open"));
    let threads: Vec<_> = (0..TOPICS.len())
        .map(|t| {
            let wal = Arc::clone(&wal);
            std::thread::spawn(move || {
                let writer = wal
                    .writer(TOPICS[t])
                    .expect("writer")
                    .with_durability(Durability::Always);
                for offset in 0..2000 {
                    assert_eq!(writer.append(&value(t, offset)).expect("append"), offset);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("appender");
    }
    let stats = wal.ring_stats().expect("stats");
    assert!(stats.checkpoints >= 10, "{stats:?}");
    check_topics(&wal, &[2000; 3]);
}

#[test]
fn entries_larger_than_the_ring_allows_are_refused() {
    let dir = tempdir();
    // Files of 8 MiB, so the ring's 4 MiB default is the limit.
    let config = geometry(8, 1 << 20).ring(RingBackend::default());
    let wal = Wal::open_with(dir.path(), config).expect("open");
    assert_eq!(wal.config().effective_max_record_bytes(), 4 << 20);
    let stats = wal.ring_stats().expect("stats");
    assert_eq!(stats.capacity_bytes, RING_CAPACITY_DEFAULT);
    // 4 MiB of values in 8192 records: within max_batch_bytes, but not with their headers.
    let values = vec![vec![7u8; 512]; 8192];
    match wal.append_batch("t", &values) {
        Err(Error::LimitExceeded {
            limit: "ring_entry_bytes",
            ..
        }) => {}
        r => panic!("expected LimitExceeded(ring_entry_bytes), got {r:?}"),
    }
    match wal.append("t", &vec![0u8; (4 << 20) + 1]) {
        Err(Error::LimitExceeded {
            limit: "max_record_bytes",
            ..
        }) => {}
        r => panic!("expected LimitExceeded(max_record_bytes), got {r:?}"),
    }
    assert_eq!(
        wal.append_batch("t", &values[..4000]).expect("fits"),
        0..4000
    );
    let big = geometry(8, 16 << 20).max_batch_bytes(64 << 20);
    let big = big.ring(RingBackend::default());
    match Wal::open_with(tempdir().path(), big) {
        Err(Error::InvalidArgument {
            name: "max_batch_bytes",
            ..
        }) => {}
        r => panic!("expected InvalidArgument(max_batch_bytes), got {r:?}"),
    }
}

#[test]
fn a_failed_ring_write_fails_the_append_and_poisons_the_log() {
    let dir = tempdir();
    let faults = FaultStorage::new();
    let wal =
        Wal::open_with_storage(dir.path(), ring_config(), Arc::new(faults.clone())).expect("open");
    for o in 0..10 {
        assert_eq!(wal.append("orders", &value(0, o)).expect("append"), o);
    }
    faults.arm_for(points::WRITE, Some(RING_FILE), Fault::Once(libc::EIO));
    match wal.append("orders", &value(0, 10)) {
        Err(Error::Poisoned { errno, .. }) => assert_eq!(errno, Some(libc::EIO)),
        r => panic!("expected Poisoned, got {r:?}"),
    }
    assert!(wal.append("orders", b"after").is_err());
    assert!(wal.flush().is_err());
    assert!(wal.close().is_err());
    drop(wal);
    let wal = Wal::open_with(dir.path(), ring_config()).expect("reopen");
    let got = read_values(&wal, "orders");
    // The failed append was never acknowledged; it may be in the data files or not.
    assert!((10..=11).contains(&got.len()), "{} records", got.len());
    for (offset, v) in got.iter().take(10) {
        assert!(*v == value(0, *offset));
    }
}

#[test]
fn a_failed_checkpoint_keeps_the_ring_for_the_replay() {
    let dir = tempdir();
    let faults = FaultStorage::new();
    let wal = Wal::open_with_storage(
        dir.path(),
        ring_config().sync_interval_ms(3_600_000),
        Arc::new(faults.clone()),
    )
    .expect("open");
    for o in 0..30 {
        wal.append_record(
            "events",
            Append {
                headers: None,
                key: Some(b"k"),
                value: &value(1, o),
                timestamp_us: Some(1000 + o),
            },
        )
        .expect("append");
    }
    faults.arm(points::SYNC_MAP, Fault::Always(libc::EIO));
    assert!(wal.flush().is_err());
    let stats = wal.ring_stats().expect("stats");
    assert_eq!(
        stats.trim_offset, 0,
        "a failed checkpoint must not trim: {stats:?}"
    );
    assert!(matches!(
        wal.append("events", b"x"),
        Err(Error::Poisoned { .. })
    ));
    drop(wal);
    faults.disarm_all();
    let wal = Wal::open_with(dir.path(), ring_config()).expect("reopen");
    let report = wal.recovery_report();
    assert_eq!(report.ring_records_held + report.ring_records_replayed, 30);
    let mut reader = wal
        .reader_with(
            "events",
            ReaderOptions {
                start: StartPosition::Earliest,
                ..ReaderOptions::default()
            },
        )
        .expect("reader");
    for o in 0..30 {
        let r = reader.next().expect("read").expect("a record");
        assert_eq!((r.offset, r.timestamp_us), (o, 1000 + o));
        assert_eq!(r.key, Some(&b"k"[..]));
        assert!(*r.value == value(1, o)[..]);
    }
    assert!(reader.next().expect("read").is_none());
}

#[test]
fn deleting_a_topic_takes_its_entries_out_of_the_ring() {
    let dir = tempdir();
    let config = ring_config().sync_interval_ms(3_600_000);
    let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
    for o in 0..20 {
        wal.append("orders", &value(0, o)).expect("append");
        wal.append("events", &value(1, o)).expect("append");
    }
    let before = wal.ring_stats().expect("stats");
    wal.delete_topic("orders").expect("delete");
    let after = wal.ring_stats().expect("stats");
    assert!(after.checkpoints > before.checkpoints);
    assert_eq!(after.trim_offset, after.next_offset);
    // The same name starts over at offset 0, through the ring.
    assert_eq!(wal.append("orders", b"new").expect("append"), 0);
    drop(wal);
    let wal = Wal::open_with(dir.path(), config).expect("reopen");
    assert_eq!(read_values(&wal, "orders"), vec![(0, b"new".to_vec())]);
    assert_eq!(read_values(&wal, "events").len(), 20);
}

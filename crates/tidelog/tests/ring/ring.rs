//! The ring backend on a regular file: round trips, I/O faults, opening checks, both I/O
//! engines, one writer per ring, and a model-based random test. The seed's recovery
//! behaviours (laps, trims, ring full, holes, stale records, torn headers, bit flips) run on
//! a file and on a loop device in `ring_targets.rs`. Crash images are byte copies of a ring
//! taken while it is open (every completed write is durable, so the copy is what a crash
//! would leave).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::{
    RING_CAP as CAP, ring_append_n, ring_body, ring_config, ring_records, same_records,
};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{DirectIo, Error, IoEngine, RingConfig, RingWal};

fn crash_image(ring: &RingWal, dir: &Path, name: &str) -> PathBuf {
    let dst = dir.join(name);
    std::fs::copy(ring.path(), &dst).expect("copy image");
    dst
}

#[test]
fn append_flush_reopen_recovers_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let expected;
    {
        let ring = RingWal::open(&path, ring_config()).expect("open");
        expected = ring_append_n(&ring, 0, 1000, 37);
        assert!(expected.windows(2).all(|w| w[0].0 < w[1].0));
        same_records(&ring_records(&ring), &expected);
        ring.close().expect("close");
        assert!(matches!(ring.append(b"x"), Err(Error::Closed)));
    }
    let ring = RingWal::open(&path, RingConfig::default()).expect("reopen");
    let report = ring.recovery_report();
    assert_eq!(report.records, 1000);
    assert!(report.clean_shutdown);
    assert_eq!(report.clean_end_offset, Some(report.end_offset));
    same_records(&ring_records(&ring), &expected);
    // Appends continue after the recovered log.
    let more = ring_append_n(&ring, 1000, 10, 37);
    assert!(more[0].0 >= report.end_offset);
    assert_eq!(ring_records(&ring).len(), 1010);
}

#[test]
fn direct_io_required_works_on_a_regular_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = match RingWal::open(
        dir.path().join("ring"),
        ring_config().direct_io(DirectIo::Required),
    ) {
        Ok(r) => r,
        // A temp dir on a file system without O_DIRECT (tmpfs): nothing to test here.
        Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => return,
        Err(e) => panic!("open: {e}"),
    };
    assert!(ring.direct_io());
    let expected = ring_append_n(&ring, 0, 300, 1000);
    same_records(&ring_records(&ring), &expected);
}

#[test]
fn a_failed_write_poisons_the_ring_and_keeps_what_was_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let faults = FaultStorage::new();
    let ring =
        RingWal::open_with_storage(&path, ring_config(), Arc::new(faults.clone())).expect("open");
    let before = ring_append_n(&ring, 0, 20, 100);
    faults.arm(points::WRITE, Fault::Once(libc::EIO));
    let h = ring.append(b"lost").expect("append is accepted");
    match h.wait() {
        Err(Error::Poisoned { errno, .. }) => assert_eq!(errno, Some(libc::EIO)),
        r => panic!("expected Poisoned, got {r:?}"),
    }
    assert!(matches!(ring.append(b"x"), Err(Error::Poisoned { .. })));
    assert!(matches!(ring.flush(), Err(Error::Poisoned { .. })));
    assert!(matches!(ring.trim(0), Err(Error::Poisoned { .. })));
    assert!(matches!(ring.close(), Err(Error::Poisoned { .. })));
    drop(ring);
    let ring = RingWal::open(&path, ring_config()).expect("reopen");
    same_records(&ring_records(&ring), &before);
}

#[test]
fn a_failed_read_during_recovery_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    drop(RingWal::open(&path, ring_config()).expect("create"));
    let faults = FaultStorage::new();
    faults.arm(points::READ, Fault::Once(libc::EIO));
    match RingWal::open_with_storage(&path, ring_config(), Arc::new(faults)) {
        Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::EIO)),
        r => panic!("expected an I/O error, got {r:?}"),
    }
}

#[test]
fn concurrent_appenders_complete_in_offset_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = Arc::new(RingWal::open(dir.path().join("ring"), ring_config()).expect("open"));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let ring = ring.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..500 {
                    let b = ring_body(t * 10_000 + i, 64 + (i as usize % 300));
                    let h = ring.append(&b).expect("append");
                    if i % 50 == 0 {
                        h.wait().expect("durable");
                    }
                    mine.push((h.offset, b));
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("thread"))
        .collect();
    ring.flush().expect("flush");
    all.sort();
    same_records(&ring_records(&ring), &all);
}

#[test]
fn opening_checks_sizes_headers_and_formatting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    // Missing file without a capacity.
    assert!(matches!(
        RingWal::open(&path, RingConfig::default()),
        Err(Error::InvalidArgument {
            name: "capacity",
            ..
        })
    ));
    // Bad capacities.
    for cap in [4096, CAP + 1] {
        assert!(matches!(
            RingWal::open(&path, RingConfig::default().capacity_bytes(cap)),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert!(!path.exists());
    // An existing file that is not a ring is never formatted without asking.
    std::fs::write(&path, vec![1u8; CAP as usize]).expect("write");
    assert!(matches!(
        RingWal::open(&path, ring_config()),
        Err(Error::NotFormatted { .. })
    ));
    let ring = RingWal::open(&path, ring_config().format(true)).expect("format");
    let recs = ring_append_n(&ring, 0, 5, 10);
    drop(ring);
    // Capacity disagreements.
    assert!(matches!(
        RingWal::open(&path, ring_config().capacity_bytes(CAP * 2)),
        Err(Error::CapacityMismatch { .. })
    ));
    let grown = dir.path().join("grown");
    std::fs::copy(&path, &grown).expect("copy");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&grown)
        .and_then(|f| f.set_len(CAP + 4096))
        .expect("grow");
    assert!(matches!(
        RingWal::open(&grown, RingConfig::default()),
        Err(Error::CapacityMismatch { .. })
    ));
    // Reformatting drops every old record, even though the old blocks are still there.
    let ring = RingWal::open(&path, RingConfig::default()).expect("reopen");
    same_records(&ring_records(&ring), &recs);
    drop(ring);
    let ring = RingWal::open(&path, ring_config().format(true)).expect("reformat");
    assert!(ring_records(&ring).is_empty());
    assert_eq!(ring.recovery_report().records, 0);
    // Limits.
    assert!(matches!(
        ring.append(&vec![0u8; (64 << 10) + 1]),
        Err(Error::LimitExceeded {
            limit: "max_record_bytes",
            ..
        })
    ));
    assert!(matches!(
        RingWal::open(&path, RingConfig::default().inflight_blocks(0)),
        Err(Error::InvalidArgument { .. })
    ));
    // A directory is not a ring target.
    assert!(matches!(
        RingWal::open(dir.path(), RingConfig::default()),
        Err(Error::InvalidArgument { name: "path", .. })
    ));
}

#[test]
fn empty_records_and_the_largest_record_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let a = ring.append(b"").expect("empty");
    let big = ring_body(1, 64 << 10);
    let b = ring.append(&big).expect("largest");
    ring.flush().expect("flush");
    same_records(
        &ring_records(&ring),
        &[(a.offset, Vec::new()), (b.offset, big.clone())],
    );
    drop(ring);
    let ring = RingWal::open(&path, ring_config()).expect("reopen");
    same_records(
        &ring_records(&ring),
        &[(a.offset, Vec::new()), (b.offset, big)],
    );
}

#[test]
fn both_io_engines_write_the_same_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, engine) in [
        ("threads", IoEngine::Threads),
        ("io_uring", IoEngine::IoUring),
    ] {
        let path = dir.path().join(name);
        let ring = match RingWal::open(&path, ring_config().io_engine(engine)) {
            Ok(r) => r,
            // Kernels without io_uring (or with it disabled): only the threads engine runs.
            Err(Error::Io { .. }) if engine == IoEngine::IoUring => continue,
            Err(e) => panic!("open {name}: {e}"),
        };
        assert_eq!(ring.io_engine(), name);
        let ring = Arc::new(ring);
        let threads: Vec<_> = (0..3u64)
            .map(|t| {
                let ring = ring.clone();
                std::thread::spawn(move || ring_append_n(&ring, t * 1000, 300, 700 + t as usize))
            })
            .collect();
        let mut all: Vec<_> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("thread"))
            .collect();
        all.sort();
        same_records(&ring_records(&ring), &all);
        ring.close().expect("close");
        let reopened = RingWal::open(&path, ring_config()).expect("reopen");
        same_records(&ring_records(&reopened), &all);
    }
}

#[test]
fn one_writer_per_ring_and_no_half_made_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    assert!(matches!(
        RingWal::open(&path, ring_config()),
        Err(Error::Locked { .. })
    ));
    drop(ring);
    drop(RingWal::open(&path, ring_config()).expect("open after the first closed"));

    // A create that fails after the file exists removes it again.
    let fresh = dir.path().join("fresh");
    let faults = FaultStorage::new();
    faults.arm(points::OPEN_DEVICE, Fault::Once(libc::EINVAL));
    let err = RingWal::open_with_storage(
        &fresh,
        ring_config().direct_io(DirectIo::Required),
        Arc::new(faults),
    )
    .expect_err("O_DIRECT refused");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(!fresh.exists());
    // Both slots unreadable: the message says why, in words.
    std::fs::write(&fresh, vec![9u8; CAP as usize]).expect("write");
    let err = RingWal::open(&fresh, ring_config()).expect_err("not a ring");
    assert!(
        err.to_string().contains("slot 0: not a ring header"),
        "{err}"
    );
}

/// Model-based: random appends (waited or not), trims, flushes, clean reopens and crash
/// images, against a list of what must survive. After every reopen the ring must hold every
/// acknowledged untrimmed record, followed by at most a prefix of the unacknowledged ones.
#[test]
fn random_operations_match_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let cfg = || {
        ring_config()
            .max_record_bytes(20 << 10)
            .block_bytes(32 << 10)
    };
    let mut acked: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut ring = RingWal::open(&path, cfg()).expect("open");
    let mut id = 0u64;
    for step in 0..400 {
        match next(10) {
            0..=5 => {
                let mut unacked = Vec::new();
                for _ in 0..1 + next(20) {
                    let b = ring_body(id, next(20 << 10) as usize);
                    id += 1;
                    match ring.append(&b) {
                        Ok(h) => unacked.push((h, b)),
                        Err(Error::RingFull { .. }) => break,
                        Err(e) => panic!("append: {e}"),
                    }
                }
                if next(3) == 0 && !unacked.is_empty() {
                    // A crash with some appends still in flight.
                    let img = crash_image(&ring, dir.path(), "img");
                    drop(ring);
                    std::fs::rename(&img, &path).expect("swap in crash image");
                    ring = RingWal::open(&path, cfg()).expect("reopen after crash");
                    let got = ring_records(&ring);
                    assert!(got.len() >= acked.len(), "step {step}: lost records");
                    same_records(&got[..acked.len()], &acked);
                    let extra = &got[acked.len()..];
                    for ((o, b), (h, want)) in extra.iter().zip(&unacked) {
                        assert_eq!((*o, b), (h.offset, want), "step {step}: not a prefix");
                    }
                    assert!(extra.len() <= unacked.len());
                    acked = got;
                } else {
                    for (h, b) in unacked {
                        h.wait().expect("durable");
                        acked.push((h.offset, b));
                    }
                }
            }
            6 | 7 => {
                if !acked.is_empty() {
                    let i = next(acked.len() as u64 + 1) as usize;
                    let to = if i == acked.len() {
                        ring.flush().expect("flush")
                    } else {
                        acked[i].0
                    };
                    ring.trim(to).expect("trim");
                    acked.retain(|r| r.0 >= to);
                }
            }
            8 => {
                ring.close().expect("close");
                drop(ring);
                ring = RingWal::open(&path, cfg()).expect("clean reopen");
                assert!(ring.recovery_report().clean_shutdown);
                same_records(&ring_records(&ring), &acked);
            }
            _ => {
                ring.flush().expect("flush");
                same_records(&ring_records(&ring), &acked);
            }
        }
    }
    assert!(id > 500);
}

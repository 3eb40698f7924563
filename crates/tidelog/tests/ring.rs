//! The ring backend's behaviours: wrap-around, trim and reopen, ring full, recovery with
//! holes, torn headers, stale records from earlier laps and sessions, bit flips, and I/O
//! faults. Crash images are byte copies of a ring taken while it is open (every completed
//! write is durable, so the copy is what a crash would leave).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{RING_CAP as CAP, patch, ring_append_n, ring_body, ring_config};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::ring::format::{ALIGN_BYTES, HEADER_SLOT_BYTES, RING_START};
use tidelog::{DirectIo, Error, IoEngine, RingConfig, RingWal};

fn collect(ring: &RingWal) -> Vec<(u64, Vec<u8>)> {
    ring.recover()
        .expect("recover")
        .collect::<tidelog::Result<Vec<_>>>()
        .expect("records")
}

/// Compares record lists by offset, then body, without printing megabytes on failure.
#[track_caller]
fn same(got: &[(u64, Vec<u8>)], want: &[(u64, Vec<u8>)]) {
    let offsets = |r: &[(u64, Vec<u8>)]| r.iter().map(|x| x.0).collect::<Vec<_>>();
    assert_eq!(offsets(got), offsets(want), "record offsets differ");
    for (g, w) in got.iter().zip(want) {
        assert!(g.1 == w.1, "body of record {} differs", g.0);
    }
}

fn crash_image(ring: &RingWal, dir: &Path, name: &str) -> PathBuf {
    let dst = dir.join(name);
    std::fs::copy(ring.path(), &dst).expect("copy image");
    dst
}

fn read(path: &Path, pos: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).expect("open image");
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, pos).expect("read");
    b
}

fn physical(ring_bytes: u64, offset: u64) -> u64 {
    RING_START + offset % ring_bytes
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
        same(&collect(&ring), &expected);
        ring.close().expect("close");
        assert!(matches!(ring.append(b"x"), Err(Error::Closed)));
    }
    let ring = RingWal::open(&path, RingConfig::default()).expect("reopen");
    let report = ring.recovery_report();
    assert_eq!(report.records, 1000);
    assert!(report.clean_shutdown);
    assert_eq!(report.clean_end_offset, Some(report.end_offset));
    same(&collect(&ring), &expected);
    // Appends continue after the recovered log.
    let more = ring_append_n(&ring, 1000, 10, 37);
    assert!(more[0].0 >= report.end_offset);
    assert_eq!(collect(&ring).len(), 1010);
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
    same(&collect(&ring), &expected);
}

#[test]
fn wraps_around_over_several_laps_with_trims_and_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let mut live: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut id = 0;
    let mut ring_bytes = 0;
    let mut last_offset = 0;
    for round in 0..12 {
        let ring = RingWal::open(&path, ring_config()).expect("open");
        ring_bytes = ring.ring_bytes();
        same(&collect(&ring), &live);
        let batch = ring_append_n(&ring, id, 300, 3000 + round * 100);
        id += 300;
        live.extend(batch);
        // Keep only the newest 100 records.
        let keep_from = live[live.len() - 100].0;
        ring.trim(keep_from).expect("trim");
        live.retain(|(o, _)| *o >= keep_from);
        assert_eq!(ring.trim_offset(), keep_from);
        last_offset = live.last().map_or(0, |r| r.0);
        if round % 3 == 0 {
            ring.close().expect("close");
        } else {
            // Unclean: leave the header as a crash would (drop still closes, so copy first).
            let img = crash_image(&ring, dir.path(), "img");
            drop(ring);
            std::fs::rename(img, &path).expect("swap in crash image");
        }
    }
    assert!(last_offset > 3 * ring_bytes, "did not wrap several laps");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    same(&collect(&ring), &live);
}

#[test]
fn padding_fills_the_lap_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config().block_delay_us(0)).expect("open");
    let ring_bytes = ring.ring_bytes();
    // Records of 40 KiB (block_bytes 64 KiB: one per block, 44 KiB aligned): the lap end
    // never lines up, so every lap needs a padding block.
    let mut all = Vec::new();
    for i in 0..300 {
        let rec = ring_append_n(&ring, i, 1, 40 << 10);
        ring.trim(rec[0].0).expect("trim");
        all.extend(rec);
    }
    let last = all.last().expect("records").clone();
    assert!(last.0 > 2 * ring_bytes);
    for (o, b) in &all {
        let in_lap = o % ring_bytes;
        assert!(
            in_lap + b.len() as u64 <= ring_bytes,
            "record crosses the lap end"
        );
    }
    same(&collect(&ring), std::slice::from_ref(&last));
    let img = crash_image(&ring, dir.path(), "img");
    drop(ring);
    let ring = RingWal::open(&img, ring_config()).expect("open image");
    same(&collect(&ring), &[last]);
}

#[test]
fn ring_full_fails_at_once_or_waits_for_a_trim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = Arc::new(RingWal::open(dir.path().join("ring"), ring_config()).expect("open"));
    let mut offsets = Vec::new();
    let err = loop {
        match ring.append(&[7u8; 8000]) {
            Ok(h) => offsets.push(h),
            Err(e) => break e,
        }
    };
    match err {
        Error::RingFull {
            requested_bytes,
            free_bytes,
        } => assert!(requested_bytes > free_bytes),
        e => panic!("expected RingFull, got {e}"),
    }
    assert!(ring.free_bytes() < 16 << 10);
    // Waiting without a trim times out with RingFull.
    let t = std::time::Instant::now();
    assert!(matches!(
        ring.append_wait(b"x", Duration::from_millis(50)),
        Err(Error::RingFull { .. })
    ));
    assert!(t.elapsed() >= Duration::from_millis(50));
    // A trim from another thread lets a waiting append through.
    let last = offsets.last().expect("appended").wait().expect("durable");
    let r = ring.clone();
    let trimmer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        r.trim(last).expect("trim");
    });
    let h = ring
        .append_wait(b"after trim", Duration::from_secs(10))
        .expect("append after trim");
    trimmer.join().expect("trimmer");
    h.wait().expect("durable");
    same(&collect(&ring), &[(h.offset, b"after trim".to_vec())]);
}

#[test]
fn trim_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let recs = ring_append_n(&ring, 0, 50, 100);
    let flushed = ring.flushed_offset();
    assert!(matches!(
        ring.trim(flushed + 1),
        Err(Error::InvalidArgument { name: "offset", .. })
    ));
    // Trimming mid-record discards the record it lands in.
    ring.trim(recs[10].0 + 1).expect("trim");
    same(&collect(&ring), &recs[11..]);
    // A smaller offset is a no-op.
    ring.trim(recs[2].0).expect("no-op trim");
    assert_eq!(ring.trim_offset(), recs[10].0 + 1);
    drop(ring);
    let ring = RingWal::open(&path, ring_config()).expect("reopen");
    assert_eq!(ring.trim_offset(), recs[10].0 + 1);
    same(&collect(&ring), &recs[11..]);
    assert_eq!(ring.recovery_report().records, 39);
    let end = ring.reset().expect("reset");
    assert_eq!(ring.trim_offset(), end);
    assert!(collect(&ring).is_empty());
    assert_eq!(ring.free_bytes(), ring.ring_bytes());
}

/// A crash image with the block at `hole` (an in-flight block that never reached the
/// device) zeroed; the blocks after it were written.
#[test]
fn recovery_stops_at_a_hole_and_ignores_blocks_past_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring =
        RingWal::open(dir.path().join("ring"), ring_config().block_delay_us(0)).expect("open");
    let ring_bytes = ring.ring_bytes();
    // One record per block: 20 KiB records in 64 KiB blocks would share; use 40 KiB.
    let recs = ring_append_n(&ring, 0, 10, 40 << 10);
    let img = crash_image(&ring, dir.path(), "img");
    let hole = recs[4].0 - 40; // the block header sits just before its first record
    assert_eq!(hole % ALIGN_BYTES, 0);
    patch(&img, physical(ring_bytes, hole), &vec![0u8; 44 << 10]);
    let reopened = RingWal::open(&img, ring_config()).expect("open image");
    let report = reopened.recovery_report().clone();
    assert_eq!(report.end_offset, hole);
    assert_eq!(report.records, 4);
    assert!(!report.clean_shutdown);
    assert!(report.blocks_past_end >= 1, "{report:?}");
    same(&collect(&reopened), &recs[..4]);
}

/// A restart continues at the hole; the old session's blocks past it must never come back,
/// even where the new session's shorter blocks leave them exposed.
#[test]
fn stale_blocks_of_an_earlier_session_are_not_recovered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring =
        RingWal::open(dir.path().join("ring"), ring_config().block_delay_us(0)).expect("open");
    let ring_bytes = ring.ring_bytes();
    let recs = ring_append_n(&ring, 0, 10, 40 << 10);
    let img = crash_image(&ring, dir.path(), "img");
    let hole = recs[4].0 - 40;
    patch(&img, physical(ring_bytes, hole), &vec![0u8; 44 << 10]);
    drop(ring);
    // Session 2 writes one block of the same size at the hole, then crashes: session 1's
    // blocks 5.. follow it with matching offsets, and only their epoch tells them apart.
    let s2 = RingWal::open(&img, ring_config().block_delay_us(0)).expect("open image");
    let again = ring_append_n(&s2, 100, 1, 40 << 10);
    assert_eq!(again[0].0, recs[4].0);
    let img2 = crash_image(&s2, dir.path(), "img2");
    drop(s2);
    let s3 = RingWal::open(&img2, ring_config()).expect("open image 2");
    let mut expected = recs[..4].to_vec();
    expected.extend(again);
    same(&collect(&s3), &expected);
    assert_eq!(s3.recovery_report().end_offset, recs[5].0 - 40);
    assert!(
        s3.recovery_report().stop_reason.contains("older session"),
        "{}",
        s3.recovery_report().stop_reason
    );
}

#[test]
fn records_from_an_earlier_lap_are_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let ring_bytes = ring.ring_bytes();
    // Fill most of a lap, trim it all, then write a little on the next lap.
    let first = ring_append_n(&ring, 0, 90, 40 << 10);
    ring.reset().expect("reset");
    let second = ring_append_n(&ring, 1000, 200, 1000);
    assert!(second.last().expect("records").0 > ring_bytes);
    let img = crash_image(&ring, dir.path(), "img");
    drop(ring);
    let ring = RingWal::open(&img, ring_config()).expect("open image");
    same(&collect(&ring), &second);
    assert!(first.iter().all(|r| !collect(&ring).contains(r)));
}

#[test]
fn a_torn_header_slot_falls_back_to_the_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let recs = ring_append_n(&ring, 0, 40, 500);
    ring.trim(recs[5].0).expect("trim");
    let img = crash_image(&ring, dir.path(), "img");
    drop(ring);
    for slot in 0..2u64 {
        let copy = dir.path().join(format!("torn{slot}"));
        std::fs::copy(&img, &copy).expect("copy");
        // Tear the slot: its second half is garbage.
        patch(&copy, slot * HEADER_SLOT_BYTES + 40, &[0xAB; 40]);
        let ring = RingWal::open(&copy, ring_config()).expect("open with one torn slot");
        let got = collect(&ring);
        // The surviving slot holds either the newest header or the one before it; both
        // recover every live record (an older trim only brings back trimmed ones).
        assert!(got.ends_with(&recs[5..]), "slot {slot}");
    }
    let copy = dir.path().join("torn-both");
    std::fs::copy(&img, &copy).expect("copy");
    patch(&copy, 40, &[0xAB; 40]);
    patch(&copy, HEADER_SLOT_BYTES + 40, &[0xAB; 40]);
    assert!(matches!(
        RingWal::open(&copy, ring_config()),
        Err(Error::NotFormatted { .. })
    ));
}

#[test]
fn header_writes_alternate_slots_and_never_touch_the_newest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let recs = ring_append_n(&ring, 0, 10, 100);
    let mut prev = (read(&path, 0, 80), read(&path, HEADER_SLOT_BYTES, 80));
    for r in &recs[1..] {
        ring.trim(r.0).expect("trim");
        let now = (read(&path, 0, 80), read(&path, HEADER_SLOT_BYTES, 80));
        // Exactly one slot changed.
        assert!((now.0 == prev.0) != (now.1 == prev.1));
        prev = now;
    }
}

#[test]
fn a_bit_flip_ends_recovery_at_its_block_and_fails_a_live_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config().block_delay_us(0)).expect("open");
    let ring_bytes = ring.ring_bytes();
    let recs = ring_append_n(&ring, 0, 8, 40 << 10);
    // Flip one bit in the body of record 5.
    let at = physical(ring_bytes, recs[5].0) + 24 + 1000;
    let byte = read(&path, at, 1)[0];
    patch(&path, at, &[byte ^ 0x04]);
    // Reading the durable log now reports corruption rather than wrong bytes.
    let err = ring
        .recover()
        .expect("recover")
        .collect::<tidelog::Result<Vec<_>>>()
        .expect_err("corruption");
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
    let img = crash_image(&ring, dir.path(), "img");
    drop(ring);
    let ring = RingWal::open(&img, ring_config()).expect("open image");
    let report = ring.recovery_report();
    assert_eq!(report.records, 5);
    assert!(
        report.stop_reason.contains("checksum"),
        "{}",
        report.stop_reason
    );
    same(&collect(&ring), &recs[..5]);
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
    same(&collect(&ring), &before);
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
    same(&collect(&ring), &all);
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
    same(&collect(&ring), &recs);
    drop(ring);
    let ring = RingWal::open(&path, ring_config().format(true)).expect("reformat");
    assert!(collect(&ring).is_empty());
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
    same(
        &collect(&ring),
        &[(a.offset, Vec::new()), (b.offset, big.clone())],
    );
    drop(ring);
    let ring = RingWal::open(&path, ring_config()).expect("reopen");
    same(&collect(&ring), &[(a.offset, Vec::new()), (b.offset, big)]);
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
        same(&collect(&ring), &all);
        ring.close().expect("close");
        let reopened = RingWal::open(&path, ring_config()).expect("reopen");
        same(&collect(&reopened), &all);
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
                    let got = collect(&ring);
                    assert!(got.len() >= acked.len(), "step {step}: lost records");
                    same(&got[..acked.len()], &acked);
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
                same(&collect(&ring), &acked);
            }
            _ => {
                ring.flush().expect("flush");
                same(&collect(&ring), &acked);
            }
        }
    }
    assert!(id > 500);
}

//! Read-only ring inspection (`tidelog::ring::inspect`): header slots, records with their
//! checksum verdicts, corruption told apart from the end of the log, bad input, and
//! inspecting a ring another handle is writing.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{RING_CAP as CAP, flip_byte, patch, ring_append_n, ring_config};
use tidelog::io::{FaultStorage, points};
use tidelog::ring::format::{HEADER_SLOT_BYTES, RING_START, RR_HEADER_LEN, Shutdown};
use tidelog::ring::{CorruptionKind, InspectedRecord, RingScan, inspect, inspect_with_storage};
use tidelog::{Error, RingWal};

/// Every record and the final scan report.
fn read_all(path: &Path) -> (Vec<InspectedRecord>, RingScan) {
    let ins = inspect(path).expect("inspect");
    let mut it = ins.records().expect("records");
    let recs = it
        .by_ref()
        .collect::<tidelog::Result<Vec<_>>>()
        .expect("scan");
    assert!(it.is_finished());
    (recs, it.report().clone())
}

fn offsets(recs: &[InspectedRecord]) -> Vec<u64> {
    recs.iter().map(|r| r.offset).collect()
}

#[test]
fn a_clean_ring_shows_both_slots_and_every_live_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let ring_bytes = ring.ring_bytes();
    let mut want = ring_append_n(&ring, 0, 300, 1000);
    want.extend(ring_append_n(&ring, 300, 3, 0));
    ring.trim(want[10].0).expect("trim");
    let end = ring.flushed_offset();
    ring.close().expect("close");

    let ins = inspect(&path).expect("inspect");
    assert_eq!(ins.size_bytes, CAP);
    assert!(!ins.is_block_device);
    assert_eq!(ins.ring_bytes(), ring_bytes);
    let cur = ins.slots[ins.current_slot]
        .header
        .expect("current slot valid");
    assert_eq!(cur, ins.header);
    assert_eq!(cur.shutdown, Shutdown::Clean);
    assert_eq!(cur.clean_end_offset, end);
    assert_eq!(cur.trim_offset, want[10].0);
    assert_eq!(ins.slots[1].position, HEADER_SLOT_BYTES);
    // The other slot holds the header before the close: an older generation.
    let other = ins.slots[1 - ins.current_slot]
        .header
        .expect("other slot valid");
    assert!(other.generation < cur.generation);

    let (recs, scan) = read_all(&path);
    assert_eq!(offsets(&recs), offsets_of(&want[10..]));
    for (r, (_, b)) in recs.iter().zip(&want[10..]) {
        assert!(r.body_ok);
        assert_eq!(&r.body, b);
        assert_eq!(r.body_crc, crc32fast::hash(b));
        assert_eq!(r.position, RING_START + r.offset % ring_bytes);
        assert!(r.block_offset <= r.offset && r.block_offset % 4096 == 0);
        assert_eq!(r.end_offset(), r.offset + (RR_HEADER_LEN + b.len()) as u64);
        assert!(
            r.journal_entry().is_err(),
            "raw bodies are not journal entries"
        );
    }
    assert!(scan.corrupt.is_empty(), "{:?}", scan.corrupt);
    assert_eq!(scan.end_offset, end);
    assert_eq!(scan.clean_end_offset, Some(end));
    assert_eq!(scan.records, recs.len() as u64);
    assert!(
        scan.stop_reason.contains("clean shutdown"),
        "{}",
        scan.stop_reason
    );
    assert_eq!(scan.blocks_past_end, 0);
}

fn offsets_of(recs: &[(u64, Vec<u8>)]) -> Vec<u64> {
    recs.iter().map(|r| r.0).collect()
}

#[test]
fn a_corrupt_record_body_is_named_and_the_scan_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let want = ring_append_n(&ring, 0, 200, 1000);
    ring.close().expect("close");
    let (before, _) = read_all(&path);

    let bad = &before[77];
    flip_byte(&path, bad.position + RR_HEADER_LEN as u64 + 10);
    let (recs, scan) = read_all(&path);
    assert_eq!(
        offsets(&recs),
        offsets_of(&want),
        "every record is still listed"
    );
    let flagged: Vec<u64> = recs
        .iter()
        .filter(|r| !r.body_ok)
        .map(|r| r.offset)
        .collect();
    assert_eq!(flagged, vec![bad.offset]);
    assert_eq!(scan.corrupt.len(), 1, "{:?}", scan.corrupt);
    let c = &scan.corrupt[0];
    assert_eq!(c.kind, CorruptionKind::RecordBody);
    assert_eq!(
        (c.offset, c.position, c.bytes),
        (bad.offset, bad.position, 1000)
    );
    assert!(
        scan.stop_reason.contains("clean shutdown"),
        "{}",
        scan.stop_reason
    );
}

#[test]
fn a_corrupt_block_header_is_skipped_to_the_next_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    ring_append_n(&ring, 0, 300, 1000);
    ring.close().expect("close");
    let (before, _) = read_all(&path);
    let mut blocks: Vec<u64> = before.iter().map(|r| r.block_offset).collect();
    blocks.dedup();
    assert!(blocks.len() >= 4, "{blocks:?}");
    let victim = blocks[2];
    // Garble the block's header checksum.
    patch(&path, RING_START + victim + 36, &[0xFF; 4]);

    let (recs, scan) = read_all(&path);
    let lost: Vec<u64> = before
        .iter()
        .filter(|r| r.block_offset == victim)
        .map(|r| r.offset)
        .collect();
    let kept: Vec<u64> = before
        .iter()
        .filter(|r| r.block_offset != victim)
        .map(|r| r.offset)
        .collect();
    assert_eq!(offsets(&recs), kept);
    assert_eq!(scan.corrupt.len(), 1, "{:?}", scan.corrupt);
    let c = &scan.corrupt[0];
    assert_eq!(c.kind, CorruptionKind::Block);
    assert_eq!(c.offset, victim);
    assert_eq!(c.position, RING_START + victim);
    assert_eq!(c.offset + c.bytes, blocks[3]);
    assert!(c.reason.contains("checksum"), "{}", c.reason);
    assert!(!lost.is_empty());
}

#[test]
fn an_unclean_ring_tells_damage_inside_the_window_rules_from_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    // Full blocks only: on a busy machine the idle and delay seals would write blocks of a
    // few records, each padded to 4 KiB, and 2500 records would no longer fit the ring.
    let full_blocks = ring_config().seal_when_idle(false).block_delay_us(50_000);
    let ring = RingWal::open(&path, full_blocks).expect("open");
    let want = ring_append_n(&ring, 0, 2500, 1000);
    // A crash image: copied while the ring is open, after everything was durable.
    let img = dir.path().join("img");
    std::fs::copy(&path, &img).expect("copy");
    drop(ring);
    let ins = inspect(&img).expect("inspect");
    assert_eq!(ins.header.shutdown, Shutdown::Unclean);
    let window = ins.header.window_max_bytes;
    let (before, scan) = read_all(&img);
    assert_eq!(offsets(&before), offsets_of(&want));
    assert!(scan.corrupt.is_empty());
    assert!(
        scan.end_offset > window * 3,
        "the test needs a log several windows long"
    );

    // Early in the log: far more than a window of blocks follows, so it was written.
    let early = dir.path().join("early");
    std::fs::copy(&img, &early).expect("copy");
    let bad = &before[100];
    flip_byte(&early, bad.position + RR_HEADER_LEN as u64 + 3);
    let (recs, scan) = read_all(&early);
    assert_eq!(recs.len(), before.len());
    assert_eq!(scan.corrupt.len(), 1, "{:?}", scan.corrupt);
    assert_eq!(scan.corrupt[0].offset, bad.offset);
    assert_eq!(scan.corrupt[0].kind, CorruptionKind::RecordBody);

    // In the last block: it may be a write that never completed, so it ends the log where
    // recovery ends it.
    let late = dir.path().join("late");
    std::fs::copy(&img, &late).expect("copy");
    let last = before.last().expect("records");
    flip_byte(&late, last.position + RR_HEADER_LEN as u64 + 3);
    let (recs, scan) = read_all(&late);
    assert!(scan.corrupt.is_empty(), "{:?}", scan.corrupt);
    assert_eq!(scan.end_offset, last.block_offset);
    assert!(
        recs.iter()
            .all(|r| r.body_ok && r.offset < last.block_offset)
    );
    assert!(
        scan.stop_reason.contains("checksum"),
        "{}",
        scan.stop_reason
    );
    let reopened = RingWal::open(&late, ring_config()).expect("recover");
    assert_eq!(reopened.recovery_report().end_offset, scan.end_offset);
}

#[test]
fn a_garbage_header_slot_leaves_the_other_current() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let want = ring_append_n(&ring, 0, 50, 700);
    ring.close().expect("close");
    let cur = inspect(&path).expect("inspect").current_slot as u64;
    patch(&path, cur * HEADER_SLOT_BYTES + 30, &[0xAB; 30]);

    let ins = inspect(&path).expect("inspect with one torn slot");
    assert_eq!(ins.current_slot as u64, 1 - cur);
    assert!(ins.slots[cur as usize].header.is_err());
    let (recs, scan) = read_all(&path);
    assert_eq!(offsets(&recs), offsets_of(&want));
    assert!(scan.corrupt.is_empty(), "{:?}", scan.corrupt);
}

#[test]
fn what_is_not_a_ring_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk");
    std::fs::write(
        &junk,
        (0..(1u32 << 20))
            .map(|i| (i * 7 + 3) as u8)
            .collect::<Vec<_>>(),
    )
    .expect("write");
    let err = inspect(&junk).expect_err("junk");
    assert!(matches!(err, Error::NotFormatted { .. }), "{err}");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").expect("write");
    let err = inspect(&empty).expect_err("empty");
    assert!(matches!(err, Error::NotFormatted { .. }), "{err}");
    let err = inspect(dir.path()).expect_err("directory");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = inspect(dir.path().join("missing")).expect_err("missing");
    assert!(
        matches!(&err, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err}"
    );
}

#[test]
fn inspecting_an_open_ring_neither_writes_nor_disturbs_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = RingWal::open(&path, ring_config()).expect("open");
    let first = ring_append_n(&ring, 0, 100, 500);
    let headers = std::fs::read(&path).expect("read")[..RING_START as usize].to_vec();

    let storage = FaultStorage::new();
    let ins = inspect_with_storage(&path, Arc::new(storage.clone())).expect("inspect");
    assert_eq!(ins.header.shutdown, Shutdown::Unclean);
    let recs = ins
        .records()
        .expect("records")
        .collect::<tidelog::Result<Vec<_>>>()
        .expect("scan");
    assert_eq!(offsets(&recs), offsets_of(&first));
    assert_eq!(storage.calls(points::WRITE), 0);
    assert_eq!(storage.calls(points::OPEN_DEVICE), 0);
    assert!(storage.calls(points::READ) > 0);
    let now = std::fs::read(&path).expect("read")[..RING_START as usize].to_vec();
    assert!(now == headers, "inspection changed a header slot");

    // The writer goes on as if nothing happened, and its log is whole.
    let second = ring_append_n(&ring, 100, 100, 500);
    ring.close().expect("close");
    let ring = RingWal::open(&path, ring_config()).expect("reopen");
    let got: Vec<u64> = ring
        .recover()
        .expect("recover")
        .map(|r| r.expect("record").0)
        .collect();
    let mut want = offsets_of(&first);
    want.extend(offsets_of(&second));
    assert_eq!(got, want);
}

#[test]
fn inspecting_while_a_writer_appends_and_trims_finds_no_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let ring = Arc::new(RingWal::open(&path, ring_config()).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (ring, stop) = (ring.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let recs = ring_append_n(&ring, i, 50, 3000);
                i += 50;
                // Keep about a third of the ring live, so the writer laps it.
                let keep = ring.flushed_offset().saturating_sub(CAP / 3);
                if let Some(r) = recs.iter().find(|r| r.0 >= keep) {
                    ring.trim(r.0).expect("trim");
                }
            }
            i
        })
    };
    let mut scans = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        let ins = inspect(&path).expect("inspect");
        let mut it = ins.records().expect("records");
        for r in it.by_ref() {
            let r = r.expect("record");
            assert!(r.body_ok, "record {} reported corrupt", r.offset);
        }
        assert!(it.report().corrupt.is_empty(), "{:?}", it.report());
        scans += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let appended = writer.join().expect("writer");
    assert!(scans > 0 && appended > 0);
    assert!(
        ring.flushed_offset() > CAP,
        "the writer should have lapped the ring"
    );
    ring.close().expect("close");
}

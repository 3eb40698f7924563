//! Goal: `Reader::seek` reaches every offset and refuses offsets outside `[first, next]`;
//! `Reader::seek_time` finds the right record for any target time.
//!
//! Semantics tested for `seek_time(t)` (Kafka's `offsetsForTimes`): the reader moves to the
//! smallest offset whose record has `timestamp_us >= t`, or to the next offset when no record
//! qualifies. With increasing timestamps that is the first record at or after `t`; with
//! timestamps out of order it is still the earliest qualifying record in offset order, so no
//! record before the position qualifies and the record at it does.
//!
//! Method: a topic spanning a dozen extents (64 KiB blocks) is written with explicit
//! timestamps; every offset and many target times are sought, and the answers are compared
//! with a model computed from the written timestamps (a running maximum gives the expected
//! offset by binary search). Everything is repeated after close and reopen, when sealed
//! extents load their index from the footer and the last extent is rebuilt by a scan.

use std::path::Path;

use crate::common::{self, small, stream_payload, tempdir};
use tidelog::{Append, Error, Reader, ReaderOptions, StartPosition, Wal, format};

const RECORDS: u64 = 3_000;
const BASE: u64 = 1_700_000_000_000_000;

fn value(i: u64) -> Vec<u8> {
    stream_payload(5, i, 150 + (i % 100) as usize)
}

fn write(dir: &Path, timestamps: &[u64]) {
    let wal = Wal::open_with(dir, small()).expect("open");
    let w = wal.writer("t").expect("writer");
    for (i, &ts) in timestamps.iter().enumerate() {
        let v = value(i as u64);
        let rec = Append {
            headers: None,
            key: None,
            value: &v,
            timestamp_us: Some(ts),
        };
        assert_eq!(w.append_record(rec).expect("append"), i as u64);
    }
    wal.close().expect("close");
}

fn reader(wal: &Wal) -> Reader {
    wal.reader_with("t", ReaderOptions::default().start(StartPosition::Earliest))
        .expect("reader")
}

/// Smallest offset whose timestamp is `>= target`, else the record count.
fn expected_offset(running_max: &[u64], target: u64) -> u64 {
    running_max.partition_point(|&m| m < target) as u64
}

fn running_max(timestamps: &[u64]) -> Vec<u64> {
    timestamps
        .iter()
        .scan(0, |m, &t| {
            *m = (*m).max(t);
            Some(*m)
        })
        .collect()
}

fn check_seek_time(wal: &Wal, timestamps: &[u64], targets: &[u64]) {
    let max = running_max(timestamps);
    let mut r = reader(wal);
    for &target in targets {
        let want = expected_offset(&max, target);
        let got = r.seek_time(target).expect("seek_time");
        assert_eq!(got, want, "seek_time({target})");
        assert_eq!(r.position(), want);
        match r.next().expect("next") {
            Some(rec) => {
                assert_eq!(rec.offset, want);
                assert!(
                    rec.timestamp_us >= target,
                    "record at the position qualifies"
                );
                assert_eq!(rec.timestamp_us, timestamps[want as usize]);
                assert_eq!(rec.value, value(want));
            }
            None => assert_eq!(want, timestamps.len() as u64, "None only at the end"),
        }
    }
}

fn check_seek_every_offset(wal: &Wal) {
    let info = wal.topic_info("t").expect("info");
    assert!(info.extents >= 10, "the topic spans many extents: {info:?}");
    let mut r = reader(wal);
    // Forwards, then a scattered order that jumps back and forth between extents.
    let scattered = (0..RECORDS).map(|i| (i * 1_777) % RECORDS);
    for o in (0..RECORDS).chain(scattered) {
        r.seek(o).expect("seek");
        assert_eq!(r.position(), o);
        let rec = r.next().expect("next").expect("a record");
        assert_eq!(rec.offset, o);
        assert_eq!(rec.value, value(o));
        // Reading on crosses into the next extent where there is one.
        if o + 1 < RECORDS {
            assert_eq!(r.next().expect("next").expect("a record").offset, o + 1);
        }
    }

    // Boundaries: first and next are valid positions; past next is refused.
    r.seek(0).expect("seek to first");
    assert_eq!(r.next().expect("next").expect("a record").offset, 0);
    r.seek(RECORDS).expect("seek to next");
    assert!(r.next().expect("next").is_none());
    assert_eq!(r.lag(), 0);
    r.seek(17).expect("seek");
    for bad in [RECORDS + 1, RECORDS + 1_000, u64::MAX] {
        match r.seek(bad) {
            Err(Error::OffsetOutOfRange {
                topic,
                offset,
                first,
                next,
            }) => {
                assert_eq!(
                    (topic.as_str(), offset, first, next),
                    ("t", bad, 0, RECORDS)
                );
            }
            other => panic!("seek({bad}): expected OffsetOutOfRange, got {other:?}"),
        }
        assert_eq!(r.position(), 17, "a refused seek does not move the reader");
    }
    assert_eq!(r.next().expect("next").expect("a record").offset, 17);
}

#[test]
fn seek_to_every_offset_before_and_after_reopen() {
    let dir = tempdir();
    let timestamps: Vec<u64> = (0..RECORDS).map(|i| BASE + i).collect();
    write(dir.path(), &timestamps);
    let wal = Wal::open_with(dir.path(), small()).expect("reopen");
    check_seek_every_offset(&wal);
    drop(wal);

    // A live handle (extents still in memory, the last one open) answers the same.
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).expect("open");
    for i in 0..RECORDS {
        wal.append("t", &value(i)).expect("append");
    }
    check_seek_every_offset(&wal);

    // A reader positioned at the end sees records appended after its seek.
    let mut r = reader(&wal);
    r.seek(RECORDS).expect("seek to the end");
    assert_eq!(wal.append("t", b"late").expect("append"), RECORDS);
    assert_eq!(
        r.next().expect("next").expect("the new record").value,
        b"late"
    );
}

#[test]
fn seek_time_with_increasing_timestamps() {
    let dir = tempdir();
    // Gaps of 10 us, so targets between two records exist.
    let timestamps: Vec<u64> = (0..RECORDS).map(|i| BASE + 10 * i).collect();
    write(dir.path(), &timestamps);
    let mut targets = vec![0, 1, BASE - 1, BASE, u64::MAX, BASE + 10 * RECORDS];
    for &t in &timestamps {
        targets.extend([t, t - 5, t + 1]);
    }
    let wal = Wal::open_with(dir.path(), small()).expect("reopen");
    check_seek_time(&wal, &timestamps, &targets);

    // Exact values, spelled out: a target past the last record positions at the next offset.
    let mut r = reader(&wal);
    assert_eq!(r.seek_time(BASE + 10 * 1_234).expect("seek_time"), 1_234);
    assert_eq!(
        r.seek_time(BASE + 10 * 1_234 + 1).expect("seek_time"),
        1_235
    );
    assert_eq!(
        r.seek_time(BASE + 10 * (RECORDS - 1) + 1)
            .expect("seek_time"),
        RECORDS
    );
    assert!(r.next().expect("next").is_none());
    // After seeking to the end the reader still follows new appends.
    let late = Append {
        headers: None,
        key: None,
        value: b"late",
        timestamp_us: Some(BASE + 10 * RECORDS + 7),
    };
    assert_eq!(wal.append_record("t", late).expect("append"), RECORDS);
    assert_eq!(
        r.next().expect("next").expect("the new record").offset,
        RECORDS
    );
    assert_eq!(
        r.seek_time(BASE + 10 * RECORDS + 7).expect("seek_time"),
        RECORDS
    );
}

/// Timestamps out of order inside and across extents: the answer is still the earliest
/// qualifying record, on a live handle (in-memory index).
#[test]
fn seek_time_with_out_of_order_timestamps_live() {
    let timestamps = out_of_order();
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).expect("open");
    for (i, &ts) in timestamps.iter().enumerate() {
        let v = value(i as u64);
        let rec = Append {
            headers: None,
            key: None,
            value: &v,
            timestamp_us: Some(ts),
        };
        wal.append_record("t", rec).expect("append");
    }
    check_seek_time(&wal, &timestamps, &targets_for(&timestamps));
}

/// The same data after close and reopen (sealed extents answer from their footer index, the
/// last extent from a scan).
#[test]
fn seek_time_with_out_of_order_timestamps_after_reopen() {
    let timestamps = out_of_order();
    let dir = tempdir();
    write(dir.path(), &timestamps);
    let wal = Wal::open_with(dir.path(), small()).expect("reopen");
    check_seek_time(&wal, &timestamps, &targets_for(&timestamps));
}

/// Minimal case: a full (sealed) first extent of late timestamps, then a last extent
/// (closed cleanly, so rebuilt by a scan on reopen) of earlier ones only. Offset 0 qualifies
/// for any target up to the late timestamp, before and after reopen.
#[test]
fn seek_time_finds_early_extent_when_later_extent_has_older_timestamps() {
    const LATE: u64 = BASE + 1_000_000;
    const LEN: u64 = 200;
    // Records of LEN bytes that fill the first 64 KiB extent, from the public format constants.
    let room = common::BLOCK
        - format::footer_bytes_max(common::BLOCK, small().index_interval_bytes)
        - format::BLOCK_HEADER_BYTES;
    let value = vec![0u8; LEN as usize];
    let one = tidelog::batch::BatchRecord {
        parts: format::FrameParts {
            key: None,
            headers: None,
            value: &value,
        },
        timestamp_us: 0,
    };
    let first_extent = room / tidelog::batch::frame_len(std::iter::once(one));

    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).expect("open");
    let w = wal.writer("t").expect("writer");
    let mut timestamps = Vec::new();
    for i in 0..first_extent + 50 {
        let ts = if i < first_extent { LATE + i } else { BASE + i };
        let v = stream_payload(5, i, LEN as usize);
        w.append_record(Append {
            headers: None,
            key: None,
            value: &v,
            timestamp_us: Some(ts),
        })
        .expect("append");
        timestamps.push(ts);
        let extents = wal.topic_info("t").expect("info").extents;
        assert_eq!(extents, if i < first_extent { 1 } else { 2 }, "record {i}");
    }
    let target = BASE + 500_000;
    let mut r = reader(&wal);
    assert_eq!(
        r.seek_time(target).expect("seek_time live"),
        0,
        "live handle"
    );
    wal.flush().expect("flush seals the full first extent");
    drop(r);
    drop(w);
    wal.close().expect("close");

    let wal = Wal::open_with(dir.path(), small()).expect("reopen");
    assert_eq!(wal.recovery_report().sealed_extents, 1);
    let mut r = reader(&wal);
    assert_eq!(
        r.seek_time(target).expect("seek_time after reopen"),
        0,
        "offset 0 has timestamp {LATE} >= {target}; any later position skips qualifying records"
    );
    assert_eq!(
        r.next().expect("next").expect("a record").timestamp_us,
        LATE
    );
}

#[test]
fn seek_time_on_an_empty_topic() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).expect("open");
    let _w = wal.writer("t").expect("create the topic");
    let mut r = reader(&wal);
    assert_eq!(r.seek_time(0).expect("seek_time"), 0);
    assert_eq!(r.seek_time(u64::MAX).expect("seek_time"), 0);
    assert!(r.next().expect("next").is_none());
    r.seek(0).expect("seek to first == next");
    assert!(matches!(
        r.seek(1),
        Err(Error::OffsetOutOfRange {
            first: 0,
            next: 0,
            ..
        })
    ));
}

/// Mostly increasing timestamps with jitter, late spikes and early dips.
fn out_of_order() -> Vec<u64> {
    (0..RECORDS)
        .map(|i| match i {
            _ if i % 97 == 50 => BASE + 10 * i + 20_000,
            _ if i % 89 == 3 => BASE - 1_000 + i,
            _ => BASE + 10 * i - (i % 4) * 25,
        })
        .collect()
}

fn targets_for(timestamps: &[u64]) -> Vec<u64> {
    let mut targets = vec![0, BASE - 1_000, BASE, u64::MAX];
    for &t in timestamps {
        targets.extend([t, t + 1, t.saturating_sub(1)]);
    }
    targets
}

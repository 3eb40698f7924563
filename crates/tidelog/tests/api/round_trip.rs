//! Goal: every record written comes back exactly (offset, key, value, timestamp), through
//! every read path, across block and file boundaries and across a reopen.
//!
//! Method: two topics are appended in turns in a small geometry (64 KiB blocks, 4 per file),
//! with values from empty to larger than a block, keys absent, empty and non-empty, explicit
//! and default timestamps, with and without headers, single appends and batches. A model of what was written is
//! compared with `Reader::next`, `Reader::next_record`, `RecordRef::to_record`, `Wal::read`
//! at every offset and `Reader::next_batch`, before and after close and reopen. Owned
//! records must stay readable after their reader and their `Wal` are gone.

use std::collections::BTreeSet;

use crate::common::{BLOCK, geometry, stream_payload, tempdir};
use tidelog::{
    Append, Config, Error, HeaderIter, Headers, Reader, ReaderOptions, Record, StartPosition, Wal,
};

const TOPICS: [&str; 2] = ["alpha", "beta"];
const RECORDS: u64 = 1_500;
/// Tolerance for engine-stamped timestamps in the bulk checks.
const CLOCK_SLACK_US: u64 = 1_000;
/// Values of this size need an extent of three 64 KiB blocks.
const BIG: usize = 150_000;

fn config() -> Config {
    geometry(4, BLOCK)
}

/// What one record should read back as.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expected {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    /// `None`: stamped by the engine at append time.
    timestamp_us: Option<u64>,
    headers: Headers,
}

fn expected(topic: usize, i: u64) -> Expected {
    let salt = topic as u64 + 1;
    let len = match i % 250 {
        17 => BIG,
        3 => 0,
        _ => (i * 37 % 1_300) as usize,
    };
    let key = match i % 3 {
        0 => None,
        1 => Some(Vec::new()),
        _ => Some(stream_payload(salt + 100, i, 1 + (i % 40) as usize)),
    };
    let timestamp_us = (i % 5 != 4).then_some(1_700_000_000_000_000 + i * 1_000 + topic as u64);
    let big_header = stream_payload(salt + 200, i, 600);
    let headers = match i % 7 {
        2 => Headers::from_pairs([
            ("trace", Some(&b"t"[..])),
            ("trace", None),
            ("", Some(&[][..])),
        ]),
        // Alone larger than the small-frame path takes.
        5 => Headers::from_pairs([("blob", Some(&big_header[..]))]),
        _ => Ok(Headers::new()),
    }
    .expect("valid headers");
    Expected {
        key,
        value: stream_payload(salt, i, len),
        timestamp_us,
        headers,
    }
}

fn as_append(e: &Expected) -> Append<'_> {
    Append {
        key: e.key.as_deref(),
        value: &e.value,
        timestamp_us: e.timestamp_us,
        headers: e.headers.block(),
    }
}

/// Appends both topics in turns, using every append entry point; returns the stamping window.
fn write_all(wal: &Wal) -> (u64, u64) {
    let before = tidelog::now_us();
    let writers: Vec<_> = TOPICS
        .iter()
        .map(|t| wal.writer(t).expect("writer"))
        .collect();
    let mut i = 0;
    while i < RECORDS {
        for (t, topic) in TOPICS.iter().enumerate() {
            match i % 11 {
                // A batch of up to 5 records with keys and timestamps.
                0 => {
                    let end = (i + 5).min(RECORDS);
                    let batch: Vec<Expected> = (i..end).map(|j| expected(t, j)).collect();
                    let appends: Vec<Append<'_>> = batch.iter().map(as_append).collect();
                    let range = writers[t].append_batch_records(&appends).expect("batch");
                    assert_eq!(range, i..end);
                }
                // The plain-value paths only when the record has neither key nor timestamp.
                _ => {
                    let e = expected(t, i);
                    let plain = e.key.is_none() && e.timestamp_us.is_none() && e.headers.is_empty();
                    let offset = match (plain, i % 2) {
                        (true, 0) => wal.append(topic, &e.value).expect("append"),
                        (true, _) => writers[t].append(&e.value).expect("append"),
                        (_, 0) => wal.append_record(topic, as_append(&e)).expect("append"),
                        _ => writers[t].append_record(as_append(&e)).expect("append"),
                    };
                    assert_eq!(offset, i);
                }
            }
        }
        i = if i % 11 == 0 {
            (i + 5).min(RECORDS)
        } else {
            i + 1
        };
    }
    for w in &writers {
        assert_eq!(w.next_offset(), RECORDS);
    }
    // The engine may stamp from its own calibrated clock; allow it a millisecond either way
    // here (the exact bound is `stamped_timestamps_lie_within_the_append_call`).
    (before - CLOCK_SLACK_US, tidelog::now_us() + CLOCK_SLACK_US)
}

fn check(
    topic: usize,
    offset: u64,
    (key, value, headers): (Option<&[u8]>, &[u8], HeaderIter<'_>),
    ts: u64,
    window: (u64, u64),
) {
    let e = expected(topic, offset);
    assert_eq!(key, e.key.as_deref(), "key of {}@{offset}", TOPICS[topic]);
    let want: Vec<_> = e
        .headers
        .block()
        .map(|b| b.iter().collect())
        .unwrap_or_default();
    assert_eq!(
        headers.collect::<Vec<_>>(),
        want,
        "headers of {}@{offset}",
        TOPICS[topic]
    );
    assert!(
        value == e.value,
        "value of {}@{offset} differs",
        TOPICS[topic]
    );
    match e.timestamp_us {
        Some(t) => assert_eq!(ts, t, "timestamp of {}@{offset}", TOPICS[topic]),
        None => assert!(
            (window.0..=window.1).contains(&ts),
            "stamped timestamp {ts} of {}@{offset} outside {window:?}",
            TOPICS[topic]
        ),
    }
}

fn earliest(wal: &Wal, topic: &str) -> Reader {
    wal.reader_with(
        topic,
        ReaderOptions::default().start(StartPosition::Earliest),
    )
    .expect("reader")
}

/// Reads everything through each path and compares with the model.
fn verify(wal: &Wal, window: (u64, u64)) {
    for (t, topic) in TOPICS.iter().enumerate() {
        let info = wal.topic_info(topic).expect("topic_info");
        assert_eq!((info.first_offset, info.next_offset), (0, RECORDS));
        assert!(info.extents > 4, "{topic} spans many extents: {info:?}");

        let mut reader = earliest(wal, topic);
        let mut n = 0;
        while let Some(rec) = reader.next().expect("next") {
            assert_eq!(rec.offset, n);
            check(
                t,
                n,
                (rec.key, rec.value, rec.headers()),
                rec.timestamp_us,
                window,
            );
            n += 1;
        }
        assert_eq!(n, RECORDS);
        assert!(reader.next().expect("next at the end").is_none());
        assert_eq!(reader.position(), RECORDS);
        assert_eq!(reader.lag(), 0);

        for offset in 0..RECORDS {
            let rec = wal.read(topic, offset).expect("read");
            assert_eq!(rec.offset(), offset);
            check(
                t,
                offset,
                (rec.key(), rec.value(), rec.headers()),
                rec.timestamp_us(),
                window,
            );
        }
    }
}

#[test]
fn round_trip_across_blocks_files_and_reopen() {
    let dir = tempdir();
    let window;
    {
        let wal = Wal::open_with(dir.path(), config()).expect("open");
        window = write_all(&wal);
        verify(&wal, window);
        wal.close().expect("close");
    }
    let wal = Wal::open_with(dir.path(), config()).expect("reopen");
    let report = wal.recovery_report();
    assert!(report.files >= 4, "several files in use: {report:?}");
    assert_eq!(
        (report.torn_tails, report.dropped_extents),
        (0, 0),
        "{report:?}"
    );
    verify(&wal, window);

    // Appends continue densely after the reopen, and read back.
    let e = expected(0, RECORDS);
    assert_eq!(
        wal.append_record(TOPICS[0], as_append(&e)).expect("append"),
        RECORDS
    );
    let rec = wal.read(TOPICS[0], RECORDS).expect("read");
    assert_eq!(rec.value(), e.value.as_slice());
}

#[test]
fn empty_key_is_distinct_from_no_key() {
    let dir = tempdir();
    let records = [
        Append {
            headers: None,
            key: None,
            value: b"",
            timestamp_us: Some(1),
        },
        Append {
            headers: None,
            key: Some(b""),
            value: b"",
            timestamp_us: Some(2),
        },
        Append {
            headers: None,
            key: Some(b"k"),
            value: b"",
            timestamp_us: Some(3),
        },
        Append {
            headers: None,
            key: Some(b""),
            value: b"v",
            timestamp_us: Some(4),
        },
        Append {
            headers: None,
            key: None,
            value: b"v",
            timestamp_us: Some(5),
        },
    ];
    {
        let wal = Wal::open_with(dir.path(), config()).expect("open");
        let w = wal.writer("keys").expect("writer");
        for r in &records[..2] {
            w.append_record(*r).expect("append");
        }
        assert_eq!(w.append_batch_records(&records[2..]).expect("batch"), 2..5);
        let mut reader = earliest(&wal, "keys");
        for (i, r) in records.iter().enumerate() {
            let got = reader.next().expect("next").expect("a record");
            assert_eq!(
                (got.key, got.value, got.timestamp_us),
                (r.key, r.value, r.timestamp_us.unwrap_or(0)),
                "offset {i}"
            );
        }
    }
    let wal = Wal::open_with(dir.path(), config()).expect("reopen");
    for (i, r) in records.iter().enumerate() {
        let got = wal.read("keys", i as u64).expect("read");
        assert_eq!(got.key(), r.key, "offset {i} after reopen");
        assert_eq!(got.value(), r.value);
        assert_eq!(Some(got.timestamp_us()), r.timestamp_us);
    }
}

#[test]
fn owned_records_outlive_reader_and_wal() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    let window = write_all(&wal);

    // Owned handles from every path, spread over all extents and files.
    let mut owned: Vec<(usize, Record)> = Vec::new();
    for (t, topic) in TOPICS.iter().enumerate() {
        let mut reader = earliest(&wal, topic);
        while let Some(rec) = reader.next_record().expect("next_record") {
            if rec.offset() % 7 == 0 || rec.value().len() == BIG {
                owned.push((t, rec));
            }
        }
        let mut reader = earliest(&wal, topic);
        while let Some(rec) = reader.next().expect("next") {
            if rec.offset % 13 == 1 {
                owned.push((t, rec.to_record()));
            }
        }
        drop(reader);
        for offset in (5..RECORDS).step_by(101) {
            owned.push((t, wal.read(topic, offset).expect("read")));
        }
    }
    let clones: Vec<(usize, Record)> = owned.iter().take(50).cloned().collect();
    wal.close().expect("close");
    // The handle is closed: new reads fail, records already held do not.
    assert!(matches!(wal.read(TOPICS[0], 0), Err(Error::Closed)));
    drop(wal);

    assert!(owned.len() > 500);
    for (t, rec) in owned.iter().chain(&clones) {
        check(
            *t,
            rec.offset(),
            (rec.key(), rec.value(), rec.headers()),
            rec.timestamp_us(),
            window,
        );
    }
    // The same records from another handle on the same directory.
    let wal = Wal::open_with(dir.path(), config()).expect("reopen");
    for (t, rec) in &owned {
        let again = wal.read(TOPICS[*t], rec.offset()).expect("read");
        assert_eq!(again.value(), rec.value());
    }
    drop(wal);
    for (t, rec) in &owned {
        check(
            *t,
            rec.offset(),
            (rec.key(), rec.value(), rec.headers()),
            rec.timestamp_us(),
            window,
        );
    }
}

#[test]
fn next_batch_respects_record_limit_and_covers_every_offset() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    let window = write_all(&wal);
    for (t, topic) in TOPICS.iter().enumerate() {
        let mut reader = earliest(&wal, topic);
        let mut seen = BTreeSet::new();
        let mut next = 0;
        let mut sizes = [1usize, 2, 7, 64, 3].iter().cycle();
        loop {
            let max = *sizes.next().expect("cycle");
            let batch = reader.next_batch(max, u64::MAX).expect("next_batch");
            if batch.is_empty() {
                break;
            }
            let available = (RECORDS - next) as usize;
            assert_eq!(
                batch.len(),
                max.min(available),
                "a batch is as long as allowed"
            );
            for rec in &batch {
                assert_eq!(rec.offset(), next);
                check(
                    t,
                    next,
                    (rec.key(), rec.value(), rec.headers()),
                    rec.timestamp_us(),
                    window,
                );
                seen.insert(next);
                next += 1;
            }
            assert_eq!(reader.position(), next);
        }
        assert_eq!(seen.len() as u64, RECORDS);
        assert!(
            reader
                .next_batch(10, u64::MAX)
                .expect("next_batch at the end")
                .is_empty()
        );
    }
}

/// `next_batch` documents: "up to `max_records` records totalling at most `max_bytes` of
/// values (at least one record when any is available)".
#[test]
fn next_batch_respects_byte_limit() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    let w = wal.writer("bytes").expect("writer");
    // Values of 100 bytes, and one value larger than every limit below.
    for i in 0..40u64 {
        let len = if i == 20 { 5_000 } else { 100 };
        w.append(&stream_payload(9, i, len)).expect("append");
    }
    for max_bytes in [0u64, 1, 99, 100, 150, 250, 1_000] {
        let mut reader = earliest(&wal, "bytes");
        let mut next = 0;
        loop {
            let batch = reader.next_batch(1_000, max_bytes).expect("next_batch");
            if batch.is_empty() {
                break;
            }
            let total: u64 = batch.iter().map(|r| r.value().len() as u64).sum();
            assert!(
                batch.len() == 1 || total <= max_bytes,
                "max_bytes {max_bytes}: {} records totalling {total} bytes at offset {next}",
                batch.len()
            );
            for rec in &batch {
                assert_eq!(rec.offset(), next);
                assert_eq!(
                    rec.value(),
                    stream_payload(9, next, rec.value().len()).as_slice()
                );
                next += 1;
            }
        }
        assert_eq!(next, 40, "max_bytes {max_bytes} still reads every record");
    }
}

/// `Append::timestamp_us: None` "stamps the append time", and `tidelog::now_us` gives
/// "microseconds since the Unix epoch, as tidelog stamps records": so a stamp read back lies
/// between `now_us()` read just before the append and just after it returns.
#[test]
fn stamped_timestamps_lie_within_the_append_call() {
    let dir = tempdir();
    let cfg = config().sync_interval_ms(5);
    let wal = Wal::open_with(dir.path(), cfg).expect("open");
    let w = wal.writer("stamps").expect("writer");
    let mut windows = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
    // Long enough for the background thread to tick many times.
    while std::time::Instant::now() < deadline && windows.len() < 20_000 {
        let before = tidelog::now_us();
        let offset = w.append(b"now").expect("append");
        windows.push((offset, before, tidelog::now_us()));
    }
    for (offset, before, after) in windows {
        let ts = wal.read("stamps", offset).expect("read").timestamp_us();
        assert!(
            before <= ts && ts <= after,
            "offset {offset}: stamped {ts}, outside [{before}, {after}] \
             ({} us early, {} us late)",
            before.saturating_sub(ts),
            ts.saturating_sub(after)
        );
    }
}

//! `Reader::scan` yields exactly what `Reader::next` yields, across extents and files, stops
//! where the visitor says, and keeps commit modes exact.

#![allow(clippy::unwrap_used)]

use crate::common;
use tidelog::{Append, CommitMode, Headers, ReaderOptions, StartPosition, Wal};

fn fill(wal: &Wal, n: u64) {
    let w = wal.writer("t").unwrap();
    for i in 0..n {
        let key = (i % 3 == 0).then(|| format!("k{i}").into_bytes());
        w.append_record(Append {
            headers: None,
            key: key.as_deref(),
            value: format!("value-{i}-{}", "x".repeat((i % 50) as usize)).as_bytes(),
            timestamp_us: Some(1_000 + i),
        })
        .unwrap();
    }
}

type Row = (u64, u64, Option<Vec<u8>>, Vec<u8>);

fn scanned(wal: &Wal, options: ReaderOptions, chunk: usize) -> Vec<Row> {
    let mut reader = wal.reader_with("t", options).unwrap();
    let mut rows = Vec::new();
    loop {
        let n = reader
            .scan(chunk, |r| {
                rows.push((
                    r.offset,
                    r.timestamp_us,
                    r.key.map(<[u8]>::to_vec),
                    r.value.to_vec(),
                ));
                true
            })
            .unwrap();
        if n == 0 {
            break;
        }
        assert!(n <= chunk);
    }
    if let Some(last) = rows.last() {
        assert_eq!(reader.position(), last.0 + 1);
    }
    rows
}

#[test]
fn scan_matches_next_across_extents_and_files() {
    let dir = common::tempdir();
    let wal = Wal::open_with(dir.path(), common::small()).unwrap();
    fill(&wal, 20_000); // many 64 KiB extents, several files
    assert!(wal.topic_info("t").unwrap().extents > 10);

    let mut reader = wal.reader_with("t", ReaderOptions::default()).unwrap();
    let mut expected = Vec::new();
    while let Some(r) = reader.next().unwrap() {
        expected.push((
            r.offset,
            r.timestamp_us,
            r.key.map(<[u8]>::to_vec),
            r.value.to_vec(),
        ));
    }
    assert_eq!(expected.len(), 20_000);
    for chunk in [1, 7, 1000, usize::MAX] {
        assert_eq!(
            scanned(&wal, ReaderOptions::default(), chunk),
            expected,
            "chunk {chunk}"
        );
    }
}

/// Batches of 1 to 97 records (keys on every third, headers on every fourth).
fn fill_batches(wal: &Wal, n: u64) {
    let headers = Headers::from_pairs([("h", Some(&b"v"[..])), ("n", None)]).unwrap();
    let values: Vec<(Option<Vec<u8>>, Vec<u8>)> = (0..n)
        .map(|i| {
            let key = (i % 3 == 0).then(|| format!("k{i}").into_bytes());
            (
                key,
                format!("value-{i}-{}", "y".repeat((i % 61) as usize)).into_bytes(),
            )
        })
        .collect();
    let mut i = 0;
    while i < n {
        let len = (1 + (i * 7919) % 97).min(n - i);
        let batch: Vec<Append<'_>> = (i..i + len)
            .map(|j| {
                let (key, value) = &values[j as usize];
                Append {
                    headers: if j % 4 == 0 { headers.block() } else { None },
                    key: key.as_deref(),
                    value,
                    timestamp_us: Some(5_000 + j / 2),
                }
            })
            .collect();
        wal.append_batch_records("t", &batch).unwrap();
        i += len;
    }
}

type FullRow = (u64, u64, Option<Vec<u8>>, Vec<u8>, Option<Vec<u8>>);

fn full_row(r: &tidelog::RecordRef<'_>) -> FullRow {
    (
        r.offset,
        r.timestamp_us,
        r.key.map(<[u8]>::to_vec),
        r.value.to_vec(),
        r.headers.map(|h| h.as_bytes().to_vec()),
    )
}

#[test]
fn scan_matches_next_through_batch_frames_from_any_start_and_chunk() {
    let dir = common::tempdir();
    let wal = Wal::open_with(dir.path(), common::small()).unwrap();
    fill_batches(&wal, 12_000);
    assert!(wal.topic_info("t").unwrap().extents > 5);
    let mut reader = wal.reader_with("t", ReaderOptions::default()).unwrap();
    let mut expected = Vec::new();
    while let Some(r) = reader.next().unwrap() {
        expected.push(full_row(&r));
    }
    assert_eq!(expected.len(), 12_000);
    // Starts inside frames and at their first records; chunks that end inside frames.
    for (start, chunk) in [
        (0, usize::MAX),
        (0, 1),
        (0, 7),
        (1, 1000),
        (4_999, 13),
        (11_998, 5),
    ] {
        let options = ReaderOptions::default().start(StartPosition::Offset(start));
        let mut reader = wal.reader_with("t", options).unwrap();
        let mut rows = Vec::new();
        while reader
            .scan(chunk, |r| {
                rows.push(full_row(r));
                true
            })
            .unwrap()
            > 0
        {}
        assert_eq!(
            rows,
            expected[start as usize..],
            "start {start}, chunk {chunk}"
        );
        assert_eq!(reader.position(), 12_000);
    }
}

#[test]
fn a_refused_record_is_not_consumed() {
    let dir = common::tempdir();
    let wal = Wal::open_with(dir.path(), common::small()).unwrap();
    fill(&wal, 100);
    let mut reader = wal
        .reader_with(
            "t",
            ReaderOptions::default().start(StartPosition::Offset(10)),
        )
        .unwrap();
    let n = reader.scan(usize::MAX, |r| r.offset < 42).unwrap();
    assert_eq!(n, 32);
    assert_eq!(reader.position(), 42);
    assert_eq!(reader.next().unwrap().unwrap().offset, 42);
}

#[test]
fn scan_keeps_auto_commit_points() {
    let dir = common::tempdir();
    let wal = Wal::open_with(dir.path(), common::small()).unwrap();
    fill(&wal, 100);
    let options = ReaderOptions::group("g").commit(CommitMode::AutoEvery(10));
    let mut reader = wal.reader_with("t", options).unwrap();
    assert_eq!(reader.scan(25, |_| true).unwrap(), 25);
    // AutoEvery(10) commits what was returned before the 11th and 21st reads.
    assert_eq!(reader.committed(), Some(20));
    drop(reader);
    let options = ReaderOptions::group("g");
    let rows = scanned(&wal, options, 1000);
    assert_eq!(rows.first().map(|r| r.0), Some(20));
}

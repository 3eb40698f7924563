//! Both record formats in one directory: what a build writing version-1 frames left reads
//! whole after a reopen that writes batch frames, which goes on in the same extent and then
//! in files of its own version; every record of either is found by offset, by time and by a
//! scan, before and after another reopen; `verify`-style reads check every checksum.

use std::collections::BTreeSet;

use crate::common::{data_files, payload, small, tempdir};
use tidelog::format::{self, FileHeader};
use tidelog::{Append, Headers, ReaderOptions, RecordFormat, StartPosition, Wal};

const TOPIC: &str = "mixed";

/// Record `i`: a value of 200 to 1,200 bytes, a key on every third, headers on every fifth,
/// timestamps rising by 10 µs.
fn record(i: u64) -> (Option<Vec<u8>>, Vec<u8>, Option<Headers>, u64) {
    let key = i.is_multiple_of(3).then(|| format!("key-{i}").into_bytes());
    let headers = i.is_multiple_of(5).then(|| {
        Headers::from_pairs([("n", Some(i.to_string().as_bytes())), ("empty", None)])
            .expect("valid headers")
    });
    (
        key,
        payload(i, 200 + (i * 97 % 1000) as usize),
        headers,
        1_000 + 10 * i,
    )
}

/// Appends records `from..to`: singles and batches of up to 40 in turn.
fn append(wal: &Wal, from: u64, to: u64) {
    let mut i = from;
    while i < to {
        let n = if i.is_multiple_of(2) {
            1
        } else {
            (i % 40 + 1).min(to - i)
        };
        let recs: Vec<_> = (i..i + n).map(record).collect();
        let appends: Vec<Append<'_>> = recs
            .iter()
            .map(|(k, v, h, ts)| Append {
                key: k.as_deref(),
                value: v,
                timestamp_us: Some(*ts),
                headers: h.as_ref().and_then(Headers::block),
            })
            .collect();
        let got = wal.append_batch_records(TOPIC, &appends).expect("append");
        assert_eq!(got, i..i + n);
        i += n;
    }
}

fn check_record(got: &tidelog::Record, i: u64) {
    let (k, v, h, ts) = record(i);
    assert_eq!(got.offset(), i);
    assert_eq!(got.key(), k.as_deref(), "key of {i}");
    assert!(got.value() == v.as_slice(), "value of {i}");
    assert_eq!(got.timestamp_us(), ts, "timestamp of {i}");
    let want: Vec<(String, Option<Vec<u8>>)> = h
        .iter()
        .flat_map(|h| h.block().into_iter().flat_map(|b| b.iter()))
        .map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec)))
        .collect();
    let have: Vec<(String, Option<Vec<u8>>)> = got
        .headers()
        .map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(have, want, "headers of {i}");
}

/// Every record `0..next` by a checked scan, by offset and by time.
fn check_all(wal: &Wal, next: u64) {
    let mut reader = wal
        .reader_with(
            TOPIC,
            ReaderOptions {
                start: StartPosition::Earliest,
                ..ReaderOptions::default()
            },
        )
        .expect("reader");
    for i in 0..next {
        let got = reader.next_record().expect("read").expect("a record");
        check_record(&got, i);
    }
    assert!(reader.next_record().expect("end").is_none());
    for i in (0..next).step_by(7) {
        check_record(&wal.read(TOPIC, i).expect("read at"), i);
        let mut r = wal
            .reader_with(TOPIC, ReaderOptions::default())
            .expect("reader");
        r.seek(i).expect("seek");
        check_record(&r.next_record().expect("read").expect("seeked"), i);
        let mut r = wal
            .reader_with(TOPIC, ReaderOptions::default())
            .expect("reader");
        assert_eq!(r.seek_time(record(i).3).expect("seek_time"), i);
    }
}

/// The versions of the data files in `dir`.
fn file_versions(dir: &std::path::Path) -> BTreeSet<u32> {
    data_files(dir)
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).expect("read");
            FileHeader::decode(&bytes).expect("file header").version
        })
        .collect()
}

#[test]
fn version_1_frames_read_whole_beside_batch_frames() {
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), small().record_format(RecordFormat::V1))
            .expect("open writing version 1");
        append(&wal, 0, 300);
        check_all(&wal, 300);
        wal.close().expect("close");
    }
    assert_eq!(
        file_versions(dir.path()),
        BTreeSet::from([format::VERSION_ABSOLUTE])
    );
    {
        let wal = Wal::open_with(dir.path(), small()).expect("open writing batch frames");
        check_all(&wal, 300);
        // Enough for new data files: those are of version 3.
        append(&wal, 300, 1_500);
        check_all(&wal, 1_500);
        wal.close().expect("close");
    }
    assert!(
        file_versions(dir.path()).contains(&format::VERSION_BATCHED),
        "{:?}",
        file_versions(dir.path())
    );
    // Recovery scans both kinds of extent.
    let wal = Wal::open_with(dir.path(), small()).expect("reopen");
    check_all(&wal, 1_500);
    append(&wal, 1_500, 1_600);
    check_all(&wal, 1_600);
}

#[test]
fn a_directory_of_batch_frames_reopens_and_reads_as_written() {
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), small()).expect("open");
        append(&wal, 0, 800);
        check_all(&wal, 800);
        wal.flush().expect("flush");
    }
    assert_eq!(
        file_versions(dir.path()),
        BTreeSet::from([format::VERSION_BATCHED])
    );
    let wal = Wal::open_with(dir.path(), small()).expect("reopen");
    check_all(&wal, 800);
}

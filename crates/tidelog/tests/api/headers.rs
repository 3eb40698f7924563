//! Goal: record headers come back exactly (order, repeated keys, null and empty values)
//! through every write path: the mapping, `Always`'s `pwrite`, async appends, the ring
//! backend's journal (replayed at open), staged parts published by a commit.
//!
//! Method: each path appends records whose headers depend on the offset, some with none;
//! every record is read back with `Reader::next` and `Wal::read` before and after a reopen.

use crate::common::{BLOCK, copy_dir, frames, geometry, tempdir, zero_range};
use tidelog::stage::StagedWriter;
use tidelog::{
    Append, Config, Durability, Error, Headers, ReaderOptions, RingBackend, RingConfig,
    StartPosition, Wal,
};

const N: u64 = 60;

type Pairs = Vec<(String, Option<Vec<u8>>)>;

fn pairs(offset: u64) -> Pairs {
    match offset % 4 {
        0 => Vec::new(),
        1 => vec![("id".into(), Some(offset.to_le_bytes().to_vec()))],
        2 => vec![
            ("k".into(), Some(Vec::new())),
            ("k".into(), None),
            ("ü".into(), Some(vec![0xFF; 700])),
        ],
        _ => (0..20)
            .map(|i| (format!("h{i}"), Some(vec![i as u8; i])))
            .collect(),
    }
}

fn headers(offset: u64) -> Headers {
    Headers::from_pairs(
        pairs(offset)
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref())),
    )
    .expect("valid headers")
}

fn value(offset: u64) -> Vec<u8> {
    format!("value {offset}").into_bytes()
}

fn owned(it: tidelog::HeaderIter<'_>) -> Pairs {
    it.map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec)))
        .collect()
}

fn check(wal: &Wal, topic: &str) {
    let mut reader = wal
        .reader_with(
            topic,
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .expect("reader");
    let mut n = 0;
    while let Some(r) = reader.next().expect("next") {
        assert_eq!(r.offset, n);
        assert_eq!(r.value, value(n));
        assert_eq!(owned(r.headers()), pairs(n), "{topic}@{n}");
        assert_eq!(r.headers.is_none(), pairs(n).is_empty());
        n += 1;
    }
    assert_eq!(n, N, "{topic}: every record");
    for offset in (0..N).step_by(7) {
        let r = wal.read(topic, offset).expect("read");
        assert_eq!(
            owned(r.headers()),
            pairs(offset),
            "{topic}@{offset} by read"
        );
    }
}

/// Appends `N` records to `topic`: single appends, then batches of 5, then async appends.
fn append_all(wal: &Wal, topic: &str, durability: Durability) {
    let w = wal
        .writer(topic)
        .expect("writer")
        .with_durability(durability);
    let hs: Vec<Headers> = (0..N).map(headers).collect();
    let vs: Vec<Vec<u8>> = (0..N).map(value).collect();
    let rec = |o: u64| Append {
        key: None,
        value: &vs[o as usize],
        timestamp_us: None,
        headers: hs[o as usize].block(),
    };
    for o in 0..20 {
        assert_eq!(w.append_record(rec(o)).expect("append"), o);
    }
    for start in (20..40).step_by(5) {
        let batch: Vec<Append<'_>> = (start..start + 5).map(rec).collect();
        assert_eq!(
            w.append_batch_records(&batch).expect("batch"),
            start..start + 5
        );
    }
    for o in 40..N {
        let h = w.append_batch_async(&[rec(o)]).expect("async");
        h.wait().expect("durable");
    }
}

#[test]
fn headers_survive_every_write_path_and_a_reopen() {
    let dir = tempdir();
    let config = || geometry(4, BLOCK);
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    append_all(&wal, "mapped", Durability::Interval);
    append_all(&wal, "written", Durability::Always);
    check(&wal, "mapped");
    check(&wal, "written");

    // Staged: one part, committed.
    let mut part = StagedWriter::create(dir.path(), "job", "p0").expect("part");
    let hs: Vec<Headers> = (0..N).map(headers).collect();
    let vs: Vec<Vec<u8>> = (0..N).map(value).collect();
    let records: Vec<Append<'_>> = (0..N as usize)
        .map(|i| Append {
            key: Some(b"k"),
            value: &vs[i],
            timestamp_us: Some(5),
            headers: hs[i].block(),
        })
        .collect();
    part.append("staged", &records).expect("stage");
    part.finish().expect("finish");
    wal.commit_staged("job", &["p0"]).expect("commit");
    check(&wal, "staged");
    wal.close().expect("close");

    let wal = Wal::open_with(dir.path(), config()).expect("reopen");
    for topic in ["mapped", "written", "staged"] {
        check(&wal, topic);
    }
}

#[test]
fn headers_survive_the_ring_journal() {
    let dir = tempdir();
    let image = tempdir();
    let config = || -> Config {
        geometry(8, BLOCK)
            .sync_interval_ms(3_600_000)
            .ring(RingBackend::default().ring(RingConfig::default().capacity_bytes(8 << 20)))
    };
    {
        let wal = Wal::open_with(dir.path(), config()).expect("open");
        append_all(&wal, "ringed", Durability::Always);
        check(&wal, "ringed");
        // A copy taken while the handle is open, as a crash leaves it: the data files may
        // lack the records (no flush for an hour), the ring holds them.
        copy_dir(dir.path(), image.path());
        wal.close().expect("close");
    }
    // The data files of the image lose the records (never synced there), so the open
    // must take every one of them, headers included, from the ring's journal.
    let lost = frames(image.path());
    assert!(!lost.is_empty());
    for f in &lost {
        zero_range(&f.file, f.pos, f.end());
    }
    let wal = Wal::open_with(image.path(), config()).expect("open the image");
    let report = wal.recovery_report();
    assert_eq!(report.ring_records_replayed, N, "{report:?}");
    check(&wal, "ringed");
}

#[test]
fn headers_count_toward_the_record_limit() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), geometry(4, BLOCK).max_record_bytes(1_000)).expect("open");
    let big = vec![1u8; 1_000];
    let h = Headers::from_pairs([("b", Some(&big[..]))]).expect("valid");
    let rec = Append {
        key: None,
        value: b"v",
        timestamp_us: None,
        headers: h.block(),
    };
    match wal.append_record("t", rec) {
        Err(Error::LimitExceeded { limit, .. }) => assert_eq!(limit, "max_record_bytes"),
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    assert!(
        Headers::new()
            .push(&"k".repeat(tidelog::HEADER_KEY_MAX + 1), None)
            .is_err()
    );
}

//! Goal: named consumer groups resume where their commit mode promises, independently of each
//! other, and start positions and commit errors behave as documented.
//!
//! Method: a topic of 100 records is read by groups in each commit mode; the `Wal` is closed
//! (or dropped) and reopened, and a new reader of the group must start exactly at the
//! promised offset: the explicit commit, the last automatic commit of `AutoEvery(n)` (which
//! commits what earlier reads returned, at the next read), or just after the last record read
//! under `Strict`. Start positions, commit bounds, anonymous readers and the group listing
//! of `topic_info` are checked against the documentation in `reader.rs`.

use std::path::Path;

use crate::common::{small, tempdir};
use tidelog::{CommitMode, Error, Reader, ReaderOptions, StartPosition, Wal};

const RECORDS: u64 = 100;

fn value(i: u64) -> Vec<u8> {
    format!("record-{i}").into_bytes()
}

/// A directory whose topic "orders" holds offsets 0..100.
fn filled() -> tempfile::TempDir {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).expect("open");
    for i in 0..RECORDS {
        assert_eq!(wal.append("orders", &value(i)).expect("append"), i);
    }
    wal.close().expect("close");
    dir
}

fn open(dir: &Path) -> Wal {
    Wal::open_with(dir, small()).expect("open")
}

fn group(wal: &Wal, name: &str, commit: CommitMode) -> Reader {
    wal.reader_with("orders", ReaderOptions::group(name).commit(commit))
        .expect("group reader")
}

/// Reads `n` records, checking each; returns the offset after the last.
fn read_n(reader: &mut Reader, n: u64) -> u64 {
    for _ in 0..n {
        let rec = reader.next().expect("next").expect("a record");
        assert_eq!(rec.value, value(rec.offset));
    }
    reader.position()
}

/// The offset a fresh reader of `name` starts at, in a new session.
fn resumes_at(dir: &Path, name: &str) -> u64 {
    let wal = open(dir);
    let mut reader = wal.reader("orders", name).expect("reader");
    let start = reader.position();
    if start < RECORDS {
        let rec = reader.next().expect("next").expect("a record");
        assert_eq!(rec.offset, start);
        assert_eq!(rec.value, value(start));
    }
    start
}

#[test]
fn explicit_commit_persists_across_reopen() {
    let dir = filled();
    {
        let wal = open(dir.path());
        let mut reader = wal.reader("orders", "billing").expect("reader");
        assert_eq!(reader.committed(), None, "a new group has no commit");
        assert_eq!(reader.position(), 0, "and starts at the earliest offset");
        assert_eq!(read_n(&mut reader, 15), 15);
        reader.commit().expect("commit");
        assert_eq!(reader.committed(), Some(15));
        // Read further without committing: lost on reopen, by design.
        read_n(&mut reader, 10);
        wal.close().expect("close");
    }
    assert_eq!(resumes_at(dir.path(), "billing"), 15);

    // commit_offset may name any offset up to the next one, including the end.
    {
        let wal = open(dir.path());
        let mut reader = wal.reader("orders", "billing").expect("reader");
        reader.commit_offset(RECORDS).expect("commit the end");
        assert_eq!(reader.committed(), Some(RECORDS));
    }
    assert_eq!(resumes_at(dir.path(), "billing"), RECORDS);
    {
        let wal = open(dir.path());
        let mut reader = wal.reader("orders", "billing").expect("reader");
        assert!(
            reader.next().expect("next").is_none(),
            "nothing left for the group"
        );
        reader.commit_offset(42).expect("commit an earlier offset");
    }
    assert_eq!(resumes_at(dir.path(), "billing"), 42);
}

#[test]
fn many_commits_keep_the_newest() {
    let dir = filled();
    {
        let wal = open(dir.path());
        let mut reader = wal.reader("orders", "g").expect("reader");
        // Enough commits to reuse each of the cursor file's two slots many times.
        for o in 1..=RECORDS {
            read_n(&mut reader, 1);
            reader.commit().expect("commit");
            assert_eq!(reader.committed(), Some(o));
        }
    }
    assert_eq!(resumes_at(dir.path(), "g"), RECORDS);
    {
        let wal = open(dir.path());
        let mut reader = wal.reader("orders", "g").expect("reader");
        for o in [3, 4, 77] {
            reader.commit_offset(o).expect("commit");
        }
    }
    assert_eq!(resumes_at(dir.path(), "g"), 77);
}

/// `AutoEvery(n)`: "every N records, the next read first commits what was returned before
/// it". After k reads the last commit is at n * floor((k - 1) / n).
#[test]
fn auto_every_is_at_least_once() {
    let dir = filled();
    for (k, expect) in [(25u64, 20u64), (20, 10), (10, 0), (11, 10), (1, 0)] {
        let name = format!("auto-{k}");
        {
            let wal = open(dir.path());
            let mut reader = group(&wal, &name, CommitMode::AutoEvery(10));
            assert_eq!(read_n(&mut reader, k), k);
            let committed = reader.committed();
            assert_eq!(committed.unwrap_or(0), expect, "after {k} reads");
            assert!(
                k - committed.unwrap_or(0) <= 10,
                "replays at most n records"
            );
            // Dropped without commit or close: only automatic commits count.
            drop(reader);
        }
        assert_eq!(resumes_at(dir.path(), &name), expect, "after {k} reads");
    }

    // A read that finds nothing still commits what was returned before it.
    {
        let wal = open(dir.path());
        let mut reader = wal
            .reader_with(
                "orders",
                ReaderOptions::group("auto-end")
                    .start(StartPosition::Offset(90))
                    .commit(CommitMode::AutoEvery(10)),
            )
            .expect("reader");
        read_n(&mut reader, 10);
        assert!(reader.next().expect("next").is_none());
        assert_eq!(reader.committed(), Some(RECORDS));
    }
    assert_eq!(resumes_at(dir.path(), "auto-end"), RECORDS);

    // A resumed group keeps the same cadence from its resumed position.
    {
        let wal = open(dir.path());
        let mut reader = group(&wal, "auto-25", CommitMode::AutoEvery(10));
        assert_eq!(reader.position(), 20);
        read_n(&mut reader, 15);
        assert_eq!(reader.committed(), Some(30));
    }
    assert_eq!(resumes_at(dir.path(), "auto-25"), 30);
}

/// `Strict`: "commit each record's successor before returning it".
#[test]
fn strict_resumes_after_the_last_record_read() {
    let dir = filled();
    {
        let wal = open(dir.path());
        let mut reader = group(&wal, "strict", CommitMode::Strict);
        for i in 0..7 {
            let rec = reader.next().expect("next").expect("a record");
            assert_eq!(rec.offset, i);
            assert_eq!(
                reader.committed(),
                Some(i + 1),
                "committed before returning"
            );
        }
        let rec = reader
            .next_record()
            .expect("next_record")
            .expect("a record");
        assert_eq!(rec.offset(), 7);
        let batch = reader.next_batch(5, u64::MAX).expect("next_batch");
        assert_eq!(batch.len(), 5);
        assert_eq!(reader.committed(), Some(13));
    }
    assert_eq!(resumes_at(dir.path(), "strict"), 13);
}

#[test]
fn groups_are_independent() {
    let dir = filled();
    {
        let wal = open(dir.path());
        let mut a = wal.reader("orders", "alpha").expect("reader");
        let mut b = wal.reader("orders", "beta").expect("reader");
        read_n(&mut a, 10);
        a.commit().expect("commit");
        read_n(&mut b, 30);
        b.commit().expect("commit");
        assert_eq!(a.committed(), Some(10));
        assert_eq!(b.committed(), Some(30));
        read_n(&mut a, 5);
        a.commit().expect("commit");
        assert_eq!(b.committed(), Some(30), "beta is not moved by alpha");

        // A second reader of a group shares its cursor; another topic's group is separate.
        let a2 = wal.reader("orders", "alpha").expect("reader");
        assert_eq!(a2.committed(), Some(15));
        assert_eq!(a2.position(), 15);
        wal.append("other", b"x").expect("append");
        let other = wal.reader("other", "alpha").expect("reader");
        assert_eq!(other.committed(), None);
    }
    assert_eq!(resumes_at(dir.path(), "alpha"), 15);
    assert_eq!(resumes_at(dir.path(), "beta"), 30);
    assert_eq!(
        resumes_at(dir.path(), "gamma"),
        0,
        "a group that never committed"
    );

    let wal = open(dir.path());
    let info = wal.topic_info("orders").expect("info");
    assert_eq!(
        info.groups,
        ["alpha", "beta"],
        "groups with a commit, sorted"
    );
    assert!(wal.topic_info("other").expect("info").groups.is_empty());
}

#[test]
fn start_positions() {
    let dir = filled();
    let wal = open(dir.path());
    let mut g = wal.reader("orders", "g").expect("reader");
    read_n(&mut g, 12);
    g.commit().expect("commit");

    let start = |start: StartPosition| {
        wal.reader_with("orders", ReaderOptions::group("g").start(start))
            .map(|r| r.position())
    };
    assert_eq!(start(StartPosition::Committed).expect("committed"), 12);
    assert_eq!(start(StartPosition::Earliest).expect("earliest"), 0);
    assert_eq!(start(StartPosition::Latest).expect("latest"), RECORDS);
    assert_eq!(start(StartPosition::Offset(57)).expect("offset"), 57);
    assert_eq!(
        start(StartPosition::Offset(RECORDS)).expect("offset at the end"),
        RECORDS
    );
    match start(StartPosition::Offset(RECORDS + 1)) {
        Err(Error::OffsetOutOfRange {
            topic,
            offset,
            first,
            next,
        }) => {
            assert_eq!(
                (topic.as_str(), offset, first, next),
                ("orders", RECORDS + 1, 0, RECORDS)
            );
        }
        other => panic!("expected OffsetOutOfRange, got {other:?}"),
    }
    // Anonymous readers: Committed means earliest.
    let anon = wal
        .reader_with("orders", ReaderOptions::default())
        .expect("reader");
    assert_eq!(anon.position(), 0);

    // Latest sees only what is appended afterwards.
    let mut latest = wal
        .reader_with(
            "orders",
            ReaderOptions::group("late").start(StartPosition::Latest),
        )
        .expect("reader");
    assert!(latest.next().expect("next").is_none());
    assert_eq!(latest.lag(), 0);
    wal.append("orders", b"new").expect("append");
    assert_eq!(latest.lag(), 1);
    let rec = latest.next().expect("next").expect("the new record");
    assert_eq!((rec.offset, rec.value), (RECORDS, &b"new"[..]));

    // Offset(n) reads from n.
    let mut at = wal
        .reader_with(
            "orders",
            ReaderOptions::default().start(StartPosition::Offset(57)),
        )
        .expect("reader");
    assert_eq!(at.next().expect("next").expect("a record").value, value(57));
}

#[test]
fn commit_errors() {
    let dir = filled();
    let wal = open(dir.path());
    let mut g = wal.reader("orders", "g").expect("reader");
    match g.commit_offset(RECORDS + 1) {
        Err(Error::OffsetOutOfRange {
            offset,
            first,
            next,
            ..
        }) => {
            assert_eq!((offset, first, next), (RECORDS + 1, 0, RECORDS));
        }
        other => panic!("expected OffsetOutOfRange, got {other:?}"),
    }
    assert!(matches!(
        g.commit_offset(u64::MAX),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert_eq!(g.committed(), None, "a refused commit changes nothing");

    let mut anon = wal
        .reader_with("orders", ReaderOptions::default())
        .expect("reader");
    read_n(&mut anon, 3);
    assert!(matches!(
        anon.commit(),
        Err(Error::InvalidArgument { name: "group", .. })
    ));
    assert!(matches!(
        anon.commit_offset(1),
        Err(Error::InvalidArgument { name: "group", .. })
    ));
    assert_eq!(anon.committed(), None);

    // Automatic commit modes need a group and a positive count.
    for mode in [CommitMode::Strict, CommitMode::AutoEvery(5)] {
        assert!(matches!(
            wal.reader_with("orders", ReaderOptions::default().commit(mode)),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert!(matches!(
        wal.reader_with(
            "orders",
            ReaderOptions::group("g").commit(CommitMode::AutoEvery(0))
        ),
        Err(Error::InvalidArgument { .. })
    ));
    drop(g);
    drop(wal);
    let wal = open(dir.path());
    assert!(
        wal.topic_info("orders").expect("info").groups.is_empty(),
        "no commit happened"
    );
}

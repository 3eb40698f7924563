//! Goal: a directory with thousands of topics keeps every one of them across close and reopen,
//! and `max_topics` is enforced.
//!
//! Method: 5,000 topics get a few records each in a small geometry (16 KiB blocks, 64 blocks
//! per file, so the topics spread over about 80 files); after close and reopen `topics()` lists
//! them all and every record reads back. A tiny `max_topics` is then broken, before and after a
//! reopen.

use crate::common::{stream_payload, tempdir};
use tidelog::{Config, Durability, Error, ReaderOptions, StartPosition, Wal};

const TOPICS: u64 = 5_000;
const BLOCK: u64 = 16 * 1024;

fn config() -> Config {
    Config::default()
        .file_size_bytes(4096 + 64 * BLOCK)
        .block_size_bytes(BLOCK)
        .durability(Durability::Never)
}

fn name(i: u64) -> String {
    format!("topic-{i:05}")
}

/// Records per topic: 1 to 4, so counts differ between neighbours.
fn records_of(i: u64) -> u64 {
    1 + i % 4
}

fn value(i: u64, r: u64) -> Vec<u8> {
    stream_payload(i, r, (i * 7 + r * 13) as usize % 200)
}

#[test]
fn five_thousand_topics_survive_reopen() {
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), config()).expect("open");
        // Round-robin over topics, so neighbouring blocks belong to different topics.
        for r in 0..4 {
            for i in 0..TOPICS {
                if r < records_of(i) {
                    let offset = wal.append(&name(i), &value(i, r)).expect("append");
                    assert_eq!(offset, r, "topic {i}");
                }
            }
        }
        assert_eq!(wal.topics().len() as u64, TOPICS);
        wal.close().expect("close");
    }

    let wal = Wal::open_with(dir.path(), config()).expect("reopen");
    let report = wal.recovery_report();
    assert!(
        report.files > 1,
        "the topics span several files: {report:?}"
    );
    assert_eq!(report.extents, TOPICS, "{report:?}");
    let topics = wal.topics();
    let expected: Vec<String> = (0..TOPICS).map(name).collect();
    assert_eq!(topics, expected, "topics() lists every topic, sorted");
    for i in 0..TOPICS {
        let info = wal.topic_info(&name(i)).expect("topic_info");
        assert_eq!(
            (info.first_offset, info.next_offset),
            (0, records_of(i)),
            "topic {i}"
        );
        let mut reader = wal
            .reader_with(
                &name(i),
                ReaderOptions::default().start(StartPosition::Earliest),
            )
            .expect("reader");
        let mut n = 0;
        while let Some(rec) = reader.next().expect("next") {
            assert_eq!(rec.offset, n);
            assert_eq!(rec.value, value(i, n), "topic {i} offset {n}");
            n += 1;
        }
        assert_eq!(n, records_of(i), "topic {i}");
    }

    // Appends continue on every topic after the reopen.
    for i in (0..TOPICS).step_by(97) {
        assert_eq!(
            wal.append(&name(i), b"more").expect("append"),
            records_of(i)
        );
    }
}

#[test]
fn max_topics_is_enforced_across_reopen() {
    let dir = tempdir();
    let cfg = config().max_topics(3);
    {
        let wal = Wal::open_with(dir.path(), cfg.clone()).expect("open");
        for t in ["a", "b", "c"] {
            wal.append(t, t.as_bytes())
                .expect("append within the limit");
        }
        match wal.append("d", b"d") {
            Err(Error::LimitExceeded { limit, value, max }) => {
                assert_eq!((limit, value, max), ("max_topics", 4, 3));
            }
            other => panic!("expected LimitExceeded(max_topics), got {other:?}"),
        }
        assert!(matches!(
            wal.writer("e"),
            Err(Error::LimitExceeded {
                limit: "max_topics",
                ..
            })
        ));
        // Existing topics still take records, and the refused ones were not created.
        assert_eq!(
            wal.append("a", b"again")
                .expect("append to an existing topic"),
            1
        );
        assert_eq!(wal.topics(), ["a", "b", "c"]);
        assert!(matches!(
            wal.topic_info("d"),
            Err(Error::UnknownTopic { .. })
        ));
    }
    let wal = Wal::open_with(dir.path(), cfg).expect("reopen");
    assert_eq!(wal.topics(), ["a", "b", "c"]);
    assert!(matches!(
        wal.append("d", b"d"),
        Err(Error::LimitExceeded {
            limit: "max_topics",
            value: 4,
            max: 3
        })
    ));
}

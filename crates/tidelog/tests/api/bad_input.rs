//! Goal: every invalid name, size, configuration, topic, offset and use after close is
//! refused with the documented error variant (naming the rule or limit), never a panic, and a
//! refused call changes nothing.
//!
//! Method: each kind of bad input is tried against a small log; the error variant and its
//! fields are matched exactly, and afterwards the log must still accept valid calls with
//! offsets unchanged by the refused ones.

use crate::common::{small, tempdir};
use tidelog::{
    Append, CommitMode, Config, Durability, Error, ReaderOptions, Retention, StartPosition,
    TIMESTAMP_US_MAX, Wal, validate_name,
};

fn open(dir: &std::path::Path) -> Wal {
    Wal::open_with(dir, small()).expect("open")
}

/// Asserts `result` is `InvalidTopic` for `name` and returns the rule.
fn invalid_topic<T: std::fmt::Debug>(result: tidelog::Result<T>, name: &str) -> &'static str {
    match result {
        Err(Error::InvalidTopic { name: got, rule }) => {
            assert_eq!(got, name);
            assert!(!rule.is_empty());
            rule
        }
        other => panic!("{name:?}: expected InvalidTopic, got {other:?}"),
    }
}

#[test]
fn invalid_topic_names_are_refused() {
    let dir = tempdir();
    let wal = open(dir.path());
    let long = "x".repeat(250);
    let cases: [(&str, &str); 13] = [
        ("", "empty"),
        (".", "\".\""),
        ("..", "\"..\""),
        (".hidden", "start"),
        (&long, "249"),
        ("a/b", "letters"),
        ("a b", "letters"),
        ("tópico", "letters"),
        ("a\0b", "letters"),
        ("a@b", "letters"),
        ("../escape", "start"),
        ("a\\b", "letters"),
        ("日本", "letters"),
    ];
    for (name, rule_mentions) in cases {
        let rule = invalid_topic(validate_name(name), name);
        assert!(rule.contains(rule_mentions), "{name:?}: rule {rule:?}");
        invalid_topic(wal.writer(name), name);
        invalid_topic(wal.append(name, b"v"), name);
        invalid_topic(wal.append_record(name, Append::value(b"v")), name);
        invalid_topic(wal.append_batch(name, &[b"v"]), name);
        invalid_topic(wal.read(name, 0), name);
        invalid_topic(wal.topic_info(name), name);
        invalid_topic(wal.reader(name, "g"), name);
        // The same rules apply to group names.
        wal.append("ok", b"v").expect("append");
        invalid_topic(wal.reader("ok", name), name);
    }
    assert_eq!(wal.topics(), ["ok"], "no refused name became a topic");
    let entries: Vec<_> = std::fs::read_dir(dir.path().join("cursors"))
        .expect("cursor dir")
        .collect();
    assert!(entries.is_empty(), "no cursor file was created");
}

#[test]
fn longest_valid_names_work() {
    let dir = tempdir();
    let name = "n".repeat(249);
    let dotted = format!("a.{}", "-_.9".repeat(61)); // 246 chars, every allowed symbol
    {
        let wal = open(dir.path());
        for topic in [name.as_str(), dotted.as_str(), "x", "a..b", "A-Z_0.9"] {
            validate_name(topic).expect("valid");
            assert_eq!(wal.append(topic, topic.as_bytes()).expect("append"), 0);
        }
    }
    let wal = open(dir.path());
    assert!(wal.topics().contains(&name));
    assert_eq!(wal.read(&name, 0).expect("read").value(), name.as_bytes());
    assert_eq!(
        wal.read(&dotted, 0).expect("read").value(),
        dotted.as_bytes()
    );
}

/// Names are valid up to 249 characters for topics and groups alike, so a consumer group
/// must work on a topic with the longest name.
#[test]
fn longest_topic_name_supports_consumer_groups() {
    let dir = tempdir();
    let topic = "t".repeat(249);
    {
        let wal = open(dir.path());
        for i in 0..3u8 {
            wal.append(&topic, &[i]).expect("append");
        }
        let mut reader = wal.reader(&topic, "billing").expect("group reader");
        assert_eq!(reader.next().expect("next").expect("record").value, [0]);
        reader.commit().expect("commit");
    }
    let wal = open(dir.path());
    let reader = wal
        .reader(&topic, "billing")
        .expect("group reader after reopen");
    assert_eq!(reader.committed(), Some(1));
    assert_eq!(wal.topic_info(&topic).expect("info").groups, ["billing"]);
}

#[test]
fn oversized_records_and_batches_are_refused() {
    let dir = tempdir();
    let cfg = small()
        .max_record_bytes(1_000)
        .max_batch_records(4)
        .max_batch_bytes(2_000);
    let wal = Wal::open_with(dir.path(), cfg).expect("open");
    let w = wal.writer("t").expect("writer");
    let big = vec![7u8; 1_001];

    let record_limit = |r: tidelog::Result<u64>, value: u64| match r {
        Err(Error::LimitExceeded {
            limit,
            value: v,
            max,
        }) => {
            assert_eq!((limit, v, max), ("max_record_bytes", value, 1_000));
        }
        other => panic!("expected LimitExceeded(max_record_bytes), got {other:?}"),
    };
    record_limit(w.append(&big), 1_001);
    record_limit(wal.append("t", &big), 1_001);
    // Key bytes count towards the record size.
    let key = vec![1u8; 500];
    let rec = Append {
        key: Some(&key),
        value: &big[..501],
        timestamp_us: None,
        headers: None,
    };
    record_limit(w.append_record(rec), 1_001);
    // One oversized record anywhere in a batch refuses the whole batch.
    let mixed: [&[u8]; 3] = [b"a", &big, b"c"];
    assert!(matches!(
        w.append_batch(&mixed),
        Err(Error::LimitExceeded {
            limit: "max_record_bytes",
            ..
        })
    ));
    assert_eq!(w.next_offset(), 0, "refused appends take no offsets");

    // Exactly at the limit is fine.
    assert_eq!(w.append(&big[..1_000]).expect("append at the limit"), 0);
    let rec = Append {
        key: Some(&key),
        value: &big[..500],
        timestamp_us: None,
        headers: None,
    };
    assert_eq!(w.append_record(rec).expect("append at the limit"), 1);

    let five: Vec<&[u8]> = vec![b"x"; 5];
    match w.append_batch(&five) {
        Err(Error::LimitExceeded { limit, value, max }) => {
            assert_eq!((limit, value, max), ("max_batch_records", 5, 4));
        }
        other => panic!("expected LimitExceeded(max_batch_records), got {other:?}"),
    }
    let heavy = vec![vec![3u8; 700]; 3];
    match w.append_batch(&heavy) {
        Err(Error::LimitExceeded { limit, value, max }) => {
            assert_eq!((limit, value, max), ("max_batch_bytes", 2_100, 2_000));
        }
        other => panic!("expected LimitExceeded(max_batch_bytes), got {other:?}"),
    }
    assert!(matches!(
        wal.append_batch("t", &heavy),
        Err(Error::LimitExceeded {
            limit: "max_batch_bytes",
            ..
        })
    ));
    let empty: [&[u8]; 0] = [];
    assert!(matches!(
        w.append_batch(&empty),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        w.append_batch_records(&[]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        wal.append_batch("t", &empty),
        Err(Error::InvalidArgument { .. })
    ));

    // Nothing refused was stored; the limits are not off by one.
    assert_eq!(w.next_offset(), 2);
    assert_eq!(w.append_batch(&five[..4]).expect("4 records"), 2..6);
    assert_eq!(w.append_batch(&heavy[..2]).expect("1,400 bytes"), 6..8);
    let mut r = wal
        .reader_with("t", ReaderOptions::default().start(StartPosition::Earliest))
        .expect("reader");
    let mut n = 0;
    while r.next().expect("next").is_some() {
        n += 1;
    }
    assert_eq!(n, 8);
}

#[test]
fn invalid_configs_are_refused_at_open() {
    let base = || Config::default().durability(Durability::Never);
    let cases: Vec<(Config, &str)> = vec![
        (base().block_size_bytes(65_536 + 1), "block_size_bytes"),
        (base().block_size_bytes(65_536 + 512), "block_size_bytes"),
        (base().block_size_bytes(4_096), "block_size_bytes"),
        (base().block_size_bytes(0), "block_size_bytes"),
        (
            base()
                .file_size_bytes(4_096 + 32_768)
                .block_size_bytes(65_536),
            "file_size_bytes",
        ),
        (
            base().file_size_bytes(4_096).block_size_bytes(65_536),
            "file_size_bytes",
        ),
        (
            base()
                .file_size_bytes(4_096 + 65_536 + 100)
                .block_size_bytes(65_536),
            "file_size_bytes",
        ),
        (base().file_size_bytes(8 << 30), "file_size_bytes"),
        (base().file_size_bytes((4 << 30) + 4_096), "file_size_bytes"),
        (base().sync_interval_ms(0), "sync_interval_ms"),
        (base().index_interval_bytes(0), "index_interval_bytes"),
        (base().max_record_bytes(0), "max_record_bytes"),
        (base().max_record_bytes(2 << 30), "max_record_bytes"),
        (base().max_batch_records(0), "max_batch_records"),
        (base().max_batch_bytes(0), "max_batch_bytes"),
        (base().max_topics(0), "max_topics"),
        (base().sync_interval_ms(3_600_001), "sync_interval_ms"),
        (base().group_wait_us(1_000_001), "group_wait_us"),
        (base().group_bytes_max(0), "group_bytes_max"),
        (
            base().retention(Retention::default().max_age_ms(0)),
            "max_age_ms",
        ),
        (
            base().topic_retention("t", Retention::default().max_bytes(0)),
            "max_bytes",
        ),
        (base().disk_bytes_max(4_096), "disk_bytes_max"),
        (base().space_wait_ms(3_600_001), "space_wait_ms"),
    ];
    let parent = tempdir();
    for (i, (cfg, field)) in cases.into_iter().enumerate() {
        let dir = parent.path().join(format!("d{i}"));
        match Wal::open_with(&dir, cfg.clone()) {
            Err(Error::InvalidArgument { name, reason }) => {
                assert_eq!(name, field, "{cfg:?}: {reason}");
            }
            other => panic!("{cfg:?}: expected InvalidArgument({field}), got {other:?}"),
        }
        assert!(matches!(
            Wal::open_read_only_with(parent.path(), cfg),
            Err(Error::InvalidArgument { .. })
        ));
    }
    // The largest file size is accepted.
    let dir = parent.path().join("max");
    let wal = Wal::open_with(&dir, base().file_size_bytes(4 << 30)).expect("4 GiB files");
    assert_eq!(wal.append("t", b"v").expect("append"), 0);
}

#[test]
fn unknown_topics_and_offsets_out_of_range() {
    let dir = tempdir();
    let wal = open(dir.path());
    for i in 0..5u8 {
        wal.append("t", &[i]).expect("append");
    }
    let unknown = |r: tidelog::Result<()>| match r {
        Err(Error::UnknownTopic { topic }) => assert_eq!(topic, "nope"),
        other => panic!("expected UnknownTopic, got {other:?}"),
    };
    unknown(wal.read("nope", 0).map(drop));
    unknown(wal.topic_info("nope").map(drop));
    unknown(wal.reader("nope", "g").map(drop));
    unknown(wal.reader_with("nope", ReaderOptions::default()).map(drop));
    assert_eq!(wal.topics(), ["t"], "reads create no topic");

    for offset in [5, 6, 1_000, u64::MAX] {
        match wal.read("t", offset) {
            Err(Error::OffsetOutOfRange {
                topic,
                offset: o,
                first,
                next,
            }) => {
                assert_eq!((topic.as_str(), o, first, next), ("t", offset, 0, 5));
            }
            other => panic!("read({offset}): expected OffsetOutOfRange, got {other:?}"),
        }
    }
    assert!(matches!(
        wal.reader_with(
            "t",
            ReaderOptions::default().start(StartPosition::Offset(6))
        ),
        Err(Error::OffsetOutOfRange { offset: 6, .. })
    ));
    // A topic that exists but holds nothing.
    wal.writer("empty").expect("writer");
    assert!(matches!(
        wal.read("empty", 0),
        Err(Error::OffsetOutOfRange {
            first: 0,
            next: 0,
            ..
        })
    ));
    assert_eq!(wal.read("t", 4).expect("read").value(), [4]);
}

#[test]
fn everything_after_close_is_closed() {
    let dir = tempdir();
    let wal = open(dir.path());
    let w = wal.writer("t").expect("writer");
    w.append(b"a").expect("append");
    let kept = wal.read("t", 0).expect("read");
    let mut r = wal
        .reader_with("t", ReaderOptions::default().start(StartPosition::Earliest))
        .expect("reader");
    let mut g = wal
        .reader_with(
            "t",
            ReaderOptions::group("g").commit(CommitMode::AutoEvery(1)),
        )
        .expect("group reader");
    wal.close().expect("close");

    let closed = |what: &str, r: tidelog::Result<()>| {
        assert!(
            matches!(r, Err(Error::Closed)),
            "{what}: expected Closed, got {r:?}"
        );
    };
    closed("writer append", w.append(b"b").map(drop));
    closed(
        "writer append_record",
        w.append_record(Append::value(b"b")).map(drop),
    );
    closed("writer append_batch", w.append_batch(&[b"b"]).map(drop));
    closed("writer flush", w.flush());
    closed("wal append", wal.append("t", b"b").map(drop));
    closed(
        "wal append to a new topic",
        wal.append("new", b"b").map(drop),
    );
    closed("wal writer", wal.writer("t").map(drop));
    closed("wal read", wal.read("t", 0).map(drop));
    closed("wal reader", wal.reader("t", "g").map(drop));
    closed("wal topic_info", wal.topic_info("t").map(drop));
    closed("wal flush", wal.flush());
    closed("wal refresh", wal.refresh());
    closed("reader next", r.next().map(drop));
    closed("reader next_record", r.next_record().map(drop));
    closed("reader next_batch", r.next_batch(10, 1_000).map(drop));
    closed("reader seek", r.seek(0));
    closed("reader seek_time", r.seek_time(0).map(drop));
    closed("group next", g.next().map(drop));
    closed("group commit", g.commit());
    wal.close().expect("a second close is a no-op");
    assert_eq!(kept.value(), b"a", "records read before close stay valid");
    drop(wal);
    closed("writer append after drop", w.append(b"c").map(drop));

    // Nothing refused reached the disk.
    let wal = open(dir.path());
    assert_eq!(wal.topics(), ["t"]);
    assert_eq!(wal.topic_info("t").expect("info").next_offset, 1);
}

#[test]
fn errors_render_and_carry_errno_only_for_io() {
    let dir = tempdir();
    let wal = open(dir.path());
    let errors = [
        wal.read("nope", 0).map(drop).expect_err("unknown"),
        wal.append("", b"").map(drop).expect_err("invalid"),
        Wal::open_with(dir.path(), small().exclusive(true))
            .map(drop)
            .expect_err("locked"),
        Wal::open_with(dir.path(), small().sync_interval_ms(0))
            .map(drop)
            .expect_err("cfg"),
    ];
    for e in &errors {
        assert!(!e.to_string().is_empty());
        assert_eq!(e.errno(), None, "{e:?}");
    }
    let missing = Wal::open_read_only(dir.path().join("missing"))
        .map(drop)
        .expect_err("missing");
    assert!(matches!(missing, Error::Io { .. }), "{missing:?}");
    assert!(std::error::Error::source(&missing).is_some());
}

#[test]
fn rejected_appends_create_no_topic() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small().max_record_bytes(100)).expect("open");
    let big = vec![1u8; 101];
    assert!(matches!(
        wal.append("too-big", &big),
        Err(Error::LimitExceeded { .. })
    ));
    assert!(matches!(
        wal.append_batch::<&[u8]>("empty", &[]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        wal.append_async("async-too-big", &big),
        Err(Error::LimitExceeded { .. })
    ));
    assert!(wal.topics().is_empty(), "{:?}", wal.topics());
    // A valid append still creates its topic.
    assert_eq!(wal.append("ok", b"fine").expect("append"), 0);
    assert_eq!(wal.topics(), vec!["ok".to_owned()]);
}

/// A timestamp past `i64::MAX` microseconds is refused at append, by the Wal, a writer and a
/// staged writer alike, and nothing is written: it would come back clamped from Arrow and as
/// another value from Spark or Kafka. `i64::MAX` itself is kept exactly.
#[test]
fn timestamps_past_i64_max_are_refused() {
    let dir = tempdir();
    let wal = open(dir.path());
    let at = |ts: u64| Append {
        timestamp_us: Some(ts),
        ..Append::value(b"v")
    };
    for ts in [TIMESTAMP_US_MAX + 1, u64::MAX] {
        let refused = [
            wal.append_record("t", at(ts)).map(drop),
            wal.append_batch_records("t", &[at(1), at(ts)]).map(drop),
            wal.writer("t")
                .and_then(|w| w.append_record(at(ts)))
                .map(drop),
        ];
        for result in refused {
            assert!(
                matches!(
                    &result,
                    Err(Error::InvalidArgument {
                        name: "timestamp",
                        ..
                    })
                ),
                "{result:?}"
            );
        }
        let mut staged = tidelog::StagedWriter::create(dir.path(), "job", "p0").expect("staged");
        assert!(matches!(
            staged.append("t", &[at(ts)]),
            Err(Error::InvalidArgument {
                name: "timestamp",
                ..
            })
        ));
    }
    // (The writer made the topic, empty.)
    assert_eq!(wal.topic_info("t").map_or(0, |i| i.next_offset), 0);
    assert_eq!(
        wal.append_record("t", at(TIMESTAMP_US_MAX))
            .expect("append"),
        0
    );
    assert_eq!(
        wal.read("t", 0).expect("read").timestamp_us(),
        TIMESTAMP_US_MAX
    );
}

/// A batch within `max_batch_bytes` whose frames still need more blocks than a data file
/// holds (each record adds its framing) names `file_size_bytes`, the limit to raise, with the
/// size a file would need; it named an internal "blocks per extent" before.
#[test]
fn a_batch_larger_than_a_data_file_names_file_size_bytes() {
    let dir = tempdir();
    let block = 8192;
    let cfg = crate::common::geometry(2, block);
    let wal = Wal::open_with(dir.path(), cfg.clone()).expect("open");
    let values: Vec<Vec<u8>> = [4048, 4000, 4000].map(|n| vec![b'x'; n]).into();
    let slices: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let total: u64 = values.iter().map(|v| v.len() as u64).sum();
    assert!(total <= cfg.effective_max_batch_bytes(), "{total}");
    let err = wal
        .append_batch("t", &slices)
        .expect_err("3 blocks in a file of 2");
    let Error::LimitExceeded { limit, value, max } = err else {
        panic!("expected LimitExceeded, got {err:?}");
    };
    assert_eq!(limit, "file_size_bytes");
    assert_eq!(max, cfg.file_size_bytes);
    assert!(value > max && (value - tidelog::format::FILE_HEADER_BYTES).is_multiple_of(block));
    // Nothing was appended, and a batch that fits still goes in.
    assert_eq!(wal.append_batch("t", &slices[..1]).expect("append"), 0..1);
}

//! Goal: records larger than a block (up to one that needs a whole file), chains that cross
//! data files, extents of several topics interleaved in one file, and an extent that holds an
//! identity but no record all survive a clean restart and a crash, byte for byte, and recovery
//! does not stop early at an oversized or empty extent (a walrus bug).
//! Method: 64 KiB blocks and 16-block files; values are derived from (topic, offset) so any
//! process can check any record. Crashes are child processes that exit without dropping the
//! `Wal`; the empty extent is made by zeroing the only record of a never-flushed extent.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use crate::common::{
    BLOCK, child_env, data_files, extents, frames, geometry, payload, read_all, run_child, tempdir,
    zero_range,
};
use tidelog::{Append, Config, Wal, format};

const BIG: &str = "big";
const SMALL: &str = "small";
const KIB: usize = 1024;

/// Payload of a frame that exactly fills one 64 KiB block (header page and the footer reserve
/// for the default 4 KiB index interval taken out); one byte more needs two blocks.
const ONE_BLOCK_PAYLOAD: usize = (BLOCK
    - format::footer_bytes_max(BLOCK, 4096)
    - format::BLOCK_HEADER_BYTES
    - format::FRAME_HEADER_BYTES) as usize;

/// `(key length, value length)` of each offset of the big topic.
const BIG_SPECS: [(Option<usize>, usize); 14] = [
    (None, 300 * KIB),
    (None, 1_000_000), // needs all 16 blocks of a file
    (None, 300 * KIB),
    (None, 64 * KIB),
    (None, ONE_BLOCK_PAYLOAD),
    (None, ONE_BLOCK_PAYLOAD + 1),
    (Some(1000), 200_000),
    (None, 100 * KIB), // 7..10: one batch
    (Some(0), 100 * KIB),
    (None, 100 * KIB),
    (None, 5),
    (None, 1_000_000), // 11..: written by the crash child
    (Some(3), 300 * KIB),
    (None, 300 * KIB), // not flushed before the crash
];

fn cfg() -> Config {
    geometry(16, BLOCK)
}

fn seed(topic: &str, offset: u64) -> u64 {
    offset * 7919 + topic.bytes().map(u64::from).sum::<u64>() * 104_729
}

/// Key and value of `topic` at `offset`.
fn record_of(topic: &str, offset: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let (key_len, value_len) = if topic == BIG {
        BIG_SPECS[offset as usize]
    } else {
        (None, (offset * 13 % 300) as usize)
    };
    let key = key_len.map(|n| payload(seed(topic, offset) ^ 0xFFFF, n));
    (key, payload(seed(topic, offset), value_len))
}

fn append(wal: &Wal, topic: &str, offset: u64) {
    let (k, v) = record_of(topic, offset);
    let rec = Append {
        headers: None,
        key: k.as_deref(),
        value: &v,
        timestamp_us: None,
    };
    assert_eq!(
        wal.append_record(topic, rec).unwrap(),
        offset,
        "{topic}@{offset}"
    );
}

fn append_small(wal: &Wal, n: u64) {
    let start = wal.topic_info(SMALL).map_or(0, |i| i.next_offset);
    for o in start..start + n {
        append(wal, SMALL, o);
    }
}

/// Checks `topic` holds exactly `0..count`, byte-equal (or at least `count` when `at_least`).
fn check(wal: &Wal, topic: &str, count: u64, at_least: bool, ctx: &str) -> u64 {
    let got = read_all(wal, topic);
    if at_least {
        assert!(
            got.len() as u64 >= count,
            "{ctx}: {topic} has {} < {count}",
            got.len()
        );
    } else {
        assert_eq!(got.len() as u64, count, "{ctx}: {topic} record count");
    }
    for (i, (offset, key, value)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "{ctx}: {topic} offsets must be dense");
        let (k, v) = record_of(topic, *offset);
        assert!(*key == k, "{ctx}: key of {topic}@{offset} differs");
        assert!(*value == v, "{ctx}: value of {topic}@{offset} differs");
        // Random access agrees with the sequential reader.
        assert!(
            wal.read(topic, *offset).unwrap().value() == &v[..],
            "{ctx}: read {offset}"
        );
    }
    got.len() as u64
}

/// Recovery must account for every extent on disk (none skipped after a large one).
fn check_extent_count(dir: &Path, wal: &Wal, ctx: &str) {
    let on_disk = extents(dir).len() as u64;
    let report = wal.recovery_report();
    assert_eq!(report.extents, on_disk, "{ctx}: {report:?}");
    assert_eq!(report.dropped_extents, 0, "{ctx}: {report:?}");
}

/// Child side (a no-op unless re-executed with `TIDELOG_CHILD_DIR`); see each mode.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    // The handle stays alive until the exit, so no destructor flushes or closes anything.
    let _wal = match mode.as_str() {
        "large" => large_child(&dir),
        "empty" => empty_extent_child(&dir),
        "interleave" => interleave_child(&dir),
        other => panic!("unknown mode {other}"),
    };
    std::process::exit(0);
}

/// More large records: two flushed, one not; then (in the caller) a crash.
fn large_child(dir: &Path) -> Wal {
    let wal = Wal::open_with(dir, cfg()).unwrap();
    assert_eq!(wal.topic_info(BIG).unwrap().next_offset, 11);
    append(&wal, BIG, 11);
    append_small(&wal, 5);
    append(&wal, BIG, 12);
    wal.flush().unwrap();
    append(&wal, BIG, 13);
    append_small(&wal, 2);
    wal
}

#[test]
fn large_records_survive_restart_and_crash() {
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        append_small(&wal, 10);
        append(&wal, BIG, 0);
        append_small(&wal, 10);
        for o in 1..7 {
            append(&wal, BIG, o);
        }
        append_small(&wal, 5);
        let recs: Vec<_> = (7..10).map(|o| record_of(BIG, o)).collect();
        let batch: Vec<Append<'_>> = recs
            .iter()
            .map(|(k, v)| Append {
                headers: None,
                key: k.as_deref(),
                value: v,
                timestamp_us: None,
            })
            .collect();
        assert_eq!(
            wal.writer(BIG)
                .unwrap()
                .append_batch_records(&batch)
                .unwrap(),
            7..10
        );
        append_small(&wal, 5);
        check(&wal, BIG, 10, false, "before close");
        wal.close().unwrap();
    }
    assert!(
        data_files(dir.path()).len() >= 3,
        "the big topic should span several files"
    );
    // The largest record's extent takes a whole file.
    let whole = extents(dir.path())
        .into_iter()
        .find(|e| e.id.topic == BIG && e.id.first_offset == 1);
    assert_eq!(whole.unwrap().id.extent_count, 16);

    {
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        check_extent_count(dir.path(), &wal, "clean reopen");
        assert_eq!(wal.recovery_report().torn_tails, 0);
        check(&wal, BIG, 10, false, "clean reopen");
        check(&wal, SMALL, 30, false, "clean reopen");
        // Later small appends still work, to both topics.
        append(&wal, BIG, 10);
        append_small(&wal, 3);
        check(&wal, BIG, 11, false, "after small appends");
    }

    run_child(module_path!(), dir.path(), "large");
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    check_extent_count(dir.path(), &wal, "crash reopen");
    // 11 and 12 were flushed; 13 may survive through the page cache, byte-equal if so.
    check(&wal, BIG, 13, true, "crash reopen");
    check(&wal, SMALL, 38, true, "crash reopen");
    let big_next = wal.topic_info(BIG).unwrap().next_offset;
    let small_next = wal.topic_info(SMALL).unwrap().next_offset;
    append_small(&wal, 1);
    drop(wal);
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    check(&wal, BIG, big_next, false, "final");
    check(&wal, SMALL, small_next + 1, false, "final");
}

const A: &str = "topic-a";
const B: &str = "topic-b";
const VALUE: usize = 900;

fn plain_value(topic: &str, offset: u64) -> Vec<u8> {
    payload(seed(topic, offset), VALUE)
}

fn check_plain(wal: &Wal, topic: &str, count: u64, ctx: &str) {
    let got = read_all(wal, topic);
    assert_eq!(got.len() as u64, count, "{ctx}: {topic} record count");
    for (i, (offset, _, value)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "{ctx}: {topic} offsets must be dense");
        assert!(
            *value == plain_value(topic, *offset),
            "{ctx}: {topic}@{offset} differs"
        );
    }
}

/// Topic A fills an extent (flushed part way), rolls into a second extent with one record,
/// then topic B gets the next extent of the same file. Nothing after that is flushed.
fn empty_extent_child(dir: &Path) -> Wal {
    let wal = Wal::open_with(dir, geometry(8, BLOCK)).unwrap();
    let a = wal.writer(A).unwrap();
    let mut o = 0;
    while wal.topic_info(A).unwrap().extents < 2 {
        assert_eq!(a.append(&plain_value(A, o)).unwrap(), o);
        o += 1;
        if o == 20 {
            a.flush().unwrap();
        }
    }
    for o in 0..20 {
        assert_eq!(wal.append(B, &plain_value(B, o)).unwrap(), o);
    }
    wal
}

#[test]
fn empty_extent_between_extents() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "empty");
    let all = extents(dir.path());
    let a_ext: Vec<_> = all.iter().filter(|e| e.id.topic == A).collect();
    assert_eq!(a_ext.len(), 2);
    let empty = a_ext[1];
    let b_ext = all.iter().find(|e| e.id.topic == B).unwrap();
    assert!(
        empty.file == b_ext.file && empty.start < b_ext.start,
        "B must follow A's 2nd extent"
    );
    assert!(
        empty.progress.is_none(),
        "A's second extent must never have been flushed"
    );
    // Remove its only record: an extent with an identity and no record.
    let only = frames(dir.path())
        .into_iter()
        .find(|f| f.topic == A && f.offset == empty.id.first_offset)
        .unwrap();
    zero_range(&empty.file, only.pos, only.end());
    let a_count = empty.id.first_offset;

    for round in 0..2u64 {
        let ctx = format!("empty extent, reopen {round}");
        let wal = Wal::open_with(dir.path(), geometry(8, BLOCK)).unwrap();
        assert_eq!(wal.recovery_report().dropped_extents, 0, "{ctx}");
        check_plain(&wal, A, a_count + round, &ctx);
        check_plain(&wal, B, 20 + round, &ctx);
        // Both topics continue densely.
        assert_eq!(
            wal.append(A, &plain_value(A, a_count + round)).unwrap(),
            a_count + round
        );
        assert_eq!(
            wal.append(B, &plain_value(B, 20 + round)).unwrap(),
            20 + round
        );
        wal.close().unwrap();
    }
    let wal = Wal::open_with(dir.path(), geometry(8, BLOCK)).unwrap();
    check_plain(&wal, A, a_count + 2, "empty extent, final");
    check_plain(&wal, B, 22, "empty extent, final");
}

const TOPICS: [&str; 4] = ["t0", "t1", "t2", "t3"];
const PER_TOPIC: u64 = 150;

/// Four topics append round-robin so their extents alternate inside each file; one flush
/// half way, then a crash.
fn interleave_child(dir: &Path) -> Wal {
    let wal = Wal::open_with(dir, geometry(8, BLOCK)).unwrap();
    for o in 0..PER_TOPIC {
        for t in TOPICS {
            assert_eq!(wal.append(t, &plain_value(t, o)).unwrap(), o);
        }
        if o == PER_TOPIC / 2 {
            wal.flush().unwrap();
        }
    }
    wal
}

#[test]
fn interleaved_topics_recover_after_crash() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "interleave");
    let all = extents(dir.path());
    assert!(
        data_files(dir.path()).len() >= 2,
        "extents should span files"
    );
    // Consecutive extents in a file belong to different topics somewhere.
    assert!(
        all.windows(2)
            .any(|w| w[0].file == w[1].file && w[0].id.topic != w[1].id.topic)
    );
    for round in 0..2 {
        let ctx = format!("interleaved, reopen {round}");
        let wal = Wal::open_with(dir.path(), geometry(8, BLOCK)).unwrap();
        assert_eq!(wal.recovery_report().extents, all.len() as u64, "{ctx}");
        for t in TOPICS {
            check_plain(&wal, t, PER_TOPIC, &ctx);
        }
        drop(wal);
    }
}

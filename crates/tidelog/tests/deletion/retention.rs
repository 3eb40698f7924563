//! Goal: retention deletes exactly what it should: by bytes, the oldest extents while the
//! topic would still hold at least `max_bytes` without them; by age, the extents whose newest
//! record is older than `max_age_ms`; never a topic's newest extent; whatever its groups did
//! (a group that never consumed does not hold retention back). A topic without retention and
//! without groups keeps everything. Deletion goes on after a restart, and no topic's first
//! offset ever moves backwards.
//!
//! Method: a first session without retention appends four topics (small geometry, so files
//! hold extents of several topics): `kept` only at the start, `sized` and `grouped` (whose
//! group commits offset 0 and never reads), and `aged`, whose records carry explicit
//! timestamps an hour old followed by current ones (so no test waits for time to pass).
//! Walking the block headers gives every extent's file and offsets, and the record sizes give
//! every extent's bytes, so the test predicts each topic's first kept extent and the files
//! that must go. Reopening with retention configured (a global `max_bytes`, an age override
//! for `aged` and an unlimited override for `kept`) must delete exactly those files before
//! `open` returns, with the counters, disk usage and offsets to match. Then, while running,
//! more appends must make the background thread drop more (polled up to 10 s) until the rule
//! holds again; after another restart deletion continues.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{
    data_files, listed, on_disk, real_bytes, settle_spare, small, tempdir, topic_value,
};
use tidelog::format::{self, BlockIdentity};
use tidelog::{Append, Config, Error, FileState, ReaderOptions, Retention, StartPosition, Wal};

/// `sized` and `grouped` keep at least this many bytes of records (about three extents).
const MAX_BYTES: u64 = 200_000;
const MAX_AGE_MS: u64 = 60_000;
/// How old the old records of `aged` are: far beyond `MAX_AGE_MS`.
const OLD_BY_US: u64 = 3_600_000_000;
const KEPT: u64 = 120;
const SIZED: u64 = 1000;
const AGED_OLD: u64 = 900;
const AGED_FRESH: u64 = 30;
const BLOCKS_PER_FILE: u32 = 8;
/// One data file with every block handed out.
const FILE_BYTES: u64 = 4096 + 8 * 64 * 1024;
use crate::common::DELETE_DEADLINE as DEADLINE;

/// Bytes a single append of the record takes: a batch frame of one.
fn padded(topic: &str, offset: u64) -> u64 {
    let value = topic_value(topic, offset);
    tidelog::batch::frame_len(std::iter::once(tidelog::batch::BatchRecord {
        parts: format::FrameParts {
            key: None,
            headers: None,
            value: &value,
        },
        timestamp_us: 0,
    }))
}

fn retained() -> Config {
    small()
        .retention(Retention::default().max_bytes(MAX_BYTES))
        .topic_retention("aged", Retention::default().max_age_ms(MAX_AGE_MS))
        .topic_retention("aged2", Retention::default().max_age_ms(MAX_AGE_MS))
        .topic_retention("kept", Retention::default())
}

fn append_old(wal: &Wal, topic: &str, offset: u64) {
    let v = topic_value(topic, offset);
    let at = wal
        .append_record(
            topic,
            Append {
                headers: None,
                key: None,
                value: &v,
                timestamp_us: Some(tidelog::now_us() - OLD_BY_US),
            },
        )
        .expect("append old record");
    assert_eq!(at, offset);
}

fn append(wal: &Wal, topic: &str, offset: u64) {
    assert_eq!(
        wal.append(topic, &topic_value(topic, offset))
            .expect("append"),
        offset
    );
}

/// One extent found on disk.
#[derive(Debug, Clone)]
struct Ext {
    file: PathBuf,
    topic: String,
    blocks: u32,
    first: u64,
    /// The next extent's first offset; `None` for the topic's newest extent.
    end: Option<u64>,
}

/// Every extent in the data files of `dir` that still exist (files deleted meanwhile are
/// skipped: the background thread may be deleting as we walk).
fn layout(dir: &Path) -> BTreeMap<String, Vec<Ext>> {
    let mut by_topic: BTreeMap<String, Vec<Ext>> = BTreeMap::new();
    for path in data_files(dir) {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("read {path:?}: {e}"),
        };
        let block = format::get_u64(&bytes, format::FH_BLOCK_SIZE);
        let mut at = format::FILE_HEADER_BYTES;
        while at + block <= bytes.len() as u64 {
            let slot = &bytes[(at as usize + format::ID_SLOT_AT)..];
            match BlockIdentity::decode(slot) {
                Some(id) => {
                    at += u64::from(id.extent_count) * block;
                    by_topic.entry(id.topic.clone()).or_default().push(Ext {
                        file: path.clone(),
                        topic: id.topic,
                        blocks: id.extent_count,
                        first: id.first_offset,
                        end: None,
                    });
                }
                None => at += block,
            }
        }
    }
    for chain in by_topic.values_mut() {
        chain.sort_by_key(|e| e.first);
        for i in 1..chain.len() {
            chain[i - 1].end = Some(chain[i].first);
        }
    }
    by_topic
}

fn extent_bytes(e: &Ext, next: u64) -> u64 {
    (e.first..e.end.unwrap_or(next))
        .map(|o| padded(&e.topic, o))
        .sum()
}

/// Extents the bytes rule drops from the front of `chain`.
fn bytes_prefix(chain: &[Ext], next: u64, max: u64) -> usize {
    let mut remaining: u64 = chain.iter().map(|e| extent_bytes(e, next)).sum();
    let mut n = 0;
    while n + 1 < chain.len() && remaining - extent_bytes(&chain[n], next) >= max {
        remaining -= extent_bytes(&chain[n], next);
        n += 1;
    }
    n
}

/// Extents the age rule drops: those holding only records before `first_fresh`.
fn age_prefix(chain: &[Ext], first_fresh: u64) -> usize {
    chain
        .iter()
        .take_while(|e| e.end.is_some_and(|end| end <= first_fresh))
        .count()
}

/// Consumed extents per topic (a prefix of its chain).
type Dropped = BTreeMap<String, usize>;

fn is_dropped(lay: &BTreeMap<String, Vec<Ext>>, dropped: &Dropped, e: &Ext) -> bool {
    let n = dropped.get(&e.topic).copied().unwrap_or(0);
    lay[&e.topic][..n].iter().any(|d| d.first == e.first)
}

fn expected_gone(
    lay: &BTreeMap<String, Vec<Ext>>,
    states: &[FileState],
    dropped: &Dropped,
) -> BTreeSet<PathBuf> {
    states
        .iter()
        .filter(|s| s.fully_allocated)
        .filter(|s| {
            lay.values()
                .flatten()
                .filter(|e| e.file == s.path)
                .all(|e| is_dropped(lay, dropped, e))
        })
        .map(|s| s.path.clone())
        .collect()
}

fn check_counters(wal: &Wal, lay: &BTreeMap<String, Vec<Ext>>, dropped: &Dropped) {
    for s in wal.file_states() {
        let exts: Vec<&Ext> = lay
            .values()
            .flatten()
            .filter(|e| e.file == s.path)
            .collect();
        let sum = |f: &dyn Fn(&Ext) -> bool| -> u32 {
            exts.iter().filter(|e| f(e)).map(|e| e.blocks).sum()
        };
        assert_eq!(s.total_blocks, sum(&|_| true), "total of {s:?}");
        assert_eq!(s.held_blocks, sum(&|e| e.end.is_none()), "held of {s:?}");
        assert_eq!(
            s.consumed_blocks,
            sum(&|e| is_dropped(lay, dropped, e)),
            "consumed of {s:?}"
        );
        assert!(!s.deletable, "{s:?}");
    }
}

/// `topic` reads back byte-equal from its first stored offset to `next`; `first` itself is
/// returned for the caller's checks.
fn read_back(wal: &Wal, topic: &str, next: u64) -> u64 {
    let info = wal.topic_info(topic).expect("topic info");
    assert_eq!(info.next_offset, next, "{topic}");
    let mut reader = wal
        .reader_with(
            topic,
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .expect("reader");
    let mut expect = info.first_offset;
    while let Some(rec) = reader.next().expect("next") {
        assert_eq!(rec.offset, expect);
        assert_eq!(rec.value, topic_value(topic, expect), "{topic}@{expect}");
        expect += 1;
    }
    assert_eq!(expect, next, "{topic} reads to its end");
    if info.first_offset > 0 {
        assert!(matches!(
            wal.read(topic, info.first_offset - 1),
            Err(Error::OffsetOutOfRange { .. })
        ));
    }
    info.first_offset
}

/// The bytes rule holds for `topic` now: it keeps a suffix of its extents that holds at least
/// `MAX_BYTES` (unless nothing was dropped) and that would not without its first extent
/// (unless that is the newest). Checked on the extents still stored.
fn bytes_rule_holds(wal: &Wal, lay: &BTreeMap<String, Vec<Ext>>, topic: &str) -> bool {
    let info = wal.topic_info(topic).expect("topic info");
    let Some(chain) = lay.get(topic) else {
        return false;
    };
    let kept: Vec<&Ext> = chain
        .iter()
        .filter(|e| e.end.is_none_or(|end| end > info.first_offset))
        .collect();
    let Some(first) = kept.first() else {
        return false;
    };
    let bytes: u64 = kept.iter().map(|e| extent_bytes(e, info.next_offset)).sum();
    first.first == info.first_offset
        && info.bytes == bytes
        && (info.first_offset == 0 || bytes >= MAX_BYTES)
        && (first.end.is_none() || bytes - extent_bytes(first, info.next_offset) < MAX_BYTES)
}

#[test]
fn retention_by_bytes_and_age_deletes_exactly_the_old_extents_and_their_files() {
    let dir = tempdir();

    // Session 1, no retention: the data and its layout.
    let (lay, states) = {
        let wal = Wal::open_with(dir.path(), small()).expect("open");
        for t in ["kept", "sized", "aged", "grouped"] {
            wal.writer(t).expect("create topic");
        }
        let mut lazy = wal.reader("grouped", "lazy").expect("reader");
        lazy.commit().expect("commit offset 0");
        for i in 0..SIZED {
            if i < KEPT {
                append(&wal, "kept", i);
            }
            append(&wal, "sized", i);
            append(&wal, "grouped", i);
            if i < AGED_OLD {
                append_old(&wal, "aged", i);
            } else if i < AGED_OLD + AGED_FRESH {
                append(&wal, "aged", i);
            }
        }
        settle_spare(&wal, BLOCKS_PER_FILE);
        let out = (layout(dir.path()), wal.file_states());
        wal.close().expect("close");
        out
    };
    let next: BTreeMap<&str, u64> = [
        ("kept", KEPT),
        ("sized", SIZED),
        ("grouped", SIZED),
        ("aged", AGED_OLD + AGED_FRESH),
    ]
    .into();
    let mut dropped = Dropped::new();
    dropped.insert("kept".into(), 0);
    for t in ["sized", "grouped"] {
        dropped.insert(t.into(), bytes_prefix(&lay[t], next[t], MAX_BYTES));
    }
    dropped.insert("aged".into(), age_prefix(&lay["aged"], AGED_OLD));
    for t in ["sized", "grouped", "aged"] {
        assert!(
            dropped[t] >= 2 && dropped[t] < lay[t].len(),
            "{t}: the test needs extents to drop and to keep ({} of {})",
            dropped[t],
            lay[t].len()
        );
    }
    let gone = expected_gone(&lay, &states, &dropped);
    assert!(
        gone.len() >= 2,
        "the test needs files to delete: {states:#?}"
    );
    let before_files = on_disk(dir.path());
    let before_real = real_bytes(&before_files);
    let gone_real = real_bytes(&gone);

    // Session 2, with retention: open deletes before it returns.
    let wal = Wal::open_with(dir.path(), retained()).expect("open with retention");
    let kept_files: BTreeSet<PathBuf> = before_files.difference(&gone).cloned().collect();
    assert_eq!(
        on_disk(dir.path()),
        kept_files,
        "exactly the retained-out files went"
    );
    assert_eq!(listed(&wal), kept_files);
    let usage = wal.disk_usage();
    assert_eq!(usage.files, kept_files.len() as u64);
    assert_eq!(usage.bytes, real_bytes(&kept_files));
    // Up to a page per kept file of the filesystem's own metadata may come and go.
    let expect_real = before_real - gone_real;
    let slack = 4096 * kept_files.len() as u64;
    assert!(
        usage.bytes + slack >= expect_real && usage.bytes <= expect_real + slack,
        "usage {} bytes, expected {expect_real} (within a page per file)",
        usage.bytes
    );
    check_counters(&wal, &lay, &dropped);
    let mut firsts = BTreeMap::new();
    for (t, &n) in &next {
        let first = read_back(&wal, t, n);
        let chain = &lay[*t];
        assert_eq!(first, chain[dropped[*t]].first, "{t}: first kept extent");
        firsts.insert(t.to_string(), first);
    }
    assert_eq!(
        firsts["kept"], 0,
        "no retention, no group: everything stays"
    );
    assert!(bytes_rule_holds(&wal, &lay, "sized"));
    assert!(bytes_rule_holds(&wal, &lay, "grouped"));
    // The group that never read held nothing back; it resumes at the first stored offset.
    let lazy = wal.reader("grouped", "lazy").expect("reader");
    assert_eq!(lazy.committed(), Some(0));
    assert_eq!(lazy.position(), firsts["grouped"]);
    drop(lazy);

    // While running: more bytes for `sized`, and a new topic with old then current records.
    for i in SIZED..SIZED + 400 {
        append(&wal, "sized", i);
        if i < SIZED + 300 {
            append_old(&wal, "aged2", i - SIZED);
        } else if i < SIZED + 320 {
            append(&wal, "aged2", i - SIZED);
        }
        if i % 20 == 0 {
            append(&wal, "aged", AGED_OLD + AGED_FRESH + (i - SIZED) / 20);
        }
    }
    let next_aged = AGED_OLD + AGED_FRESH + 20;
    let deadline = Instant::now() + DEADLINE;
    let mut last_first = firsts["sized"];
    loop {
        let lay = layout(dir.path());
        let first = wal.topic_info("sized").expect("info").first_offset;
        assert!(first >= last_first, "first offset of sized moved backwards");
        last_first = first;
        let aged2_first = wal.topic_info("aged2").expect("info").first_offset;
        let aged2_want = lay
            .get("aged2")
            .and_then(|c| c.get(age_prefix(c, 300)))
            .map(|e| e.first);
        let settled = bytes_rule_holds(&wal, &lay, "sized")
            && Some(aged2_first) == aged2_want
            && wal.file_states().iter().all(|s| !s.deletable)
            && on_disk(dir.path()) == listed(&wal);
        if settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention did not settle: sized first {first}, aged2 first {aged2_first} (want {aged2_want:?}), {:#?}",
            wal.file_states()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The rule held, so nothing more goes: this is the settled first offset.
    let first = wal.topic_info("sized").expect("info").first_offset;
    assert!(first >= last_first, "first offset of sized moved backwards");
    last_first = first;
    assert!(
        last_first > firsts["sized"],
        "sized dropped more while running"
    );
    assert!(
        wal.topic_info("aged2").expect("info").first_offset > 0,
        "aged2's old extents went"
    );
    let usage = wal.disk_usage();
    assert_eq!(usage.files, listed(&wal).len() as u64);
    let mut firsts = BTreeMap::new();
    for (t, n) in [
        ("kept", KEPT),
        ("sized", SIZED + 400),
        ("grouped", SIZED),
        ("aged", next_aged),
        ("aged2", 320),
    ] {
        firsts.insert(t, (read_back(&wal, t, n), n));
    }
    assert_eq!(firsts["kept"].0, 0);
    assert_eq!(
        firsts["aged"].0,
        first_kept(&lay, &dropped, "aged"),
        "current records are not dropped by age"
    );
    let files = on_disk(dir.path());
    wal.close().expect("close");

    // Session 3, same config: nothing moves backwards, nothing comes back.
    // Regression: `kept` pins the first files, which still hold consumed extents of the
    // other topics while later files of theirs were deleted; those extents are marked
    // `Consumed` on disk, so recovery skips them instead of reporting a gap.
    let wal = Wal::open_with(dir.path(), retained()).expect("reopen");
    assert_eq!(on_disk(dir.path()), files);
    for (t, (first, n)) in &firsts {
        assert_eq!(
            read_back(&wal, t, *n),
            *first,
            "{t}: first offset after reopen"
        );
    }
    // Deletion continues.
    for i in SIZED + 400..SIZED + 800 {
        append(&wal, "sized", i);
    }
    let deadline = Instant::now() + DEADLINE;
    let mut last_first = firsts["sized"].0;
    loop {
        let lay = layout(dir.path());
        let first = wal.topic_info("sized").expect("info").first_offset;
        assert!(first >= last_first, "first offset of sized moved backwards");
        last_first = first;
        if bytes_rule_holds(&wal, &lay, "sized") && wal.file_states().iter().all(|s| !s.deletable) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention stopped after a restart"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The rule held, so nothing more goes: this is the settled first offset.
    let first = wal.topic_info("sized").expect("info").first_offset;
    assert!(first >= last_first, "first offset of sized moved backwards");
    last_first = first;
    assert!(last_first > firsts["sized"].0);
    read_back(&wal, "sized", SIZED + 800);
    wal.close().expect("close");
}

fn first_kept(lay: &BTreeMap<String, Vec<Ext>>, dropped: &Dropped, topic: &str) -> u64 {
    lay[topic][dropped[topic]].first
}

/// One topic under a bytes limit, appended over three sessions: each open applies the
/// retention before it returns, the first offset never moves backwards, and deletion goes on
/// while running after every restart.
#[test]
fn retention_continues_across_restarts() {
    let dir = tempdir();
    let config = || small().topic_retention("sized", Retention::default().max_bytes(MAX_BYTES));
    let mut next = 0;
    let mut last_first = 0;
    let mut last_files = BTreeSet::new();
    for session in 0..3 {
        let wal = Wal::open_with(dir.path(), config()).expect("open");
        let first = wal.topic_info("sized").map_or(0, |i| i.first_offset);
        assert!(
            first >= last_first,
            "session {session}: first offset moved backwards"
        );
        if session > 0 {
            assert!(bytes_rule_holds(&wal, &layout(dir.path()), "sized"));
            assert_eq!(on_disk(dir.path()), last_files, "session {session}: files");
        }
        last_first = first;
        let before = wal.disk_usage();
        for _ in 0..600 {
            append(&wal, "sized", next);
            next += 1;
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let first = wal.topic_info("sized").expect("info").first_offset;
            assert!(
                first >= last_first,
                "session {session}: first offset moved backwards"
            );
            last_first = first;
            if bytes_rule_holds(&wal, &layout(dir.path()), "sized")
                && wal.file_states().iter().all(|s| !s.deletable)
                && on_disk(dir.path()) == listed(&wal)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "session {session}: retention did not settle"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The rule held, so nothing more goes: this is the settled first offset.
        let first = wal.topic_info("sized").expect("info").first_offset;
        assert!(first >= last_first, "first offset of sized moved backwards");
        last_first = first;
        // About four extents are kept: at most two files hold them, plus the spare (and the
        // file new extents go to). Without retention 600 records would take two more files.
        let after = wal.disk_usage();
        assert!(
            after.files <= 4 && after.bytes <= 4 * (FILE_BYTES + 4096),
            "session {session}: usage {after:?} (was {before:?}) although retention keeps \
             about {MAX_BYTES} bytes"
        );
        assert_eq!(read_back(&wal, "sized", next), last_first);
        last_files = on_disk(dir.path());
        wal.close().expect("close");
    }
    assert!(last_first > 0);
}

#[test]
fn retention_limits_must_be_positive() {
    let dir = tempdir();
    for config in [
        small().retention(Retention::default().max_bytes(0)),
        small().topic_retention("t", Retention::default().max_age_ms(0)),
        small().topic_retention("bad/name", Retention::default().max_bytes(1)),
    ] {
        assert!(
            Wal::open_with(dir.path(), config).is_err(),
            "invalid retention accepted"
        );
    }
    assert_eq!(
        retained().retention_for("sized"),
        Retention::default().max_bytes(MAX_BYTES)
    );
    assert!(retained().retention_for("kept").is_unlimited());
}

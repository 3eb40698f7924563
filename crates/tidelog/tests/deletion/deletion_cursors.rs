//! Goal: a data file is deleted exactly when every extent in it is consumed by every consumer
//! group of its topic: never earlier (every record still stored reads back byte-equal), and
//! surely once it is (while running, and during the next open when the `Wal` stopped first).
//! Deleting a group releases what it held.
//!
//! Method: three topics are appended round-robin (small geometry: 8 blocks of 64 KiB per
//! file), so every file holds extents of all of them. Walking the block headers on disk gives
//! which extents each file holds; from the groups' commits the test predicts which files must
//! go (fully allocated, every extent consumed; a topic's newest extent never is) and polls
//! (up to 10 s) until exactly those are gone. The per-file counters of `Wal::file_states`
//! must match the layout block for block, `Wal::disk_usage` must drop by exactly the deleted
//! files, and so must the bytes the files occupy on disk. A slow group holds the files of its
//! unconsumed extents until it catches up or is deleted. For a restart, the directory is
//! copied before the groups commit and their cursor files are added to the copy afterwards:
//! opening the copy must delete the consumed files before `open` returns. Finally a topic
//! without groups pins the first file while later files of a consumed topic go: the reopen
//! must accept the hole this leaves in the consumed topic's offsets on disk.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{
    copy_dir, extents, listed, on_disk, real_bytes, settle_spare, small, tempdir, topic_value,
    wait_gone,
};
use tidelog::{Error, FileState, Reader, ReaderOptions, StartPosition, Wal};

const TOPICS: [&str; 3] = ["alpha", "beta", "gamma"];
const RECORDS: u64 = 600;
/// Blocks per data file in the small geometry.
const BLOCKS_PER_FILE: u32 = 8;
/// One data file with every block handed out: header page plus 8 blocks of 64 KiB.
const FILE_BYTES: u64 = 4096 + 8 * 64 * 1024;
/// How long deletion (a background thread) may take before the test fails.
use crate::common::DELETE_DEADLINE as DEADLINE;

fn open(dir: &Path) -> Wal {
    Wal::open_with(dir, small()).expect("open")
}

/// Appends `RECORDS` records to every topic, round-robin, so files hold mixed extents.
fn fill(wal: &Wal) {
    let writers: Vec<_> = TOPICS
        .iter()
        .map(|t| wal.writer(t).expect("writer"))
        .collect();
    for i in 0..RECORDS {
        for (t, w) in TOPICS.iter().zip(&writers) {
            assert_eq!(w.append(&topic_value(t, i)).expect("append"), i);
        }
    }
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

/// Every extent of `dir`, with its end offset taken from its successor in the topic.
fn layout(dir: &Path) -> Vec<Ext> {
    let mut by_topic: BTreeMap<String, Vec<Ext>> = BTreeMap::new();
    for e in extents(dir) {
        by_topic.entry(e.id.topic.clone()).or_default().push(Ext {
            file: e.file,
            topic: e.id.topic,
            blocks: e.id.extent_count,
            first: e.id.first_offset,
            end: None,
        });
    }
    let mut out = Vec::new();
    for (_, mut chain) in by_topic {
        chain.sort_by_key(|e| e.first);
        for i in 1..chain.len() {
            chain[i - 1].end = Some(chain[i].first);
        }
        out.extend(chain);
    }
    out
}

/// Committed floor per topic: an extent is consumed when it ends at or below it.
type Floors = BTreeMap<&'static str, u64>;

fn floors(value: u64) -> Floors {
    TOPICS.iter().map(|&t| (t, value)).collect()
}

fn consumed(e: &Ext, floors: &Floors) -> bool {
    let floor = floors.get(e.topic.as_str()).copied().unwrap_or(0);
    e.end.is_some_and(|end| end <= floor)
}

/// Files the rule says must go: fully allocated and every extent in them consumed.
fn expected_gone(layout: &[Ext], states: &[FileState], floors: &Floors) -> BTreeSet<PathBuf> {
    states
        .iter()
        .filter(|s| s.fully_allocated)
        .filter(|s| {
            layout
                .iter()
                .filter(|e| e.file == s.path)
                .all(|e| consumed(e, floors))
        })
        .map(|s| s.path.clone())
        .collect()
}

/// Every live file's counters match the layout: blocks handed out, held by a writer (each
/// topic's newest extent) and consumed.
fn check_counters(wal: &Wal, layout: &[Ext], floors: &Floors) {
    let states = wal.file_states();
    let open = states.iter().filter(|s| !s.fully_allocated).count();
    assert!(
        open <= 2,
        "only the current file and the spare take new extents: {states:#?}"
    );
    for s in &states {
        let exts: Vec<&Ext> = layout.iter().filter(|e| e.file == s.path).collect();
        let sum = |f: &dyn Fn(&Ext) -> bool| -> u32 {
            exts.iter().filter(|e| f(e)).map(|e| e.blocks).sum()
        };
        assert_eq!(s.total_blocks, sum(&|_| true), "total of {s:?}");
        assert_eq!(s.held_blocks, sum(&|e| e.end.is_none()), "held of {s:?}");
        assert_eq!(
            s.consumed_blocks,
            sum(&|e| consumed(e, floors)),
            "consumed of {s:?}"
        );
        assert!(s.consumed_blocks + s.held_blocks <= s.total_blocks, "{s:?}");
        assert!(s.total_blocks <= BLOCKS_PER_FILE, "{s:?}");
        // Deletable (queued; the unlink is in the background) exactly when the rule holds.
        let rule = s.fully_allocated && s.held_blocks == 0 && s.consumed_blocks == s.total_blocks;
        assert_eq!(s.deletable, rule, "deletable flag of {s:?}");
    }
}

/// Reads `topic` of `group` up to `upto` (checking every value) and commits there.
fn consume(reader: &mut Reader, upto: u64) {
    let topic = reader.topic().to_owned();
    while reader.position() < upto {
        let rec = reader.next().expect("next").expect("a record");
        assert_eq!(
            rec.value,
            topic_value(&topic, rec.offset),
            "{topic}@{}",
            rec.offset
        );
    }
    reader.commit().expect("commit");
}

/// Every topic starts at its oldest unconsumed extent and reads back byte-equal to the end;
/// the offsets before it are gone.
fn check_read_back(wal: &Wal, layout: &[Ext], floors: &Floors) {
    for &t in &TOPICS {
        let first = layout
            .iter()
            .filter(|e| e.topic == t && !consumed(e, floors))
            .map(|e| e.first)
            .min()
            .expect("the newest extent is never consumed");
        let info = wal.topic_info(t).expect("topic info");
        assert_eq!(info.first_offset, first, "first offset of {t}");
        assert_eq!(info.next_offset, RECORDS, "next offset of {t}");
        let mut reader = wal
            .reader_with(t, ReaderOptions::default().start(StartPosition::Earliest))
            .expect("reader");
        assert_eq!(reader.position(), first);
        let mut expect = first;
        while let Some(rec) = reader.next().expect("next") {
            assert_eq!(rec.offset, expect);
            assert_eq!(rec.value, topic_value(t, expect), "{t}@{expect}");
            expect += 1;
        }
        assert_eq!(expect, RECORDS, "{t} reads to its end");
        if first > 0 {
            assert!(
                matches!(wal.read(t, first - 1), Err(Error::OffsetOutOfRange { first: f, .. }) if f == first),
                "a deleted offset of {t} is out of range"
            );
            assert!(matches!(
                wal.reader_with(t, ReaderOptions::default().start(StartPosition::Offset(0))),
                Err(Error::OffsetOutOfRange { .. })
            ));
        }
        let rec = wal.read(t, first).expect("the first stored offset reads");
        assert_eq!(rec.value(), topic_value(t, first).as_slice());
    }
}

#[test]
fn two_groups_consume_everything_and_files_go_while_running_and_after_reopen() {
    let dir = tempdir();
    let wal = open(dir.path());
    let mut readers: BTreeMap<(&str, &str), Reader> = BTreeMap::new();
    for g in ["g1", "g2"] {
        for &t in &TOPICS {
            wal.writer(t).expect("create topic");
            readers.insert((g, t), wal.reader(t, g).expect("group reader"));
        }
    }
    fill(&wal);
    settle_spare(&wal, BLOCKS_PER_FILE);

    let lay = layout(dir.path());
    let states = wal.file_states();
    assert_eq!(
        listed(&wal),
        on_disk(dir.path()),
        "file_states lists the files on disk"
    );
    check_counters(&wal, &lay, &floors(0));
    let gone = expected_gone(&lay, &states, &floors(RECORDS));
    assert!(
        gone.len() >= 2,
        "the test needs files to delete: {states:#?}"
    );
    let before = wal.disk_usage();
    let before_files = on_disk(dir.path());
    let before_real = real_bytes(&before_files);
    let gone_real = real_bytes(&gone);

    // The first group alone frees nothing: the second still needs every extent.
    for &t in &TOPICS {
        consume(readers.get_mut(&("g1", t)).expect("reader"), RECORDS);
    }
    check_counters(&wal, &lay, &floors(0));
    for &t in &TOPICS {
        consume(readers.get_mut(&("g2", t)).expect("reader"), RECORDS);
    }
    // Commits mark extents consumed at once; only the unlink is in the background.
    check_counters(&wal, &lay, &floors(RECORDS));
    drop(readers);
    wait_gone(&gone);

    let kept: BTreeSet<PathBuf> = before_files.difference(&gone).cloned().collect();
    assert_eq!(on_disk(dir.path()), kept, "exactly the consumed files went");
    assert_eq!(listed(&wal), kept);
    let after = wal.disk_usage();
    assert_eq!(after.files, before.files - gone.len() as u64);
    assert_eq!(after.bytes, before.bytes - gone.len() as u64 * FILE_BYTES);
    // The filesystem may add a page of its own metadata (an extent tree block) to a kept
    // file as its unwritten extents are converted, so allow one per kept file.
    let kept_real = real_bytes(&kept);
    let expect_real = before_real - gone_real;
    assert!(
        kept_real >= expect_real && kept_real <= expect_real + 4096 * kept.len() as u64,
        "kept files occupy {kept_real} bytes, expected {expect_real} (+1 page per file)"
    );
    check_counters(&wal, &lay, &floors(RECORDS));
    check_read_back(&wal, &lay, &floors(RECORDS));
    let firsts: Vec<u64> = TOPICS
        .iter()
        .map(|t| wal.topic_info(t).expect("info").first_offset)
        .collect();
    wal.close().expect("close");

    // Reopen: nothing comes back, nothing more goes, counters are rebuilt from the cursors.
    let wal = open(dir.path());
    assert_eq!(on_disk(dir.path()), kept);
    assert_eq!(listed(&wal), kept);
    check_counters(&wal, &lay, &floors(RECORDS));
    check_read_back(&wal, &lay, &floors(RECORDS));
    for (t, first) in TOPICS.iter().zip(firsts) {
        assert_eq!(wal.topic_info(t).expect("info").first_offset, first);
        let mut g = wal.reader(t, "g1").expect("reader");
        assert_eq!(g.position(), RECORDS, "{t}: g1 resumes at its commit");
        assert!(g.next().expect("next").is_none());
    }
    assert_eq!(
        wal.append("alpha", b"after reopen").expect("append"),
        RECORDS
    );
    wal.close().expect("close");
}

/// Registers `fast` on every topic and `slow` on alpha, fills, and commits `fast` to the end
/// and `slow` to `slow_at`. Returns the open `Wal`, the slow reader and the layout, states and
/// disk usage from before the commits.
fn slow_setup(dir: &Path, slow_at: u64) -> (Wal, Reader, Vec<Ext>, Vec<FileState>) {
    let wal = open(dir);
    let mut fast = Vec::new();
    for &t in &TOPICS {
        wal.writer(t).expect("create topic");
        fast.push(wal.reader(t, "fast").expect("reader"));
    }
    let mut slow = wal.reader("alpha", "slow").expect("reader");
    fill(&wal);
    settle_spare(&wal, BLOCKS_PER_FILE);
    let lay = layout(dir);
    let states = wal.file_states();
    for r in &mut fast {
        consume(r, RECORDS);
    }
    consume(&mut slow, slow_at);
    (wal, slow, lay, states)
}

fn slow_floors(slow_at: u64) -> Floors {
    let mut f = floors(RECORDS);
    f.insert("alpha", slow_at);
    f
}

#[test]
fn a_slow_group_holds_exactly_the_files_of_its_unconsumed_extents() {
    let dir = tempdir();
    let slow_at = RECORDS / 3;
    let (wal, mut slow, lay, states) = slow_setup(dir.path(), slow_at);
    let all_files = on_disk(dir.path());

    let gone = expected_gone(&lay, &states, &slow_floors(slow_at));
    let gone_later = expected_gone(&lay, &states, &floors(RECORDS));
    assert!(
        !gone.is_empty() && gone_later.len() > gone.len(),
        "the slow group must hold some files the fast one would free: {states:#?}"
    );
    let held: BTreeSet<PathBuf> = gone_later.difference(&gone).cloned().collect();
    for p in &held {
        assert!(
            lay.iter()
                .any(|e| &e.file == p && e.topic == "alpha" && !consumed(e, &slow_floors(slow_at))),
            "{p:?} is held only because it has an extent the slow group has not consumed"
        );
    }
    check_counters(&wal, &lay, &slow_floors(slow_at));
    wait_gone(&gone);
    let kept: BTreeSet<PathBuf> = all_files.difference(&gone).cloned().collect();
    assert_eq!(on_disk(dir.path()), kept, "the slow group's files stay");
    assert_eq!(listed(&wal), kept);
    check_read_back(&wal, &lay, &slow_floors(slow_at));
    let again = wal.reader("alpha", "slow").expect("reader");
    assert_eq!(
        again.position(),
        slow_at,
        "the slow group resumes at its commit"
    );
    drop(again);

    // It catches up: its files go too.
    let before = wal.disk_usage();
    consume(&mut slow, RECORDS);
    check_counters(&wal, &lay, &floors(RECORDS));
    wait_gone(&gone_later);
    let kept: BTreeSet<PathBuf> = all_files.difference(&gone_later).cloned().collect();
    assert_eq!(on_disk(dir.path()), kept);
    assert_eq!(
        wal.disk_usage().bytes,
        before.bytes - held.len() as u64 * FILE_BYTES
    );
    check_read_back(&wal, &lay, &floors(RECORDS));
    wal.close().expect("close");
}

#[test]
fn deleting_the_slow_group_releases_its_files() {
    let dir = tempdir();
    let slow_at = RECORDS / 4;
    let (wal, mut slow, lay, states) = slow_setup(dir.path(), slow_at);
    let all_files = on_disk(dir.path());
    wait_gone(&expected_gone(&lay, &states, &slow_floors(slow_at)));

    assert!(matches!(
        wal.delete_group("alpha", "nobody"),
        Err(Error::UnknownGroup { .. })
    ));
    assert_eq!(
        wal.topic_info("alpha").expect("info").groups,
        ["fast", "slow"]
    );
    wal.delete_group("alpha", "slow").expect("delete group");
    assert_eq!(wal.topic_info("alpha").expect("info").groups, ["fast"]);
    assert!(matches!(
        wal.delete_group("alpha", "slow"),
        Err(Error::UnknownGroup { .. })
    ));
    // Its reader may not resurrect the cursor.
    let _ = slow.next().expect("next");
    assert!(
        matches!(slow.commit(), Err(Error::UnknownGroup { ref group, .. }) if group == "slow"),
        "a reader of a deleted group fails on commit"
    );
    drop(slow);

    check_counters(&wal, &lay, &floors(RECORDS));
    let gone = expected_gone(&lay, &states, &floors(RECORDS));
    wait_gone(&gone);
    let kept: BTreeSet<PathBuf> = all_files.difference(&gone).cloned().collect();
    assert_eq!(on_disk(dir.path()), kept);
    check_read_back(&wal, &lay, &floors(RECORDS));
    wal.close().expect("close");

    // The deleted group stays deleted: after a reopen it holds nothing back.
    let wal = open(dir.path());
    assert_eq!(wal.topic_info("alpha").expect("info").groups, ["fast"]);
    assert_eq!(on_disk(dir.path()), kept);
    check_counters(&wal, &lay, &floors(RECORDS));
    wal.close().expect("close");
}

#[test]
fn files_consumed_before_a_stop_are_deleted_during_open() {
    let dir = tempdir();
    {
        let wal = open(dir.path());
        fill(&wal);
        wal.close().expect("close");
    }
    // A copy of the directory as it was before anything was consumed.
    let image = tempdir();
    copy_dir(dir.path(), image.path());
    let lay = layout(image.path());
    let (states, before) = {
        // Counters and usage of the image before any commit (files stay: no group).
        let wal = open(image.path());
        check_counters(&wal, &lay, &floors(0));
        let out = (wal.file_states(), wal.disk_usage());
        wal.close().expect("close");
        out
    };
    let before_files = on_disk(image.path());
    assert_eq!(before_files.len() as u64, before.files);

    // Both groups consume everything in the original directory.
    {
        let wal = open(dir.path());
        for g in ["g1", "g2"] {
            for &t in &TOPICS {
                consume(&mut wal.reader(t, g).expect("reader"), RECORDS);
            }
        }
        wal.close().expect("close");
    }
    // The image gets the commits but kept every data file: a stop before the deletion ran.
    let cursors = dir.path().join("cursors");
    for entry in std::fs::read_dir(&cursors).expect("list cursors") {
        let entry = entry.expect("cursor entry");
        std::fs::copy(
            entry.path(),
            image.path().join("cursors").join(entry.file_name()),
        )
        .expect("copy cursor");
    }
    let gone = expected_gone(&lay, &states, &floors(RECORDS));
    assert!(
        gone.len() >= 2,
        "the test needs files to delete: {states:#?}"
    );
    assert!(gone.iter().all(|p| p.exists()));

    let wal = open(image.path());
    // No polling: open deletes them before it returns.
    let kept: BTreeSet<PathBuf> = before_files.difference(&gone).cloned().collect();
    assert_eq!(
        on_disk(image.path()),
        kept,
        "open deleted the consumed files"
    );
    assert_eq!(listed(&wal), kept);
    let after = wal.disk_usage();
    assert_eq!(after.files, before.files - gone.len() as u64);
    assert!(
        after.bytes <= before.bytes - gone.len() as u64 * FILE_BYTES,
        "disk usage {after:?} did not drop by {} files from {before:?}",
        gone.len()
    );
    check_counters(&wal, &lay, &floors(RECORDS));
    check_read_back(&wal, &lay, &floors(RECORDS));
    for &t in &TOPICS {
        assert_eq!(
            wal.reader(t, "g2").expect("reader").position(),
            RECORDS,
            "{t}: the group resumes at its commit"
        );
    }
    wal.close().expect("close");
}

/// A topic without groups pins the first file; the files after it hold only consumed
/// extents of `busy` and go. The first file still holds `busy`'s oldest (consumed) extents,
/// so on disk `busy` now has a hole in its offsets between the extents of the first file and
/// those that remain: a reopen must accept it (the hole is what deletion made).
#[test]
fn reopen_after_deleting_files_behind_a_pinned_one() {
    let dir = tempdir();
    let wal = open(dir.path());
    let pin = wal.writer("pin").expect("writer");
    let busy = wal.writer("busy").expect("writer");
    let mut group = wal.reader("busy", "g").expect("reader");
    let mut next = 0;
    for i in 0..20 {
        pin.append(&topic_value("pin", i)).expect("append");
        assert_eq!(
            busy.append(&topic_value("busy", next)).expect("append"),
            next
        );
        next += 1;
    }
    // About four files of `busy` alone.
    while wal.file_states().len() < 5 {
        assert_eq!(
            busy.append(&topic_value("busy", next)).expect("append"),
            next
        );
        next += 1;
    }
    settle_spare(&wal, BLOCKS_PER_FILE);
    let lay = layout(dir.path());
    let states = wal.file_states();
    let mut f = Floors::new();
    f.insert("busy", next);
    let gone_rule = |e: &Ext| e.topic == "busy" && e.end.is_some_and(|end| end <= next);
    let gone: BTreeSet<PathBuf> = states
        .iter()
        .filter(|s| s.fully_allocated)
        .filter(|s| lay.iter().filter(|e| e.file == s.path).all(gone_rule))
        .map(|s| s.path.clone())
        .collect();
    let first_file = &states[0].path;
    assert!(!gone.contains(first_file), "`pin` keeps the first file");
    assert!(gone.len() >= 2, "{states:#?}");
    consume(&mut group, next);
    drop(group);
    wait_gone(&gone);
    let info = wal.topic_info("busy").expect("info");
    wal.close().expect("close");

    // Regression: `busy`'s consumed extents stay in the pinned first file, and its later files
    // were deleted. Consumed extents are marked on disk before any file goes, so recovery
    // skips them instead of seeing a gap ("record offset out of sequence").
    let wal = open(dir.path());
    let after = wal.topic_info("busy").expect("info");
    assert_eq!(after.first_offset, info.first_offset);
    assert_eq!(after.next_offset, next);
    let rec = wal.read("busy", next - 1).expect("the newest record reads");
    assert_eq!(rec.value(), topic_value("busy", next - 1).as_slice());
    assert_eq!(wal.topic_info("pin").expect("info").first_offset, 0);
    wal.close().expect("close");
}

/// A read-only handle (as a Spark executor holds) follows the writer's deletions: after a
/// refresh its topics start where the writer's do, records it already holds stay readable
/// (their mapping outlives the unlink), and a reader positioned in deleted data gets
/// `OffsetOutOfRange` rather than stale bytes.
#[test]
fn a_read_only_handle_follows_deletions_after_refresh() {
    let dir = tempdir();
    let wal = open(dir.path());
    fill(&wal);
    wal.flush().expect("flush");
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("open read-only");
    let held = ro.read("alpha", 0).expect("read before deletion");
    let mut stale = ro
        .reader_with(
            "alpha",
            ReaderOptions::default().start(StartPosition::Offset(0)),
        )
        .expect("reader");
    for topic in TOPICS {
        let mut r = wal.reader(topic, "all").expect("reader");
        while r.next().expect("next").is_some() {}
        r.commit().expect("commit");
    }
    let deadline = Instant::now() + DEADLINE;
    while wal.file_states().iter().any(|s| s.deletable)
        || wal.topic_info("alpha").expect("info").first_offset == 0
    {
        assert!(Instant::now() < deadline, "nothing was deleted");
        std::thread::sleep(Duration::from_millis(10));
    }
    ro.refresh().expect("refresh");
    for topic in TOPICS {
        let w = wal.topic_info(topic).expect("writer info");
        let r = ro.topic_info(topic).expect("read-only info");
        assert!(w.first_offset > 0, "{topic}: nothing deleted");
        assert_eq!(r.first_offset, w.first_offset, "{topic}");
        assert_eq!(r.next_offset, w.next_offset, "{topic}");
        let first = ro.read(topic, r.first_offset).expect("first kept record");
        assert_eq!(first.value(), topic_value(topic, r.first_offset).as_slice());
        assert!(matches!(
            ro.read(topic, 0),
            Err(Error::OffsetOutOfRange { .. })
        ));
    }
    // Held before the deletion: still mapped, still the same bytes.
    assert_eq!(held.value(), topic_value("alpha", 0).as_slice());
    // The reader still holds its first extent and reads it; past it, deleted data is an error.
    let mut read = 0u64;
    let err = loop {
        match stale.next() {
            Ok(Some(rec)) => {
                assert_eq!(rec.value, topic_value("alpha", rec.offset).as_slice());
                read += 1;
            }
            Ok(None) => panic!("the reader reached the end through deleted data"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::OffsetOutOfRange { .. }), "{err}");
    assert!(read < wal.topic_info("alpha").expect("info").first_offset);
}

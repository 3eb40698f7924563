//! Goal: in shared mode (the default) any number of processes append to one directory, to
//! one topic and to their own: per-topic offsets stay dense, each process's records keep
//! its order, every acknowledged record is there byte for byte (in every process's view,
//! and after all of them closed); a process killed while it holds a topic's append lock
//! (its record copied, not published) blocks the others for a bounded repair only, and its
//! unpublished record is never seen; a stopped holder is reported, not broken into; an
//! exclusive handle and shared ones exclude each other.
//!
//! Method: the test binary re-executes itself as child appenders (`child_process_entry`);
//! named crash points (`TIDELOG_CRASH_AT`) kill or stop a child at a chosen step.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{self, child_command, child_env, geometry, tempdir};
use tidelog::format::ProgressState;
use tidelog::{Append, Config, Durability, Error, Wal};

const SHARED_TOPIC: &str = "shared";
/// Generous: CI machines are slow and busy.
const WAIT: Duration = Duration::from_secs(30);

fn cfg() -> Config {
    // Small extents: the appenders roll often, and roll after each other.
    geometry(16, 64 * 1024)
}

/// `(child, seq)` tagged value, padded so records differ in length.
fn value(child: u32, seq: u64) -> Vec<u8> {
    let mut v = format!("{child}:{seq}:").into_bytes();
    v.resize(v.len() + (seq % 97) as usize, b'x');
    v
}

fn parse(v: &[u8]) -> (u32, u64) {
    let text = std::str::from_utf8(v).unwrap();
    let mut parts = text.split(':');
    (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    )
}

/// Child: `append:CHILD:COUNT` appends COUNT records to the shared topic (singles and
/// batches) and as many to its own; `hold:CHILD` appends until a crash point stops it.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let parts: Vec<&str> = mode.split(':').collect();
    let child: u32 = parts[1].parse().unwrap();
    if parts[0] == "commit" {
        // `commit:CHILD:OFFSET`: commits OFFSET for group "g" of the shared topic.
        let wal = Wal::open_with(&dir, cfg()).unwrap();
        let mut reader = wal.reader(SHARED_TOPIC, "g").unwrap();
        reader.commit_offset(parts[2].parse().unwrap()).unwrap();
        wal.close().unwrap();
        return;
    }
    let config = if parts[0].starts_with("always") {
        cfg().durability(Durability::Always)
    } else {
        cfg()
    };
    let wal = Wal::open_with(&dir, config).unwrap();
    let count: u64 = parts.get(2).map_or(u64::MAX / 2, |c| c.parse().unwrap());
    if parts[0] == "flushing" {
        // `flushing:CHILD:COUNT:EVERY`: COUNT records to the shared topic, a flush after
        // every EVERY of them, then a close.
        let every: u64 = parts[3].parse().unwrap();
        for seq in 0..count {
            wal.append(SHARED_TOPIC, &value(child, seq)).unwrap();
            if seq % every == every - 1 {
                wal.flush().unwrap();
            }
        }
        wal.close().unwrap();
        return;
    }
    if parts[0] == "flush" {
        // `flush:CHILD:COUNT`: COUNT records to the shared topic, then a flush.
        for seq in 0..count {
            wal.append(SHARED_TOPIC, &value(child, seq)).unwrap();
        }
        wal.flush().unwrap();
        return;
    }
    if parts[0] == "shared" || parts[0] == "always-shared" {
        // `shared:CHILD[:COUNT[:LEN]]`: one record at a time to the shared topic only (each
        // padded to LEN bytes if given); `always-shared`: the same, each durable.
        let len: Option<usize> = parts.get(3).map(|l| l.parse().unwrap());
        for seq in 0..count {
            let mut v = value(child, seq);
            if let Some(len) = len {
                v.resize(len, b'y');
            }
            wal.append(SHARED_TOPIC, &v).unwrap();
        }
        return;
    }
    let own = format!("own-{child}");
    let mut seq = 0;
    while seq < count {
        if seq % 7 == 3 && seq + 3 <= count {
            let values: Vec<Vec<u8>> = (seq..seq + 3).map(|s| value(child, s)).collect();
            let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v)).collect();
            wal.append_batch_records(SHARED_TOPIC, &records).unwrap();
        } else {
            wal.append(SHARED_TOPIC, &value(child, seq)).unwrap();
        }
        wal.append(&own, &value(child, seq)).unwrap();
        seq += if seq % 7 == 3 && seq + 3 <= count {
            3
        } else {
            1
        };
    }
    wal.close().unwrap();
}

/// The loop passes of a child appending `count` records to the shared topic: one record
/// of its own topic each.
fn iterations(count: u64) -> u64 {
    let (mut seq, mut n) = (0, 0);
    while seq < count {
        seq += if seq % 7 == 3 && seq + 3 <= count {
            3
        } else {
            1
        };
        n += 1;
    }
    n
}

/// Every record of `topic` in `wal`, by offset.
/// (A reader made now starts caught up with every process's appends.)
fn read_all(wal: &Wal, topic: &str) -> Vec<(u64, Vec<u8>)> {
    common::read_all(wal, topic)
        .into_iter()
        .map(|(offset, _, value)| (offset, value))
        .collect()
}

/// A seek of `wal`'s reader to `offset` of the shared topic reads that record: in a sealed
/// extent the seek reads its index footer, checked against the `Sealed` slot's checksum.
fn seek_reads(wal: &Wal, offset: u64) {
    let mut reader = wal.reader(SHARED_TOPIC, "seek").unwrap();
    reader.seek(offset).unwrap();
    assert_eq!(reader.next().unwrap().unwrap().offset, offset);
}

/// Offsets of the shared topic dense from 0; each child's sequence numbers in offset order
/// (values padded or not).
fn seqs_by_child(wal: &Wal) -> HashMap<u32, Vec<u64>> {
    let mut per_child: HashMap<u32, Vec<u64>> = HashMap::new();
    for (i, (offset, v)) in read_all(wal, SHARED_TOPIC).iter().enumerate() {
        assert_eq!(*offset, i as u64, "offsets must be dense");
        let (child, seq) = parse(v);
        per_child.entry(child).or_default().push(seq);
    }
    per_child
}

/// Offsets dense from 0, and each child's sequence numbers strictly increasing; returns
/// the records per child.
fn check_topic(records: &[(u64, Vec<u8>)]) -> HashMap<u32, Vec<u64>> {
    let mut per_child: HashMap<u32, Vec<u64>> = HashMap::new();
    for (i, (offset, v)) in records.iter().enumerate() {
        assert_eq!(*offset, i as u64, "offsets must be dense");
        let (child, seq) = parse(v);
        assert_eq!(*v, value(child, seq), "record {offset} differs");
        let seqs = per_child.entry(child).or_default();
        assert!(
            seqs.last().is_none_or(|last| *last < seq),
            "child {child}'s records out of order at offset {offset}"
        );
        seqs.push(seq);
    }
    per_child
}

#[test]
fn processes_append_to_one_topic_and_their_own() {
    const CHILDREN: u32 = 4;
    const COUNT: u64 = 1500;
    let dir = tempdir();
    // The parent holds the directory too, and appends while the children do.
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    let mut children: Vec<_> = (1..=CHILDREN)
        .map(|c| {
            child_command(module_path!(), dir.path(), &format!("append:{c}:{COUNT}"))
                .spawn()
                .unwrap()
        })
        .collect();
    for seq in 0..COUNT {
        wal.append(SHARED_TOPIC, &value(0, seq)).unwrap();
    }
    for child in &mut children {
        assert!(child.wait().unwrap().success(), "an appender failed");
    }
    let check = |wal: &Wal| {
        let shared = read_all(wal, SHARED_TOPIC);
        let per_child = check_topic(&shared);
        for c in 0..=CHILDREN {
            let seqs = &per_child[&c];
            assert_eq!(seqs.len() as u64, COUNT, "child {c}'s records");
            assert!(seqs.iter().copied().eq(0..COUNT), "child {c}'s sequence");
        }
        for c in 1..=CHILDREN {
            let own = read_all(wal, &format!("own-{c}"));
            assert_eq!(own.len() as u64, iterations(COUNT));
            check_topic(&own);
        }
    };
    // The parent sees every child's records (other processes' rolls included)...
    check(&wal);
    // ...and so does a fresh handle after everyone closed, from the files alone.
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    check(&wal);
}

#[test]
fn exclusive_and_shared_handles_exclude_each_other() {
    let dir = tempdir();
    let shared = Wal::open_with(dir.path(), cfg()).unwrap();
    let second = Wal::open_with(dir.path(), cfg()).unwrap();
    assert!(matches!(
        Wal::open_with(dir.path(), cfg().exclusive(true)),
        Err(Error::Locked { .. })
    ));
    shared.close().unwrap();
    second.close().unwrap();
    let exclusive = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    assert!(matches!(
        Wal::open_with(dir.path(), cfg()),
        Err(Error::Locked { .. })
    ));
    exclusive.close().unwrap();
}

/// Kills a child at its `n`th pass through `point` and returns once it is dead.
fn kill_child_at(dir: &Path, point: &str, n: u64) {
    kill_child_in_mode_at(dir, "hold:9", point, n);
}

/// [`kill_child_at`] for a child started in `mode`.
fn kill_child_in_mode_at(dir: &Path, mode: &str, point: &str, n: u64) {
    let mut child = child_command(module_path!(), dir, mode)
        .env("TIDELOG_CRASH_AT", format!("kill:{point}:{n}"))
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child must die at its crash point");
}

#[test]
fn a_holder_killed_mid_append_is_taken_over() {
    for point in ["append-locked", "append-copied"] {
        let dir = tempdir();
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
        // The child dies holding the shared topic's append lock: at its 39th append (it
        // alternates the shared topic and its own), after the lock (and after copying its
        // record, not published).
        kill_child_at(dir.path(), point, 39);
        let start = Instant::now();
        wal.append(SHARED_TOPIC, &value(0, 1)).unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{point}: the repair took {:?}",
            start.elapsed()
        );
        let records = read_all(&wal, SHARED_TOPIC);
        let per_child = check_topic(&records);
        // The child's appends before it (some batches) went in; that one never shows.
        let child = &per_child[&9];
        assert!(!child.is_empty() && child.len() < 45, "{point}: {child:?}");
        assert_eq!(per_child[&0], vec![0, 1]);
        wal.close().unwrap();
        let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
        assert_eq!(
            read_all(&wal, SHARED_TOPIC),
            records,
            "{point}: after reopen"
        );
    }
}

/// A holder killed after copying its record (valid on disk, never published), then a
/// survivor whose next record does not fit the extent: the survivor's new extent starts at
/// the offset the dead one's frame also claims. That frame is erased at the takeover, so
/// recovery does not take it for the record before the new extent (and drop every extent
/// after it as past a gap).
#[test]
fn a_survivor_that_rolls_after_a_killed_holder_keeps_every_record() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    // Its 39th append is to the shared topic (it alternates with its own).
    kill_child_at(dir.path(), "append-copied", 39);
    // Larger than what is left of any 64 KiB extent after a few records: it rolls.
    let mut big = value(0, 1);
    big.resize(60 * 1024, b'b');
    let offset = wal.append(SHARED_TOPIC, &big).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 2)).unwrap();
    let records = read_all(&wal, SHARED_TOPIC);
    assert_eq!(records.len() as u64, offset + 2);
    // As a kill of every process would leave it (nothing flushed: a clean close would seal
    // the old extent, and a seal is trusted without a scan).
    let image = tempdir();
    common::copy_dir(dir.path(), image.path());
    wal.close().unwrap();
    let wal = Wal::open_with(image.path(), cfg().exclusive(true)).unwrap();
    let report = wal.recovery_report();
    assert_eq!(report.dropped_extents, 0, "{report:?}");
    assert_eq!(read_all(&wal, SHARED_TOPIC), records, "after recovery");
}

#[test]
fn a_holder_killed_while_allocating_is_taken_over() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    // Its first roll (after the topic's first extent fills) dies holding the allocator.
    kill_child_at(dir.path(), "alloc-locked", 2);
    for seq in 1..2000 {
        wal.append(SHARED_TOPIC, &value(0, seq)).unwrap();
    }
    let records = read_all(&wal, SHARED_TOPIC);
    let per_child = check_topic(&records);
    assert_eq!(per_child[&0].len(), 2000);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    assert_eq!(read_all(&wal, SHARED_TOPIC), records);
}

/// A directory where a holder was killed rolling (`roll-identity`: its new extent's
/// identity written, the extent never named), so an extent holding no record lies among
/// the topic's, with retention on the topic; files of `blocks` blocks of 64 KiB. Returns
/// it, this process's handle, the empty extent's first offset and the data files then.
fn killed_roll(blocks: u64) -> (tempfile::TempDir, Wal, u64, Vec<std::path::PathBuf>) {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), retained(blocks)).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    kill_child_in_mode_at(dir.path(), "shared:9", "roll-identity", 1);
    // The empty extent starts where the killed roll's records would have.
    let first = wal.topic_info(SHARED_TOPIC).unwrap().next_offset;
    let files = common::data_files(dir.path());
    (dir, wal, first, files)
}

/// Shared mode, retention on the shared topic (two blocks kept), `blocks` blocks a file.
fn retained(blocks: u64) -> Config {
    let mut c = common::geometry(blocks, 64 * 1024).topic_retention(
        SHARED_TOPIC,
        tidelog::Retention::default().max_bytes(2 * 64 * 1024),
    );
    c.sync_interval_ms = 10;
    c
}

/// Appends `n` records of 2000 bytes to the shared topic (sequence numbers after `seq`).
fn append_padded(wal: &Wal, seq: &mut u64, n: u64) {
    for _ in 0..n {
        *seq += 1;
        let mut v = value(0, *seq);
        v.resize(2000, b'p');
        wal.append(SHARED_TOPIC, &v).unwrap();
    }
}

/// The shared topic reads dense from its first offset to its next; retention may pass the
/// reader meanwhile (then it reads again).
fn check_retained(wal: &Wal) {
    let (info, records) = common::read_retained(wal, SHARED_TOPIC);
    let first = records.first().map_or(info.first_offset, |r| r.0);
    assert_eq!(first, info.first_offset, "from the first offset");
    let end = records.last().map_or(first, |r| r.0 + 1);
    assert!(end >= info.next_offset, "read up to the next offset");
}

/// The extent a killed roll left empty stays in the current file while retention retires
/// the extents around it (the next roll's among them, from the same first offset): a
/// read-only open, a joining process and a reopen alone start the topic at the first
/// extent kept, not at the empty one below it.
#[test]
fn an_extent_left_empty_by_a_killed_roll_does_not_start_the_topic() {
    // One file holds it all: no file is passed, so the leader judges none.
    let (dir, wal, empty_first, _) = killed_roll(256);
    let mut seq = 0;
    append_padded(&wal, &mut seq, 300);
    common::eventually("retention passes the empty extent", WAIT, || {
        wal.topic_info(SHARED_TOPIC).unwrap().first_offset > empty_first + 100
    });
    assert_eq!(common::data_files(dir.path()).len(), 1);
    let ro = Wal::open_read_only_with(dir.path(), retained(256)).unwrap();
    check_retained(&ro);
    drop(ro);
    let other = Wal::open_with(dir.path(), retained(256)).unwrap();
    check_retained(&other);
    other.close().unwrap();
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), retained(256).exclusive(true)).unwrap();
    check_retained(&wal);
}

/// Once the allocator moved past the file of an extent a killed roll left empty, and
/// retention passed it, the leader marks it retired with the rest, so the file goes (no
/// topic's chain holds it: nothing else ever would).
#[test]
fn an_extent_left_empty_by_a_killed_roll_does_not_keep_its_file() {
    let (dir, wal, _, files_then) = killed_roll(16);
    let mut seq = 0;
    append_padded(&wal, &mut seq, 2000);
    common::eventually("the empty extent's file is deleted", WAIT, || {
        append_padded(&wal, &mut seq, 10);
        files_then.iter().all(|f| !f.exists())
    });
    check_retained(&wal);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), retained(16).exclusive(true)).unwrap();
    check_retained(&wal);
}

#[test]
fn a_stopped_holder_is_reported_not_broken_into() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    let mut child = child_command(module_path!(), dir.path(), "hold:9")
        .env("TIDELOG_CRASH_AT", "stop:append-locked:5")
        .spawn()
        .unwrap();
    // Until the child stopped holding the lock.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seq = 1;
    let err = loop {
        match wal.append(SHARED_TOPIC, &value(0, seq)) {
            Ok(_) => {
                seq += 1;
                assert!(Instant::now() < deadline, "the child never stopped");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => break e,
        }
    };
    let Error::LockTimeout { holder_pid, .. } = err else {
        panic!("expected LockTimeout, got {err:?}");
    };
    assert_eq!(holder_pid, child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    // Dead now: taken over.
    wal.append(SHARED_TOPIC, &value(0, seq)).unwrap();
    check_topic(&read_all(&wal, SHARED_TOPIC));
}

#[test]
fn always_appends_of_several_processes_are_durable_when_they_return() {
    const CHILDREN: u32 = 4;
    const COUNT: u64 = 150;
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    // A reader made before the children append: `refresh` catches it up.
    let mut early = wal
        .reader_with(
            SHARED_TOPIC,
            tidelog::ReaderOptions::default().start(tidelog::StartPosition::Earliest),
        )
        .unwrap();
    let mut children: Vec<_> = (1..=CHILDREN)
        .map(|c| {
            child_command(module_path!(), dir.path(), &format!("always:{c}:{COUNT}"))
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        assert!(child.wait().unwrap().success(), "an appender failed");
    }
    wal.refresh().unwrap();
    let mut seen = 0;
    while early.next().unwrap().is_some() {
        seen += 1;
    }
    assert_eq!(
        seen,
        1 + u64::from(CHILDREN) * COUNT,
        "refresh caught the reader up"
    );
    let records = read_all(&wal, SHARED_TOPIC);
    let per_child = check_topic(&records);
    for c in 1..=CHILDREN {
        assert_eq!(per_child[&c].len() as u64, COUNT);
    }
    // Every child's appends returned durable: the shared durable offset covers them (the
    // parent's own first record included, which a child's sync covered).
    let info = wal.topic_info(SHARED_TOPIC).unwrap();
    assert_eq!(info.durable_offset, info.next_offset, "{info:?}");
}

#[test]
fn the_last_commit_of_a_group_wins_across_processes() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    for seq in 0..20 {
        wal.append(SHARED_TOPIC, &value(0, seq)).unwrap();
    }
    let mut reader = wal.reader(SHARED_TOPIC, "g").unwrap();
    reader.commit_offset(5).unwrap();
    let committed = |wal: &Wal| {
        let r = wal.reader(SHARED_TOPIC, "g").unwrap();
        r.committed()
    };
    // Another process commits after this one, lower: it wins.
    let out = child_command(module_path!(), dir.path(), "commit:1:3")
        .output()
        .unwrap();
    assert!(out.status.success());
    let fresh = Wal::open_read_only_with(dir.path(), cfg()).unwrap();
    assert_eq!(committed(&fresh), Some(3));
    // This process commits again, over what it had not seen: it wins.
    reader.commit_offset(12).unwrap();
    let fresh = Wal::open_read_only_with(dir.path(), cfg()).unwrap();
    assert_eq!(committed(&fresh), Some(12));
    let out = child_command(module_path!(), dir.path(), "commit:2:17")
        .output()
        .unwrap();
    assert!(out.status.success());
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    assert_eq!(committed(&wal), Some(17));
}

#[test]
fn a_process_killed_in_its_sync_turn_is_taken_over() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg().durability(Durability::Always)).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    // The child dies holding the topic's sync turn, at its 10th sync.
    let mut child = child_command(module_path!(), dir.path(), "always:9")
        .env("TIDELOG_CRASH_AT", "kill:sync-turn:10")
        .spawn()
        .unwrap();
    assert!(
        !child.wait().unwrap().success(),
        "the child must die at its crash point"
    );
    let start = Instant::now();
    wal.append(SHARED_TOPIC, &value(0, 1)).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "the takeover took {:?}",
        start.elapsed()
    );
    let info = wal.topic_info(SHARED_TOPIC).unwrap();
    assert_eq!(info.durable_offset, info.next_offset);
    let per_child = check_topic(&read_all(&wal, SHARED_TOPIC));
    assert_eq!(per_child[&0], vec![0, 1]);
}

/// A process killed after it wrote a group commit's claim and commit copy, before the msync
/// that makes them durable: the next process's commit does not take that copy's records for
/// durable (they are not below the topic's durable offset), so its own copy covers them too.
#[test]
fn a_commit_copy_whose_writer_died_before_its_msync_is_never_claimed() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg().durability(Durability::Always)).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    // The child's 5th commit copy is written, then it dies: 4 records durable, 1 not.
    let mut child = child_command(module_path!(), dir.path(), "always-shared:1:20")
        .env("TIDELOG_CRASH_AT", "kill:commit-staged:5")
        .spawn()
        .unwrap();
    assert!(
        !child.wait().unwrap().success(),
        "the child must die at its crash point"
    );
    assert_eq!(wal.topic_info(SHARED_TOPIC).unwrap().next_offset, 6);
    wal.append(SHARED_TOPIC, &value(0, 1)).unwrap();
    let copies = common::commit_copies(&common::extents(dir.path()).pop().unwrap());
    let newest = copies
        .iter()
        .max_by_key(|c| c.end())
        .expect("a commit copy");
    // The newest copy holds the dead child's unsynced record (offset 5) and this one's
    // (offset 6): it starts where record 5 starts, at the claim below the durable offset.
    assert_eq!(newest.record_count, 7, "{newest:?}");
    let frames = common::frames(dir.path());
    let five = frames.iter().find(|f| f.offset == 5).unwrap();
    let start = five.pos - common::extents(dir.path()).last().unwrap().start;
    assert_eq!(newest.start, start, "the copy starts at record 5");
    let info = wal.topic_info(SHARED_TOPIC).unwrap();
    assert_eq!((info.durable_offset, info.next_offset), (7, 7));
    let per_child = check_topic(&read_all(&wal, SHARED_TOPIC));
    assert_eq!(per_child[&0], vec![0, 1]);
    assert_eq!(per_child[&1], vec![0, 1, 2, 3, 4]);
}

#[test]
fn processes_sealing_the_same_extents_leave_every_footer_named_by_its_seal() {
    let dir = tempdir();
    // Three processes append to one topic and flush often: each holds the extents it
    // appended to or lined up with, and each pass tries to seal those that ended.
    let mut children: Vec<_> = (1..=3)
        .map(|c| {
            child_command(module_path!(), dir.path(), &format!("flushing:{c}:5000:40"))
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    let per_child = check_topic(&read_all(&wal, SHARED_TOPIC));
    for c in 1..=3 {
        assert_eq!(per_child[&c], (0..5000).collect::<Vec<_>>(), "child {c}");
    }
    // Every sealed extent's footer is the one its `Sealed` slot names: a seek into it reads
    // the footer and checks it against the slot's checksum.
    let extents = common::extents(dir.path());
    let sealed: Vec<_> = extents
        .iter()
        .filter(|e| e.progress.as_ref().map(|p| p.state) == Some(ProgressState::Sealed))
        .collect();
    assert!(
        sealed.len() >= 10,
        "{} of {} extents sealed",
        sealed.len(),
        extents.len()
    );
    for e in sealed {
        let p = e.progress.as_ref().unwrap();
        assert!(p.footer_count > 0, "extent at {}", e.start);
        seek_reads(&wal, e.id.first_offset + p.record_count - 1);
    }
    wal.close().unwrap();
}

#[test]
fn a_seal_cut_short_never_writes_its_footer_under_another_process_seal() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    // The child rolls within its first few dozen appends and stops in its first seal after
    // it found the extent unsealed, before it wrote its footer, holding the seal lock.
    let mut child = stopped_child(
        dir.path(),
        "always-shared:1:60:2000",
        "seal-checked:1",
        "in its seal, before its footer",
    );
    // This process's flush cannot seal that extent meanwhile (its footer would hold other
    // index entries than the child's): it claims it instead.
    wal.append(SHARED_TOPIC, &value(0, 1)).unwrap();
    wal.flush().unwrap();
    resume(child.id());
    assert!(child.wait().unwrap().success());
    wal.flush().unwrap();
    let extents = common::extents(dir.path());
    let first = &extents[0];
    let p = first.progress.as_ref().expect("a slot");
    assert_eq!(p.state, ProgressState::Sealed);
    wal.close().unwrap();
    // The footer on disk is the one the `Sealed` slot names: a seek into the extent, in a
    // handle that never held its index, reads and checks it.
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    seek_reads(&wal, p.record_count - 1);
    let per_child = seqs_by_child(&wal);
    assert_eq!(per_child[&0], vec![0, 1]);
    assert_eq!(per_child[&1], (0..60).collect::<Vec<_>>());
    wal.close().unwrap();
}

#[test]
fn a_process_killed_before_its_claim_is_synced_leaves_nothing_to_repair() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    // The child's flush writes an `Open` claim into the mapping and dies before its msync:
    // the claim is in the page cache, no lock is held.
    let mut child = child_command(module_path!(), dir.path(), "flush:1:300")
        .env("TIDELOG_CRASH_AT", "kill:claim-written:1")
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the child must die at its crash point"
    );
    let start = Instant::now();
    for seq in 1..200 {
        wal.append(SHARED_TOPIC, &value(0, seq)).unwrap();
    }
    wal.flush().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let info = wal.topic_info(SHARED_TOPIC).unwrap();
    assert_eq!(info.durable_offset, info.next_offset);
    let per_child = check_topic(&read_all(&wal, SHARED_TOPIC));
    assert_eq!(per_child[&0], (0..200).collect::<Vec<_>>());
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    let again = check_topic(&read_all(&wal, SHARED_TOPIC));
    assert_eq!(again, per_child);
    assert_eq!(wal.recovery_report().repaired_from_copies, 0);
    wal.close().unwrap();
}

#[test]
fn a_process_stopped_in_a_seal_holds_no_appender_back_and_a_dead_one_is_taken_over() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    // Large records: the child rolls within its first few dozen appends, and its group
    // commit's pass seals the extent that ended. It stops with the footer durable, holding
    // the topic's seal lock (not its append lock).
    let mut child = stopped_child(
        dir.path(),
        "always-shared:1:100000:2000",
        "seal-footer:1",
        "holding the topic's seal lock",
    );
    // Appends roll over several extents, and flushes run between them: no append waits for
    // the stopped seal (it holds no append lock). A flush waits for the child's sync turn
    // (it stopped in its pass) up to that bound, syncs on its own and leaves the seals.
    let mut appending = Duration::ZERO;
    let mut seq = 1;
    for _ in 0..3 {
        let start = Instant::now();
        for _ in 0..40 {
            let mut v = value(0, seq);
            v.resize(1500, b'z');
            wal.append(SHARED_TOPIC, &v).unwrap();
            seq += 1;
        }
        appending += start.elapsed();
        let start = Instant::now();
        wal.flush().unwrap();
        assert!(start.elapsed() < WAIT, "a flush took {:?}", start.elapsed());
    }
    assert!(
        appending < Duration::from_secs(3),
        "appends waited {appending:?} for a stopped seal"
    );
    // Meanwhile the extents that ended are claimed (`Open`, every record), not sealed.
    let extents = common::extents(dir.path());
    for e in &extents[..extents.len() - 1] {
        let p = e.progress.as_ref().expect("a claim");
        assert_eq!(p.state, ProgressState::Open, "extent at {}", e.start);
        assert!(p.record_count > 0);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The dead holder's seal lock is taken over: this process seals every extent that ended.
    wal.append(SHARED_TOPIC, &value(0, seq)).unwrap();
    wal.flush().unwrap();
    let extents = common::extents(dir.path());
    let (last, ended) = extents.split_last().unwrap();
    assert!(ended.len() >= 4, "{} extents", extents.len());
    for e in ended {
        let state = e.progress.as_ref().map(|p| p.state);
        assert_eq!(state, Some(ProgressState::Sealed), "extent at {}", e.start);
    }
    assert_ne!(
        last.progress.as_ref().map(|p| p.state),
        Some(ProgressState::Sealed)
    );
    let info = wal.topic_info(SHARED_TOPIC).unwrap();
    assert_eq!(info.durable_offset, info.next_offset);
    wal.close().unwrap();
    // Every footer checks (a seek by offset into each extent reads its index), and the
    // records are dense, this process's in order.
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    let per_child = seqs_by_child(&wal);
    let records: usize = per_child.values().map(Vec::len).sum();
    assert_eq!(records as u64, info.next_offset);
    assert_eq!(per_child[&0], (0..=seq).collect::<Vec<_>>());
    for e in ended {
        seek_reads(&wal, e.id.first_offset + 1);
    }
    wal.close().unwrap();
}

#[test]
fn a_process_stopped_in_its_sync_turn_costs_the_others_the_batching_only() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), cfg().durability(Durability::Always)).unwrap();
    wal.append(SHARED_TOPIC, &value(0, 0)).unwrap();
    let mut child = stopped_child(
        dir.path(),
        "always:9",
        "sync-turn:5",
        "holding the topic's sync turn",
    );
    // A sync of this process waits for the turn at most its bound, then syncs on its own:
    // the append neither fails nor poisons the handle.
    let start = Instant::now();
    wal.append(SHARED_TOPIC, &value(0, 1)).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "an append waited {:?}",
        start.elapsed()
    );
    wal.append(SHARED_TOPIC, &value(0, 2)).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let info = wal.topic_info(SHARED_TOPIC).unwrap();
    assert_eq!(info.durable_offset, info.next_offset);
    check_topic(&read_all(&wal, SHARED_TOPIC));
}

/// Starts a child in `mode` that stops itself at crash point `point` (`NAME:N`) and returns
/// once it has (`place` says where, for the failure message).
fn stopped_child(dir: &Path, mode: &str, point: &str, place: &str) -> std::process::Child {
    let child = child_command(module_path!(), dir, mode)
        .env("TIDELOG_CRASH_AT", format!("stop:{point}"))
        .spawn()
        .unwrap();
    common::wait_until_stopped(child.id(), WAIT, place);
    child
}

/// Resumes a stopped process.
fn resume(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_process_joining_while_the_first_one_opens_finds_its_topics() {
    const COUNT: u64 = 5;
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        for seq in 0..COUNT {
            wal.append(SHARED_TOPIC, &value(0, seq)).unwrap();
        }
        wal.close().unwrap();
    }
    // The child opens alone and stops before it claims the topics' slots.
    let mut child = stopped_child(dir.path(), "shared:9:1", "open-claim:1", "in its open");
    let pid = child.id();
    let resumer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        resume(pid);
    });
    // This open waits for the child's turn; it must find the topic the child recovered, not
    // start it again.
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    let offset = wal.append(SHARED_TOPIC, &value(0, COUNT)).unwrap();
    resumer.join().unwrap();
    assert!(child.wait().unwrap().success(), "the child failed");
    // After the records there, before or after the child's one.
    assert!(
        offset == COUNT || offset == COUNT + 1,
        "appended at {offset}"
    );
    let per_child = check_topic(&read_all(&wal, SHARED_TOPIC));
    assert_eq!(per_child[&0], (0..=COUNT).collect::<Vec<_>>());
    assert_eq!(per_child[&9], vec![0]);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    assert_eq!(wal.topic_info(SHARED_TOPIC).unwrap().next_offset, COUNT + 2);
    assert_eq!(wal.topics().len(), 1, "one topic: {:?}", wal.topics());
}

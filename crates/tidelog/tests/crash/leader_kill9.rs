//! Goal: with several processes appending to one topic under retention, SIGKILLs at random
//! moments, the housekeeping leader's among them (mid-retirement, mid-deletion, holding a
//! topic's lock), never lose an acknowledged record that retention has not yet passed,
//! never leave a hole in the offsets, never show a torn record to a reader, and never stop
//! housekeeping for long: a survivor takes the lead and retention goes on.
//!
//! Method: three child appenders share the directory (`Durability::Never`: a kill loses
//! nothing the page cache holds), each printing `@@ack OFFSET SEQ` for every append that
//! returned and `@@lead` once it leads. Every 20-120 ms the parent kills one (the leader
//! every other time) and starts a new one. A read-only handle in the parent follows the
//! topic all along, checking every record it reads. At the end every child is killed, the
//! directory is opened alone (recovery from the files) and checked against the acks: the
//! records from the first offset on are dense, whole and in each child's order, and every
//! acknowledged record at or above the first offset is there. `TIDELOG_CRASH_CYCLES` (kills)
//! and `TIDELOG_CRASH_SEED` as for the other campaigns.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{
    self, Ended, Rng, Running, campaign_params, child_command, child_env, geometry, parse_tagged,
    tagged_value, tempdir,
};
use tidelog::{Config, Error, ReaderOptions, Retention, StartPosition, Visibility, Wal};

const TOPIC: &str = "c";
const KILLS: u64 = 24;
const CHILDREN: usize = 3;
const MAX_PAD: u64 = 300;
const BLOCK: u64 = 64 * 1024;

fn cfg() -> Config {
    let mut c =
        geometry(8, BLOCK).topic_retention(TOPIC, Retention::default().max_bytes(4 * BLOCK));
    c.sync_interval_ms = 10;
    c
}

/// Child `TAG`: appends tagged records until killed.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let tag: u32 = mode.parse().unwrap();
    let wal = Wal::open_with(&dir, cfg()).unwrap();
    let mut leading = false;
    for seq in 0..u64::MAX / 2 {
        let offset = wal.append(TOPIC, &tagged_value(tag, seq, MAX_PAD)).unwrap();
        println!("@@ack {offset} {seq}");
        if !leading && seq % 64 == 0 && wal.leader().is_some_and(|l| l.pid == std::process::id()) {
            leading = true;
            println!("@@lead");
        }
    }
}

/// Follows the topic with a read-only handle until `stop`; checks every record it reads
/// (whole, in each child's order at increasing offsets) and returns how many it read.
fn follow(dir: &Path, stop: &AtomicBool) -> u64 {
    let wal = Wal::open_read_only_with(dir, cfg()).unwrap();
    let mut read = 0;
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut reader = None;
    while !stop.load(Ordering::Acquire) {
        let r = match reader.as_mut() {
            Some(r) => r,
            None => match wal.reader_with(
                TOPIC,
                ReaderOptions::default().start(StartPosition::Earliest),
            ) {
                Ok(r) => reader.insert(r),
                Err(Error::UnknownTopic { .. }) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) => panic!("follower: {e}"),
            },
        };
        match r.next() {
            Ok(Some(rec)) => {
                let (tag, seq) = parse_tagged(rec.value)
                    .unwrap_or_else(|| panic!("follower read a damaged record at {}", rec.offset));
                if let Some(prev) = last.insert(tag, seq) {
                    assert!(
                        prev < seq,
                        "child {tag}'s records out of order at {}",
                        rec.offset
                    );
                }
                read += 1;
            }
            Ok(None) => {
                wal.wait_for_records(r, Duration::from_millis(20)).unwrap();
            }
            // Retention passed the reader: it starts again from the first offset.
            Err(Error::OffsetOutOfRange { .. }) => reader = None,
            Err(e) => panic!("follower: {e}"),
        }
    }
    read
}

/// What the children acknowledged: `(tag, seq)` by offset.
fn acks(tag: u32, ended: &Ended, into: &mut HashMap<u64, (u32, u64)>) -> bool {
    let mut led = false;
    for line in &ended.lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["ack", offset, seq] => {
                let offset: u64 = offset.parse().unwrap();
                let prev = into.insert(offset, (tag, seq.parse().unwrap()));
                assert!(prev.is_none(), "offset {offset} acknowledged twice");
            }
            ["lead"] => led = true,
            _ => {}
        }
    }
    led
}

fn spawn(dir: &Path, tag: u32) -> Running {
    Running::spawn(&mut child_command(module_path!(), dir, &tag.to_string()))
}

#[test]
fn kill_nine_among_appenders_and_their_leader_keeps_every_retained_record() {
    let (kills, seed) = campaign_params("leader_kill9", KILLS);
    let mut rng = Rng::new(seed);
    let dir = tempdir();
    // The topic exists before the follower starts.
    {
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        wal.append(TOPIC, &tagged_value(0, 0, MAX_PAD)).unwrap();
        wal.close().unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let (dir, stop) = (dir.path().to_owned(), Arc::clone(&stop));
        std::thread::spawn(move || follow(&dir, &stop))
    };
    let mut acked: HashMap<u64, (u32, u64)> = HashMap::new();
    acked.insert(0, (0, 0));
    let mut next_tag = 1u32;
    let mut live: Vec<(u32, Running)> = Vec::new();
    while live.len() < CHILDREN {
        live.push((next_tag, spawn(dir.path(), next_tag)));
        next_tag += 1;
    }
    // The parent's view of the election: a read-only handle reads the state file.
    let watch = Wal::open_read_only_with(dir.path(), cfg()).unwrap();
    let (mut leader_kills, mut led) = (0u64, 0u64);
    for kill in 0..kills {
        std::thread::sleep(Duration::from_millis(rng.range(20, 120)));
        // Every other kill is the leader's.
        let leader_pid = watch.leader().map(|l| l.pid);
        let leader = live.iter().position(|(_, c)| Some(c.id()) == leader_pid);
        let victim = match leader {
            Some(i) if kill % 2 == 0 => i,
            _ => rng.range(0, live.len() as u64 - 1) as usize,
        };
        if Some(victim) == leader {
            leader_kills += 1;
        }
        let (tag, child) = live.remove(victim);
        let ended = child.kill();
        assert!(
            ended.killed(),
            "child {tag} ended by itself: {}",
            ended.stderr
        );
        if acks(tag, &ended, &mut acked) {
            led += 1;
        }
        live.push((next_tag, spawn(dir.path(), next_tag)));
        next_tag += 1;
    }
    for (tag, child) in live {
        let ended = child.kill();
        acks(tag, &ended, &mut acked);
    }
    stop.store(true, Ordering::Release);
    let followed = follower.join().unwrap();
    drop(watch);

    // The files alone.
    let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    let info = wal.topic_info(TOPIC).unwrap();
    let mut reader = common::earliest(&wal, TOPIC, Visibility::Published);
    let mut offset = reader.position();
    assert_eq!(offset, info.first_offset);
    let mut last: HashMap<u32, u64> = HashMap::new();
    while let Some(rec) = reader.next().unwrap() {
        assert_eq!(rec.offset, offset, "offsets dense");
        let (tag, seq) = parse_tagged(rec.value)
            .unwrap_or_else(|| panic!("damaged record at {offset} (seed {seed})"));
        if let Some(&(t, s)) = acked.get(&offset) {
            assert_eq!((t, s), (tag, seq), "acknowledged record {offset} replaced");
        }
        if let Some(prev) = last.insert(tag, seq) {
            assert!(prev < seq, "child {tag}'s records out of order at {offset}");
        }
        offset += 1;
    }
    let lost: Vec<_> = acked
        .keys()
        .filter(|&&o| o >= info.first_offset && o >= offset)
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged records lost: {lost:?} (seed {seed})"
    );
    eprintln!(
        "leader_kill9: {kills} kills, {leader_kills} of the leader, {led} children led, \
         {} acknowledged, first offset {}, next {offset}, {followed} read by the follower",
        acked.len(),
        info.first_offset
    );
    assert!(info.first_offset > 0, "retention never ran");
    assert!(led >= 2, "the lead never passed on ({led} children led)");
    assert!(
        leader_kills >= kills / 4,
        "the leader was killed {leader_kills} times"
    );
    wal.close().unwrap();
}

//! Goal: a topic deleted again and again while other processes append to it (shared mode),
//! with SIGKILLs at random moments (the deleter after it marked the topic or part of its
//! extents, an appender holding the topic's lock, the leader finishing a dead deleter's
//! work), never brings deleted records back, never loses a record appended after the last
//! deletion, and never damages a record or leaves a hole.
//!
//! Method: two child appenders append tagged records to the topic by name (an append that
//! meets a deletion under way is retried) and print `@@ack START END SEQ` (wall-clock ns
//! when the append began and returned); a child deleter deletes the topic every 30-150 ms,
//! printing `@@deleting NS` before and `@@deleted NS` after. Every 20-120 ms the parent
//! kills one child (the deleter every third time) and starts another of its kind. At the
//! end every child is killed and the directory opened alone. Then: the topic is dense from
//! 0 and every record whole, each appender's records in its order; no record acknowledged
//! before a completed deletion began is there; every record whose append began after the
//! last deletion ended (or after its deleter was killed) is there. `TIDELOG_CRASH_CYCLES`
//! (kills) and `TIDELOG_CRASH_SEED` as for the other campaigns.

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{
    self, Ended, Rng, Running, campaign_params, child_command, child_env, geometry, parse_tagged,
    tagged_value, tempdir,
};
use tidelog::{Config, Error, Visibility, Wal};

const TOPIC: &str = "d";
const KILLS: u64 = 24;
const MAX_PAD: u64 = 200;
/// Deletions that must have returned for the campaign to judge anything.
const DELETIONS_MIN: usize = 3;

fn cfg() -> Config {
    let mut c = geometry(8, 64 * 1024);
    c.sync_interval_ms = 10;
    c
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Child `append:TAG` appends until killed; child `delete:TAG` deletes the topic every
/// 30-150 ms until killed.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let (kind, tag) = mode.split_once(':').unwrap();
    let tag: u32 = tag.parse().unwrap();
    let wal = Wal::open_with(&dir, cfg()).unwrap();
    match kind {
        "append" => {
            for seq in 0..u64::MAX / 2 {
                let value = tagged_value(tag, seq, MAX_PAD);
                loop {
                    let start = now_ns();
                    match wal.append(TOPIC, &value) {
                        Ok(_) => {
                            println!("@@ack {start} {} {seq}", now_ns());
                            break;
                        }
                        // A deletion under way: the name is free again once it ends.
                        Err(Error::UnknownTopic { .. }) => {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(e) => panic!("append: {e}"),
                    }
                }
            }
        }
        "delete" => {
            let mut rng = Rng::new(u64::from(tag));
            loop {
                std::thread::sleep(Duration::from_millis(rng.range(30, 150)));
                println!("@@deleting {}", now_ns());
                match wal.delete_topic(TOPIC) {
                    Ok(()) => println!("@@deleted {}", now_ns()),
                    // Nothing appended since the last deletion, or one under way.
                    Err(Error::UnknownTopic { .. }) => println!("@@unknown"),
                    Err(e) => panic!("delete: {e}"),
                }
            }
        }
        other => panic!("unknown child {other}"),
    }
}

fn spawn(dir: &Path, kind: &str, tag: u32) -> Running {
    Running::spawn(&mut child_command(
        module_path!(),
        dir,
        &format!("{kind}:{tag}"),
    ))
}

/// What the children reported.
#[derive(Debug, Default)]
struct Reports {
    /// `(tag, seq)` -> (append began, append returned).
    acks: HashMap<(u32, u64), (u64, u64)>,
    /// Deletions that returned: (began, ended).
    deleted: Vec<(u64, u64)>,
    /// The latest time after which no append can land in a topic a deletion removes: a
    /// deletion's end, or the kill of a deleter that had begun one.
    settled: u64,
}

impl Reports {
    fn add(&mut self, tag: u32, ended: &Ended, killed_at: u64) {
        let mut begun = None;
        for line in &ended.lines {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["ack", start, end, seq] => {
                    let times = (start.parse().unwrap(), end.parse().unwrap());
                    self.acks.insert((tag, seq.parse().unwrap()), times);
                }
                ["deleting", at] => begun = Some(at.parse().unwrap()),
                ["deleted", at] => {
                    let end: u64 = at.parse().unwrap();
                    self.deleted.push((begun.take().unwrap(), end));
                    self.settled = self.settled.max(end);
                }
                ["unknown"] => begun = None,
                _ => {}
            }
        }
        if begun.is_some() {
            // Killed inside a deletion: whatever it marked, the leader finished.
            self.settled = self.settled.max(killed_at);
        }
    }
}

#[test]
fn kill_nine_among_a_deleter_and_appenders_never_brings_records_back() {
    let (kills, seed) = campaign_params("delete_kill9", KILLS);
    let mut rng = Rng::new(seed);
    let dir = tempdir();
    let mut reports = Reports::default();
    let mut live: Vec<(&str, u32, Running)> = Vec::new();
    let mut next_tag = 1u32;
    for kind in ["append", "append", "delete"] {
        live.push((kind, next_tag, spawn(dir.path(), kind, next_tag)));
        next_tag += 1;
    }
    let mut deleter_kills = 0;
    // On a loaded machine a deleter may be killed before its deletion returns, so the
    // campaign goes on (up to four times as long) until enough deletions returned to judge.
    let mut kill = 0;
    while kill < kills || (reports.deleted.len() < DELETIONS_MIN && kill < kills * 4) {
        std::thread::sleep(Duration::from_millis(rng.range(20, 120)));
        let victim = match live.iter().position(|(kind, _, _)| *kind == "delete") {
            Some(i) if kill % 3 == 0 => i,
            _ => rng.range(0, live.len() as u64 - 1) as usize,
        };
        let (kind, tag, child) = live.remove(victim);
        let killed_at = now_ns();
        let ended = child.kill();
        assert!(
            ended.killed(),
            "child {tag} ended by itself: {}",
            ended.stderr
        );
        reports.add(tag, &ended, killed_at);
        deleter_kills += u64::from(kind == "delete");
        live.push((kind, next_tag, spawn(dir.path(), kind, next_tag)));
        next_tag += 1;
        kill += 1;
    }
    for (_, tag, child) in live {
        let killed_at = now_ns();
        let ended = child.kill();
        reports.add(tag, &ended, killed_at);
    }

    // The files alone.
    let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    let mut present: HashSet<(u32, u64)> = HashSet::new();
    if wal.topics().contains(&TOPIC.to_owned()) {
        let mut reader = common::earliest(&wal, TOPIC, Visibility::Published);
        let mut offset = 0;
        let mut last: HashMap<u32, u64> = HashMap::new();
        while let Some(rec) = reader.next().unwrap() {
            if rec.offset != offset {
                let found: Vec<_> = common::extents(dir.path())
                    .into_iter()
                    .map(|e| {
                        (
                            e.file.file_name().map(|n| n.to_string_lossy().into_owned()),
                            e.start,
                            e.id.topic_id,
                            e.id.first_offset,
                            e.progress.map(|p| (p.state, p.record_count)),
                        )
                    })
                    .collect();
                panic!(
                    "offsets not dense: {} where {offset} was due (seed {seed}); {:?}; \
                     extents on disk (file, position, topic id, first offset, progress): \
                     {found:?}",
                    rec.offset,
                    wal.topic_info(TOPIC)
                );
            }
            let (tag, seq) = parse_tagged(rec.value)
                .unwrap_or_else(|| panic!("damaged record at {offset} (seed {seed})"));
            if let Some(prev) = last.insert(tag, seq) {
                assert!(
                    prev < seq,
                    "appender {tag}'s records out of order at {offset}"
                );
            }
            present.insert((tag, seq));
            offset += 1;
        }
    }
    let mut back = Vec::new();
    let mut lost = Vec::new();
    for (&record, &(start, end)) in &reports.acks {
        // Acknowledged before a deletion began: that deletion removed it.
        if reports.deleted.iter().any(|&(began, _)| end < began) && present.contains(&record) {
            back.push(record);
        }
        // Began after every deletion had settled: in the topic that is left.
        if start > reports.settled && !present.contains(&record) {
            lost.push(record);
        }
    }
    assert!(
        back.is_empty(),
        "deleted records came back: {back:?} (seed {seed})"
    );
    assert!(
        lost.is_empty(),
        "acknowledged records lost: {lost:?} (seed {seed})"
    );
    let after = reports
        .acks
        .values()
        .filter(|&&(start, _)| start > reports.settled)
        .count();
    eprintln!(
        "delete_kill9: {kill} kills ({deleter_kills} deleters), {} deletions returned, {} \
         appends acknowledged, {} left in the topic, {after} of them after the last deletion",
        reports.deleted.len(),
        reports.acks.len(),
        present.len()
    );
    assert!(
        reports.deleted.len() >= DELETIONS_MIN,
        "too few deletions to judge in {kill} kills (seed {seed})"
    );
    wal.close().unwrap();
}

//! Goal: staged jobs published while other processes append to the same topic (shared
//! mode), with SIGKILLs at random moments (a publisher mid-copy or holding its topic's
//! reservation, an appender holding the topic's lock, the leader finishing a dead
//! publisher's job), never lose an acknowledged append, never publish a committed job twice
//! or in part, never split a job's range, and never leave a hole in the offsets.
//!
//! Method: two child appenders print `@@ack OFFSET SEQ` for every append that returned; two
//! child publishers stage jobs of `JOB_RECORDS` records and commit them
//! (`Wal::commit_staged`), printing `@@commit JOB` before and `@@job JOB START` once it
//! returned. Every 20-120 ms the parent kills one child and starts another of its kind. At
//! the end every child is killed and the directory is opened alone (which finishes any
//! committed job). The topic must then be dense from 0, every acknowledged append at its
//! offset, each appender's records in its order, and each job that appears there whole, in
//! order and once, in one range (the one `@@job` reported, if it returned). A job whose
//! commit was never written (killed while staging) never appears. `TIDELOG_CRASH_CYCLES`
//! (kills) and `TIDELOG_CRASH_SEED` as for the other campaigns.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use crate::common::{
    self, Ended, Rng, Running, campaign_params, child_command, child_env, geometry, parse_tagged,
    tagged_value, tempdir,
};
use tidelog::stage::StagedWriter;
use tidelog::{Append, Config, Visibility, Wal};

const TOPIC: &str = "c";
const KILLS: u64 = 20;
const APPENDERS: u32 = 2;
const PUBLISHERS: u32 = 2;
const MAX_PAD: u64 = 200;
const JOB_RECORDS: u64 = 300;
/// Tags of publishers' job records: `JOB_TAG + publisher`.
const JOB_TAG: u32 = 1_000_000;
/// Jobs that must have returned to their publisher for the campaign to judge anything.
const STARTED_MIN: usize = 2;

/// Small blocks and batches: a job's copy spans extents and many batches; every segment
/// would be adopted alone.
fn cfg() -> Config {
    let mut c = geometry(16, 64 * 1024)
        .max_batch_records(16)
        .staged_adopt_bytes_min(1);
    c.sync_interval_ms = 10;
    c
}

/// The name of publisher `tag`'s `n`th job.
fn job_name(tag: u32, n: u64) -> String {
    format!("j{tag}x{n}")
}

/// Child `append:TAG` appends tagged records until killed; child `publish:TAG` stages and
/// commits jobs until killed.
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
                let offset = wal.append(TOPIC, &tagged_value(tag, seq, MAX_PAD)).unwrap();
                println!("@@ack {offset} {seq}");
            }
        }
        "publish" => {
            for n in 0..u64::MAX / 2 {
                let job = job_name(tag, n);
                let mut w = StagedWriter::create(&dir, &job, "p0").unwrap();
                let values: Vec<Vec<u8>> = (0..JOB_RECORDS)
                    .map(|i| tagged_value(JOB_TAG + tag, n * JOB_RECORDS + i, MAX_PAD))
                    .collect();
                for chunk in values.chunks(25) {
                    let records: Vec<Append<'_>> = chunk.iter().map(|v| Append::value(v)).collect();
                    w.append(TOPIC, &records).unwrap();
                }
                w.finish().unwrap();
                println!("@@commit {job}");
                let ranges = wal.commit_staged(&job, &["p0"]).unwrap();
                println!("@@job {job} {}", ranges[0].1.start);
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

/// What the children reported: acknowledged appends by offset, jobs committed, and the
/// start of each job whose commit returned.
#[derive(Debug, Default)]
struct Reports {
    acked: HashMap<u64, (u32, u64)>,
    committed: HashSet<String>,
    started: HashMap<String, u64>,
}

impl Reports {
    fn add(&mut self, tag: u32, ended: &Ended) {
        for line in &ended.lines {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["ack", offset, seq] => {
                    let offset: u64 = offset.parse().unwrap();
                    let prev = self.acked.insert(offset, (tag, seq.parse().unwrap()));
                    assert!(prev.is_none(), "offset {offset} acknowledged twice");
                }
                ["commit", job] => {
                    self.committed.insert((*job).to_owned());
                }
                ["job", job, start] => {
                    self.started
                        .insert((*job).to_owned(), start.parse().unwrap());
                }
                _ => {}
            }
        }
    }
}

#[test]
fn kill_nine_among_publishers_and_appenders_keeps_every_job_whole_and_once() {
    let (kills, seed) = campaign_params("publish_kill9", KILLS);
    let mut rng = Rng::new(seed);
    let dir = tempdir();
    let mut reports = Reports::default();
    let mut live: Vec<(&str, u32, Running)> = Vec::new();
    let mut next_tag = 1u32;
    for kind in ["append"; APPENDERS as usize]
        .into_iter()
        .chain(["publish"; PUBLISHERS as usize])
    {
        live.push((kind, next_tag, spawn(dir.path(), kind, next_tag)));
        next_tag += 1;
    }
    let mut killed_publishers = 0;
    // On a loaded machine a publisher may be killed before its job returns, so the campaign
    // goes on (up to four times as long) until enough jobs returned to judge.
    let mut kill = 0;
    while kill < kills || (reports.started.len() < STARTED_MIN && kill < kills * 4) {
        std::thread::sleep(Duration::from_millis(rng.range(20, 120)));
        let victim = rng.range(0, live.len() as u64 - 1) as usize;
        let (kind, tag, child) = live.remove(victim);
        let ended = child.kill();
        assert!(
            ended.killed(),
            "child {tag} ended by itself: {}",
            ended.stderr
        );
        reports.add(tag, &ended);
        killed_publishers += u64::from(kind == "publish");
        live.push((kind, next_tag, spawn(dir.path(), kind, next_tag)));
        next_tag += 1;
        kill += 1;
    }
    for (_, tag, child) in live {
        let ended = child.kill();
        reports.add(tag, &ended);
    }

    // The files alone: the open finishes every committed job.
    let wal = Wal::open_with(dir.path(), cfg().exclusive(true)).unwrap();
    let mut reader = common::earliest(&wal, TOPIC, Visibility::Published);
    let mut offset = 0;
    let mut last: HashMap<u32, u64> = HashMap::new();
    // Per job: its first offset and how many of its records were read.
    let mut jobs: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    while let Some(rec) = reader.next().unwrap() {
        assert_eq!(rec.offset, offset, "offsets dense (seed {seed})");
        let (tag, seq) = parse_tagged(rec.value)
            .unwrap_or_else(|| panic!("damaged record at {offset} (seed {seed})"));
        if tag >= JOB_TAG {
            let (n, i) = (seq / JOB_RECORDS, seq % JOB_RECORDS);
            let job = job_name(tag - JOB_TAG, n);
            let (start, count) = jobs.entry(job.clone()).or_insert((offset, 0));
            assert_eq!(
                (i, offset),
                (*count, *start + *count),
                "job {job} not whole, in order and in one range at {offset} (seed {seed})"
            );
            *count += 1;
        } else {
            if let Some(&(t, s)) = reports.acked.get(&offset) {
                assert_eq!((t, s), (tag, seq), "acknowledged record {offset} replaced");
            }
            if let Some(prev) = last.insert(tag, seq) {
                assert!(
                    prev < seq,
                    "appender {tag}'s records out of order at {offset}"
                );
            }
        }
        offset += 1;
    }
    let lost: Vec<_> = reports.acked.keys().filter(|&&o| o >= offset).collect();
    assert!(
        lost.is_empty(),
        "acknowledged appends lost: {lost:?} (seed {seed})"
    );
    for (job, (start, count)) in &jobs {
        assert_eq!(*count, JOB_RECORDS, "job {job} in part (seed {seed})");
        assert!(
            reports.committed.contains(job),
            "job {job} published uncommitted"
        );
        if let Some(reported) = reports.started.get(job) {
            assert_eq!(reported, start, "job {job} not where its commit said");
        }
    }
    for job in reports.started.keys() {
        assert!(
            jobs.contains_key(job),
            "job {job} committed and returned, then lost"
        );
    }
    let finished_elsewhere = jobs.len() - reports.started.len();
    eprintln!(
        "publish_kill9: {kill} kills ({killed_publishers} publishers), {} jobs published \
         ({} returned to their publisher, {finished_elsewhere} finished by another process \
         or the final open), {} appends acknowledged, next offset {offset}",
        jobs.len(),
        reports.started.len(),
        reports.acked.len(),
    );
    assert!(
        reports.started.len() >= STARTED_MIN,
        "too few jobs completed to judge ({})",
        reports.started.len()
    );
    wal.close().unwrap();
}

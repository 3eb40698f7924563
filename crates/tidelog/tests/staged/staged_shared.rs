//! Goal: staged jobs are published while several processes share the directory (shared
//! mode): a job gets one contiguous range in each topic however the other processes append
//! meanwhile, a commit made without a handle is published by the housekeeping leader, and a
//! publisher killed part way (or after reserving its topics) is finished by another process
//! before anything else is appended to those topics, every record exactly once.
//!
//! Method: the test binary re-executes itself as a child (`child_process_entry`) that opens
//! the directory and obeys commands on stdin; named crash points (`TIDELOG_CRASH_AT`) kill
//! it inside a publish.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use crate::common::{
    self as common, ChildSession, child_commands, child_env, geometry, open_child, read_values,
    reply, tempdir,
};
use tidelog::stage::{self, StagedWriter};
use tidelog::{Append, Config, Wal};

const TOPIC: &str = "a";
/// Generous: CI machines are slow and busy.
const WAIT: Duration = Duration::from_secs(30);

/// Small blocks and batches, so a job's copy is many batches over several extents; every
/// segment large enough to be adopted when alone.
fn config() -> Config {
    geometry(16, 64 * 1024)
        .sync_interval_ms(20)
        .max_batch_records(16)
        .staged_adopt_bytes_min(1)
}

fn job_value(job: &str, i: u64) -> Vec<u8> {
    format!("job {job} {i:06}").into_bytes()
}

fn own_value(who: &str, i: u64) -> Vec<u8> {
    format!("own {who} {i:06}").into_bytes()
}

/// Stages `n` records of topic `TOPIC` as part `p0` of `job`.
fn stage_job(dir: &Path, job: &str, n: u64) {
    let mut w = StagedWriter::create(dir, job, "p0").unwrap();
    let values: Vec<Vec<u8>> = (0..n).map(|i| job_value(job, i)).collect();
    for chunk in values.chunks(50) {
        let records: Vec<Append<'_>> = chunk.iter().map(|v| Append::value(v)).collect();
        w.append(TOPIC, &records).unwrap();
    }
    assert_eq!(w.finish().unwrap().records, n);
}

/// Child: opens the directory and obeys `append WHO FROM TO` (its own records, one append
/// each), `commit JOB` (publishes part `p0` of `JOB`), `leader` (whether it leads); closes
/// when stdin closes.
#[test]
fn child_process_entry() {
    let Some((dir, _mode)) = child_env() else {
        return;
    };
    let wal = Wal::open_with(&dir, config()).unwrap();
    reply("open");
    for line in child_commands() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["append", who, from, to] => {
                for i in from.parse().unwrap()..to.parse().unwrap() {
                    wal.append(TOPIC, &own_value(who, i)).unwrap();
                }
                reply("appended");
            }
            ["commit", job] => {
                let ranges = wal.commit_staged(job, &["p0"]).unwrap();
                reply(&format!("{ranges:?}"));
            }
            ["leader"] => {
                let me = wal.leader().is_some_and(|l| l.pid == std::process::id());
                reply(&me.to_string());
            }
            other => panic!("unknown command {other:?}"),
        }
    }
    wal.close().unwrap();
}

fn child(dir: &Path, crash_at: Option<&str>) -> ChildSession {
    open_child(module_path!(), dir, "", crash_at, WAIT)
}

/// Waits until `done` holds, at most `WAIT`.
#[track_caller]
fn eventually(what: &str, done: impl FnMut() -> bool) {
    common::eventually(what, WAIT, done);
}

/// The topic read in offset order: dense from 0, every record one of a job's or of an
/// appender's. Returns, per job, where its records start (they must be contiguous and in
/// order, each exactly once), and per appender its records in offset order.
#[derive(Debug, Default)]
struct Layout {
    jobs: Vec<(String, u64, u64)>,
    own: Vec<(String, Vec<u64>)>,
}

fn layout(wal: &Wal) -> Layout {
    let mut out = Layout::default();
    for (expect, (offset, value)) in read_values(wal, TOPIC).into_iter().enumerate() {
        assert_eq!(offset, expect as u64, "offsets dense");
        let text = String::from_utf8(value).unwrap();
        let words: Vec<&str> = text.split(' ').collect();
        let (kind, who, i): (&str, &str, u64) = (words[0], words[1], words[2].parse().unwrap());
        if kind == "job" {
            match out.jobs.iter_mut().find(|(j, _, _)| j == who) {
                Some((_, start, count)) => {
                    assert_eq!(offset, *start + *count, "job {who} is contiguous");
                    assert_eq!(i, *count, "job {who} in order, once each");
                    *count += 1;
                }
                None => {
                    assert_eq!(i, 0, "job {who} starts with its first record");
                    out.jobs.push((who.to_owned(), offset, 1));
                }
            }
        } else {
            match out.own.iter_mut().find(|(w, _)| w == who) {
                Some((_, seen)) => seen.push(i),
                None => out.own.push((who.to_owned(), vec![i])),
            }
        }
    }
    out
}

fn job_count(layout: &Layout, job: &str) -> u64 {
    layout
        .jobs
        .iter()
        .find(|(j, _, _)| j == job)
        .map_or(0, |(_, _, n)| *n)
}

fn own_records(layout: &Layout, who: &str) -> Vec<u64> {
    layout
        .own
        .iter()
        .find(|(w, _)| w == who)
        .map(|(_, seen)| seen.clone())
        .unwrap_or_default()
}

fn staged_jobs_left(dir: &Path) -> usize {
    stage::jobs(dir).map(|j| j.len()).unwrap_or(0)
}

#[test]
fn a_commit_beside_an_appending_process_gets_one_contiguous_range() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).unwrap();
    let mut other = child(dir.path(), None);
    stage_job(dir.path(), "j1", 3000);
    // The child appends throughout the publish.
    other.send("append child 0 4000");
    let ranges = wal.commit_staged("j1", &["p0"]).unwrap();
    assert_eq!(ranges.len(), 1);
    assert_eq!(ranges[0].1.end - ranges[0].1.start, 3000);
    assert_eq!(other.recv(WAIT), "appended");
    for i in 0..100 {
        wal.append(TOPIC, &own_value("parent", i)).unwrap();
    }
    let seen = layout(&wal);
    assert_eq!(seen.jobs, vec![("j1".to_owned(), ranges[0].1.start, 3000)]);
    assert_eq!(own_records(&seen, "child"), (0..4000).collect::<Vec<_>>());
    assert_eq!(own_records(&seen, "parent"), (0..100).collect::<Vec<_>>());
    assert_eq!(staged_jobs_left(dir.path()), 0, "the job's directory went");
    other.finish(WAIT);
    wal.close().unwrap();
    // From the files alone.
    let wal = Wal::open_with(dir.path(), config()).unwrap();
    let seen = layout(&wal);
    assert_eq!(job_count(&seen, "j1"), 3000);
    assert_eq!(own_records(&seen, "child").len(), 4000);
}

#[test]
fn a_commit_without_a_handle_is_published_by_the_leader_beside_other_processes() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).unwrap();
    let mut other = child(dir.path(), None);
    wal.append(TOPIC, &own_value("parent", 0)).unwrap();
    other.send("append child 0 10");
    assert_eq!(other.recv(WAIT), "appended");
    stage_job(dir.path(), "j2", 500);
    // As Spark's driver does: `tidelog::commit_staged` opens exclusively, which the
    // processes sharing the directory refuse, and waits for their leader.
    tidelog::commit_staged(dir.path(), config(), "j2", &["p0"], WAIT).unwrap();
    let seen = layout(&wal);
    assert_eq!(job_count(&seen, "j2"), 500);
    assert_eq!(staged_jobs_left(dir.path()), 0);
    other.finish(WAIT);
}

/// Kills a child publishing job `j3` (3000 records) at the `n`th pass through crash point
/// `point`, while this process leads and the child had appended records of its own; then
/// appends more here. Every record is there once: the job in one range, this process's
/// later records after it.
fn publisher_killed_at(point: &str, n: u64) {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).unwrap();
    for i in 0..50 {
        wal.append(TOPIC, &own_value("parent", i)).unwrap();
    }
    eventually("this process leads", || {
        wal.leader().is_some_and(|l| l.pid == std::process::id())
    });
    let spec = format!("kill:{point}:{n}");
    let mut publisher = child(dir.path(), Some(&spec));
    publisher.send("append child 0 20");
    assert_eq!(publisher.recv(WAIT), "appended");
    stage_job(dir.path(), "j3", 3000);
    publisher.send("commit j3");
    eventually("the publisher is killed", || publisher.has_exited());
    // These wait for the leader (this process) to finish the job.
    for i in 50..150 {
        wal.append(TOPIC, &own_value("parent", i)).unwrap();
    }
    eventually("the job is published", || staged_jobs_left(dir.path()) == 0);
    let check = |wal: &Wal| {
        let seen = layout(wal);
        assert_eq!(
            job_count(&seen, "j3"),
            3000,
            "{point}:{n}: the job once, whole"
        );
        assert_eq!(own_records(&seen, "parent"), (0..150).collect::<Vec<_>>());
        assert_eq!(own_records(&seen, "child"), (0..20).collect::<Vec<_>>());
        let job_start = seen.jobs[0].1;
        let info = wal.topic_info(TOPIC).unwrap();
        assert_eq!(info.next_offset, 3000 + 170, "{point}:{n}: nothing else");
        // The appends after the kill came after the job.
        let after: Vec<Vec<u8>> = read_values(wal, TOPIC)
            .into_iter()
            .filter(|(o, _)| *o >= job_start + 3000)
            .map(|(_, v)| v)
            .collect();
        let later: Vec<Vec<u8>> = (50..150).map(|i| own_value("parent", i)).collect();
        assert_eq!(
            after, later,
            "{point}:{n}: the later appends follow the job"
        );
    };
    check(&wal);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), config()).unwrap();
    check(&wal);
}

#[test]
fn a_publisher_killed_while_it_copies_is_finished_before_another_append() {
    for n in [1, 40] {
        publisher_killed_at("publish-copy", n);
    }
}

#[test]
fn a_publisher_killed_after_reserving_its_topics_is_published_from_the_start() {
    publisher_killed_at("publish-reserved", 1);
}

/// A process left alone by the others adopts the job's segment: the job starts after what
/// the others appended, though this process did not append (or look) since they did.
#[test]
fn a_commit_alone_after_others_appended_starts_after_their_records() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).unwrap();
    wal.append(TOPIC, &own_value("parent", 0)).unwrap();
    let mut other = child(dir.path(), None);
    other.send("append child 0 700");
    assert_eq!(other.recv(WAIT), "appended");
    other.finish(WAIT);
    stage_job(dir.path(), "j4", 300);
    let ranges = wal.commit_staged("j4", &["p0"]).unwrap();
    assert_eq!(ranges, vec![(TOPIC.to_owned(), 701..1001)]);
    wal.append(TOPIC, &own_value("parent", 1)).unwrap();
    let check = |wal: &Wal| {
        let seen = layout(wal);
        assert_eq!(seen.jobs, vec![("j4".to_owned(), 701, 300)]);
        assert_eq!(own_records(&seen, "child"), (0..700).collect::<Vec<_>>());
        assert_eq!(own_records(&seen, "parent"), vec![0, 1]);
    };
    check(&wal);
    wal.close().unwrap();
    // From the files alone.
    let wal = Wal::open_with(dir.path(), config()).unwrap();
    check(&wal);
}

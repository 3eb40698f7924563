//! Goal: a power loss while several processes append to one directory loses no record any
//! of them had acknowledged as durable, leaves no hole in the offsets and no torn record,
//! and needs no repair by hand: the next open alone recovers. Acknowledged here means an
//! `fsync="always"` append returned, or a `flush()` after `Interval` appends did; the sync
//! that made a record durable may have been another process's (group commit across
//! processes), and the extents may be another process's allocations.
//!
//! Method: every process opens the directory through [`ShadowStorage`], whose durable image
//! is shared by all of them (the page cache is one). Three children append tagged records to
//! two topics (two `Always`, one `Interval` with a `flush()` every 16 appends; small extents,
//! so rolls and new files are frequent; one topic under retention, so the housekeeping
//! leader retires extents and deletes files) and print `@@ack TOPIC OFFSET SEQ` for each record
//! acknowledged. The `Interval` child also appends to a third topic, which only it writes,
//! and deletes it every so often (`@@deleting`, then `@@deleted` once `delete_topic`
//! returned): a deletion that returned never comes undone, the records of the topic's
//! new life acknowledged since are there, and one cut short leaves the topic whole or
//! gone. One `Always` child also stages jobs for a fourth topic and commits them
//! (`@@committing`, then `@@committed` with the offsets): each job is there whole and
//! once, at its offsets once the commit returned, and one cut short whole or not at all.
//! After 20 to 150 ms (one cycle in eight: 0 to 30 ms after the spawn, maybe in an open; every
//! fourth cycle only once the staging child committed a job, so some jobs are committed however
//! slow the machine) every child is SIGKILLed at once, the image is written into a new directory
//! (three cycles in four with a random half of the pages written since their last sync, as
//! writeback may have flushed them), opened alone and checked against every acknowledgement so far:
//! the topics are dense (from 0, or from the first offset retention kept), every record whole and
//! in its writer's order, every acknowledged record (retention has not passed) where it was
//! acknowledged. The next cycle runs in that directory.
//! `TIDELOG_CRASH_CYCLES` (power losses) and `TIDELOG_CRASH_SEED` as for the other campaigns.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::shadow::ShadowStorage;
use crate::common::{
    self, FIRST_LINE_WAIT, Rng, Running, campaign_params, child_command, child_env, geometry,
    parse_tagged, tagged_value, tempdir,
};
use tidelog::io::Storage;
use tidelog::{Config, Durability, Retention, Visibility, Wal};

const TOPICS: [&str; 2] = ["p", "q"];
/// The topic the `Interval` child alone appends to and deletes now and then.
const DELETED: &str = "r";
/// The `Interval` child deletes `DELETED` after this many of its appends.
const DELETE_EVERY: u64 = 96;
/// The topic only staged jobs go to: one `Always` child stages and commits a job of
/// `JOB_RECORDS` records after every `STAGE_EVERY` of its appends.
const STAGED: &str = "s";
const JOB_RECORDS: u64 = 20;
const STAGE_EVERY: u64 = 8;
/// The topic under retention: the leader retires its extents and deletes files meanwhile.
const RETAINED: &str = "q";
const RETAIN_BYTES: u64 = 2 * common::BLOCK;
const CYCLES: u64 = 24;
/// Every this many cycles the power goes only after a staged job was committed (a commit
/// can take longer than a random cycle's life under load, and this test must see some).
const COMMITTED_EVERY: u64 = 4;
/// How long such a cycle waits for the commit.
const COMMIT_WAIT: Duration = Duration::from_secs(60);
const CHILDREN: u32 = 3;
const MAX_PAD: u64 = 400;
/// `Interval` children flush after this many appends.
const FLUSH_EVERY: u64 = 16;

fn cfg() -> Config {
    let mut c = geometry(8, common::BLOCK)
        .topic_retention(RETAINED, Retention::default().max_bytes(RETAIN_BYTES));
    c.sync_interval_ms = 10;
    c
}

/// Stages a job of `JOB_RECORDS` tagged records to `STAGED`, from `seq` on, and commits it:
/// `@@committing SEQ` before, `@@committed SEQ FROM TO` once the commit returned.
fn stage_and_commit(wal: &Wal, dir: &Path, storage: &Arc<dyn Storage>, tag: u32, seq: u64) {
    let job = format!("j{tag}-{seq}");
    let mut part =
        tidelog::stage::StagedWriter::create_with_storage(dir, &job, "p0", Arc::clone(storage))
            .unwrap()
            // The data files' geometry: small segments, which an adoption may take whole.
            .segment_geometry(common::BLOCK, 2)
            .unwrap();
    let values: Vec<Vec<u8>> = (seq..seq + JOB_RECORDS)
        .map(|i| tagged_value(tag, i, MAX_PAD))
        .collect();
    let records: Vec<tidelog::Append<'_>> =
        values.iter().map(|v| tidelog::Append::value(v)).collect();
    part.append(STAGED, &records).unwrap();
    part.finish().unwrap();
    println!("@@committing {seq}");
    let ranges = wal.commit_staged(&job, &["p0"]).unwrap();
    let [(topic, range)] = ranges.as_slice() else {
        panic!("job {job} got {ranges:?}");
    };
    assert_eq!(topic, STAGED);
    println!("@@committed {seq} {} {}", range.start, range.end);
}

/// Child `TAG:always`, `TAG:stage` (`Always`, and staged jobs) or `TAG:flush`: appends
/// tagged records until killed.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let (tag, how) = mode.split_once(':').unwrap();
    let tag: u32 = tag.parse().unwrap();
    let always = how != "flush";
    let stages = how == "stage";
    let durability = if always {
        Durability::Always
    } else {
        Durability::Interval
    };
    let storage = Arc::new(ShadowStorage::attach(&dir)) as Arc<dyn Storage>;
    let wal =
        Wal::open_with_storage(&dir, cfg().durability(durability), Arc::clone(&storage)).unwrap();
    println!("@@open");
    let mut rng = Rng::new(u64::from(tag));
    let mut pending = Vec::new();
    let mut seq = 0;
    while seq < u64::MAX / 2 {
        if stages && seq % STAGE_EVERY == STAGE_EVERY - 1 {
            stage_and_commit(&wal, &dir, &storage, tag, seq);
            seq += JOB_RECORDS;
        }
        let topic = match rng.range(0, 2) {
            2 if !always => DELETED,
            n => TOPICS[(n % 2) as usize],
        };
        if !always && seq % DELETE_EVERY == DELETE_EVERY - 1 {
            wal.flush().unwrap();
            for line in pending.drain(..) {
                println!("{line}");
            }
            println!("@@deleting {DELETED} {seq}");
            wal.delete_topic(DELETED).unwrap();
            println!("@@deleted {DELETED}");
        }
        let offset = wal.append(topic, &tagged_value(tag, seq, MAX_PAD)).unwrap();
        pending.push(format!("@@ack {topic} {offset} {seq}"));
        if always || (seq + 1) % FLUSH_EVERY == 0 {
            if !always {
                wal.flush().unwrap();
            }
            for line in pending.drain(..) {
                println!("{line}");
            }
        }
        seq += 1;
    }
}

/// `(tag, seq)` acknowledged at each `(topic, offset)`.
type Acks = HashMap<(String, u64), (u32, u64)>;

/// What the deleted topic's records must be. Its one writer's `(tag, seq)` grow with every
/// append (tags with every cycle), so a record's `(tag, seq)` tells its life.
#[derive(Debug, Default)]
struct Lives {
    /// `(tag, seq)` acknowledged at each offset of the topic's current life.
    acked: HashMap<u64, (u32, u64)>,
    /// Records up to this `(tag, seq)` belong to lives whose deletion returned.
    deleted_upto: Option<(u32, u64)>,
    /// A deletion begun and not returned when the power went: records up to this
    /// `(tag, seq)` are the life it deletes.
    deleting: Option<(u32, u64)>,
    /// Deletions that returned.
    deleted: u64,
}

/// The staged jobs, each named by its child's tag and the seq of its first record.
#[derive(Debug, Default)]
struct Jobs {
    /// Jobs whose commit began: the offsets they got, once their commit returned or a
    /// recovery showed them published.
    begun: HashMap<(u32, u64), Option<(u64, u64)>>,
    /// Jobs whose commit the power cut short before it took effect: never published.
    never: std::collections::HashSet<(u32, u64)>,
    /// Commits that returned.
    committed: u64,
}

fn collect(tag: u32, lines: &[String], into: &mut Acks, lives: &mut Lives, jobs: &mut Jobs) -> u64 {
    let mut n = 0;
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["committing", seq] => {
                jobs.begun.insert((tag, seq.parse().unwrap()), None);
            }
            ["committed", seq, from, to] => {
                let range = (from.parse().unwrap(), to.parse().unwrap());
                jobs.begun.insert((tag, seq.parse().unwrap()), Some(range));
                jobs.committed += 1;
                n += 1;
            }
            ["ack", topic, offset, seq] if *topic == DELETED => {
                let ack = (tag, seq.parse().unwrap());
                let prev = lives.acked.insert(offset.parse().unwrap(), ack);
                assert!(prev.is_none(), "{DELETED}@{offset} acknowledged twice");
                n += 1;
            }
            ["ack", topic, offset, seq] => {
                let key = ((*topic).to_owned(), offset.parse().unwrap());
                let ack = (tag, seq.parse().unwrap());
                let prev = into.insert(key.clone(), ack);
                assert!(
                    prev.is_none(),
                    "{key:?} acknowledged twice: {prev:?}, then {ack:?}"
                );
                n += 1;
            }
            // Every append before `seq` is of the life this deletion ends.
            ["deleting", _, seq] => {
                let seq: u64 = seq.parse().unwrap();
                lives.deleting = Some((tag, seq.saturating_sub(1)));
            }
            ["deleted", _] => {
                lives.deleted_upto = lives.deleting.take();
                lives.acked.clear();
                lives.deleted += 1;
            }
            _ => {}
        }
    }
    n
}

/// Every record of `topic` from offset 0 as `(offset, value)`; none when it does not exist.
fn records_of(wal: &Wal, topic: &str, ctx: &str) -> Vec<(u64, Vec<u8>)> {
    match wal.topic_info(topic) {
        Ok(_) => common::read_values(wal, topic),
        Err(tidelog::Error::UnknownTopic { .. }) => Vec::new(),
        Err(e) => panic!("{ctx}: {e}"),
    }
}

/// Checks the staged topic in the recovered `wal` against `jobs`: every record belongs to a
/// job whose commit began, each job is there whole and once, in order, at the offsets its
/// commit returned; a commit the power cut short took effect whole or not at all (settled
/// here: the open just now published what its ledger held). Its records' count.
fn check_staged(wal: &Wal, jobs: &mut Jobs, seed: u64, cycle: u64) -> u64 {
    let ctx = format!("{STAGED} after power loss {cycle} (seed {seed})");
    let records = records_of(wal, STAGED, &ctx);
    let parsed: Vec<(u32, u64)> = records
        .iter()
        .enumerate()
        .map(|(i, (offset, value))| {
            assert_eq!(*offset, i as u64, "{ctx}: offsets dense from 0");
            parse_tagged(value).unwrap_or_else(|| panic!("{ctx}: damaged record {offset}"))
        })
        .collect();
    let mut seen: HashMap<(u32, u64), (u64, u64)> = HashMap::new();
    let mut at = 0usize;
    while at < parsed.len() {
        let job = parsed[at];
        let from = at as u64;
        assert!(
            jobs.begun.contains_key(&job) && !jobs.never.contains(&job),
            "{ctx}: record {from} {job:?} starts no job whose commit began (or one cut short)"
        );
        for i in 0..JOB_RECORDS {
            assert_eq!(
                parsed.get(at + i as usize),
                Some(&(job.0, job.1 + i)),
                "{ctx}: job {job:?} not whole at {}",
                from + i
            );
        }
        assert!(
            seen.insert(job, (from, from + JOB_RECORDS)).is_none(),
            "{ctx}: job {job:?} published twice"
        );
        at += JOB_RECORDS as usize;
    }
    let mut cut_short = Vec::new();
    for (job, range) in &mut jobs.begun {
        match (*range, seen.get(job)) {
            (Some(want), got) => assert_eq!(
                got,
                Some(&want),
                "{ctx}: committed job {job:?} not at its offsets"
            ),
            (None, Some(&got)) => *range = Some(got),
            (None, None) => cut_short.push(*job),
        }
    }
    for job in cut_short {
        jobs.begun.remove(&job);
        jobs.never.insert(job);
    }
    records.len() as u64
}

/// Checks the deleted topic in the recovered `wal` against `lives`, and settles a deletion
/// the power cut short (it took effect or not, as the records show). Its records' count.
fn check_deleted(wal: &Wal, lives: &mut Lives, seed: u64, cycle: u64) -> u64 {
    let ctx = format!("{DELETED} after power loss {cycle} (seed {seed})");
    let records = records_of(wal, DELETED, &ctx);
    let mut old_life = false;
    for (i, (offset, value)) in records.iter().enumerate() {
        assert_eq!(*offset, i as u64, "{ctx}: offsets dense from 0");
        let got = parse_tagged(value).unwrap_or_else(|| panic!("{ctx}: damaged record {offset}"));
        assert!(
            lives.deleted_upto.is_none_or(|upto| got > upto),
            "{ctx}: record {offset} {got:?} of a life whose deletion returned"
        );
        old_life |= lives.deleting.is_some_and(|upto| got <= upto);
        if let Some(&ack) = lives.acked.get(offset) {
            assert_eq!(ack, got, "{ctx}: acknowledged record {offset} replaced");
        }
    }
    // A deletion cut short took effect unless a record of the life it deletes is there (its
    // writer flushed before it began, so that life's acknowledged records were durable).
    if let Some(upto) = lives.deleting.take()
        && !old_life
    {
        lives.deleted_upto = Some(upto);
        lives.acked.clear();
    }
    let lost: Vec<u64> = lives
        .acked
        .keys()
        .filter(|&&o| o >= records.len() as u64)
        .copied()
        .collect();
    assert!(
        lost.is_empty(),
        "{ctx}: acknowledged records lost: {lost:?}"
    );
    records.len() as u64
}

/// Opens `dir` alone (recovery from the files) and checks it against `acked` and `lives`;
/// returns the number of records and the retained topic's first offset.
fn check(
    dir: &Path,
    acked: &Acks,
    lives: &mut Lives,
    jobs: &mut Jobs,
    seed: u64,
    cycle: u64,
) -> (u64, u64) {
    let wal = Wal::open_with(dir, cfg()).unwrap_or_else(|e| {
        print_extents(dir);
        panic!("open after power loss {cycle} failed: {e} (seed {seed})")
    });
    let (mut records, mut retained_from) = (0, 0);
    for topic in TOPICS {
        let info = wal.topic_info(topic).unwrap();
        if topic != RETAINED {
            assert_eq!(info.first_offset, 0, "{topic} starts at 0");
        }
        let mut reader = common::earliest(&wal, topic, Visibility::Published);
        let mut offset = info.first_offset;
        assert_eq!(reader.position(), offset, "{topic}: the first offset");
        let mut last: HashMap<u32, u64> = HashMap::new();
        while let Some(rec) = reader.next().unwrap_or_else(|e| {
            print_extents(dir);
            panic!("{topic} at {offset} after power loss {cycle}: {e} (seed {seed})")
        }) {
            assert_eq!(rec.offset, offset, "{topic}: offsets dense");
            let (tag, seq) = parse_tagged(rec.value).unwrap_or_else(|| {
                panic!("{topic}: damaged record at {offset} (cycle {cycle}, seed {seed})")
            });
            if let Some(&ack) = acked.get(&(topic.to_owned(), offset)) {
                assert_eq!(
                    ack,
                    (tag, seq),
                    "{topic}: acknowledged record {offset} replaced (cycle {cycle}, seed {seed})"
                );
            }
            if let Some(prev) = last.insert(tag, seq) {
                assert!(
                    prev < seq,
                    "{topic}: child {tag}'s records out of order at {offset}"
                );
            }
            offset += 1;
        }
        let mut lost: Vec<u64> = acked
            .keys()
            .filter(|(t, o)| t == topic && *o >= offset)
            .map(|(_, o)| *o)
            .collect();
        lost.sort_unstable();
        assert!(
            lost.is_empty(),
            "{topic}: acknowledged records lost after power loss {cycle}: {lost:?} \
             (next offset {offset}, seed {seed})"
        );
        records += offset - info.first_offset;
        if topic == RETAINED {
            retained_from = info.first_offset;
        }
    }
    records += check_deleted(&wal, lives, seed, cycle);
    records += check_staged(&wal, jobs, seed, cycle);
    wal.close().unwrap();
    (records, retained_from)
}

/// Every extent of `dir` with its identity and progress slot, for a failure's report (the
/// directory itself is gone with the run unless `TIDELOG_KEEP_TEST_DIRS` is set).
fn print_extents(dir: &Path) {
    eprintln!("extents of {}:", dir.display());
    for e in common::extents(dir) {
        eprintln!(
            "  {} block at {}: {} (id {}) first {} x{} blocks, progress {:?}",
            e.file.file_name().unwrap().to_string_lossy(),
            e.start,
            e.id.topic,
            e.id.topic_id,
            e.id.first_offset,
            e.id.extent_count,
            e.progress
        );
    }
}

#[test]
fn a_power_loss_among_appending_processes_keeps_every_acknowledged_record() {
    let (cycles, seed) = campaign_params("power_loss_processes", CYCLES);
    let mut rng = Rng::new(seed);
    let base = tempdir();
    let mut dir = base.path().join("cycle0");
    let mut acked = Acks::new();
    let mut lives = Lives::default();
    let mut jobs = Jobs::default();
    {
        let wal = Wal::open_with(&dir, cfg()).unwrap();
        for topic in TOPICS {
            let offset = wal.append(topic, &tagged_value(0, 0, MAX_PAD)).unwrap();
            acked.insert((topic.to_owned(), offset), (0, 0));
        }
        wal.close().unwrap();
    }
    let (mut next_tag, mut early, mut torn_cycles) = (1u32, 0u64, 0u64);
    let (mut records, mut retired) = (0, false);
    for cycle in 1..=cycles {
        let storage = ShadowStorage::init(&dir);
        let mut children: Vec<(u32, Running)> = (0..CHILDREN)
            .map(|i| {
                let how = ["flush", "always", "stage"][i as usize % 3];
                let mode = format!("{next_tag}:{how}");
                next_tag += 1;
                (
                    next_tag - 1,
                    Running::spawn(&mut child_command(module_path!(), &dir, &mode)),
                )
            })
            .collect();
        if cycle % COMMITTED_EVERY != 0 && rng.range(0, 7) == 0 {
            early += 1;
            std::thread::sleep(Duration::from_millis(rng.range(0, 30)));
        } else {
            for (tag, child) in &children {
                assert!(child.started(FIRST_LINE_WAIT), "child {tag} never opened");
            }
            if cycle % COMMITTED_EVERY == 0 {
                let (tag, stager) = &children[2];
                assert!(
                    stager.saw("committed ", COMMIT_WAIT),
                    "child {tag} committed no staged job in {COMMIT_WAIT:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(rng.range(20, 150)));
        }
        // The power goes: every process at once.
        for (_, child) in &mut children {
            child.sigkill();
        }
        let mut cycle_acks = 0;
        for (tag, child) in children {
            let ended = child.wait();
            assert!(
                ended.killed(),
                "child {tag} ended by itself: {}",
                ended.stderr
            );
            cycle_acks += collect(tag, &ended.lines, &mut acked, &mut lives, &mut jobs);
        }
        let image = base.path().join(format!("cycle{cycle}"));
        let torn = (rng.range(0, 3) != 0).then(|| rng.next_u64());
        torn_cycles += u64::from(torn.is_some());
        storage.power_loss_image(&image, torn);
        storage.discard();
        std::fs::remove_dir_all(&dir).unwrap();
        let retained_from;
        (records, retained_from) = check(&image, &acked, &mut lives, &mut jobs, seed, cycle);
        retired |= retained_from > 0;
        eprintln!("power loss {cycle}: {cycle_acks} acknowledged, {records} records kept");
        dir = image;
    }
    eprintln!(
        "power_loss_processes: {cycles} power losses ({early} early, {torn_cycles} with \
         pages written back), {} acknowledged, {} deletions of {DELETED}, {} staged jobs \
         committed ({} cut short), {records} records at the end",
        acked.len(),
        lives.deleted,
        jobs.committed,
        jobs.never.len()
    );
    assert!(
        acked.len() as u64 > cycles,
        "the children acknowledged almost nothing"
    );
    assert!(
        retired || cycles < 8,
        "retention never retired an extent of {RETAINED}"
    );
    assert!(
        lives.deleted > 0 || cycles < 8,
        "{DELETED} was never deleted"
    );
    assert!(
        jobs.committed > 0 || cycles < 8,
        "no staged job was committed"
    );
}

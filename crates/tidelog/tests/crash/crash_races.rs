//! Goal: kill -9 campaigns over races (issue 18): a topic deleted while it is appended to, bad
//! staged input published beside good input, and staged commits from several processes with
//! no holder, each killed at random moments. After every kill the directory opens, and every
//! acknowledged record or job is there exactly once; what was deleted or refused never comes
//! back.
//!
//! Method: as in `crash_kill9.rs`, each cycle re-executes this test binary as a child
//! (`child_process_entry`; a no-op without `TIDELOG_CHILD_DIR`) that prints `@@` lines for
//! what it got acknowledged, and the parent SIGKILLs it at a random moment, reopens the
//! directory and checks it against those lines and what earlier cycles left. Each campaign
//! is deterministic per seed (kill timings, the child's choices) but for the scheduling of
//! threads and processes. `TIDELOG_CRASH_CYCLES` sets the cycles of every campaign,
//! `TIDELOG_CRASH_SEED` replays a run; a failure names both.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::common::{
    self, BLOCK, Ended, Rng, Running, campaign_params, child_command, child_env, geometry,
    kill_time, tempdir,
};
use tidelog::format;
use tidelog::stage::{self, StagedWriter};
use tidelog::{Append, Config, Durability, Error, ReaderOptions, StartPosition, Wal};

/// A long campaign starts a fresh directory this often (bounded recovery and checks).
const CYCLES_PER_DIR: u64 = 50;

/// `len` bytes that start with `header` and continue with filler derived from it, so a value
/// names its record and every byte of it can be checked.
fn named_value(header: String, len: usize) -> Vec<u8> {
    let mut v = header.into_bytes();
    let h = v.iter().fold(0xCBF2_9CE4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    });
    let start = v.len();
    v.extend((start..len.max(start)).map(|k| (h.wrapping_add(k as u64 * 7) % 251) as u8));
    v
}

/// The `/`-separated numeric fields after the first of a value made by `named_value`.
fn fields(value: &[u8], n: usize) -> Option<(String, Vec<u64>)> {
    let text = String::from_utf8_lossy(&value[..value.len().min(96)]).into_owned();
    let mut it = text.split('/');
    let name = it.next()?.to_owned();
    let nums = it
        .take(n)
        .map(|f| f.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    (nums.len() == n).then_some((name, nums))
}

// ---- children -------------------------------------------------------------------------------

/// Re-executes this test binary as a child in `mode` on `dir`.
fn spawn(dir: &Path, mode: &str) -> Running {
    Running::spawn(&mut child_command(module_path!(), dir, mode))
}

/// Child side (a no-op unless re-executed with `TIDELOG_CHILD_DIR`).
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    // A failure in any thread ends the whole child at once, so the parent sees it.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        hook(info);
        std::process::exit(101);
    }));
    let args: Vec<u64> = mode
        .split(':')
        .skip(1)
        .map(|x| x.parse().expect("child: a number"))
        .collect();
    match mode.split(':').next() {
        Some("delete") => delete_child(&dir, args[0], args[1]),
        Some("bad") => bad_input_child(&dir, args[0], args[1]),
        Some("commit") => committer_child(&dir, args[0], args[1]),
        _ => panic!("unknown child mode {mode:?}"),
    }
    std::process::exit(0);
}

// ---- 1. deleting a topic while appending to it ----------------------------------------------

/// Topics appended to beside "x", one writer each.
const OTHERS: [&str; 2] = ["a", "b"];
/// Writers of "x".
const X_WRITERS: u64 = 2;
const DEFAULT_DELETE_CYCLES: u64 = 40;

fn race_config() -> Config {
    geometry(8, BLOCK)
}

/// Record `seq` of writer `writer` of "x" in cycle `cycle`, appended after `label` deletions.
fn x_value(cycle: u64, label: u64, writer: u64, seq: u64) -> Vec<u8> {
    let len = 20 + (common::Rng::new(seq ^ writer << 32 ^ cycle << 48).next_u64() % 1500);
    named_value(format!("x/{cycle}/{label}/{writer}/{seq}/"), len as usize)
}

/// Record `seq` of topic `OTHERS[topic]` in cycle `cycle`.
fn other_value(topic: usize, cycle: u64, seq: u64) -> Vec<u8> {
    let h = common::Rng::new(seq ^ (topic as u64) << 32 ^ cycle << 40).next_u64();
    // Now and then a value of more than a block.
    let len = if h.is_multiple_of(97) {
        BLOCK as usize + 1000
    } else {
        12 + (h % 3000) as usize
    };
    named_value(format!("{}/{cycle}/{seq}/", OTHERS[topic]), len)
}

/// The child: a writer per topic of `OTHERS`, `X_WRITERS` writers of "x" (each re-creating
/// it once its handle meets the deletion), all with `Durability::Always`, and the main thread
/// deleting "x" every 1..8 ms. Prints `@@ack T OFFSET SEQ` (topic T of `OTHERS`),
/// `@@x LABEL WRITER OFFSET SEQ`, and `@@deleting N` / `@@deleted N` around deletion N.
/// LABEL is the number of deletions done when the writer's handle was made: a lock makes
/// handles and deletions take turns (appends race with deletions freely), so every record
/// of one incarnation of "x" has the same label.
fn delete_child(dir: &Path, cycle: u64, seed: u64) {
    let wal = Arc::new(
        Wal::open_with(dir, race_config().durability(Durability::Always)).expect("child: open"),
    );
    for (t, name) in OTHERS.iter().enumerate() {
        let writer = wal.writer(name).expect("child: writer");
        std::thread::spawn(move || {
            for seq in 0.. {
                let offset = writer
                    .append(&other_value(t, cycle, seq))
                    .expect("child: append");
                println!("@@ack {t} {offset} {seq}");
            }
        });
    }
    let deletions = Arc::new(RwLock::new(0u64));
    for w in 0..X_WRITERS {
        let (wal, deletions) = (Arc::clone(&wal), Arc::clone(&deletions));
        std::thread::spawn(move || {
            let mut seq = 0;
            loop {
                let (writer, label) = {
                    let done = deletions.read().unwrap();
                    (wal.writer("x").expect("child: writer of x"), *done)
                };
                loop {
                    let value = x_value(cycle, label, w, seq);
                    match writer.append(&value) {
                        Ok(offset) => println!("@@x {label} {w} {offset} {seq}"),
                        Err(Error::UnknownTopic { .. }) => break,
                        Err(e) => panic!("child: append to x: {e:?}"),
                    }
                    seq += 1;
                }
                // The failed attempt's number is not reused.
                seq += 1;
            }
        });
    }
    let mut rng = Rng::new(seed ^ cycle.wrapping_mul(0x51_7CC1_B727_220A));
    for n in 1.. {
        std::thread::sleep(Duration::from_millis(rng.range(1, 8)));
        let mut done = deletions.write().unwrap();
        println!("@@deleting {n}");
        match wal.delete_topic("x") {
            Ok(()) | Err(Error::UnknownTopic { .. }) => {}
            Err(e) => panic!("child: delete x: {e:?}"),
        }
        println!("@@deleted {n}");
        *done = n;
    }
}

/// Every record of `topic` as `read` found it (None: no such topic), checking offsets are
/// dense from 0 and `next_offset` agrees with the records read.
fn read_dense(wal: &Wal, topic: &str, ctx: &str) -> Option<Vec<Vec<u8>>> {
    let info = match wal.topic_info(topic) {
        Ok(info) => info,
        Err(Error::UnknownTopic { .. }) => return None,
        Err(e) => panic!("{ctx}: topic_info({topic}): {e:?}"),
    };
    assert_eq!(info.first_offset, 0, "{ctx}: {topic} lost its head");
    let mut reader = wal
        .reader_with(
            topic,
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .unwrap_or_else(|e| panic!("{ctx}: reader of {topic}: {e:?}"));
    let mut out = Vec::new();
    loop {
        let at = out.len() as u64;
        match reader.next() {
            Ok(Some(r)) => {
                assert_eq!(r.offset, at, "{ctx}: {topic}: offsets must be dense");
                out.push(r.value.to_vec());
            }
            Ok(None) => break,
            Err(e) => panic!("{ctx}: {topic}: reading offset {at}: {e:?}"),
        }
    }
    assert_eq!(
        info.next_offset,
        out.len() as u64,
        "{ctx}: {topic}: next_offset against the records read"
    );
    Some(out)
}

/// A record of "x": (cycle, label, writer, seq).
type XId = (u64, u64, u64, u64);

/// What one open found: the (cycle, seq) of each record of each topic of `OTHERS`, and the
/// records of "x".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct DeleteModel {
    others: Vec<Vec<(u64, u64)>>,
    x: Vec<XId>,
}

fn read_delete_model(wal: &Wal, ctx: &str) -> DeleteModel {
    let mut model = DeleteModel::default();
    for (t, name) in OTHERS.iter().enumerate() {
        let values = read_dense(wal, name, ctx).unwrap_or_default();
        let ids = values
            .iter()
            .enumerate()
            .map(|(at, v)| {
                let id = fields(v, 2)
                    .filter(|(n, f)| n == name && *v == other_value(t, f[0], f[1]))
                    .map(|(_, f)| (f[0], f[1]));
                id.unwrap_or_else(|| panic!("{ctx}: {name}@{at}: corrupted or foreign value"))
            })
            .collect();
        model.others.push(ids);
    }
    let values = read_dense(wal, "x", ctx).unwrap_or_default();
    model.x = values
        .iter()
        .enumerate()
        .map(|(at, v)| {
            let id = fields(v, 4)
                .filter(|(n, f)| n == "x" && *v == x_value(f[0], f[1], f[2], f[3]))
                .map(|(_, f)| (f[0], f[1], f[2], f[3]));
            id.unwrap_or_else(|| panic!("{ctx}: x@{at}: corrupted or foreign value"))
        })
        .collect();
    model
}

/// What a delete child acknowledged.
#[derive(Debug, Default)]
struct DeleteAcks {
    /// Per topic of `OTHERS`: (offset, seq).
    others: Vec<Vec<(u64, u64)>>,
    /// (label, writer, offset, seq).
    x: Vec<(u64, u64, u64, u64)>,
    deleted: u64,
    deleting: u64,
}

fn parse_delete_acks(lines: &[String]) -> DeleteAcks {
    let mut acks = DeleteAcks {
        others: vec![Vec::new(); OTHERS.len()],
        ..DeleteAcks::default()
    };
    for line in lines {
        let mut it = line.split_whitespace();
        let kind = it.next().unwrap_or_default();
        let f: Vec<u64> = it.map(|x| x.parse().expect("an ack field")).collect();
        match (kind, f.len()) {
            ("ack", 3) => acks.others[f[0] as usize].push((f[1], f[2])),
            ("x", 4) => acks.x.push((f[0], f[1], f[2], f[3])),
            ("deleting", 1) => acks.deleting = acks.deleting.max(f[0]),
            ("deleted", 1) => acks.deleted = acks.deleted.max(f[0]),
            _ => panic!("malformed line {line:?}"),
        }
    }
    acks
}

/// Checks what cycle `cycle` left against its acks and what the cycle before left.
fn check_delete_cycle(
    now: &DeleteModel,
    before: &DeleteModel,
    acks: &DeleteAcks,
    cycle: u64,
    ctx: &str,
) {
    // Topics beside "x": earlier records unchanged, then this cycle's, in order, with every
    // acknowledged one and at most the one in flight beyond.
    for (t, name) in OTHERS.iter().enumerate() {
        let (now, before) = (&now.others[t], &before.others[t]);
        assert!(
            now.len() >= before.len() && now[..before.len()] == before[..],
            "{ctx}: {name}: records of earlier cycles changed ({} before, {} now)",
            before.len(),
            now.len()
        );
        let new = &now[before.len()..];
        for (i, &(c, seq)) in new.iter().enumerate() {
            assert_eq!(
                (c, seq),
                (cycle, i as u64),
                "{ctx}: {name}@{}: not this cycle's next record",
                before.len() + i
            );
        }
        let acked = &acks.others[t];
        for (i, &(offset, seq)) in acked.iter().enumerate() {
            assert_eq!(seq, i as u64, "{ctx}: {name}: acks out of order");
            assert_eq!(
                offset,
                (before.len() + i) as u64,
                "{ctx}: {name}: ack of seq {seq} at an unexpected offset"
            );
        }
        assert!(
            new.len() >= acked.len() && new.len() <= acked.len() + 1,
            "{ctx}: {name}: {} records for {} acknowledged",
            new.len(),
            acked.len()
        );
    }

    // "x": one incarnation, the newest one the child may have left.
    let done = acks.deleted;
    let in_flight = acks.deleting > done;
    let label_acks: Vec<_> = acks.x.iter().filter(|a| a.0 == done).collect();
    if now.x.is_empty() {
        // Gone (or never written since): only where nothing of the newest incarnation was
        // acknowledged, or its deletion had begun.
        let kept = !label_acks.is_empty() || (done == 0 && !before.x.is_empty());
        assert!(
            !kept || in_flight,
            "{ctx}: x is gone, but {} acknowledged records of incarnation {done} (and {} \
             before the cycle) were not deleted",
            label_acks.len(),
            before.x.len()
        );
        return;
    }
    let carried = if done == 0 {
        // No deletion yet: the incarnation the cycle started with goes on.
        assert!(
            now.x.len() >= before.x.len() && now.x[..before.x.len()] == before.x[..],
            "{ctx}: x: no deletion was done, yet its earlier records changed ({} before, {} now)",
            before.x.len(),
            now.x.len()
        );
        before.x.len()
    } else {
        0
    };
    if let Some((i, id)) = now.x[carried..]
        .iter()
        .enumerate()
        .find(|(_, id)| (id.0, id.1) != (cycle, done))
    {
        panic!(
            "{ctx}: x@{}: record {id:?} is not of the newest incarnation (cycle {cycle}, \
             {done} deletions done, deletion in flight: {in_flight}): a deleted incarnation \
             came back",
            carried + i
        );
    }
    for &&(label, w, offset, seq) in &label_acks {
        let got = now.x.get(offset as usize);
        assert_eq!(
            got,
            Some(&(cycle, label, w, seq)),
            "{ctx}: x@{offset}: acknowledged record (writer {w}, seq {seq}) lost"
        );
    }
    // Each writer's records of the incarnation: consecutive attempts, at most one beyond
    // its acks.
    for w in 0..X_WRITERS {
        let mine: Vec<u64> = now.x[carried..]
            .iter()
            .filter(|id| id.2 == w)
            .map(|id| id.3)
            .collect();
        assert!(
            mine.windows(2).all(|p| p[1] == p[0] + 1),
            "{ctx}: x: writer {w}: gap or duplicate in {mine:?}"
        );
        let acked = label_acks.iter().filter(|a| a.1 == w).count();
        assert!(
            mine.len() >= acked && mine.len() <= acked + 1,
            "{ctx}: x: writer {w}: {} records for {acked} acknowledged",
            mine.len()
        );
    }
}

#[test]
fn deleting_a_topic_while_appending_to_it_survives_kill_9() {
    let (cycles, seed) = campaign_params("delete", DEFAULT_DELETE_CYCLES);
    let mut rng = Rng::new(seed);
    let mut dir = tempdir();
    let mut model = DeleteModel::default();
    let (mut acked, mut deletions, mut in_flight, mut x_kept) = (0usize, 0u64, 0u64, 0u64);
    let started = Instant::now();
    for cycle in 0..cycles {
        if cycle % CYCLES_PER_DIR == 0 {
            dir = tempdir();
            model = DeleteModel {
                others: vec![Vec::new(); OTHERS.len()],
                x: Vec::new(),
            };
        }
        let when = kill_time(&mut rng, cycle.is_multiple_of(CYCLES_PER_DIR), 5, 120);
        let child_seed = rng.next_u64();
        let ended = when.apply(spawn(dir.path(), &format!("delete:{cycle}:{child_seed}")));
        let ctx = format!("delete cycle {cycle} (TIDELOG_CRASH_SEED={seed}, killed {when:?})");
        assert!(
            ended.killed(),
            "{ctx}: the child ended by itself ({}):\n{}",
            ended.status,
            ended.stderr
        );
        let acks = parse_delete_acks(&ended.lines);
        let wal = Wal::open_with(dir.path(), race_config())
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e:?}"));
        let now = read_delete_model(&wal, &ctx);
        check_delete_cycle(&now, &model, &acks, cycle, &ctx);
        wal.close()
            .unwrap_or_else(|e| panic!("{ctx}: close: {e:?}"));
        // A read-only handle finds the same.
        let ro = Wal::open_read_only_with(dir.path(), race_config())
            .unwrap_or_else(|e| panic!("{ctx}: read-only open: {e:?}"));
        assert!(
            read_delete_model(&ro, &format!("{ctx}, read-only")) == now,
            "{ctx}: the read-only handle reads otherwise"
        );
        drop(ro);
        acked += acks.others.iter().map(Vec::len).sum::<usize>() + acks.x.len();
        deletions += acks.deleted;
        in_flight += u64::from(acks.deleting > acks.deleted);
        x_kept += u64::from(!now.x.is_empty());
        model = now;
    }
    eprintln!(
        "delete: {cycles} cycles in {:?}: {acked} acknowledged records checked, 0 lost, \
         {deletions} deletions, {in_flight} kills inside a deletion, x present after {x_kept}",
        started.elapsed()
    );
    assert!(acked > 0 && deletions > 0, "the campaign did nothing");
}

/// Record `i` of round `round` of "x" in the read-only test.
fn round_value(round: u64, i: u64) -> Vec<u8> {
    named_value(format!("x/{round}/{i}/"), 40 + (i * 131 % 2000) as usize)
}

#[test]
fn a_read_only_handle_refreshing_while_the_writer_deletes_and_recreates_reads_no_corruption() {
    const ROUNDS: u64 = 60;
    let dir = tempdir();
    let wal = Arc::new(Wal::open_with(dir.path(), race_config().sync_interval_ms(2)).unwrap());
    wal.append("a", &named_value("a/0/".into(), 100)).unwrap();
    wal.flush().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (wal, stop) = (Arc::clone(&wal), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut rng = Rng::new(7);
            let mut a = 1;
            for round in 0..ROUNDS {
                for i in 0..rng.range(1, 40) {
                    wal.append("x", &round_value(round, i)).unwrap();
                    wal.append("a", &named_value(format!("a/{a}/"), 100))
                        .unwrap();
                    a += 1;
                    if i % 8 == 0 {
                        wal.flush().unwrap();
                    }
                }
                wal.flush().unwrap();
                std::thread::sleep(Duration::from_millis(rng.range(0, 3)));
                wal.delete_topic("x").unwrap();
            }
            stop.store(true, Ordering::Release);
        })
    };
    let ro = Wal::open_read_only_with(dir.path(), race_config()).unwrap();
    let (mut refreshes, mut whole, mut cut) = (0u64, 0u64, 0u64);
    let mut rng = Rng::new(11);
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    while !stop.load(Ordering::Acquire) {
        ro.refresh()
            .unwrap_or_else(|e| panic!("refresh {refreshes}: {e:?}"));
        refreshes += 1;
        // "a" only grows: dense from 0, each value its own.
        // (A new reader catches up with the writer: the range is read after it.)
        let got = common::read_all(&ro, "a");
        let a_info = ro.topic_info("a").unwrap();
        assert_eq!(got.len() as u64, a_info.next_offset, "a: next_offset");
        for (i, (offset, _, v)) in got.iter().enumerate() {
            assert_eq!(*offset, i as u64);
            assert!(*v == named_value(format!("a/{i}/"), 100), "a@{i} differs");
        }
        // A new reader catches up with what the writer published: the topic's range is
        // read after it.
        let mut reader =
            match ro.reader_with("x", ReaderOptions::default().start(StartPosition::Earliest)) {
                Ok(r) => r,
                Err(e) => {
                    assert!(!matches!(e, Error::Corruption { .. }), "reader of x: {e:?}");
                    *errors
                        .entry(format!("{e:?}").chars().take(40).collect())
                        .or_default() += 1;
                    continue;
                }
            };
        let info = match ro.topic_info("x") {
            Ok(info) => info,
            Err(Error::UnknownTopic { .. }) => continue,
            Err(e) => panic!("topic_info(x): {e:?}"),
        };
        // The writer deletes and re-creates "x" meanwhile, now and then.
        std::thread::sleep(Duration::from_micros(rng.range(0, 3000)));
        let mut round = None;
        let mut n = 0;
        let ended = loop {
            match reader.next() {
                Ok(Some(r)) => {
                    assert_eq!(r.offset, info.first_offset + n, "x: dense offsets");
                    assert!(r.offset < info.next_offset, "x: a record past next_offset");
                    let (_, f) = fields(r.value, 2).expect("x: a value of this test");
                    assert!(
                        r.value == round_value(f[0], f[1]),
                        "x@{}: value differs",
                        r.offset
                    );
                    assert_eq!(
                        f[1], r.offset,
                        "x@{}: not its round's record {}",
                        r.offset, f[1]
                    );
                    assert_eq!(
                        *round.get_or_insert(f[0]),
                        f[0],
                        "x@{}: records of two incarnations",
                        r.offset
                    );
                    n += 1;
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        match ended {
            None => {
                assert_eq!(
                    info.first_offset + n,
                    info.next_offset,
                    "x: next_offset against the records read"
                );
                whole += 1;
            }
            Some(e) => {
                assert!(!matches!(e, Error::Corruption { .. }), "reading x: {e:?}");
                *errors
                    .entry(format!("{e:?}").chars().take(40).collect())
                    .or_default() += 1;
                cut += 1;
            }
        }
    }
    writer.join().unwrap();
    ro.refresh().unwrap();
    assert!(matches!(
        ro.topic_info("x"),
        Err(Error::UnknownTopic { .. })
    ));
    eprintln!("{refreshes} refreshes: x read whole {whole} times, cut short {cut}: {errors:?}");
    assert!(refreshes > 0);
}

// ---- 2. bad staged input --------------------------------------------------------------------

const DEFAULT_BAD_CYCLES: u64 = 20;
/// Records per job: part 0 writes topics a and b, part 1 (the one damaged in a bad job)
/// topic a.
const JOB_P0: u64 = 300;
const JOB_P1: u64 = 60;

/// Part 0's segment is adopted, part 1's (smaller) copied: its damaged record is found.
fn staged_config() -> Config {
    geometry(8, BLOCK).staged_adopt_bytes_min(100 << 10)
}

/// Record `i` of `topic` of part `part` of job `job`, 150 to 399 bytes.
fn staged_value(job: &str, part: &str, topic: &str, i: u64) -> Vec<u8> {
    named_value(
        format!("{job}/{part}/{topic}/{i}/"),
        150 + (i * 37 % 250) as usize,
    )
}

/// Stages part `part` of `job`: `n` records of each of `topics`, the topics taking turns.
fn stage_part(dir: &Path, job: &str, part: &str, topics: &[&str], n: u64) {
    let mut w = StagedWriter::create(dir, job, part)
        .expect("create part")
        .segment_geometry(BLOCK, 3)
        .expect("geometry");
    for from in (0..n).step_by(13) {
        for topic in topics {
            let values: Vec<Vec<u8>> = (from..(from + 13).min(n))
                .map(|i| staged_value(job, part, topic, i))
                .collect();
            let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v)).collect();
            w.append(topic, &records).expect("stage");
        }
    }
    w.finish().expect("finish");
}

/// Stages the parts of `job` (p0: a and b, `JOB_P0` each; p1: a, `JOB_P1`).
fn stage_job(dir: &Path, job: &str) {
    stage_part(dir, job, "p0", &["a", "b"], JOB_P0);
    stage_part(dir, job, "p1", &["a"], JOB_P1);
}

/// How job `k` of cycle `cycle` is committed, and whether it is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobKind {
    /// Good, committed through the holder's `Wal::commit_staged`.
    GoodByHolder,
    /// Good, committed by `stage::commit` (as another process would); the holder's
    /// housekeeping publishes it.
    GoodByOther,
    /// A record of part 1 damaged, committed through `Wal::commit_staged`.
    BadByHolder,
    /// The same, committed by `stage::commit`.
    BadByOther,
}

impl JobKind {
    fn of(cycle: u64, k: u64) -> JobKind {
        match Rng::new(cycle << 20 ^ k ^ 0xBAD).next_u64() % 4 {
            0 => JobKind::GoodByHolder,
            1 => JobKind::GoodByOther,
            2 => JobKind::BadByHolder,
            _ => JobKind::BadByOther,
        }
    }

    fn bad(self) -> bool {
        matches!(self, JobKind::BadByHolder | JobKind::BadByOther)
    }
}

fn bad_job_name(cycle: u64, k: u64) -> String {
    format!("c{cycle}j{k}")
}

/// (cycle, k) of a job named by `bad_job_name`.
fn bad_job_id(job: &str) -> (u64, u64) {
    let (c, k) = job
        .strip_prefix('c')
        .and_then(|r| r.split_once('j'))
        .unwrap_or_else(|| panic!("not a job of this test: {job:?}"));
    (c.parse().unwrap(), k.parse().unwrap())
}

/// Part 1 of `job` with a flipped byte in its first record's value (its manifest written).
fn damage(dir: &Path, job: &str) {
    let segment = stage::job_dir(dir, job)
        .unwrap()
        .join(stage::segment_name("p1", 0));
    common::flip_byte(
        &segment,
        format::FILE_HEADER_BYTES + format::BLOCK_HEADER_BYTES + 60,
    );
}

fn failed(dir: &Path, job: &str) -> Option<String> {
    stage::jobs(dir)
        .expect("jobs")
        .into_iter()
        .find(|j| j.job == job)
        .and_then(|j| j.failed)
}

/// The child: holds the directory and stages and commits job after job (see `JobKind`),
/// printing `@@good K` once good job K is published and `@@bad K` once bad job K was
/// refused and is listed as set aside.
fn bad_input_child(dir: &Path, cycle: u64, _seed: u64) {
    let wal = Wal::open_with(dir, staged_config().sync_interval_ms(5)).expect("child: open");
    for k in 0.. {
        let job = bad_job_name(cycle, k);
        let kind = JobKind::of(cycle, k);
        stage_job(dir, &job);
        if kind.bad() {
            damage(dir, &job);
        }
        let parts = ["p0", "p1"];
        let result = match kind {
            JobKind::GoodByHolder | JobKind::BadByHolder => {
                wal.commit_staged(&job, &parts).map(drop)
            }
            JobKind::GoodByOther | JobKind::BadByOther => stage::commit(dir, &job, &parts)
                .and_then(|()| stage::wait_published(dir, &job, Duration::from_secs(60))),
        };
        match (kind.bad(), result) {
            (false, Ok(())) => println!("@@good {k}"),
            (true, Err(e)) => {
                let why = failed(dir, &job).unwrap_or_else(|| {
                    panic!("child: bad job {job} refused ({e}) but not set aside")
                });
                assert!(
                    why.to_lowercase().contains("corrupt"),
                    "child: {job}: {why}"
                );
                println!("@@bad {k}");
            }
            (bad, r) => panic!("child: job {job} ({kind:?}, bad: {bad}): {r:?}"),
        }
    }
}

/// Every record of `topic` (dense from 0, checksums verified) grouped into whole jobs: each
/// job's records of `topic` in part order, exactly once, contiguous.
fn jobs_in(wal: &Wal, topic: &str, p1: u64, ctx: &str) -> Vec<String> {
    let values = read_dense(wal, topic, ctx).unwrap_or_default();
    let mut jobs = Vec::new();
    let mut at = 0;
    while at < values.len() {
        let text = String::from_utf8_lossy(&values[at][..values[at].len().min(64)]).into_owned();
        let job = text.split('/').next().unwrap_or_default().to_owned();
        let mut want: Vec<Vec<u8>> = (0..JOB_P0)
            .map(|i| staged_value(&job, "p0", topic, i))
            .collect();
        if topic == "a" {
            want.extend((0..p1).map(|i| staged_value(&job, "p1", topic, i)));
        }
        let end = at + want.len();
        assert!(
            end <= values.len(),
            "{ctx}: {topic}@{at}: job {job} is cut short"
        );
        if let Some(i) = (0..want.len()).find(|&i| values[at + i] != want[i]) {
            panic!("{ctx}: {topic}@{}: not job {job}'s record", at + i);
        }
        jobs.push(job);
        at = end;
    }
    jobs
}

#[test]
fn publishing_bad_staged_input_survives_kill_9() {
    let (cycles, seed) = campaign_params("bad input", DEFAULT_BAD_CYCLES);
    let mut rng = Rng::new(seed);
    let mut dir = tempdir();
    let mut published: Vec<String> = Vec::new();
    let mut set_aside: BTreeSet<String> = BTreeSet::new();
    let (mut good_acked, mut bad_acked, mut records) = (0usize, 0usize, 0usize);
    let started = Instant::now();
    for cycle in 0..cycles {
        if cycle % CYCLES_PER_DIR == 0 {
            dir = tempdir();
            published.clear();
            set_aside.clear();
        }
        let when = kill_time(&mut rng, cycle.is_multiple_of(CYCLES_PER_DIR), 0, 600);
        let d = dir.path();
        let ended = when.apply(spawn(d, &format!("bad:{cycle}:0")));
        let ctx = format!("bad input cycle {cycle} (TIDELOG_CRASH_SEED={seed}, killed {when:?})");
        assert!(
            ended.killed(),
            "{ctx}: the child ended by itself ({}):\n{}",
            ended.status,
            ended.stderr
        );
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        for line in &ended.lines {
            match line.split_once(' ') {
                Some(("good", k)) => good.push(bad_job_name(cycle, k.parse().unwrap())),
                Some(("bad", k)) => bad.push(bad_job_name(cycle, k.parse().unwrap())),
                _ => panic!("{ctx}: malformed line {line:?}"),
            }
        }
        let wal =
            Wal::open_with(d, staged_config()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e:?}"));
        wal.flush()
            .unwrap_or_else(|e| panic!("{ctx}: flush: {e:?}"));
        // The open published every committed good job and set every committed bad one aside.
        let mut listed_failed = BTreeSet::new();
        for job in stage::jobs(d).expect("jobs") {
            let kind = JobKind::of(bad_job_id(&job.job).0, bad_job_id(&job.job).1);
            if let Some(why) = &job.failed {
                assert!(kind.bad(), "{ctx}: good job {} set aside: {why}", job.job);
                listed_failed.insert(job.job.clone());
            } else {
                assert!(
                    !job.committed,
                    "{ctx}: job {} ({kind:?}) left committed",
                    job.job
                );
                assert!(
                    !good.contains(&job.job),
                    "{ctx}: acknowledged {} still staged",
                    job.job
                );
                // Killed before its commit: it goes.
                stage::abort(d, &job.job).expect("abort");
            }
        }
        assert!(
            set_aside.is_subset(&listed_failed),
            "{ctx}: jobs set aside earlier are no longer listed: {:?}",
            set_aside.difference(&listed_failed).collect::<Vec<_>>()
        );
        for job in &bad {
            assert!(
                listed_failed.contains(job),
                "{ctx}: refused job {job} not listed as set aside"
            );
        }
        let jobs = jobs_in(&wal, "a", JOB_P1, &ctx);
        assert_eq!(
            jobs,
            jobs_in(&wal, "b", 0, &ctx),
            "{ctx}: both topics hold the same jobs"
        );
        let unique: BTreeSet<&String> = jobs.iter().collect();
        assert_eq!(unique.len(), jobs.len(), "{ctx}: a job published twice");
        assert!(jobs.starts_with(&published), "{ctx}: earlier jobs stay");
        for job in &jobs {
            let (c, k) = bad_job_id(job);
            assert!(!JobKind::of(c, k).bad(), "{ctx}: bad job {job} published");
        }
        for job in &good {
            assert!(
                jobs.contains(job),
                "{ctx}: acknowledged job {job} not published"
            );
        }
        // Appends go on after whatever was set aside.
        wal.append("after", b"after")
            .unwrap_or_else(|e| panic!("{ctx}: append: {e:?}"));
        wal.flush()
            .unwrap_or_else(|e| panic!("{ctx}: flush: {e:?}"));
        wal.close()
            .unwrap_or_else(|e| panic!("{ctx}: close: {e:?}"));
        eprintln!(
            "{ctx}: {} good and {} bad acknowledged, {} published, {} set aside",
            good.len(),
            bad.len(),
            jobs.len(),
            listed_failed.len()
        );
        good_acked += good.len();
        bad_acked += bad.len();
        records += (jobs.len() - published.len()) * (2 * JOB_P0 + JOB_P1) as usize;
        published = jobs;
        set_aside = listed_failed;
    }
    eprintln!(
        "bad input: {cycles} cycles in {:?}: {good_acked} good jobs and {bad_acked} bad ones \
         acknowledged, {records} published records checked, 0 lost",
        started.elapsed()
    );
    assert!(good_acked > 0 && bad_acked > 0, "the campaign did nothing");
}

// ---- 3. concurrent staged commits with no holder --------------------------------------------

const DEFAULT_COMMIT_CYCLES: u64 = 12;
const COMMITTERS: u64 = 4;
const JOBS_PER_COMMITTER: u64 = 3;
/// Records per committed job: one part, topics a and `t{w % 2}`.
const COMMIT_RECORDS: u64 = 40;

fn commit_config() -> Config {
    geometry(8, BLOCK)
}

fn commit_job_name(cycle: u64, w: u64, k: u64) -> String {
    format!("c{cycle}w{w}j{k}")
}

/// The child: committer `w` stages and commits `JOBS_PER_COMMITTER` jobs with
/// `tidelog::commit_staged` (no process holds the directory), printing `@@committed K`
/// once job K's commit returned.
fn committer_child(dir: &Path, cycle: u64, w: u64) {
    for k in 0..JOBS_PER_COMMITTER {
        let job = commit_job_name(cycle, w, k);
        let mut sw = StagedWriter::create(dir, &job, "p0").expect("child: create part");
        for topic in ["a", if w.is_multiple_of(2) { "t0" } else { "t1" }] {
            let values: Vec<Vec<u8>> = (0..COMMIT_RECORDS)
                .map(|i| staged_value(&job, "p0", topic, i))
                .collect();
            let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v)).collect();
            sw.append(topic, &records).expect("child: stage");
        }
        sw.finish().expect("child: finish");
        tidelog::commit_staged(dir, commit_config(), &job, &["p0"], Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("child: commit {job}: {e:?}"));
        println!("@@committed {k}");
    }
}

/// Every job in `topic`, each whole (its `COMMIT_RECORDS` records in order, contiguous).
fn committed_jobs_in(wal: &Wal, topic: &str, ctx: &str) -> Vec<String> {
    let values = read_dense(wal, topic, ctx).unwrap_or_default();
    let mut jobs = Vec::new();
    for (n, chunk) in values.chunks(COMMIT_RECORDS as usize).enumerate() {
        let text = String::from_utf8_lossy(&chunk[0][..chunk[0].len().min(64)]).into_owned();
        let job = text.split('/').next().unwrap_or_default().to_owned();
        assert_eq!(
            chunk.len() as u64,
            COMMIT_RECORDS,
            "{ctx}: {topic}: job {job} cut short"
        );
        for (i, v) in chunk.iter().enumerate() {
            assert!(
                *v == staged_value(&job, "p0", topic, i as u64),
                "{ctx}: {topic}@{}: not record {i} of job {job}",
                n * COMMIT_RECORDS as usize + i
            );
        }
        jobs.push(job);
    }
    jobs
}

#[test]
fn concurrent_staged_commits_from_killed_processes_complete() {
    let (cycles, seed) = campaign_params("committers", DEFAULT_COMMIT_CYCLES);
    let mut rng = Rng::new(seed);
    let mut dir = tempdir();
    let mut published: BTreeSet<String> = BTreeSet::new();
    let (mut acked, mut killed, mut finished) = (0usize, 0u64, 0u64);
    let started = Instant::now();
    for cycle in 0..cycles {
        if cycle % CYCLES_PER_DIR == 0 {
            dir = tempdir();
            published.clear();
        }
        let d = dir.path();
        // Each committer is killed 0..250 ms after its start, or left to finish.
        let plan: Vec<Option<Duration>> = (0..COMMITTERS)
            .map(|_| (rng.range(0, 2) > 0).then(|| Duration::from_millis(rng.range(0, 250))))
            .collect();
        let ctx = format!("committers cycle {cycle} (TIDELOG_CRASH_SEED={seed}, kills {plan:?})");
        let spawned = Instant::now();
        let children: Vec<Running> = (0..COMMITTERS)
            .map(|w| spawn(d, &format!("commit:{cycle}:{w}")))
            .collect();
        let mut order: Vec<usize> = (0..children.len()).collect();
        order.sort_by_key(|&i| plan[i].unwrap_or(Duration::MAX));
        let mut slots: Vec<Option<Running>> = children.into_iter().map(Some).collect();
        let mut ended: Vec<Option<Ended>> = (0..COMMITTERS).map(|_| None).collect();
        for i in order {
            let child = slots[i].take().unwrap();
            ended[i] = Some(match plan[i] {
                Some(at) => {
                    std::thread::sleep(at.saturating_sub(spawned.elapsed()));
                    child.kill()
                }
                None => child.wait_up_to(Duration::from_secs(120)),
            });
        }
        let mut acked_jobs = Vec::new();
        for (w, e) in ended.iter().enumerate() {
            let e = e.as_ref().unwrap();
            if plan[w].is_none() || !e.killed() {
                assert!(
                    e.status.success(),
                    "{ctx}: committer {w} did not complete ({}):\n{}",
                    e.status,
                    e.stderr
                );
                finished += 1;
            } else {
                killed += 1;
            }
            for line in &e.lines {
                let k = line
                    .strip_prefix("committed ")
                    .unwrap_or_else(|| panic!("{ctx}: malformed line {line:?}"));
                acked_jobs.push(commit_job_name(cycle, w as u64, k.parse().unwrap()));
            }
        }
        if plan.iter().all(Option::is_none) {
            assert_eq!(acked_jobs.len() as u64, COMMITTERS * JOBS_PER_COMMITTER);
        }
        let wal =
            Wal::open_with(d, commit_config()).unwrap_or_else(|e| panic!("{ctx}: open: {e:?}"));
        wal.flush()
            .unwrap_or_else(|e| panic!("{ctx}: flush: {e:?}"));
        for job in stage::jobs(d).expect("jobs") {
            assert!(
                job.failed.is_none(),
                "{ctx}: job {} set aside: {:?}",
                job.job,
                job.failed
            );
            assert!(!job.committed, "{ctx}: job {} left committed", job.job);
            assert!(
                !acked_jobs.contains(&job.job),
                "{ctx}: acknowledged {} still staged",
                job.job
            );
            stage::abort(d, &job.job).expect("abort");
        }
        let in_a = committed_jobs_in(&wal, "a", &ctx);
        let set: BTreeSet<String> = in_a.iter().cloned().collect();
        assert_eq!(set.len(), in_a.len(), "{ctx}: a job published twice");
        // Committer w's jobs also went to t{w % 2}, each once.
        let mut in_t = Vec::new();
        for (r, topic) in ["t0", "t1"].iter().enumerate() {
            for job in committed_jobs_in(&wal, topic, &ctx) {
                let (_, w) = job.split_once('w').unwrap();
                let w: usize = w.split_once('j').unwrap().0.parse().unwrap();
                assert_eq!(w % 2, r, "{ctx}: job {job} in {topic}");
                in_t.push(job);
            }
        }
        in_t.sort();
        assert_eq!(
            in_t,
            set.iter().cloned().collect::<Vec<_>>(),
            "{ctx}: a and t0/t1 hold the same jobs, each once"
        );
        assert!(published.is_subset(&set), "{ctx}: earlier jobs stay");
        for job in &acked_jobs {
            assert!(
                set.contains(job),
                "{ctx}: acknowledged job {job} not published"
            );
        }
        wal.close()
            .unwrap_or_else(|e| panic!("{ctx}: close: {e:?}"));
        eprintln!(
            "{ctx}: {} acknowledged, {} new jobs published",
            acked_jobs.len(),
            set.len() - published.len()
        );
        acked += acked_jobs.len();
        published = set;
    }
    eprintln!(
        "committers: {cycles} cycles in {:?}: {acked} acknowledged jobs checked ({} records), 0 \
         lost, {killed} committers killed, {finished} completed",
        started.elapsed(),
        acked as u64 * 2 * COMMIT_RECORDS
    );
    assert!(acked > 0, "the campaign did nothing");
}

/// Found by `concurrent_staged_commits_from_killed_processes_complete`: a committer killed
/// after it recorded where its job starts in each topic (`INGEST`) but before it copied the
/// job's records; another job, committed meanwhile and first by name, was published at the
/// next open before the cut publish resumed, took the offsets the ledger gave the first job,
/// and the resume counted its records as the first job's: an acknowledged job was lost.
#[test]
fn a_publish_cut_short_resumes_before_other_jobs_take_its_offsets() {
    let dir = tempdir();
    let d = dir.path();
    let stage_two = |job: &str, n: u64| {
        let mut w = StagedWriter::create(d, job, "p0").unwrap();
        for topic in ["a", "t"] {
            let values: Vec<Vec<u8>> = (0..n).map(|i| staged_value(job, "p0", topic, i)).collect();
            let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v)).collect();
            w.append(topic, &records).unwrap();
        }
        w.finish().unwrap();
        stage::commit(d, job, &["p0"]).unwrap();
    };
    stage_two("zjob", 10);
    // The ledger of a publish killed before it copied a record: both topics were empty.
    std::fs::write(
        stage::job_dir(d, "zjob").unwrap().join(stage::INGEST_FILE),
        "tidelog ingest v1\na 0\nt 0\n",
    )
    .unwrap();
    stage_two("ajob", 5);
    let wal = Wal::open_with(d, commit_config()).expect("open");
    assert!(stage::jobs(d).unwrap().is_empty(), "both jobs published");
    for topic in ["a", "t"] {
        let values = read_dense(&wal, topic, topic).unwrap();
        let mut want: Vec<Vec<u8>> = (0..10)
            .map(|i| staged_value("zjob", "p0", topic, i))
            .collect();
        want.extend((0..5).map(|i| staged_value("ajob", "p0", topic, i)));
        assert_eq!(values.len(), want.len(), "{topic}: records of both jobs");
        assert!(
            values == want,
            "{topic}: the cut publish first, at the offsets of its ledger"
        );
    }
}

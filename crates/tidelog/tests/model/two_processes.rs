//! Model-based test with a second, real process: random operations run by this process's
//! handle or by a child process's (both in shared mode, one directory), checked against an
//! in-memory model of every acknowledged record, with the child SIGKILLed between
//! operations or inside one (at a named crash point) and replaced by a new one that joins.
//!
//! Method: the test binary re-executes itself as the child (`child_process_entry`), which
//! obeys one command per line and replies with what it saw. Appends are `Never` durable: a
//! kill keeps the page cache, so every acknowledged record stays, and an append cut short by
//! a kill (every crash point an append passes lies before its publish) never shows. A
//! deletion cut short (`delete-begun`, `delete-marked`) is finished by the survivor. At the
//! end every process is gone and the directory, opened alone, holds exactly the model.
//! `TIDELOG_MODEL_CASES=N` runs N / 4 cases (the model test runs N).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{self, ChildSession, Fnv, child_commands, child_env, reply, tempdir};
use crate::model::OPEN_FAULT_POINTS;
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use tidelog::io::{Fault, FaultStorage, Storage};
use tidelog::{Append, Config, Error, Wal};

const TOPICS: [&str; 3] = ["a", "b", "c"];
const GROUPS: [&str; 2] = ["g1", "g2"];
/// Crash points the child may be killed at, inside its next operation that passes one.
/// (Not `repair`: a deletion killed there, before it marked the topic, is not done.)
const POINTS: [&str; 6] = [
    "append-locked",
    "append-copied",
    "roll-identity",
    "alloc-locked",
    "delete-begun",
    "delete-marked",
];
/// Generous: CI machines are slow and busy.
const WAIT: Duration = Duration::from_secs(30);

/// Small extents and files: appends roll, and rolls take new files.
fn config() -> Config {
    let mut c = common::geometry(8, 64 * 1024);
    c.sync_interval_ms = 10;
    c
}

/// The value of the record with sequence number `seq` (unique in a case) of `topic`.
fn value(topic: &str, seq: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{topic}:{seq}:").into_bytes();
    v.resize(v.len().max(len), (seq % 251) as u8);
    v
}

fn digest(v: &[u8]) -> u64 {
    let mut h = Fnv::default();
    h.update(v);
    h.0
}

/// An error as the child reports it: the variant's name only.
fn kind(e: &Error) -> String {
    let text = format!("{e:?}");
    text.split([' ', '{', '(']).next().unwrap_or("").to_owned()
}

/// What one process (this one's handle or the child's) answers to a command; the child
/// runs the same function and prints the answer.
fn answer(wal: &Wal, command: &str) -> String {
    let words: Vec<&str> = command.split_whitespace().collect();
    let result: Result<String, Error> = match words.as_slice() {
        ["append", topic, seq, len] => {
            let v = value(topic, seq.parse().unwrap(), len.parse().unwrap());
            wal.append(topic, &v).map(|o| o.to_string())
        }
        ["batch", topic, seq, n, len] => {
            let (seq, n): (u64, u64) = (seq.parse().unwrap(), n.parse().unwrap());
            let len: usize = len.parse().unwrap();
            let values: Vec<Vec<u8>> = (seq..seq + n).map(|s| value(topic, s, len)).collect();
            let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v)).collect();
            wal.append_batch_records(topic, &records)
                .map(|r| r.start.to_string())
        }
        ["read", topic, offset] => wal
            .read(topic, offset.parse().unwrap())
            .map(|r| format!("{:x}", digest(r.value()))),
        ["info", topic] => wal
            .topic_info(topic)
            .map(|i| format!("{} {}", i.first_offset, i.next_offset)),
        ["commit", topic, group, offset] => wal
            .reader(topic, group)
            .and_then(|mut r| r.commit_offset(offset.parse().unwrap()))
            .map(|()| "ok".to_owned()),
        ["position", topic, group] => wal.reader(topic, group).map(|r| r.position().to_string()),
        ["delete", topic] => wal.delete_topic(topic).map(|()| "ok".to_owned()),
        other => panic!("unknown command {other:?}"),
    };
    match result {
        Ok(text) => text,
        Err(e) => format!("err {}", kind(&e)),
    }
}

/// Child: opens the directory and answers commands until stdin closes (or a crash point
/// kills it).
#[test]
fn child_process_entry() {
    let Some((dir, _mode)) = child_env() else {
        return;
    };
    let wal = Wal::open_with(&dir, config()).unwrap();
    reply("open");
    for line in child_commands() {
        reply(&answer(&wal, &line));
    }
    wal.close().unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    /// One record of `len` bytes, by the child or this process.
    Append {
        child: bool,
        topic: usize,
        len: usize,
    },
    /// A batch of `n` records.
    Batch {
        child: bool,
        topic: usize,
        n: u64,
        len: usize,
    },
    /// Reads the record at `pick` mod (records + 1).
    Read {
        child: bool,
        topic: usize,
        pick: usize,
    },
    /// The topic's first and next offsets.
    Info {
        child: bool,
        topic: usize,
    },
    /// Commits offset `pick` mod (records + 1) for `group`.
    Commit {
        child: bool,
        topic: usize,
        group: usize,
        pick: usize,
    },
    /// Where a reader of `group` starts.
    Position {
        child: bool,
        topic: usize,
        group: usize,
    },
    Delete {
        child: bool,
        topic: usize,
    },
    /// SIGKILLs the child now and starts another, which dies at the first pass through
    /// crash point `point` if given.
    Kill {
        point: Option<usize>,
    },
    /// Closes this process's handle and opens it again.
    Reopen,
    /// Closes this process's handle and opens it again, the open's `skip`-th call of
    /// `OPEN_FAULT_POINTS[point]` failing with EIO, beside the live child; a failed open is
    /// followed by a plain one. A shared-mode open that fails must leave nothing behind that
    /// stops the child or the next open (its lock bytes, its process slot, the state file).
    FaultedReopen {
        point: usize,
        skip: u64,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let topic = 0..TOPICS.len();
    let child = any::<bool>();
    prop_oneof![
        8 => (child, topic.clone(), prop_oneof![4 => 0usize..200, 1 => 200usize..20_000])
            .prop_map(|(child, topic, len)| Op::Append { child, topic, len }),
        3 => (child, topic.clone(), 1u64..6, 0usize..3000)
            .prop_map(|(child, topic, n, len)| Op::Batch { child, topic, n, len }),
        4 => (child, topic.clone(), any::<usize>())
            .prop_map(|(child, topic, pick)| Op::Read { child, topic, pick }),
        2 => (child, topic.clone()).prop_map(|(child, topic)| Op::Info { child, topic }),
        2 => (child, topic.clone(), 0..GROUPS.len(), any::<usize>())
            .prop_map(|(child, topic, group, pick)| Op::Commit { child, topic, group, pick }),
        2 => (child, topic.clone(), 0..GROUPS.len())
            .prop_map(|(child, topic, group)| Op::Position { child, topic, group }),
        1 => (child, topic).prop_map(|(child, topic)| Op::Delete { child, topic }),
        2 => prop::option::weighted(0.7, 0..POINTS.len()).prop_map(|point| Op::Kill { point }),
        1 => Just(Op::Reopen),
        1 => (0..OPEN_FAULT_POINTS.len(), 0u64..12).prop_map(|(point, skip)| Op::FaultedReopen { point, skip }),
    ]
}

/// One topic as the model holds it.
#[derive(Debug, Default)]
struct Topic {
    /// Digests of its records, by offset (no retention: dense from 0, but for what the
    /// groups consumed).
    records: Vec<u64>,
    /// Committed offset per group.
    committed: BTreeMap<usize, u64>,
    /// Offsets below this may be gone: the highest the groups' smallest commit has been
    /// (extents every group committed past are consumed and deleted, README "Deletion").
    reclaimable: u64,
}

impl Topic {
    fn commit(&mut self, group: usize, offset: u64) {
        self.committed.insert(group, offset);
        let smallest = self.committed.values().copied().min().unwrap_or(0);
        self.reclaimable = self.reclaimable.max(smallest);
    }

    /// Checks a first offset the engine reported: never past what the groups consumed.
    fn check_first(&self, first: u64) -> Result<(), TestCaseError> {
        prop_assert!(
            first <= self.reclaimable,
            "first offset {} but the groups consumed below {} only ({:?})",
            first,
            self.reclaimable,
            self.committed
        );
        Ok(())
    }
}

/// The case under way: the directory, both processes, the model.
struct Case {
    dir: tempfile::TempDir,
    wal: Option<Wal>,
    child: Option<ChildSession>,
    model: BTreeMap<usize, Topic>,
    seq: u64,
    log: Vec<String>,
}

/// What the cases did, over all of them (printed at the end).
static CHILD_OPS: AtomicU64 = AtomicU64::new(0);
static DIED_IN_OP: AtomicU64 = AtomicU64::new(0);
static KILLS: AtomicU64 = AtomicU64::new(0);

impl Case {
    fn new() -> Case {
        let dir = tempdir();
        let wal = Wal::open_with(dir.path(), config()).unwrap();
        let mut case = Case {
            dir,
            wal: Some(wal),
            child: None,
            model: BTreeMap::new(),
            seq: 0,
            log: Vec::new(),
        };
        case.spawn(None);
        case
    }

    fn spawn(&mut self, point: Option<&str>) {
        let crash = point.map(|p| format!("kill:{p}:1"));
        self.child = Some(common::open_child(
            module_path!(),
            self.dir.path(),
            "",
            crash.as_deref(),
            WAIT,
        ));
    }

    /// Runs `command` in the child or here; `None` when the child died in it (killed at
    /// its crash point), which then is replaced.
    fn run(&mut self, child: bool, command: &str) -> Option<String> {
        if !child {
            return Some(answer(self.wal.as_ref().unwrap(), command));
        }
        CHILD_OPS.fetch_add(1, Ordering::Relaxed);
        let session = self.child.as_mut().unwrap();
        session.send(command);
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(text) = session.try_recv(Duration::from_millis(20)) {
                return Some(text);
            }
            if session.has_exited() {
                DIED_IN_OP.fetch_add(1, Ordering::Relaxed);
                self.log.push("  (the child died in it)".to_owned());
                self.spawn(None);
                return None;
            }
            assert!(
                Instant::now() < deadline,
                "the child did not answer {command}"
            );
        }
    }

    fn topic(&mut self, t: usize) -> &mut Topic {
        self.model.entry(t).or_default()
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.log.push(format!("{op:?}"));
        match *op {
            Op::Append { child, topic, len } => self.append(child, topic, 1, len, false),
            Op::Batch {
                child,
                topic,
                n,
                len,
            } => self.append(child, topic, n, len, true),
            Op::Read { child, topic, pick } => {
                let records = self.model.get(&topic).map(|t| t.records.clone());
                let n = records.as_ref().map_or(0, Vec::len);
                let offset = pick % (n + 1);
                let got = self.run(child, &format!("read {} {offset}", TOPICS[topic]));
                let Some(got) = got else { return Ok(()) };
                let reclaimable = self.model.get(&topic).map_or(0, |t| t.reclaimable as usize);
                match records.as_ref().and_then(|r| r.get(offset)) {
                    // Consumed by every group: gone, or not yet.
                    Some(_) if offset < reclaimable && got == "err OffsetOutOfRange" => {}
                    Some(d) => prop_assert_eq!(got, format!("{d:x}"), "read {}", offset),
                    None => prop_assert!(
                        got.starts_with("err ") && !got.contains("Corruption"),
                        "read past the end: {}",
                        got
                    ),
                }
                Ok(())
            }
            Op::Info { child, topic } => {
                let got = self.run(child, &format!("info {}", TOPICS[topic]));
                let Some(got) = got else { return Ok(()) };
                match self.model.get(&topic) {
                    Some(t) if !t.records.is_empty() => {
                        let (first, next) = got.split_once(' ').unwrap_or((&got, ""));
                        prop_assert_eq!(next, t.records.len().to_string(), "info: {}", got);
                        t.check_first(first.parse().unwrap_or(u64::MAX))?;
                    }
                    // A topic created and emptied, or gone: `0 0`, or unknown.
                    _ => prop_assert!(got == "0 0" || got == "err UnknownTopic", "info: {}", got),
                }
                Ok(())
            }
            Op::Commit {
                child,
                topic,
                group,
                pick,
            } => {
                let n = self.model.get(&topic).map_or(0, |t| t.records.len());
                let offset = (pick % (n + 1)) as u64;
                let command = format!("commit {} {} {offset}", TOPICS[topic], GROUPS[group]);
                let Some(got) = self.run(child, &command) else {
                    return Ok(());
                };
                if n == 0 {
                    // Nothing to commit into, or a topic the name has no records of yet.
                    prop_assert!(got == "ok" || got == "err UnknownTopic", "commit: {}", got);
                    if got == "ok" {
                        self.topic(topic).commit(group, offset);
                    }
                } else {
                    prop_assert_eq!(&got, "ok");
                    self.topic(topic).commit(group, offset);
                }
                Ok(())
            }
            Op::Position {
                child,
                topic,
                group,
            } => {
                let command = format!("position {} {}", TOPICS[topic], GROUPS[group]);
                let Some(got) = self.run(child, &command) else {
                    return Ok(());
                };
                let want = self.model.get(&topic).map(|t| {
                    (
                        t.committed.get(&group).copied().unwrap_or(0),
                        t.records.is_empty(),
                    )
                });
                match want {
                    Some((offset, false)) => prop_assert_eq!(got, offset.to_string()),
                    _ => prop_assert!(
                        got == "err UnknownTopic" || got.parse::<u64>().is_ok(),
                        "position: {}",
                        got
                    ),
                }
                Ok(())
            }
            Op::Delete { child, topic } => {
                let known = self.model.contains_key(&topic);
                let got = self.run(child, &format!("delete {}", TOPICS[topic]));
                match got {
                    Some(got) if known => prop_assert_eq!(&got, "ok"),
                    Some(got) => {
                        prop_assert!(got == "ok" || got == "err UnknownTopic", "delete: {}", got);
                    }
                    // Killed in it: deleted (every point a deletion passes lies after it
                    // marked the topic); the survivor finishes it, and an append of the
                    // name waits for that.
                    None => {}
                }
                self.model.remove(&topic);
                Ok(())
            }
            Op::Kill { point } => {
                KILLS.fetch_add(1, Ordering::Relaxed);
                if let Some(mut child) = self.child.take() {
                    child.kill();
                }
                self.spawn(point.map(|p| POINTS[p]));
                Ok(())
            }
            Op::Reopen => {
                self.wal.take().unwrap().close().unwrap();
                self.wal = Some(Wal::open_with(self.dir.path(), config()).unwrap());
                Ok(())
            }
            Op::FaultedReopen { point, skip } => {
                self.faulted_reopen(OPEN_FAULT_POINTS[point], skip)
            }
        }
    }

    /// [`Op::FaultedReopen`]. An open that failed must have met the fault; one that got
    /// past it is closed again (its handle may hold the fault's consequences). Either way
    /// the next, plain, open must succeed beside the child, which goes on.
    fn faulted_reopen(&mut self, point: &'static str, skip: u64) -> Result<(), TestCaseError> {
        self.wal.take().unwrap().close().unwrap();
        let faults = Arc::new(FaultStorage::new());
        faults.arm(
            point,
            Fault::After {
                skip,
                errno: libc::EIO,
            },
        );
        let opened = Wal::open_with_storage(
            self.dir.path(),
            config(),
            faults.clone() as Arc<dyn Storage>,
        );
        faults.disarm_all();
        let fired = faults.hits(point) > 0;
        match opened {
            Ok(wal) if fired => {
                self.log.push(format!("  open got past a fault at {point}"));
                wal.close().ok();
            }
            Ok(wal) => {
                self.wal = Some(wal);
                return Ok(());
            }
            Err(e) => {
                prop_assert!(fired, "open failed with no fault: {}", e);
                self.log.push(format!("  open failed at {point}: {e}"));
            }
        }
        let wal = Wal::open_with(self.dir.path(), config());
        prop_assert!(
            wal.is_ok(),
            "the open after a faulted one failed: {:?}",
            wal.err()
        );
        self.wal = wal.ok();
        Ok(())
    }

    /// Appends `n` records (a batch when `batch`) to `topic`; the model takes them once
    /// acknowledged.
    fn append(
        &mut self,
        child: bool,
        topic: usize,
        n: u64,
        len: usize,
        batch: bool,
    ) -> Result<(), TestCaseError> {
        let seq = self.seq;
        self.seq += n;
        let name = TOPICS[topic];
        let command = if batch {
            format!("batch {name} {seq} {n} {len}")
        } else {
            format!("append {name} {seq} {len}")
        };
        let Some(got) = self.run(child, &command) else {
            // Killed in it: every point an append passes lies before its publish.
            return Ok(());
        };
        let t = self.topic(topic);
        prop_assert_eq!(got, t.records.len().to_string(), "the append's offset");
        for s in seq..seq + n {
            t.records.push(digest(&value(name, s, len)));
        }
        Ok(())
    }

    /// Every process gone, the directory alone holds exactly the model.
    fn check_alone(mut self) -> Result<(), TestCaseError> {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
        self.wal.take().unwrap().close().unwrap();
        let wal = Wal::open_with(self.dir.path(), config().exclusive(true)).unwrap();
        for (i, name) in TOPICS.iter().enumerate() {
            let model = self.model.get(&i);
            let (first, got): (u64, Vec<u64>) = match wal.topic_info(name) {
                Ok(info) => (
                    info.first_offset,
                    common::read_all(&wal, name)
                        .iter()
                        .map(|(_, _, v)| digest(v))
                        .collect(),
                ),
                Err(Error::UnknownTopic { .. }) => (0, Vec::new()),
                Err(e) => return Err(TestCaseError::fail(format!("{name}: {e:?}"))),
            };
            let want = match model {
                Some(t) => {
                    t.check_first(first)?;
                    t.records.get(first as usize..).unwrap_or_default().to_vec()
                }
                None => Vec::new(),
            };
            prop_assert_eq!(got, want, "topic {} alone, from offset {}", name, first);
        }
        wal.close().unwrap();
        Ok(())
    }
}

fn run_ops(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut case = Case::new();
    let mut result = Ok(());
    for op in ops {
        result = case.apply(op);
        if result.is_err() {
            break;
        }
    }
    let log = case.log.clone();
    if result.is_ok() {
        result = case.check_alone();
    }
    if let Err(e) = &result {
        eprintln!(
            "two-process model failure: {e}\noperations:\n  {}",
            log.join("\n  ")
        );
    }
    result
}

/// A quarter of the model test's cases: each starts a process.
fn cases() -> u32 {
    (super::model::cases() / 4).max(1)
}

#[test]
fn random_operations_of_two_processes_keep_the_model() {
    let mut runner = TestRunner::new(PtConfig {
        cases: cases(),
        failure_persistence: None,
        ..PtConfig::default()
    });
    let result = runner.run(&prop::collection::vec(op_strategy(), 1..50), |ops| {
        run_ops(&ops)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!(
        "two processes: {} cases, {} operations of the child, {} kills, {} deaths inside \
         an operation",
        cases(),
        CHILD_OPS.load(Ordering::Relaxed),
        KILLS.load(Ordering::Relaxed),
        DIED_IN_OP.load(Ordering::Relaxed)
    );
}

/// Found at 1000 cases: a group's commit past a whole extent (records of 18 KiB in 64 KiB
/// blocks) consumes it, and the directory alone starts after it.
#[test]
fn regression_a_commit_past_an_extent_consumes_it() {
    let ops = [
        Op::Batch {
            child: false,
            topic: 2,
            n: 2,
            len: 873,
        },
        Op::Batch {
            child: false,
            topic: 2,
            n: 4,
            len: 1841,
        },
        Op::Append {
            child: false,
            topic: 2,
            len: 25,
        },
        Op::Append {
            child: false,
            topic: 2,
            len: 18177,
        },
        Op::Append {
            child: true,
            topic: 2,
            len: 18841,
        },
        Op::Batch {
            child: false,
            topic: 2,
            n: 5,
            len: 2841,
        },
        Op::Commit {
            child: true,
            topic: 2,
            group: 0,
            pick: 9,
        },
        Op::Info {
            child: false,
            topic: 2,
        },
        Op::Read {
            child: true,
            topic: 2,
            pick: 3,
        },
    ];
    run_ops(&ops).unwrap();
}

/// A joining open whose read-write open of the shared state file failed fell back to a
/// read-only mapping, then panicked registering its process there ("atomic access to a
/// read-only mapping"). It now fails with the open's error, and the next open joins.
#[test]
fn regression_a_join_that_cannot_open_the_state_file_for_writing_fails_cleanly() {
    let ops = [
        Op::FaultedReopen { point: 0, skip: 0 },
        Op::Append {
            child: true,
            topic: 0,
            len: 10,
        },
        Op::Append {
            child: false,
            topic: 0,
            len: 10,
        },
    ];
    run_ops(&ops).unwrap();
}

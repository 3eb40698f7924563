//! Goal: reopening never loses or reorders records: after a clean close, after a drop, and
//! after a crash that followed a flush.
//! Method: 20 cycles of open / verify everything / append / close-or-drop over two topics on a
//! small geometry (so extents and files roll between cycles); then crash cycles where a child
//! process appends, flushes, appends more and exits without dropping the `Wal`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{child_env, data_files, geometry, payload, read_all, run_child, tempdir};
use tidelog::{Config, Wal};

const CRASH_TOPIC: &str = "crashy";
/// Records the crash child appends and flushes, then appends unflushed.
const CHILD_FLUSHED: u64 = 40;
const CHILD_UNFLUSHED: u64 = 5;

fn cfg() -> Config {
    geometry(4, 16 * 1024)
}

/// The value of `topic` at `offset`: any run can check any offset.
fn value_of(topic: &str, offset: u64) -> Vec<u8> {
    let seed = offset
        .wrapping_mul(31)
        .wrapping_add(topic.len() as u64 * 1_000_003);
    payload(seed, (offset * 53 % 700) as usize)
}

fn check_topic(wal: &Wal, topic: &str, expected: &[Vec<u8>], ctx: &str) {
    assert_eq!(
        wal.topic_info(topic).unwrap().next_offset,
        expected.len() as u64,
        "{ctx}"
    );
    let got = read_all(wal, topic);
    assert_eq!(got.len(), expected.len(), "{ctx}: {topic} record count");
    for (i, ((offset, key, value), want)) in got.iter().zip(expected).enumerate() {
        assert_eq!(*offset, i as u64, "{ctx}: {topic} offsets must be dense");
        assert!(key.is_none(), "{ctx}");
        assert!(value == want, "{ctx}: {topic}@{offset} differs");
    }
}

#[test]
fn twenty_cycles_of_close_and_drop() {
    let dir = tempdir();
    let topics = ["alpha", "beta"];
    let mut expected: BTreeMap<&str, Vec<Vec<u8>>> = topics.iter().map(|t| (*t, vec![])).collect();
    for cycle in 0..20u64 {
        let ctx = format!("cycle {cycle}");
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        let report = wal.recovery_report();
        assert_eq!(report.torn_tails, 0, "{ctx}: {report:?}");
        assert_eq!(report.dropped_extents, 0, "{ctx}: {report:?}");
        for t in topics {
            if !expected[t].is_empty() {
                check_topic(&wal, t, &expected[t], &ctx);
            }
        }
        // alpha: single appends; beta: one batch per cycle.
        for _ in 0..10 + cycle * 3 {
            let offset = expected["alpha"].len() as u64;
            let v = value_of("alpha", offset);
            assert_eq!(wal.append("alpha", &v).unwrap(), offset, "{ctx}");
            expected.get_mut("alpha").unwrap().push(v);
        }
        let first = expected["beta"].len() as u64;
        let batch: Vec<Vec<u8>> = (first..first + 1 + cycle % 7)
            .map(|o| value_of("beta", o))
            .collect();
        let range = wal.append_batch("beta", &batch).unwrap();
        assert_eq!(range, first..first + batch.len() as u64, "{ctx}");
        expected.get_mut("beta").unwrap().extend(batch);
        if cycle.is_multiple_of(3) {
            wal.flush().unwrap();
        }
        if cycle.is_multiple_of(2) {
            wal.close().unwrap();
        } else {
            drop(wal);
        }
    }
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    for t in topics {
        check_topic(&wal, t, &expected[t], "final");
    }
    assert!(
        data_files(dir.path()).len() >= 3,
        "the cycles should have rolled across files"
    );
}

/// Child side (a no-op unless re-executed with `TIDELOG_CHILD_DIR`): appends and flushes
/// `CHILD_FLUSHED` records after the current end, appends a few more, then crashes.
#[test]
fn child_process_entry() {
    let Some((dir, _mode)) = child_env() else {
        return;
    };
    let wal = Wal::open_with(&dir, cfg()).unwrap();
    let w = wal.writer(CRASH_TOPIC).unwrap();
    let start = w.next_offset();
    for o in start..start + CHILD_FLUSHED {
        assert_eq!(w.append(&value_of(CRASH_TOPIC, o)).unwrap(), o);
    }
    w.flush().unwrap();
    for o in start + CHILD_FLUSHED..start + CHILD_FLUSHED + CHILD_UNFLUSHED {
        assert_eq!(w.append(&value_of(CRASH_TOPIC, o)).unwrap(), o);
    }
    std::process::exit(0);
}

/// Checks `wal` has at least `durable` records of the crash topic, dense and byte-equal.
fn check_crash_topic(wal: &Wal, durable: u64, ctx: &str) -> u64 {
    let got = read_all(wal, CRASH_TOPIC);
    assert!(
        got.len() as u64 >= durable,
        "{ctx}: {} records, {durable} were flushed",
        got.len()
    );
    for (i, (offset, _, value)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "{ctx}: offsets must be dense");
        assert!(
            *value == value_of(CRASH_TOPIC, *offset),
            "{ctx}: record {offset} differs"
        );
    }
    got.len() as u64
}

fn crash_cycle(dir: &Path, durable: u64, ctx: &str) -> u64 {
    run_child(module_path!(), dir, "");
    let durable = durable + CHILD_FLUSHED;
    // A reader sees what the crashed writer made durable, without repairing anything.
    {
        let ro = Wal::open_read_only_with(dir, cfg()).unwrap();
        check_crash_topic(&ro, durable, &format!("{ctx}, read-only"));
    }
    let wal = Wal::open_with(dir, cfg()).unwrap();
    let n = check_crash_topic(&wal, durable, ctx);
    assert_eq!(wal.topic_info(CRASH_TOPIC).unwrap().next_offset, n, "{ctx}");
    n
}

#[test]
fn crash_after_flush_keeps_flushed_records() {
    let dir = tempdir();
    let mut durable = 0;
    for cycle in 0..5 {
        // What the parent's writable open recovered becomes the next child's starting point.
        durable = crash_cycle(dir.path(), durable, &format!("crash cycle {cycle}"));
    }
    let wal = Wal::open_with(dir.path(), cfg()).unwrap();
    assert_eq!(check_crash_topic(&wal, durable, "final"), durable);
}

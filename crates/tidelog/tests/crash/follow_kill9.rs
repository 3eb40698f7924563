//! Goal: a reader in another process, following a writer through the shared state file,
//! never sees a torn record, and every record it saw survives the writer's `kill -9` at the
//! same offset with the same bytes (published records are in the page cache, which the kill
//! does not touch); the reader follows the next writer on from where it stood.
//!
//! Method: per cycle a child appends tagged records (single appends and batches, from two
//! threads, `Durability::Never`, small extents so it rolls often) until the parent SIGKILLs
//! it at a random moment. Meanwhile a read-only handle in the parent reads through
//! `wait_for_records`, checking each value. After the kill the parent opens the directory
//! writable (recovery): every record the reader saw must be there, unchanged, and the
//! offsets dense; then the new writer appends and the old reader, still open, reads on.
//! `TIDELOG_CRASH_CYCLES` and `TIDELOG_CRASH_SEED` as for the other campaigns.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{
    Rng, Running, campaign_params, child_command, child_env, geometry, parse_tagged, tagged_value,
    tempdir,
};
use tidelog::{Append, Config, Reader, ReaderOptions, StartPosition, Wal};

const TOPIC: &str = "t";
const CYCLES: u64 = 6;
const MAX_PAD: u64 = 600;

fn cfg() -> Config {
    geometry(8, 64 * 1024)
}

/// Child: two threads append tagged records (tag = cycle * 10 + thread) until killed.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let cycle: u32 = mode.parse().unwrap();
    let wal = Arc::new(Wal::open_with(&dir, cfg()).unwrap());
    println!("@@ open");
    let threads: Vec<_> = (0..2u32)
        .map(|t| {
            let wal = Arc::clone(&wal);
            std::thread::spawn(move || {
                let tag = cycle * 10 + t;
                let mut rng = Rng::new(u64::from(tag));
                let mut seq = 0u64;
                // Until killed.
                while seq < u64::MAX / 2 {
                    if rng.range(0, 4) == 0 {
                        let values: Vec<Vec<u8>> = (0..rng.range(2, 20))
                            .map(|k| tagged_value(tag, seq + k, MAX_PAD))
                            .collect();
                        let records: Vec<Append<'_>> =
                            values.iter().map(|v| Append::value(v)).collect();
                        wal.append_batch_records(TOPIC, &records).unwrap();
                        seq += values.len() as u64;
                    } else {
                        wal.append(TOPIC, &tagged_value(tag, seq, MAX_PAD)).unwrap();
                        seq += 1;
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Reads on from `reader` until `stop` is set and nothing more arrives for a moment;
/// returns every `(offset, value)` read. Panics on a value that fails its check.
fn follow(wal: &Wal, reader: &mut Reader, stop: &AtomicBool) -> Vec<(u64, Vec<u8>)> {
    let mut seen = Vec::new();
    loop {
        match reader.next().unwrap() {
            Some(rec) => {
                assert!(
                    parse_tagged(rec.value).is_some(),
                    "torn or foreign record at offset {}",
                    rec.offset
                );
                seen.push((rec.offset, rec.value.to_vec()));
            }
            None => {
                let woke = wal
                    .wait_for_records(reader, Duration::from_millis(50))
                    .unwrap();
                if !woke && stop.load(Ordering::Acquire) {
                    return seen;
                }
            }
        }
    }
}

fn check_kept(dir: &Path, seen: &[(u64, Vec<u8>)], ctx: &str) -> u64 {
    let wal = Wal::open_with(dir, cfg()).unwrap();
    let next = wal.topic_info(TOPIC).unwrap().next_offset;
    for (offset, value) in seen {
        assert!(
            *offset < next,
            "{ctx}: record {offset} the reader saw is gone"
        );
        assert_eq!(
            wal.read(TOPIC, *offset).unwrap().value(),
            value.as_slice(),
            "{ctx}: record {offset} changed"
        );
    }
    let mut r = wal
        .reader_with(
            TOPIC,
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .unwrap();
    let mut expected = r.position();
    while let Some(rec) = r.next().unwrap() {
        assert_eq!(rec.offset, expected, "{ctx}: offsets dense");
        assert!(
            parse_tagged(rec.value).is_some(),
            "{ctx}: record {expected}"
        );
        expected += 1;
    }
    assert_eq!(expected, next);
    wal.close().unwrap();
    next
}

#[test]
fn a_follower_keeps_what_it_saw_when_the_writer_is_killed() {
    let (cycles, seed) = campaign_params("follow_kill9", CYCLES);
    let mut rng = Rng::new(seed);
    let dir = tempdir();
    Wal::open_with(dir.path(), cfg())
        .unwrap()
        .append(TOPIC, &tagged_value(999, 0, 0))
        .unwrap();
    let ro = Wal::open_read_only_with(dir.path(), cfg()).unwrap();
    let mut reader = ro
        .reader_with(
            TOPIC,
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .unwrap();
    let mut total_seen = 0;
    for cycle in 0..cycles {
        let delay = Duration::from_millis(rng.range(5, 60));
        let ctx = format!("cycle {cycle} (seed {seed}, killed {delay:?} after open)");
        let child = Running::spawn(&mut child_command(
            module_path!(),
            dir.path(),
            &cycle.to_string(),
        ));
        let stop = AtomicBool::new(false);
        let seen = std::thread::scope(|s| {
            let follower = s.spawn(|| follow(&ro, &mut reader, &stop));
            let ended = child.kill_after_first_line(delay);
            assert!(ended.killed(), "{ctx}: {}", ended.stderr);
            stop.store(true, Ordering::Release);
            follower.join().unwrap()
        });
        total_seen += seen.len();
        let next = check_kept(dir.path(), &seen, &ctx);
        // The reader stands at or below the recovered end and reads on after a restart.
        assert!(reader.position() <= next, "{ctx}");
    }
    eprintln!("follow_kill9: the follower read {total_seen} records over {cycles} cycles");
    assert!(total_seen > 0, "the follower saw records");
}

//! Goal: batches are crash-atomic and acknowledged (flushed) batches are durable under
//! `kill -9` at an arbitrary moment.
//! Method: 10 cycles. A child appends batches of 1..=50 records, flushes after each and prints
//! its range; the parent SIGKILLs it 10..80 ms after its first acknowledgement, reopens and
//! checks: offsets dense, every record belongs to a complete batch (each value carries its
//! batch id, batch size and index), every acknowledged batch is there with its exact range,
//! and everything recovered by earlier cycles is unchanged.
//! Set `TIDELOG_SEED` to replay a run's kill timings.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{Rng, Running, child_command, child_env, geometry, read_all, tempdir};
use tidelog::{Config, Wal};

const TOPIC: &str = "batches";
const CYCLES: u64 = 10;
/// Batch ids of cycle c are `c * ID_STRIDE + k`.
const ID_STRIDE: u32 = 1_000_000;

fn cfg() -> Config {
    geometry(16, 64 * 1024)
}

/// Value `index` of batch `id` of `size` records: a 12-byte header then filler.
fn encode(id: u32, size: u32, index: u32, filler: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + filler);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&size.to_le_bytes());
    v.extend_from_slice(&index.to_le_bytes());
    v.resize(12 + filler, (id as u8) ^ (index as u8));
    v
}

fn decode(v: &[u8]) -> (u32, u32, u32) {
    assert!(
        v.len() >= 12,
        "value too short for its header: {} bytes",
        v.len()
    );
    let word = |at: usize| u32::from_le_bytes([v[at], v[at + 1], v[at + 2], v[at + 3]]);
    (word(0), word(4), word(8))
}

/// Child side (a no-op unless re-executed with `TIDELOG_CHILD_DIR`): appends and acknowledges
/// batches until killed.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let cycle: u32 = mode.parse().unwrap();
    let wal = Wal::open_with(&dir, cfg()).unwrap();
    let writer = wal.writer(TOPIC).unwrap();
    let mut rng = Rng::new(u64::from(cycle) + 99);
    for k in 0.. {
        let id = cycle * ID_STRIDE + k;
        let size = rng.range(1, 50) as u32;
        let values: Vec<Vec<u8>> = (0..size)
            .map(|i| encode(id, size, i, rng.range(0, 200) as usize))
            .collect();
        let range = writer.append_batch(&values).unwrap();
        writer.flush().unwrap();
        // `println!` flushes stdout at the newline: the ack leaves only after the flush.
        println!("@@ack {id} {} {}", range.start, range.end);
    }
}

/// One batch as recovered: id and offset range.
type Batches = BTreeMap<u64, (u32, u64)>;

/// Checks the whole topic and returns its batches keyed by first offset.
fn recovered_batches(wal: &Wal, ctx: &str) -> Batches {
    let records = read_all(wal, TOPIC);
    let mut batches = Batches::new();
    let mut i = 0;
    while i < records.len() {
        let (offset, _, ref value) = records[i];
        assert_eq!(offset, i as u64, "{ctx}: offsets must be dense");
        let (id, size, index) = decode(value);
        assert_eq!(
            index, 0,
            "{ctx}: offset {offset} starts mid-batch (batch {id})"
        );
        let end = i + size as usize;
        assert!(
            end <= records.len(),
            "{ctx}: batch {id} at {offset} is partial: {size} records, {} present",
            records.len() - i
        );
        for (j, (o, _, v)) in records[i..end].iter().enumerate() {
            assert_eq!(*o, (i + j) as u64, "{ctx}: offsets must be dense");
            assert_eq!(
                decode(v),
                (id, size, j as u32),
                "{ctx}: batch {id} broken at offset {o}"
            );
        }
        assert!(
            batches.values().all(|(other, _)| *other != id),
            "{ctx}: batch {id} twice"
        );
        batches.insert(offset, (id, end as u64));
        i = end;
    }
    assert_eq!(
        wal.topic_info(TOPIC).unwrap().next_offset,
        records.len() as u64,
        "{ctx}"
    );
    batches
}

/// Runs one child, kills it `delay` after its first ack, returns the acks `(id, start, end)`.
fn run_and_kill(dir: &Path, cycle: u64, delay: Duration) -> Vec<(u32, u64, u64)> {
    let child = Running::spawn(&mut child_command(module_path!(), dir, &cycle.to_string()));
    // SIGKILL: no destructor, no flush, whatever was mid-write stays as it is.
    let ended = child.kill_after_first_line(delay);
    let ack = |line: &str| {
        let f: Vec<u64> = line
            .strip_prefix("ack ")?
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        Some((f[0] as u32, f[1], f[2]))
    };
    ended.lines.iter().filter_map(|l| ack(l)).collect()
}

#[test]
fn kill_nine_keeps_acknowledged_batches_whole() {
    let seed = std::env::var("TIDELOG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("TIDELOG_SEED={seed}");
    let mut rng = Rng::new(seed);
    let dir = tempdir();
    let mut earlier = Batches::new();
    for cycle in 0..CYCLES {
        let delay = Duration::from_millis(rng.range(10, 80));
        let acks = run_and_kill(dir.path(), cycle, delay);
        let ctx = format!("cycle {cycle} (seed {seed}, killed {delay:?} after the first ack)");
        let wal = Wal::open_with(dir.path(), cfg()).unwrap();
        let batches = recovered_batches(&wal, &ctx);
        for (id, start, end) in &acks {
            assert_eq!(
                batches.get(start),
                Some(&(*id, *end)),
                "{ctx}: acknowledged batch {id} lost"
            );
        }
        for (start, b) in &earlier {
            assert_eq!(
                batches.get(start),
                Some(b),
                "{ctx}: batch recovered earlier changed"
            );
        }
        // Beyond the acks, at most the batch being flushed at the kill may have survived.
        let this_cycle = batches
            .values()
            .filter(|(id, _)| *id / ID_STRIDE == cycle as u32)
            .count();
        assert!(
            this_cycle <= acks.len() + 1,
            "{ctx}: {this_cycle} batches for {} acks",
            acks.len()
        );
        // The writable open repaired the log; closing it makes that durable for the next cycle.
        wal.close().unwrap();
        earlier = batches;
    }
    assert!(!earlier.is_empty());
}

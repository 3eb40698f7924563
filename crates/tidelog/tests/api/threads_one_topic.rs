//! Goal: concurrent appends to one topic get unique, dense offsets in each writer's order, and
//! a reader tailing the topic meanwhile sees every record whole, in offset order.
//!
//! Method: 4 threads append 20,000 self-checking values each (thread id, sequence number and
//! derived padding; one thread appends in batches) while the background flush seals extents
//! every few milliseconds and an anonymous reader tails the topic. The offsets returned must
//! be exactly 0..N and increasing per thread; the tailing reader must see offsets 0..N in
//! order, every value intact, each thread's sequence numbers in order. After close and reopen
//! the topic holds the same records.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::common::{parse_tagged, small, tagged_value, tempdir};
use tidelog::{Config, ReaderOptions, StartPosition, Wal};

const THREADS: u32 = 4;
const PER_THREAD: u64 = 20_000;
const TOTAL: u64 = THREADS as u64 * PER_THREAD;
const BATCH: u64 = 8;
const MAX_PAD: u64 = 120;

fn config() -> Config {
    // Background flush on: sealing runs while writers and the reader work.
    small().sync_interval_ms(5)
}

/// Returns each thread's offsets in the order its appends returned them.
fn write_concurrently(wal: &Wal) -> Vec<Vec<u64>> {
    let start = Arc::new(Barrier::new(THREADS as usize));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|tid| {
                let writer = wal.writer("events").expect("writer");
                let start = Arc::clone(&start);
                s.spawn(move || {
                    start.wait();
                    let mut offsets = Vec::with_capacity(PER_THREAD as usize);
                    let mut seq = 0;
                    while seq < PER_THREAD {
                        if tid == 3 {
                            // Batches take a run of offsets at once.
                            let values: Vec<Vec<u8>> = (seq..seq + BATCH)
                                .map(|q| tagged_value(tid, q, MAX_PAD))
                                .collect();
                            let range = writer.append_batch(&values).expect("append_batch");
                            assert_eq!(range.end - range.start, BATCH);
                            offsets.extend(range);
                            seq += BATCH;
                        } else {
                            let value = tagged_value(tid, seq, MAX_PAD);
                            offsets.push(writer.append(&value).expect("append"));
                            seq += 1;
                        }
                    }
                    offsets
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect()
    })
}

/// Offset -> (thread, seq), checking density and per-thread order.
fn check_offsets(per_thread: &[Vec<u64>]) -> Vec<(u32, u64)> {
    let mut owner = vec![None; TOTAL as usize];
    for (tid, offsets) in per_thread.iter().enumerate() {
        assert_eq!(offsets.len() as u64, PER_THREAD);
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "thread {tid}: offsets increase"
        );
        for (seq, &o) in offsets.iter().enumerate() {
            let slot = owner.get_mut(o as usize).expect("offset below the total");
            assert!(slot.is_none(), "offset {o} returned twice");
            *slot = Some((tid as u32, seq as u64));
        }
    }
    owner
        .into_iter()
        .enumerate()
        .map(|(o, x)| x.unwrap_or_else(|| panic!("offset {o} never returned")))
        .collect()
}

/// Reads the whole topic and compares it with `owner`.
fn check_contents(wal: &Wal, owner: &[(u32, u64)]) {
    let mut reader = wal
        .reader_with(
            "events",
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .expect("reader");
    let mut n = 0u64;
    while let Some(rec) = reader.next().expect("next") {
        assert_eq!(rec.offset, n);
        assert_eq!(
            parse_tagged(rec.value),
            Some(owner[n as usize]),
            "offset {n}"
        );
        n += 1;
    }
    assert_eq!(n, TOTAL);
}

#[test]
fn four_writers_one_topic_with_a_tailing_reader() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    // Create the topic first, so the tailing reader can attach before any append.
    let writer = wal.writer("events").expect("writer");
    assert_eq!(writer.next_offset(), 0);

    let mut tail = wal
        .reader_with(
            "events",
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .expect("tailing reader");
    let (per_thread, tailed) = std::thread::scope(|s| {
        let tailer = s.spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut last_seq = [None::<u64>; THREADS as usize];
            let mut seen = Vec::with_capacity(TOTAL as usize);
            while (seen.len() as u64) < TOTAL {
                assert!(
                    Instant::now() < deadline,
                    "tailing reader stalled at {}",
                    seen.len()
                );
                match tail.next().expect("tailing next") {
                    Some(rec) => {
                        assert_eq!(rec.offset, seen.len() as u64, "dense, in order");
                        let (tid, seq) = parse_tagged(rec.value).unwrap_or_else(|| {
                            panic!("offset {}: partial or damaged value", rec.offset)
                        });
                        let last = &mut last_seq[tid as usize];
                        assert!(last.is_none_or(|l| l < seq), "thread {tid} out of order");
                        *last = Some(seq);
                        seen.push((tid, seq));
                    }
                    None => std::thread::yield_now(),
                }
            }
            assert!(tail.next().expect("next at the end").is_none());
            seen
        });
        let per_thread = write_concurrently(&wal);
        (per_thread, tailer.join().expect("tailing thread"))
    });

    let owner = check_offsets(&per_thread);
    assert_eq!(
        tailed, owner,
        "the tailing reader saw what the writers wrote"
    );
    assert_eq!(wal.topic_info("events").expect("info").next_offset, TOTAL);
    check_contents(&wal, &owner);
    drop(writer);
    wal.close().expect("close");

    let wal = Wal::open_with(dir.path(), config()).expect("reopen");
    assert_eq!(wal.recovery_report().torn_tails, 0);
    assert_eq!(wal.topic_info("events").expect("info").next_offset, TOTAL);
    check_contents(&wal, &owner);
    for o in (0..TOTAL).step_by(997) {
        let rec = wal.read("events", o).expect("read");
        assert_eq!(parse_tagged(rec.value()), Some(owner[o as usize]));
    }
}

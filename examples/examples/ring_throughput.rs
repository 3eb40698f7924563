//! The ring backend's WriteBench, small: records into a direct-I/O ring file, a trimmer
//! keeping up, throughput and durable latency printed. For the full tool with pacing, JSON
//! and device counters, see `ring_writebench` in `benches/`.
//!
//! Run: `cargo run --release --example ring_throughput [RING_FILE] [RECORD_BYTES]`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tidelog::{RingConfig, RingWal};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "tidelog-example-ring.wal".to_owned());
    let record: usize = args.next().map_or(Ok(1024), |r| r.parse())?;
    // A missing file is created (and written once, zero-filled) at this size.
    let ring = RingWal::open(&path, RingConfig::default().capacity_bytes(256 << 20))?;
    println!(
        "ring {path}: {} MiB, direct I/O {}, engine {}",
        ring.capacity_bytes() >> 20,
        ring.direct_io(),
        ring.io_engine()
    );
    let data = vec![0x5a; record];
    let mut pending = VecDeque::new();
    let mut latencies = Vec::new();
    let (started, run) = (Instant::now(), Duration::from_secs(2));
    let mut appended = 0u64;
    while started.elapsed() < run {
        // `append` returns at once; the handle completes when the record's block is durable.
        match ring.append(&data) {
            Ok(h) => {
                pending.push_back((h, Instant::now()));
                appended += 1;
            }
            Err(tidelog::Error::RingFull { .. }) => {
                // Everything durable has been consumed here: trim it to make room.
                ring.trim(ring.flushed_offset())?;
            }
            Err(e) => return Err(e.into()),
        }
        while pending.front().is_some_and(|(h, _)| h.is_durable()) {
            if let Some((_, t)) = pending.pop_front() {
                latencies.push(t.elapsed());
            }
        }
    }
    ring.flush()?;
    let secs = started.elapsed().as_secs_f64();
    latencies.sort();
    let p = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
    };
    println!(
        "{appended} records of {record} B in {secs:.2} s: {:.1} MB/s, {:.0} records/s; \
         append-to-durable p50 {:?} p99 {:?}",
        appended as f64 * record as f64 / secs / 1e6,
        appended as f64 / secs,
        p(0.5).copied().unwrap_or_default(),
        p(0.99).copied().unwrap_or_default()
    );
    ring.close()?;
    Ok(())
}

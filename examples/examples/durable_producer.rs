//! A durable producer: with `Durability::Always` every append returns only once its record is
//! on disk. Concurrent appenders share one sync (group commit), so durable throughput grows
//! with the number of appenders while each append's latency stays one sync.
//!
//! Run: `cargo run --release --example durable_producer [DIR] [THREADS]`.

use std::time::Instant;

use tidelog::{Config, Durability, Wal};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .unwrap_or_else(|| "tidelog-example-durable".to_owned());
    let threads: usize = args.next().map_or(Ok(8), |t| t.parse())?;
    let wal = Wal::open_with(&dir, Config::default().durability(Durability::Always))?;
    let per_thread = 500u64;
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let wal = &wal;
            s.spawn(move || -> Result<(), tidelog::Error> {
                let payments = wal.writer("payments")?;
                for i in 0..per_thread {
                    // Returns after the record (and everything before it) is durable.
                    payments.append(format!("thread {t} payment {i}").as_bytes())?;
                }
                Ok(())
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let total = per_thread * threads as u64;
    println!(
        "{total} durable appends from {threads} threads in {secs:.2} s: {:.0} appends/s, \
         {:.2} ms per append",
        total as f64 / secs,
        secs * 1e3 * threads as f64 / total as f64
    );
    // Pipelining without threads: append_async returns at once; wait on the handle later.
    let handles = (0..100)
        .map(|i| wal.append_async("payments", format!("async {i}").as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    for h in &handles {
        h.wait()?;
    }
    println!(
        "100 pipelined appends durable, last offset {}",
        handles[99].offset()
    );
    wal.close()?;
    Ok(())
}

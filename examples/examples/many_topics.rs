//! Many topics from many threads: each thread owns a topic's `Writer`; appends to different
//! topics share no lock except block allocation, so they scale with cores.
//!
//! Run: `cargo run --release --example many_topics [DIR] [THREADS]`.

use std::time::Instant;

use tidelog::{Config, Wal};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .unwrap_or_else(|| "tidelog-example-topics".to_owned());
    let threads: usize = args.next().map_or(Ok(4), |t| t.parse())?;
    let per_thread = 250_000u64;
    let wal = Wal::open_with(
        &dir,
        Config::default()
            .file_size_bytes(256 << 20)
            .block_size_bytes(4 << 20),
    )?;
    let started = Instant::now();
    std::thread::scope(
        |s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let writer = wal.writer(&format!("sensor-{t}"));
                    s.spawn(move || -> Result<(), tidelog::Error> {
                        let writer = writer?;
                        let mut value = [0u8; 64];
                        for i in 0..per_thread {
                            value[..8].copy_from_slice(&i.to_le_bytes());
                            // Offsets are per topic: this thread sees 0, 1, 2, ...
                            assert_eq!(writer.append(&value)?, i);
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                h.join().map_err(|_| "an appender panicked")??;
            }
            Ok(())
        },
    )
    .map_err(|e| e.to_string())?;
    let secs = started.elapsed().as_secs_f64();
    wal.flush()?;
    let total = per_thread * threads as u64;
    println!(
        "{threads} threads x {per_thread} appends of 64 B in {secs:.3} s ({:.2} M appends/s)",
        total as f64 / secs / 1e6
    );
    for topic in wal.topics() {
        let info = wal.topic_info(&topic)?;
        println!(
            "  {topic}: offsets {}..{}",
            info.first_offset, info.next_offset
        );
    }
    wal.close()?;
    Ok(())
}

//! A tailing consumer with a named cursor: one thread produces, another follows the topic
//! as records arrive, commits its position now and then, and resumes there after a restart.
//!
//! Run: `cargo run --release --example tailing_consumer [DIR]`.

use std::sync::Arc;
use std::time::Duration;

use tidelog::{ReaderOptions, StartPosition, Wal};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tidelog-example-tail".to_owned());
    let wal = Arc::new(Wal::open(&dir)?);
    let total = 10_000u64;

    // Making the writer creates the topic, so the reader below finds it.
    let events = wal.writer("events")?;
    let producer = {
        std::thread::spawn(move || -> Result<(), tidelog::Error> {
            for i in 0..total {
                events.append(format!("event {i}").as_bytes())?;
                if i % 1_000 == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Ok(())
        })
    };

    // The group's cursor survives restarts; `Committed` starts where it last committed.
    let mut reader = wal.reader_with(
        "events",
        ReaderOptions::group("tailer").start(StartPosition::Committed),
    )?;
    let start = reader.position();
    let mut seen = 0u64;
    while reader.position() < start + total {
        match reader.next()? {
            Some(record) => {
                seen += 1;
                if record.offset % 2_500 == 0 {
                    println!(
                        "at offset {}: {:?}",
                        record.offset,
                        String::from_utf8_lossy(record.value)
                    );
                    reader.commit()?; // durable position: a restart resumes after this record
                }
            }
            // Caught up with the producer: wait a moment for more.
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    reader.commit()?;
    producer.join().map_err(|_| "the producer panicked")??;
    println!(
        "followed {seen} records; the group 'tailer' is committed at {:?}",
        reader.committed()
    );
    drop(reader);
    Arc::try_unwrap(wal)
        .map_err(|_| "the Wal is still shared")?
        .close()?;
    Ok(())
}

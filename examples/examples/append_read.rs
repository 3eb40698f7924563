//! Append records to a topic, read them back with a named consumer group, and reopen.
//!
//! Run: `cargo run --release --example append_read [DIR]` (default: `./tidelog-example-data`).

use std::time::Instant;

use tidelog::{Append, Config, ReaderOptions, StartPosition, Wal};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tidelog-example-data".to_owned());
    // Small files keep the example's disk footprint modest; the defaults are 1 GiB / 10 MiB.
    let config = Config::default()
        .file_size_bytes(64 << 20)
        .block_size_bytes(1 << 20);

    let wal = Wal::open_with(&dir, config.clone())?;
    let orders = wal.writer("orders")?;
    let first = orders.next_offset();

    // One record at a time: each append returns the record's offset in its topic.
    let count = 1_000_000u64;
    let started = Instant::now();
    let mut value = [0u8; 100];
    for i in 0..count {
        value[..8].copy_from_slice(&i.to_le_bytes());
        orders.append(&value)?;
    }
    let append_secs = started.elapsed().as_secs_f64();

    // A keyed record with an explicit timestamp and headers, and a crash-atomic batch.
    let headers = tidelog::Headers::from_pairs([("source", Some(&b"web"[..]))])?;
    orders.append_record(Append {
        key: Some(b"customer-42"),
        value: b"{\"total\": 99.5}",
        timestamp_us: Some(tidelog::now_us()),
        headers: headers.block(),
    })?;
    let batch = orders.append_batch(&[b"a".as_slice(), b"b", b"c"])?;
    wal.flush()?; // everything above is durable now

    // A consumer group: starts at its committed offset, commits where it stopped.
    let mut reader = wal.reader_with(
        "orders",
        ReaderOptions::group("billing").start(StartPosition::Committed),
    )?;
    let started = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    while let Some(record) = reader.next()? {
        records += 1;
        bytes += record.value.len() as u64;
    }
    let read_secs = started.elapsed().as_secs_f64();
    // The commit also frees disk: 'billing' is the topic's only group, so every extent it
    // has read (all but the newest) is consumed and its data files are deleted.
    let files_before = wal.disk_usage().files;
    reader.commit()?;

    let info = wal.topic_info("orders")?;
    println!(
        "appended {count} x 100 B from offset {first} in {append_secs:.3} s ({:.1} M appends/s)",
        count as f64 / append_secs / 1e6
    );
    println!("batch offsets {batch:?}");
    println!(
        "group 'billing' read {records} records ({bytes} bytes) in {read_secs:.3} s, committed {:?}",
        reader.committed()
    );
    println!(
        "topic 'orders': offsets {}..{}, {} bytes in {} extents",
        info.first_offset, info.next_offset, info.bytes, info.extents
    );
    println!("data files before the commit: {files_before}");
    wal.close()?;

    // Reopen: offsets continue, and the group resumes where it committed.
    let wal = Wal::open_with(&dir, config)?;
    let mut reader = wal.reader("orders", "billing")?;
    println!(
        "after reopen: next offset {}, group resumes at {}, {} data files",
        wal.topic_info("orders")?.next_offset,
        reader.position(),
        wal.disk_usage().files
    );
    assert!(reader.next()?.is_none());
    Ok(())
}

//! Sequential zero-copy reads: `Reader::next` over a pre-written topic (100 B to 1 MiB
//! records), with checksum verification (the default) and without, against baseline (b), a
//! plain memcpy of the same chunk size out of a pre-faulted page-cache mapping.
//!
//! Method: each record's value is borrowed and only its length summed (no copy); at the end
//! of the topic the reader seeks back to offset 0. The topic (512 MiB of values, larger than
//! the L3 cache) stays in the page cache, mapped by the writer that wrote it.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tidelog_benches::{
    MIB, PageCacheSource, RECORD_SIZES, ReadRig, is_bench_run, memcpy_chunks, read_records,
};

fn read(c: &mut Criterion) {
    // `cargo test --benches` only smoke-tests the code: keep the topic tiny there.
    let volume = if is_bench_run() { 512 * MIB } else { 2 * MIB };
    let source = PageCacheSource::new(volume).expect("page-cache source");
    for (size, label) in RECORD_SIZES {
        let mut group = c.benchmark_group(format!("read/{label}"));
        group.throughput(Throughput::Bytes(size as u64));
        let rig = ReadRig::new(size, volume as u64).expect("pre-write the topic");
        for (name, verify) in [("tidelog-verify", true), ("tidelog-skip-checksums", false)] {
            let mut reader = rig.reader(verify).expect("reader");
            group.bench_function(BenchmarkId::new(name, "1thr"), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    std::hint::black_box(read_records(&mut reader, iters).expect("read"));
                    start.elapsed()
                });
            });
        }
        let mut dst = vec![0u8; size];
        let mut at = 0;
        group.bench_function(BenchmarkId::new("memcpy-page-cache", "1thr"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::hint::black_box(memcpy_chunks(source.bytes(), &mut dst, iters, &mut at));
                start.elapsed()
            });
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    targets = read
}
criterion_main!(benches);

//! Append throughput: 100 B, 1 KiB, 64 KiB and 1 MiB records, 1 and 2 threads, 1 and 64
//! topics, against baseline (a), a plain memcpy of the same records into an mmap of fresh
//! sparse files of the same geometry. Plus the 100 B case with the background flush on
//! (every 200 ms) next to it off, to show the sync thread does not slow writers.
//!
//! Method: `iter_custom` times only the appends (threads start together at a barrier and each
//! appends its share); the log is replaced, untimed, every `RECYCLE_BYTES` (preferably between
//! calls, in `prepare`), so neither the page cache nor the disk fills. Throughput is elements (appends, all threads together)
//! for records up to 1 KiB and bytes of values above.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tidelog_benches::{AppendRig, KIB, MmapBaseline, RECORD_SIZES, config, payload};

fn throughput(size: usize) -> Throughput {
    if size <= KIB {
        Throughput::Elements(1)
    } else {
        Throughput::Bytes(size as u64)
    }
}

fn append(c: &mut Criterion) {
    for (size, label) in RECORD_SIZES {
        let value = payload(size);
        let mut group = c.benchmark_group(format!("append/{label}"));
        group.throughput(throughput(size));
        for threads in [1usize, 2] {
            for topics in [1usize, 64] {
                let mut rig = AppendRig::new(config(None), topics);
                let id = BenchmarkId::new("tidelog", format!("{threads}thr-{topics}topics"));
                group.bench_function(id, |b| {
                    rig.prepare().expect("open a log");
                    b.iter_custom(|iters| rig.append(threads, iters, &value).expect("append"));
                });
                rig.finish().expect("close the log");
            }
        }
        let mut baseline = MmapBaseline::new();
        group.bench_function(BenchmarkId::new("memcpy-mmap", "1thr"), |b| {
            baseline.prepare().expect("baseline file");
            b.iter_custom(|iters| baseline.append(iters, &value).expect("memcpy"));
        });
        baseline.finish();
        group.finish();
    }
}

fn append_with_flusher(c: &mut Criterion) {
    let value = payload(100);
    let mut group = c.benchmark_group("append-sync/100B");
    group.throughput(Throughput::Elements(1));
    for (label, interval) in [("sync-off", None), ("sync-200ms", Some(200))] {
        let mut rig = AppendRig::new(config(interval), 1);
        group.bench_function(BenchmarkId::new("tidelog", label), |b| {
            rig.prepare().expect("open a log");
            b.iter_custom(|iters| rig.append(1, iters, &value).expect("append"));
        });
        rig.finish().expect("close the log");
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short runs: every case writes gigabytes, and replacing a log flushes it to disk.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    targets = append, append_with_flusher
}
criterion_main!(benches);

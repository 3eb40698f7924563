//! Goal: each durability mode syncs exactly when it promises. `Always`: an append returns
//! only after an msync that covers it; a lone appender pays one msync per append; concurrent
//! appenders share msyncs (group commit). `Never`: no msync until `flush`. Per-writer
//! overrides and `append_async` handles follow the same rules, and `close` completes the
//! handles still waiting.
//!
//! Method: syncs are counted, not timed: every Wal here does its I/O through one
//! `FaultStorage` with nothing armed, whose `calls` counts each msync; the tests of this file
//! run one at a time (`serial`) so the count is theirs alone. An append that returns with the
//! count unchanged since it started was acknowledged before any msync. One test cross-checks
//! `Never` with an armed fault: an msync fault armed during appends is never hit, and the
//! flush hits it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::common::{payload, read_all, small, tempdir};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{Append, Config, Durability, Error, Wal, Writer};

const TOPIC: &str = "modes";
const VALUE: usize = 200;
/// A sync interval no test outlives: the periodic pass never runs unless a test wants it.
const QUIET_MS: u64 = 60_000;
/// Bound for waits that succeed within milliseconds when the engine is right.
const PATIENCE: Duration = Duration::from_secs(10);

/// Every Wal of this file does its I/O through this layer, which counts each call per point
/// (nothing is armed on it, so every call is a real one).
static COUNTING: LazyLock<FaultStorage> = LazyLock::new(FaultStorage::new);
/// Held by every test, so no other test's Wal adds to the count meanwhile.
static SERIAL: Mutex<()> = Mutex::new(());

/// msync calls made so far by the Wals of this file.
fn msyncs() -> u64 {
    COUNTING.calls(points::SYNC_MAP)
}

fn serial() -> MutexGuard<'static, ()> {
    // A test that failed while holding the lock leaves nothing the next one depends on.
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn value(salt: u64, i: u64) -> Vec<u8> {
    payload(salt * 1_000_003 + i, VALUE)
}

fn open(dir: &std::path::Path, cfg: Config) -> Wal {
    Wal::open_with_storage(dir, cfg, Arc::new(COUNTING.clone())).expect("open the Wal")
}

/// Reads `topic` and checks it holds exactly `count` records, `value(salt, offset)` each.
fn check_topic(wal: &Wal, topic: &str, salt: u64, count: u64, ctx: &str) {
    let got = read_all(wal, topic);
    assert_eq!(got.len() as u64, count, "{ctx}: record count of {topic}");
    for (i, (offset, _, v)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "{ctx}: offsets of {topic} must be dense");
        assert!(
            *v == value(salt, *offset),
            "{ctx}: {topic}@{offset} differs"
        );
    }
}

/// Appends through `w` and checks that an msync completed between the call and its return.
fn append_synced(w: &Writer, v: &[u8], expect_offset: u64, ctx: &str) {
    let before = msyncs();
    assert_eq!(w.append(v).expect("append"), expect_offset, "{ctx}");
    assert!(
        msyncs() > before,
        "{ctx}: append {expect_offset} was acknowledged before any msync covered it"
    );
}

/// Polls `done` until it holds, failing after `PATIENCE`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn always_lone_appender_pays_one_msync_per_append() {
    let _serial = serial();
    const N: u64 = 40;
    let dir = tempdir();
    // The longest group wait: were a lone appender to wait it out, this test would take
    // N seconds instead of N msyncs.
    let cfg = small()
        .durability(Durability::Always)
        .sync_interval_ms(QUIET_MS)
        .group_wait_us(1_000_000);
    let wal = open(dir.path(), cfg.clone());
    let w = wal.writer(TOPIC).expect("writer");
    assert_eq!(w.durability(), Durability::Always);
    let start = msyncs();
    for i in 0..N {
        append_synced(&w, &value(1, i), i, "lone appender");
    }
    let used = msyncs() - start;
    eprintln!("{N} lone Always appends took {used} msyncs");
    // One msync per append: the record, with the progress slot's claim and a commit copy
    // of the record in the same msync (so what is on disk claims every acknowledged
    // record); nothing else syncs (no periodic pass, one extent). The first append takes
    // two: its extent's identity and record, then the claim.
    assert!(
        (N..=N + 2).contains(&used),
        "{N} appends took {used} msyncs, expected one each"
    );
    check_topic(&wal, TOPIC, 1, N, "before close");
    wal.close().expect("close");
    let wal = open(dir.path(), cfg);
    check_topic(&wal, TOPIC, 1, N, "after reopen");
}

#[test]
fn always_concurrent_appenders_share_msyncs() {
    let _serial = serial();
    const THREADS: u64 = 16;
    const PER_THREAD: u64 = 50;
    const TOTAL: u64 = THREADS * PER_THREAD;
    let dir = tempdir();
    let cfg = small()
        .durability(Durability::Always)
        .sync_interval_ms(QUIET_MS);
    let wal = open(dir.path(), cfg.clone());
    let w = wal.writer(TOPIC).expect("writer");
    let start = msyncs();
    // Each thread: the offsets it got, in order, for record `i` of its own stream.
    let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let w = w.clone();
                s.spawn(move || {
                    let mut offsets = Vec::with_capacity(PER_THREAD as usize);
                    for i in 0..PER_THREAD {
                        let before = msyncs();
                        let off = w.append(&value(100 + t, i)).expect("append");
                        assert!(
                            msyncs() > before,
                            "thread {t}: append {i} acknowledged before any msync"
                        );
                        offsets.push(off);
                    }
                    offsets
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|h| h.join().expect("appender thread"))
            .collect()
    });
    let used = msyncs() - start;
    eprintln!("{TOTAL} concurrent Always appends took {used} msyncs");
    // Measured: one msync per 6 to 13 appends. Half is far from both that and from
    // no grouping at all.
    assert!(
        used <= TOTAL / 2,
        "no group commit: {TOTAL} appends took {used} msyncs"
    );
    // Offsets are dense and each names the record its appender wrote.
    let mut owner = vec![None; TOTAL as usize];
    for (t, offsets) in per_thread.iter().enumerate() {
        assert!(
            offsets.windows(2).all(|p| p[0] < p[1]),
            "thread {t}: offsets must grow"
        );
        for (i, &off) in offsets.iter().enumerate() {
            let slot = owner
                .get_mut(off as usize)
                .expect("offset within the total");
            assert!(slot.is_none(), "offset {off} handed out twice");
            *slot = Some((t as u64, i as u64));
        }
    }
    let check = |wal: &Wal, ctx: &str| {
        let got = read_all(wal, TOPIC);
        assert_eq!(got.len() as u64, TOTAL, "{ctx}");
        for (offset, _, v) in got {
            let (t, i) = owner[offset as usize].expect("every offset has an owner");
            assert!(
                v == value(100 + t, i),
                "{ctx}: record {offset} is not thread {t}'s {i}"
            );
        }
    };
    check(&wal, "before close");
    wal.close().expect("close");
    check(&open(dir.path(), cfg), "after reopen");
}

#[test]
fn never_syncs_only_on_flush() {
    let _serial = serial();
    let dir = tempdir();
    // A short interval: a periodic pass that wrongly ran in `Never` mode would show at once.
    let cfg = small().sync_interval_ms(5);
    assert_eq!(cfg.durability, Durability::Never);
    let wal = open(dir.path(), cfg.clone());
    let w = wal.writer(TOPIC).expect("writer");
    let start = msyncs();
    for i in 0..100 {
        assert_eq!(w.append(&value(2, i)).expect("append"), i);
    }
    let h = w.append_async(&value(2, 100)).expect("append_async");
    // Give a wrong periodic pass many intervals to show up.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(msyncs(), start, "Never mode synced without a flush");
    assert!(!h.is_durable());
    assert!(
        !h.wait_timeout(Duration::from_millis(20))
            .expect("nothing failed")
    );
    wal.flush().expect("flush");
    assert!(msyncs() > start, "flush did not msync");
    assert!(h.is_durable(), "flush must complete the handle");
    h.wait().expect("durable after flush");
    // Nothing new: a second flush has nothing to sync.
    let after = msyncs();
    w.flush().expect("writer flush");
    assert_eq!(msyncs(), after, "a flush with nothing new synced");
    check_topic(&wal, TOPIC, 2, 101, "before close");
    wal.close().expect("close");
    check_topic(&open(dir.path(), cfg), TOPIC, 2, 101, "after reopen");
}

#[test]
fn never_appends_never_reach_msync() {
    let _serial = serial();
    let dir = tempdir();
    let fs = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), small(), Arc::new(fs.clone())).expect("open");
    // Every msync from now on fails: the appends must not notice, the flush must.
    fs.arm(points::SYNC_MAP, Fault::Always(libc::EIO));
    for i in 0..50 {
        assert_eq!(wal.append(TOPIC, &value(3, i)).expect("append"), i);
    }
    let h = wal
        .append_async(TOPIC, &value(3, 50))
        .expect("append_async");
    assert_eq!(h.offset(), 50);
    assert_eq!(fs.hits(points::SYNC_MAP), 0, "a Never append called msync");
    let err = wal.flush().expect_err("flush msyncs and hits the fault");
    assert!(
        matches!(err, Error::Io { op: "msync", .. }),
        "flush: expected an msync error, got {err}"
    );
    assert_eq!(err.errno(), Some(libc::EIO), "{err}");
    assert!(fs.hits(points::SYNC_MAP) >= 1);
    let err = h.wait().expect_err("the failed flush covered the handle");
    assert_eq!(err.errno(), Some(libc::EIO), "{err}");
}

#[test]
fn writer_overrides_in_a_never_wal() {
    let _serial = serial();
    let dir = tempdir();
    let cfg = small().sync_interval_ms(10);
    let wal = open(dir.path(), cfg.clone());
    let plain = wal.writer("plain").expect("writer");
    assert_eq!(plain.durability(), Durability::Never);
    let start = msyncs();
    for i in 0..20 {
        plain.append(&value(4, i)).expect("append");
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(msyncs(), start, "a Never writer synced");

    // An Always writer syncs every append, though the Wal default is Never.
    let always = wal
        .writer("always")
        .expect("writer")
        .with_durability(Durability::Always);
    assert_eq!(always.durability(), Durability::Always);
    let start = msyncs();
    for i in 0..20 {
        append_synced(&always, &value(5, i), i, "Always override");
    }
    // One per append (the record with its claim and commit copy); the first group also
    // syncs the plain writer's records, in another extent of the same file, which are too
    // many for a copy: that group claims them after its msync, in a second one. The first
    // append into its extent syncs the identity and the record before the claim (two), as
    // nothing goes into the header page before the identity is durable.
    let used = msyncs() - start;
    assert!(
        (20..=24).contains(&used),
        "20 Always appends took {used} msyncs"
    );

    // An Interval writer turns the periodic pass on: its records become durable with no
    // flush from anyone.
    let interval = wal
        .writer("interval")
        .expect("writer")
        .with_durability(Durability::Interval);
    let before = msyncs();
    let h = interval.append_async(&value(6, 0)).expect("append_async");
    assert_eq!(h.offset(), 0);
    assert!(
        h.wait_timeout(PATIENCE).expect("no failure"),
        "the periodic pass never completed the Interval writer's append"
    );
    assert!(msyncs() > before, "the handle completed without an msync");
    for i in 1..10 {
        interval.append(&value(6, i)).expect("append");
    }
    let before = msyncs();
    wait_until("a periodic pass syncs the later Interval appends", || {
        msyncs() > before
    });

    check_topic(&wal, "plain", 4, 20, "before close");
    check_topic(&wal, "always", 5, 20, "before close");
    check_topic(&wal, "interval", 6, 10, "before close");
    wal.close().expect("close");
    let wal = open(dir.path(), cfg);
    check_topic(&wal, "plain", 4, 20, "after reopen");
    check_topic(&wal, "always", 5, 20, "after reopen");
    check_topic(&wal, "interval", 6, 10, "after reopen");
}

#[test]
fn append_async_in_interval_mode_waits_for_a_flush() {
    let _serial = serial();
    let dir = tempdir();
    let cfg = small()
        .durability(Durability::Interval)
        .sync_interval_ms(QUIET_MS);
    let wal = open(dir.path(), cfg);
    let w = wal.writer(TOPIC).expect("writer");
    let start = msyncs();
    let handles: Vec<_> = (0..10)
        .map(|i| {
            let h = w.append_async(&value(7, i)).expect("append_async");
            assert_eq!(h.offset(), i);
            assert_eq!(h.offsets(), i..i + 1);
            h
        })
        .collect();
    let batch = [value(7, 10), value(7, 11), value(7, 12)];
    let records: Vec<Append<'_>> = batch.iter().map(|v| Append::value(v)).collect();
    let hb = w.append_batch_async(&records).expect("batch async");
    assert_eq!(hb.offset(), 10);
    assert_eq!(hb.offsets(), 10..13);
    // They return at once, readable, but not durable: nothing synced yet.
    check_topic(&wal, TOPIC, 7, 13, "before flush");
    assert_eq!(msyncs(), start, "append_async synced in Interval mode");
    for h in handles.iter().chain([&hb]) {
        assert!(!h.is_durable(), "durable before any sync: {h:?}");
        assert!(
            !h.wait_timeout(Duration::from_millis(10))
                .expect("nothing failed"),
            "wait_timeout claimed durability before any sync"
        );
    }
    wal.flush().expect("flush");
    assert!(msyncs() > start);
    for h in handles.iter().chain([&hb]) {
        assert!(h.is_durable(), "flush did not complete {h:?}");
        h.wait().expect("durable");
        assert!(h.wait_timeout(Duration::ZERO).expect("durable"));
    }
}

#[test]
fn append_async_in_always_mode_syncs_at_once() {
    let _serial = serial();
    let dir = tempdir();
    let cfg = small()
        .durability(Durability::Always)
        .sync_interval_ms(QUIET_MS);
    let wal = open(dir.path(), cfg);
    for i in 0..20 {
        let before = msyncs();
        // No flush anywhere: the sync thread must complete the handle by itself.
        let h = wal.append_async(TOPIC, &value(8, i)).expect("append_async");
        assert_eq!(h.offset(), i);
        h.wait().expect("durable");
        assert!(h.is_durable());
        assert!(msyncs() > before, "handle {i} completed without an msync");
    }
    check_topic(&wal, TOPIC, 8, 20, "after waits");
}

#[test]
fn close_completes_outstanding_handles() {
    let _serial = serial();
    let dir = tempdir();
    let cfg = small();
    let wal = open(dir.path(), cfg.clone());
    let w = wal.writer(TOPIC).expect("writer");
    let handles: Vec<_> = (0..5)
        .map(|i| w.append_async(&value(9, i)).expect("append_async"))
        .collect();
    assert!(handles.iter().all(|h| !h.is_durable()));
    let last = handles[4].clone();
    // A waiter blocked in `wait` when close runs is woken by close's final flush.
    let waiter = std::thread::spawn(move || last.wait());
    let before = msyncs();
    wal.close().expect("close");
    assert!(msyncs() > before, "close did not sync");
    waiter
        .join()
        .expect("waiter thread")
        .expect("close's flush completes the waiting handle");
    for h in &handles {
        assert!(h.is_durable(), "close left {h:?} incomplete");
        h.wait().expect("durable after close");
    }
    drop(w);
    check_topic(&open(dir.path(), cfg), TOPIC, 9, 5, "after reopen");
}

#[test]
fn close_during_concurrent_always_appends() {
    let _serial = serial();
    const THREADS: u64 = 6;
    const MAX_PER_THREAD: u64 = 100_000;
    let dir = tempdir();
    let cfg = small()
        .durability(Durability::Always)
        .sync_interval_ms(QUIET_MS);
    let wal = open(dir.path(), cfg.clone());
    let w = wal.writer(TOPIC).expect("writer");
    let acked = AtomicU64::new(0);
    // Each thread: `(offset, seed)` of every append that succeeded.
    let per_thread: Vec<Vec<(u64, u64)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (w, acked) = (w.clone(), &acked);
                s.spawn(move || {
                    let mut ok = Vec::new();
                    let mut handles = Vec::new();
                    for i in 0..MAX_PER_THREAD {
                        let seed = 1_000 + t * MAX_PER_THREAD + i;
                        let v = payload(seed, VALUE);
                        // Odd threads leave handles outstanding, waiting only at the end.
                        let result = if t % 2 == 0 {
                            w.append(&v)
                        } else {
                            w.append_async(&v).map(|h| {
                                let offset = h.offset();
                                handles.push(h);
                                offset
                            })
                        };
                        match result {
                            Ok(offset) => {
                                ok.push((offset, seed));
                                acked.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(Error::Closed) => break,
                            Err(e) => panic!("thread {t}: append {i} failed: {e}"),
                        }
                    }
                    // Every handle obtained before close got a ticket close's final pass
                    // covers.
                    for h in handles {
                        h.wait().expect("close's flush completes every handle");
                    }
                    ok
                })
            })
            .collect();
        wait_until("appends before close", || {
            acked.load(Ordering::SeqCst) >= 200
        });
        wal.close().expect("close");
        workers
            .into_iter()
            .map(|h| h.join().expect("appender thread"))
            .collect()
    });
    let mut seeds = std::collections::BTreeMap::new();
    for (offset, seed) in per_thread.into_iter().flatten() {
        assert!(
            seeds.insert(offset, seed).is_none(),
            "offset {offset} handed out twice"
        );
    }
    // Exactly the acknowledged records, dense, intact: no append failed after reserving.
    let wal = open(dir.path(), cfg);
    let got = read_all(&wal, TOPIC);
    assert_eq!(
        got.len(),
        seeds.len(),
        "records after reopen vs acknowledged"
    );
    for (i, (offset, _, v)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "offsets must be dense");
        let seed = seeds.get(offset).expect("every record was acknowledged");
        assert!(*v == payload(*seed, VALUE), "record {offset} differs");
    }
}

//! Goal: recovery on several threads, with read-ahead hints, finds exactly what recovery
//! one topic at a time without hints finds (issue 22): the same report, records and repairs
//! on a directory of many topics with torn and damaged extents, and the same error where one
//! topic's acknowledged records are damaged.
//! Method: one directory of 40 topics (a sealed and an unsealed extent each) is damaged, then
//! copied; one copy is opened with `recovery_threads(1)` through a storage that refuses
//! every hint, the other with 8 threads through the real one.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use crate::common::{self, copy_dir, data_files, extents, flip_byte, frames, small, tempdir};
use tidelog::format::{self, Progress, ProgressState};
use tidelog::io::{Fault, FaultStorage, StdStorage, Storage, points};
use tidelog::{Config, ReaderOptions, StartPosition, Wal};

const TOPICS: u32 = 40;
/// Records per topic: 90 of about 1 KiB fill one 64 KiB block and part of a second.
const RECORDS: u64 = 90;

fn topic(t: u32) -> String {
    format!("t{t:02}")
}

/// A directory of `TOPICS` topics, appended round-robin (their extents interleave in the
/// files) and closed cleanly; without its shared state file (no writer of this boot: a
/// read-only handle reads what is durable).
fn build(dir: &Path) {
    let wal = Wal::open_with(dir, small()).unwrap();
    for i in 0..RECORDS {
        for t in 0..TOPICS {
            let len = 900 + ((i * 7 + u64::from(t) * 13) % 200) as usize;
            wal.append(&topic(t), &common::payload(i ^ (u64::from(t) << 32), len))
                .unwrap();
        }
    }
    wal.close().unwrap();
    std::fs::remove_file(dir.join("tidelog.state")).unwrap();
}

/// The last extent of topic `name`.
fn last_extent(dir: &Path, name: &str) -> common::ExtentLoc {
    extents(dir)
        .into_iter()
        .filter(|e| e.id.topic == name)
        .max_by_key(|e| e.id.first_offset)
        .unwrap()
}

/// The frames of extent `e`.
fn frames_of(dir: &Path, e: &common::ExtentLoc) -> Vec<common::FrameLoc> {
    frames(dir)
        .into_iter()
        .filter(|f| f.file == e.file && f.pos > e.start && f.pos < e.start + e.len)
        .collect()
}

/// Rewrites the progress slot of `e` as `Open` up to the frame holding `keep` records: the
/// records after it were written after the last sync.
fn claim_less(dir: &Path, e: &common::ExtentLoc, keep: u64) {
    let first_after = &frames_of(dir, e)[keep as usize];
    let p = e.progress.unwrap();
    let progress = Progress {
        state: ProgressState::Open,
        durable_end: first_after.pos - e.start,
        record_count: keep,
        ..p
    };
    common::patch(
        &e.file,
        e.start + format::PG_SLOT_AT as u64,
        &progress.encode(),
    );
}

/// Damage a recovery repairs: a torn tail past a lowered claim (`t05`), a damaged progress
/// slot (`t17`), records past a lowered claim (`t30`).
fn damage_repairable(dir: &Path) {
    let e = last_extent(dir, &topic(5));
    claim_less(dir, &e, 3);
    let torn = frames_of(dir, &e).pop().unwrap();
    flip_byte(&torn.file, torn.value_pos() + 5);
    let e = last_extent(dir, &topic(17));
    flip_byte(&e.file, e.start + format::PG_SLOT_AT as u64 + 12);
    let e = last_extent(dir, &topic(30));
    claim_less(dir, &e, 2);
}

/// Damage below the durable point of `t12` and of `t25`: corruption, reported for `t12`
/// (topics are recovered in name order).
fn damage_acknowledged(dir: &Path) {
    for t in [12, 25] {
        let e = last_extent(dir, &topic(t));
        let f = &frames_of(dir, &e)[0];
        flip_byte(&f.file, f.value_pos() + 1);
    }
}

/// The storage and config of the walk one by one (every hint refused) and of the threads.
fn one_by_one() -> (Arc<dyn Storage>, Config, FaultStorage) {
    let faults = FaultStorage::new();
    faults.arm(points::PREFETCH, Fault::Always(libc::EOPNOTSUPP));
    let storage: Arc<dyn Storage> = Arc::new(faults.clone());
    (storage, small().recovery_threads(1), faults)
}

fn threaded() -> (Arc<dyn Storage>, Config) {
    (Arc::new(StdStorage), small().recovery_threads(8))
}

type Records = Vec<(u64, Vec<u8>)>;

/// Every topic's records, in name order, or where its reading failed (the directory's path
/// left out).
fn contents(wal: &Wal) -> Vec<Result<Records, String>> {
    let dir = wal.path().to_string_lossy().into_owned();
    let err = |e: tidelog::Error| e.to_string().replace(&dir, "DIR");
    (0..TOPICS)
        .map(|t| {
            let mut reader = wal
                .reader_with(
                    &topic(t),
                    ReaderOptions::default().start(StartPosition::Earliest),
                )
                .map_err(err)?;
            let mut out = Vec::new();
            while let Some(r) = reader.next().map_err(err)? {
                out.push((r.offset, r.value.to_vec()));
            }
            Ok(out)
        })
        .collect()
}

fn data_bytes(dir: &Path) -> Vec<Vec<u8>> {
    data_files(dir)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

#[test]
fn threads_and_hints_recover_what_one_by_one_recovers() {
    let root = tempdir();
    let src = root.path().join("src");
    build(&src);
    damage_repairable(&src);
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    copy_dir(&src, &a);
    copy_dir(&src, &b);
    let (seq_storage, seq_config, faults) = one_by_one();
    let (par_storage, par_config) = threaded();

    // Read-only first: nothing written, the same view.
    let ro_a =
        Wal::open_read_only_with_storage(&a, seq_config.clone(), Arc::clone(&seq_storage)).unwrap();
    let ro_b =
        Wal::open_read_only_with_storage(&b, par_config.clone(), Arc::clone(&par_storage)).unwrap();
    assert_eq!(ro_a.recovery_report(), ro_b.recovery_report());
    assert_eq!(contents(&ro_a), contents(&ro_b));
    drop((ro_a, ro_b));

    let wal_a = Wal::open_with_storage(&a, seq_config, seq_storage).unwrap();
    let wal_b = Wal::open_with_storage(&b, par_config, par_storage).unwrap();
    let report = wal_a.recovery_report();
    assert_eq!(report, wal_b.recovery_report());
    // The damage was found: the scenario means something.
    assert_eq!(report.torn_tails, 1, "{report:?}");
    assert_eq!(report.damaged_progress_slots, 1, "{report:?}");
    assert_eq!(report.extents, 2 * u64::from(TOPICS), "{report:?}");
    assert!(faults.hits(points::PREFETCH) > 0, "the hints were refused");
    let got = contents(&wal_a);
    assert_eq!(got, contents(&wal_b));
    let count = |t: usize| got[t].as_ref().map(Vec::len);
    assert_eq!(
        count(5),
        Ok(RECORDS as usize - 1),
        "t05 lost its torn record"
    );
    assert_eq!(count(30), Ok(RECORDS as usize), "t30 kept its records");
    // Both repaired the files alike.
    assert_eq!(data_bytes(&a), data_bytes(&b));
    wal_a.close().unwrap();
    wal_b.close().unwrap();
    assert_eq!(data_bytes(&a), data_bytes(&b));
}

/// The error of an open that must fail.
fn failed(opened: tidelog::Result<Wal>) -> tidelog::Error {
    match opened {
        Ok(_) => panic!("t12 is damaged, yet the open succeeded"),
        Err(e) => e,
    }
}

#[test]
fn threads_and_hints_fail_as_one_by_one_fails() {
    let root = tempdir();
    let src = root.path().join("src");
    build(&src);
    damage_acknowledged(&src);
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    copy_dir(&src, &a);
    copy_dir(&src, &b);
    let (seq_storage, seq_config, _faults) = one_by_one();
    let (par_storage, par_config) = threaded();

    // The copies' paths differ: the rest of each error is the same.
    let same = |e_a: &tidelog::Error, e_b: &tidelog::Error| {
        assert!(
            matches!(e_a, tidelog::Error::Corruption { topic, .. } if topic == "t12"),
            "{e_a}"
        );
        let a_str = a.to_string_lossy().into_owned();
        let b_str = b.to_string_lossy().into_owned();
        assert_eq!(
            e_a.to_string().replace(&a_str, "DIR"),
            e_b.to_string().replace(&b_str, "DIR")
        );
    };
    let ro_a = failed(Wal::open_read_only_with_storage(
        &a,
        seq_config.clone(),
        Arc::clone(&seq_storage),
    ));
    let ro_b = failed(Wal::open_read_only_with_storage(
        &b,
        par_config.clone(),
        Arc::clone(&par_storage),
    ));
    same(&ro_a, &ro_b);
    let e_a = failed(Wal::open_with_storage(&a, seq_config, seq_storage));
    let e_b = failed(Wal::open_with_storage(&b, par_config, par_storage));
    same(&e_a, &e_b);
}

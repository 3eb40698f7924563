//! Staged appends: parts written without the lock, published exactly once by a commit,
//! discarded by an abort, resumed after a failure part way.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{geometry, read_values, tempdir};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::stage::{self, StagedWriter};
use tidelog::{Append, Config, Error, Wal};

fn config() -> Config {
    geometry(8, 64 * 1024)
}

fn value(part: &str, topic: &str, i: u64) -> Vec<u8> {
    format!("{part}/{topic}/{i:05}").into_bytes()
}

/// Stages `n` records for each of `topics` into `part` (batches of up to 7).
fn stage_part(dir: &std::path::Path, job: &str, part: &str, topics: &[&str], n: u64) -> u64 {
    let mut w = StagedWriter::create(dir, job, part).expect("create part");
    for topic in topics {
        let values: Vec<Vec<u8>> = (0..n).map(|i| value(part, topic, i)).collect();
        for chunk in values.chunks(7) {
            let records: Vec<Append<'_>> = chunk
                .iter()
                .enumerate()
                .map(|(k, v)| Append {
                    key: (k % 2 == 0).then_some(&b"k"[..]),
                    value: v,
                    timestamp_us: Some(1_000 + k as u64),
                    headers: None,
                })
                .collect();
            w.append(topic, &records).expect("stage");
        }
    }
    let done = w.finish().expect("finish");
    assert_eq!(done.records, n * topics.len() as u64);
    done.records
}

fn values_of(wal: &Wal, topic: &str, range: Range<u64>) -> Vec<Vec<u8>> {
    read_values(wal, topic)
        .into_iter()
        .filter(|(o, _)| range.contains(o))
        .map(|(_, v)| v)
        .collect()
}

fn expected(parts: &[&str], topic: &str, n: u64) -> Vec<Vec<u8>> {
    parts
        .iter()
        .flat_map(|p| (0..n).map(move |i| value(p, topic, i)))
        .collect()
}

#[test]
fn a_commit_publishes_the_named_parts_once_and_in_order() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    wal.append("a", b"before").expect("append");
    stage_part(dir.path(), "job-1", "p0-a0", &["a", "b"], 20);
    stage_part(dir.path(), "job-1", "p1-a0", &["a"], 30);
    // A failed or speculative attempt the commit does not name.
    stage_part(dir.path(), "job-1", "p1-a1", &["a"], 30);
    let ranges = wal
        .commit_staged("job-1", &["p0-a0", "p1-a0"])
        .expect("commit");
    assert_eq!(
        ranges,
        vec![("a".to_owned(), 1..51), ("b".to_owned(), 0..20)]
    );
    let mut a = expected(&["p0-a0"], "a", 20);
    a.extend(expected(&["p1-a0"], "a", 30));
    assert_eq!(values_of(&wal, "a", 1..51), a);
    assert_eq!(values_of(&wal, "b", 0..20), expected(&["p0-a0"], "b", 20));
    assert_eq!(read_values(&wal, "a").len(), 51);
    assert!(!dir.path().join(stage::STAGING_DIR).join("job-1").exists());
    match wal.commit_staged("job-1", &["p0-a0"]) {
        Err(Error::InvalidArgument { name: "job", .. }) => {}
        r => panic!("expected InvalidArgument(job), got {r:?}"),
    }
    assert_eq!(read_values(&wal, "a").len(), 51);
}

#[test]
fn an_abort_leaves_nothing() {
    let dir = tempdir();
    stage_part(dir.path(), "job-2", "p0", &["a"], 10);
    stage::abort(dir.path(), "job-2").expect("abort");
    assert!(!dir.path().join(stage::STAGING_DIR).join("job-2").exists());
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    assert!(wal.topics().is_empty());
    match wal.commit_staged("job-2", &["p0"]) {
        Err(Error::InvalidArgument { .. }) => {}
        r => panic!("expected InvalidArgument, got {r:?}"),
    }
}

#[test]
fn jobs_nobody_committed_go_once_idle_past_the_ttl() {
    let dir = tempdir();
    stage_part(dir.path(), "abandoned", "p0", &["a"], 5);
    stage_part(dir.path(), "committed", "p0", &["a"], 5);
    stage::commit(dir.path(), "committed", &["p0"]).expect("commit");
    let staging = dir.path().join(stage::STAGING_DIR);

    // The default (a day) keeps a job staged moments ago.
    Wal::open_with(dir.path(), config())
        .expect("open")
        .close()
        .expect("close");
    assert!(staging.join("abandoned").is_dir());

    // Idle past the TTL: the uncommitted job goes; a committed one is published, not lost;
    // with no TTL nothing goes.
    stage_part(dir.path(), "kept", "p0", &["b"], 5);
    let wal = Wal::open_with(dir.path(), config().staged_ttl_ms(None)).expect("open");
    wal.close().expect("close");
    assert!(staging.join("kept").is_dir());
    let wal = Wal::open_with(dir.path(), config().staged_ttl_ms(Some(0))).expect("open");
    assert!(!staging.join("abandoned").exists());
    assert!(!staging.join("kept").exists());
    assert_eq!(
        read_values(&wal, "a").len(),
        5,
        "the committed job is published"
    );
    assert!(wal.topics().iter().all(|t| t != "b"));
}

#[test]
fn bad_names_and_unknown_parts_are_refused() {
    let dir = tempdir();
    assert!(matches!(
        StagedWriter::create(dir.path(), "../x", "p"),
        Err(Error::InvalidTopic { .. })
    ));
    assert!(matches!(
        StagedWriter::create(dir.path(), "job", "a/b"),
        Err(Error::InvalidTopic { .. })
    ));
    stage_part(dir.path(), "job", "p0", &["a"], 3);
    assert!(matches!(
        StagedWriter::create(dir.path(), "job", "p0"),
        Err(Error::InvalidArgument { name: "part", .. })
    ));
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    match wal.commit_staged("job", &["p0", "p9"]) {
        Err(Error::InvalidArgument { name: "parts", .. }) => {}
        r => panic!("expected InvalidArgument(parts), got {r:?}"),
    }
    assert!(wal.topics().is_empty());
}

#[test]
fn a_damaged_part_is_corruption_and_publishes_nothing() {
    let dir = tempdir();
    stage_part(dir.path(), "job", "p0", &["a"], 10);
    let path = dir
        .path()
        .join(stage::STAGING_DIR)
        .join("job")
        .join(format!("p0{}", stage::PART_SUFFIX));
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[40] ^= 0x55;
    std::fs::write(&path, &bytes).expect("write");
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    match wal.commit_staged("job", &["p0"]) {
        Err(Error::Corruption { .. }) => {}
        r => panic!("expected Corruption, got {r:?}"),
    }
    assert!(wal.topics().is_empty());
}

#[test]
fn a_failed_publish_resumes_at_the_next_open_without_duplicates() {
    let dir = tempdir();
    let faults = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), config(), Arc::new(faults.clone())).expect("open");
    for i in 0..5 {
        wal.append("a", &value("pre", "a", i)).expect("append");
    }
    wal.flush().expect("flush");
    stage_part(dir.path(), "job", "p0", &["a", "b"], 40);
    // The records go in, but the flush that would make them durable fails.
    faults.arm(points::SYNC_MAP, Fault::Always(libc::EIO));
    assert!(wal.commit_staged("job", &["p0"]).is_err());
    drop(wal);
    faults.disarm_all();
    let wal = Wal::open_with(dir.path(), config()).expect("reopen resumes the job");
    let a = read_values(&wal, "a");
    assert_eq!(a.len(), 45, "every record exactly once");
    let want: Vec<Vec<u8>> = (0..5)
        .map(|i| value("pre", "a", i))
        .chain(expected(&["p0"], "a", 40))
        .collect();
    assert_eq!(a.into_iter().map(|(_, v)| v).collect::<Vec<_>>(), want);
    assert_eq!(values_of(&wal, "b", 0..40), expected(&["p0"], "b", 40));
    assert!(!dir.path().join(stage::STAGING_DIR).join("job").exists());
}

#[test]
fn appends_during_a_publish_stay_outside_the_jobs_range() {
    let dir = tempdir();
    let wal = Arc::new(Wal::open_with(dir.path(), config()).expect("open"));
    stage_part(dir.path(), "job", "p0", &["a"], 3000);
    let writer = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || {
            for i in 0..2000 {
                wal.append("a", &value("live", "a", i)).expect("append");
            }
        })
    };
    let ranges = wal.commit_staged("job", &["p0"]).expect("commit");
    writer.join().expect("writer");
    let (_, range) = &ranges[0];
    assert_eq!(range.end - range.start, 3000);
    assert_eq!(
        values_of(&wal, "a", range.clone()),
        expected(&["p0"], "a", 3000)
    );
    let live: Vec<Vec<u8>> = read_values(&wal, "a")
        .into_iter()
        .filter(|(o, _)| !range.contains(o))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        live,
        (0..2000).map(|i| value("live", "a", i)).collect::<Vec<_>>()
    );
}

#[test]
fn another_process_commit_is_published_by_the_directory_holder() {
    let dir = tempdir();
    let holder = Wal::open_with(dir.path(), config().sync_interval_ms(20)).expect("open");
    stage_part(dir.path(), "job", "p0", &["a"], 25);
    // The holder has the lock: the committer hands the job over and waits.
    tidelog::commit_staged(
        dir.path(),
        config(),
        "job",
        &["p0"],
        Duration::from_secs(20),
    )
    .expect("commit through the holder");
    assert_eq!(values_of(&holder, "a", 0..25), expected(&["p0"], "a", 25));
    drop(holder);
    // With nobody holding the directory, the committer publishes itself.
    stage_part(dir.path(), "job2", "p0", &["a"], 5);
    tidelog::commit_staged(
        dir.path(),
        config(),
        "job2",
        &["p0"],
        Duration::from_secs(1),
    )
    .expect("commit alone");
    let wal = Wal::open_with(dir.path(), config()).expect("open");
    assert_eq!(values_of(&wal, "a", 25..30), expected(&["p0"], "a", 5));
}

#[test]
fn a_publish_resumes_where_data_files_that_lost_records_end() {
    let dir = tempdir();
    let faults = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), config(), Arc::new(faults.clone())).expect("open");
    // Never made durable: a power loss takes them, and the job then starts lower.
    for i in 0..5 {
        wal.append("a", &value("pre", "a", i)).expect("append");
    }
    stage_part(dir.path(), "job", "p0", &["a"], 40);
    faults.arm(points::SYNC_MAP, Fault::Always(libc::EIO));
    assert!(wal.commit_staged("job", &["p0"]).is_err());
    drop(wal);
    faults.disarm_all();
    for f in std::fs::read_dir(dir.path()).expect("list") {
        let p = f.expect("entry").path();
        if p.extension().is_some_and(|x| x == "tdl") {
            std::fs::remove_file(p).expect("lose a data file");
        }
    }
    let wal = Wal::open_with(dir.path(), config()).expect("reopen resumes the job");
    assert_eq!(
        read_values(&wal, "a")
            .into_iter()
            .map(|(_, v)| v)
            .collect::<Vec<_>>(),
        expected(&["p0"], "a", 40)
    );
}

#[test]
fn a_sink_micro_batch_is_recorded_with_its_publish() {
    let dir = tempdir();
    assert_eq!(
        stage::sink_batch(dir.path(), "orders-sink").expect("ledger"),
        None
    );
    stage_part(dir.path(), "q-7", "p0", &["out"], 4);
    stage::commit_for_sink(dir.path(), "q-7", &["p0"], "orders-sink", 7).expect("commit");
    // Not published yet: the ledger moves only with the records.
    assert_eq!(
        stage::sink_batch(dir.path(), "orders-sink").expect("ledger"),
        None
    );
    let wal = Wal::open_with(dir.path(), config()).expect("open publishes");
    assert_eq!(
        stage::sink_batch(dir.path(), "orders-sink").expect("ledger"),
        Some(7)
    );
    assert_eq!(values_of(&wal, "out", 0..4), expected(&["p0"], "out", 4));
    drop(wal);
    // A batch the sink already published (a replay) adds nothing and goes.
    stage_part(dir.path(), "q-7-again", "p0", &["out"], 4);
    stage::commit_for_sink(dir.path(), "q-7-again", &["p0"], "orders-sink", 7).expect("commit");
    stage_part(dir.path(), "q-6", "p0", &["out"], 1);
    stage::commit_for_sink(dir.path(), "q-6", &["p0"], "orders-sink", 6).expect("commit");
    let wal = Wal::open_with(dir.path(), config()).expect("open publishes");
    assert_eq!(
        stage::sink_batch(dir.path(), "orders-sink").expect("ledger"),
        Some(7)
    );
    assert_eq!(read_values(&wal, "out").len(), 4);
    assert!(!dir.path().join(stage::STAGING_DIR).join("q-6").exists());
    assert!(
        !dir.path()
            .join(stage::STAGING_DIR)
            .join("q-7-again")
            .exists()
    );
    // Committing nothing discards what the job staged.
    stage_part(dir.path(), "empty", "p0", &["out"], 2);
    stage::commit(dir.path(), "empty", &[]).expect("empty commit");
    assert!(!dir.path().join(stage::STAGING_DIR).join("empty").exists());
    assert!(matches!(
        stage::sink_batch(dir.path(), "../x"),
        Err(Error::InvalidTopic { .. })
    ));
}

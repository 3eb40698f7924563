//! Staged bytes are untrusted input: checked when a job is committed and when it is
//! published. A job that cannot be published is set aside and reported, its files kept until
//! it is aborted, and it never blocks the directory: opens, flushes and other jobs go on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::common::{self, BLOCK, geometry, tempdir};
use tidelog::format;
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::stage::{self, StagedWriter};
use tidelog::{Append, Config, Error, RingBackend, RingConfig, Wal};

fn config() -> Config {
    geometry(8, BLOCK)
}

/// Adopts every segment, however small.
fn adopting() -> Config {
    config().staged_adopt_bytes_min(1)
}

/// The ring backend, whose records are at most 4 MiB, over extents that could hold more.
fn ring() -> Config {
    geometry(4, 8 << 20)
        .ring(RingBackend::default().ring(RingConfig::default().capacity_bytes(8 << 20)))
}

fn value(job: &str, part: &str, i: u64) -> Vec<u8> {
    format!("{job}/{part}/{i:05}").into_bytes()
}

/// Stages `n` small records of `topic` as part `part` of `job`.
fn stage_part(dir: &Path, job: &str, part: &str, topic: &str, n: u64) {
    let mut w = StagedWriter::create(dir, job, part).expect("create part");
    let values: Vec<Vec<u8>> = (0..n).map(|i| value(job, part, i)).collect();
    let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v)).collect();
    w.append(topic, &records).expect("stage");
    assert_eq!(w.finish().expect("finish").records, n);
}

/// Stages one record of `bytes` bytes of topic `a` as part `p0` of `job`.
fn stage_big(dir: &Path, job: &str, bytes: usize) {
    let mut w = StagedWriter::create(dir, job, "p0").expect("create part");
    w.append("a", &[Append::value(&vec![9u8; bytes])])
        .expect("stage");
    w.finish().expect("finish");
}

fn job_dir(dir: &Path, job: &str) -> PathBuf {
    dir.join(stage::STAGING_DIR).join(job)
}

/// Stages job `job` (20 records of topic `bad`), damages a record in its only segment and
/// commits it: the segment is too small to adopt, so its records would be copied.
fn stage_corrupt(dir: &Path, job: &str) {
    stage_part(dir, job, "p0", "bad", 20);
    // Damaged before the commit: a directory's holder may publish the job as soon as it is
    // committed, and must never see the segment half rewritten.
    let segment = job_dir(dir, job).join(stage::segment_name("p0", 0));
    common::flip_byte(
        &segment,
        format::FILE_HEADER_BYTES + format::BLOCK_HEADER_BYTES + 60,
    );
    stage::commit(dir, job, &["p0"]).expect("commit");
}

fn values(wal: &Wal, topic: &str) -> Vec<Vec<u8>> {
    common::read_all(wal, topic)
        .into_iter()
        .map(|(_, _, v)| v)
        .collect()
}

fn expected(job: &str, part: &str, n: u64) -> Vec<Vec<u8>> {
    (0..n).map(|i| value(job, part, i)).collect()
}

/// Why `job` was set aside, as `stage::jobs` lists it.
fn failure(dir: &Path, job: &str) -> Option<String> {
    stage::jobs(dir)
        .expect("jobs")
        .into_iter()
        .find(|j| j.job == job)
        .and_then(|j| j.failed)
}

/// `stage::wait_published` for a job set aside: the error that says why.
fn reported(dir: &Path, job: &str) -> String {
    match stage::wait_published(dir, job, Duration::from_secs(5)) {
        Err(Error::InvalidArgument {
            name: "job",
            reason,
        }) => reason,
        r => panic!("expected the job's failure, got {r:?}"),
    }
}

/// Every file of the job's directory and its bytes.
fn files_of(dir: &Path, job: &str) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(job_dir(dir, job))
        .expect("list job")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("read"))
        })
        .collect()
}

#[test]
fn a_part_named_twice_is_refused() {
    let dir = tempdir();
    let d = dir.path();
    stage_part(d, "job", "p0", "a", 10);
    stage_part(d, "big", "p0", "b", 3000);
    let wal = Wal::open_with(d, adopting()).expect("open");
    let twice = |r: tidelog::Result<()>| match r {
        Err(Error::InvalidArgument {
            name: "parts",
            reason,
        }) => {
            assert!(reason.contains("named twice"), "{reason}");
        }
        r => panic!("expected InvalidArgument(parts), got {r:?}"),
    };
    twice(wal.commit_staged("job", &["p0", "p0"]).map(drop));
    twice(stage::commit(d, "big", &["p0", "p0"]));
    twice(stage::commit_for_sink(d, "big", &["p0", "p0"], "s", 1));
    for job in ["job", "big"] {
        assert!(!job_dir(d, job).join(stage::COMMIT_FILE).exists(), "{job}");
    }
    drop(wal);
    twice(tidelog::commit_staged(
        d,
        adopting(),
        "big",
        &["p0", "p0"],
        Duration::from_secs(1),
    ));
    // A commit naming a large part twice, as an earlier build would write it: set aside at
    // the open, nothing of it published, and every later open works.
    std::fs::write(
        job_dir(d, "big").join(stage::COMMIT_FILE),
        "tidelog commit v1\np0\np0\n",
    )
    .expect("write commit");
    for _ in 0..2 {
        let wal = Wal::open_with(d, adopting()).expect("open with the bad commit");
        assert!(wal.topics().is_empty());
        wal.flush().expect("flush");
    }
    assert!(failure(d, "big").expect("set aside").contains("twice"));
    stage::abort(d, "big").expect("abort");
    assert!(!job_dir(d, "big").exists());
    let wal = Wal::open_with(d, adopting()).expect("open");
    let ranges = wal.commit_staged("job", &["p0"]).expect("commit once");
    assert_eq!(ranges, vec![("a".to_owned(), 0..10)]);
    assert_eq!(values(&wal, "a"), expected("job", "p0", 10));
}

#[test]
fn a_job_that_cannot_be_published_is_set_aside_and_reported() {
    // A record over the ring backend's limit: refused at a commit that knows the limit...
    let dir = tempdir();
    let d = dir.path();
    stage_big(d, "big", 5 << 20);
    stage_part(d, "good", "p0", "a", 7);
    match tidelog::commit_staged(d, ring(), "big", &["p0"], Duration::from_secs(5)) {
        Err(Error::LimitExceeded {
            limit: "max_record_bytes",
            ..
        }) => {}
        r => panic!("expected LimitExceeded, got {r:?}"),
    }
    assert!(!job_dir(d, "big").join(stage::COMMIT_FILE).exists());
    {
        let wal = Wal::open_with(d, ring()).expect("open");
        match wal.commit_staged("big", &["p0"]) {
            Err(Error::LimitExceeded { .. }) => {}
            r => panic!("expected LimitExceeded, got {r:?}"),
        }
    }
    assert!(!job_dir(d, "big").join(stage::COMMIT_FILE).exists());
    // ... and set aside at the publish of a commit that did not know it.
    stage::commit(d, "big", &["p0"]).expect("commit without the directory's limits");
    stage::commit(d, "good", &["p0"]).expect("commit");
    let wal = Wal::open_with(d, ring()).expect("open with a job that cannot be published");
    assert_eq!(
        values(&wal, "a"),
        expected("good", "p0", 7),
        "the other job"
    );
    wal.flush().expect("flush");
    wal.append("a", b"after").expect("append");
    wal.flush().expect("flush");
    let why = failure(d, "big").expect("listed as failed");
    assert!(why.contains("max_record_bytes"), "{why}");
    assert!(reported(d, "big").contains("max_record_bytes"));
    drop(wal);

    // A damaged record in a segment to copy.
    let dir = tempdir();
    let d = dir.path();
    stage_corrupt(d, "bad");
    stage_part(d, "good", "p0", "a", 5);
    stage::commit(d, "good", &["p0"]).expect("commit");
    let wal = Wal::open_with(d, config()).expect("open with a damaged job");
    assert_eq!(wal.topics(), vec!["a".to_owned()], "nothing of the bad job");
    assert_eq!(values(&wal, "a"), expected("good", "p0", 5));
    wal.flush().expect("flush");
    let why = failure(d, "bad").expect("listed as failed");
    assert!(why.to_lowercase().contains("corrupt"), "{why}");
    assert!(reported(d, "bad").contains(&why));
    // Committing it again says why too; it is not retried.
    match wal.commit_staged("bad", &["p0"]) {
        Err(Error::InvalidArgument { name: "job", .. }) => {}
        r => panic!("expected the job's failure, got {r:?}"),
    }
    assert_eq!(wal.topics(), vec!["a".to_owned()]);
}

#[test]
fn the_directory_opens_and_flushes_with_a_failed_job() {
    let dir = tempdir();
    let d = dir.path();
    let holder = Wal::open_with(d, config().sync_interval_ms(20)).expect("open");
    holder.append("a", b"first").expect("append");
    // Committed by other processes while the holder runs: its housekeeping publishes.
    stage_corrupt(d, "bad");
    stage_part(d, "good", "p0", "a", 6);
    stage::commit(d, "good", &["p0"]).expect("commit");
    stage::wait_published(d, "good", Duration::from_secs(20)).expect("the good job goes in");
    let deadline = Instant::now() + Duration::from_secs(20);
    while failure(d, "bad").is_none() {
        assert!(Instant::now() < deadline, "the bad job is set aside");
        std::thread::sleep(Duration::from_millis(10));
    }
    holder.flush().expect("the holder's flush");
    holder.append("a", b"later").expect("append");
    holder.flush().expect("flush");
    let mut want = vec![b"first".to_vec()];
    want.extend(expected("good", "p0", 6));
    want.push(b"later".to_vec());
    assert_eq!(values(&holder, "a"), want);
    // A committer waiting on the holder hears of the failure at once.
    let started = Instant::now();
    match tidelog::commit_staged(d, config(), "bad", &["p0"], Duration::from_secs(30)) {
        Err(Error::InvalidArgument { name: "job", .. }) => {}
        r => panic!("expected the job's failure, got {r:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(holder);
    for _ in 0..2 {
        let wal = Wal::open_with(d, config()).expect("reopen");
        wal.append("a", b"again").expect("append");
        wal.flush().expect("flush");
    }
    // Another job published with no one holding the directory.
    stage_part(d, "good2", "p0", "a", 4);
    tidelog::commit_staged(d, config(), "good2", &["p0"], Duration::from_secs(5))
        .expect("commit alone");
    let wal = Wal::open_with(d, config()).expect("open");
    assert_eq!(values(&wal, "a").len(), 1 + 6 + 1 + 2 + 4);
    assert!(failure(d, "bad").is_some());
    assert!(wal.topics().iter().all(|t| t != "bad"));
}

#[test]
fn recommitting_a_published_job_is_idempotent() {
    let dir = tempdir();
    let d = dir.path();
    let wal = Wal::open_with(d, config()).expect("open");
    wal.append("a", b"before").expect("append");
    stage_part(d, "job", "p0", "a", 10);
    stage_part(d, "job", "p1", "a", 5);
    let ranges = wal.commit_staged("job", &["p0", "p1"]).expect("commit");
    assert_eq!(ranges, vec![("a".to_owned(), 1..16)]);
    // The commit again: the same answer, nothing appended.
    assert_eq!(
        wal.commit_staged("job", &["p0", "p1"]).expect("again"),
        ranges
    );
    stage::commit(d, "job", &["p0", "p1"]).expect("again, by another process");
    assert!(!job_dir(d, "job").exists());
    // Other parts are not the same commit.
    match wal.commit_staged("job", &["p0"]) {
        Err(Error::InvalidArgument { name: "job", .. }) => {}
        r => panic!("expected InvalidArgument(job), got {r:?}"),
    }
    assert_eq!(values(&wal, "a").len(), 16);
    drop(wal);
    tidelog::commit_staged(d, config(), "job", &["p0", "p1"], Duration::from_secs(5))
        .expect("again, with no holder");
    // A streaming sink's micro-batch, committed again after its publish.
    stage_part(d, "s-b1", "p0", "a", 3);
    stage::commit_for_sink(d, "s-b1", &["p0"], "s", 1).expect("commit batch");
    let wal = Wal::open_with(d, config()).expect("open publishes");
    stage::commit_for_sink(d, "s-b1", &["p0"], "s", 1).expect("batch again");
    drop(wal);
    let wal = Wal::open_with(d, config()).expect("open");
    let mut want = vec![b"before".to_vec()];
    want.extend(expected("job", "p0", 10));
    want.extend(expected("job", "p1", 5));
    want.extend(expected("s-b1", "p0", 3));
    assert_eq!(values(&wal, "a"), want, "every record once");
    // The name staged again is a new job.
    stage_part(d, "job", "p0", "a", 2);
    assert_eq!(
        wal.commit_staged("job", &["p0"]).expect("a new job"),
        vec![("a".to_owned(), 19..21)]
    );
}

#[test]
fn a_set_aside_jobs_bytes_are_kept_until_it_is_aborted() {
    let dir = tempdir();
    let d = dir.path();
    stage_corrupt(d, "bad");
    let before = files_of(d, "bad");
    // Housekeeping that removes uncommitted jobs at once, reopened: the job stays as it was.
    for _ in 0..3 {
        let wal = Wal::open_with(d, config().staged_ttl_ms(Some(0))).expect("open");
        wal.flush().expect("flush");
    }
    assert!(failure(d, "bad").is_some());
    let mut after = files_of(d, "bad");
    assert!(after.remove(stage::FAILED_FILE).is_some());
    after.remove(stage::JOB_LOCK_FILE);
    let mut kept = before.clone();
    kept.remove(stage::JOB_LOCK_FILE);
    assert_eq!(after, kept, "every byte of the job is kept");
    stage::abort(d, "bad").expect("abort");
    assert!(!job_dir(d, "bad").exists());
    assert!(stage::jobs(d).expect("jobs").is_empty());
    let wal = Wal::open_with(d, config()).expect("open");
    assert!(wal.topics().is_empty());
}

#[test]
fn commits_from_several_processes_with_no_holder_all_complete_once() {
    const COMMITTERS: u64 = 6;
    const RECORDS: u64 = 40;
    let dir = tempdir();
    let d = dir.path().to_owned();
    Wal::open_with(&d, config())
        .expect("create")
        .close()
        .expect("close");
    let barrier = Arc::new(Barrier::new(COMMITTERS as usize));
    let committers: Vec<_> = (0..COMMITTERS)
        .map(|i| {
            let (d, barrier) = (d.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let job = format!("job{i}");
                stage_part(&d, &job, "p0", &format!("t{}", i % 2), RECORDS);
                barrier.wait();
                tidelog::commit_staged(&d, config(), &job, &["p0"], Duration::from_secs(60))
            })
        })
        .collect();
    for (i, c) in committers.into_iter().enumerate() {
        c.join()
            .expect("committer")
            .unwrap_or_else(|e| panic!("job{i}: {e}"));
    }
    let wal = Wal::open_with(&d, config()).expect("open");
    for t in 0..2 {
        let mut got = values(&wal, &format!("t{t}"));
        got.sort();
        let mut want: Vec<Vec<u8>> = (0..COMMITTERS)
            .filter(|i| i % 2 == t)
            .flat_map(|i| expected(&format!("job{i}"), "p0", RECORDS))
            .collect();
        want.sort();
        assert_eq!(got, want, "topic t{t}: every job exactly once");
    }
    assert!(stage::jobs(&d).expect("jobs").is_empty());
}

#[test]
fn an_io_error_that_may_pass_leaves_the_job_committed_not_set_aside() {
    let dir = tempdir();
    let d = dir.path();
    let faults = FaultStorage::new();
    let wal = Wal::open_with_storage(d, config(), Arc::new(faults.clone())).expect("open");
    stage_part(d, "job", "p0", "a", 8);
    faults.arm(points::READ, Fault::Always(libc::EIO));
    match wal.commit_staged("job", &["p0"]) {
        Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::EIO)),
        r => panic!("expected EIO, got {r:?}"),
    }
    faults.disarm_all();
    assert!(failure(d, "job").is_none(), "not the job's fault");
    assert!(job_dir(d, "job").join(stage::COMMIT_FILE).exists());
    assert_eq!(
        wal.commit_staged("job", &["p0"])
            .expect("the retry publishes"),
        vec![("a".to_owned(), 0..8)]
    );
    assert_eq!(values(&wal, "a"), expected("job", "p0", 8));
}

#[test]
fn a_publish_that_stops_after_its_ledger_poisons_the_handle_until_reopened() {
    let dir = tempdir();
    let d = dir.path();
    let faults = FaultStorage::new();
    let wal = Wal::open_with_storage(d, config(), Arc::new(faults.clone())).expect("open");
    stage_part(d, "job", "p0", "a", 8);
    // The data files' reservations (not the shared state file's page for the new topic).
    faults.arm_for(points::ALLOCATE, Some(".tdl"), Fault::Always(libc::ENOSPC));
    let err = wal.commit_staged("job", &["p0"]).expect_err("no space");
    assert!(matches!(err, Error::DiskFull { .. }), "{err:?}");
    assert!(job_dir(d, "job").join(stage::INGEST_FILE).exists());
    faults.disarm_all();
    // The ledger gave the job the offsets from 0: no append may take them meanwhile.
    let err = wal.append("a", b"late").expect_err("poisoned");
    assert!(matches!(err, Error::Poisoned { .. }), "{err:?}");
    drop(wal);
    let wal = Wal::open_with(d, config()).expect("reopen");
    assert_eq!(values(&wal, "a"), expected("job", "p0", 8));
    assert_eq!(wal.append("a", b"late").expect("append"), 8);
}

#[test]
fn a_publish_lists_reads_locks_and_removes_through_the_storage() {
    let dir = tempdir();
    let d = dir.path();
    let faults = FaultStorage::new();
    let wal = Wal::open_with_storage(d, config(), Arc::new(faults.clone())).expect("open");
    stage_part(d, "job", "p0", "a", 8);
    let before = |p| faults.calls(p);
    let (dirs, files, locks) = (
        before(points::READ_DIR),
        before(points::READ_FILE),
        before(points::LOCK),
    );
    // The job's files go after its records are in the data files: a failed removal is an
    // error, and the next open (which lists the staging directory) finishes it.
    faults.arm(points::REMOVE_DIR_ALL, Fault::Once(libc::EIO));
    let err = wal
        .commit_staged("job", &["p0"])
        .expect_err("removal fails");
    assert_eq!(err.errno(), Some(libc::EIO), "{err:?}");
    assert_eq!(faults.hits(points::REMOVE_DIR_ALL), 1);
    assert!(faults.calls(points::READ_FILE) > files);
    assert!(faults.calls(points::LOCK) > locks);
    drop(wal);
    let wal = Wal::open_with_storage(d, config(), Arc::new(faults.clone())).expect("reopen");
    assert!(faults.calls(points::READ_DIR) > dirs);
    assert_eq!(values(&wal, "a"), expected("job", "p0", 8));
    assert!(!job_dir(d, "job").exists());
    let staging = d.join(stage::STAGING_DIR);
    let left: Vec<_> = std::fs::read_dir(&staging)
        .expect("staging")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| n.to_str().is_some_and(|n| n.starts_with(".removing-")))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `InvalidArgument` naming the job, as for a job with no commit and no published record.
fn assert_not_published(r: tidelog::Result<()>, what: &str) {
    match r {
        Err(Error::InvalidArgument {
            name: "job",
            reason,
        }) => {
            assert!(reason.contains("not committed"), "{what}: {reason}");
        }
        r => panic!("{what}: expected InvalidArgument(job), got {r:?}"),
    }
}

/// Goal: a wait answers "published" only when the publish is recorded (the job's published
/// record, or its sink's ledger): an abort that removed a committed job before its publish,
/// or a name never committed, is an error, never a publish.
#[test]
fn a_wait_answers_published_only_from_a_record_of_the_publish() {
    let dir = tempdir();
    let d = dir.path();
    let now = Duration::ZERO;
    assert_not_published(stage::wait_published(d, "never", now), "never committed");
    stage_part(d, "aborted", "p0", "a", 3);
    stage::commit(d, "aborted", &["p0"]).expect("commit");
    stage::abort(d, "aborted").expect("abort before any publish");
    assert_not_published(
        stage::wait_published(d, "aborted", Duration::from_millis(200)),
        "aborted",
    );
    // Published: by a job of its own, and a streaming sink's micro-batch and its replay.
    stage_part(d, "plain", "p0", "a", 3);
    stage::commit(d, "plain", &["p0"]).expect("commit");
    stage_part(d, "s-1", "p0", "a", 2);
    stage::commit_for_sink(d, "s-1", &["p0"], "s", 1).expect("commit batch 1");
    stage_part(d, "s-1-replay", "p0", "a", 2);
    stage::commit_for_sink(d, "s-1-replay", &["p0"], "s", 1).expect("commit its replay");
    let wal = Wal::open_with(d, config()).expect("open publishes");
    for job in ["plain", "s-1", "s-1-replay"] {
        stage::wait_published(d, job, now).unwrap_or_else(|e| panic!("{job}: {e}"));
    }
    let mut want = expected("plain", "p0", 3);
    want.extend(expected("s-1", "p0", 2));
    assert_eq!(values(&wal, "a"), want, "the replay appended nothing");
    // Its record gone (as after `staged_ttl_ms`), a sink's micro-batch is told by its ledger.
    let record = d.join(stage::STAGING_DIR).join(stage::PUBLISHED_DIR);
    std::fs::remove_file(record.join("s-1")).expect("remove record");
    assert_not_published(stage::wait_published(d, "s-1", now), "no record");
    stage::wait_published_for_sink(d, "s-1", "s", 1, now).expect("the ledger");
    assert_not_published(
        stage::wait_published_for_sink(d, "s-2", "s", 2, now),
        "a later micro-batch",
    );
}

/// Goal: `Wal::commit_staged` returns offsets only for a job it (or a publish before it)
/// published. Method: the job's lock held on by another (as an abort or a forked child's
/// copy holds it) fails the commit with a timeout and keeps the job committed, and a
/// retry publishes it; the job removed while the commit waited for its lock (an abort) is
/// an error, and nothing is appended.
#[test]
fn a_commit_that_cannot_publish_its_job_fails_instead_of_answering_empty() {
    use tidelog::io::{StdStorage, Storage};
    let dir = tempdir();
    let d = dir.path();
    let wal = Wal::open_with(d, config()).expect("open");
    stage_part(d, "held", "p0", "a", 4);
    let lock_path = job_dir(d, "held").join(stage::JOB_LOCK_FILE);
    let lock = StdStorage
        .lock_file(&lock_path)
        .expect("hold the job's lock");
    match wal.commit_staged("held", &["p0"]) {
        Err(Error::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::TimedOut);
        }
        r => panic!("expected a timed-out lock, got {r:?}"),
    }
    assert!(
        job_dir(d, "held").join(stage::COMMIT_FILE).exists(),
        "still committed"
    );
    drop(lock);
    assert_eq!(
        wal.commit_staged("held", &["p0"])
            .expect("the retry publishes"),
        vec![("a".to_owned(), 0..4)]
    );

    stage_part(d, "gone", "p0", "a", 4);
    let lock_path = job_dir(d, "gone").join(stage::JOB_LOCK_FILE);
    let lock = StdStorage
        .lock_file(&lock_path)
        .expect("hold the job's lock");
    std::thread::scope(|s| {
        let commit = s.spawn(|| wal.commit_staged("gone", &["p0"]));
        let commit_file = job_dir(d, "gone").join(stage::COMMIT_FILE);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !commit_file.exists() {
            assert!(Instant::now() < deadline, "the commit was never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        // What an abort does while it holds the job's lock (a rename: the committer's
        // tries at the lock create its file in the directory meanwhile).
        let removing = d.join(stage::STAGING_DIR).join(".removing-gone");
        std::fs::rename(job_dir(d, "gone"), &removing).expect("remove the job");
        std::fs::remove_dir_all(&removing).expect("remove the job's files");
        drop(lock);
        match commit.join().expect("commit thread") {
            Err(Error::InvalidArgument { name: "job", .. }) => {}
            r => panic!("expected InvalidArgument(job), got {r:?}"),
        }
    });
    assert_eq!(
        values(&wal, "a"),
        expected("held", "p0", 4),
        "nothing of the aborted job"
    );
}

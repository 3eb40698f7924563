//! Bucket requests that fail, lose their answer or answer late (`tidelog::tier_faults`):
//! each request of a tiered directory's life faulted in turn, and nothing acknowledged is
//! lost, nothing is published twice, and the bucket ends whole.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tidelog::tier_faults::{BucketFault, BucketFaults, requests};
use tidelog::tier_stage::{self, Commit};
use tidelog::{Error, RemoteLog, Retention, TierConfig, Wal};

use crate::common::tempdir;
use crate::tier::{
    WAIT, adds, append, check_bucket, config, deltas, eventually, file_url, object_files,
    staged_part, topic_id, value,
};

/// Calls `f` until it succeeds, at most `tries` times; each failure must be a bucket
/// error (one armed fault fails one request: the caller's retry is what a user does).
fn retried<T>(what: &str, tries: u32, mut f: impl FnMut() -> tidelog::Result<T>) -> T {
    let mut last = None;
    for _ in 0..tries {
        match f() {
            Ok(v) => return v,
            Err(e @ (Error::Tier { .. } | Error::TierTimeout { .. })) => last = Some(e),
            Err(e) => panic!("{what}: not a bucket error: {e:?}"),
        }
    }
    panic!("{what}: failed {tries} times, last: {last:?}")
}

/// One life of a tiered directory under the URL's fault plan: open, append to two topics
/// across several extents, wait for the bucket to hold them, stage a job in the bucket and
/// have it published, close; then check the bucket alone, with a fresh open and a remote
/// reader. Returns nothing: it panics on the first thing lost, doubled or damaged.
fn life(dir: &Path, bucket: &Path) {
    let tier = TierConfig::new(file_url(bucket)).delete_delay_ms(0);
    let wal = retried("open", 2, || Wal::open_with(dir, config(tier.clone())));
    append(&wal, "a", 0, 300);
    append(&wal, "b", 0, 150);
    wal.tier_flush(WAIT).unwrap();
    check_bucket(bucket, "a", 300);
    check_bucket(bucket, "b", 150);

    // A job staged in the bucket, committed (retried as a committer would), published once.
    let task = staged_part("job", "p0", "a", 300, 20);
    retried("upload part", 2, || {
        tier_stage::upload_part(&tier, task.path(), "job", "p0")
    });
    let commit = retried("commit", 2, || {
        tier_stage::commit(&tier, "job", &["p0"], None)
    });
    assert_eq!(commit, Commit::Recorded);
    let published = retried("wait", 2, || {
        tier_stage::wait_published(&tier, "job", Duration::from_secs(30))
    });
    assert_eq!(published, vec![("a".to_owned(), 300..320)]);
    assert_eq!(wal.topic_info("a").unwrap().next_offset, 320);
    wal.tier_flush(WAIT).unwrap();
    check_bucket(bucket, "a", 320);
    // The sweep leaves exactly the objects the manifest names.
    eventually("unnamed objects swept", || {
        let mut named: Vec<String> = adds(bucket).into_iter().map(|a| a.key).collect();
        named.sort();
        object_files(bucket) == named
    });
    // The status reports a failure only until a round of requests succeeds.
    eventually("the failure over in the status", || {
        wal.tier_status().unwrap().unwrap().last_error.is_none()
    });
    wal.close().unwrap();

    // Every record from the bucket alone.
    let remote = retried("remote open", 2, || RemoteLog::open(&tier));
    for (topic, next) in [("a", 320), ("b", 150)] {
        for offset in 0..next {
            let record = retried("remote read", 2, || remote.read(topic, offset));
            assert_eq!(record.value, value(topic, offset), "{topic}@{offset}");
        }
    }
}

/// A life under retention: appends in rounds, each waited for in the bucket, so the
/// manifest is trimmed (trim deltas) and the sweep deletes what it drops; then every record
/// from the trim point on reads back from the bucket alone, and the bucket holds exactly the
/// objects the manifest names.
fn retention_life(dir: &Path, bucket: &Path) {
    let tier = TierConfig::new(file_url(bucket)).delete_delay_ms(0);
    let cfg = config(tier.clone()).retention(Retention::default().max_bytes(128 * 1024));
    let wal = retried("open", 2, || Wal::open_with(dir, cfg.clone()));
    for round in 0..3 {
        append(&wal, "r", round * 200, 200);
        wal.tier_flush(WAIT).unwrap();
    }
    // Settled: trimmed, the sweep caught up with the manifest, and the failure over, the
    // same at two looks 200 ms (four rounds of the upload thread) apart.
    let settled = || -> Option<u64> {
        let first = RemoteLog::open(&tier)
            .ok()?
            .topic_info("r")
            .ok()?
            .first_offset;
        let id = topic_id(bucket, "r");
        let mut named: Vec<String> = adds(bucket)
            .into_iter()
            .filter(|a| a.topic == id && a.first >= first)
            .map(|a| a.key)
            .collect();
        named.sort();
        let quiet = wal.tier_status().ok()??.last_error.is_none();
        (first > 0 && quiet && object_files(bucket) == named).then_some(first)
    };
    let started = std::time::Instant::now();
    let first = loop {
        let before = settled();
        std::thread::sleep(Duration::from_millis(200));
        if before.is_some() && settled() == before {
            break before.unwrap_or_default();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never settled: objects {:?}, {:?}",
            object_files(bucket),
            wal.tier_status()
        );
    };
    let remote = retried("remote open", 2, || RemoteLog::open(&tier));
    let info = remote.topic_info("r").unwrap();
    assert_eq!((info.first_offset, info.next_offset), (first, 600));
    for offset in first..600 {
        let record = retried("remote read", 2, || remote.read("r", offset));
        assert_eq!(record.value, value("r", offset), "r@{offset}");
    }
    wal.close().unwrap();
}

/// A fresh directory and `file://` bucket, with an empty fault plan installed for the
/// bucket's URL until this is dropped.
struct Planned {
    dir: tempfile::TempDir,
    bucket: tempfile::TempDir,
    url: String,
    faults: Arc<BucketFaults>,
}

impl Planned {
    fn new() -> Planned {
        let bucket = tempdir();
        let url = file_url(bucket.path());
        let faults = BucketFaults::install(&url);
        Planned {
            dir: tempdir(),
            bucket,
            url,
            faults,
        }
    }
}

impl Drop for Planned {
    fn drop(&mut self) {
        BucketFaults::uninstall(&self.url);
    }
}

/// Runs `life` in fresh directories with `arm` applied to the URL's plan; returns the
/// plan's requests and faults.
fn faulted_life(life: fn(&Path, &Path), arm: impl FnOnce(&BucketFaults)) -> (u64, u64) {
    let p = Planned::new();
    arm(&p.faults);
    life(p.dir.path(), p.bucket.path());
    (p.faults.calls(None), p.faults.hits(None))
}

/// The requests to fault out of `calls`: all with `TIDELOG_SWEEP=full`; else the first
/// and `SAMPLES` more spread over the life.
fn picks(calls: u64) -> Vec<u64> {
    const SAMPLES: u64 = 8;
    if std::env::var("TIDELOG_SWEEP").as_deref() == Ok("full") {
        return (0..calls).collect();
    }
    let mut picks: Vec<u64> = (0..=SAMPLES).map(|i| i * calls / (SAMPLES + 1)).collect();
    picks.dedup();
    picks
}

/// Runs a life per pick with its request faulted by `fault`. Each fault fires at most
/// once, and fires whenever its life makes that request: lives differ by the polls their
/// waits make (a slow machine polls more), so a pick may lie past the end of a faulted life.
fn sweep(life: fn(&Path, &Path), fault: BucketFault) {
    let (calls, hits) = faulted_life(life, |_| ());
    assert_eq!(hits, 0);
    for n in picks(calls) {
        let (made, hits) = faulted_life(life, |f| f.arm(None, None, n, fault));
        assert!(hits <= 1, "request {n}");
        assert!(
            hits == 1 || made <= n,
            "request {n} came ({made} requests in that life, {calls} without faults) and was \
             not faulted"
        );
    }
}

#[test]
fn each_request_failing_loses_nothing() {
    sweep(life, BucketFault::Fail);
}

#[test]
fn each_request_losing_its_answer_loses_nothing_and_doubles_nothing() {
    sweep(life, BucketFault::Lost);
}

#[test]
fn each_request_of_retention_failing_or_losing_its_answer_keeps_what_the_manifest_names() {
    sweep(retention_life, BucketFault::Fail);
    sweep(retention_life, BucketFault::Lost);
}

#[test]
fn every_put_failing_a_while_then_healing_uploads_everything() {
    let p = Planned::new();
    let faults = &p.faults;
    let wal = Wal::open_with(p.dir.path(), config(TierConfig::new(p.url.clone()))).unwrap();
    faults.arm_always(Some(requests::PUT), None, BucketFault::Lost);
    append(&wal, "a", 0, 300);
    assert!(matches!(
        wal.tier_flush(Some(Duration::from_millis(500))),
        Err(Error::TierTimeout { .. })
    ));
    let status = wal.tier_status().unwrap().unwrap();
    let reported = status.last_error.clone().unwrap_or_default();
    assert!(reported.contains("lost its answer"), "{status:?}");
    assert!(faults.hits(Some(requests::PUT)) > 1, "retried");
    assert_eq!(wal.read("a", 0).unwrap().value(), value("a", 0));
    faults.disarm_all();
    wal.tier_flush(WAIT).unwrap();
    check_bucket(p.bucket.path(), "a", 300);
    wal.close().unwrap();
}

#[test]
fn slow_requests_delay_uploads_and_lose_nothing() {
    let p = Planned::new();
    p.faults
        .arm_always(None, None, BucketFault::Delay(Duration::from_millis(30)));
    let wal = Wal::open_with(p.dir.path(), config(TierConfig::new(p.url.clone()))).unwrap();
    append(&wal, "a", 0, 300);
    wal.tier_flush(WAIT).unwrap();
    check_bucket(p.bucket.path(), "a", 300);
    wal.close().unwrap();
    assert!(p.faults.hits(None) > 5);
}

#[test]
fn a_checkpoint_that_fails_is_reported_and_opens_read_the_deltas_instead() {
    let p = Planned::new();
    let (dir, bucket, url, faults) = (&p.dir, &p.bucket, &p.url, &p.faults);
    faults.arm(
        Some(requests::PUT),
        Some("checkpoint"),
        0,
        BucketFault::Fail,
    );
    let tier = || config(TierConfig::new(url.clone()));
    let wal = Wal::open_with(dir.path(), tier()).unwrap();
    // One delta per flush: the commit of version 100 writes the first checkpoint.
    let mut next = 0;
    while faults.hits(None) == 0 {
        assert!(
            deltas(bucket.path()).len() <= 101,
            "no checkpoint was written"
        );
        append(&wal, "c", next, 1);
        next += 1;
        wal.tier_flush(WAIT).unwrap();
    }
    // The commit stands; the status says its checkpoint did not, until a round succeeds.
    let status = wal.tier_status().unwrap().unwrap();
    let reported = status.last_error.clone().unwrap_or_default();
    assert!(reported.contains("checkpoint"), "{status:?}");
    assert!(status.retries >= 1, "{status:?}");
    eventually("the status clears once a round succeeds", || {
        wal.tier_status().unwrap().unwrap().last_error.is_none()
    });
    wal.close().unwrap();
    BucketFaults::uninstall(url);
    let manifest = bucket.path().join("_tidelog");
    assert!(!manifest.join("last_checkpoint").exists());
    assert!(
        !manifest
            .join("checkpoint")
            .join(format!("{:020}.checkpoint", 100))
            .exists()
    );

    // Without a checkpoint an open reads every delta; nothing acknowledged is missing.
    let wal = Wal::open_with(dir.path(), tier()).unwrap();
    append(&wal, "c", next, 1);
    next += 1;
    wal.tier_flush(WAIT).unwrap();
    assert!(wal.tier_status().unwrap().unwrap().manifest_version > 100);
    wal.close().unwrap();
    check_bucket(bucket.path(), "c", next);
    let remote = RemoteLog::open(&TierConfig::new(url.clone())).unwrap();
    for offset in 0..next {
        assert_eq!(remote.read("c", offset).unwrap().value, value("c", offset));
    }
}

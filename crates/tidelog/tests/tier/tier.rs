#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tidelog::{Config, Durability, Error, Retention, StartPosition, TierConfig, Wal};

use crate::common::{geometry, tempdir};

pub(crate) const WAIT: Option<Duration> = Some(Duration::from_secs(60));

/// 16 blocks of 64 KiB per file, periodic flush every 50 ms.
pub(crate) fn config(tier: TierConfig) -> Config {
    geometry(16, 64 * 1024)
        .durability(Durability::Interval)
        .sync_interval_ms(50)
        .tier(tier)
}

pub(crate) fn file_url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

pub(crate) fn value(topic: &str, offset: u64) -> Vec<u8> {
    let mut v = format!("{topic}:{offset}:").into_bytes();
    v.resize(900, b'a' + (offset % 26) as u8);
    v
}

pub(crate) fn append(wal: &Wal, topic: &str, from: u64, n: u64) {
    let w = wal.writer(topic).unwrap();
    for i in from..from + n {
        assert_eq!(w.append(&value(topic, i)).unwrap(), i);
    }
}

/// One `add` of the manifest, as the test reads it from the bucket's files.
#[derive(Debug)]
pub(crate) struct Added {
    pub(crate) topic: u64,
    pub(crate) key: String,
    pub(crate) first: u64,
    records: u64,
    bytes: u64,
    footer_position: u64,
}

/// The deltas under `bucket`, checked (magic, length, checksum), in order.
pub(crate) fn deltas(bucket: &Path) -> Vec<serde_json::Value> {
    let dir = bucket.join("_tidelog/manifest");
    if !dir.exists() {
        return Vec::new();
    }
    // A put under way in a `file://` bucket writes `NAME#N` first: not an object yet.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| !name.contains('#'))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            name,
            &format!("{:020}.delta", i + 1),
            "deltas are numbered from 1"
        );
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let nl = bytes.iter().position(|&b| b == b'\n').unwrap();
        let header = std::str::from_utf8(&bytes[..nl]).unwrap();
        let fields: Vec<&str> = header.split(' ').collect();
        assert_eq!(fields[0], "TLDELTA1");
        let body = &bytes[nl + 1..];
        assert_eq!(fields[2].parse::<usize>().unwrap(), body.len());
        assert_eq!(
            u32::from_str_radix(fields[1], 16).unwrap(),
            crc32fast::hash(body)
        );
        let delta: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(delta["version"], i as u64 + 1);
        out.push(delta);
    }
    out
}

pub(crate) fn adds(bucket: &Path) -> Vec<Added> {
    let mut out = Vec::new();
    for delta in deltas(bucket) {
        for entry in delta["entries"].as_array().unwrap() {
            if let Some(a) = entry.get("add") {
                out.push(Added {
                    topic: a["topic"].as_u64().unwrap(),
                    key: a["key"].as_str().unwrap().to_owned(),
                    first: a["first_offset"].as_u64().unwrap(),
                    records: a["records"].as_u64().unwrap(),
                    bytes: a["bytes"].as_u64().unwrap(),
                    footer_position: a["footer_position"].as_u64().unwrap(),
                });
            }
        }
    }
    out
}

fn claims(bucket: &Path) -> Vec<(u64, String)> {
    deltas(bucket)
        .iter()
        .flat_map(|d| d["entries"].as_array().unwrap().clone())
        .filter_map(|e| {
            let c = e.get("claim")?;
            Some((c["epoch"].as_u64()?, c["producer"].as_str()?.to_owned()))
        })
        .collect()
}

/// Topic id by name, from the manifest's `topic` entries.
pub(crate) fn topic_id(bucket: &Path, name: &str) -> u64 {
    deltas(bucket)
        .iter()
        .flat_map(|d| d["entries"].as_array().unwrap().clone())
        .find_map(|e| {
            let t = e.get("topic")?;
            (t["name"] == name).then(|| t["id"].as_u64().unwrap())
        })
        .unwrap()
}

/// Checks that the bucket's objects of `topic` hold exactly its records `0..next`, each
/// object the extent's bytes as they are (identity, frames with their offsets and values).
pub(crate) fn check_bucket(bucket: &Path, topic: &str, next: u64) {
    let id = topic_id(bucket, topic);
    let mut expect = 0;
    for add in adds(bucket).iter().filter(|a| a.topic == id) {
        assert_eq!(add.first, expect, "objects follow each other: {add:?}");
        let bytes = std::fs::read(bucket.join(&add.key)).unwrap();
        assert_eq!(bytes.len() as u64, add.bytes);
        assert_eq!(&bytes[..8], b"TDLBLOCK");
        // The records (batch frames), from the records' start to the footer, checked.
        let identity = tidelog::format::BlockIdentity::decode(&bytes).expect("identity");
        assert_eq!(identity.version, tidelog::format::VERSION_BATCHED);
        let records = &bytes[..add.footer_position as usize];
        let mut pos = 4096usize;
        let mut offset = add.first;
        while pos < records.len() {
            let view = tidelog::batch::decode(
                records,
                pos,
                identity.salt,
                identity.topic_id,
                offset,
                true,
            )
            .unwrap_or_else(|e| panic!("offset {offset} at {pos}: {e:?}"));
            assert_eq!(&records[view.value], value_of(topic, offset).as_slice());
            pos = view.next_position;
            offset += 1;
        }
        assert_eq!(offset, add.first + add.records);
        expect = offset;
    }
    assert_eq!(expect, next, "the bucket holds every record of {topic}");
}

fn value_of(topic: &str, offset: u64) -> Vec<u8> {
    value(topic, offset)
}

#[test]
fn sealed_extents_reach_the_bucket_and_tier_flush_waits_for_every_record() {
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    append(&wal, "orders", 0, 300);
    append(&wal, "tiny", 0, 3);
    wal.tier_flush(WAIT).unwrap();
    check_bucket(bucket.path(), "orders", 300);
    check_bucket(bucket.path(), "tiny", 3);
    let status = wal.tier_status().unwrap().unwrap();
    assert_eq!(status.lag_records, 0);
    assert_eq!(status.uploaded_objects, adds(bucket.path()).len() as u64);
    assert!(status.uploading && !status.fenced, "{status:?}");
    assert_eq!(status.last_error, None);
    // Appends go on in new extents; the next flush covers them too.
    append(&wal, "orders", 300, 5);
    assert!(wal.tier_status().unwrap().unwrap().lag_records >= 5);
    wal.tier_flush(WAIT).unwrap();
    check_bucket(bucket.path(), "orders", 305);
    wal.close().unwrap();

    // The same directory again: a new epoch of the same producer, and uploads go on.
    let wal = Wal::open_with(dir.path(), config(tier)).unwrap();
    append(&wal, "orders", 305, 10);
    wal.tier_flush(WAIT).unwrap();
    check_bucket(bucket.path(), "orders", 315);
    let claims = claims(bucket.path());
    assert_eq!(claims.len(), 2, "{claims:?}");
    assert_eq!((claims[0].0, claims[1].0), (1, 2));
    assert_eq!(claims[0].1, claims[1].1);
    assert_eq!(wal.tier_status().unwrap().unwrap().epoch, 2);
    wal.close().unwrap();
}

#[test]
fn a_second_directory_is_fenced_unless_it_takes_over() {
    let (a, b) = (tempdir(), tempdir());
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    let first = Wal::open_with(a.path(), config(tier.clone())).unwrap();
    append(&first, "t", 0, 100);
    first.tier_flush(WAIT).unwrap();

    match Wal::open_with(b.path(), config(tier.clone())) {
        Err(Error::Fenced { epoch, .. }) => assert_eq!(epoch, 1),
        other => panic!("expected Fenced, got {other:?}"),
    }
    let second = Wal::open_with(b.path(), config(tier.takeover(true))).unwrap();
    append(&second, "u", 0, 10);
    second.tier_flush(WAIT).unwrap();
    check_bucket(bucket.path(), "u", 10);
    // Its own "t" would overlap the first one's objects: refused, named, nothing added.
    append(&second, "t", 0, 5);
    match second.tier_flush(WAIT) {
        Err(Error::Tier { op, key, message }) => {
            assert_eq!((op, key.as_str()), ("upload", "t"), "{message}");
        }
        other => panic!("expected a refused upload, got {other:?}"),
    }
    check_bucket(bucket.path(), "t", 100);

    // The first one's next upload finds the newer claim: fenced, nothing of it added.
    let before = adds(bucket.path()).len();
    append(&first, "t", 100, 10);
    match first.tier_flush(WAIT) {
        Err(Error::Fenced {
            epoch, producer, ..
        }) => {
            assert_eq!(epoch, 2);
            assert_eq!(producer, second.tier_status().unwrap().unwrap().producer);
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert!(first.tier_status().unwrap().unwrap().fenced);
    assert_eq!(adds(bucket.path()).len(), before);
    // Local data is untouched: the fenced handle still appends and reads.
    append(&first, "t", 110, 1);
    assert_eq!(first.read("t", 110).unwrap().value(), value("t", 110));
    first.close().unwrap();
    second.close().unwrap();
}

/// How long a tier's last error may outlive the flush after it (a round of uploads).
const WAIT_FOR_CLEAR: Duration = Duration::from_secs(10);

/// Puts of extent objects fail while `topics` under the bucket is a file, not a directory.
fn block_uploads(bucket: &Path) -> PathBuf {
    let blocker = bucket.join("topics");
    std::fs::write(&blocker, b"not a directory").unwrap();
    blocker
}

#[test]
fn extents_the_bucket_lacks_are_kept_and_uploads_are_retried() {
    let dir = tempdir();
    let bucket = tempdir();
    let blocker = block_uploads(bucket.path());
    let cfg = config(TierConfig::new(file_url(bucket.path())))
        .retention(Retention::default().max_bytes(64 * 1024));
    let wal = Wal::open_with(dir.path(), cfg).unwrap();
    append(&wal, "r", 0, 400);
    match wal.tier_flush(Some(Duration::from_millis(500))) {
        Err(Error::TierTimeout {
            pending_records, ..
        }) => assert_eq!(pending_records, 400),
        other => panic!("expected TierTimeout, got {other:?}"),
    }
    let status = wal.tier_status().unwrap().unwrap();
    assert!(
        status.retries > 0 && status.last_error.is_some(),
        "{status:?}"
    );
    // Retention would drop most extents; none goes before the bucket holds it.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(wal.topic_info("r").unwrap().local_first_offset, 0);
    assert_eq!(wal.read("r", 0).unwrap().value(), value("r", 0));

    std::fs::remove_file(&blocker).unwrap();
    wal.tier_flush(WAIT).unwrap();
    check_bucket(bucket.path(), "r", 400);
    // The failure is over once a whole round of requests succeeds; the round that finished
    // the flush may have begun before the blocker went (its failed put then keeps it).
    let start = Instant::now();
    loop {
        let status = wal.tier_status().unwrap().unwrap();
        if status.last_error.is_none() {
            break;
        }
        assert!(start.elapsed() < WAIT_FOR_CLEAR, "{status:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Now retention goes ahead on disk.
    let start = Instant::now();
    while wal.topic_info("r").unwrap().local_first_offset == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "retention never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wal.close().unwrap();
}

#[test]
fn two_handles_share_one_uploader() {
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    let a = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    let b = Wal::open_with(dir.path(), config(tier)).unwrap();
    append(&b, "from-b", 0, 120);
    append(&a, "from-a", 0, 10);
    // Either may lead; whichever flushes waits for the leader's deltas.
    b.tier_flush(WAIT).unwrap();
    check_bucket(bucket.path(), "from-b", 120);
    a.tier_flush(WAIT).unwrap();
    check_bucket(bucket.path(), "from-a", 10);
    let uploading = [&a, &b].map(|w| w.tier_status().unwrap().unwrap().uploading);
    assert_eq!(uploading.iter().filter(|u| **u).count(), 1, "{uploading:?}");
    assert_eq!(claims(bucket.path()).len(), 1);
    b.close().unwrap();
    a.close().unwrap();
}

#[test]
fn bad_tier_settings_are_refused() {
    let dir = tempdir();
    let bucket = tempdir();
    let refused = |tier: TierConfig| match Wal::open_with(dir.path(), config(tier)) {
        Err(Error::InvalidArgument { .. }) => {}
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    refused(TierConfig::new(""));
    refused(TierConfig::new("no scheme here"));
    refused(TierConfig::new("s3://bucket/prefix").option("aws_no_such_option", "1"));
    refused(TierConfig::new(file_url(bucket.path())).option("aws_region", "eu-west-1"));
    refused(TierConfig::new("ftp://host/path"));
    // Google's and Azure's stores are built in: their URLs parse, and their options are
    // checked as S3's are (another store's key is refused).
    refused(TierConfig::new("gs://bucket/prefix").option("aws_region", "eu-west-1"));
    refused(TierConfig::new("az://container/prefix").option("google_bucket", "b"));
    for (url, key, value) in [
        ("gs://bucket/prefix", "google_service_account", "none.json"),
        (
            "az://container/prefix",
            "azure_storage_account_name",
            "acct",
        ),
    ] {
        // Known keys pass the check. No such server answers here: the open goes on (the
        // uploads would retry), or the store refuses its settings, and says so.
        let other = tempdir();
        match Wal::open_with(
            other.path(),
            config(TierConfig::new(url).option(key, value)),
        ) {
            Ok(wal) => wal.close().unwrap(),
            Err(Error::InvalidArgument { reason, .. }) => {
                assert!(!reason.contains("is not an option"), "{url}: {reason}");
            }
            Err(e) => panic!("{url}: {e}"),
        }
    }
    // A read-only handle uploads nothing: it has no tier.
    Wal::open_with(dir.path(), geometry(16, 64 * 1024))
        .unwrap()
        .close()
        .unwrap();
    let ro = Wal::open_read_only_with(dir.path(), config(TierConfig::new(file_url(bucket.path()))))
        .unwrap();
    assert_eq!(ro.tier_status().unwrap(), None);
    // Without a tier there is nothing to flush.
    let wal = Wal::open_with(dir.path(), geometry(16, 64 * 1024)).unwrap();
    assert!(matches!(
        wal.tier_flush(None),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(wal.tier_status().unwrap(), None);
}

#[test]
fn a_bucket_that_does_not_answer_bounds_open_and_close() {
    // A server that accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let dir = tempdir();
    let tier = TierConfig::new("s3://bucket/prefix")
        .option("aws_endpoint", format!("http://127.0.0.1:{port}"))
        .option("aws_allow_http", "true")
        .option("aws_access_key_id", "test")
        .option("aws_secret_access_key", "test")
        .option("aws_region", "us-east-1");
    let start = Instant::now();
    let wal = Wal::open_with(dir.path(), config(tier)).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "open waited {:?}",
        start.elapsed()
    );
    append(&wal, "t", 0, 100);
    assert!(matches!(
        wal.tier_flush(Some(Duration::from_millis(300))),
        Err(Error::TierTimeout { .. })
    ));
    let status = wal.tier_status().unwrap().unwrap();
    assert!(status.last_error.is_some(), "{status:?}");
    let closing = Instant::now();
    wal.close().unwrap();
    assert!(
        closing.elapsed() < Duration::from_secs(3),
        "close waited {:?}",
        closing.elapsed()
    );
    // Nothing local was lost.
    let wal = Wal::open_read_only_with(dir.path(), geometry(16, 64 * 1024)).unwrap();
    assert_eq!(wal.topic_info("t").unwrap().next_offset, 100);
}

#[test]
fn memory_buckets_are_shared_by_name_within_a_process() {
    let (a, b, c) = (tempdir(), tempdir(), tempdir());
    let wal = Wal::open_with(a.path(), config(TierConfig::new("memory://shared-name/p"))).unwrap();
    append(&wal, "t", 0, 100);
    wal.tier_flush(WAIT).unwrap();
    wal.close().unwrap();
    // The same name is the same bucket: held by the first directory.
    assert!(matches!(
        Wal::open_with(b.path(), config(TierConfig::new("memory://shared-name/p"))),
        Err(Error::Fenced { .. })
    ));
    // Another name, another bucket.
    let other = Wal::open_with(c.path(), config(TierConfig::new("memory://other-name/p"))).unwrap();
    append(&other, "t", 0, 1);
    other.tier_flush(WAIT).unwrap();
    assert_eq!(other.tier_status().unwrap().unwrap().epoch, 1);
    other.close().unwrap();
}

/// The child of the kill test: appends `N` records to topic "k" from its next offset with
/// `Always`, then flushes them to the tier at `URL` (mode `N URL`).
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = crate::common::child_env() else {
        return;
    };
    let (n, url) = mode.split_once(' ').unwrap();
    if n == "publish" {
        // A producer that publishes the jobs committed in its bucket, until killed (or
        // until the job named in the bucket is answered).
        let wal = Wal::open_with(&dir, config(TierConfig::new(url).takeover(true))).unwrap();
        let _ = tidelog::tier_stage::wait_published(
            &TierConfig::new(url),
            "killed",
            Duration::from_secs(60),
        );
        wal.close().unwrap();
        return;
    }
    let cfg = config(TierConfig::new(url)).durability(Durability::Always);
    let wal = Wal::open_with(&dir, cfg).unwrap();
    let from = wal.writer("k").unwrap().next_offset();
    append(&wal, "k", from, n.parse().unwrap());
    wal.tier_flush(WAIT).unwrap();
    wal.close().unwrap();
}

#[test]
fn a_producer_killed_while_uploading_loses_nothing_and_leaves_the_bucket_whole() {
    let dir = tempdir();
    let bucket = tempdir();
    let url = file_url(bucket.path());
    let mut killed = 0;
    let mut last_next = 0;
    for point in [
        "kill:tier-put:1",
        "kill:tier-put:3",
        "kill:tier-commit:1",
        "kill:tier-commit:2",
        "kill:tier-put:2",
    ] {
        let out = crate::common::child_command(module_path!(), dir.path(), &format!("150 {url}"))
            .env("TIDELOG_CRASH_AT", point)
            .output()
            .unwrap();
        if !out.status.success() {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(out.status.signal(), Some(9), "{point}: {out:?}");
            killed += 1;
        }
        // The child appended (uploads run beside its appends, so it may die part way);
        // every record is whole, and a flush puts them all in the bucket, whole and in
        // order, whatever the killed upload left there; the objects a killed pass put and
        // never committed (under its epoch's names) are swept.
        let tier = TierConfig::new(url.clone()).delete_delay_ms(0);
        let wal = Wal::open_with(dir.path(), config(tier)).unwrap();
        let next = wal.topic_info("k").unwrap().next_offset;
        assert!(next > last_next, "{point}: no record appended ({next})");
        last_next = next;
        for offset in 0..next {
            assert_eq!(wal.read("k", offset).unwrap().value(), value("k", offset));
        }
        wal.tier_flush(WAIT).unwrap();
        check_bucket(bucket.path(), "k", next);
        let mut named: Vec<String> = adds(bucket.path()).into_iter().map(|a| a.key).collect();
        named.sort();
        eventually("an orphan was never swept", || {
            object_files(bucket.path()) == named
        });
        wal.close().unwrap();
    }
    assert!(
        killed >= 3,
        "only {killed} children reached their crash point"
    );
}

#[test]
fn a_producer_killed_while_publishing_a_bucket_job_publishes_it_once_after() {
    use tidelog::tier_stage;
    for point in [
        "kill:tier-ingest:1",
        "kill:publish-ledger:1",
        "kill:publish-recorded:1",
        "kill:tier-answer:1",
    ] {
        let dir = tempdir();
        let bucket = tempdir();
        let url = file_url(bucket.path());
        let tier = TierConfig::new(url.clone());
        // The job, staged and committed in the bucket before any producer runs.
        let job = "killed";
        stage_in_bucket(&tier, job, "p0", "j", 0, 30);
        stage_in_bucket(&tier, job, "p1", "j", 30, 20);
        tier_stage::commit(&tier, job, &["p0", "p1"], None).unwrap();
        let out =
            crate::common::child_command(module_path!(), dir.path(), &format!("publish {url}"))
                .env("TIDELOG_CRASH_AT", point)
                .output()
                .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(9), "{point}: {out:?}");
        // The next producer finishes what the killed one began: every record once, even
        // with the published records' TTL long past (a job the bucket has not been told of
        // keeps its record).
        std::thread::sleep(Duration::from_millis(20));
        let cfg = config(TierConfig::new(url.clone()).takeover(true)).staged_ttl_ms(Some(1));
        let wal = Wal::open_with(dir.path(), cfg).unwrap();
        let ranges = tier_stage::wait_published(&tier, job, Duration::from_secs(60)).unwrap();
        assert_eq!(ranges, vec![("j".to_owned(), 0..50)], "{point}");
        assert_eq!(wal.topic_info("j").unwrap().next_offset, 50, "{point}");
        for offset in 0..50 {
            assert_eq!(
                wal.read("j", offset).unwrap().value(),
                &value("j", offset)[..]
            );
        }
        eventually("the bucket job was never forgotten once answered", || {
            !dir.path().join("staging/.bucket").join(job).exists()
        });
        wal.close().unwrap();
    }
}

#[test]
fn opens_start_from_the_newest_checkpoint() {
    let dir = tempdir();
    let bucket = tempdir();
    let tier = || config(TierConfig::new(file_url(bucket.path())));
    let wal = Wal::open_with(dir.path(), tier()).unwrap();
    let mut next = 0;
    // One delta per flush (a claim first): past version 100.
    while deltas(bucket.path()).len() < 101 {
        append(&wal, "c", next, 1);
        next += 1;
        wal.tier_flush(WAIT).unwrap();
    }
    wal.close().unwrap();
    let manifest = bucket.path().join("_tidelog");
    let hint = std::fs::read_to_string(manifest.join("last_checkpoint")).unwrap();
    assert_eq!(hint, "TLHINT1 100\n");
    let checkpoint = manifest.join(format!("checkpoint/{:020}.checkpoint", 100));
    assert!(checkpoint.exists());

    // Without the deltas the checkpoint covers, an open reads the checkpoint and the rest.
    let kept = tempdir();
    for v in 1..=100 {
        let name = format!("{v:020}.delta");
        std::fs::rename(
            manifest.join("manifest").join(&name),
            kept.path().join(&name),
        )
        .unwrap();
    }
    let wal = Wal::open_with(dir.path(), tier()).unwrap();
    append(&wal, "c", next, 1);
    next += 1;
    wal.tier_flush(WAIT).unwrap();
    let status = wal.tier_status().unwrap().unwrap();
    assert!(status.manifest_version > 101, "{status:?}");
    wal.close().unwrap();

    // A damaged checkpoint is not used: with every delta back, the open reads them all; without
    // them, it reports the gap.
    let mut bytes = std::fs::read(&checkpoint).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&checkpoint, &bytes).unwrap();
    assert!(matches!(
        Wal::open_with(dir.path(), tier()),
        Err(Error::TierCorruption { .. })
    ));
    for entry in std::fs::read_dir(kept.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::rename(
            entry.path(),
            manifest.join("manifest").join(entry.file_name()),
        )
        .unwrap();
    }
    let wal = Wal::open_with(dir.path(), tier()).unwrap();
    append(&wal, "c", next, 1);
    wal.tier_flush(WAIT).unwrap();
    check_bucket(bucket.path(), "c", next + 1);
    wal.close().unwrap();
}

#[test]
fn a_remote_log_reads_every_record_from_the_bucket_alone() {
    use tidelog::{Append, RemoteLog};
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    append(&wal, "r", 0, 200);
    let keyed = wal.writer("keyed").unwrap();
    for i in 0..5u64 {
        let key = format!("k{i}");
        let record = Append {
            headers: None,
            key: Some(key.as_bytes()),
            value: b"v",
            timestamp_us: Some(1_000 + i),
        };
        keyed.append_record(record).unwrap();
    }
    wal.tier_flush(WAIT).unwrap();

    let remote = RemoteLog::open(&tier).unwrap();
    assert_eq!(remote.topics(), vec!["keyed".to_owned(), "r".to_owned()]);
    let info = remote.topic_info("r").unwrap();
    assert_eq!((info.first_offset, info.next_offset), (0, 200));
    assert!(info.objects >= 2, "{info:?}");
    for offset in [0, 1, 63, 64, 65, 150, 199] {
        let record = remote.read("r", offset).unwrap();
        assert_eq!((record.offset, record.value), (offset, value("r", offset)));
    }
    // A range across objects, clamped to what the bucket holds, and its limit.
    let all = remote.read_range("r", 10, u64::MAX, usize::MAX).unwrap();
    assert_eq!(
        all.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (10..200).collect::<Vec<_>>()
    );
    assert_eq!(remote.read_range("r", 60, 70, 3).unwrap().len(), 3);
    assert!(remote.read_range("r", 200, 300, 10).unwrap().is_empty());
    let k = remote.read("keyed", 3).unwrap();
    assert_eq!(
        (k.key.as_deref(), k.timestamp_us),
        (Some(&b"k3"[..]), 1_003)
    );
    assert!(matches!(
        remote.read("r", 200),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        remote.read("nope", 0),
        Err(Error::UnknownTopic { .. })
    ));

    // It sees later uploads once refreshed.
    append(&wal, "r", 200, 10);
    wal.tier_flush(WAIT).unwrap();
    assert_eq!(remote.topic_info("r").unwrap().next_offset, 200);
    remote.refresh().unwrap();
    assert_eq!(remote.read("r", 205).unwrap().value, value("r", 205));
    wal.close().unwrap();

    // A flipped byte in an object is reported, never read as another record.
    let fresh = RemoteLog::open(&tier).unwrap();
    let r = topic_id(bucket.path(), "r");
    let key = &adds(bucket.path())
        .into_iter()
        .find(|a| a.topic == r)
        .unwrap()
        .key;
    let path = bucket.path().join(key);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096 + 50] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        fresh.read("r", 0),
        Err(Error::TierCorruption { .. })
    ));
}

#[test]
fn local_retention_trims_the_disk_and_the_bucket_keeps_everything() {
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()))
        .local_retention(Retention::default().max_bytes(64 * 1024));
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    append(&wal, "l", 0, 400);
    wal.tier_flush(WAIT).unwrap();
    let start = Instant::now();
    while wal.topic_info("l").unwrap().local_first_offset == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "local retention never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The bucket (no retention there) still holds every record.
    check_bucket(bucket.path(), "l", 400);
    let remote = tidelog::RemoteLog::open(&tier).unwrap();
    assert_eq!(remote.read("l", 0).unwrap().value, value("l", 0));

    // The handle's own reads of offsets no longer on disk go to the bucket: the same
    // records, through the same calls, then on from the disk.
    let info = wal.topic_info("l").unwrap();
    assert_eq!(info.first_offset, 0);
    let local_first = info.local_first_offset;
    assert_eq!(wal.read("l", 0).unwrap().value(), &value("l", 0)[..]);
    let mut reader = wal
        .reader_with("l", tidelog::ReaderOptions::default())
        .unwrap();
    assert_eq!(reader.position(), 0);
    for offset in 0..400 {
        let r = reader.next().unwrap().unwrap();
        assert_eq!((r.offset, r.value), (offset, &value("l", offset)[..]));
        assert_eq!(r.location().is_none(), offset < local_first, "{offset}");
    }
    assert!(reader.next().unwrap().is_none());
    // A bulk scan crosses from the bucket to the disk.
    reader.seek(local_first - 3).unwrap();
    let mut seen = Vec::new();
    let n = reader
        .scan(10, |r| {
            seen.push((r.offset, r.value.to_vec()));
            true
        })
        .unwrap();
    assert_eq!(n, 10);
    assert_eq!(
        seen,
        (local_first - 3..local_first + 7)
            .map(|o| (o, value("l", o)))
            .collect::<Vec<_>>()
    );
    // A group's commits below the disk's first offset hold.
    let mut grouped = wal
        .reader_with(
            "l",
            tidelog::ReaderOptions::group("g").start(StartPosition::Earliest),
        )
        .unwrap();
    let batch = grouped.next_batch(5, u64::MAX).unwrap();
    assert_eq!(
        batch.iter().map(|r| r.offset()).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    assert_eq!(batch[4].value(), &value("l", 4)[..]);
    grouped.commit().unwrap();
    drop(grouped);
    let resumed = wal.reader("l", "g").unwrap();
    assert_eq!(resumed.position(), 5);
    // Seek by time reaches the bucket's records too (appends carry their clock).
    let mut timed = wal
        .reader_with("l", tidelog::ReaderOptions::default())
        .unwrap();
    assert_eq!(timed.seek_time(0).unwrap(), 0);
    assert!(timed.seek(local_first - 1).is_ok());
    assert_eq!(
        timed.next_record().unwrap().unwrap().offset(),
        local_first - 1
    );
    wal.close().unwrap();

    // The local copy keeps no more than the log: a local limit above the retention's, or
    // a non-positive one, is refused.
    let refused = |cfg: Config| {
        assert!(matches!(
            Wal::open_with(dir.path(), cfg),
            Err(Error::InvalidArgument { .. })
        ));
    };
    let local = |r: Retention| TierConfig::new(file_url(bucket.path())).local_retention(r);
    refused(
        config(local(Retention::default().max_age_ms(10_000)))
            .retention(Retention::default().max_age_ms(1_000)),
    );
    refused(
        config(local(Retention::default().max_bytes(1 << 30)))
            .topic_retention("l", Retention::default().max_bytes(1 << 20)),
    );
    refused(config(local(Retention::default().max_bytes(0))));
}

#[test]
fn a_tiered_directory_is_not_opened_for_writing_without_its_tier() {
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    let wal = Wal::open_with(
        dir.path(),
        config(tier).retention(Retention::default().max_bytes(64 * 1024)),
    )
    .unwrap();
    append(&wal, "t", 0, 300);
    wal.close().unwrap();
    // Its reclaim would drop extents the bucket lacks: refused, naming the way out.
    let plain = geometry(16, 64 * 1024).retention(Retention::default().max_bytes(64 * 1024));
    match Wal::open_with(dir.path(), plain.clone()) {
        Err(Error::InvalidArgument { name, reason }) => {
            assert_eq!(name, "tier");
            assert!(reason.contains("TIER"), "{reason}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // Reading needs no tier; removing TIER stops uploading for good.
    let ro = Wal::open_read_only_with(dir.path(), plain.clone()).unwrap();
    assert_eq!(ro.topic_info("t").unwrap().next_offset, 300);
    drop(ro);
    std::fs::remove_file(dir.path().join("TIER")).unwrap();
    Wal::open_with(dir.path(), plain).unwrap().close().unwrap();
}

#[test]
fn opening_from_inside_an_async_runtime_is_an_error_not_a_panic() {
    let dir = tempdir();
    let bucket = tempdir();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let opened = rt.block_on(async {
        Wal::open_with(dir.path(), config(TierConfig::new(file_url(bucket.path()))))
    });
    assert!(
        matches!(opened, Err(Error::InvalidArgument { .. })),
        "{opened:?}"
    );
}

#[test]
fn a_file_bucket_directory_need_not_exist_yet() {
    let dir = tempdir();
    let bucket = tempdir();
    let fresh = bucket.path().join("not/there/yet");
    let tier = TierConfig::new(file_url(&fresh));
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    append(&wal, "t", 0, 100);
    wal.tier_flush(WAIT).unwrap();
    check_bucket(&fresh, "t", 100);
    wal.close().unwrap();
    // A reader of a bucket nobody wrote yet sees no topic.
    let empty = tidelog::RemoteLog::open(&TierConfig::new(file_url(&bucket.path().join("none"))));
    assert_eq!(empty.unwrap().topics(), Vec::<String>::new());
}

#[test]
fn a_remote_reader_seeks_by_offset_and_time_and_reads_ahead_across_objects() {
    use tidelog::{Append, ReaderOptions, RemoteLog, StartPosition};
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    let w = wal.writer("t").unwrap();
    // Timestamps 10 apart, so each record has its own.
    for i in 0..1_000u64 {
        let v = value("t", i);
        let id = i.to_le_bytes();
        let headers = if i % 4 == 1 {
            tidelog::Headers::from_pairs([("id", Some(&id[..])), ("none", None)]).unwrap()
        } else {
            tidelog::Headers::new()
        };
        let record = Append {
            key: (i % 3 == 0).then_some(&b"k"[..]),
            value: &v,
            timestamp_us: Some(1_000_000 + 10 * i),
            headers: headers.block(),
        };
        assert_eq!(w.append_record(record).unwrap(), i);
    }
    wal.tier_flush(WAIT).unwrap();
    let remote = RemoteLog::open(&tier).unwrap();
    let info = remote.topic_info("t").unwrap();
    assert!(info.objects > 2 * tidelog::READAHEAD_OBJECTS, "{info:?}");
    let next = info.next_offset;

    // Every record, in order, through objects fetched ahead: the same as the local reader.
    let mut local = wal.reader_with("t", ReaderOptions::default()).unwrap();
    let mut reader = remote.reader_with("t", &ReaderOptions::default()).unwrap();
    for offset in 0..next {
        let r = reader.next().unwrap().unwrap();
        let l = local.next_record().unwrap().unwrap();
        assert_eq!(r.offset, offset);
        assert_eq!(
            (r.offset, r.timestamp_us, r.key.as_deref(), &r.value[..]),
            (l.offset(), l.timestamp_us(), l.key(), l.value())
        );
        let local_headers: Vec<_> = l
            .headers()
            .map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(r.headers, local_headers);
        assert_eq!(r.headers.len(), if offset % 4 == 1 { 2 } else { 0 });
    }
    assert_eq!(reader.next().unwrap(), None);
    assert_eq!(reader.lag().unwrap(), 0);

    // Seeks, back and forward, land on the record asked for.
    for offset in [next - 1, 3, 500, 499, 0, 777] {
        reader.seek(offset).unwrap();
        assert_eq!(reader.next().unwrap().unwrap().value, value("t", offset));
        assert_eq!(reader.position(), offset + 1);
    }
    assert!(matches!(
        reader.seek(next + 1),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert_eq!(reader.seek_time(1_000_000 + 10 * 321 - 5).unwrap(), 321);
    assert_eq!(reader.next().unwrap().unwrap().offset, 321);
    assert_eq!(reader.seek_time(0).unwrap(), 0);
    assert_eq!(reader.seek_time(u64::MAX).unwrap(), next);
    assert_eq!(reader.next().unwrap(), None);

    // A batch stops at its byte budget, but always holds one record.
    reader.seek(10).unwrap();
    let batch = reader.next_batch(100, 2_000).unwrap();
    assert_eq!(batch.iter().map(|r| r.offset).collect::<Vec<_>>(), [10, 11]);
    assert_eq!(reader.next_batch(5, 1).unwrap().len(), 1);

    // Starts, and what a bucket cannot give a reader yet.
    let at = |start| remote.reader_with("t", &ReaderOptions::default().start(start));
    assert_eq!(at(StartPosition::Latest).unwrap().position(), next);
    assert_eq!(at(StartPosition::Committed).unwrap().position(), 0);
    assert!(matches!(
        at(StartPosition::Offset(next + 5)),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        remote.reader_with("t", &ReaderOptions::group("g")),
        Err(Error::InvalidArgument { name: "group", .. })
    ));
    assert!(matches!(
        remote.reader_with("nope", &ReaderOptions::default()),
        Err(Error::UnknownTopic { .. })
    ));

    // A waiting reader sees a later upload once the manifest is read again.
    let mut tail = at(StartPosition::Latest).unwrap();
    let until = Instant::now() + Duration::from_millis(50);
    assert!(!tail.wait_for_records(until).unwrap());
    assert!(Instant::now() >= until);
    append(&wal, "t", 1_000, 10);
    wal.tier_flush(WAIT).unwrap();
    assert!(
        tail.wait_for_records(Instant::now() + Duration::from_secs(10))
            .unwrap()
    );
    assert_eq!(tail.next().unwrap().unwrap().offset, next);
    wal.close().unwrap();

    // Damage in an object read ahead is reported at that object's records, not before.
    let t = topic_id(bucket.path(), "t");
    let objects: Vec<Added> = adds(bucket.path())
        .into_iter()
        .filter(|a| a.topic == t)
        .collect();
    let damaged = &objects[3];
    let path = bucket.path().join(&damaged.key);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096 + 100] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let fresh = RemoteLog::open(&tier).unwrap();
    let mut reader = fresh.reader_with("t", &ReaderOptions::default()).unwrap();
    let mut read = 0;
    let err = loop {
        match reader.next() {
            Ok(Some(r)) => {
                assert_eq!(r.offset, read);
                read += 1;
            }
            Ok(None) => panic!("the damage was never reported"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::TierCorruption { .. }), "{err}");
    assert!(read >= objects[2].first + objects[2].records - 1, "{read}");
    assert!(read < damaged.first + damaged.records, "{read}");
    // The reader stays put: the same error again, never a skipped record.
    assert!(matches!(reader.next(), Err(Error::TierCorruption { .. })));
    assert_eq!(reader.position(), read);
}

/// Waits up to 30 s for `done`.
pub(crate) fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The extent objects under `bucket`, by key.
pub(crate) fn object_files(bucket: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                let key = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                // `NAME#N`: a put under way in a `file://` bucket, not an object yet.
                if !key.contains('#') {
                    out.push(key);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&bucket.join("topics"), bucket, &mut out);
    out.sort();
    out
}

#[test]
fn retention_trims_the_bucket_and_the_sweep_deletes_what_the_manifest_drops() {
    use tidelog::RemoteLog;
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path())).delete_delay_ms(0);
    // An object a crashed pass put and never committed, and a file that is not an object.
    let stray = bucket.path().join("topics/9");
    std::fs::create_dir_all(&stray).unwrap();
    std::fs::write(
        stray.join("00000000000000000000-00000000000000000001.extent"),
        b"x",
    )
    .unwrap();
    std::fs::write(stray.join("notes.txt"), b"kept").unwrap();
    let cfg = config(tier.clone()).retention(Retention::default().max_bytes(128 * 1024));
    let wal = Wal::open_with(dir.path(), cfg).unwrap();
    append(&wal, "r", 0, 100);
    wal.tier_flush(WAIT).unwrap();
    // A reader of the bucket as it is now, before retention trims it.
    let early = RemoteLog::open(&tier).unwrap();
    assert_eq!(early.topic_info("r").unwrap().first_offset, 0);
    append(&wal, "r", 100, 900);
    wal.tier_flush(WAIT).unwrap();

    eventually("the bucket was never trimmed", || {
        RemoteLog::open(&tier)
            .unwrap()
            .topic_info("r")
            .unwrap()
            .first_offset
            > 0
    });
    let remote = RemoteLog::open(&tier).unwrap();
    let info = remote.topic_info("r").unwrap();
    assert_eq!(info.next_offset, 1_000);
    // About the limit is kept: each object holds about 64 KiB of records.
    assert!(info.bytes <= 128 * 1024 + 3 * 64 * 1024, "{info:?}");
    assert!(matches!(
        remote.read("r", info.first_offset - 1),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert_eq!(
        remote.read("r", info.first_offset).unwrap().value,
        value("r", info.first_offset)
    );
    // Every object the manifest no longer names goes, the stray one too; the rest stay.
    let named: Vec<String> = {
        let r = topic_id(bucket.path(), "r");
        let mut keys: Vec<String> = adds(bucket.path())
            .into_iter()
            .filter(|a| a.topic == r && a.first >= info.first_offset)
            .map(|a| a.key)
            .collect();
        keys.push("topics/9/notes.txt".into());
        keys.sort();
        keys
    };
    eventually("the sweep never deleted the dropped objects", || {
        object_files(bucket.path()) == named
    });
    // The handle's own view: the disk holds no more than the bucket does.
    eventually("the disk kept what the bucket dropped", || {
        wal.topic_info("r").unwrap().local_first_offset >= info.first_offset
    });
    assert_eq!(wal.topic_info("r").unwrap().first_offset, info.first_offset);
    // A reader of the old manifest finds its objects gone: out of range, not damage.
    assert!(matches!(
        early.read("r", 0),
        Err(Error::OffsetOutOfRange { .. })
    ));
    wal.close().unwrap();
}

#[test]
fn dropped_objects_stay_for_the_delete_delay() {
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    assert_eq!(
        tier.delete_delay(),
        Duration::from_millis(tidelog::TIER_DELETE_DELAY_DEFAULT_MS)
    );
    let cfg = config(tier.clone()).retention(Retention::default().max_bytes(64 * 1024));
    let wal = Wal::open_with(dir.path(), cfg).unwrap();
    append(&wal, "d", 0, 600);
    wal.tier_flush(WAIT).unwrap();
    eventually("the bucket was never trimmed", || {
        tidelog::RemoteLog::open(&tier)
            .unwrap()
            .topic_info("d")
            .unwrap()
            .first_offset
            > 0
    });
    // Dropped from the manifest, but a minute from deletion: a reader of an older manifest
    // still finds every object.
    std::thread::sleep(Duration::from_millis(300));
    let d = topic_id(bucket.path(), "d");
    let uploaded = adds(bucket.path())
        .into_iter()
        .filter(|a| a.topic == d)
        .count();
    assert_eq!(object_files(bucket.path()).len(), uploaded);
    wal.close().unwrap();
}

#[test]
fn tail_upload_ms_puts_an_open_extent_in_the_bucket() {
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path())).tail_upload_ms(100);
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    // Far less than an extent: without tail_upload_ms it would wait for more records.
    append(&wal, "tail", 0, 3);
    let remote = tidelog::RemoteLog::open(&tier).unwrap();
    let mut reader = remote
        .reader_with("tail", &tidelog::ReaderOptions::default())
        .unwrap_or_else(|_| {
            eventually("the topic never reached the bucket", || {
                remote.refresh().unwrap();
                remote.topic_info("tail").is_ok()
            });
            remote
                .reader_with("tail", &tidelog::ReaderOptions::default())
                .unwrap()
        });
    assert!(
        reader
            .wait_for_records(Instant::now() + Duration::from_secs(20))
            .unwrap()
    );
    let got = reader.next_batch(10, u64::MAX).unwrap();
    assert_eq!(got.len(), 3);
    append(&wal, "tail", 3, 2);
    assert!(
        reader
            .wait_for_records(Instant::now() + Duration::from_secs(20))
            .unwrap()
    );
    assert_eq!(reader.next().unwrap().unwrap().value, value("tail", 3));
    assert!(matches!(
        Wal::open_with(
            tempdir().path(),
            config(TierConfig::new(file_url(bucket.path())).tail_upload_ms(0))
        ),
        Err(Error::InvalidArgument { .. })
    ));
    wal.close().unwrap();
}

/// Stages part `part` of `job` in a directory of its own (a task's) with `n` records of
/// topic `topic` from `from`, and puts it in the bucket.
fn stage_in_bucket(tier: &TierConfig, job: &str, part: &str, topic: &str, from: u64, n: u64) {
    let task = staged_part(job, part, topic, from, n);
    tidelog::tier_stage::upload_part(tier, task.path(), job, part).unwrap();
}

/// A task's directory holding part `part` of `job`: records `from..from + n` of `topic`.
pub(crate) fn staged_part(
    job: &str,
    part: &str,
    topic: &str,
    from: u64,
    n: u64,
) -> tempfile::TempDir {
    let task = tempdir();
    let mut writer = tidelog::StagedWriter::create(task.path(), job, part).unwrap();
    let values: Vec<Vec<u8>> = (from..from + n).map(|i| value(topic, i)).collect();
    let records: Vec<tidelog::Append<'_>> = values
        .iter()
        .map(|v| tidelog::Append {
            headers: None,
            key: None,
            value: v,
            timestamp_us: None,
        })
        .collect();
    writer.append(topic, &records).unwrap();
    writer.finish().unwrap();
    task
}

/// The first segment a job's part put under `bucket`.
fn staged_segment(bucket: &Path, job: &str) -> PathBuf {
    std::fs::read_dir(bucket.join("_tidelog/staging").join(job))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.to_string_lossy()
                .ends_with(tidelog::stage::SEGMENT_SUFFIX)
        })
        .unwrap()
}

/// Flips a bit inside the first record of a job's staged segment in the bucket.
fn damage_staged_segment(bucket: &Path, job: &str) {
    let segment = staged_segment(bucket, job);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[4096 + 4096 + 60] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
}

#[test]
fn jobs_staged_in_the_bucket_are_published_by_the_producer_exactly_once() {
    use tidelog::tier_stage::{self, Commit};
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    append(&wal, "s", 0, 5);

    // Tasks stage two parts; the driver commits them; the producer publishes them in order.
    stage_in_bucket(&tier, "job1", "p0", "s", 5, 40);
    stage_in_bucket(&tier, "job1", "p1", "s", 45, 30);
    assert!(matches!(
        tier_stage::commit(&tier, "job1", &["p0", "nope"], None),
        Err(Error::InvalidArgument { name: "parts", .. })
    ));
    assert_eq!(
        tier_stage::commit(&tier, "job1", &["p0", "p1"], None).unwrap(),
        Commit::Recorded
    );
    let ranges = tier_stage::wait_published(&tier, "job1", Duration::from_secs(30)).unwrap();
    assert_eq!(ranges, vec![("s".to_owned(), 5..75)]);
    for offset in 0..75 {
        assert_eq!(
            wal.read("s", offset).unwrap().value(),
            &value("s", offset)[..]
        );
    }
    // The parts are gone from the bucket; a retried commit is answered, not redone.
    let staged: Vec<String> = std::fs::read_dir(bucket.path().join("_tidelog/staging/job1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut staged = staged;
    staged.sort();
    assert_eq!(staged, ["COMMIT", "PUBLISHED"]);
    assert_eq!(
        tier_stage::commit(&tier, "job1", &["p0", "p1"], None).unwrap(),
        Commit::Recorded
    );
    assert_eq!(
        tier_stage::wait_published(&tier, "job1", Duration::from_secs(30)).unwrap(),
        ranges
    );
    assert_eq!(wal.topic_info("s").unwrap().next_offset, 75);
    assert!(matches!(
        tier_stage::commit(&tier, "job1", &["p1"], None),
        Err(Error::InvalidArgument { .. })
    ));

    // A streaming sink's micro-batch: published once; a replay with other parts is told.
    stage_in_bucket(&tier, "sink-b0", "a", "s", 75, 10);
    assert_eq!(
        tier_stage::commit(&tier, "sink-b0", &["a"], Some(("sink", 0))).unwrap(),
        Commit::Recorded
    );
    tier_stage::wait_published(&tier, "sink-b0", Duration::from_secs(30)).unwrap();
    assert_eq!(tier_stage::sink_batch(&tier, "sink").unwrap(), Some(0));
    stage_in_bucket(&tier, "sink-b0", "b", "s", 75, 10);
    assert_eq!(
        tier_stage::commit(&tier, "sink-b0", &["b"], Some(("sink", 0))).unwrap(),
        Commit::Replayed
    );
    tier_stage::abort_parts(&tier, "sink-b0", &["b"]).unwrap();
    assert_eq!(wal.topic_info("s").unwrap().next_offset, 85);

    // A job whose part fails its checks is set aside, and its committer told why.
    stage_in_bucket(&tier, "bad", "p", "s", 0, 10);
    damage_staged_segment(bucket.path(), "bad");
    tier_stage::commit(&tier, "bad", &["p"], None).unwrap();
    let err = tier_stage::wait_published(&tier, "bad", Duration::from_secs(30)).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { name: "job", .. }),
        "{err}"
    );
    assert_eq!(wal.topic_info("s").unwrap().next_offset, 85);
    // Committing it again says so too; a set-aside job can be aborted.
    assert!(matches!(
        tier_stage::commit(&tier, "bad", &["p"], None),
        Err(Error::InvalidArgument { name: "job", .. })
    ));
    tier_stage::abort(&tier, "bad").unwrap();
    assert!(
        std::fs::read_dir(bucket.path().join("_tidelog/staging/bad"))
            .map_or(true, |mut d| d.next().is_none())
    );
    // A sink's replay of a batch whose first commit was set aside fails, never passes.
    stage_in_bucket(&tier, "sink-b1", "x", "s", 0, 3);
    damage_staged_segment(bucket.path(), "sink-b1");
    tier_stage::commit(&tier, "sink-b1", &["x"], Some(("sink", 1))).unwrap();
    assert!(tier_stage::wait_published(&tier, "sink-b1", Duration::from_secs(30)).is_err());
    stage_in_bucket(&tier, "sink-b1", "y", "s", 0, 3);
    assert!(matches!(
        tier_stage::commit(&tier, "sink-b1", &["y"], Some(("sink", 1))),
        Err(Error::InvalidArgument { name: "job", .. })
    ));
    assert_eq!(tier_stage::sink_batch(&tier, "sink").unwrap(), Some(0));

    // An uncommitted job aborts; a committed one is the producer's.
    stage_in_bucket(&tier, "dropped", "p", "s", 0, 3);
    tier_stage::abort(&tier, "dropped").unwrap();
    assert!(
        !bucket.path().join("_tidelog/staging/dropped").exists()
            || std::fs::read_dir(bucket.path().join("_tidelog/staging/dropped"))
                .unwrap()
                .next()
                .is_none()
    );
    assert!(matches!(
        tier_stage::abort(&tier, "job1"),
        Err(Error::InvalidArgument { .. })
    ));
    wal.close().unwrap();

    // With no producer attached, the commit's wait ends and says why.
    let lonely = tempdir();
    let alone = TierConfig::new(file_url(lonely.path()));
    stage_in_bucket(&alone, "j", "p", "s", 0, 3);
    tier_stage::commit(&alone, "j", &["p"], None).unwrap();
    match tier_stage::wait_published(&alone, "j", Duration::from_millis(300)) {
        Err(Error::TierTimeout { waiting_for, .. }) => {
            assert!(waiting_for.contains("no producer"), "{waiting_for}");
        }
        other => panic!("expected TierTimeout, got {other:?}"),
    }
}

#[test]
fn deltas_two_checkpoints_cover_are_pruned_and_readers_behind_start_again_from_one() {
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path())).delete_delay_ms(0);
    let cfg = config(tier.clone()).sync_interval_ms(5);
    let wal = Wal::open_with(dir.path(), cfg).unwrap();
    let manifest = bucket.path().join("_tidelog/manifest");
    let count = |dir: &Path| std::fs::read_dir(dir).map_or(0, |d| d.count());
    let mut next = 0;
    append(&wal, "c", next, 1);
    next += 1;
    wal.tier_flush(WAIT).unwrap();
    // A reader that read the manifest early, and stays behind.
    let behind = tidelog::RemoteLog::open(&tier).unwrap();
    let early = behind.version();
    // One delta per flush: past two checkpoints (100 and 200).
    while wal.tier_status().unwrap().unwrap().manifest_version < 205 {
        append(&wal, "c", next, 1);
        next += 1;
        wal.tier_flush(WAIT).unwrap();
    }
    eventually(
        "the deltas under the older checkpoint were never pruned",
        || !manifest.join(format!("{:020}.delta", 100)).exists(),
    );
    assert!(manifest.join(format!("{:020}.delta", 101)).exists());
    assert!(count(&manifest) < 110, "{} deltas left", count(&manifest));
    let checkpoints = bucket.path().join("_tidelog/checkpoint");
    assert!(checkpoints.join(format!("{:020}.checkpoint", 100)).exists());
    assert!(checkpoints.join(format!("{:020}.checkpoint", 200)).exists());
    // The reader behind starts again from the newest checkpoint, and reads every record.
    behind.refresh().unwrap();
    assert!(behind.version() > early.max(200));
    assert_eq!(behind.topic_info("c").unwrap().next_offset, next);
    assert_eq!(behind.read("c", 0).unwrap().value, value("c", 0));
    // A fresh open reads the newest checkpoint and what follows it.
    let fresh = tidelog::RemoteLog::open(&tier).unwrap();
    assert_eq!(fresh.topic_info("c").unwrap().next_offset, next);
    wal.close().unwrap();
    // A damaged newest checkpoint: opens fall back on the older one and the deltas after it.
    let newest = checkpoints.join(format!("{:020}.checkpoint", 200));
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&newest, &bytes).unwrap();
    let fallback = tidelog::RemoteLog::open(&tier).unwrap();
    assert_eq!(fallback.topic_info("c").unwrap().next_offset, next);
}

#[test]
fn a_staged_part_bigger_than_one_put_goes_up_in_parts_and_back_whole() {
    use tidelog::tier_stage;
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path()));
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    // 24 MiB of records in one part: its segment goes up as a multipart upload.
    let task = tempdir();
    let mut writer = tidelog::StagedWriter::create(task.path(), "big", "p").unwrap();
    let value = |i: u64| -> Vec<u8> {
        let mut v = vec![(i % 251) as u8; 48 * 1024];
        v[..8].copy_from_slice(&i.to_le_bytes());
        v
    };
    let values: Vec<Vec<u8>> = (0..512).map(value).collect();
    let records: Vec<tidelog::Append<'_>> = values
        .iter()
        .map(|v| tidelog::Append {
            headers: None,
            key: None,
            value: v,
            timestamp_us: None,
        })
        .collect();
    writer.append("big", &records).unwrap();
    writer.finish().unwrap();
    tier_stage::upload_part(&tier, task.path(), "big", "p").unwrap();
    let segment = staged_segment(bucket.path(), "big");
    assert!(std::fs::metadata(&segment).unwrap().len() > 16 << 20);
    tier_stage::commit(&tier, "big", &["p"], None).unwrap();
    let ranges = tier_stage::wait_published(&tier, "big", Duration::from_secs(60)).unwrap();
    assert_eq!(ranges, vec![("big".to_owned(), 0..512)]);
    for i in [0, 1, 255, 511] {
        assert_eq!(wal.read("big", i).unwrap().value(), &value(i)[..]);
    }
    wal.close().unwrap();
}

#[test]
fn delete_records_trims_the_bucket_below_the_start() {
    use tidelog::RemoteLog;
    let dir = tempdir();
    let bucket = tempdir();
    let tier = TierConfig::new(file_url(bucket.path())).delete_delay_ms(0);
    let wal = Wal::open_with(dir.path(), config(tier.clone())).unwrap();
    append(&wal, "d", 0, 600);
    wal.tier_flush(WAIT).unwrap();
    assert_eq!(
        RemoteLog::open(&tier)
            .unwrap()
            .topic_info("d")
            .unwrap()
            .first_offset,
        0
    );
    assert_eq!(wal.delete_records("d", 450).unwrap(), 450);
    // The handle's reads stop at the start at once, the bucket's below it too.
    assert!(matches!(
        wal.read("d", 449),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert_eq!(wal.read("d", 450).unwrap().value(), value("d", 450));
    // The bucket drops the objects wholly below the start at the next round.
    eventually("the bucket was never trimmed to the start", || {
        RemoteLog::open(&tier)
            .unwrap()
            .topic_info("d")
            .unwrap()
            .first_offset
            > 0
    });
    let first = RemoteLog::open(&tier)
        .unwrap()
        .topic_info("d")
        .unwrap()
        .first_offset;
    assert!(first <= 450, "trimmed past the start: {first}");
    assert_eq!(wal.topic_info("d").unwrap().first_offset, 450);
    wal.close().unwrap();
}

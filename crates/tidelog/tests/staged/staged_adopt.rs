//! Adopted segments: a publish makes each large staged segment a data file of its own without
//! copying a record, copies small ones, resumes exactly once after a failure at any of its
//! I/O steps, and the adopted files live on like any other (reads, seeks, restarts,
//! read-only handles, deletion once consumed).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::{self, BLOCK, geometry, tempdir};
use tidelog::format;
use tidelog::internals;
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::stage::{self, StagedWriter};
use tidelog::{Append, Config, Error, ReaderOptions, RecordFormat, StartPosition, Wal};

/// Segments of three 64 KiB blocks, so a few hundred KiB make several segments.
const SEGMENT_BLOCKS: u32 = 3;
/// Records per append call: topics interleave in the segments.
const CHUNK: u64 = 13;

fn adopting() -> Config {
    geometry(8, BLOCK).staged_adopt_bytes_min(1)
}

/// Record `i` of `topic` in `part`: 150 to 399 bytes naming all three.
fn value(part: &str, topic: &str, i: u64) -> Vec<u8> {
    let mut v = format!("{part}/{topic}/{i:06}/").into_bytes();
    let len = 150 + (i * 37 % 250) as usize;
    let seed = v.iter().fold(i, |h, &b| h.wrapping_mul(131) + u64::from(b));
    v.extend((v.len()..len).map(|k| (seed.wrapping_add(k as u64 * 7) % 251) as u8));
    v
}

fn key(i: u64) -> Option<Vec<u8>> {
    (!i.is_multiple_of(3)).then(|| format!("k{i}").into_bytes())
}

fn timestamp(i: u64) -> u64 {
    1_000 + i
}

/// Stages `n` records for each of `topics` into `part`, the topics taking turns.
fn stage(dir: &Path, job: &str, part: &str, topics: &[&str], n: u64) -> u64 {
    stage_as(dir, job, part, topics, n, RecordFormat::default())
}

/// [`stage`] into segments of record format `staged`.
fn stage_as(
    dir: &Path,
    job: &str,
    part: &str,
    topics: &[&str],
    n: u64,
    staged: RecordFormat,
) -> u64 {
    let mut w = StagedWriter::create(dir, job, part)
        .expect("create part")
        .segment_geometry(BLOCK, SEGMENT_BLOCKS)
        .expect("geometry")
        .record_format(staged)
        .expect("record format");
    for from in (0..n).step_by(CHUNK as usize) {
        for topic in topics {
            let values: Vec<(Option<Vec<u8>>, Vec<u8>)> = (from..(from + CHUNK).min(n))
                .map(|i| (key(i), value(part, topic, i)))
                .collect();
            let records: Vec<Append<'_>> = values
                .iter()
                .zip(from..)
                .map(|((k, v), i)| Append {
                    headers: None,
                    key: k.as_deref(),
                    value: v,
                    timestamp_us: Some(timestamp(i)),
                })
                .collect();
            w.append(topic, &records).expect("stage");
        }
    }
    w.finish().expect("finish").records
}

/// `(offset, timestamp, key, value)` of every record of `topic`, checksums verified.
type Row = (u64, u64, Option<Vec<u8>>, Vec<u8>);

fn rows(wal: &Wal, topic: &str) -> Vec<Row> {
    let reader = || {
        let options = ReaderOptions::default().start(StartPosition::Earliest);
        wal.reader_with(topic, options).expect("reader")
    };
    let row = |r: &tidelog::RecordRef<'_>| -> Row {
        let key = r.key.map(<[u8]>::to_vec);
        (r.offset, r.timestamp_us, key, r.value.to_vec())
    };
    let mut out = Vec::new();
    let mut next = reader();
    while let Some(r) = next.next().expect("read") {
        out.push(row(&r));
    }
    // The bulk read (a batch frame walked entry after entry, offsets made relative in an
    // adopted extent) yields the same rows.
    let mut scanned = Vec::new();
    let mut scanner = reader();
    while scanner
        .scan(333, |r| {
            scanned.push(row(r));
            true
        })
        .expect("scan")
        > 0
    {}
    assert_eq!(scanned, out, "scan and next of {topic}");
    out
}

/// What `topic` should hold from offset `first`: the parts' records in order.
fn expected(first: u64, parts: &[(&str, u64)], topic: &str) -> Vec<Row> {
    parts
        .iter()
        .flat_map(|&(part, n)| (0..n).map(move |i| (part, i)))
        .zip(first..)
        .map(|((part, i), offset)| (offset, timestamp(i), key(i), value(part, topic, i)))
        .collect()
}

/// Data files whose header says they were adopted.
fn adopted_files(dir: &Path) -> Vec<PathBuf> {
    common::data_files(dir)
        .into_iter()
        .filter(|p| {
            let bytes = std::fs::read(p).expect("read data file");
            format::version_relative(format::get_u32(&bytes, format::FH_VERSION))
        })
        .collect()
}

fn segments_of(dir: &Path, job: &str) -> BTreeSet<String> {
    let job_dir = dir.join(stage::STAGING_DIR).join(job);
    std::fs::read_dir(job_dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(stage::SEGMENT_SUFFIX))
                .collect()
        })
        .unwrap_or_default()
}

/// The records before a job: small timestamps, so seeks by time land in the job.
fn append_before(wal: &Wal, n: u64) {
    for i in 0..n {
        wal.append_record(
            "a",
            Append {
                headers: None,
                key: None,
                value: format!("before {i}").as_bytes(),
                timestamp_us: Some(10 + i),
            },
        )
        .expect("append");
    }
}

fn before_rows(n: u64) -> Vec<Row> {
    (0..n)
        .map(|i| (i, 10 + i, None, format!("before {i}").into_bytes()))
        .collect()
}

/// Everything `check` expects of the standard job: three records before it in `a`, then
/// `p0` (topics a and b, 700 each) and `p1` (a, 300).
fn check_standard(wal: &Wal, what: &str) {
    let mut a = before_rows(3);
    a.extend(expected(3, &[("p0", 700), ("p1", 300)], "a"));
    same_rows(&rows(wal, "a"), &a, &format!("{what}: topic a"));
    same_rows(
        &rows(wal, "b"),
        &expected(0, &[("p0", 700)], "b"),
        &format!("{what}: topic b"),
    );
}

/// Compares two topics' rows, naming the first offset that differs (not dumping them).
fn same_rows(got: &[Row], want: &[Row], what: &str) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!(
            "{what}: row {i} differs: offset {} vs {}",
            got[i].0, want[i].0
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: record count");
}

fn stage_standard(dir: &Path) {
    stage_standard_as(dir, RecordFormat::default());
}

fn stage_standard_as(dir: &Path, staged: RecordFormat) {
    assert_eq!(stage_as(dir, "job", "p0", &["a", "b"], 700, staged), 1400);
    assert_eq!(stage_as(dir, "job", "p1", &["a"], 300, staged), 300);
}

/// A directory kept readable by builds before batch frames (`RecordFormat::V1`) copies
/// segments of batch frames rather than adopting files of a version those builds refuse.
#[test]
fn a_directory_of_record_format_v1_copies_segments_of_batch_frames() {
    let dir = tempdir();
    let config = adopting().record_format(RecordFormat::V1);
    let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
    append_before(&wal, 3);
    stage_standard(dir.path());
    wal.commit_staged("job", &["p0", "p1"]).expect("commit");
    assert!(adopted_files(dir.path()).is_empty(), "nothing adopted");
    for path in common::data_files(dir.path()) {
        let bytes = std::fs::read(&path).expect("read data file");
        assert_eq!(
            format::get_u32(&bytes, format::FH_VERSION),
            format::VERSION_ABSOLUTE,
            "{path:?}"
        );
    }
    check_standard(&wal, "copied");
    wal.close().expect("close");
    let wal = Wal::open_with(dir.path(), config).expect("reopen");
    check_standard(&wal, "copied, after a restart");
}

#[test]
fn large_segments_become_data_files_and_read_like_any_other() {
    adopt_standard(RecordFormat::V2, format::VERSION_RELATIVE_BATCHED);
}

/// Segments of record frames (staging version 2, as builds before batch frames wrote) are
/// adopted as data files of version 2.
#[test]
fn segments_of_record_frames_are_adopted_as_before() {
    adopt_standard(RecordFormat::V1, format::VERSION_RELATIVE);
}

/// Stages the standard job in `staged` segments, publishes it by adoption into data files
/// of `file_version`, and checks the records through every path that reads them.
fn adopt_standard(staged: RecordFormat, file_version: u32) {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), adopting()).expect("open");
    append_before(&wal, 3);
    stage_standard_as(dir.path(), staged);
    let segments = segments_of(dir.path(), "job");
    assert!(segments.len() >= 3, "several segments: {segments:?}");
    let usage = wal.disk_usage();
    let ranges = wal.commit_staged("job", &["p0", "p1"]).expect("commit");
    assert_eq!(
        ranges,
        vec![("a".to_owned(), 3..1003), ("b".to_owned(), 0..700)]
    );
    assert_eq!(
        adopted_files(dir.path()).len(),
        segments.len(),
        "one data file per segment, none copied"
    );
    for path in adopted_files(dir.path()) {
        let bytes = std::fs::read(&path).expect("read data file");
        assert_eq!(format::get_u32(&bytes, format::FH_VERSION), file_version);
    }
    assert!(!dir.path().join(stage::STAGING_DIR).join("job").exists());
    check_standard(&wal, "after the commit");
    // The adopted files count in the disk account with what they hold on disk.
    let adopted_bytes = common::real_bytes(&adopted_files(dir.path()));
    let after = wal.disk_usage();
    assert_eq!(after.files, usage.files + segments.len() as u64);
    assert!(
        after.bytes >= usage.bytes + adopted_bytes,
        "{usage:?} -> {after:?}"
    );

    // Point reads and seeks land inside adopted extents (their index footers are relative).
    for offset in [3, 4, 250, 702, 703, 1002] {
        let want = &expected(3, &[("p0", 700), ("p1", 300)], "a")[offset as usize - 3];
        let got = wal.read("a", offset).expect("read");
        assert_eq!((got.offset(), got.value()), (want.0, &want.3[..]));
    }
    let mut reader = wal
        .reader_with("a", ReaderOptions::default())
        .expect("reader");
    // p0's timestamps run 1000..1699, p1's 1000..1299: the first at or after 1500 is p0's 500th.
    assert_eq!(reader.seek_time(timestamp(500)).expect("seek"), 3 + 500);
    assert_eq!(reader.seek_time(5_000).expect("seek"), 1003);
    reader.seek(900).expect("seek");
    assert_eq!(reader.next().expect("next").map(|r| r.offset), Some(900));

    // Appends go on after the adopted extents.
    assert_eq!(wal.append("a", b"after").expect("append"), 1003);
    assert_eq!(wal.append("b", b"after").expect("append"), 700);
    let info = wal.topic_info("a").expect("info");
    assert_eq!((info.first_offset, info.next_offset), (0, 1004));
    wal.close().expect("close");

    // A restart recovers them (sealed: trusted, not scanned) and so does a reader elsewhere.
    let wal = Wal::open_with(dir.path(), adopting()).expect("reopen");
    let report = wal.recovery_report();
    assert_eq!(report.dropped_extents + report.torn_tails, 0);
    let ro = Wal::open_read_only_with(dir.path(), adopting()).expect("read-only");
    for handle in [&wal, &ro] {
        let a = rows(handle, "a");
        assert_eq!(a.len(), 1004);
        assert_eq!(a[1003].3, b"after");
        assert_eq!(rows(handle, "b").len(), 701);
    }
}

#[test]
fn segments_written_without_direct_io_are_the_same() {
    // Where the file system refuses O_DIRECT (at open or at the first write), the same
    // page-aligned writes go through the page cache.
    for (point, name) in [
        (points::OPEN_DIRECT, "open"),
        (points::WRITE, "first write"),
    ] {
        let dir = tempdir();
        let faults = FaultStorage::new();
        faults.arm(point, Fault::Once(libc::EINVAL));
        let mut w =
            StagedWriter::create_with_storage(dir.path(), "job", "p0", Arc::new(faults.clone()))
                .expect("create")
                .segment_geometry(BLOCK, SEGMENT_BLOCKS)
                .expect("geometry");
        let values: Vec<Vec<u8>> = (0..700).map(|i| value("p0", "a", i)).collect();
        let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v)).collect();
        w.append("a", &records).expect("stage");
        w.finish().expect("finish");
        assert_eq!(faults.hits(point), 1, "{name}");
        let got = publish_values(dir.path(), adopting(), "a");
        assert!(got == values, "{name}: the records differ");
    }
}

#[test]
fn records_larger_than_the_write_buffer_are_staged_whole() {
    let dir = tempdir();
    let sizes = [10, 5 << 20, 0, 9 << 20, 3000, 4 << 20];
    let values: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| common::payload(i as u64, n))
        .collect();
    let mut w = StagedWriter::create(dir.path(), "job", "p0").expect("create");
    for v in &values {
        w.append("big", &[Append::value(v)]).expect("stage");
    }
    w.finish().expect("finish");
    for config in [
        Config::default(),
        Config::default().staged_adopt_bytes_min(1 << 40),
    ] {
        let run = tempdir();
        common::copy_dir(dir.path(), run.path());
        let got = publish_values(run.path(), config, "big");
        assert!(got == values, "the records differ");
    }
}

/// Publishes part `p0` of job `job` in `dir` and returns the values of `topic`.
fn publish_values(dir: &Path, config: Config, topic: &str) -> Vec<Vec<u8>> {
    let wal = Wal::open_with(dir, config).expect("open");
    wal.commit_staged("job", &["p0"]).expect("commit");
    rows(&wal, topic).into_iter().map(|r| r.3).collect()
}

#[test]
fn small_segments_are_copied_and_a_job_may_mix_both() {
    let dir = tempdir();
    // p0's segments hold about 190 KiB each, p1's last one less: a threshold between them.
    let config = geometry(8, BLOCK).staged_adopt_bytes_min(120 << 10);
    let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
    append_before(&wal, 3);
    stage_standard(dir.path());
    wal.commit_staged("job", &["p0", "p1"]).expect("commit");
    let adopted = adopted_files(dir.path()).len();
    assert!(adopted >= 1, "large segments adopted");
    assert!(
        adopted < segments_before_commit(),
        "small segments copied ({adopted} adopted)"
    );
    check_standard(&wal, "after the commit");
    drop(wal);
    check_standard(
        &Wal::open_with(dir.path(), config).expect("reopen"),
        "after a restart",
    );

    // Nothing is adopted where the default threshold (4 MiB) is above every segment.
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), geometry(8, BLOCK)).expect("open");
    append_before(&wal, 3);
    stage_standard(dir.path());
    wal.commit_staged("job", &["p0", "p1"]).expect("commit");
    assert!(adopted_files(dir.path()).is_empty());
    check_standard(&wal, "after the commit");
}

/// Segments the standard job stages (both parts).
fn segments_before_commit() -> usize {
    let dir = tempdir();
    stage_standard(dir.path());
    segments_of(dir.path(), "job").len()
}

#[test]
fn adoption_behind_a_ring_keeps_the_ring_and_data_files_in_step() {
    // Appends before and after the publish go through the ring; the adopted extents sit
    // between them in the data files, and a reopen replays the ring around them.
    let dir = tempdir();
    let config = adopting().ring(
        tidelog::RingBackend::default()
            .ring(tidelog::RingConfig::default().capacity_bytes(8 << 20)),
    );
    let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
    append_before(&wal, 3);
    stage_standard(dir.path());
    wal.commit_staged("job", &["p0", "p1"]).expect("commit");
    assert!(!adopted_files(dir.path()).is_empty());
    assert_eq!(wal.append("a", b"after").expect("append"), 1003);
    check_standard_with_after(&wal, "ring, before close");
    wal.close().expect("close");
    let wal = Wal::open_with(dir.path(), config).expect("reopen");
    check_standard_with_after(&wal, "ring, after reopen");
}

fn check_standard_with_after(wal: &Wal, what: &str) {
    let mut a = before_rows(3);
    a.extend(expected(3, &[("p0", 700), ("p1", 300)], "a"));
    let got = rows(wal, "a");
    same_rows(&got[..got.len() - 1], &a, what);
    assert_eq!(
        got.last().map(|r| (r.0, r.3.clone())),
        Some((1003, b"after".to_vec()))
    );
}

#[test]
fn a_directory_with_another_index_interval_adopts_all_the_same() {
    // Staged extents keep the footer reserve of the interval they were written with.
    for interval in [512, 1 << 20] {
        let dir = tempdir();
        let config = adopting().index_interval_bytes(interval);
        let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
        append_before(&wal, 3);
        stage_standard(dir.path());
        wal.commit_staged("job", &["p0", "p1"]).expect("commit");
        assert_eq!(adopted_files(dir.path()).len(), segments_before_commit());
        check_standard(&wal, &format!("interval {interval}"));
        drop(wal);
        check_standard(
            &Wal::open_with(dir.path(), config).expect("reopen"),
            &format!("interval {interval}, after a restart"),
        );
    }
}

/// Fails the `skip`-th call (0-based) of `point` during the standard job's publish, then
/// reopens: every record must be there exactly once, in order, and the job gone.
fn publish_with_fault(point: &'static str, skip: u64) -> bool {
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), adopting()).expect("open");
        append_before(&wal, 3);
        wal.close().expect("close");
    }
    stage_standard(dir.path());
    let faults = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), adopting(), Arc::new(faults.clone()))
        .expect("open with faults");
    faults.arm(
        point,
        Fault::After {
            skip,
            errno: libc::EIO,
        },
    );
    let result = wal.commit_staged("job", &["p0", "p1"]);
    // A background thread may meet the fault instead (a spare file's creation): the commit
    // then succeeds, and the checks below hold all the same.
    let fired = faults.hits(point) > 0;
    assert!(result.is_ok() || fired, "{point} #{skip}: {result:?}");
    drop(wal);
    faults.disarm_all();
    let wal = Wal::open_with(dir.path(), adopting()).unwrap_or_else(|e| {
        panic!("{point} #{skip}: reopen after the failure: {e}");
    });
    let job_dir = dir.path().join(stage::STAGING_DIR).join("job");
    if job_dir.join(stage::COMMIT_FILE).exists() && !job_dir.join(stage::FAILED_FILE).exists() {
        // An open publishes a committed job when it is alone in the directory and gets the
        // job's lock. A child that another test of this binary forks meanwhile holds a copy
        // of a lock's descriptor until its exec; the open then leaves the job to
        // housekeeping, which publishes it a tick later.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while job_dir.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    if job_dir.exists() {
        // The failure came before the commit was recorded: nothing of the job is visible,
        // and committing again publishes it.
        assert!(
            !job_dir.join(stage::COMMIT_FILE).exists(),
            "{point} #{skip}: the reopen left a committed job unpublished (commit: {result:?}; \
             FAILED: {:?}; job files: {:?})",
            std::fs::read_to_string(job_dir.join(stage::FAILED_FILE)).ok(),
            std::fs::read_dir(&job_dir)
                .map(|d| d
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect::<Vec<_>>())
                .ok(),
        );
        same_rows(
            &rows(&wal, "a"),
            &before_rows(3),
            &format!("{point} #{skip}"),
        );
        wal.commit_staged("job", &["p0", "p1"])
            .unwrap_or_else(|e| panic!("{point} #{skip}: commit again: {e}"));
    }
    check_standard(&wal, &format!("{point} #{skip}"));
    assert!(!job_dir.exists(), "{point} #{skip}: the job is finished");
    fired
}

#[test]
fn a_publish_failing_at_any_io_step_resumes_exactly_once() {
    for point in [
        points::READ,
        points::WRITE,
        points::SYNC_FILE,
        points::RENAME,
        points::SYNC_DIR,
        points::SYNC_MAP,
        points::REMOVE,
    ] {
        let mut skip = 0;
        while publish_with_fault(point, skip) {
            skip += 1;
        }
        eprintln!("{point}: the publish survived a failure at each of its {skip} calls");
        assert!(
            skip > 0 || point == points::REMOVE,
            "{point} is on the path"
        );
    }
}

#[test]
fn adopted_files_go_once_consumed_and_stay_gone() {
    let dir = tempdir();
    let config = adopting().sync_interval_ms(20);
    let wal = Wal::open_with(dir.path(), config.clone()).expect("open");
    append_before(&wal, 3);
    stage_standard(dir.path());
    wal.commit_staged("job", &["p0", "p1"]).expect("commit");
    let adopted: BTreeSet<PathBuf> = adopted_files(dir.path()).into_iter().collect();
    assert!(!adopted.is_empty());
    // The newest extent of a topic is never dropped: append past the adopted ones.
    wal.append("a", b"after").expect("append");
    wal.append("b", b"after").expect("append");
    wal.flush().expect("flush");
    for (topic, end) in [("a", 1003), ("b", 700)] {
        let mut reader = wal.reader(topic, "billing").expect("reader");
        reader.seek(end).expect("seek");
        reader.commit().expect("commit");
    }
    common::wait_gone(&adopted);
    assert_eq!(wal.topic_info("a").expect("info").first_offset, 1003);
    drop(wal);
    let wal = Wal::open_with(dir.path(), config).expect("reopen");
    assert!(adopted.iter().all(|p| !p.exists()));
    let a = rows(&wal, "a");
    assert_eq!(
        a.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![1003],
        "only the record after the job is left"
    );
    assert_eq!(wal.append("a", b"next").expect("append"), 1004);
}

#[test]
fn damaged_segments_publish_nothing() {
    // A bad slot in a segment to adopt, a bad record in a segment to copy: each found
    // before anything is published.
    for (config, name, at) in [
        (adopting(), "identity slot", format::FILE_HEADER_BYTES + 20),
        (
            geometry(8, BLOCK),
            "record",
            format::FILE_HEADER_BYTES + format::BLOCK_HEADER_BYTES + 60,
        ),
    ] {
        let dir = tempdir();
        stage_standard(dir.path());
        let seg = dir
            .path()
            .join(stage::STAGING_DIR)
            .join("job")
            .join(stage::segment_name("p1", 0));
        common::flip_byte(&seg, at);
        let wal = Wal::open_with(dir.path(), config).expect("open");
        match wal.commit_staged("job", &["p0", "p1"]) {
            Err(Error::Corruption { .. }) => {}
            r => panic!("{name}: expected Corruption, got {r:?}"),
        }
        assert!(wal.topics().is_empty(), "{name}: nothing published");
        assert!(adopted_files(dir.path()).is_empty(), "{name}");
    }
}

#[test]
fn a_part_staged_by_an_older_build_is_refused_by_version() {
    let dir = tempdir();
    stage(dir.path(), "job", "p0", &["a"], 5);
    let manifest = dir
        .path()
        .join(stage::STAGING_DIR)
        .join("job")
        .join(format!("p0{}", stage::PART_SUFFIX));
    std::fs::write(&manifest, b"TLSG\x01\x00\x00\x00").expect("write");
    let wal = Wal::open_with(dir.path(), adopting()).expect("open");
    match wal.commit_staged("job", &["p0"]) {
        Err(Error::UnsupportedVersion {
            found: 1,
            supported,
            ..
        }) if supported == stage::STAGING_VERSION => {}
        r => panic!("expected UnsupportedVersion, got {r:?}"),
    }
}

/// A segment of a staging version newer than this build's is refused by its version (the
/// job is set aside saying so), not reported as damage.
#[test]
fn a_segment_of_a_newer_staging_version_is_refused_by_version() {
    let dir = tempdir();
    stage(dir.path(), "job", "p0", &["a"], 5);
    let job_dir = dir.path().join(stage::STAGING_DIR).join("job");
    let seg = job_dir.join(
        segments_of(dir.path(), "job")
            .pop_first()
            .expect("a segment"),
    );
    let mut bytes = std::fs::read(&seg).expect("read segment");
    let len = internals::SEGMENT_HEADER_LEN;
    let mut header = internals::decode_segment_header(&bytes[..len]).expect("header");
    header.version = stage::STAGING_VERSION + 1;
    bytes[..len].copy_from_slice(&internals::encode_segment_header(&header));
    std::fs::write(&seg, &bytes).expect("write segment");
    let wal = Wal::open_with(dir.path(), adopting()).expect("open");
    match wal.commit_staged("job", &["p0"]) {
        Err(Error::UnsupportedVersion {
            found, supported, ..
        }) if found == stage::STAGING_VERSION + 1 && supported == stage::STAGING_VERSION => {}
        r => panic!("expected UnsupportedVersion, got {r:?}"),
    }
    assert!(wal.topics().is_empty(), "nothing published");
}

#[test]
fn bad_segment_geometry_and_oversized_records_are_refused() {
    let dir = tempdir();
    for (block, blocks) in [(4096, 3), (BLOCK + 1, 3), (BLOCK, 0), (10 << 20, 200)] {
        let w = StagedWriter::create(dir.path(), "job", "p0").expect("create");
        assert!(
            matches!(
                w.segment_geometry(block, blocks),
                Err(Error::InvalidArgument { .. })
            ),
            "{block} x {blocks}"
        );
    }
    let mut w = StagedWriter::create(dir.path(), "job", "p0")
        .expect("create")
        .segment_geometry(2 * 4096, 1)
        .expect("geometry");
    let big = vec![7u8; 8192];
    match w.append("a", &[Append::value(&big)]) {
        Err(Error::LimitExceeded {
            limit: "staged record bytes",
            ..
        }) => {}
        r => panic!("expected LimitExceeded, got {r:?}"),
    }
    w.append("a", &[Append::value(b"fits")]).expect("append");
    assert_eq!(w.finish().expect("finish").records, 1);
}

// ---- kill -9 during publishes ---------------------------------------------------------------

/// Records per job: part 0 writes topics a and b, part 1 topic a.
const JOB_P0: u64 = 300;
const JOB_P1: u64 = 120;

/// Segments above this are adopted, smaller ones copied: a campaign kills both paths.
fn crash_config() -> Config {
    geometry(8, BLOCK).staged_adopt_bytes_min(100 << 10)
}

fn job_name(cycle: u64, k: u64) -> String {
    format!("c{cycle}j{k}")
}

/// The child: holds the directory and stages then commits job after job until killed,
/// printing `@@done K` once job K's commit returned.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = common::child_env() else {
        return;
    };
    let cycle: u64 = mode.parse().expect("child: cycle");
    let wal = Wal::open_with(&dir, crash_config()).expect("child: open");
    for k in 0.. {
        let job = job_name(cycle, k);
        stage(&dir, &job, &format!("{job}p0"), &["a", "b"], JOB_P0);
        stage(&dir, &job, &format!("{job}p1"), &["a"], JOB_P1);
        wal.commit_staged(&job, &[&format!("{job}p0"), &format!("{job}p1")])
            .expect("child: commit");
        println!("@@done {k}");
    }
}

/// Kills a child `delay` after it starts; returns the jobs it reported published.
fn run_and_kill(dir: &Path, cycle: u64, delay: std::time::Duration) -> Vec<u64> {
    let child = common::Running::spawn(&mut common::child_command(
        module_path!(),
        dir,
        &cycle.to_string(),
    ));
    let ended = child.kill_after(delay);
    assert!(
        ended.killed(),
        "cycle {cycle}: the child ended by itself ({}):\n{}",
        ended.status,
        ended.stderr
    );
    ended
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix("done ")?.parse::<u64>().ok())
        .collect()
}

/// The jobs of `topic`, in order, checking that each is whole: every record of each of its
/// parts, in order, exactly once, at dense offsets.
fn jobs_in(wal: &Wal, topic: &str) -> Vec<String> {
    // Killed before any job was published (a slow start): the topic does not exist yet.
    if matches!(wal.topic_info(topic), Err(Error::UnknownTopic { .. })) {
        return Vec::new();
    }
    let rows = rows(wal, topic);
    let mut jobs = Vec::new();
    let mut at = 0;
    while at < rows.len() {
        let part = String::from_utf8_lossy(&rows[at].3)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let job = part.strip_suffix("p0").expect("a job starts with part 0");
        let mut parts = vec![(format!("{job}p0"), JOB_P0)];
        if topic == "a" {
            parts.push((format!("{job}p1"), JOB_P1));
        }
        let parts: Vec<(&str, u64)> = parts.iter().map(|(p, n)| (p.as_str(), *n)).collect();
        let want = expected(rows[at].0, &parts, topic);
        let end = at + want.len();
        assert!(end <= rows.len(), "{topic}: job {job} is cut short");
        same_rows(&rows[at..end], &want, &format!("{topic}: job {job}"));
        jobs.push(job.to_owned());
        at = end;
    }
    jobs
}

#[test]
fn kill_nine_during_publishes_leaves_every_job_whole_and_once() {
    let (cycles, seed) = common::campaign_params("publishes", 20);
    let mut rng = common::Rng::new(seed);
    let dir = tempdir();
    let mut published: Vec<String> = Vec::new();
    let mut acknowledged = 0;
    for cycle in 0..cycles {
        let delay = std::time::Duration::from_millis(rng.range(30, 400));
        let done = run_and_kill(dir.path(), cycle, delay);
        let ctx = format!("cycle {cycle} (TIDELOG_CRASH_SEED={seed}, killed after {delay:?})");
        let wal = Wal::open_with(dir.path(), crash_config())
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        // The open published every committed job; one killed before its commit was recorded
        // is still staged, uncommitted: it goes.
        for job in stage::jobs(dir.path()).expect("jobs") {
            assert!(!job.committed, "{ctx}: job {} left committed", job.job);
            stage::abort(dir.path(), &job.job).expect("abort");
        }
        let jobs = jobs_in(&wal, "a");
        assert_eq!(
            jobs,
            jobs_in(&wal, "b"),
            "{ctx}: both topics hold the same jobs"
        );
        assert!(jobs.starts_with(&published), "{ctx}: earlier jobs stay");
        for k in &done {
            assert!(
                jobs.contains(&job_name(cycle, *k)),
                "{ctx}: acknowledged job {k} is there"
            );
        }
        acknowledged += done.len();
        eprintln!(
            "{ctx}: {} acknowledged, {} jobs in all",
            done.len(),
            jobs.len()
        );
        published = jobs;
        wal.close().unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
    }
    assert!(acknowledged > 0, "no job was acknowledged");
}

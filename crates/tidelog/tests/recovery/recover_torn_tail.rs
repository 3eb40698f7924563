//! Goal: a torn last write loses exactly the torn record (or the whole torn batch) and nothing
//! before it, and recovery reports it.
//! Method: a child process appends records, flushes, appends more (not flushed) and exits
//! without dropping the `Wal` (a crash with the page cache intact). The parent finds the last
//! frame in the data file and, for every byte position p inside it, zeroes p..frame end in a
//! fresh copy of the directory, reopens and checks the recovered prefix and the report.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use crate::common::{
    FrameLoc, child_env, copy_dir, data_files, extents, frame_of, frames, payload, read_all,
    run_child, small, tempdir, zero_range,
};
use tidelog::{Append, RecordFormat, Wal};

const TOPIC: &str = "torn";
/// Records appended and flushed.
const FLUSHED: u64 = 24;
/// Single records appended after the flush (not durable).
const UNFLUSHED: u64 = 4;
/// Size of the batch appended after the flush in the batch scenario.
const BATCH: u64 = 5;

/// Record `i`: varied sizes, a key on every third record and on the very last ones.
fn record(i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let len = if i >= FLUSHED {
        120
    } else {
        (i * 37 % 200) as usize
    };
    let key = (i.is_multiple_of(3) || i >= FLUSHED).then(|| format!("key-{i}").into_bytes());
    (key, payload(i, len))
}

fn append(wal: &Wal, i: u64) {
    let (key, value) = record(i);
    let got = wal
        .append_record(
            TOPIC,
            Append {
                headers: None,
                key: key.as_deref(),
                value: &value,
                timestamp_us: Some(1_000 + i),
            },
        )
        .unwrap();
    assert_eq!(got, i);
}

/// Child side (a no-op unless re-executed by a test with `TIDELOG_CHILD_DIR` set): writes the
/// scenario named by the mode, then exits without running any destructor.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    // A mode ending in "-v1" writes version-1 frames.
    let (mode, config) = match mode.strip_suffix("-v1") {
        Some(m) => (m.to_owned(), small().record_format(RecordFormat::V1)),
        None => (mode, small()),
    };
    let wal = Wal::open_with(&dir, config).unwrap();
    for i in 0..FLUSHED {
        append(&wal, i);
    }
    wal.flush().unwrap();
    match mode.as_str() {
        "singles" => {
            for i in FLUSHED..FLUSHED + UNFLUSHED {
                append(&wal, i);
            }
        }
        "batch" => {
            let recs: Vec<_> = (FLUSHED..FLUSHED + BATCH).map(record).collect();
            let appends: Vec<Append<'_>> = recs
                .iter()
                .map(|(k, v)| Append {
                    headers: None,
                    key: k.as_deref(),
                    value: v,
                    timestamp_us: Some(7),
                })
                .collect();
            let range = wal
                .writer(TOPIC)
                .unwrap()
                .append_batch_records(&appends)
                .unwrap();
            assert_eq!(range, FLUSHED..FLUSHED + BATCH);
        }
        other => panic!("unknown mode {other}"),
    }
    std::process::exit(0);
}

/// Checks that `wal` holds exactly records `0..count`, byte-equal.
fn check_prefix(wal: &Wal, count: u64, ctx: &str) {
    let got = read_all(wal, TOPIC);
    assert_eq!(got.len() as u64, count, "{ctx}: record count");
    for (i, (offset, key, value)) in got.into_iter().enumerate() {
        let i = i as u64;
        assert_eq!(offset, i, "{ctx}: offsets must be dense");
        let (k, v) = record(i);
        assert_eq!(key, k, "{ctx}: key of {i}");
        assert!(value == v, "{ctx}: value of {i} differs");
    }
    assert_eq!(
        wal.topic_info(TOPIC).unwrap().next_offset,
        count,
        "{ctx}: next offset"
    );
}

/// Runs the child, checks the last frame is beyond the durable end, returns it.
fn crash_image(dir: &Path, mode: &str, last_offset: u64) -> FrameLoc {
    run_child(module_path!(), dir, mode);
    let last = frame_of(dir, TOPIC, last_offset);
    let ext = extents(dir)
        .into_iter()
        .find(|e| e.file == last.file && e.start <= last.pos && last.pos < e.start + e.len)
        .unwrap();
    let durable = ext.progress.map_or(0, |p| p.durable_end);
    assert!(
        ext.start + durable <= last.pos,
        "the last record must be beyond durable_end to be a torn tail"
    );
    last
}

/// Copies `base`, zeroes `[p, last.end())` and opens the copy.
fn damaged_copy(base: &Path, last: &FrameLoc, p: u64) -> (tempfile::TempDir, Wal) {
    let img = tempdir();
    copy_dir(base, img.path());
    let file = img.path().join(last.file.file_name().unwrap());
    zero_range(&file, p, last.end());
    let wal = Wal::open_with(img.path(), small())
        .unwrap_or_else(|e| panic!("reopen after zeroing from {p}: {e}"));
    (img, wal)
}

#[test]
fn torn_last_record_at_every_byte() {
    let base = tempdir();
    let total = FLUSHED + UNFLUSHED;
    let last = crash_image(base.path(), "singles", total - 1);

    // Undamaged: every record written before the crash comes back, nothing is torn.
    {
        let img = tempdir();
        copy_dir(base.path(), img.path());
        let wal = Wal::open_with(img.path(), small()).unwrap();
        check_prefix(&wal, total, "undamaged");
        assert_eq!(wal.recovery_report().torn_tails, 0);
    }

    for p in last.pos..last.end() {
        let ctx = format!("zeroed from byte {} of the last frame", p - last.pos);
        let (img, wal) = damaged_copy(base.path(), &last, p);
        check_prefix(&wal, total - 1, &ctx);
        let report = wal.recovery_report();
        // A frame zeroed from its first byte is indistinguishable from no write at all.
        let torn = u64::from(p != last.pos);
        assert_eq!(report.torn_tails, torn, "{ctx}: {report:?}");
        assert_eq!(report.torn_records, 0, "{ctx}: {report:?}");
        // The topic continues at the first lost offset, and the cut stays cut.
        assert_eq!(wal.append(TOPIC, b"after").unwrap(), total - 1, "{ctx}");
        wal.close().unwrap();
        let wal = Wal::open_with(img.path(), small()).unwrap();
        assert_eq!(
            wal.topic_info(TOPIC).unwrap().next_offset,
            total,
            "{ctx}: after reopen"
        );
        assert_eq!(
            wal.read(TOPIC, total - 1).unwrap().value(),
            b"after",
            "{ctx}"
        );
        assert_eq!(wal.recovery_report().torn_tails, 0, "{ctx}: second reopen");
        let got = read_all(&wal, TOPIC);
        for (offset, key, value) in got.into_iter().take((total - 1) as usize) {
            let (k, v) = record(offset);
            assert!(
                key == k && value == v,
                "{ctx}: record {offset} changed after reopen"
            );
        }
    }
}

/// Both record formats: a batch of version-1 frames, whose complete records are counted as
/// cut, and a batch frame, checked whole (no record of it is complete on its own). The
/// reopen is a build of batch frames either way: it reads the version-1 extent and goes on
/// writing into it.
#[test]
fn torn_batch_is_cut_whole() {
    torn_batch_is_cut_whole_in("batch-v1", BATCH - 1);
    torn_batch_is_cut_whole_in("batch", 0);
}

fn torn_batch_is_cut_whole_in(mode: &str, torn_records: u64) {
    let base = tempdir();
    let last = crash_image(base.path(), mode, FLUSHED + BATCH - 1);
    let head = frame_of(base.path(), TOPIC, FLUSHED);
    assert_eq!(head.batch_count as u64, BATCH);

    {
        let img = tempdir();
        copy_dir(base.path(), img.path());
        let wal = Wal::open_with(img.path(), small()).unwrap();
        check_prefix(&wal, FLUSHED + BATCH, "undamaged batch");
        assert_eq!(wal.recovery_report().torn_tails, 0);
    }

    for p in last.pos..last.end() {
        let ctx = format!("batch's last frame zeroed from byte {}", p - last.pos);
        let (img, wal) = damaged_copy(base.path(), &last, p);
        check_prefix(&wal, FLUSHED, &ctx);
        let report = wal.recovery_report();
        assert_eq!(report.torn_tails, 1, "{ctx}: {report:?}");
        // Version 1: the batch's complete records were cut with it.
        assert_eq!(report.torn_records, torn_records, "{ctx}: {report:?}");
        assert_eq!(wal.append(TOPIC, b"after").unwrap(), FLUSHED, "{ctx}");
        wal.close().unwrap();
        let wal = Wal::open_with(img.path(), small()).unwrap();
        assert_eq!(
            wal.topic_info(TOPIC).unwrap().next_offset,
            FLUSHED + 1,
            "{ctx}"
        );
        assert_eq!(wal.read(TOPIC, FLUSHED).unwrap().value(), b"after", "{ctx}");
    }
}

/// A crash that tears the first record of a new extent (a record larger than a block, killed
/// mid-copy) is cut and counted once: recovery forgets the empty extent, so later opens
/// neither rescan it nor count it again.
#[test]
fn a_torn_first_record_of_an_extent_is_counted_once() {
    let live = tempdir();
    let wal = Wal::open_with(live.path(), small()).expect("open");
    for i in 0..10 {
        wal.append("t", &payload(i, 100)).expect("append");
    }
    wal.flush().expect("flush");
    // Larger than a block: starts a new two-block extent. Not flushed.
    wal.append("t", &payload(99, 100_000)).expect("append big");
    let img = tempdir();
    copy_dir(live.path(), img.path());
    drop(wal);
    let f = frame_of(img.path(), "t", 10);
    // The last 60 KB of the value never reached the file.
    zero_range(&f.file, f.end() - 60_000, f.end());
    for round in 0..3u64 {
        let wal = Wal::open_with(img.path(), small()).expect("reopen");
        let report = wal.recovery_report();
        let expected_torn = u64::from(round == 0);
        assert_eq!(
            report.torn_tails, expected_torn,
            "round {round}: {report:?}"
        );
        let info = wal.topic_info("t").expect("info");
        assert_eq!(
            info.next_offset,
            10 + u64::from(round >= 2),
            "round {round}"
        );
        if round == 1 {
            assert_eq!(wal.append("t", b"after").expect("append after"), 10);
        }
        wal.close().expect("close");
    }
}

/// Pages written after a clean close, some lost in a crash and some written back, never
/// bring their records back later. A clean close marks the last extent `Clean` at its end;
/// the next handle appends there. If a crash then lost the page at that end but writeback
/// had flushed later pages, and the mark were still on disk, the extent would read as
/// closed cleanly where its records end, and a handle that appended there again over the
/// same positions could end right before one of the old frames: the crash after that
/// showed records the last recovery had cut.
#[test]
fn records_cut_after_a_clean_close_never_come_back() {
    const T: &str = "t";
    let value = |i: u64| payload(i, 200);
    let base = tempdir();
    let live = base.path().join("live");
    let wal = Wal::open_with(&live, small()).unwrap();
    for i in 0..10 {
        wal.append(T, &value(i)).unwrap();
    }
    wal.close().unwrap();
    let wal = Wal::open_with(&live, small()).unwrap();
    // What the open left is durable (it writes nothing it does not sync).
    let opened = base.path().join("opened");
    copy_dir(&live, &opened);
    for i in 10..40 {
        wal.append(T, &value(i)).unwrap();
    }
    // The crash: the files as opened, with every page the appends changed but the first.
    let crashed = base.path().join("crashed");
    copy_dir(&opened, &crashed);
    let mut first_lost = None;
    for (c, l) in data_files(&crashed).iter().zip(data_files(&live)) {
        let (mut bytes, now) = (std::fs::read(c).unwrap(), std::fs::read(&l).unwrap());
        for page in (0..bytes.len().min(now.len())).step_by(4096) {
            let end = (page + 4096).min(bytes.len());
            if bytes[page..end] != now[page..end] {
                if first_lost.is_none() {
                    first_lost = Some(end as u64);
                    continue;
                }
                bytes[page..end].copy_from_slice(&now[page..end]);
            }
        }
        std::fs::write(c, bytes).unwrap();
    }
    let lost_to = first_lost.expect("the appends changed a page");
    // The first frame of the second life that lies wholly in a page written back.
    let stale = frames(&live)
        .into_iter()
        .find(|f| f.offset >= 10 && f.pos >= lost_to)
        .expect("a frame past the lost page");
    drop(wal);
    let wal = Wal::open_with(&crashed, small()).unwrap();
    assert_eq!(
        wal.topic_info(T).unwrap().next_offset,
        10,
        "cut after the lost page"
    );
    // The same records again, so they end where that old frame starts.
    for i in 10..stale.offset {
        assert_eq!(wal.append(T, &value(i)).unwrap(), i);
    }
    let again = base.path().join("again");
    copy_dir(&crashed, &again);
    drop(wal);
    let wal = Wal::open_with(&again, small()).unwrap();
    assert_eq!(
        wal.topic_info(T).unwrap().next_offset,
        stale.offset,
        "records the last recovery cut came back"
    );
    wal.close().unwrap();
}

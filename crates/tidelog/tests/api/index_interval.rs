//! A directory reopened with another `index_interval_bytes` keeps every record: the footer
//! reserve of an extent depends on the interval it was written with, so recovery checks
//! extents against their own length, and a footer that no longer fits when an extent is
//! sealed is written sparser.

use crate::common::{self, geometry, tempdir};
use tidelog::{Append, Config, ReaderOptions, StartPosition, Wal};

fn config(interval: u64) -> Config {
    geometry(8, 64 * 1024).index_interval_bytes(interval)
}

fn value(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8; 100 + (i % 7) as usize]
}

fn append(wal: &Wal, from: u64, n: u64) {
    for i in from..from + n {
        wal.append_record(
            "t",
            Append {
                headers: None,
                key: None,
                value: &value(i),
                timestamp_us: Some(1_000 + i),
            },
        )
        .expect("append");
    }
}

/// Every record is there, and seeks by offset and by time land on the right one.
fn check(wal: &Wal, n: u64, what: &str) {
    let got = common::read_all(wal, "t");
    assert_eq!(got.len() as u64, n, "{what}: record count");
    for (i, (offset, _, v)) in got.iter().enumerate() {
        assert_eq!(
            (*offset, v),
            (i as u64, &value(i as u64)),
            "{what}: record {i}"
        );
    }
    let mut reader = wal
        .reader_with("t", ReaderOptions::default().start(StartPosition::Earliest))
        .expect("reader");
    for target in [0, 1, n / 3, n / 2 + 1, n - 1] {
        assert_eq!(
            reader.seek_time(1_000 + target).expect("seek"),
            target,
            "{what}"
        );
        reader.seek(target).expect("seek");
        assert_eq!(
            reader.next().expect("next").map(|r| r.offset),
            Some(target),
            "{what}"
        );
    }
}

#[test]
fn a_finer_or_coarser_interval_at_a_later_open_keeps_every_record() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config(4096)).expect("open");
    append(&wal, 0, 3000);
    wal.close().expect("close");
    let mut n = 3000;
    // Finer: extents sealed full under 4096 reach past this open's footer reserve; the
    // resumed tail does too, and is sealed with a sparser footer when it rolls.
    for interval in [64, 1 << 20, 4096, 64] {
        let wal = Wal::open_with(dir.path(), config(interval)).expect("reopen");
        let what = format!("interval {interval}");
        check(&wal, n, &what);
        let report = wal.recovery_report();
        assert_eq!(
            report.torn_tails + report.dropped_extents,
            0,
            "{what}: {report:?}"
        );
        append(&wal, n, 700);
        n += 700;
        check(&wal, n, &what);
        wal.close().expect("close");
        let ro = Wal::open_read_only_with(dir.path(), config(interval)).expect("read-only");
        check(&ro, n, &format!("{what}, read-only"));
    }
}

#[test]
fn a_crash_image_opens_with_a_finer_interval() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), config(4096)).expect("open");
    append(&wal, 0, 2000);
    wal.flush().expect("flush");
    // The files as a crash would leave them: the tail extent open, not sealed.
    let image = tempdir();
    common::copy_dir(dir.path(), image.path());
    drop(wal);
    let wal = Wal::open_with(image.path(), config(64)).expect("open the image");
    check(&wal, 2000, "crash image, interval 64");
    append(&wal, 2000, 500);
    wal.close().expect("close");
    check(
        &Wal::open_with(image.path(), config(64)).expect("reopen"),
        2500,
        "after",
    );
}

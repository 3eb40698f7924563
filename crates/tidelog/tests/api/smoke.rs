#![allow(clippy::unwrap_used)]
//! Smoke test: round trip across blocks and files, reopen after close and after drop.

use crate::common::small;
use tidelog::{ReaderOptions, StartPosition, Wal};

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    {
        let wal = Wal::open_with(dir.path(), small()).unwrap();
        let w = wal.writer("t").unwrap();
        for i in 0..20000u64 {
            assert_eq!(w.append(&i.to_le_bytes()).unwrap(), i);
        }
        let mut r = wal
            .reader_with("t", ReaderOptions::default().start(StartPosition::Earliest))
            .unwrap();
        let mut n = 0u64;
        while let Some(rec) = r.next().unwrap() {
            assert_eq!(rec.offset, n);
            assert_eq!(rec.value, &n.to_le_bytes());
            n += 1;
        }
        assert_eq!(n, 20000);
        wal.close().unwrap();
    }
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    println!("{:?}", wal.recovery_report());
    let info = wal.topic_info("t").unwrap();
    assert_eq!(info.next_offset, 20000);
    let rec = wal.read("t", 12345).unwrap();
    assert_eq!(rec.value(), &12345u64.to_le_bytes());
    let w = wal.writer("t").unwrap();
    assert_eq!(w.append(b"x").unwrap(), 20000);
    drop(w);
    drop(wal);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    println!("{:?}", wal.recovery_report());
    assert_eq!(wal.topic_info("t").unwrap().next_offset, 20001);
}

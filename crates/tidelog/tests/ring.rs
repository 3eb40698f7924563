//! The ring backend's behaviours: wrap-around, trim and reopen, ring full, recovery with
//! holes, torn headers, stale records, bit flips, and I/O faults.

use tidelog::{RingConfig, RingWal};

const CAP: u64 = 4 << 20;

fn config() -> RingConfig {
    RingConfig::default()
        .capacity_bytes(CAP)
        .block_bytes(64 << 10)
        .max_record_bytes(64 << 10)
        .block_delay_us(100)
}

fn collect(ring: &RingWal) -> Vec<(u64, Vec<u8>)> {
    ring.recover()
        .expect("recover")
        .collect::<tidelog::Result<Vec<_>>>()
        .expect("records")
}

#[test]
fn append_flush_reopen_recovers_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ring");
    let mut expected = Vec::new();
    {
        let ring = RingWal::open(&path, config()).expect("open");
        for i in 0..1000u32 {
            let body = format!("record-{i}").into_bytes();
            let h = ring.append(&body).expect("append");
            expected.push((h.offset, body));
        }
        ring.flush().expect("flush");
        assert_eq!(collect(&ring), expected);
        ring.close().expect("close");
    }
    let ring = RingWal::open(&path, RingConfig::default()).expect("reopen");
    let report = ring.recovery_report();
    assert_eq!(report.records, 1000);
    assert!(report.clean_shutdown);
    assert_eq!(report.clean_end_offset, Some(report.end_offset));
    assert_eq!(collect(&ring), expected);
}

//! The seed's behaviours on both kinds of target a ring lives on: a preallocated regular file,
//! and a loop device with 4096-byte sectors and direct I/O (when the machine allows: root and
//! `losetup`; otherwise the device variant says why on stderr and returns). Wrap-around over
//! several laps, padding at the lap end, trim then reopen, ring full, recovery with a hole in
//! the window, stale blocks of an earlier session and records of an earlier lap, torn header
//! slots, and bit flips.
//!
//! A crash image is a byte copy of the target taken while the ring is open: every completed
//! write is durable, so the copy is what a crash would leave. It is written back over the
//! target once the ring is gone (dropping a ring closes it cleanly, which a crash would not).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{RING_CAP as CAP, ring_append_n, ring_config, ring_records, same_records};
use tidelog::ring::format::{ALIGN_BYTES, HEADER_SLOT_BYTES, RING_START};
use tidelog::{Error, RingConfig, RingWal};

#[derive(Debug, Clone, Copy)]
enum Kind {
    File,
    Loop,
}

/// Where a test's ring lives: a file in a temp dir, or a loop device over an image there.
struct Target {
    path: PathBuf,
    /// The loop device to detach on drop.
    device: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Target {
    /// A fresh target of `CAP` bytes; `None` when this machine cannot attach a loop device.
    fn new(kind: Kind) -> Option<Target> {
        let dir = tempfile::tempdir().expect("tempdir");
        match kind {
            Kind::File => Some(Target {
                path: dir.path().join("ring"),
                device: None,
                _dir: dir,
            }),
            Kind::Loop => {
                // Fully written, so the loop driver never writes into holes of its image.
                let image = dir.path().join("disk.img");
                std::fs::write(&image, vec![0u8; CAP as usize]).expect("write image");
                let out = match Command::new("losetup")
                    .args(["-f", "--show", "--direct-io=on", "--sector-size", "4096"])
                    .arg(&image)
                    .output()
                {
                    Ok(out) => out,
                    Err(e) => {
                        eprintln!("skipped: cannot run losetup: {e}");
                        return None;
                    }
                };
                let device = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !out.status.success() || !device.starts_with("/dev/") {
                    eprintln!(
                        "skipped: losetup could not attach a loop device: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                    return None;
                }
                Some(Target {
                    path: PathBuf::from(&device),
                    device: Some(PathBuf::from(device)),
                    _dir: dir,
                })
            }
        }
    }

    fn is_device(&self) -> bool {
        self.device.is_some()
    }

    /// Opens the ring for the first time: a missing file is created, a device is formatted
    /// (never done without asking).
    fn create(&self, config: RingConfig) -> RingWal {
        RingWal::open(&self.path, config.format(self.is_device())).expect("create ring")
    }

    fn open(&self, config: RingConfig) -> tidelog::Result<RingWal> {
        RingWal::open(&self.path, config)
    }

    /// Opens the target for direct I/O (where its file system allows it): the ring writes with
    /// O_DIRECT, past the page cache, so a buffered read could see pages cached earlier.
    fn raw(&self) -> File {
        let open = |flags| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(&self.path)
        };
        match open(libc::O_DIRECT) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(0).expect("open target"),
            Err(e) => panic!("open target: {e}"),
        }
    }

    /// Reads the whole `ALIGN_BYTES` units covering `[pos, pos + len)` into an aligned buffer;
    /// returns the file, the buffer and where the span starts.
    fn span(&self, pos: u64, len: usize) -> (File, AlignedSpan) {
        let first = pos - pos % ALIGN_BYTES;
        let end = (pos + len as u64).div_ceil(ALIGN_BYTES) * ALIGN_BYTES;
        let mut span = AlignedSpan::new(first, (end - first) as usize);
        let f = self.raw();
        f.read_exact_at(span.bytes_mut(), first)
            .expect("read target");
        (f, span)
    }

    fn read(&self, pos: u64, len: usize) -> Vec<u8> {
        let (_, span) = self.span(pos, len);
        span.at(pos, len).to_vec()
    }

    /// Writes `bytes` at `pos` and makes them durable.
    fn patch(&self, pos: u64, bytes: &[u8]) {
        let (f, mut span) = self.span(pos, bytes.len());
        span.at_mut(pos, bytes.len()).copy_from_slice(bytes);
        f.write_all_at(span.bytes(), span.first)
            .expect("patch target");
        f.sync_all().expect("sync target");
    }

    /// The crash image: every byte of the ring as it is now.
    fn image(&self) -> Vec<u8> {
        self.read(0, CAP as usize)
    }

    /// Puts a crash image back (the ring must be closed).
    fn restore(&self, image: &[u8]) {
        self.patch(0, image);
    }
}

/// A whole number of `ALIGN_BYTES` units of the target from `first`, in memory aligned for
/// direct I/O.
struct AlignedSpan {
    first: u64,
    len: usize,
    buf: Vec<u8>,
    /// Where the aligned part of `buf` starts.
    skip: usize,
}

impl AlignedSpan {
    fn new(first: u64, len: usize) -> AlignedSpan {
        let align = ALIGN_BYTES as usize;
        let buf = vec![0u8; len + align];
        let skip = buf.as_ptr().align_offset(align);
        assert!(skip < align);
        AlignedSpan {
            first,
            len,
            buf,
            skip,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.skip..self.skip + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.skip..self.skip + self.len]
    }

    fn at(&self, pos: u64, len: usize) -> &[u8] {
        let from = (pos - self.first) as usize;
        &self.bytes()[from..from + len]
    }

    fn at_mut(&mut self, pos: u64, len: usize) -> &mut [u8] {
        let from = (pos - self.first) as usize;
        &mut self.bytes_mut()[from..from + len]
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(device) = &self.device {
            let detached = Command::new("losetup")
                .arg("-d")
                .arg(device)
                .status()
                .is_ok_and(|s| s.success());
            if !detached {
                eprintln!("could not detach {}", device.display());
            }
        }
    }
}

/// Runs `body` on a file and, in a second test, on a loop device.
macro_rules! on_both_targets {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn file() {
                if let Some(t) = super::Target::new(super::Kind::File) {
                    super::$name(&t);
                }
            }
            #[test]
            fn loop_device() {
                if let Some(t) = super::Target::new(super::Kind::Loop) {
                    super::$name(&t);
                }
            }
        }
    )*};
}

on_both_targets!(
    wraps_around_over_several_laps_with_trims_and_reopens,
    padding_fills_the_lap_end,
    ring_full_fails_at_once_or_waits_for_a_trim,
    trim_then_reopen,
    recovery_stops_at_a_hole_and_ignores_blocks_past_it,
    stale_blocks_of_an_earlier_session_are_not_recovered,
    records_from_an_earlier_lap_are_rejected,
    a_torn_header_slot_falls_back_to_the_other,
    header_writes_alternate_slots_and_never_touch_the_newest,
    a_bit_flip_fails_a_live_read_and_is_corruption_at_open,
);

fn physical(ring_bytes: u64, offset: u64) -> u64 {
    RING_START + offset % ring_bytes
}

/// Where the block holding `first_record` (its first record) starts.
fn block_of(first_record: u64) -> u64 {
    let start = first_record - 40; // the block header sits just before its first record
    assert_eq!(start % ALIGN_BYTES, 0);
    start
}

fn wraps_around_over_several_laps_with_trims_and_reopens(t: &Target) {
    let mut live: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut id = 0;
    let mut ring_bytes = 0;
    let mut last_offset = 0;
    drop(t.create(ring_config()));
    for round in 0..12 {
        let ring = t.open(ring_config()).expect("open");
        ring_bytes = ring.ring_bytes();
        same_records(&ring_records(&ring), &live);
        let batch = ring_append_n(&ring, id, 300, 3000 + round * 100);
        id += 300;
        live.extend(batch);
        // Keep only the newest 100 records.
        let keep_from = live[live.len() - 100].0;
        ring.trim(keep_from).expect("trim");
        live.retain(|(o, _)| *o >= keep_from);
        assert_eq!(ring.trim_offset(), keep_from);
        last_offset = live.last().map_or(0, |r| r.0);
        if round % 3 == 0 {
            ring.close().expect("close");
        } else {
            let img = t.image();
            drop(ring);
            t.restore(&img);
        }
    }
    assert!(last_offset > 3 * ring_bytes, "did not wrap several laps");
    let ring = t.open(ring_config()).expect("open");
    same_records(&ring_records(&ring), &live);
}

fn padding_fills_the_lap_end(t: &Target) {
    let ring = t.create(ring_config().block_delay_us(0));
    let ring_bytes = ring.ring_bytes();
    // Records of 40 KiB (block_bytes 64 KiB: one per block, 44 KiB aligned): the lap end
    // never lines up, so every lap needs a padding block.
    let mut all = Vec::new();
    for i in 0..300 {
        let rec = ring_append_n(&ring, i, 1, 40 << 10);
        ring.trim(rec[0].0).expect("trim");
        all.extend(rec);
    }
    let last = all.last().expect("records").clone();
    assert!(last.0 > 2 * ring_bytes);
    for (o, b) in &all {
        let in_lap = o % ring_bytes;
        assert!(
            in_lap + b.len() as u64 <= ring_bytes,
            "record crosses the lap end"
        );
    }
    same_records(&ring_records(&ring), std::slice::from_ref(&last));
    let img = t.image();
    drop(ring);
    t.restore(&img);
    let ring = t.open(ring_config()).expect("open image");
    assert!(!ring.recovery_report().clean_shutdown);
    same_records(&ring_records(&ring), &[last]);
}

fn ring_full_fails_at_once_or_waits_for_a_trim(t: &Target) {
    let ring = Arc::new(t.create(ring_config()));
    let mut offsets = Vec::new();
    let err = loop {
        match ring.append(&[7u8; 8000]) {
            Ok(h) => offsets.push(h),
            Err(e) => break e,
        }
    };
    match err {
        Error::RingFull {
            requested_bytes,
            free_bytes,
        } => assert!(requested_bytes > free_bytes),
        e => panic!("expected RingFull, got {e}"),
    }
    assert!(ring.free_bytes() < 16 << 10);
    // Waiting without a trim times out with RingFull.
    let t0 = std::time::Instant::now();
    assert!(matches!(
        ring.append_wait(b"x", Duration::from_millis(50)),
        Err(Error::RingFull { .. })
    ));
    assert!(t0.elapsed() >= Duration::from_millis(50));
    // A trim from another thread lets a waiting append through.
    let last = offsets.last().expect("appended").wait().expect("durable");
    let r = ring.clone();
    let trimmer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        r.trim(last).expect("trim");
    });
    let h = ring
        .append_wait(b"after trim", Duration::from_secs(10))
        .expect("append after trim");
    trimmer.join().expect("trimmer");
    h.wait().expect("durable");
    same_records(&ring_records(&ring), &[(h.offset, b"after trim".to_vec())]);
}

fn trim_then_reopen(t: &Target) {
    let ring = t.create(ring_config());
    let recs = ring_append_n(&ring, 0, 50, 100);
    let flushed = ring.flushed_offset();
    assert!(matches!(
        ring.trim(flushed + 1),
        Err(Error::InvalidArgument { name: "offset", .. })
    ));
    // Trimming mid-record discards the record it lands in.
    ring.trim(recs[10].0 + 1).expect("trim");
    same_records(&ring_records(&ring), &recs[11..]);
    // A smaller offset is a no-op.
    ring.trim(recs[2].0).expect("no-op trim");
    assert_eq!(ring.trim_offset(), recs[10].0 + 1);
    // The trim is in the header before trim() returns: a crash now keeps it.
    let img = t.image();
    drop(ring);
    t.restore(&img);
    let ring = t.open(ring_config()).expect("reopen");
    assert!(!ring.recovery_report().clean_shutdown);
    assert_eq!(ring.trim_offset(), recs[10].0 + 1);
    same_records(&ring_records(&ring), &recs[11..]);
    assert_eq!(ring.recovery_report().records, 39);
    let end = ring.reset().expect("reset");
    assert_eq!(ring.trim_offset(), end);
    assert!(ring_records(&ring).is_empty());
    assert_eq!(ring.free_bytes(), ring.ring_bytes());
    drop(ring);
    let ring = t.open(ring_config()).expect("reopen after reset");
    assert!(ring_records(&ring).is_empty());
}

/// Ten blocks of one 40 KiB record each, then a crash that lost the fifth block (it was in
/// flight) and kept the ones after it. Returns the records and where the hole starts.
fn crash_with_a_hole(t: &Target) -> (Vec<(u64, Vec<u8>)>, u64) {
    let ring = t.create(ring_config().block_delay_us(0));
    let ring_bytes = ring.ring_bytes();
    let recs = ring_append_n(&ring, 0, 10, 40 << 10);
    let img = t.image();
    drop(ring);
    t.restore(&img);
    let hole = block_of(recs[4].0);
    t.patch(physical(ring_bytes, hole), &vec![0u8; 44 << 10]);
    // Blocks written while the fifth was in flight were sealed before it was durable: they
    // claim nothing past its start (this run waited for each block, so rewrite the claims
    // as such blocks would carry them).
    for r in &recs[5..] {
        claim_durable_before(t, ring_bytes, block_of(r.0), hole);
    }
    (recs, hole)
}

/// Rewrites the durable-before claim of the block at `start` (and its header checksum).
fn claim_durable_before(t: &Target, ring_bytes: u64, start: u64, durable_before: u64) {
    use tidelog::ring::format::{BH_CRC, BH_DURABLE_BACK, BH_LEN};
    let at = physical(ring_bytes, start);
    let mut h = t.read(at, BH_LEN);
    let back = ((start - durable_before) / ALIGN_BYTES + 1) as u32;
    h[BH_DURABLE_BACK..BH_DURABLE_BACK + 4].copy_from_slice(&back.to_le_bytes());
    let crc = crc32fast::hash(&h[..BH_CRC]);
    h[BH_CRC..BH_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    t.patch(at, &h);
}

/// A block of the window that never reached the device ends the log there, whatever was
/// written after it.
fn recovery_stops_at_a_hole_and_ignores_blocks_past_it(t: &Target) {
    let (recs, hole) = crash_with_a_hole(t);
    let reopened = t.open(ring_config()).expect("open image");
    let report = reopened.recovery_report().clone();
    assert_eq!(report.end_offset, hole);
    assert_eq!(report.records, 4);
    assert!(!report.clean_shutdown);
    assert!(report.blocks_past_end >= 1, "{report:?}");
    same_records(&ring_records(&reopened), &recs[..4]);
}

/// A restart continues at the hole; the old session's blocks past it must never come back,
/// even where the new session's shorter blocks leave them exposed.
fn stale_blocks_of_an_earlier_session_are_not_recovered(t: &Target) {
    let (recs, _) = crash_with_a_hole(t);
    // Session 2 writes one block of the same size at the hole, then crashes: session 1's
    // blocks 5.. follow it with matching offsets, and only their epoch tells them apart.
    let s2 = t.open(ring_config().block_delay_us(0)).expect("open image");
    let again = ring_append_n(&s2, 100, 1, 40 << 10);
    assert_eq!(again[0].0, recs[4].0);
    let img2 = t.image();
    drop(s2);
    t.restore(&img2);
    let s3 = t.open(ring_config()).expect("open image 2");
    let mut expected = recs[..4].to_vec();
    expected.extend(again);
    same_records(&ring_records(&s3), &expected);
    assert_eq!(s3.recovery_report().end_offset, block_of(recs[5].0));
    assert!(
        s3.recovery_report().stop_reason.contains("older session"),
        "{}",
        s3.recovery_report().stop_reason
    );
}

fn records_from_an_earlier_lap_are_rejected(t: &Target) {
    let ring = t.create(ring_config());
    let ring_bytes = ring.ring_bytes();
    // Fill most of a lap, trim it all, then write a little on the next lap.
    let first = ring_append_n(&ring, 0, 90, 40 << 10);
    ring.reset().expect("reset");
    let second = ring_append_n(&ring, 1000, 200, 1000);
    assert!(second.last().expect("records").0 > ring_bytes);
    let img = t.image();
    drop(ring);
    t.restore(&img);
    let ring = t.open(ring_config()).expect("open image");
    let got = ring_records(&ring);
    same_records(&got, &second);
    assert!(first.iter().all(|r| !got.contains(r)));
}

fn a_torn_header_slot_falls_back_to_the_other(t: &Target) {
    let ring = t.create(ring_config());
    let recs = ring_append_n(&ring, 0, 40, 500);
    ring.trim(recs[5].0).expect("trim");
    let img = t.image();
    drop(ring);
    for slot in 0..2u64 {
        t.restore(&img);
        // Tear the slot: its second half is garbage.
        t.patch(slot * HEADER_SLOT_BYTES + 40, &[0xAB; 40]);
        let ring = t.open(ring_config()).expect("open with one torn slot");
        let got = ring_records(&ring);
        // The surviving slot holds either the newest header or the one before it; both
        // recover every live record (an older trim only brings back trimmed ones).
        assert!(got.ends_with(&recs[5..]), "slot {slot}");
    }
    t.restore(&img);
    t.patch(40, &[0xAB; 40]);
    t.patch(HEADER_SLOT_BYTES + 40, &[0xAB; 40]);
    assert!(matches!(
        t.open(ring_config()),
        Err(Error::NotFormatted { .. })
    ));
}

fn header_writes_alternate_slots_and_never_touch_the_newest(t: &Target) {
    let ring = t.create(ring_config());
    let recs = ring_append_n(&ring, 0, 10, 100);
    let slots = || (t.read(0, 80), t.read(HEADER_SLOT_BYTES, 80));
    let mut prev = slots();
    for r in &recs[1..] {
        ring.trim(r.0).expect("trim");
        let now = slots();
        // Exactly one slot changed.
        assert!((now.0 == prev.0) != (now.1 == prev.1));
        prev = now;
    }
}

fn a_bit_flip_fails_a_live_read_and_is_corruption_at_open(t: &Target) {
    let ring = t.create(ring_config().block_delay_us(0));
    let ring_bytes = ring.ring_bytes();
    // One at a time: each block is acknowledged before the next is sealed, so every later
    // block says the earlier ones were durable.
    let recs: Vec<_> = (0..8)
        .flat_map(|i| ring_append_n(&ring, i, 1, 40 << 10))
        .collect();
    // Flip one bit in the body of record 5.
    let at = physical(ring_bytes, recs[5].0) + 24 + 1000;
    let byte = t.read(at, 1)[0];
    t.patch(at, &[byte ^ 0x04]);
    // Reading the durable log now reports corruption rather than wrong bytes.
    let err = ring
        .recover()
        .expect("recover")
        .collect::<tidelog::Result<Vec<_>>>()
        .expect_err("corruption");
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
    let img = t.image();
    drop(ring);
    t.restore(&img);
    // Blocks written after record 5's say it was durable: damage, never the end of the log.
    match t.open(ring_config()) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, block_of(recs[5].0)),
        other => panic!("expected corruption, got {:?}", other.map(|_| ())),
    }
    // In the last block nothing written later vouches for it: it ends the log, as a block
    // torn by a power loss would.
    t.restore(&img);
    for r in [&recs[5], &recs[7]] {
        // Undoes the flip in record 5, flips a bit of record 7.
        let at = physical(ring_bytes, r.0) + 24 + 1000;
        let byte = t.read(at, 1)[0];
        t.patch(at, &[byte ^ 0x04]);
    }
    let ring = t.open(ring_config()).expect("open image");
    let report = ring.recovery_report();
    assert_eq!(report.records, 7);
    assert!(
        report.stop_reason.contains("checksum"),
        "{}",
        report.stop_reason
    );
    same_records(&ring_records(&ring), &recs[..7]);
}

/// The ring on a device is that device: its path, O_DIRECT, and its size as the capacity.
#[test]
fn a_loop_device_is_written_with_direct_io_at_its_own_size() {
    let Some(t) = Target::new(Kind::Loop) else {
        return;
    };
    assert!(matches!(
        t.open(RingConfig::default()),
        Err(Error::NotFormatted { .. })
    ));
    let ring = t.create(RingConfig::default().block_bytes(64 << 10));
    assert!(ring.direct_io());
    assert_eq!(ring.capacity_bytes(), CAP);
    assert_eq!(ring.path(), Path::new(&t.path));
    let recs = ring_append_n(&ring, 0, 20, 5000);
    drop(ring);
    let ring = t.open(RingConfig::default()).expect("reopen");
    assert!(ring.recovery_report().clean_shutdown);
    same_records(&ring_records(&ring), &recs);
}

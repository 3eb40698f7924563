//! Goal: the README's guarantees hold when bits flip, files are cut, processes die and threads
//! race. Each test is named after the rule it checks (issue 18, defects A to C).
//! Method: a child process appends and exits without closing (a crash: the page cache keeps
//! what it wrote), then the parent damages the files and opens them again.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use crate::common::{
    self, child_env, data_files, extents, flip_byte, frame_of, read_all, run_child, small, tempdir,
};
use tidelog::format::{self, ProgressState};
use tidelog::{Durability, Error, Wal};

const TOPIC: &str = "acked";
const ACKED: u64 = 1000;

fn value(i: u64) -> Vec<u8> {
    format!("record {i} of the acknowledged run").into_bytes()
}

/// Child side (a no-op unless re-executed): appends and exits without closing.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    match mode.as_str() {
        // Every append returns once durable (group commit); nothing else syncs.
        "always" => {
            let wal = Wal::open_with(&dir, small().sync_interval_ms(3_600_000)).unwrap();
            let w = wal
                .writer(TOPIC)
                .unwrap()
                .with_durability(Durability::Always);
            for i in 0..ACKED {
                assert_eq!(w.append(&value(i)).unwrap(), i);
            }
            // Before the handle goes out of scope: dropping it would close it cleanly.
            std::process::exit(0);
        }
        // A ring outside the directory (`shared.ring` beside it) holding acknowledged
        // appends at the crash.
        "ring" => {
            let wal = Wal::open_with(&dir, ring_config(&dir)).unwrap();
            let w = wal
                .writer(TOPIC)
                .unwrap()
                .with_durability(Durability::Always);
            for i in 0..20 {
                assert_eq!(w.append(&value(i)).unwrap(), i);
            }
            std::process::exit(0);
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn is_corruption(e: &Error, topic: &str, offset: u64) -> bool {
    matches!(e, Error::Corruption { topic: t, offset: o, .. } if t == topic && *o == offset)
}

#[test]
fn a_flipped_acknowledged_record_is_corruption_not_a_torn_tail() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "always");
    // Record 990 is in the open extent, which recovery scans: the durable point covers all
    // 1000 acknowledged records, so a bad frame there is damage, never a tail to cut.
    let frame = frame_of(dir.path(), TOPIC, 990);
    flip_byte(&frame.file, frame.value_pos() + 3);
    let err = Wal::open_read_only_with(dir.path(), small()).unwrap_err();
    assert!(is_corruption(&err, TOPIC, 990), "read-only open: {err:?}");
    let err = Wal::open_with(dir.path(), small()).unwrap_err();
    assert!(is_corruption(&err, TOPIC, 990), "writable open: {err:?}");
    // Nothing was cut: the open extent still claims every record (its progress slot, and
    // the commit copy of the last group that continues it).
    let open = extents(dir.path()).pop().unwrap();
    assert_eq!(open.id.first_offset + claimed_records(&open), ACKED);
}

/// Records extent `e` claims: its progress slot moved over the commit copies (of its salt)
/// that continue it.
fn claimed_records(e: &common::ExtentLoc) -> u64 {
    let progress = e.progress.unwrap();
    let copies = common::commit_copies(e);
    let (mut end, mut count) = (progress.durable_end, progress.record_count);
    while let Some(c) = copies
        .iter()
        .filter(|c| c.start == end)
        .max_by_key(|c| c.end())
    {
        (end, count) = (c.end(), c.record_count);
    }
    count
}

/// `TOPIC` holds exactly `count` records: offsets `0..count`, each its value.
fn check_records(wal: &Wal, count: u64) {
    let all = read_all(wal, TOPIC);
    assert_eq!(all.len() as u64, count);
    for (i, (offset, _, v)) in all.iter().enumerate() {
        assert_eq!(
            (*offset, v.as_slice()),
            (i as u64, value(i as u64).as_slice())
        );
    }
}

/// The newest acknowledged records have a second copy: the group commit that made them
/// durable wrote their bytes beside the progress slot (a commit copy), in the same msync.
/// Damage to them is repaired from it by a writable open; a read-only open, which writes
/// nothing, reads them from the copy. Without the copy a bad frame there would be
/// corruption, and one past the progress slot's claim a tail that a crash may cut.
#[test]
fn a_flipped_record_of_the_last_group_is_repaired_from_its_commit_copy() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "always");
    let frame = frame_of(dir.path(), TOPIC, ACKED - 1);
    flip_byte(&frame.file, frame.value_pos() + 3);
    let damaged = std::fs::read(&frame.file).unwrap();
    let ro = Wal::open_read_only_with(dir.path(), small()).unwrap();
    assert_eq!(ro.recovery_report().repaired_from_copies, 1);
    check_records(&ro, ACKED);
    let r = ro.read(TOPIC, ACKED - 1).unwrap();
    assert_eq!(r.value(), value(ACKED - 1).as_slice());
    drop(ro);
    assert_eq!(
        std::fs::read(&frame.file).unwrap(),
        damaged,
        "a read-only open wrote nothing"
    );
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(wal.recovery_report().repaired_from_copies, 1);
    assert_eq!(wal.recovery_report().torn_tails, 0);
    check_records(&wal, ACKED);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(wal.recovery_report().repaired_from_copies, 0);
    assert_eq!(read_all(&wal, TOPIC).len() as u64, ACKED);
}

/// A power loss during a group commit's msync may keep its header page (the claim and the
/// commit copy) and lose the page of its records: the records come back from the copy.
#[test]
fn records_whose_page_was_lost_come_back_from_the_commit_copy() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "always");
    let frame = frame_of(dir.path(), TOPIC, ACKED - 1);
    common::zero_range(&frame.file, frame.pos, frame.end());
    // A read-only handle opened before any writer reads them from the copy, and keeps
    // reading them, and what a writer appends after them in the same extent, once the
    // writer has repaired the file.
    let ro = Wal::open_read_only_with(dir.path(), small()).unwrap();
    assert_eq!(ro.recovery_report().repaired_from_copies, 1);
    check_records(&ro, ACKED);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(wal.recovery_report().repaired_from_copies, 1);
    check_records(&wal, ACKED);
    for i in ACKED..ACKED + 5 {
        assert_eq!(wal.append(TOPIC, &value(i)).unwrap(), i);
    }
    wal.flush().unwrap();
    ro.refresh().unwrap();
    check_records(&ro, ACKED + 5);
}

/// A damaged commit copy fails its checksum and is ignored: the records it copied are read
/// from their own frames, which are intact.
#[test]
fn a_damaged_commit_copy_is_ignored_and_the_records_stay() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "always");
    let open = extents(dir.path()).pop().unwrap();
    for at in format::CC_SLOTS_AT {
        flip_byte(
            &open.file,
            open.start + at as u64 + format::CC_HEADER as u64 + 5,
        );
    }
    let ro = Wal::open_read_only_with(dir.path(), small()).unwrap();
    assert_eq!(ro.recovery_report().damaged_commit_copies, 2);
    drop(ro);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(wal.recovery_report().repaired_from_copies, 0);
    assert_eq!(wal.recovery_report().damaged_commit_copies, 2);
    let all = read_all(&wal, TOPIC);
    assert_eq!(all.len() as u64, ACKED);
    assert_eq!(all.last().unwrap().2, value(ACKED - 1));
    // The open's flush sealed the extent, which cleared its copies.
    drop(wal);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(wal.recovery_report().damaged_commit_copies, 0);
}

/// A commit copy never outlives its use: once the progress slot claims its records (here a
/// clean close), its slot is zero again, so each record's bytes are in the file once.
#[test]
fn a_clean_close_leaves_no_commit_copy() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "always");
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    let w = wal
        .writer("more")
        .unwrap()
        .with_durability(Durability::Always);
    for i in 0..5 {
        w.append(&value(i)).unwrap();
    }
    wal.close().unwrap();
    for e in extents(dir.path()) {
        let bytes = std::fs::read(&e.file).unwrap();
        for at in format::CC_SLOTS_AT {
            let slot = &bytes[e.start as usize + at..][..format::CC_SLOT_LEN];
            assert!(slot.iter().all(|&b| b == 0), "{} keeps a copy", e.id.topic);
        }
    }
}

#[test]
fn a_flipped_record_of_a_sealed_extent_is_corruption_when_read() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "always");
    // A recovery and a clean close seal every extent but the last.
    Wal::open_with(dir.path(), small())
        .unwrap()
        .close()
        .unwrap();
    // Record 500 is in a sealed extent, trusted at open and checked when read.
    let frame = frame_of(dir.path(), TOPIC, 500);
    flip_byte(&frame.file, frame.value_pos() + 3);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    let err = wal.read(TOPIC, 500).unwrap_err();
    assert!(is_corruption(&err, TOPIC, 500), "{err:?}");
    assert_eq!(wal.read(TOPIC, 999).unwrap().value(), value(999).as_slice());
}

#[test]
fn acknowledged_records_are_recovered_after_a_crash() {
    let dir = tempdir();
    run_child(module_path!(), dir.path(), "always");
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    let got = read_all(&wal, TOPIC);
    assert_eq!(got.len() as u64, ACKED);
    for (offset, _, v) in got {
        assert_eq!(v, value(offset));
    }
    assert_eq!(wal.recovery_report().torn_tails, 0);
}

#[test]
fn a_read_only_handle_sees_every_acknowledged_record() {
    let dir = tempdir();
    // The Wal never syncs by itself; one writer is `Always`.
    let wal = Wal::open_with(dir.path(), small().sync_interval_ms(3_600_000)).unwrap();
    let always = wal
        .writer(TOPIC)
        .unwrap()
        .with_durability(Durability::Always);
    for i in 0..25 {
        always.append(&value(i)).unwrap();
    }
    let reader = Wal::open_read_only_with(dir.path(), small()).unwrap();
    assert_eq!(read_all(&reader, TOPIC).len(), 25);
    for i in 25..40 {
        always.append(&value(i)).unwrap();
    }
    reader.refresh().unwrap();
    let got = read_all(&reader, TOPIC);
    assert_eq!(got.len(), 40);
    assert_eq!(got[39].2, value(39));
}

/// Writes two files' worth of records and closes.
fn two_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let wal = Wal::open_with(dir, small()).unwrap();
    let big = vec![7u8; 30_000];
    // 8 blocks of 64 KiB per file: two records per block, so 20 records need two files.
    for _ in 0..20 {
        wal.append(TOPIC, &big).unwrap();
    }
    wal.close().unwrap();
    let files = data_files(dir);
    assert!(files.len() >= 2, "{files:?}");
    files
}

#[test]
fn a_damaged_file_header_is_reported_and_never_deleted() {
    for at in [0u64, 9, 20, 30, 47, 50] {
        let dir = tempdir();
        let files = two_files(dir.path());
        let newest = files.last().unwrap();
        flip_byte(newest, at);
        let err = Wal::open_with(dir.path(), small()).unwrap_err();
        assert!(
            matches!(err, Error::Corruption { .. }),
            "byte {at}: {err:?}"
        );
        let err = Wal::open_read_only_with(dir.path(), small()).unwrap_err();
        assert!(
            matches!(err, Error::Corruption { .. }),
            "byte {at}: {err:?}"
        );
        assert_eq!(
            data_files(dir.path()),
            files,
            "byte {at}: a file was deleted"
        );
    }
}

#[test]
fn a_cut_data_file_is_reported_and_never_deleted() {
    let dir = tempdir();
    let files = two_files(dir.path());
    let newest = files.last().unwrap();
    let len = std::fs::metadata(newest).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(newest)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = Wal::open_with(dir.path(), small()).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
    assert_eq!(data_files(dir.path()), files);
    assert_eq!(std::fs::metadata(newest).unwrap().len(), len / 2);
}

#[test]
fn an_unfinished_file_creation_is_removed_and_an_empty_data_file_is_reported() {
    let dir = tempdir();
    let files = two_files(dir.path());
    // A creation that crashed before its rename: only a `.tmp` file, never holding records.
    let unfinished = dir.path().join(format!("{:020}.tdl.tmp", 1000));
    std::fs::write(&unfinished, vec![0u8; 8192]).unwrap();
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert!(!unfinished.exists());
    assert_eq!(read_all(&wal, TOPIC).len(), 20);
    wal.close().unwrap();
    // A data file is renamed into place only with a valid header: one of zeros (or of no
    // bytes) was cut or damaged, and may have held records.
    for len in [0usize, 8192] {
        let newest = files.last().unwrap();
        let saved = std::fs::read(newest).unwrap();
        std::fs::write(newest, vec![0u8; len]).unwrap();
        let err = Wal::open_with(dir.path(), small()).unwrap_err();
        assert!(matches!(err, Error::Corruption { .. }), "{len}: {err:?}");
        assert!(newest.exists());
        std::fs::write(newest, saved).unwrap();
    }
    assert_eq!(data_files(dir.path()), files);
}

#[test]
fn a_damaged_identity_slot_is_reported_and_never_read_as_unused() {
    for at in [0u64, 13, 40, 100, 303] {
        let dir = tempdir();
        two_files(dir.path());
        let extent = extents(dir.path())
            .into_iter()
            .find(|e| e.id.topic == TOPIC)
            .unwrap();
        flip_byte(&extent.file, extent.start + format::ID_SLOT_AT as u64 + at);
        let err = Wal::open_with(dir.path(), small()).unwrap_err();
        assert!(
            matches!(err, Error::Corruption { .. }),
            "byte {at}: {err:?}"
        );
        let err = Wal::open_read_only_with(dir.path(), small()).unwrap_err();
        assert!(
            matches!(err, Error::Corruption { .. }),
            "byte {at}: {err:?}"
        );
    }
}

#[test]
fn a_damaged_progress_slot_is_counted_and_repaired() {
    let dir = tempdir();
    two_files(dir.path());
    let sealed = extents(dir.path())
        .into_iter()
        .find(|e| e.progress.is_some_and(|p| p.state == ProgressState::Sealed))
        .unwrap();
    flip_byte(&sealed.file, sealed.start + format::PG_SLOT_AT as u64 + 9);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(wal.recovery_report().damaged_progress_slots, 1);
    assert_eq!(read_all(&wal, TOPIC).len(), 20);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(wal.recovery_report().damaged_progress_slots, 0);
    assert_eq!(read_all(&wal, TOPIC).len(), 20);
}

#[test]
fn a_deletion_cut_short_by_a_crash_leaves_the_new_topic_intact() {
    let dir = tempdir();
    let big = vec![3u8; 30_000];
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    for _ in 0..6 {
        wal.append(TOPIC, &big).unwrap();
    }
    wal.flush().unwrap();
    // The old topic's slots as they were before the deletion marked them.
    let before = progress_slots(dir.path(), TOPIC);
    wal.delete_topic(TOPIC).unwrap();
    for i in 0..3 {
        assert_eq!(wal.append(TOPIC, &value(i)).unwrap(), i);
    }
    wal.close().unwrap();
    // A crash before the deletion marked the old extents: their slots as before.
    for (file, at, slot) in &before {
        common::patch(file, *at as u64, slot);
    }
    for pass in 0..2 {
        let wal = Wal::open_with(dir.path(), small()).unwrap();
        let got = read_all(&wal, TOPIC);
        assert_eq!(got.len(), 3, "pass {pass}");
        assert_eq!(got[2].2, value(2));
        let remnants = wal.recovery_report().deleted_remnants;
        assert_eq!(remnants, if pass == 0 { before.len() as u64 } else { 0 });
        wal.close().unwrap();
    }
}

#[test]
fn a_read_only_handle_follows_deleted_and_recreated_topics() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    for i in 0..10 {
        wal.append(TOPIC, &value(i)).unwrap();
        wal.append("gone", &value(i)).unwrap();
    }
    wal.flush().unwrap();
    let ro = Wal::open_read_only_with(dir.path(), small()).unwrap();
    assert_eq!(read_all(&ro, TOPIC).len(), 10);
    wal.delete_topic(TOPIC).unwrap();
    wal.delete_topic("gone").unwrap();
    for i in 0..3 {
        wal.append(TOPIC, &value(100 + i)).unwrap();
    }
    wal.flush().unwrap();
    ro.refresh().unwrap();
    assert_eq!(ro.topics(), vec![TOPIC.to_owned()]);
    assert_eq!(ro.topic_info(TOPIC).unwrap().next_offset, 3);
    let got = read_all(&ro, TOPIC);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].2, value(100));
    assert!(matches!(
        ro.read(TOPIC, 5).unwrap_err(),
        Error::OffsetOutOfRange { .. }
    ));
}

#[test]
fn a_damaged_cursor_slot_never_reads_as_no_group() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    for i in 0..10 {
        wal.append(TOPIC, &value(i)).unwrap();
    }
    let mut reader = wal.reader(TOPIC, "billing").unwrap();
    reader.commit_offset(5).unwrap();
    wal.close().unwrap();
    let cursor = dir
        .path()
        .join("cursors")
        .join(format!("{TOPIC}@billing.cur"));
    // One damaged slot after the first commit: the other holds the same commit.
    flip_byte(&cursor, format::CS_BODY as u64 + 4);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    let reader = wal.reader(TOPIC, "billing").unwrap();
    assert_eq!(reader.committed(), Some(5));
    drop(reader);
    wal.close().unwrap();
    // Both slots damaged: reported, never "no group" (whose records retention could drop).
    flip_byte(
        &cursor,
        (format::CURSOR_SLOT_BYTES + format::CS_BODY) as u64 + 4,
    );
    let err = Wal::open_with(dir.path(), small()).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
}

fn shared_ring(dir: &Path) -> std::path::PathBuf {
    dir.parent().unwrap().join("shared.ring")
}

fn ring_config(dir: &Path) -> tidelog::Config {
    let ring = tidelog::RingConfig::default().capacity_bytes(8 << 20);
    small().ring(tidelog::RingBackend::device(shared_ring(dir)).ring(ring))
}

#[test]
fn a_ring_belongs_to_the_directory_that_wrote_it() {
    let top = tempdir();
    let a = top.path().join("a");
    let b = top.path().join("b");
    run_child(module_path!(), &a, "ring");
    // Another directory is refused the ring while it holds a's appends, and leaves them.
    let err = Wal::open_with(&b, ring_config(&b)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { name, .. } if *name == "device"),
        "{err:?}"
    );
    let wal = Wal::open_with(&a, ring_config(&a)).unwrap();
    assert_eq!(read_all(&wal, TOPIC).len(), 20);
    wal.close().unwrap();
    // Once a closed cleanly (its ring empty), the ring may serve b.
    let wal = Wal::open_with(&b, ring_config(&b)).unwrap();
    wal.append("other", b"b's").unwrap();
    wal.close().unwrap();
}

#[test]
fn a_directory_opens_only_with_the_ring_that_fronted_it() {
    let top = tempdir();
    let a = top.path().join("a");
    run_child(module_path!(), &a, "ring");
    // The ring is formatted again (a new ring at the same path): a's appends are gone from
    // it, so a refuses it rather than opening without them.
    let ring = tidelog::RingWal::open(
        shared_ring(&a),
        tidelog::RingConfig::default()
            .capacity_bytes(8 << 20)
            .format(true),
    )
    .unwrap();
    ring.close().unwrap();
    let err = Wal::open_with(&a, ring_config(&a)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { name, .. } if *name == "device"),
        "{err:?}"
    );
}

#[test]
fn a_directory_moves_with_the_ring_inside_it() {
    let top = tempdir();
    let a = top.path().join("a");
    let inside = |_: &Path| {
        let ring = tidelog::RingConfig::default().capacity_bytes(8 << 20);
        small().ring(tidelog::RingBackend::default().ring(ring))
    };
    let wal = Wal::open_with(&a, inside(&a)).unwrap();
    for i in 0..5 {
        wal.append(TOPIC, &value(i)).unwrap();
    }
    wal.flush().unwrap();
    // A copy of the directory as it stands while open (a crash image) opens in its new place.
    let b = top.path().join("b");
    common::copy_dir(&a, &b);
    drop(wal);
    let wal = Wal::open_with(&b, inside(&b)).unwrap();
    assert_eq!(read_all(&wal, TOPIC).len(), 5);
}

#[test]
fn a_deletion_cut_short_by_a_crash_is_finished_never_a_topic_that_lost_its_head() {
    let dir = tempdir();
    let big = vec![3u8; 30_000];
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    for _ in 0..6 {
        wal.append(TOPIC, &big).unwrap();
    }
    wal.append("kept", b"kept").unwrap();
    wal.close().unwrap();
    let ours = progress_slots(dir.path(), TOPIC);
    assert!(ours.len() >= 3);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    wal.delete_topic(TOPIC).unwrap();
    wal.close().unwrap();
    // A crash after the first extent was marked: the others as they were.
    for (file, at, slot) in &ours[1..] {
        common::patch(file, *at as u64, slot);
    }
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(wal.topics(), vec!["kept".to_owned()]);
    assert_eq!(
        wal.recovery_report().deleted_remnants,
        ours.len() as u64 - 1
    );
    // The topic made again gets an id of its own: its records survive a crash and reopen.
    assert_eq!(wal.append(TOPIC, &value(0)).unwrap(), 0);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    assert_eq!(read_all(&wal, TOPIC).len(), 1);
    assert_eq!(wal.recovery_report().deleted_remnants, 0);
}

/// `(file, position, bytes)` of the progress slot of every extent of `topic`, to put back
/// later (a crash before a deletion marked them).
fn progress_slots(dir: &Path, topic: &str) -> Vec<(std::path::PathBuf, usize, Vec<u8>)> {
    extents(dir)
        .into_iter()
        .filter(|e| e.id.topic == topic)
        .map(|e| {
            let bytes = std::fs::read(&e.file).unwrap();
            let at = (e.start as usize) + format::PG_SLOT_AT;
            (e.file, at, bytes[at..at + format::PG_LEN].to_vec())
        })
        .collect()
}

/// A damaged allocator cursor never makes an append destroy an extent: the block it hands
/// out is checked before its identity is written, and one that holds an extent is refused
/// with `Corruption`; the records there stay readable, before and after a reopen.
#[test]
fn an_allocator_pointed_at_a_used_block_overwrites_nothing() {
    use std::os::unix::fs::FileExt;
    let dir = tempdir();
    let big = |i: u64| vec![u8::try_from(i).unwrap(); 30_000];
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    // Two records per 64 KiB extent: three extents, blocks 0 to 2 of the first file.
    for i in 0..6 {
        assert_eq!(wal.append("t", &big(i)).unwrap(), i);
    }
    assert_eq!(extents(dir.path()).len(), 3);
    // The shared state file's cursor goes back to block 0, as damage might leave it.
    let state = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("tidelog.state"))
        .unwrap();
    state
        .write_all_at(
            &0u64.to_le_bytes(),
            tidelog::internals::STATE_ALLOC_NEXT_BLOCK_AT as u64,
        )
        .unwrap();
    // The next roll is handed block 0.
    match wal.append("t", &big(6)) {
        Err(Error::Corruption { reason, .. }) => {
            assert!(reason.contains("handed out"), "{reason}");
        }
        other => panic!("an allocation over an extent: {other:?}"),
    }
    let check = |wal: &Wal| {
        let records = read_all(wal, "t");
        assert_eq!(records.len(), 6);
        for (i, (offset, _, value)) in records.into_iter().enumerate() {
            assert_eq!((offset, value), (i as u64, big(i as u64)));
        }
    };
    check(&wal);
    drop(wal);
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    check(&wal);
    // The reopened handle places the allocator from the files again.
    assert_eq!(wal.append("t", &big(6)).unwrap(), 6);
    wal.close().unwrap();
}

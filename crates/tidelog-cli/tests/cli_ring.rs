//! `tidelog dump --ring` and `tidelog verify --ring` end to end: human and JSON output, a
//! flipped byte named by offset, and bad input.

use std::path::Path;
use std::process::{Command, Output};

use tidelog::ring::format::{RING_START, RR_HEADER_LEN};
use tidelog::{RingConfig, RingWal};

const CAP: u64 = 1 << 20;

fn tidelog(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidelog"))
        .args(args)
        .output()
        .expect("run tidelog")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Makes a ring of `n` records (`record {i}`, padded to 200 bytes) and closes it; returns
/// their offsets and the ring's record-area size.
fn make_ring(path: &Path, n: usize) -> (Vec<u64>, u64) {
    let config = RingConfig::default()
        .capacity_bytes(CAP)
        .format(true)
        .block_bytes(16 << 10)
        .max_record_bytes(16 << 10);
    let ring = RingWal::open(path, config).expect("open ring");
    let offsets = (0..n)
        .map(|i| {
            let mut body = format!("record {i}").into_bytes();
            body.resize(200, b'.');
            ring.append(&body).expect("append").offset
        })
        .collect();
    ring.flush().expect("flush");
    let ring_bytes = ring.ring_bytes();
    ring.close().expect("close");
    (offsets, ring_bytes)
}

/// The numbers following each `"key":` in `json`, in order.
fn numbers_after(json: &str, key: &str) -> Vec<u64> {
    let pat = format!("\"{key}\":");
    json.match_indices(&pat)
        .map(|(i, _)| {
            let digits: String = json[i + pat.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().expect("a number")
        })
        .collect()
}

fn flip(path: &Path, pos: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open ring");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, pos).expect("read");
    f.write_all_at(&[b[0] ^ 0x01], pos).expect("write");
}

#[test]
fn dump_shows_slots_and_records() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ring.wal");
    let (offsets, _) = make_ring(&path, 150);
    let ring = path.display().to_string();

    let out = tidelog(&["dump", "--ring", &ring]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dump = text(&out.stdout);
    assert!(dump.contains("slot 0 (byte 0)"), "{dump}");
    assert!(dump.contains("slot 1 (byte 4096)"), "{dump}");
    assert_eq!(dump.matches("[current]").count(), 1, "{dump}");
    let lines: Vec<&str> = dump
        .lines()
        .filter(|l| l.starts_with("  offset "))
        .collect();
    assert_eq!(lines.len(), offsets.len());
    assert!(lines.iter().all(|l| l.contains(" ok at byte ")), "{dump}");
    assert!(lines[0].starts_with(&format!("  offset {} len 200 B", offsets[0])));
    assert!(dump.contains("scan: "), "{dump}");
    assert!(dump.contains("clean shutdown"), "{dump}");

    let out = tidelog(&["dump", "--ring", &ring, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json = text(&out.stdout);
    assert_eq!(json.lines().count(), 1, "one JSON document");
    assert!(json.starts_with('{') && json.trim_end().ends_with('}'));
    for field in ["\"slots\":[", "\"records\":[", "\"scan\":{"] {
        assert!(json.contains(field), "{field} missing: {json}");
    }
    let records = &json[json.find("\"records\":[").expect("records")..];
    assert_eq!(records.matches("\"crc_ok\":true").count(), offsets.len());
    let listed = numbers_after(records, "offset");
    assert_eq!(&listed[..offsets.len()], &offsets[..]);
    assert_eq!(numbers_after(&json, "slot"), vec![0, 1]);
    assert_eq!(json.matches("\"current\":true").count(), 1);

    // --from and --limit pick a window of records.
    let from = offsets[10].to_string();
    let out = tidelog(&[
        "dump", "--ring", &ring, "--from", &from, "--limit", "5", "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json = text(&out.stdout);
    let records = &json[json.find("\"records\":[").expect("records")..];
    let records = &records[..records.find("],\"scan\"").expect("end of records")];
    assert_eq!(numbers_after(records, "offset"), offsets[10..15].to_vec());
    assert!(json.contains("\"complete\":false"), "{json}");
}

#[test]
fn verify_passes_a_clean_ring_and_names_a_flipped_record() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ring.wal");
    let (offsets, ring_bytes) = make_ring(&path, 120);
    let ring = path.display().to_string();

    let out = tidelog(&["verify", "--ring", &ring]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.starts_with("ok: "), "{report}");
    assert!(report.contains("120 records"), "{report}");

    let victim = offsets[60];
    let position = RING_START + victim % ring_bytes;
    flip(&path, position + RR_HEADER_LEN as u64 + 7);
    let out = tidelog(&["verify", "--ring", &ring]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    let bad: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("CORRUPT "))
        .collect();
    assert_eq!(bad.len(), 1, "{report}");
    assert!(
        bad[0].contains(&format!("offset {victim} (byte {position})")),
        "{report}"
    );
    assert!(
        report
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("CORRUPT: ")),
        "{report}"
    );

    let out = tidelog(&["verify", "--ring", &ring, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let json = text(&out.stdout);
    assert!(json.contains("\"ok\":false"), "{json}");
    let corrupt = &json[json.find("\"corrupt\":[").expect("corrupt")..];
    assert_eq!(numbers_after(corrupt, "offset"), vec![victim]);
    assert_eq!(numbers_after(corrupt, "position"), vec![position]);

    // dump still lists the record, marked.
    let out = tidelog(&["dump", "--ring", &ring]);
    assert!(out.status.success());
    let dump = text(&out.stdout);
    let line = dump
        .lines()
        .find(|l| l.starts_with(&format!("  offset {victim} ")))
        .expect("record listed");
    assert!(line.contains("MISMATCH"), "{line}");
}

#[test]
fn bad_ring_paths_are_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("missing").display().to_string();
    let junk = tmp.path().join("junk");
    std::fs::write(&junk, vec![0x5Au8; 64 << 10]).expect("write");
    let junk = junk.display().to_string();
    let dir = tmp.path().display().to_string();
    for cmd in ["dump", "verify"] {
        for (what, path) in [("missing", &missing), ("junk", &junk), ("directory", &dir)] {
            let out = tidelog(&[cmd, "--ring", path]);
            assert_eq!(out.status.code(), Some(2), "{cmd} {what}");
            let err = text(&out.stderr);
            assert_eq!(err.lines().count(), 1, "{cmd} {what}: {err}");
            assert!(err.starts_with("tidelog: "), "{err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    let out = tidelog(&["verify", "--ring", &junk]);
    assert!(text(&out.stderr).contains("not a tidelog ring"));
}

#[test]
fn dir_or_ring_but_not_both_nor_neither() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ring.wal");
    make_ring(&path, 3);
    let ring = path.display().to_string();
    let dir = tmp.path().display().to_string();
    for cmd in ["dump", "verify"] {
        let out = tidelog(&[cmd]);
        assert_eq!(out.status.code(), Some(2), "{cmd} with neither");
        let out = tidelog(&[cmd, &dir, "--ring", &ring]);
        assert_eq!(out.status.code(), Some(2), "{cmd} with both");
        assert!(out.stdout.is_empty());
    }
    let out = tidelog(&["dump", "--ring", &ring, "--topic", "t"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--topic does not apply to a ring"
    );
}

#[test]
fn dump_names_the_topic_of_journal_entries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let ring_path = tmp.path().join("journal.ring");
    let config = tidelog::Config::default()
        .file_size_bytes(8 << 20)
        .block_size_bytes(1 << 20)
        .durability(tidelog::Durability::Always)
        // No checkpoint during the test: it would trim the entries out of the ring.
        .sync_interval_ms(3_600_000)
        .ring(
            tidelog::RingBackend::device(&ring_path)
                .ring(RingConfig::default().capacity_bytes(8 << 20)),
        );
    let wal = tidelog::Wal::open_with(&dir, config).expect("open wal");
    let orders = wal.writer("orders").expect("writer");
    for i in 0..5 {
        orders
            .append(format!("order {i}").as_bytes())
            .expect("append");
    }
    // Each append is durable in the ring on return. Dumped while the log holds the ring
    // open for writing.
    let out = tidelog(&["dump", "--ring", &ring_path.display().to_string()]);
    drop(wal);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dump = text(&out.stdout);
    let entries: Vec<&str> = dump
        .lines()
        .filter(|l| l.starts_with("  offset "))
        .collect();
    assert!(!entries.is_empty(), "{dump}");
    assert!(
        entries.iter().all(|l| l.contains(" topic orders offsets ")),
        "{dump}"
    );
    assert!(entries[0].ends_with("offsets 0..1"), "{dump}");
}

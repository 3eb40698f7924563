//! Goal: one flipped bit anywhere, or a file cut anywhere, is detected and reported, or
//! changes nothing: never fewer acknowledged records in silence, never wrong bytes, never a
//! panic, never a deleted data file.
//! Method: build a sample directory holding every structure of the data directory (several
//! data files, sealed and open extents, footers, a consumer group's cursor file), from a clean
//! close and from a crash (a child process that acknowledged `Always` appends and exited
//! without closing). Then, case by case, restore the pristine image, damage it once, and open
//! it writable and read-only and read every record. A case passes when the open or a read
//! fails with `Corruption` (or `UnsupportedVersion`), or when every acknowledged record comes
//! back byte-equal. Damage: a bit flip in every byte of every file header, identity slot,
//! progress slot, footer and cursor slot, and in a sample of record bytes; each file cut at
//! every 4 KiB boundary and at bytes of its last 4 KiB. CI runs a stride through the bytes
//! (every byte position is still covered across extents) and at most 160 page boundaries
//! per file (every one of a data file; a spread over the 8 MiB shared state file);
//! `TIDELOG_SWEEP=full` runs all.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use crate::common::{self, child_env, data_files, extents, frames, run_child, small, tempdir};
use tidelog::format::{self, ProgressState};
use tidelog::{Append, Config, Durability, Error, ReaderOptions, StartPosition, Wal};

const TOPICS: [&str; 3] = ["orders", "clicks", "audit"];
const GROUP: &str = "billing";

/// The records every topic must hold: offset -> (key, value).
type Truth = BTreeMap<String, Vec<(Option<Vec<u8>>, Vec<u8>)>>;

/// A directory's files: relative path -> bytes.
type Image = Vec<(PathBuf, Vec<u8>)>;

fn full() -> bool {
    std::env::var("TIDELOG_SWEEP").is_ok_and(|v| v == "full")
}

fn config() -> Config {
    small().sync_interval_ms(3_600_000)
}

fn record(topic: usize, i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let len = 50 + (i as usize * 7919 + topic * 131) % 9000;
    let value: Vec<u8> = (0..len)
        .map(|j| (j as u64 ^ i ^ (topic as u64) << 5) as u8 | 1)
        .collect();
    let key = (!i.is_multiple_of(3)).then(|| format!("k{topic}-{i}").into_bytes());
    (key, value)
}

/// Records per topic: enough for sealed extents with footers in two files, and an open tail.
fn counts() -> [u64; 3] {
    [70, 45, 9]
}

/// Appends the sample: single records, a batch, a group with two commits.
fn write_sample(wal: &Wal, always: bool) {
    for (t, topic) in TOPICS.iter().enumerate() {
        let mut w = wal.writer(topic).unwrap();
        if always {
            w = w.with_durability(Durability::Always);
        }
        let n = counts()[t];
        let mut i = 0;
        while i < n {
            if i % 10 == 4 && i + 3 <= n {
                let recs: Vec<_> = (i..i + 3).map(|j| record(t, j)).collect();
                let batch: Vec<Append<'_>> = recs
                    .iter()
                    .map(|(k, v)| Append {
                        headers: None,
                        key: k.as_deref(),
                        value: v,
                        timestamp_us: Some(1_000_000 + i),
                    })
                    .collect();
                assert_eq!(w.append_batch_records(&batch).unwrap(), i..i + 3);
                i += 3;
            } else {
                let (k, v) = record(t, i);
                let rec = Append {
                    headers: None,
                    key: k.as_deref(),
                    value: &v,
                    timestamp_us: Some(1_000_000 + i),
                };
                assert_eq!(w.append_record(rec).unwrap(), i);
                i += 1;
            }
        }
    }
    // Commits at offset 0 consume nothing, so no file may go.
    let mut reader = wal.reader(TOPICS[0], GROUP).unwrap();
    reader.commit_offset(0).unwrap();
    reader.commit_offset(0).unwrap();
}

fn truth() -> Truth {
    TOPICS
        .iter()
        .enumerate()
        .map(|(t, name)| {
            let recs = (0..counts()[t]).map(|i| record(t, i)).collect();
            ((*name).to_owned(), recs)
        })
        .collect()
}

/// Child side: acknowledged `Always` appends, then an exit without closing.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let cfg = if mode == "ring" {
        ring_config()
    } else {
        config()
    };
    let wal = Wal::open_with(&dir, cfg).unwrap();
    write_sample(&wal, true);
    std::process::exit(0);
}

fn image(dir: &Path) -> Image {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().to_owned();
                out.push((rel, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn restore(dir: &Path, image: &Image) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    for (rel, bytes) in image {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        write_sparse(&path, bytes);
    }
}

/// Writes `bytes` as a new file, leaving its zero pages holes (they read back as zeros): the
/// shared state file is 8 MiB of mostly zeros, and every case restores it.
fn write_sparse(path: &Path, bytes: &[u8]) {
    let file = std::fs::File::create(path).unwrap();
    file.set_len(bytes.len() as u64).unwrap();
    let mut run: Option<usize> = None;
    for (i, page) in bytes.chunks(PAGE).enumerate() {
        // A slice comparison is one memcmp, fast in the unoptimised test build too.
        let zero = page == &ZERO_PAGE[..page.len()];
        match (zero, run) {
            (false, None) => run = Some(i * PAGE),
            (true, Some(from)) => {
                file.write_all_at(&bytes[from..i * PAGE], from as u64)
                    .unwrap();
                run = None;
            }
            _ => {}
        }
    }
    if let Some(from) = run {
        file.write_all_at(&bytes[from..], from as u64).unwrap();
    }
}

const PAGE: usize = 4096;
const ZERO_PAGE: [u8; PAGE] = [0; PAGE];
/// Page-boundary cuts per file outside full mode: every boundary of a data file, a spread
/// over the larger shared state file.
const CUT_PAGES_MAX: u64 = 160;

/// Where a file of `len` bytes is cut: at 4 KiB boundaries (each in full mode, else at most
/// about `CUT_PAGES_MAX` spread over the file, starting at a page `phase` picks) and at
/// every `tail_stride`-th byte of its last 4 KiB.
fn cut_points(len: u64, tail_stride: u64, phase: u64) -> Vec<u64> {
    let page = PAGE as u64;
    let every = if full() {
        1
    } else {
        len.div_ceil(page).div_ceil(CUT_PAGES_MAX).max(1)
    };
    let first = (phase % every) * page;
    let mut points: Vec<u64> = (first..len).step_by((every * page) as usize).collect();
    let tail_from = len.saturating_sub(page);
    points.extend(positions(len - tail_from, tail_stride, phase).map(|p| tail_from + p));
    points
}

fn reported(e: &Error) -> bool {
    matches!(
        e,
        Error::Corruption { .. } | Error::UnsupportedVersion { .. }
    )
}

/// Reads every topic of `wal` and holds it against `truth`. `Ok` when all came back, or when
/// a read reported damage; `Err` names what broke the rules.
fn read_back(wal: &Wal, truth: &Truth) -> Result<(), String> {
    for (topic, want) in truth {
        let opts = ReaderOptions {
            start: StartPosition::Earliest,
            ..ReaderOptions::default()
        };
        let mut reader = match wal.reader_with(topic, opts) {
            Ok(r) => r,
            Err(e) if reported(&e) => return Ok(()),
            Err(e) => return Err(format!("{topic}: reader: {e:?}")),
        };
        let mut next = 0u64;
        loop {
            match reader.next() {
                Ok(Some(r)) => {
                    if r.offset != next {
                        return Err(format!("{topic}: offset {} where {next} was due", r.offset));
                    }
                    let Some((k, v)) = want.get(next as usize) else {
                        return Err(format!("{topic}: record {next} was never written"));
                    };
                    if r.key != k.as_deref() || r.value != v.as_slice() {
                        return Err(format!("{topic}: record {next} has wrong bytes"));
                    }
                    next += 1;
                }
                Ok(None) => break,
                Err(e) if reported(&e) => return Ok(()),
                Err(e) => return Err(format!("{topic}: read {next}: {e:?}")),
            }
        }
        if next != want.len() as u64 {
            return Err(format!(
                "{topic}: {next} of {} acknowledged records, no error",
                want.len()
            ));
        }
    }
    Ok(())
}

/// Opens the damaged directory both ways and checks the rules; `Err` says which broke.
fn check(dir: &Path, truth: &Truth) -> Result<(), String> {
    let before = data_files(dir);
    for writable in [false, true] {
        let opened = if writable {
            Wal::open_with(dir, config())
        } else {
            Wal::open_read_only_with(dir, config())
        };
        match opened {
            Err(e) if reported(&e) => {}
            Err(e) => return Err(format!("open (writable {writable}): {e:?}")),
            Ok(wal) => {
                read_back(&wal, truth).map_err(|m| format!("writable {writable}: {m}"))?;
                if writable {
                    // A clean close after a successful open must not fail either.
                    wal.close().map_err(|e| format!("close: {e:?}"))?;
                }
            }
        }
        let after = data_files(dir);
        if let Some(gone) = before.iter().find(|f| !after.contains(f)) {
            return Err(format!("open (writable {writable}) deleted {gone:?}"));
        }
    }
    Ok(())
}

/// Runs one case: restore, damage, check, catching panics.
fn case(dir: &Path, pristine: &Image, truth: &Truth, what: &str, damage: impl FnOnce(&Path)) {
    restore(dir, pristine);
    damage(dir);
    let outcome = catch_unwind(AssertUnwindSafe(|| check(dir, truth)));
    verdict(what, outcome);
}

fn flip_bit(path: &Path, pos: u64, bit: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[pos as usize] ^= 1 << (bit % 8);
    std::fs::write(path, bytes).unwrap();
}

/// Byte positions to flip in a structure of `len` bytes: all of them in full mode, else
/// every `stride`-th starting at `phase` (so structures met several times cover every byte).
fn positions(len: u64, stride: u64, phase: u64) -> impl Iterator<Item = u64> {
    let (stride, phase) = if full() {
        (1, 0)
    } else {
        (stride, phase % stride)
    };
    (phase..len).step_by(stride as usize)
}

/// Every structure's bytes of one image: (what, file, first byte, length).
fn structures(dir: &Path) -> Vec<(String, PathBuf, u64, u64)> {
    let mut out = Vec::new();
    for f in data_files(dir) {
        out.push(("file header".to_owned(), f, 0, format::FH_LEN as u64));
    }
    for e in extents(dir) {
        let name = format!("{}@{}", e.id.topic, e.id.first_offset);
        let id_at = e.start + format::ID_SLOT_AT as u64;
        out.push((
            format!("identity slot {name}"),
            e.file.clone(),
            id_at,
            format::ID_LEN as u64,
        ));
        let pg_at = e.start + format::PG_SLOT_AT as u64;
        out.push((
            format!("progress slot {name}"),
            e.file.clone(),
            pg_at,
            format::PG_LEN as u64,
        ));
        if let Some(p) = e.progress.filter(|p| p.state == ProgressState::Sealed) {
            out.push((
                format!("footer {name}"),
                e.file.clone(),
                e.start + p.durable_end,
                p.footer_count * format::IX_LEN as u64,
            ));
        }
    }
    let cursors = dir.join("cursors");
    for entry in std::fs::read_dir(&cursors).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        for slot in 0..2u64 {
            let at = slot * format::CURSOR_SLOT_BYTES as u64;
            let len = u64::from(format::get_u32(&bytes, at as usize + format::CS_LEN));
            out.push((
                format!("cursor slot {slot}"),
                path.clone(),
                at,
                format::CS_BODY as u64 + len,
            ));
        }
    }
    out
}

fn sweep(source: &Path) -> (u64, u64) {
    let pristine = image(source);
    let truth = truth();
    let work = tempdir();
    let dir = work.path().join("d");
    // The undamaged image passes, or nothing below means anything.
    case(&dir, &pristine, &truth, "undamaged", |_| {});
    let mut flips = 0;
    for (i, (what, file, at, len)) in structures(source).into_iter().enumerate() {
        let rel = file.strip_prefix(source).unwrap().to_owned();
        for pos in positions(len, 5, i as u64) {
            let bit = (pos + i as u64) as u32;
            let label = format!("{what}: bit {} of byte {pos}", bit % 8);
            case(&dir, &pristine, &truth, &label, |d| {
                flip_bit(&d.join(&rel), at + pos, bit);
            });
            flips += 1;
        }
    }
    // A sample of record bytes: every frame's header, some value bytes.
    for (i, frame) in frames(source).into_iter().enumerate() {
        let rel = frame.file.strip_prefix(source).unwrap().to_owned();
        let stride = if full() { 1 } else { 13 };
        let picks = [
            frame.pos + (i as u64 * 3) % format::FRAME_HEADER_BYTES,
            frame.value_pos() + (i as u64 * 101) % (frame.end() - frame.value_pos()).max(1),
        ];
        if i % stride != 0 {
            continue;
        }
        for pos in picks {
            let label = format!("{} record {}: byte {pos}", frame.topic, frame.offset);
            case(&dir, &pristine, &truth, &label, |d| {
                flip_bit(&d.join(&rel), pos, i as u32);
            });
            flips += 1;
        }
    }
    // Cuts: at 4 KiB boundaries of every file, and bytes of its last 4 KiB.
    let mut cuts = 0;
    for (rel, bytes) in &pristine {
        let len = bytes.len() as u64;
        for point in cut_points(len, 97, cuts) {
            let label = format!("{rel:?} cut at {point} of {len}");
            case(&dir, &pristine, &truth, &label, |d| {
                cut_file(&d.join(rel), point)
            });
            cuts += 1;
        }
    }
    (flips, cuts)
}

#[test]
fn every_flipped_bit_and_cut_file_is_reported_or_harmless_after_a_clean_close() {
    let src = tempdir();
    let wal = Wal::open_with(src.path(), config()).unwrap();
    write_sample(&wal, false);
    wal.close().unwrap();
    assert!(data_files(src.path()).len() >= 2);
    let (flips, cuts) = sweep(src.path());
    eprintln!("clean close: {flips} bit flips, {cuts} cuts");
}

#[test]
fn every_flipped_bit_and_cut_file_is_reported_or_harmless_after_a_crash() {
    let src = tempdir();
    run_child(module_path!(), src.path(), "crash");
    let (flips, cuts) = sweep(src.path());
    eprintln!("crash image: {flips} bit flips, {cuts} cuts");
}

// ---- A staged job, committed while no process held the directory. ----------------------

const STAGED_TOPIC: &str = "staged";
const JOB: &str = "job1";

fn staged_config() -> Config {
    // Segments of 64 KiB blocks: the large part is adopted, the small one copied.
    config().staged_adopt_bytes_min(64 * 1024)
}

fn staged_record(part: usize, i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let (k, mut v) = record(part, i);
    v.truncate(200 + (i as usize * 37) % 700);
    (k, v)
}

/// Stages part `p0` (large: adopted) and `p1` (small: copied) and commits both.
fn stage_job(dir: &Path) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    let mut truth = Vec::new();
    for (p, n) in [(0usize, 400u64), (1, 12)] {
        let name = format!("p{p}");
        let mut w = tidelog::StagedWriter::create(dir, JOB, &name)
            .unwrap()
            .segment_geometry(common::BLOCK, 3)
            .unwrap();
        for i in 0..n {
            let (k, v) = staged_record(p, i);
            let rec = Append {
                headers: None,
                key: k.as_deref(),
                value: &v,
                timestamp_us: Some(2_000_000 + i),
            };
            w.append(STAGED_TOPIC, &[rec]).unwrap();
            truth.push((k, v));
        }
        w.finish().unwrap();
    }
    tidelog::stage::commit(dir, JOB, &["p0", "p1"]).unwrap();
    truth
}

/// The job's own records came back whole, or none of them did and the job is reported as
/// set aside (or the open reported damage).
fn check_staged(
    dir: &Path,
    base: &Truth,
    job: &[(Option<Vec<u8>>, Vec<u8>)],
) -> Result<(), String> {
    let wal = match Wal::open_with(dir, staged_config()) {
        Ok(wal) => wal,
        Err(e) if reported(&e) => return Ok(()),
        Err(e) => return Err(format!("open: {e:?}")),
    };
    read_back(&wal, base)?;
    let published = wal.topics().iter().any(|t| t == STAGED_TOPIC);
    if published {
        let mut want = Truth::new();
        want.insert(STAGED_TOPIC.to_owned(), job.to_vec());
        read_back(&wal, &want)?;
    }
    wal.close().map_err(|e| format!("close: {e:?}"))?;
    let jobs = tidelog::stage::jobs(dir).map_err(|e| format!("jobs: {e:?}"))?;
    let set_aside = jobs.iter().any(|j| j.job == JOB && j.failed.is_some());
    match (published, set_aside) {
        (true, false) | (false, true) => Ok(()),
        (true, true) => Err("published and set aside".to_owned()),
        (false, false) => Err(format!("neither published nor set aside: {jobs:?}")),
    }
}

#[test]
fn a_staged_job_with_any_flipped_bit_or_cut_file_is_published_whole_or_set_aside() {
    let src = tempdir();
    let wal = Wal::open_with(src.path(), staged_config()).unwrap();
    write_sample(&wal, false);
    wal.close().unwrap();
    let job = stage_job(src.path());
    let pristine = image(src.path());
    let base = truth();
    let work = tempdir();
    let dir = work.path().join("d");
    let run = |label: &str, damage: &dyn Fn(&Path)| {
        restore(&dir, &pristine);
        damage(&dir);
        verdict(
            label,
            catch_unwind(AssertUnwindSafe(|| check_staged(&dir, &base, &job))),
        );
    };
    run("undamaged", &|_| {});
    let job_dir = Path::new("staging").join(JOB);
    let mut flips = 0u64;
    let mut cuts = 0u64;
    for (i, (rel, bytes)) in pristine.iter().enumerate() {
        if !rel.starts_with(&job_dir) {
            continue;
        }
        let name = rel.file_name().unwrap().to_string_lossy().into_owned();
        let len = bytes.len() as u64;
        // Text files and segment headers: every byte; segment blocks: their slot pages
        // and a sample of record bytes.
        let mut picks: Vec<u64> = if name.ends_with(".seg") {
            let mut p: Vec<u64> = positions(64, 3, i as u64).collect();
            let mut at = format::FILE_HEADER_BYTES;
            while at < len {
                p.extend(positions(format::ID_LEN as u64, 7, at).map(|x| at + x));
                let pg = at + format::PG_SLOT_AT as u64;
                p.extend(positions(format::PG_LEN as u64, 3, at).map(|x| pg + x));
                p.extend((1..8).map(|k| at + format::BLOCK_HEADER_BYTES + k * 1543));
                at += common::BLOCK;
            }
            p
        } else {
            positions(len, 2, i as u64).collect()
        };
        picks.retain(|&p| p < len);
        for pos in picks {
            let label = format!("{name}: byte {pos}");
            run(&label, &|d| flip_bit(&d.join(rel), pos, pos as u32));
            flips += 1;
        }
        for point in cut_points(len, 61, i as u64) {
            let label = format!("{name}: cut at {point} of {len}");
            run(&label, &|d| cut_file(&d.join(rel), point));
            cuts += 1;
        }
    }
    eprintln!("staged job: {flips} bit flips, {cuts} cuts");
}

// ---- A directory fronted by a ring, after a crash: the ring holds acknowledged appends. ----

fn ring_config() -> Config {
    let ring = tidelog::RingConfig::default()
        .capacity_bytes(4 << 20)
        .block_bytes(16 * 1024);
    config().ring(tidelog::RingBackend::default().ring(ring))
}

/// What a power loss may leave of a ring-backed directory after a crash: the data files as
/// their last checkpoint made them durable (every byte past each extent's durable end lost),
/// so the ring alone holds the appends since.
fn lose_unsynced_data(dir: &Path) {
    for e in extents(dir) {
        let durable_end = match e.progress {
            Some(p) if p.state == ProgressState::Sealed => continue,
            Some(p) => p.durable_end,
            None => format::BLOCK_HEADER_BYTES,
        };
        common::zero_range(&e.file, e.start + durable_end, e.start + e.len);
    }
}

#[test]
fn a_ring_backed_directory_with_any_flipped_bit_or_cut_file_is_reported_or_whole() {
    ring_sweep(false);
}

#[test]
fn a_ring_backed_directory_after_a_power_loss_with_any_flipped_bit_is_reported_or_whole() {
    ring_sweep(true);
}

fn ring_sweep(power_loss: bool) {
    let src = tempdir();
    run_child(module_path!(), src.path(), "ring");
    if power_loss {
        lose_unsynced_data(src.path());
    }
    let pristine = image(src.path());
    let truth = truth();
    let work = tempdir();
    let dir = work.path().join("d");
    let run = |label: &str, damage: &dyn Fn(&Path)| {
        restore(&dir, &pristine);
        damage(&dir);
        let checked = catch_unwind(AssertUnwindSafe(|| {
            match Wal::open_with(&dir, ring_config()) {
                // A cut ring file no longer has the size its header says.
                Err(e) if reported(&e) || matches!(e, Error::CapacityMismatch { .. }) => Ok(()),
                Err(e) => Err(format!("open: {e:?}")),
                Ok(wal) => read_back(&wal, &truth),
            }
        }));
        verdict(label, checked);
    };
    run("undamaged", &|_| {});
    if power_loss {
        // The ring must hold appends the data files lost, or this sweep tests nothing.
        restore(&dir, &pristine);
        let wal = Wal::open_with(&dir, ring_config()).unwrap();
        assert!(wal.recovery_report().ring_records_replayed > 0);
    }
    let ring = Path::new(tidelog::RING_FILE);
    let ring_len = pristine
        .iter()
        .find(|(r, _)| r == ring)
        .map(|(_, b)| b.len() as u64)
        .unwrap();
    let mut flips = 0u64;
    // Both header slots, every byte (one slot damaged: the other serves).
    for slot in 0..2u64 {
        for pos in positions(80, 3, slot) {
            let at = slot * 4096 + pos;
            run(&format!("ring header slot {slot}: byte {pos}"), &|d| {
                flip_bit(&d.join(ring), at, at as u32)
            });
            flips += 1;
        }
    }
    // Every 4 KiB unit's first bytes (block headers where blocks start) and a sample of
    // record bytes, over the whole ring.
    // The one place the rules leave open: the ring's last block. A damaged last block looks
    // like a block torn by the power loss itself (no later block says it was acknowledged),
    // so it ends the log; with the data files' copies lost too, its appends are gone. That
    // takes two faults at once (a power loss, and damage to that very block).
    let last_block = if power_loss {
        last_ring_block(&src.path().join(ring))
    } else {
        0..0
    };
    let stride = if full() { 1 } else { 11 };
    for (n, unit) in (8192..ring_len).step_by(4096).enumerate() {
        if n % stride != 0 {
            continue;
        }
        for pos in [unit + (n as u64 % 40), unit + 40 + (n as u64 * 37) % 4000] {
            if last_block.contains(&pos) {
                continue;
            }
            run(&format!("ring byte {pos}"), &|d| {
                flip_bit(&d.join(ring), pos, pos as u32)
            });
            flips += 1;
        }
    }
    let mut cuts = 0u64;
    for (rel, bytes) in &pristine {
        let len = bytes.len() as u64;
        let step = if full() || len <= 64 * 4096 {
            4096
        } else {
            16 * 4096
        };
        for point in (0..len).step_by(step as usize) {
            run(&format!("{rel:?} cut at {point}"), &|d| {
                cut_file(&d.join(rel), point)
            });
            cuts += 1;
        }
    }
    eprintln!("ring-backed directory (power loss {power_loss}): {flips} bit flips, {cuts} cuts");
}

/// Device positions of the ring's last block (its header to its last record's end).
fn last_ring_block(path: &Path) -> std::ops::Range<u64> {
    let ins = tidelog::ring::inspect(path).unwrap();
    let last = ins.records().unwrap().map(|r| r.unwrap()).last().unwrap();
    ins.position(last.block_offset)..last.position + last.end_offset() - last.offset
}

// ---- A RingWal on its own, after a crash. ------------------------------------------------

#[test]
fn a_ring_with_any_flipped_bit_or_cut_is_reported_or_whole_but_for_its_last_block() {
    let src = tempdir();
    let path = src.path().join("ring");
    let config = || {
        tidelog::RingConfig::default()
            .capacity_bytes(1 << 20)
            .block_bytes(16 * 1024)
            .max_record_bytes(16 * 1024)
    };
    let ring = tidelog::RingWal::open(&path, config()).unwrap();
    // One at a time, so each block is acknowledged before the next is sealed.
    let want: Vec<(u64, Vec<u8>)> = (0..60u64)
        .map(|i| {
            let len = 300 + (i as usize * 97) % 3000;
            let body: Vec<u8> = (0..len).map(|j| (j as u64 * 7 + i) as u8).collect();
            let h = ring.append(&body).unwrap();
            h.wait().unwrap();
            (h.offset, body)
        })
        .collect();
    // The crash image: the file as it stands while the ring is open.
    let pristine = std::fs::read(&path).unwrap();
    drop(ring);
    let last_block = last_ring_block_of(&pristine, src.path());
    let work = tempdir();
    let copy = work.path().join("ring");
    let run = |label: &str, damage: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = pristine.clone();
        damage(&mut bytes);
        std::fs::write(&copy, &bytes).unwrap();
        let last = last_block.start as usize..last_block.end as usize;
        let damaged_last = bytes.get(last.clone()) != pristine.get(last);
        let checked = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
            let ring = match tidelog::RingWal::open(&copy, config()) {
                Ok(r) => r,
                Err(e)
                    if reported(&e)
                        || matches!(
                            e,
                            Error::CapacityMismatch { .. } | Error::NotFormatted { .. }
                        ) =>
                {
                    return Ok(());
                }
                Err(e) => return Err(format!("open: {e:?}")),
            };
            let got: Vec<(u64, Vec<u8>)> = match ring.recover().unwrap().collect() {
                Ok(got) => got,
                Err(e) if reported(&e) => return Ok(()),
                Err(e) => return Err(format!("recover: {e:?}")),
            };
            if got.len() > want.len() || got[..] != want[..got.len()] {
                return Err("records are not a prefix of those written".to_owned());
            }
            // Only the last block's records may go, and only when it was damaged.
            let in_last = |o: u64| tidelog::ring::format::RING_START + o >= last_block.start;
            let only_last_lost = damaged_last && want[got.len()..].iter().all(|(o, _)| in_last(*o));
            if got.len() < want.len() && !only_last_lost {
                return Err(format!("{} of {} records, no error", got.len(), want.len()));
            }
            Ok(())
        }));
        verdict(label, checked);
    };
    run("undamaged", &|_| {});
    let mut flips = 0u64;
    for slot in 0..2u64 {
        for pos in positions(80, 2, slot) {
            let at = (slot * 4096 + pos) as usize;
            run(&format!("header slot {slot} byte {pos}"), &|b| {
                b[at] ^= 1 << (pos % 8)
            });
            flips += 1;
        }
    }
    let stride = if full() { 1 } else { 3 };
    for (n, unit) in (8192..pristine.len() as u64).step_by(4096).enumerate() {
        if n % stride != 0 {
            continue;
        }
        for pos in [unit + (n as u64 % 40), unit + 40 + (n as u64 * 37) % 4000] {
            let at = pos as usize;
            run(&format!("ring byte {pos}"), &|b| b[at] ^= 1 << (pos % 8));
            flips += 1;
        }
    }
    let mut cuts = 0u64;
    for point in (0..pristine.len()).step_by(4096 * if full() { 1 } else { 8 }) {
        run(&format!("cut at {point}"), &|b| b.truncate(point));
        cuts += 1;
    }
    eprintln!("RingWal: {flips} bit flips, {cuts} cuts");
}

/// Device positions of the last block of the ring image `bytes` (written to `dir`).
fn last_ring_block_of(bytes: &[u8], dir: &Path) -> std::ops::Range<u64> {
    let path = dir.join("inspected");
    std::fs::write(&path, bytes).unwrap();
    last_ring_block(&path)
}

/// Cuts the file at `path` to `len` bytes.
fn cut_file(path: &Path, len: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len).unwrap();
}

/// Fails the test with `label` unless a case's check passed (it may also have panicked).
fn verdict(label: &str, outcome: std::thread::Result<Result<(), String>>) {
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(m)) => panic!("{label}: {m}"),
        Err(_) => panic!("{label}: panicked"),
    }
}

//! Goal: with `Durability::Always`, a `kill -9` at any moment loses no acknowledged record:
//! every acknowledged record comes back byte-equal, offsets per topic stay dense with no
//! duplicate, batches stay whole, and no record ever comes back corrupted, over many
//! crash/recover cycles on one directory.
//!
//! Method: each cycle re-executes this test binary as a child (`child_process_entry`; a no-op
//! without `TIDELOG_CHILD_DIR`) that opens the directory with `Durability::Always` and runs six
//! writer threads on three topics: single appends (two threads share a topic), batches, and
//! pipelined `append_async` handles. Values name their writer and sequence number and are
//! 12 bytes to more than a block long. After each acknowledged append the child prints
//! `@@ack <topic> <offset> <count> <tag> <seq>`. The parent SIGKILLs it 10..80 ms after its
//! first ack (one cycle in eight: 0..30 ms after spawn, maybe mid-recovery), reopens, reads
//! every topic from offset 0 with checksums verified, and checks each record against the
//! acks, the writers' order and batch sizes, and what earlier cycles recovered: every byte of
//! the records new in the cycle, and of all records every tenth cycle and in the last.
//! Records accumulate across cycles (a long campaign starts a fresh directory every 100).
//! `TIDELOG_CRASH_CYCLES` sets the cycle count (default 50; see `scripts/crash-campaign.sh`),
//! `TIDELOG_CRASH_SEED` replays a run's kill timings.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{
    BLOCK, Kill, Rng, Running, campaign_params, child_command, child_env, geometry, kill_time,
    tempdir,
};
use tidelog::{
    Config, Durability, Error, ReaderOptions, RingBackend, RingConfig, StartPosition, Wal, Writer,
};

const TOPICS: [&str; 3] = ["orders", "events", "audit"];
const DEFAULT_CYCLES: u64 = 50;
const DEFAULT_RING_CYCLES: u64 = 30;
/// Appends `append_async` keeps in flight before waiting for the oldest.
const ASYNC_WINDOW: usize = 4;
/// Writer tags of cycle `c` are `c * TAGS_PER_CYCLE + index into WRITERS`.
const TAGS_PER_CYCLE: u32 = 8;
/// Header of every value: writer tag (u32 LE) and sequence number (u64 LE).
const HEADER: usize = 12;
/// A long campaign starts a fresh directory this often, so a cycle's cost (the child's
/// recovery, the parent's full read) stays bounded.
const CYCLES_PER_DIR: u64 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `Writer::append`, one record at a time.
    Single,
    /// `Writer::append_batch` of `batch_len` records.
    Batch,
    /// `Writer::append_async`, up to `ASYNC_WINDOW` in flight, acknowledged in order.
    Async,
}

/// The child's writer threads: (index into `TOPICS`, kind).
const WRITERS: [(usize, Kind); 6] = [
    (0, Kind::Single),
    (0, Kind::Single),
    (1, Kind::Single),
    (1, Kind::Batch),
    (2, Kind::Batch),
    (2, Kind::Async),
];

/// Where appends become durable: the data files alone, or a ring in front of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Mmap,
    Ring,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Mmap => "mmap",
            Backend::Ring => "ring",
        }
    }

    fn parse(name: &str) -> Backend {
        match name {
            "mmap" => Backend::Mmap,
            "ring" => Backend::Ring,
            _ => panic!("unknown backend {name:?}"),
        }
    }

    /// The ring (a file in the directory) checkpoints every 25 ms, so kills also land
    /// inside checkpoints and trims.
    fn config(self) -> Config {
        let config = geometry(8, BLOCK);
        match self {
            Backend::Mmap => config,
            Backend::Ring => config
                .sync_interval_ms(25)
                .ring(RingBackend::default().ring(RingConfig::default().capacity_bytes(8 << 20))),
        }
    }
}

fn child_config(backend: Backend) -> Config {
    backend.config().durability(Durability::Always)
}

fn parent_config(backend: Backend) -> Config {
    backend.config()
}

fn writer_of(tag: u32) -> (usize, Kind) {
    WRITERS[(tag % TAGS_PER_CYCLE) as usize]
}

/// splitmix64: lengths, batch sizes and filler all derive from it.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn mix(tag: u32, seq: u64) -> u64 {
    splitmix(u64::from(tag) << 40 ^ seq)
}

/// Filler word `k` of record `seq` of writer `tag`: whole words keep the parent's check of
/// every byte of every record cheap enough to repeat each cycle in a debug build.
fn filler(tag: u32, seq: u64, k: usize) -> [u8; 8] {
    splitmix(mix(tag, seq) ^ (k as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)).to_le_bytes()
}

/// Mostly small values, some of a few KiB, and (outside batches, which must fit one
/// extent) about one in a hundred larger than a block.
fn value_len(tag: u32, seq: u64) -> usize {
    let h = mix(tag, seq);
    let r = (h >> 16) as usize;
    match h % 256 {
        0..=2 if writer_of(tag).1 != Kind::Batch => BLOCK as usize + 1 + r % BLOCK as usize,
        3..=26 => 256 + r % 3_840,
        _ => HEADER + r % 116,
    }
}

/// Records in the batch whose first record has sequence number `first`.
fn batch_len(tag: u32, first: u64) -> u64 {
    1 + (mix(tag, first) >> 8) % 12
}

/// The value of record `seq` of writer `tag`: header, then filler derived from both.
fn value(tag: u32, seq: u64) -> Vec<u8> {
    let len = value_len(tag, seq);
    let mut v = Vec::with_capacity(len + 8);
    v.extend_from_slice(&tag.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    let mut k = 0;
    while v.len() < len {
        v.extend_from_slice(&filler(tag, seq, k));
        k += 1;
    }
    v.truncate(len);
    v
}

/// The writer and sequence number of a stored value, `None` unless its header names a known
/// writer and its length is right; with `every_byte`, unless every byte is right.
fn decode(v: &[u8], every_byte: bool) -> Option<(u32, u64)> {
    let tag = u32::from_le_bytes(v.get(0..4)?.try_into().ok()?);
    let seq = u64::from_le_bytes(v.get(4..HEADER)?.try_into().ok()?);
    let known = ((tag % TAGS_PER_CYCLE) as usize) < WRITERS.len();
    let intact = known
        && v.len() == value_len(tag, seq)
        && (!every_byte
            || v[HEADER..]
                .chunks(8)
                .enumerate()
                .all(|(k, chunk)| chunk == &filler(tag, seq, k)[..chunk.len()]));
    intact.then_some((tag, seq))
}

fn ack(topic: usize, offset: u64, count: u64, tag: u32, seq: u64) {
    let mut out = std::io::stdout().lock();
    // Written after the append returned: the parent may count on everything it reads.
    writeln!(out, "@@ack {topic} {offset} {count} {tag} {seq}").expect("child: write an ack");
    out.flush().expect("child: flush an ack");
}

fn write_forever(writer: &Writer, topic: usize, kind: Kind, tag: u32) {
    let mut seq = 0u64;
    let mut pending = VecDeque::new();
    loop {
        match kind {
            Kind::Single => {
                let offset = writer.append(&value(tag, seq)).expect("child: append");
                ack(topic, offset, 1, tag, seq);
                seq += 1;
            }
            Kind::Batch => {
                let n = batch_len(tag, seq);
                let values: Vec<Vec<u8>> = (seq..seq + n).map(|s| value(tag, s)).collect();
                let range = writer.append_batch(&values).expect("child: append_batch");
                assert_eq!(range.end - range.start, n, "child: batch range");
                ack(topic, range.start, n, tag, seq);
                seq += n;
            }
            Kind::Async => {
                let handle = writer
                    .append_async(&value(tag, seq))
                    .expect("child: append_async");
                pending.push_back((handle, seq));
                seq += 1;
                if pending.len() == ASYNC_WINDOW {
                    let (handle, s) = pending.pop_front().expect("a pending append");
                    handle.wait().expect("child: wait for durability");
                    ack(topic, handle.offset(), 1, tag, s);
                }
            }
        }
    }
}

/// Child side (a no-op unless re-executed with `TIDELOG_CHILD_DIR`): appends and
/// acknowledges from six threads until killed.
#[test]
fn child_process_entry() {
    let Some((dir, mode)) = child_env() else {
        return;
    };
    let (cycle, backend) = mode.split_once(':').expect("child: cycle:backend");
    let cycle: u32 = cycle.parse().expect("child: cycle number");
    let backend = Backend::parse(backend);
    // A failed append panics one thread: end the whole child so the parent sees it at once.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        hook(info);
        std::process::exit(101);
    }));
    let wal = Wal::open_with(&dir, child_config(backend)).expect("child: open");
    for (index, &(topic, kind)) in WRITERS.iter().enumerate() {
        let writer = wal.writer(TOPICS[topic]).expect("child: writer");
        let tag = cycle * TAGS_PER_CYCLE + index as u32;
        std::thread::spawn(move || write_forever(&writer, topic, kind, tag));
    }
    // The parent kills us long before this; never outlive a parent that died.
    std::thread::sleep(Duration::from_secs(300));
    std::process::exit(3);
}

/// One acknowledgement: records `offset..offset + count` of `TOPICS[topic]` hold sequence
/// numbers `seq..seq + count` of writer `tag`.
#[derive(Debug, Clone, Copy)]
struct Ack {
    topic: usize,
    offset: u64,
    count: u64,
    tag: u32,
    seq: u64,
}

/// An `@@ack` line, as [`Running`] collects it (without the marker).
fn parse_ack(line: &str) -> Option<Ack> {
    let rest = line.strip_prefix("ack ")?;
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().expect("an ack field"))
        .collect();
    assert_eq!(f.len(), 5, "malformed ack {line:?}");
    Some(Ack {
        topic: f[0] as usize,
        offset: f[1],
        count: f[2],
        tag: u32::try_from(f[3]).expect("tag"),
        seq: f[4],
    })
}

/// Runs one child, SIGKILLs it at `when`, and returns every ack it printed.
fn run_and_kill(dir: &Path, cycle: u64, backend: Backend, when: Kill) -> Vec<Ack> {
    let mode = format!("{cycle}:{}", backend.name());
    let ended = when.apply(Running::spawn(&mut child_command(
        module_path!(),
        dir,
        &mode,
    )));
    assert!(
        ended.killed(),
        "cycle {cycle}: the child ended by itself ({}):\n{}",
        ended.status,
        ended.stderr
    );
    ended.lines.iter().filter_map(|l| parse_ack(l)).collect()
}

/// Per topic, the (writer tag, sequence number) of each offset.
type Model = Vec<Vec<(u32, u64)>>;

/// Reads every topic from offset 0 (the reader verifies each checksum) and checks dense
/// offsets and intact values: every byte from `every_byte_from[topic]` on, header and length
/// before it (checked byte for byte by an earlier cycle; a debug build could not afford to
/// redo that every cycle).
fn read_model(wal: &Wal, every_byte_from: &[usize], ctx: &str) -> Model {
    let mut model = Model::new();
    for (name, &from) in TOPICS.iter().zip(every_byte_from) {
        let mut records = Vec::new();
        let info = match wal.topic_info(name) {
            Ok(info) => info,
            Err(Error::UnknownTopic { .. }) => {
                model.push(records);
                continue;
            }
            Err(e) => panic!("{ctx}: topic_info({name}): {e:?}"),
        };
        assert_eq!(info.first_offset, 0, "{ctx}: {name} lost its head");
        let mut reader = wal
            .reader_with(
                name,
                ReaderOptions::default().start(StartPosition::Earliest),
            )
            .expect("reader");
        loop {
            let at = records.len() as u64;
            let rec = match reader.next() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(e) => panic!("{ctx}: {name}: reading offset {at}: {e:?}"),
            };
            assert_eq!(rec.offset, at, "{ctx}: {name}: offsets must be dense");
            let id = decode(rec.value, at as usize >= from).unwrap_or_else(|| {
                panic!(
                    "{ctx}: {name}@{at}: corrupted value of {} bytes, starts {:?}",
                    rec.value.len(),
                    &rec.value[..rec.value.len().min(16)]
                )
            });
            assert_eq!(
                writer_of(id.0).0,
                model.len(),
                "{ctx}: {name}@{at}: record {id:?} belongs to another topic"
            );
            records.push(id);
        }
        assert_eq!(
            info.next_offset,
            records.len() as u64,
            "{ctx}: {name}: next_offset against records read"
        );
        model.push(records);
    }
    model
}

/// Checks what cycle `cycle` left against its acks and the model of earlier cycles; every
/// byte of every record when `every_byte`, else of the records new in this cycle.
fn check_cycle(
    wal: &Wal,
    cycle: u64,
    acks: &[Ack],
    earlier: &Model,
    every_byte: bool,
    ctx: &str,
) -> Model {
    let from: Vec<usize> = if every_byte {
        vec![0; TOPICS.len()]
    } else {
        earlier.iter().map(Vec::len).collect()
    };
    let model = read_model(wal, &from, ctx);
    let this_cycle = |tag: u32| u64::from(tag / TAGS_PER_CYCLE) == cycle;
    for (t, (now, before)) in model.iter().zip(earlier).enumerate() {
        let name = TOPICS[t];
        assert!(
            now.len() >= before.len() && now[..before.len()] == before[..],
            "{ctx}: {name}: records recovered by earlier cycles changed ({} before, {} now)",
            before.len(),
            now.len()
        );
        if let Some((i, id)) = now[before.len()..]
            .iter()
            .enumerate()
            .find(|(_, (tag, _))| !this_cycle(*tag))
        {
            panic!(
                "{ctx}: {name}@{}: record {id:?} of an earlier cycle reappeared",
                before.len() + i
            );
        }
    }

    // Every ack is there, byte-equal through random access too.
    for a in acks {
        let name = TOPICS[a.topic];
        assert!(this_cycle(a.tag), "{ctx}: ack {a:?} of another cycle");
        let records = &model[a.topic];
        assert!(
            a.offset + a.count <= records.len() as u64,
            "{ctx}: acknowledged {a:?} lost: {name} ends at {}",
            records.len()
        );
        for j in 0..a.count {
            let offset = a.offset + j;
            assert_eq!(
                records[offset as usize],
                (a.tag, a.seq + j),
                "{ctx}: {name}@{offset}: not what {a:?} acknowledged"
            );
            let rec = wal
                .read(name, offset)
                .unwrap_or_else(|e| panic!("{ctx}: read {name}@{offset}: {e:?}"));
            assert!(
                rec.value() == value(a.tag, a.seq + j).as_slice(),
                "{ctx}: {name}@{offset}: random read differs"
            );
        }
    }

    // Per writer: its records are its sequence 0..n in offset order, batches are whole, and
    // at most what was in flight at the kill survived beyond its acks.
    for (index, &(t, kind)) in WRITERS.iter().enumerate() {
        let tag = cycle as u32 * TAGS_PER_CYCLE + index as u32;
        let mine: Vec<(u64, u64)> = model[t]
            .iter()
            .enumerate()
            .filter(|(_, (g, _))| *g == tag)
            .map(|(offset, &(_, seq))| (offset as u64, seq))
            .collect();
        let n = mine.len() as u64;
        for (i, &(offset, seq)) in mine.iter().enumerate() {
            assert_eq!(
                seq, i as u64,
                "{ctx}: writer {tag}: {}@{offset}: sequence gap or duplicate",
                TOPICS[t]
            );
        }
        let acked: u64 = acks.iter().filter(|a| a.tag == tag).map(|a| a.count).sum();
        let acked_end = acks
            .iter()
            .filter(|a| a.tag == tag)
            .map(|a| a.seq + a.count)
            .max()
            .unwrap_or(0);
        assert_eq!(acked, acked_end, "{ctx}: writer {tag}: acks not contiguous");
        let in_flight = match kind {
            Kind::Single => 1,
            Kind::Async => ASYNC_WINDOW as u64,
            Kind::Batch => batch_len(tag, acked_end),
        };
        assert!(
            n >= acked_end && n <= acked_end + in_flight,
            "{ctx}: writer {tag} ({kind:?}): {n} records for {acked_end} acknowledged"
        );
        if kind == Kind::Batch {
            let mut q = 0;
            while q < n {
                let size = batch_len(tag, q);
                assert!(
                    q + size <= n,
                    "{ctx}: writer {tag}: batch at seq {q} partial: {} of {size} records",
                    n - q
                );
                let first = mine[q as usize].0;
                for j in 0..size {
                    assert_eq!(
                        mine[(q + j) as usize].0,
                        first + j,
                        "{ctx}: writer {tag}: batch at seq {q} not contiguous"
                    );
                }
                q += size;
            }
        }
    }
    model
}

#[test]
fn kill_nine_keeps_every_acknowledged_record() {
    campaign(Backend::Mmap, DEFAULT_CYCLES);
}

/// The same campaign with the ring in front of the data files (kills land in appends,
/// checkpoints, trims, and the replay at open).
#[test]
fn kill_nine_keeps_every_acknowledged_record_with_the_ring_backend() {
    campaign(Backend::Ring, DEFAULT_RING_CYCLES);
}

fn campaign(backend: Backend, default_cycles: u64) {
    let (cycles, seed) = campaign_params(backend.name(), default_cycles);
    let mut rng = Rng::new(seed);
    let mut dir = tempdir();
    let mut model: Model = Vec::new();
    let (mut total_acks, mut cycles_with_acks) = (0usize, 0u64);
    let (mut torn_tails, mut torn_records, mut dropped_extents) = (0, 0, 0);
    let started = Instant::now();
    for cycle in 0..cycles {
        let fresh = cycle % CYCLES_PER_DIR == 0;
        if fresh {
            dir = tempdir();
            model = vec![Vec::new(); TOPICS.len()];
        }
        // A fresh directory's first cycle always gets going, so early kills meet data.
        let when = kill_time(&mut rng, fresh, 10, 80);
        let acks = run_and_kill(dir.path(), cycle, backend, when);
        let ctx = format!(
            "{} cycle {cycle} (TIDELOG_CRASH_SEED={seed}, killed {when:?})",
            backend.name()
        );
        let wal = Wal::open_with(dir.path(), parent_config(backend))
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e:?}"));
        let report = wal.recovery_report();
        // Every byte of every record every tenth cycle and in the last.
        let every_byte = cycle + 1 == cycles || cycle % 10 == 9;
        model = check_cycle(&wal, cycle, &acks, &model, every_byte, &ctx);
        let records: usize = model.iter().map(Vec::len).sum();
        assert!(
            records == 0 || report.files > 0,
            "{ctx}: {records} records but {report:?}"
        );
        torn_tails += report.torn_tails;
        torn_records += report.torn_records;
        dropped_extents += report.dropped_extents;
        eprintln!(
            "cycle {cycle}: {when:?}, {} acks, records per topic {:?}, {report:?}",
            acks.len(),
            model.iter().map(Vec::len).collect::<Vec<_>>()
        );
        total_acks += acks.len();
        cycles_with_acks += u64::from(!acks.is_empty());
        // The writable open repaired the log; closing makes that durable for the next child.
        wal.close()
            .unwrap_or_else(|e| panic!("{ctx}: close: {e:?}"));
    }
    eprintln!(
        "{cycles} cycles in {:?}: {total_acks} acks, {} records in the last directory, {torn_tails} torn tails \
         ({torn_records} records), {dropped_extents} dropped extents",
        started.elapsed(),
        model.iter().map(Vec::len).sum::<usize>()
    );
    assert!(total_acks > 0, "no append was acknowledged");
    assert!(
        cycles_with_acks * 2 > cycles,
        "only {cycles_with_acks} of {cycles} cycles acknowledged anything"
    );
}

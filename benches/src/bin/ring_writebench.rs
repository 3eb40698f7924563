//! WriteBench for the ring backend, after AutoMQ's WriteBench: appender threads write
//! fixed-size records into a [`RingWal`] at a target rate (or as fast as they can) for a
//! while, a trimmer keeps the ring from filling, and every second a line reports throughput,
//! device writes and append-to-durable latency; a summary (optionally JSON) ends the run.
//!
//! Latency is measured per record from just before `append()` to the moment its appender
//! observes it durable. No thread waits per record: each appender keeps its handles in a
//! FIFO (offsets grow, so they complete in order) and, after every append, pops the durable
//! prefix with `is_durable()` (an atomic load), stamping all of them with one clock read.
//! When it has nothing to send (pacing, ring full, drain) it blocks in `wait_timeout()` on
//! the oldest handle, which wakes on the ring's completion notification. So a completion is
//! seen within one `append()` call (about 1 µs for 1 KiB records, longer only while that
//! call itself waits for a free block buffer, which is freed by the very completion that
//! advances the durable offset) or one condvar wake-up (typically 5-50 µs).
//!
//! IOPS is "blk/s": data blocks the ring wrote per second, counted by the appenders. A block's
//! first record sits right after its 40-byte header at a 4 KiB-aligned start, while the next
//! record of a block starts where the previous one ended; so a record at `offset % 4096 == 40`
//! that does not start where this appender's previous record ended opens a block. Exact with
//! one appender; with several, a record can rarely pass for a block start (another thread's
//! records in between and a chance alignment), so it may overcount slightly. "KiB/blk" is
//! the flushed offset's advance ("ring MB/s": block headers, record headers and alignment
//! included) over that count. Padding blocks (one per lap) are not counted.
//!
//! "dev" figures (w/s, KiB per write, queue depth, utilisation) come from the block layer's
//! counters of the device holding `--path` (`/sys/dev/block/MAJ:MIN/stat`). They include
//! any other writer of that device and the trimmer's header writes (about 10 a second),
//! and a device may split one block write into several requests.
//!
//! Run `ring_writebench --help` for the options.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tidelog::ring::format::{ALIGN_BYTES, BH_LEN};
use tidelog::{DirectIo, Error, IoEngine, RingAppend, RingConfig, RingWal};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
/// How often the trimmer trims.
const TRIM_EVERY: Duration = Duration::from_millis(100);
/// A pacing gap shorter than this is not slept: sleeps overshoot by tens of µs, and the
/// schedule (send time = start + bytes sent / rate) keeps the average rate anyway.
const MIN_SLEEP: Duration = Duration::from_micros(20);
/// Behind schedule by more than this, an appender restarts its schedule rather than burst.
const MAX_LAG: Duration = Duration::from_millis(50);
/// Most handles one appender keeps; beyond it, it waits for the oldest.
const QUEUE_MAX: usize = 1 << 20;
/// Pause before retrying an append that found the ring full.
const FULL_BACKOFF: Duration = Duration::from_micros(200);

const USAGE: &str = "\
ring_writebench: write records into a tidelog ring and report throughput and latency

Options (sizes take K/M/G suffixes, powers of 1024):
  --path P             ring file or block device (a missing file is created)   [required]
  --capacity BYTES     ring size; default: the file's or device's size, 1G when creating
  --record-size BYTES  record body size                                        [1024]
  --throughput B/S     target bytes per second over all threads; 0 = unpaced   [0]
  --threads N          appender threads                                        [1]
  --inflight N         inflight_blocks                                         [4]
  --block-bytes BYTES  block seal size                                         [256K]
  --block-delay-us US  block seal time                                         [333]
  --idle-seal B        seal the open block when no write is out (on | off)     [on]
  --engine E           auto | io_uring | threads                               [auto]
  --direct D           required | auto | off                                   [auto]
  --duration SECONDS   measured run length                                     [10]
  --warmup SECONDS     whole seconds run first and left out of the summary     [0]
  --format             format the target even if it holds a ring (or anything else)
  --json               print one JSON summary line at the end
";

type Res<T> = std::result::Result<T, String>;

#[derive(Debug, Clone)]
struct Opts {
    path: PathBuf,
    capacity: Option<u64>,
    record_size: usize,
    throughput: u64,
    threads: usize,
    inflight: usize,
    block_bytes: u64,
    block_delay_us: u64,
    idle_seal: bool,
    engine: IoEngine,
    direct: DirectIo,
    duration: Duration,
    warmup_s: u64,
    format: bool,
    json: bool,
}

fn parse_size(s: &str) -> Res<u64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let suffixes = [
        ("kib", KIB),
        ("mib", MIB),
        ("gib", GIB),
        ("k", KIB),
        ("m", MIB),
        ("g", GIB),
    ];
    let (num, mul) = suffixes
        .iter()
        .find_map(|(suf, mul)| lower.strip_suffix(suf).map(|n| (n.to_owned(), *mul)))
        .unwrap_or((lower.clone(), 1));
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a size: {s:?}"))?;
    if !(n >= 0.0 && n.is_finite()) {
        return Err(format!("not a size: {s:?}"));
    }
    Ok((n * mul as f64).round() as u64)
}

fn parse_args(args: &[String]) -> Res<Opts> {
    let mut o = Opts {
        path: PathBuf::new(),
        capacity: None,
        record_size: 1024,
        throughput: 0,
        threads: 1,
        inflight: 4,
        block_bytes: 256 * KIB,
        block_delay_us: 333,
        idle_seal: true,
        engine: IoEngine::Auto,
        direct: DirectIo::Auto,
        duration: Duration::from_secs(10),
        warmup_s: 0,
        format: false,
        json: false,
    };
    let mut path = None;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (arg.as_str(), None),
        };
        match key {
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--format" => {
                o.format = true;
                continue;
            }
            "--json" => {
                o.json = true;
                continue;
            }
            _ => {}
        }
        let value = match inline {
            Some(v) => v,
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("{key} needs a value"))?
                    .clone();
                i += 1;
                v
            }
        };
        let int = |v: &str| -> Res<u64> {
            v.parse()
                .map_err(|_| format!("{key}: not a whole number: {v:?}"))
        };
        match key {
            "--path" => path = Some(PathBuf::from(value)),
            "--capacity" => o.capacity = Some(parse_size(&value)?),
            "--record-size" => o.record_size = parse_size(&value)? as usize,
            "--throughput" => o.throughput = parse_size(&value)?,
            "--threads" => o.threads = int(&value)? as usize,
            "--inflight" => o.inflight = int(&value)? as usize,
            "--block-bytes" => o.block_bytes = parse_size(&value)?,
            "--block-delay-us" => o.block_delay_us = int(&value)?,
            "--idle-seal" => {
                o.idle_seal = match value.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--idle-seal takes on or off, not {other:?}")),
                }
            }
            "--engine" => {
                o.engine = match value.as_str() {
                    "auto" => IoEngine::Auto,
                    "io_uring" | "uring" => IoEngine::IoUring,
                    "threads" => IoEngine::Threads,
                    _ => return Err(format!("--engine: auto, io_uring or threads, not {value}")),
                }
            }
            "--direct" => {
                o.direct = match value.as_str() {
                    "required" => DirectIo::Required,
                    "auto" => DirectIo::Auto,
                    "off" => DirectIo::Off,
                    _ => return Err(format!("--direct: required, auto or off, not {value}")),
                }
            }
            "--duration" => {
                let s: f64 = value
                    .parse()
                    .map_err(|_| format!("--duration: not a number: {value:?}"))?;
                if !(s > 0.0 && s.is_finite()) {
                    return Err("--duration must be positive".into());
                }
                o.duration = Duration::from_secs_f64(s);
            }
            "--warmup" => o.warmup_s = int(&value)?,
            _ => return Err(format!("unknown option {key} (see --help)")),
        }
    }
    o.path = path.ok_or("--path is required (see --help)")?;
    if o.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if o.record_size == 0 {
        return Err("--record-size must be at least 1".into());
    }
    Ok(o)
}

/// A log-linear latency histogram in nanoseconds: 64 buckets per power of two (values are
/// reported to within about 1.6 %).
#[derive(Debug, Clone)]
struct Hist {
    counts: Vec<u64>,
    n: u64,
    sum_ns: u128,
    max_ns: u64,
}

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

impl Hist {
    fn new() -> Hist {
        Hist {
            counts: vec![0; ((64 - SUB_BITS as usize + 1) << SUB_BITS) + 1],
            n: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
    fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let shift = 63 - v.leading_zeros() - SUB_BITS;
        (((shift as u64 + 1) << SUB_BITS) + ((v >> shift) & (SUB - 1))) as usize
    }
    /// The middle of bucket `i`.
    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < SUB {
            return i;
        }
        let shift = (i >> SUB_BITS) - 1;
        ((SUB + (i & (SUB - 1))) << shift) + ((1u64 << shift) >> 1)
    }
    fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.n += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }
    fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.sum_ns += o.sum_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
    }
    fn avg_us(&self) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        self.sum_ns as f64 / self.n as f64 / 1e3
    }
    fn quantile_us(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i).min(self.max_ns) as f64 / 1e3;
            }
        }
        self.max_ns as f64 / 1e3
    }
}

/// What one appender completed since the reporter last looked.
#[derive(Debug)]
struct Interval {
    hist: Hist,
    records: u64,
    bytes: u64,
    ring_full: u64,
    /// Data blocks opened by this appender's records.
    blocks: u64,
}

impl Interval {
    fn new() -> Interval {
        Interval {
            hist: Hist::new(),
            records: 0,
            bytes: 0,
            ring_full: 0,
            blocks: 0,
        }
    }
    fn merge(&mut self, o: &Interval) {
        self.hist.merge(&o.hist);
        self.records += o.records;
        self.bytes += o.bytes;
        self.ring_full += o.ring_full;
        self.blocks += o.blocks;
    }
    fn clear(&mut self) {
        self.hist.counts.fill(0);
        self.hist.n = 0;
        self.hist.sum_ns = 0;
        self.hist.max_ns = 0;
        self.records = 0;
        self.bytes = 0;
        self.ring_full = 0;
        self.blocks = 0;
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// State the appenders, the trimmer and the reporter share.
#[derive(Debug)]
struct Common {
    /// Largest end offset of a record some appender saw durable: safe to trim to.
    durable_end: AtomicU64,
    stop_trim: AtomicBool,
    finished: AtomicUsize,
    failed: Mutex<Option<String>>,
}

fn appender(
    ring: &RingWal,
    o: &Opts,
    common: &Common,
    slot: &Mutex<Interval>,
    start: Instant,
    end: Instant,
) -> Res<()> {
    let payload: Vec<u8> = (0..o.record_size).map(|i| (i % 251) as u8 + 1).collect();
    let rate = o.throughput as f64 / o.threads as f64;
    // Each handle with its start time and whether its record opened a block.
    let mut queue: VecDeque<(RingAppend, Instant, bool)> = VecDeque::new();
    let mut base = start;
    let mut sent: u64 = 0;
    // Ring-full retries not yet handed to the reporter.
    let mut full = 0u64;
    let mut prev_end = u64::MAX;
    let reap = |queue: &mut VecDeque<(RingAppend, Instant, bool)>, full: &mut u64| {
        let ready = queue.front().is_some_and(|(h, _, _)| h.is_durable());
        if !ready && *full == 0 {
            return;
        }
        let now = Instant::now();
        let mut s = lock(slot);
        let mut last_end = 0;
        while let Some((h, t0, opens)) = queue.front() {
            if !h.is_durable() {
                break;
            }
            s.hist.record(now.duration_since(*t0).as_nanos() as u64);
            s.blocks += u64::from(*opens);
            s.records += 1;
            s.bytes += o.record_size as u64;
            last_end = h.end_offset();
            queue.pop_front();
        }
        s.ring_full += std::mem::take(full);
        drop(s);
        common.durable_end.fetch_max(last_end, Ordering::Relaxed);
    };
    // Blocks until the oldest record is durable or `d` passes.
    let idle = |queue: &VecDeque<(RingAppend, Instant, bool)>, d: Duration| -> Res<()> {
        match queue.front() {
            Some((h, _, _)) => h.wait_timeout(d).map(|_| ()).map_err(|e| e.to_string()),
            None => {
                std::thread::sleep(d);
                Ok(())
            }
        }
    };
    loop {
        reap(&mut queue, &mut full);
        let now = Instant::now();
        if now >= end {
            break;
        }
        if rate > 0.0 {
            let due = base + Duration::from_secs_f64(sent as f64 / rate);
            if due > now {
                let gap = due - now;
                if gap >= MIN_SLEEP {
                    idle(&queue, gap.min(end - now))?;
                    continue;
                }
            } else if now - due > MAX_LAG {
                base = now;
                sent = 0;
            }
        }
        if queue.len() >= QUEUE_MAX {
            idle(&queue, Duration::from_millis(1))?;
            continue;
        }
        // `now` is the start stamp: one clock read per record (clock reads showed up in
        // profiles of 1 KiB records).
        let t0 = now;
        match ring.append(&payload) {
            Ok(h) => {
                let opens = h.offset % ALIGN_BYTES == BH_LEN as u64 && h.offset != prev_end;
                prev_end = h.end_offset();
                queue.push_back((h, t0, opens));
                sent += o.record_size as u64;
            }
            Err(Error::RingFull { .. }) => {
                full += 1;
                idle(&queue, FULL_BACKOFF.min(end.saturating_duration_since(now)))?;
            }
            Err(e) => return Err(format!("append: {e}")),
        }
    }
    while let Some((h, _, _)) = queue.front() {
        h.wait().map_err(|e| format!("wait: {e}"))?;
        reap(&mut queue, &mut full);
    }
    reap(&mut queue, &mut full);
    Ok(())
}

fn trimmer(ring: &RingWal, common: &Common) -> Res<()> {
    let mut trimmed = 0;
    while !common.stop_trim.load(Ordering::Relaxed) {
        std::thread::sleep(TRIM_EVERY);
        let to = common.durable_end.load(Ordering::Relaxed);
        if to > trimmed {
            ring.trim(to).map_err(|e| format!("trim to {to}: {e}"))?;
            trimmed = to;
        }
    }
    Ok(())
}

/// Block-layer counters of one device (see Documentation/block/stat.rst).
#[derive(Debug, Clone, Copy, Default)]
struct DevStat {
    writes: u64,
    write_sectors: u64,
    io_ticks_ms: u64,
    queue_ms: u64,
}

fn stat_file_for(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path).ok()?;
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let f = PathBuf::from(format!(
        "/sys/dev/block/{}:{}/stat",
        libc::major(dev),
        libc::minor(dev)
    ));
    f.exists().then_some(f)
}

fn read_dev(file: Option<&Path>) -> Option<DevStat> {
    let text = std::fs::read_to_string(file?).ok()?;
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (v.len() >= 11).then(|| DevStat {
        writes: v[4],
        write_sectors: v[6],
        io_ticks_ms: v[9],
        queue_ms: v[10],
    })
}

/// Device figures over an interval: writes/s, KiB per write, average queue depth, busy share.
#[derive(Debug, Clone, Copy)]
struct DevRates {
    writes_s: f64,
    kib_per_write: f64,
    queue_depth: f64,
    util: f64,
}

fn dev_rates(a: Option<DevStat>, b: Option<DevStat>, secs: f64) -> Option<DevRates> {
    let (a, b) = (a?, b?);
    let writes = b.writes.saturating_sub(a.writes);
    let ms = secs * 1e3;
    Some(DevRates {
        writes_s: writes as f64 / secs,
        kib_per_write: if writes == 0 {
            0.0
        } else {
            b.write_sectors.saturating_sub(a.write_sectors) as f64 * 512.0 / 1024.0 / writes as f64
        },
        queue_depth: b.queue_ms.saturating_sub(a.queue_ms) as f64 / ms,
        util: (b.io_ticks_ms.saturating_sub(a.io_ticks_ms) as f64 / ms).min(1.0),
    })
}

/// CPU seconds of this process, and of the ring's I/O threads.
fn cpu_seconds() -> (f64, f64) {
    // USER_HZ: the unit of /proc's CPU times, 100 on every Linux ABI.
    let tick = 100.0;
    let parse = |text: &str| -> Option<(String, f64)> {
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text.get(open + 1..close)?.to_owned();
        let f: Vec<&str> = text.get(close + 2..)?.split_whitespace().collect();
        let ut: f64 = f.get(11)?.parse().ok()?;
        let st: f64 = f.get(12)?.parse().ok()?;
        Some((comm, (ut + st) / tick))
    };
    let total = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse(&t))
        .map_or(0.0, |(_, s)| s);
    let mut io = 0.0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            if let Some((comm, s)) = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|t| parse(&t))
                && comm.starts_with("tidelog-ring")
            {
                io += s;
            }
        }
    }
    (total, io)
}

/// A point in time with every counter the reporter differences.
#[derive(Debug, Clone, Copy)]
struct Mark {
    at: Instant,
    flushed: u64,
    dev: Option<DevStat>,
    cpu: (f64, f64),
}

fn mark(ring: &RingWal, stat: Option<&Path>) -> Mark {
    Mark {
        at: Instant::now(),
        flushed: ring.flushed_offset(),
        dev: read_dev(stat),
        cpu: cpu_seconds(),
    }
}

fn kib_per_block(bytes: u64, blocks: u64) -> f64 {
    if blocks == 0 {
        0.0
    } else {
        bytes as f64 / 1024.0 / blocks as f64
    }
}

fn fmt_dev(d: Option<DevRates>) -> String {
    match d {
        Some(d) => format!(
            "dev {:>6.0} w/s {:>6.1} KiB/w qd {:>4.1} util {:>3.0}%",
            d.writes_s,
            d.kib_per_write,
            d.queue_depth,
            d.util * 100.0
        ),
        None => "dev n/a".into(),
    }
}

fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "null".into()
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn run(o: &Opts) -> Res<()> {
    let creating = !o.path.exists();
    let capacity = match (o.capacity, creating) {
        (Some(c), _) => Some(c),
        (None, true) => Some(GIB),
        (None, false) => None,
    };
    let mut cfg = RingConfig::default()
        .direct_io(o.direct)
        .format(o.format)
        .block_bytes(o.block_bytes)
        .block_delay_us(o.block_delay_us)
        .seal_when_idle(o.idle_seal)
        .inflight_blocks(o.inflight)
        .io_engine(o.engine)
        .max_record_bytes((o.record_size as u64).max(MIB));
    if let Some(c) = capacity {
        cfg = cfg.capacity_bytes(c);
    }
    let ring =
        RingWal::open(&o.path, cfg).map_err(|e| format!("open {}: {e}", o.path.display()))?;
    let stat = stat_file_for(&o.path);
    println!(
        "ring {}: capacity {} MiB, direct_io {}, engine {}, record {} B, threads {}, \
         inflight {}, block {} KiB / {} µs, target {}, duration {:.1} s (+{} s warm-up)",
        o.path.display(),
        ring.capacity_bytes() / MIB,
        ring.direct_io(),
        ring.io_engine(),
        o.record_size,
        o.threads,
        o.inflight,
        o.block_bytes / KIB,
        o.block_delay_us,
        if o.throughput == 0 {
            "unpaced".to_owned()
        } else {
            format!("{:.1} MB/s", o.throughput as f64 / 1e6)
        },
        o.duration.as_secs_f64(),
        o.warmup_s,
    );
    if let Some(s) = &stat {
        println!("device counters: {}", s.display());
    }

    let common = Common {
        durable_end: AtomicU64::new(0),
        stop_trim: AtomicBool::new(false),
        finished: AtomicUsize::new(0),
        failed: Mutex::new(None),
    };
    let slots: Vec<Mutex<Interval>> = (0..o.threads)
        .map(|_| Mutex::new(Interval::new()))
        .collect();
    let warmup = Duration::from_secs(o.warmup_s);
    let mut total = Interval::new();
    let mut scratch = Interval::new();
    let mut summary_start = None;
    let mut summary_end = None;

    let start = Instant::now();
    let end = start + warmup + o.duration;
    std::thread::scope(|s| {
        let fail = |e: String| {
            lock(&common.failed).get_or_insert(e);
        };
        for (i, slot) in slots.iter().enumerate() {
            let (ring, common) = (&ring, &common);
            let spawned = std::thread::Builder::new()
                .name(format!("rb-append-{i}"))
                .spawn_scoped(s, move || {
                    if let Err(e) = appender(ring, o, common, slot, start, end) {
                        lock(&common.failed).get_or_insert(e);
                    }
                    common.finished.fetch_add(1, Ordering::Release);
                });
            if let Err(e) = spawned {
                fail(format!("spawn appender: {e}"));
                common.finished.fetch_add(1, Ordering::Release);
            }
        }
        let trim = std::thread::Builder::new()
            .name("rb-trim".into())
            .spawn_scoped(s, || trimmer(&ring, &common));

        let mut last = mark(&ring, stat.as_deref());
        if warmup.is_zero() {
            summary_start = Some(last);
        }
        let mut tick = 1u64;
        loop {
            let next = start + Duration::from_secs(tick);
            let done = common.finished.load(Ordering::Acquire) == o.threads;
            if !done {
                // Sleep to the next tick, but notice the end of the run promptly.
                let now = Instant::now();
                if now < next {
                    std::thread::sleep((next - now).min(Duration::from_millis(20)));
                    continue;
                }
            }
            scratch.clear();
            for slot in &slots {
                let mut g = lock(slot);
                scratch.merge(&g);
                g.clear();
            }
            let m = mark(&ring, stat.as_deref());
            let secs = m.at.duration_since(last.at).as_secs_f64().max(1e-9);
            let elapsed = m.at.duration_since(start).as_secs_f64();
            let ring_bytes = m.flushed.saturating_sub(last.flushed);
            println!(
                "[{:>6.1}s{}] {:>7.1} MB/s {:>8.0} rec/s  ring {:>7.1} MB/s {:>6.0} blk/s \
                 {:>6.1} KiB/blk  {}  lat avg {:>6.0} p99 {:>6.0} max {:>6.0} µs  \
                 cpu {:>3.0}% io-thr {:>3.0}%{}",
                elapsed,
                if done { " end" } else { "" },
                scratch.bytes as f64 / secs / 1e6,
                scratch.records as f64 / secs,
                ring_bytes as f64 / secs / 1e6,
                scratch.blocks as f64 / secs,
                kib_per_block(ring_bytes, scratch.blocks),
                fmt_dev(dev_rates(last.dev, m.dev, secs)),
                scratch.hist.avg_us(),
                scratch.hist.quantile_us(0.99),
                scratch.hist.max_ns as f64 / 1e3,
                (m.cpu.0 - last.cpu.0) / secs * 100.0,
                (m.cpu.1 - last.cpu.1) / secs * 100.0,
                if scratch.ring_full > 0 {
                    format!("  ring full x{}", scratch.ring_full)
                } else {
                    String::new()
                },
            );
            if summary_start.is_some() {
                total.merge(&scratch);
            } else if m.at.duration_since(start) + Duration::from_millis(500) >= warmup {
                summary_start = Some(m);
            }
            last = m;
            tick += 1;
            if done {
                summary_end = Some(m);
                break;
            }
        }
        common.stop_trim.store(true, Ordering::Relaxed);
        match trim.map(|t| t.join()) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => fail(e),
            Ok(Err(_)) => fail("the trimmer panicked".into()),
            Err(e) => fail(format!("spawn trimmer: {e}")),
        }
    });
    if let Some(e) = lock(&common.failed).take() {
        return Err(e);
    }
    let (Some(a), Some(b)) = (summary_start, summary_end) else {
        return Err("the run ended before its warm-up did".into());
    };
    ring.close().map_err(|e| format!("close: {e}"))?;

    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let h = &total.hist;
    let dev = dev_rates(a.dev, b.dev, secs);
    let mb_s = total.bytes as f64 / secs / 1e6;
    let rec_s = total.records as f64 / secs;
    let ring_bytes = b.flushed.saturating_sub(a.flushed);
    let ring_mb_s = ring_bytes as f64 / secs / 1e6;
    let blk_s = total.blocks as f64 / secs;
    let kib_blk = kib_per_block(ring_bytes, total.blocks);
    let cpu = (b.cpu.0 - a.cpu.0) / secs * 100.0;
    let io_cpu = (b.cpu.1 - a.cpu.1) / secs * 100.0;
    println!(
        "SUMMARY {:.2} s: {} records, {:.1} MB, {:.1} MB/s, {:.0} rec/s, ring {:.1} MB/s, \
         {:.0} blk/s of {:.1} KiB, {}, \
         latency µs avg {:.0} p50 {:.0} p99 {:.0} p99.9 {:.0} max {:.0}, cpu {:.0}% \
         (io threads {:.0}%), ring full {}",
        secs,
        total.records,
        total.bytes as f64 / 1e6,
        mb_s,
        rec_s,
        ring_mb_s,
        blk_s,
        kib_blk,
        fmt_dev(dev),
        h.avg_us(),
        h.quantile_us(0.5),
        h.quantile_us(0.99),
        h.quantile_us(0.999),
        h.max_ns as f64 / 1e3,
        cpu,
        io_cpu,
        total.ring_full,
    );
    if o.json {
        let d = |f: fn(&DevRates) -> f64| dev.as_ref().map_or("null".into(), |d| json_num(f(d)));
        println!(
            "{{\"path\":{},\"io_engine\":{},\"direct_io\":{},\"record_size\":{},\"threads\":{},\
             \"inflight\":{},\"block_bytes\":{},\"block_delay_us\":{},\"target_bytes_s\":{},\
             \"seconds\":{},\"records\":{},\"bytes\":{},\"mb_s\":{},\"records_s\":{},\
             \"ring_mb_s\":{},\"blocks_s\":{},\"kib_per_block\":{},\"lat_avg_us\":{},\"lat_p50_us\":{},\"lat_p99_us\":{},\
             \"lat_p999_us\":{},\"lat_max_us\":{},\"dev_writes_s\":{},\"dev_kib_per_write\":{},\
             \"dev_queue_depth\":{},\"dev_util\":{},\"cpu_pct\":{},\"io_cpu_pct\":{},\
             \"ring_full\":{}}}",
            json_str(&o.path.display().to_string()),
            json_str(ring.io_engine()),
            ring.direct_io(),
            o.record_size,
            o.threads,
            o.inflight,
            o.block_bytes,
            o.block_delay_us,
            o.throughput,
            json_num(secs),
            total.records,
            total.bytes,
            json_num(mb_s),
            json_num(rec_s),
            json_num(ring_mb_s),
            json_num(blk_s),
            json_num(kib_blk),
            json_num(h.avg_us()),
            json_num(h.quantile_us(0.5)),
            json_num(h.quantile_us(0.99)),
            json_num(h.quantile_us(0.999)),
            json_num(h.max_ns as f64 / 1e3),
            d(|d| d.writes_s),
            d(|d| d.kib_per_write),
            d(|d| d.queue_depth),
            d(|d| d.util),
            json_num(cpu),
            json_num(io_cpu),
            total.ring_full,
        );
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = parse_args(&args).and_then(|o| run(&o));
    if let Err(e) = result {
        eprintln!("ring_writebench: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles() {
        let mut h = Hist::new();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile_us(0.5);
        let p99 = h.quantile_us(0.99);
        assert!((p50 - 5000.0).abs() / 5000.0 < 0.02, "{p50}");
        assert!((p99 - 9900.0).abs() / 9900.0 < 0.02, "{p99}");
        assert!((h.quantile_us(1.0) - 10_000.0).abs() < 1e-9);
        for v in [0, 1, 63, 64, 65, 1000, u64::MAX / 2] {
            let i = Hist::index(v);
            assert!(i < h.counts.len());
            let mid = Hist::value(i);
            assert!(mid.abs_diff(v) as f64 <= v as f64 / 60.0 + 1.0, "{v} {mid}");
        }
    }

    #[test]
    fn sizes() -> Res<()> {
        assert_eq!(parse_size("1024")?, 1024);
        assert_eq!(parse_size("256K")?, 256 * KIB);
        assert_eq!(parse_size("1GiB")?, GIB);
        assert_eq!(parse_size("1.5m")?, 3 * MIB / 2);
        assert!(parse_size("x").is_err());
        Ok(())
    }
}

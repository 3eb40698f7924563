//! Append to visible: how long a record takes from the writer's append to a reader that was
//! waiting for it, with the reader in another process (`visible_reader`, a binary of this
//! package, blocked in `Wal::wait_for_records` on a read-only handle, asleep; or spinning
//! first, `ReaderOptions::spin`, for longer than the writer's pace, so that it never sleeps)
//! and in a thread of the writer's own process; and the baseline they are held against, one
//! message through a pipe to a process blocked in `read(2)` (the kernel's own wake-up).
//!
//! Every sample is timed across processes: the writer puts the `CLOCK_MONOTONIC` time in
//! nanoseconds (one clock for the whole system) in the record's first 8 bytes just before
//! the append, and the reader subtracts it from the same clock just after its read returns.
//! The writer appends once every `PACE` (sleeping in between, never spinning), so the reader
//! is asleep again before each record; the first records are a warm-up and are not counted.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidelog::{Config, Durability, Reader, ReaderOptions, StartPosition, Visibility, Wal};

use super::row::{Budget, Row};

/// The operation of these rows (in the row contract's `op`).
pub(crate) const OP: &str = "visible";
/// The baseline (a ceiling row) the Rust rows are held against.
pub(crate) const PIPE_WAKE: &str = "pipe wake-up";
/// Marks the rows with the reader in another process, which the issue sets targets for.
pub(crate) const OTHER_PROCESS: &str = "reader in another process";
const OTHER_CONFIG: &str = "append to visible: reader in another process blocked in Wal::wait_for_records, Durability::Never";
const SPIN_CONFIG: &str = "append to visible: reader in another process spinning up to 1 ms (ReaderOptions::spin) before it sleeps in Wal::wait_for_records, Durability::Never";
/// The spinning reader's `ReaderOptions::spin`: longer than `PACE`, so it catches every
/// record while it spins.
const SPIN: Duration = Duration::from_millis(1);
/// Rows of a round besides the pipe baseline: reader in another process asleep, spinning,
/// and a reader thread in the writer's process.
pub(crate) const ROWS: u64 = 3;
const SAME_CONFIG: &str = "append to visible: reader thread in this process blocked in Wal::wait_for_records, Durability::Never";
const PIPE_CONFIG: &str = "100 B write(2) to a process blocked in read(2)";
const LATENCY_OF: &str = "record, append to read (the reader asleep before each)";
/// Record (and pipe message) size: the stamp, the sequence number and filler.
pub(crate) const RECORD_BYTES: u64 = 100;
/// The writer appends once per this long (plus the sleep's overshoot).
const PACE: Duration = Duration::from_micros(200);
/// Timed samples per row: as many as `--seconds` holds at `PACE`, within these bounds.
const SAMPLES_MIN: u64 = 100;
const SAMPLES_MAX: u64 = 2000;
/// Warm-up records before them: a tenth as many, at least this many.
const WARM_UP_MIN: u64 = 20;
/// A reader that sees no record for this long gives up (the writer appends every 200 us).
const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the writer waits for the reader process to be ready, and for its result.
const CHILD_TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "visible";
/// The reader process's program, beside this one.
const READER_PROGRAM: &str = "visible_reader";
/// The reader process prints this line once it is about to wait for the first record.
const READY: &str = "ready";

fn err(e: tidelog::Error) -> String {
    e.to_string()
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine (unlike
/// `Instant`, whose values cannot leave the process).
#[expect(unsafe_code, reason = "clock_gettime is a libc call")]
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call, and CLOCK_MONOTONIC
    // exists on every Linux, so the call only writes `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Writes back every dirty page of the system (sync(2)).
#[expect(unsafe_code, reason = "sync is a libc call")]
pub(crate) fn sync() {
    // SAFETY: sync(2) takes no arguments, touches no memory of this process and cannot fail.
    unsafe { libc::sync() }
}

/// Warm-up records and timed samples of a row with `budget`.
fn counts(budget: Budget) -> (u64, u64) {
    let samples = ((budget.seconds / PACE.as_secs_f64()) as u64).clamp(SAMPLES_MIN, SAMPLES_MAX);
    ((samples / 10).max(WARM_UP_MIN), samples)
}

/// Writes the message with sequence number `seq` (from 1) into `msg`, stamped now.
fn stamp(msg: &mut [u8; RECORD_BYTES as usize], seq: u64) {
    msg[8..16].copy_from_slice(&seq.to_le_bytes());
    msg[..8].copy_from_slice(&monotonic_ns().to_le_bytes());
}

/// The latency of the message `value` read at `now`, which must be the `expected`-th; `None`
/// for the setup record (stamp 0) that creates the topic.
fn latency(now: u64, value: &[u8], expected: u64) -> Result<Option<u64>, String> {
    let word = |at: usize| {
        value
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| format!("a record of {} bytes has no stamp", value.len()))
    };
    let (stamp, seq) = (word(0)?, word(8)?);
    if stamp == 0 {
        return Ok(None);
    }
    if seq != expected {
        return Err(format!(
            "message {seq} arrived where {expected} was expected"
        ));
    }
    Ok(Some(now.saturating_sub(stamp)))
}

/// The reader's loop: `count` stamped records, waiting on the shared state file whenever
/// none is there; their latencies in ns.
fn read_records(wal: &Wal, reader: &mut Reader, count: u64) -> Result<Vec<u64>, String> {
    let mut latencies = Vec::with_capacity(count as usize);
    while (latencies.len() as u64) < count {
        let next = latencies.len() as u64 + 1;
        let got = match reader.next().map_err(err)? {
            Some(r) => latency(monotonic_ns(), r.value, next)?,
            None => {
                if !wal.wait_for_records(reader, READ_TIMEOUT).map_err(err)? {
                    return Err(format!(
                        "no record for {READ_TIMEOUT:?} after {} of {count}",
                        latencies.len()
                    ));
                }
                None
            }
        };
        latencies.extend(got);
    }
    Ok(latencies)
}

fn reader_options(spin: Duration) -> ReaderOptions {
    ReaderOptions::default()
        .start(StartPosition::Latest)
        .visibility(Visibility::Published)
        .spin(spin)
}

/// The writer's configuration: nothing synced per record, no flush in the timed loop.
fn writer_config() -> Config {
    Config::default().durability(Durability::Never)
}

/// The row with its warm-up dropped and the timed samples' percentiles.
fn finished(row: Row, latencies: Vec<u64>, warm: u64) -> Row {
    let samples: Vec<u32> = latencies
        .into_iter()
        .skip(warm as usize)
        .map(|ns| u32::try_from(ns).unwrap_or(u32::MAX))
        .collect();
    let mut row = row.latency(samples.clone(), LATENCY_OF);
    row.records = Some(samples.len() as u64);
    row
}

/// What the reader process prints last: every latency it measured, warm-up included.
#[derive(Debug, Serialize, Deserialize)]
struct ReaderReport {
    latencies_ns: Vec<u64>,
}

/// The reader process (`visible_reader`), seen from the writer.
#[derive(Debug)]
struct ReaderProcess {
    child: Child,
    lines: Receiver<std::io::Result<String>>,
}

impl ReaderProcess {
    fn spawn(args: &[OsString], stdin: Stdio) -> Result<ReaderProcess, String> {
        let program = super::sibling_program(READER_PROGRAM)?;
        let mut child = Command::new(&program)
            .args(args)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(ReaderProcess { child, lines })
    }

    fn stdin(&mut self) -> Result<ChildStdin, String> {
        self.child.stdin.take().ok_or_else(|| "no stdin".into())
    }

    /// The next line the reader prints, or why there is none.
    fn line(&mut self) -> Result<String, String> {
        match self.lines.recv_timeout(CHILD_TIMEOUT) {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(e)) => Err(format!("{READER_PROGRAM}: {e}")),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "{READER_PROGRAM} printed nothing for {CHILD_TIMEOUT:?}"
            )),
            Err(RecvTimeoutError::Disconnected) => Err(self.failure()),
        }
    }

    /// Why the reader ended without its result: its exit status and the end of its stderr.
    fn failure(&mut self) -> String {
        super::child_failure(&mut self.child, READER_PROGRAM)
    }

    fn ready(&mut self) -> Result<(), String> {
        let line = self.line()?;
        if line == READY {
            Ok(())
        } else {
            Err(format!("{READER_PROGRAM} said {line:?}, not {READY:?}"))
        }
    }

    /// The latencies the reader measured, once it has read them all and exited.
    fn finish(mut self) -> Result<Vec<u64>, String> {
        let line = self.line()?;
        let report: ReaderReport = serde_json::from_str(&line)
            .map_err(|e| format!("{READER_PROGRAM} printed {line:?}: {e}"))?;
        let status = self.child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(self.failure());
        }
        Ok(report.latencies_ns)
    }
}

impl Drop for ReaderProcess {
    fn drop(&mut self) {
        // A no-op for a reader that has exited and been waited for.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rows of one round: the pipe baseline first (a ceiling, run when any tidelog row is
/// wanted), then tidelog with the reader in another process (asleep, then spinning) and in
/// this one. Each directory is made and removed by its row.
pub(crate) fn rows(
    other_dir: &Path,
    same_dir: &Path,
    budget: Budget,
    wants: &dyn Fn(&Row) -> bool,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let head = |config: &str| {
        Row::new("tidelog", "tidelog", config, "D0", OP, RECORD_BYTES, 1).against(PIPE_WAKE)
    };
    let (other, spin, same) = (head(OTHER_CONFIG), head(SPIN_CONFIG), head(SAME_CONFIG));
    let (want_other, want_spin, want_same) = (wants(&other), wants(&spin), wants(&same));
    let mut rows = Vec::new();
    if !want_other && !want_spin && !want_same {
        return rows;
    }
    // Untimed: write back what the round's earlier rows left dirty, so that the kernel's
    // writeback does not compete with these rows for the CPUs (the Python rows do the same).
    sync();
    match pipe(budget) {
        Ok(row) => rows.push(row),
        Err(e) => notes.push(format!("ceiling {PIPE_WAKE} failed: {e}")),
    }
    if want_other {
        rows.push(run_in(other_dir, other, |dir, row| {
            other_process(dir, row, budget, Duration::ZERO)
        }));
    }
    if want_spin {
        rows.push(run_in(other_dir, spin, |dir, row| {
            other_process(dir, row, budget, SPIN)
        }));
    }
    if want_same {
        rows.push(run_in(same_dir, same, |dir, row| {
            same_process(dir, row, budget)
        }));
    }
    rows
}

/// Runs `f` on a fresh `dir`, removed afterwards; a failure becomes the skipped row.
fn run_in(dir: &Path, row: Row, f: impl FnOnce(&Path, Row) -> Result<Row, String>) -> Row {
    let result = f(dir, row.clone());
    let _ = std::fs::remove_dir_all(dir);
    result.unwrap_or_else(|e| row.skip(e))
}

/// Opens a log in `dir` for writing and creates the topic with a setup record (stamp 0,
/// which readers skip), so that a reader can be made before the first timed append.
fn open_writer(dir: &Path) -> Result<(Wal, tidelog::Writer), String> {
    let wal = Wal::open_with(dir, writer_config()).map_err(err)?;
    let writer = wal.writer(TOPIC).map_err(err)?;
    writer.append(&[0u8; RECORD_BYTES as usize]).map_err(err)?;
    Ok((wal, writer))
}

/// The writer's paced loop: `count` stamped messages, each handed to `send`.
fn paced(
    count: u64,
    mut send: impl FnMut(&[u8; RECORD_BYTES as usize]) -> Result<(), String>,
) -> Result<(), String> {
    let mut msg = [0u8; RECORD_BYTES as usize];
    for seq in 1..=count {
        std::thread::sleep(PACE);
        stamp(&mut msg, seq);
        send(&msg)?;
    }
    Ok(())
}

fn other_process(dir: &Path, row: Row, budget: Budget, spin: Duration) -> Result<Row, String> {
    let (warm, samples) = counts(budget);
    let (wal, writer) = open_writer(dir)?;
    let mut reader = ReaderProcess::spawn(
        &[
            "tidelog".into(),
            dir.into(),
            (warm + samples).to_string().into(),
            spin.as_micros().to_string().into(),
        ],
        Stdio::null(),
    )?;
    reader.ready()?;
    paced(warm + samples, |msg| {
        writer.append(msg).map(drop).map_err(err)
    })?;
    let latencies = reader.finish()?;
    wal.close().map_err(err)?;
    Ok(finished(row, latencies, warm))
}

fn same_process(dir: &Path, row: Row, budget: Budget) -> Result<Row, String> {
    let (warm, samples) = counts(budget);
    let (wal, writer) = open_writer(dir)?;
    let mut reader = wal
        .reader_with(TOPIC, reader_options(Duration::ZERO))
        .map_err(err)?;
    let count = warm + samples;
    let latencies = std::thread::scope(|s| {
        let read = s.spawn(|| read_records(&wal, &mut reader, count));
        let wrote = paced(count, |msg| writer.append(msg).map(drop).map_err(err));
        let read = read
            .join()
            .unwrap_or_else(|_| Err("the reader thread panicked".into()));
        wrote.and(read)
    })?;
    drop(reader);
    wal.close().map_err(err)?;
    Ok(finished(row, latencies, warm))
}

/// The baseline: the same paced, stamped messages written to a pipe (the reader process's
/// stdin), which it reads with `read(2)`.
fn pipe(budget: Budget) -> Result<Row, String> {
    let (warm, samples) = counts(budget);
    let row = Row::new("ceiling", PIPE_WAKE, PIPE_CONFIG, "D0", OP, RECORD_BYTES, 1);
    let mut reader = ReaderProcess::spawn(
        &["pipe".into(), (warm + samples).to_string().into()],
        Stdio::piped(),
    )?;
    let mut input = reader.stdin()?;
    reader.ready()?;
    // One write(2) per message: `ChildStdin` does not buffer.
    paced(warm + samples, |msg| {
        input.write_all(msg).map_err(|e| format!("pipe: {e}"))
    })?;
    drop(input);
    let latencies = reader.finish()?;
    Ok(finished(row, latencies, warm))
}

/// The reader process: `visible_reader tidelog DIR COUNT SPIN_US` opens `DIR` read-only,
/// makes a reader at the end of the topic (spinning up to SPIN_US before each sleep) and
/// reads COUNT stamped records, waiting in `Wal::wait_for_records` whenever none is there;
/// `visible_reader pipe COUNT` reads COUNT
/// messages of 100 bytes from stdin (a pipe), blocked in `read(2)`. Prints `ready` once it
/// is about to wait for the first, then one JSON line with every latency; exits 1 with a
/// line on stderr when it fails, 2 for bad usage.
pub(crate) fn reader_main(args: &[String]) -> u8 {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = match args {
        [mode, dir, count, spin_us] if mode == "tidelog" => parse_count(count).and_then(|n| {
            let spin = spin_us
                .parse()
                .map(Duration::from_micros)
                .map_err(|_| format!("SPIN_US {spin_us:?} is not a number"))?;
            read_log(Path::new(dir), n, spin, &mut out)
        }),
        [mode, count] if mode == "pipe" => parse_count(count).and_then(|n| read_pipe(n, &mut out)),
        _ => {
            eprintln!(
                "usage: {READER_PROGRAM} tidelog DIR COUNT SPIN_US | {READER_PROGRAM} pipe COUNT"
            );
            return 2;
        }
    };
    let printed = result.and_then(|latencies_ns| {
        let line =
            serde_json::to_string(&ReaderReport { latencies_ns }).map_err(|e| e.to_string())?;
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())
    });
    match printed {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{READER_PROGRAM}: {e}");
            1
        }
    }
}

fn parse_count(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("COUNT {text:?} is not a positive integer"))
}

fn say_ready(out: &mut impl Write) -> Result<(), String> {
    writeln!(out, "{READY}")
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())
}

fn read_log(
    dir: &Path,
    count: u64,
    spin: Duration,
    out: &mut impl Write,
) -> Result<Vec<u64>, String> {
    let wal = Wal::open_read_only_with(dir, Config::default()).map_err(err)?;
    let mut reader = wal.reader_with(TOPIC, reader_options(spin)).map_err(err)?;
    say_ready(out)?;
    let latencies = read_records(&wal, &mut reader, count)?;
    drop(reader);
    wal.close().map_err(err)?;
    Ok(latencies)
}

fn read_pipe(count: u64, out: &mut impl Write) -> Result<Vec<u64>, String> {
    // Stdin's buffer is empty before each message arrives, so each waits in read(2).
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    say_ready(out)?;
    let mut msg = [0u8; RECORD_BYTES as usize];
    let mut latencies = Vec::with_capacity(count as usize);
    for seq in 1..=count {
        input
            .read_exact(&mut msg)
            .map_err(|e| format!("pipe, message {seq} of {count}: {e}"))?;
        let now = monotonic_ns();
        latencies.extend(latency(now, &msg, seq)?);
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_and_the_setup_record_is_skipped() {
        let mut msg = [0u8; RECORD_BYTES as usize];
        stamp(&mut msg, 7);
        let now = monotonic_ns();
        let ns = latency(now, &msg, 7).expect("latency").expect("a sample");
        assert!(ns < 1_000_000_000, "{ns}");
        assert!(latency(now, &msg, 8).is_err());
        assert_eq!(latency(now, &[0u8; 100], 1), Ok(None));
        assert!(latency(now, &[1u8; 10], 1).is_err());
    }

    #[test]
    fn samples_follow_the_budget_within_bounds() {
        let b = |seconds| Budget {
            seconds,
            bytes_max: 1 << 20,
        };
        assert_eq!(counts(b(0.4)), (200, 2000));
        assert_eq!(counts(b(0.05)), (25, 250));
        assert_eq!(counts(b(0.001)), (20, 100));
        assert_eq!(counts(b(60.0)), (200, 2000));
    }

    #[test]
    fn the_warm_up_is_dropped() {
        let row = Row::new("tidelog", "t", "c", "D0", OP, 100, 1);
        let row = finished(row, vec![1_000_000, 1_000, 2_000, 3_000], 1);
        assert_eq!(row.records, Some(3));
        assert_eq!(row.p50_us, Some(2.0));
    }
}

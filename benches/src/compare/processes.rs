//! Many processes: appends to one log directory from several processes at once (shared
//! mode, the default), each process a child of this one (`process_appender`, a binary of
//! this package), and the baselines each row is held against in the same round.
//!
//! With `Durability::Interval` and 100 B records: one process alone in shared mode, one alone
//! in exclusive mode (`Config::exclusive`), four processes on one topic and four on a topic
//! each; the shared row is held against the exclusive one, the four-process rows against the
//! shared one. With `Durability::Always`: eight processes on one topic (each process makes
//! its own group commit), held against the fdatasync-per-record loop (the benches'
//! [`fdatasync_appends`] loop: a `pwrite` of a record at the end of a plain file, then
//! `fdatasync`) in one process, a ceiling row; the same loop in eight processes at once, each
//! on a file of its own, is a ceiling row beside it.
//!
//! The children start together: each opens the log (or creates its file), appends a warm-up
//! record and, in `Interval` rows, waits [`SETTLE`] as the one-process rows do; it then says
//! `ready` and blocks on its stdin. Once every child is ready, this process writes one line
//! to each, `go START DEADLINE` (`CLOCK_MONOTONIC` nanoseconds, one clock for every process,
//! the start 20 ms ahead), and every child sleeps until START, appends until DEADLINE (or
//! until its share of `--max-bytes`) and prints what it did. A row's rate is the sum of the
//! children's appends over the time from the first start to the last end.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidelog::{Config, Durability, Wal};

use super::row::{Budget, LATENCY_SAMPLE_EVERY, Row, SETTLE, pool};
use super::visible::{monotonic_ns, sync};
use crate::baseline::fdatasync_appends;

/// The operation of these rows (in the row contract's `op`).
pub(crate) const OP: &str = "processes";
/// Every row's configuration starts with this: `--only "many processes"` selects them.
pub(crate) const SECTION: &str = "many processes";
/// Record size of every row.
pub(crate) const RECORD_BYTES: u64 = 100;
/// The baseline of the `Always` row: a ceiling row, the fdatasync-per-record loop.
pub(crate) const FSYNC_ONE: &str = "write+fdatasync per record, 1 process";
const FSYNC_ONE_CONFIG: &str =
    "many processes: 1 process, a pwrite of 100 B at the end of its file + fdatasync";
/// The same loop in as many processes as the `Always` row has: a ceiling row beside it.
pub(crate) const FSYNC_PROCESSES: &str = "write+fdatasync per record, 8 processes";
const FSYNC_CONFIG: &str =
    "many processes: 8 processes, each a pwrite of 100 B at the end of its own file + fdatasync";
const SHARED_ONE: &str = "many processes: 1 process, shared mode (the default), fsync interval";
const EXCLUSIVE_ONE: &str = "many processes: 1 process, exclusive mode, fsync interval";
const FOUR_ONE_TOPIC: &str = "many processes: 4 processes, 1 topic, shared mode, fsync interval";
const FOUR_TOPICS: &str =
    "many processes: 4 processes, 4 topics (one each), shared mode, fsync interval";
const EIGHT_ALWAYS: &str = "many processes: 8 processes, 1 topic, shared mode, fsync always (syncs take turns across processes)";
/// Processes of the `Always` row and of its baseline.
const ALWAYS_PROCESSES: u32 = 8;
/// The children's program, beside this one.
const PROGRAM: &str = "process_appender";
/// A child prints this line once it is ready to start.
const READY: &str = "ready";
/// The start is this far ahead of the `go` lines, so that every child has read its line.
const GO_AHEAD: Duration = Duration::from_millis(20);
/// How long a child may take to be ready, and to report after its deadline.
const CHILD_TIMEOUT: Duration = Duration::from_secs(30);

/// One tidelog row of this section.
#[derive(Debug, Clone, Copy)]
struct Spec {
    config: &'static str,
    processes: u32,
    /// One topic for all (false) or one each (true).
    topic_each: bool,
    always: bool,
    exclusive: bool,
    /// The configuration of the tidelog row this one is held against, or the ceiling.
    baseline: Option<&'static str>,
    /// The target: at least this many times the baseline.
    target: Option<f64>,
}

/// The tidelog rows, in the order they run (a baseline before the rows held against it).
const SPECS: [Spec; 5] = [
    Spec {
        config: EXCLUSIVE_ONE,
        processes: 1,
        topic_each: false,
        always: false,
        exclusive: true,
        baseline: None,
        target: None,
    },
    Spec {
        config: SHARED_ONE,
        processes: 1,
        topic_each: false,
        always: false,
        exclusive: false,
        baseline: Some(EXCLUSIVE_ONE),
        target: Some(0.9),
    },
    Spec {
        config: FOUR_ONE_TOPIC,
        processes: 4,
        topic_each: false,
        always: false,
        exclusive: false,
        baseline: Some(SHARED_ONE),
        target: Some(0.8),
    },
    Spec {
        config: FOUR_TOPICS,
        processes: 4,
        topic_each: true,
        always: false,
        exclusive: false,
        baseline: Some(SHARED_ONE),
        target: Some(1.0),
    },
    Spec {
        config: EIGHT_ALWAYS,
        processes: ALWAYS_PROCESSES,
        topic_each: false,
        always: true,
        exclusive: false,
        baseline: Some(FSYNC_ONE),
        target: Some(4.0),
    },
];

/// Rows of tidelog's one round runs (for the progress bar).
pub(crate) const ROWS: u64 = SPECS.len() as u64;

impl Spec {
    fn row(&self) -> Row {
        let class = if self.always { "D2" } else { "D0" };
        let row = Row::new(
            "tidelog",
            "tidelog",
            self.config,
            class,
            OP,
            RECORD_BYTES,
            self.processes,
        );
        match self.baseline {
            Some(b) => row.against(b),
            None => row,
        }
    }

    fn durability(&self) -> &'static str {
        if self.always { "always" } else { "interval" }
    }

    fn sharing(&self) -> &'static str {
        if self.exclusive {
            "exclusive"
        } else {
            "shared"
        }
    }

    fn topic(&self, process: u32) -> String {
        format!("t{}", if self.topic_each { process } else { 0 })
    }
}

/// The target for the row with configuration `config`, as a multiple of its
/// baseline.
pub(crate) fn target(config: &str) -> Option<f64> {
    SPECS.iter().find(|s| s.config == config)?.target
}

/// Whether `row` is the baseline named `name` of a row of this section: the tidelog row of
/// that configuration or the ceiling of that name.
pub(crate) fn is_baseline(row: &Row, name: &str) -> bool {
    row.op == OP
        && match row.kind.as_str() {
            "ceiling" => row.system == name,
            "tidelog" => row.config == name,
            _ => false,
        }
}

/// The label of a configuration in the section's table: without the section's name.
pub(crate) fn label(config: &str) -> &str {
    config
        .strip_prefix(SECTION)
        .and_then(|c| c.strip_prefix(": "))
        .unwrap_or(config)
}

/// Which rows run: those `wants` asks for, and the baselines they are held against.
fn wanted(wants: &dyn Fn(&Row) -> bool) -> (Vec<bool>, bool) {
    let mut want: Vec<bool> = SPECS.iter().map(|s| wants(&s.row())).collect();
    let mut fsync = false;
    // Baselines come before the rows held against them: walk backwards once.
    for i in (0..SPECS.len()).rev() {
        if !want[i] {
            continue;
        }
        match SPECS[i].baseline {
            Some(FSYNC_ONE) => fsync = true,
            Some(b) => {
                if let Some(j) = SPECS.iter().position(|s| s.config == b) {
                    want[j] = true;
                }
            }
            None => {}
        }
    }
    (want, fsync)
}

/// The rows of one round, each in a fresh directory under `dir` (removed afterwards): the
/// `Interval` rows, then the `fdatasync` loops in one process and in eight (ceilings, run
/// when the `Always` row is wanted) and the `Always` row.
pub(crate) fn rows(
    dir: &Path,
    budget: Budget,
    wants: &dyn Fn(&Row) -> bool,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let (want, want_fsync) = wanted(wants);
    let mut rows = Vec::new();
    for (i, spec) in SPECS.iter().enumerate() {
        if spec.always && want_fsync {
            for (processes, name) in [(1, FSYNC_ONE), (ALWAYS_PROCESSES, FSYNC_PROCESSES)] {
                sync();
                let row_dir = dir.join("fdatasync");
                match fsync_baseline(&row_dir, budget, processes) {
                    Ok(row) => rows.push(row),
                    Err(e) => notes.push(format!("ceiling {name} failed: {e}")),
                }
                let _ = std::fs::remove_dir_all(&row_dir);
            }
        }
        if !want[i] {
            continue;
        }
        // Untimed: write back what earlier rows left dirty, so that the kernel's writeback
        // does not compete with this row.
        sync();
        let row_dir = dir.join(format!("row-{i}"));
        let row = spec.row();
        let result = tidelog_row(&row_dir, spec, budget, row.clone());
        let _ = std::fs::remove_dir_all(&row_dir);
        rows.push(result.unwrap_or_else(|e| row.skip(e)));
    }
    rows
}

fn err(e: tidelog::Error) -> String {
    e.to_string()
}

fn wal_config(always: bool, exclusive: bool) -> Config {
    let durability = if always {
        Durability::Always
    } else {
        Durability::Interval
    };
    Config::default()
        .durability(durability)
        .exclusive(exclusive)
}

/// One tidelog row: the log and its topics made here (and closed), then the children.
fn tidelog_row(dir: &Path, spec: &Spec, budget: Budget, row: Row) -> Result<Row, String> {
    {
        let wal = Wal::open_with(dir, wal_config(spec.always, spec.exclusive)).map_err(err)?;
        let topics = if spec.topic_each { spec.processes } else { 1 };
        for p in 0..topics {
            wal.writer(&spec.topic(p))
                .and_then(|w| w.append(&[0u8; RECORD_BYTES as usize]))
                .map_err(err)?;
        }
        wal.close().map_err(err)?;
    }
    let max = budget.records_per_thread(RECORD_BYTES, spec.processes);
    let reports = run_children(spec.processes, budget, |p| {
        vec![
            "tidelog".into(),
            dir.into(),
            spec.topic(p).into(),
            spec.durability().into(),
            spec.sharing().into(),
            max.to_string().into(),
            p.to_string().into(),
        ]
    })?;
    let of = if spec.always {
        "record"
    } else {
        "record (1 in 64 timed)"
    };
    Ok(summed(row, reports, of))
}

/// The `Always` row's ceilings: `processes` children, each appending to a plain file of its
/// own.
fn fsync_baseline(dir: &Path, budget: Budget, processes: u32) -> Result<Row, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let max = budget.records_per_thread(RECORD_BYTES, processes);
    let reports = run_children(processes, budget, |p| {
        vec![
            "fdatasync".into(),
            dir.join(format!("file-{p}")).into(),
            max.to_string().into(),
            p.to_string().into(),
        ]
    })?;
    let (name, config) = if processes == 1 {
        (FSYNC_ONE, FSYNC_ONE_CONFIG)
    } else {
        (FSYNC_PROCESSES, FSYNC_CONFIG)
    };
    let row = Row::new("ceiling", name, config, "D2", OP, RECORD_BYTES, processes);
    Ok(summed(row, reports, "record"))
}

/// Starts `count` children with the arguments `args(index)`, lets them go together once all
/// are ready, and collects their reports.
fn run_children(
    count: u32,
    budget: Budget,
    args: impl Fn(u32) -> Vec<OsString>,
) -> Result<Vec<Report>, String> {
    let mut children = (0..count)
        .map(|p| Appender::spawn(&args(p)))
        .collect::<Result<Vec<_>, _>>()?;
    for c in &mut children {
        c.ready()?;
    }
    let start = monotonic_ns() + GO_AHEAD.as_nanos() as u64;
    let deadline = start + budget.duration().as_nanos() as u64;
    for c in &mut children {
        c.go(start, deadline)?;
    }
    let wait = budget.duration() + CHILD_TIMEOUT;
    children.into_iter().map(|c| c.finish(wait)).collect()
}

/// The row with the children's appends summed over the first start to the last end.
fn summed(row: Row, reports: Vec<Report>, of: &str) -> Row {
    let records: u64 = reports.iter().map(|r| r.records).sum();
    let start = reports.iter().map(|r| r.start_ns).min().unwrap_or(0);
    let end = reports.iter().map(|r| r.end_ns).max().unwrap_or(0);
    let latencies: Vec<u32> = reports.into_iter().flat_map(|r| r.latencies_ns).collect();
    row.measured(
        records,
        records * RECORD_BYTES,
        end.saturating_sub(start) as f64 / 1e9,
    )
    .latency(latencies, of)
}

/// What a child prints last.
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    records: u64,
    /// `CLOCK_MONOTONIC` ns of its first append and just after its last.
    start_ns: u64,
    end_ns: u64,
    latencies_ns: Vec<u32>,
}

/// A child (`process_appender`), seen from this process.
#[derive(Debug)]
struct Appender {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<std::io::Result<String>>,
}

impl Appender {
    fn spawn(args: &[OsString]) -> Result<Appender, String> {
        let program = super::sibling_program(PROGRAM)?;
        let mut child = Command::new(&program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Appender {
            child,
            stdin,
            lines,
        })
    }

    /// The next line the child prints within `wait`, or why there is none.
    fn line(&mut self, wait: Duration) -> Result<String, String> {
        match self.lines.recv_timeout(wait) {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(e)) => Err(format!("{PROGRAM}: {e}")),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("{PROGRAM} printed nothing for {wait:?}"))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.failure()),
        }
    }

    /// Why the child ended without its report: its exit status and the end of its stderr.
    fn failure(&mut self) -> String {
        self.stdin = None;
        super::child_failure(&mut self.child, PROGRAM)
    }

    fn ready(&mut self) -> Result<(), String> {
        let line = self.line(CHILD_TIMEOUT)?;
        if line == READY {
            Ok(())
        } else {
            Err(format!("{PROGRAM} said {line:?}, not {READY:?}"))
        }
    }

    fn go(&mut self, start: u64, deadline: u64) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("no stdin")?;
        writeln!(stdin, "go {start} {deadline}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("{PROGRAM}: {e}"))
    }

    /// The child's report, once it has printed it and exited.
    fn finish(mut self, wait: Duration) -> Result<Report, String> {
        let line = self.line(wait)?;
        let report: Report =
            serde_json::from_str(&line).map_err(|e| format!("{PROGRAM} printed {line:?}: {e}"))?;
        self.stdin = None;
        let status = self.child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(self.failure());
        }
        Ok(report)
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        // A no-op for a child that has exited and been waited for.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child process: `process_appender tidelog DIR TOPIC interval|always shared|exclusive
/// MAX INDEX` opens the log in `DIR` with that durability and mode and appends 100 B records
/// to `TOPIC`; `process_appender fdatasync FILE MAX INDEX` creates `FILE` and writes 100 B
/// records at its end, each followed by `fdatasync`. Either prints `ready` once set up, waits
/// for `go START DEADLINE` on stdin, appends from START (at most MAX records) until DEADLINE
/// and prints one JSON line of what it did. Exits 1 with a line on stderr when it fails, 2
/// for bad usage.
pub(crate) fn appender_main(args: &[String]) -> u8 {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = match args {
        [mode, dir, topic, durability, sharing, max, index] if mode == "tidelog" => {
            tidelog_child(dir, topic, durability, sharing, max, index, &mut out)
        }
        [mode, file, max, index] if mode == "fdatasync" => {
            (|| append_file(Path::new(file), number(max)?, number(index)?, &mut out))()
        }
        _ => {
            eprintln!(
                "usage: {PROGRAM} tidelog DIR TOPIC interval|always shared|exclusive MAX INDEX | {PROGRAM} fdatasync FILE MAX INDEX"
            );
            return 2;
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{PROGRAM}: {e}");
            1
        }
    }
}

/// `process_appender tidelog ...` with its arguments checked.
fn tidelog_child(
    dir: &str,
    topic: &str,
    durability: &str,
    sharing: &str,
    max: &str,
    index: &str,
    out: &mut impl Write,
) -> Result<(), String> {
    let always = match durability {
        "interval" => false,
        "always" => true,
        d => return Err(format!("durability {d:?} is not interval or always")),
    };
    let exclusive = match sharing {
        "shared" => false,
        "exclusive" => true,
        s => return Err(format!("mode {s:?} is not shared or exclusive")),
    };
    append_log(
        Path::new(dir),
        topic,
        wal_config(always, exclusive),
        (number(max)?, number(index)?),
        out,
    )
}

fn number(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .map_err(|_| format!("{text:?} is not a number"))
}

fn say(out: &mut impl Write, line: &str) -> Result<(), String> {
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())
}

/// Says `ready`, then waits for the `go` line: (start, deadline).
fn ready_go(out: &mut impl Write) -> Result<(u64, u64), String> {
    say(out, READY)?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("stdin: {e}"))?;
    match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["go", start, deadline] => Ok((number(start)?, number(deadline)?)),
        _ => Err(format!("expected `go START DEADLINE`, got {line:?}")),
    }
}

fn sleep_until(ns: u64) {
    let now = monotonic_ns();
    if ns > now {
        std::thread::sleep(Duration::from_nanos(ns - now));
    }
}

fn report(out: &mut impl Write, report: &Report) -> Result<(), String> {
    let line = serde_json::to_string(report).map_err(|e| e.to_string())?;
    say(out, &line)
}

fn to_u32(ns: u64) -> u32 {
    u32::try_from(ns).unwrap_or(u32::MAX)
}

fn append_log(
    dir: &Path,
    topic: &str,
    config: Config,
    (max, index): (u64, u64),
    out: &mut impl Write,
) -> Result<(), String> {
    let always = config.durability == Durability::Always;
    let pool = pool(RECORD_BYTES, 0x9e37_79b9 ^ index);
    let wal = Wal::open_with(dir, config).map_err(err)?;
    let writer = wal.writer(topic).map_err(err)?;
    // Untimed: the first append of this handle, and the clock's calibration.
    writer.append(&pool[0]).map_err(err)?;
    if !always {
        std::thread::sleep(SETTLE);
    }
    let (start, deadline) = ready_go(out)?;
    sleep_until(start);
    let mut latencies = Vec::new();
    let mut i = 0u64;
    let started = monotonic_ns();
    while i < max {
        let record = &pool[(i % pool.len() as u64) as usize];
        if always || i.is_multiple_of(LATENCY_SAMPLE_EVERY) {
            let t0 = monotonic_ns();
            if t0 >= deadline {
                break;
            }
            writer.append(record).map_err(err)?;
            latencies.push(to_u32(monotonic_ns() - t0));
        } else {
            writer.append(record).map_err(err)?;
        }
        i += 1;
    }
    let ended = monotonic_ns();
    report(
        out,
        &Report {
            records: i,
            start_ns: started,
            end_ns: ended,
            latencies_ns: latencies,
        },
    )?;
    drop(writer);
    wal.close().map_err(err)
}

fn append_file(path: &Path, max: u64, index: u64, out: &mut impl Write) -> Result<(), String> {
    let pool = pool(RECORD_BYTES, 0x9e37_79b9 ^ index);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| format!("create {}: {e}", path.display()))?;
    let (start, deadline) = ready_go(out)?;
    sleep_until(start);
    let started = monotonic_ns();
    let run = fdatasync_appends(
        &file,
        &pool,
        1,
        Duration::from_nanos(deadline.saturating_sub(started)),
        max,
    )
    .map_err(|e| format!("write+fdatasync: {e}"))?;
    let ended = monotonic_ns();
    drop(file);
    let _ = std::fs::remove_file(path);
    report(
        out,
        &Report {
            records: run.records,
            start_ns: started,
            end_ns: ended,
            latencies_ns: run.latencies_ns.into_iter().map(to_u32).collect(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_in_the_section_and_baselines_come_first() {
        for (i, spec) in SPECS.iter().enumerate() {
            assert!(spec.config.starts_with(SECTION), "{}", spec.config);
            assert!(!spec.config.contains("fsync never"), "{}", spec.config);
            if let Some(b) = spec.baseline.filter(|&b| b != FSYNC_ONE) {
                let j = SPECS.iter().position(|s| s.config == b).expect("baseline");
                assert!(j < i, "{} runs before its baseline", spec.config);
            }
        }
        assert!(FSYNC_CONFIG.starts_with(SECTION) && FSYNC_ONE_CONFIG.starts_with(SECTION));
        assert_eq!(
            label(SHARED_ONE),
            "1 process, shared mode (the default), fsync interval"
        );
    }

    #[test]
    fn a_wanted_row_brings_its_baselines() {
        let only = |text: &'static str| move |r: &Row| r.config.contains(text);
        let (want, fsync) = wanted(&only("4 topics"));
        assert_eq!(want, vec![true, true, false, true, false]);
        assert!(!fsync);
        let (want, fsync) = wanted(&only("fsync always"));
        assert_eq!(want, vec![false, false, false, false, true]);
        assert!(fsync);
        let (want, fsync) = wanted(&only(SECTION));
        assert!(want.iter().all(|&w| w) && fsync);
        let (want, fsync) = wanted(&only("nothing of this"));
        assert!(!want.iter().any(|&w| w) && !fsync);
    }

    #[test]
    fn reports_are_summed_from_the_first_start_to_the_last_end() {
        let report = |records, start_ns, end_ns| Report {
            records,
            start_ns,
            end_ns,
            latencies_ns: vec![1000; 3],
        };
        let row = summed(
            SPECS[2].row(),
            vec![
                report(100, 1_000_000_000, 1_400_000_000),
                report(300, 1_010_000_000, 1_500_000_000),
            ],
            "record",
        );
        assert_eq!(row.records, Some(400));
        assert!((row.seconds.expect("seconds") - 0.5).abs() < 1e-9);
        assert!((row.records_per_s.expect("rate") - 800.0).abs() < 1e-6);
        assert_eq!(row.p50_us, Some(1.0));
        assert_eq!(row.ceiling.as_deref(), Some(SHARED_ONE));
    }

    #[test]
    fn baselines_are_found_by_configuration_or_ceiling_name() {
        let shared = SPECS[1].row();
        assert!(is_baseline(&shared, SHARED_ONE));
        assert!(!is_baseline(&shared, EXCLUSIVE_ONE));
        let ceiling = Row::new("ceiling", FSYNC_ONE, FSYNC_ONE_CONFIG, "D2", OP, 100, 1);
        assert!(is_baseline(&ceiling, FSYNC_ONE));
        assert!(!is_baseline(&ceiling, FSYNC_PROCESSES));
        let other = Row::new("tidelog", "tidelog", SHARED_ONE, "D0", "append", 100, 1);
        assert!(!is_baseline(&other, SHARED_ONE));
        assert_eq!(target(FOUR_ONE_TOPIC), Some(0.8));
        assert_eq!(target(EXCLUSIVE_ONE), None);
    }
}

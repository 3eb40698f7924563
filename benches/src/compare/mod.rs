//! The comparison benchmark (`tidelog bench`, the `tidelog-bench` program): one run that
//! measures this machine's ceilings, tidelog (from Rust and from Python) and its peers on the
//! same workloads, in interleaved rounds, and reports medians and ratios (docs/BENCHMARKS.md
//! explains every row).
//!
//! The Rust rows and the ceilings run in this process (the append-to-visible rows with their
//! reader in a child process, `visible_reader`, and the many-processes rows with their
//! appenders in child processes, `process_appender`, binaries of this package). Two
//! producers run as child processes, once per round, and print rows as JSON lines: the
//! walrus peer (`walrus_peer`, a binary of this package) and the Python rows
//! (`benches/python/python_rows.py`, run with a Python that has tidelog installed). The plots
//! come from `benches/python/plot.py`. Both scripts are run from the checkout this program was
//! built in.

mod ceiling;
mod engine;
mod processes;
mod report;
mod row;
mod visible;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Parser;
use tidelog_cli::progress::Progress;

use row::{Budget, MIB, Row, pool};

/// The Python scripts (the Python rows and the plots), in the checkout this was built from.
const PYTHON_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python");
const PYTHON_ROWS: &str = "python_rows.py";
const PLOT: &str = "plot.py";

/// Largest record size: the ring's record limit.
const RECORD_BYTES_MAX: u64 = MIB;
const THREADS_MAX: u32 = 64;
const ROUNDS_MAX: u32 = 20;
const SECONDS_MAX: f64 = 60.0;

/// The command line of `tidelog bench` (and of `tidelog-bench`).
#[derive(Debug, Parser)]
#[command(
    name = "tidelog bench",
    version,
    about = "Measures this machine's ceilings, tidelog and its peers on the same workloads, and \
             prints medians with ratios to the ceiling and to the best peer"
)]
struct BenchArgs {
    /// Directory for the scratch files, on the file system to measure (default: the
    /// system's temporary directory). A subdirectory is made and removed.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Record sizes in bytes, comma-separated (at most 1 MiB).
    #[arg(long, value_delimiter = ',', default_values_t = [100u64, 1024, 65536, 1048576])]
    sizes: Vec<u64>,
    /// Writer thread counts, comma-separated (default: 1,2, and 4 with 4 or more cores).
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<u32>>,
    /// Rounds; every figure is the median over them.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Time budget of one row in one round, seconds.
    #[arg(long, default_value_t = 0.4)]
    seconds: f64,
    /// Most payload bytes one row writes in one round.
    #[arg(long, default_value_t = 256 * MIB)]
    max_bytes: u64,
    /// Only rows whose system or configuration contains this text (ceilings always run);
    /// e.g. "append to visible", "many processes".
    #[arg(long)]
    only: Option<String>,
    /// Python with tidelog installed, for the Python rows (default: $TIDELOG_PYTHON, else
    /// python3); `none` leaves them out.
    #[arg(long)]
    python: Option<String>,
    /// The walrus peer program (default: `walrus_peer` next to this program); `none` leaves
    /// it out.
    #[arg(long)]
    walrus: Option<PathBuf>,
    /// Write results.json, results.md and the plots (PNG, needs matplotlib) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// One round, 100 B and 64 KiB records, 0.2 s per row: a smoke run of a minute or two.
    #[arg(long)]
    quick: bool,
    /// Print the merged results as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// What a run failed with: bad input (exit 2) or a failure while running (exit 1).
#[derive(Debug)]
enum Failure {
    Usage(String),
    Run(String),
}

fn write_err(e: std::io::Error) -> Failure {
    Failure::Run(format!("cannot write output: {e}"))
}

/// Runs the benchmark with the command line `args` (the program name first), printing to
/// stdout, and returns the exit status: 0 on success, 1 when the run failed, 2 for bad usage.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = match BenchArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            // --help and --version print to stdout and succeed; usage errors exit 2.
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let out = std::io::stdout();
    let mut out = out.lock();
    let result = bench(&mut out, &args);
    let _ = out.flush();
    match result {
        Ok(()) => 0,
        Err(Failure::Usage(m)) => {
            eprintln!("tidelog bench: {m}");
            2
        }
        Err(Failure::Run(m)) => {
            eprintln!("tidelog bench: {m}");
            1
        }
    }
}

/// The reader process of the append-to-visible rows (the `visible_reader` program): its
/// arguments (the program name first) and its exit status.
pub fn visible_reader<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    visible::reader_main(&child_args(args))
}

/// A child program's arguments as text, its name left out.
fn child_args<I, T>(args: I) -> Vec<String>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    args.into_iter()
        .skip(1)
        .map(|a| a.into().to_string_lossy().into_owned())
        .collect()
}

/// Why a child program ended without its report: its exit status and the end of its
/// stderr.
pub(crate) fn child_failure(child: &mut std::process::Child, program: &str) -> String {
    use std::io::Read;
    let status = child.wait();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
    format!("{program} exited ({status}): {}", stderr.trim())
}

/// The path of `program`, a program of this package beside the running one.
pub(crate) fn sibling_program(program: &str) -> Result<std::path::PathBuf, String> {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(program)))
        .filter(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "{program} not found beside this program (cargo build --release -p tidelog-benches)"
            )
        })
}

/// A child process of the many-processes rows (the `process_appender` program): its
/// arguments (the program name first) and its exit status.
pub fn process_appender<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    processes::appender_main(&child_args(args))
}

/// The validated plan of a run.
#[derive(Debug)]
struct Plan {
    sizes: Vec<u64>,
    threads: Vec<u32>,
    rounds: u32,
    budget: Budget,
    only: Option<String>,
}

impl Plan {
    fn new(args: &BenchArgs) -> Result<Plan, Failure> {
        let usage = |m: String| Err(Failure::Usage(m));
        let (mut sizes, rounds, seconds) = if args.quick {
            (vec![100, 65536], 1, 0.2)
        } else {
            (args.sizes.clone(), args.rounds, args.seconds)
        };
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.is_empty() || sizes.iter().any(|&s| s == 0 || s > RECORD_BYTES_MAX) {
            return usage(format!(
                "--sizes must be between 1 and {RECORD_BYTES_MAX} bytes"
            ));
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let mut threads = args.threads.clone().unwrap_or_else(|| {
            if cores >= 4 {
                vec![1, 2, 4]
            } else {
                vec![1, 2]
            }
        });
        threads.sort_unstable();
        threads.dedup();
        if threads.is_empty() || threads.iter().any(|&t| t == 0 || t > THREADS_MAX) {
            return usage(format!("--threads must be between 1 and {THREADS_MAX}"));
        }
        if rounds == 0 || rounds > ROUNDS_MAX {
            return usage(format!("--rounds must be between 1 and {ROUNDS_MAX}"));
        }
        if !(seconds > 0.0 && seconds <= SECONDS_MAX) {
            return usage(format!(
                "--seconds must be above 0 and at most {SECONDS_MAX}"
            ));
        }
        if args.max_bytes < MIB {
            return usage("--max-bytes must be at least 1 MiB".into());
        }
        Ok(Plan {
            sizes,
            threads,
            rounds,
            budget: Budget {
                seconds,
                bytes_max: args.max_bytes,
            },
            only: args.only.clone(),
        })
    }

    fn wants(&self, row: &Row) -> bool {
        self.only
            .as_deref()
            .is_none_or(|o| row.system.contains(o) || row.config.contains(o))
    }

    /// The producers' shared command line.
    fn producer_args(&self, dir: &Path) -> Vec<OsString> {
        let join = |v: Vec<String>| v.join(",");
        let mut args: Vec<OsString> = vec![
            "--dir".into(),
            dir.into(),
            "--sizes".into(),
            join(self.sizes.iter().map(u64::to_string).collect()).into(),
            "--threads".into(),
            join(self.threads.iter().map(u32::to_string).collect()).into(),
            "--seconds".into(),
            self.budget.seconds.to_string().into(),
            "--max-bytes".into(),
            self.budget.bytes_max.to_string().into(),
        ];
        if let Some(o) = &self.only {
            args.push("--only".into());
            args.push(o.into());
        }
        args
    }
}

/// A child process that prints rows.
#[derive(Debug)]
struct Producer {
    name: &'static str,
    program: OsString,
    /// Arguments before the shared ones (the script, for Python).
    first_args: Vec<OsString>,
}

impl Producer {
    fn command(&self, plan: &Plan, dir: &Path) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.first_args).args(plan.producer_args(dir));
        cmd
    }

    /// How many rows one round of it runs (`--list`).
    fn count(&self, plan: &Plan, dir: &Path) -> Result<u64, String> {
        let out = self
            .command(plan, dir)
            .arg("--list")
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.program.to_string_lossy()))?;
        if !out.status.success() {
            return Err(format!(
                "{} --list failed: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(out
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count() as u64)
    }

    /// Runs one round, handing each row to `on_row` as it arrives.
    fn run(&self, plan: &Plan, dir: &Path, mut on_row: impl FnMut(Row)) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let errors = dir.with_extension("stderr");
        let err_file = std::fs::File::create(&errors).map_err(|e| e.to_string())?;
        let mut child = self
            .command(plan, dir)
            .stdout(Stdio::piped())
            .stderr(err_file)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.program.to_string_lossy()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut bad = None;
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| e.to_string())?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Row>(&line) {
                Ok(row) => on_row(row),
                Err(e) => {
                    bad.get_or_insert(format!("{}: bad row {line:?}: {e}", self.name));
                }
            }
        }
        let status = child.wait().map_err(|e| e.to_string())?;
        let stderr = std::fs::read_to_string(&errors).unwrap_or_default();
        let _ = std::fs::remove_file(&errors);
        let _ = std::fs::remove_dir_all(dir);
        if !status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
            return Err(format!(
                "{} exited with {status}: {}",
                self.name,
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ));
        }
        bad.map_or(Ok(()), Err)
    }
}

/// A scratch directory this run made and removes.
#[derive(Debug)]
struct Scratch(PathBuf);

impl Scratch {
    fn new(parent: Option<&Path>) -> Result<Scratch, Failure> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        if !parent.is_dir() {
            return Err(Failure::Usage(format!(
                "{} is not a directory",
                parent.display()
            )));
        }
        remove_stale_scratch(&parent);
        let dir = parent.join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
        std::fs::create_dir(&dir)
            .map_err(|e| Failure::Usage(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Scratch(dir))
    }
}

/// Scratch directories are named this plus the process id.
const SCRATCH_PREFIX: &str = "tidelog-bench-";

/// Removes the scratch directories of runs that were killed (their process is gone), which
/// could not clean up after themselves.
fn remove_stale_scratch(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One of the Python scripts, which must be where this program was built from.
fn python_script(name: &str) -> Result<PathBuf, String> {
    let path = Path::new(PYTHON_DIR).join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found (run tidelog bench from the checkout it was built in)",
            path.display()
        ))
    }
}

/// The Python for the Python rows, if it can import tidelog.
fn python_producer(arg: Option<&str>) -> Result<Producer, String> {
    let python = arg
        .map(str::to_owned)
        .or_else(|| std::env::var("TIDELOG_PYTHON").ok())
        .unwrap_or_else(|| "python3".to_owned());
    if python == "none" {
        return Err("Python rows left out (--python none)".into());
    }
    let ok = Command::new(&python)
        .args(["-c", "import tidelog"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err(format!(
            "Python rows left out: {python} cannot import tidelog (pip install tidelog, or --python)"
        ));
    }
    let script = python_script(PYTHON_ROWS).map_err(|e| format!("Python rows left out: {e}"))?;
    Ok(Producer {
        name: "python rows",
        program: python.into(),
        first_args: vec![script.into()],
    })
}

fn walrus_producer(arg: Option<&Path>) -> Result<Producer, String> {
    let program = match arg {
        Some(p) if p == Path::new("none") => {
            return Err("walrus peer left out (--walrus none)".into());
        }
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join("walrus_peer")))
            .ok_or("cannot locate this program")?,
    };
    if !program.is_file() {
        return Err(format!(
            "walrus peer left out: {} not found (cargo build --release -p tidelog-benches --bin walrus_peer, or --walrus)",
            program.display()
        ));
    }
    Ok(Producer {
        name: "walrus peer",
        program: program.into(),
        first_args: Vec::new(),
    })
}

/// The machine, the file system under test and the build, for the report.
fn machine(scratch: &Path, python: Option<&Producer>) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    m.insert(
        "kernel".into(),
        read("/proc/sys/kernel/osrelease").trim().to_owned(),
    );
    m.insert(
        "cpus".into(),
        std::thread::available_parallelism().map_or("?".into(), |n| n.to_string()),
    );
    if let Some(model) = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
    {
        m.insert("cpu".into(), model.trim().to_owned());
    }
    if let Some(mem) = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal"))
    {
        m.insert(
            "memory".into(),
            mem.trim_start_matches("MemTotal:").trim().to_owned(),
        );
    }
    m.insert("file system".into(), file_system(scratch));
    m.insert("tidelog".into(), env!("CARGO_PKG_VERSION").to_owned());
    if let Some(p) = python
        && let Ok(out) = Command::new(&p.program).arg("--version").output()
    {
        m.insert(
            "python".into(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        );
    }
    m
}

/// The type and options of the file system holding `path` (longest mount point prefix).
fn file_system(path: &Path) -> String {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && path.starts_with(f[1]))
                .then(|| (f[1].len(), format!("{} ({})", f[2], f[3])))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".into(), |(_, fs)| fs)
}

/// The size of the files the bandwidth ceilings write over and read (and of the rings):
/// no more than a row may write, within 16..=256 MiB.
fn scratch_file_bytes(b: Budget) -> u64 {
    b.bytes_max.clamp(16 * MIB, 256 * MIB)
}

/// The ceilings of one record size, measured just before tidelog's rows of that size so the
/// two see the host in the same state.
fn size_ceilings(
    plan: &Plan,
    dir: &Path,
    pool: &[Vec<u8>],
    direct: Option<&ceiling::DirectFile>,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let b = plan.budget;
    let mut results = vec![
        (ceiling::MMAP_WRITE, ceiling::mmap_write(dir, pool, b)),
        (
            ceiling::BUFFERED_WRITE,
            ceiling::buffered_write(dir, pool, b),
        ),
        (
            ceiling::FSYNC_RECORD,
            ceiling::fsync_write(dir, pool, b, false),
        ),
        (
            ceiling::FSYNC_BATCH,
            ceiling::fsync_write(dir, pool, b, true),
        ),
    ];
    if let Some(d) = direct {
        results.push((ceiling::DSYNC_RECORD, d.per_record(pool[0].len() as u64, b)));
    }
    results
        .into_iter()
        .filter_map(|(what, r)| {
            r.map_err(|e| notes.push(format!("ceiling {what} failed: {e}")))
                .ok()
        })
        .collect()
}

/// The bandwidth ceilings of one round, converted to every record size.
fn bandwidth_ceilings(
    plan: &Plan,
    dir: &Path,
    direct: Option<&ceiling::DirectFile>,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let b = plan.budget;
    let mut rows = Vec::new();
    if let Some(d) = direct {
        match d.blocks_mb_per_s(b) {
            Ok(mb) => rows.extend(ceiling::per_size(
                ceiling::DIRECT_BLOCKS,
                "256 KiB writes, 4 in flight, overwriting a written file",
                "D2a",
                "append",
                mb,
                &plan.sizes,
            )),
            Err(e) => notes.push(format!("ceiling {} failed: {e}", ceiling::DIRECT_BLOCKS)),
        }
    }
    match ceiling::page_cache_read_mb_per_s(dir, scratch_file_bytes(b), b) {
        Ok(mb) => rows.extend(ceiling::per_size(
            ceiling::PAGE_CACHE_READ,
            "1 MiB read(2) of a cached file",
            "D0",
            "read",
            mb,
            &plan.sizes,
        )),
        Err(e) => notes.push(format!("ceiling {} failed: {e}", ceiling::PAGE_CACHE_READ)),
    }
    rows.extend(ceiling::per_size(
        ceiling::MEMCPY,
        "1 MiB copies between 64 MiB buffers",
        "D0",
        "append",
        ceiling::memcpy_mb_per_s(b),
        &plan.sizes,
    ));
    rows
}

/// How many rows of tidelog's own one round runs (for the progress bar).
fn engine_row_count(plan: &Plan) -> u64 {
    let per_size_thread = engine::Mode::ALL.len() as u64 + 2 + 2;
    // Per round: walrus's workload, the append-to-visible rows and the many-processes rows.
    plan.sizes.len() as u64 * (plan.threads.len() as u64 * per_size_thread + 1)
        + 1
        + visible::ROWS
        + processes::ROWS
}

/// One round's ceilings and tidelog's own rows, size by size.
fn engine_rows(
    plan: &Plan,
    dir: &Path,
    pools: &[Vec<Vec<u8>>],
    progress: &mut Progress,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let b = plan.budget;
    let wants = &|r: &Row| plan.wants(r);
    let direct = match ceiling::DirectFile::create(dir, scratch_file_bytes(b)) {
        Ok(Some(d)) => Some(d),
        Ok(None) => {
            notes.push("the scratch file system refuses O_DIRECT: no direct I/O ceilings".into());
            None
        }
        Err(e) => {
            notes.push(format!("direct I/O ceilings failed: {e}"));
            None
        }
    };
    let mut rows = bandwidth_ceilings(plan, dir, direct.as_ref(), notes);
    let mut n = 0u32;
    let mut fresh = |what: &str| {
        n += 1;
        dir.join(format!("{what}-{n}"))
    };
    let ring_path = dir.join("ring.wal");
    let ring = engine::open_ring(&ring_path, 2 * scratch_file_bytes(b));
    for pool in pools {
        let size = pool[0].len() as u64;
        progress.message(format!("ceilings {}", row::size_label(size)));
        rows.extend(size_ceilings(plan, dir, pool, direct.as_ref(), notes));
        for &t in &plan.threads {
            for mode in engine::Mode::ALL {
                progress.message(format!(
                    "tidelog {mode:?} {} {t} thr",
                    row::size_label(size)
                ));
                let read_back = mode == engine::Mode::Interval && t == 1;
                let got = engine::mmap(&fresh("mmap"), pool, t, mode, b, read_back, wants);
                progress.inc(got.len() as u64);
                rows.extend(got);
            }
            progress.message(format!("tidelog ring {} {t} thr", row::size_label(size)));
            for pipelined in [true, false] {
                rows.extend(match &ring {
                    Ok(ring) => engine::ring(ring, pool, t, pipelined, b, wants),
                    Err(e) => Some(
                        Row::new(
                            "tidelog",
                            "tidelog",
                            "RingWal (could not be opened)",
                            if pipelined { "D2a" } else { "D2" },
                            "append",
                            size,
                            t,
                        )
                        .skip(e.clone()),
                    ),
                });
                progress.inc(1);
            }
            for batch in [false, true] {
                rows.extend(engine::ring_topic_log(
                    &fresh("ring-log"),
                    pool,
                    t,
                    batch,
                    b,
                    scratch_file_bytes(b),
                    wants,
                ));
                progress.inc(1);
            }
        }
    }
    drop(ring);
    let _ = std::fs::remove_file(&ring_path);
    progress.message("tidelog with walrus's workload");
    rows.extend(engine::walrus_workload(&fresh("walrus-workload"), b, wants));
    progress.inc(1);
    progress.message("tidelog append to visible");
    rows.extend(visible::rows(
        &fresh("visible-other"),
        &fresh("visible-same"),
        b,
        wants,
        notes,
    ));
    progress.inc(visible::ROWS);
    progress.message("tidelog from many processes");
    rows.extend(processes::rows(&fresh("processes"), b, wants, notes));
    progress.inc(processes::ROWS);
    rows
}

fn bench(out: &mut impl Write, args: &BenchArgs) -> Result<(), Failure> {
    let plan = Plan::new(args)?;
    if let Some(o) = &args.out {
        std::fs::create_dir_all(o)
            .map_err(|e| Failure::Usage(format!("cannot create {}: {e}", o.display())))?;
    }
    let scratch = Scratch::new(args.dir.as_deref())?;
    let mut notes = Vec::new();
    let mut producers = Vec::new();
    for p in [
        walrus_producer(args.walrus.as_deref()),
        python_producer(args.python.as_deref()),
    ] {
        match p {
            Ok(p) => producers.push(p),
            Err(e) => notes.push(e),
        }
    }
    let mut per_round = engine_row_count(&plan);
    let mut counted = Vec::new();
    for p in producers {
        match p.count(&plan, &scratch.0.join("list")) {
            Ok(n) => {
                per_round += n;
                counted.push(p);
            }
            Err(e) => notes.push(e),
        }
    }
    let producers = counted;
    let machine = machine(
        &scratch.0,
        producers.iter().find(|p| p.name == "python rows"),
    );
    let pools: Vec<Vec<Vec<u8>>> = plan
        .sizes
        .iter()
        .map(|&s| pool(s, 0x7146_e109 ^ s))
        .collect();

    let mut progress = Progress::new("rows", Some(per_round * u64::from(plan.rounds)));
    let mut rounds = Vec::new();
    let mut probes = Vec::new();
    let probe_budget = Budget {
        seconds: 0.2,
        ..plan.budget
    };
    for round in 0..plan.rounds {
        let dir = scratch.0.join(format!("round-{round}"));
        std::fs::create_dir(&dir).map_err(|e| Failure::Run(format!("{}: {e}", dir.display())))?;
        let before = ceiling::memcpy_mb_per_s(probe_budget);
        let mut rows = engine_rows(&plan, &dir, &pools, &mut progress, &mut notes);
        for p in &producers {
            progress.message(format!("round {}: {}", round + 1, p.name));
            let result = p.run(&plan, &dir.join(p.name.replace(' ', "-")), |row| {
                progress.inc(1);
                rows.push(row);
            });
            if let Err(e) = result {
                notes.push(format!("round {}: {e}", round + 1));
            }
        }
        probes.push((before, ceiling::memcpy_mb_per_s(probe_budget)));
        let _ = std::fs::remove_dir_all(&dir);
        rounds.push(rows);
    }
    progress.finish();
    notes.dedup();
    let report = report::merge(&rounds, probes, machine, notes);
    let markdown = report::markdown(&report);
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| Failure::Run(format!("cannot encode results: {e}")))?;
    if let Some(dir) = &args.out {
        write_outputs(
            dir,
            &json,
            &markdown,
            producers.iter().find(|p| p.name == "python rows"),
        )?;
    }
    if args.json {
        writeln!(out, "{json}")
    } else {
        write!(out, "{markdown}")
    }
    .map_err(write_err)?;
    Ok(())
}

/// results.json, results.md and, when the Python has matplotlib, the plots.
fn write_outputs(
    dir: &Path,
    json: &str,
    markdown: &str,
    python: Option<&Producer>,
) -> Result<(), Failure> {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .map_err(|e| Failure::Run(format!("cannot write {}: {e}", dir.join(name).display())))
    };
    write("results.json", json)?;
    write("results.md", markdown)?;
    let Some(python) = python else {
        eprintln!("tidelog bench: no plots: the Python rows did not run");
        return Ok(());
    };
    let script = match python_script(PLOT) {
        Ok(script) => script,
        Err(e) => {
            eprintln!("tidelog bench: no plots: {e}");
            return Ok(());
        }
    };
    let status = Command::new(&python.program)
        .arg(&script)
        .arg(dir.join("results.json"))
        .arg(dir)
        .stdout(Stdio::null())
        .status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("tidelog bench: no plots: plotting failed (pip install matplotlib)");
    }
    Ok(())
}

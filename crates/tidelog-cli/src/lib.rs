//! `tidelog`: produce into, consume from, dump, inspect and verify a log directory (or a
//! ring), and start the comparison benchmark.
//!
//! The command is a library so the Python wheel can ship it too: its `tidelog` console
//! script calls [`run_without_bench`] through the binding. Every subcommand prints
//! human-readable text, or one JSON document with `--json`. Errors are one line on stderr and
//! a non-zero exit: 2 for bad usage or input (missing directory, locked directory, unknown
//! topic), 1 for corruption found by `verify` or an I/O failure.
//!
//! The comparison benchmark is not here: it is the `tidelog-bench` program of the benches
//! package (`benches/`), which `tidelog bench` runs when it lies next to this program (a
//! checkout's `target/release`).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use tidelog::Error;

mod bench;
mod groups;
mod log;
pub mod progress;
mod ring;

#[derive(Debug, Parser)]
#[command(
    name = "tidelog",
    version,
    about = "Inspect and use a tidelog directory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Appends one record per input line (stdin, or --file) to TOPIC.
    Produce {
        dir: PathBuf,
        topic: String,
        /// Read records from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
        /// How records are delimited: one per line (the newline is not part of it), or each
        /// after its length as a 4-byte little-endian integer (tidelog's byte order).
        #[arg(long, value_enum, default_value = "lines")]
        format: InputFormat,
        /// When appends are durable.
        #[arg(long, value_enum, default_value = "interval")]
        fsync: Fsync,
        #[arg(long)]
        json: bool,
    },
    /// Prints TOPIC's records, one value per line.
    Consume {
        dir: PathBuf,
        topic: String,
        /// Consumer group: start at its committed offset and commit what was read (opens the
        /// directory for writing).
        #[arg(long)]
        group: Option<String>,
        /// earliest, latest, committed (with --group) or an offset.
        #[arg(long, default_value = "earliest")]
        from: String,
        /// Stop after this many records.
        #[arg(long)]
        limit: Option<u64>,
        /// Keep waiting for new records (Ctrl-C to stop).
        #[arg(long)]
        follow: bool,
        /// One JSON object per record: offset, timestamp_us, key and value as text, or as
        /// key_hex / value_hex when they are not UTF-8.
        #[arg(long)]
        json: bool,
    },
    /// Lists records with offset, timestamp, sizes, value checksum, file and position; with
    /// --ring, a ring's header slots and records.
    Dump {
        /// The log directory (or give --ring).
        #[arg(required_unless_present = "ring", conflicts_with = "ring")]
        dir: Option<PathBuf>,
        /// A ring file or block device instead of a directory; read without writing or
        /// locking, so a ring in use can be dumped.
        #[arg(long, value_name = "PATH")]
        ring: Option<PathBuf>,
        /// Only this topic (default: all).
        #[arg(long, conflicts_with = "ring")]
        topic: Option<String>,
        /// First offset of each topic to show (with --ring: first ring offset).
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Most records per topic (with --ring: in all).
        #[arg(long)]
        limit: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Topics with offsets and bytes, groups with their lag, files with their deletion
    /// counters, staged (Spark) jobs not yet published, disk use.
    Stat {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Consumer groups: committed offsets and lag (with no action), or move or delete a
    /// group's cursor, as kafka-consumer-groups does.
    Groups {
        dir: PathBuf,
        #[command(subcommand)]
        action: Option<GroupsAction>,
        #[arg(long, global = true)]
        json: bool,
    },
    /// Deletes TOPIC's records below --before, as kafka-delete-records does: its first
    /// offset moves there for every reader (opens the directory for writing).
    DeleteRecords {
        dir: PathBuf,
        #[arg(long)]
        topic: String,
        /// The new first offset (at most the topic's next offset).
        #[arg(long)]
        before: u64,
        #[arg(long)]
        json: bool,
    },
    /// Reads every record and checks every checksum; exits 1 naming each corrupt record.
    Verify {
        /// The log directory (or give --ring).
        #[arg(required_unless_present = "ring", conflicts_with = "ring")]
        dir: Option<PathBuf>,
        /// A ring file or block device instead of a directory: checks every record from the
        /// trim offset to the end of the log, without writing or locking.
        #[arg(long, value_name = "PATH")]
        ring: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// The comparison benchmark: this machine's ceilings, tidelog and its peers on the same
    /// workloads (the `tidelog-bench` program, built from a checkout next to this one;
    /// `tidelog bench --help` for its options).
    #[command(disable_help_flag = true)]
    Bench {
        /// Everything after `bench` goes to `tidelog-bench`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

#[derive(Debug, Subcommand)]
enum GroupsAction {
    /// Moves GROUP's committed offset on TOPIC (opens the directory for writing).
    #[command(group(clap::ArgGroup::new("to").required(true)))]
    Reset {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        group: String,
        /// To this offset.
        #[arg(long, group = "to")]
        to_offset: Option<u64>,
        /// To the first stored offset.
        #[arg(long, group = "to")]
        to_earliest: bool,
        /// To the next offset: the group skips every record stored now.
        #[arg(long, group = "to")]
        to_latest: bool,
        /// To the first record at or after this time (ISO 8601, `2026-11-28T10:00:00Z`;
        /// no zone: UTC).
        #[arg(long, group = "to")]
        to_datetime: Option<String>,
    },
    /// Deletes GROUP's cursor on TOPIC: it no longer holds records back.
    Delete {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        group: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum InputFormat {
    Lines,
    LengthPrefixed,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Fsync {
    Interval,
    Always,
    Never,
}

/// What a subcommand failed with: bad input (exit 2) or a failure of the log (exit 1).
#[derive(Debug)]
pub(crate) enum Failure {
    Usage(String),
    /// A record failed validation.
    Corrupt(String),
    Log(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            Error::Locked { .. }
            | Error::UnknownTopic { .. }
            | Error::UnknownGroup { .. }
            | Error::InvalidTopic { .. }
            | Error::InvalidArgument { .. }
            | Error::OffsetOutOfRange { .. } => Failure::Usage(e.to_string()),
            Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Failure::Usage(e.to_string())
            }
            Error::Corruption { .. } => Failure::Corrupt(e.to_string()),
            _ => Failure::Log(e.to_string()),
        }
    }
}

/// Runs the command line `args` (the program name first) and returns the exit status: 0 on
/// success, 1 for corruption or a failure of the log, 2 for bad usage or input. `tidelog
/// bench` runs `tidelog-bench` from this program's directory, where a checkout's build puts
/// it, and returns its status.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_with(args, bench::Bench::NextToThisProgram)
}

/// As [`run`], for a host that ships no benchmark (the Python wheel's console script):
/// `tidelog bench` looks for no program and only says, in one line with exit status 2, how
/// to run the benchmark from a checkout.
pub fn run_without_bench<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_with(args, bench::Bench::Absent)
}

fn run_with<I, T>(args: I, bench: bench::Bench) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; usage errors exit 2.
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let out = std::io::stdout();
    let mut out = out.lock();
    let result = match cli.command {
        Command::Produce {
            dir,
            topic,
            file,
            format,
            fsync,
            json,
        } => log::produce(&mut out, &dir, &topic, file.as_deref(), format, fsync, json),
        Command::Consume {
            dir,
            topic,
            group,
            from,
            limit,
            follow,
            json,
        } => log::consume(&mut out, &dir, &topic, group, &from, limit, follow, json),
        Command::Dump {
            dir,
            ring,
            topic,
            from,
            limit,
            json,
        } => match (dir, ring) {
            (_, Some(ring)) => ring::dump(&mut out, &ring, from, limit, json),
            (Some(dir), None) => log::dump(&mut out, &dir, topic.as_deref(), from, limit, json),
            (None, None) => Err(Failure::Usage("give a directory or --ring PATH".into())),
        },
        Command::Stat { dir, json } => log::stat(&mut out, &dir, json),
        Command::Groups { dir, action, json } => match action {
            None => groups::list(&mut out, &dir, json),
            Some(GroupsAction::Delete { topic, group }) => {
                groups::delete(&mut out, &dir, &topic, &group, json)
            }
            Some(GroupsAction::Reset {
                topic,
                group,
                to_offset,
                to_earliest,
                to_latest,
                to_datetime,
            }) => groups::target(to_offset, to_earliest, to_latest, to_datetime.as_deref())
                .and_then(|target| groups::reset(&mut out, &dir, &topic, &group, &target, json)),
        },
        Command::DeleteRecords {
            dir,
            topic,
            before,
            json,
        } => log::delete_records(&mut out, &dir, &topic, before, json),
        Command::Verify { dir, ring, json } => match (dir, ring) {
            (_, Some(ring)) => ring::verify(&mut out, &ring, json),
            (Some(dir), None) => log::verify(&mut out, &dir, json),
            (None, None) => Err(Failure::Usage("give a directory or --ring PATH".into())),
        },
        Command::Bench { args } => {
            // The benchmark writes to the same stdout: nothing of ours may be pending.
            let _ = out.flush();
            bench.run(args)
        }
    };
    // The binding calls this inside Python, where nothing flushes Rust's stdout at exit.
    let _ = out.flush();
    match result {
        Ok(code) => code,
        Err(Failure::Usage(m)) => {
            eprintln!("tidelog: {m}");
            2
        }
        Err(Failure::Log(m) | Failure::Corrupt(m)) => {
            eprintln!("tidelog: {m}");
            1
        }
    }
}

pub(crate) type Out<'a> = std::io::StdoutLock<'a>;

pub(crate) fn write_err(e: std::io::Error) -> Failure {
    Failure::Log(format!("cannot write output: {e}"))
}

/// A JSON string literal.
pub(crate) fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(q, "\\u{:04x}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

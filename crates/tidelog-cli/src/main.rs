//! `tidelog`: produce into, consume from, dump, inspect and verify a log directory.
//!
//! Every subcommand prints human-readable text, or one JSON document with `--json`. Errors
//! are one line on stderr and a non-zero exit: 2 for bad usage or input (missing directory,
//! locked directory, unknown topic), 1 for corruption found by `verify` or an I/O failure.

use std::fmt::Write as _;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use tidelog::{Durability, Error, ReaderOptions, StartPosition, Wal};

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
        /// Read lines from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
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
        #[arg(long)]
        json: bool,
    },
    /// Lists records with offset, timestamp, sizes, value checksum, file and position.
    Dump {
        dir: PathBuf,
        /// Only this topic (default: all).
        #[arg(long)]
        topic: Option<String>,
        /// First offset of each topic to show.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Most records per topic.
        #[arg(long)]
        limit: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Topics with offsets and bytes, groups with their lag, files with their deletion
    /// counters, disk use.
    Stat {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Reads every record and checks every checksum; exits 1 naming each corrupt record.
    Verify {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Fsync {
    Interval,
    Always,
    Never,
}

/// What a subcommand failed with: bad input (exit 2) or a failure of the log (exit 1).
#[derive(Debug)]
enum Failure {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let out = std::io::stdout();
    let mut out = out.lock();
    let result = match cli.command {
        Command::Produce {
            dir,
            topic,
            file,
            fsync,
            json,
        } => produce(&mut out, &dir, &topic, file.as_deref(), fsync, json),
        Command::Consume {
            dir,
            topic,
            group,
            from,
            limit,
            follow,
            json,
        } => consume(&mut out, &dir, &topic, group, &from, limit, follow, json),
        Command::Dump {
            dir,
            topic,
            from,
            limit,
            json,
        } => dump(&mut out, &dir, topic.as_deref(), from, limit, json),
        Command::Stat { dir, json } => stat(&mut out, &dir, json),
        Command::Verify { dir, json } => verify(&mut out, &dir, json),
    };
    match result {
        Ok(code) => code,
        Err(Failure::Usage(m)) => {
            eprintln!("tidelog: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Log(m) | Failure::Corrupt(m)) => {
            eprintln!("tidelog: {m}");
            ExitCode::from(1)
        }
    }
}

type Out<'a> = std::io::StdoutLock<'a>;

fn write_err(e: std::io::Error) -> Failure {
    Failure::Log(format!("cannot write output: {e}"))
}

/// Opens `dir` read-only, refusing a missing directory with a clear message.
fn open_read_only(dir: &Path) -> Result<Wal, Failure> {
    if !dir.is_dir() {
        return Err(Failure::Usage(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    Ok(Wal::open_read_only(dir)?)
}

fn produce(
    out: &mut Out<'_>,
    dir: &Path,
    topic: &str,
    file: Option<&Path>,
    fsync: Fsync,
    json: bool,
) -> Result<ExitCode, Failure> {
    let input: Box<dyn BufRead> = match file {
        Some(f) => Box::new(std::io::BufReader::new(
            std::fs::File::open(f)
                .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", f.display())))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let durability = match fsync {
        Fsync::Interval => Durability::Interval,
        Fsync::Always => Durability::Always,
        Fsync::Never => Durability::Never,
    };
    let wal = Wal::open(dir)?;
    let writer = wal.writer(topic)?.with_durability(durability);
    let (mut first, mut count) = (None, 0u64);
    for line in input.lines() {
        let line = line.map_err(|e| Failure::Usage(format!("cannot read input: {e}")))?;
        let offset = writer.append(line.as_bytes())?;
        first.get_or_insert(offset);
        count += 1;
    }
    wal.close()?;
    let first = first.unwrap_or_else(|| writer.next_offset());
    if json {
        writeln!(
            out,
            "{{\"topic\":{},\"records\":{count},\"first_offset\":{first},\"next_offset\":{}}}",
            quote(topic),
            first + count
        )
    } else {
        writeln!(
            out,
            "appended {count} records to {topic} (offsets {first}..{})",
            first + count
        )
    }
    .map_err(write_err)?;
    Ok(ExitCode::SUCCESS)
}

#[expect(clippy::too_many_arguments, reason = "one per command-line option")]
fn consume(
    out: &mut Out<'_>,
    dir: &Path,
    topic: &str,
    group: Option<String>,
    from: &str,
    limit: Option<u64>,
    follow: bool,
    json: bool,
) -> Result<ExitCode, Failure> {
    let start = match from {
        "earliest" => StartPosition::Earliest,
        "latest" => StartPosition::Latest,
        "committed" if group.is_some() => StartPosition::Committed,
        "committed" => return Err(Failure::Usage("--from committed needs --group".into())),
        n => StartPosition::Offset(n.parse().map_err(|_| {
            Failure::Usage(format!(
                "--from {n:?} is not earliest, latest, committed or an offset"
            ))
        })?),
    };
    let wal = match &group {
        // Committing a group writes its cursor: that needs the directory.
        Some(_) => Wal::open(dir)?,
        None => open_read_only(dir)?,
    };
    let options = ReaderOptions {
        group: group.clone(),
        start,
        ..ReaderOptions::default()
    };
    let mut reader = wal.reader_with(topic, options)?;
    let mut n = 0u64;
    while limit.is_none_or(|l| n < l) {
        let record = match reader.next()? {
            Some(r) => r,
            None if follow => {
                std::thread::sleep(Duration::from_millis(50));
                wal.refresh()?;
                continue;
            }
            None => break,
        };
        if json {
            writeln!(
                out,
                "{{\"offset\":{},\"timestamp_us\":{},\"key\":{},\"value\":{}}}",
                record.offset,
                record.timestamp_us,
                record
                    .key
                    .map_or("null".into(), |k| quote(&String::from_utf8_lossy(k))),
                quote(&String::from_utf8_lossy(record.value))
            )
        } else {
            writeln!(out, "{}", String::from_utf8_lossy(record.value))
        }
        .map_err(write_err)?;
        n += 1;
    }
    if group.is_some() {
        reader.commit()?;
    }
    drop(reader);
    wal.close()?;
    Ok(ExitCode::SUCCESS)
}

fn dump(
    out: &mut Out<'_>,
    dir: &Path,
    topic: Option<&str>,
    from: u64,
    limit: Option<u64>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let wal = open_read_only(dir)?;
    let topics = match topic {
        Some(t) => vec![t.to_owned()],
        None => wal.topics(),
    };
    for t in topics {
        let info = wal.topic_info(&t)?;
        let start = from.max(info.first_offset);
        let options = ReaderOptions {
            start: StartPosition::Offset(start.min(info.next_offset)),
            ..ReaderOptions::default()
        };
        let mut reader = wal.reader_with(&t, options)?;
        if !json {
            writeln!(
                out,
                "topic {t}: offsets {}..{}",
                info.first_offset, info.next_offset
            )
            .map_err(write_err)?;
        }
        let mut n = 0u64;
        while limit.is_none_or(|l| n < l) {
            let Some(r) = reader.next()? else { break };
            let (file, position) = r.location();
            let crc = crc32fast::hash(r.value);
            let file = file.file_name().map_or_else(
                || file.display().to_string(),
                |f| f.to_string_lossy().into_owned(),
            );
            if json {
                writeln!(
                    out,
                    "{{\"topic\":{},\"offset\":{},\"timestamp_us\":{},\"key_bytes\":{},\"value_bytes\":{},\"value_crc32\":{crc},\"file\":{},\"position\":{position}}}",
                    quote(&t),
                    r.offset,
                    r.timestamp_us,
                    r.key.map_or("null".into(), |k| k.len().to_string()),
                    r.value.len(),
                    quote(&file)
                )
            } else {
                writeln!(
                    out,
                    "  offset {} ts {} key {} value {} B crc32 {crc:08x} at {file}:{position}",
                    r.offset,
                    r.timestamp_us,
                    r.key.map_or("-".into(), |k| format!("{} B", k.len())),
                    r.value.len()
                )
            }
            .map_err(write_err)?;
            n += 1;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn stat(out: &mut Out<'_>, dir: &Path, json: bool) -> Result<ExitCode, Failure> {
    let wal = open_read_only(dir)?;
    let mut topics = String::new();
    let mut text = String::new();
    for name in wal.topics() {
        let info = wal.topic_info(&name)?;
        let groups: Vec<(String, Option<u64>)> = info
            .groups
            .iter()
            .map(|g| (g.clone(), committed(&wal, &name, g)))
            .collect();
        let _ = writeln!(
            text,
            "topic {name}: offsets {}..{} ({} records), {} B in {} extents",
            info.first_offset,
            info.next_offset,
            info.next_offset - info.first_offset,
            info.bytes,
            info.extents
        );
        let mut gj = String::new();
        for (g, c) in &groups {
            let lag = c.map(|c| info.next_offset.saturating_sub(c));
            let _ = writeln!(
                text,
                "  group {g}: committed {}, lag {}",
                c.map_or("-".into(), |c| c.to_string()),
                lag.map_or("-".into(), |l| l.to_string())
            );
            let _ = write!(
                gj,
                "{}{{\"group\":{},\"committed\":{},\"lag\":{}}}",
                if gj.is_empty() { "" } else { "," },
                quote(g),
                c.map_or("null".into(), |c| c.to_string()),
                lag.map_or("null".into(), |l| l.to_string())
            );
        }
        let _ = write!(
            topics,
            "{}{{\"topic\":{},\"first_offset\":{},\"next_offset\":{},\"bytes\":{},\"extents\":{},\"groups\":[{gj}]}}",
            if topics.is_empty() { "" } else { "," },
            quote(&name),
            info.first_offset,
            info.next_offset,
            info.bytes,
            info.extents
        );
    }
    let mut files = String::new();
    for f in wal.file_states() {
        let why = if f.total_blocks == 0 && f.held_blocks == 0 {
            // Allocation is counted by the process that writes; this view only reads.
            "kept: no allocation counted by this read-only view".to_owned()
        } else if f.deletable {
            "deletable: every block consumed".to_owned()
        } else if !f.fully_allocated {
            "kept: still handing out blocks".to_owned()
        } else {
            format!(
                "kept: {} of {} blocks not consumed",
                f.total_blocks - f.consumed_blocks,
                f.total_blocks
            )
        };
        let name = f
            .path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let _ = writeln!(
            text,
            "file {name}: held {} consumed {} total {} blocks, {why}",
            f.held_blocks, f.consumed_blocks, f.total_blocks
        );
        let _ = write!(
            files,
            "{}{{\"file\":{},\"held_blocks\":{},\"consumed_blocks\":{},\"total_blocks\":{},\"fully_allocated\":{},\"deletable\":{},\"why\":{}}}",
            if files.is_empty() { "" } else { "," },
            quote(&name),
            f.held_blocks,
            f.consumed_blocks,
            f.total_blocks,
            f.fully_allocated,
            f.deletable,
            quote(&why)
        );
    }
    let usage = wal.disk_usage();
    let _ = writeln!(
        text,
        "disk: {} files, {} B reserved",
        usage.files, usage.bytes
    );
    if json {
        writeln!(
            out,
            "{{\"topics\":[{topics}],\"files\":[{files}],\"disk\":{{\"files\":{},\"bytes\":{}}}}}",
            usage.files, usage.bytes
        )
    } else {
        write!(out, "{text}")
    }
    .map_err(write_err)?;
    Ok(ExitCode::SUCCESS)
}

/// The committed offset of `group` on `topic`, read without writing anything.
fn committed(wal: &Wal, topic: &str, group: &str) -> Option<u64> {
    wal.reader_with(topic, ReaderOptions::group(group))
        .ok()
        .and_then(|r| r.committed())
}

fn verify(out: &mut Out<'_>, dir: &Path, json: bool) -> Result<ExitCode, Failure> {
    let mut bad = Vec::new();
    // Opening validates what it trusts without reading (sealed extents, clean ends): a
    // record that fails there is a finding like any other.
    let (topics, torn_tails, wal) = match open_read_only(dir) {
        Ok(wal) => (wal.topics(), wal.recovery_report().torn_tails, Some(wal)),
        Err(Failure::Corrupt(m)) => {
            bad.push(m);
            (Vec::new(), 0, None)
        }
        Err(e) => return Err(e),
    };
    let mut records = 0u64;
    for t in wal.iter().flat_map(|w| topics.iter().map(move |t| (w, t))) {
        let (wal, t) = t;
        let mut reader = wal.reader_with(
            t,
            ReaderOptions {
                start: StartPosition::Earliest,
                ..ReaderOptions::default()
            },
        )?;
        loop {
            match reader.next() {
                Ok(Some(_)) => records += 1,
                Ok(None) => break,
                Err(e @ Error::Corruption { .. }) => {
                    bad.push(e.to_string());
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if json {
        let list: Vec<String> = bad.iter().map(|b| quote(b)).collect();
        writeln!(
            out,
            "{{\"topics\":{},\"records\":{records},\"torn_tails\":{torn_tails},\"corrupt\":[{}],\"ok\":{}}}",
            topics.len(),
            list.join(","),
            bad.is_empty()
        )
    } else {
        for b in &bad {
            writeln!(out, "corrupt: {b}").map_err(write_err)?;
        }
        writeln!(
            out,
            "{}: {} topics, {records} records checked, {torn_tails} torn tails cut at open",
            if bad.is_empty() { "ok" } else { "CORRUPT" },
            topics.len(),
        )
    }
    .map_err(write_err)?;
    Ok(if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A JSON string literal.
fn quote(s: &str) -> String {
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

//! The subcommands that work on a log directory: produce, consume, dump, stat, verify.

use std::fmt::Write as _;
use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use tidelog::{Durability, Error, ReaderOptions, RecoveryReport, StartPosition, Wal};

use crate::progress::Progress;
use crate::{Failure, Fsync, InputFormat, Out, quote, write_err};

/// Opens `dir` read-only, refusing a missing directory with a clear message.
pub(crate) fn open_read_only(dir: &Path) -> Result<Wal, Failure> {
    existing(dir)?;
    Ok(Wal::open_read_only(dir)?)
}

/// Opens an existing directory for writing (a missing one is an error, not created).
pub(crate) fn open_existing(dir: &Path) -> Result<Wal, Failure> {
    existing(dir)?;
    Ok(Wal::open(dir)?)
}

fn existing(dir: &Path) -> Result<(), Failure> {
    if dir.is_dir() {
        return Ok(());
    }
    Err(Failure::Usage(format!(
        "{} is not a directory",
        dir.display()
    )))
}

/// `tidelog delete-records`, as kafka-delete-records: TOPIC's records below BEFORE go.
pub(crate) fn delete_records(
    out: &mut Out<'_>,
    dir: &Path,
    topic: &str,
    before: u64,
    json: bool,
) -> Result<u8, Failure> {
    let wal = open_existing(dir)?;
    let first = wal.delete_records(topic, before)?;
    wal.close()?;
    if json {
        writeln!(
            out,
            "{{\"topic\":{},\"first_offset\":{first}}}",
            quote(topic)
        )
    } else {
        writeln!(out, "{topic}: records below {first} deleted")
    }
    .map_err(write_err)?;
    Ok(0)
}

pub(crate) fn produce(
    out: &mut Out<'_>,
    dir: &Path,
    topic: &str,
    file: Option<&Path>,
    format: InputFormat,
    fsync: Fsync,
    json: bool,
) -> Result<u8, Failure> {
    let mut input: Box<dyn BufRead> = match file {
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
    let mut progress = Progress::new("records", None);
    let mut record = Vec::new();
    while next_record(&mut input, format, &mut record)? {
        let offset = writer.append(&record)?;
        first.get_or_insert(offset);
        count += 1;
        progress.inc(1);
    }
    progress.finish();
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
    Ok(0)
}

/// Reads the next input record into `record`; false at the end of the input.
fn next_record(
    input: &mut dyn BufRead,
    format: InputFormat,
    record: &mut Vec<u8>,
) -> Result<bool, Failure> {
    let bad = |e: std::io::Error| Failure::Usage(format!("cannot read input: {e}"));
    record.clear();
    match format {
        InputFormat::Lines => {
            if input.read_until(b'\n', record).map_err(bad)? == 0 {
                return Ok(false);
            }
            if record.last() == Some(&b'\n') {
                record.pop();
            }
            Ok(true)
        }
        InputFormat::LengthPrefixed => {
            let mut len = [0u8; 4];
            let got = read_full(input, &mut len).map_err(bad)?;
            if got == 0 {
                return Ok(false);
            }
            if got < len.len() {
                return Err(Failure::Usage(
                    "input ends inside a record's length prefix".into(),
                ));
            }
            let len = u32::from_le_bytes(len) as usize;
            record.resize(len, 0);
            if read_full(input, record).map_err(bad)? < len {
                return Err(Failure::Usage(format!(
                    "input ends inside a record of {len} bytes"
                )));
            }
            Ok(true)
        }
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut dyn BufRead, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[expect(clippy::too_many_arguments, reason = "one per command-line option")]
pub(crate) fn consume(
    out: &mut Out<'_>,
    dir: &Path,
    topic: &str,
    group: Option<String>,
    from: &str,
    limit: Option<u64>,
    follow: bool,
    json: bool,
) -> Result<u8, Failure> {
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
            let key = record
                .key
                .map_or_else(|| "\"key\":null".to_owned(), |k| bytes_field("key", k));
            writeln!(
                out,
                "{{\"offset\":{},\"timestamp_us\":{},{key},{}}}",
                record.offset,
                record.timestamp_us,
                bytes_field("value", record.value)
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
    Ok(0)
}

pub(crate) fn dump(
    out: &mut Out<'_>,
    dir: &Path,
    topic: Option<&str>,
    from: u64,
    limit: Option<u64>,
    json: bool,
) -> Result<u8, Failure> {
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
            let (file, position) = r
                .location()
                .unwrap_or((std::path::Path::new("(bucket)"), 0));
            let crc = crc32fast::hash(r.value);
            let file = file.file_name().map_or_else(
                || file.display().to_string(),
                |f| f.to_string_lossy().into_owned(),
            );
            if json {
                writeln!(
                    out,
                    "{{\"topic\":{},\"offset\":{},\"timestamp_us\":{},\"key_bytes\":{},\"value_bytes\":{},\"value_crc32\":{crc},\"headers\":{},\"file\":{},\"position\":{position}}}",
                    quote(&t),
                    r.offset,
                    r.timestamp_us,
                    r.key.map_or("null".into(), |k| k.len().to_string()),
                    r.value.len(),
                    headers_json(r.headers()),
                    quote(&file)
                )
            } else {
                writeln!(
                    out,
                    "  offset {} ts {} key {} value {} B crc32 {crc:08x}{} at {file}:{position}",
                    r.offset,
                    r.timestamp_us,
                    r.key.map_or("-".into(), |k| format!("{} B", k.len())),
                    r.value.len(),
                    headers_text(r.headers()),
                )
            }
            .map_err(write_err)?;
            n += 1;
        }
    }
    Ok(0)
}

/// `"name":"text"` for UTF-8 bytes, else `"name_hex":"0a1b..."`: JSON output never loses
/// a byte (replacement characters would make two values look the same).
fn bytes_field(name: &str, bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => format!("\"{name}\":{}", quote(text)),
        Err(_) => format!("\"{name}_hex\":{}", quote(&hex(bytes))),
    }
}

/// Lower-case hex digits of `bytes`.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A header value as text: quoted when UTF-8, hex otherwise, `null` for a null value.
fn header_value(v: Option<&[u8]>) -> String {
    match v {
        None => "null".to_owned(),
        Some(v) => match std::str::from_utf8(v) {
            Ok(s) => quote(s),
            Err(_) => format!("0x{}", hex(v)),
        },
    }
}

/// ` headers [k="v", k2=null]`, or nothing when the record has none.
fn headers_text(headers: tidelog::HeaderIter<'_>) -> String {
    let items: Vec<String> = headers
        .map(|(k, v)| format!("{}={}", quote(k), header_value(v)))
        .collect();
    if items.is_empty() {
        String::new()
    } else {
        format!(" headers [{}]", items.join(", "))
    }
}

/// `[{"key":"k","value":"v"}, ...]`: a value that is not UTF-8 goes as `"value_hex"`.
fn headers_json(headers: tidelog::HeaderIter<'_>) -> String {
    let items: Vec<String> = headers
        .map(|(k, v)| {
            let value = header_value(v);
            let field = match value.strip_prefix("0x") {
                Some(hex) => format!("\"value_hex\":{}", quote(hex)),
                None => format!("\"value\":{value}"),
            };
            format!("{{\"key\":{},{field}}}", quote(k))
        })
        .collect();
    format!("[{}]", items.join(","))
}

pub(crate) fn stat(out: &mut Out<'_>, dir: &Path, json: bool) -> Result<u8, Failure> {
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
            "topic {name}: offsets {}..{} ({} records, durable below {}), {} B in {} extents",
            info.first_offset,
            info.next_offset,
            info.next_offset - info.first_offset,
            info.durable_offset,
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
            "{}{{\"topic\":{},\"first_offset\":{},\"next_offset\":{},\"durable_offset\":{},\"bytes\":{},\"extents\":{},\"groups\":[{gj}]}}",
            if topics.is_empty() { "" } else { "," },
            quote(&name),
            info.first_offset,
            info.next_offset,
            info.durable_offset,
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
    let mut staged = String::new();
    for job in tidelog::stage::jobs(dir)? {
        let state = if let Some(reason) = &job.failed {
            format!("set aside, cannot be published (abort it to remove it): {reason}")
        } else if job.publishing {
            "publish begun (resumes at the next writable open)".to_owned()
        } else if job.committed {
            "committed (the directory's holder publishes it)".to_owned()
        } else {
            "not committed".to_owned()
        };
        let _ = writeln!(
            text,
            "staged job {}: {state}, {} parts, {} B, idle {} s",
            job.job,
            job.parts,
            job.bytes,
            job.idle.as_secs()
        );
        let _ = write!(
            staged,
            "{}{{\"job\":{},\"committed\":{},\"publishing\":{},\"parts\":{},\"bytes\":{},\"idle_s\":{},\"failed\":{}}}",
            if staged.is_empty() { "" } else { "," },
            quote(&job.job),
            job.committed,
            job.publishing,
            job.parts,
            job.bytes,
            job.idle.as_secs(),
            job.failed
                .as_deref()
                .map_or_else(|| "null".to_owned(), quote)
        );
    }
    let usage = wal.disk_usage();
    let _ = writeln!(
        text,
        "disk: {} files, {} B reserved",
        usage.files, usage.bytes
    );
    // Shared mode: the process that leads housekeeping (as the state file last said: a
    // directory nobody holds keeps its last leader, whose idle time then grows).
    let leader = wal.leader();
    let _ = match &leader {
        Some(l) => writeln!(
            text,
            "housekeeping leader: pid {}, epoch {}, last pass {} ms ago",
            l.pid, l.epoch, l.idle_ms
        ),
        None => writeln!(
            text,
            "housekeeping leader: none (no shared-mode process led)"
        ),
    };
    let leader_json = leader.map_or_else(
        || "null".to_owned(),
        |l| {
            format!(
                "{{\"pid\":{},\"epoch\":{},\"idle_ms\":{}}}",
                l.pid, l.epoch, l.idle_ms
            )
        },
    );
    if json {
        writeln!(
            out,
            "{{\"topics\":[{topics}],\"files\":[{files}],\"staged\":[{staged}],\"disk\":{{\"files\":{},\"bytes\":{}}},\"leader\":{leader_json}}}",
            usage.files, usage.bytes
        )
    } else {
        write!(out, "{text}")
    }
    .map_err(write_err)?;
    Ok(0)
}

/// The committed offset of `group` on `topic`, read without writing anything.
pub(crate) fn committed(wal: &Wal, topic: &str, group: &str) -> Option<u64> {
    wal.reader_with(topic, ReaderOptions::group(group))
        .ok()
        .and_then(|r| r.committed())
}

pub(crate) fn verify(out: &mut Out<'_>, dir: &Path, json: bool) -> Result<u8, Failure> {
    let mut bad = Vec::new();
    // Opening validates what it trusts without reading (sealed extents, clean ends): a
    // record that fails there is a finding like any other.
    let (topics, report, wal) = match open_read_only(dir) {
        Ok(wal) => (wal.topics(), wal.recovery_report(), Some(wal)),
        Err(Failure::Corrupt(m)) => {
            bad.push(m);
            (Vec::new(), RecoveryReport::default(), None)
        }
        Err(e) => return Err(e),
    };
    let mut records = 0u64;
    let mut progress = Progress::new("records checked", None);
    for t in wal.iter().flat_map(|w| topics.iter().map(move |t| (w, t))) {
        let (wal, t) = t;
        progress.message(format!("topic {t}"));
        let mut reader = wal.reader_with(
            t,
            ReaderOptions {
                start: StartPosition::Earliest,
                ..ReaderOptions::default()
            },
        )?;
        loop {
            match reader.next() {
                Ok(Some(_)) => {
                    records += 1;
                    progress.inc(1);
                }
                Ok(None) => break,
                Err(e @ Error::Corruption { .. }) => {
                    bad.push(e.to_string());
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Each group's cursor: one with no valid slot fails its reader.
        for group in wal.topic_info(t)?.groups {
            match wal.reader(t, &group) {
                Ok(_) => {}
                Err(e @ Error::Corruption { .. }) => bad.push(format!("group {group}: {e}")),
                Err(e) => return Err(e.into()),
            }
        }
    }
    progress.finish();
    // A committed job whose bytes failed their checks stays set aside: it cannot be
    // published. One not published yet is checked as its publish will check it.
    for job in tidelog::stage::jobs(dir)? {
        if let Some(reason) = job.failed {
            bad.push(format!(
                "staged job {} is set aside, its bytes fail their checks: {reason}",
                job.job
            ));
        } else if job.committed {
            match tidelog::stage::check_committed(dir, &job.job) {
                Ok(_) => {}
                Err(e @ Error::Corruption { .. }) => bad.push(format!(
                    "staged job {} is committed, but its bytes fail their checks: {e}",
                    job.job
                )),
                Err(e) => return Err(e.into()),
            }
        }
    }
    // A damaged progress slot loses no record (its extent is scanned instead), but it is
    // damage all the same: reported, and the directory is not "ok".
    let damaged_slots = report.damaged_progress_slots;
    if damaged_slots > 0 {
        bad.push(format!(
            "{damaged_slots} extent progress slots are damaged (their extents were scanned; a \
             writable open rewrites them)"
        ));
    }
    let damaged_copies = report.damaged_commit_copies;
    if damaged_copies > 0 {
        bad.push(format!(
            "{damaged_copies} commit copies are damaged (their records were read from their \
             own frames; the next flush of their extent clears them)"
        ));
    }
    let torn_tails = report.torn_tails;
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
    Ok(if bad.is_empty() { 0 } else { 1 })
}

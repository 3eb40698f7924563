//! `tidelog groups`: consumer groups with their committed offsets and lag, and moving or
//! deleting a group's cursor, as kafka-consumer-groups does.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use tidelog::{ReaderOptions, StartPosition};

use crate::log::{committed, open_existing, open_read_only};
use crate::{Failure, Out, quote, write_err};

/// Where `groups reset` moves a group's cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Offset(u64),
    Earliest,
    Latest,
    /// Microseconds since the Unix epoch: the first record at or after it.
    Time(u64),
}

/// The target the `reset` flags name (clap lets exactly one through).
pub(crate) fn target(
    offset: Option<u64>,
    earliest: bool,
    latest: bool,
    datetime: Option<&str>,
) -> Result<Target, Failure> {
    match (offset, earliest, latest, datetime) {
        (Some(offset), ..) => Ok(Target::Offset(offset)),
        (_, true, ..) => Ok(Target::Earliest),
        (_, _, true, _) => Ok(Target::Latest),
        (_, _, _, Some(text)) => parse_datetime(text).map(Target::Time).ok_or_else(|| {
            Failure::Usage(format!(
                "--to-datetime {text:?} is not an ISO 8601 date and time from 1970 on \
                 (2026-11-28T10:00:00Z): timestamps count microseconds since the epoch"
            ))
        }),
        _ => Err(Failure::Usage(
            "give one of --to-offset, --to-earliest, --to-latest, --to-datetime".into(),
        )),
    }
}

/// Every topic's groups: committed offset and lag.
pub(crate) fn list(out: &mut Out<'_>, dir: &Path, json: bool) -> Result<u8, Failure> {
    let wal = open_read_only(dir)?;
    let mut text = String::new();
    let mut rows = String::new();
    for topic in wal.topics() {
        let info = wal.topic_info(&topic)?;
        for group in &info.groups {
            let at = committed(&wal, &topic, group);
            let lag = at.map(|c| info.next_offset.saturating_sub(c));
            let show = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
            let _ = writeln!(
                text,
                "{topic} {group}: committed {}, next {}, lag {}",
                show(at),
                info.next_offset,
                show(lag)
            );
            let null = |v: Option<u64>| v.map_or("null".to_owned(), |v| v.to_string());
            let _ = write!(
                rows,
                "{}{{\"topic\":{},\"group\":{},\"committed\":{},\"next_offset\":{},\"lag\":{}}}",
                if rows.is_empty() { "" } else { "," },
                quote(&topic),
                quote(group),
                null(at),
                info.next_offset,
                null(lag)
            );
        }
    }
    if json {
        writeln!(out, "{{\"groups\":[{rows}]}}").map_err(write_err)?;
    } else if text.is_empty() {
        writeln!(out, "no consumer groups").map_err(write_err)?;
    } else {
        write!(out, "{text}").map_err(write_err)?;
    }
    Ok(0)
}

/// Moves `group`'s committed offset on `topic` to `target` (opens the directory for
/// writing: beside the processes that hold it, in shared mode).
pub(crate) fn reset(
    out: &mut Out<'_>,
    dir: &Path,
    topic: &str,
    group: &str,
    target: &Target,
    json: bool,
) -> Result<u8, Failure> {
    let wal = open_existing(dir)?;
    let start = match target {
        Target::Offset(offset) => StartPosition::Offset(*offset),
        Target::Earliest | Target::Time(_) => StartPosition::Earliest,
        Target::Latest => StartPosition::Latest,
    };
    let before = committed(&wal, topic, group);
    let mut reader = wal.reader_with(topic, ReaderOptions::group(group).start(start))?;
    if let Target::Time(us) = target {
        reader.seek_time(*us)?;
    }
    let offset = reader.position();
    reader.commit_offset(offset)?;
    drop(reader);
    wal.close()?;
    let shown = before.map_or("-".to_owned(), |b| b.to_string());
    if json {
        writeln!(
            out,
            "{{\"topic\":{},\"group\":{},\"before\":{},\"committed\":{offset}}}",
            quote(topic),
            quote(group),
            before.map_or("null".to_owned(), |b| b.to_string())
        )
    } else {
        writeln!(out, "{topic} {group}: committed {shown} -> {offset}")
    }
    .map_err(write_err)?;
    Ok(0)
}

/// Deletes `group`'s cursor on `topic`: it no longer holds records back.
pub(crate) fn delete(
    out: &mut Out<'_>,
    dir: &Path,
    topic: &str,
    group: &str,
    json: bool,
) -> Result<u8, Failure> {
    let wal = open_existing(dir)?;
    let known = wal.topic_info(topic)?.groups.iter().any(|g| g == group);
    if !known {
        return Err(Failure::Usage(format!(
            "topic {topic:?} has no consumer group {group:?}"
        )));
    }
    wal.delete_group(topic, group)?;
    wal.close()?;
    if json {
        writeln!(
            out,
            "{{\"topic\":{},\"group\":{},\"deleted\":true}}",
            quote(topic),
            quote(group)
        )
    } else {
        writeln!(out, "{topic} {group}: deleted")
    }
    .map_err(write_err)?;
    Ok(0)
}

/// Microseconds since the Unix epoch of an ISO 8601 date and time:
/// `YYYY-MM-DDTHH:MM:SS[.fraction]` then `Z` or `±HH:MM` (no zone: UTC).
pub(crate) fn parse_datetime(text: &str) -> Option<u64> {
    let bad = || None::<u64>;
    let (date, rest) = text.split_once(['T', ' '])?;
    let mut d = date.split('-');
    let (y, m, day): (i64, u32, u32) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    if d.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return bad();
    }
    let zone_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(zone_at);
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut t = hms.split(':');
    let (h, mi): (i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    let s: i64 = t.next().map_or(Some(0), |s| s.parse().ok())?;
    if t.next().is_some() || h > 23 || mi > 59 || s > 60 {
        return bad();
    }
    let micros: i64 = if fraction.is_empty() {
        0
    } else {
        if !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return bad();
        }
        let digits: String = fraction.chars().chain("000000".chars()).take(6).collect();
        digits.parse().ok()?
    };
    let offset_s: i64 = match zone {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let (zh, zm) = zone[1..].split_once(':').unwrap_or((&zone[1..], "0"));
            let (zh, zm): (i64, i64) = (zh.parse().ok()?, zm.parse().ok()?);
            sign * (zh * 3600 + zm * 60)
        }
    };
    let days = days_from_civil(y, m, day);
    let seconds = days * 86_400 + h * 3600 + mi * 60 + s - offset_s;
    u64::try_from(seconds.checked_mul(1_000_000)?.checked_add(micros)?).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_datetimes_parse_to_microseconds() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20Z"),
            Some(1_700_000_000_000_000)
        );
        assert_eq!(
            parse_datetime("2023-11-14T23:13:20.5+01:00"),
            Some(1_700_000_000_500_000)
        );
        assert_eq!(
            parse_datetime("2023-11-14 22:13:20.000001"),
            Some(1_700_000_000_000_001)
        );
        assert_eq!(
            parse_datetime("2000-02-29T00:00:00-05:30"),
            Some(951_802_200_000_000)
        );
        for bad in [
            "",
            "2023-13-01T00:00:00Z",
            "2023-11-14",
            "2023-11-14T25:00:00",
            "x-1-1T0:0",
        ] {
            assert_eq!(parse_datetime(bad), None, "{bad}");
        }
        // Before the epoch: no such record time.
        assert_eq!(parse_datetime("1969-12-31T23:59:59Z"), None);
    }
}

//! `dump --ring` and `verify --ring`: a ring file or block device, read with
//! [`tidelog::ring::inspect`], which neither writes nor locks, so a ring in use can be read.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use tidelog::Error;
use tidelog::ring::format::{RingHeader, Shutdown};
use tidelog::ring::{
    CorruptionKind, HeaderSlot, InspectedRecord, RingCorruption, RingInspection, RingScan,
};

use crate::progress::Progress;
use crate::{Failure, Out, quote, write_err};

/// Inspects `path`, turning what is not a ring into one clear usage error.
fn open(path: &Path) -> Result<RingInspection, Failure> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::Usage(format!("{} does not exist", path.display())));
        }
        Ok(m) if m.is_dir() => {
            return Err(Failure::Usage(format!(
                "{} is a directory, not a ring file or device",
                path.display()
            )));
        }
        _ => {}
    }
    tidelog::ring::inspect(path).map_err(|e| match e {
        Error::NotFormatted { path, reason } => Failure::Usage(format!(
            "{} is not a tidelog ring: {reason}",
            path.display()
        )),
        Error::UnsupportedVersion { .. } | Error::CapacityMismatch { .. } => {
            Failure::Usage(e.to_string())
        }
        e => Failure::from(e),
    })
}

fn shutdown_name(s: Shutdown) -> &'static str {
    match s {
        Shutdown::Clean => "clean",
        Shutdown::Unclean => "unclean",
    }
}

fn kind_name(k: CorruptionKind) -> &'static str {
    match k {
        CorruptionKind::RecordBody => "record_body",
        CorruptionKind::RecordHeader => "record_header",
        CorruptionKind::Block => "block",
    }
}

fn slot_text(i: usize, slot: &HeaderSlot, current: bool) -> String {
    let mark = if current { " [current]" } else { "" };
    match &slot.header {
        Ok(h) => format!(
            "slot {i} (byte {}): generation {}, epoch {}, ring id {:08x}, capacity {} B, trim offset {} (block {}), window max {} B, shutdown {}{}{mark}",
            slot.position,
            h.generation,
            h.epoch,
            h.ring_id,
            h.capacity_bytes,
            h.trim_offset,
            h.trim_block_offset,
            h.window_max_bytes,
            shutdown_name(h.shutdown),
            if h.shutdown == Shutdown::Clean {
                format!(", clean end {}", h.clean_end_offset)
            } else {
                String::new()
            },
        ),
        Err(p) => format!("slot {i} (byte {}): invalid: {p}{mark}", slot.position),
    }
}

fn header_json(h: &RingHeader) -> String {
    format!(
        "\"version\":{},\"capacity_bytes\":{},\"align_bytes\":{},\"ring_id\":{},\"generation\":{},\"epoch\":{},\"shutdown\":{},\"trim_offset\":{},\"trim_block_offset\":{},\"window_max_bytes\":{},\"clean_end_offset\":{}",
        h.version,
        h.capacity_bytes,
        h.align_bytes,
        h.ring_id,
        h.generation,
        h.epoch,
        quote(shutdown_name(h.shutdown)),
        h.trim_offset,
        h.trim_block_offset,
        h.window_max_bytes,
        h.clean_end_offset
    )
}

fn slots_json(ins: &RingInspection) -> String {
    let mut s = String::from("[");
    for (i, slot) in ins.slots.iter().enumerate() {
        let fields = match &slot.header {
            Ok(h) => format!("\"valid\":true,\"problem\":null,{}", header_json(h)),
            Err(p) => format!("\"valid\":false,\"problem\":{}", quote(&p.to_string())),
        };
        let _ = write!(
            s,
            "{}{{\"slot\":{i},\"position\":{},\"current\":{},{fields}}}",
            if i == 0 { "" } else { "," },
            slot.position,
            i == ins.current_slot
        );
    }
    s.push(']');
    s
}

/// The topic and offsets of the journal entry a record holds, when it holds one.
fn journal_text(r: &InspectedRecord) -> Option<(String, u64, u64)> {
    if !r.body_ok {
        return None;
    }
    r.journal_entry()
        .ok()
        .map(|e| (e.topic, e.first_offset, e.first_offset + e.records))
}

fn record_text(r: &InspectedRecord) -> String {
    let mut s = format!(
        "  offset {} len {} B crc32 {:08x} {} at byte {} block {}",
        r.offset,
        r.body.len(),
        r.body_crc,
        if r.body_ok { "ok" } else { "MISMATCH" },
        r.position,
        r.block_offset
    );
    if let Some((topic, first, end)) = journal_text(r) {
        let _ = write!(s, " topic {topic} offsets {first}..{end}");
    }
    s
}

fn record_json(r: &InspectedRecord) -> String {
    format!(
        "{{\"offset\":{},\"length\":{},\"body_crc32\":{},\"crc_ok\":{},\"position\":{},\"block_offset\":{},\"block_epoch\":{},\"journal\":{}}}",
        r.offset,
        r.body.len(),
        r.body_crc,
        r.body_ok,
        r.position,
        r.block_offset,
        r.block_epoch,
        journal_text(r).map_or("null".into(), |(t, first, end)| format!(
            "{{\"topic\":{},\"first_offset\":{first},\"next_offset\":{end}}}",
            quote(&t)
        ))
    )
}

fn corruption_text(c: &RingCorruption) -> String {
    match c.kind {
        CorruptionKind::RecordBody => format!(
            "CORRUPT record at offset {} (byte {}), {} B body: {}",
            c.offset, c.position, c.bytes, c.reason
        ),
        CorruptionKind::RecordHeader => format!(
            "CORRUPT record header at offset {} (byte {}), {} B of its block unreadable: {}",
            c.offset, c.position, c.bytes, c.reason
        ),
        CorruptionKind::Block => format!(
            "CORRUPT block at offset {} (byte {}), {} B skipped: {}",
            c.offset, c.position, c.bytes, c.reason
        ),
    }
}

fn corruptions_json(list: &[RingCorruption]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|c| {
            format!(
                "{{\"kind\":{},\"offset\":{},\"position\":{},\"bytes\":{},\"reason\":{}}}",
                quote(kind_name(c.kind)),
                c.offset,
                c.position,
                c.bytes,
                quote(&c.reason)
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// The scan report as JSON fields (without braces).
fn scan_json_fields(scan: &RingScan) -> String {
    format!(
        "\"start_offset\":{},\"end_offset\":{},\"stop_reason\":{},\"blocks\":{},\"records\":{},\"record_bytes\":{},\"blocks_past_end\":{},\"clean_end_offset\":{},\"corrupt\":{}",
        scan.start_offset,
        scan.end_offset,
        quote(&scan.stop_reason),
        scan.blocks,
        scan.records,
        scan.record_bytes,
        scan.blocks_past_end,
        scan.clean_end_offset
            .map_or("null".into(), |o| o.to_string()),
        corruptions_json(&scan.corrupt)
    )
}

fn scan_text(scan: &RingScan) -> String {
    format!(
        "scan: {} blocks, {} records ({} B) from offset {} to {}: {}; {} blocks past the end",
        scan.blocks,
        scan.records,
        scan.record_bytes,
        scan.start_offset,
        scan.end_offset,
        scan.stop_reason,
        scan.blocks_past_end
    )
}

/// `dump --ring PATH`: both header slots, then the records at offsets from `from`.
pub(crate) fn dump(
    out: &mut Out<'_>,
    path: &Path,
    from: u64,
    limit: Option<u64>,
    json: bool,
) -> Result<u8, Failure> {
    let ins = open(path)?;
    let mut records = ins.records()?;
    if json {
        write!(
            out,
            "{{\"path\":{},\"block_device\":{},\"size_bytes\":{},\"ring_bytes\":{},\"current_slot\":{},\"slots\":{},\"records\":[",
            quote(&ins.path.display().to_string()),
            ins.is_block_device,
            ins.size_bytes,
            ins.ring_bytes(),
            ins.current_slot,
            slots_json(&ins)
        )
        .map_err(write_err)?;
    } else {
        writeln!(
            out,
            "ring {}: {} of {} B, record ring {} B",
            ins.path.display(),
            if ins.is_block_device {
                "block device"
            } else {
                "file"
            },
            ins.size_bytes,
            ins.ring_bytes()
        )
        .map_err(write_err)?;
        for (i, slot) in ins.slots.iter().enumerate() {
            writeln!(out, "{}", slot_text(i, slot, i == ins.current_slot)).map_err(write_err)?;
        }
        writeln!(out, "records:").map_err(write_err)?;
    }
    let mut shown = 0u64;
    while limit.is_none_or(|l| shown < l) {
        let Some(r) = records.next() else { break };
        let r = r?;
        if r.offset < from {
            continue;
        }
        if json {
            write!(
                out,
                "{}{}",
                if shown == 0 { "" } else { "," },
                record_json(&r)
            )
        } else {
            writeln!(out, "{}", record_text(&r))
        }
        .map_err(write_err)?;
        shown += 1;
    }
    let scan = records.report();
    let complete = records.is_finished();
    if json && complete {
        writeln!(
            out,
            "],\"scan\":{{\"complete\":true,{}}}}}",
            scan_json_fields(scan)
        )
    } else if json {
        // Stopped by --limit: only what was read so far.
        writeln!(
            out,
            "],\"scan\":{{\"complete\":false,\"start_offset\":{},\"blocks\":{},\"records\":{},\"record_bytes\":{},\"corrupt\":{}}}}}",
            scan.start_offset,
            scan.blocks,
            scan.records,
            scan.record_bytes,
            corruptions_json(&scan.corrupt)
        )
    } else if complete {
        let mut text = scan_text(scan);
        for c in &scan.corrupt {
            let _ = write!(text, "\n{}", corruption_text(c));
        }
        writeln!(out, "{text}")
    } else {
        writeln!(out, "scan: stopped after {shown} records (--limit)")
    }
    .map_err(write_err)?;
    Ok(0)
}

/// `verify --ring PATH`: checks every record from the trim offset to the end of the log.
pub(crate) fn verify(out: &mut Out<'_>, path: &Path, json: bool) -> Result<u8, Failure> {
    let ins = open(path)?;
    let mut records = ins.records()?;
    let mut progress = Progress::new("records checked", None);
    for r in records.by_ref() {
        r?;
        progress.inc(1);
    }
    progress.finish();
    let scan = records.report();
    let ok = scan.corrupt.is_empty();
    if json {
        writeln!(
            out,
            "{{\"ring\":{},\"current_slot\":{},\"slots\":{},{},\"ok\":{ok}}}",
            quote(&ins.path.display().to_string()),
            ins.current_slot,
            slots_json(&ins),
            scan_json_fields(scan)
        )
        .map_err(write_err)?;
    } else {
        for (i, slot) in ins.slots.iter().enumerate() {
            // A torn header write leaves the other slot current: worth a note, not damage.
            if let Err(p) = &slot.header {
                writeln!(
                    out,
                    "note: header slot {i} is invalid ({p}); slot {} is current",
                    ins.current_slot
                )
                .map_err(write_err)?;
            }
        }
        for c in &scan.corrupt {
            writeln!(out, "{}", corruption_text(c)).map_err(write_err)?;
        }
        writeln!(
            out,
            "{}: ring {}, {} records ({} B) checked from offset {} to {}: {}{}",
            if ok { "ok" } else { "CORRUPT" },
            ins.path.display(),
            scan.records,
            scan.record_bytes,
            scan.start_offset,
            scan.end_offset,
            scan.stop_reason,
            if ok {
                String::new()
            } else {
                format!("; {} corrupt", scan.corrupt.len())
            }
        )
        .map_err(write_err)?;
    }
    Ok(if ok { 0 } else { 1 })
}

//! Scanning an extent's records: where a scan stands, the batch it is in, where it stops.

use super::*;
use crate::format::Checked;
use crate::{batch, varint};

/// Result of scanning an extent's records.
#[derive(Debug)]
pub(super) struct Scan {
    pub(super) count: u64,
    pub(super) end: u64,
    pub(super) max_ts: u64,
    pub(super) index: Vec<IndexEntry>,
    pub(super) last_index_pos: Option<u64>,
    /// Why the scan stopped (End for clean zero bytes or reaching the limit).
    pub(super) stop: FrameError,
    /// Records of an incomplete batch that were cut.
    pub(super) cut_records: u64,
}

/// Where a scan of an extent stands: the next record's position and offset (as a count of
/// records before it), the running maximum timestamp, and the sparse index built so far.
#[derive(Debug)]
pub(super) struct ScanPoint {
    pub(super) pos: u64,
    pub(super) count: u64,
    pub(super) max_ts: u64,
    pub(super) index: Vec<IndexEntry>,
    pub(super) last_index_pos: Option<u64>,
}

/// A copy of a [`ScanPoint`] taken at a batch's head, with the index as a length, so an
/// incomplete batch can be cut back to it.
#[derive(Debug, Clone, Copy)]
pub(super) struct BatchMark {
    pub(super) pos: u64,
    pub(super) count: u64,
    pub(super) max_ts: u64,
    pub(super) index_len: usize,
    pub(super) last_index_pos: Option<u64>,
}

impl ScanPoint {
    /// The mark to cut back to if the batch starting here turns out incomplete.
    pub(super) fn mark(&self) -> BatchMark {
        BatchMark {
            pos: self.pos,
            count: self.count,
            max_ts: self.max_ts,
            index_len: self.index.len(),
            last_index_pos: self.last_index_pos,
        }
    }

    /// Returns to `mark`, dropping every record read since.
    pub(super) fn cut_to(&mut self, mark: BatchMark) {
        self.pos = mark.pos;
        self.count = mark.count;
        self.max_ts = mark.max_ts;
        self.index.truncate(mark.index_len);
        self.last_index_pos = mark.last_index_pos;
    }

    /// Takes the record `view` at offset `offset`: its timestamp joins the running maximum,
    /// an index entry is added once `interval` bytes passed since the last, and the scan
    /// moves past it.
    pub(super) fn take(&mut self, view: &FrameView, offset: u64, interval: u64) {
        self.max_ts = self.max_ts.max(view.timestamp_us);
        if self
            .last_index_pos
            .is_none_or(|last| self.pos - last >= interval)
        {
            self.index.push(IndexEntry {
                offset,
                position: self.pos,
                max_timestamp_us: self.max_ts,
            });
            self.last_index_pos = Some(self.pos);
        }
        debug_assert!(view.next_position as u64 > self.pos, "a frame has length");
        self.pos = view.next_position as u64;
        self.count += 1;
    }
}

/// The batch a scan is inside: records left in it, and where it started if it holds more
/// than one record (a batch is all or nothing).
#[derive(Debug, Default)]
pub(super) struct OpenBatch {
    pub(super) left: u64,
    pub(super) start: Option<BatchMark>,
}

impl OpenBatch {
    /// Accounts for a record whose frame says `batch_count` (the batch's size on its first
    /// record, 0 on the others), read at `at`. False when the frame breaks the batch
    /// structure: a first record that claims no batch, or a batch head inside a batch.
    pub(super) fn enter(&mut self, batch_count: u32, at: &ScanPoint) -> bool {
        if self.left == 0 {
            if batch_count == 0 {
                return false;
            }
            if batch_count > 1 {
                self.start = Some(at.mark());
            }
            self.left = u64::from(batch_count);
        } else if batch_count != 0 {
            return false;
        }
        self.left -= 1;
        if self.left == 0 {
            self.start = None;
        }
        true
    }
}

/// Why a scan that found no room for another frame header at `pos` stopped: the clean end of
/// the extent (`End`) when only zeros follow, else a truncated frame.
pub(super) fn stop_at_limit(extent: &[u8], pos: u64) -> FrameError {
    if extent
        .get(pos as usize..)
        .is_some_and(|r| r.iter().all(|&b| b == 0))
    {
        FrameError::End
    } else {
        FrameError::Truncated
    }
}

/// How far a scan reads an extent.
#[derive(Debug, Clone, Copy)]
pub(super) enum Bound {
    /// Up to this position (relative): the records that fit, then what follows them tells
    /// a clean end from a torn one.
    Bytes(u64),
    /// Exactly the records before this count, borrowing one frame at a time, so no byte
    /// past the last of them is touched: a read-only handle's scan of an extent the writer
    /// left, whose records it published (the writer may still write its footer after them).
    Records(u64),
}

/// Scans records of `block` from `at` up to `bound`.
pub(super) fn scan(block: &Extent, bound: Bound, mut at: ScanPoint, interval: u64) -> Scan {
    let mut batch = OpenBatch::default();
    let mut checked = Checked::default();
    let stop = loop {
        let offset = block.first_offset + at.count;
        let extent = match bound {
            Bound::Bytes(limit) => block.recovery_bytes_at(at.pos, limit),
            Bound::Records(records) if at.count >= records => break FrameError::End,
            Bound::Records(_) => frame_prefix(block, at.pos),
        };
        let view = match block.decode_walking(extent, at.pos, offset, true, &mut checked) {
            Ok(view) => view,
            // Not even a header fits before the limit: the clean end of the extent.
            Err(FrameError::Truncated)
                if matches!(bound, Bound::Bytes(limit)
                    if at.pos + format::FRAME_HEADER_BYTES > limit) =>
            {
                break stop_at_limit(extent, at.pos);
            }
            Err(e) => break e,
        };
        if !batch.enter(view.batch_count, &at) {
            break FrameError::WrongOffset;
        }
        at.take(&view, offset, interval);
    };
    let mut cut_records = 0;
    if let Some(mark) = batch.start {
        // An incomplete batch: none of it survives.
        cut_records = at.count - mark.count;
        at.cut_to(mark);
    }
    Scan {
        count: at.count,
        end: at.pos,
        max_ts: at.max_ts,
        index: at.index,
        last_index_pos: at.last_index_pos,
        stop,
        cut_records,
    }
}

/// The extent's bytes up to the end of the frame at `pos`, as its header gives it (the
/// header alone when that does not fit).
fn frame_prefix(block: &Extent, pos: u64) -> &[u8] {
    if block.batched() {
        return batch_prefix(block, pos);
    }
    let head_end = pos + format::FRAME_HEADER_BYTES;
    let head = block.recovery_bytes_at(pos, head_end);
    if (head.len() as u64) < head_end {
        return head;
    }
    let frame_len = u64::from(format::get_u32(head, pos as usize + format::FR_LEN));
    block.recovery_bytes_at(
        pos,
        pos + format::align_up(frame_len, format::FRAME_ALIGN).max(format::FRAME_HEADER_BYTES),
    )
}

/// [`frame_prefix`] in an extent of batch frames: up to the end of the batch frame that holds
/// the record at `pos`.
fn batch_prefix(block: &Extent, pos: u64) -> &[u8] {
    let near = block.recovery_bytes_at(pos, pos + 1 + varint::VARINT_MAX as u64);
    let Some(start) = batch::frame_start(near, pos as usize) else {
        return near;
    };
    let head_end = start as u64 + batch::BATCH_HEADER as u64;
    let head = block.recovery_bytes_at(pos, head_end.max(pos + 1));
    let Some(len) = head.get(start..).and_then(batch::frame_span) else {
        return head;
    };
    let end = start as u64 + format::align_up(len, format::FRAME_ALIGN);
    block.recovery_bytes_at(pos, end.max(pos + 1))
}

/// Counts the valid records of `block` that lie past `from` (where a scan stopped on a bad
/// frame), up to `limit`: frames at any 8-byte position that pass every check, with an offset
/// at or past `next_offset`. Stale bytes never pass (the salt), so a count above zero means
/// records were written after the bad frame: appends in flight at a crash, or damage.
pub(super) fn records_past(block: &Extent, limit: u64, from: u64, next_offset: u64) -> u64 {
    let extent = block.recovery_bytes(limit);
    if block.batched() {
        return batches_past(block, extent, from, next_offset);
    }
    let magic = format::FRAME_MAGIC.to_le_bytes();
    let base = block.base();
    let mut found = 0;
    let mut pos = from as usize + format::FRAME_ALIGN as usize;
    while pos + format::FRAME_HEADER_BYTES as usize <= extent.len() {
        let at = pos + format::FR_MAGIC;
        if extent[at..at + 2] != magic {
            pos += format::FRAME_ALIGN as usize;
            continue;
        }
        let stored = format::get_u64(extent, pos + format::FR_OFFSET);
        let offset = stored.saturating_add(base);
        match block.decode_frame(extent, pos as u64, offset, true) {
            Ok(view) if offset >= next_offset => {
                found += 1;
                pos = view.next_position;
            }
            _ => pos += format::FRAME_ALIGN as usize,
        }
    }
    found
}

/// [`records_past`] in an extent of batch frames: the records of the batch frames at any
/// 8-byte position past `from` that pass every check.
fn batches_past(block: &Extent, extent: &[u8], from: u64, next_offset: u64) -> u64 {
    let mut found = 0;
    let mut pos = from as usize + format::FRAME_ALIGN as usize;
    while pos + batch::BATCH_HEADER <= extent.len() {
        let head = &extent[pos..pos + batch::BATCH_HEADER];
        if batch::frame_span(head).is_none() {
            pos += format::FRAME_ALIGN as usize;
            continue;
        }
        let base = format::get_u64(head, batch::BF_BASE_OFFSET).saturating_add(block.base());
        match block.decode_frame(extent, pos as u64, base, true) {
            Ok(view) if base >= next_offset => {
                found += u64::from(view.batch_count);
                pos = format::align_up(view.checked.end as u64, format::FRAME_ALIGN) as usize;
            }
            _ => pos += format::FRAME_ALIGN as usize,
        }
    }
    found
}

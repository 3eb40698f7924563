//! Read-only inspection of a ring: both header slots, then every record from the trim
//! offset with its checksum verdict, and where and why the log ends.
//!
//! Nothing is written and no lock is taken (the target is opened read-only), so a ring can
//! be inspected while a writer has it open. The records come from the recovery scan's own
//! block parser ([`Scanner::parse_block`]). Where recovery stops at the first block that
//! fails, inspection decides whether that block is the end of the log or damage inside it:
//!
//! - After a clean shutdown the header records the end: a block that fails below it is
//!   corrupt.
//! - Otherwise (open for writing, or crashed) a failed block may be a torn write that was
//!   never acknowledged. Writes complete in offset order and at most `window_max_bytes` of
//!   blocks are written past the acknowledged end, so the failed block is corrupt only if a
//!   chain of well-formed blocks follows it for at least that many bytes. Shorter chains are
//!   the unacknowledged blocks recovery ignores (`blocks_past_end`).
//!
//! Past a corrupt block the scan goes on: at the next block when the block header checked
//! (its length is known), else at the next well-formed block found unit by unit.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::device::Device;
use super::format::{
    ALIGN_BYTES, HEADER_SLOT_BYTES, HeaderProblem, RING_START, RR_HEADER_LEN, RingHeader, Shutdown,
};
use super::scan::{Parsed, ParsedRecord, Scanner};
use super::{current_header, newest_slot, read_slots};
use crate::error::Result;
use crate::io::{StdStorage, Storage};

/// One header slot as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderSlot {
    /// Device byte where the slot starts.
    pub position: u64,
    /// The slot's header, or why it is not a valid one.
    pub header: std::result::Result<RingHeader, HeaderProblem>,
}

/// A ring as [`inspect`] found it: its header slots. [`RingInspection::records`] reads the
/// log.
#[derive(Debug)]
pub struct RingInspection {
    /// The file or device.
    pub path: PathBuf,
    /// The target is a block device (not a regular file).
    pub is_block_device: bool,
    /// Bytes of the file or device.
    pub size_bytes: u64,
    /// Both header slots, in slot order.
    pub slots: [HeaderSlot; 2],
    /// The current slot: the valid one with the larger generation.
    pub current_slot: usize,
    /// The current slot's header, which the scan follows.
    pub header: RingHeader,
    dev: Arc<Device>,
}

/// Reads the header slots of the ring at `path` without writing or locking anything.
///
/// Fails with [`crate::Error::NotFormatted`] when neither slot holds a valid header (the
/// target is not a ring), [`crate::Error::UnsupportedVersion`] for a newer format, and
/// [`crate::Error::CapacityMismatch`] or [`crate::Error::Corruption`] when the current header
/// disagrees with the target or with itself.
pub fn inspect(path: impl AsRef<Path>) -> Result<RingInspection> {
    inspect_with_storage(path, Arc::new(StdStorage))
}

/// As [`inspect`], doing all I/O through `storage`.
pub fn inspect_with_storage(
    path: impl AsRef<Path>,
    storage: Arc<dyn Storage>,
) -> Result<RingInspection> {
    let dev = Arc::new(Device::open_read_only(path.as_ref(), storage)?);
    let decoded = read_slots(&dev)?;
    let (slot, header) = current_header(&dev, &decoded, None)?;
    let [s0, s1] = decoded;
    Ok(RingInspection {
        path: dev.path.clone(),
        is_block_device: dev.is_block_device,
        size_bytes: dev.size_bytes,
        slots: [
            HeaderSlot {
                position: 0,
                header: s0,
            },
            HeaderSlot {
                position: HEADER_SLOT_BYTES,
                header: s1,
            },
        ],
        current_slot: slot as usize,
        header,
        dev,
    })
}

impl RingInspection {
    /// Bytes of the record ring (capacity less the two header slots).
    pub fn ring_bytes(&self) -> u64 {
        self.header.capacity_bytes - RING_START
    }

    /// The device byte holding logical offset `offset`.
    pub fn position(&self, offset: u64) -> u64 {
        RING_START + offset % self.ring_bytes()
    }

    /// Reads the log from the block holding the trim offset: every live record in offset
    /// order, then (from [`RingRecords::report`]) where and why the log ends and what was
    /// corrupt.
    pub fn records(&self) -> Result<RingRecords> {
        let h = &self.header;
        let ring_limit = h.trim_block_offset + self.ring_bytes();
        let clean = h.shutdown == Shutdown::Clean;
        let log_limit = if clean {
            h.clean_end_offset.clamp(h.trim_block_offset, ring_limit)
        } else {
            ring_limit
        };
        let scanner = Scanner::new(
            self.dev.clone(),
            self.ring_bytes(),
            h.ring_id,
            h.epoch,
            h.trim_block_offset,
            ring_limit,
        )?;
        Ok(RingRecords {
            scanner,
            header: *h,
            log_limit,
            pending: VecDeque::new(),
            scan: RingScan {
                start_offset: h.trim_block_offset,
                end_offset: h.trim_block_offset,
                stop_reason: String::new(),
                blocks: 0,
                records: 0,
                record_bytes: 0,
                corrupt: Vec::new(),
                blocks_past_end: 0,
                clean_end_offset: clean.then_some(h.clean_end_offset),
            },
            done: false,
        })
    }
}

/// A live record as read by inspection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectedRecord {
    /// Logical offset of the record (of its header): what `append` returned.
    pub offset: u64,
    /// Device byte of the record header.
    pub position: u64,
    /// Logical offset of the block holding it.
    pub block_offset: u64,
    /// The epoch (writer session) of that block.
    pub block_epoch: u32,
    /// The body checksum stored in the record header.
    pub body_crc: u32,
    /// The body matches `body_crc`. False only for a record inside the log whose body is
    /// corrupt (it is also listed in [`RingScan::corrupt`]).
    pub body_ok: bool,
    /// The body as stored.
    pub body: Vec<u8>,
}

impl InspectedRecord {
    /// Logical offset just past the record.
    pub fn end_offset(&self) -> u64 {
        self.offset + (RR_HEADER_LEN + self.body.len()) as u64
    }

    /// The journal entry the body holds when the ring fronts a topic log (the ring backend
    /// of `Wal`), or why it is not one.
    pub fn journal_entry(&self) -> std::result::Result<JournalEntrySummary, String> {
        super::entry::decode(&self.body).map(|e| JournalEntrySummary {
            topic: e.topic.to_owned(),
            first_offset: e.first,
            records: e.records.len() as u64,
        })
    }
}

/// What a journal entry (a ring record body of the topic log) holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntrySummary {
    /// The topic appended to.
    pub topic: String,
    /// The topic offset of its first record.
    pub first_offset: u64,
    /// How many records it holds (topic offsets `first_offset..first_offset + records`).
    pub records: u64,
}

/// What was damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptionKind {
    /// A record whose header checked but whose body does not match its checksum.
    RecordBody,
    /// A record header failed inside a block whose header checked: the rest of the block
    /// cannot be framed.
    RecordHeader,
    /// A block header failed, or its records do not add up to it.
    Block,
}

/// Damage found inside the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingCorruption {
    /// What was damaged.
    pub kind: CorruptionKind,
    /// Logical offset of the damaged record or block.
    pub offset: u64,
    /// Its device byte.
    pub position: u64,
    /// Logical bytes lost to it (a record body's length, or the bytes skipped).
    pub bytes: u64,
    /// The check that failed.
    pub reason: String,
}

/// Where and why the inspected log ends, and what was corrupt in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingScan {
    /// Where the scan started: the block holding the trim offset.
    pub start_offset: u64,
    /// Where the log ends.
    pub end_offset: u64,
    /// Why the scan stopped at `end_offset`.
    pub stop_reason: String,
    /// Blocks read (data and padding), corrupt ones included.
    pub blocks: u64,
    /// Live records returned (at or past the trim offset), corrupt ones included.
    pub records: u64,
    /// Their body bytes.
    pub record_bytes: u64,
    /// Damage inside the log, in offset order.
    pub corrupt: Vec<RingCorruption>,
    /// Well-formed blocks within the in-flight window past the end: written after a block
    /// that never completed, never acknowledged (as in [`super::RingRecovery`]).
    pub blocks_past_end: u64,
    /// After a clean shutdown, the end the header records.
    pub clean_end_offset: Option<u64>,
}

/// Iterator over the live records of an inspected ring; see [`RingInspection::records`].
pub struct RingRecords {
    scanner: Scanner,
    header: RingHeader,
    /// The log ends at or before this offset: the clean end, or a lap past the trim block.
    log_limit: u64,
    pending: VecDeque<InspectedRecord>,
    scan: RingScan,
    done: bool,
}

impl std::fmt::Debug for RingRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingRecords")
            .field("at", &self.scanner.pos)
            .field("scan", &self.scan)
            .finish_non_exhaustive()
    }
}

/// What a failed block is.
enum Verdict {
    /// The end of the log.
    End(String),
    /// Damage inside the log; the scan goes on at `resume` unless the block header gives
    /// the block's length.
    Corrupt { resume: u64 },
}

impl RingRecords {
    /// Where and why the log ends and what was corrupt: complete once the iterator has
    /// returned `None`.
    pub fn report(&self) -> &RingScan {
        &self.scan
    }

    /// True once the scan reached the end of the log (or failed).
    pub fn is_finished(&self) -> bool {
        self.done
    }

    fn device_position(&self, offset: u64) -> u64 {
        RING_START + offset % self.scanner.ring_bytes
    }

    /// Reads one block (or finishes).
    fn step(&mut self) -> Result<()> {
        let at = self.scanner.pos;
        if at >= self.log_limit {
            let reason = if self.scan.clean_end_offset.is_some() {
                "reached the end recorded at the clean shutdown"
            } else {
                "reached a full lap past the trim offset"
            };
            return self.finish(at, reason.to_owned());
        }
        let (reason, next) = match self.scanner.parse_block(at)? {
            Parsed::Pad(h) => {
                self.accept_pad(at, h.epoch);
                return Ok(());
            }
            Parsed::Data {
                header,
                aligned_bytes,
                records,
                problem: None,
                ..
            } => {
                self.take(at, header.epoch, &records, None);
                self.scan.blocks += 1;
                self.scanner.prev_epoch = header.epoch;
                self.scanner.pos = at + aligned_bytes;
                return Ok(());
            }
            Parsed::Data {
                problem: Some((_, why)),
                aligned_bytes,
                ..
            } => (format!("torn block: {why}"), Some(at + aligned_bytes)),
            Parsed::Bad(why) => (why.to_owned(), None),
        };
        match self.judge(at, next, &reason)? {
            Verdict::End(why) => self.finish(at, why),
            Verdict::Corrupt { resume } => self.salvage(at, resume),
        }
    }

    fn accept_pad(&mut self, at: u64, epoch: u32) {
        self.scan.blocks += 1;
        self.scanner.prev_epoch = epoch;
        self.scanner.pos = self.scanner.lap_end(at);
    }

    /// Queues the live records of the block at `block`; with `damage`, records its
    /// corrupt bodies.
    fn take(
        &mut self,
        block: u64,
        epoch: u32,
        records: &[ParsedRecord],
        mut damage: Option<&mut Vec<RingCorruption>>,
    ) {
        for r in records {
            if r.offset < self.header.trim_offset {
                continue;
            }
            if !r.body_ok
                && let Some(d) = damage.as_deref_mut()
            {
                d.push(RingCorruption {
                    kind: CorruptionKind::RecordBody,
                    offset: r.offset,
                    position: self.device_position(r.offset),
                    bytes: r.body.len() as u64,
                    reason: "record body checksum mismatch".into(),
                });
            }
            self.scan.records += 1;
            self.scan.record_bytes += r.body.len() as u64;
            self.pending.push_back(InspectedRecord {
                offset: r.offset,
                position: self.device_position(r.offset),
                block_offset: block,
                block_epoch: epoch,
                body_crc: r.body_crc,
                body_ok: r.body_ok,
                body: self.scanner.body(r.body.clone()).to_vec(),
            });
        }
    }

    /// Decides whether the block that failed at `at` (for `reason`) ends the log. `next` is
    /// where the following block starts when the failed block's header gives its length.
    fn judge(&mut self, at: u64, next: Option<u64>, reason: &str) -> Result<Verdict> {
        let clean = self.scan.clean_end_offset.is_some();
        let window = self.header.window_max_bytes;
        let next = match next {
            Some(n) => Some(n),
            None => {
                let probe_end = if clean {
                    self.log_limit
                } else {
                    self.log_limit.min(at.saturating_add(window))
                };
                self.find_block(at, probe_end)?
            }
        };
        if !clean {
            let Some(next) = next else {
                return Ok(Verdict::End(reason.to_owned()));
            };
            if !self.chain_spans(next, window)? {
                return Ok(Verdict::End(reason.to_owned()));
            }
        }
        // A writer may be working on the ring: the block may have been written since it was
        // read, or written over after a trim. Neither is damage.
        self.scanner.forget_buffer();
        let now_ok = matches!(
            self.scanner.parse_block(at)?,
            Parsed::Data { problem: None, .. } | Parsed::Pad(_)
        );
        if now_ok {
            return Ok(Verdict::End(format!(
                "{reason} when first read: a writer was appending here"
            )));
        }
        let slots = read_slots(self.scanner.device())?;
        if let Some((_, h)) = newest_slot(&slots) {
            if h.ring_id != self.header.ring_id {
                return Ok(Verdict::End(
                    "the ring was formatted again during the inspection".into(),
                ));
            }
            if h.trim_block_offset > at {
                return Ok(Verdict::End(
                    "a writer trimmed past this point during the inspection".into(),
                ));
            }
        }
        Ok(Verdict::Corrupt {
            resume: next.unwrap_or(self.log_limit),
        })
    }

    /// The first well-formed block in `(after, before)` that may follow the last accepted
    /// one, probing each unit.
    fn find_block(&mut self, after: u64, before: u64) -> Result<Option<u64>> {
        let mut at = after + ALIGN_BYTES;
        while at < before {
            if self
                .scanner
                .block_at(at)?
                .is_some_and(|h| h.epoch >= self.scanner.prev_epoch)
            {
                return Ok(Some(at));
            }
            at += ALIGN_BYTES;
        }
        Ok(None)
    }

    /// True when blocks accepted one after another from `from` span at least `window`
    /// written bytes (a padding block counts as the one unit written). The scan position
    /// is left as it was.
    fn chain_spans(&mut self, from: u64, window: u64) -> Result<bool> {
        let (pos, prev_epoch) = (self.scanner.pos, self.scanner.prev_epoch);
        self.scanner.pos = from;
        let mut written = 0u64;
        let spans = loop {
            if written >= window {
                break true;
            }
            let at = self.scanner.pos;
            if at >= self.log_limit {
                break false;
            }
            match self.scanner.parse_block(at)? {
                Parsed::Pad(h) => {
                    written += ALIGN_BYTES;
                    self.scanner.prev_epoch = h.epoch;
                    self.scanner.pos = self.scanner.lap_end(at);
                }
                Parsed::Data {
                    header,
                    aligned_bytes,
                    problem: None,
                    ..
                } => {
                    written += aligned_bytes;
                    self.scanner.prev_epoch = header.epoch;
                    self.scanner.pos = at + aligned_bytes;
                }
                _ => break false,
            }
        };
        self.scanner.pos = pos;
        self.scanner.prev_epoch = prev_epoch;
        Ok(spans)
    }

    /// Records the damage of the corrupt block at `at`, returns what of it can be read, and
    /// moves past it.
    fn salvage(&mut self, at: u64, resume: u64) -> Result<()> {
        let mut damage = Vec::new();
        match self.scanner.parse_block(at)? {
            Parsed::Pad(h) => self.accept_pad(at, h.epoch),
            Parsed::Data {
                header,
                aligned_bytes,
                records,
                framing,
                ..
            } => {
                self.take(at, header.epoch, &records, Some(&mut damage));
                if let Some((offset, why)) = framing {
                    let framed = records.len() == header.record_count as usize;
                    damage.push(RingCorruption {
                        kind: if framed {
                            CorruptionKind::Block
                        } else {
                            CorruptionKind::RecordHeader
                        },
                        offset,
                        position: self.device_position(offset),
                        bytes: at + aligned_bytes - offset,
                        reason: why.to_owned(),
                    });
                }
                self.scan.blocks += 1;
                self.scanner.prev_epoch = header.epoch;
                self.scanner.pos = at + aligned_bytes;
            }
            Parsed::Bad(why) => {
                damage.push(RingCorruption {
                    kind: CorruptionKind::Block,
                    offset: at,
                    position: self.device_position(at),
                    bytes: resume - at,
                    reason: why.to_owned(),
                });
                self.scanner.pos = resume;
            }
        }
        self.scan.corrupt.append(&mut damage);
        Ok(())
    }

    fn finish(&mut self, at: u64, reason: String) -> Result<()> {
        self.done = true;
        self.scan.end_offset = at;
        self.scan.stop_reason = reason;
        let room = self.scanner.limit - at.min(self.scanner.limit);
        self.scan.blocks_past_end = self
            .scanner
            .count_blocks_past(at, self.header.window_max_bytes.min(room))?;
        Ok(())
    }
}

impl Iterator for RingRecords {
    type Item = Result<InspectedRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.pending.is_empty() && !self.done {
            if let Err(e) = self.step() {
                self.done = true;
                return Some(Err(e));
            }
        }
        self.pending.pop_front().map(Ok)
    }
}

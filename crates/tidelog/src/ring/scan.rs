//! Reading the ring back: the recovery scan at open, and [`super::RingWal::recover`].
//!
//! Blocks are read in large sequential chunks. A block is accepted only whole: its header
//! (magic, checksum, ring id, logical offset, epoch) and then every record it announces
//! (magic, header checksum, logical body offset, body checksum). The first block that fails
//! is the end of the log: completions are in offset order, so nothing past it was ever
//! acknowledged.

use std::sync::Arc;

use super::device::Device;
use super::format::{
    ALIGN_BYTES, BH_LEN, BLOCK_BYTES_MAX, BLOCK_KIND_PAD, BlockHeader, RING_START, RR_HEADER_LEN,
    align_up, decode_record_header,
};
use crate::dio::AlignedBuf;
use crate::error::{Error, Result};

/// Bytes read per sequential chunk.
const CHUNK_BYTES: usize = 4 << 20;

/// What the recovery scan at open found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingRecovery {
    /// Live records found (at or past the trim offset).
    pub records: u64,
    /// Their body bytes.
    pub record_bytes: u64,
    /// Blocks accepted (data and padding).
    pub blocks: u64,
    /// Where the scan started: the block holding the trim offset.
    pub start_offset: u64,
    /// Where the valid log ends: appends continue here.
    pub end_offset: u64,
    /// Why the scan stopped at `end_offset`.
    pub stop_reason: String,
    /// Well-formed blocks found within the in-flight window past the end. They were written
    /// after a block that never completed, so they were never acknowledged; they are ignored.
    pub blocks_past_end: u64,
    /// The previous session closed cleanly.
    pub clean_shutdown: bool,
    /// After a clean shutdown, the end it recorded (`end_offset` should equal it).
    pub clean_end_offset: Option<u64>,
}

/// A record of a block whose header checked, as [`Scanner::parse_block`] read it.
pub(crate) struct ParsedRecord {
    /// Logical offset of the record (of its header).
    pub offset: u64,
    /// The body's range in the scanner's buffer.
    pub body: std::ops::Range<usize>,
    /// The body checksum its header stores.
    pub body_crc: u32,
    /// The body matches `body_crc`.
    pub body_ok: bool,
}

/// The block at an offset as read, before it is accepted or rejected.
pub(crate) enum Parsed {
    /// The block header failed a check: why.
    Bad(&'static str),
    /// A padding block.
    Pad(BlockHeader),
    /// A data block whose header checked.
    Data {
        header: BlockHeader,
        /// Its length rounded up to [`ALIGN_BYTES`]: the next block starts this far on.
        aligned_bytes: u64,
        /// Its records, up to the first whose header fails (the rest cannot be framed).
        records: Vec<ParsedRecord>,
        /// The first record check that failed, as `(offset, why)`: the block is torn or
        /// corrupt.
        problem: Option<(u64, &'static str)>,
        /// The record header that failed, or the end of the records when they do not fill
        /// the block exactly, as `(offset, why)`: the rest of the block cannot be framed.
        framing: Option<(u64, &'static str)>,
    },
}

/// A block accepted by [`Scanner::next_block`].
pub(crate) enum Step {
    /// A data block and its records (every one checked).
    Data {
        start: u64,
        records: Vec<ParsedRecord>,
    },
    /// A padding block up to the lap end.
    Pad { start: u64 },
    /// The log ends at `at`.
    End { at: u64, reason: String },
}

/// Walks blocks from a start offset through a chunked read buffer.
pub(crate) struct Scanner {
    dev: Arc<Device>,
    pub(super) ring_bytes: u64,
    ring_id: u32,
    max_epoch: u32,
    /// The epoch of the last accepted block: the next may not be lower.
    pub(super) prev_epoch: u32,
    /// The next block starts here.
    pub pos: u64,
    /// Never read at or past this logical offset.
    pub(super) limit: u64,
    buf: AlignedBuf,
    /// Logical offset of `buf[0]`, and valid bytes in it.
    chunk_start: u64,
    chunk_len: usize,
}

impl Scanner {
    pub fn new(
        dev: Arc<Device>,
        ring_bytes: u64,
        ring_id: u32,
        max_epoch: u32,
        start: u64,
        limit: u64,
    ) -> Result<Scanner> {
        let buf = AlignedBuf::zeroed(CHUNK_BYTES.min(ring_bytes as usize))
            .map_err(|e| Error::io("allocate scan buffer", &dev.path, e))?;
        Ok(Scanner {
            dev,
            ring_bytes,
            ring_id,
            max_epoch,
            prev_epoch: 0,
            pos: start,
            limit,
            buf,
            chunk_start: start,
            chunk_len: 0,
        })
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    pub(super) fn lap_end(&self, at: u64) -> u64 {
        at - at % self.ring_bytes + self.ring_bytes
    }

    /// Makes `[at, at + len)` readable in the buffer; `at` aligned, never crossing a lap.
    fn load(&mut self, at: u64, len: usize) -> Result<&[u8]> {
        let have =
            at >= self.chunk_start && at + len as u64 <= self.chunk_start + self.chunk_len as u64;
        if !have {
            let want = align_up(len as u64) as usize;
            if want > self.buf.len() {
                self.buf = AlignedBuf::zeroed(want)
                    .map_err(|e| Error::io("allocate scan buffer", &self.dev.path, e))?;
            }
            let span = (self.lap_end(at) - at).min(self.buf.len() as u64) as usize;
            let pos = RING_START + at % self.ring_bytes;
            let got = self
                .dev
                .read_at(&mut self.buf[..span], pos)
                .map_err(|e| Error::io("read ring", &self.dev.path, e))?;
            self.chunk_start = at;
            self.chunk_len = got;
            if got < len {
                return Err(Error::io(
                    "read ring",
                    &self.dev.path,
                    std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                ));
            }
        }
        let from = (at - self.chunk_start) as usize;
        Ok(&self.buf[from..from + len])
    }

    /// The bytes of an accepted block's record body.
    pub fn body(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    /// Drops what the buffer holds, so the next look reads the device again (a writer may
    /// have written since).
    pub fn forget_buffer(&mut self) {
        self.chunk_len = 0;
    }

    /// Reads the block at `at` and checks everything [`Scanner::next_block`] does, without
    /// moving: a data block's records are read past a body checksum mismatch, up to the first
    /// record header that fails.
    pub fn parse_block(&mut self, at: u64) -> Result<Parsed> {
        let ring_id = self.ring_id;
        let header = match BlockHeader::decode(self.load(at, ALIGN_BYTES as usize)?, at, ring_id) {
            Ok(h) => h,
            Err(reason) => return Ok(Parsed::Bad(reason)),
        };
        if header.epoch < self.prev_epoch || header.epoch > self.max_epoch {
            return Ok(Parsed::Bad(
                "block of an older session past the end it left (stale)",
            ));
        }
        if header.kind == BLOCK_KIND_PAD {
            return Ok(Parsed::Pad(header));
        }
        let total = BH_LEN as u64 + u64::from(header.payload_bytes);
        if total > BLOCK_BYTES_MAX || align_up(total) > self.lap_end(at) - at {
            return Ok(Parsed::Bad("block length runs past the ring end"));
        }
        self.load(at, total as usize)?;
        let base = (at - self.chunk_start) as usize;
        let block = &self.buf[base..base + total as usize];
        // The count is read from disk: every record takes at least its header, so the block's
        // length bounds the allocation (a checksummed header may still claim 2^32 records).
        let fit = header.payload_bytes as usize / RR_HEADER_LEN;
        let mut records = Vec::with_capacity((header.record_count as usize).min(fit));
        let mut bad_body = None;
        let mut framing = None;
        let mut q = BH_LEN;
        for _ in 0..header.record_count {
            let offset = at + q as u64;
            match decode_record_header(&block[q..], offset) {
                Ok(h) => {
                    let body = q + RR_HEADER_LEN..q + RR_HEADER_LEN + h.len;
                    let body_ok = crc32fast::hash(&block[body.clone()]) == h.body_crc;
                    if !body_ok && bad_body.is_none() {
                        bad_body = Some((offset, "record body checksum mismatch"));
                    }
                    records.push(ParsedRecord {
                        offset,
                        body: base + body.start..base + body.end,
                        body_crc: h.body_crc,
                        body_ok,
                    });
                    q = body.end;
                }
                Err(reason) => {
                    framing = Some((offset, reason));
                    break;
                }
            }
        }
        if framing.is_none() && q as u64 != total {
            framing = Some((at + q as u64, "record lengths disagree with the block"));
        }
        Ok(Parsed::Data {
            header,
            aligned_bytes: align_up(total),
            records,
            problem: bad_body.or(framing),
            framing,
        })
    }

    /// Reads and validates the block at [`Scanner::pos`], and moves past it if accepted.
    pub fn next_block(&mut self) -> Result<Step> {
        let at = self.pos;
        if at >= self.limit {
            return Ok(Step::End {
                at,
                reason: "reached the end of the durable log".into(),
            });
        }
        match self.parse_block(at)? {
            Parsed::Bad(reason) => Ok(end(at, reason)),
            Parsed::Pad(header) => {
                self.prev_epoch = header.epoch;
                self.pos = self.lap_end(at);
                Ok(Step::Pad { start: at })
            }
            Parsed::Data {
                problem: Some((_, reason)),
                ..
            } => Ok(end(at, &format!("torn block: {reason}"))),
            Parsed::Data {
                header,
                aligned_bytes,
                records,
                problem: None,
                ..
            } => {
                self.prev_epoch = header.epoch;
                self.pos = at + aligned_bytes;
                Ok(Step::Data { start: at, records })
            }
        }
    }

    /// The header of a well-formed block at `at` (any kind, epoch at most the header's), or
    /// `None`.
    pub fn block_at(&mut self, at: u64) -> Result<Option<BlockHeader>> {
        let (ring_id, max_epoch) = (self.ring_id, self.max_epoch);
        Ok(
            BlockHeader::decode(self.load(at, ALIGN_BYTES as usize)?, at, ring_id)
                .ok()
                .filter(|h| h.epoch <= max_epoch),
        )
    }

    /// Looks past `end` (where the scan stopped on a block that failed) for proof that the
    /// failed block was acknowledged: a well-formed block that claims everything below a
    /// point past `end` was durable when it was sealed, or one lying beyond the in-flight
    /// window (`window_bytes`; nothing that far past an incomplete block can have been
    /// written). Probes `2 × window_bytes`. Returns the proving block's start.
    pub fn acknowledged_past(&mut self, end: u64, window_bytes: u64) -> Result<Option<u64>> {
        let mut at = end + ALIGN_BYTES;
        let probe_end = end.saturating_add(window_bytes.saturating_mul(2));
        while at < probe_end && at < self.limit {
            if let Some(h) = self.block_at(at)? {
                let claims = h.durable_before.is_some_and(|d| d > end);
                if claims || at >= end.saturating_add(window_bytes) {
                    return Ok(Some(at));
                }
            }
            at += ALIGN_BYTES;
        }
        Ok(None)
    }

    /// Counts well-formed blocks in `(from, from + window_bytes)`, stepping unit by unit.
    pub fn count_blocks_past(&mut self, from: u64, window_bytes: u64) -> Result<u64> {
        let mut found = 0;
        let mut at = from + ALIGN_BYTES;
        while at < from + window_bytes && at < self.limit {
            found += u64::from(self.block_at(at)?.is_some());
            at += ALIGN_BYTES;
        }
        Ok(found)
    }
}

fn end(at: u64, reason: &str) -> Step {
    Step::End {
        at,
        reason: reason.to_owned(),
    }
}

/// Iterator over `(offset, body)` of the live records, from the trim offset to the durable
/// end at the time [`super::RingWal::recover`] was called.
pub struct RecoverIter {
    scanner: Option<Scanner>,
    trim_offset: u64,
    /// Reports whether `offset` was trimmed meanwhile (a concurrent trim lets writers reuse
    /// the space being read, which is not corruption).
    trimmed_past: Box<dyn Fn(u64) -> bool + Send>,
    pending: std::collections::VecDeque<(u64, Vec<u8>)>,
}

impl std::fmt::Debug for RecoverIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoverIter")
            .field("trim_offset", &self.trim_offset)
            .field("buffered", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl RecoverIter {
    pub(crate) fn new(
        scanner: Scanner,
        trim_offset: u64,
        trimmed_past: Box<dyn Fn(u64) -> bool + Send>,
    ) -> Self {
        RecoverIter {
            scanner: Some(scanner),
            trim_offset,
            trimmed_past,
            pending: Default::default(),
        }
    }

    fn fill(&mut self) -> Result<()> {
        while self.pending.is_empty() {
            let Some(scanner) = self.scanner.as_mut() else {
                return Ok(());
            };
            match scanner.next_block()? {
                Step::Data { records, .. } => {
                    for r in records {
                        if r.offset >= self.trim_offset {
                            self.pending
                                .push_back((r.offset, scanner.body(r.body).to_vec()));
                        }
                    }
                }
                Step::Pad { .. } => {}
                Step::End { at, reason } => {
                    let limit = scanner.limit;
                    let position = RING_START + at % scanner.ring_bytes;
                    let path = scanner.device().path.clone();
                    self.scanner = None;
                    if at < limit && !(self.trimmed_past)(at) {
                        return Err(Error::Corruption {
                            topic: String::new(),
                            offset: at,
                            path,
                            position,
                            reason: format!("durable ring block failed validation: {reason}"),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

impl Iterator for RecoverIter {
    type Item = Result<(u64, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = self.fill() {
            return Some(Err(e));
        }
        self.pending.pop_front().map(Ok)
    }
}

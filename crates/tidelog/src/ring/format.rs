//! Every byte of a ring device or file: two header slots, then blocks of records.
//! `docs/FORMAT.md` ("The ring backend") is the prose for these constants; keep the two in
//! step. All integers are little-endian; checksums are CRC-32 (IEEE), as in the mmap format.

use crate::format::{get_u32, get_u64, put_u32, put_u64};

/// The I/O unit: header slots, block starts and block lengths are multiples of it.
pub use crate::dio::ALIGN_BYTES;
/// Bytes of one header slot.
pub const HEADER_SLOT_BYTES: u64 = ALIGN_BYTES;
/// Number of header slots.
pub const HEADER_SLOTS: u64 = 2;
/// Where the record ring starts on the device.
pub const RING_START: u64 = HEADER_SLOT_BYTES * HEADER_SLOTS;
/// Smallest capacity: the header slots plus sixteen ring units.
pub const CAPACITY_MIN: u64 = RING_START + 16 * ALIGN_BYTES;
/// Newest ring format version this build writes and reads.
pub const RING_VERSION: u32 = 1;

// ---- Ring header: one per slot. -------------------------------------------------------------

/// `"TLRH"` read as a little-endian u32.
pub const HEADER_MAGIC: u32 = u32::from_le_bytes(*b"TLRH");
pub const RH_MAGIC: usize = 0;
pub const RH_VERSION: usize = RH_MAGIC + 4;
pub const RH_CAPACITY: usize = RH_VERSION + 4;
pub const RH_ALIGN: usize = RH_CAPACITY + 8;
pub const RH_RING_ID: usize = RH_ALIGN + 4;
pub const RH_GENERATION: usize = RH_RING_ID + 4;
pub const RH_EPOCH: usize = RH_GENERATION + 8;
pub const RH_SHUTDOWN: usize = RH_EPOCH + 4;
pub const RH_TRIM: usize = RH_SHUTDOWN + 4;
pub const RH_TRIM_BLOCK: usize = RH_TRIM + 8;
pub const RH_WINDOW_MAX: usize = RH_TRIM_BLOCK + 8;
pub const RH_CLEAN_END: usize = RH_WINDOW_MAX + 8;
pub const RH_RESERVED: usize = RH_CLEAN_END + 8;
pub const RH_CRC: usize = RH_RESERVED + 4;
/// Encoded length of the ring header; the rest of its slot is zero.
pub const RH_LEN: usize = RH_CRC + 4;
const _: () = assert!(RH_LEN == 80);
const _: () = assert!(RH_LEN as u64 <= HEADER_SLOT_BYTES);

/// How the ring was last closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// `close()` drained every block and recorded the end.
    Clean,
    /// Open for writing, or it crashed.
    Unclean,
}

impl Shutdown {
    fn code(self) -> u32 {
        match self {
            Shutdown::Clean => 0,
            Shutdown::Unclean => 1,
        }
    }
    fn from_code(code: u32) -> Option<Self> {
        match code {
            0 => Some(Shutdown::Clean),
            1 => Some(Shutdown::Unclean),
            _ => None,
        }
    }
}

/// Decoded ring header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingHeader {
    pub version: u32,
    /// Whole device or file bytes, header slots included.
    pub capacity_bytes: u64,
    /// The I/O unit the ring was formatted with ([`ALIGN_BYTES`]).
    pub align_bytes: u32,
    /// Random at format time; every block carries it, so blocks of an earlier format of the
    /// same device never pass as current.
    pub ring_id: u32,
    /// Bumped on every header write; the valid slot with the larger one is current.
    pub generation: u64,
    /// Bumped on every open for writing; blocks carry it and must not decrease along the log.
    pub epoch: u32,
    pub shutdown: Shutdown,
    /// Records at offsets below this are discarded (exclusive: the first live offset).
    pub trim_offset: u64,
    /// The start of the block holding `trim_offset`: recovery parses from here.
    pub trim_block_offset: u64,
    /// Upper bound on the bytes in flight at any moment (blocks issued but not completed).
    pub window_max_bytes: u64,
    /// After a clean shutdown, the end of the log; 0 otherwise.
    pub clean_end_offset: u64,
}

impl RingHeader {
    pub fn encode(&self) -> [u8; RH_LEN] {
        let mut b = [0u8; RH_LEN];
        put_u32(&mut b, RH_MAGIC, HEADER_MAGIC);
        put_u32(&mut b, RH_VERSION, self.version);
        put_u64(&mut b, RH_CAPACITY, self.capacity_bytes);
        put_u32(&mut b, RH_ALIGN, self.align_bytes);
        put_u32(&mut b, RH_RING_ID, self.ring_id);
        put_u64(&mut b, RH_GENERATION, self.generation);
        put_u32(&mut b, RH_EPOCH, self.epoch);
        put_u32(&mut b, RH_SHUTDOWN, self.shutdown.code());
        put_u64(&mut b, RH_TRIM, self.trim_offset);
        put_u64(&mut b, RH_TRIM_BLOCK, self.trim_block_offset);
        put_u64(&mut b, RH_WINDOW_MAX, self.window_max_bytes);
        put_u64(&mut b, RH_CLEAN_END, self.clean_end_offset);
        put_u32(&mut b, RH_RESERVED, 0);
        let crc = crc32fast::hash(&b[..RH_CRC]);
        put_u32(&mut b, RH_CRC, crc);
        b
    }

    /// Decodes a slot; `Err` says why it is not a valid header.
    pub fn decode(b: &[u8]) -> Result<RingHeader, HeaderProblem> {
        if b.len() < RH_LEN {
            return Err(HeaderProblem::Short);
        }
        if get_u32(b, RH_MAGIC) != HEADER_MAGIC {
            return Err(if b[..RH_LEN].iter().all(|&x| x == 0) {
                HeaderProblem::Zero
            } else {
                HeaderProblem::Magic
            });
        }
        if crc32fast::hash(&b[..RH_CRC]) != get_u32(b, RH_CRC) {
            return Err(HeaderProblem::Checksum);
        }
        let version = get_u32(b, RH_VERSION);
        if version == 0 || version > RING_VERSION {
            return Err(HeaderProblem::Version(version));
        }
        let shutdown =
            Shutdown::from_code(get_u32(b, RH_SHUTDOWN)).ok_or(HeaderProblem::Checksum)?;
        Ok(RingHeader {
            version,
            capacity_bytes: get_u64(b, RH_CAPACITY),
            align_bytes: get_u32(b, RH_ALIGN),
            ring_id: get_u32(b, RH_RING_ID),
            generation: get_u64(b, RH_GENERATION),
            epoch: get_u32(b, RH_EPOCH),
            shutdown,
            trim_offset: get_u64(b, RH_TRIM),
            trim_block_offset: get_u64(b, RH_TRIM_BLOCK),
            window_max_bytes: get_u64(b, RH_WINDOW_MAX),
            clean_end_offset: get_u64(b, RH_CLEAN_END),
        })
    }
}

/// Why a header slot was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Fewer bytes than a header.
    Short,
    /// Never written (all zero).
    Zero,
    /// Not a tidelog ring header.
    Magic,
    /// Checksum mismatch (torn or corrupt slot).
    Checksum,
    /// Written by a newer format version.
    Version(u32),
}

impl std::fmt::Display for HeaderProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderProblem::Short => write!(f, "too short"),
            HeaderProblem::Zero => write!(f, "empty"),
            HeaderProblem::Magic => write!(f, "not a ring header"),
            HeaderProblem::Checksum => write!(f, "checksum mismatch"),
            HeaderProblem::Version(v) => write!(f, "format version {v}"),
        }
    }
}

// ---- Block header: the first bytes of every block. ------------------------------------------

/// `"TLBK"` read as a little-endian u32.
pub const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"TLBK");
/// A block of records.
pub const BLOCK_KIND_DATA: u16 = 1;
/// Padding from the block start to the physical end of the ring (one unit is written).
pub const BLOCK_KIND_PAD: u16 = 2;
pub const BH_MAGIC: usize = 0;
pub const BH_KIND: usize = BH_MAGIC + 4;
pub const BH_FLAGS: usize = BH_KIND + 2;
pub const BH_START: usize = BH_FLAGS + 2;
pub const BH_RING_ID: usize = BH_START + 8;
pub const BH_EPOCH: usize = BH_RING_ID + 4;
pub const BH_PAYLOAD: usize = BH_EPOCH + 4;
pub const BH_RECORDS: usize = BH_PAYLOAD + 4;
/// How far back from `start` every block was durable when this block was sealed, in
/// 4096-byte units plus one; 0 when unknown (blocks of older builds).
pub const BH_DURABLE_BACK: usize = BH_RECORDS + 4;
pub const BH_CRC: usize = BH_DURABLE_BACK + 4;
/// Encoded length of a block header; the first record follows it.
pub const BH_LEN: usize = BH_CRC + 4;
const _: () = assert!(BH_LEN == 40);

/// Decoded block header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub kind: u16,
    /// Logical offset of the block (of this header).
    pub start_offset: u64,
    pub ring_id: u32,
    pub epoch: u32,
    /// Bytes of records after the header (0 for padding).
    pub payload_bytes: u32,
    pub record_count: u32,
    /// Every block below this logical offset was durable (acknowledged) when this block was
    /// sealed; `None` when unknown. Recovery uses it to tell a damaged acknowledged block
    /// from a block torn by a crash: a later block that claims it was durable proves it was
    /// acknowledged.
    pub durable_before: Option<u64>,
}

impl BlockHeader {
    pub fn encode_into(&self, b: &mut [u8]) {
        let b = &mut b[..BH_LEN];
        put_u32(b, BH_MAGIC, BLOCK_MAGIC);
        b[BH_KIND..BH_KIND + 2].copy_from_slice(&self.kind.to_le_bytes());
        b[BH_FLAGS..BH_FLAGS + 2].copy_from_slice(&0u16.to_le_bytes());
        put_u64(b, BH_START, self.start_offset);
        put_u32(b, BH_RING_ID, self.ring_id);
        put_u32(b, BH_EPOCH, self.epoch);
        put_u32(b, BH_PAYLOAD, self.payload_bytes);
        put_u32(b, BH_RECORDS, self.record_count);
        put_u32(b, BH_DURABLE_BACK, self.durable_back());
        let crc = crc32fast::hash(&b[..BH_CRC]);
        put_u32(b, BH_CRC, crc);
    }

    /// `durable_before` as stored: units back from `start`, plus one; 0 when unknown or too
    /// far back to store (a claim is never rounded up).
    fn durable_back(&self) -> u32 {
        self.durable_before
            .filter(|&d| d <= self.start_offset && d % ALIGN_BYTES == 0)
            .and_then(|d| u32::try_from((self.start_offset - d) / ALIGN_BYTES + 1).ok())
            .unwrap_or(0)
    }

    /// Decodes the header of the block expected at logical offset `at`.
    pub fn decode(b: &[u8], at: u64, ring_id: u32) -> Result<BlockHeader, &'static str> {
        if b.len() < BH_LEN {
            return Err("short block header");
        }
        if get_u32(b, BH_MAGIC) != BLOCK_MAGIC {
            return Err(if b[..BH_LEN].iter().all(|&x| x == 0) {
                "no block (zeros)"
            } else {
                "no block magic"
            });
        }
        if crc32fast::hash(&b[..BH_CRC]) != get_u32(b, BH_CRC) {
            return Err("block header checksum mismatch");
        }
        let start_offset = get_u64(b, BH_START);
        let durable_before = match u64::from(get_u32(b, BH_DURABLE_BACK)) {
            0 => None,
            back => Some(
                start_offset
                    .checked_sub((back - 1) * ALIGN_BYTES)
                    .ok_or("durable point before the ring's start")?,
            ),
        };
        let h = BlockHeader {
            kind: u16::from_le_bytes([b[BH_KIND], b[BH_KIND + 1]]),
            start_offset,
            ring_id: get_u32(b, BH_RING_ID),
            epoch: get_u32(b, BH_EPOCH),
            payload_bytes: get_u32(b, BH_PAYLOAD),
            record_count: get_u32(b, BH_RECORDS),
            durable_before,
        };
        if h.ring_id != ring_id {
            return Err("block of another ring (earlier format)");
        }
        if h.start_offset != at {
            return Err("block from an earlier lap (offset mismatch)");
        }
        match h.kind {
            BLOCK_KIND_DATA if h.record_count > 0 => Ok(h),
            BLOCK_KIND_PAD if h.payload_bytes == 0 && h.record_count == 0 => Ok(h),
            _ => Err("bad block kind or counts"),
        }
    }
}

// ---- Record header: before every record body. ------------------------------------------------

/// `"TLRR"` read as a little-endian u32.
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"TLRR");
pub const RR_MAGIC: usize = 0;
pub const RR_LEN: usize = RR_MAGIC + 4;
pub const RR_BODY_OFFSET: usize = RR_LEN + 4;
pub const RR_BODY_CRC: usize = RR_BODY_OFFSET + 8;
pub const RR_HEADER_CRC: usize = RR_BODY_CRC + 4;
/// Encoded length of a record header; the body follows it.
pub const RR_HEADER_LEN: usize = RR_HEADER_CRC + 4;
const _: () = assert!(RR_HEADER_LEN == 24);

/// Writes the header and body of the record whose header starts at logical `offset`;
/// `body_crc` is `crc32fast::hash(body)`, computed by the caller outside any lock.
pub fn encode_record(dst: &mut [u8], offset: u64, body: &[u8], body_crc: u32) {
    debug_assert_eq!(crc32fast::hash(body), body_crc);
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let (head, tail) = dst.split_at_mut(RR_HEADER_LEN);
    tail[..body.len()].copy_from_slice(body);
    put_u32(head, RR_MAGIC, RECORD_MAGIC);
    put_u32(head, RR_LEN, len);
    put_u64(head, RR_BODY_OFFSET, offset + RR_HEADER_LEN as u64);
    put_u32(head, RR_BODY_CRC, body_crc);
    let crc = crc32fast::hash(&head[..RR_HEADER_CRC]);
    put_u32(head, RR_HEADER_CRC, crc);
}

/// A record header that passed [`decode_record_header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Body bytes.
    pub len: usize,
    /// The stored CRC-32 of the body.
    pub body_crc: u32,
}

/// Validates the header of the record at logical `offset` whose bytes start at `b[0]`, and
/// that its body lies within `b`; the body checksum is not checked.
pub fn decode_record_header(b: &[u8], offset: u64) -> Result<RecordHeader, &'static str> {
    if b.len() < RR_HEADER_LEN {
        return Err("short record header");
    }
    if get_u32(b, RR_MAGIC) != RECORD_MAGIC {
        return Err("no record magic");
    }
    if crc32fast::hash(&b[..RR_HEADER_CRC]) != get_u32(b, RR_HEADER_CRC) {
        return Err("record header checksum mismatch");
    }
    if offset.checked_add(RR_HEADER_LEN as u64) != Some(get_u64(b, RR_BODY_OFFSET)) {
        return Err("record from an earlier lap (offset mismatch)");
    }
    let len = get_u32(b, RR_LEN) as usize;
    if b.len() - RR_HEADER_LEN < len {
        return Err("record runs past its block");
    }
    Ok(RecordHeader {
        len,
        body_crc: get_u32(b, RR_BODY_CRC),
    })
}

/// Validates the record at logical `offset` whose bytes start at `b[0]`; returns its body
/// length. `b` may run past the record.
pub fn decode_record(b: &[u8], offset: u64) -> Result<usize, &'static str> {
    let h = decode_record_header(b, offset)?;
    if crc32fast::hash(&b[RR_HEADER_LEN..RR_HEADER_LEN + h.len]) != h.body_crc {
        return Err("record body checksum mismatch");
    }
    Ok(h.len)
}

/// Largest block (header, records and padding): bounds recovery's buffers.
pub const BLOCK_BYTES_MAX: u64 = 128 << 20;

/// Rounds `x` up to a multiple of [`ALIGN_BYTES`].
pub const fn align_up(x: u64) -> u64 {
    x.div_ceil(ALIGN_BYTES) * ALIGN_BYTES
}

/// Rounds `x` down to a multiple of [`ALIGN_BYTES`].
pub const fn align_down(x: u64) -> u64 {
    x / ALIGN_BYTES * ALIGN_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> RingHeader {
        RingHeader {
            version: RING_VERSION,
            capacity_bytes: 1 << 20,
            align_bytes: ALIGN_BYTES as u32,
            ring_id: 7,
            generation: 3,
            epoch: 2,
            shutdown: Shutdown::Unclean,
            trim_offset: 100,
            trim_block_offset: 0,
            window_max_bytes: 1 << 20,
            clean_end_offset: 0,
        }
    }

    #[test]
    fn ring_header_round_trips_and_rejects_flips() {
        let h = header();
        let b = h.encode();
        assert_eq!(RingHeader::decode(&b), Ok(h));
        for i in 0..RH_LEN {
            let mut c = b;
            c[i] ^= 0x10;
            assert!(RingHeader::decode(&c).is_err(), "flip at {i} accepted");
        }
        assert_eq!(RingHeader::decode(&[0u8; RH_LEN]), Err(HeaderProblem::Zero));
        assert_eq!(RingHeader::decode(&b[..10]), Err(HeaderProblem::Short));
    }

    #[test]
    fn block_header_checks_identity() {
        let mut b = [0u8; BH_LEN];
        let h = BlockHeader {
            kind: BLOCK_KIND_DATA,
            start_offset: 8192,
            ring_id: 9,
            epoch: 1,
            payload_bytes: 100,
            record_count: 2,
            durable_before: Some(4096),
        };
        h.encode_into(&mut b);
        assert_eq!(BlockHeader::decode(&b, 8192, 9), Ok(h));
        assert!(BlockHeader::decode(&b, 4096, 9).is_err());
        assert!(BlockHeader::decode(&b, 8192, 8).is_err());
        b[BH_PAYLOAD] ^= 1;
        assert!(BlockHeader::decode(&b, 8192, 9).is_err());
    }

    #[test]
    fn record_round_trips_and_rejects_stale_offsets() {
        let mut b = vec![0u8; 64];
        encode_record(&mut b, 4136, b"hello", crc32fast::hash(b"hello"));
        assert_eq!(decode_record(&b, 4136), Ok(5));
        assert!(decode_record(&b, 4136 + (1 << 20)).is_err());
        b[RR_HEADER_LEN] ^= 1;
        assert_eq!(
            decode_record(&b, 4136),
            Err("record body checksum mismatch")
        );
    }
}

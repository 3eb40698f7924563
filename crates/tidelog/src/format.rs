//! Every on-disk byte: file header, block header (identity and progress slots), record frame
//! and index footer. `docs/FORMAT.md` is the prose for these constants; keep the two in step.
//!
//! All integers are little-endian. Offsets are chained constants so a field cannot overlap its
//! neighbour, and `const` assertions pin the sizes.

use std::ops::Range;

use crate::error::{Error, Result};

/// The unit of mmap alignment, msync and block headers.
pub const PAGE_BYTES: u64 = 4096;
/// Newest data-file format version this build reads (file header and identity slots).
pub const FORMAT_VERSION: u32 = VERSION_RELATIVE_BATCHED;
/// Version of the files the allocator creates and of their extents: each frame carries its
/// topic id and its offset.
pub const VERSION_ABSOLUTE: u32 = 1;
/// Version of a file adopted from a staged segment (`crate::stage`) and of its extents: the
/// frames were written before the directory gave the records a topic id and offsets, so
/// each carries topic id 0 and its index in the extent (the extent's `first_offset` gives
/// the offset). A file holds extents of its own version only.
pub const VERSION_RELATIVE: u32 = 2;
/// Version of the files the allocator creates and of their extents: records are batch
/// frames (`crate::batch`), which carry the topic id and absolute offsets. Files of version
/// 1 keep version-1 frames, and a writer that continues one of their extents writes those.
pub const VERSION_BATCHED: u32 = 3;
/// Version of a file adopted from a staged segment of batch frames (staging version 3) and
/// of its extents: batch frames as in [`VERSION_BATCHED`] files, but carrying topic id 0 and,
/// as base offset, their first record's index in the extent (as [`VERSION_RELATIVE`]).
pub const VERSION_RELATIVE_BATCHED: u32 = 4;

/// Whether the extents of data-file `version` hold batch frames (`crate::batch`) rather
/// than record frames.
pub const fn version_batched(version: u32) -> bool {
    matches!(version, VERSION_BATCHED | VERSION_RELATIVE_BATCHED)
}

/// Whether the frames of data-file `version` carry topic id 0 and offsets relative to their
/// extent's `first_offset` (an adopted staged segment).
pub const fn version_relative(version: u32) -> bool {
    matches!(version, VERSION_RELATIVE | VERSION_RELATIVE_BATCHED)
}
/// Longest topic or group name in bytes.
pub const TOPIC_NAME_MAX: usize = 249;

// ---- File header: the first page of every data file. ---------------------------------------

/// Bytes reserved for the file header; blocks start right after it.
pub const FILE_HEADER_BYTES: u64 = PAGE_BYTES;
/// File magic: identifies a tidelog data file.
pub const FILE_MAGIC: [u8; 8] = *b"TDLFILE\0";
pub const FH_MAGIC: usize = 0;
pub const FH_VERSION: usize = FH_MAGIC + 8;
pub const FH_FLAGS: usize = FH_VERSION + 4;
pub const FH_FILE_SEQ: usize = FH_FLAGS + 4;
pub const FH_FILE_SIZE: usize = FH_FILE_SEQ + 8;
pub const FH_BLOCK_SIZE: usize = FH_FILE_SIZE + 8;
pub const FH_CREATED_US: usize = FH_BLOCK_SIZE + 8;
pub const FH_CRC: usize = FH_CREATED_US + 8;
/// Encoded length of the file header; the rest of the page is zero.
pub const FH_LEN: usize = FH_CRC + 4;
const _: () = assert!(FH_LEN == 52);
const _: () = assert!(FH_LEN as u64 <= FILE_HEADER_BYTES);

/// Decoded file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    pub version: u32,
    pub file_seq: u64,
    pub file_size_bytes: u64,
    pub block_size_bytes: u64,
    pub created_us: u64,
}

impl FileHeader {
    pub fn encode(&self) -> [u8; FH_LEN] {
        let mut b = [0u8; FH_LEN];
        b[FH_MAGIC..FH_VERSION].copy_from_slice(&FILE_MAGIC);
        put_u32(&mut b, FH_VERSION, self.version);
        put_u32(&mut b, FH_FLAGS, 0);
        put_u64(&mut b, FH_FILE_SEQ, self.file_seq);
        put_u64(&mut b, FH_FILE_SIZE, self.file_size_bytes);
        put_u64(&mut b, FH_BLOCK_SIZE, self.block_size_bytes);
        put_u64(&mut b, FH_CREATED_US, self.created_us);
        let crc = crc32fast::hash(&b[..FH_CRC]);
        put_u32(&mut b, FH_CRC, crc);
        b
    }

    /// Decodes and checks magic and checksum. Version is checked by the caller so it can
    /// report [`crate::Error::UnsupportedVersion`].
    pub fn decode(b: &[u8]) -> Result<FileHeader, &'static str> {
        let b = b.get(..FH_LEN).ok_or("file shorter than its header")?;
        if b[FH_MAGIC..FH_VERSION] != FILE_MAGIC {
            return Err("bad file magic");
        }
        if crc32fast::hash(&b[..FH_CRC]) != get_u32(b, FH_CRC) {
            return Err("file header checksum mismatch");
        }
        Ok(FileHeader {
            version: get_u32(b, FH_VERSION),
            file_seq: get_u64(b, FH_FILE_SEQ),
            file_size_bytes: get_u64(b, FH_FILE_SIZE),
            block_size_bytes: get_u64(b, FH_BLOCK_SIZE),
            created_us: get_u64(b, FH_CREATED_US),
        })
    }
}

// ---- Block header: the first page of every extent (a run of one or more blocks). -----------

/// Bytes reserved at the start of each extent; records start right after it.
pub const BLOCK_HEADER_BYTES: u64 = PAGE_BYTES;
/// Block magic: identifies an allocated extent.
pub const BLOCK_MAGIC: [u8; 8] = *b"TDLBLOCK";

// Identity slot: written once, before the first record of the extent.
pub const ID_MAGIC: usize = 0;
pub const ID_VERSION: usize = ID_MAGIC + 8;
pub const ID_TOPIC_ID: usize = ID_VERSION + 4;
pub const ID_BLOCK_INDEX: usize = ID_TOPIC_ID + 4;
pub const ID_BLOCK_COUNT: usize = ID_BLOCK_INDEX + 4;
pub const ID_SALT: usize = ID_BLOCK_COUNT + 4;
pub const ID_FILE_SEQ: usize = ID_SALT + 4;
pub const ID_FIRST_OFFSET: usize = ID_FILE_SEQ + 8;
pub const ID_NAME_LEN: usize = ID_FIRST_OFFSET + 8;
pub const ID_NAME: usize = ID_NAME_LEN + 4;
pub const ID_NAME_BYTES: usize = 256;
pub const ID_CRC: usize = ID_NAME + ID_NAME_BYTES;
pub const ID_LEN: usize = ID_CRC + 4;
/// Offset of the identity slot inside the block header.
pub const ID_SLOT_AT: usize = 0;
const _: () = assert!(ID_LEN == 308);
const _: () = assert!(TOPIC_NAME_MAX <= ID_NAME_BYTES);

/// Decoded identity slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockIdentity {
    pub version: u32,
    pub topic_id: u32,
    /// Index of the extent's first block inside its file.
    pub block_index: u32,
    /// Length of the extent in blocks (more than one for large records and batches).
    pub extent_count: u32,
    /// Seeds every record checksum in the extent, so stale records of an earlier use of the
    /// same bytes never validate.
    pub salt: u32,
    pub file_seq: u64,
    pub first_offset: u64,
    pub topic: String,
}

impl BlockIdentity {
    pub fn encode(&self) -> [u8; ID_LEN] {
        let mut b = [0u8; ID_LEN];
        b[ID_MAGIC..ID_VERSION].copy_from_slice(&BLOCK_MAGIC);
        put_u32(&mut b, ID_VERSION, self.version);
        put_u32(&mut b, ID_TOPIC_ID, self.topic_id);
        put_u32(&mut b, ID_BLOCK_INDEX, self.block_index);
        put_u32(&mut b, ID_BLOCK_COUNT, self.extent_count);
        put_u32(&mut b, ID_SALT, self.salt);
        put_u64(&mut b, ID_FILE_SEQ, self.file_seq);
        put_u64(&mut b, ID_FIRST_OFFSET, self.first_offset);
        let name = self.topic.as_bytes();
        debug_assert!(name.len() <= TOPIC_NAME_MAX);
        let name_len = name.len().min(ID_NAME_BYTES);
        put_u32(&mut b, ID_NAME_LEN, name_len as u32);
        b[ID_NAME..ID_NAME + name_len].copy_from_slice(&name[..name_len]);
        let crc = crc32fast::hash(&b[..ID_CRC]);
        put_u32(&mut b, ID_CRC, crc);
        b
    }

    /// Decodes the slot; `None` when it is not a valid identity (an unused block).
    pub fn decode(b: &[u8]) -> Option<BlockIdentity> {
        let b = b.get(..ID_LEN)?;
        if b[ID_MAGIC..ID_VERSION] != BLOCK_MAGIC {
            return None;
        }
        if crc32fast::hash(&b[..ID_CRC]) != get_u32(b, ID_CRC) {
            return None;
        }
        let name_len = get_u32(b, ID_NAME_LEN) as usize;
        if name_len == 0 || name_len > TOPIC_NAME_MAX {
            return None;
        }
        let topic = std::str::from_utf8(&b[ID_NAME..ID_NAME + name_len]).ok()?;
        Some(BlockIdentity {
            version: get_u32(b, ID_VERSION),
            topic_id: get_u32(b, ID_TOPIC_ID),
            block_index: get_u32(b, ID_BLOCK_INDEX),
            extent_count: get_u32(b, ID_BLOCK_COUNT),
            salt: get_u32(b, ID_SALT),
            file_seq: get_u64(b, ID_FILE_SEQ),
            first_offset: get_u64(b, ID_FIRST_OFFSET),
            topic: topic.to_owned(),
        })
    }
}

// Progress slot: rewritten by the flusher after the data it describes is durable.
pub const PROGRESS_MAGIC: u32 = 0x4750_4C54; // "TLPG"
pub const PG_MAGIC: usize = 0;
pub const PG_STATE: usize = PG_MAGIC + 4;
pub const PG_DURABLE_END: usize = PG_STATE + 4;
pub const PG_RECORD_COUNT: usize = PG_DURABLE_END + 8;
pub const PG_MAX_TIMESTAMP: usize = PG_RECORD_COUNT + 8;
pub const PG_FOOTER_COUNT: usize = PG_MAX_TIMESTAMP + 8;
pub const PG_FOOTER_CRC: usize = PG_FOOTER_COUNT + 8;
pub const PG_CRC: usize = PG_FOOTER_CRC + 4;
pub const PG_LEN: usize = PG_CRC + 4;
/// Offset of the progress slot inside the block header (its own 512-byte sector, so a torn
/// sector write cannot damage the identity slot).
pub const PG_SLOT_AT: usize = 512;
const _: () = assert!(PG_LEN == 48);
const _: () = assert!(ID_SLOT_AT + ID_LEN <= PG_SLOT_AT);
const _: () = assert!((PG_SLOT_AT + PG_LEN) as u64 <= BLOCK_HEADER_BYTES);

/// What a progress slot says about its extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ProgressState {
    /// The writer may still append; records below `durable_end` are durable.
    Open = 1,
    /// Closed cleanly: nothing was written past `durable_end`; the writer may resume there.
    Clean = 2,
    /// No more records; `durable_end` is the end of the records, and the index footer
    /// (`footer_count` entries) follows it.
    Sealed = 3,
    /// The extent's topic was deleted: recovery ignores the extent. Written oldest extent
    /// first, so a crash part way leaves a topic that lost a prefix, never a gap.
    Deleted = 4,
    /// Every consumer group committed past the extent, or retention dropped it: recovery
    /// ignores it. Written front to back, before any file holding such extents is deleted,
    /// so a topic's extents on disk never have a gap.
    Consumed = 5,
}

/// Decoded progress slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub state: ProgressState,
    /// End of the durable records, relative to the extent start.
    pub durable_end: u64,
    /// Records below `durable_end`.
    pub record_count: u64,
    /// Largest record timestamp below `durable_end` (0 when none).
    pub max_timestamp_us: u64,
    /// Index entries in the footer (sealed extents only).
    pub footer_count: u64,
    /// CRC-32 of the footer bytes (sealed extents only).
    pub footer_crc: u32,
}

impl Progress {
    pub fn encode(&self) -> [u8; PG_LEN] {
        let mut b = [0u8; PG_LEN];
        put_u32(&mut b, PG_MAGIC, PROGRESS_MAGIC);
        put_u32(&mut b, PG_STATE, self.state as u32);
        put_u64(&mut b, PG_DURABLE_END, self.durable_end);
        put_u64(&mut b, PG_RECORD_COUNT, self.record_count);
        put_u64(&mut b, PG_MAX_TIMESTAMP, self.max_timestamp_us);
        put_u64(&mut b, PG_FOOTER_COUNT, self.footer_count);
        put_u32(&mut b, PG_FOOTER_CRC, self.footer_crc);
        let crc = crc32fast::hash(&b[..PG_CRC]);
        put_u32(&mut b, PG_CRC, crc);
        b
    }

    /// What a blank progress slot claims, as an `Open` one: nothing past the start of the
    /// records (a commit copy may continue it).
    pub fn blank() -> Progress {
        Progress {
            state: ProgressState::Open,
            durable_end: BLOCK_HEADER_BYTES,
            record_count: 0,
            max_timestamp_us: 0,
            footer_count: 0,
            footer_crc: 0,
        }
    }

    /// This claim moved over `copy`, which continues it: to the copy's end, with its
    /// record count and timestamp.
    pub fn extend_over(&mut self, copy: &CommitCopy) {
        debug_assert_eq!(copy.start, self.durable_end, "the copy continues the claim");
        self.durable_end = copy.end();
        self.record_count = copy.record_count;
        self.max_timestamp_us = self.max_timestamp_us.max(copy.max_timestamp_us);
    }

    /// Decodes the slot; `None` when absent or torn.
    pub fn decode(b: &[u8]) -> Option<Progress> {
        let b = b.get(..PG_LEN)?;
        if get_u32(b, PG_MAGIC) != PROGRESS_MAGIC
            || crc32fast::hash(&b[..PG_CRC]) != get_u32(b, PG_CRC)
        {
            return None;
        }
        let state = match get_u32(b, PG_STATE) {
            1 => ProgressState::Open,
            2 => ProgressState::Clean,
            3 => ProgressState::Sealed,
            4 => ProgressState::Deleted,
            5 => ProgressState::Consumed,
            _ => return None,
        };
        Some(Progress {
            state,
            durable_end: get_u64(b, PG_DURABLE_END),
            record_count: get_u64(b, PG_RECORD_COUNT),
            max_timestamp_us: get_u64(b, PG_MAX_TIMESTAMP),
            footer_count: get_u64(b, PG_FOOTER_COUNT),
            footer_crc: get_u32(b, PG_FOOTER_CRC),
        })
    }
}

// ---- Commit copies: the block header's last six sectors. --------------------------------------
//
// A group commit that makes a few records durable writes a copy of their bytes into one of two
// slots, beside the progress slot's claim, and syncs both with the records in one msync
// (instead of the records, then the claim). A valid copy that starts at the claim extends it:
// recovery checks the records against it and repairs them from it.

pub const COMMIT_MAGIC: u32 = 0x4343_4C54; // "TLCC"
pub const CC_MAGIC: usize = 0;
pub const CC_SALT: usize = CC_MAGIC + 4;
pub const CC_START: usize = CC_SALT + 4;
pub const CC_BYTES: usize = CC_START + 8;
pub const CC_RECORD_COUNT: usize = CC_BYTES + 4;
pub const CC_MAX_TIMESTAMP: usize = CC_RECORD_COUNT + 8;
pub const CC_CRC: usize = CC_MAX_TIMESTAMP + 8;
/// Bytes of a copy's header; the copied bytes follow it.
pub const CC_HEADER: usize = CC_CRC + 4;
/// Bytes of one commit-copy slot (three sectors).
pub const CC_SLOT_LEN: usize = 1536;
/// Most record bytes one copy holds.
pub const CC_PAYLOAD_MAX: usize = CC_SLOT_LEN - CC_HEADER;
/// Offsets of the two slots inside the block header.
pub const CC_SLOTS_AT: [usize; 2] = [1024, 1024 + CC_SLOT_LEN];
const _: () = assert!(CC_HEADER == 40);
const _: () = assert!(PG_SLOT_AT + PG_LEN <= CC_SLOTS_AT[0]);
const _: () = assert!(CC_SLOTS_AT[0].is_multiple_of(512) && CC_SLOTS_AT[1].is_multiple_of(512));
const _: () = assert!(CC_SLOT_LEN.is_multiple_of(512));
const _: () = assert!((CC_SLOTS_AT[1] + CC_SLOT_LEN) as u64 == BLOCK_HEADER_BYTES);

/// A decoded commit copy: the extent's bytes `[start, start + bytes.len())`, and its record
/// count and largest timestamp at their end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitCopy {
    /// The extent's salt (a copy of an earlier use of the block never matches).
    pub salt: u32,
    /// Extent position of the first copied byte: the claim it continues.
    pub start: u64,
    /// Records below `start + bytes.len()`.
    pub record_count: u64,
    /// Largest record timestamp below the copy's end.
    pub max_timestamp_us: u64,
    pub bytes: Vec<u8>,
}

impl CommitCopy {
    /// Extent position just past the copied bytes.
    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    /// The slot's bytes (the unused tail zero). Panics past `CC_PAYLOAD_MAX` bytes.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.bytes.len() <= CC_PAYLOAD_MAX, "commit copy too large");
        let mut b = vec![0u8; CC_SLOT_LEN];
        put_u32(&mut b, CC_MAGIC, COMMIT_MAGIC);
        put_u32(&mut b, CC_SALT, self.salt);
        put_u64(&mut b, CC_START, self.start);
        put_u32(&mut b, CC_BYTES, self.bytes.len() as u32);
        put_u64(&mut b, CC_RECORD_COUNT, self.record_count);
        put_u64(&mut b, CC_MAX_TIMESTAMP, self.max_timestamp_us);
        b[CC_HEADER..CC_HEADER + self.bytes.len()].copy_from_slice(&self.bytes);
        let crc = copy_crc(&b, self.bytes.len());
        put_u32(&mut b, CC_CRC, crc);
        b
    }

    /// The copies in both slots of a block header (`header`: its bytes from the extent's
    /// start), and how many slots carry the copy magic but fail their checks.
    pub fn decode_slots(header: &[u8]) -> ([Option<CommitCopy>; 2], u64) {
        let copies = CC_SLOTS_AT.map(|at| header.get(at..).and_then(CommitCopy::decode));
        let damaged = CC_SLOTS_AT
            .iter()
            .zip(&copies)
            .filter(|(at, copy)| {
                copy.is_none()
                    && header.len() >= **at + 4
                    && get_u32(header, **at + CC_MAGIC) == COMMIT_MAGIC
            })
            .count() as u64;
        (copies, damaged)
    }

    /// Of `copies`, the longest that starts at `claim_end` and that `accept` takes: the one
    /// that moves a claim ending there (two may, when the claim could not move in between).
    pub fn continuing(
        copies: &[Option<CommitCopy>; 2],
        claim_end: u64,
        accept: impl Fn(&CommitCopy) -> bool,
    ) -> Option<&CommitCopy> {
        copies
            .iter()
            .flatten()
            .filter(|c| c.start == claim_end && accept(c))
            .max_by_key(|c| c.end())
    }

    /// Decodes a slot; `None` when blank, torn or damaged.
    pub fn decode(b: &[u8]) -> Option<CommitCopy> {
        let b = b.get(..CC_SLOT_LEN)?;
        if get_u32(b, CC_MAGIC) != COMMIT_MAGIC {
            return None;
        }
        let len = get_u32(b, CC_BYTES) as usize;
        if len == 0 || len > CC_PAYLOAD_MAX || copy_crc(b, len) != get_u32(b, CC_CRC) {
            return None;
        }
        let start = get_u64(b, CC_START);
        start.checked_add(len as u64)?;
        Some(CommitCopy {
            salt: get_u32(b, CC_SALT),
            start,
            record_count: get_u64(b, CC_RECORD_COUNT),
            max_timestamp_us: get_u64(b, CC_MAX_TIMESTAMP),
            bytes: b[CC_HEADER..CC_HEADER + len].to_vec(),
        })
    }
}

/// CRC-32 of a copy slot's header (up to its checksum) and its `len` copied bytes.
fn copy_crc(b: &[u8], len: usize) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&b[..CC_CRC]);
    h.update(&b[CC_HEADER..CC_HEADER + len]);
    h.finalize()
}

// ---- Index footer: written after the last record of a sealed extent. ------------------------

pub const IX_OFFSET: usize = 0;
pub const IX_POSITION: usize = IX_OFFSET + 8;
pub const IX_MAX_TIMESTAMP: usize = IX_POSITION + 8;
/// Bytes of one index entry.
pub const IX_LEN: usize = IX_MAX_TIMESTAMP + 8;
const _: () = assert!(IX_LEN == 24);

/// One sparse index entry: the record at `offset` starts at `position` (relative to the
/// extent start), and no record before it in the topic has a timestamp above `max_timestamp_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: u64,
    pub position: u64,
    /// Largest timestamp among the records up to and including this one.
    pub max_timestamp_us: u64,
}

impl IndexEntry {
    pub fn encode(&self) -> [u8; IX_LEN] {
        let mut b = [0u8; IX_LEN];
        put_u64(&mut b, IX_OFFSET, self.offset);
        put_u64(&mut b, IX_POSITION, self.position);
        put_u64(&mut b, IX_MAX_TIMESTAMP, self.max_timestamp_us);
        b
    }

    pub fn decode(b: &[u8]) -> Option<IndexEntry> {
        let b = b.get(..IX_LEN)?;
        Some(IndexEntry {
            offset: get_u64(b, IX_OFFSET),
            position: get_u64(b, IX_POSITION),
            max_timestamp_us: get_u64(b, IX_MAX_TIMESTAMP),
        })
    }
}

/// Footer bytes reserved at the end of every extent of `extent_bytes`: one entry per
/// `interval` bytes of data plus the first record's entry, rounded up.
pub const fn footer_bytes_max(extent_bytes: u64, interval: u64) -> u64 {
    (extent_bytes / interval + 2) * IX_LEN as u64
}

// ---- Record frame. --------------------------------------------------------------------------

/// Bytes 4..6 of every frame (`1E 7D` on disk); zero bytes mean "no record here".
pub const FRAME_MAGIC: u16 = 0x7D1E;
/// Frame version byte.
pub const FRAME_VERSION: u8 = 1;
/// Frames start on multiples of this many bytes.
pub const FRAME_ALIGN: u64 = 8;
/// Flag bit: the record has a key (an empty key is distinct from no key).
pub const FLAG_KEY: u8 = 0b0000_0001;
/// Flag bit: the record has headers (a `u32` length and the entries follow the key).
pub const FLAG_HEADERS: u8 = 0b0000_0010;
/// Every flag bit this version defines.
pub const FLAGS_KNOWN: u8 = FLAG_KEY | FLAG_HEADERS;
/// Bytes of the length in front of a record's header entries.
pub const HEADERS_LEN_BYTES: usize = 4;

pub const FR_CRC: usize = 0;
pub const FR_MAGIC: usize = FR_CRC + 4;
pub const FR_VERSION: usize = FR_MAGIC + 2;
pub const FR_FLAGS: usize = FR_VERSION + 1;
pub const FR_LEN: usize = FR_FLAGS + 1;
pub const FR_TOPIC_ID: usize = FR_LEN + 4;
pub const FR_OFFSET: usize = FR_TOPIC_ID + 4;
pub const FR_TIMESTAMP: usize = FR_OFFSET + 8;
pub const FR_KEY_LEN: usize = FR_TIMESTAMP + 8;
pub const FR_BATCH_COUNT: usize = FR_KEY_LEN + 4;
/// The checksum covers everything after itself: header fields, key, headers and value.
pub const FR_CRC_FROM: usize = FR_CRC + 4;
/// Bytes of the frame header; key, headers and value follow.
pub const FRAME_HEADER: usize = FR_BATCH_COUNT + 4;
/// [`FRAME_HEADER`] as a `u64`.
pub const FRAME_HEADER_BYTES: u64 = FRAME_HEADER as u64;
const _: () = assert!(FRAME_HEADER == 40);
const _: () = assert!(FRAME_HEADER_BYTES.is_multiple_of(FRAME_ALIGN));
const _: () = assert!(FR_OFFSET.is_multiple_of(8) && FR_TIMESTAMP.is_multiple_of(8));

/// Largest key plus headers plus value one frame can describe (its length field is a `u32`).
pub const FRAME_PAYLOAD_MAX: u64 = u32::MAX as u64 - FRAME_HEADER_BYTES - FRAME_ALIGN;

/// Space a record with `payload` bytes after its header takes, padding included.
#[inline]
pub const fn frame_padded_len(payload: u64) -> u64 {
    align_up(FRAME_HEADER_BYTES + payload, FRAME_ALIGN)
}

/// The fields a writer puts in a frame header besides the lengths of its parts.
#[derive(Debug, Clone, Copy)]
pub struct FrameFields {
    pub topic_id: u32,
    pub offset: u64,
    pub timestamp_us: u64,
    /// Records in the batch this frame heads (1 for a single append), 0 inside a batch.
    pub batch_count: u32,
}

/// What follows a frame's header: the key, the encoded header entries (already checked,
/// see [`crate::headers`]) and the value.
#[derive(Debug, Clone, Copy)]
pub struct FrameParts<'a> {
    pub key: Option<&'a [u8]>,
    pub headers: Option<&'a [u8]>,
    pub value: &'a [u8],
}

impl FrameParts<'_> {
    /// Bytes after the frame header, padding excluded.
    #[inline]
    pub fn payload_len(&self) -> u64 {
        let headers = self.headers.map_or(0, |h| HEADERS_LEN_BYTES + h.len());
        (self.key.map_or(0, <[u8]>::len) + headers + self.value.len()) as u64
    }

    /// The length in front of the header entries.
    #[inline]
    fn headers_len(&self) -> Option<[u8; HEADERS_LEN_BYTES]> {
        self.headers.map(|h| (h.len() as u32).to_le_bytes())
    }

    /// The payload in order, as slices: key, header length, header entries, value.
    #[inline]
    fn for_each(&self, mut f: impl FnMut(&[u8])) {
        if let Some(k) = self.key {
            f(k);
        }
        if let (Some(len), Some(h)) = (self.headers_len(), self.headers) {
            f(&len);
            f(h);
        }
        f(self.value);
    }

    /// Copies the payload to the start of `out`; returns its length.
    #[inline]
    fn copy_to(&self, out: &mut [u8]) -> usize {
        let mut at = 0;
        self.for_each(|part| {
            out[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        });
        at
    }
}

/// Fills the 40-byte header of a frame, checksum field left zero.
#[inline]
fn fill_header(h: &mut [u8], fields: &FrameFields, parts: &FrameParts<'_>) {
    let frame_len = FRAME_HEADER_BYTES + parts.payload_len();
    debug_assert!(frame_len <= u64::from(u32::MAX));
    let mut flags = 0;
    if parts.key.is_some() {
        flags |= FLAG_KEY;
    }
    if parts.headers.is_some() {
        flags |= FLAG_HEADERS;
    }
    h[FR_MAGIC..FR_VERSION].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    h[FR_VERSION] = FRAME_VERSION;
    h[FR_FLAGS] = flags;
    put_u32(h, FR_LEN, frame_len as u32);
    put_u32(h, FR_TOPIC_ID, fields.topic_id);
    put_u64(h, FR_OFFSET, fields.offset);
    put_u64(h, FR_TIMESTAMP, fields.timestamp_us);
    put_u32(h, FR_KEY_LEN, parts.key.map_or(0, |k| k.len() as u32));
    put_u32(h, FR_BATCH_COUNT, fields.batch_count);
}

/// Builds the 40-byte header of a frame with its checksum (seeded with the extent's salt,
/// covering the header after the checksum field and the payload).
#[inline]
pub fn encode_frame_header(
    fields: &FrameFields,
    salt: u32,
    parts: &FrameParts<'_>,
) -> [u8; FRAME_HEADER] {
    let mut h = [0u8; FRAME_HEADER];
    fill_header(&mut h, fields, parts);
    let mut crc = crc32fast::Hasher::new_with_initial(salt);
    crc.update(&h[FR_CRC_FROM..]);
    parts.for_each(|part| crc.update(part));
    put_u32(&mut h, FR_CRC, crc.finalize());
    h
}

/// Largest payload that [`encode_small_frame`] takes.
pub const SMALL_PAYLOAD_MAX: usize = 472;
/// Buffer size for [`encode_small_frame`].
pub const SMALL_FRAME_MAX: usize = FRAME_HEADER + SMALL_PAYLOAD_MAX;
const _: () = assert!((SMALL_FRAME_MAX as u64).is_multiple_of(FRAME_ALIGN));

/// Encodes a whole small frame (header, payload, zero padding) into `out`, checksumming it
/// in one pass; returns the padded length.
#[inline]
pub fn encode_small_frame(
    fields: &FrameFields,
    salt: u32,
    parts: &FrameParts<'_>,
    out: &mut [u8; SMALL_FRAME_MAX],
) -> usize {
    let payload = parts.payload_len() as usize;
    assert!(payload <= SMALL_PAYLOAD_MAX, "small frame too large");
    encode_frame_into(&mut out[..], fields, salt, parts)
}

/// Encodes a whole frame (header, payload, zero padding) at the start of `out`,
/// checksummed in one pass over the bytes just written; returns its padded length.
/// `out` must hold the padded frame.
#[inline]
pub fn encode_frame_into(
    out: &mut [u8],
    fields: &FrameFields,
    salt: u32,
    parts: &FrameParts<'_>,
) -> usize {
    let payload = parts.payload_len();
    let frame_len = FRAME_HEADER + payload as usize;
    let padded = frame_padded_len(payload) as usize;
    let out = &mut out[..padded];
    fill_header(out, fields, parts);
    let copied = parts.copy_to(&mut out[FRAME_HEADER..frame_len]);
    debug_assert_eq!(FRAME_HEADER + copied, frame_len);
    out[frame_len..].fill(0);
    let mut crc = crc32fast::Hasher::new_with_initial(salt);
    crc.update(&out[FR_CRC_FROM..frame_len]);
    put_u32(out, FR_CRC, crc.finalize());
    padded
}

/// Why bytes at a position are not a valid frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Zero bytes where a frame would start: the clean end of the records.
    End,
    /// Not enough bytes left in the extent for the header or the declared length.
    Truncated,
    BadMagic,
    BadVersion,
    BadFlags,
    BadLength,
    BadHeaders,
    BadChecksum,
    WrongTopic,
    WrongOffset,
}

impl FrameError {
    pub fn describe(self) -> &'static str {
        match self {
            FrameError::End => "no record (zero bytes)",
            FrameError::Truncated => "frame runs past the end of its extent",
            FrameError::BadMagic => "bad frame magic",
            FrameError::BadVersion => "unknown frame version",
            FrameError::BadFlags => "unknown frame flags",
            FrameError::BadLength => "frame length inconsistent with key length",
            FrameError::BadHeaders => "record headers malformed",
            FrameError::BadChecksum => "checksum mismatch",
            FrameError::WrongTopic => "record belongs to another topic",
            FrameError::WrongOffset => "record offset out of sequence",
        }
    }
}

/// A validated frame: where its parts are inside the slice it was decoded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameView {
    pub offset: u64,
    pub timestamp_us: u64,
    pub batch_count: u32,
    /// Byte range of the key, if the record has one.
    pub key: Option<Range<usize>>,
    /// Byte range of the header entries, if the record has headers (checked: see
    /// [`crate::headers::HeaderBlock::parse`]).
    pub headers: Option<Range<usize>>,
    /// Byte range of the value.
    pub value: Range<usize>,
    /// Where the next record starts.
    pub next_position: usize,
    /// The bytes whose checksum covers this record: its frame, or its whole batch frame. A
    /// reader that checked them may decode the next records inside without checking again.
    pub checked: Range<usize>,
}

/// The frame of one extent a walker decoded last, and whether it checked its checksum: the
/// records of a batch frame after its first need no second check (it covers the whole batch),
/// nor a second look at its header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    frame: Range<usize>,
    verified: bool,
}

impl Checked {
    /// Whether a decode at `position` must check the checksum, given the walker's `verify`.
    #[inline]
    fn needs(&self, position: u64, verify: bool) -> bool {
        verify && !(self.verified && self.frame.contains(&(position as usize)))
    }

    /// The frame decoded already that holds `position` after its start, when a walker that
    /// checks (`verify`) checked it.
    #[inline]
    pub fn frame_holding(&self, position: u64, verify: bool) -> Option<Range<usize>> {
        let position = position as usize;
        (position > self.frame.start && position < self.frame.end && (self.verified || !verify))
            .then(|| self.frame.clone())
    }

    /// Decodes the record at `position` with `decode`, which checks the checksum when told
    /// to: told only when the walker checks (`verify`) and has not checked this frame yet.
    #[inline]
    pub fn walk<E>(
        &mut self,
        position: u64,
        verify: bool,
        decode: impl FnOnce(bool) -> Result<FrameView, E>,
    ) -> Result<FrameView, E> {
        let check = self.needs(position, verify);
        let view = decode(check)?;
        self.note(&view, check);
        Ok(view)
    }

    /// A decode (checking the checksum when `verified`) returned `view`.
    #[inline]
    fn note(&mut self, view: &FrameView, verified: bool) {
        if verified {
            self.frame = view.checked.clone();
            self.verified = true;
        } else if self.frame != view.checked {
            self.frame = view.checked.clone();
            self.verified = false;
        }
    }

    /// The walker moved to another extent.
    #[inline]
    pub fn clear(&mut self) {
        *self = Checked::default();
    }
}

/// Decodes and fully validates the frame at `position` of `extent` (the extent's bytes),
/// expecting `topic_id`, `offset` and the extent's `salt`.
pub fn decode_frame(
    extent: &[u8],
    position: usize,
    salt: u32,
    topic_id: u32,
    expected_offset: u64,
    verify_checksum: bool,
) -> Result<FrameView, FrameError> {
    let h = position
        .checked_add(FRAME_HEADER)
        .and_then(|end| extent.get(position..end))
        .ok_or(FrameError::Truncated)?;
    let magic = u16::from_le_bytes([h[FR_MAGIC], h[FR_MAGIC + 1]]);
    if magic != FRAME_MAGIC {
        return Err(if h.iter().all(|&x| x == 0) {
            FrameError::End
        } else {
            FrameError::BadMagic
        });
    }
    if h[FR_VERSION] != FRAME_VERSION {
        return Err(FrameError::BadVersion);
    }
    let flags = h[FR_FLAGS];
    if flags & !FLAGS_KNOWN != 0 {
        return Err(FrameError::BadFlags);
    }
    let frame_len = get_u32(h, FR_LEN) as usize;
    let key_len = get_u32(h, FR_KEY_LEN) as usize;
    if frame_len < FRAME_HEADER || key_len > frame_len - FRAME_HEADER {
        return Err(FrameError::BadLength);
    }
    if flags & FLAG_KEY == 0 && key_len != 0 {
        return Err(FrameError::BadLength);
    }
    // `position + FRAME_HEADER` fits (checked above) and `frame_len` is a u32: no overflow.
    let frame = extent
        .get(position..position + frame_len)
        .ok_or(FrameError::Truncated)?;
    if verify_checksum {
        let mut crc = crc32fast::Hasher::new_with_initial(salt);
        crc.update(&frame[FR_CRC_FROM..]);
        if crc.finalize() != get_u32(frame, FR_CRC) {
            return Err(FrameError::BadChecksum);
        }
    }
    if get_u32(frame, FR_TOPIC_ID) != topic_id {
        return Err(FrameError::WrongTopic);
    }
    let offset = get_u64(frame, FR_OFFSET);
    if offset != expected_offset {
        return Err(FrameError::WrongOffset);
    }
    let key_start = position + FRAME_HEADER;
    let key_end = key_start + key_len;
    let (headers, value_start) = if flags & FLAG_HEADERS != 0 {
        let entries = headers_in(&frame[FRAME_HEADER + key_len..])?;
        let at = key_end + HEADERS_LEN_BYTES;
        (Some(at..at + entries), at + entries)
    } else {
        (None, key_end)
    };
    Ok(FrameView {
        offset,
        timestamp_us: get_u64(frame, FR_TIMESTAMP),
        batch_count: get_u32(frame, FR_BATCH_COUNT),
        key: (flags & FLAG_KEY != 0).then_some(key_start..key_end),
        headers,
        value: value_start..position + frame_len,
        next_position: position + align_up(frame_len as u64, FRAME_ALIGN) as usize,
        checked: position..position + frame_len,
    })
}

/// Checks the header entries at the start of `after_key` (a frame's bytes after its key):
/// their length, then the entries themselves; returns the entries' length.
fn headers_in(after_key: &[u8]) -> Result<usize, FrameError> {
    let len = after_key
        .get(..HEADERS_LEN_BYTES)
        .ok_or(FrameError::BadLength)?;
    let len = get_u32(len, 0) as usize;
    let entries = after_key
        .get(HEADERS_LEN_BYTES..)
        .and_then(|rest| rest.get(..len))
        .ok_or(FrameError::BadLength)?;
    crate::headers::HeaderBlock::parse(entries).map_err(|_| FrameError::BadHeaders)?;
    Ok(len)
}

// ---- Cursor files. --------------------------------------------------------------------------

/// Bytes of one cursor slot; a cursor file holds two.
pub const CURSOR_SLOT_BYTES: usize = 1024;
/// Cursor slot magic.
pub const CURSOR_MAGIC: u32 = 0x5255_4354; // "TCUR"
pub const CS_MAGIC: usize = 0;
pub const CS_LEN: usize = CS_MAGIC + 4;
pub const CS_CRC: usize = CS_LEN + 4;
/// Where the rkyv archive starts inside a slot.
pub const CS_BODY: usize = CS_CRC + 4;
/// Largest rkyv archive a slot holds.
pub const CS_BODY_MAX: usize = CURSOR_SLOT_BYTES - CS_BODY;
const _: () = assert!(CS_BODY.is_multiple_of(4));
const _: () = assert!(2 * TOPIC_NAME_MAX + 64 < CS_BODY_MAX);

// ---- Helpers. -------------------------------------------------------------------------------

/// Rounds `value` up to a multiple of `align` (a power of two).
#[inline]
pub const fn align_up(value: u64, align: u64) -> u64 {
    (value + align - 1) & !(align - 1)
}

#[inline]
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

#[inline]
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Checks a topic or group name: letters, digits, `.`, `_`, `-`; 1 to 249 characters;
/// not `.` or `..`; no leading `.`.
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |rule| {
        Err(Error::InvalidTopic {
            name: name.to_owned(),
            rule,
        })
    };
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > TOPIC_NAME_MAX {
        return bad("must be at most 249 characters");
    }
    if name == "." || name == ".." {
        return bad("must not be \".\" or \"..\"");
    }
    if name.starts_with('.') {
        return bad("must not start with \".\"");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("may contain only ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(
        key: Option<&'a [u8]>,
        headers: Option<&'a [u8]>,
        value: &'a [u8],
    ) -> FrameParts<'a> {
        FrameParts {
            key,
            headers,
            value,
        }
    }

    fn fields(topic_id: u32, offset: u64) -> FrameFields {
        FrameFields {
            topic_id,
            offset,
            timestamp_us: 1_700_000_000_000_000,
            batch_count: 1,
        }
    }

    fn frame_with(p: &FrameParts<'_>, offset: u64) -> Vec<u8> {
        let h = encode_frame_header(&fields(7, offset), 0xABCD, p);
        let mut out = h.to_vec();
        if let Some(k) = p.key {
            out.extend_from_slice(k);
        }
        if let Some(hs) = p.headers {
            out.extend_from_slice(&(hs.len() as u32).to_le_bytes());
            out.extend_from_slice(hs);
        }
        out.extend_from_slice(p.value);
        out.resize(frame_padded_len(p.payload_len()) as usize, 0);
        out
    }

    fn frame(key: Option<&[u8]>, value: &[u8], offset: u64) -> Vec<u8> {
        frame_with(&parts(key, None, value), offset)
    }

    fn some_headers() -> crate::headers::Headers {
        crate::headers::Headers::from_pairs([("trace", Some(&b"abc"[..])), ("trace", None)])
            .expect("valid")
    }

    #[test]
    fn frame_round_trip_with_and_without_key() {
        let f = frame(Some(b"k1"), b"hello", 3);
        let v = decode_frame(&f, 0, 0xABCD, 7, 3, true).expect("valid");
        assert_eq!(&f[v.key.clone().expect("key")], b"k1");
        assert_eq!(&f[v.value.clone()], b"hello");
        assert_eq!(v.headers, None);
        assert_eq!(v.next_position, f.len());
        let g = frame(None, b"", 4);
        let v = decode_frame(&g, 0, 0xABCD, 7, 4, true).expect("valid");
        assert!(v.key.is_none());
        assert!(v.value.is_empty());
        let e = frame(Some(b""), b"x", 4);
        let v = decode_frame(&e, 0, 0xABCD, 7, 4, true).expect("valid");
        assert_eq!(v.key, Some(FRAME_HEADER..FRAME_HEADER));
    }

    #[test]
    fn frame_round_trip_with_headers() {
        let h = some_headers();
        let entries = h.block().expect("some").as_bytes();
        for key in [None, Some(&b"key"[..])] {
            let f = frame_with(&parts(key, Some(entries), b"value"), 5);
            let v = decode_frame(&f, 0, 0xABCD, 7, 5, true).expect("valid");
            assert_eq!(v.key.clone().map(|r| &f[r]), key);
            assert_eq!(&f[v.headers.clone().expect("headers")], entries);
            assert_eq!(&f[v.value.clone()], b"value");
            assert_eq!(v.next_position, f.len());
        }
    }

    #[test]
    fn headers_that_do_not_parse_are_rejected_even_with_a_good_checksum() {
        let entries = [3u8, b'a', b'b'];
        let f = frame_with(&parts(None, Some(&entries), b"v"), 1);
        assert_eq!(
            decode_frame(&f, 0, 0xABCD, 7, 1, true),
            Err(FrameError::BadHeaders)
        );
        // A header length past the frame.
        let mut g = frame_with(
            &parts(
                None,
                Some(some_headers().block().expect("some").as_bytes()),
                b"v",
            ),
            1,
        );
        g[FRAME_HEADER] = 0xFF;
        assert!(decode_frame(&g, 0, 0xABCD, 7, 1, false).is_err());
    }

    #[test]
    fn small_and_large_encodings_agree() {
        let fields = FrameFields {
            topic_id: 3,
            offset: 11,
            timestamp_us: 5,
            batch_count: 1,
        };
        let p = parts(Some(b"kk"), None, b"value");
        let mut out = [0xAAu8; SMALL_FRAME_MAX];
        let padded = encode_small_frame(&fields, 9, &p, &mut out);
        let h = encode_frame_header(&fields, 9, &p);
        assert_eq!(&out[..FRAME_HEADER], &h[..]);
        assert_eq!(padded, 48);
        assert!(out[47..48].iter().all(|&b| b == 0));
        assert!(decode_frame(&out[..padded], 0, 9, 3, 11, true).is_ok());
    }

    #[test]
    fn encoded_in_place_and_small_encodings_agree() {
        let fields = FrameFields {
            topic_id: 0,
            offset: 3,
            timestamp_us: 5,
            batch_count: 1,
        };
        let h = some_headers();
        for p in [
            parts(Some(b"kk"), None, b"value"),
            parts(
                Some(b"kk"),
                h.block().map(crate::headers::HeaderBlock::as_bytes),
                b"value",
            ),
        ] {
            let mut small = [0u8; SMALL_FRAME_MAX];
            let padded = encode_small_frame(&fields, 9, &p, &mut small);
            let mut out = vec![0xEE; 3 + padded + 5];
            assert_eq!(encode_frame_into(&mut out[3..], &fields, 9, &p), padded);
            assert_eq!(&out[3..3 + padded], &small[..padded]);
            assert_eq!(&out[3 + padded..], &[0xEE; 5], "nothing past the frame");
            assert!(decode_frame(&out, 3, 9, 0, 3, true).is_ok());
            let header = encode_frame_header(&fields, 9, &p);
            assert_eq!(&small[..FRAME_HEADER], &header[..]);
        }
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let f = frame(Some(b"key"), b"some value bytes", 9);
        let frame_len = FRAME_HEADER + 3 + 16;
        let h = some_headers();
        let p = parts(
            Some(b"key"),
            h.block().map(crate::headers::HeaderBlock::as_bytes),
            b"v",
        );
        let with_headers = frame_with(&p, 9);
        let with_headers_len = FRAME_HEADER + p.payload_len() as usize;
        for bit in 0..with_headers_len * 8 {
            let mut g = with_headers.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_frame(&g, 0, 0xABCD, 7, 9, true).is_err(),
                "flip of bit {bit} undetected"
            );
        }
        for bit in 0..frame_len * 8 {
            let mut g = f.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_frame(&g, 0, 0xABCD, 7, 9, true).is_err(),
                "flip of bit {bit} undetected"
            );
        }
    }

    #[test]
    fn wrong_salt_topic_offset_rejected() {
        let f = frame(None, b"v", 1);
        assert_eq!(
            decode_frame(&f, 0, 1, 7, 1, true),
            Err(FrameError::BadChecksum)
        );
        assert_eq!(
            decode_frame(&f, 0, 0xABCD, 8, 1, true),
            Err(FrameError::WrongTopic)
        );
        assert_eq!(
            decode_frame(&f, 0, 0xABCD, 7, 2, true),
            Err(FrameError::WrongOffset)
        );
        assert_eq!(
            decode_frame(&[0u8; 64], 0, 0xABCD, 7, 2, true),
            Err(FrameError::End)
        );
        assert_eq!(
            decode_frame(&f[..20], 0, 0xABCD, 7, 1, true),
            Err(FrameError::Truncated)
        );
    }

    #[test]
    fn headers_round_trip() {
        let fh = FileHeader {
            version: 1,
            file_seq: 5,
            file_size_bytes: 1 << 30,
            block_size_bytes: 10 << 20,
            created_us: 42,
        };
        assert_eq!(FileHeader::decode(&fh.encode()), Ok(fh));
        let id = BlockIdentity {
            version: 1,
            topic_id: 3,
            block_index: 2,
            extent_count: 1,
            salt: 99,
            file_seq: 5,
            first_offset: 100,
            topic: "orders.v1".into(),
        };
        assert_eq!(BlockIdentity::decode(&id.encode()), Some(id));
        let pg = Progress {
            state: ProgressState::Sealed,
            durable_end: 4096,
            record_count: 10,
            max_timestamp_us: 5,
            footer_count: 2,
            footer_crc: 77,
        };
        assert_eq!(Progress::decode(&pg.encode()), Some(pg));
        let mut torn = pg.encode();
        torn[10] ^= 1;
        assert_eq!(Progress::decode(&torn), None);
    }
}

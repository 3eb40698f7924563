//! Decoder properties: every decoder of bytes read from disk, fed arbitrary bytes and mutated
//! valid encodings (bit flips, truncations, extensions, byte overwrites, length and count
//! fields set to huge values, with and without a recomputed checksum), never panics, never
//! reads out of bounds and terminates; where a checksum covers the mutated bytes it rejects
//! them rather than return other field values; and `decode(encode(x)) == x`. Each checksummed
//! structure also gets a deterministic sweep that flips every bit of one valid encoding once.
//!
//! Case counts: 256 per property by default (a fraction of that for the properties that write
//! files). For a long run set `TIDELOG_PROPTEST_CASES` (for example 100000), which scales every
//! property; proptest's own `PROPTEST_CASES` is honoured too when ours is unset:
//!
//! ```text
//! TIDELOG_PROPTEST_CASES=100000 cargo test --release -p tidelog --test recovery decoders::
//! ```
//!
//! Failures are not persisted to files: an input that once failed is kept below as a named
//! regression test instead.

use std::path::Path;
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::Config as PtConfig;

use crate::common::tempdir;
use tidelog::batch::{self, BatchHead, BatchRecord};
use tidelog::format::{
    self, BlockIdentity, CommitCopy, FRAME_HEADER, FileHeader, FrameFields, FrameParts, IndexEntry,
    Progress, ProgressState,
};
use tidelog::internals::{self, CursorRecord, ExtentFixture, SegmentHeader};
use tidelog::ring::format as rf;
use tidelog::{Append, HeaderBlock, Headers, RingWal};

// ---- Harness. ----------------------------------------------------------------------------------

const DEFAULT_CASES: u32 = 256;

/// Cases per property: `TIDELOG_PROPTEST_CASES`, else `PROPTEST_CASES`, else the default.
fn base_cases() -> u32 {
    let env = |name| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    env("TIDELOG_PROPTEST_CASES")
        .or_else(|| env("PROPTEST_CASES"))
        .unwrap_or(DEFAULT_CASES)
        .max(1)
}

/// A proptest configuration running `base_cases() / divisor` cases, persisting nothing.
fn config(divisor: u32) -> PtConfig {
    PtConfig {
        cases: (base_cases() / divisor).max(1),
        failure_persistence: None,
        ..PtConfig::default()
    }
}

/// Runs `f` on its own thread and fails when it does not return within `limit`: a decoder
/// stuck in a loop fails the test instead of hanging it.
fn terminates<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = worker.join();
            v
        }
        // The sender was dropped without a value: the closure panicked. Re-raise it here.
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => panic!("decoder thread ended without a result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("decoder did not terminate in {limit:?}"),
    }
}

const LIMIT: Duration = Duration::from_secs(20);

/// One change to a valid encoding.
#[derive(Debug, Clone)]
enum Mutation {
    /// Flip bit `n % (8 * len)`.
    Flip(usize),
    /// Keep the first `n % len` bytes.
    Truncate(usize),
    /// Append bytes.
    Extend(Vec<u8>),
    /// Set byte `n % len` to a value.
    Overwrite(usize, u8),
    /// Set one of the structure's length or count fields (`n % fields`) to a huge value.
    Huge(usize, u64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => any::<usize>().prop_map(Mutation::Flip),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Extend),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Overwrite(i, b)),
        2 => (any::<usize>(), huge()).prop_map(|(i, v)| Mutation::Huge(i, v)),
    ]
}

fn huge() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u32::MAX) - 1),
        Just(1u64 << 31),
        Just(1u64 << 32),
        Just(1u64 << 63),
        Just(usize::MAX as u64 / 24 + 1),
        any::<u64>(),
    ]
}

/// `bytes` with `m` applied. `fields` lists the `(offset, width)` of the length and count
/// fields that `Mutation::Huge` may set (little-endian, width 1, 2, 4 or 8).
fn apply(bytes: &[u8], m: &Mutation, fields: &[(usize, usize)]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let len = b.len();
    match m {
        Mutation::Flip(n) if len > 0 => b[(n / 8) % len] ^= 1 << (n % 8),
        Mutation::Truncate(n) if len > 0 => b.truncate(n % len),
        Mutation::Extend(more) => b.extend_from_slice(more),
        Mutation::Overwrite(n, v) if len > 0 => b[n % len] = *v,
        Mutation::Huge(n, v) if !fields.is_empty() => {
            let (at, width) = fields[n % fields.len()];
            if at + width <= len {
                b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
            }
        }
        _ => {}
    }
    b
}

/// Every bit of `bytes[range]` flipped once, one at a time.
fn each_flip(
    bytes: &[u8],
    range: std::ops::Range<usize>,
) -> impl Iterator<Item = (usize, Vec<u8>)> {
    range.flat_map(move |i| {
        (0..8).map(move |bit| {
            let mut b = bytes.to_vec();
            b[i] ^= 1 << bit;
            (i * 8 + bit, b)
        })
    })
}

fn topic_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_][A-Za-z0-9._-]{0,40}|[a-z]{249}"
}

fn utf8_name() -> impl Strategy<Value = String> {
    // At most 62 chars of at most 4 bytes: never more than 249 bytes.
    "\\PC{1,62}".prop_filter("1..=249 bytes", |s| !s.is_empty() && s.len() <= 249)
}

// ---- File header. --------------------------------------------------------------------------

fn file_header() -> impl Strategy<Value = FileHeader> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(version, file_seq, file_size_bytes, block_size_bytes, created_us)| FileHeader {
                version,
                file_seq,
                file_size_bytes,
                block_size_bytes,
                created_us,
            },
        )
}

const FH_FIELDS: &[(usize, usize)] = &[
    (format::FH_VERSION, 4),
    (format::FH_FLAGS, 4),
    (format::FH_FILE_SEQ, 8),
    (format::FH_FILE_SIZE, 8),
    (format::FH_BLOCK_SIZE, 8),
];

fn reseal_file_header(b: &mut [u8]) {
    if b.len() >= format::FH_LEN {
        let crc = crc32fast::hash(&b[..format::FH_CRC]);
        format::put_u32(b, format::FH_CRC, crc);
    }
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn file_header_round_trips(h in file_header()) {
        prop_assert_eq!(FileHeader::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn file_header_rejects_or_keeps_mutations(h in file_header(), m in mutation()) {
        let good = h.encode();
        let bad = apply(&good, &m, FH_FIELDS);
        if let Ok(d) = FileHeader::decode(&bad) {
            prop_assert_eq!(d, h, "a mutation changed the fields: {:?}", m);
        }
        let mut resealed = bad;
        reseal_file_header(&mut resealed);
        if let Ok(d) = FileHeader::decode(&resealed) {
            prop_assert_eq!(FileHeader::decode(&d.encode()), Ok(d));
        }
    }

    #[test]
    fn file_header_takes_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = FileHeader::decode(&b);
        let mut sealed = b;
        if sealed.len() >= 8 {
            sealed[..8].copy_from_slice(&format::FILE_MAGIC);
        }
        reseal_file_header(&mut sealed);
        let _ = FileHeader::decode(&sealed);
    }
}

#[test]
fn file_header_every_bit_flip_is_rejected() {
    let h = FileHeader {
        version: 2,
        file_seq: 77,
        file_size_bytes: 1 << 30,
        block_size_bytes: 10 << 20,
        created_us: 1_700_000_000_000_000,
    };
    let good = h.encode();
    for (bit, bad) in each_flip(&good, 0..format::FH_LEN) {
        assert!(
            FileHeader::decode(&bad).is_err(),
            "flip of bit {bit} accepted"
        );
    }
}

// ---- Identity slot. ------------------------------------------------------------------------

fn identity() -> impl Strategy<Value = BlockIdentity> {
    (any::<[u32; 5]>(), any::<u64>(), any::<u64>(), utf8_name()).prop_map(
        |([version, topic_id, block_index, extent_count, salt], file_seq, first_offset, topic)| {
            BlockIdentity {
                version,
                topic_id,
                block_index,
                extent_count,
                salt,
                file_seq,
                first_offset,
                topic,
            }
        },
    )
}

const ID_FIELDS: &[(usize, usize)] = &[
    (format::ID_NAME_LEN, 4),
    (format::ID_BLOCK_COUNT, 4),
    (format::ID_BLOCK_INDEX, 4),
    (format::ID_FIRST_OFFSET, 8),
];

fn reseal_identity(b: &mut [u8]) {
    if b.len() >= format::ID_LEN {
        let crc = crc32fast::hash(&b[..format::ID_CRC]);
        format::put_u32(b, format::ID_CRC, crc);
    }
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn identity_round_trips(id in identity()) {
        prop_assert_eq!(BlockIdentity::decode(&id.encode()), Some(id));
    }

    #[test]
    fn identity_rejects_or_keeps_mutations(id in identity(), m in mutation()) {
        let good = id.encode();
        let bad = apply(&good, &m, ID_FIELDS);
        if let Some(d) = BlockIdentity::decode(&bad) {
            prop_assert_eq!(d, id.clone(), "a mutation changed the fields: {:?}", m);
        }
        let mut resealed = bad;
        reseal_identity(&mut resealed);
        if let Some(d) = BlockIdentity::decode(&resealed) {
            prop_assert!(!d.topic.is_empty() && d.topic.len() <= format::TOPIC_NAME_MAX);
            prop_assert_eq!(BlockIdentity::decode(&d.encode()), Some(d));
        }
    }

    #[test]
    fn identity_takes_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = BlockIdentity::decode(&b);
        let mut sealed = b;
        if sealed.len() >= 8 {
            sealed[..8].copy_from_slice(&format::BLOCK_MAGIC);
        }
        reseal_identity(&mut sealed);
        let _ = BlockIdentity::decode(&sealed);
    }
}

#[test]
fn identity_every_bit_flip_is_rejected() {
    let id = BlockIdentity {
        version: 1,
        topic_id: 3,
        block_index: 9,
        extent_count: 2,
        salt: 0xDEAD_BEEF,
        file_seq: 12,
        first_offset: 1000,
        topic: "orders.v1".into(),
    };
    let good = id.encode();
    // The name's zero padding is inside the checksum too.
    for (bit, bad) in each_flip(&good, 0..format::ID_LEN) {
        assert!(
            BlockIdentity::decode(&bad).is_none(),
            "flip of bit {bit} accepted"
        );
    }
}

// ---- Progress slot. ------------------------------------------------------------------------

fn progress_state() -> impl Strategy<Value = ProgressState> {
    prop_oneof![
        Just(ProgressState::Open),
        Just(ProgressState::Clean),
        Just(ProgressState::Sealed),
        Just(ProgressState::Deleted),
        Just(ProgressState::Consumed),
    ]
}

fn progress() -> impl Strategy<Value = Progress> {
    (progress_state(), any::<[u64; 4]>(), any::<u32>()).prop_map(
        |(state, [durable_end, record_count, max_timestamp_us, footer_count], footer_crc)| {
            Progress {
                state,
                durable_end,
                record_count,
                max_timestamp_us,
                footer_count,
                footer_crc,
            }
        },
    )
}

const PG_FIELDS: &[(usize, usize)] = &[
    (format::PG_STATE, 4),
    (format::PG_DURABLE_END, 8),
    (format::PG_RECORD_COUNT, 8),
    (format::PG_FOOTER_COUNT, 8),
];

fn reseal_progress(b: &mut [u8]) {
    if b.len() >= format::PG_LEN {
        let crc = crc32fast::hash(&b[..format::PG_CRC]);
        format::put_u32(b, format::PG_CRC, crc);
    }
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn progress_round_trips(p in progress()) {
        prop_assert_eq!(Progress::decode(&p.encode()), Some(p));
    }

    #[test]
    fn progress_rejects_or_keeps_mutations(p in progress(), m in mutation()) {
        let bad = apply(&p.encode(), &m, PG_FIELDS);
        if let Some(d) = Progress::decode(&bad) {
            prop_assert_eq!(d, p, "a mutation changed the fields: {:?}", m);
        }
        let mut resealed = bad;
        reseal_progress(&mut resealed);
        if let Some(d) = Progress::decode(&resealed) {
            prop_assert_eq!(Progress::decode(&d.encode()), Some(d));
        }
    }

    #[test]
    fn progress_takes_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = Progress::decode(&b);
        let mut sealed = b;
        if sealed.len() >= 4 {
            format::put_u32(&mut sealed, 0, format::PROGRESS_MAGIC);
        }
        reseal_progress(&mut sealed);
        let _ = Progress::decode(&sealed);
    }
}

#[test]
fn progress_every_bit_flip_is_rejected() {
    let p = Progress {
        state: ProgressState::Sealed,
        durable_end: 123_456,
        record_count: 99,
        max_timestamp_us: 5,
        footer_count: 3,
        footer_crc: 0x1234_5678,
    };
    let good = p.encode();
    for (bit, bad) in each_flip(&good, 0..format::PG_LEN) {
        assert!(
            Progress::decode(&bad).is_none(),
            "flip of bit {bit} accepted"
        );
    }
}

// ---- Commit copy. -------------------------------------------------------------------------

fn commit_copy() -> impl Strategy<Value = CommitCopy> {
    (
        any::<u32>(),
        0u64..(1 << 40),
        any::<[u64; 2]>(),
        proptest::collection::vec(any::<u8>(), 1..=format::CC_PAYLOAD_MAX),
    )
        .prop_map(
            |(salt, start, [record_count, max_timestamp_us], bytes)| CommitCopy {
                salt,
                start,
                record_count,
                max_timestamp_us,
                bytes,
            },
        )
}

const CC_FIELDS: &[(usize, usize)] = &[
    (format::CC_START, 8),
    (format::CC_BYTES, 4),
    (format::CC_RECORD_COUNT, 8),
];

/// Recomputes a copy slot's checksum over its header and the bytes its length field names
/// (when that length fits the slot).
fn reseal_copy(b: &mut [u8]) {
    if b.len() < format::CC_SLOT_LEN {
        return;
    }
    let len = format::get_u32(b, format::CC_BYTES) as usize;
    if len > format::CC_PAYLOAD_MAX {
        return;
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&b[..format::CC_CRC]);
    h.update(&b[format::CC_HEADER..format::CC_HEADER + len]);
    format::put_u32(b, format::CC_CRC, h.finalize());
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn commit_copy_round_trips(c in commit_copy()) {
        prop_assert_eq!(CommitCopy::decode(&c.encode()), Some(c));
    }

    #[test]
    fn commit_copy_rejects_or_keeps_mutations(c in commit_copy(), m in mutation()) {
        let bad = apply(&c.encode(), &m, CC_FIELDS);
        if let Some(d) = CommitCopy::decode(&bad) {
            prop_assert_eq!(d, c.clone(), "a mutation changed the fields: {:?}", m);
        }
        let mut resealed = bad;
        reseal_copy(&mut resealed);
        if let Some(d) = CommitCopy::decode(&resealed) {
            prop_assert!(d.end() >= d.start && !d.bytes.is_empty());
            prop_assert_eq!(CommitCopy::decode(&d.encode()), Some(d));
        }
    }

    #[test]
    fn commit_copy_takes_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = CommitCopy::decode(&b);
        let mut sealed = b;
        if sealed.len() >= 4 {
            format::put_u32(&mut sealed, 0, format::COMMIT_MAGIC);
        }
        reseal_copy(&mut sealed);
        let _ = CommitCopy::decode(&sealed);
    }
}

#[test]
fn commit_copy_every_bit_flip_is_rejected() {
    let c = CommitCopy {
        salt: 0xDEAD_BEEF,
        start: 4096,
        record_count: 17,
        max_timestamp_us: 1_700_000_000_000_000,
        bytes: (0..300u32).map(|i| (i * 7) as u8).collect(),
    };
    let good = c.encode();
    // The header and the copied bytes; the slot's unused tail is covered by nothing.
    for (bit, bad) in each_flip(&good, 0..format::CC_HEADER + c.bytes.len()) {
        assert!(
            CommitCopy::decode(&bad).is_none(),
            "flip of bit {bit} accepted"
        );
    }
}

// ---- Frames: format::decode_frame and Extent::decode_frame. ---------------------------------

#[derive(Debug, Clone)]
struct FrameCase {
    topic_id: u32,
    offset: u64,
    timestamp_us: u64,
    key: Option<Vec<u8>>,
    /// Encoded header entries (built by `tidelog::Headers`), if any.
    headers: Option<Vec<u8>>,
    value: Vec<u8>,
    batch_count: u32,
    salt: u32,
    /// Bytes before the frame in the slice it is decoded from.
    position: usize,
}

type HeaderPairs = Vec<(String, Option<Vec<u8>>)>;

/// Up to four headers (none half the time), keys repeating, values sometimes null.
fn header_pairs() -> impl Strategy<Value = HeaderPairs> {
    prop_oneof![
        Just(Vec::new()),
        proptest::collection::vec(
            (
                "[a-cé]{0,3}",
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..140)),
            ),
            1..4,
        ),
    ]
}

fn encode_headers(pairs: &HeaderPairs) -> Option<Vec<u8>> {
    let h = Headers::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_deref())))
        .expect("valid headers");
    h.block().map(|b| b.as_bytes().to_vec())
}

fn frame_case() -> impl Strategy<Value = FrameCase> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..24)),
        proptest::collection::vec(any::<u8>(), 0..96),
        any::<u32>(),
        any::<u32>(),
        0usize..48,
        header_pairs(),
    )
        .prop_map(
            |(topic_id, offset, timestamp_us, key, value, batch_count, salt, position, pairs)| {
                FrameCase {
                    topic_id,
                    offset,
                    timestamp_us,
                    key,
                    headers: encode_headers(&pairs),
                    value,
                    batch_count,
                    salt,
                    position,
                }
            },
        )
}

impl FrameCase {
    fn fields(&self) -> FrameFields {
        FrameFields {
            topic_id: self.topic_id,
            offset: self.offset,
            timestamp_us: self.timestamp_us,
            batch_count: self.batch_count,
        }
    }

    fn parts(&self) -> FrameParts<'_> {
        FrameParts {
            key: self.key.as_deref(),
            headers: self.headers.as_deref(),
            value: &self.value,
        }
    }

    fn payload(&self) -> usize {
        self.parts().payload_len() as usize
    }

    /// The slice: `position` filler bytes, then the padded frame.
    fn encode(&self) -> Vec<u8> {
        let padded = format::frame_padded_len(self.payload() as u64) as usize;
        let mut b = vec![0xA5; self.position + padded];
        let n = format::encode_frame_into(
            &mut b[self.position..],
            &self.fields(),
            self.salt,
            &self.parts(),
        );
        assert_eq!(n, padded);
        b
    }

    fn decode(&self, b: &[u8]) -> Result<format::FrameView, format::FrameError> {
        format::decode_frame(
            b,
            self.position,
            self.salt,
            self.topic_id,
            self.offset,
            true,
        )
    }

    fn fields_at(&self) -> Vec<(usize, usize)> {
        [
            (format::FR_LEN, 4),
            (format::FR_KEY_LEN, 4),
            (format::FR_BATCH_COUNT, 4),
            (format::FR_OFFSET, 8),
        ]
        .iter()
        .map(|&(at, w)| (self.position + at, w))
        .collect()
    }

    /// Recomputes the checksum over what the (possibly mutated) header calls the frame.
    fn reseal(&self, b: &mut [u8]) {
        let p = self.position;
        let Some(h) = b.get(p..p + FRAME_HEADER) else {
            return;
        };
        let frame_len = format::get_u32(h, format::FR_LEN) as usize;
        if frame_len >= FRAME_HEADER && p + frame_len <= b.len() {
            let mut crc = crc32fast::Hasher::new_with_initial(self.salt);
            crc.update(&b[p + format::FR_CRC_FROM..p + frame_len]);
            format::put_u32(b, p + format::FR_CRC, crc.finalize());
        }
    }
}

/// A frame view checked against the bytes it points into: ranges inside the slice.
fn check_view(b: &[u8], v: &format::FrameView) -> Result<(), TestCaseError> {
    prop_assert!(v.value.start <= v.value.end && v.value.end <= b.len());
    let after_key = match &v.headers {
        Some(h) => {
            prop_assert!(h.start < h.end && h.end == v.value.start);
            // The entries parse, as every reader of them assumes.
            prop_assert!(tidelog::HeaderBlock::parse(&b[h.clone()]).is_ok());
            h.start - format::HEADERS_LEN_BYTES
        }
        None => v.value.start,
    };
    if let Some(k) = &v.key {
        prop_assert!(k.start <= k.end && k.end == after_key);
    }
    prop_assert!(v.next_position >= v.value.end);
    Ok(())
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn frame_round_trips(c in frame_case()) {
        let b = c.encode();
        let v = c.decode(&b).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(v.offset, c.offset);
        prop_assert_eq!(v.timestamp_us, c.timestamp_us);
        prop_assert_eq!(v.batch_count, c.batch_count);
        prop_assert_eq!(v.key.clone().map(|k| b[k].to_vec()), c.key.clone());
        prop_assert_eq!(v.headers.clone().map(|h| b[h].to_vec()), c.headers.clone());
        prop_assert_eq!(&b[v.value.clone()], &c.value[..]);
        prop_assert_eq!(v.next_position, b.len());
    }

    #[test]
    fn frame_rejects_or_keeps_mutations(c in frame_case(), m in mutation()) {
        let good = c.encode();
        let want = c.decode(&good).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let bad = apply(&good, &m, &c.fields_at());
        if let Ok(v) = c.decode(&bad) {
            prop_assert_eq!(v, want, "a mutation changed the frame: {:?}", m);
        }
        let mut resealed = bad;
        c.reseal(&mut resealed);
        if let Ok(v) = c.decode(&resealed) {
            check_view(&resealed, &v)?;
        }
        // Unverified decoding (a reader that trusts durable bytes) still bounds everything.
        if let Ok(v) = format::decode_frame(&resealed, c.position, 0, c.topic_id, c.offset, false) {
            check_view(&resealed, &v)?;
        }
    }

    #[test]
    fn frame_takes_any_bytes(
        b in proptest::collection::vec(any::<u8>(), 0..160),
        position in prop_oneof![0usize..200, Just(usize::MAX), Just(usize::MAX - 39)],
        salt in any::<u32>(),
        topic_id in any::<u32>(),
        offset in any::<u64>(),
        verify in any::<bool>(),
    ) {
        if let Ok(v) = format::decode_frame(&b, position, salt, topic_id, offset, verify) {
            check_view(&b, &v)?;
        }
    }
}

#[test]
fn frame_every_bit_flip_is_rejected_and_padding_is_ignored() {
    let c = FrameCase {
        topic_id: 7,
        offset: 42,
        timestamp_us: 1_700_000_000_000_000,
        key: Some(b"key".to_vec()),
        headers: encode_headers(&vec![
            ("trace".to_owned(), Some(b"t1".to_vec())),
            ("empty".to_owned(), None),
        ]),
        value: b"some value".to_vec(),
        batch_count: 1,
        salt: 0xABCD,
        position: 8,
    };
    let good = c.encode();
    let want = c.decode(&good).expect("valid");
    let frame_end = c.position + FRAME_HEADER + c.payload();
    for (bit, bad) in each_flip(&good, c.position..frame_end) {
        assert!(c.decode(&bad).is_err(), "flip of bit {bit} accepted");
    }
    // Padding and the bytes before the frame are not part of it.
    for i in (0..c.position).chain(frame_end..good.len()) {
        for bit in 0..8 {
            let mut bad = good.clone();
            bad[i] ^= 1 << bit;
            assert_eq!(
                c.decode(&bad),
                Ok(want.clone()),
                "flip outside the frame at byte {i}"
            );
        }
    }
}

/// Regression: a position near `usize::MAX` overflowed `position + FRAME_HEADER`.
#[test]
fn frame_at_a_huge_position_is_truncated_not_a_panic() {
    for position in [usize::MAX, usize::MAX - 39, usize::MAX - 40, usize::MAX - 7] {
        assert_eq!(
            format::decode_frame(&[0u8; 64], position, 0, 0, 0, true),
            Err(format::FrameError::Truncated)
        );
    }
}

// Extent::decode_frame: the extent's version decides what a frame stores.

/// An extent of data-file `version` (1 to 4) whose first offset is [`FIXTURE_FIRST_OFFSET`].
fn fixture(version: u32) -> &'static (tempfile::TempDir, ExtentFixture) {
    static CELLS: [OnceLock<(tempfile::TempDir, ExtentFixture)>; 4] =
        [const { OnceLock::new() }; 4];
    CELLS[version as usize - 1].get_or_init(|| {
        let dir = tempdir();
        let f = ExtentFixture::create(dir.path(), version, 2, 5, 0x5A17, FIXTURE_FIRST_OFFSET)
            .expect("extent fixture");
        (dir, f)
    })
}

const FIXTURE_FIRST_OFFSET: u64 = 1_000_000;

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn block_decode_frame_maps_relative_offsets(
        index in 0u64..10_000,
        value in proptest::collection::vec(any::<u8>(), 0..64),
        asked in any::<u64>(),
        position in any::<u64>(),
    ) {
        let (_, rel) = fixture(format::VERSION_RELATIVE);
        let fields = FrameFields {
            topic_id: 0,
            offset: index,
            timestamp_us: 3,
            batch_count: 1,
        };
        let parts = FrameParts { key: None, headers: None, value: &value };
        let mut b = vec![0u8; format::frame_padded_len(value.len() as u64) as usize];
        format::encode_frame_into(&mut b, &fields, 0x5A17, &parts);
        let v = rel.decode_frame(&b, 0, FIXTURE_FIRST_OFFSET + index, true)
            .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(v.offset, FIXTURE_FIRST_OFFSET + index);
        // Any other offset, or one below the extent's first, is rejected.
        if asked != FIXTURE_FIRST_OFFSET + index {
            prop_assert!(rel.decode_frame(&b, 0, asked, true).is_err());
        }
        // An absolute extent wants its own topic id and the offset itself.
        let (_, abs) = fixture(format::VERSION_ABSOLUTE);
        prop_assert!(abs.decode_frame(&b, 0, index, true).is_err());
        let _ = abs.decode_frame(&b, position, asked, true);
        let _ = rel.decode_frame(&b, position, asked, false);
    }

    #[test]
    fn block_decode_batch_maps_relative_offsets(
        index in 0u64..10_000,
        values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..5),
        asked in any::<u64>(),
        position in any::<u64>(),
    ) {
        // A batch frame of a staged segment: topic id 0, base offset the index in the extent.
        let (_, rel) = fixture(format::VERSION_RELATIVE_BATCHED);
        let records: Vec<BatchRecord<'_>> = values
            .iter()
            .map(|v| BatchRecord {
                parts: FrameParts { key: None, headers: None, value: v },
                timestamp_us: 3,
            })
            .collect();
        let head = BatchHead { topic_id: 0, base_offset: index, base_timestamp_us: 3 };
        let mut b = vec![0u8; batch::frame_len(records.iter().copied()) as usize];
        batch::encode(&mut b, &head, 0x5A17, records.iter().copied());
        let mut position_of = 0;
        let mut checked = format::Checked::default();
        for (i, v) in values.iter().enumerate() {
            let offset = FIXTURE_FIRST_OFFSET + index + i as u64;
            let view = rel.decode_frame(&b, position_of, offset, true)
                .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            prop_assert_eq!(view.offset, offset);
            prop_assert_eq!(&b[view.value.clone()], &v[..]);
            let walked = rel.decode_walking(&b, position_of, offset, true, &mut checked)
                .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            prop_assert_eq!(walked.offset, offset);
            if asked != offset {
                prop_assert!(rel.decode_frame(&b, position_of, asked, true).is_err());
            }
            position_of = view.next_position as u64;
        }
        // An extent of version 3 wants its own topic id and the offsets themselves.
        let (_, abs) = fixture(format::VERSION_BATCHED);
        prop_assert!(abs.decode_frame(&b, 0, index, true).is_err());
        prop_assert!(abs.decode_frame(&b, 0, FIXTURE_FIRST_OFFSET + index, true).is_err());
        let _ = abs.decode_frame(&b, position, asked, true);
        let _ = rel.decode_frame(&b, position, asked, false);
    }
}

// ---- Index footer: IndexEntry::decode and Extent::read_footer. ------------------------------

fn entry() -> impl Strategy<Value = IndexEntry> {
    any::<[u64; 3]>().prop_map(|[offset, position, max_timestamp_us]| IndexEntry {
        offset,
        position,
        max_timestamp_us,
    })
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn index_entry_round_trips(e in entry(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut b = e.encode().to_vec();
        b.extend_from_slice(&tail);
        prop_assert_eq!(IndexEntry::decode(&b), Some(e));
        for cut in 0..format::IX_LEN {
            prop_assert_eq!(IndexEntry::decode(&b[..cut]), None);
        }
    }
}

/// A sealed footer of `entries` at `durable_end` in `f`, and the progress slot naming it.
fn write_footer(
    f: &ExtentFixture,
    durable_end: u64,
    entries: &[IndexEntry],
) -> (Vec<u8>, Progress) {
    let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
    f.write(durable_end, &bytes);
    let p = Progress {
        state: ProgressState::Sealed,
        durable_end,
        record_count: entries.len() as u64,
        max_timestamp_us: 0,
        footer_count: entries.len() as u64,
        footer_crc: crc32fast::hash(&bytes),
    };
    (bytes, p)
}

fn footer_fixture() -> &'static (tempfile::TempDir, ExtentFixture) {
    static CELL: OnceLock<(tempfile::TempDir, ExtentFixture)> = OnceLock::new();
    CELL.get_or_init(|| {
        let dir = tempdir();
        let f = ExtentFixture::create(
            dir.path(),
            format::VERSION_RELATIVE,
            1,
            0,
            1,
            FIXTURE_FIRST_OFFSET,
        )
        .expect("extent fixture");
        (dir, f)
    })
}

proptest! {
    #![proptest_config(config(2))]

    #[test]
    fn footer_round_trips_and_rejects_damage(
        entries in proptest::collection::vec(
            any::<[u32; 3]>().prop_map(|[o, p, t]| IndexEntry {
                offset: u64::from(o),
                position: u64::from(p),
                max_timestamp_us: u64::from(t),
            }),
            0..40,
        ),
        durable_end in 4096u64..8192,
        m in mutation(),
        progress_mutation in mutation(),
    ) {
        let (_, f) = footer_fixture();
        let (bytes, p) = write_footer(f, durable_end, &entries);
        let read = f.read_footer(&p).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let want: Vec<IndexEntry> = entries
            .iter()
            .map(|e| IndexEntry { offset: e.offset + FIXTURE_FIRST_OFFSET, ..*e })
            .collect();
        prop_assert_eq!(&read, &want);
        // Damaged footer bytes (same length) fail the footer checksum.
        let bad = apply(&bytes, &m, &[]);
        if bad.len() == bytes.len() && bad != bytes {
            f.write(durable_end, &bad);
            prop_assert!(f.read_footer(&p).is_err(), "damaged footer accepted: {:?}", m);
        }
        // Whatever a (checksummed) progress slot says, reading the footer is bounded.
        let mut slot = apply(&p.encode(), &progress_mutation, PG_FIELDS);
        reseal_progress(&mut slot);
        if let Some(q) = Progress::decode(&slot)
            && let Ok(got) = f.read_footer(&q)
        {
            let end = q.durable_end.checked_add(got.len() as u64 * 24);
            prop_assert!(end.is_some_and(|end| end <= f.extent_bytes()));
        }
    }

    #[test]
    fn footer_read_takes_any_progress(p in progress()) {
        let (_, f) = footer_fixture();
        let _ = f.read_footer(&p);
    }
}

/// Regression: `footer_count * 24` and `durable_end + footer bytes` overflowed.
#[test]
fn footer_with_huge_counts_is_corruption_not_a_panic() {
    let (_, f) = footer_fixture();
    for (durable_end, footer_count) in [
        (4096, u64::MAX),
        (4096, usize::MAX as u64 / 24 + 1),
        (u64::MAX, 1),
        (u64::MAX - 10, 0),
        (u64::MAX / 2, u64::MAX / 48),
    ] {
        let p = Progress {
            state: ProgressState::Sealed,
            durable_end,
            record_count: 1,
            max_timestamp_us: 0,
            footer_count,
            footer_crc: 0,
        };
        assert!(f.read_footer(&p).is_err(), "{durable_end} {footer_count}");
    }
}

/// Regression: an adopted extent's footer offsets are relative; one near `u64::MAX` overflowed
/// when the extent's first offset was added.
#[test]
fn footer_offset_past_the_largest_offset_is_corruption_not_a_panic() {
    let dir = tempdir();
    let f = ExtentFixture::create(
        dir.path(),
        format::VERSION_RELATIVE,
        1,
        0,
        1,
        FIXTURE_FIRST_OFFSET,
    )
    .expect("fixture");
    for offset in [u64::MAX, u64::MAX - FIXTURE_FIRST_OFFSET + 1] {
        let e = IndexEntry {
            offset,
            position: 4096,
            max_timestamp_us: 1,
        };
        let (_, p) = write_footer(&f, 8192, &[e]);
        assert!(f.read_footer(&p).is_err(), "{offset}");
    }
}

#[test]
fn footer_every_bit_flip_is_rejected() {
    let dir = tempdir();
    let f =
        ExtentFixture::create(dir.path(), format::VERSION_ABSOLUTE, 1, 1, 2, 0).expect("fixture");
    let entries: Vec<IndexEntry> = (0..4)
        .map(|i| IndexEntry {
            offset: i * 10,
            position: 4096 + i * 4096,
            max_timestamp_us: 100 + i,
        })
        .collect();
    let (bytes, p) = write_footer(&f, 8192, &entries);
    assert_eq!(f.read_footer(&p).expect("valid"), entries);
    for (bit, bad) in each_flip(&bytes, 0..bytes.len()) {
        f.write(8192, &bad);
        assert!(
            f.read_footer(&p).is_err(),
            "flip of footer bit {bit} accepted"
        );
    }
}

// ---- Cursor slots. -------------------------------------------------------------------------

fn cursor_record() -> impl Strategy<Value = CursorRecord> {
    (topic_name(), topic_name(), any::<[u64; 3]>()).prop_map(
        |(topic, group, [offset, generation, updated_us])| CursorRecord {
            topic,
            group,
            offset,
            generation,
            updated_us,
        },
    )
}

const CS_FIELDS: &[(usize, usize)] = &[
    (format::CS_LEN, 4),
    (format::CS_LEN, 2),
    (format::CS_LEN, 1),
];

/// Recomputes a slot's body checksum over what its (possibly mutated) length field names.
fn reseal_cursor(b: &mut [u8]) {
    if b.len() < format::CS_BODY {
        return;
    }
    let len = format::get_u32(b, format::CS_LEN) as usize;
    if let Some(body) = b.get(format::CS_BODY..format::CS_BODY.saturating_add(len)) {
        let crc = crc32fast::hash(body);
        format::put_u32(b, format::CS_CRC, crc);
    }
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn cursor_slot_round_trips(r in cursor_record()) {
        let slot = internals::encode_cursor_slot(&r).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(slot.len(), format::CURSOR_SLOT_BYTES);
        prop_assert_eq!(internals::decode_cursor_slot(&slot), Some(r));
    }

    #[test]
    fn cursor_slot_rejects_or_keeps_mutations(r in cursor_record(), m in mutation()) {
        let slot = internals::encode_cursor_slot(&r).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let bad = apply(&slot, &m, CS_FIELDS);
        if let Some(d) = internals::decode_cursor_slot(&bad) {
            prop_assert_eq!(d, r, "a mutation changed the cursor: {:?}", m);
        }
        // With the checksum recomputed, the archive's own validation must hold the line.
        let mut resealed = bad;
        reseal_cursor(&mut resealed);
        let _ = internals::decode_cursor_slot(&resealed);
    }

    #[test]
    fn cursor_slot_takes_any_body(body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut slot = vec![0u8; format::CS_BODY + body.len()];
        format::put_u32(&mut slot, format::CS_MAGIC, format::CURSOR_MAGIC);
        format::put_u32(&mut slot, format::CS_LEN, body.len() as u32);
        format::put_u32(&mut slot, format::CS_CRC, crc32fast::hash(&body));
        slot[format::CS_BODY..].copy_from_slice(&body);
        let _ = internals::decode_cursor_slot(&slot);
        let _ = internals::decode_cursor_slot(&body);
    }
}

#[test]
fn cursor_slot_every_bit_flip_is_rejected_and_padding_is_ignored() {
    let r = CursorRecord {
        topic: "orders".into(),
        group: "billing".into(),
        offset: 42,
        generation: 7,
        updated_us: 1_700_000_000_000_000,
    };
    let slot = internals::encode_cursor_slot(&r).expect("encode");
    let body_end = format::CS_BODY + format::get_u32(&slot, format::CS_LEN) as usize;
    for (bit, bad) in each_flip(&slot, 0..body_end) {
        assert_eq!(
            internals::decode_cursor_slot(&bad),
            None,
            "flip of bit {bit} accepted"
        );
    }
    for (bit, bad) in each_flip(&slot, body_end..slot.len()) {
        assert_eq!(
            internals::decode_cursor_slot(&bad),
            Some(r.clone()),
            "padding bit {bit}"
        );
    }
}

// ---- Journal entries (no checksum of their own: the ring record's body checksum). ----------

#[derive(Debug, Clone)]
struct JournalRecord {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    timestamp_us: u64,
    headers: Option<Vec<u8>>,
}

fn journal_records() -> impl Strategy<Value = Vec<JournalRecord>> {
    proptest::collection::vec(
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16)),
            proptest::collection::vec(any::<u8>(), 0..32),
            any::<u64>(),
            prop_oneof![3 => Just(Vec::new()), 1 => header_pairs()],
        )
            .prop_map(|(key, value, timestamp_us, pairs)| JournalRecord {
                key,
                value,
                timestamp_us,
                headers: encode_headers(&pairs),
            }),
        1..6,
    )
}

fn encode_journal(name: &str, first: u64, records: &[JournalRecord]) -> Vec<u8> {
    let appends: Vec<Append<'_>> = records
        .iter()
        .map(|r| Append {
            headers: r
                .headers
                .as_deref()
                .map(|h| HeaderBlock::parse(h).expect("valid headers")),
            key: r.key.as_deref(),
            value: &r.value,
            timestamp_us: Some(r.timestamp_us),
        })
        .collect();
    internals::encode_journal_entry(name, first, &appends, 0)
}

/// Decodes `b` and, when it is accepted, checks that it is the canonical encoding of what it
/// decoded to: an accepted entry cannot carry bytes the decoder ignored.
fn journal_canonical(b: Vec<u8>) -> Result<bool, String> {
    terminates(LIMIT, move || {
        let Ok((topic, first, records)) = internals::decode_journal_entry(&b) else {
            return Ok(false);
        };
        let owned: Vec<JournalRecord> = records
            .iter()
            .map(|a| JournalRecord {
                key: a.key.map(<[u8]>::to_vec),
                value: a.value.to_vec(),
                timestamp_us: a.timestamp_us.unwrap_or(0),
                headers: a.headers.map(|h| h.as_bytes().to_vec()),
            })
            .collect();
        if tidelog::validate_name(topic).is_err() || records.is_empty() {
            return Err(format!(
                "accepted a bad entry: {topic:?}, {} records",
                records.len()
            ));
        }
        if encode_journal(topic, first, &owned) != b {
            return Err("an accepted entry is not the encoding of what it decoded to".into());
        }
        Ok(true)
    })
}

const EH_FIELDS: &[(usize, usize)] = &[(2, 2), (4, 4), (8, 8)];

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn journal_entry_round_trips(name in topic_name(), first in 0u64..u64::MAX / 2, records in journal_records()) {
        let b = encode_journal(&name, first, &records);
        let (topic, f, got) = internals::decode_journal_entry(&b).map_err(TestCaseError::fail)?;
        prop_assert_eq!(topic, name.as_str());
        prop_assert_eq!(f, first);
        prop_assert_eq!(got.len(), records.len());
        for (a, r) in got.iter().zip(&records) {
            prop_assert_eq!(a.key, r.key.as_deref());
            prop_assert_eq!(a.value, &r.value[..]);
            prop_assert_eq!(a.timestamp_us, Some(r.timestamp_us));
            prop_assert_eq!(a.headers.map(HeaderBlock::as_bytes), r.headers.as_deref());
        }
    }

    #[test]
    fn journal_entry_mutations_are_bounded_and_canonical(
        name in topic_name(),
        first in any::<u64>(),
        records in journal_records(),
        m in mutation(),
        m2 in mutation(),
    ) {
        let good = encode_journal(&name, first, &records);
        // Record length fields of the first record, after the name.
        let r0 = 16 + name.len();
        let mut fields = EH_FIELDS.to_vec();
        fields.extend([(r0 + 8, 4), (r0 + 12, 4)]);
        let bad = apply(&apply(&good, &m, &fields), &m2, &fields);
        journal_canonical(bad).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn journal_entry_takes_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..256)) {
        journal_canonical(b.clone()).map_err(TestCaseError::fail)?;
        // The same bytes behind a plausible header, to get past the first checks.
        let mut framed = vec![1u8, 1, 3, 0];
        framed.extend_from_slice(&(b.first().copied().unwrap_or(1) as u32 % 8).to_le_bytes());
        framed.extend_from_slice(&[0; 8]);
        framed.extend_from_slice(b"abc");
        framed.extend_from_slice(&b);
        journal_canonical(framed).map_err(TestCaseError::fail)?;
    }
}

// ---- Ring: header slots, block headers, records. -------------------------------------------

fn ring_header() -> impl Strategy<Value = rf::RingHeader> {
    (any::<[u64; 6]>(), any::<[u32; 3]>(), any::<bool>()).prop_map(
        |(
            [
                capacity_bytes,
                generation,
                trim_offset,
                trim_block_offset,
                window_max_bytes,
                clean_end_offset,
            ],
            [align_bytes, ring_id, epoch],
            clean,
        )| {
            rf::RingHeader {
                version: rf::RING_VERSION,
                capacity_bytes,
                align_bytes,
                ring_id,
                generation,
                epoch,
                shutdown: if clean {
                    rf::Shutdown::Clean
                } else {
                    rf::Shutdown::Unclean
                },
                trim_offset,
                trim_block_offset,
                window_max_bytes,
                clean_end_offset,
            }
        },
    )
}

fn reseal_ring_header(b: &mut [u8]) {
    if b.len() >= rf::RH_LEN {
        let crc = crc32fast::hash(&b[..rf::RH_CRC]);
        format::put_u32(b, rf::RH_CRC, crc);
    }
}

fn block_header() -> impl Strategy<Value = rf::BlockHeader> {
    (any::<bool>(), any::<u64>(), any::<[u32; 4]>()).prop_map(
        |(data, start_offset, [ring_id, epoch, payload, records])| {
            if data {
                rf::BlockHeader {
                    kind: rf::BLOCK_KIND_DATA,
                    start_offset,
                    ring_id,
                    epoch,
                    payload_bytes: payload,
                    record_count: records.max(1),
                    durable_before: None,
                }
            } else {
                rf::BlockHeader {
                    kind: rf::BLOCK_KIND_PAD,
                    start_offset,
                    ring_id,
                    epoch,
                    payload_bytes: 0,
                    record_count: 0,
                    durable_before: None,
                }
            }
        },
    )
}

fn reseal_block_header(b: &mut [u8]) {
    if b.len() >= rf::BH_LEN {
        let crc = crc32fast::hash(&b[..rf::BH_CRC]);
        format::put_u32(b, rf::BH_CRC, crc);
    }
}

fn reseal_record(b: &mut [u8]) {
    if b.len() >= rf::RR_HEADER_LEN {
        let len = format::get_u32(b, rf::RR_LEN) as usize;
        if let Some(body) = b.get(rf::RR_HEADER_LEN..rf::RR_HEADER_LEN.saturating_add(len)) {
            let crc = crc32fast::hash(body);
            format::put_u32(b, rf::RR_BODY_CRC, crc);
        }
        let crc = crc32fast::hash(&b[..rf::RR_HEADER_CRC]);
        format::put_u32(b, rf::RR_HEADER_CRC, crc);
    }
}

const RH_FIELDS: &[(usize, usize)] = &[
    (rf::RH_CAPACITY, 8),
    (rf::RH_ALIGN, 4),
    (rf::RH_TRIM, 8),
    (rf::RH_TRIM_BLOCK, 8),
    (rf::RH_WINDOW_MAX, 8),
    (rf::RH_SHUTDOWN, 4),
    (rf::RH_VERSION, 4),
];
const BH_FIELDS: &[(usize, usize)] = &[(rf::BH_PAYLOAD, 4), (rf::BH_RECORDS, 4), (rf::BH_KIND, 2)];
const RR_FIELDS: &[(usize, usize)] = &[(rf::RR_LEN, 4), (rf::RR_BODY_OFFSET, 8)];

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn ring_header_round_trips_and_rejects_mutations(h in ring_header(), m in mutation()) {
        let good = h.encode();
        prop_assert_eq!(rf::RingHeader::decode(&good), Ok(h));
        let bad = apply(&good, &m, RH_FIELDS);
        if let Ok(d) = rf::RingHeader::decode(&bad) {
            prop_assert_eq!(d, h, "a mutation changed the header: {:?}", m);
        }
        let mut resealed = bad;
        reseal_ring_header(&mut resealed);
        if let Ok(d) = rf::RingHeader::decode(&resealed) {
            prop_assert_eq!(rf::RingHeader::decode(&d.encode()), Ok(d));
        }
    }

    #[test]
    fn block_header_round_trips_and_rejects_mutations(h in block_header(), m in mutation(), other in any::<u64>()) {
        let mut good = [0u8; rf::BH_LEN];
        h.encode_into(&mut good);
        prop_assert_eq!(rf::BlockHeader::decode(&good, h.start_offset, h.ring_id), Ok(h));
        if other != h.start_offset {
            prop_assert!(rf::BlockHeader::decode(&good, other, h.ring_id).is_err());
        }
        let bad = apply(&good, &m, BH_FIELDS);
        if let Ok(d) = rf::BlockHeader::decode(&bad, h.start_offset, h.ring_id) {
            prop_assert_eq!(d, h, "a mutation changed the block header: {:?}", m);
        }
        let mut resealed = bad;
        reseal_block_header(&mut resealed);
        let _ = rf::BlockHeader::decode(&resealed, h.start_offset, h.ring_id);
    }

    #[test]
    fn record_round_trips_and_rejects_mutations(
        offset in prop_oneof![0..u64::MAX - 24, Just(u64::MAX - 24)],
        body in proptest::collection::vec(any::<u8>(), 0..96),
        room in 0usize..16,
        m in mutation(),
    ) {
        let mut good = vec![0u8; rf::RR_HEADER_LEN + body.len() + room];
        rf::encode_record(&mut good, offset, &body, crc32fast::hash(&body));
        prop_assert_eq!(rf::decode_record(&good, offset), Ok(body.len()));
        let bad = apply(&good, &m, RR_FIELDS);
        if let Ok(n) = rf::decode_record(&bad, offset) {
            prop_assert_eq!(n, body.len());
            prop_assert_eq!(&bad[..rf::RR_HEADER_LEN + n], &good[..rf::RR_HEADER_LEN + n], "{:?}", m);
        }
        let mut resealed = bad;
        reseal_record(&mut resealed);
        if let Ok(h) = rf::decode_record_header(&resealed, offset) {
            prop_assert!(rf::RR_HEADER_LEN + h.len <= resealed.len());
        }
        // A mutation of the body-offset field, resealed, names another offset, where the
        // record then rightly decodes; everywhere else it must not.
        let named = resealed
            .get(rf::RR_BODY_OFFSET..rf::RR_BODY_OFFSET + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(|b| u64::from_le_bytes(b).wrapping_sub(rf::RR_HEADER_LEN as u64));
        for other in [offset.wrapping_add(4096), u64::MAX, u64::MAX - 23] {
            if Some(other) != named {
                prop_assert!(rf::decode_record(&resealed, other).is_err());
            }
        }
    }

    #[test]
    fn ring_decoders_take_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..128), at in any::<u64>(), ring_id in any::<u32>()) {
        let _ = rf::RingHeader::decode(&b);
        let _ = rf::BlockHeader::decode(&b, at, ring_id);
        let _ = rf::decode_record(&b, at);
        let mut sealed = b;
        let magic = |b: &mut Vec<u8>, m: u32| {
            if b.len() >= 4 {
                format::put_u32(b, 0, m);
            }
        };
        magic(&mut sealed, rf::HEADER_MAGIC);
        reseal_ring_header(&mut sealed);
        let _ = rf::RingHeader::decode(&sealed);
        magic(&mut sealed, rf::BLOCK_MAGIC);
        reseal_block_header(&mut sealed);
        let _ = rf::BlockHeader::decode(&sealed, at, ring_id);
        magic(&mut sealed, rf::RECORD_MAGIC);
        reseal_record(&mut sealed);
        if let Ok(h) = rf::decode_record_header(&sealed, at) {
            prop_assert!(rf::RR_HEADER_LEN + h.len <= sealed.len());
        }
    }
}

/// Regression: `offset + 24` overflowed for a record expected near the end of the offsets.
#[test]
fn record_at_the_largest_offsets_is_rejected_not_a_panic() {
    let mut b = vec![0u8; 64];
    rf::encode_record(&mut b, 0, b"x", crc32fast::hash(b"x"));
    for offset in [u64::MAX, u64::MAX - 23, u64::MAX - 1] {
        assert!(rf::decode_record(&b, offset).is_err());
        assert!(rf::decode_record_header(&b, offset).is_err());
    }
}

#[test]
fn ring_structures_every_bit_flip_is_rejected() {
    let h = rf::RingHeader {
        version: rf::RING_VERSION,
        capacity_bytes: 1 << 30,
        align_bytes: 4096,
        ring_id: 0x1234,
        generation: 9,
        epoch: 3,
        shutdown: rf::Shutdown::Clean,
        trim_offset: 5000,
        trim_block_offset: 4096,
        window_max_bytes: 1 << 20,
        clean_end_offset: 1 << 20,
    };
    let good = h.encode();
    for (bit, bad) in each_flip(&good, 0..rf::RH_LEN) {
        assert!(
            rf::RingHeader::decode(&bad).is_err(),
            "ring header bit {bit}"
        );
    }
    let bh = rf::BlockHeader {
        kind: rf::BLOCK_KIND_DATA,
        start_offset: 8192,
        ring_id: 0x1234,
        epoch: 3,
        payload_bytes: 100,
        record_count: 2,
        durable_before: Some(4096),
    };
    let mut good = [0u8; rf::BH_LEN];
    bh.encode_into(&mut good);
    for (bit, bad) in each_flip(&good, 0..rf::BH_LEN) {
        assert!(
            rf::BlockHeader::decode(&bad, 8192, 0x1234).is_err(),
            "block header bit {bit}"
        );
    }
    let mut good = vec![0u8; rf::RR_HEADER_LEN + 11];
    rf::encode_record(
        &mut good,
        8232,
        b"hello world",
        crc32fast::hash(b"hello world"),
    );
    for (bit, bad) in each_flip(&good, 0..good.len()) {
        assert!(rf::decode_record(&bad, 8232).is_err(), "record bit {bit}");
    }
}

// The ring scan (`ring/scan.rs`) over a whole ring file: damage anywhere in the ring area ends
// the recovered log at the damaged block, so what comes back is a prefix of what was written.

struct RingImage {
    _dir: tempfile::TempDir,
    bytes: Vec<u8>,
    records: Vec<(u64, Vec<u8>)>,
    /// End of the written blocks (logical offsets start at 0: byte `RING_START + o`).
    end: u64,
}

const RING_CAPACITY: u64 = rf::CAPACITY_MIN + 16 * rf::ALIGN_BYTES;

fn ring_config() -> tidelog::RingConfig {
    tidelog::RingConfig::default()
        .capacity_bytes(RING_CAPACITY)
        .block_bytes(8 << 10)
        .max_record_bytes(8 << 10)
        .block_delay_us(0)
        .inflight_blocks(1)
        .io_engine(tidelog::IoEngine::Threads)
}

fn ring_image() -> &'static RingImage {
    static CELL: OnceLock<RingImage> = OnceLock::new();
    CELL.get_or_init(|| {
        let dir = tempdir();
        let path = dir.path().join("ring");
        let ring = RingWal::open(&path, ring_config().format(true)).expect("ring");
        let mut records = Vec::new();
        for i in 0..40u64 {
            let body: Vec<u8> = (0..(i * 37 % 700) as usize)
                .map(|j| (i as usize * 31 + j) as u8)
                .collect();
            let a = ring.append(&body).expect("append");
            records.push((a, body));
        }
        let records: Vec<(u64, Vec<u8>)> = records
            .into_iter()
            .map(|(a, body)| {
                a.wait().expect("durable");
                (a.offset, body)
            })
            .collect();
        let end = ring.next_offset();
        ring.close().expect("close");
        let bytes = std::fs::read(&path).expect("read ring");
        RingImage {
            _dir: dir,
            bytes,
            records,
            end,
        }
    })
}

fn recover_copy(dir: &Path, bytes: Vec<u8>) -> tidelog::Result<Vec<(u64, Vec<u8>)>> {
    let path = dir.join("ring");
    std::fs::write(&path, &bytes).map_err(|e| tidelog::Error::Io {
        op: "write ring copy",
        path: path.clone(),
        source: e,
    })?;
    let inspected = tidelog::ring::inspect(&path).and_then(|ins| {
        ins.records()?
            .map(|r| r.map(|_| ()))
            .collect::<tidelog::Result<Vec<()>>>()
    });
    let _ = inspected;
    let ring = RingWal::open(&path, ring_config())?;
    let records = ring.recover()?.collect::<tidelog::Result<Vec<_>>>();
    ring.close()?;
    records
}

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn ring_scan_recovers_a_prefix_of_damaged_rings(
        at in 0u64..1 << 20,
        m in mutation(),
    ) {
        let img = ring_image();
        let dir = tempdir();
        // Damage one 4096-byte unit of the written ring area.
        let units = img.end.div_ceil(rf::ALIGN_BYTES).max(1);
        let unit = (rf::RING_START + (at % units) * rf::ALIGN_BYTES) as usize;
        let mut bytes = img.bytes.clone();
        let piece = bytes[unit..unit + rf::ALIGN_BYTES as usize].to_vec();
        let mut fields = vec![(rf::BH_PAYLOAD, 4), (rf::BH_RECORDS, 4)];
        fields.extend([(rf::BH_LEN + rf::RR_LEN, 4), (rf::BH_LEN + rf::RR_BODY_OFFSET, 8)]);
        let mut damaged = apply(&piece, &m, &fields);
        damaged.resize(piece.len(), 0);
        if matches!(m, Mutation::Huge(..)) {
            reseal_block_header(&mut damaged);
        }
        bytes[unit..unit + piece.len()].copy_from_slice(&damaged);
        let path = dir.path().to_owned();
        let got = terminates(LIMIT, move || recover_copy(&path, bytes));
        if let Ok(got) = got {
            prop_assert!(got.len() <= img.records.len());
            prop_assert_eq!(&got[..], &img.records[..got.len()], "recovered records not a prefix");
        }
    }
}

/// Regression: a checksummed block header announcing 2^32 - 2 records made the scan reserve
/// room for all of them (128 GiB) before reading one, and the process aborted.
#[test]
fn ring_block_announcing_billions_of_records_ends_the_log() {
    let img = ring_image();
    let dir = tempdir();
    for records in [u32::MAX, u32::MAX - 1, 1 << 31] {
        let mut bytes = img.bytes.clone();
        let at = rf::RING_START as usize;
        format::put_u32(&mut bytes[at..], rf::BH_RECORDS, records);
        reseal_block_header(&mut bytes[at..at + rf::BH_LEN]);
        let path = dir.path().to_owned();
        let got = terminates(LIMIT, move || recover_copy(&path, bytes));
        // The damaged first block is reported (later blocks show it was acknowledged), or
        // ends the log; either way nothing is read from it.
        let reported = matches!(got, Err(tidelog::Error::Corruption { .. }));
        assert!(reported || got.is_ok_and(|r| r.is_empty()), "{records}");
    }
}

// ---- Staged segment headers. ---------------------------------------------------------------

fn segment_header() -> impl Strategy<Value = SegmentHeader> {
    (2u32..=3, any::<u32>(), any::<[u64; 4]>(), any::<u32>()).prop_map(
        |(version, index, [file_size_bytes, block_size_bytes, created_us, records], extents)| {
            SegmentHeader {
                version,
                index,
                file_size_bytes,
                block_size_bytes,
                created_us,
                records,
                extents,
            }
        },
    )
}

fn reseal_segment_header(b: &mut [u8]) {
    if b.len() >= internals::SEGMENT_HEADER_LEN {
        let at = internals::SEGMENT_HEADER_CRC_AT;
        let crc = crc32fast::hash(&b[..at]);
        format::put_u32(b, at, crc);
    }
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn segment_header_round_trips_and_rejects_mutations(h in segment_header(), m in mutation()) {
        let good = internals::encode_segment_header(&h);
        prop_assert_eq!(internals::decode_segment_header(&good), Ok(h));
        let bad = apply(&good, &m, &[(8, 4), (12, 4), (16, 8), (24, 8), (32, 8), (48, 8), (56, 4)]);
        if let Ok(d) = internals::decode_segment_header(&bad) {
            prop_assert_eq!(d, h, "a mutation changed the segment header: {:?}", m);
        }
        let mut resealed = bad;
        reseal_segment_header(&mut resealed);
        if let Ok(d) = internals::decode_segment_header(&resealed) {
            prop_assert_eq!(internals::decode_segment_header(&internals::encode_segment_header(&d)), Ok(d));
        }
    }

    #[test]
    fn segment_header_takes_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..96)) {
        let _ = internals::decode_segment_header(&b);
        let mut sealed = b;
        if sealed.len() >= 12 {
            sealed[..8].copy_from_slice(b"TDLSTAGE");
            // Either version this build reads.
            let version = 2 + (sealed.len() % 2) as u32;
            format::put_u32(&mut sealed, 8, version);
        }
        reseal_segment_header(&mut sealed);
        let _ = internals::decode_segment_header(&sealed);
    }
}

#[test]
fn segment_header_every_bit_flip_is_rejected() {
    let h = SegmentHeader {
        version: 3,
        index: 3,
        file_size_bytes: 4096 + 4 * (10 << 20),
        block_size_bytes: 10 << 20,
        created_us: 17,
        records: 1000,
        extents: 2,
    };
    let good = internals::encode_segment_header(&h);
    for (bit, bad) in each_flip(&good, 0..internals::SEGMENT_HEADER_LEN) {
        assert!(
            internals::decode_segment_header(&bad).is_err(),
            "flip of bit {bit} accepted"
        );
    }
}

// ---- Part manifests (text). ----------------------------------------------------------------

fn manifest() -> impl Strategy<Value = Vec<internals::ManifestSegment>> {
    proptest::collection::vec(
        (
            proptest::collection::btree_map(topic_name(), 1u64..1 << 40, 1..4),
            any::<u64>(),
        ),
        0..4,
    )
    .prop_map(|segments| {
        segments
            .into_iter()
            .enumerate()
            .map(|(i, (counts, max))| {
                let counts: Vec<(String, u64)> = counts.into_iter().collect();
                let records = counts.iter().map(|(_, n)| n).sum();
                (i as u32, records, max, counts)
            })
            .collect()
    })
}

/// Decodes `text`; an accepted manifest must add up and decode again to itself.
fn manifest_checked(text: String) -> Result<(), String> {
    terminates(LIMIT, move || {
        let Ok(m) = internals::decode_part_manifest(&text) else {
            return Ok(());
        };
        for (i, (index, records, _, counts)) in m.iter().enumerate() {
            let sum = counts.iter().try_fold(0u64, |a, (_, n)| a.checked_add(*n));
            if *index as usize != i || sum != Some(*records) || *records == 0 {
                return Err(format!("accepted an inconsistent manifest: {m:?}"));
            }
        }
        let again = internals::decode_part_manifest(&internals::encode_part_manifest(&m));
        match again {
            Ok(m2) if m2 == m => Ok(()),
            other => Err(format!("re-encoding changed the manifest: {other:?}")),
        }
    })
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn part_manifest_round_trips(m in manifest()) {
        let text = internals::encode_part_manifest(&m);
        prop_assert_eq!(internals::decode_part_manifest(&text).map_err(|e| e.to_string()), Ok(m));
    }

    #[test]
    fn part_manifest_mutations_are_bounded(m in manifest(), mu in mutation(), mu2 in mutation()) {
        let text = internals::encode_part_manifest(&m);
        let bad = apply(&apply(text.as_bytes(), &mu, &[]), &mu2, &[]);
        manifest_checked(String::from_utf8_lossy(&bad).into_owned()).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn part_manifest_with_any_numbers(
        counts in proptest::collection::vec(proptest::collection::vec(any::<u64>(), 1..4), 1..4),
        records in proptest::collection::vec(any::<u64>(), 4),
        total in any::<u64>(),
    ) {
        let mut text = String::from("tidelog part v2\n");
        for (i, c) in counts.iter().enumerate() {
            text.push_str(&format!("@segment {i} {} 0\n", records[i]));
            for (j, n) in c.iter().enumerate() {
                text.push_str(&format!("t{j} {n}\n"));
            }
        }
        text.push_str(&format!("@records {total}\n"));
        manifest_checked(text).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn part_manifest_takes_any_text(s in "(tidelog part v2\n)?((@segment |@records )?[a-z0-9 ]{0,24}\n){0,6}") {
        manifest_checked(s).map_err(TestCaseError::fail)?;
    }
}

/// Regression: per-segment and total record counts were summed with `+`, which overflowed.
#[test]
fn part_manifest_with_overflowing_counts_is_corruption_not_a_panic() {
    let max = u64::MAX;
    for text in [
        format!("tidelog part v2\n@segment 0 1 0\na {max}\nb 2\n@records 1\n"),
        format!("tidelog part v2\n@segment 0 {max} 0\na {max}\n@segment 1 2 0\na 2\n@records 1\n"),
    ] {
        assert!(internals::decode_part_manifest(&text).is_err(), "{text:?}");
    }
}

// ---- COMMIT, INGEST and sink ledgers (text files). -------------------------------------------

fn ledger_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        topic_name(),
        (topic_name(), any::<u64>()).prop_map(|(t, n)| format!("{t} {n}")),
        (topic_name(), any::<u64>()).prop_map(|(t, n)| format!("@sink {t} {n}")),
        "[ -~]{0,30}",
    ];
    (
        prop_oneof![
            Just("tidelog commit v1\n"),
            Just("tidelog ingest v1\n"),
            Just("tidelog sink v1\n"),
            Just("")
        ],
        proptest::collection::vec(line, 0..5),
        any::<bool>(),
    )
        .prop_map(|(head, lines, newline)| {
            let mut s = String::from(head);
            s.push_str(&lines.join("\n"));
            if newline {
                s.push('\n');
            }
            s
        })
}

/// Writes `bytes` as the job's COMMIT and INGEST and as sink `s`'s ledger, and reads each back.
fn read_ledgers(dir: &Path, bytes: &[u8]) -> Result<(), String> {
    let job = dir.join("staging").join("job");
    let sinks = dir.join("staging").join(".sinks");
    std::fs::create_dir_all(&job).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&sinks).map_err(|e| e.to_string())?;
    for name in ["COMMIT", "INGEST"] {
        std::fs::write(job.join(name), bytes).map_err(|e| e.to_string())?;
    }
    std::fs::write(sinks.join("s"), bytes).map_err(|e| e.to_string())?;
    if let Ok(Some((parts, sink))) = internals::read_commit(&job) {
        for p in &parts {
            tidelog::validate_name(p).map_err(|e| format!("accepted part {p:?}: {e}"))?;
        }
        if let Some((s, _)) = &sink {
            tidelog::validate_name(s).map_err(|e| format!("accepted sink {s:?}: {e}"))?;
        }
    }
    if let Ok(Some(starts)) = internals::read_ingest(&job) {
        for (t, _) in &starts {
            tidelog::validate_name(t).map_err(|e| format!("accepted topic {t:?}: {e}"))?;
        }
    }
    let _ = tidelog::stage::sink_batch(dir, "s");
    Ok(())
}

proptest! {
    #![proptest_config(config(4))]

    #[test]
    fn ledgers_take_any_text(text in ledger_text(), m in mutation()) {
        let dir = tempdir();
        read_ledgers(dir.path(), text.as_bytes()).map_err(TestCaseError::fail)?;
        read_ledgers(dir.path(), &apply(text.as_bytes(), &m, &[])).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn ledgers_round_trip(
        parts in proptest::collection::vec(topic_name(), 0..4),
        sink in proptest::option::of((topic_name(), any::<u64>())),
        starts in proptest::collection::vec((topic_name(), any::<u64>()), 0..4),
        batch in any::<u64>(),
    ) {
        let dir = tempdir();
        let job = dir.path().join("staging").join("job");
        let sinks = dir.path().join("staging").join(".sinks");
        std::fs::create_dir_all(&job).map_err(|e| TestCaseError::fail(e.to_string()))?;
        std::fs::create_dir_all(&sinks).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut commit = String::from("tidelog commit v1\n");
        if let Some((s, b)) = &sink {
            commit.push_str(&format!("@sink {s} {b}\n"));
        }
        for p in &parts {
            commit.push_str(&format!("{p}\n"));
        }
        let mut ingest = String::from("tidelog ingest v1\n");
        for (t, o) in &starts {
            ingest.push_str(&format!("{t} {o}\n"));
        }
        let write = |p: std::path::PathBuf, s: String| std::fs::write(p, s).map_err(|e| TestCaseError::fail(e.to_string()));
        write(job.join("COMMIT"), commit)?;
        write(job.join("INGEST"), ingest)?;
        write(sinks.join("s"), format!("tidelog sink v1\n{batch}\n"))?;
        let got = internals::read_commit(&job).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(got, Some((parts, sink)));
        let got = internals::read_ingest(&job).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(got, Some(starts));
        let got = tidelog::stage::sink_batch(dir.path(), "s").map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(got, Some(batch));
    }
}

// ---- Batch frames: tidelog::batch. ------------------------------------------------------------

/// One record of a [`BatchCase`]: key, encoded header entries, value, timestamp.
type BatchRecordCase = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<u8>, u64);

#[derive(Debug, Clone)]
struct BatchCase {
    topic_id: u32,
    base_offset: u64,
    salt: u32,
    /// Bytes before the frame in the slice it is decoded from.
    position: usize,
    records: Vec<BatchRecordCase>,
}

fn batch_case() -> impl Strategy<Value = BatchCase> {
    let record = (
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..24)),
        header_pairs(),
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<u64>(),
    )
        .prop_map(|(key, pairs, value, ts)| (key, encode_headers(&pairs), value, ts));
    (
        any::<u32>(),
        0..u64::MAX - 64,
        any::<u32>(),
        0usize..24,
        proptest::collection::vec(record, 1..12),
    )
        .prop_map(
            |(topic_id, base_offset, salt, position, records)| BatchCase {
                topic_id,
                base_offset,
                salt,
                position,
                records,
            },
        )
}

impl BatchCase {
    fn records(&self) -> impl Iterator<Item = tidelog::batch::BatchRecord<'_>> + '_ {
        self.records
            .iter()
            .map(|(k, h, v, ts)| tidelog::batch::BatchRecord {
                parts: format::FrameParts {
                    key: k.as_deref(),
                    headers: h.as_deref(),
                    value: v,
                },
                timestamp_us: *ts,
            })
    }

    /// The frame after `position` bytes of 0xEE, then 64 zero bytes (the end of the log).
    fn encode(&self) -> Vec<u8> {
        let head = tidelog::batch::BatchHead {
            topic_id: self.topic_id,
            base_offset: self.base_offset,
            base_timestamp_us: self.records[0].3,
        };
        let len = tidelog::batch::frame_len(self.records()) as usize;
        let mut out = vec![0xEE; self.position + len + 64];
        out[self.position + len..].fill(0);
        let frame = &mut out[self.position..self.position + len];
        tidelog::batch::encode(frame, &head, self.salt, self.records());
        out
    }

    /// Every record from the frame's start, then the end; the first error otherwise.
    fn walk(&self, b: &[u8], verify: bool) -> Result<Vec<format::FrameView>, format::FrameError> {
        let mut pos = self.position;
        let mut out = Vec::new();
        loop {
            let offset = self.base_offset + out.len() as u64;
            match tidelog::batch::decode(b, pos, self.salt, self.topic_id, offset, verify) {
                Err(format::FrameError::End) => return Ok(out),
                Err(e) => return Err(e),
                Ok(v) => {
                    pos = v.next_position;
                    out.push(v);
                }
            }
        }
    }
}

/// A record decoded from a batch frame stays inside the frame, its parts in order.
fn check_batch_view(b: &[u8], v: &format::FrameView) -> Result<(), TestCaseError> {
    prop_assert!(v.checked.end <= b.len());
    let mut at = v.checked.start;
    for part in [&v.key, &v.headers, &Some(v.value.clone())]
        .into_iter()
        .flatten()
    {
        prop_assert!(at <= part.start && part.start <= part.end && part.end <= v.checked.end);
        at = part.end;
    }
    if let Some(h) = &v.headers {
        prop_assert!(tidelog::HeaderBlock::parse(&b[h.clone()]).is_ok());
    }
    prop_assert!(v.next_position >= v.value.end);
    Ok(())
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn batch_round_trips_from_every_record_position(c in batch_case()) {
        let b = c.encode();
        let views = c.walk(&b, true).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(views.len(), c.records.len());
        for (i, (v, (k, h, val, ts))) in views.iter().zip(&c.records).enumerate() {
            check_batch_view(&b, v)?;
            prop_assert_eq!(v.offset, c.base_offset + i as u64);
            prop_assert_eq!(v.timestamp_us, *ts);
            prop_assert_eq!(v.key.clone().map(|r| b[r].to_vec()), k.clone());
            prop_assert_eq!(v.headers.clone().map(|r| b[r].to_vec()), h.clone());
            prop_assert_eq!(&b[v.value.clone()], &val[..]);
            prop_assert_eq!(v.batch_count, if i == 0 { c.records.len() as u32 } else { 0 });
        }
        // Each record position decodes on its own, checksum and all.
        let mut pos = c.position;
        for (i, v) in views.iter().enumerate() {
            let offset = c.base_offset + i as u64;
            let alone = tidelog::batch::decode(&b, pos, c.salt, c.topic_id, offset, true);
            prop_assert_eq!(alone.as_ref(), Ok(v));
            pos = v.next_position;
        }
    }

    #[test]
    fn batch_rejects_every_changed_byte(c in batch_case(), at in any::<usize>(), mask in 1u8..) {
        let b = c.encode();
        let first = c.walk(&b, true).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let checked = first[0].checked.clone();
        let i = checked.start + at % checked.len();
        let mut bad = b.clone();
        bad[i] ^= mask;
        prop_assert!(c.walk(&bad, true).is_err(), "byte {} changed, accepted", i);
        // Unchecked decoding stays inside the bytes whatever it reads.
        if let Ok(views) = c.walk(&bad, false) {
            for v in &views {
                check_batch_view(&bad, v)?;
            }
        }
    }

    #[test]
    fn batch_takes_any_bytes(
        b in proptest::collection::vec(any::<u8>(), 0..200),
        position in prop_oneof![0usize..220, Just(usize::MAX)],
        salt in any::<u32>(),
        topic_id in any::<u32>(),
        offset in any::<u64>(),
        verify in any::<bool>(),
    ) {
        if let Ok(v) = tidelog::batch::decode(&b, position, salt, topic_id, offset, verify) {
            check_batch_view(&b, &v)?;
        }
    }
}

//! Batch frames (frame version 2), the records of extents of data-file version 3
//! ([`format::VERSION_BATCHED`]): one header and one checksum for a whole batch, each record
//! an entry of varints and its bytes. `docs/FORMAT.md` ("Batch frame") is the prose for these
//! constants; keep the two in step.
//!
//! A record's position is the batch frame's start for its first record and its entry's
//! first byte for the others. Each entry says how far back its frame starts, so any record
//! position decodes on its own, as a version-1 frame's does.

use crate::format::{
    self, FLAG_HEADERS, FLAG_KEY, FLAGS_KNOWN, FRAME_ALIGN, FrameError, FrameParts, FrameView,
    get_u32, get_u64, put_u32, put_u64,
};
use crate::varint;

/// Bytes 0..2 of a batch frame (`B1 7D` on disk).
pub const BATCH_MAGIC: u16 = 0x7DB1;
/// Frame version byte of a batch frame.
pub const BATCH_VERSION: u8 = 2;

/// [`BATCH_MAGIC`].
pub const BF_MAGIC: usize = 0;
/// [`BATCH_VERSION`].
pub const BF_VERSION: usize = BF_MAGIC + 2;
/// Batch flags: none defined, must be 0.
pub const BF_FLAGS: usize = BF_VERSION + 1;
/// `u32`: bytes of the frame, header and entries, padding excluded.
pub const BF_LEN: usize = BF_FLAGS + 1;
/// `u32`: the extent's topic id.
pub const BF_TOPIC_ID: usize = BF_LEN + 4;
/// `u32`: records in the batch, at least 1.
pub const BF_COUNT: usize = BF_TOPIC_ID + 4;
/// `u64`: the first record's offset.
pub const BF_BASE_OFFSET: usize = BF_COUNT + 4;
/// `u64`: the first record's timestamp (microseconds).
pub const BF_BASE_TIMESTAMP: usize = BF_BASE_OFFSET + 8;
/// `u32`: CRC-32 seeded with the extent's salt, of the header before it and every entry.
pub const BF_CRC: usize = BF_BASE_TIMESTAMP + 8;
/// Bytes of the batch header; the entries follow.
pub const BATCH_HEADER: usize = BF_CRC + 4;
const _: () = assert!(BATCH_HEADER == 36);
/// An entry's first byte: this marker with the record's flag bits ([`FLAG_KEY`],
/// [`FLAG_HEADERS`]).
pub const ENTRY_MARKER: u8 = 0x80;
// A record position's first byte tells a header from an entry, and zero from both.
const _: () = assert!(ENTRY_MARKER & FLAGS_KNOWN == 0);
const _: () = assert!((BATCH_MAGIC as u8) & !FLAGS_KNOWN != ENTRY_MARKER);
const _: () = assert!(BATCH_MAGIC as u8 != 0);
// Zeroing a version-1 header's bytes of a batch frame (`Extent::erase_frames_from`) never
// reaches the next frame: the shortest batch frame is longer.
const _: () = assert!(BATCH_HEADER + 5 > format::FRAME_HEADER);

/// Most bytes an entry adds to its record's key, headers and value: the marker, the back
/// distance and index (each below 2^32), the timestamp difference, and three lengths.
pub const ENTRY_OVERHEAD_MAX: usize = 1 + 5 + 5 + varint::VARINT_MAX + 3 * 5;
/// Most bytes a single record adds to its key, headers and value in either frame version,
/// padding included.
pub const RECORD_OVERHEAD_MAX: u64 = {
    let batch = (BATCH_HEADER + ENTRY_OVERHEAD_MAX) as u64 + FRAME_ALIGN;
    let frame = format::FRAME_HEADER_BYTES + FRAME_ALIGN;
    if batch > frame { batch } else { frame }
};

/// The fields of a batch header besides its length, count and checksum.
#[derive(Debug, Clone, Copy)]
pub struct BatchHead {
    /// The extent's topic id.
    pub topic_id: u32,
    /// The first record's offset.
    pub base_offset: u64,
    /// The first record's timestamp; entries store their difference to it.
    pub base_timestamp_us: u64,
}

/// One record of a batch to encode.
#[derive(Debug, Clone, Copy)]
pub struct BatchRecord<'a> {
    /// Key, headers and value.
    pub parts: FrameParts<'a>,
    /// Microseconds since the Unix epoch.
    pub timestamp_us: u64,
}

/// Bytes of the entry at `at` (from the frame's start) of record `index`.
#[inline]
fn entry_len(at: u64, index: u64, ts_delta: u64, parts: &FrameParts<'_>) -> u64 {
    let part = |len: usize| (varint::len(len as u64) + len) as u64;
    let key = parts.key.map_or(0, |k| part(k.len()));
    let headers = parts.headers.map_or(0, |h| part(h.len()));
    (1 + varint::len(at) + varint::len(index) + varint::len(ts_delta)) as u64
        + key
        + headers
        + part(parts.value.len())
}

/// Padded bytes of the batch frame of `records` (at least one).
pub fn frame_len<'a>(records: impl Iterator<Item = BatchRecord<'a>>) -> u64 {
    frame_prefix(records, u64::MAX).1
}

/// The longest prefix of `records` whose batch frame takes at most `limit_bytes` (padded),
/// and never less than the first record: its length in records and its frame's padded bytes.
pub fn frame_prefix<'a>(
    records: impl Iterator<Item = BatchRecord<'a>>,
    limit_bytes: u64,
) -> (usize, u64) {
    let mut at = BATCH_HEADER as u64;
    let mut base = None;
    let mut taken = (0, 0);
    for (i, r) in records.enumerate() {
        let base_ts = *base.get_or_insert(r.timestamp_us);
        at += entry_len(at, i as u64, ts_delta(r.timestamp_us, base_ts), &r.parts);
        let padded = format::align_up(at, FRAME_ALIGN);
        if i > 0 && padded > limit_bytes {
            break;
        }
        taken = (i + 1, padded);
    }
    debug_assert!(taken.0 > 0, "a batch has records");
    taken
}

#[inline]
fn ts_delta(timestamp_us: u64, base_us: u64) -> u64 {
    varint::zigzag(timestamp_us.wrapping_sub(base_us) as i64)
}

/// Encodes the batch frame of `records` (header, entries, zero padding) into `out`, which is
/// exactly its padded length ([`frame_len`] of the same records), checksummed with the
/// extent's `salt`. Panics when `out` is not that length.
pub fn encode<'a>(
    out: &mut [u8],
    head: &BatchHead,
    salt: u32,
    records: impl Iterator<Item = BatchRecord<'a>>,
) {
    let mut w = SliceWriter {
        out: &mut *out,
        at: BATCH_HEADER,
    };
    let mut count: u32 = 0;
    for r in records {
        let at = w.at as u64;
        let mut marker = ENTRY_MARKER;
        if r.parts.key.is_some() {
            marker |= FLAG_KEY;
        }
        if r.parts.headers.is_some() {
            marker |= FLAG_HEADERS;
        }
        w.byte(marker);
        w.varint(at);
        w.varint(u64::from(count));
        w.varint(ts_delta(r.timestamp_us, head.base_timestamp_us));
        for part in [r.parts.key, r.parts.headers, Some(r.parts.value)]
            .into_iter()
            .flatten()
        {
            w.varint(part.len() as u64);
            w.bytes(part);
        }
        count += 1;
    }
    let len = w.at;
    assert!(count > 0, "a batch has records");
    assert_eq!(
        format::align_up(len as u64, FRAME_ALIGN),
        out.len() as u64,
        "the frame fills `out` to its padding"
    );
    let len_u32 = u32::try_from(len).expect("a batch frame fits its extent, below 4 GiB");
    out[len..].fill(0);
    out[BF_MAGIC..BF_VERSION].copy_from_slice(&BATCH_MAGIC.to_le_bytes());
    out[BF_VERSION] = BATCH_VERSION;
    out[BF_FLAGS] = 0;
    put_u32(out, BF_LEN, len_u32);
    put_u32(out, BF_TOPIC_ID, head.topic_id);
    put_u32(out, BF_COUNT, count);
    put_u64(out, BF_BASE_OFFSET, head.base_offset);
    put_u64(out, BF_BASE_TIMESTAMP, head.base_timestamp_us);
    let crc = checksum(&out[..len], salt);
    put_u32(out, BF_CRC, crc);
}

/// Writes bytes one after another into a slice sized for them.
struct SliceWriter<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl SliceWriter<'_> {
    #[inline]
    fn byte(&mut self, b: u8) {
        self.out[self.at] = b;
        self.at += 1;
    }

    #[inline]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    #[inline]
    fn bytes(&mut self, b: &[u8]) {
        self.out[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
}

/// CRC-32 of a batch frame (`frame`: exactly its bytes, padding excluded) seeded with the
/// extent's salt: the header around its checksum field and every entry.
#[inline]
fn checksum(frame: &[u8], salt: u32) -> u32 {
    let mut crc = crc32fast::Hasher::new_with_initial(salt);
    crc.update(&frame[..BF_CRC]);
    crc.update(&frame[BATCH_HEADER..]);
    crc.finalize()
}

/// Decodes (and with `verify`, checks the whole batch's checksum) the record of
/// `expected_offset` at `position` of `extent` (the extent's bytes from its start).
pub fn decode(
    extent: &[u8],
    position: usize,
    salt: u32,
    topic_id: u32,
    expected_offset: u64,
    verify: bool,
) -> Result<FrameView, FrameError> {
    let (start, back_len) = locate(extent, position)?;
    let frame = frame_at(extent, start, salt, verify)?;
    if get_u32(frame, BF_TOPIC_ID) != topic_id {
        return Err(FrameError::WrongTopic);
    }
    record_in(frame, start, position, back_len, expected_offset)
}

/// [`decode`] for a walker that remembers the frame it decoded last (`checked`): a frame's
/// checksum is checked once, and the records after its first are read from their entries
/// alone.
#[inline]
pub fn decode_walking(
    extent: &[u8],
    position: usize,
    salt: u32,
    topic_id: u32,
    expected_offset: u64,
    verify: bool,
    checked: &mut format::Checked,
) -> Result<FrameView, FrameError> {
    if let Some(frame) = checked.frame_holding(position as u64, verify) {
        return decode_in(extent, position, frame, expected_offset);
    }
    checked.walk(position as u64, verify, |check| {
        decode(extent, position, salt, topic_id, expected_offset, check)
    })
}

/// [`decode`] of a record after the first of a batch frame that a walker decoded (and
/// checked, if it checks) already: `frame` is its byte range in `extent`. Only the entry at
/// `position` is read.
#[inline]
fn decode_in(
    extent: &[u8],
    position: usize,
    frame: std::ops::Range<usize>,
    expected_offset: u64,
) -> Result<FrameView, FrameError> {
    if position <= frame.start {
        return Err(FrameError::BadLength);
    }
    let start = frame.start;
    let frame = extent.get(frame).ok_or(FrameError::Truncated)?;
    record_in(frame, start, position, None, expected_offset)
}

/// The record at `position` of the batch frame `frame` (its bytes, from `start`, header
/// checked), its entry's `back` read already when `back_len` says how long it is.
#[inline(always)]
fn record_in(
    frame: &[u8],
    start: usize,
    position: usize,
    back_len: Option<usize>,
    expected_offset: u64,
) -> Result<FrameView, FrameError> {
    let first_of_batch = position == start;
    let entry_at = if first_of_batch {
        BATCH_HEADER
    } else {
        position - start
    };
    let entry = Entry::parse(frame, entry_at, back_len)?;
    let offset = get_u64(frame, BF_BASE_OFFSET)
        .checked_add(entry.index)
        .ok_or(FrameError::WrongOffset)?;
    if offset != expected_offset {
        return Err(FrameError::WrongOffset);
    }
    view_of(frame, start, first_of_batch, &entry, offset)
}

/// The view of `entry` (of the record of `offset`, its batch's first when `first_of_batch`)
/// in the batch frame `frame` (its bytes, from `start`, header checked), once its index is
/// checked against its frame's count and its end against its frame's end.
#[inline(always)]
fn view_of(
    frame: &[u8],
    start: usize,
    first_of_batch: bool,
    entry: &Entry,
    offset: u64,
) -> Result<FrameView, FrameError> {
    let count = u64::from(get_u32(frame, BF_COUNT));
    if entry.index >= count || first_of_batch != (entry.index == 0) {
        return Err(FrameError::BadLength);
    }
    let last = entry.index + 1 == count;
    if last != (entry.end == frame.len()) {
        return Err(FrameError::BadLength);
    }
    let base_ts = get_u64(frame, BF_BASE_TIMESTAMP);
    let shift = |r: &std::ops::Range<usize>| start + r.start..start + r.end;
    Ok(FrameView {
        offset,
        timestamp_us: base_ts.wrapping_add(varint::unzigzag(entry.ts_delta) as u64),
        batch_count: if first_of_batch { count as u32 } else { 0 },
        key: entry.key.as_ref().map(shift),
        headers: entry.headers.as_ref().map(shift),
        value: shift(&entry.value),
        next_position: if last {
            start + format::align_up(frame.len() as u64, FRAME_ALIGN) as usize
        } else {
            start + entry.end
        },
        checked: start..start + frame.len(),
    })
}

/// The records of a batch frame after one a walker decoded, in order, each read from its
/// entry and checked as [`decode`] checks it: a scan's way through a frame, which takes
/// each entry where the one before ended instead of locating it anew.
#[derive(Debug)]
pub struct FrameWalk<'a> {
    /// The frame's bytes (padding excluded), header checked.
    frame: &'a [u8],
    /// The frame's start in its extent.
    start: usize,
    /// The next entry, from the frame's start.
    at: usize,
    /// The index its entry must hold.
    index: u64,
    /// The offset it gets.
    offset: u64,
}

impl<'a> FrameWalk<'a> {
    /// The walk on from `view` (whose frame stores `stored` for its offset), a record of
    /// the batch frame `frame` (its bytes, `view.checked` of the extent) that a walker
    /// decoded (and checked, if it checks); `None` after the frame's last record.
    #[inline]
    pub fn after(frame: &'a [u8], view: &FrameView, stored: u64) -> Option<FrameWalk<'a>> {
        debug_assert_eq!(frame.len(), view.checked.len());
        let start = view.checked.start;
        let at = view.next_position.checked_sub(start)?;
        if at >= frame.len() {
            return None;
        }
        let index = stored.checked_sub(get_u64(frame, BF_BASE_OFFSET))?;
        Some(FrameWalk {
            frame,
            start,
            at,
            index: index.checked_add(1)?,
            offset: view.offset.checked_add(1)?,
        })
    }

    /// The next record, `None` after the frame's last.
    #[inline(always)]
    pub fn next_view(&mut self) -> Option<Result<FrameView, FrameError>> {
        if self.at >= self.frame.len() {
            return None;
        }
        let view = Entry::parse(self.frame, self.at, None).and_then(|entry| {
            if entry.index != self.index {
                return Err(FrameError::WrongOffset);
            }
            view_of(self.frame, self.start, false, &entry, self.offset)
        });
        match &view {
            Ok(v) => {
                self.at = v.next_position - self.start;
                self.index = self.index.saturating_add(1);
                self.offset = self.offset.saturating_add(1);
            }
            // A damaged entry ends the walk: the error says where.
            Err(_) => self.at = self.frame.len(),
        }
        Some(view)
    }
}

/// The length (padding excluded) a batch header in `header` (its first bytes) gives its
/// frame; `None` when they are no batch header. Nothing else is checked.
pub fn frame_span(header: &[u8]) -> Option<u64> {
    let h = header.get(..BATCH_HEADER)?;
    let ok = u16::from_le_bytes([h[BF_MAGIC], h[BF_MAGIC + 1]]) == BATCH_MAGIC
        && h[BF_VERSION] == BATCH_VERSION;
    let len = u64::from(get_u32(h, BF_LEN));
    (ok && len > BATCH_HEADER as u64).then_some(len)
}

/// Where the batch frame of the record at `position` starts: there, or as far back as the
/// record's entry says. `None` when the bytes there are neither.
pub fn frame_start(extent: &[u8], position: usize) -> Option<usize> {
    locate(extent, position).ok().map(|(start, _)| start)
}

/// Where the batch frame of the record at `position` starts, and, for an entry after the
/// first, how long its `back` (read here) is. Zero bytes there are `End`.
#[inline(always)]
fn locate(extent: &[u8], position: usize) -> Result<(usize, Option<usize>), FrameError> {
    let first = *extent.get(position).ok_or(FrameError::Truncated)?;
    if first == BATCH_MAGIC as u8 {
        return Ok((position, None));
    }
    if first & !FLAGS_KNOWN == ENTRY_MARKER {
        let (back, back_len) = extent
            .get(position + 1..)
            .and_then(varint::get)
            .ok_or(FrameError::BadLength)?;
        let back = usize::try_from(back).map_err(|_| FrameError::BadLength)?;
        if back <= BATCH_HEADER {
            // The first entry is read through its frame's start, never on its own.
            return Err(FrameError::BadLength);
        }
        let start = position.checked_sub(back).ok_or(FrameError::BadLength)?;
        return Ok((start, Some(back_len)));
    }
    let window = extent
        .get(position..position + BATCH_HEADER)
        .ok_or(FrameError::Truncated)?;
    Err(if window.iter().all(|&b| b == 0) {
        FrameError::End
    } else {
        FrameError::BadMagic
    })
}

/// The batch frame starting at `start`: its bytes (padding excluded), header checked, and
/// with `verify` its checksum.
#[inline(always)]
fn frame_at(extent: &[u8], start: usize, salt: u32, verify: bool) -> Result<&[u8], FrameError> {
    let h = extent
        .get(start..start + BATCH_HEADER)
        .ok_or(FrameError::Truncated)?;
    if u16::from_le_bytes([h[BF_MAGIC], h[BF_MAGIC + 1]]) != BATCH_MAGIC {
        return Err(FrameError::BadMagic);
    }
    if h[BF_VERSION] != BATCH_VERSION {
        return Err(FrameError::BadVersion);
    }
    if h[BF_FLAGS] != 0 {
        return Err(FrameError::BadFlags);
    }
    let len = get_u32(h, BF_LEN) as usize;
    if len <= BATCH_HEADER || get_u32(h, BF_COUNT) == 0 {
        return Err(FrameError::BadLength);
    }
    let frame = extent
        .get(start..start + len)
        .ok_or(FrameError::Truncated)?;
    if verify && checksum(frame, salt) != get_u32(frame, BF_CRC) {
        return Err(FrameError::BadChecksum);
    }
    Ok(frame)
}

/// An entry's fields, its ranges relative to its frame's start.
struct Entry {
    index: u64,
    ts_delta: u64,
    key: Option<std::ops::Range<usize>>,
    headers: Option<std::ops::Range<usize>>,
    value: std::ops::Range<usize>,
    /// Just past the entry.
    end: usize,
}

impl Entry {
    /// Parses the entry at `at` of `frame`, whose `back` must say `at` (`back_len`: the
    /// length of a `back` that was read already and led here); every length inside the frame.
    #[inline(always)]
    fn parse(frame: &[u8], at: usize, back_len: Option<usize>) -> Result<Entry, FrameError> {
        let marker = *frame.get(at).ok_or(FrameError::BadLength)?;
        if marker & !FLAGS_KNOWN != ENTRY_MARKER {
            return Err(FrameError::BadFlags);
        }
        let mut c = EntryCursor { frame, at: at + 1 };
        match back_len {
            Some(len) => c.at += len,
            None if c.varint()? != at as u64 => return Err(FrameError::BadLength),
            None => {}
        }
        let index = c.varint()?;
        let ts_delta = c.varint()?;
        let key = if marker & FLAG_KEY != 0 {
            Some(c.part()?)
        } else {
            None
        };
        let headers = if marker & FLAG_HEADERS != 0 {
            let h = c.part()?;
            crate::headers::HeaderBlock::parse(&frame[h.clone()])
                .map_err(|_| FrameError::BadHeaders)?;
            Some(h)
        } else {
            None
        };
        let value = c.part()?;
        Ok(Entry {
            index,
            ts_delta,
            key,
            headers,
            end: value.end,
            value,
        })
    }
}

/// Reads an entry's fields in order, never past its frame.
struct EntryCursor<'a> {
    frame: &'a [u8],
    at: usize,
}

impl EntryCursor<'_> {
    #[inline(always)]
    fn varint(&mut self) -> Result<u64, FrameError> {
        let (v, n) = self
            .frame
            .get(self.at..)
            .and_then(varint::get)
            .ok_or(FrameError::BadLength)?;
        self.at += n;
        Ok(v)
    }

    /// A length, then that many bytes: their range.
    #[inline(always)]
    fn part(&mut self) -> Result<std::ops::Range<usize>, FrameError> {
        let len = self.varint()?;
        let from = self.at;
        let to = usize::try_from(len)
            .ok()
            .and_then(|len| from.checked_add(len))
            .filter(|&to| to <= self.frame.len())
            .ok_or(FrameError::BadLength)?;
        self.at = to;
        Ok(from..to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALT: u32 = 0x5A17;
    const TOPIC: u32 = 7;

    fn head(base_offset: u64) -> BatchHead {
        BatchHead {
            topic_id: TOPIC,
            base_offset,
            base_timestamp_us: 1_700_000_000_000_000,
        }
    }

    type Rec = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<u8>, u64);

    fn records(n: usize) -> Vec<Rec> {
        let headers = crate::headers::Headers::from_pairs([("h", Some(&b"v"[..])), ("n", None)])
            .expect("valid");
        let block = headers.block().expect("some").as_bytes().to_vec();
        (0..n)
            .map(|i| {
                let key = (i % 3 == 0).then(|| format!("k{i}").into_bytes());
                let hs = (i % 4 == 1).then(|| block.clone());
                let ts = 1_700_000_000_000_000u64
                    .wrapping_add((i as u64 * 37) % 11)
                    .wrapping_sub(5);
                (key, hs, vec![i as u8; i % 130], ts)
            })
            .collect()
    }

    fn as_batch(recs: &[Rec]) -> impl Iterator<Item = BatchRecord<'_>> + '_ {
        recs.iter().map(|(k, h, v, ts)| BatchRecord {
            parts: FrameParts {
                key: k.as_deref(),
                headers: h.as_deref(),
                value: v,
            },
            timestamp_us: *ts,
        })
    }

    fn encoded(recs: &[Rec], base: u64) -> Vec<u8> {
        let head = BatchHead {
            base_timestamp_us: recs[0].3,
            ..head(base)
        };
        let mut out = vec![0xEE; frame_len(as_batch(recs)) as usize];
        encode(&mut out, &head, SALT, as_batch(recs));
        out
    }

    /// Every record of `frame`, walking from its start.
    fn walk(frame: &[u8], base: u64, verify: bool) -> Result<Vec<FrameView>, FrameError> {
        let mut pos = 0;
        let mut out = Vec::new();
        let mut padded = frame.to_vec();
        padded.extend_from_slice(&[0u8; BATCH_HEADER]);
        loop {
            let v = decode(&padded, pos, SALT, TOPIC, base + out.len() as u64, verify);
            match v {
                Err(FrameError::End) => return Ok(out),
                Err(e) => return Err(e),
                Ok(v) => {
                    pos = v.next_position;
                    out.push(v);
                }
            }
        }
    }

    #[test]
    fn round_trip_every_record_from_every_position() {
        let recs = records(40);
        let frame = encoded(&recs, 100);
        assert_eq!(frame.len() % FRAME_ALIGN as usize, 0);
        let views = walk(&frame, 100, true).expect("valid");
        assert_eq!(views.len(), recs.len());
        for (i, (v, (k, h, val, ts))) in views.iter().zip(&recs).enumerate() {
            assert_eq!(v.offset, 100 + i as u64);
            assert_eq!(v.timestamp_us, *ts);
            assert_eq!(v.key.clone().map(|r| frame[r].to_vec()), *k);
            assert_eq!(v.headers.clone().map(|r| frame[r].to_vec()), *h);
            assert_eq!(&frame[v.value.clone()], &val[..]);
            assert_eq!(v.batch_count, if i == 0 { 40 } else { 0 });
            assert_eq!(v.checked, 0..get_u32(&frame, BF_LEN) as usize);
        }
        // Each record position decodes on its own.
        let mut pos = 0;
        for (i, v) in views.iter().enumerate() {
            let again = decode(&frame, pos, SALT, TOPIC, 100 + i as u64, true).expect("alone");
            assert_eq!(&again, v);
            pos = v.next_position;
        }
        assert_eq!(pos, frame.len());
    }

    /// The views a [`FrameWalk`] yields after the record at `pos` (of offset `offset`),
    /// until its end or its first error.
    fn walked(
        frame: &[u8],
        pos: usize,
        offset: u64,
        verify: bool,
    ) -> Vec<Result<FrameView, FrameError>> {
        let Ok(first) = decode(frame, pos, SALT, TOPIC, offset, verify) else {
            return Vec::new();
        };
        let Some(mut walk) = FrameWalk::after(&frame[first.checked.clone()], &first, offset) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Some(view) = walk.next_view() {
            let stop = view.is_err();
            out.push(view);
            if stop {
                break;
            }
        }
        out
    }

    #[test]
    fn a_walk_from_any_record_reads_what_decode_reads() {
        let recs = records(40);
        let frame = encoded(&recs, 100);
        let views = walk(&frame, 100, true).expect("valid");
        for i in 0..views.len() {
            let pos = if i == 0 {
                0
            } else {
                views[i - 1].next_position
            };
            let rest = walked(&frame, pos, 100 + i as u64, true);
            assert_eq!(rest.len(), views.len() - i - 1, "walk after record {i}");
            for (got, want) in rest.iter().zip(&views[i + 1..]) {
                assert_eq!(got.as_ref(), Ok(want));
            }
        }
        assert_eq!(views.last().map(|v| v.next_position), Some(frame.len()));
    }

    #[test]
    fn a_walk_over_a_flipped_bit_agrees_with_decode_or_fails() {
        let frame = encoded(&records(6), 9);
        let len = get_u32(&frame, BF_LEN) as usize;
        for bit in 0..len * 8 {
            let mut g = frame.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            // Unchecked (the checksum would catch it): each record the walk yields is the
            // one decode reads at its position on its own, and a walk ends at its error.
            let Ok(first) = decode(&g, 0, SALT, TOPIC, 9, false) else {
                continue;
            };
            let Some(mut walk) = FrameWalk::after(&g[first.checked.clone()], &first, 9) else {
                continue;
            };
            let mut prev = first;
            while let Some(view) = walk.next_view() {
                let alone = decode(&g, prev.next_position, SALT, TOPIC, prev.offset + 1, false);
                let Ok(view) = view else {
                    assert!(alone.is_err(), "bit {bit}: only the walk failed");
                    assert!(walk.next_view().is_none(), "bit {bit}: the walk went on");
                    break;
                };
                assert_eq!(alone.as_ref(), Ok(&view), "bit {bit}");
                prev = view;
            }
        }
    }

    #[test]
    fn a_batch_of_one_costs_no_more_than_a_version_1_frame() {
        let recs = vec![(None, None, vec![1u8; 100], 5)];
        assert!(frame_len(as_batch(&recs)) <= format::frame_padded_len(100));
        // 1,000 records of 100 B: at most 16 B each besides the value.
        let many: Vec<Rec> = (0..1000).map(|_| (None, None, vec![2u8; 100], 5)).collect();
        let per_record = frame_len(as_batch(&many)) / 1000;
        assert!(per_record <= 116, "{per_record} B per 100 B record");
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let recs = records(5);
        let frame = encoded(&recs, 9);
        let len = get_u32(&frame, BF_LEN) as usize;
        for bit in 0..len * 8 {
            let mut g = frame.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            let r = walk(&g, 9, true);
            assert!(r.is_err(), "flip of bit {bit} undetected");
            // Without the checksum the decoder still stays inside the bytes.
            let _ = walk(&g, 9, false);
        }
    }

    #[test]
    fn wrong_salt_topic_offset_and_zeros() {
        let frame = encoded(&records(3), 4);
        assert_eq!(
            decode(&frame, 0, SALT + 1, TOPIC, 4, true),
            Err(FrameError::BadChecksum)
        );
        assert_eq!(
            decode(&frame, 0, SALT, TOPIC + 1, 4, true),
            Err(FrameError::WrongTopic)
        );
        assert_eq!(
            decode(&frame, 0, SALT, TOPIC, 5, true),
            Err(FrameError::WrongOffset)
        );
        assert_eq!(
            decode(&[0u8; 64], 8, SALT, TOPIC, 0, true),
            Err(FrameError::End)
        );
        assert_eq!(
            decode(&frame[..20], 0, SALT, TOPIC, 4, true),
            Err(FrameError::Truncated)
        );
        // The first entry is not a record position of its own.
        assert!(decode(&frame, BATCH_HEADER, SALT, TOPIC, 4, true).is_err());
    }
}

//! Record headers, as in Kafka: ordered `(key, value)` pairs, keys may repeat, a value may be
//! null. Their bytes inside a frame are in `docs/FORMAT.md` ("Record headers").
//!
//! [`Headers`] builds the encoded entries; [`HeaderBlock`] is entries that were checked, the
//! only form an [`crate::Append`] takes and a record returns, so an iterator over them never
//! meets bytes it cannot read.

use crate::error::{Error, Result};

/// Most headers one record carries.
pub const HEADER_COUNT_MAX: usize = 4096;
/// Longest header key in bytes (UTF-8).
pub const HEADER_KEY_MAX: usize = 16 * 1024;
/// Most bytes of encoded entries one record carries (the frame's length field for them is
/// a `u32`; the record size limits bound them further).
pub const HEADER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Longest LEB128 encoding of a `u32`.
const VARINT_MAX: usize = 5;

/// Encoded headers being built: append pairs with [`Headers::push`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    bytes: Vec<u8>,
    count: usize,
}

impl Headers {
    /// No headers.
    pub fn new() -> Headers {
        Headers::default()
    }

    /// Headers from `(key, value)` pairs, in order.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    ) -> Result<Headers> {
        let mut h = Headers::new();
        for (key, value) in pairs {
            h.push(key, value)?;
        }
        Ok(h)
    }

    /// Appends one header; `None` is a null value (distinct from an empty one).
    pub fn push(&mut self, key: &str, value: Option<&[u8]>) -> Result<()> {
        if self.count >= HEADER_COUNT_MAX {
            return Err(Error::invalid(
                "headers",
                format!("more than {HEADER_COUNT_MAX} headers"),
            ));
        }
        if key.len() > HEADER_KEY_MAX {
            return Err(Error::invalid(
                "headers",
                format!("key of {} bytes is longer than {HEADER_KEY_MAX}", key.len()),
            ));
        }
        let value_len = value.map_or(0, <[u8]>::len);
        let grown = self.bytes.len() + 2 * VARINT_MAX + key.len() + value_len;
        if grown > HEADER_BYTES_MAX {
            return Err(Error::invalid(
                "headers",
                format!("more than {HEADER_BYTES_MAX} bytes of headers"),
            ));
        }
        put_varint(&mut self.bytes, key.len() as u32);
        self.bytes.extend_from_slice(key.as_bytes());
        match value {
            // Shifted by one so that 0 stands for null.
            Some(v) => {
                put_varint(&mut self.bytes, v.len() as u32 + 1);
                self.bytes.extend_from_slice(v);
            }
            None => put_varint(&mut self.bytes, 0),
        }
        self.count += 1;
        Ok(())
    }

    /// Number of headers.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The entries as a record carries them; `None` when there are none (a record with no
    /// headers and one with an empty list are the same record).
    pub fn block(&self) -> Option<HeaderBlock<'_>> {
        (!self.bytes.is_empty()).then_some(HeaderBlock(&self.bytes))
    }
}

/// Encoded header entries that were checked: every length in bounds, every key UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderBlock<'a>(&'a [u8]);

impl<'a> HeaderBlock<'a> {
    /// Checks `bytes` as encoded entries (as read from a frame or a journal entry).
    pub fn parse(bytes: &'a [u8]) -> std::result::Result<HeaderBlock<'a>, &'static str> {
        if bytes.is_empty() {
            return Err("a header block holds at least one header");
        }
        if bytes.len() > HEADER_BYTES_MAX {
            return Err("header block too long");
        }
        let mut rest = bytes;
        let mut count = 0;
        while !rest.is_empty() {
            count += 1;
            if count > HEADER_COUNT_MAX {
                return Err("too many headers");
            }
            let (entry, after) = split_entry(rest)?;
            if entry.0.len() > HEADER_KEY_MAX {
                return Err("header key too long");
            }
            rest = after;
        }
        Ok(HeaderBlock(bytes))
    }

    /// Entries a frame decoder already checked (`format::decode_frame`).
    pub(crate) fn checked(bytes: &'a [u8]) -> HeaderBlock<'a> {
        debug_assert!(HeaderBlock::parse(bytes).is_ok());
        HeaderBlock(bytes)
    }

    /// The encoded entries.
    pub fn as_bytes(self) -> &'a [u8] {
        self.0
    }

    /// The headers in order.
    pub fn iter(self) -> HeaderIter<'a> {
        HeaderIter { rest: self.0 }
    }
}

/// The headers of a record, in order: `(key, value)`, `None` for a null value.
#[derive(Debug, Clone)]
pub struct HeaderIter<'a> {
    rest: &'a [u8],
}

impl<'a> HeaderIter<'a> {
    /// An iterator over no headers.
    pub fn empty() -> HeaderIter<'a> {
        HeaderIter { rest: &[] }
    }
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a str, Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        // A block was parsed before it was handed out: this never fails; if it did, the
        // iteration ends rather than panics.
        match split_entry(self.rest) {
            Ok((entry, after)) => {
                self.rest = after;
                Some(entry)
            }
            Err(_) => {
                debug_assert!(false, "a checked header block failed to decode");
                self.rest = &[];
                None
            }
        }
    }
}

type Entry<'a> = (&'a str, Option<&'a [u8]>);

/// Splits the first entry off `bytes`.
fn split_entry(bytes: &[u8]) -> std::result::Result<(Entry<'_>, &[u8]), &'static str> {
    let (key_len, rest) = get_varint(bytes)?;
    let (key, rest) = split(rest, key_len as usize).ok_or("header key is cut")?;
    let key = std::str::from_utf8(key).map_err(|_| "header key is not UTF-8")?;
    let (shifted, rest) = get_varint(rest)?;
    if shifted == 0 {
        return Ok(((key, None), rest));
    }
    let (value, rest) = split(rest, shifted as usize - 1).ok_or("header value is cut")?;
    Ok(((key, Some(value)), rest))
}

fn split(bytes: &[u8], at: usize) -> Option<(&[u8], &[u8])> {
    (at <= bytes.len()).then(|| bytes.split_at(at))
}

/// Appends `v` as LEB128.
fn put_varint(out: &mut Vec<u8>, v: u32) {
    crate::varint::put(out, u64::from(v));
}

/// Reads a LEB128 `u32` in its shortest form (so each value has one encoding).
fn get_varint(bytes: &[u8]) -> std::result::Result<(u32, &[u8]), &'static str> {
    let (v, n) = crate::varint::get(bytes)
        .ok_or("header length is cut, too long or not in its shortest form")?;
    let v = u32::try_from(v).map_err(|_| "header length overflows")?;
    Ok((v, &bytes[n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_order_repeats_and_nulls() {
        let big = vec![7u8; 300];
        let pairs: [(&str, Option<&[u8]>); 5] = [
            ("a", Some(b"1")),
            ("a", Some(b"")),
            ("", None),
            ("é", Some(&big)),
            ("z", None),
        ];
        let h = Headers::from_pairs(pairs).expect("valid");
        assert_eq!(h.len(), 5);
        let block = HeaderBlock::parse(h.block().expect("some").as_bytes()).expect("parses");
        assert_eq!(block.iter().collect::<Vec<_>>(), pairs);
        assert!(Headers::new().block().is_none());
    }

    #[test]
    fn every_cut_and_bad_length_is_rejected() {
        let h = Headers::from_pairs([("key", Some(&b"value"[..])), ("k2", None)]).expect("ok");
        let bytes = h.block().expect("some").as_bytes().to_vec();
        for cut in 1..bytes.len() {
            // A cut may end on an entry boundary: that is a shorter valid block.
            if let Ok(b) = HeaderBlock::parse(&bytes[..cut]) {
                assert!(b.iter().count() < 2, "cut at {cut} kept every header");
            }
        }
        assert!(HeaderBlock::parse(&[]).is_err());
        assert!(
            HeaderBlock::parse(&[0x80, 0x00]).is_err(),
            "overlong varint"
        );
        assert!(HeaderBlock::parse(&[1, 0xFF, 0]).is_err(), "key not UTF-8");
        assert!(HeaderBlock::parse(&[0xFF; 6]).is_err(), "varint too long");
    }

    #[test]
    fn limits_are_enforced() {
        let mut h = Headers::new();
        for _ in 0..HEADER_COUNT_MAX {
            h.push("k", None).expect("under the limit");
        }
        assert!(h.push("k", None).is_err());
        let long = "x".repeat(HEADER_KEY_MAX + 1);
        assert!(Headers::new().push(&long, None).is_err());
    }
}

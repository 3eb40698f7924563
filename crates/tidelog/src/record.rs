//! A record as an appender hands it in (the read side is `reader::Record`).

use crate::format::FrameParts;
use crate::headers::HeaderBlock;

/// One record to append: optional key, value, optional timestamp (default: now), optional
/// headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Append<'a> {
    /// The key; `Some(&[])` (an empty key) is kept distinct from `None`.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: &'a [u8],
    /// Microseconds since the Unix epoch, at most [`TIMESTAMP_US_MAX`]; `None` stamps the
    /// append time.
    pub timestamp_us: Option<u64>,
    /// Headers, built with [`crate::Headers`]; `None` for none.
    pub headers: Option<HeaderBlock<'a>>,
}

/// The largest timestamp an append takes: `i64::MAX` microseconds, so every timestamp reads
/// back unchanged as the signed 64-bit integers of Arrow, Spark and Kafka.
pub const TIMESTAMP_US_MAX: u64 = i64::MAX as u64;

/// Refuses records whose timestamp is past [`TIMESTAMP_US_MAX`] (`InvalidArgument`).
pub(crate) fn check_timestamps(records: &[Append<'_>]) -> crate::Result<()> {
    match records
        .iter()
        .find_map(|r| r.timestamp_us.filter(|&t| t > TIMESTAMP_US_MAX))
    {
        Some(t) => Err(crate::Error::invalid(
            "timestamp",
            format!("{t} us is past the largest timestamp, {TIMESTAMP_US_MAX} us (i64::MAX)"),
        )),
        None => Ok(()),
    }
}

impl<'a> Append<'a> {
    /// A record with only a value.
    pub fn value(value: &'a [u8]) -> Self {
        Append {
            key: None,
            value,
            timestamp_us: None,
            headers: None,
        }
    }

    /// What follows the record's frame header.
    #[inline]
    pub fn parts(&self) -> FrameParts<'a> {
        FrameParts {
            key: self.key,
            headers: self.headers.map(HeaderBlock::as_bytes),
            value: self.value,
        }
    }

    /// Key, headers and value bytes as a frame holds them (the length the size limits
    /// apply to).
    #[inline]
    pub fn payload_len(&self) -> u64 {
        self.parts().payload_len()
    }
}

/// `records` as a batch frame encodes them, timestamps defaulting to `now`.
#[inline]
pub fn batch_records<'a, 'b>(
    records: &'b [Append<'a>],
    now: u64,
) -> impl Iterator<Item = crate::batch::BatchRecord<'a>> + 'b {
    records.iter().map(move |r| crate::batch::BatchRecord {
        parts: r.parts(),
        timestamp_us: r.timestamp_us.unwrap_or(now),
    })
}

//! A record as an appender hands it in (the read side is `reader::Record`).

/// One record to append: optional key, value, optional timestamp (default: now).
#[derive(Debug, Clone, Copy, Default)]
pub struct Append<'a> {
    /// The key; `Some(&[])` (an empty key) is kept distinct from `None`.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: &'a [u8],
    /// Microseconds since the Unix epoch; `None` stamps the append time.
    pub timestamp_us: Option<u64>,
}

impl<'a> Append<'a> {
    /// A record with only a value.
    pub fn value(value: &'a [u8]) -> Self {
        Append {
            key: None,
            value,
            timestamp_us: None,
        }
    }

    /// Key plus value bytes.
    #[inline]
    pub fn payload_len(&self) -> u64 {
        (self.key.map_or(0, <[u8]>::len) + self.value.len()) as u64
    }
}

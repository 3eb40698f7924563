//! Journal entries: what the topic log writes into each ring record (a batch of records
//! of one topic, from its first offset). Bytes in `docs/FORMAT.md` ("Journal entries").

use crate::format::{TOPIC_NAME_MAX, validate_name};
use crate::record::Append;

/// Entry kind: a batch of records of one topic.
const ENTRY_KIND_BATCH: u8 = 1;
const ENTRY_VERSION: u8 = 1;
/// Entry header: kind u8, version u8, name length u16, record count u32, first offset u64.
pub const EH_KIND: usize = 0;
pub const EH_VERSION: usize = EH_KIND + 1;
pub const EH_NAME_LEN: usize = EH_VERSION + 1;
pub const EH_COUNT: usize = EH_NAME_LEN + 2;
pub const EH_FIRST: usize = EH_COUNT + 4;
pub const EH_LEN: usize = EH_FIRST + 8;
/// Record header inside an entry: timestamp u64, key length u32 (`KEY_NONE`: no key),
/// value length u32.
pub const ER_TIMESTAMP: usize = 0;
pub const ER_KEY_LEN: usize = ER_TIMESTAMP + 8;
pub const ER_VALUE_LEN: usize = ER_KEY_LEN + 4;
pub const ER_LEN: usize = ER_VALUE_LEN + 4;
const KEY_NONE: u32 = u32::MAX;
const _: () = assert!(EH_LEN == 16 && ER_LEN == 16);
const _: () = assert!(TOPIC_NAME_MAX <= u16::MAX as usize);

/// Room reserved in every ring entry beyond the batch limit: the entry header, the longest
/// name and the record headers of a batch of up to about 4,000 records.
const ENTRY_OVERHEAD_BYTES: u64 = 64 * 1024;

/// The largest journal entry the Wal's limits allow: the ring's record limit.
pub fn entry_bytes_max(record_bytes_max: u64, batch_bytes_max: u64) -> u64 {
    record_bytes_max.max(batch_bytes_max) + ENTRY_OVERHEAD_BYTES
}

/// Bytes of the entry for `records` of topic `name`.
pub fn entry_len(name: &str, records: &[Append<'_>]) -> u64 {
    let payload: u64 = records.iter().map(Append::payload_len).sum();
    (EH_LEN + name.len() + ER_LEN * records.len()) as u64 + payload
}

/// Encodes the entry of `records` (of `name`, starting at offset `first`; records without a
/// timestamp get `now_us`) into `buf`, replacing what it held.
pub(crate) fn encode(
    buf: &mut Vec<u8>,
    name: &str,
    first: u64,
    records: &[Append<'_>],
    now_us: u64,
) {
    buf.clear();
    buf.reserve(entry_len(name, records) as usize);
    buf.push(ENTRY_KIND_BATCH);
    buf.push(ENTRY_VERSION);
    buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
    buf.extend_from_slice(&(records.len() as u32).to_le_bytes());
    buf.extend_from_slice(&first.to_le_bytes());
    buf.extend_from_slice(name.as_bytes());
    for r in records {
        buf.extend_from_slice(&r.timestamp_us.unwrap_or(now_us).to_le_bytes());
        let key_len = r.key.map_or(KEY_NONE, |k| k.len() as u32);
        buf.extend_from_slice(&key_len.to_le_bytes());
        buf.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
        if let Some(k) = r.key {
            buf.extend_from_slice(k);
        }
        buf.extend_from_slice(r.value);
    }
    debug_assert_eq!(buf.len() as u64, entry_len(name, records));
}

/// A decoded entry, borrowing the ring record's body.
#[derive(Debug)]
pub struct Entry<'a> {
    pub topic: &'a str,
    pub first: u64,
    pub records: Vec<Append<'a>>,
}

/// Decodes and validates one entry; the error says which check failed.
pub fn decode(body: &[u8]) -> std::result::Result<Entry<'_>, String> {
    let head = body
        .get(..EH_LEN)
        .ok_or_else(|| format!("entry of {} bytes is shorter than its header", body.len()))?;
    if head[EH_KIND] != ENTRY_KIND_BATCH || head[EH_VERSION] != ENTRY_VERSION {
        return Err(format!(
            "unknown entry kind {} version {}",
            head[EH_KIND], head[EH_VERSION]
        ));
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let u64_at = |b: &[u8], at: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(x)
    };
    let name_len = usize::from(u16_at(head, EH_NAME_LEN));
    let count = u32_at(head, EH_COUNT) as usize;
    let first = u64_at(head, EH_FIRST);
    if count == 0 {
        return Err("entry holds no records".to_owned());
    }
    let mut at = EH_LEN + name_len;
    let name = body
        .get(EH_LEN..at)
        .and_then(|n| std::str::from_utf8(n).ok())
        .ok_or("entry topic name is cut or not UTF-8")?;
    validate_name(name).map_err(|e| e.to_string())?;
    first
        .checked_add(count as u64)
        .ok_or("entry offsets overflow")?;
    // Each record takes at least its header: bounds the allocation by the body size.
    if count > (body.len() - at) / ER_LEN {
        return Err(format!("entry announces {count} records, more than fit"));
    }
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let rh = body
            .get(at..at + ER_LEN)
            .ok_or("entry record header is cut")?;
        let timestamp_us = u64_at(rh, ER_TIMESTAMP);
        let key_len = u32_at(rh, ER_KEY_LEN);
        let value_len = u32_at(rh, ER_VALUE_LEN) as usize;
        at += ER_LEN;
        let key = if key_len == KEY_NONE {
            None
        } else {
            let k = body
                .get(at..at + key_len as usize)
                .ok_or("entry record key is cut")?;
            at += k.len();
            Some(k)
        };
        let value = body
            .get(at..at + value_len)
            .ok_or("entry record value is cut")?;
        at += value_len;
        records.push(Append {
            key,
            value,
            timestamp_us: Some(timestamp_us),
        });
    }
    if at != body.len() {
        return Err(format!(
            "entry has {} bytes after its last record",
            body.len() - at
        ));
    }
    Ok(Entry {
        topic: name,
        first,
        records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_reject_damage() {
        let records = [
            Append {
                key: Some(b"k"),
                value: b"v1",
                timestamp_us: Some(7),
            },
            Append {
                key: Some(b""),
                value: b"",
                timestamp_us: None,
            },
            Append::value(b"third"),
        ];
        let mut buf = Vec::new();
        encode(&mut buf, "orders", 41, &records, 99);
        let e = decode(&buf).expect("decodes");
        assert_eq!((e.topic, e.first, e.records.len()), ("orders", 41, 3));
        assert_eq!(e.records[0].key, Some(&b"k"[..]));
        assert_eq!(e.records[1].key, Some(&b""[..]));
        assert_eq!(e.records[2].key, None);
        assert_eq!(e.records[2].value, b"third");
        let stamps: Vec<_> = e.records.iter().map(|r| r.timestamp_us).collect();
        assert_eq!(stamps, [Some(7), Some(99), Some(99)]);
        for cut in 0..buf.len() {
            assert!(decode(&buf[..cut]).is_err(), "cut at {cut} accepted");
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut bad_kind = buf.clone();
        bad_kind[EH_KIND] = 9;
        assert!(decode(&bad_kind).is_err());
        let mut bad_name = buf;
        bad_name[EH_LEN] = b'/';
        assert!(decode(&bad_name).is_err());
    }
}

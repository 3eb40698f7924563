//! Journal entries: what the topic log writes into each ring record (a batch of records
//! of one topic, from its first offset). Bytes in `docs/FORMAT.md` ("Journal entries").

use crate::format::{TOPIC_NAME_MAX, validate_name};
use crate::headers::HeaderBlock;
use crate::record::Append;

/// Entry kind: a batch of records of one topic.
const ENTRY_KIND_BATCH: u8 = 1;
/// Records without headers.
const ENTRY_VERSION_PLAIN: u8 = 1;
/// Each record header also carries the length of the record's header entries.
const ENTRY_VERSION_HEADERS: u8 = 2;
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
/// Version 2 only: header entry bytes (0: none), then the entries after the key.
pub const ER_HEADERS_LEN: usize = ER_LEN;
pub const ER_LEN_HEADERS: usize = ER_HEADERS_LEN + 4;
const KEY_NONE: u32 = u32::MAX;
const _: () = assert!(EH_LEN == 16 && ER_LEN == 16 && ER_LEN_HEADERS == 20);
const _: () = assert!(TOPIC_NAME_MAX <= u16::MAX as usize);

/// Room reserved in every ring entry beyond the batch limit: the entry header, the longest
/// name and the record headers of a batch of up to about 4,000 records.
const ENTRY_OVERHEAD_BYTES: u64 = 64 * 1024;

/// The largest journal entry the Wal's limits allow: the ring's record limit.
pub fn entry_bytes_max(record_bytes_max: u64, batch_bytes_max: u64) -> u64 {
    record_bytes_max.max(batch_bytes_max) + ENTRY_OVERHEAD_BYTES
}

/// The entry version `records` need, and the bytes of each record's header in it.
fn version_of(records: &[Append<'_>]) -> (u8, usize) {
    if records.iter().any(|r| r.headers.is_some()) {
        (ENTRY_VERSION_HEADERS, ER_LEN_HEADERS)
    } else {
        (ENTRY_VERSION_PLAIN, ER_LEN)
    }
}

/// Bytes of the entry for `records` of topic `name`.
pub fn entry_len(name: &str, records: &[Append<'_>]) -> u64 {
    let (_, record_header) = version_of(records);
    let bytes: usize = records
        .iter()
        .map(|r| r.key.map_or(0, <[u8]>::len) + r.value.len() + headers_bytes(r).len())
        .sum();
    (EH_LEN + name.len() + record_header * records.len() + bytes) as u64
}

fn headers_bytes<'a>(r: &Append<'a>) -> &'a [u8] {
    r.headers.map_or(&[], HeaderBlock::as_bytes)
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
    let (version, _) = version_of(records);
    buf.push(ENTRY_KIND_BATCH);
    buf.push(version);
    buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
    buf.extend_from_slice(&(records.len() as u32).to_le_bytes());
    buf.extend_from_slice(&first.to_le_bytes());
    buf.extend_from_slice(name.as_bytes());
    for r in records {
        buf.extend_from_slice(&r.timestamp_us.unwrap_or(now_us).to_le_bytes());
        let key_len = r.key.map_or(KEY_NONE, |k| k.len() as u32);
        buf.extend_from_slice(&key_len.to_le_bytes());
        buf.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
        let headers = headers_bytes(r);
        if version == ENTRY_VERSION_HEADERS {
            buf.extend_from_slice(&(headers.len() as u32).to_le_bytes());
        }
        if let Some(k) = r.key {
            buf.extend_from_slice(k);
        }
        buf.extend_from_slice(headers);
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
    let record_header = match (head[EH_KIND], head[EH_VERSION]) {
        (ENTRY_KIND_BATCH, ENTRY_VERSION_PLAIN) => ER_LEN,
        (ENTRY_KIND_BATCH, ENTRY_VERSION_HEADERS) => ER_LEN_HEADERS,
        (kind, version) => {
            return Err(format!("unknown entry kind {kind} version {version}"));
        }
    };
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
    if count > (body.len() - at) / record_header {
        return Err(format!("entry announces {count} records, more than fit"));
    }
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let rh = body
            .get(at..at + record_header)
            .ok_or("entry record header is cut")?;
        let timestamp_us = u64_at(rh, ER_TIMESTAMP);
        let key_len = u32_at(rh, ER_KEY_LEN);
        let value_len = u32_at(rh, ER_VALUE_LEN) as usize;
        let headers_len = if record_header == ER_LEN_HEADERS {
            u32_at(rh, ER_HEADERS_LEN) as usize
        } else {
            0
        };
        at += record_header;
        let key = if key_len == KEY_NONE {
            None
        } else {
            let k = body
                .get(at..at + key_len as usize)
                .ok_or("entry record key is cut")?;
            at += k.len();
            Some(k)
        };
        let headers = if headers_len == 0 {
            None
        } else {
            let h = body
                .get(at..at + headers_len)
                .ok_or("entry record headers are cut")?;
            at += headers_len;
            Some(HeaderBlock::parse(h).map_err(|e| format!("entry record {e}"))?)
        };
        let value = body
            .get(at..at + value_len)
            .ok_or("entry record value is cut")?;
        at += value_len;
        records.push(Append {
            key,
            value,
            timestamp_us: Some(timestamp_us),
            headers,
        });
    }
    if record_header == ER_LEN_HEADERS && records.iter().all(|r| r.headers.is_none()) {
        // One encoding per entry: a batch without headers is written as version 1.
        return Err("version 2 entry whose records have no headers".to_owned());
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
                headers: None,
                key: Some(b"k"),
                value: b"v1",
                timestamp_us: Some(7),
            },
            Append {
                headers: None,
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

//! A read-only handle on a tier's bucket alone ([`RemoteLog`]): the manifest, and records
//! read from the extent objects it names, checked as local extents are (identity slot,
//! salt, each frame's checksum and offset). Objects are fetched whole and a few are kept.

use std::sync::{Arc, Mutex, MutexGuard};

use super::bucket::Bucket;
use super::manifest::{ExtentObject, Manifest, RemoteTopic};
use crate::config::TierConfig;
use crate::error::{Error, Result};
use crate::format::{self, BlockIdentity, IndexEntry};
use crate::poison::Recover;

/// Extent objects a handle keeps after reading them (10 MiB each by default).
const CACHED_OBJECTS: usize = 4;

/// One record read from the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRecord {
    /// Its offset in its topic.
    pub offset: u64,
    /// Microseconds since the Unix epoch, as appended.
    pub timestamp_us: u64,
    /// Its key, if it has one.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Vec<u8>,
}

/// A topic as the bucket holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTopicInfo {
    /// The topic's name.
    pub name: String,
    /// The first offset an object holds (0 when it has none).
    pub first_offset: u64,
    /// The offset after the last record an object holds.
    pub next_offset: u64,
    /// Extent objects holding its records.
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// An extent object read and its identity checked.
#[derive(Debug)]
struct Fetched {
    key: String,
    bytes: Arc<[u8]>,
    identity: BlockIdentity,
}

/// A read-only handle on the records a tier's bucket holds, with no local directory
/// (`tidelog.open_remote`). It sees the manifest as it was when opened or last refreshed.
#[derive(Debug)]
pub struct RemoteLog {
    bucket: Bucket,
    manifest: Mutex<Manifest>,
    cache: Mutex<Vec<Arc<Fetched>>>,
}

impl RemoteLog {
    /// Opens the bucket `config` names and reads its manifest. `config.takeover` is
    /// ignored: this handle writes nothing.
    pub fn open(config: &TierConfig) -> Result<RemoteLog> {
        let bucket = Bucket::open(config)?;
        let mut manifest = Manifest::default();
        manifest.refresh(&bucket)?;
        Ok(RemoteLog {
            bucket,
            manifest: Mutex::new(manifest),
            cache: Mutex::new(Vec::new()),
        })
    }

    fn manifest(&self) -> MutexGuard<'_, Manifest> {
        self.manifest.lock().recover()
    }

    /// Reads the deltas written since the open or the last refresh.
    pub fn refresh(&self) -> Result<()> {
        let mut next = self.manifest().clone();
        next.refresh(&self.bucket)?;
        *self.manifest() = next;
        Ok(())
    }

    /// The manifest version this handle reads.
    pub fn version(&self) -> u64 {
        self.manifest().version
    }

    /// The topics the bucket holds, by name.
    pub fn topics(&self) -> Vec<String> {
        self.manifest().ids.keys().cloned().collect()
    }

    /// What the bucket holds of `topic`.
    pub fn topic_info(&self, topic: &str) -> Result<RemoteTopicInfo> {
        let manifest = self.manifest();
        let (_, t) = known(&manifest, topic)?;
        Ok(RemoteTopicInfo {
            name: topic.to_owned(),
            first_offset: t.objects.keys().next().copied().unwrap_or(0),
            next_offset: t.next_offset().unwrap_or(0),
            objects: t.objects.len(),
            bytes: t.objects.values().map(|o| o.bytes).sum(),
        })
    }

    /// The record of `topic` at `offset`.
    pub fn read(&self, topic: &str, offset: u64) -> Result<RemoteRecord> {
        let mut records = self.read_range(topic, offset, offset.saturating_add(1), 1)?;
        records.pop().ok_or_else(|| Error::OffsetOutOfRange {
            topic: topic.to_owned(),
            offset,
            first: 0,
            next: 0,
        })
    }

    /// The records of `topic` from `start` up to `end` (exclusive; clamped to what the
    /// bucket holds), at most `max_records`. `OffsetOutOfRange` when `start` is not held
    /// (it may equal the end: nothing to read).
    pub fn read_range(
        &self,
        topic: &str,
        start: u64,
        end: u64,
        max_records: usize,
    ) -> Result<Vec<RemoteRecord>> {
        let objects: Vec<ExtentObject> = {
            let manifest = self.manifest();
            let (_, t) = known(&manifest, topic)?;
            let first = t.objects.keys().next().copied().unwrap_or(0);
            let next = t.next_offset().unwrap_or(0);
            if start < first || start > next {
                return Err(Error::OffsetOutOfRange {
                    topic: topic.to_owned(),
                    offset: start,
                    first,
                    next,
                });
            }
            let from = t
                .objects
                .range(..=start)
                .next_back()
                .map_or(start, |(k, _)| *k);
            t.objects
                .range(from..end.min(next))
                .map(|(_, o)| o.clone())
                .collect()
        };
        let mut out = Vec::new();
        for object in objects {
            let fetched = self.fetch(&object)?;
            let want = max_records.saturating_sub(out.len());
            read_object(
                &object,
                &fetched,
                start.max(object.first_offset),
                end,
                want,
                &mut out,
            )?;
            if out.len() >= max_records {
                break;
            }
        }
        Ok(out)
    }

    /// The bytes of `object`, from the cache or the bucket, its identity checked against
    /// what the manifest says of it.
    fn fetch(&self, object: &ExtentObject) -> Result<Arc<Fetched>> {
        {
            let mut cache = self.cache.lock().recover();
            if let Some(i) = cache.iter().position(|f| f.key == object.key) {
                let hit = cache.remove(i);
                cache.push(Arc::clone(&hit));
                return Ok(hit);
            }
        }
        let bad = |reason: String| Error::TierCorruption {
            key: object.key.clone(),
            reason,
        };
        let bytes = self
            .bucket
            .get(&object.key)?
            .ok_or_else(|| bad("named by the manifest but not in the bucket".into()))?;
        if bytes.len() as u64 != object.bytes {
            return Err(bad(format!(
                "{} bytes, the manifest says {}",
                bytes.len(),
                object.bytes
            )));
        }
        let identity = bytes
            .get(format::ID_SLOT_AT..)
            .and_then(BlockIdentity::decode)
            .ok_or_else(|| bad("its identity slot fails its checks".into()))?;
        if identity.salt != object.salt || identity.first_offset != object.first_offset {
            return Err(bad(
                "its identity is not the extent the manifest names".into()
            ));
        }
        let fetched = Arc::new(Fetched {
            key: object.key.clone(),
            bytes: bytes.into(),
            identity,
        });
        let mut cache = self.cache.lock().recover();
        if cache.len() >= CACHED_OBJECTS {
            cache.remove(0);
        }
        cache.push(Arc::clone(&fetched));
        Ok(fetched)
    }
}

fn known<'m>(manifest: &'m Manifest, topic: &str) -> Result<(u32, &'m RemoteTopic)> {
    manifest.topic(topic).ok_or_else(|| Error::UnknownTopic {
        topic: topic.to_owned(),
    })
}

/// Appends to `out` the records of `object` from `from` up to `end`, at most `want`: from
/// the footer's last entry at or before `from`, frame by frame, each checked.
fn read_object(
    object: &ExtentObject,
    fetched: &Fetched,
    from: u64,
    end: u64,
    want: usize,
    out: &mut Vec<RemoteRecord>,
) -> Result<()> {
    let bytes = &fetched.bytes[..];
    let id = &fetched.identity;
    let relative = id.version == format::VERSION_RELATIVE;
    let (base, topic_id) = if relative {
        (object.first_offset, 0)
    } else {
        (0, id.topic_id)
    };
    let bad = |reason: String| Error::TierCorruption {
        key: object.key.clone(),
        reason,
    };
    let (mut offset, mut position) = footer_floor(object, bytes, base, from).map_err(bad)?;
    let stop = object.next_offset().min(end);
    while offset < stop && out.len() < want {
        if position >= object.footer_position {
            return Err(bad(format!("its frames end before offset {offset}")));
        }
        let view = format::decode_frame(
            bytes,
            position as usize,
            id.salt,
            topic_id,
            offset - base,
            true,
        )
        .map_err(|e| {
            bad(format!(
                "offset {offset} at byte {position}: {}",
                e.describe()
            ))
        })?;
        if offset >= from {
            out.push(RemoteRecord {
                offset,
                timestamp_us: view.timestamp_us,
                key: view.key.map(|k| bytes[k].to_vec()),
                value: bytes[view.value].to_vec(),
            });
        }
        position = view.next_position as u64;
        offset += 1;
    }
    Ok(())
}

/// The last footer entry at or before `target`: its offset and position (the first record's
/// when the footer has none before it). The footer's checksum is the manifest's.
fn footer_floor(
    object: &ExtentObject,
    bytes: &[u8],
    base: u64,
    target: u64,
) -> std::result::Result<(u64, u64), String> {
    let start = usize::try_from(object.footer_position).map_err(|_| "footer past the object")?;
    let len = usize::try_from(object.footer_count)
        .ok()
        .and_then(|n| n.checked_mul(format::IX_LEN))
        .ok_or("footer too long")?;
    let footer = start
        .checked_add(len)
        .and_then(|end| bytes.get(start..end))
        .ok_or("footer past the object")?;
    if crc32fast::hash(footer) != object.footer_crc {
        return Err("index footer checksum mismatch".into());
    }
    let mut floor = (object.first_offset, format::BLOCK_HEADER_BYTES);
    for entry in footer
        .chunks_exact(format::IX_LEN)
        .filter_map(IndexEntry::decode)
    {
        let offset = entry.offset + base;
        if offset > target {
            break;
        }
        floor = (offset, entry.position);
    }
    Ok(floor)
}

//! An extent object's bytes read from the bucket, checked against what the manifest says
//! of it (size, identity slot, salt, index footer), and the frames in them: the remote twin
//! of a sealed local extent. Every frame is checked as a local one is. A few objects read
//! are kept ([`ObjectCache`]).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::manifest::ExtentObject;
use crate::error::{Error, Result};
use crate::format::{self, BlockIdentity, FrameView, IndexEntry};
use crate::poison::Recover;

/// An extent object whose bytes passed the checks of [`LoadedObject::check`].
#[derive(Debug)]
pub(crate) struct LoadedObject {
    pub object: ExtentObject,
    bytes: Bytes,
    salt: u32,
    /// The topic id its frames carry (0 in relative-offset extents).
    frame_topic_id: u32,
    /// Its records are batch frames (an extent of data-file version 3).
    batched: bool,
    /// What its frames' stored offsets are relative to (0: absolute offsets).
    base: u64,
    /// Its index footer, offsets absolute.
    footer: Vec<IndexEntry>,
    /// Every frame's checksum was checked already ([`LoadedObject::verify_all`]).
    verified: bool,
}

impl LoadedObject {
    /// Checks `bytes`, read at `object.key`, against `object` and the topic it is named
    /// under: a mismatch is `TierCorruption`, never records read from the wrong bytes.
    pub fn check(object: &ExtentObject, topic: &str, bytes: Bytes) -> Result<LoadedObject> {
        let bad = |reason: String| Error::TierCorruption {
            key: object.key.clone(),
            reason,
        };
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
        if identity.salt != object.salt
            || identity.first_offset != object.first_offset
            || identity.topic != topic
        {
            return Err(bad(format!(
                "its identity (topic {:?}, offset {}, salt {:#x}) is not the extent the \
                 manifest names",
                identity.topic, identity.first_offset, identity.salt
            )));
        }
        let relative = format::version_relative(identity.version);
        let base = if relative { object.first_offset } else { 0 };
        let footer = footer(object, &bytes, base).map_err(bad)?;
        Ok(LoadedObject {
            object: object.clone(),
            bytes,
            salt: identity.salt,
            frame_topic_id: if relative { 0 } else { identity.topic_id },
            batched: format::version_batched(identity.version),
            base,
            footer,
            verified: false,
        })
    }

    /// Checks every record's frame, checksums included, from the first; true (and later
    /// reads skip the checksums) when all pass. A failure is left for the read that meets
    /// it, which reports it at its offset.
    pub fn verify_all(&mut self) -> bool {
        let mut position = format::BLOCK_HEADER_BYTES;
        let mut checked = format::Checked::default();
        for offset in self.object.first_offset..self.object.next_offset() {
            match self.frame_walking(position, offset, true, &mut checked) {
                Ok(view) => position = view.next_position as u64,
                Err(_) => return false,
            }
        }
        self.verified = true;
        true
    }

    /// Offset and position to scan from towards offset `target`: the last footer entry at
    /// or before it (or the first record).
    pub fn floor_offset(&self, target: u64) -> (u64, u64) {
        let i = self.footer.partition_point(|e| e.offset <= target);
        self.floor(i)
    }

    /// Offset and position to scan from towards the first timestamp at or after
    /// `timestamp_us`.
    pub fn floor_time(&self, timestamp_us: u64) -> (u64, u64) {
        let i = self
            .footer
            .partition_point(|e| e.max_timestamp_us < timestamp_us);
        self.floor(i)
    }

    fn floor(&self, i: usize) -> (u64, u64) {
        match i.checked_sub(1).and_then(|i| self.footer.get(i)) {
            Some(e) => (e.offset, e.position),
            None => (self.object.first_offset, format::BLOCK_HEADER_BYTES),
        }
    }

    /// The frame of `offset` at `position`, checked (its checksum only with `verify`).
    pub fn frame(&self, position: u64, offset: u64, verify: bool) -> Result<FrameView> {
        let bad = |reason: String| Error::TierCorruption {
            key: self.object.key.clone(),
            reason: format!("offset {offset} at byte {position}: {reason}"),
        };
        if position >= self.object.footer_position || offset >= self.object.next_offset() {
            return Err(bad("its records end before this one".into()));
        }
        let stored = offset
            .checked_sub(self.base)
            .ok_or_else(|| bad("before the object's first record".into()))?;
        let at = usize::try_from(position).map_err(|_| bad("past the object".into()))?;
        let records = self.records();
        let verify = verify && !self.verified;
        let decoded = if self.batched {
            crate::batch::decode(records, at, self.salt, self.frame_topic_id, stored, verify)
        } else {
            format::decode_frame(records, at, self.salt, self.frame_topic_id, stored, verify)
        };
        let mut view = decoded.map_err(|e| bad(e.describe().into()))?;
        view.offset = offset;
        Ok(view)
    }

    /// [`LoadedObject::frame`] for a walker that remembers the frame it decoded last
    /// (`checked`): a frame's checksum is checked once.
    pub fn frame_walking(
        &self,
        position: u64,
        offset: u64,
        verify: bool,
        checked: &mut format::Checked,
    ) -> Result<FrameView> {
        checked.walk(position, verify, |check| {
            self.frame(position, offset, check)
        })
    }

    /// The bytes of `range` of a frame [`LoadedObject::frame`] returned.
    pub fn bytes(&self, range: Range<usize>) -> &[u8] {
        &self.records()[range]
    }

    /// The header and frames: a frame running into the footer is truncated, not read.
    fn records(&self) -> &[u8] {
        let end = usize::try_from(self.object.footer_position).unwrap_or(usize::MAX);
        &self.bytes[..end.min(self.bytes.len())]
    }
}

/// Extent objects a handle keeps after reading them (10 MiB each by default).
const CACHED_OBJECTS: usize = 4;

/// Extent objects read and checked, a few kept for later reads (the most recently used
/// last).
#[derive(Debug, Default)]
pub(crate) struct ObjectCache {
    kept: Mutex<Vec<Arc<LoadedObject>>>,
}

impl ObjectCache {
    /// The object at `key`, if it is kept (it becomes the most recently used).
    pub fn cached(&self, key: &str) -> Option<Arc<LoadedObject>> {
        let mut kept = self.kept.lock().recover();
        let i = kept.iter().position(|o| o.object.key == key)?;
        let hit = kept.remove(i);
        kept.push(Arc::clone(&hit));
        Some(hit)
    }

    /// Checks the bytes read at `object.key` (`None`: no object there) and keeps them.
    pub fn loaded(
        &self,
        object: &ExtentObject,
        topic: &str,
        bytes: Option<Bytes>,
    ) -> Result<Arc<LoadedObject>> {
        let bytes = bytes.ok_or_else(|| Error::TierCorruption {
            key: object.key.clone(),
            reason: "named by the manifest but not in the bucket".into(),
        })?;
        let loaded = Arc::new(LoadedObject::check(object, topic, bytes)?);
        self.keep(&loaded);
        Ok(loaded)
    }

    /// Keeps `loaded` (checked elsewhere, maybe verified whole).
    pub fn keep(&self, loaded: &Arc<LoadedObject>) {
        let mut kept = self.kept.lock().recover();
        if !kept.iter().any(|o| o.object.key == loaded.object.key) {
            if kept.len() >= CACHED_OBJECTS {
                kept.remove(0);
            }
            kept.push(Arc::clone(loaded));
        }
    }
}

/// The index footer of `object`, checked against the manifest's CRC, offsets made absolute.
fn footer(
    object: &ExtentObject,
    bytes: &[u8],
    base: u64,
) -> std::result::Result<Vec<IndexEntry>, String> {
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
    let mut entries = Vec::with_capacity(footer.len() / format::IX_LEN);
    for entry in footer
        .chunks_exact(format::IX_LEN)
        .filter_map(IndexEntry::decode)
    {
        let offset = entry
            .offset
            .checked_add(base)
            .filter(|o| *o >= object.first_offset && *o < object.next_offset())
            .ok_or_else(|| format!("footer entry of offset {} outside the object", entry.offset))?;
        if entry.position < format::BLOCK_HEADER_BYTES || entry.position >= object.footer_position {
            return Err(format!(
                "footer entry at byte {} outside the records",
                entry.position
            ));
        }
        if entries
            .last()
            .is_some_and(|e: &IndexEntry| e.offset >= offset)
        {
            return Err("footer entries out of order".into());
        }
        entries.push(IndexEntry { offset, ..entry });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// An object of `bytes` whose identity slot names `topic` from offset 7: every check
    /// before the frames passes when the footer's CRC is the manifest's.
    fn object(mut bytes: Vec<u8>, relative: bool) -> Bytes {
        let identity = BlockIdentity {
            version: if relative {
                format::VERSION_RELATIVE
            } else {
                1
            },
            topic_id: 3,
            block_index: 0,
            extent_count: 1,
            salt: 0x5eed,
            file_seq: 1,
            first_offset: 7,
            topic: "t".into(),
        };
        bytes[format::ID_SLOT_AT..format::ID_SLOT_AT + format::ID_LEN]
            .copy_from_slice(&identity.encode());
        Bytes::from(bytes)
    }

    proptest! {
        /// Any bytes under a valid identity, with any footer and counts the manifest could
        /// claim, give records or `TierCorruption`, never a panic.
        #[test]
        fn arbitrary_objects_do_not_panic(
            body in proptest::collection::vec(any::<u8>(), 0..3000),
            footer_at in 0u64..9000,
            footer_count in 0u64..40,
            records in 0u64..50,
            relative in any::<bool>(),
            reads in proptest::collection::vec((0u64..60, 0u64..9000, any::<bool>()), 0..8),
        ) {
            let mut bytes = vec![0u8; format::BLOCK_HEADER_BYTES as usize];
            bytes.extend_from_slice(&body);
            let len = bytes.len() as u64;
            let footer_crc = usize::try_from(footer_at)
                .ok()
                .and_then(|at| bytes.get(at..at + footer_count as usize * format::IX_LEN))
                .map_or(0, crc32fast::hash);
            let extent = ExtentObject {
                topic: 3,
                key: "k".into(),
                first_offset: 7,
                salt: 0x5eed,
                records,
                bytes: len,
                max_timestamp_us: u64::MAX,
                footer_position: footer_at,
                footer_count,
                footer_crc,
            };
            let bytes = object(bytes, relative);
            if let Ok(loaded) = LoadedObject::check(&extent, "t", bytes) {
                for (offset, position, verify) in reads {
                    let _ = loaded.floor_offset(offset);
                    let _ = loaded.floor_time(position);
                    if let Ok(view) = loaded.frame(position, offset, verify) {
                        prop_assert!(view.value.end <= extent.footer_position as usize);
                        let _ = loaded.bytes(view.value);
                    }
                }
            }
        }
    }

    #[test]
    fn a_wrong_size_or_identity_is_corruption() {
        let bytes = vec![0u8; format::BLOCK_HEADER_BYTES as usize + 100];
        let extent = ExtentObject {
            topic: 3,
            key: "k".into(),
            first_offset: 7,
            salt: 0x5eed,
            records: 1,
            bytes: bytes.len() as u64,
            max_timestamp_us: 0,
            footer_position: bytes.len() as u64,
            footer_count: 0,
            footer_crc: crc32fast::hash(&[]),
        };
        let good = object(bytes.clone(), false);
        assert!(LoadedObject::check(&extent, "t", good.clone()).is_ok());
        for (e, topic) in [
            (
                ExtentObject {
                    bytes: 99,
                    ..extent.clone()
                },
                "t",
            ),
            (
                ExtentObject {
                    salt: 1,
                    ..extent.clone()
                },
                "t",
            ),
            (
                ExtentObject {
                    first_offset: 8,
                    ..extent.clone()
                },
                "t",
            ),
            (extent.clone(), "u"),
        ] {
            assert!(matches!(
                LoadedObject::check(&e, topic, good.clone()),
                Err(Error::TierCorruption { .. })
            ));
        }
        // Zeroes where the manifest says a record is: corruption, not an empty record.
        let loaded = LoadedObject::check(&extent, "t", good).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            loaded.frame(format::BLOCK_HEADER_BYTES, 7, true),
            Err(Error::TierCorruption { .. })
        ));
    }
}

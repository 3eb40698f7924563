//! Where remote reads find the bucket, the manifest and the objects kept ([`Source`]): a
//! [`super::RemoteLog`]'s own ([`Shared`]), or the tier of a directory's handle.

use std::sync::{Arc, Mutex, MutexGuard};

use super::bucket::Bucket;
use super::manifest::{Manifest, RemoteTopic};
use super::object::ObjectCache;
use super::state::Tier;
use crate::error::{Error, Result};
use crate::poison::Recover;

/// What a [`super::RemoteLog`] and its readers share: the bucket, the manifest as last read, and
/// the objects kept.
#[derive(Debug)]
pub(crate) struct Shared {
    bucket: Bucket,
    manifest: Mutex<Manifest>,
    cache: ObjectCache,
}

impl Shared {
    pub fn new(bucket: Bucket, manifest: Manifest) -> Shared {
        Shared {
            bucket,
            manifest: Mutex::new(manifest),
            cache: ObjectCache::default(),
        }
    }

    pub fn manifest(&self) -> MutexGuard<'_, Manifest> {
        self.manifest.lock().recover()
    }

    /// Reads the deltas written since the manifest was read.
    pub fn refresh(&self) -> Result<()> {
        let mut next = self.manifest().clone();
        next.refresh(&self.bucket)?;
        let mut manifest = self.manifest();
        // Another refresh may have read further meanwhile.
        if next.version > manifest.version {
            *manifest = next;
        }
        Ok(())
    }
}

/// Where a [`super::RemoteReader`] finds the bucket and the manifest: a
/// [`super::RemoteLog`]'s, or the
/// tier of a directory's handle (whose upload thread keeps its manifest current).
#[derive(Debug, Clone)]
pub(crate) enum Source {
    Remote(Arc<Shared>),
    Tier(Arc<Tier>),
}

impl Source {
    pub fn bucket(&self) -> &Bucket {
        match self {
            Source::Remote(shared) => &shared.bucket,
            Source::Tier(tier) => tier.bucket(),
        }
    }

    pub fn cache(&self) -> &ObjectCache {
        match self {
            Source::Remote(shared) => &shared.cache,
            Source::Tier(tier) => tier.cache(),
        }
    }

    /// Runs `f` on the manifest as last read (under its lock: `f` makes no request).
    pub fn with_manifest<R>(&self, f: impl FnOnce(&Manifest) -> R) -> R {
        match self {
            Source::Remote(shared) => f(&shared.manifest()),
            Source::Tier(tier) => tier.with_manifest(f),
        }
    }

    /// Reads the manifest's deltas written since it was last read.
    pub fn refresh(&self) -> Result<()> {
        match self {
            Source::Remote(shared) => shared.refresh(),
            Source::Tier(tier) => tier.refresh(),
        }
    }
}

/// The topic `topic` of `manifest`, or `UnknownTopic`.
pub(crate) fn known<'m>(manifest: &'m Manifest, topic: &str) -> Result<&'m RemoteTopic> {
    manifest
        .topic(topic)
        .map(|(_, t)| t)
        .ok_or_else(|| Error::UnknownTopic {
            topic: topic.to_owned(),
        })
}

/// The first offset an object of `topic` holds and the offset after its last (0 and 0
/// when it has none).
pub(crate) fn bounds(topic: &RemoteTopic) -> (u64, u64) {
    let first = topic.objects.keys().next().copied().unwrap_or(0);
    (first, topic.next_offset().unwrap_or(first))
}

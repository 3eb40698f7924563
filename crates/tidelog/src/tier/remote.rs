//! A read-only handle on a tier's bucket alone ([`RemoteLog`]): the manifest, and records
//! read from the extent objects it names ([`super::reader::RemoteReader`]).

use std::sync::Arc;

use super::bucket::Bucket;
use super::manifest::Manifest;
use super::reader::{RemoteReader, RemoteRecord};
use super::source::{Shared, Source, bounds, known};
use crate::config::{ReaderOptions, StartPosition, TierConfig};
use crate::error::{Error, Result};

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

/// A read-only handle on the records a tier's bucket holds, with no local directory
/// (`tidelog.open_remote`). It sees the manifest as it was when opened or last refreshed.
#[derive(Debug)]
pub struct RemoteLog {
    shared: Arc<Shared>,
}

impl RemoteLog {
    /// Opens the bucket `config` names and reads its manifest. `config.takeover` is
    /// ignored: this handle writes nothing.
    pub fn open(config: &TierConfig) -> Result<RemoteLog> {
        let bucket = Bucket::open(config)?;
        let mut manifest = Manifest::default();
        manifest.refresh(&bucket)?;
        Ok(RemoteLog {
            shared: Arc::new(Shared::new(bucket, manifest)),
        })
    }

    /// Reads the deltas written since the open or the last refresh.
    pub fn refresh(&self) -> Result<()> {
        self.shared.refresh()
    }

    /// The manifest version this handle reads.
    pub fn version(&self) -> u64 {
        self.shared.manifest().version
    }

    /// The topics the bucket holds, by name.
    pub fn topics(&self) -> Vec<String> {
        self.shared.manifest().ids.keys().cloned().collect()
    }

    /// What the bucket holds of `topic`.
    pub fn topic_info(&self, topic: &str) -> Result<RemoteTopicInfo> {
        let manifest = self.shared.manifest();
        let t = known(&manifest, topic)?;
        let (first_offset, next_offset) = bounds(t);
        Ok(RemoteTopicInfo {
            name: topic.to_owned(),
            first_offset,
            next_offset,
            objects: t.objects.len(),
            bytes: t
                .objects
                .values()
                .map(|o| o.bytes)
                .fold(0, u64::saturating_add),
        })
    }

    /// A reader of `topic` (see [`RemoteReader`]). A bucket has no home for a group's
    /// cursor yet: `options.group` is an error, and `Committed` starts at the earliest.
    pub fn reader_with(&self, topic: &str, options: &ReaderOptions) -> Result<RemoteReader> {
        RemoteReader::new(Source::Remote(Arc::clone(&self.shared)), topic, options)
    }

    /// The record of `topic` at `offset`.
    pub fn read(&self, topic: &str, offset: u64) -> Result<RemoteRecord> {
        let mut reader = self.at(topic, offset)?;
        match reader.next()? {
            Some(record) => Ok(record),
            None => {
                let (first, next) = reader.bounds()?;
                Err(Error::OffsetOutOfRange {
                    topic: topic.to_owned(),
                    offset,
                    first,
                    next,
                })
            }
        }
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
        let mut reader = self.at(topic, start)?;
        let mut out = Vec::new();
        reader.scan_until(end, max_records, |r| {
            out.push(r.to_record());
            true
        })?;
        Ok(out)
    }

    /// A reader of `topic` at `offset`.
    pub fn at(&self, topic: &str, offset: u64) -> Result<RemoteReader> {
        let options = ReaderOptions::default().start(StartPosition::Offset(offset));
        self.reader_with(topic, &options)
    }
}

//! Object storage behind a directory (`Config::tier`): the bucket, the manifest there, this
//! directory's producer id, and what one handle knows of them. The upload thread and
//! `Wal::tier_flush` are the handle's (`wal::tier`); this layer only talks to the bucket.
//!
//! Without the `tier` cargo feature [`Tier`] has no value, so every handle's tier is `None`.

#[cfg(feature = "tier")]
mod bucket;
#[cfg(feature = "tier")]
#[doc(hidden)]
pub mod faults;
#[cfg(feature = "tier")]
pub(crate) mod manifest;
#[cfg(feature = "tier")]
mod object;
#[cfg(feature = "tier")]
mod producer;
#[cfg(feature = "tier")]
mod reader;
#[cfg(feature = "tier")]
mod remote;
#[cfg(feature = "tier")]
mod source;
#[cfg(feature = "tier")]
pub mod staging;
#[cfg(feature = "tier")]
mod state;

#[cfg(feature = "tier")]
pub use reader::{
    READAHEAD_OBJECTS, REFRESH_INTERVAL, RemoteReader, RemoteRecord, RemoteRecordRef,
};
#[cfg(feature = "tier")]
pub use remote::{RemoteLog, RemoteTopicInfo};
#[cfg(feature = "tier")]
pub(crate) use state::{Pending, Tier};

/// The directory's producer file: present once a writable open had a tier.
pub(crate) const PRODUCER_FILE: &str = "TIER";

/// A writable open of a directory that has a tier must have one too: without it, its
/// reclaim would drop extents the bucket does not hold.
pub(crate) fn check_untiered_open(
    storage: &dyn crate::io::Storage,
    dir: &std::path::Path,
) -> crate::Result<()> {
    match storage.read_file(&dir.join(PRODUCER_FILE)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(crate::Error::io(
            "read tier producer file",
            dir.join(PRODUCER_FILE),
            e,
        )),
        Ok(_) => Err(crate::Error::invalid(
            "tier",
            format!(
                "{} uploads to a tier (its {PRODUCER_FILE} file): open it with the tier's URL, \
                 or remove {PRODUCER_FILE} to stop uploading",
                dir.display()
            ),
        )),
    }
}

/// What [`crate::Wal::tier_status`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TierStatus {
    /// The bucket URL.
    pub url: String,
    /// This directory's producer id.
    pub producer: String,
    /// True while this handle uploads (the housekeeping leader among the processes that
    /// share the directory; a process alone always is).
    pub uploading: bool,
    /// The epoch this handle claimed the prefix in (0 until it uploads).
    pub epoch: u64,
    /// The manifest version this handle last read or wrote.
    pub manifest_version: u64,
    /// Extent objects this handle uploaded.
    pub uploaded_objects: u64,
    /// The bytes of those objects.
    pub uploaded_bytes: u64,
    /// Sealed extents the last upload pass left for the next (0 in a handle that does not
    /// upload).
    pub pending_extents: u64,
    /// The bytes of those extents.
    pub pending_bytes: u64,
    /// Records appended to this handle's topics that the manifest does not hold yet.
    pub lag_records: u64,
    /// Failed requests this handle retried.
    pub retries: u64,
    /// The last failure, until a later round of the upload thread's requests all succeed.
    pub last_error: Option<String>,
    /// True once another producer (or a newer claim) took the prefix: nothing more is
    /// uploaded by this handle, and local extents stay until it is reopened.
    pub fenced: bool,
}

#[cfg(feature = "tier")]
pub(crate) use object::LoadedObject;

/// An extent object read from a bucket, in a build without the `tier` feature: none is.
#[cfg(not(feature = "tier"))]
#[derive(Debug)]
pub(crate) enum LoadedObject {}

#[cfg(not(feature = "tier"))]
impl LoadedObject {
    pub fn bytes(&self, _range: std::ops::Range<usize>) -> &[u8] {
        match *self {}
    }
}

/// A reader of a tier's bucket, in a build without the `tier` feature: none is made.
#[cfg(not(feature = "tier"))]
#[derive(Debug)]
pub(crate) enum RemoteReader {}

#[cfg(not(feature = "tier"))]
impl RemoteReader {
    pub fn below(
        tier: &std::sync::Arc<Tier>,
        _topic: &str,
        _offset: u64,
    ) -> crate::Result<Option<RemoteReader>> {
        match **tier {}
    }
    pub fn first_below(tier: &Tier, _topic: &str) -> Option<u64> {
        match *tier {}
    }
    pub fn position(&self) -> u64 {
        match *self {}
    }
    pub fn seek_time(&mut self, _timestamp_us: u64) -> crate::Result<u64> {
        match *self {}
    }
    pub fn seek(&mut self, _offset: u64) -> crate::Result<()> {
        match *self {}
    }
    pub fn peek(&mut self, _verify: bool) -> crate::Result<Option<crate::format::FrameView>> {
        match *self {}
    }
    pub fn advance(&mut self, _view: &crate::format::FrameView) {
        match *self {}
    }
    pub fn current_object(&self) -> Option<&std::sync::Arc<LoadedObject>> {
        match *self {}
    }
}

/// A handle's tier, in a build without the `tier` feature: it has no value.
#[cfg(not(feature = "tier"))]
#[derive(Debug)]
pub(crate) enum Tier {}

#[cfg(not(feature = "tier"))]
impl Tier {
    /// Whether the manifest holds `extent` of topic `name`.
    pub fn holds(&self, _name: &str, _extent: &crate::extent::Extent) -> bool {
        match *self {}
    }
}

//! What one handle knows of its tier: the bucket, the manifest as last read or written, and
//! the upload counters `tier_status` reports. The upload thread (`wal::tier`) changes it;
//! reclaim asks it which extents the bucket holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::TierStatus;
use super::bucket::Bucket;
use super::manifest::{self, Delta, Entry, ExtentObject, Manifest};
use super::object::ObjectCache;
use super::producer;
use crate::config::TierConfig;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::io::Storage;
use crate::poison::Recover;

/// Tries of a claim before the pass gives up (each loses only to another commit).
const CLAIM_TRIES: u32 = 8;
/// Longest an open waits for each request reading the manifest: a bucket that does not
/// answer leaves the check to the first upload, and the open goes on.
const OPEN_REQUEST_LIMIT: Duration = Duration::from_secs(5);

/// Where extent objects live under the prefix, and how their names end.
pub const OBJECTS_DIR: &str = "topics";
pub const OBJECT_SUFFIX: &str = ".extent";

/// The keys of every object `manifest` names.
fn named_objects(manifest: &Manifest) -> BTreeSet<String> {
    manifest
        .topics
        .values()
        .flat_map(|t| t.objects.values().map(|o| o.key.clone()))
        .collect()
}

/// Sealed extents an upload pass found not in the manifest yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub extents: u64,
    pub bytes: u64,
}

/// Counters and the manifest, under one lock (never held across a request).
#[derive(Debug, Default)]
struct View {
    manifest: Manifest,
    /// The epoch this handle claimed (0: it has not uploaded).
    claimed: u64,
    /// Set once another producer or a newer claim took the prefix.
    fenced: Option<(u64, String)>,
    uploaded_objects: u64,
    uploaded_bytes: u64,
    pending: Pending,
    retries: u64,
    last_error: Option<String>,
    /// Bumped by `kick`, so the upload thread's wait ends.
    kicks: u64,
    /// Topics the last upload pass could not upload, and why.
    conflicts: BTreeMap<String, String>,
    /// A `tier_flush` waits for another process's deltas: read them at the next wake.
    refresh_wanted: bool,
}

/// A handle's tier.
#[derive(Debug)]
pub(crate) struct Tier {
    bucket: Bucket,
    producer: String,
    /// Opened with `takeover`: its first claim may follow a stranger's.
    takeover: bool,
    /// A stranger whose claim this handle may follow with its own (set by `takeover`, at
    /// the open or at its first claim if the open could not read the manifest).
    replaces: Mutex<Option<String>>,
    view: Mutex<View>,
    changed: Condvar,
    cache: ObjectCache,
    /// Objects under the prefix the manifest does not name, and since when this handle saw
    /// them so (the sweep deletes them after the delay).
    unnamed: Mutex<BTreeMap<String, Instant>>,
    uploading: AtomicBool,
    stop: AtomicBool,
    /// Set by this handle's first claim: `takeover` applies to that one only.
    claimed_once: AtomicBool,
}

impl Tier {
    /// Opens the tier of the writable handle on `dir`: the bucket, the directory's producer
    /// id, the manifest. `Fenced` when another producer holds the prefix and `takeover`
    /// was not asked for.
    pub fn open(storage: &dyn Storage, dir: &Path, config: &TierConfig) -> Result<Tier> {
        let bucket = Bucket::open(config)?;
        let producer = producer::producer_id(storage, dir)?;
        let mut manifest = Manifest::default();
        bucket.limit_requests(Some(OPEN_REQUEST_LIMIT));
        let read = manifest.refresh(&bucket);
        bucket.limit_requests(None);
        let mut last_error = None;
        match read {
            Ok(()) => {}
            // Damage and misuse are reported; a bucket that fails or does not answer is
            // retried later.
            Err(e @ (Error::TierCorruption { .. } | Error::InvalidArgument { .. })) => {
                return Err(e);
            }
            Err(e) => {
                manifest = Manifest::default();
                last_error = Some(e.to_string());
            }
        }
        let replaces = match &manifest.producer {
            Some(holder) if *holder != producer => {
                if !config.takeover {
                    return Err(Error::Fenced {
                        url: config.url.clone(),
                        epoch: manifest.epoch,
                        producer: holder.clone(),
                    });
                }
                Some(holder.clone())
            }
            _ => None,
        };
        Ok(Tier {
            bucket,
            producer,
            takeover: config.takeover,
            replaces: Mutex::new(replaces),
            view: Mutex::new(View {
                manifest,
                last_error,
                ..View::default()
            }),
            changed: Condvar::new(),
            cache: ObjectCache::default(),
            unnamed: Mutex::new(BTreeMap::new()),
            uploading: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            claimed_once: AtomicBool::new(false),
        })
    }

    fn view(&self) -> MutexGuard<'_, View> {
        self.view.lock().recover()
    }

    /// The bucket this handle uploads to.
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// Objects read back for this handle's readers.
    pub fn cache(&self) -> &ObjectCache {
        &self.cache
    }

    /// Runs `f` on the manifest as this handle knows it (under its lock: `f` makes no
    /// request).
    pub fn with_manifest<R>(&self, f: impl FnOnce(&Manifest) -> R) -> R {
        f(&self.view().manifest)
    }

    /// The bucket's key of the object of the extent of `topic` from `first_offset`, uploaded
    /// in `epoch` (a fenced producer's uploads never replace a live object).
    pub fn object_key(topic: u32, first_offset: u64, epoch: u64) -> String {
        format!(
            "{OBJECTS_DIR}/{topic}/{first_offset:0w$}-{epoch:0w$}{OBJECT_SUFFIX}",
            w = manifest::NUMBER_DIGITS
        )
    }

    /// Deletes the extent objects under the prefix that the manifest has not named for
    /// `delay` or longer (dropped by retention, or put by a pass that crashed before its
    /// commit), as this handle has seen them: a sweep after a restart waits `delay` again.
    /// Before it deletes, it reads the manifest again: a handle that lost the prefix deletes
    /// nothing. Returns how many objects it deleted.
    pub fn sweep(&self, delay: Duration) -> Result<usize> {
        let listed: BTreeSet<String> = self
            .bucket
            .list_all(OBJECTS_DIR)?
            .into_iter()
            .filter(|k| k.ends_with(OBJECT_SUFFIX))
            .collect();
        let now = Instant::now();
        let named = self.with_manifest(named_objects);
        let due: Vec<String> = {
            let mut unnamed = self.unnamed.lock().recover();
            unnamed.retain(|k, _| listed.contains(k) && !named.contains(k));
            listed
                .iter()
                .filter(|k| !named.contains(*k))
                .filter(|k| {
                    let since = *unnamed.entry((*k).clone()).or_insert(now);
                    now.duration_since(since) >= delay
                })
                .cloned()
                .collect()
        };
        // Deltas the two newest checkpoints cover go too (a reader behind them starts again
        // from the newest checkpoint).
        let pruned = manifest::prune(&self.bucket)?;
        if due.is_empty() {
            return Ok(pruned);
        }
        self.refresh()?;
        self.check_fenced()?;
        let (named, holder) = self.with_manifest(|m| (named_objects(m), m.producer.clone()));
        if holder.as_deref() != Some(self.producer.as_str()) {
            return Ok(pruned);
        }
        let mut deleted = pruned;
        for key in due.iter().filter(|k| !named.contains(*k)) {
            crate::process::crash_point("tier-delete");
            self.bucket.delete(key)?;
            self.unnamed.lock().recover().remove(key);
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Whether the manifest (as this handle knows it) holds `extent` of topic `name`: an
    /// object from its first offset with its salt (another directory's extent there is not
    /// this one).
    /// An extent wholly below the topic's first object counts as held too: the bucket's
    /// retention dropped those offsets, so neither an upload nor the disk keeps them.
    pub fn holds(&self, name: &str, extent: &Extent) -> bool {
        let view = self.view();
        let manifest = &view.manifest;
        if manifest.holds(name, extent.first_offset, extent.salt) {
            return true;
        }
        let first = manifest
            .topic(name)
            .and_then(|(_, t)| t.objects.keys().next().copied());
        match (first, extent.final_state()) {
            (Some(first), Some((count, _))) => extent.first_offset.saturating_add(count) <= first,
            _ => false,
        }
    }

    /// Where the objects of topic `name` end in the manifest, if it has any.
    pub fn remote_next(&self, name: &str) -> Option<u64> {
        self.view()
            .manifest
            .topic(name)
            .and_then(|(_, t)| t.next_offset())
    }

    /// The manifest's id of topic `name`, if it has one.
    pub fn topic_id(&self, name: &str) -> Option<u32> {
        self.view().manifest.topic(name).map(|(id, _)| id)
    }

    /// The id the next topic added gets.
    pub fn next_topic_id(&self) -> u32 {
        self.view().manifest.next_topic_id()
    }

    /// The epoch this handle uploads in, once it claimed the prefix.
    pub fn claimed(&self) -> Option<u64> {
        let view = self.view();
        (view.claimed != 0 && view.fenced.is_none()).then_some(view.claimed)
    }

    /// `Fenced` once the prefix went to another producer or a newer claim.
    pub fn check_fenced(&self) -> Result<()> {
        match &self.view().fenced {
            Some((epoch, producer)) => Err(Error::Fenced {
                url: self.bucket.url().to_owned(),
                epoch: *epoch,
                producer: producer.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Reads the deltas written since this handle last looked.
    pub fn refresh(&self) -> Result<()> {
        let mut manifest = self.view().manifest.clone();
        manifest.refresh(&self.bucket)?;
        let mut view = self.view();
        if manifest.version > view.manifest.version {
            view.manifest = manifest;
            note_claim(&mut view, &self.producer);
            self.changed.notify_all();
        }
        Ok(())
    }

    /// Claims the prefix for this handle in a new epoch (after the one it finds). `Fenced`
    /// when the claim it would follow is a stranger's.
    pub fn claim(&self) -> Result<u64> {
        for _ in 0..CLAIM_TRIES {
            self.refresh()?;
            let (version, last_epoch, holder) = {
                let view = self.view();
                let m = &view.manifest;
                (m.version, m.epoch, m.producer.clone())
            };
            let first = !self.claimed_once.load(Ordering::Acquire);
            if let Some(holder) = &holder
                && *holder != self.producer
            {
                let mut replaces = self.replaces.lock().recover();
                if replaces.is_none() && self.takeover && first {
                    *replaces = Some(holder.clone());
                }
                if replaces.as_ref() != Some(holder) {
                    drop(replaces);
                    self.view().fenced = Some((last_epoch, holder.clone()));
                    return self.check_fenced().map(|()| 0);
                }
            }
            let epoch = last_epoch + 1;
            let delta = self.delta(
                version,
                epoch,
                vec![Entry::Claim {
                    epoch,
                    producer: self.producer.clone(),
                }],
            );
            if self.commit_delta(&delta)? {
                self.claimed_once.store(true, Ordering::Release);
                self.view().claimed = epoch;
                self.changed.notify_all();
                return Ok(epoch);
            }
        }
        Err(Error::Tier {
            op: "claim",
            key: self.bucket.url().to_owned(),
            message: format!("other writers took the next delta {CLAIM_TRIES} times in a row"),
        })
    }

    /// The delta after `version` of this handle, in `epoch`.
    fn delta(&self, version: u64, epoch: u64, entries: Vec<Entry>) -> Delta {
        Delta {
            format: manifest::format_for(&entries),
            version: version + 1,
            epoch,
            producer: self.producer.clone(),
            nonce: crate::topic::new_salt().into(),
            entries,
        }
    }

    /// Puts an extent object's bytes at `key` (a retry puts the same bytes again).
    pub fn put_object(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        self.bucket.put(key, bytes)
    }

    /// Commits `entries` (topics and the objects uploaded) in one delta of this handle's
    /// epoch. False when another commit took its version: the manifest is read again, and
    /// a newer claim fences this handle.
    pub fn commit(&self, epoch: u64, entries: Vec<Entry>) -> Result<bool> {
        let version = self.view().manifest.version;
        let delta = self.delta(version, epoch, entries);
        if !self.commit_delta(&delta)? {
            self.refresh()?;
            return Ok(false);
        }
        let mut view = self.view();
        for entry in &delta.entries {
            if let Entry::Add(ExtentObject { bytes, .. }) = entry {
                view.uploaded_objects += 1;
                view.uploaded_bytes += bytes;
            }
        }
        // The error stays: only a round without failures clears it (a checkpoint that
        // failed in this commit must still show).
        self.changed.notify_all();
        Ok(true)
    }

    /// Puts `delta` and, once it landed, applies it to this handle's manifest in place.
    /// Every `CHECKPOINT_EVERY` versions it then writes the manifest whole, so opens read
    /// one object and the deltas after it; a failure there only costs later opens time:
    /// noted, not returned. False when another writer took the delta's number.
    fn commit_delta(&self, delta: &Delta) -> Result<bool> {
        if !manifest::put_delta(&self.bucket, delta)? {
            return Ok(false);
        }
        let checkpoint = {
            let mut view = self.view();
            // A refresh of another thread (a reader's) may have applied it already.
            if view.manifest.version < delta.version {
                view.manifest
                    .apply(delta, &manifest::delta_key(delta.version))?;
            }
            delta
                .version
                .is_multiple_of(manifest::CHECKPOINT_EVERY)
                .then(|| manifest::encode_checkpoint(&view.manifest))
        };
        if let Some(bytes) = checkpoint
            && let Err(e) = manifest::write_checkpoint(&self.bucket, delta.version, bytes)
        {
            self.note_failure(&e);
        }
        Ok(true)
    }

    /// Records the topics the last upload pass could not upload, and why.
    pub fn set_conflicts(&self, conflicts: BTreeMap<String, String>) {
        self.view().conflicts = conflicts;
        self.changed.notify_all();
    }

    /// Why the last upload pass could not upload topic `name`, if it could not.
    pub fn conflict(&self, name: &str) -> Option<String> {
        self.view().conflicts.get(name).cloned()
    }

    /// Records what the last upload pass left pending.
    pub fn note_pending(&self, pending: Pending) {
        self.view().pending = pending;
    }

    /// Failures noted so far ([`Tier::note_failure`]).
    pub fn failures(&self) -> u64 {
        self.view().retries
    }

    /// Records a round of requests that all succeeded: the last failure is over, unless one
    /// was noted since `failures_before` ([`Tier::failures`] when the round began).
    pub fn note_success(&self, failures_before: u64) {
        let mut view = self.view();
        if view.retries == failures_before && view.last_error.take().is_some() {
            self.changed.notify_all();
        }
    }

    /// Records a failed request (it is retried).
    pub fn note_failure(&self, e: &Error) {
        let mut view = self.view();
        view.retries += 1;
        view.last_error = Some(e.to_string());
        self.changed.notify_all();
    }

    /// Sets whether this handle uploads (it leads housekeeping).
    pub fn set_uploading(&self, uploading: bool) {
        if self.uploading.swap(uploading, Ordering::AcqRel) != uploading {
            self.kick();
        }
    }

    /// Whether this handle uploads.
    pub fn is_uploading(&self) -> bool {
        self.uploading.load(Ordering::Acquire)
    }

    /// Ends the upload thread's wait now (a flush asks for a pass).
    pub fn kick(&self) {
        self.view().kicks += 1;
        self.changed.notify_all();
    }

    /// Asks the upload thread to read the manifest again now.
    pub fn request_refresh(&self) {
        self.view().refresh_wanted = true;
        self.kick();
    }

    /// Whether a refresh was asked for since the last call.
    pub fn take_refresh_wanted(&self) -> bool {
        std::mem::take(&mut self.view().refresh_wanted)
    }

    /// Asks the upload thread to end; a request under way ends at once.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.bucket.stop();
        self.kick();
    }

    /// Whether the upload thread should end.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The upload thread's wait between passes: until `wait` passed, a kick, or stop.
    pub fn wait_for_work(&self, wait: Duration) {
        let view = self.view();
        let kicks = view.kicks;
        if self.stopping() {
            return;
        }
        let _ = self
            .changed
            .wait_timeout_while(view, wait, |v| v.kicks == kicks && !self.stopping());
    }

    /// Waits up to `wait` for the manifest or the counters to change.
    pub fn wait_for_change(&self, wait: Duration) {
        let view = self.view();
        let version = (view.manifest.version, view.retries);
        let _ = self.changed.wait_timeout_while(view, wait, |v| {
            (v.manifest.version, v.retries) == version && v.fenced.is_none()
        });
    }

    /// The status, with `lag_records` the caller counted.
    pub fn status(&self, lag_records: u64) -> TierStatus {
        let view = self.view();
        TierStatus {
            url: self.bucket.url().to_owned(),
            producer: self.producer.clone(),
            uploading: self.is_uploading() && view.fenced.is_none(),
            epoch: view.claimed,
            manifest_version: view.manifest.version,
            uploaded_objects: view.uploaded_objects,
            uploaded_bytes: view.uploaded_bytes,
            pending_extents: view.pending.extents,
            pending_bytes: view.pending.bytes,
            lag_records,
            retries: view.retries,
            last_error: view.last_error.clone(),
            fenced: view.fenced.is_some(),
        }
    }
}

/// After a refresh, a claim newer than this handle's: a stranger's fences it; its own
/// directory's (another process leads now) only ends its epoch, and it claims again should
/// it lead again.
fn note_claim(view: &mut View, producer: &str) {
    if view.claimed == 0 || view.manifest.epoch <= view.claimed || view.fenced.is_some() {
        return;
    }
    match view.manifest.producer.clone() {
        Some(holder) if holder != producer => view.fenced = Some((view.manifest.epoch, holder)),
        _ => view.claimed = 0,
    }
}

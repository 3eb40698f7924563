//! Reclaim: which extents at the front of a topic are consumed (committed past by every
//! registered cursor group, or outside the topic's retention), dropping them from the chain
//! and marking them in their files' counters, and deleting the files whose counters then say
//! so. The housekeeping thread does the deleting and retention; a reader's commit reclaims
//! its topic at once.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::alloc::BlockAllocator;
use crate::config::{Config, Retention};
use crate::cursor::CursorTable;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::file::DataFile;
use crate::format::{self, ProgressState};
use crate::io::Storage;
use crate::poison::Recover;
use crate::sync::SyncQueue;
use crate::tier::Tier;
use crate::topic::Topic;

/// Drops consumed extents and deletes the files they free; holds the housekeeping thread's
/// wake-up and the first error it hit.
#[derive(Debug)]
pub(crate) struct Reclaimer {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    config: Config,
    read_only: bool,
    cursors: Arc<CursorTable>,
    alloc: Arc<BlockAllocator>,
    /// Poisoned when marking an extent on disk fails.
    sync: Arc<SyncQueue>,
    /// True once the housekeeping thread is asked to stop.
    stop: Mutex<bool>,
    wake: Condvar,
    /// First error the housekeeping work hit (deleting a file), for the next `flush`.
    error: Mutex<Option<Error>>,
    /// With a tier, an extent is consumed only once the bucket's manifest holds it.
    tier: Option<Arc<Tier>>,
}

impl Reclaimer {
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts open assembled, each once"
    )]
    pub fn new(
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        config: Config,
        read_only: bool,
        cursors: Arc<CursorTable>,
        alloc: Arc<BlockAllocator>,
        sync: Arc<SyncQueue>,
        tier: Option<Arc<Tier>>,
    ) -> Reclaimer {
        Reclaimer {
            dir,
            storage,
            config,
            read_only,
            cursors,
            alloc,
            sync,
            stop: Mutex::new(false),
            wake: Condvar::new(),
            error: Mutex::new(None),
            tier,
        }
    }

    /// The storage every file operation goes through.
    pub fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }

    /// Drops the consumed extents at the front of `topic` and queues the files that frees.
    /// In shared mode, once another process joined, this handle's view may miss extents and
    /// groups of others: then only the housekeeping leader reclaims
    /// ([`Reclaimer::reclaim_topic_locked`]).
    pub fn reclaim_topic(&self, topic: &Topic) {
        if !self.alloc.sees_everything() {
            return;
        }
        self.reclaim_front(topic, |kept| {
            kept.sync(self.storage.as_ref(), &topic.name, false)
                .map(drop)
        });
    }

    /// Shared mode, the housekeeping leader, holding `topic`'s append lock with the tail
    /// lined up and every group's commit read from disk: [`Reclaimer::reclaim_topic`] over
    /// every process's extents. Marks go to disk under the lock, so no other process's sync
    /// writes over them, and the kept extent's slot only over what is there. True when it
    /// retired extents.
    pub fn reclaim_topic_locked(&self, topic: &Topic) -> bool {
        self.reclaim_front(topic, |kept| {
            let durable = topic.durable_next();
            // The append lock is held: the seal lock only if free at once (its holders take
            // it before the append lock), else the extent is claimed and sealed later.
            let locks = (
                || topic.slot().and_then(|s| s.seal_lock(Duration::ZERO).ok()),
                || Some(()),
            );
            kept.sync_shared(self.storage.as_ref(), &topic.name, false, durable, locks)
                .map(drop)
        })
    }

    /// Retires the consumed extents at the front of `topic`, after `sync_kept` made the
    /// first extent kept durable. True when it retired any.
    fn reclaim_front(&self, topic: &Topic, sync_kept: impl FnOnce(&Extent) -> Result<()>) -> bool {
        if self.read_only {
            return false;
        }
        let _pass = topic.reclaim_lock();
        let committed = self.cursors.min_committed(&topic.name);
        let retention = self.config.local_retention_for(&topic.name);
        let start = topic.log_start();
        if committed.is_none() && retention.is_unlimited() && start <= topic.first_offset() {
            return false;
        }
        let now = crate::clock::now_us();
        let n = topic.with_chain(|chain| {
            let n = consumable_prefix(chain, committed, start, retention, now);
            self.uploaded_prefix(&topic.name, &chain[..n])
        });
        if n == 0 {
            return false;
        }
        // The first extent kept carries the topic's next offset over a restart once the ones
        // before it are gone: make it durable first. Otherwise a crash loses it when its
        // records were not synced yet, the topic comes back without extents, and its offsets
        // start again at 0 below the groups' committed offsets.
        if let Some(kept) = topic.with_chain(|chain| chain.get(n).cloned())
            && let Err(e) = sync_kept(&kept)
        {
            self.fail(e);
            return false;
        }
        let mut doomed = false;
        let dropped = topic.drop_front(n);
        // Consumed extents need no seal; releasing them here lets their mapping go with the
        // file even when no periodic flush runs.
        topic.forget_synced(&dropped);
        for block in dropped {
            // Marked on disk first, front to back: a file is only deleted after, so a topic's
            // extents on disk never have a gap, and a restart does not bring them back.
            if let Err(e) =
                block.retire(self.storage.as_ref(), &topic.name, ProgressState::Consumed)
            {
                self.fail(e);
                return true;
            }
            crate::process::crash_point("retired");
            if block.mark_consumed() {
                self.alloc.doom(&block.file);
                doomed = true;
            }
        }
        if doomed {
            self.wake();
        }
        true
    }

    /// How many of `candidates`, from the first, may go: all without a tier; with one,
    /// those the bucket's manifest holds (and those that hold no record).
    fn uploaded_prefix(&self, topic: &str, candidates: &[Arc<Extent>]) -> usize {
        let Some(tier) = &self.tier else {
            return candidates.len();
        };
        candidates
            .iter()
            .take_while(|b| {
                b.final_state().is_some_and(|(count, _)| count == 0) || tier.holds(topic, b)
            })
            .count()
    }

    /// A failed mark on disk: nothing after it may be acknowledged.
    fn fail(&self, e: Error) {
        self.sync.poison(&e);
        self.report(e);
    }

    /// Deletes the files whose counters said so: unlinked, then out of the table and the disk
    /// account, our mapping and handle dropped (the space returns once no record still maps
    /// the file). A file whose unlink fails stays known and counted; it is returned for a
    /// retry, with the first error.
    pub fn delete_doomed(&self) -> (Vec<Arc<DataFile>>, Result<()>) {
        let doomed = self.alloc.take_doomed();
        let mut failed = Vec::new();
        let mut first_error = Ok(());
        let mut removed = false;
        for file in doomed {
            match self.storage.remove_file(&file.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    if first_error.is_ok() {
                        first_error = Err(Error::io("remove data file", &file.path, e));
                    }
                    failed.push(file);
                    continue;
                }
            }
            removed = true;
            self.alloc.forget_file(&file);
        }
        if removed
            && let Err(e) = self.storage.sync_dir(&self.dir)
            && first_error.is_ok()
        {
            first_error = Err(Error::io("fsync directory", &self.dir, e));
        }
        (failed, first_error)
    }

    /// Keeps the first housekeeping error for the next `flush` to return.
    pub fn report(&self, e: Error) {
        self.error.lock().recover().get_or_insert(e);
    }

    /// The first housekeeping error since the last call, if any.
    pub fn take_error(&self) -> Option<Error> {
        self.error.lock().recover().take()
    }

    /// Wakes the housekeeping thread (files to delete, or a stop).
    pub fn wake(&self) {
        self.wake.notify_all();
    }

    /// Asks the housekeeping thread to stop.
    pub fn stop(&self) {
        *self.stop.lock().recover() = true;
        self.wake();
    }

    /// Waits up to `tick` for work (none when files are already doomed); false once asked to
    /// stop.
    pub fn wait_for_work(&self, tick: Duration) -> bool {
        let mut stop = self.stop.lock().recover();
        if !*stop && !self.alloc.has_doomed() {
            stop = self.wake.wait_timeout(stop, tick).recover().0;
        }
        !*stop
    }
}

/// How many extents at the front of `chain` are consumed.
///
/// `committed_min` is the lowest committed offset over the topic's registered groups (`None`
/// when it has none: then only retention consumes); an extent wholly below `log_start`
/// (`Wal::delete_records`) goes whatever the groups and retention say. Only extents that take no more records
/// qualify, and never the topic's newest extent, so its next offset survives a restart. Both
/// rules only ever grow the prefix: committed offsets only advance, ages only grow, and a
/// topic's bytes only shrink by this prefix.
pub fn consumable_prefix(
    chain: &[Arc<Extent>],
    committed_min: Option<u64>,
    log_start: u64,
    retention: Retention,
    now_us: u64,
) -> usize {
    let candidates = chain.len().saturating_sub(1);
    let extent_bytes = |b: &Extent| b.published().1 - format::BLOCK_HEADER_BYTES;
    let mut remaining: u64 = chain.iter().map(|b| extent_bytes(b)).sum();
    let mut n = 0;
    while n < candidates {
        let block = &chain[n];
        let Some((count, end)) = block.final_state() else {
            break;
        };
        let bytes = end - format::BLOCK_HEADER_BYTES;
        let by_cursors = committed_min.is_some_and(|c| block.first_offset + count <= c);
        let by_start = block.first_offset + count <= log_start;
        // An extent's max timestamp is the topic's running maximum, so ages are monotone.
        let by_age = retention.max_age_ms.is_some_and(|age_ms| {
            block
                .max_timestamp_us()
                .saturating_add(age_ms.saturating_mul(1000))
                < now_us
        });
        let by_bytes = retention
            .max_bytes
            .is_some_and(|max| remaining - bytes >= max);
        if !(by_cursors || by_start || by_age || by_bytes) {
            break;
        }
        remaining -= bytes;
        n += 1;
    }
    n
}

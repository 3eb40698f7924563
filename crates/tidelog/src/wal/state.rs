//! The state one `Wal` shares with its writers, readers and threads: one object per duty
//! (topic table, allocator, cursors, reclaim, flush, durability strategy, ...), the checks
//! every call makes first, and the append path's context.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::durability::{Appending, Strategy, WriteOpts};
use super::flush::Flusher;
use super::link::SharedLink;
use super::lock::DirLock;
use super::topics::Topics;
use crate::alloc::{BlockAllocator, SHARED_LOCK_WAIT};
use crate::clock::Clock;
use crate::config::Config;
use crate::cursor::CursorTable;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::prefault::Prefaulter;
use crate::reclaim::Reclaimer;
use crate::record::Append;
use crate::recovery::{Known, RecoveryReport};
use crate::stage;
use crate::status::Status;
use crate::sync::{GroupLimits, SyncQueue};
use crate::topic::{Ctx, Topic};

/// Between two looks of an appender at a topic of its name another process is deleting.
const DELETION_POLL: Duration = Duration::from_millis(1);

/// What recovery found, and the extents a read-only handle has seen (reused by refresh).
#[derive(Debug)]
pub(crate) struct RecoveryState {
    pub report: RecoveryReport,
    pub known: Known,
}

/// State shared by a `Wal` and every writer, reader and thread made from it.
#[derive(Debug)]
pub(crate) struct State {
    pub dir: PathBuf,
    pub config: Config,
    pub storage: Arc<dyn Storage>,
    /// Closed, forked, read-only.
    pub status: Arc<Status>,
    pub topics: Arc<Topics>,
    pub alloc: Arc<BlockAllocator>,
    pub cursors: Arc<CursorTable>,
    /// Consumed extents and file deletion; the housekeeping thread's wake-up and errors.
    pub reclaim: Arc<Reclaimer>,
    /// Tickets, group commit and the handle's poison.
    pub sync: Arc<SyncQueue>,
    pub flusher: Flusher,
    pub durable: Strategy,
    pub clock: Clock,
    /// Populates pages ahead of each topic's tail (its thread runs for writable handles).
    pub prefault: Prefaulter,
    /// `config.effective_max_record_bytes()` and `config.effective_max_batch_bytes()`, computed once.
    pub limits: stage::Limits,
    pub recovered: Mutex<RecoveryState>,
    pub dir_lock: DirLock,
    /// The shared state file: the writer's reports, a reader's slots and waits.
    pub follow: SharedLink,
    /// Object storage behind the directory (`Config::tier`; writable handles only).
    pub tier: Option<Arc<crate::tier::Tier>>,
}

impl State {
    #[inline]
    pub fn check_open(&self) -> Result<()> {
        self.status.check_open()
    }

    /// Open, writable and not poisoned.
    #[inline]
    pub fn check_writable(&self) -> Result<()> {
        self.status.check_writable()?;
        self.sync.check()
    }

    /// The Wal's own durability and space wait.
    pub fn default_opts(&self) -> WriteOpts {
        WriteOpts {
            durability: self.config.durability,
            space_wait: Duration::from_millis(self.config.space_wait_ms),
        }
    }

    /// The topic layer's context for an append with `opts` (the strategy adds its write).
    pub fn ctx(&self, opts: WriteOpts) -> Ctx<'_> {
        Ctx {
            storage: self.storage.as_ref(),
            alloc: &self.alloc,
            config: &self.config,
            clock: &self.clock,
            space_wait: opts.space_wait,
            write_through: false,
            sync: &self.sync,
            prefault: Some(&self.prefault),
            reserved: None,
            ingest: false,
        }
    }

    /// What the durability strategy needs for an append with `opts`.
    pub fn appending(&self, opts: WriteOpts) -> Appending<'_> {
        Appending {
            ctx: self.ctx(opts),
            sync: &self.sync,
            flusher: &self.flusher,
            group: self.group_limits(),
        }
    }

    pub fn group_limits(&self) -> GroupLimits {
        GroupLimits {
            wait: Duration::from_micros(self.config.group_wait_us),
            bytes_max: self.config.group_bytes_max,
        }
    }

    /// The topic `name`, created if needed. In shared mode, while another process deletes
    /// the topic of that name (its slot marked, not released yet), this waits for the
    /// deletion to end (its deleter's, or after it died the next holder of the publish
    /// turn's), at most `SHARED_LOCK_WAIT`, then makes a new topic: the old one's appends
    /// would fail.
    pub fn topic_or_create(&self, name: &str) -> Result<Arc<Topic>> {
        let start = Instant::now();
        loop {
            let topic = self.topics.get_or_create(name, self.config.max_topics)?;
            let Some(slot) = topic.slot().filter(|s| s.is_deleting()) else {
                return Ok(topic);
            };
            // Until the slot is released; the next lookup then makes the new topic.
            while slot.is_valid() {
                let waited = start.elapsed();
                if waited >= SHARED_LOCK_WAIT {
                    return Err(Error::LockTimeout {
                        lock: "topic deletion",
                        holder_pid: slot.deleter_pid(),
                        waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                    });
                }
                self.check_writable()?;
                std::thread::sleep(DELETION_POLL);
            }
        }
    }

    /// Checks a batch against the directory's limits before anything is reserved.
    pub fn validate_records(&self, records: &[Append<'_>]) -> Result<()> {
        let cfg = &self.config;
        if records.is_empty() {
            return Err(Error::invalid(
                "records",
                "a batch needs at least one record",
            ));
        }
        if records.len() as u64 > cfg.max_batch_records {
            return Err(Error::limit(
                "max_batch_records",
                records.len() as u64,
                cfg.max_batch_records,
            ));
        }
        crate::record::check_timestamps(records)?;
        let record_max = self.limits.record_bytes_max;
        let mut total = 0u64;
        for r in records {
            let len = r.payload_len();
            if len > record_max {
                return Err(Error::limit("max_record_bytes", len, record_max));
            }
            total += len;
        }
        let batch_max = self.limits.batch_bytes_max;
        if records.len() > 1 && total > batch_max {
            return Err(Error::limit("max_batch_bytes", total, batch_max));
        }
        Ok(())
    }
}

impl State {
    /// Gives each topic the log start its file records (`Wal::delete_records`). A start past
    /// the topic's next offset is a leftover of a deletion a crash cut short (the topic came
    /// back since): with `remove_stale` (a writable handle alone) its file goes, as do files of
    /// topics that no longer exist; otherwise the start is capped at what this handle knows
    /// (a reader behind the writer).
    pub(super) fn load_log_starts(&self, remove_stale: bool) -> Result<()> {
        let storage = self.storage.as_ref();
        for (name, start) in crate::start::read_all(storage, &self.dir)? {
            match self.topics.get_live(&name) {
                Ok(topic) if start <= topic.next_offset() || !remove_stale => {
                    topic.raise_log_start(start.min(topic.next_offset()));
                }
                Ok(_) | Err(Error::UnknownTopic { .. }) if remove_stale => {
                    crate::start::remove(storage, &self.dir, &name)?;
                }
                Ok(_) | Err(Error::UnknownTopic { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Housekeeping's turn: `Some` while no other process shares the directory (always for
    /// an exclusive handle), holding off new opens until dropped. Retention, publishing
    /// staged jobs and file deletion run only then, so every process's view agrees.
    pub fn housekeeping_turn(&self) -> Option<super::lock::AloneGuard<'_>> {
        self.dir_lock.alone()
    }

    /// Whether this handle's per-file counts cover every extent, so a file they say is done
    /// may be deleted: always for an exclusive handle; in shared mode, only while no other
    /// process opened the directory since this handle did (one that did may have allocated
    /// in any file). A handle that cannot delete leaves files to the next open alone.
    pub fn counts_files_alone(&self) -> bool {
        self.alloc.sees_everything()
    }
}

impl Drop for State {
    fn drop(&mut self) {
        if self.status.is_forked() {
            // The lock is the parent's too: closing our descriptor leaves it held.
            self.dir_lock.forget();
        }
    }
}

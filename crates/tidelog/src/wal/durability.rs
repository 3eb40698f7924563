//! The durability strategy, chosen once at open: how an append becomes durable, what a
//! flush does, what the periodic pass and the background threads do, what is replayed at
//! open and what is checkpointed before a deletion and at close. Nothing else in the engine
//! asks which backend is in use.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::flush::Flusher;
use super::topics::Topics;
use crate::config::{Config, Durability};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::journal::Journal;
use crate::record::Append;
use crate::ring::entry::decode;
use crate::ring::{RingAppend, format::RING_START};
use crate::shared::TopicGuard;
use crate::sync::{AppendHandle, GroupLimits, SyncQueue, Turn};
use crate::topic::{Ctx, ReservedWrite, Topic};

/// Longest an append waits for checkpoints to make room in a full ring (the ring backend).
const RING_FULL_WAIT: Duration = Duration::from_secs(60);

/// How one append becomes durable and waits for space: the Wal's defaults or a writer's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteOpts {
    pub durability: Durability,
    pub space_wait: Duration,
}

/// What an append needs besides its topic and records.
#[derive(Debug)]
pub(crate) struct Appending<'a> {
    /// The topic layer's context, with no write-through and no reserved write: the strategy
    /// sets those.
    pub ctx: Ctx<'a>,
    pub sync: &'a Arc<SyncQueue>,
    pub flusher: &'a Flusher,
    pub group: GroupLimits,
}

/// How appended records become durable.
#[derive(Debug)]
pub(crate) enum Strategy {
    /// The data files are the only copy. `Always` appends `pwrite` their frames and share a
    /// group commit (the appender that finds none running leads it); `Interval` and `Never`
    /// appends copy through the mapping and are made durable by the periodic flush, a
    /// `flush`, or close.
    Files {
        /// A writer asked for `Interval` while the Wal's default is `Never`: the periodic
        /// flush runs anyway.
        interval_writers: AtomicBool,
    },
    /// A ring in front of the data files (see `journal`): every append writes its entry
    /// there under its reservation and is durable once its ring block is; checkpoints make
    /// the data files durable and trim the ring.
    Ring(Box<Journal>),
}

impl Strategy {
    /// The strategy `config` asks for in `dir`: read-only handles read the data files alone.
    pub fn open(
        dir: &Path,
        config: &Config,
        storage: &Arc<dyn Storage>,
        read_only: bool,
    ) -> Result<Strategy> {
        let files = Strategy::Files {
            interval_writers: AtomicBool::new(false),
        };
        match (&config.ring, read_only) {
            (_, true) => Ok(files),
            (None, false) => Journal::check_unfronted(storage.as_ref(), dir).map(|()| files),
            (Some(backend), false) => Journal::open(dir, config, backend, Arc::clone(storage))
                .map(|journal| Strategy::Ring(Box::new(journal))),
        }
    }

    /// The ring in front of the data files, if any.
    pub fn journal(&self) -> Option<&Journal> {
        match self {
            Strategy::Files { .. } => None,
            Strategy::Ring(journal) => Some(journal),
        }
    }

    /// Notes that a writer appends with `durability`.
    pub fn note_writer(&self, durability: Durability) {
        if let Strategy::Files { interval_writers } = self
            && durability == Durability::Interval
        {
            interval_writers.store(true, Ordering::Release);
        }
    }

    /// Whether the sync thread's periodic pass runs (with a ring, checkpoints do its work).
    pub fn runs_periodic_flush(&self, default: Durability) -> bool {
        match self {
            Strategy::Files { interval_writers } => {
                default != Durability::Never || interval_writers.load(Ordering::Acquire)
            }
            Strategy::Ring(_) => false,
        }
    }

    /// Appends `records` to `topic`; returns once they are as durable as `opts` asks.
    pub fn append(
        &self,
        env: &Appending<'_>,
        topic: &Topic,
        records: &[Append<'_>],
        opts: WriteOpts,
        held: Option<TopicGuard<'_>>,
    ) -> Result<Range<u64>> {
        match self {
            Strategy::Ring(journal) => {
                let (offsets, ring) = append_to_ring(journal, env, topic, records, opts)?;
                if opts.durability == Durability::Always {
                    ring.wait()?;
                }
                Ok(offsets)
            }
            Strategy::Files { .. } if opts.durability != Durability::Always => {
                Ok(topic.append(&env.ctx, records)?.0)
            }
            Strategy::Files { .. } => {
                let in_flight = env.sync.begin_write();
                let ctx = Ctx {
                    write_through: true,
                    ..env.ctx
                };
                let (offsets, _) = topic.append(&ctx, records)?;
                // Published: other processes may append while this one waits for the sync.
                drop(held);
                let ticket = env
                    .sync
                    .ticket(payload_bytes(records), false, Some(in_flight));
                wait_group_commit(env, ticket)?;
                Ok(offsets)
            }
        }
    }

    /// Appends `records` to `topic` and returns at once with a handle that completes once
    /// they are durable.
    pub fn append_async(
        &self,
        env: &Appending<'_>,
        topic: &Topic,
        records: &[Append<'_>],
        opts: WriteOpts,
        held: Option<TopicGuard<'_>>,
    ) -> Result<AppendHandle> {
        match self {
            Strategy::Ring(journal) => {
                let (offsets, ring) = append_to_ring(journal, env, topic, records, opts)?;
                Ok(AppendHandle::ring(offsets, ring))
            }
            Strategy::Files { .. } => {
                let urgent = opts.durability == Durability::Always;
                let in_flight = env.sync.begin_write();
                let ctx = Ctx {
                    write_through: urgent,
                    ..env.ctx
                };
                let (offsets, _) = topic.append(&ctx, records)?;
                drop(held);
                let ticket = env
                    .sync
                    .ticket(payload_bytes(records), urgent, Some(in_flight));
                Ok(AppendHandle::new(Arc::clone(env.sync), offsets, ticket))
            }
        }
    }

    /// Makes everything appended so far durable in the data files (and, with a ring, trims
    /// the ring past it).
    pub fn flush_all(&self, flusher: &Flusher) -> Result<()> {
        match self {
            Strategy::Files { .. } => flusher.flush(),
            Strategy::Ring(journal) => {
                // Ring first, so every append handle taken so far completes too.
                journal.ring().flush()?;
                checkpoint(journal, flusher)
            }
        }
    }

    /// A checkpoint (ring backend; nothing to do otherwise): the uploader's, and the one
    /// before a topic's extents are marked deleted, so its entries leave the ring and a
    /// replay never brings back records of a deleted topic.
    pub fn checkpoint(&self, flusher: &Flusher) -> Result<()> {
        match self {
            Strategy::Files { .. } => Ok(()),
            Strategy::Ring(journal) => checkpoint(journal, flusher),
        }
    }

    /// Replays the ring into the data files at open: every record an entry holds that the
    /// files do not (a topic's entries are in offset order, so the files hold a prefix),
    /// then empties the ring once the data files are durable. Returns `(records replayed,
    /// records the files already held)`.
    pub fn replay(
        &self,
        ctx: &Ctx<'_>,
        topics: &Topics,
        topics_max: u64,
        flusher: &Flusher,
    ) -> Result<(u64, u64)> {
        let Strategy::Ring(journal) = self else {
            return flusher.flush().map(|()| (0, 0));
        };
        let counts = replay_ring(journal, ctx, topics, topics_max)?;
        // Seal what recovery cut; the data files now hold everything the ring held: empty it.
        flusher.flush()?;
        journal.ring().reset()?;
        Ok(counts)
    }

    /// Stops the background work that belongs to the strategy (the uploader).
    pub fn stop(&self) {
        if let Strategy::Ring(journal) = self {
            journal.stop_uploader();
        }
    }

    /// Closes the ring, emptying it when the data files hold everything (`store_durable`).
    pub fn close(&self, storage: &dyn Storage, store_durable: bool) -> Result<()> {
        match self {
            Strategy::Files { .. } => Ok(()),
            Strategy::Ring(journal) => journal.close(storage, store_durable),
        }
    }
}

fn payload_bytes(records: &[Append<'_>]) -> u64 {
    records.iter().map(Append::payload_len).sum()
}

/// Waits until `ticket` is durable, leading group passes whenever it is this thread's turn.
fn wait_group_commit(env: &Appending<'_>, ticket: u64) -> Result<()> {
    loop {
        match env.sync.wait_turn(ticket, &env.group) {
            Turn::Decided(result) => return result,
            Turn::Lead(lead) => {
                let result = env.sync.check().and_then(|()| env.flusher.sync_group());
                lead.finish(&result);
            }
        }
    }
}

/// A checkpoint: the data files made durable, then the ring trimmed past them.
fn checkpoint(journal: &Journal, flusher: &Flusher) -> Result<()> {
    let checkpoint = journal.begin_checkpoint();
    let flushed = if checkpoint.needs_flush() {
        flusher.flush()
    } else {
        Ok(())
    };
    checkpoint.finish(flushed)
}

/// One append through the ring. A full ring waits for the uploader's checkpoints to make
/// room, while they do, up to the longer of `RING_FULL_WAIT` and the append's space wait.
fn append_to_ring(
    journal: &Journal,
    env: &Appending<'_>,
    topic: &Topic,
    records: &[Append<'_>],
    opts: WriteOpts,
) -> Result<(Range<u64>, RingAppend)> {
    journal.check_fits(&topic.name, records)?;
    let ctx = Ctx {
        reserved: Some(journal as &dyn ReservedWrite),
        ..env.ctx
    };
    let deadline = crate::clock::deadline_after(RING_FULL_WAIT.max(opts.space_wait));
    // Trim offset at the last full ring, and whether a checkpoint since moved nothing.
    let mut last_trim = None;
    let mut stalled = false;
    loop {
        let seen = journal.checkpoints();
        let result = {
            let _gate = journal.gate();
            topic.append(&ctx, records)
        };
        match result {
            Ok((offsets, Some(ring))) => return Ok((offsets, ring)),
            Ok((_, None)) => {
                return Err(Error::invalid(
                    "backend",
                    "a ring-fronted append returned no ring handle",
                ));
            }
            Err(e @ Error::RingFull { .. }) => {
                let trim = journal.ring().trim_offset();
                if last_trim == Some(trim) {
                    // The last checkpoint moved nothing: let the ring's writes in flight land
                    // (padding among them, which a trim then passes over) and checkpoint
                    // here. If even that frees nothing, the ring is stuck.
                    if stalled {
                        return Err(e);
                    }
                    stalled = true;
                    journal.ring().flush()?;
                    checkpoint(journal, env.flusher)?;
                } else {
                    stalled = false;
                    if !journal.wait_checkpoint(seen, deadline) {
                        return Err(e);
                    }
                }
                last_trim = Some(trim);
                env.sync.check()?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The ring's entries into the data files (see [`Strategy::replay`]).
fn replay_ring(
    journal: &Journal,
    ctx: &Ctx<'_>,
    topics: &Topics,
    topics_max: u64,
) -> Result<(u64, u64)> {
    let ring = journal.ring();
    let corrupt = |topic: &str, offset: u64, reason: String| Error::Corruption {
        topic: topic.to_owned(),
        offset,
        path: journal.device().to_owned(),
        position: RING_START + offset % ring.ring_bytes(),
        reason,
    };
    let (mut replayed, mut held) = (0, 0);
    for item in ring.recover()? {
        let (at, body) = item?;
        let entry =
            decode(&body).map_err(|reason| corrupt("", at, format!("journal entry: {reason}")))?;
        let topic = topics.get_or_create(entry.topic, topics_max)?;
        let next = topic.next_offset();
        let n = entry.records.len() as u64;
        if entry.first > next {
            return Err(corrupt(
                entry.topic,
                at,
                format!(
                    "the ring continues the topic at offset {} but its data files end at {next}",
                    entry.first
                ),
            ));
        }
        let have = (next - entry.first).min(n);
        held += have;
        if have < n {
            topic.append(ctx, &entry.records[have as usize..])?;
            replayed += n - have;
        }
    }
    Ok((replayed, held))
}

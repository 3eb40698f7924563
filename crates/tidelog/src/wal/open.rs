//! Opening a directory (lock, strategy, recovery, replay, staged jobs, reclaim), a
//! read-only handle's refresh, and close.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::durability::Strategy;
use super::flush::Flusher;
use super::link::SharedLink;
use super::lock::DirLock;
use super::state::{RecoveryState, State};
use super::topics::{Slots, Topics};
use crate::alloc::BlockAllocator;
use crate::clock::Clock;
use crate::config::Config;
use crate::cursor::CursorTable;
use crate::error::Result;
use crate::io::Storage;
use crate::poison::Recover;
use crate::prefault::Prefaulter;
use crate::reclaim::Reclaimer;
use crate::recovery::{self, Known, Published, Recovered, Scope};
use crate::shared::{Cursor, SharedState};
use crate::stage;
use crate::status::Status;
use crate::sync::SyncQueue;
use crate::topic::{Ctx, Topic};

/// Locks (unless `read_only`), recovers and assembles the state of a handle on `dir`.
pub(super) fn open_state(
    dir: &Path,
    config: Config,
    storage: Arc<dyn Storage>,
    read_only: bool,
) -> Result<Arc<State>> {
    config.validate()?;
    if !read_only && config.is_shared() {
        return open_shared(dir, config, storage);
    }
    let dir_lock = if read_only {
        DirLock::none(storage.as_ref(), dir)?
    } else {
        DirLock::take(storage.as_ref(), dir)?
    };
    let durable = Strategy::open(dir, &config, &storage, read_only)?;
    // A reader attaches to the shared state file a writer of this boot built, if any, and
    // reads what it reports published; the writer rebuilds the file after recovery.
    let follow = if read_only {
        Some(SharedLink::reader(Arc::clone(&storage), dir))
    } else {
        None
    };
    let published = follow
        .as_ref()
        .map(SharedLink::reported)
        .unwrap_or_default();
    let recovered = recovery::recover(
        dir,
        &config,
        storage.as_ref(),
        !read_only,
        &BTreeMap::new(),
        &HashMap::new(),
        &published,
        Scope::default(),
    )?;
    let follow = match follow {
        Some(follow) => follow,
        None => SharedLink::writer(SharedState::rebuild(
            &storage,
            dir,
            cursor_of(&recovered),
            recovered.next_topic_id,
        )?),
    };
    let slots = Slots::Claim;
    Ok(Arc::new(assemble(
        dir, config, storage, read_only, dir_lock, durable, recovered, follow, slots,
    )?))
}

/// Shared mode's open: the first handle (alone) recovers the directory as an exclusive one
/// does and rebuilds the shared state file; a later one reads the directory without
/// repairing anything, as other processes' appends and the shared state file report it.
fn open_shared(dir: &Path, config: Config, storage: Arc<dyn Storage>) -> Result<Arc<State>> {
    let (dir_lock, alone) = DirLock::take_shared(storage.as_ref(), dir)?;
    refuse_network_fs(dir)?;
    let durable = Strategy::open(dir, &config, &storage, false)?;
    let (recovered, shared) = if alone {
        let recovered = recovery::recover(
            dir,
            &config,
            storage.as_ref(),
            true,
            &BTreeMap::new(),
            &HashMap::new(),
            &Published::default(),
            Scope::default(),
        )?;
        let shared = SharedState::rebuild(
            &storage,
            dir,
            cursor_of(&recovered),
            recovered.next_topic_id,
        )?;
        // The spare recovery kept is the shared one.
        shared.set_spare(recovered.spare.as_ref().map(|f| f.seq));
        (recovered, shared)
    } else {
        let shared = SharedState::attach_writable(&storage, dir)?.ok_or_else(|| {
            crate::Error::invalid(
                "shared state",
                format!(
                    "another process holds {} in shared mode but its {} is not current",
                    dir.display(),
                    crate::shared::STATE_FILE
                ),
            )
        })?;
        let shared = Arc::new(shared);
        let mut published = Published::default();
        let (ends, next) = shared.reported();
        for e in ends {
            published.add_end(e.file_seq, e.block_index, e.end);
        }
        published.next.extend(next);
        let recovered = recovery::recover(
            dir,
            &config,
            storage.as_ref(),
            false,
            &BTreeMap::new(),
            &HashMap::new(),
            &published,
            Scope {
                only_topic: None,
                map_writable: true,
            },
        )?;
        let shared = Arc::try_unwrap(shared).map_err(|_| crate::Error::Closed)?;
        (recovered, shared)
    };
    dir_lock.opened(&shared, dir, alone)?;
    let follow = SharedLink::writer(shared);
    let slots = if alone {
        crate::process::crash_point("open-claim");
        Slots::Claim
    } else {
        Slots::Find
    };
    let state = assemble(
        dir, config, storage, false, dir_lock, durable, recovered, follow, slots,
    )?;
    if let Some(shared) = state.follow.writer_state() {
        state.alloc.share(shared);
    }
    // Not before: the slots claimed and the allocator on the shared cursor.
    state.dir_lock.end_open_turn(dir)?;
    Ok(Arc::new(state))
}

/// Shared mode relies on one page cache and one kernel's locks: a network file system
/// gives neither across hosts, so it is refused.
fn refuse_network_fs(dir: &Path) -> Result<()> {
    let kind = crate::io::fs_magic(dir).map_err(|e| crate::Error::io("statfs", dir, e))?;
    if let Some(name) = crate::io::network_fs_name(kind) {
        return Err(crate::Error::invalid(
            "exclusive",
            format!(
                "{} is on {name}, a network file system: shared mode needs one host's page \
                 cache and locks; open it with exclusive=True",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// The shared allocator cursor from what recovery placed.
fn cursor_of(recovered: &Recovered) -> Cursor {
    Cursor {
        current: recovered
            .alloc_current
            .as_ref()
            .map(|(f, block)| (f.seq, *block)),
        next_file_seq: recovered.next_seq,
    }
}

/// The state of a handle from what recovery found.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts open assembled, each once"
)]
fn assemble(
    dir: &Path,
    config: Config,
    storage: Arc<dyn Storage>,
    read_only: bool,
    dir_lock: DirLock,
    durable: Strategy,
    recovered: Recovered,
    follow: SharedLink,
    slots: Slots,
) -> Result<State> {
    let shared_mode = dir_lock.is_shared();
    let mut known = Known::new();
    let mut topics = Vec::new();
    for t in recovered.topics {
        let topic = Arc::new(Topic::new(t.name, t.id));
        if read_only || shared_mode {
            for b in &t.chain {
                known.insert((b.file.seq, b.block_index), Arc::clone(b));
            }
        }
        topic.restore(t.chain, t.unsynced, t.tail);
        topic.note_durable(topic.durable_from_recovery());
        topics.push(topic);
    }
    let topics = Arc::new(Topics::new(
        topics,
        recovered.next_topic_id,
        follow.writer_state(),
        slots,
        shared_mode,
    )?);
    let alloc = Arc::new(allocator(
        dir,
        &config,
        read_only,
        recovered.files,
        recovered.next_seq,
        recovered.alloc_current,
        recovered.spare,
    ));
    let sync = Arc::new(SyncQueue::default());
    let cursors = Arc::new(CursorTable::default());
    let tier = open_tier(storage.as_ref(), dir, &config, read_only)?;
    let reclaim = Arc::new(Reclaimer::new(
        dir.to_owned(),
        Arc::clone(&storage),
        config.clone(),
        read_only,
        Arc::clone(&cursors),
        Arc::clone(&alloc),
        Arc::clone(&sync),
        tier.clone(),
    ));
    let flusher = Flusher::new(Arc::clone(&topics), Arc::clone(&storage), Arc::clone(&sync));
    let limits = stage::Limits {
        record_bytes_max: config.effective_max_record_bytes(),
        batch_bytes_max: config.effective_max_batch_bytes(),
    };
    let state = State {
        dir: dir.to_owned(),
        config,
        storage,
        status: Arc::new(Status::new(read_only)),
        topics,
        alloc,
        cursors,
        reclaim,
        sync,
        flusher,
        durable,
        clock: Clock::new(),
        prefault: Prefaulter::default(),
        limits,
        recovered: Mutex::new(RecoveryState {
            report: recovered.report,
            known,
        }),
        dir_lock,
        follow,
        tier,
    };
    if read_only {
        // A writable handle loads them once the ring is replayed (`prepare_writable`).
        state.load_log_starts(false)?;
    }
    Ok(state)
}

/// The tier of a writable handle whose configuration has one (`Fenced` when another
/// directory holds its prefix). A read-only handle uploads nothing: it has none.
#[cfg(feature = "tier")]
fn open_tier(
    storage: &dyn Storage,
    dir: &Path,
    config: &Config,
    read_only: bool,
) -> Result<Option<Arc<crate::tier::Tier>>> {
    match &config.tier {
        _ if read_only => Ok(None),
        Some(tier) => Ok(Some(Arc::new(crate::tier::Tier::open(storage, dir, tier)?))),
        None => crate::tier::check_untiered_open(storage, dir).map(|()| None),
    }
}

/// Without the `tier` feature a configuration with a tier fails its validation, and a
/// directory that has one is refused (see `check_untiered_open`).
#[cfg(not(feature = "tier"))]
fn open_tier(
    storage: &dyn Storage,
    dir: &Path,
    _config: &Config,
    read_only: bool,
) -> Result<Option<Arc<crate::tier::Tier>>> {
    if read_only {
        return Ok(None);
    }
    crate::tier::check_untiered_open(storage, dir).map(|()| None)
}

/// The block allocator over the recovered files. For a writable handle, every file but the
/// one new extents continue in (and the spare) is fully allocated, and one holding nothing
/// but consumed extents can go at once.
fn allocator(
    dir: &Path,
    config: &Config,
    read_only: bool,
    files: BTreeMap<u64, Arc<crate::file::DataFile>>,
    next_seq: u64,
    current: Option<(Arc<crate::file::DataFile>, u32)>,
    spare: Option<Arc<crate::file::DataFile>>,
) -> BlockAllocator {
    let current_seq = current.as_ref().map(|(f, _)| f.seq);
    let spare_seq = spare.as_ref().map(|f| f.seq);
    let alloc = BlockAllocator::new(dir.to_owned(), config, files, next_seq, current, spare);
    if !read_only {
        for (seq, file) in alloc.files().iter() {
            alloc.account_file(file);
            if Some(*seq) != current_seq
                && Some(*seq) != spare_seq
                && file.counters.seal_allocation()
            {
                alloc.doom(file);
            }
        }
    }
    alloc
}

/// How long an open alone waits for the publish turn. No other handle of the directory can
/// hold it then, so a holder is a lock taken on `LOCK` by something else, which waiting
/// would not end: the open fails with `Locked` instead of waiting for ever.
const ALONE_PUBLISH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The writable handle's work before its first append: the ring replayed, what recovery cut
/// sealed, committed staged jobs published, consumption rebuilt and what it frees deleted.
pub(super) fn prepare_writable(state: &State) -> Result<()> {
    // What the ring holds beyond the data files goes into them before anything else.
    let ctx = Ctx {
        prefault: None,
        ..state.ctx(state.default_opts())
    };
    let (replayed, held) =
        state
            .durable
            .replay(&ctx, &state.topics, state.config.max_topics, &state.flusher)?;
    {
        let mut recovered = state.recovered.lock().recover();
        recovered.report.ring_records_replayed = replayed;
        recovered.report.ring_records_held = held;
    }
    // A shared-mode handle that joined others leaves the rest to housekeeping's turn.
    let Some(_turn) = state.housekeeping_turn() else {
        return state.cursors.load_all(state.storage.as_ref(), &state.dir);
    };
    // Committed staged jobs (one cut by a crash resumes from its ledger) go in before any
    // new append could take the offsets the ledger gives them. No other thread runs yet.
    {
        let Some(_publishing) = state.dir_lock.publish_turn(ALONE_PUBLISH_WAIT)? else {
            return Err(crate::Error::Locked {
                path: state.dir.clone(),
            });
        };
        state.ingest_committed(false)?;
    }
    state.remove_abandoned_staged()?;
    // After the replay: a start may stand above what the data files held before it.
    state.load_log_starts(true)?;
    // Rebuild consumption from the persisted cursors and retention; delete what is done, so
    // space from before the restart comes back now.
    state.cursors.load_all(state.storage.as_ref(), &state.dir)?;
    for topic in state.topics.all() {
        state.reclaim.reclaim_topic(&topic);
    }
    if !state.counts_files_alone() {
        drop(state.alloc.take_doomed());
        return Ok(());
    }
    // A file that cannot be unlinked now is retried by the housekeeping thread.
    let (failed, result) = state.reclaim.delete_doomed();
    for file in &failed {
        state.alloc.doom(file);
    }
    if let Err(e) = result {
        state.reclaim.report(e);
    }
    Ok(())
}

/// Shared mode, a close alone: finishes the deletions a dead process cut short (their
/// slots say `deleting`, and every process treated the topics as deleted), which the next
/// open would otherwise not know of. Skipped while a commit of this process holds the turn.
fn finish_deletions(state: &State) -> Result<()> {
    match state.dir_lock.publish_turn(std::time::Duration::ZERO)? {
        Some(_turn) => super::delete::finish_cut_short(state),
        None => Ok(()),
    }
}

/// Closes: stops appends, waits for in-flight ones, flushes, marks active extents clean,
/// closes the strategy, fails waiters no sync can cover any more, and releases the
/// directory. The background threads are stopped already.
pub(super) fn close(state: &State) -> Result<()> {
    if state.status.is_closed() {
        return Ok(());
    }
    let mut result = Ok(());
    if !state.status.is_read_only() {
        state.alloc.shut_down();
        for topic in state.topics.all() {
            topic.stop_appends(false);
        }
        state.sync.wait_idle();
        // `Clean` says nothing follows: in shared mode only a handle alone may say so.
        let alone = state.housekeeping_turn();
        let lined = match &alone {
            Some(_) if state.topics.is_shared_mode() => {
                finish_deletions(state).and_then(|()| super::follow::line_up_all(state))
            }
            _ => Ok(()),
        };
        // A line-up that failed leaves extents unmarked: recovery scans them, as after a crash.
        result = state
            .flusher
            .flush_pass(alone.is_some() && lined.is_ok())
            .and(lined);
        drop(alone);
        let closed = state.durable.close(state.storage.as_ref(), result.is_ok());
        result = result.and(closed);
    }
    state.sync.close();
    state.status.set_closed();
    // Readers waiting in this process wake and see the handle closed.
    for topic in state.topics.all() {
        topic.wake_readers();
    }
    // Release mappings held by the tables; records still alive keep theirs.
    state.topics.clear();
    state.follow.release();
    state.alloc.clear();
    state.recovered.lock().recover().known.clear();
    state.dir_lock.release();
    result
}

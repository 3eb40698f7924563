//! Housekeeping across processes (shared mode). One process at a time leads: the one that
//! holds `LEADER_BYTE` of `LOCK`, which the kernel releases when it dies, so another
//! process's next try takes over. Once another process joined a handle's directory, its own
//! view may miss extents and groups of others, so only the leader reclaims then, from what
//! is on disk: every group's newest commit, every topic lined up under its append lock, and
//! each data file judged from its block slots before it is deleted. The other processes
//! follow what the leader retired (`follow_retired`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::follow;
use super::state::State;
use crate::error::{Error, Result};
use crate::recovery;
use crate::shared::SharedState;

/// Longest the leader waits for a topic's append lock (a stopped appender holds it): the
/// topic waits for the next pass.
const TOPIC_LOCK_WAIT: Duration = Duration::from_millis(200);

/// What one process knows of the election and of the leader's retirements.
#[derive(Debug, Default)]
pub(super) struct Election {
    /// This process leads (it holds the leader byte for the handle's life).
    leading: bool,
    /// The data files are judged at the next pass: this process just took the lead (a
    /// former leader may have retired extents), or it retired some itself.
    judge_files: bool,
    /// The shared `retired` word as this handle last followed it.
    retired_seen: u64,
}

impl Election {
    /// True while this process leads housekeeping: tries for the lead until it has it, and
    /// starts a new epoch when it gets it.
    pub(super) fn lead(&mut self, state: &State, shared: &SharedState) -> bool {
        if state.sync.check().is_err() {
            // A poisoned handle writes nothing more: another process leads (and finishes
            // a staged publish this one cut short).
            if self.leading {
                state.dir_lock.step_down();
                self.leading = false;
            }
            return false;
        }
        if !self.leading && state.dir_lock.try_lead() {
            self.leading = true;
            self.judge_files = true;
            shared.note_leader();
        }
        if self.leading {
            shared.note_leader_pass();
        }
        self.leading
    }

    /// Drops from this handle's view what the leader retired since the last call: extents
    /// at the front of each topic, and the data files it deleted (so their mappings go and
    /// their space comes back).
    pub(super) fn follow_retired(&mut self, state: &State, shared: &SharedState) {
        let retired = shared.retired();
        if retired == self.retired_seen {
            return;
        }
        self.retired_seen = retired;
        // Another process's deletion retired extents too: the leader judges the files.
        self.judge_files |= self.leading;
        for topic in state.topics.all() {
            topic.drop_retired_front();
        }
        state.alloc.forget_deleted_files(state.storage.as_ref());
    }
}

/// The leader's pass while its view may miss other processes' extents: retention and
/// consumption over every topic, then (after retirements) the data files every extent of
/// which is retired.
pub(super) fn leader_pass(
    state: &State,
    shared: &Arc<SharedState>,
    election: &mut Election,
) -> Result<()> {
    let storage = state.storage.as_ref();
    // Commits of every process, groups created elsewhere included.
    state.cursors.load_all(storage, &state.dir)?;
    let mut retired = false;
    for topic in state.topics.every()? {
        if state.config.local_retention_for(&topic.name).is_unlimited()
            && state.cursors.min_committed(&topic.name).is_none()
            && topic.log_start() <= topic.first_offset()
        {
            continue;
        }
        let Some(slot) = state.follow.slot(&topic) else {
            continue;
        };
        // A deletion under way retires the topic's extents itself.
        let Some(_lock) = follow::lock_lined_up(state, &topic, &slot, TOPIC_LOCK_WAIT)? else {
            continue;
        };
        retired |= state.reclaim.reclaim_topic_locked(&topic);
    }
    if retired {
        shared.note_retired();
    }
    if !(retired || election.judge_files) {
        return Ok(());
    }
    // Judged again at the next pass if this one fails.
    election.judge_files = true;
    if delete_retired_files(state, shared)? {
        shared.note_retired();
    }
    election.judge_files = false;
    Ok(())
}

/// Deletes the data files the allocator moved past whose every extent is retired on disk,
/// those of a topic whose deletion is under way (its slot marked `deleting`) excepted.
/// True when it deleted any. A file whose slots do not read (damage) stays, and the first
/// such error is returned after the others are done.
fn delete_retired_files(state: &State, shared: &Arc<SharedState>) -> Result<bool> {
    let storage = state.storage.as_ref();
    let mut first_error = Ok(());
    let mut deleted = false;
    // Each topic's first offset as this pass left it (lined up, retired).
    let firsts: HashMap<u32, u64> = state
        .topics
        .all()
        .iter()
        .map(|t| (t.id, t.first_offset()))
        .collect();
    let below_first = |id: u32, offset: u64| firsts.get(&id).is_some_and(|&first| offset < first);
    // A released slot ended its deletion (its deleter or a finisher marked every extent
    // first); a file that is not current (rebuilt) tells nothing, so the file stays.
    let deletion_ended =
        |id: u32| shared.is_current() && shared.find(id).is_none_or(|slot| !slot.is_deleting());
    for file in state.alloc.passed_files(storage)? {
        match recovery::file_retired(storage, &file, below_first, deletion_ended) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                first_error = first_error.and(Err(e));
                continue;
            }
        }
        crate::process::crash_point("leader-delete");
        match storage.remove_file(&file.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove data file", &file.path, e)),
        }
        state.alloc.forget_file(&file);
        deleted = true;
    }
    if deleted {
        storage
            .sync_dir(&state.dir)
            .map_err(|e| Error::io("fsync directory", &state.dir, e))?;
    }
    first_error.map(|()| deleted)
}

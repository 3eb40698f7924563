//! Deleting a topic or a consumer group.
//!
//! An exclusive handle deletes under its own locks. In shared mode a deletion marks the
//! topic's slot `deleting` under its append lock (from then on every process treats the
//! topic as deleted, and the housekeeping leader keeps the files of its marked extents),
//! marks its extents `Deleted` on disk (the first mark is recovery's commit point), removes
//! its cursors and releases the slot; beside other processes it first takes the publish
//! turn (one publish or deletion at a time in the directory). A deleter that dies leaves the
//! slot marked; the next holder of the turn finishes the deletion ([`finish_cut_short`]).

use std::sync::Arc;
use std::time::Duration;

use super::follow;
use super::state::State;
use crate::alloc::SHARED_LOCK_WAIT;
use crate::error::{Error, Result};
use crate::format::{ProgressState, validate_name};
use crate::poison::PanicGuard;
use crate::recovery;
use crate::shared::TopicSlot;
use crate::start;
use crate::topic::Topic;

/// Longest a deletion beside other processes waits for a publish (or another deletion) to
/// end.
const TURN_WAIT: Duration = Duration::from_secs(60);

/// Deletes topic `name`: its cursors first, then (with the flush held off) every extent
/// marked `Deleted` oldest first. The first mark is the deletion's commit point: recovery
/// finishes a deletion a crash cut short. Then its files are freed.
pub(super) fn delete_topic(state: &State, name: &str) -> Result<()> {
    state.check_writable()?;
    let _panic = PanicGuard::new(&state.sync.poison, "topic deletion (it panicked)");
    if let Some(_alone) = state.housekeeping_turn() {
        let topic = find(state, name)?;
        match topic.slot().filter(|_| state.topics.is_shared_mode()) {
            Some(slot) => {
                // Lined up, this handle's view holds every extent of the topic.
                delete_locked(state, &topic, slot, false)?;
                released(state, slot);
            }
            None => {
                if !topic.stop_appends(true) {
                    return Err(unknown(name));
                }
                retire_all(state, &topic, false)?;
            }
        }
        return Ok(());
    }
    let Some(_turn) = state.dir_lock.publish_turn(TURN_WAIT)? else {
        return Err(Error::Locked {
            path: state.dir.clone(),
        });
    };
    // A publish a dead process cut short owns offsets in its topics: finished first.
    state.resume_cut_short(true)?;
    let topic = find(state, name)?;
    let slot = state.follow.slot(&topic).ok_or_else(|| unknown(name))?;
    delete_locked(state, &topic, &slot, true)?;
    released(state, &slot);
    Ok(())
}

/// Shared mode: under `topic`'s append lock, lined up, marks its slot `deleting` (crash
/// point `delete-begun`; from then on every process treats it as deleted, and the leader
/// keeps the files of its marked extents) and marks every extent `Deleted`; with
/// `whole_disk` (beside other processes) also those this handle's view lacks, found in the
/// block slots of every data file. The caller releases the slot.
fn delete_locked(state: &State, topic: &Topic, slot: &TopicSlot, whole_disk: bool) -> Result<()> {
    let _lock = slot.lock(SHARED_LOCK_WAIT)?;
    follow::check_live(state, topic, slot)?;
    follow::line_up(state, topic, slot)?;
    // Appends stop first: a thread of this process that finds the slot marked then drops
    // nothing from the chain this deletion marks.
    if !topic.stop_appends(true) {
        return Err(unknown(&topic.name));
    }
    slot.mark_deleting();
    crate::process::crash_point("delete-begun");
    retire_all(state, topic, true)?;
    if whole_disk {
        mark_on_disk(state, topic.id)?;
    }
    Ok(())
}

/// Beside other processes, under the publish turn: finishes the deletions whose process
/// died after it marked the topic's slot `deleting` (a live deleter holds the turn).
pub(super) fn finish_cut_short(state: &State) -> Result<()> {
    let Some(shared) = state.follow.writer_state() else {
        return Ok(());
    };
    for (name, id) in state.topics.shared_named(true) {
        let Some(slot) = shared.find(id) else {
            continue;
        };
        {
            let _lock = slot.lock(SHARED_LOCK_WAIT)?;
            // Released meanwhile (a handle alone finished it).
            if !slot.is_valid() || !slot.is_deleting() {
                continue;
            }
            if let Ok(topic) = state.topics.get(&name)
                && topic.id == id
            {
                state.topics.forget(&topic);
            }
            state
                .cursors
                .remove_topic(state.storage.as_ref(), &state.dir, &name)?;
            // Its extents as the disk has them: the dead deleter may have marked some, and
            // recovery skips a topic with one mark.
            mark_on_disk(state, id)?;
        }
        released(state, &slot);
    }
    Ok(())
}

/// Marks `Deleted` every extent of topic `id` that the block slots of the data files show
/// not retired yet (`recovery::mark_topic_deleted`); a failure poisons the handle.
fn mark_on_disk(state: &State, id: u32) -> Result<()> {
    let files = state.alloc.files().clone();
    recovery::mark_topic_deleted(state.storage.as_ref(), &state.dir, &files, id)
        .inspect_err(|e| state.sync.poison(e))
}

/// The topic `name` as this handle or another process knows it.
fn find(state: &State, name: &str) -> Result<Arc<Topic>> {
    match state.topics.get(name) {
        Err(Error::UnknownTopic { .. }) if state.topics.is_shared_mode() => {
            state.topics.find_shared(name).ok_or_else(|| unknown(name))
        }
        other => other,
    }
}

fn unknown(name: &str) -> Error {
    Error::UnknownTopic {
        topic: name.to_owned(),
    }
}

/// Takes `topic` (its appends stopped) out of this handle, removes its cursors and marks
/// every extent `Deleted`, oldest first (crash point `delete-marked` after the first).
/// `locked`: the caller holds the topic's append lock, under which every process writes
/// its progress slots; otherwise this process's flush is held off meanwhile.
fn retire_all(state: &State, topic: &Topic, locked: bool) -> Result<()> {
    state.topics.remove(topic);
    // Its entries leave the ring first: a replay never brings back a deleted topic.
    state.durable.checkpoint(&state.flusher)?;
    state
        .cursors
        .remove_topic(state.storage.as_ref(), &state.dir, &topic.name)?;
    let _flushing = (!locked).then(|| state.flusher.hold());
    let _pass = topic.reclaim_lock();
    let chain = topic.take_all();
    let active = topic.tail().block.take();
    for (i, block) in chain.iter().enumerate() {
        if let Err(e) = block.retire(state.storage.as_ref(), &topic.name, ProgressState::Deleted) {
            state.sync.poison(&e);
            return Err(e);
        }
        if i == 0 {
            crate::process::crash_point("delete-marked");
        }
    }
    // After the first mark (the deletion's commit point), so a crash before it keeps the
    // topic with its start; a crash after it leaves a file the next open removes.
    start::remove(state.storage.as_ref(), &state.dir, &topic.name)?;
    if let Some(block) = active {
        let (count, end) = block.published();
        block.set_final(count, end);
        if block.release_writer() {
            state.alloc.doom(&block.file);
        }
    }
    for block in &chain {
        if block.mark_consumed() {
            state.alloc.doom(&block.file);
        }
    }
    state.reclaim.wake();
    Ok(())
}

/// The deletion's end beside other processes: the slot goes (after the append lock, which
/// a later topic may take with it), and the others drop what it retired.
fn released(state: &State, slot: &TopicSlot) {
    slot.release();
    if let Some(shared) = state.follow.writer_state() {
        shared.note_retired();
    }
}

/// Deletes the cursor of `group` on `topic`; the topic's consumed extents then go.
pub(super) fn delete_group(state: &State, topic: &str, group: &str) -> Result<()> {
    state.check_writable()?;
    validate_name(topic)?;
    validate_name(group)?;
    if !state
        .cursors
        .remove(state.storage.as_ref(), &state.dir, topic, group)?
    {
        return Err(Error::UnknownGroup {
            topic: topic.to_owned(),
            group: group.to_owned(),
        });
    }
    if let Ok(t) = state.topics.get(topic) {
        state.reclaim.reclaim_topic(&t);
    }
    Ok(())
}

/// Moves the log start of `topic` to `before` (Kafka's DeleteRecords): records below it
/// are no longer read, and the extents wholly below it go as consumed ones do. The records
/// below are made durable first, then the start is recorded durably (its file, the commit
/// point), then every process sees it. Returns the topic's first readable offset.
pub(super) fn delete_records(state: &State, name: &str, before: u64) -> Result<u64> {
    state.check_writable()?;
    let _panic = PanicGuard::new(&state.sync.poison, "delete_records (it panicked)");
    let topic = find(state, name)?;
    if state.topics.is_shared_mode() {
        follow::catch_up(state, &topic)?;
    }
    let next = topic.next_offset();
    if before > next {
        return Err(Error::OffsetOutOfRange {
            topic: name.to_owned(),
            offset: before,
            first: super::reader::first_readable(&topic, state.tier.as_deref()),
            next,
        });
    }
    if before > topic.log_start() {
        // A start past records a crash could lose would stand above the topic's end.
        if topic.durable_next() < before {
            state.durable.flush_all(&state.flusher)?;
        }
        if topic.durable_next() < before {
            return Err(Error::invalid(
                "before_offset",
                format!(
                    "records below {before} of {name} are not durable yet (durable below {}): \
                     flush, then retry",
                    topic.durable_next()
                ),
            ));
        }
        // Under the pass lock a deletion of the topic holds while it retires the extents
        // and removes the start: either this start is removed with it, or none is written.
        let recorded = {
            let _pass = topic.reclaim_lock();
            if topic.is_gone() {
                return Err(unknown(name));
            }
            start::advance(state.storage.as_ref(), &state.dir, name, before)?
        };
        topic.raise_log_start(recorded);
        state.reclaim.reclaim_topic(&topic);
    }
    Ok(super::reader::first_readable(&topic, state.tier.as_deref()))
}

//! Deleting a topic or a consumer group.

use super::state::State;
use crate::error::{Error, Result};
use crate::format::{ProgressState, validate_name};
use crate::poison::PanicGuard;

/// Deletes topic `name`: its cursors first, then (with the flush held off) every extent
/// marked `Deleted` oldest first. The first mark is the deletion's commit point: recovery
/// finishes a deletion a crash cut short. Then its files are freed.
pub(super) fn delete_topic(state: &State, name: &str) -> Result<()> {
    state.check_writable()?;
    let _panic = PanicGuard::new(&state.sync.poison, "topic deletion (it panicked)");
    // Shared mode: only while no other process shares the directory, with every extent
    // other processes added to the topic in its chain.
    let Some(_turn) = state.housekeeping_turn() else {
        return Err(Error::Locked {
            path: state.dir.clone(),
        });
    };
    let topic = match state.topics.get(name) {
        Err(Error::UnknownTopic { .. }) if state.topics.is_shared_mode() => state
            .topics
            .find_shared(name)
            .ok_or_else(|| Error::UnknownTopic {
                topic: name.to_owned(),
            })?,
        other => other?,
    };
    if let Some(slot) = topic.slot()
        && state.topics.is_shared_mode()
    {
        let _lock = slot.lock(crate::alloc::SHARED_LOCK_WAIT)?;
        super::follow::line_up(state, &topic, slot)?;
    }
    if !topic.stop_appends(true) {
        return Err(Error::UnknownTopic {
            topic: name.to_owned(),
        });
    }
    state.topics.remove(&topic);
    if let Some(slot) = topic.slot() {
        slot.release();
    }
    // Its entries leave the ring first: a replay never brings back a deleted topic.
    state.durable.checkpoint(&state.flusher)?;
    state
        .cursors
        .remove_topic(state.storage.as_ref(), &state.dir, name)?;
    let _flushing = state.flusher.hold();
    let _pass = topic.reclaim_lock();
    let chain = topic.take_all();
    let active = topic.tail().block.take();
    for block in &chain {
        if let Err(e) = block.retire(state.storage.as_ref(), ProgressState::Deleted) {
            state.sync.poison(&e);
            return Err(e);
        }
    }
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

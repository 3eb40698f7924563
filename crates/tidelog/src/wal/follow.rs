//! Following the writer: a read-only handle's refresh from the directory and its catch-up
//! to what the writer published (through the shared state file: at once on the extent it
//! knows, by a refresh after a roll), and the wait for new records that every handle's
//! readers use (a futex on the topic's slot; a poll of the directory where there is none).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::state::State;
use crate::alloc::SHARED_LOCK_WAIT;
use crate::config::Visibility;
use crate::error::Result;
use crate::poison::Recover;
use crate::reader::{Reader, visible_next};
use crate::recovery::{self, Known, Published, Scope};
use crate::shared::{NO_EXTENT, Snapshot, TopicGuard, TopicSlot, WAIT_SLICE, Watch};
use crate::topic::Topic;

/// First and longest sleep of a reader that polls the directory (no shared state file).
const POLL_MIN: Duration = Duration::from_micros(100);
const POLL_MAX: Duration = Duration::from_millis(20);
/// Least time between two directory reads of a catch-up: one that could not line the
/// handle up with the slot (damage past the durable point) is not repeated at every wake.
const DIRECTORY_READ_EVERY: Duration = Duration::from_millis(5);

/// A handle moves `topic` to what other processes reported in its slot: on the extent this
/// handle already has, at once; after a roll, by reading the extents they reported (a
/// read-only handle at most every `DIRECTORY_READ_EVERY`; a shared-mode one under the
/// topic's append lock, see [`line_up`]). Without a slot it does nothing (the caller polls
/// with a refresh). False while the handle stays behind the slot.
pub(super) fn catch_up(state: &State, topic: &Arc<Topic>) -> Result<bool> {
    let Some(slot) = state.follow.slot(topic) else {
        return Ok(true);
    };
    if state.topics.is_shared_mode() {
        if slot.is_gone() {
            // Another process deleted it: the next read reports it.
            state.topics.forget(topic);
            return Ok(true);
        }
        // Another process rolled: line the topic up under its append lock, so no appender
        // of this handle works on the extents the directory read restores.
        if let Some(snap) = slot.snapshot()
            && snap.next_offset > topic.next_offset()
            && !follow_tail(topic, &snap)
        {
            let _lock = slot.lock(SHARED_LOCK_WAIT)?;
            line_up(state, topic, &slot)?;
        }
        topic.note_durable(slot.durable_next().min(topic.next_offset()));
        return Ok(true);
    }
    let mut last_read = state.follow.catching_up.lock().recover();
    let mut lined_up = true;
    if let Some(snap) = slot.snapshot()
        && snap.next_offset > topic.next_offset()
        && !follow_tail(topic, &snap)
    {
        lined_up = false;
        if last_read.is_none_or(|at| at.elapsed() >= DIRECTORY_READ_EVERY) {
            let mut published = Published::default();
            add_reported(&mut published, topic.id, &slot, &snap);
            *last_read = Some(Instant::now());
            read_directory(state, &published, None)?;
            lined_up = follow_tail(topic, &snap);
        }
    }
    topic.note_durable(slot.durable_next().min(topic.next_offset()));
    Ok(lined_up)
}

/// A read-only handle takes each topic's durable offset from its slot (at open).
pub(super) fn note_reported_durable(state: &State) {
    for topic in state.topics.all() {
        if let Some(slot) = state.follow.slot(&topic) {
            topic.note_durable(slot.durable_next().min(topic.next_offset()));
        }
    }
}

/// A read-only handle's refresh: what is durable, and what the writer reported published
/// in every slot (topics this handle does not know yet included).
pub(super) fn refresh(state: &State) -> Result<()> {
    let published = state.follow.reported();
    let mut last_read = state.follow.catching_up.lock().recover();
    *last_read = Some(Instant::now());
    read_directory(state, &published, None)?;
    for topic in state.topics.all() {
        if let Some(slot) = state.follow.slot(&topic)
            && let Some(snap) = slot.snapshot()
        {
            follow_tail(&topic, &snap);
        }
    }
    note_reported_durable(state);
    // The writer's delete_records since: records below a start are not read.
    state.load_log_starts(false)
}

/// Shared mode, a handle alone at its close (no other process holds the directory): lines
/// every topic up with its slot, those other processes created included, so the closing
/// flush marks the extents they appended to last `Clean` (recovery would take the stale
/// bytes after their records for a torn write otherwise).
pub(super) fn line_up_all(state: &State) -> Result<()> {
    for topic in state.topics.every()? {
        let Some(slot) = state.follow.slot(&topic) else {
            continue;
        };
        let _lock = slot.lock(SHARED_LOCK_WAIT)?;
        if check_live(state, &topic, &slot).is_ok() {
            line_up(state, &topic, &slot)?;
        }
    }
    Ok(())
}

/// Shared mode, housekeeping: takes `topic`'s append lock (waiting up to `wait`) and lines
/// its tail up. `None` when a live holder keeps the lock that long (the topic waits for the
/// next pass) or another process deleted the topic.
pub(super) fn lock_lined_up<'s>(
    state: &State,
    topic: &Topic,
    slot: &'s TopicSlot,
    wait: Duration,
) -> Result<Option<TopicGuard<'s>>> {
    let guard = match slot.lock(wait) {
        Ok(guard) => guard,
        Err(crate::Error::LockTimeout { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    if check_live(state, topic, slot).is_err() {
        return Ok(None);
    }
    line_up(state, topic, slot)?;
    Ok(Some(guard))
}

/// Shared mode: `UnknownTopic` once another process deleted `topic` (its slot released,
/// or its deletion begun), which this handle then forgets.
pub(super) fn check_live(state: &State, topic: &Topic, slot: &TopicSlot) -> Result<()> {
    if !slot.is_gone() {
        return Ok(());
    }
    state.topics.forget(topic);
    Err(crate::Error::UnknownTopic {
        topic: topic.name.clone(),
    })
}

/// Shared mode, under `topic`'s append lock: moves its tail to what the slot reports, other
/// processes' appends included. After another process's roll, the extents it added are read
/// from the directory first (this topic's only: the handle's other topics may be appended
/// to meanwhile).
pub(super) fn line_up(state: &State, topic: &Topic, slot: &TopicSlot) -> Result<()> {
    if topic.published_since(slot) {
        let seq = slot.publish_seq();
        line_up_to(state, topic, slot)?;
        // Publishes after `seq` are seen at the next line-up.
        topic.note_lined_up(seq);
    }
    // A holder died: what it copied and never published goes before anything is appended.
    if slot.needs_repair() {
        topic.erase_unpublished(state.storage.as_ref())?;
        crate::process::crash_point("repair");
        slot.repaired();
    }
    Ok(())
}

fn line_up_to(state: &State, topic: &Topic, slot: &TopicSlot) -> Result<()> {
    // A released slot: another process deleted the topic.
    let Some(snap) = slot.snapshot_held() else {
        state.topics.forget(topic);
        return Err(crate::Error::UnknownTopic {
            topic: topic.name.clone(),
        });
    };
    if topic.is_lined_up(&snap) {
        return Ok(());
    }
    if snap.tail.file_seq == NO_EXTENT {
        return lined(topic, &snap, topic.line_up(None, &snap));
    }
    let key = (snap.tail.file_seq, snap.tail.block_index);
    let find = || {
        topic
            .chain()
            .last()
            .filter(|b| (b.file.seq, b.block_index) == key)
            .cloned()
    };
    if let Some(block) = find()
        && topic.line_up(Some(&block), &snap)
    {
        return Ok(());
    }
    let mut published = Published::default();
    add_reported(&mut published, topic.id, slot, &snap);
    let _one = state.follow.catching_up.lock().recover();
    read_directory(state, &published, Some(topic))?;
    let block = find();
    lined(
        topic,
        &snap,
        block.is_some_and(|b| topic.line_up(Some(&b), &snap)),
    )
}

/// `line_up`'s verdict: a slot that names what the directory does not hold is damage.
fn lined(topic: &Topic, snap: &Snapshot, ok: bool) -> Result<()> {
    if ok {
        return Ok(());
    }
    let chain: Vec<_> = topic
        .chain()
        .iter()
        .rev()
        .take(3)
        .map(|b| {
            let (records, end) = b.published();
            (
                b.file.seq,
                b.block_index,
                b.first_offset,
                records,
                end,
                b.final_state(),
            )
        })
        .collect();
    Err(crate::Error::Corruption {
        topic: topic.name.clone(),
        offset: topic.next_offset(),
        path: Default::default(),
        position: 0,
        reason: format!(
            "the shared state file names an extent the directory does not hold: {snap:?}; \
             this handle's last extents (file, block, first offset, records, end, final): \
             {chain:?}"
        ),
    })
}

/// What the slot of topic `id` reports: its newest extent's end, those of the extents
/// rolls closed, and its next offset.
fn add_reported(published: &mut Published, id: u32, slot: &TopicSlot, snap: &Snapshot) {
    for e in slot.finals().into_iter().chain([snap.tail]) {
        published.add_end(e.file_seq, e.block_index, e.end);
    }
    published.next.insert(id, snap.next_offset);
}

/// Moves `topic` to `snap` when its last extent is the one `snap` names.
fn follow_tail(topic: &Topic, snap: &Snapshot) -> bool {
    let Some(last) = topic.chain().last().cloned() else {
        return false;
    };
    (last.file.seq, last.block_index) == (snap.tail.file_seq, snap.tail.block_index)
        && topic.follow_published(&last, snap)
}

/// Waits until `reader` has a record to return (true), `timeout` passes (false), or its
/// handle closes (`Closed`). Sleeps on the topic's slot in the shared state file, woken by
/// the writer's publish (or sync, for durable readers) in any process; polls the directory
/// where there is no slot. A deleted topic returns true: the next read reports it.
pub(super) fn wait(state: &State, reader: &Reader, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now().checked_add(timeout);
    let topic = Arc::clone(reader.topic_handle());
    let visibility = reader.visibility();
    let position = reader.position();
    let read_only = state.status.is_read_only();
    // Handles whose topics other processes append to follow them like read-only ones.
    let following = read_only || state.topics.is_shared_mode();
    let mut poll = POLL_MIN;
    // The reader's spin, once per wait, before its first sleep.
    let mut spin = reader.spin();
    loop {
        state.check_open()?;
        // Behind the slot after a catch-up: look again soon rather than at the next wake.
        let behind = following && !catch_up(state, &topic)?;
        if topic.is_deleted() || visible_next(&topic, visibility) > position {
            return Ok(true);
        }
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left,
                _ => return Ok(false),
            },
            None => WAIT_SLICE,
        };
        if behind {
            // The slot is ahead already: waking on it would not sleep at all.
            std::thread::sleep(left.min(DIRECTORY_READ_EVERY));
            continue;
        }
        match state.follow.slot(&topic) {
            Some(slot) => {
                let watch = match visibility {
                    Visibility::Published => Watch::Published,
                    Visibility::Durable => Watch::Durable,
                };
                let ready = || {
                    let moved = if following {
                        match visibility {
                            Visibility::Published => slot.next_offset() > topic.next_offset(),
                            Visibility::Durable => slot.durable_next() > position,
                        }
                    } else {
                        visible_next(&topic, visibility) > position
                    };
                    moved || topic.is_deleted() || state.status.is_closed() || !slot.is_valid()
                };
                if !spin.is_zero() {
                    let watched = std::mem::take(&mut spin).min(left);
                    if spin_until(watched, ready) {
                        continue;
                    }
                }
                slot.wait(watch, left, ready);
            }
            None => {
                std::thread::sleep(poll.min(left));
                poll = (poll * 2).min(POLL_MAX);
                if read_only {
                    read_directory(state, &Published::default(), None)?;
                }
            }
        }
    }
}

/// Watches `ready` on this CPU for up to `limit`; true as soon as it holds. Loads of words
/// in the shared state file only: no lock is held, nothing else waits on this.
fn spin_until(limit: Duration, ready: impl Fn() -> bool) -> bool {
    /// Checks between two reads of the clock (a clock read costs about as much as a check).
    const CHECKS_PER_CLOCK: u32 = 16;
    let start = Instant::now();
    loop {
        for _ in 0..CHECKS_PER_CLOCK {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= limit {
            return ready();
        }
    }
}

/// Picks up what the writing processes made durable since the last refresh, and the
/// records they reported `published` beyond that: for every topic (read-only), or for
/// `only` (a shared-mode handle lining it up: its extents are this handle's own objects).
fn read_directory(state: &State, published: &Published, only: Option<&Topic>) -> Result<()> {
    let files = state.alloc.files().clone();
    let mut recovery = state.recovered.lock().recover();
    let shared_mode = state.topics.is_shared_mode();
    let chains: Known;
    let known = match only {
        Some(topic) => {
            chains = topic
                .chain()
                .into_iter()
                .map(|b| ((b.file.seq, b.block_index), b))
                .collect();
            &chains
        }
        None => &recovery.known,
    };
    let recovered = recovery::recover(
        &state.dir,
        &state.config,
        state.storage.as_ref(),
        false,
        &files,
        known,
        published,
        Scope {
            only_topic: only.map(|t| t.id),
            map_writable: shared_mode,
        },
    )?;
    if let Some(topic) = only {
        return follow_one(state, topic, recovered);
    }
    let mut seen = HashSet::new();
    let mut all_present = HashSet::new();
    for t in recovered.topics {
        // Another id under a known name: the writer deleted the topic and created it again.
        // The new topic starts afresh (its offsets from 0); readers of the old one keep
        // their own handle.
        let topic = state.topics.get_or_insert_found(&t.name, t.id);
        let existing = topic.chain();
        let mut added = Vec::new();
        for b in &t.chain {
            recovery
                .known
                .insert((b.file.seq, b.block_index), Arc::clone(b));
            if !existing.iter().any(|e| Arc::ptr_eq(e, b)) {
                added.push(Arc::clone(b));
            }
        }
        topic.extend_read_only(added, t.tail.next_offset, false);
        topic.note_durable(topic.durable_from_recovery());
        // Extents the writer deleted (consumed, retention) leave from the front.
        let present: HashSet<(u64, u32)> = t
            .chain
            .iter()
            .map(|b| (b.file.seq, b.block_index))
            .collect();
        topic.trim_front(|b| present.contains(&(b.file.seq, b.block_index)));
        all_present.extend(present);
        seen.insert(t.name);
    }
    // Topics the writer deleted: nothing of theirs is left to read (their readers get
    // `UnknownTopic`), and they are no longer listed.
    for topic in state.topics.all() {
        if !seen.contains(&topic.name) {
            state.topics.forget(&topic);
        }
    }
    recovery.known.retain(|key, _| all_present.contains(key));
    state.alloc.replace_files(recovered.files);
    recovery.report = recovered.report;
    Ok(())
}

/// Shared mode: adds to `topic` the extents other processes rolled to, as `recovered`
/// (of that topic alone) found them; extents it knows were reused, and those before the
/// new ones are final now.
fn follow_one(state: &State, topic: &Topic, recovered: recovery::Recovered) -> Result<()> {
    for file in recovered.files.into_values() {
        state.alloc.add_file(file);
    }
    let Some(t) = recovered.topics.into_iter().find(|t| t.id == topic.id) else {
        return Ok(());
    };
    let existing = topic.chain();
    let added: Vec<_> = t
        .chain
        .iter()
        .filter(|b| !existing.iter().any(|e| Arc::ptr_eq(e, b)))
        .cloned()
        .collect();
    // This handle's flush makes them durable too, in offset order with its own.
    topic.extend_read_only(added, t.tail.next_offset, true);
    Ok(())
}

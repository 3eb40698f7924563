//! The background threads of a writable handle: the sync thread (group commits for async
//! `Always` appends, the periodic flush), the housekeeping thread (spare files, the clock,
//! retention, staged jobs, file deletion), the prefault thread and, with a ring, the
//! uploader (checkpoints). A thread that panics poisons the handle.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::lead::{self, Election};
use super::state::State;
use crate::error::{Error, Result};
use crate::file::DataFile;
use crate::poison::Recover;
use crate::sync::Wake;

/// How often the housekeeping thread looks for abandoned staged jobs (they are a day old).
const STAGED_CHECK_EVERY: Duration = Duration::from_secs(60);

/// The running threads of a handle (none for a read-only one).
#[derive(Debug, Default)]
pub(super) struct Threads {
    handles: Mutex<Vec<JoinHandle<()>>>,
}

/// One thread's name, what it poisons the handle with should it panic, and its work.
type Work = (&'static str, &'static str, fn(&State));

impl Threads {
    /// Starts the threads of `state`'s writable handle. On failure the ones started are
    /// returned with the error, for the caller to stop.
    pub fn spawn(state: &Arc<State>) -> (Threads, Result<()>) {
        let mut work: Vec<Work> = vec![
            ("tidelog-sync", "sync thread (it panicked)", sync_loop),
            (
                "tidelog-housekeeping",
                "housekeeping thread (it panicked)",
                housekeeping_loop,
            ),
            ("tidelog-prefault", "prefault thread (it panicked)", |s| {
                s.prefault.run()
            }),
        ];
        if state.durable.journal().is_some() {
            work.push(("tidelog-upload", "upload thread (it panicked)", upload_loop));
        }
        #[cfg(feature = "tier")]
        if let Some(tier) = &state.tier {
            // Alone in its directory (exclusive mode) a handle always uploads; in shared mode
            // the housekeeping leader does.
            tier.set_uploading(!state.dir_lock.is_shared());
            work.push((
                "tidelog-tier",
                "tier thread (it panicked)",
                super::tier::upload_loop,
            ));
        }
        let threads = Threads::default();
        for (name, poisons_as, body) in work {
            let bg = Arc::clone(state);
            let spawned = std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || run_guarded(&bg, poisons_as, body));
            match spawned {
                Ok(h) => threads.handles.lock().recover().push(h),
                Err(e) => return (threads, Err(Error::io("spawn thread", &state.dir, e))),
            }
        }
        (threads, Ok(()))
    }

    /// Asks every thread to stop and joins them. A thread that panicked has poisoned the
    /// handle already; a panic that escaped the guard poisons it here.
    pub fn stop(&self, state: &State) {
        #[cfg(feature = "tier")]
        if let Some(tier) = &state.tier {
            tier.stop();
        }
        state.reclaim.stop();
        state.sync.stop_thread();
        state.prefault.stop();
        state.durable.stop();
        let handles = std::mem::take(&mut *self.handles.lock().recover());
        for handle in handles {
            if handle.join().is_err() {
                state
                    .sync
                    .poison(&panicked("background thread (it panicked)"));
            }
        }
    }

    /// Forgets the threads without joining: in a forked child the handles name threads of
    /// the parent.
    pub fn forget(&self) {
        std::mem::forget(std::mem::take(&mut *self.handles.lock().recover()));
    }
}

/// The poison a panic leaves: no errno, no file.
fn panicked(op: &'static str) -> Error {
    Error::Poisoned {
        op,
        path: Default::default(),
        errno: None,
    }
}

/// Runs `body`; a panic poisons the handle (waking every waiter) instead of vanishing.
fn run_guarded(state: &State, poisons_as: &'static str, body: fn(&State)) {
    if catch_unwind(AssertUnwindSafe(|| body(state))).is_err() {
        state.sync.poison(&panicked(poisons_as));
    }
}

/// The sync thread: group commits for async `Always` appends, and the periodic flush (data
/// in `Interval` mode, progress slots and seals in both).
fn sync_loop(state: &State) {
    let interval = Duration::from_millis(state.config.sync_interval_ms);
    let limits = state.group_limits();
    let mut tick = Instant::now() + interval;
    loop {
        match state.sync.next_wake(tick) {
            Wake::Stop => return,
            // Failures poison the queue and reach every caller through it.
            Wake::Group => {
                if let Some(lead) = state.sync.try_lead(&limits) {
                    let result = state.sync.check().and_then(|()| state.flusher.sync_group());
                    lead.finish(&result);
                }
            }
            Wake::Tick => {
                tick = Instant::now() + interval;
                if state.durable.runs_periodic_flush(state.config.durability) {
                    let _ = state.flusher.flush();
                }
            }
        }
    }
}

/// The uploader thread (ring backend): checkpoints every sync interval, when the ring is
/// half full, and when an appender finds it full. Errors reach appenders through the
/// poisoned store or ring; the first is kept for the next flush.
fn upload_loop(state: &State) {
    let Some(journal) = state.durable.journal() else {
        return;
    };
    let interval = Duration::from_millis(state.config.sync_interval_ms);
    let mut last = Instant::now();
    while journal.wait_until_due(interval, last) {
        last = Instant::now();
        if let Err(e) = state.durable.checkpoint(&state.flusher) {
            state.reclaim.report(e);
        }
    }
}

/// The housekeeping thread: spare files, the clock, retention, staged jobs and file
/// deletion, every sync interval or as soon as files are doomed. In shared mode, once
/// another process joined, retention, deletion and staged jobs are the elected leader's
/// (`lead`, `turn_pass`).
fn housekeeping_loop(state: &State) {
    let tick = Duration::from_millis(state.config.sync_interval_ms);
    let mut retry: Vec<Arc<DataFile>> = Vec::new();
    let mut staged_checked = Instant::now();
    let mut election = Election::default();
    while state.reclaim.wait_for_work(tick) {
        state.clock.recalibrate();
        if state.alloc.wants_spare() {
            // A failure here is retried by the allocating thread, which reports it.
            let _ = state.alloc.prepare_spare(state.storage.as_ref());
        }
        if let Some(shared) = state.follow.writer_state()
            && state.dir_lock.is_shared()
        {
            election.follow_retired(state, &shared);
            let leading = election.lead(state, &shared);
            #[cfg(feature = "tier")]
            if let Some(tier) = &state.tier {
                tier.set_uploading(leading);
            }
            if leading && !state.alloc.sees_everything() {
                if let Err(e) = lead::leader_pass(state, &shared, &mut election) {
                    state.reclaim.report(e);
                }
                // Staged jobs and deletions cut short, beside the other processes (alone,
                // below).
                turn_pass(state, true, &mut staged_checked);
            }
        }
        // In shared mode, only while no other process shares the directory.
        let Some(_turn) = state.housekeeping_turn() else {
            continue;
        };
        for topic in state.topics.all() {
            if !state.config.local_retention_for(&topic.name).is_unlimited() {
                state.reclaim.reclaim_topic(&topic);
            }
        }
        turn_pass(state, false, &mut staged_checked);
        if !state.counts_files_alone() {
            // The leader's pass above judged the files from the disk.
            drop(state.alloc.take_doomed());
            retry.clear();
            continue;
        }
        // Failed unlinks wait for the next tick, so a persistent failure does not spin.
        for file in retry.drain(..) {
            state.alloc.doom(&file);
        }
        let (failed, result) = state.reclaim.delete_doomed();
        retry = failed;
        if let Err(e) = result {
            state.reclaim.report(e);
        }
    }
}

/// Housekeeping's work under the publish turn (`across`: beside other processes): the
/// deletions a dead process cut short are finished, the staged jobs committed in any
/// process published, and every `STAGED_CHECK_EVERY` those abandoned removed. Skipped while
/// another process or thread has the turn (a publish, a deletion): the next tick looks
/// again.
fn turn_pass(state: &State, across: bool, checked: &mut Instant) {
    let _publishing = match state.dir_lock.publish_turn(Duration::ZERO) {
        Ok(Some(turn)) => turn,
        Ok(None) => return,
        Err(e) => return state.reclaim.report(e),
    };
    if state.topics.is_shared_mode()
        && let Err(e) = super::delete::finish_cut_short(state)
    {
        state.reclaim.report(e);
    }
    if let Err(e) = state.publish_committed(across) {
        state.reclaim.report(e);
    }
    if checked.elapsed() >= STAGED_CHECK_EVERY {
        *checked = Instant::now();
        if let Err(e) = state.remove_abandoned_staged() {
            state.reclaim.report(e);
        }
    }
}

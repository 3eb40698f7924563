//! Durability bookkeeping: tickets for appends that wait on a sync, the group-commit queue the
//! sync thread drains, and the poison a failed sync leaves behind.
//!
//! An append that wants to know when it is durable takes a ticket *after* its record is
//! published. A sync pass snapshots the newest ticket *before* it starts and syncs everything
//! published by then, so on success every ticket up to the snapshot is durable. On failure
//! those tickets get the original error and the queue is poisoned: later tickets can never
//! complete (fsyncgate: a retried sync may "succeed" over lost pages), so they fail at once.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::poison::{Poison, Recover};
use crate::ring::RingAppend;

#[derive(Debug, Default)]
struct State {
    /// Newest ticket handed out (tickets start at 1).
    issued: u64,
    /// Every ticket up to this one is durable.
    completed: u64,
    /// Tickets in `(completed, failed]` were covered by a failed sync.
    failed: u64,
    /// Appenders between `begin_write` and their ticket: the sync thread holds a group open
    /// for them (up to the group wait) instead of syncing without them.
    in_flight: u64,
    /// Bytes appended by the tickets of the open group.
    group_bytes: u64,
    /// An async `Always` ticket waits: the sync thread should start a group now.
    urgent: bool,
    /// A group pass is running (led by an appender or by the sync thread).
    syncing: bool,
    /// The sync thread should exit (the Wal is closing; close runs the final pass).
    stop: bool,
    /// The Wal is closed: no pass will run again.
    closed: bool,
    /// `Always` appenders asleep until a pass covers their ticket, woken one by one (no herd
    /// on this lock when a group of many completes).
    parked: Vec<(u64, std::thread::Thread)>,
}

/// What [`SyncQueue::wait_turn`] decided.
#[derive(Debug)]
pub(crate) enum Turn<'a> {
    /// The ticket is durable, or can never be (the error says why).
    Decided(Result<()>),
    /// This thread leads the next group pass.
    Lead(Lead<'a>),
}

/// The leader's hold on a group pass: it syncs what was published before it began (every
/// ticket up to `upto`), then finishes the pass with the result. A leader that unwinds
/// without finishing (a panic in the pass) fails the group and poisons the queue.
#[derive(Debug)]
#[must_use = "a group pass must be finished"]
pub(crate) struct Lead<'a> {
    queue: &'a SyncQueue,
    upto: u64,
    finished: bool,
}

impl Lead<'_> {
    /// Completes (on `Ok`) or fails every ticket the pass covered; a failure poisons.
    pub fn finish(mut self, result: &Result<()>) {
        self.finished = true;
        self.queue.end_lead(self.upto, result);
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.queue.poison.set_panicked("group commit");
            let e = self.queue.poison.poisoned_error();
            self.queue.end_lead(self.upto, &Err(e));
        }
    }
}

/// Why the sync thread woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// `Always` appenders wait: sync their data now.
    Group,
    /// The periodic flush is due.
    Tick,
    /// The Wal is closing.
    Stop,
}

/// Group-commit queue and poison flag, shared by a `Wal`, its writers and its handles.
#[derive(Debug, Default)]
pub(crate) struct SyncQueue {
    state: Mutex<State>,
    /// The sync thread waits here for urgent tickets and for in-flight appenders.
    sync_cv: Condvar,
    /// Waiting appenders and handles wait here for passes to end.
    done_cv: Condvar,
    /// The handle's poison: every part of a `Wal` that can fail its writes sets it here.
    pub poison: Poison,
    /// `State::completed`, readable without the lock by woken appenders.
    completed_fast: std::sync::atomic::AtomicU64,
}

impl SyncQueue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().recover()
    }

    /// Fails with [`Error::Poisoned`] once a sync has failed.
    #[inline]
    pub fn check(&self) -> Result<()> {
        self.poison.check()
    }

    /// Records a failed sync (the first one wins); the caller holds the lock and notifies.
    fn set_poison(&self, e: &Error) {
        self.poison.set(e);
    }

    /// Records a failed sync (the first one wins) and wakes every waiter: no ticket issued
    /// after this can complete.
    pub fn poison(&self, e: &Error) {
        self.set_poison(e);
        // Under the lock, so a waiter between its check and its wait cannot miss this.
        let mut st = self.lock();
        Self::wake_parked(&mut st, None);
        self.done_cv.notify_all();
        self.sync_cv.notify_all();
    }

    /// An appender that will take a ticket starts copying; the returned guard ends that on
    /// drop, so an append that fails does not hold a group open.
    pub fn begin_write(&self) -> InFlight<'_> {
        self.lock().in_flight += 1;
        InFlight {
            queue: self,
            done: false,
        }
    }

    /// Waits until no appender is between `begin_write` and its ticket (close: their
    /// tickets must exist before the final pass snapshots them).
    pub fn wait_idle(&self) {
        while self.lock().in_flight > 0 {
            std::thread::yield_now();
        }
    }

    /// A ticket for records published before this call. `urgent` asks the sync thread to
    /// sync now (`Always`); otherwise the next periodic pass or flush completes it.
    pub fn ticket(&self, bytes: u64, urgent: bool, in_flight: Option<InFlight<'_>>) -> u64 {
        let mut st = self.lock();
        let mut wake = false;
        if let Some(mut guard) = in_flight {
            guard.done = true;
            st.in_flight -= 1;
            // A group held open for appenders still copying may go now.
            wake = st.in_flight == 0 && st.syncing;
        }
        st.issued += 1;
        let ticket = st.issued;
        st.group_bytes += bytes;
        if urgent && !st.urgent {
            st.urgent = true;
            wake = true;
        }
        drop(st);
        if wake {
            self.sync_cv.notify_all();
        }
        ticket
    }

    /// Waits until `ticket` is decided ([`Turn::Decided`]) or it is this thread's turn to
    /// lead a group pass ([`Turn::Lead`]): whenever none is running, so a lone appender
    /// pays one sync and no hand-off to another thread, and concurrent ones share the
    /// leader's sync. The leader runs the pass and calls [`Lead::finish`], then asks again.
    pub fn wait_turn(&self, ticket: u64, group: &GroupLimits) -> Turn<'_> {
        let me = std::thread::current();
        let mut st = self.lock();
        loop {
            if let Some(done) = self.outcome(&st, ticket) {
                return Turn::Decided(done);
            }
            if !st.syncing {
                return Turn::Lead(self.lead(st, group));
            }
            st.parked.push((ticket, me.clone()));
            drop(st);
            loop {
                std::thread::park_timeout(PARK_MAX);
                if self.completed_fast.load(Ordering::Acquire) >= ticket {
                    return Turn::Decided(Ok(()));
                }
                st = self.lock();
                // Still listed while a pass runs: a spurious wake-up, sleep on. Otherwise
                // decide now (or lead the next group, should its chosen leader be gone).
                let listed = st.parked.iter().position(|(_, t)| t.id() == me.id());
                match listed {
                    Some(_) if st.syncing => drop(st),
                    Some(i) => {
                        st.parked.swap_remove(i);
                        break;
                    }
                    None => break,
                }
            }
        }
    }

    /// Wakes parked appenders: those whose tickets `upto` covers, plus one more to lead the
    /// next group; everyone when `upto` is `None` (a failure or close decides them all).
    fn wake_parked(st: &mut State, upto: Option<u64>) {
        match upto {
            Some(upto) => {
                st.parked.retain(|(t, thread)| {
                    let covered = *t <= upto;
                    if covered {
                        thread.unpark();
                    }
                    !covered
                });
                if let Some((_, next)) = st.parked.pop() {
                    next.unpark();
                }
            }
            None => {
                for (_, thread) in st.parked.drain(..) {
                    thread.unpark();
                }
            }
        }
    }

    /// Records a completed pass: tickets up to `upto` are durable.
    fn complete(&self, st: &mut State, upto: u64) {
        st.completed = st.completed.max(upto);
        self.completed_fast.store(st.completed, Ordering::Release);
        Self::wake_parked(st, Some(upto));
    }

    /// Leads one group pass if none is running (the sync thread, for async tickets).
    pub fn try_lead(&self, group: &GroupLimits) -> Option<Lead<'_>> {
        let st = self.lock();
        if st.syncing || st.closed {
            return None;
        }
        Some(self.lead(st, group))
    }

    /// Starts a group pass: holds the group open while appenders are still copying (up to
    /// the limits), then snapshots the tickets the pass covers.
    fn lead<'a>(&'a self, mut st: MutexGuard<'a, State>, group: &GroupLimits) -> Lead<'a> {
        st.syncing = true;
        let until = Instant::now() + group.wait;
        while st.in_flight > 0 && st.group_bytes < group.bytes_max && !st.closed {
            let now = Instant::now();
            if now >= until {
                break;
            }
            st = self.sync_cv.wait_timeout(st, until - now).recover().0;
        }
        st.urgent = false;
        st.group_bytes = 0;
        Lead {
            queue: self,
            upto: st.issued,
            finished: false,
        }
    }

    /// Ends a group pass with its result: completes or fails the tickets it covered.
    fn end_lead(&self, upto: u64, result: &Result<()>) {
        let mut st = self.lock();
        st.syncing = false;
        match result {
            Ok(()) => self.complete(&mut st, upto),
            Err(e) => {
                self.set_poison(e);
                st.failed = st.failed.max(upto);
                Self::wake_parked(&mut st, None);
            }
        }
        drop(st);
        self.done_cv.notify_all();
        self.sync_cv.notify_all();
    }

    /// What a waiter on `ticket` gets now, if it is decided.
    fn outcome(&self, st: &State, ticket: u64) -> Option<Result<()>> {
        if st.completed >= ticket {
            return Some(Ok(()));
        }
        if st.failed >= ticket {
            return Some(Err(self.poison.original().unwrap_or(Error::Closed)));
        }
        if self.poison.is_poisoned() {
            return Some(Err(self.poison.poisoned_error()));
        }
        if st.closed {
            return Some(Err(Error::Closed));
        }
        None
    }

    /// The newest ticket so far: a pass starting now covers all of them.
    pub fn begin_pass(&self) -> u64 {
        self.lock().issued
    }

    /// Ends a pass that covered tickets up to `upto`.
    pub fn end_pass(&self, upto: u64, result: &Result<()>) {
        let mut st = self.lock();
        match result {
            Ok(()) => self.complete(&mut st, upto),
            Err(e) => {
                self.set_poison(e);
                st.failed = st.failed.max(upto);
                Self::wake_parked(&mut st, None);
            }
        }
        drop(st);
        self.done_cv.notify_all();
    }

    /// True when `ticket` is durable.
    pub fn is_done(&self, ticket: u64) -> bool {
        self.lock().completed >= ticket
    }

    /// Waits until `ticket` is durable (`Ok(true)`), the deadline passes (`Ok(false)`), or
    /// the sync covering it failed (the original error) or can never run (poisoned, closed).
    pub fn wait(&self, ticket: u64, deadline: Option<Instant>) -> Result<bool> {
        let mut st = self.lock();
        loop {
            if let Some(done) = self.outcome(&st, ticket) {
                return done.map(|()| true);
            }
            st = match deadline {
                // No deadline asked for (`AppendHandle::wait`): the pass that covers the
                // ticket ends it, as do its failure, poison and close (all notify).
                None => self.done_cv.wait(st).recover(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(false);
                    }
                    self.done_cv.wait_timeout(st, d - now).recover().0
                }
            };
        }
    }

    /// The sync thread's wait: returns when an async ticket wants a group and none is
    /// running, when `tick` has passed, or on stop.
    pub fn next_wake(&self, tick: Instant) -> Wake {
        let mut st = self.lock();
        loop {
            if st.stop {
                return Wake::Stop;
            }
            if st.urgent && !st.syncing {
                return Wake::Group;
            }
            let now = Instant::now();
            if now >= tick {
                return Wake::Tick;
            }
            st = self.sync_cv.wait_timeout(st, tick - now).recover().0;
        }
    }

    /// Asks the sync thread to exit.
    pub fn stop_thread(&self) {
        self.lock().stop = true;
        self.sync_cv.notify_all();
    }

    /// After the final pass: waiters whose tickets it did not complete get
    /// [`Error::Closed`].
    pub fn close(&self) {
        let mut st = self.lock();
        st.stop = true;
        st.closed = true;
        Self::wake_parked(&mut st, None);
        drop(st);
        self.sync_cv.notify_all();
        self.done_cv.notify_all();
    }
}

/// Longest sleep of a parked appender between checks (a safety net: passes wake them).
const PARK_MAX: Duration = Duration::from_millis(50);

/// An `Always` appender between `begin_write` and its ticket.
#[derive(Debug)]
pub(crate) struct InFlight<'a> {
    queue: &'a SyncQueue,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.queue.lock().in_flight -= 1;
            self.queue.sync_cv.notify_all();
        }
    }
}

/// How long and how big a group may grow before its sync starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupLimits {
    pub wait: Duration,
    pub bytes_max: u64,
}

/// The result of [`crate::Writer::append_async`]: the offsets at once, and durability to
/// wait on (as AutoMQ's `append` returns a future).
#[derive(Debug, Clone)]
pub struct AppendHandle {
    offsets: Range<u64>,
    durable: Durable,
}

/// What an [`AppendHandle`] waits on.
#[derive(Debug, Clone)]
enum Durable {
    /// A sync ticket of the data files.
    Ticket { queue: Arc<SyncQueue>, ticket: u64 },
    /// The ring block holding the append's journal entry (the ring backend).
    Ring(RingAppend),
}

impl AppendHandle {
    pub(crate) fn new(queue: Arc<SyncQueue>, offsets: Range<u64>, ticket: u64) -> Self {
        AppendHandle {
            offsets,
            durable: Durable::Ticket { queue, ticket },
        }
    }

    pub(crate) fn ring(offsets: Range<u64>, ring: RingAppend) -> Self {
        AppendHandle {
            offsets,
            durable: Durable::Ring(ring),
        }
    }

    /// The offset of the (first) record.
    pub fn offset(&self) -> u64 {
        self.offsets.start
    }

    /// The offsets of every record of the append.
    pub fn offsets(&self) -> Range<u64> {
        self.offsets.clone()
    }

    /// True once the records are durable.
    pub fn is_durable(&self) -> bool {
        match &self.durable {
            Durable::Ticket { queue, ticket } => queue.is_done(*ticket),
            Durable::Ring(ring) => ring.is_durable(),
        }
    }

    /// Waits until the records are durable. Fails with the sync's error if the sync that
    /// covered them failed, and with [`Error::Poisoned`] or [`Error::Closed`] if no sync
    /// can cover them any more.
    pub fn wait(&self) -> Result<()> {
        match &self.durable {
            Durable::Ticket { queue, ticket } => queue.wait(*ticket, None).map(|_| ()),
            Durable::Ring(ring) => ring.wait().map(|_| ()),
        }
    }

    /// As [`AppendHandle::wait`], for at most `timeout`; `Ok(false)` when time ran out.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        match &self.durable {
            Durable::Ticket { queue, ticket } => {
                queue.wait(*ticket, Some(crate::clock::deadline_after(timeout)))
            }
            Durable::Ring(ring) => ring.wait_timeout(timeout).map(|d| d.is_some()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::path::PathBuf;

    #[test]
    fn tickets_complete_only_when_a_later_pass_ends() {
        let q = SyncQueue::default();
        let t1 = q.ticket(10, false, None);
        let pass = q.begin_pass();
        let t2 = q.ticket(10, false, None);
        q.end_pass(pass, &Ok(()));
        assert!(q.is_done(t1));
        assert!(!q.is_done(t2));
        assert!(!q.wait(t2, Some(Instant::now())).expect("no failure"));
    }

    #[test]
    fn a_failed_pass_fails_its_tickets_and_poisons_later_ones() {
        let q = SyncQueue::default();
        let t1 = q.ticket(1, true, None);
        let pass = q.begin_pass();
        let err = Error::Io {
            op: "msync",
            path: PathBuf::from("f"),
            source: io::Error::from_raw_os_error(libc::EIO),
        };
        q.end_pass(pass, &Err(err));
        let e = q.wait(t1, None).expect_err("covered by the failed sync");
        assert!(matches!(e, Error::Io { op: "msync", .. }));
        assert_eq!(e.errno(), Some(libc::EIO));
        let t2 = q.ticket(1, true, None);
        let e = q.wait(t2, None).expect_err("poisoned");
        assert!(matches!(
            e,
            Error::Poisoned {
                errno: Some(libc::EIO),
                ..
            }
        ));
        assert!(q.check().is_err());
    }

    #[test]
    fn a_failed_append_releases_its_in_flight_slot() {
        let q = SyncQueue::default();
        {
            let _g = q.begin_write();
            assert_eq!(q.lock().in_flight, 1);
        }
        assert_eq!(q.lock().in_flight, 0);
        let g = q.begin_write();
        q.ticket(1, true, Some(g));
        assert_eq!(q.lock().in_flight, 0);
        assert_eq!(
            q.next_wake(Instant::now() + Duration::from_secs(5)),
            Wake::Group
        );
    }

    #[test]
    fn a_lone_waiter_leads_its_own_pass() {
        let q = SyncQueue::default();
        let g = q.begin_write();
        let t = q.ticket(1, false, Some(g));
        let limits = GroupLimits {
            wait: Duration::from_secs(5),
            bytes_max: 1 << 20,
        };
        let mut passes = 0;
        let result = loop {
            match q.wait_turn(t, &limits) {
                Turn::Decided(r) => break r,
                Turn::Lead(lead) => {
                    passes += 1;
                    lead.finish(&Ok(()));
                }
            }
        };
        result.expect("led and succeeded");
        assert_eq!(passes, 1);
        assert!(q.is_done(t));
    }

    #[test]
    fn a_leader_that_unwinds_fails_its_group_and_poisons() {
        let q = SyncQueue::default();
        let t = q.ticket(1, false, None);
        let limits = GroupLimits {
            wait: Duration::ZERO,
            bytes_max: 1 << 20,
        };
        let Turn::Lead(lead) = q.wait_turn(t, &limits) else {
            panic!("a lone waiter leads");
        };
        drop(lead);
        assert!(matches!(
            q.wait_turn(t, &limits),
            Turn::Decided(Err(Error::Poisoned { .. }))
        ));
        assert!(matches!(q.check(), Err(Error::Poisoned { .. })));
    }
}

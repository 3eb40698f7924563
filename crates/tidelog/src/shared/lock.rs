//! Lock words of the shared state file: a `u32` futex word per lock (a topic's appends, its
//! progress slots, the allocator, the topic table), held by one process at a time, and the
//! process table that tells a live owner from a dead one.
//!
//! A word holds `WAITERS | gen << 16 | process slot + 1`, or 0 when free. A process owns its
//! process slot while it holds an open-file-description lock on the slot's byte of the
//! directory's `LOCK` file; the kernel drops that lock when the process dies. A waiter that
//! sees the same owner for a whole sleep asks the kernel whether the owner's byte is still
//! held (one `fcntl`), and takes a dead owner's word over (the caller then repairs what it
//! guarded). A live owner is never broken into, a stopped one included: the waiter gives up
//! after its bound with `LockTimeout`, naming the owner's pid.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::futex;
use crate::ofd;

/// Set in a lock word while a waiter sleeps on it: the release wakes.
pub const WAITERS: u32 = 1 << 31;
const OWNER_MASK: u32 = !WAITERS;
/// Generations are 15 bits in a word.
const GEN_MASK: u32 = 0x7FFF;
/// Longest sleep between two looks at a contended word: bounds the time to notice a dead
/// owner (plus one `fcntl`).
const SLEEP: Duration = Duration::from_millis(2);
/// How long a waiter polls a contended word before its first sleep (on more than two CPUs):
/// an append holds its topic's word for well under a microsecond, so a waiter that polls
/// this long takes the word without sleeping, and the release then needs no wake (a futex
/// wake costs the releaser a system call and the sleeper microseconds).
const SPIN: Duration = Duration::from_micros(30);
/// Most spin-loop hints between two looks of a polling waiter (doubling from 1).
const BACKOFF_MAX: u32 = 64;

/// Processes that may hold a directory in shared mode at once.
pub const PROCESSES: usize = 256;
/// Byte of the `LOCK` file whose OFD lock says process slot 0 is alive (slot `i` at
/// `PROCESS_BYTE + i`).
pub const PROCESS_BYTE: u64 = 4096;

/// The value a lock word holds for process slot `slot` in generation `generation`.
pub fn owner_value(slot: u32, generation: u32) -> u32 {
    (generation & GEN_MASK) << 16 | (slot + 1)
}

/// What a lock word needs to know about processes: which slot is this one, and whether
/// another slot's owner is alive.
#[derive(Debug)]
pub struct Liveness {
    /// The `LOCK` file, through the open file description that holds this process's byte.
    file: File,
    slot: u32,
    generation: u32,
}

impl Liveness {
    /// This process holds slot `slot` (its byte is locked through `file`) in generation
    /// `generation`.
    pub fn new(file: File, slot: u32, generation: u32) -> Liveness {
        assert!((slot as usize) < PROCESSES);
        crate::process::detach_in_children(file.as_raw_fd());
        Liveness {
            file,
            slot,
            generation: generation & GEN_MASK,
        }
    }

    /// This process's slot in the process table.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// This process's value in a lock word.
    pub fn owner(&self) -> u32 {
        owner_value(self.slot, self.generation)
    }

    /// True while the owner `owner` (a lock word's value, waiters bit ignored) may be alive:
    /// this process, or a slot whose generation is still `owner`'s and whose byte another
    /// description holds. An error of `fcntl` counts as alive (never break a lock on doubt).
    pub fn is_alive(&self, owner: u32, generation_of: impl Fn(u32) -> u32) -> bool {
        let owner = owner & OWNER_MASK;
        if owner == self.owner() {
            return true;
        }
        let Some(slot) = (owner & 0xFFFF).checked_sub(1) else {
            return false;
        };
        if slot as usize >= PROCESSES {
            return false;
        }
        if generation_of(slot) & GEN_MASK != owner >> 16 {
            // The slot was taken again since: its old owner is gone.
            return false;
        }
        ofd::held_by_other(&self.file, PROCESS_BYTE + u64::from(slot)).unwrap_or(true)
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        crate::process::keep_in_children(self.file.as_raw_fd());
    }
}

/// How an acquire ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The word was free or released.
    Clean,
    /// Its owner died holding it: the caller repairs what the lock guards.
    FromDead,
}

/// Takes `word` for `live`'s process, waiting up to `wait` for a live owner. A dead owner's
/// word is taken over at once (`Acquired::FromDead`). `what` and `pid_of` name the lock and
/// its owner's pid in the error after the wait.
pub fn acquire(
    word: &AtomicU32,
    live: &Liveness,
    generation_of: impl Fn(u32) -> u32,
    pid_of: impl Fn(u32) -> u32,
    what: &'static str,
    wait: Duration,
) -> Result<Acquired> {
    let me = live.owner();
    if word
        .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return Ok(Acquired::Clean);
    }
    let start = Instant::now();
    let spinning = many_cpus();
    let mut slept = false;
    let mut backoff = 1u32;
    let mut seen: Option<u32> = None;
    loop {
        let cur = word.load(Ordering::Relaxed);
        if cur == 0 {
            // Taken with the waiters bit: others may still sleep, and our release wakes them.
            let with = if slept { me | WAITERS } else { me };
            if word
                .compare_exchange(0, with, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(Acquired::Clean);
            }
            continue;
        }
        let owner = cur & OWNER_MASK;
        // The same owner for a whole sleep: is it alive?
        if seen == Some(owner) && !live.is_alive(owner, &generation_of) {
            if word
                .compare_exchange(
                    cur,
                    me | (cur & WAITERS),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return Ok(Acquired::FromDead);
            }
            continue;
        }
        let waited = start.elapsed();
        if spinning && !slept && waited < SPIN {
            // Backing off between looks keeps the waiters off the holder's cache line.
            for _ in 0..backoff {
                std::hint::spin_loop();
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
            continue;
        }
        if waited >= wait {
            let slot = (owner & 0xFFFF).saturating_sub(1);
            return Err(Error::LockTimeout {
                lock: what,
                holder_pid: pid_of(slot),
                waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            });
        }
        if cur & WAITERS == 0
            && word
                .compare_exchange(cur, cur | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        seen = Some(owner);
        slept = true;
        futex::wait(word, cur | WAITERS, SLEEP.min(wait - waited));
    }
}

/// True on more than two CPUs: spinning on a contended word pays only there.
fn many_cpus() -> bool {
    static MANY: OnceLock<bool> = OnceLock::new();
    *MANY.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 2))
}

/// Releases `word`, held by this process, and wakes one of its waiters: that one takes the
/// word with the waiters bit set again (it slept, so others may sleep too), and its release
/// wakes the next.
pub fn release(word: &AtomicU32) {
    let prev = word.swap(0, Ordering::Release);
    if prev & WAITERS != 0 {
        futex::wake_one(word);
    }
}

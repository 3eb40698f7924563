//! Fork detection: a handle opened before `fork()` must not be used in the child.
//!
//! The child inherits the mappings and file descriptors but none of the background threads,
//! and its locks may be frozen mid-critical-section, so every call on an inherited handle
//! fails with [`crate::Error::Forked`] and dropping it releases nothing the parent still
//! uses. A `pthread_atfork` child handler bumps a generation counter, so the check on the hot
//! path is one atomic load instead of a `getpid` system call.

use std::sync::Once;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// Descriptors a child must not keep: those holding a shared-mode handle's byte locks (its
/// liveness). A child keeping them would keep the parent "alive" to other processes after
/// its death, so a lock the parent died holding would never be taken over. A shared-mode
/// handle registers two, so 512 such handles open at once in one process are covered.
const LOCK_FDS: usize = 1024;
static LOCK_FD: [AtomicI32; LOCK_FDS] = [const { AtomicI32::new(-1) }; LOCK_FDS];

extern "C" fn on_fork_child() {
    // Async-signal-safe: atomics, open, dup2 and close only; no allocation, no lock.
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
    for slot in &LOCK_FD {
        let fd = slot.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            detach_fd(fd);
        }
    }
}

/// Points `fd` at `/dev/null`: the open file description it shared with the parent loses
/// this process's reference (and its locks stay the parent's), while the number stays
/// taken until the handle that owns it closes it.
#[expect(
    unsafe_code,
    reason = "open, dup2 and close have no async-signal-safe wrapper"
)]
fn detach_fd(fd: i32) {
    // SAFETY: a NUL-terminated static path, alive for the call; open is async-signal-safe.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if null < 0 {
        // The descriptor is left as it was.
        return;
    }
    // SAFETY: dup2 takes no pointers and is async-signal-safe; `fd` is registered, so it is
    // open and owned by a handle that closes it later (now on /dev/null).
    unsafe { libc::dup2(null, fd) };
    // SAFETY: closes the descriptor opened above, which nothing else owns.
    unsafe { libc::close(null) };
}

/// Registers `fd` to be detached in forked children (see `LOCK_FD`). False when the table
/// is full (the child then keeps it; only a parent's death is noticed later).
pub(crate) fn detach_in_children(fd: i32) -> bool {
    generation();
    LOCK_FD.iter().any(|slot| {
        slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// Forgets `fd` (its handle closes it now).
pub(crate) fn keep_in_children(fd: i32) {
    for slot in &LOCK_FD {
        let _ = slot.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// The current fork generation, registering the `fork` handler on first use. A handle
/// records it when opened; a different value later means this is a forked child.
pub(crate) fn generation() -> u64 {
    REGISTER.call_once(|| {
        #[expect(unsafe_code, reason = "pthread_atfork has no safe wrapper")]
        // SAFETY: `on_fork_child` is a plain `extern "C"` function with no captured state
        // that performs one atomic add, which is async-signal-safe as POSIX requires of
        // code run in a child of a multi-threaded process. Registration cannot fail in a
        // way that makes later code unsound: on failure fork detection is simply off.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
        debug_assert_eq!(rc, 0, "pthread_atfork failed");
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// True when this process is a fork of the one that read `opened_generation`.
#[inline]
pub(crate) fn is_forked(opened_generation: u64) -> bool {
    FORK_GENERATION.load(Ordering::Relaxed) != opened_generation
}

/// Named crash points for the crash tests: `TIDELOG_CRASH_AT=ACTION:POINT:N` makes the
/// `N`th pass (from 1) of this process through `POINT` `kill` it (`SIGKILL`) or `stop` it
/// (`SIGSTOP`, as a debugger would). Unset (always, outside tests), a pass costs one load.
pub(crate) fn crash_point(point: &str) {
    static PLAN: std::sync::OnceLock<Option<(bool, String, u64)>> = std::sync::OnceLock::new();
    static PASSES: AtomicU64 = AtomicU64::new(0);
    let plan = PLAN.get_or_init(|| {
        let spec = std::env::var("TIDELOG_CRASH_AT").ok()?;
        let mut parts = spec.splitn(3, ':');
        let kill = match parts.next()? {
            "kill" => true,
            "stop" => false,
            _ => return None,
        };
        let name = parts.next()?.to_owned();
        let n = parts.next()?.parse().ok()?;
        Some((kill, name, n))
    });
    let Some((kill, name, n)) = plan else {
        return;
    };
    if name != point || PASSES.fetch_add(1, Ordering::Relaxed) + 1 != *n {
        return;
    }
    let signal = if *kill { libc::SIGKILL } else { libc::SIGSTOP };
    #[expect(unsafe_code, reason = "raise(3) has no safe wrapper")]
    // SAFETY: raise takes no pointers; it only signals this process.
    unsafe {
        libc::raise(signal);
    }
}

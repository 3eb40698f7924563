//! Fork detection: a handle opened before `fork()` must not be used in the child.
//!
//! The child inherits the mappings and file descriptors but none of the background threads,
//! and its locks may be frozen mid-critical-section, so every call on an inherited handle
//! fails with [`crate::Error::Forked`] and dropping it releases nothing the parent still
//! uses. A `pthread_atfork` child handler bumps a generation counter, so the check on the hot
//! path is one atomic load instead of a `getpid` system call.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn on_fork_child() {
    // Async-signal-safe: one atomic add, no allocation, no lock.
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
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

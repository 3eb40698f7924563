//! Unsafe island: futex wait and wake on words of a `MAP_SHARED` file mapping, so a thread
//! of one process sleeps until a thread of any process changes the word.
//!
//! The operations leave out `FUTEX_PRIVATE_FLAG`: the kernel then keys a wait on the
//! mapped file's inode and offset, so waiters and wakers need not share an address space.

#![expect(unsafe_code, reason = "futex(2) has no safe wrapper in std or libc")]

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, for at most `timeout`: returns on a wake, a
/// timeout, a signal, or at once when the word already differs (the caller re-checks its
/// condition in every case).
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
    };
    // SAFETY: `word` is a live, 4-aligned `AtomicU32` for the whole call (the borrow keeps
    // its mapping alive); `ts` lives on this stack frame for the call; FUTEX_WAIT only reads
    // both. Every outcome (woken, EAGAIN, ETIMEDOUT, EINTR) is a return the caller handles
    // by re-checking, so the result is not inspected.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &raw const ts,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread, of any process, sleeping in [`wait`] on `word`.
pub fn wake_all(word: &AtomicU32) {
    wake(word, i32::MAX);
}

/// Wakes one thread, of any process, sleeping in [`wait`] on `word`.
pub fn wake_one(word: &AtomicU32) {
    wake(word, 1);
}

fn wake(word: &AtomicU32, count: i32) {
    // SAFETY: `word` is a live, 4-aligned `AtomicU32`; FUTEX_WAKE reads no user memory
    // besides keying on its address, and takes no other pointers.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            count,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

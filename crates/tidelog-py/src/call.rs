//! Running engine calls from Python: with or without the GIL, panics caught at the boundary.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::error::{from_panic, to_py};

/// Runs `f` with the GIL released (it may touch the disk or wait). Engine errors become
/// tidelog exceptions and a panic becomes `InternalError`, never a crash of the interpreter.
pub fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> tidelog::Result<T> + Send,
) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(e)),
        Err(panic) => Err(from_panic(panic)),
    }
}

/// Runs `f` holding the GIL: for calls that cannot block (or are cheaper than a release).
pub fn attached<T>(f: impl FnOnce() -> tidelog::Result<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(e)),
        Err(panic) => Err(from_panic(panic)),
    }
}

/// Runs `f` with or without the GIL.
pub fn run<T: Send>(
    py: Python<'_>,
    release_gil: bool,
    f: impl FnOnce() -> tidelog::Result<T> + Send,
) -> PyResult<T> {
    if release_gil {
        detached(py, f)
    } else {
        attached(f)
    }
}

/// How long one wait runs without the GIL before signals (Ctrl-C) are checked.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Runs `step` without the GIL in slices that end by the `Instant` it is given, checking
/// signals between slices, until it returns a value or `deadline` passes (`None`).
pub fn sliced<T: Send>(
    py: Python<'_>,
    deadline: Option<Instant>,
    mut step: impl FnMut(Instant) -> tidelog::Result<Option<T>> + Send,
) -> PyResult<Option<T>> {
    loop {
        let slice_end = Instant::now() + SIGNAL_CHECK_INTERVAL;
        let slice_end = deadline.map_or(slice_end, |d| d.min(slice_end));
        if let Some(v) = detached(py, || step(slice_end))? {
            return Ok(Some(v));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        py.check_signals()?;
    }
}

/// Longest sleep between two tries of a contended lock.
const LOCK_SLEEP_MAX: Duration = Duration::from_millis(1);

/// Locks `mutex` (a poisoned one too: its holder's panic became an exception). While another
/// thread holds it, maybe for a long wait of its own, sleeps without the GIL and checks
/// signals between tries, so Ctrl-C interrupts the wait for the lock too.
pub fn lock<'a, T>(py: Python<'_>, mutex: &'a Mutex<T>) -> PyResult<MutexGuard<'a, T>> {
    let mut sleep = Duration::from_micros(20);
    let mut checked = Instant::now();
    loop {
        match mutex.try_lock() {
            Ok(guard) => return Ok(guard),
            Err(TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => {}
        }
        py.detach(|| std::thread::sleep(sleep));
        sleep = (sleep * 2).min(LOCK_SLEEP_MAX);
        if checked.elapsed() >= SIGNAL_CHECK_INTERVAL {
            py.check_signals()?;
            checked = Instant::now();
        }
    }
}

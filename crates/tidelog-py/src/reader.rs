//! `Reader`: one topic in offset order, as zero-copy `Record`s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyType;
use tidelog::Wal;

use crate::call::{attached, detached, lock, sliced};
use crate::error::to_py;
use crate::options::{self, deadline, timeout_seconds};
use crate::record::PyRecord;

/// The engine reader behind a `Reader`, shared with its `Wal` so `Wal.close()` can release
/// it (and the files it holds) while Python still references the `Reader`.
#[derive(Debug)]
pub struct ReaderSlot {
    /// `None` once closed.
    reader: Mutex<Option<tidelog::Reader>>,
    /// Set by `close`: a `next` waiting in another thread (holding the lock) gives up.
    closing: AtomicBool,
}

impl ReaderSlot {
    /// Closes the reader: a `next` waiting in another thread raises `ClosedError`.
    pub fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.closing.store(true, Ordering::Release);
        let taken = lock(py, &self.reader)?.take();
        // Dropping it may write its group's cursor: not while holding the GIL.
        py.detach(|| drop(taken));
        Ok(())
    }
}

/// Reads one topic. Calls on one reader from several threads are serialised.
#[pyclass(module = "tidelog._native", name = "Reader", frozen)]
#[derive(Debug)]
pub struct PyReader {
    wal: Arc<Wal>,
    slot: Arc<ReaderSlot>,
    topic: String,
    group: Option<String>,
}

impl PyReader {
    pub fn new(
        wal: Arc<Wal>,
        reader: tidelog::Reader,
        topic: String,
        group: Option<String>,
    ) -> PyReader {
        PyReader {
            wal,
            slot: Arc::new(ReaderSlot {
                reader: Mutex::new(Some(reader)),
                closing: AtomicBool::new(false),
            }),
            topic,
            group,
        }
    }

    /// What `Wal.close()` releases.
    pub fn slot(&self) -> &Arc<ReaderSlot> {
        &self.slot
    }

    /// Locks the reader. If another thread holds it (maybe waiting without the GIL), waits
    /// for it without the GIL, so that thread can take the GIL back and finish, and
    /// interruptibly.
    fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Option<tidelog::Reader>>> {
        lock(py, &self.slot.reader)
    }

    fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut tidelog::Reader) -> PyResult<T>,
    ) -> PyResult<T> {
        let mut guard = self.lock(py)?;
        match guard.as_mut() {
            Some(reader) => f(reader),
            None => Err(to_py(tidelog::Error::Closed)),
        }
    }
}

/// Waits for `reader`'s next record until `until` passes (no GIL held), or `closing` is set
/// (`ClosedError`): the engine's wait sleeps on the topic's word in the shared state file,
/// which an append in any process wakes.
fn wait_until(
    wal: &Wal,
    reader: &mut tidelog::Reader,
    closing: &AtomicBool,
    until: Instant,
) -> tidelog::Result<Option<tidelog::Record>> {
    loop {
        if closing.load(Ordering::Acquire) {
            return Err(tidelog::Error::Closed);
        }
        if let Some(record) = reader.next_record()? {
            return Ok(Some(record));
        }
        if wait_ready(wal, reader, closing, until)?.is_none() {
            return Ok(None);
        }
    }
}

/// Waits until `reader` has a record to read or `until` passes (no GIL held), or `closing`
/// is set (`ClosedError`): `Some` when it has one.
fn wait_ready(
    wal: &Wal,
    reader: &mut tidelog::Reader,
    closing: &AtomicBool,
    until: Instant,
) -> tidelog::Result<Option<()>> {
    loop {
        if closing.load(Ordering::Acquire) {
            return Err(tidelog::Error::Closed);
        }
        if reader.lag() > 0 {
            return Ok(Some(()));
        }
        let Some(left) = until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return Ok(None);
        };
        wal.wait_for_records(reader, left)?;
    }
}

#[pymethods]
impl PyReader {
    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    #[getter]
    fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// "published" (every record whose append returned) or "durable" (only records on disk).
    #[getter]
    fn visibility(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with(py, |r| {
            Ok(match r.visibility() {
                tidelog::Visibility::Durable => "durable",
                tidelog::Visibility::Published => "published",
            })
        })
    }

    /// How long `next(timeout)` watches for a record before it sleeps, in microseconds.
    #[getter]
    fn spin_us(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |r| Ok(r.spin().as_micros() as u64))
    }

    /// The offset the next call returns.
    #[getter]
    fn position(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |r| Ok(r.position()))
    }

    #[getter]
    fn committed(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.with(py, |r| Ok(r.committed()))
    }

    #[getter]
    fn lag(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |r| Ok(r.lag()))
    }

    #[getter]
    fn closed(&self) -> bool {
        self.slot.closing.load(Ordering::Acquire)
    }

    /// The next record, or None when none is available. With `timeout` (seconds), waits up
    /// to that long for one to be appended.
    #[pyo3(signature = (timeout = None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyRecord>> {
        let wait = timeout.map(timeout_seconds).transpose()?;
        self.with(py, |reader| {
            if let Some(record) = attached(|| reader.next_record())? {
                return Ok(Some(PyRecord::new(record)));
            }
            let Some(wait) = wait else {
                // A handle that other processes append to first catches up with what they
                // published (no syscall while they stay in the same extent).
                if self.wal.follows_others()
                    && attached(|| self.wal.wait_for_records(reader, Duration::ZERO))?
                {
                    return Ok(attached(|| reader.next_record())?.map(PyRecord::new));
                }
                return Ok(None);
            };
            let (wal, closing) = (&self.wal, &self.slot.closing);
            let got = sliced(py, deadline(wait), |slice_end| {
                wait_until(wal, reader, closing, slice_end)
            })?;
            Ok(got.map(PyRecord::new))
        })
    }

    /// Up to `max_records` records and about `max_bytes` of values (at least one record if
    /// any is available); an empty list when caught up. With `timeout` (seconds), waits up
    /// to that long for a first record.
    #[pyo3(signature = (max_records = 1000, max_bytes = 16777216, timeout = None))]
    fn next_batch(
        &self,
        py: Python<'_>,
        max_records: usize,
        max_bytes: u64,
        timeout: Option<f64>,
    ) -> PyResult<Vec<PyRecord>> {
        options::batch_records(max_records)?;
        let wait = timeout.map(timeout_seconds).transpose()?;
        self.with(py, |reader| {
            let batch = |reader: &mut tidelog::Reader| {
                if self.wal.follows_others() {
                    self.wal.wait_for_records(reader, Duration::ZERO)?;
                }
                reader.next_batch(max_records, max_bytes)
            };
            let mut records = detached(py, || batch(reader))?;
            if records.is_empty()
                && let Some(wait) = wait
            {
                let (wal, closing) = (&self.wal, &self.slot.closing);
                let ready = sliced(py, deadline(wait), |slice_end| {
                    wait_ready(wal, reader, closing, slice_end)
                })?;
                if ready.is_some() {
                    records = detached(py, || batch(reader))?;
                }
            }
            Ok(records.into_iter().map(PyRecord::new).collect())
        })
    }

    /// Waits up to `timeout` seconds (None: until then) for a record to read, without
    /// reading it: True when one is there.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let wait = timeout.map(timeout_seconds).transpose()?;
        self.with(py, |reader| {
            let (wal, closing) = (&self.wal, &self.slot.closing);
            if self.wal.follows_others() {
                detached(py, || self.wal.wait_for_records(reader, Duration::ZERO))?;
            }
            if reader.lag() > 0 {
                return Ok(true);
            }
            let ready = sliced(py, wait.map(deadline).unwrap_or(None), |slice_end| {
                wait_ready(wal, reader, closing, slice_end)
            })?;
            Ok(ready.is_some())
        })
    }

    fn seek(&self, py: Python<'_>, offset: u64) -> PyResult<()> {
        self.with(py, |reader| detached(py, || reader.seek(offset)))
    }

    /// Moves to the first record at or after `timestamp_us`; returns its offset.
    fn seek_time(&self, py: Python<'_>, timestamp_us: u64) -> PyResult<u64> {
        self.with(py, |reader| detached(py, || reader.seek_time(timestamp_us)))
    }

    /// Persists `offset` (default: `position`) as the group's committed offset.
    #[pyo3(signature = (offset = None))]
    fn commit(&self, py: Python<'_>, offset: Option<u64>) -> PyResult<()> {
        self.with(py, |reader| {
            detached(py, || match offset {
                Some(offset) => reader.commit_offset(offset),
                None => reader.commit(),
            })
        })
    }

    /// Closes the reader; a `next` waiting in another thread raises `ClosedError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.slot.close(py)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyRecord>> {
        self.with(py, |reader| {
            Ok(attached(|| reader.next_record())?.map(PyRecord::new))
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, exc, tb))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        exc: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = (exc_type, exc, tb);
        self.close(py)
    }

    fn __repr__(&self) -> String {
        // Never waits: another thread may hold the reader in a long `next`.
        let shown = |r: &Option<tidelog::Reader>| {
            r.as_ref()
                .map_or_else(|| "closed".to_owned(), |r| r.position().to_string())
        };
        let position = match self.slot.reader.try_lock() {
            Ok(guard) => shown(&guard),
            Err(TryLockError::Poisoned(p)) => shown(&p.into_inner()),
            Err(TryLockError::WouldBlock) => "busy".to_owned(),
        };
        // Python's spelling: None, not Rust's Option.
        let group = self
            .group
            .as_ref()
            .map_or_else(|| "None".to_owned(), |g| format!("{g:?}"));
        format!(
            "Reader(topic={:?}, group={group}, position={position})",
            self.topic
        )
    }
}

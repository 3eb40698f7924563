//! `RingWal`, `RingAppendHandle`, `RingRecovery` and the recovery iterator.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyType};
use tidelog::{Error, RingAppend, RingWal};

use crate::buffer::InputBytes;
use crate::call::{detached, sliced};
use crate::options::{RingOptions, deadline, timeout_seconds, wait_seconds};

/// A write-ahead ring on a block device or preallocated file.
#[pyclass(module = "tidelog._native", name = "RingWal", frozen)]
#[derive(Debug)]
pub struct PyRingWal {
    ring: Arc<RingWal>,
    path: String,
}

impl Drop for PyRingWal {
    fn drop(&mut self) {
        close_if_last(&self.ring);
    }
}

/// Closes `ring` without the GIL when `ring` is its last reference, so dropping it never
/// holds the interpreter while the last blocks are written.
fn close_if_last(ring: &Arc<RingWal>) {
    if Arc::strong_count(ring) == 1 && !ring.is_closed() {
        Python::attach(|py| {
            py.detach(|| {
                let _ = catch_unwind(AssertUnwindSafe(|| ring.close()));
            });
        });
    }
}

#[pymethods]
impl PyRingWal {
    #[new]
    #[pyo3(
        signature = (
            path,
            capacity = None,
            *,
            direct_io = None,
            format = false,
            block_bytes = None,
            block_delay = None,
            seal_when_idle = true,
            inflight_blocks = None,
            max_record_bytes = None,
            io_engine = None,
        ),
        text_signature = "(path, capacity=None, *, direct_io='auto', format=False, \
            block_bytes=None, block_delay=None, seal_when_idle=True, inflight_blocks=None, max_record_bytes=None, io_engine='auto')"
    )]
    #[expect(clippy::too_many_arguments, reason = "mirrors Python keyword options")]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        capacity: Option<u64>,
        direct_io: Option<&Bound<'_, PyAny>>,
        format: bool,
        block_bytes: Option<u64>,
        block_delay: Option<f64>,
        seal_when_idle: bool,
        inflight_blocks: Option<usize>,
        max_record_bytes: Option<u64>,
        io_engine: Option<&str>,
    ) -> PyResult<PyRingWal> {
        let config = RingOptions {
            capacity,
            direct_io,
            format,
            block_bytes,
            block_delay,
            inflight_blocks,
            max_record_bytes,
            io_engine,
        }
        .config()?
        .seal_when_idle(seal_when_idle);
        let ring = detached(py, || RingWal::open(&path, config))?;
        Ok(PyRingWal {
            ring: Arc::new(ring),
            path: path.display().to_string(),
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }
    #[getter]
    fn capacity(&self) -> u64 {
        self.ring.capacity_bytes()
    }
    #[getter]
    fn ring_bytes(&self) -> u64 {
        self.ring.ring_bytes()
    }
    #[getter]
    fn trim_offset(&self) -> u64 {
        self.ring.trim_offset()
    }
    #[getter]
    fn next_offset(&self) -> u64 {
        self.ring.next_offset()
    }
    #[getter]
    fn flushed_offset(&self) -> u64 {
        self.ring.flushed_offset()
    }
    #[getter]
    fn free_bytes(&self) -> u64 {
        self.ring.free_bytes()
    }
    #[getter]
    fn direct_io(&self) -> bool {
        self.ring.direct_io()
    }
    /// How block writes are issued: "io_uring" or "threads".
    #[getter]
    fn io_engine(&self) -> &'static str {
        self.ring.io_engine()
    }
    #[getter]
    fn closed(&self) -> bool {
        self.ring.is_closed()
    }
    #[getter]
    fn recovery(&self) -> PyRingRecovery {
        PyRingRecovery::from(self.ring.recovery_report())
    }

    /// Appends one record. Without `space_timeout` a full ring raises `RingFullError` at
    /// once; with it, waits up to that many seconds for a trim to make room.
    #[pyo3(signature = (data, *, space_timeout = None))]
    fn append(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        space_timeout: Option<f64>,
    ) -> PyResult<PyRingAppendHandle> {
        let wait = space_timeout
            .map(|s| wait_seconds("space_timeout", s))
            .transpose()?;
        let input = InputBytes::extract(data, "data")?;
        let data = input.as_slice();
        let ring = &self.ring;
        // Even a plain append may wait for a block buffer, so the GIL is always released.
        if let Some(wait) = wait {
            let got = sliced(py, deadline(wait), |end| {
                match ring.append_wait(data, end.saturating_duration_since(Instant::now())) {
                    Ok(append) => Ok(Some(append)),
                    Err(Error::RingFull { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            })?;
            if let Some(append) = got {
                return Ok(PyRingAppendHandle { append });
            }
        }
        // No wait asked for, or it timed out: one last try, which raises `RingFullError`
        // with the sizes as they are now.
        let append = detached(py, || ring.append(data))?;
        Ok(PyRingAppendHandle { append })
    }

    /// Writes the open block now and waits until everything appended is durable; returns
    /// the flushed offset.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        let ring = &self.ring;
        detached(py, || ring.flush())
    }

    /// Discards every record below `offset` (which must not pass `flushed_offset`).
    fn trim(&self, py: Python<'_>, offset: u64) -> PyResult<()> {
        let ring = &self.ring;
        detached(py, || ring.trim(offset))
    }

    /// Flushes, then trims everything; returns the flushed offset.
    fn reset(&self, py: Python<'_>) -> PyResult<u64> {
        let ring = &self.ring;
        detached(py, || ring.reset())
    }

    /// An iterator of `(offset, value)` over every live record, up to the flushed offset
    /// as of this call.
    fn recover(&self, py: Python<'_>) -> PyResult<PyRingRecoverIter> {
        let ring = &self.ring;
        let iter = detached(py, || ring.recover())?;
        Ok(PyRingRecoverIter {
            ring: Arc::clone(&self.ring),
            iter: Mutex::new(Some(iter)),
        })
    }

    /// Writes every appended record and records a clean shutdown. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let ring = &self.ring;
        detached(py, || ring.close())
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
        // Closes whether or not the block raised; the block's exception propagates.
        let _ = (exc_type, exc, tb);
        self.close(py)
    }

    fn __repr__(&self) -> String {
        let ring = &self.ring;
        format!(
            "RingWal(path={:?}, capacity={}, trim_offset={}, next_offset={}, \
             flushed_offset={}, direct_io={}, closed={})",
            self.path,
            ring.capacity_bytes(),
            ring.trim_offset(),
            ring.next_offset(),
            ring.flushed_offset(),
            py_bool(ring.direct_io()),
            py_bool(ring.is_closed()),
        )
    }
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// An appended record: its offsets now, its durability later.
#[pyclass(module = "tidelog._native", name = "RingAppendHandle", frozen)]
#[derive(Debug)]
pub struct PyRingAppendHandle {
    append: RingAppend,
}

#[pymethods]
impl PyRingAppendHandle {
    #[getter]
    fn offset(&self) -> u64 {
        self.append.offset
    }
    #[getter]
    fn end_offset(&self) -> u64 {
        self.append.end_offset()
    }
    #[getter]
    fn done(&self) -> bool {
        self.append.is_durable()
    }

    /// Waits until the record is durable and returns the flushed offset; None if `timeout`
    /// seconds passed first.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<u64>> {
        let deadline = match timeout {
            Some(s) => deadline(timeout_seconds(s)?),
            None => None,
        };
        let append = &self.append;
        sliced(py, deadline, |end| {
            append.wait_timeout(end.saturating_duration_since(Instant::now()))
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "RingAppendHandle(offset={}, end_offset={}, done={})",
            self.append.offset,
            self.append.end_offset(),
            py_bool(self.append.is_durable())
        )
    }
}

/// What the scan at open found.
#[pyclass(module = "tidelog._native", name = "RingRecovery", frozen, get_all)]
#[derive(Debug, Clone)]
pub struct PyRingRecovery {
    records: u64,
    record_bytes: u64,
    blocks: u64,
    start_offset: u64,
    end_offset: u64,
    stop_reason: String,
    blocks_past_end: u64,
    clean_shutdown: bool,
    clean_end_offset: Option<u64>,
}

impl From<&tidelog::RingRecovery> for PyRingRecovery {
    fn from(r: &tidelog::RingRecovery) -> Self {
        PyRingRecovery {
            records: r.records,
            record_bytes: r.record_bytes,
            blocks: r.blocks,
            start_offset: r.start_offset,
            end_offset: r.end_offset,
            stop_reason: r.stop_reason.clone(),
            blocks_past_end: r.blocks_past_end,
            clean_shutdown: r.clean_shutdown,
            clean_end_offset: r.clean_end_offset,
        }
    }
}

#[pymethods]
impl PyRingRecovery {
    fn __repr__(&self) -> String {
        format!(
            "RingRecovery(records={}, record_bytes={}, blocks={}, start_offset={}, \
             end_offset={}, stop_reason={:?}, blocks_past_end={}, clean_shutdown={}, \
             clean_end_offset={})",
            self.records,
            self.record_bytes,
            self.blocks,
            self.start_offset,
            self.end_offset,
            self.stop_reason,
            self.blocks_past_end,
            py_bool(self.clean_shutdown),
            self.clean_end_offset
                .map_or_else(|| "None".to_owned(), |o| o.to_string())
        )
    }
}

/// `(offset, value)` of every live record, read from the device.
#[pyclass(module = "tidelog._native", name = "RingRecoverIter", frozen)]
#[derive(Debug)]
pub struct PyRingRecoverIter {
    /// Keeps the ring open while the iterator lives.
    ring: Arc<RingWal>,
    /// `None` once exhausted or after an error.
    iter: Mutex<Option<tidelog::ring::RecoverIter>>,
}

impl Drop for PyRingRecoverIter {
    fn drop(&mut self) {
        close_if_last(&self.ring);
    }
}

#[pymethods]
impl PyRingRecoverIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<(u64, Bound<'py, PyBytes>)>> {
        let mut guard = self
            .iter
            .lock_py_attached(py)
            .unwrap_or_else(|p| p.into_inner());
        let Some(iter) = guard.as_mut() else {
            return Ok(None);
        };
        let item = detached(py, || iter.next().transpose());
        match item {
            Ok(Some((offset, value))) => Ok(Some((offset, PyBytes::new(py, &value)))),
            Ok(None) => {
                *guard = None;
                Ok(None)
            }
            Err(e) => {
                *guard = None;
                Err(e)
            }
        }
    }
}

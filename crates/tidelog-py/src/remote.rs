//! `tidelog.open_remote`: a read-only handle on a tier's bucket alone (`RemoteLog`), its
//! readers (`RemoteReader`) and the records they read (`RemoteRecord`, owned bytes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyType};
use tidelog::{ReaderOptions, RemoteLog, RemoteReader, RemoteRecord, StartPosition};

use crate::call::{detached, lock, sliced};
use crate::error::to_py;
use crate::options::{self, deadline, timeout_seconds};
use crate::wal::start_position;

/// Opens the bucket at `url` read-only, with no local directory. See the stubs.
#[pyfunction]
#[pyo3(signature = (url, *, storage_options = None))]
pub fn open_remote(
    py: Python<'_>,
    url: String,
    storage_options: Option<HashMap<String, Bound<'_, PyAny>>>,
) -> PyResult<PyRemoteLog> {
    let config = options::tier_config(url, storage_options, false)?;
    let log = detached(py, || RemoteLog::open(&config))?;
    Ok(PyRemoteLog { log: Arc::new(log) })
}

/// A read-only handle on the records a tier's bucket holds.
#[pyclass(name = "RemoteLog", module = "tidelog._native", frozen)]
#[derive(Debug)]
pub struct PyRemoteLog {
    log: Arc<RemoteLog>,
}

#[pymethods]
impl PyRemoteLog {
    /// The manifest version this handle reads.
    #[getter]
    fn version(&self) -> u64 {
        self.log.version()
    }

    fn topics(&self) -> Vec<String> {
        self.log.topics()
    }

    /// `{"name", "first_offset", "next_offset", "objects", "bytes"}`.
    fn topic_info<'py>(&self, py: Python<'py>, topic: &str) -> PyResult<Bound<'py, PyDict>> {
        let info = detached(py, || self.log.topic_info(topic))?;
        let dict = PyDict::new(py);
        dict.set_item("name", info.name)?;
        dict.set_item("first_offset", info.first_offset)?;
        dict.set_item("next_offset", info.next_offset)?;
        dict.set_item("objects", info.objects)?;
        dict.set_item("bytes", info.bytes)?;
        Ok(dict)
    }

    fn read(&self, py: Python<'_>, topic: &str, offset: u64) -> PyResult<PyRemoteRecord> {
        let record = detached(py, || self.log.read(topic, offset))?;
        Ok(PyRemoteRecord { record })
    }

    #[pyo3(signature = (topic, start, end = None, max_records = None))]
    fn read_range(
        &self,
        py: Python<'_>,
        topic: &str,
        start: u64,
        end: Option<u64>,
        max_records: Option<usize>,
    ) -> PyResult<Vec<PyRemoteRecord>> {
        let records_read = detached(py, || {
            self.log.read_range(
                topic,
                start,
                end.unwrap_or(u64::MAX),
                max_records.unwrap_or(usize::MAX),
            )
        })?;
        Ok(records(records_read))
    }

    /// `topic`'s records from `start` (default: the earliest) up to `end` (exclusive;
    /// default: what the manifest holds) as an Arrow C stream.
    #[pyo3(signature = (topic, start = None, end = None, *, batch_records = 65536))]
    fn scan(
        &self,
        py: Python<'_>,
        topic: &str,
        start: Option<u64>,
        end: Option<u64>,
        batch_records: usize,
    ) -> PyResult<crate::stream::PyArrowStream> {
        let handle = crate::stream::Handle::Remote(Arc::clone(&self.log));
        crate::stream::PyArrowStream::new(py, handle, topic, start, end, batch_records)
    }

    /// A `pyarrow.RecordBatch` of offsets `[start, end)` (end capped at what the bucket
    /// holds): columns topic, offset, timestamp, key, value.
    #[pyo3(signature = (topic, start, end = None, max_records = None))]
    fn read_arrow<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        start: u64,
        end: Option<u64>,
        max_records: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::arrow::read_remote(py, &self.log, topic, start, end, max_records)
    }

    /// A reader of `topic` from `start`; a group is refused (a bucket has no home for its
    /// cursor yet).
    #[pyo3(
        signature = (topic, group = None, *, start = None, verify_checksums = true),
        text_signature = "(self, topic, group=None, *, start='earliest', verify_checksums=True)"
    )]
    fn reader(
        &self,
        py: Python<'_>,
        topic: &str,
        group: Option<String>,
        start: Option<&Bound<'_, PyAny>>,
        verify_checksums: bool,
    ) -> PyResult<PyRemoteReader> {
        let start = match start {
            Some(s) => start_position(s)?,
            None => StartPosition::Earliest,
        };
        let options = ReaderOptions {
            group,
            start,
            skip_checksums: !verify_checksums,
            ..ReaderOptions::default()
        };
        let reader = detached(py, || self.log.reader_with(topic, &options))?;
        Ok(PyRemoteReader {
            topic: topic.to_owned(),
            reader: Mutex::new(Some(reader)),
            closing: AtomicBool::new(false),
        })
    }

    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || self.log.refresh())
    }

    fn __repr__(&self) -> String {
        format!("RemoteLog(version={})", self.log.version())
    }
}

/// Reads one topic of a bucket in offset order. Calls from several threads are serialised.
#[pyclass(name = "RemoteReader", module = "tidelog._native", frozen)]
#[derive(Debug)]
pub struct PyRemoteReader {
    topic: String,
    /// `None` once closed.
    reader: Mutex<Option<RemoteReader>>,
    /// Set by `close`: a `next` waiting in another thread gives up.
    closing: AtomicBool,
}

impl PyRemoteReader {
    fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut RemoteReader) -> PyResult<T>,
    ) -> PyResult<T> {
        let mut guard = lock(py, &self.reader)?;
        match guard.as_mut() {
            Some(reader) => f(reader),
            None => Err(to_py(tidelog::Error::Closed)),
        }
    }
}

fn records(records: Vec<RemoteRecord>) -> Vec<PyRemoteRecord> {
    records
        .into_iter()
        .map(|record| PyRemoteRecord { record })
        .collect()
}

#[pymethods]
impl PyRemoteReader {
    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    /// The offset the next record read has.
    #[getter]
    fn position(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |r| Ok(r.position()))
    }

    /// Records the manifest last read holds at or after the position.
    #[getter]
    fn lag(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |r| r.lag().map_err(to_py))
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// The next record, or None at the end of what the manifest holds. With `timeout`
    /// (seconds), reads the manifest again every 200 ms until a record arrives or it passes.
    #[pyo3(signature = (timeout = None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyRemoteRecord>> {
        let wait = timeout.map(timeout_seconds).transpose()?;
        self.with(py, |reader| {
            let Some(wait) = wait else {
                return detached(py, || reader.next())
                    .map(|r| r.map(|record| PyRemoteRecord { record }));
            };
            let closing = &self.closing;
            let got = sliced(py, deadline(wait), |slice_end| {
                if closing.load(Ordering::Acquire) {
                    return Err(tidelog::Error::Closed);
                }
                if let Some(record) = reader.next()? {
                    return Ok(Some(record));
                }
                if reader.wait_for_records(slice_end)? {
                    return reader.next();
                }
                Ok(None)
            })?;
            Ok(got.map(|record| PyRemoteRecord { record }))
        })
    }

    /// Up to `max_records` records and about `max_bytes` of values (at least one record if
    /// any is held); an empty list at the end.
    #[pyo3(signature = (max_records = 1000, max_bytes = 16777216))]
    fn next_batch(
        &self,
        py: Python<'_>,
        max_records: usize,
        max_bytes: u64,
    ) -> PyResult<Vec<PyRemoteRecord>> {
        options::batch_records(max_records)?;
        self.with(py, |reader| {
            detached(py, || reader.next_batch(max_records, max_bytes)).map(records)
        })
    }

    /// The next records before `end`, at most `max_records`, as a `pyarrow.RecordBatch`
    /// (empty at the end); the position moves past them.
    #[pyo3(signature = (max_records = None, end = None))]
    fn read_arrow<'py>(
        &self,
        py: Python<'py>,
        max_records: Option<u64>,
        end: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.with(py, |reader| {
            crate::arrow::read_remote_next(py, reader, end, max_records)
        })
    }

    fn seek(&self, py: Python<'_>, offset: u64) -> PyResult<()> {
        self.with(py, |reader| detached(py, || reader.seek(offset)))
    }

    /// Moves to the first record at or after `timestamp_us`; returns the new position.
    fn seek_time(&self, py: Python<'_>, timestamp_us: u64) -> PyResult<u64> {
        self.with(py, |reader| detached(py, || reader.seek_time(timestamp_us)))
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.closing.store(true, Ordering::Release);
        let taken = lock(py, &self.reader)?.take();
        // Its reads under way are cancelled as it drops.
        py.detach(|| drop(taken));
        Ok(())
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyRemoteRecord>> {
        self.next(py, None)
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

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.with(py, |r| Ok(r.position())) {
            Ok(position) => format!("RemoteReader(topic={:?}, position={position})", self.topic),
            Err(_) => format!("RemoteReader(topic={:?}, closed)", self.topic),
        }
    }
}

/// A record read from a bucket: its bytes are its own.
#[pyclass(name = "RemoteRecord", module = "tidelog._native", frozen)]
#[derive(Debug)]
pub struct PyRemoteRecord {
    record: RemoteRecord,
}

#[pymethods]
impl PyRemoteRecord {
    #[getter]
    fn offset(&self) -> u64 {
        self.record.offset
    }

    /// Microseconds since the Unix epoch.
    #[getter]
    fn timestamp(&self) -> u64 {
        self.record.timestamp_us
    }

    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.record.key.as_deref().map(|k| PyBytes::new(py, k))
    }

    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.record.value)
    }

    /// The headers as a list of `(key, value)` tuples in order; empty when there are none.
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyList>> {
        let list = pyo3::types::PyList::empty(py);
        for (key, value) in &self.record.headers {
            list.append((key, value.as_deref().map(|v| PyBytes::new(py, v))))?;
        }
        Ok(list)
    }

    fn __repr__(&self) -> String {
        format!(
            "RemoteRecord(offset={}, timestamp={}, {} bytes)",
            self.record.offset,
            self.record.timestamp_us,
            self.record.value.len()
        )
    }
}

//! `tidelog.open_remote`: a read-only handle on a tier's bucket alone (`RemoteLog`), and the
//! records it reads (`RemoteRecord`, owned bytes).

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tidelog::{RemoteLog, RemoteRecord};

use crate::call::detached;
use crate::options;

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
    Ok(PyRemoteLog { log })
}

/// A read-only handle on the records a tier's bucket holds.
#[pyclass(name = "RemoteLog", module = "tidelog._native", frozen)]
#[derive(Debug)]
pub struct PyRemoteLog {
    log: RemoteLog,
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
        let records = detached(py, || {
            self.log.read_range(
                topic,
                start,
                end.unwrap_or(u64::MAX),
                max_records.unwrap_or(usize::MAX),
            )
        })?;
        Ok(records
            .into_iter()
            .map(|record| PyRemoteRecord { record })
            .collect())
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

    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || self.log.refresh())
    }

    fn __repr__(&self) -> String {
        format!("RemoteLog(version={})", self.log.version())
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

    fn __repr__(&self) -> String {
        format!(
            "RemoteRecord(offset={}, timestamp={}, {} bytes)",
            self.record.offset,
            self.record.timestamp_us,
            self.record.value.len()
        )
    }
}

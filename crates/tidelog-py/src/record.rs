//! `Record`: one record whose value is a zero-copy, read-only view of the mapped file.

use std::ffi::c_int;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView};

use crate::buffer::export_readonly;

/// A record. It owns a reference to its data file's mapping (`tidelog::Record`), so views of
/// it stay valid after the reader moves on, the Wal closes or the file is deleted.
#[pyclass(module = "tidelog._native", name = "Record", frozen)]
#[derive(Debug)]
pub struct PyRecord {
    record: tidelog::Record,
}

impl PyRecord {
    pub fn new(record: tidelog::Record) -> PyRecord {
        PyRecord { record }
    }
}

#[pymethods]
impl PyRecord {
    #[getter]
    fn offset(&self) -> u64 {
        self.record.offset()
    }

    /// Microseconds since the Unix epoch.
    #[getter]
    fn timestamp(&self) -> u64 {
        self.record.timestamp_us()
    }

    /// The key, copied (keys are small); None if the record has none.
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.record.key().map(|k| PyBytes::new(py, k))
    }

    /// The headers as a list of `(key, value)` tuples in order; empty when there are none.
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyList>> {
        crate::headers::to_list(py, self.record.headers())
    }

    /// The value as a read-only memoryview over the mapped file (no copy).
    #[getter]
    fn value<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(slf.as_any())
    }

    fn __len__(&self) -> usize {
        self.record.value().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Record(offset={}, timestamp={}, key={}, value=<{} bytes>)",
            self.record.offset(),
            self.record.timestamp_us(),
            match self.record.key() {
                Some(k) => format!("<{} bytes>", k.len()),
                None => "None".to_owned(),
            },
            self.record.value().len()
        )
    }

    /// # Safety
    /// Called by CPython's buffer protocol with a valid `view`.
    #[expect(
        unsafe_code,
        reason = "the buffer protocol slot is an unsafe C callback"
    )]
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let value = slf.get().record.value();
        let (data, len) = (value.as_ptr(), value.len());
        // SAFETY: the value lies in a mapping that `tidelog::Record` keeps alive and that no
        // one writes again (records are immutable once published, data files are never
        // truncated or reused while mapped), or in its extent's image (a read-only handle's
        // copy of records repaired from a commit copy, never changed once set), or in an
        // object read from the tier's bucket, whose immutable bytes the record owns; the
        // view owns a reference to `slf`, which owns the `tidelog::Record`.
        unsafe { export_readonly(view, flags, data, len, slf.into_any()) }
    }
}

//! `StagedWriter` and the staged-job functions: records written without the directory's
//! lock (Spark tasks) and published exactly once by a commit (the Spark driver).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::sync::MutexExt;

use crate::arrow;
use crate::call::{detached, sliced};
use crate::options::{self, deadline, timeout_seconds};
use crate::wal::Parts;

/// One part of a staged job, written by one task attempt.
#[pyclass(module = "tidelog._native", name = "StagedWriter", frozen)]
#[derive(Debug)]
pub struct PyStagedWriter {
    /// `None` once finished.
    writer: Mutex<Option<tidelog::StagedWriter>>,
    part: String,
}

impl PyStagedWriter {
    /// Runs `f` on the open writer, under its lock; a finished writer is `ClosedError`.
    fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut tidelog::StagedWriter) -> PyResult<T>,
    ) -> PyResult<T> {
        let mut guard = self.writer.lock_py_attached(py).map_err(|_| {
            crate::error::to_py(tidelog::Error::InvalidArgument {
                name: "part",
                reason: "the staged writer is poisoned".to_owned(),
            })
        })?;
        match guard.as_mut() {
            Some(writer) => f(writer),
            None => Err(crate::error::to_py(tidelog::Error::Closed)),
        }
    }
}

#[pymethods]
impl PyStagedWriter {
    #[new]
    #[pyo3(signature = (path, job, part, *, record_format = 2))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        job: &str,
        part: &str,
        record_format: i64,
    ) -> PyResult<Self> {
        let record_format = options::record_format(record_format)?;
        let writer = detached(py, || {
            tidelog::StagedWriter::create(&path, job, part)?.record_format(record_format)
        })?;
        Ok(PyStagedWriter {
            writer: Mutex::new(Some(writer)),
            part: part.to_owned(),
        })
    }

    #[getter]
    fn part(&self) -> &str {
        &self.part
    }

    /// Records staged so far.
    #[getter]
    fn records(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |w| Ok(w.records()))
    }

    #[pyo3(signature = (topic, value, *, key = None, timestamp = None, headers = None))]
    fn append(
        &self,
        py: Python<'_>,
        topic: &str,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        timestamp: Option<u64>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let parts = Parts::extract(value, key, timestamp, headers)?;
        self.with(py, |w| {
            detached(py, || {
                w.append(topic, std::slice::from_ref(&parts.append()))
            })
        })
    }

    /// Stages a pyarrow binary/string array, or a batch/table with a `value` column and
    /// optional `key` and `timestamp` columns, for `topic`.
    fn append_arrow(&self, py: Python<'_>, topic: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.with(py, |w| {
            arrow::with_records(py, data, |records| w.append(topic, records))
        })
    }

    /// Makes the part durable and complete; returns its record count. Name the part in the
    /// job's commit.
    fn finish(&self, py: Python<'_>) -> PyResult<u64> {
        let taken = self
            .writer
            .lock_py_attached(py)
            .map(|mut g| g.take())
            .unwrap_or(None);
        let Some(writer) = taken else {
            return Err(crate::error::to_py(tidelog::Error::Closed));
        };
        detached(py, || writer.finish()).map(|p| p.records)
    }

    fn __repr__(&self) -> String {
        format!("StagedWriter(part={:?})", self.part)
    }
}

/// Records the commit of `job` (the parts to publish, in order; for a streaming sink, its
/// name and micro-batch id); the directory's writer publishes it.
#[pyfunction]
#[pyo3(signature = (path, job, parts, *, sink = None, batch = None))]
pub fn stage_commit(
    py: Python<'_>,
    path: PathBuf,
    job: &str,
    parts: Vec<String>,
    sink: Option<String>,
    batch: Option<u64>,
) -> PyResult<()> {
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    match sink_batch(sink, batch)? {
        None => detached(py, || tidelog::stage::commit(&path, job, &parts)),
        Some((sink, batch)) => detached(py, || {
            tidelog::stage::commit_for_sink(&path, job, &parts, &sink, batch)
        }),
    }
}

/// The last micro-batch id of streaming sink `sink` published in `path`, or None.
#[pyfunction]
pub fn stage_sink_batch(py: Python<'_>, path: PathBuf, sink: &str) -> PyResult<Option<u64>> {
    detached(py, || tidelog::stage::sink_batch(&path, sink))
}

/// Waits up to `timeout` seconds until committed `job` is published (by the process that
/// holds the directory); raises `TimeoutError` after that, and `InvalidArgumentError` with
/// the reason for a job set aside as one that cannot be published, or for a job with no
/// commit and no record of its publish (aborted, never committed). With `sink` and `batch`
/// (a streaming sink's micro-batch, as committed) the sink's ledger at or past `batch` is a
/// publish too (a replayed micro-batch).
#[pyfunction]
#[pyo3(signature = (path, job, timeout = 60.0, *, sink = None, batch = None))]
pub fn stage_wait(
    py: Python<'_>,
    path: PathBuf,
    job: &str,
    timeout: f64,
    sink: Option<String>,
    batch: Option<u64>,
) -> PyResult<()> {
    let deadline = deadline(timeout_seconds(timeout)?);
    let sink = sink_batch(sink, batch)?;
    let wait = |left: Duration| match &sink {
        None => tidelog::stage::wait_published(&path, job, left),
        Some((sink, batch)) => {
            tidelog::stage::wait_published_for_sink(&path, job, sink, *batch, left)
        }
    };
    let done = sliced(py, deadline, |slice_end| {
        match wait(slice_end.saturating_duration_since(Instant::now())) {
            Ok(()) => Ok(Some(())),
            Err(tidelog::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::TimedOut =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    })?;
    done.ok_or_else(|| {
        pyo3::exceptions::PyTimeoutError::new_err(format!(
            "job {job:?} was not published within {timeout} s: does the process holding the \
             directory run?"
        ))
    })
}

/// A streaming sink's micro-batch, when both are given; a sink without its batch, or a
/// batch without its sink, is `InvalidArgumentError`.
fn sink_batch(sink: Option<String>, batch: Option<u64>) -> PyResult<Option<(String, u64)>> {
    match (sink, batch) {
        (None, None) => Ok(None),
        (Some(sink), Some(batch)) => Ok(Some((sink, batch))),
        _ => Err(crate::error::to_py(tidelog::Error::InvalidArgument {
            name: "sink",
            reason: "sink and batch go together".to_owned(),
        })),
    }
}

/// Discards an uncommitted (or committed but not yet publishing, or set aside) job.
#[pyfunction]
pub fn stage_abort(py: Python<'_>, path: PathBuf, job: &str) -> PyResult<()> {
    detached(py, || tidelog::stage::abort(&path, job))
}

/// Puts part `part` of `job`, staged and finished in the directory `path`, into the bucket
/// at `url`: segments first, its manifest last.
#[pyfunction]
#[pyo3(signature = (path, job, part, url, *, storage_options = None))]
pub fn bucket_stage_upload(
    py: Python<'_>,
    path: PathBuf,
    job: &str,
    part: &str,
    url: String,
    storage_options: Option<HashMap<String, Bound<'_, PyAny>>>,
) -> PyResult<()> {
    let config = options::tier_config(url, storage_options, false)?;
    detached(py, || {
        tidelog::tier_stage::upload_part(&config, &path, job, part)
    })
}

/// Commits `job` in the bucket at `url`: True when this commit is the job's, False when
/// another commit of the same sink micro-batch came first (a replay: its own parts are for
/// `bucket_stage_abort(..., parts=...)`).
#[pyfunction]
#[pyo3(signature = (url, job, parts, *, sink = None, batch = None, storage_options = None))]
pub fn bucket_stage_commit(
    py: Python<'_>,
    url: String,
    job: &str,
    parts: Vec<String>,
    sink: Option<String>,
    batch: Option<u64>,
    storage_options: Option<HashMap<String, Bound<'_, PyAny>>>,
) -> PyResult<bool> {
    let config = options::tier_config(url, storage_options, false)?;
    let sink = sink_batch(sink, batch)?;
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let done = detached(py, || {
        let sink = sink.as_ref().map(|(s, b)| (s.as_str(), *b));
        tidelog::tier_stage::commit(&config, job, &parts, sink)
    })?;
    Ok(done == tidelog::tier_stage::Commit::Recorded)
}

/// Waits up to `timeout` seconds until the producer has published committed `job` of the
/// bucket at `url`: the offsets it got, `{topic: (start, end)}`. `TierTimeoutError` says
/// what the bucket shows of its producer; `InvalidArgumentError` gives the reason of a job
/// set aside.
#[pyfunction]
#[pyo3(signature = (url, job, timeout = 60.0, *, storage_options = None))]
pub fn bucket_stage_wait(
    py: Python<'_>,
    url: String,
    job: &str,
    timeout: f64,
    storage_options: Option<HashMap<String, Bound<'_, PyAny>>>,
) -> PyResult<HashMap<String, (u64, u64)>> {
    let config = options::tier_config(url, storage_options, false)?;
    let deadline = deadline(timeout_seconds(timeout)?);
    let waited = |left: Duration| match tidelog::tier_stage::wait_published(&config, job, left) {
        Ok(ranges) => Ok(Some(
            ranges
                .into_iter()
                .map(|(topic, r)| (topic, (r.start, r.end)))
                .collect(),
        )),
        Err(tidelog::Error::TierTimeout { .. }) => Ok(None),
        Err(e) => Err(e),
    };
    let done = sliced(py, deadline, |slice_end| {
        waited(slice_end.saturating_duration_since(Instant::now()))
    })?;
    match done {
        Some(ranges) => Ok(ranges),
        // Once more with no time left: its error says what the bucket shows.
        None => detached(py, || {
            tidelog::tier_stage::wait_published(&config, job, Duration::ZERO).map(|ranges| {
                ranges
                    .into_iter()
                    .map(|(topic, r)| (topic, (r.start, r.end)))
                    .collect()
            })
        }),
    }
}

/// Discards uncommitted `job` from the bucket at `url` (or, with `parts`, only those parts:
/// a replayed micro-batch's own).
#[pyfunction]
#[pyo3(signature = (url, job, parts = None, *, storage_options = None))]
pub fn bucket_stage_abort(
    py: Python<'_>,
    url: String,
    job: &str,
    parts: Option<Vec<String>>,
    storage_options: Option<HashMap<String, Bound<'_, PyAny>>>,
) -> PyResult<()> {
    let config = options::tier_config(url, storage_options, false)?;
    detached(py, || match &parts {
        None => tidelog::tier_stage::abort(&config, job),
        Some(parts) => {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            tidelog::tier_stage::abort_parts(&config, job, &parts)
        }
    })
}

/// The last micro-batch of streaming sink `sink` the producer of the bucket at `url`
/// published, if any.
#[pyfunction]
#[pyo3(signature = (url, sink, *, storage_options = None))]
pub fn bucket_stage_sink_batch(
    py: Python<'_>,
    url: String,
    sink: &str,
    storage_options: Option<HashMap<String, Bound<'_, PyAny>>>,
) -> PyResult<Option<u64>> {
    let config = options::tier_config(url, storage_options, false)?;
    detached(py, || tidelog::tier_stage::sink_batch(&config, sink))
}

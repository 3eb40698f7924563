//! `Wal`, `Writer`, `AppendHandle` and `TopicInfo`.

use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyRange, PyType};
use tidelog::{Append, CommitMode, Durability, ReaderOptions, StartPosition, Visibility, Wal};

use crate::arrow;
use crate::buffer::InputBytes;
use crate::call::{attached, detached, run, sliced};
use crate::error::to_py;
use crate::options::{deadline, durability, durability_name, timeout_seconds};
use crate::reader::{PyReader, ReaderSlot};
use crate::record::PyRecord;

/// Appends at most this large are copied with the GIL held: releasing and retaking it costs
/// more than the copy (measured in benches/python). Larger ones release it.
const GIL_HELD_APPEND_BYTES_MAX: usize = 64 * 1024;

/// An open log directory.
#[pyclass(module = "tidelog._native", name = "Wal", frozen)]
#[derive(Debug)]
pub struct PyWal {
    wal: Arc<Wal>,
    path: String,
    children: Children,
}

impl PyWal {
    pub fn new(wal: Wal, path: String) -> PyWal {
        PyWal {
            wal: Arc::new(wal),
            path,
            children: Children::default(),
        }
    }
}

/// The engine writer behind a `Writer`: `None` once its `Wal` closed. Locked only to clone
/// the writer out, never across an append.
type WriterSlot = RwLock<Option<Arc<tidelog::Writer>>>;

/// The readers and writers a `Wal` handed out, so `close()` releases the files they hold
/// even while Python still references them.
#[derive(Debug, Default)]
struct Children {
    readers: Mutex<Vec<Weak<ReaderSlot>>>,
    writers: Mutex<Vec<Weak<WriterSlot>>>,
}

/// Adds `item` to `list`, dropping the entries of dead children first when the list would
/// grow (amortised O(1)).
fn register<T>(list: &Mutex<Vec<Weak<T>>>, item: &Arc<T>) {
    let mut list = list.lock().unwrap_or_else(PoisonError::into_inner);
    if list.len() == list.capacity() {
        list.retain(|w| w.strong_count() > 0);
    }
    list.push(Arc::downgrade(item));
}

impl Children {
    /// Closes every live reader and writer.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let readers =
            std::mem::take(&mut *self.readers.lock().unwrap_or_else(PoisonError::into_inner));
        for reader in readers.iter().filter_map(Weak::upgrade) {
            reader.close(py)?;
        }
        let writers =
            std::mem::take(&mut *self.writers.lock().unwrap_or_else(PoisonError::into_inner));
        for writer in writers.iter().filter_map(Weak::upgrade) {
            let taken = writer
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            // An append still running holds its own clone; this one goes without the GIL.
            py.detach(|| drop(taken));
        }
        Ok(())
    }
}

/// Whether an append of `bytes` with these options must release the GIL: it may wait for a
/// sync or for space, or copy enough to matter.
fn releases_gil(durability: Durability, space_wait: bool, bytes: usize) -> bool {
    durability == Durability::Always || space_wait || bytes > GIL_HELD_APPEND_BYTES_MAX
}

/// A record's parts borrowed from Python for one append.
pub(crate) struct Parts<'a> {
    value: InputBytes<'a>,
    key: Option<InputBytes<'a>>,
    timestamp_us: Option<u64>,
    headers: tidelog::Headers,
}

impl<'a> Parts<'a> {
    pub(crate) fn extract(
        value: &'a Bound<'_, PyAny>,
        key: Option<&'a Bound<'_, PyAny>>,
        timestamp_us: Option<u64>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Parts<'a>> {
        Ok(Parts {
            value: InputBytes::extract(value, "value")?,
            key: key.map(|k| InputBytes::extract(k, "key")).transpose()?,
            timestamp_us,
            headers: crate::headers::extract(headers)?,
        })
    }

    pub(crate) fn append(&self) -> Append<'_> {
        Append {
            key: self.key.as_ref().map(InputBytes::as_slice),
            value: self.value.as_slice(),
            timestamp_us: self.timestamp_us,
            headers: self.headers.block(),
        }
    }

    fn len(&self) -> usize {
        self.append().payload_len() as usize
    }
}

/// Borrows every item of `values` (a list fast, any iterable otherwise).
fn extract_values<'a>(values: &'a [Bound<'a, PyAny>]) -> PyResult<Vec<InputBytes<'a>>> {
    values
        .iter()
        .map(|v| InputBytes::extract(v, "value"))
        .collect()
}

fn collect_items<'py>(values: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = values.cast::<PyList>() {
        return Ok(list.iter().collect());
    }
    if values.is_instance_of::<pyo3::types::PyBytes>()
        || values.is_instance_of::<pyo3::types::PyString>()
    {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "values must be an iterable of bytes-like objects, not a single bytes or str",
        ));
    }
    values.try_iter()?.collect()
}

pub fn range<'py>(py: Python<'py>, offsets: std::ops::Range<u64>) -> PyResult<Bound<'py, PyRange>> {
    let start = isize::try_from(offsets.start)?;
    let end = isize::try_from(offsets.end)?;
    PyRange::new(py, start, end)
}

pub(crate) fn start_position(start: &Bound<'_, PyAny>) -> PyResult<StartPosition> {
    if let Ok(name) = start.extract::<&str>() {
        return match name {
            "committed" => Ok(StartPosition::Committed),
            "earliest" => Ok(StartPosition::Earliest),
            "latest" => Ok(StartPosition::Latest),
            _ => Err(to_py(tidelog::Error::InvalidArgument {
                name: "start",
                reason: format!(
                    "{name:?} is not \"committed\", \"earliest\", \"latest\" or an offset"
                ),
            })),
        };
    }
    match start.extract::<u64>() {
        Ok(offset) => Ok(StartPosition::Offset(offset)),
        Err(_) => Err(to_py(tidelog::Error::InvalidArgument {
            name: "start",
            reason: "must be \"committed\", \"earliest\", \"latest\" or a non-negative offset"
                .to_owned(),
        })),
    }
}

/// Records an "auto" reader returns between two commits when `auto_commit_every` is not
/// given.
const AUTO_COMMIT_EVERY_DEFAULT: u64 = 1000;

/// The commit mode a reader's `commit` and `auto_commit_every` name: "explicit" (only
/// `commit()` persists), "auto" (at least once: every N records the next read commits what
/// came before) or "strict" (at most once: each record's successor committed before it is
/// returned).
fn commit_mode(name: &str, every: Option<u64>) -> PyResult<CommitMode> {
    let invalid = |name: &'static str, reason: String| {
        Err(to_py(tidelog::Error::InvalidArgument { name, reason }))
    };
    match (name, every) {
        ("explicit", None) => Ok(CommitMode::Explicit),
        ("strict", None) => Ok(CommitMode::Strict),
        ("auto", every) => match every.unwrap_or(AUTO_COMMIT_EVERY_DEFAULT) {
            0 => invalid("auto_commit_every", "must be positive".to_owned()),
            n => Ok(CommitMode::AutoEvery(n)),
        },
        ("explicit" | "strict", Some(_)) => invalid(
            "auto_commit_every",
            format!("is for commit=\"auto\", not {name:?}"),
        ),
        _ => invalid(
            "commit",
            format!("{name:?} is not \"explicit\", \"auto\" or \"strict\""),
        ),
    }
}

fn visibility_option(name: &str) -> PyResult<Visibility> {
    match name {
        "published" => Ok(Visibility::Published),
        "durable" => Ok(Visibility::Durable),
        _ => Err(to_py(tidelog::Error::InvalidArgument {
            name: "visibility",
            reason: format!("{name:?} is not \"published\" or \"durable\""),
        })),
    }
}

#[pymethods]
impl PyWal {
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    #[getter]
    fn readonly(&self) -> bool {
        self.wal.is_read_only()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.wal.is_closed()
    }

    /// `"ring"` when a ring fronts the data files, else `"mmap"`.
    #[getter]
    fn backend(&self) -> &'static str {
        if self.wal.config().ring.is_some() {
            "ring"
        } else {
            "mmap"
        }
    }

    /// The ring in front of the data files as a dict, or None without one.
    fn ring_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(stats) = attached(|| {
            self.wal.ensure_open()?;
            Ok(self.wal.ring_stats())
        })?
        else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        dict.set_item("device", stats.device.display().to_string())?;
        dict.set_item("capacity", stats.capacity_bytes)?;
        dict.set_item("trim_offset", stats.trim_offset)?;
        dict.set_item("next_offset", stats.next_offset)?;
        dict.set_item("flushed_offset", stats.flushed_offset)?;
        dict.set_item("free_bytes", stats.free_bytes)?;
        dict.set_item("checkpoints", stats.checkpoints)?;
        dict.set_item("direct_io", stats.direct_io)?;
        Ok(Some(dict))
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
    ) -> PyResult<u64> {
        let parts = Parts::extract(value, key, timestamp, headers)?;
        let config = self.wal.config();
        let release = releases_gil(config.durability, config.space_wait_ms > 0, parts.len());
        let wal = &self.wal;
        run(py, release, || wal.append_record(topic, parts.append()))
    }

    #[pyo3(signature = (topic, values))]
    fn append_batch<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        values: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyRange>> {
        let wal = &self.wal;
        let offsets = with_values(values, |v| detached(py, || wal.append_batch(topic, v)))?;
        range(py, offsets)
    }

    #[pyo3(signature = (topic, value, *, key = None, timestamp = None, headers = None))]
    fn append_async(
        &self,
        py: Python<'_>,
        topic: &str,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        timestamp: Option<u64>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyAppendHandle> {
        let parts = Parts::extract(value, key, timestamp, headers)?;
        let wal = &self.wal;
        let handle = detached(py, || {
            wal.append_batch_async(topic, std::slice::from_ref(&parts.append()))
        })?;
        Ok(PyAppendHandle { handle })
    }

    /// Appends a pyarrow array or record batch as one crash-atomic batch.
    fn append_arrow<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyRange>> {
        let offsets = arrow::append(py, &self.wal, topic, data)?;
        range(py, offsets)
    }

    #[pyo3(signature = (topic, *, fsync = None))]
    fn writer(&self, py: Python<'_>, topic: &str, fsync: Option<&str>) -> PyResult<PyWriter> {
        let mut writer = detached(py, || self.wal.writer(topic))?;
        if let Some(fsync) = fsync {
            writer = writer.with_durability(durability(fsync)?);
        }
        let py_writer = PyWriter {
            topic: writer.topic().to_owned(),
            durability: writer.durability(),
            writer: Arc::new(RwLock::new(Some(Arc::new(writer)))),
            space_wait: self.wal.config().space_wait_ms > 0,
            _wal: Arc::clone(&self.wal),
        };
        register(&self.children.writers, &py_writer.writer);
        Ok(py_writer)
    }

    #[pyo3(
        signature = (topic, group = None, *, start = None, verify_checksums = true, visibility = "published", spin_us = 0, commit = "explicit", auto_commit_every = None),
        text_signature = "(self, topic, group=None, *, start='committed', verify_checksums=True, visibility='published', spin_us=0, commit='explicit', auto_commit_every=None)"
    )]
    #[expect(
        clippy::too_many_arguments,
        reason = "Python keyword arguments, one per reader option"
    )]
    fn reader(
        &self,
        py: Python<'_>,
        topic: &str,
        group: Option<String>,
        start: Option<&Bound<'_, PyAny>>,
        verify_checksums: bool,
        visibility: &str,
        spin_us: u64,
        commit: &str,
        auto_commit_every: Option<u64>,
    ) -> PyResult<PyReader> {
        let start = match start {
            Some(s) => start_position(s)?,
            None => StartPosition::Committed,
        };
        let options = ReaderOptions {
            group: group.clone(),
            start,
            commit: commit_mode(commit, auto_commit_every)?,
            skip_checksums: !verify_checksums,
            visibility: visibility_option(visibility)?,
            spin: Duration::from_micros(spin_us),
        };
        let reader = detached(py, || self.wal.reader_with(topic, options))?;
        let reader = PyReader::new(Arc::clone(&self.wal), reader, topic.to_owned(), group);
        register(&self.children.readers, reader.slot());
        Ok(reader)
    }

    fn read(&self, py: Python<'_>, topic: &str, offset: u64) -> PyResult<PyRecord> {
        let record = detached(py, || self.wal.read(topic, offset))?;
        Ok(PyRecord::new(record))
    }

    /// `topic`'s records from `start` (default: the earliest) up to `end` (exclusive;
    /// default: what is published when the consumer gets there) as an Arrow C stream.
    #[pyo3(signature = (topic, start = None, end = None, *, batch_records = 65536))]
    fn scan(
        &self,
        py: Python<'_>,
        topic: &str,
        start: Option<u64>,
        end: Option<u64>,
        batch_records: usize,
    ) -> PyResult<crate::stream::PyArrowStream> {
        let handle = crate::stream::Handle::Local(Arc::clone(&self.wal));
        crate::stream::PyArrowStream::new(py, handle, topic, start, end, batch_records)
    }

    #[pyo3(signature = (topic, start, end = None, max_records = None))]
    fn read_arrow<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        start: u64,
        end: Option<u64>,
        max_records: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        arrow::read(py, &self.wal, topic, start, end, max_records)
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || self.wal.flush())
    }

    /// Closes the directory and every reader and writer it handed out, so their files are
    /// released even while Python still references them (a `Record` keeps its own file
    /// mapped while it lives).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // A forked child's close is refused and changes nothing: its readers and writers stay
        // as they are (each refuses in turn), and the parent's are not the child's to drop.
        let forked = detached(py, || match self.wal.ensure_open() {
            Err(tidelog::Error::Forked { .. }) => Ok(true),
            _ => Ok(false),
        })?;
        let result = detached(py, || self.wal.close());
        if !forked {
            self.children.release(py)?;
        }
        result
    }

    fn topics(&self) -> PyResult<Vec<String>> {
        attached(|| {
            self.wal.ensure_open()?;
            Ok(self.wal.topics())
        })
    }

    fn topic_info(&self, py: Python<'_>, topic: &str) -> PyResult<PyTopicInfo> {
        let info = detached(py, || self.wal.topic_info(topic))?;
        Ok(PyTopicInfo { info })
    }

    /// What the open found and repaired (torn tails cut, records repaired from commit
    /// copies, damaged progress slots, ...).
    fn recovery_report(&self) -> PyResult<PyRecoveryReport> {
        attached(|| {
            self.wal.ensure_open()?;
            Ok(PyRecoveryReport::from(&self.wal.recovery_report()))
        })
    }

    /// Publishes the staged parts of `job` exactly once; returns `{topic: range}` of the
    /// offsets the job got.
    fn commit_staged<'py>(
        &self,
        py: Python<'py>,
        job: &str,
        parts: Vec<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        let wal = &self.wal;
        let ranges = detached(py, || wal.commit_staged(job, &parts))?;
        let dict = PyDict::new(py);
        for (topic, offsets) in ranges {
            dict.set_item(topic, range(py, offsets)?)?;
        }
        Ok(dict)
    }

    fn delete_topic(&self, py: Python<'_>, topic: &str) -> PyResult<()> {
        detached(py, || self.wal.delete_topic(topic))
    }

    fn delete_group(&self, py: Python<'_>, topic: &str, group: &str) -> PyResult<()> {
        detached(py, || self.wal.delete_group(topic, group))
    }

    /// Kafka's DeleteRecords: the topic's records below `before_offset` go; returns the
    /// topic's first offset after the call.
    fn delete_records(&self, py: Python<'_>, topic: &str, before_offset: u64) -> PyResult<u64> {
        detached(py, || self.wal.delete_records(topic, before_offset))
    }

    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || self.wal.refresh())
    }

    /// `{"files": ..., "bytes": ...}`: data files and bytes reserved on disk.
    fn disk_usage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let usage = attached(|| {
            self.wal.ensure_open()?;
            Ok(self.wal.disk_usage())
        })?;
        let dict = PyDict::new(py);
        dict.set_item("files", usage.files)?;
        dict.set_item("bytes", usage.bytes)?;
        Ok(dict)
    }

    /// Ends every topic's open extent and returns once the tier's bucket holds every record
    /// appended before the call; `timeout` in seconds (`None`: no end). Ctrl-C interrupts
    /// the wait.
    #[pyo3(signature = (timeout = None))]
    fn tier_flush(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let wait = timeout.map(timeout_seconds).transpose()?;
        let flush = detached(py, || {
            self.wal.ensure_open()?;
            self.wal.tier_flush_begin()
        })?;
        let done = sliced(py, wait.and_then(deadline), |until| {
            Ok(flush.wait_until(until)?.then_some(()))
        })?;
        match done {
            Some(()) => Ok(()),
            None => Err(to_py(flush.timed_out())),
        }
    }

    /// What this handle knows of its tier, as a dict (see the stubs); `None` without one.
    fn tier_status<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let status = detached(py, || {
            self.wal.ensure_open()?;
            self.wal.tier_status()
        })?;
        let Some(s) = status else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        dict.set_item("url", s.url)?;
        dict.set_item("producer", s.producer)?;
        dict.set_item("uploading", s.uploading)?;
        dict.set_item("epoch", s.epoch)?;
        dict.set_item("manifest_version", s.manifest_version)?;
        dict.set_item("uploaded_objects", s.uploaded_objects)?;
        dict.set_item("uploaded_bytes", s.uploaded_bytes)?;
        dict.set_item("pending_extents", s.pending_extents)?;
        dict.set_item("pending_bytes", s.pending_bytes)?;
        dict.set_item("lag_records", s.lag_records)?;
        dict.set_item("retries", s.retries)?;
        dict.set_item("last_error", s.last_error)?;
        dict.set_item("fenced", s.fenced)?;
        Ok(Some(dict))
    }

    /// Shared mode: the housekeeping leader among the processes sharing the directory,
    /// `{"pid", "epoch", "idle_ms"}`; `None` for an exclusive handle or before any process
    /// took the lead.
    fn leader<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let leader = attached(|| {
            self.wal.ensure_open()?;
            Ok(self.wal.leader())
        })?;
        let Some(leader) = leader else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        dict.set_item("pid", leader.pid)?;
        dict.set_item("epoch", leader.epoch)?;
        dict.set_item("idle_ms", leader.idle_ms)?;
        Ok(Some(dict))
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
        format!(
            "Wal(path={:?}, backend={:?}, readonly={}, closed={})",
            self.path,
            self.backend(),
            self.wal.is_read_only(),
            self.wal.is_closed()
        )
    }
}

/// Calls `f` with the bytes of every item of `values` (an iterable of bytes-like objects),
/// borrowed for the length of the call.
fn with_values<T>(
    values: &Bound<'_, PyAny>,
    f: impl FnOnce(&[&[u8]]) -> PyResult<T>,
) -> PyResult<T> {
    let items = collect_items(values)?;
    let inputs = extract_values(&items)?;
    let slices: Vec<&[u8]> = inputs.iter().map(InputBytes::as_slice).collect();
    f(&slices)
}

/// Appends to one topic. Safe to share between threads.
#[pyclass(module = "tidelog._native", name = "Writer", frozen)]
#[derive(Debug)]
pub struct PyWriter {
    /// Shared with the `Wal`, which empties it at close.
    writer: Arc<WriterSlot>,
    topic: String,
    durability: Durability,
    space_wait: bool,
    /// Keeps the directory open while this writer lives.
    _wal: Arc<Wal>,
}

impl PyWriter {
    /// The engine writer; `ClosedError` once the `Wal` closed.
    fn writer(&self) -> PyResult<Arc<tidelog::Writer>> {
        self.writer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| to_py(tidelog::Error::Closed))
    }
}

#[pymethods]
impl PyWriter {
    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    #[getter]
    fn next_offset(&self) -> PyResult<u64> {
        Ok(self.writer()?.next_offset())
    }

    #[getter]
    fn fsync(&self) -> &'static str {
        durability_name(self.durability)
    }

    #[pyo3(signature = (value, *, key = None, timestamp = None, headers = None))]
    fn append(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        timestamp: Option<u64>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let parts = Parts::extract(value, key, timestamp, headers)?;
        let release = releases_gil(self.durability, self.space_wait, parts.len());
        let writer = self.writer()?;
        run(py, release, || writer.append_record(parts.append()))
    }

    fn append_batch<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyRange>> {
        let writer = self.writer()?;
        let offsets = with_values(values, |v| detached(py, || writer.append_batch(v)))?;
        range(py, offsets)
    }

    #[pyo3(signature = (value, *, key = None, timestamp = None, headers = None))]
    fn append_async(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        timestamp: Option<u64>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyAppendHandle> {
        let parts = Parts::extract(value, key, timestamp, headers)?;
        let writer = self.writer()?;
        let handle = detached(py, || {
            writer.append_batch_async(std::slice::from_ref(&parts.append()))
        })?;
        Ok(PyAppendHandle { handle })
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let writer = self.writer()?;
        detached(py, || writer.flush())
    }

    fn __repr__(&self) -> String {
        let next = self
            .writer()
            .map_or_else(|_| "closed".to_owned(), |w| w.next_offset().to_string());
        format!(
            "Writer(topic={:?}, fsync={:?}, next_offset={next})",
            self.topic,
            durability_name(self.durability)
        )
    }
}

/// The offsets of an `append_async` and a way to wait until they are durable.
#[pyclass(module = "tidelog._native", name = "AppendHandle", frozen)]
#[derive(Debug)]
pub struct PyAppendHandle {
    handle: tidelog::AppendHandle,
}

#[pymethods]
impl PyAppendHandle {
    #[getter]
    fn offset(&self) -> u64 {
        self.handle.offset()
    }

    #[getter]
    fn offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyRange>> {
        range(py, self.handle.offsets())
    }

    fn is_durable(&self) -> bool {
        self.handle.is_durable()
    }

    /// Waits until durable (forever, or `timeout` seconds); False if the timeout passed.
    /// Waits in slices without the GIL, so Ctrl-C interrupts it (under `fsync="never"` only
    /// a flush or close ends it).
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let deadline = match timeout {
            Some(seconds) => deadline(timeout_seconds(seconds)?),
            None => None,
        };
        let handle = &self.handle;
        let durable = sliced(py, deadline, |end| {
            let left = end.saturating_duration_since(Instant::now());
            Ok(handle.wait_timeout(left)?.then_some(()))
        })?;
        Ok(durable.is_some())
    }

    fn __repr__(&self) -> String {
        let offsets = self.handle.offsets();
        format!(
            "AppendHandle(offsets=range({}, {}), durable={})",
            offsets.start,
            offsets.end,
            self.handle.is_durable()
        )
    }
}

/// What the open found and repaired: the fields of the engine's `RecoveryReport`.
#[pyclass(module = "tidelog._native", name = "RecoveryReport", frozen, get_all)]
#[derive(Debug, Clone)]
pub struct PyRecoveryReport {
    files: u64,
    extents: u64,
    sealed_extents: u64,
    scanned_extents: u64,
    scanned_bytes: u64,
    torn_tails: u64,
    torn_records: u64,
    records_past_tear: u64,
    damaged_progress_slots: u64,
    repaired_from_copies: u64,
    damaged_commit_copies: u64,
    deleted_remnants: u64,
    dropped_extents: u64,
    ring_records_replayed: u64,
    ring_records_held: u64,
}

impl From<&tidelog::RecoveryReport> for PyRecoveryReport {
    fn from(r: &tidelog::RecoveryReport) -> Self {
        PyRecoveryReport {
            files: r.files,
            extents: r.extents,
            sealed_extents: r.sealed_extents,
            scanned_extents: r.scanned_extents,
            scanned_bytes: r.scanned_bytes,
            torn_tails: r.torn_tails,
            torn_records: r.torn_records,
            records_past_tear: r.records_past_tear,
            damaged_progress_slots: r.damaged_progress_slots,
            repaired_from_copies: r.repaired_from_copies,
            damaged_commit_copies: r.damaged_commit_copies,
            deleted_remnants: r.deleted_remnants,
            dropped_extents: r.dropped_extents,
            ring_records_replayed: r.ring_records_replayed,
            ring_records_held: r.ring_records_held,
        }
    }
}

#[pymethods]
impl PyRecoveryReport {
    fn __repr__(&self) -> String {
        format!(
            "RecoveryReport(files={}, extents={}, sealed_extents={}, scanned_extents={}, \
             scanned_bytes={}, torn_tails={}, torn_records={}, records_past_tear={}, \
             damaged_progress_slots={}, repaired_from_copies={}, damaged_commit_copies={}, \
             deleted_remnants={}, \
             dropped_extents={}, ring_records_replayed={}, ring_records_held={})",
            self.files,
            self.extents,
            self.sealed_extents,
            self.scanned_extents,
            self.scanned_bytes,
            self.torn_tails,
            self.torn_records,
            self.records_past_tear,
            self.damaged_progress_slots,
            self.repaired_from_copies,
            self.damaged_commit_copies,
            self.deleted_remnants,
            self.dropped_extents,
            self.ring_records_replayed,
            self.ring_records_held
        )
    }
}

/// A summary of one topic.
#[pyclass(module = "tidelog._native", name = "TopicInfo", frozen)]
#[derive(Debug)]
pub struct PyTopicInfo {
    info: tidelog::TopicInfo,
}

#[pymethods]
impl PyTopicInfo {
    #[getter]
    fn name(&self) -> &str {
        &self.info.name
    }
    #[getter]
    fn first_offset(&self) -> u64 {
        self.info.first_offset
    }
    /// First offset still on disk (`first_offset` without a tier).
    #[getter]
    fn local_first_offset(&self) -> u64 {
        self.info.local_first_offset
    }
    #[getter]
    fn next_offset(&self) -> u64 {
        self.info.next_offset
    }
    /// Offset after the last record known to be durable.
    #[getter]
    fn durable_offset(&self) -> u64 {
        self.info.durable_offset
    }
    /// Records stored: `next_offset - first_offset`.
    #[getter]
    fn records(&self) -> u64 {
        self.info.next_offset - self.info.first_offset
    }
    /// Bytes of record frames stored (headers included).
    #[getter]
    fn bytes(&self) -> u64 {
        self.info.bytes
    }
    #[getter]
    fn extents(&self) -> usize {
        self.info.extents
    }
    #[getter]
    fn groups(&self) -> Vec<String> {
        self.info.groups.clone()
    }
    fn __repr__(&self) -> String {
        format!(
            "TopicInfo(name={:?}, first_offset={}, next_offset={}, durable_offset={}, bytes={}, extents={}, groups={:?})",
            self.info.name,
            self.info.first_offset,
            self.info.next_offset,
            self.info.durable_offset,
            self.info.bytes,
            self.info.extents,
            self.info.groups
        )
    }
}

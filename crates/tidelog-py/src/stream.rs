//! `Wal.scan` and `RemoteLog.scan`: a topic's records as an Arrow C stream
//! (`__arrow_c_stream__`), which pyarrow, polars, duckdb and others read with no pyarrow
//! needed here. Batches are built in Rust as the consumer pulls them.

use std::sync::{Arc, Mutex};

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{Array, RecordBatch, RecordBatchReader, StructArray};
use arrow_schema::{ArrowError, SchemaRef};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

use crate::columns::{Building, Columns, Row, schema};
use crate::error::to_py;

/// What a scan calls with each record; false to stop.
type Visit<'a> = dyn FnMut(&Row<'_>) -> bool + 'a;

/// Where a stream's records come from: a directory's reader or a bucket's.
#[derive(Debug)]
pub enum Source {
    Local(tidelog::Reader),
    Remote(tidelog::RemoteReader),
}

impl Source {
    /// Visits the records before `end`, at most `max`, as `Reader::scan` does.
    fn scan(&mut self, end: u64, max: usize, visit: &mut Visit<'_>) -> tidelog::Result<usize> {
        match self {
            Source::Local(reader) => reader.scan(max, |r| r.offset < end && visit(&Row::local(r))),
            Source::Remote(reader) => reader.scan_until(end, max, |r| visit(&Row::remote(r))),
        }
    }

    fn position(&self) -> u64 {
        match self {
            Source::Local(reader) => reader.position(),
            Source::Remote(reader) => reader.position(),
        }
    }
}

/// The batches of a scan, as the consumer of the C stream pulls them.
struct Batches {
    topic: String,
    source: Source,
    end: u64,
    batch_records: usize,
    schema: SchemaRef,
    /// Set once the source failed: the stream ends after reporting it.
    done: bool,
    /// Makes a second reader of a directory's topic: while one batch is built, the next is
    /// built beside it on another thread (not for a bucket's).
    handle: Handle,
    /// The batch after the one handed out last, built ahead, and the reader past it.
    ahead: Option<(Source, Columns)>,
}

/// The columns of the next records of `source` before `end`, at most `batch_records`;
/// `None` when nothing more is published before the end.
fn fill_batch(
    source: &mut Source,
    end: u64,
    batch_records: usize,
) -> Result<Option<Columns>, String> {
    match Columns::fill(batch_records as u64, |max, visit| {
        source.scan(end, max, visit)
    }) {
        Ok(columns) => Ok((columns.len() > 0).then_some(columns)),
        Err(e) => Err(e.to_string()),
    }
}

impl Batches {
    /// A reader for the batch after the one from the current position, when a whole batch
    /// and more are published before the end (a directory's topic only).
    fn ahead_source(&self) -> Option<(u64, Source)> {
        let Source::Local(reader) = &self.source else {
            return None;
        };
        let next = reader.position().checked_add(self.batch_records as u64)?;
        let published = reader.position().saturating_add(reader.lag());
        if self.end.min(published) <= next {
            return None;
        }
        self.handle
            .source(&self.topic, Some(next))
            .ok()
            .map(|s| (next, s))
    }

    /// The next batch, and the one after it built on another thread meanwhile when it can
    /// be: kept only if the first ended where the second began, and both were read whole.
    /// Any failure of the second is forgotten: the batch is read again in turn, so errors
    /// come as they would without it.
    fn fill_next(&mut self) -> Result<Option<Columns>, String> {
        let _building = Building::enter();
        // The helper first: without one no second reader is made.
        let ahead = Building::helper().and_then(|helper| Some((self.ahead_source()?, helper)));
        let Some(((next, mut second), helper)) = ahead else {
            return fill_batch(&mut self.source, self.end, self.batch_records);
        };
        let (end, batch_records) = (self.end, self.batch_records);
        let (current, ahead) = std::thread::scope(|scope| {
            let ahead = scope.spawn(move || {
                let _helper = helper;
                fill_batch(&mut second, end, batch_records).map(|c| (second, c))
            });
            let current = fill_batch(&mut self.source, end, batch_records);
            (current, ahead.join())
        });
        if let (Ok(Some(_)), Ok(Ok((second, Some(columns))))) = (&current, ahead)
            && self.source.position() == next
        {
            self.ahead = Some((second, columns));
        }
        current
    }
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some((source, columns)) = self.ahead.take() {
            self.source = source;
            return Some(columns.into_batch(&self.topic, Arc::clone(&self.schema)));
        }
        if self.done || self.source.position() >= self.end {
            return None;
        }
        match self.fill_next() {
            Err(message) => {
                self.done = true;
                Some(Err(ArrowError::ExternalError(message.into())))
            }
            // Nothing more published before the end.
            Ok(None) => None,
            Ok(Some(columns)) => Some(columns.into_batch(&self.topic, Arc::clone(&self.schema))),
        }
    }
}

impl RecordBatchReader for Batches {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// The handle a scan reads: each consumer's stream gets a reader of its own.
#[derive(Debug, Clone)]
pub enum Handle {
    Local(Arc<tidelog::Wal>),
    Remote(Arc<tidelog::RemoteLog>),
}

impl Handle {
    /// A reader of `topic` at `start` (`None`: the earliest).
    fn source(&self, topic: &str, start: Option<u64>) -> tidelog::Result<Source> {
        let options = tidelog::ReaderOptions::default().start(match start {
            Some(offset) => tidelog::StartPosition::Offset(offset),
            None => tidelog::StartPosition::Earliest,
        });
        match self {
            Handle::Local(wal) => wal.reader_with(topic, options).map(Source::Local),
            Handle::Remote(log) => log.reader_with(topic, &options).map(Source::Remote),
        }
    }
}

/// A topic's records from a start to an end, as Arrow C streams: each call of
/// `__arrow_c_stream__` reads them from the start (a consumer may ask once for the schema
/// and again for the data).
#[pyclass(name = "ArrowStream", module = "tidelog._native", frozen)]
pub struct PyArrowStream {
    handle: Handle,
    topic: String,
    start: Option<u64>,
    end: Option<u64>,
    batch_records: usize,
    /// The reader made (and so the arguments checked) when the scan began, for the first
    /// stream; `None` once taken.
    first: Mutex<Option<Source>>,
}

impl std::fmt::Debug for PyArrowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrowStream").finish_non_exhaustive()
    }
}

impl PyArrowStream {
    /// Streams of `topic` from `start` (`None`: the earliest) up to `end` (exclusive;
    /// `None`: what is published when the consumer reaches it), `batch_records` records per
    /// batch at most. The arguments are checked now (a first reader is made).
    pub fn new(
        py: Python<'_>,
        handle: Handle,
        topic: &str,
        start: Option<u64>,
        end: Option<u64>,
        batch_records: usize,
    ) -> PyResult<PyArrowStream> {
        if batch_records == 0 {
            return Err(to_py(tidelog::Error::InvalidArgument {
                name: "batch_records",
                reason: "must be positive".to_owned(),
            }));
        }
        // As `read_arrow`: an end before the start is a mistake, not an empty range.
        if let (Some(start), Some(end)) = (start, end)
            && end < start
        {
            return Err(to_py(tidelog::Error::InvalidArgument {
                name: "end",
                reason: format!("end {end} is before start {start}"),
            }));
        }
        let first = crate::call::detached(py, || handle.source(topic, start))?;
        Ok(PyArrowStream {
            handle,
            topic: topic.to_owned(),
            start,
            end,
            batch_records,
            first: Mutex::new(Some(first)),
        })
    }
}

#[pymethods]
impl PyArrowStream {
    /// The Arrow C stream (a PyCapsule named "arrow_array_stream"); each call reads from the
    /// start again.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // The schema is fixed: a consumer that asked for another casts it itself.
        let _ = requested_schema;
        let first = self
            .first
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let source = match first {
            Some(source) => source,
            None => crate::call::detached(py, || self.handle.source(&self.topic, self.start))?,
        };
        let batches = Batches {
            topic: self.topic.clone(),
            source,
            end: self.end.unwrap_or(u64::MAX),
            batch_records: self.batch_records,
            schema: schema(),
            done: false,
            handle: self.handle.clone(),
            ahead: None,
        };
        // The capsule holds the stream itself: a consumer moves it out (marking ours
        // released), or the capsule's drop releases it.
        let stream = FFI_ArrowArrayStream::new(Box::new(batches));
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }
}

/// One record batch handed to Python through the Arrow C data interface
/// (`__arrow_c_array__`), for `pyarrow.record_batch` and any other consumer of it.
#[pyclass(name = "ArrowBatch", module = "tidelog._native", frozen)]
pub struct PyArrowBatch {
    batch: RecordBatch,
}

impl PyArrowBatch {
    pub fn new(batch: RecordBatch) -> PyArrowBatch {
        PyArrowBatch { batch }
    }
}

#[pymethods]
impl PyArrowBatch {
    /// `(schema capsule, array capsule)` of the batch, as a struct array.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        // The schema is fixed: a consumer that asked for another casts it itself.
        let _ = requested_schema;
        let data = StructArray::from(self.batch.clone()).into_data();
        let array = FFI_ArrowArray::new(&data);
        let schema = FFI_ArrowSchema::try_from(data.data_type()).map_err(|e| {
            to_py(tidelog::Error::InvalidArgument {
                name: "arrow schema",
                reason: e.to_string(),
            })
        })?;
        // Each capsule holds its struct: a consumer moves it out (marking ours released),
        // or the capsule's drop releases it.
        let schema = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
        let array = PyCapsule::new_with_value(py, array, c"arrow_array")?;
        PyTuple::new(py, [schema.into_any(), array.into_any()])
    }

    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }
}

impl std::fmt::Debug for PyArrowBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrowBatch")
            .field("rows", &self.batch.num_rows())
            .finish()
    }
}

//! `Wal.scan` and `RemoteLog.scan`: a topic's records as an Arrow C stream
//! (`__arrow_c_stream__`), which pyarrow, polars, duckdb and others read with no pyarrow
//! needed here. Batches are built in Rust as the consumer pulls them.

use std::sync::{Arc, Mutex};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{
    ArrayRef, BinaryArray, Int64Array, RecordBatch, RecordBatchReader, StringArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::error::to_py;

/// Arrow `binary` offsets are i32: one batch holds at most this many value (or key) bytes.
const BINARY_BYTES_MAX: usize = i32::MAX as usize;

/// The stream's schema: the columns of `read_arrow`.
fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("topic", DataType::Utf8, false),
        Field::new("offset", DataType::Int64, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, false),
    ]))
}

/// What a scan calls with each record: offset, timestamp, key, value; false to stop.
type Visit<'a> = dyn FnMut(u64, u64, Option<&[u8]>, &[u8]) -> bool + 'a;

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
            Source::Local(reader) => reader.scan(max, |r| {
                r.offset < end && visit(r.offset, r.timestamp_us, r.key, r.value)
            }),
            Source::Remote(reader) => reader.scan_until(end, max, |r| {
                visit(r.offset, r.timestamp_us, r.key, r.value)
            }),
        }
    }

    fn position(&self) -> u64 {
        match self {
            Source::Local(reader) => reader.position(),
            Source::Remote(reader) => reader.position(),
        }
    }
}

/// The typed columns of one batch as it fills.
#[derive(Default)]
struct Columns {
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    key_valid: Vec<bool>,
    key_offsets: Vec<i32>,
    key_data: Vec<u8>,
    value_offsets: Vec<i32>,
    value_data: Vec<u8>,
}

impl Columns {
    fn new() -> Columns {
        Columns {
            key_offsets: vec![0],
            value_offsets: vec![0],
            ..Columns::default()
        }
    }

    /// Adds a record; false (nothing added) once a binary column would pass its limit.
    fn push(&mut self, offset: u64, timestamp_us: u64, key: Option<&[u8]>, value: &[u8]) -> bool {
        let key_len = key.map_or(0, <[u8]>::len);
        if self.value_data.len() + value.len() > BINARY_BYTES_MAX
            || self.key_data.len() + key_len > BINARY_BYTES_MAX
        {
            return false;
        }
        self.offsets.push(i64::try_from(offset).unwrap_or(i64::MAX));
        self.timestamps
            .push(i64::try_from(timestamp_us).unwrap_or(i64::MAX));
        self.key_valid.push(key.is_some());
        self.key_data.extend_from_slice(key.unwrap_or_default());
        // Below BINARY_BYTES_MAX, checked above.
        self.key_offsets
            .push(i32::try_from(self.key_data.len()).unwrap_or(i32::MAX));
        self.value_data.extend_from_slice(value);
        self.value_offsets
            .push(i32::try_from(self.value_data.len()).unwrap_or(i32::MAX));
        true
    }

    fn len(&self) -> usize {
        self.offsets.len()
    }

    fn into_batch(self, topic: &str, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
        let n = self.len();
        let nulls = (!self.key_valid.iter().all(|v| *v)).then(|| NullBuffer::from(self.key_valid));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(topic, n))),
            Arc::new(Int64Array::new(ScalarBuffer::from(self.offsets), None)),
            Arc::new(
                TimestampMicrosecondArray::new(ScalarBuffer::from(self.timestamps), None)
                    .with_timezone("UTC"),
            ),
            Arc::new(BinaryArray::try_new(
                OffsetBuffer::new(ScalarBuffer::from(self.key_offsets)),
                Buffer::from_vec(self.key_data),
                nulls,
            )?),
            Arc::new(BinaryArray::try_new(
                OffsetBuffer::new(ScalarBuffer::from(self.value_offsets)),
                Buffer::from_vec(self.value_data),
                None,
            )?),
        ];
        RecordBatch::try_new(schema, columns)
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
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.source.position() >= self.end {
            return None;
        }
        let mut columns = Columns::new();
        let mut refused = None;
        let scanned = self
            .source
            .scan(self.end, self.batch_records, &mut |o, t, k, v| {
                let pushed = columns.push(o, t, k, v);
                if !pushed {
                    refused = Some(v.len().max(k.map_or(0, <[u8]>::len)));
                }
                pushed
            });
        let failure = match (scanned, refused) {
            (Err(e), _) => Some(e.to_string()),
            (Ok(_), Some(bytes)) if columns.len() == 0 => Some(
                tidelog::Error::LimitExceeded {
                    limit: "arrow binary column bytes",
                    value: bytes as u64,
                    max: BINARY_BYTES_MAX as u64,
                }
                .to_string(),
            ),
            _ => None,
        };
        if let Some(message) = failure {
            self.done = true;
            return Some(Err(ArrowError::ExternalError(message.into())));
        }
        if columns.len() == 0 {
            // Nothing more published before the end.
            return None;
        }
        Some(columns.into_batch(&self.topic, Arc::clone(&self.schema)))
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
    /// The Arrow C stream (a PyCapsule named "arrow_array_stream"); once.
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
        };
        // The capsule holds the stream itself: a consumer moves it out (marking ours
        // released), or the capsule's drop releases it.
        let stream = FFI_ArrowArrayStream::new(Box::new(batches));
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }
}

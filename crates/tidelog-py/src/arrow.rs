//! Arrow batches: `read_arrow` fills raw Arrow buffers from the mapping and `append_arrow`
//! reads them, both without a Python object per record. `tidelog/_arrow.py` wraps and
//! unwraps the buffers with pyarrow.

use std::ops::Range;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use tidelog::{Append, ReaderOptions, StartPosition, Wal};

use crate::buffer::{InputBytes, OwnedBuffer};
use crate::call::detached;
use crate::error::to_py;

#[cfg(target_endian = "big")]
compile_error!("the Arrow buffers are built little-endian; big-endian hosts are not supported");

/// Arrow `binary` offsets are i32: one batch holds at most this many value (or key) bytes.
const BINARY_BYTES_MAX: usize = i32::MAX as usize;

fn helper(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || Ok(py.import("tidelog._arrow")?.unbind()))
        .map(|m| m.bind(py))
}

fn invalid(name: &'static str, reason: impl Into<String>) -> PyErr {
    to_py(tidelog::Error::InvalidArgument {
        name,
        reason: reason.into(),
    })
}

/// The raw columns of one read batch.
#[derive(Default)]
struct Columns {
    length: usize,
    offsets: Vec<u8>,
    timestamps: Vec<u8>,
    key_validity: Vec<u8>,
    key_nulls: usize,
    key_offsets: Vec<u8>,
    key_data: Vec<u8>,
    value_offsets: Vec<u8>,
    value_data: Vec<u8>,
}

fn push_i32(buf: &mut Vec<u8>, v: usize) {
    // Bounded by BINARY_BYTES_MAX before every push.
    let v = i32::try_from(v).unwrap_or(i32::MAX);
    buf.extend_from_slice(&v.to_le_bytes());
}

impl Columns {
    /// Empty columns for about `capacity` records.
    fn with_capacity(capacity: usize) -> Columns {
        let mut c = Columns {
            offsets: Vec::with_capacity(capacity * 8),
            timestamps: Vec::with_capacity(capacity * 8),
            key_offsets: Vec::with_capacity((capacity + 1) * 4),
            value_offsets: Vec::with_capacity((capacity + 1) * 4),
            ..Columns::default()
        };
        push_i32(&mut c.key_offsets, 0);
        push_i32(&mut c.value_offsets, 0);
        c
    }

    /// Adds one record; false (nothing added) once the binary columns would pass their
    /// limit: the batch is full, and the caller continues from this record.
    fn push(
        &mut self,
        offset: u64,
        timestamp_us: u64,
        key: Option<&[u8]>,
        value: &[u8],
        capacity: usize,
    ) -> bool {
        let key_len = key.map_or(0, <[u8]>::len);
        if self.value_data.len() + value.len() > BINARY_BYTES_MAX
            || self.key_data.len() + key_len > BINARY_BYTES_MAX
        {
            return false;
        }
        // Offsets and timestamps are u64 on disk and below 2^63 in practice; Arrow has int64.
        self.offsets
            .extend_from_slice(&i64::try_from(offset).unwrap_or(i64::MAX).to_le_bytes());
        self.timestamps.extend_from_slice(
            &i64::try_from(timestamp_us)
                .unwrap_or(i64::MAX)
                .to_le_bytes(),
        );
        if self.length.is_multiple_of(8) {
            self.key_validity.push(0);
        }
        if let Some(key) = key {
            self.key_data.extend_from_slice(key);
            if let Some(last) = self.key_validity.last_mut() {
                *last |= 1 << (self.length % 8);
            }
        } else {
            self.key_nulls += 1;
        }
        push_i32(&mut self.key_offsets, self.key_data.len());
        if self.value_data.capacity() == 0 {
            // Sized from the first record: most topics hold records of similar size.
            self.value_data
                .reserve(value.len().saturating_mul(capacity).min(BINARY_BYTES_MAX));
        }
        self.value_data.extend_from_slice(value);
        push_i32(&mut self.value_offsets, self.value_data.len());
        self.length += 1;
        true
    }

    /// `LimitExceeded` when not even the first record fit (`size`: its largest column).
    fn check_first(&self, size: Option<usize>) -> tidelog::Result<()> {
        match size {
            Some(bytes) if self.length == 0 => Err(tidelog::Error::LimitExceeded {
                limit: "arrow binary column bytes",
                value: bytes as u64,
                max: BINARY_BYTES_MAX as u64,
            }),
            _ => Ok(()),
        }
    }
}

/// The columns of up to `wanted` records that `scan` visits (its visitor returns false once
/// a record does not fit: that record is left for the next batch).
fn fill(
    wanted: u64,
    scan: impl FnOnce(
        usize,
        &mut dyn FnMut(u64, u64, Option<&[u8]>, &[u8]) -> bool,
    ) -> tidelog::Result<usize>,
) -> tidelog::Result<Columns> {
    let capacity = usize::try_from(wanted).unwrap_or(usize::MAX).min(1 << 20);
    let mut c = Columns::with_capacity(capacity);
    let mut refused = None;
    let max = usize::try_from(wanted).unwrap_or(usize::MAX);
    scan(max, &mut |offset, timestamp_us, key, value| {
        let pushed = c.push(offset, timestamp_us, key, value, capacity);
        if !pushed {
            refused = Some(value.len().max(key.map_or(0, <[u8]>::len)));
        }
        pushed
    })?;
    c.check_first(refused)?;
    Ok(c)
}

fn collect(
    wal: &Wal,
    topic: &str,
    start: u64,
    end: Option<u64>,
    max_records: Option<u64>,
) -> tidelog::Result<Columns> {
    let options = ReaderOptions::default().start(StartPosition::Offset(start));
    let mut reader = wal.reader_with(topic, options)?;
    let next = reader.position() + reader.lag();
    let end = end.unwrap_or(next).min(next);
    let wanted = end
        .saturating_sub(start)
        .min(max_records.unwrap_or(u64::MAX));
    fill(wanted, |max, visit| {
        reader.scan(max, |r| visit(r.offset, r.timestamp_us, r.key, r.value))
    })
}

/// The columns of the next records of `reader` before `end`, at most `max_records`.
fn collect_remote(
    reader: &mut tidelog::RemoteReader,
    end: Option<u64>,
    max_records: Option<u64>,
) -> tidelog::Result<Columns> {
    let next = reader.bounds()?.1;
    let end = end.unwrap_or(next).min(next);
    let wanted = end
        .saturating_sub(reader.position())
        .min(max_records.unwrap_or(u64::MAX));
    fill(wanted, |max, visit| {
        reader.scan_until(end, max, |r| {
            visit(r.offset, r.timestamp_us, r.key, r.value)
        })
    })
}

/// `Wal.read_arrow`: records `[start, end)` (end defaults to and is capped at the topic's
/// next offset) as one `pyarrow.RecordBatch`.
pub fn read<'py>(
    py: Python<'py>,
    wal: &Wal,
    topic: &str,
    start: u64,
    end: Option<u64>,
    max_records: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    check_range(start, end, max_records)?;
    // Import pyarrow before reading, so a missing pyarrow fails fast.
    let helper = helper(py)?;
    let c = detached(py, || collect(wal, topic, start, end, max_records))?;
    batch(py, helper, topic, c)
}

/// The arguments of a `read_arrow`: `end` not before `start`, `max_records` positive.
fn check_range(start: u64, end: Option<u64>, max_records: Option<u64>) -> PyResult<()> {
    if let Some(end) = end
        && end < start
    {
        return Err(invalid("end", format!("end {end} is before start {start}")));
    }
    if max_records == Some(0) {
        return Err(invalid("max_records", "must be positive"));
    }
    Ok(())
}

/// `RemoteLog.read_arrow`: records `[start, end)` of `topic` from the bucket (end capped at
/// what it holds) as one `pyarrow.RecordBatch`.
pub fn read_remote<'py>(
    py: Python<'py>,
    log: &tidelog::RemoteLog,
    topic: &str,
    start: u64,
    end: Option<u64>,
    max_records: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    check_range(start, end, max_records)?;
    let helper = helper(py)?;
    let c = detached(py, || {
        let mut reader = log.at(topic, start)?;
        collect_remote(&mut reader, end, max_records)
    })?;
    batch(py, helper, topic, c)
}

/// `RemoteReader.read_arrow`: the reader's next records before `end`, at most
/// `max_records`, as one `pyarrow.RecordBatch` (empty at the end).
pub fn read_remote_next<'py>(
    py: Python<'py>,
    reader: &mut tidelog::RemoteReader,
    end: Option<u64>,
    max_records: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    check_range(reader.position(), end, max_records)?;
    let helper = helper(py)?;
    let topic = reader.topic().to_owned();
    let c = detached(py, || collect_remote(reader, end, max_records))?;
    batch(py, helper, &topic, c)
}

/// The `pyarrow.RecordBatch` of `c`, its buffers handed over without a copy.
fn batch<'py>(
    py: Python<'py>,
    helper: &Bound<'py, PyModule>,
    topic: &str,
    c: Columns,
) -> PyResult<Bound<'py, PyAny>> {
    let buffer = |bytes: Vec<u8>| Bound::new(py, OwnedBuffer::new(bytes));
    let key_validity = if c.key_nulls == 0 {
        None
    } else {
        Some(buffer(c.key_validity)?)
    };
    helper.call_method1(
        "record_batch",
        (
            topic,
            c.length,
            buffer(c.offsets)?,
            buffer(c.timestamps)?,
            key_validity,
            buffer(c.key_offsets)?,
            buffer(c.key_data)?,
            buffer(c.value_offsets)?,
            buffer(c.value_data)?,
        ),
    )
}

/// One binary-like column, as exported pyarrow buffers.
struct BinaryColumn {
    name: &'static str,
    /// The array's slice offset, in elements.
    offset: usize,
    validity: Option<InputBytes<'static>>,
    offsets: InputBytes<'static>,
    data: InputBytes<'static>,
    /// `large_binary` (i64 offsets) rather than `binary` (i32).
    wide: bool,
}

type BinaryParts<'py> = (
    usize,
    Option<Bound<'py, PyAny>>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    bool,
);

impl BinaryColumn {
    fn extract(name: &'static str, parts: &Bound<'_, PyAny>) -> PyResult<BinaryColumn> {
        let (offset, validity, offsets, data, wide): BinaryParts<'_> = parts.extract()?;
        Ok(BinaryColumn {
            name,
            offset,
            validity: validity.map(|v| InputBytes::export(&v, name)).transpose()?,
            offsets: InputBytes::export(&offsets, name)?,
            data: InputBytes::export(&data, name)?,
            wide,
        })
    }

    /// The byte ranges of the `length` elements, checked against the buffers: a malformed
    /// array is an error, never an out-of-bounds read.
    fn ranges(&self, length: usize) -> PyResult<Vec<Option<Range<usize>>>> {
        let width = if self.wide { 8 } else { 4 };
        let offsets = self.offsets.as_slice();
        let data_len = self.data.as_slice().len();
        let needed = (self.offset + length + 1) * width;
        if offsets.len() < needed {
            return Err(invalid(
                "data",
                format!("{} offsets buffer is too short", self.name),
            ));
        }
        let at = |i: usize| -> PyResult<usize> {
            let p = (self.offset + i) * width;
            let v = if self.wide {
                let mut b = [0u8; 8];
                b.copy_from_slice(&offsets[p..p + 8]);
                i64::from_le_bytes(b)
            } else {
                let mut b = [0u8; 4];
                b.copy_from_slice(&offsets[p..p + 4]);
                i64::from(i32::from_le_bytes(b))
            };
            usize::try_from(v)
                .ok()
                .filter(|v| *v <= data_len)
                .ok_or_else(|| {
                    invalid("data", format!("{} offset {v} is out of bounds", self.name))
                })
        };
        let validity = self.validity.as_ref().map(InputBytes::as_slice);
        let mut ranges = Vec::with_capacity(length);
        let mut start = at(0)?;
        for i in 0..length {
            let end = at(i + 1)?;
            if end < start {
                return Err(invalid("data", format!("{} offsets decrease", self.name)));
            }
            let bit = self.offset + i;
            let valid = match validity {
                None => true,
                Some(bits) => bits
                    .get(bit / 8)
                    .map(|byte| byte & (1 << (bit % 8)) != 0)
                    .ok_or_else(|| {
                        invalid("data", format!("{} validity is too short", self.name))
                    })?,
            };
            ranges.push(valid.then_some(start..end));
            start = end;
        }
        Ok(ranges)
    }
}

/// Timestamps in microseconds, as an exported int64 buffer.
struct TimestampColumn {
    offset: usize,
    validity: Option<InputBytes<'static>>,
    values: InputBytes<'static>,
}

impl TimestampColumn {
    fn extract(parts: &Bound<'_, PyAny>) -> PyResult<TimestampColumn> {
        let (offset, validity, values): (usize, Option<Bound<'_, PyAny>>, Bound<'_, PyAny>) =
            parts.extract()?;
        Ok(TimestampColumn {
            offset,
            validity: validity
                .map(|v| InputBytes::export(&v, "timestamp"))
                .transpose()?,
            values: InputBytes::export(&values, "timestamp")?,
        })
    }

    /// Each element in microseconds; `None` (null) means "now".
    fn values(&self, length: usize) -> PyResult<Vec<Option<u64>>> {
        let values = self.values.as_slice();
        if values.len() < (self.offset + length) * 8 {
            return Err(invalid("timestamp", "values buffer is too short"));
        }
        let validity = self.validity.as_ref().map(InputBytes::as_slice);
        (0..length)
            .map(|i| {
                let at = self.offset + i;
                if let Some(bits) = validity {
                    let byte = bits
                        .get(at / 8)
                        .ok_or_else(|| invalid("timestamp", "validity is too short"))?;
                    if byte & (1 << (at % 8)) == 0 {
                        return Ok(None);
                    }
                }
                let mut b = [0u8; 8];
                b.copy_from_slice(&values[at * 8..at * 8 + 8]);
                let us = i64::from_le_bytes(b);
                u64::try_from(us)
                    .map(Some)
                    .map_err(|_| invalid("timestamp", format!("{us} is before 1970")))
            })
            .collect()
    }
}

/// `(length, value parts, key parts, timestamp parts)` from `_arrow.append_parts`.
type AppendParts<'py> = (
    usize,
    Bound<'py, PyAny>,
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
);

/// `Wal.append_arrow`: appends every element of `data` as one crash-atomic batch.
pub fn append(
    py: Python<'_>,
    wal: &Wal,
    topic: &str,
    data: &Bound<'_, PyAny>,
) -> PyResult<Range<u64>> {
    with_records(py, data, |records| wal.append_batch_records(topic, records))
}

/// Runs `sink` (without the GIL) on the records of `data`: a pyarrow binary/string array,
/// or a batch/table with a `value` column and optional `key` and `timestamp` columns. The
/// records borrow the Arrow buffers.
pub fn with_records<T: Send>(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    sink: impl FnOnce(&[Append<'_>]) -> tidelog::Result<T> + Send,
) -> PyResult<T> {
    let parts = helper(py)?.call_method1("append_parts", (data,))?;
    let (length, values, keys, timestamps): AppendParts<'_> = parts.extract()?;
    if length == 0 {
        return Err(invalid("data", "the batch is empty"));
    }
    let values = BinaryColumn::extract("value", &values)?;
    let keys = keys.map(|k| BinaryColumn::extract("key", &k)).transpose()?;
    let timestamps = timestamps
        .map(|t| TimestampColumn::extract(&t))
        .transpose()?;
    let value_ranges = values.ranges(length)?;
    if value_ranges.iter().any(Option::is_none) {
        return Err(invalid("value", "the value column has nulls"));
    }
    let key_ranges = keys.as_ref().map(|k| k.ranges(length)).transpose()?;
    let stamps = timestamps.as_ref().map(|t| t.values(length)).transpose()?;
    let value_data = values.data.as_slice();
    let key_data = keys.as_ref().map(|k| k.data.as_slice());
    let records: Vec<Append<'_>> = (0..length)
        .map(|i| Append {
            value: value_ranges[i].clone().map_or(&[][..], |r| &value_data[r]),
            key: match (&key_ranges, key_data) {
                (Some(ranges), Some(data)) => ranges[i].clone().map(|r| &data[r]),
                _ => None,
            },
            timestamp_us: stamps.as_ref().and_then(|s| s[i]),
        })
        .collect();
    detached(py, || sink(&records))
}

//! Arrow batches: `read_arrow` fills raw Arrow buffers from the mapping and `append_arrow`
//! reads them, both without a Python object per record. `tidelog/_arrow.py` wraps and
//! unwraps the buffers with pyarrow.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use tidelog::{Append, ReaderOptions, StartPosition, Wal};

use crate::buffer::InputBytes;
use crate::call::detached;
use crate::columns::{BINARY_BYTES_MAX, Building, Columns, Row, schema};
use crate::error::to_py;
use crate::stream::PyArrowBatch;

#[cfg(target_endian = "big")]
compile_error!("the Arrow buffers are read little-endian; big-endian hosts are not supported");

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

/// A `read_arrow` of at least this many records builds its two halves on two threads.
const SPLIT_RECORDS_MIN: u64 = 16_384;
/// Bytes of keys, values and headers the second half holds at most: past them it stops
/// and the rest is read in turn, so a batch of large records holds at most half as much
/// again while it is built.
const SECOND_HALF_BYTES_MAX: usize = BINARY_BYTES_MAX / 2;

fn collect(
    wal: &Wal,
    topic: &str,
    start: u64,
    end: Option<u64>,
    max_records: Option<u64>,
) -> tidelog::Result<Columns> {
    let mut reader = wal.reader_with(topic, from(start))?;
    let next = reader.position() + reader.lag();
    let end = end.unwrap_or(next).min(next);
    let wanted = end
        .saturating_sub(start)
        .min(max_records.unwrap_or(u64::MAX));
    let _building = Building::enter();
    let helper = if wanted >= SPLIT_RECORDS_MIN {
        Building::helper()
    } else {
        None
    };
    let Some(helper) = helper else {
        let mut columns = Columns::for_records(wanted);
        scan_into(&mut reader, wanted, &mut columns, |_| true)?;
        return Ok(columns);
    };
    // The second half on another thread, with a reader of its own; it stops early once
    // the first half ends short (the batch is full, or a read failed).
    let first = wanted / 2;
    let stop = AtomicBool::new(false);
    let (columns, second) = std::thread::scope(|scope| {
        let second = scope.spawn(|| {
            let _helper = helper;
            let mut reader = wal.reader_with(topic, from(start + first))?;
            let mut columns = Columns::for_records(wanted - first);
            let mut bytes = 0usize;
            let go_on = |row: &Row<'_>| {
                bytes = bytes.saturating_add(row.bytes());
                bytes <= SECOND_HALF_BYTES_MAX && !stop.load(Ordering::Relaxed)
            };
            scan_into(&mut reader, wanted - first, &mut columns, go_on).map(|()| columns)
        });
        let mut columns = Columns::for_records(wanted);
        let first_half = scan_into(&mut reader, first, &mut columns, |_| true);
        if first_half.is_err() || columns.len() as u64 != first {
            stop.store(true, Ordering::Relaxed);
        }
        (first_half.map(|()| columns), second.join())
    });
    let mut columns = columns?;
    if columns.len() as u64 != first {
        // Full before the half: the batch ends there.
        return Ok(columns);
    }
    let joined = match second {
        Ok(Ok(second)) if second.len() as u64 == wanted - first => columns.append(second),
        _ => false,
    };
    if !joined {
        // Failed, short or too large to join: read again in turn, so the batch ends and
        // errors come where they would without the split.
        scan_into(&mut reader, wanted - first, &mut columns, |_| true)?;
    }
    Ok(columns)
}

/// Up to `wanted` more records of `reader` into `columns`, while `go_on` says so for each.
fn scan_into(
    reader: &mut tidelog::Reader,
    wanted: u64,
    columns: &mut Columns,
    mut go_on: impl FnMut(&Row<'_>) -> bool,
) -> tidelog::Result<()> {
    columns.fill_more(wanted, |max, visit| {
        reader.scan(max, |r| {
            let row = Row::local(r);
            go_on(&row) && visit(&row)
        })
    })
}

fn from(offset: u64) -> ReaderOptions {
    ReaderOptions::default().start(StartPosition::Offset(offset))
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
    Columns::fill(wanted, |max, visit| {
        reader.scan_until(end, max, |r| visit(&Row::remote(r)))
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
    batch(helper, topic, c)
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
    batch(helper, topic, c)
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
    batch(helper, &topic, c)
}

/// The `pyarrow.RecordBatch` of `c`, handed over through the Arrow C data interface
/// (its buffers are not copied).
fn batch<'py>(
    helper: &Bound<'py, PyModule>,
    topic: &str,
    c: Columns,
) -> PyResult<Bound<'py, PyAny>> {
    let batch = c
        .into_batch(topic, schema())
        .map_err(|e| invalid("data", e.to_string()))?;
    helper.call_method1("record_batch", (PyArrowBatch::new(batch),))
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

/// The `headers` column (`list<struct<key: string, value: binary>>`), flattened: each
/// row's header count and the keys and values of all rows in order.
struct HeadersColumn {
    /// The counts' slice offset, in elements.
    offset: usize,
    /// One int64 count per row.
    counts: InputBytes<'static>,
    /// Headers in all rows.
    items: usize,
    keys: BinaryColumn,
    values: BinaryColumn,
}

/// `(counts offset, counts, items, key parts, value parts)` from `_arrow._headers_parts`.
type HeaderParts<'py> = (
    usize,
    Bound<'py, PyAny>,
    usize,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
);

impl HeadersColumn {
    fn extract(parts: &Bound<'_, PyAny>) -> PyResult<HeadersColumn> {
        let (offset, counts, items, keys, values): HeaderParts<'_> = parts.extract()?;
        Ok(HeadersColumn {
            offset,
            counts: InputBytes::export(&counts, "headers")?,
            items,
            keys: BinaryColumn::extract("header key", &keys)?,
            values: BinaryColumn::extract("header value", &values)?,
        })
    }

    /// The headers of each of the `length` rows.
    fn headers(&self, length: usize) -> PyResult<Vec<tidelog::Headers>> {
        let counts = self.counts.as_slice();
        if counts.len() < (self.offset + length) * 8 {
            return Err(invalid("headers", "counts buffer is too short"));
        }
        let keys = self.keys.ranges(self.items)?;
        let values = self.values.ranges(self.items)?;
        let (key_data, value_data) = (self.keys.data.as_slice(), self.values.data.as_slice());
        let mut at = 0usize;
        let mut out = Vec::with_capacity(length);
        for i in 0..length {
            let p = (self.offset + i) * 8;
            let mut b = [0u8; 8];
            b.copy_from_slice(&counts[p..p + 8]);
            let n = usize::try_from(i64::from_le_bytes(b))
                .ok()
                .filter(|n| at + n <= self.items)
                .ok_or_else(|| invalid("headers", "header counts exceed the headers"))?;
            let mut h = tidelog::Headers::new();
            for j in at..at + n {
                let key = keys[j]
                    .clone()
                    .ok_or_else(|| invalid("headers", "a header key is null"))?;
                let key = std::str::from_utf8(&key_data[key])
                    .map_err(|_| invalid("headers", "a header key is not UTF-8"))?;
                let value = values[j].clone().map(|r| &value_data[r]);
                h.push(key, value).map_err(to_py)?;
            }
            at += n;
            out.push(h);
        }
        if at != self.items {
            return Err(invalid("headers", "header counts do not cover the headers"));
        }
        Ok(out)
    }
}

/// `(length, value parts, key parts, timestamp parts, header parts)` from
/// `_arrow.append_parts`.
type AppendParts<'py> = (
    usize,
    Bound<'py, PyAny>,
    Option<Bound<'py, PyAny>>,
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
    let (length, values, keys, timestamps, headers): AppendParts<'_> = parts.extract()?;
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
    let headers = headers
        .map(|h| HeadersColumn::extract(&h)?.headers(length))
        .transpose()?;
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
            headers: headers.as_ref().and_then(|h| h[i].block()),
        })
        .collect();
    detached(py, || sink(&records))
}

//! The Arrow columns of records as `read_arrow` and `scan` return them: one builder, one
//! schema. Rows are pushed as a reader visits them; a batch is built without a copy of the
//! column buffers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::{
    ArrayRef, BinaryArray, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{Buffer, NullBuffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// Arrow `binary` and `list` offsets are i32: one batch holds at most this many bytes in
/// one binary column, and this many headers.
pub const BINARY_BYTES_MAX: usize = i32::MAX as usize;
/// Rows in one batch: the `topic` column (a string column) repeats the name in each.
pub const ROWS_MAX: usize = BINARY_BYTES_MAX / tidelog::TOPIC_NAME_MAX;

/// Threads of this process building columns (each `read_arrow` call, each `scan` batch, and
/// their helpers): a second builder for one batch starts only while a core is free for it,
/// so concurrent readers do not crowd the cores.
static BUILDERS: AtomicUsize = AtomicUsize::new(0);

/// One builder counted in [`BUILDERS`] while it lives.
#[derive(Debug)]
pub struct Building(());

impl Building {
    /// The calling thread, building.
    pub fn enter() -> Building {
        BUILDERS.fetch_add(1, Ordering::AcqRel);
        Building(())
    }

    /// A helper builder, when the builders already at work leave a core free.
    pub fn helper() -> Option<Building> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        BUILDERS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cores).then_some(n + 1)
            })
            .ok()
            .map(|_| Building(()))
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        BUILDERS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One record as a reader hands it over.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub offset: u64,
    pub timestamp_us: u64,
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    pub headers: Option<tidelog::HeaderBlock<'a>>,
}

impl<'a> Row<'a> {
    pub fn local(r: &tidelog::RecordRef<'a>) -> Row<'a> {
        Row {
            offset: r.offset,
            timestamp_us: r.timestamp_us,
            key: r.key,
            value: r.value,
            headers: r.headers,
        }
    }

    pub fn remote(r: &tidelog::RemoteRecordRef<'a>) -> Row<'a> {
        Row {
            offset: r.offset,
            timestamp_us: r.timestamp_us,
            key: r.key,
            value: r.value,
            headers: r.headers,
        }
    }

    /// Bytes of its key, value and headers.
    pub fn bytes(&self) -> usize {
        let headers = self.headers.map_or(0, |h| h.as_bytes().len());
        self.value.len() + self.key.map_or(0, <[u8]>::len) + headers
    }

    /// Bytes of its largest column entry (for the error when not even one row fits).
    pub fn largest(&self) -> usize {
        let headers = self.headers.map_or(0, |h| h.as_bytes().len());
        self.value
            .len()
            .max(self.key.map_or(0, <[u8]>::len))
            .max(headers)
    }
}

/// The `headers` column's element: `struct<key: string, value: binary>`.
fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

fn header_item() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Struct(header_fields()), false))
}

/// The schema of every batch: topic, offset, timestamp, key, value, headers.
pub fn schema() -> SchemaRef {
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
        Field::new("headers", DataType::List(header_item()), false),
    ]))
}

/// A binary-like column as it fills. While every element is null (a topic without keys)
/// it holds nothing but its length, so such a column costs nothing per row.
#[derive(Debug)]
struct Binary {
    /// Empty while every element so far is null.
    offsets: Vec<i32>,
    data: Vec<u8>,
    /// Allocates a bitmap only once an element is null after a value.
    valid: NullBufferBuilder,
    len: usize,
    /// Rows the offsets are reserved for once the first value comes.
    capacity: usize,
}

impl Binary {
    fn new(capacity: usize) -> Binary {
        Binary {
            offsets: Vec::new(),
            data: Vec::new(),
            valid: NullBufferBuilder::new(0),
            len: 0,
            capacity,
        }
    }

    fn fits(&self, bytes: usize) -> bool {
        self.data.len() + bytes <= BINARY_BYTES_MAX
    }

    /// Before the first value: the nulls so far become empty, null elements.
    fn hold_values(&mut self) {
        if self.offsets.is_empty() {
            self.offsets.reserve(self.capacity.max(self.len) + 1);
            self.offsets.resize(self.len + 1, 0);
            self.valid.append_n_nulls(self.len);
        }
    }

    #[inline(always)]
    fn push(&mut self, item: Option<&[u8]>) {
        match item {
            Some(bytes) => {
                self.hold_values();
                self.data.extend_from_slice(bytes);
                self.valid.append_non_null();
            }
            None if self.offsets.is_empty() => {
                self.len += 1;
                return;
            }
            None => self.valid.append_null(),
        }
        self.len += 1;
        // Below BINARY_BYTES_MAX: callers check `fits` first.
        self.offsets
            .push(i32::try_from(self.data.len()).unwrap_or(i32::MAX));
    }

    /// Whether `other`'s elements fit after these.
    fn fits_after(&self, other: &Binary) -> bool {
        self.fits(other.data.len())
    }

    /// `other`'s elements after these (`fits_after` checked).
    fn append(&mut self, mut other: Binary) {
        if other.offsets.is_empty() {
            if !self.offsets.is_empty() {
                // Null elements: empty, each ending where the last one did.
                let end = self.offsets.last().copied().unwrap_or(0);
                self.offsets.extend(std::iter::repeat_n(end, other.len));
                self.valid.append_n_nulls(other.len);
            }
            self.len += other.len;
            return;
        }
        self.hold_values();
        // Below BINARY_BYTES_MAX: `fits_after` checked.
        let base = i32::try_from(self.data.len()).unwrap_or(i32::MAX);
        self.data.extend_from_slice(&other.data);
        self.offsets
            .extend(other.offsets[1..].iter().map(|o| o + base));
        match other.valid.finish() {
            Some(nulls) => self.valid.append_buffer(&nulls),
            None => self.valid.append_n_non_nulls(other.len),
        }
        self.len += other.len;
    }

    /// Its buffers; `None` while every element is null.
    fn parts(mut self) -> Option<(OffsetBuffer<i32>, Buffer, Option<NullBuffer>)> {
        if self.offsets.is_empty() {
            return None;
        }
        debug_assert_eq!(self.offsets.len(), self.len + 1);
        let nulls = self.valid.finish();
        Some((
            OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
            Buffer::from_vec(self.data),
            nulls,
        ))
    }

    fn into_binary(self) -> Result<BinaryArray, ArrowError> {
        let len = self.len;
        match self.parts() {
            Some((offsets, data, nulls)) => BinaryArray::try_new(offsets, data, nulls),
            None => Ok(BinaryArray::new_null(len)),
        }
    }

    fn into_string(self) -> Result<StringArray, ArrowError> {
        let len = self.len;
        match self.parts() {
            Some((offsets, data, nulls)) => StringArray::try_new(offsets, data, nulls),
            None => Ok(StringArray::new_null(len)),
        }
    }
}

/// The `topic` column: `topic` in each of `rows` rows, built from whole buffers.
fn repeated(topic: &str, rows: usize) -> Result<StringArray, ArrowError> {
    let too_long = || ArrowError::InvalidArgumentError(format!("{rows} rows of topic {topic}"));
    let data = topic.repeat(rows);
    let last = i32::try_from(data.len()).map_err(|_| too_long())?;
    let step = i32::try_from(topic.len()).map_err(|_| too_long())?;
    let offsets: Vec<i32> = (0..=rows).map(|i| (i as i32) * step).collect();
    debug_assert_eq!(offsets.last(), Some(&last));
    StringArray::try_new(
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        Buffer::from_vec(data.into_bytes()),
        None,
    )
}

/// The columns of one batch as it fills.
#[derive(Debug)]
pub struct Columns {
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    keys: Binary,
    values: Binary,
    /// Headers of each row: `header_offsets[i]..header_offsets[i + 1]` of the two below.
    /// Empty while no row has headers.
    header_offsets: Vec<i32>,
    header_keys: Binary,
    header_values: Binary,
}

impl Columns {
    /// Empty columns for `wanted` records (rows reserved for at most 2^20 of them).
    pub fn for_records(wanted: u64) -> Columns {
        Columns::with_capacity(usize::try_from(wanted).unwrap_or(usize::MAX).min(1 << 20))
    }

    /// Empty columns for about `capacity` rows.
    pub fn with_capacity(capacity: usize) -> Columns {
        Columns {
            offsets: Vec::with_capacity(capacity),
            timestamps: Vec::with_capacity(capacity),
            keys: Binary::new(capacity),
            values: Binary::new(capacity),
            header_offsets: Vec::new(),
            header_keys: Binary::new(0),
            header_values: Binary::new(0),
        }
    }

    /// Adds a row; false (nothing added) once a column would pass its limit: the batch is
    /// full, and the caller continues from this row.
    #[inline(always)]
    pub fn push(&mut self, row: &Row<'_>) -> bool {
        let header_bytes = row.headers.map_or(0, |h| h.as_bytes().len());
        if !self.values.fits(row.value.len())
            || !self.keys.fits(row.key.map_or(0, <[u8]>::len))
            || !self.header_keys.fits(header_bytes)
            || !self.header_values.fits(header_bytes)
            // A record holds at most HEADER_COUNT_MAX headers: no parse needed to bound them.
            || self.header_keys.len + tidelog::HEADER_COUNT_MAX > BINARY_BYTES_MAX
            // The topic column repeats the name in every row.
            || self.offsets.len() >= ROWS_MAX
        {
            return false;
        }
        if self.values.data.capacity() == 0 {
            // Sized from the first row: most topics hold records of similar size.
            let wanted = self.offsets.capacity().max(1);
            self.values
                .data
                .reserve(row.value.len().saturating_mul(wanted).min(BINARY_BYTES_MAX));
        }
        let rows = self.offsets.len();
        // Offsets and timestamps are u64 on disk and below 2^63 in practice; Arrow has int64.
        self.offsets
            .push(i64::try_from(row.offset).unwrap_or(i64::MAX));
        self.timestamps
            .push(i64::try_from(row.timestamp_us).unwrap_or(i64::MAX));
        self.keys.push(row.key);
        self.values.push(Some(row.value));
        if let Some(headers) = row.headers {
            if self.header_offsets.is_empty() {
                // The first row with headers: the rows before it have none.
                self.header_offsets.resize(rows + 1, 0);
            }
            for (key, value) in headers.iter() {
                self.header_keys.push(Some(key.as_bytes()));
                self.header_values.push(value);
            }
        }
        if !self.header_offsets.is_empty() {
            // Below BINARY_BYTES_MAX headers: checked above.
            self.header_offsets
                .push(i32::try_from(self.header_keys.len).unwrap_or(i32::MAX));
        }
        true
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// The columns of up to `wanted` records that `scan` visits (its visitor returns false
    /// once a record does not fit: that record is left for the next batch); `LimitExceeded`
    /// when not even the first fits.
    pub fn fill(
        wanted: u64,
        scan: impl FnOnce(usize, &mut dyn FnMut(&Row<'_>) -> bool) -> tidelog::Result<usize>,
    ) -> tidelog::Result<Columns> {
        let mut c = Columns::for_records(wanted);
        c.fill_more(wanted, scan)?;
        Ok(c)
    }

    /// As [`Columns::fill`], after the rows these hold: `LimitExceeded` only when they hold
    /// none.
    pub fn fill_more(
        &mut self,
        wanted: u64,
        scan: impl FnOnce(usize, &mut dyn FnMut(&Row<'_>) -> bool) -> tidelog::Result<usize>,
    ) -> tidelog::Result<()> {
        let max = usize::try_from(wanted).unwrap_or(usize::MAX);
        let mut refused = None;
        scan(max, &mut |row| {
            let pushed = self.push(row);
            if !pushed {
                refused = Some(row.largest());
            }
            pushed
        })?;
        match refused {
            Some(bytes) if self.len() == 0 => Err(too_large(bytes)),
            _ => Ok(()),
        }
    }

    /// Appends `other`'s rows (the records after these) when every column has room for
    /// them, as pushing them one by one would have; false (nothing appended) when not.
    pub fn append(&mut self, other: Columns) -> bool {
        let fits = self.len() + other.len() <= ROWS_MAX
            && self.values.fits_after(&other.values)
            && self.keys.fits_after(&other.keys)
            && self.header_keys.fits_after(&other.header_keys)
            && self.header_values.fits_after(&other.header_values)
            && self.header_keys.len + other.header_keys.len + tidelog::HEADER_COUNT_MAX
                <= BINARY_BYTES_MAX;
        if !fits {
            return false;
        }
        let rows = self.len();
        let headers_before = self.header_keys.len;
        if !(self.header_offsets.is_empty() && other.header_offsets.is_empty()) {
            if self.header_offsets.is_empty() {
                self.header_offsets.resize(rows + 1, 0);
            }
            // Below BINARY_BYTES_MAX headers: checked above.
            let base = i32::try_from(headers_before).unwrap_or(i32::MAX);
            match other.header_offsets.is_empty() {
                true => self
                    .header_offsets
                    .extend(std::iter::repeat_n(base, other.len())),
                false => self
                    .header_offsets
                    .extend(other.header_offsets[1..].iter().map(|o| o + base)),
            }
        }
        self.offsets.extend_from_slice(&other.offsets);
        self.timestamps.extend_from_slice(&other.timestamps);
        self.keys.append(other.keys);
        self.values.append(other.values);
        self.header_keys.append(other.header_keys);
        self.header_values.append(other.header_values);
        true
    }

    /// The batch of `topic`'s rows, of `schema` (the one [`schema`] returns).
    pub fn into_batch(self, topic: &str, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
        let n = self.len();
        let header_struct = StructArray::try_new(
            header_fields(),
            vec![
                Arc::new(self.header_keys.into_string()?) as ArrayRef,
                Arc::new(self.header_values.into_binary()?),
            ],
            None,
        )?;
        let header_offsets = match self.header_offsets {
            none if none.is_empty() => vec![0; n + 1],
            some => some,
        };
        let headers = ListArray::try_new(
            header_item(),
            OffsetBuffer::new(ScalarBuffer::from(header_offsets)),
            Arc::new(header_struct),
            None,
        )?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(repeated(topic, n)?),
            Arc::new(Int64Array::new(ScalarBuffer::from(self.offsets), None)),
            Arc::new(
                TimestampMicrosecondArray::new(ScalarBuffer::from(self.timestamps), None)
                    .with_timezone("UTC"),
            ),
            Arc::new(self.keys.into_binary()?),
            Arc::new(self.values.into_binary()?),
            Arc::new(headers),
        ];
        RecordBatch::try_new(schema, columns)
    }
}

/// `LimitExceeded` for a row that did not fit even in an empty batch.
pub fn too_large(bytes: usize) -> tidelog::Error {
    tidelog::Error::LimitExceeded {
        limit: "arrow binary column bytes",
        value: bytes as u64,
        max: BINARY_BYTES_MAX as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    #[test]
    fn rows_with_and_without_headers_build_one_batch() {
        let h = tidelog::Headers::from_pairs([("a", Some(&b"1"[..])), ("b", None)]).expect("valid");
        let mut c = Columns::with_capacity(2);
        let rows = [
            Row {
                offset: 1,
                timestamp_us: 2,
                key: None,
                value: b"x",
                headers: None,
            },
            Row {
                offset: 2,
                timestamp_us: 3,
                key: Some(b"k"),
                value: b"yy",
                headers: h.block(),
            },
        ];
        for r in &rows {
            assert!(c.push(r));
        }
        let batch = c.into_batch("t", schema()).expect("batch");
        assert_eq!(batch.num_rows(), 2);
        let headers = batch
            .column(5)
            .as_any()
            .downcast_ref::<ListArray>()
            .expect("a list");
        assert_eq!(headers.value_length(0), 0);
        assert_eq!(headers.value_length(1), 2);
        let items = headers.value(1);
        let items = items
            .as_any()
            .downcast_ref::<StructArray>()
            .expect("a struct");
        assert!(items.column(1).is_null(1));
        assert_eq!(batch.column(3).null_count(), 1);
    }

    /// The rows of `batch` as (topic, offset, key, value, headers).
    #[allow(clippy::type_complexity)]
    fn rows_of(
        batch: &RecordBatch,
    ) -> Vec<(
        String,
        i64,
        Option<Vec<u8>>,
        Vec<u8>,
        Vec<(String, Option<Vec<u8>>)>,
    )> {
        let col = |i| batch.column(i).as_any();
        let topics = col(0).downcast_ref::<StringArray>().expect("strings");
        let offsets = col(1).downcast_ref::<Int64Array>().expect("ints");
        let keys = col(3).downcast_ref::<BinaryArray>().expect("binary");
        let values = col(4).downcast_ref::<BinaryArray>().expect("binary");
        let headers = col(5).downcast_ref::<ListArray>().expect("list");
        (0..batch.num_rows())
            .map(|i| {
                let items = headers.value(i);
                let items = items
                    .as_any()
                    .downcast_ref::<StructArray>()
                    .expect("struct");
                let hk = items.column(0).as_any().downcast_ref::<StringArray>();
                let hv = items.column(1).as_any().downcast_ref::<BinaryArray>();
                let (hk, hv) = (hk.expect("strings"), hv.expect("binary"));
                let hs = (0..items.len())
                    .map(|j| {
                        let v = (!hv.is_null(j)).then(|| hv.value(j).to_vec());
                        (hk.value(j).to_owned(), v)
                    })
                    .collect();
                let key = (!keys.is_null(i)).then(|| keys.value(i).to_vec());
                let row = (topics.value(i).to_owned(), offsets.value(i));
                (row.0, row.1, key, values.value(i).to_vec(), hs)
            })
            .collect()
    }

    #[test]
    fn columns_without_keys_or_headers_until_some_row_has_them_read_back_row_by_row() {
        let h = tidelog::Headers::from_pairs([("a", Some(&b"1"[..])), ("b", None)]).expect("valid");
        let hs = vec![
            ("a".to_owned(), Some(b"1".to_vec())),
            ("b".to_owned(), None),
        ];
        // Each shape: whether row i has a key and headers (bit 0: key, bit 1: headers).
        let shapes: [&[u8]; 7] = [
            &[],
            &[0, 0, 0],
            &[1, 1, 1],
            &[0, 0, 1, 0],
            &[0, 2, 0, 2],
            &[3, 0, 0],
            &[0, 0, 0, 3],
        ];
        for shape in shapes {
            let mut c = Columns::with_capacity(2);
            let mut want = Vec::new();
            let stored: Vec<(Vec<u8>, Vec<u8>)> = (0..shape.len())
                .map(|i| (format!("k{i}").into_bytes(), vec![i as u8; i]))
                .collect();
            for (i, &bits) in shape.iter().enumerate() {
                let (key, value) = &stored[i];
                let row = Row {
                    offset: 10 + i as u64,
                    timestamp_us: i as u64,
                    key: (bits & 1 != 0).then_some(&key[..]),
                    value,
                    headers: if bits & 2 != 0 { h.block() } else { None },
                };
                assert!(c.push(&row));
                let wanted_headers = if bits & 2 != 0 {
                    hs.clone()
                } else {
                    Vec::new()
                };
                let wanted_key = (bits & 1 != 0).then(|| key.clone());
                let row = ("topic".to_owned(), 10 + i as i64, wanted_key, value.clone());
                want.push((row.0, row.1, row.2, row.3, wanted_headers));
            }
            let batch = c.into_batch("topic", schema()).expect("batch");
            assert_eq!(rows_of(&batch), want, "shape {shape:?}");
        }
    }

    /// Goal: columns built in two parts and joined (`read_arrow`'s halves) are the columns
    /// of every row pushed in turn. Method: rows with and without keys and headers, split at
    /// every point.
    #[test]
    fn two_parts_joined_are_the_rows_pushed_in_turn() {
        let h = tidelog::Headers::from_pairs([("a", Some(&b"1"[..])), ("b", None)]).expect("valid");
        // Whether row i has a key and headers (bit 0: key, bit 1: headers).
        let shapes: [&[u8]; 6] = [
            &[0, 0, 0, 0],
            &[1, 1, 0, 1],
            &[0, 0, 2, 0, 3],
            &[3, 0, 0, 0],
            &[0, 0, 0, 3],
            &[2, 1, 0, 3, 0, 2],
        ];
        for shape in shapes {
            let keys: Vec<Vec<u8>> = (0..shape.len())
                .map(|i| format!("k{i}").into_bytes())
                .collect();
            let values: Vec<Vec<u8>> = (0..shape.len()).map(|i| vec![i as u8; i]).collect();
            let rows: Vec<Row<'_>> = shape
                .iter()
                .enumerate()
                .map(|(i, &bits)| Row {
                    offset: i as u64,
                    timestamp_us: 100 + i as u64,
                    key: (bits & 1 != 0).then_some(&keys[i][..]),
                    value: &values[i],
                    headers: if bits & 2 != 0 { h.block() } else { None },
                })
                .collect();
            let pushed = |rows: &[Row<'_>]| {
                let mut c = Columns::with_capacity(1);
                for row in rows {
                    assert!(c.push(row));
                }
                c
            };
            let whole = pushed(&rows).into_batch("t", schema()).expect("batch");
            for split in 0..=rows.len() {
                let mut joined = pushed(&rows[..split]);
                assert!(joined.append(pushed(&rows[split..])));
                let joined = joined.into_batch("t", schema()).expect("batch");
                assert_eq!(rows_of(&joined), rows_of(&whole), "{shape:?} at {split}");
                assert_eq!(joined, whole, "{shape:?} at {split}");
            }
        }
    }
}

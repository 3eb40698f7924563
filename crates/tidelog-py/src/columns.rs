//! The Arrow columns of records as `read_arrow` and `scan` return them: one builder, one
//! schema. Rows are pushed as a reader visits them; a batch is built without a copy of the
//! column buffers.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// Arrow `binary` and `list` offsets are i32: one batch holds at most this many bytes in
/// one binary column, and this many headers.
pub const BINARY_BYTES_MAX: usize = i32::MAX as usize;

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

/// A binary-like column as it fills.
#[derive(Debug)]
struct Binary {
    offsets: Vec<i32>,
    data: Vec<u8>,
    /// One flag per element; `None` until the first null.
    valid: Option<Vec<bool>>,
    len: usize,
}

impl Binary {
    fn new(capacity: usize) -> Binary {
        let mut offsets = Vec::with_capacity(capacity + 1);
        offsets.push(0);
        Binary {
            offsets,
            data: Vec::new(),
            valid: None,
            len: 0,
        }
    }

    fn fits(&self, bytes: usize) -> bool {
        self.data.len() + bytes <= BINARY_BYTES_MAX
    }

    fn push(&mut self, item: Option<&[u8]>) {
        match item {
            Some(bytes) => {
                self.data.extend_from_slice(bytes);
                if let Some(valid) = &mut self.valid {
                    valid.push(true);
                }
            }
            None => {
                let len = self.len;
                self.valid
                    .get_or_insert_with(|| vec![true; len])
                    .push(false);
            }
        }
        self.len += 1;
        // Below BINARY_BYTES_MAX: callers check `fits` first.
        self.offsets
            .push(i32::try_from(self.data.len()).unwrap_or(i32::MAX));
    }

    fn parts(self) -> (OffsetBuffer<i32>, Buffer, Option<NullBuffer>) {
        (
            OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
            Buffer::from_vec(self.data),
            self.valid.map(NullBuffer::from),
        )
    }

    fn into_binary(self) -> Result<BinaryArray, ArrowError> {
        let (offsets, data, nulls) = self.parts();
        BinaryArray::try_new(offsets, data, nulls)
    }

    fn into_string(self) -> Result<StringArray, ArrowError> {
        let (offsets, data, nulls) = self.parts();
        StringArray::try_new(offsets, data, nulls)
    }
}

/// The columns of one batch as it fills.
#[derive(Debug)]
pub struct Columns {
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    keys: Binary,
    values: Binary,
    /// Headers of each row: `header_offsets[i]..header_offsets[i + 1]` of the two below.
    header_offsets: Vec<i32>,
    header_keys: Binary,
    header_values: Binary,
}

impl Columns {
    /// Empty columns for about `capacity` rows.
    pub fn with_capacity(capacity: usize) -> Columns {
        let mut header_offsets = Vec::with_capacity(capacity + 1);
        header_offsets.push(0);
        Columns {
            offsets: Vec::with_capacity(capacity),
            timestamps: Vec::with_capacity(capacity),
            keys: Binary::new(capacity),
            values: Binary::new(capacity),
            header_offsets,
            header_keys: Binary::new(0),
            header_values: Binary::new(0),
        }
    }

    /// Adds a row; false (nothing added) once a column would pass its limit: the batch is
    /// full, and the caller continues from this row.
    pub fn push(&mut self, row: &Row<'_>) -> bool {
        let header_bytes = row.headers.map_or(0, |h| h.as_bytes().len());
        if !self.values.fits(row.value.len())
            || !self.keys.fits(row.key.map_or(0, <[u8]>::len))
            || !self.header_keys.fits(header_bytes)
            || !self.header_values.fits(header_bytes)
            // A record holds at most HEADER_COUNT_MAX headers: no parse needed to bound them.
            || self.header_keys.len + tidelog::HEADER_COUNT_MAX > BINARY_BYTES_MAX
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
        // Offsets and timestamps are u64 on disk and below 2^63 in practice; Arrow has int64.
        self.offsets
            .push(i64::try_from(row.offset).unwrap_or(i64::MAX));
        self.timestamps
            .push(i64::try_from(row.timestamp_us).unwrap_or(i64::MAX));
        self.keys.push(row.key);
        self.values.push(Some(row.value));
        if let Some(headers) = row.headers {
            for (key, value) in headers.iter() {
                self.header_keys.push(Some(key.as_bytes()));
                self.header_values.push(value);
            }
        }
        // Below BINARY_BYTES_MAX headers: checked above.
        self.header_offsets
            .push(i32::try_from(self.header_keys.len).unwrap_or(i32::MAX));
        true
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
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
        let headers = ListArray::try_new(
            header_item(),
            OffsetBuffer::new(ScalarBuffer::from(self.header_offsets)),
            Arc::new(header_struct),
            None,
        )?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(topic, n))),
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
}

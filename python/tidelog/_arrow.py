"""pyarrow glue for `Wal.read_arrow` and `Wal.append_arrow`.

The Rust side walks the records and fills (or reads) the raw Arrow buffers; this module only
wraps buffers into arrays and unwraps arrays into buffers, a constant number of calls per
batch, never one Python object per record.
"""

from __future__ import annotations

from typing import Any

try:
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("tidelog's Arrow methods need pyarrow: pip install 'tidelog[arrow]'") from e

from tidelog.exceptions import InvalidArgumentError

SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("key", pa.binary(), nullable=True),
        pa.field("value", pa.binary(), nullable=False),
    ]
)

_BINARY_VIEWS = {
    pa.binary(): pa.binary(),
    pa.string(): pa.binary(),
    pa.large_binary(): pa.large_binary(),
    pa.large_string(): pa.large_binary(),
}


def record_batch(
    topic: str,
    length: int,
    offsets: Any,
    timestamps: Any,
    key_validity: Any,
    key_offsets: Any,
    key_data: Any,
    value_offsets: Any,
    value_data: Any,
) -> pa.RecordBatch:
    """Builds the read_arrow batch from buffers filled in Rust (zero copy)."""
    buf = pa.py_buffer
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), length),
        pa.Array.from_buffers(pa.int64(), length, [None, buf(offsets)]),
        pa.Array.from_buffers(SCHEMA.field("timestamp").type, length, [None, buf(timestamps)]),
        pa.Array.from_buffers(
            pa.binary(),
            length,
            [None if key_validity is None else buf(key_validity), buf(key_offsets), buf(key_data)],
        ),
        pa.Array.from_buffers(pa.binary(), length, [None, buf(value_offsets), buf(value_data)]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _binary_parts(array: pa.Array, column: str) -> tuple[Any, ...]:
    """(offset, validity, offsets, data, wide) of a binary-like array, without copying."""
    view_type = _BINARY_VIEWS.get(array.type)
    if view_type is None:
        raise TypeError(
            f"{column} must be a binary or string array (or their large variants), not {array.type}"
        )
    array = array.view(view_type)
    validity, offsets, data = array.buffers()
    if data is None:  # every value empty
        data = pa.py_buffer(b"")
    wide = view_type == pa.large_binary()
    return (array.offset, validity if array.null_count else None, offsets, data, wide)


def _timestamp_parts(array: pa.Array) -> tuple[Any, ...]:
    """(offset, validity, microseconds as int64) of a timestamp or integer array."""
    if pa.types.is_timestamp(array.type):
        array = pc.cast(array, pa.timestamp("us", tz=array.type.tz)).view(pa.int64())
    elif pa.types.is_integer(array.type):
        array = pc.cast(array, pa.int64())
    else:
        raise TypeError(f"timestamp must be a timestamp or integer array, not {array.type}")
    validity, values = array.buffers()
    return (array.offset, validity if array.null_count else None, values)


def _column(data: Any, name: str) -> pa.Array | None:
    index = data.schema.get_field_index(name)
    if index < 0:
        return None
    column = data.column(index)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def append_parts(data: Any) -> tuple[int, tuple[Any, ...], Any, Any]:
    """Unwraps append_arrow input to (length, value parts, key parts | None,
    timestamp parts | None)."""
    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    if isinstance(data, pa.Array):
        return (len(data), _binary_parts(data, "value"), None, None)
    if isinstance(data, (pa.RecordBatch, pa.Table)):
        values = _column(data, "value")
        if values is None:
            raise InvalidArgumentError(
                "invalid data: append_arrow needs a 'value' column",
                name="data",
                reason="no 'value' column",
            )
        keys = _column(data, "key")
        timestamps = _column(data, "timestamp")
        return (
            len(values),
            _binary_parts(values, "value"),
            None if keys is None else _binary_parts(keys, "key"),
            None if timestamps is None else _timestamp_parts(timestamps),
        )
    raise TypeError(
        "append_arrow takes a pyarrow Array, ChunkedArray, RecordBatch or Table, "
        f"not {type(data).__name__}"
    )

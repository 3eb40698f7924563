"""pyarrow glue for `Wal.read_arrow` and `Wal.append_arrow`.

The Rust side walks the records and builds the batch (handed over through the Arrow C data
interface), or reads the raw Arrow buffers of an appended one; this module only imports
batches and unwraps arrays into buffers, a constant number of calls per batch, never one
Python object per record.
"""

from __future__ import annotations

from typing import Any

try:
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("tidelog's Arrow methods need pyarrow: pip install 'tidelog[arrow]'") from e

from tidelog.exceptions import InvalidArgumentError

HEADER = pa.struct(
    [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary(), nullable=True)]
)

SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("key", pa.binary(), nullable=True),
        pa.field("value", pa.binary(), nullable=False),
        pa.field("headers", pa.list_(pa.field("item", HEADER, nullable=False)), nullable=False),
    ]
)

_BINARY_VIEWS = {
    pa.binary(): pa.binary(),
    pa.string(): pa.binary(),
    pa.large_binary(): pa.large_binary(),
    pa.large_string(): pa.large_binary(),
}


def record_batch(batch: Any) -> pa.RecordBatch:
    """The read_arrow batch built in Rust, imported through the Arrow C data interface
    (no copy of its buffers)."""
    return pa.record_batch(batch)


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


def _headers_parts(array: pa.Array) -> tuple[Any, ...]:
    """(counts offset, int64 header count per row, headers in all rows, key parts, value
    parts) of a list<struct<key, value>> array; a null list counts as no headers."""
    kind = array.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(
        kind.value_type
    ):
        raise TypeError(f"headers must be a list<struct<key: string, value: binary>>, not {kind}")
    item = kind.value_type
    key_at, value_at = item.get_field_index("key"), item.get_field_index("value")
    if key_at < 0 or value_at < 0:
        raise TypeError(f"headers items need 'key' and 'value' fields, not {item}")
    counts = pc.cast(pc.fill_null(pc.list_value_length(array), 0), pa.int64())
    items = array.flatten()
    fields = items.flatten()
    return (
        counts.offset,
        counts.buffers()[1],
        len(items),
        _binary_parts(fields[key_at], "header key"),
        _binary_parts(fields[value_at], "header value"),
    )


def _column(data: Any, name: str) -> pa.Array | None:
    index = data.schema.get_field_index(name)
    if index < 0:
        return None
    column = data.column(index)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def append_parts(data: Any) -> tuple[int, tuple[Any, ...], Any, Any, Any]:
    """Unwraps append_arrow input to (length, value parts, key parts | None,
    timestamp parts | None, header parts | None)."""
    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    if isinstance(data, pa.Array):
        return (len(data), _binary_parts(data, "value"), None, None, None)
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
        headers = _column(data, "headers")
        return (
            len(values),
            _binary_parts(values, "value"),
            None if keys is None else _binary_parts(keys, "key"),
            None if timestamps is None else _timestamp_parts(timestamps),
            None if headers is None else _headers_parts(headers),
        )
    raise TypeError(
        "append_arrow takes a pyarrow Array, ChunkedArray, RecordBatch or Table, "
        f"not {type(data).__name__}"
    )

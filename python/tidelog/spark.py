"""A Spark data source for tidelog (format ``"tidelog"``): batch and streaming reads.

Options and rows follow Spark's Kafka source::

    import tidelog.spark
    tidelog.spark.register(spark)        # optional: the pyspark_tidelog module registers it too
    df = (spark.read.format("tidelog")
          .option("subscribe", "orders,payments")
          .option("startingOffsets", "earliest")          # or "latest", or '{"orders": 42}'
          .option("endingOffsets", '{"orders": 100}')     # exclusive; batch reads only
          .load("data"))
    # -> key BINARY, value BINARY, topic STRING, offset BIGINT, timestamp TIMESTAMP

Each Spark task opens the directory read-only in its own process (no lock, so a writer may
hold it meanwhile) and yields Arrow record batches built in Rust: no Python object per record.
Streams (``spark.readStream``) keep ``{"topic": next offset}`` as their offsets, honour
``maxOffsetsPerTrigger`` and ``trigger(availableNow=True)``, and resume from their checkpoint.
Writes are not supported yet.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import tidelog
from tidelog.exceptions import InvalidArgumentError, UnknownTopicError

__all__ = ["ARROW_SCHEMA", "FORMAT", "SCHEMA", "TidelogDataSource", "register"]

FORMAT = "tidelog"
SCHEMA = "key BINARY, value BINARY, topic STRING, offset BIGINT, timestamp TIMESTAMP"
# SCHEMA built by hand: parsing DDL needs a SparkContext, which Python workers lack.
_STRUCT = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
)
# What Spark accepts for SCHEMA: the same names, order, types and nullability, exactly.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)

MAX_RECORDS_PER_PARTITION_DEFAULT = 100_000
# Rows per Arrow batch a task yields (Spark's own Arrow batches default to 10000 rows).
MAX_RECORDS_PER_BATCH_DEFAULT = 10_000
# Kafka's conventions inside offset JSON.
EARLIEST, LATEST = -2, -1


def register(spark: SparkSession) -> None:
    """Registers the data source as format "tidelog" in this session. Not needed where the
    `pyspark_tidelog` module is installed (Spark finds it), but harmless."""
    spark.dataSource.register(TidelogDataSource)


def _invalid(option: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"tidelog data source: {message}", name=option, reason=message)


@overload
def _positive_int(options: Mapping[str, str], option: str, default: int) -> int: ...
@overload
def _positive_int(options: Mapping[str, str], option: str, default: None) -> int | None: ...
def _positive_int(options: Mapping[str, str], option: str, default: int | None) -> int | None:
    text = options.get(option.lower())
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise _invalid(
            option, f"option {option} must be a positive integer, not {text!r}"
        ) from None
    if value <= 0:
        raise _invalid(option, f"option {option} must be a positive integer, not {text!r}")
    return value


OffsetSpec = str | dict[str, int]


def _offset_spec(options: Mapping[str, str], option: str, topics: list[str]) -> OffsetSpec | None:
    """The option as "earliest", "latest" or {topic: offset} (EARLIEST/LATEST allowed)."""
    text = options.get(option.lower())
    if text is None:
        return None
    word = str(text).strip().lower()
    if word in ("earliest", "latest"):
        return word
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise _invalid(
            option,
            f'option {option} must be "earliest", "latest" or JSON like {{"topic": 42}}, '
            f"not {text!r} ({e})",
        ) from None
    if not isinstance(parsed, dict):
        raise _invalid(
            option, f'option {option} must be a JSON object like {{"topic": 42}}, not {text!r}'
        )
    for topic, offset in parsed.items():
        if topic not in topics:
            raise _invalid(
                option,
                f"option {option} names topic {topic!r}, which is not subscribed "
                f"(subscribe: {','.join(topics)})",
            )
        if type(offset) is not int or offset < EARLIEST:
            raise _invalid(
                option,
                f"option {option}: the offset of topic {topic!r} must be an integer >= 0 "
                f"(or -2 for earliest, -1 for latest), not {offset!r}",
            )
    return parsed


@dataclass(frozen=True)
class _Options:
    """The parsed options: plain data, pickled to Spark's Python workers."""

    path: str
    topics: list[str]
    starting: OffsetSpec | None
    ending: OffsetSpec | None
    max_offsets_per_trigger: int | None
    max_records_per_partition: int
    max_records_per_batch: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _Options:
        path = options.get("path")
        if not path:
            raise _invalid(
                "path",
                "option path is required: the tidelog directory, as "
                'spark.read.format("tidelog").load(path) or .option("path", ...)',
            )
        subscribe = options.get("subscribe")
        topics = list(dict.fromkeys(t.strip() for t in (subscribe or "").split(",") if t.strip()))
        if not topics:
            raise _invalid(
                "subscribe",
                "option subscribe is required: the topics to read, comma-separated, "
                'as .option("subscribe", "orders,payments")',
            )
        return cls(
            path=str(path),
            topics=topics,
            starting=_offset_spec(options, "startingOffsets", topics),
            ending=_offset_spec(options, "endingOffsets", topics),
            max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger", None),
            max_records_per_partition=_positive_int(
                options, "maxRecordsPerPartition", MAX_RECORDS_PER_PARTITION_DEFAULT
            ),
            max_records_per_batch=_positive_int(
                options, "maxRecordsPerBatch", MAX_RECORDS_PER_BATCH_DEFAULT
            ),
        )

    def open(self) -> tidelog.Wal:
        # Read-only: takes no lock, so a writer (in this or another process) may hold it.
        return tidelog.open(self.path, readonly=True)

    def bounds(self, wal: tidelog.Wal) -> dict[str, tuple[int, int]]:
        """(first, next) offset of every subscribed topic; a clear error for a missing one."""
        bounds = {}
        for topic in self.topics:
            try:
                info = wal.topic_info(topic)
            except UnknownTopicError:
                known = ", ".join(sorted(wal.topics())) or "none"
                raise UnknownTopicError(
                    f"tidelog data source: option subscribe names topic {topic!r}, which does "
                    f"not exist in {self.path} (topics there: {known})",
                    topic=topic,
                ) from None
            bounds[topic] = (info.first_offset, info.next_offset)
        return bounds

    def resolve(
        self,
        option: str,
        spec: OffsetSpec | None,
        default: str,
        bounds: dict[str, tuple[int, int]],
    ) -> dict[str, int]:
        """The offset of every subscribed topic named by `spec` (`default` without one).
        Topics that a JSON spec leaves out start at their earliest and end at their latest
        offset. Offsets must lie in first..next."""
        spec = default if spec is None else spec
        left_out = EARLIEST if option == "startingOffsets" else LATEST
        offsets = {}
        for topic, (first, next_) in bounds.items():
            if isinstance(spec, str):
                offset = EARLIEST if spec == "earliest" else LATEST
            else:
                offset = spec.get(topic, left_out)
            if offset == EARLIEST:
                offset = first
            elif offset == LATEST:
                offset = next_
            elif not first <= offset <= next_:
                raise _invalid(
                    option,
                    f"option {option}: offset {offset} of topic {topic!r} is out of range "
                    f"(stored offsets are {first}..{next_})",
                )
            offsets[topic] = offset
        return offsets


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """One Spark partition: offsets [start, end) of a topic."""

    topic: str
    start: int
    end: int


def _split(ranges: Mapping[str, tuple[int, int]], size: int) -> list[TopicRange]:
    return [
        TopicRange(topic, lo, min(lo + size, end))
        for topic, (start, end) in ranges.items()
        for lo in range(start, end, size)
    ]


def _read(options: _Options, part: TopicRange) -> Iterator[pa.RecordBatch]:
    """The records of `part` as Arrow batches in Spark's schema, straight from Rust."""
    if part.start >= part.end:
        return
    with options.open() as wal:
        offset = part.start
        while offset < part.end:
            batch = wal.read_arrow(
                part.topic, offset, part.end, max_records=options.max_records_per_batch
            )
            if batch.num_rows == 0:  # the planned range is no longer stored
                raise tidelog.OffsetOutOfRangeError(
                    f"tidelog data source: topic {part.topic!r} has no record at offset "
                    f"{offset} (planned {part.start}..{part.end})",
                    topic=part.topic,
                    offset=offset,
                )
            offset += batch.num_rows
            # Reorders the columns; the arrays (Rust's buffers) are not copied.
            yield pa.RecordBatch.from_arrays(
                [batch.column(name) for name in ARROW_SCHEMA.names], schema=ARROW_SCHEMA
            )


def _fields(schema: StructType) -> list[tuple[str, Any, bool]]:
    return [(f.name, f.dataType, f.nullable) for f in schema.fields]


def _check_schema(schema: StructType) -> None:
    if _fields(schema) != _fields(_STRUCT):
        raise InvalidArgumentError(
            f"tidelog data source: the schema is fixed ({SCHEMA}); do not pass another one "
            f"(got {schema.simpleString()})",
            name="schema",
        )


class TidelogDataSource(DataSource):
    """Format "tidelog": reads topics of a tidelog directory, in batches or as a stream."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        # Reports a bad option, path or topic at load(), not at the first action.
        options = _Options.parse(self.options)
        with options.open() as wal:
            options.bounds(wal)
        return _STRUCT

    def reader(self, schema: StructType) -> TidelogBatchReader:
        _check_schema(schema)
        return TidelogBatchReader(_Options.parse(self.options))

    def streamReader(self, schema: StructType) -> TidelogStreamReader:
        _check_schema(schema)
        options = _Options.parse(self.options)
        if options.ending is not None:
            raise _invalid(
                "endingOffsets",
                "option endingOffsets is for batch reads only; a stream reads until stopped "
                "(trigger(availableNow=True) stops at the end found when it starts)",
            )
        return TidelogStreamReader(options)


class TidelogBatchReader(DataSourceReader):
    """Reads startingOffsets (default earliest) to endingOffsets (default latest, found once
    when Spark plans the query), split into partitions of maxRecordsPerPartition records."""

    def __init__(self, options: _Options) -> None:
        self.options = options

    def partitions(self) -> list[TopicRange]:
        options = self.options
        with options.open() as wal:
            bounds = options.bounds(wal)
            start = options.resolve("startingOffsets", options.starting, "earliest", bounds)
            end = options.resolve("endingOffsets", options.ending, "latest", bounds)
        for topic in options.topics:
            if start[topic] > end[topic]:
                raise _invalid(
                    "endingOffsets",
                    f"topic {topic!r}: startingOffsets ({start[topic]}) is past endingOffsets "
                    f"({end[topic]})",
                )
        parts = _split(
            {t: (start[t], end[t]) for t in options.topics}, options.max_records_per_partition
        )
        # Spark wants at least one partition; an empty range reads nothing.
        return parts or [TopicRange(options.topics[0], 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicRange)
        return _read(self.options, partition)


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {topic: next offset to read}. startingOffsets defaults to latest, as in
    Spark's Kafka source; a topic missing from a checkpointed offset starts at its earliest.

    Spark calls everything but `read` in one long-lived driver-side process, so the
    AvailableNow target kept on self lasts the query; `read` runs on a pickled copy."""

    def __init__(self, options: _Options) -> None:
        self.options = options
        self.target: dict[str, int] | None = None

    def _next_offsets(self) -> dict[str, int]:
        with self.options.open() as wal:
            return {topic: next_ for topic, (_, next_) in self.options.bounds(wal).items()}

    def _begin(self, start: Mapping[str, Any]) -> dict[str, int]:
        missing = [t for t in self.options.topics if t not in start]
        firsts = {}
        if missing:
            with self.options.open() as wal:
                firsts = {t: first for t, (first, _) in self.options.bounds(wal).items()}
        return {t: int(start[t]) if t in start else firsts[t] for t in self.options.topics}

    def initialOffset(self) -> dict[str, int]:
        with self.options.open() as wal:
            bounds = self.options.bounds(wal)
            return self.options.resolve("startingOffsets", self.options.starting, "latest", bounds)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._next_offsets()

    def reportLatestOffset(self) -> dict[str, int]:
        return self._next_offsets()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = self._begin(start)
        latest = self._next_offsets()
        if self.target is not None:
            latest = {t: min(latest[t], self.target.get(t, latest[t])) for t in latest}
        backlog = {t: max(0, latest[t] - begin[t]) for t in begin}
        if isinstance(limit, ReadMaxRows):
            backlog = _share(backlog, limit.max_rows)
        return {t: begin[t] + backlog[t] for t in begin}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[TopicRange]:
        begin = self._begin(start)
        ranges = {t: (begin[t], int(end[t])) for t in begin if t in end}
        return _split(ranges, self.options.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicRange)
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the log keeps records by its own retention."""


def _share(backlog: dict[str, int], budget: int) -> dict[str, int]:
    """Spreads `budget` records over the topics' backlogs: an equal share each, and what a
    topic with a smaller backlog leaves goes to the others. Takes min(budget, total)."""
    taken = dict.fromkeys(backlog, 0)
    waiting = sorted(backlog, key=lambda t: (backlog[t], t))
    while waiting and budget > 0:
        share = max(1, budget // len(waiting))
        for topic in list(waiting):
            take = min(share, backlog[topic] - taken[topic], budget)
            taken[topic] += take
            budget -= take
            if taken[topic] == backlog[topic]:
                waiting.remove(topic)
            if budget == 0:
                break
    return taken

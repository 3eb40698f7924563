"""A Spark data source for tidelog (format ``"tidelog"``): batch and streaming reads.

Options and rows follow Spark's Kafka source::

    import tidelog.spark
    tidelog.spark.register(spark)        # filter pushdown (pyspark_tidelog's source has none)
    df = (spark.read.format("tidelog")
          .option("subscribe", "orders,payments")
          .option("startingOffsets", "earliest")          # or "latest", or '{"orders": 42}'
          .option("endingOffsets", '{"orders": 100}')     # exclusive; batch reads only
          .load("data"))
    # -> key, value, topic, partition, offset, timestamp, timestampType (as Kafka's source);
    #    .option("includeHeaders", "true") adds Kafka's headers column

Each Spark task opens the directory read-only in its own process (no lock, so a writer may
hold it meanwhile) and yields Arrow record batches built in Rust: no Python object per record.
A bucket URL as the path (``load("s3://bucket/prefix")``, options ``storage.KEY`` for the
bucket) reads what a producer's tier uploaded, through ``tidelog.open_remote``: the tasks
need no access to the producer's disk, and streams see the manifest's end.
Streams (``spark.readStream``) keep ``{"topic": next offset}`` as their offsets, honour
``maxOffsetsPerTrigger`` and ``trigger(availableNow=True)``, and resume from their checkpoint.

Writes take ``value`` (binary or string), optional ``key`` (binary or string),
``timestamp`` (null: the time of the write) and ``headers`` (Kafka's
``array<struct<key: string, value: binary>>``) columns, and the topic from a ``topic`` column or
the ``topic`` option (which overrides the column, as in Kafka's sink)::

    (df.write.format("tidelog").mode("append")            # the only save mode
       .option("topic", "results").save("data"))
    (events.writeStream.format("tidelog").option("topic", "results")
       .option("checkpointLocation", "checkpoints/results").start("data"))

Each task stages its records (``tidelog.StagedWriter``, no lock) and the driver's commit
publishes the parts of the tasks that succeeded, once: a batch job is exactly-once, and a
streaming query's micro-batch is published at most once per id, so a replayed batch is
dropped. Offsets are assigned at the commit. With a bucket URL as the path
(``save("s3://bucket/prefix")``, options ``storage.KEY``), each task stages on its own disk
and puts its part in the bucket; the driver's commit is written there, and the producer
whose tier the bucket is (``tidelog.open(dir, tier=URL)``) publishes the job into its
directory, exactly once; the commit waits for that up to ``commitTimeoutMs`` (default a
minute) and says why when no producer did.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, overload

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import tidelog
from tidelog import _is_url
from tidelog.exceptions import InvalidArgumentError, UnknownTopicError

__all__ = [
    "ARROW_SCHEMA",
    "FORMAT",
    "SCHEMA",
    "StagedPart",
    "TidelogBatchWriter",
    "TidelogDataSource",
    "TidelogFilteringReader",
    "TidelogFilteringSource",
    "TidelogStreamWriter",
    "register",
]

FORMAT = "tidelog"
# Kafka's source's columns: a topic is one partition (0); timestamps are create times (0).
SCHEMA = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "timestampType INT"
)
# SCHEMA built by hand: parsing DDL needs a SparkContext, which Python workers lack.
_STRUCT = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
# With includeHeaders=true, Kafka's headers column follows (null for a record without).
HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
_STRUCT_HEADERS = StructType([*_STRUCT.fields, StructField("headers", HEADERS_TYPE)])
# What Spark accepts for SCHEMA: the same names, order, types and nullability, exactly.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
_ARROW_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_ARROW_HEADERS = pa.list_(pa.field("element", _ARROW_HEADER))
ARROW_SCHEMA_HEADERS = ARROW_SCHEMA.append(pa.field("headers", _ARROW_HEADERS))

# Without maxRecordsPerPartition, a read is split into one partition per core, of at least
# this many records: each Spark task costs tens of milliseconds, so fewer, larger ones read
# faster (1M records on 2 cores: 2.5M rows/s in 2 partitions, 1.2M rows/s in 10).
PARTITION_RECORDS_MIN = 100_000
# Rows per Arrow batch a task yields (Spark's own Arrow batches default to 10000 rows).
MAX_RECORDS_PER_BATCH_DEFAULT = 10_000
# How long a write's commit waits for its job to be published (option commitTimeoutMs).
COMMIT_TIMEOUT_MS_DEFAULT = 60_000
# Kafka's default maxTriggerDelay.
MAX_TRIGGER_DELAY_DEFAULT = "15m"
# Kafka's conventions inside offset JSON.
EARLIEST, LATEST = -2, -1
# Spark's setting for filter pushdown into Python data sources (off by default); Spark
# refuses a reader that implements pushFilters while it is off.
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def local_session(
    app_name: str = "tidelog",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A local SparkSession set up for tidelog: Python workers run this interpreter (so
    they import this tidelog and pyarrow), traffic stays on loopback, the UI and console
    progress are off, shuffles use 2 partitions, time is UTC, logs are errors only, and filter
    pushdown into Python data sources is on (`register` then pushes filters). `conf` adds or
    overrides Spark settings."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        PUSHDOWN_CONF: "true",
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def register(spark: SparkSession, push_filters: bool | None = None) -> None:
    """Registers the data source as format "tidelog" in this session (the `pyspark_tidelog`
    module registers it too, without filter pushdown).

    With `push_filters` (by default: when the session's
    `spark.sql.python.filterPushdown.enabled` is on, as `local_session` sets it), batch reads
    push filters on `topic`, `offset`, `timestamp`, `partition` and `timestampType` into
    planning, which reads only the topics and offsets they allow. Spark refuses such a reader
    while that setting is off, so asking for it then is an error."""
    enabled = str(spark.conf.get(PUSHDOWN_CONF, "false")).strip().lower() == "true"
    if push_filters is None:
        push_filters = enabled
    if push_filters and not enabled:
        raise InvalidArgumentError(
            f"tidelog data source: filter pushdown needs the session setting {PUSHDOWN_CONF}="
            f'true (spark.conf.set("{PUSHDOWN_CONF}", "true")); Spark refuses readers that '
            "push filters without it",
            name="push_filters",
            reason=f"{PUSHDOWN_CONF} is off",
        )
    spark.dataSource.register(TidelogFilteringSource if push_filters else TidelogDataSource)


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


def _offset_spec(
    options: Mapping[str, str], option: str, topics: list[str] | None
) -> OffsetSpec | None:
    """The option as "earliest", "latest" or {topic: offset} (EARLIEST/LATEST allowed), the
    JSON flat (`{"t": 42}`) or in Kafka's shape (`{"t": {"0": 42}}`: a topic is partition
    0). `topics`: the subscribed ones, when known before the query runs."""
    text = options.get(option.lower())
    if text is None:
        return None
    word = str(text).strip().lower()
    if word in ("earliest", "latest"):
        return word
    parsed = _json_object(option, text, '{"topic": 42} or {"topic": {"0": 42}}')
    spec = {}
    for topic, value in parsed.items():
        if topics is not None and topic not in topics:
            raise _invalid(
                option,
                f"option {option} names topic {topic!r}, which is not subscribed "
                f"(subscribe: {','.join(topics)})",
            )
        offset = _partition_zero(option, topic, value)
        if type(offset) is not int or offset < EARLIEST:
            raise _invalid(
                option,
                f"option {option}: the offset of topic {topic!r} must be an integer >= 0 "
                f"(or -2 for earliest, -1 for latest), not {offset!r}",
            )
        spec[topic] = offset
    return spec


def _json_object(option: str, text: str, shape: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise _invalid(
            option, f"option {option} must be JSON like {shape}, not {text!r} ({e})"
        ) from None
    if not isinstance(parsed, dict):
        raise _invalid(option, f"option {option} must be a JSON object like {shape}, not {text!r}")
    return parsed


def _partition_zero(option: str, topic: str, value: Any) -> Any:
    """The value of partition "0" in Kafka's per-partition shape, or `value` itself."""
    if not isinstance(value, dict):
        return value
    if set(value) != {"0"}:
        raise _invalid(
            option,
            f"option {option}: a tidelog topic is one partition, 0; topic {topic!r} names "
            f"partitions {sorted(value)}",
        )
    return value["0"]


def _timestamps(options: Mapping[str, str], option: str) -> dict[str, int] | None:
    """`{topic: milliseconds}` from Kafka's `{"t": {"0": ms}}` (or flat) JSON."""
    text = options.get(option.lower())
    if text is None:
        return None
    out = {}
    for topic, value in _json_object(option, text, '{"topic": {"0": 1700000000000}}').items():
        ms = _partition_zero(option, topic, value)
        if type(ms) is not int or ms < 0:
            raise _invalid(
                option, f"option {option}: topic {topic!r} needs a timestamp in ms >= 0, not {ms!r}"
            )
        out[topic] = ms
    return out


def _non_negative_int(options: Mapping[str, str], option: str) -> int | None:
    text = options.get(option.lower())
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise _invalid(option, f"option {option} must be an integer >= 0, not {text!r}")
    return value


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")
_UNIT_S = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}  # fmt: skip


def _duration_s(options: Mapping[str, str], option: str, default: str) -> float:
    """A duration with its unit (`15m`, `30s`, `500ms`, `2 hours`), in seconds."""
    text = str(options.get(option.lower(), default))
    match = _DURATION.fullmatch(text.lower())
    if match is None or match.group(2) not in _UNIT_S:
        raise _invalid(
            option, f"option {option} must be a duration like 15m, 30s or 500ms, not {text!r}"
        )
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def _bool_option(options: Mapping[str, str], option: str, default: bool) -> bool:
    text = options.get(option.lower())
    if text is None:
        return default
    word = str(text).strip().lower()
    if word not in ("true", "false"):
        raise _invalid(option, f'option {option} must be "true" or "false", not {text!r}')
    return word == "true"


def _subscription(options: Mapping[str, str]) -> tuple[list[str] | None, str | None]:
    """Kafka's three ways to name topics, exactly one given: `subscribe` (a list),
    `subscribePattern` (a regular expression, matched whole), `assign` (JSON
    `{"t": [0]}`)."""
    given = [o for o in ("subscribe", "subscribePattern", "assign") if options.get(o.lower())]
    if len(given) != 1:
        raise _invalid(
            "subscribe",
            "name the topics to read with exactly one of the options subscribe "
            '(.option("subscribe", "orders,payments")), subscribePattern or assign'
            + (f" (got {', '.join(given)})" if given else ""),
        )
    if given == ["subscribePattern"]:
        pattern = str(options["subscribepattern"])
        try:
            re.compile(pattern)
        except re.error as e:
            raise _invalid(
                "subscribePattern", f"option subscribePattern {pattern!r} is not a pattern: {e}"
            ) from None
        return None, pattern
    if given == ["assign"]:
        assigned = _json_object("assign", str(options["assign"]), '{"topic": [0]}')
        for topic, partitions in assigned.items():
            if partitions != [0]:
                raise _invalid(
                    "assign",
                    f"option assign: a tidelog topic is one partition, 0; topic {topic!r} "
                    f"names {partitions!r}",
                )
        topics = list(assigned)
    else:
        topics = [t.strip() for t in str(options["subscribe"]).split(",") if t.strip()]
    topics = list(dict.fromkeys(topics))
    if not topics:
        raise _invalid("subscribe", "no topic named: give at least one")
    return topics, None


@dataclass(frozen=True)
class _Options:
    """The parsed options: plain data, pickled to Spark's Python workers."""

    path: str
    #: Options of the bucket when `path` is a bucket URL (Spark options `storage.KEY`).
    storage_options: dict[str, str]
    #: The topics of `subscribe` or `assign`; None with `subscribePattern`.
    topics: list[str] | None
    #: `subscribePattern`: topics whose whole name matches, looked up at each plan.
    pattern: str | None
    starting: OffsetSpec | None
    ending: OffsetSpec | None
    #: Kafka's options by time, in milliseconds: one for every topic, or per topic.
    starting_timestamp: int | None
    ending_timestamp: int | None
    starting_by_timestamp: dict[str, int] | None
    ending_by_timestamp: dict[str, int] | None
    #: No record at or after a starting timestamp: "error" (fail) or "latest".
    by_timestamp_strategy: str
    #: Fail when records a query needs were removed (retention); else skip them.
    fail_on_data_loss: bool
    min_partitions: int | None
    #: Kafka's minOffsetsPerTrigger: a trigger waits for this many new records, at most
    #: `max_trigger_delay_s` since the last batch.
    min_offsets_per_trigger: int | None
    max_trigger_delay_s: float
    max_offsets_per_trigger: int | None
    max_records_per_partition: int | None
    max_records_per_batch: int
    #: Kafka's includeHeaders: rows carry a headers column.
    include_headers: bool

    @property
    def schema(self) -> StructType:
        return _STRUCT_HEADERS if self.include_headers else _STRUCT

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _Options:
        path = options.get("path")
        if not path:
            raise _invalid(
                "path",
                "option path is required: the tidelog directory, as "
                'spark.read.format("tidelog").load(path) or .option("path", ...)',
            )
        topics, pattern = _subscription(options)
        strategy = str(options.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
        if strategy not in ("error", "latest"):
            raise _invalid(
                "startingOffsetsByTimestampStrategy",
                f'option startingOffsetsByTimestampStrategy must be "error" or "latest", not '
                f"{strategy!r}",
            )
        return cls(
            path=str(path),
            storage_options=_storage_options(options),
            topics=topics,
            pattern=pattern,
            starting=_offset_spec(options, "startingOffsets", topics),
            ending=_offset_spec(options, "endingOffsets", topics),
            starting_timestamp=_non_negative_int(options, "startingTimestamp"),
            ending_timestamp=_non_negative_int(options, "endingTimestamp"),
            starting_by_timestamp=_timestamps(options, "startingOffsetsByTimestamp"),
            ending_by_timestamp=_timestamps(options, "endingOffsetsByTimestamp"),
            by_timestamp_strategy=strategy,
            fail_on_data_loss=_bool_option(options, "failOnDataLoss", True),
            min_partitions=_positive_int(options, "minPartitions", None),
            min_offsets_per_trigger=_positive_int(options, "minOffsetsPerTrigger", None),
            max_trigger_delay_s=_duration_s(options, "maxTriggerDelay", MAX_TRIGGER_DELAY_DEFAULT),
            max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger", None),
            max_records_per_partition=_positive_int(options, "maxRecordsPerPartition", None),
            max_records_per_batch=_positive_int(
                options, "maxRecordsPerBatch", MAX_RECORDS_PER_BATCH_DEFAULT
            ),
            include_headers=_bool_option(options, "includeHeaders", False),
        )

    def open(self) -> tidelog.Wal | _Bucket:
        if _is_url(self.path):
            # The bucket a producer's tier uploads to: what its manifest names.
            return _Bucket(tidelog.open_remote(self.path, storage_options=self.storage_options))
        # Read-only: takes no lock, so a writer (in this or another process) may hold it.
        return tidelog.open(self.path, readonly=True)

    def subscribed(self, wal: tidelog.Wal | _Bucket) -> list[str]:
        """The topics to read: those named, or those whose whole name matches the pattern
        now (a topic created later joins a stream at its next trigger, from its earliest)."""
        if self.topics is not None:
            return self.topics
        assert self.pattern is not None
        regex = re.compile(self.pattern)
        topics = sorted(t for t in wal.topics() if regex.fullmatch(t))
        if not topics:
            known = ", ".join(sorted(wal.topics())) or "none"
            raise UnknownTopicError(
                f"tidelog data source: no topic of {self.path} matches subscribePattern "
                f"{self.pattern!r} (topics there: {known})",
                topic=self.pattern,
            )
        return topics

    def bounds(self, wal: tidelog.Wal | _Bucket) -> dict[str, tuple[int, int]]:
        """(first, durable) offset of every subscribed topic; a clear error for a missing one.

        The source reads only durable records: a record a crash of the writer's machine
        could still lose is never handed to Spark, so a query's offsets always name the
        records a restarted writer keeps (exactly once holds across such a crash)."""
        bounds = {}
        for topic in self.subscribed(wal):
            try:
                info = wal.topic_info(topic)
            except UnknownTopicError:
                known = ", ".join(sorted(wal.topics())) or "none"
                raise UnknownTopicError(
                    f"tidelog data source: option subscribe names topic {topic!r}, which does "
                    f"not exist in {self.path} (topics there: {known})",
                    topic=topic,
                ) from None
            bounds[topic] = (info.first_offset, info.durable_offset)
        return bounds

    def resolve(
        self,
        option: str,
        default: str,
        wal: tidelog.Wal | _Bucket,
        bounds: dict[str, tuple[int, int]],
    ) -> dict[str, int]:
        """The offset of every subscribed topic where the query starts (`option`
        "startingOffsets") or ends ("endingOffsets"): by time where a timestamp option
        covers the topic (Kafka's order: the global timestamp, then per topic, then
        offsets), else by offset (`default` without the option). Topics a JSON spec leaves
        out start at their earliest and end at their latest offset. An offset below the
        first stored is data loss: an error, or the first with failOnDataLoss=false."""
        starting = option == "startingOffsets"
        spec = (self.starting if starting else self.ending) or default
        if isinstance(spec, dict):
            for topic in spec:
                if topic not in bounds:
                    raise _invalid(
                        option, f"option {option} names topic {topic!r}, which is not subscribed"
                    )
        left_out = EARLIEST if starting else LATEST
        offsets = {}
        for topic, (first, next_) in bounds.items():
            at = self._by_time(starting, topic)
            if at is not None:
                offsets[topic] = self._offset_at(option, wal, topic, at, bounds[topic])
                continue
            if isinstance(spec, str):
                offset = EARLIEST if spec == "earliest" else LATEST
            else:
                offset = spec.get(topic, left_out)
            if offset == EARLIEST:
                offset = first
            elif offset == LATEST:
                offset = next_
            elif offset < first and not self.fail_on_data_loss:
                offset = first
            elif not first <= offset <= next_:
                raise _invalid(
                    option,
                    f"option {option}: offset {offset} of topic {topic!r} is out of range "
                    f"(stored offsets are {first}..{next_}"
                    + (
                        "; records below them were removed: set failOnDataLoss=false to "
                        "start at the earliest stored)"
                        if offset < first
                        else ")"
                    ),
                )
            offsets[topic] = offset
        return offsets

    def _by_time(self, starting: bool, topic: str) -> int | None:
        """The timestamp (ms) a time option gives `topic`'s start or end, if one does."""
        if starting:
            every, each = self.starting_timestamp, self.starting_by_timestamp
        else:
            every, each = self.ending_timestamp, self.ending_by_timestamp
        if every is not None:
            return every
        return None if each is None else each.get(topic)

    def _offset_at(
        self,
        option: str,
        wal: tidelog.Wal | _Bucket,
        topic: str,
        ms: int,
        bound: tuple[int, int],
    ) -> int:
        """The first offset of `topic` whose timestamp is at or after `ms`; with none, the
        latest (an end, or a start with strategy "latest") or an error (a start)."""
        first, next_ = bound
        offset = _offset_for_time(wal, topic, ms * 1000)
        if offset < next_:
            return max(offset, first)
        if option == "endingOffsets" or self.by_timestamp_strategy == "latest":
            return next_
        raise _invalid(
            "startingOffsetsByTimestamp",
            f"topic {topic!r} has no record at or after timestamp {ms} ms (set "
            'startingOffsetsByTimestampStrategy to "latest" to start at its end)',
        )


def _offset_for_time(wal: tidelog.Wal | _Bucket, topic: str, timestamp_us: int) -> int:
    """The first offset of `topic` whose timestamp is at or after `timestamp_us` (the end
    when none is), found with the time index."""
    if isinstance(wal, _Bucket):
        with wal.log.reader(topic) as reader:
            return reader.seek_time(timestamp_us)
    with wal.reader(topic, start="earliest") as reader:
        return reader.seek_time(timestamp_us)


def _storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """Spark options `storage.KEY` as the bucket's options `KEY`."""
    return {k[len("storage.") :]: v for k, v in options.items() if k.startswith("storage.")}


@dataclass(frozen=True)
class _RemoteInfo:
    first_offset: int
    durable_offset: int


class _Bucket:
    """A bucket read through `tidelog.open_remote`, shaped as the directory handle the
    source uses: every record a manifest names is durable (uploads are of sealed extents)."""

    def __init__(self, log: tidelog.RemoteLog) -> None:
        self.log = log
        # One reader per topic: consecutive batches keep its objects fetched ahead.
        self.readers: dict[str, tidelog.RemoteReader] = {}

    def __enter__(self) -> _Bucket:
        return self

    def __exit__(self, *exc: object) -> None:
        for reader in self.readers.values():
            reader.close()
        self.readers.clear()

    def topics(self) -> list[str]:
        return self.log.topics()

    def topic_info(self, topic: str) -> _RemoteInfo:
        info = self.log.topic_info(topic)
        return _RemoteInfo(int(info["first_offset"]), int(info["next_offset"]))

    def read_arrow(
        self, topic: str, start: int, end: int | None = None, max_records: int | None = None
    ) -> pa.RecordBatch:
        reader = self.readers.get(topic)
        if reader is None:
            reader = self.readers[topic] = self.log.reader(topic, start=start)
        elif reader.position != start:
            reader.seek(start)
        return reader.read_arrow(max_records, end)


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """One Spark partition: offsets [start, end) of a topic."""

    topic: str
    start: int
    end: int


def _split(
    ranges: Mapping[str, tuple[int, int]], size: int | None, min_partitions: int | None = None
) -> list[TopicRange]:
    """Partitions of at most `size` records (by default one per core, of at least
    PARTITION_RECORDS_MIN), and at least `min_partitions` of them (Kafka's minPartitions)
    where the records allow."""
    total = sum(end - start for start, end in ranges.values())
    if size is None:
        cores = os.cpu_count() or 1
        size = max(PARTITION_RECORDS_MIN, -(-total // cores))
    if min_partitions is not None and total > 0:
        size = max(1, min(size, total // min_partitions))
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
            try:
                batch = wal.read_arrow(
                    part.topic, offset, part.end, max_records=options.max_records_per_batch
                )
            except tidelog.OffsetOutOfRangeError:
                batch = None
            if batch is None or batch.num_rows == 0:  # the planned range is no longer stored
                first = wal.topic_info(part.topic).first_offset
                if options.fail_on_data_loss or first <= offset:
                    raise tidelog.OffsetOutOfRangeError(
                        f"tidelog data source: topic {part.topic!r} has no record at offset "
                        f"{offset} (planned {part.start}..{part.end}; removed by retention? "
                        "failOnDataLoss=false skips what is gone)",
                        topic=part.topic,
                        offset=offset,
                    )
                # failOnDataLoss=false: what retention removed is skipped.
                offset = first
                continue
            offset += batch.num_rows
            yield _spark_batch(batch, options.include_headers)


def _spark_batch(batch: pa.RecordBatch, include_headers: bool = False) -> pa.RecordBatch:
    """`batch` (columns of `read_arrow`) in Spark's schema: the columns reordered (the
    arrays, Rust's buffers, are not copied), Kafka's partition and timestampType (0), and
    with `include_headers` Kafka's headers (null where a record has none)."""
    n = batch.num_rows
    zeros = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))])
    columns = [
        zeros if name in ("partition", "timestampType") else batch.column(name)
        for name in ARROW_SCHEMA.names
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    headers = batch.column("headers")
    items = headers.values
    items = pa.StructArray.from_arrays(
        [items.field("key"), items.field("value")], fields=list(_ARROW_HEADER)
    )
    none = pc.equal(pc.list_value_length(headers), 0)
    columns.append(pa.ListArray.from_arrays(headers.offsets, items, type=_ARROW_HEADERS, mask=none))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_HEADERS)


def _fields(schema: StructType) -> list[tuple[str, Any, bool]]:
    return [(f.name, f.dataType, f.nullable) for f in schema.fields]


def _check_schema(schema: StructType, options: _Options) -> None:
    if _fields(schema) != _fields(options.schema):
        raise InvalidArgumentError(
            f"tidelog data source: the schema is fixed ({options.schema.simpleString()}, "
            f"headers with includeHeaders=true); do not pass another one "
            f"(got {schema.simpleString()})",
            name="schema",
        )


class TidelogDataSource(DataSource):
    """Format "tidelog": reads topics of a tidelog directory and writes records into them,
    in batches or as a stream."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        # Reports a bad option, path or topic at load(), not at the first action.
        options = _Options.parse(self.options)
        with options.open() as wal:
            options.bounds(wal)
        return options.schema

    def reader(self, schema: StructType) -> TidelogBatchReader:
        options = _Options.parse(self.options)
        _check_schema(schema, options)
        return self._batch_reader(options)

    def _batch_reader(self, options: _Options) -> TidelogBatchReader:
        return TidelogBatchReader(options)

    def streamReader(self, schema: StructType) -> TidelogStreamReader:
        options = _Options.parse(self.options)
        _check_schema(schema, options)
        if options.ending is not None:
            raise _invalid(
                "endingOffsets",
                "option endingOffsets is for batch reads only; a stream reads until stopped "
                "(trigger(availableNow=True) stops at the end found when it starts)",
            )
        return TidelogStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> TidelogBatchWriter:
        options = _WriteOptions.parse(self.options, schema, overwrite, '.mode("append")')
        # One job per write; the writer is pickled to the tasks and to the commit.
        return TidelogBatchWriter(options, job=f"spark-{uuid.uuid4().hex}")

    def streamWriter(self, schema: StructType, overwrite: bool) -> TidelogStreamWriter:
        options = _WriteOptions.parse(self.options, schema, overwrite, '.outputMode("append")')
        return TidelogStreamWriter(options, sink_id=_sink_id(self.options))


class TidelogBatchReader(DataSourceReader):
    """Reads startingOffsets (default earliest) to endingOffsets (default latest, found once
    when Spark plans the query), split into partitions of maxRecordsPerPartition records."""

    def __init__(self, options: _Options) -> None:
        self.options = options
        #: What pushed filters leave to read (nothing pushed here: everything).
        self.pushed = _Pushed()

    def partitions(self) -> list[TopicRange]:
        options = self.options
        with options.open() as wal:
            bounds = options.bounds(wal)
            start = options.resolve("startingOffsets", "earliest", wal, bounds)
            end = options.resolve("endingOffsets", "latest", wal, bounds)
            for topic in bounds:
                if start[topic] > end[topic]:
                    raise _invalid(
                        "endingOffsets",
                        f"topic {topic!r}: startingOffsets ({start[topic]}) is past "
                        f"endingOffsets ({end[topic]})",
                    )
            ranges = self.pushed.narrow(wal, {t: (start[t], end[t]) for t in bounds})
        parts = _split(ranges, options.max_records_per_partition, options.min_partitions)
        # Spark wants at least one partition; an empty range reads nothing.
        return parts or [TopicRange(next(iter(bounds)), 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicRange)
        return _read(self.options, partition)


class TidelogFilteringReader(TidelogBatchReader):
    """A batch reader that takes Spark's filters (`pushFilters`, with the session's
    spark.sql.python.filterPushdown.enabled on): filters on `topic`, `partition`,
    `timestampType` and `offset` are applied when planning and not evaluated again;
    `offset IN (...)` and lower bounds on `timestamp` (found with the time index) narrow
    what is read, and Spark still evaluates them (timestamps need not grow with offsets)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return [f for f in filters if not self.pushed.take(f)]


class TidelogFilteringSource(TidelogDataSource):
    """Format "tidelog" whose batch reads push filters (see `register`)."""

    def _batch_reader(self, options: _Options) -> TidelogBatchReader:
        return TidelogFilteringReader(options)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COMPARISONS = (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


def _column(f: Filter) -> tuple[str, ...] | None:
    """The column a filter tests (through any `Not`)."""
    while isinstance(f, Not):
        f = f.child
    attribute = getattr(f, "attribute", None)
    return tuple(attribute) if attribute is not None else None


def _same_kind(a: Any, b: Any) -> bool:
    """Both strings, or both integers (bool is not one): values Python compares as Spark
    does (strings by code point, which is UTF-8 byte order)."""
    if isinstance(a, str):
        return isinstance(b, str)
    return (
        isinstance(a, int)
        and isinstance(b, int)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    )


def _holds(f: Filter, value: str | int) -> bool | None:
    """Whether `f` holds for a non-null column `value`; None when it cannot be decided
    here (another kind of value, a null in an IN list, a filter this does not know)."""
    if isinstance(f, Not):
        inner = _holds(f.child, value)
        return None if inner is None else not inner
    if isinstance(f, IsNull):
        return False
    if isinstance(f, IsNotNull):
        return True
    if isinstance(f, In):
        if not all(_same_kind(value, v) for v in f.value):
            return None
        return value in f.value
    if isinstance(f, _COMPARISONS):
        if not _same_kind(value, f.value):
            return None
        if isinstance(f, (EqualTo, EqualNullSafe)):
            return bool(value == f.value)
        if isinstance(f, GreaterThan):
            return bool(value > f.value)
        if isinstance(f, GreaterThanOrEqual):
            return bool(value >= f.value)
        if isinstance(f, LessThan):
            return bool(value < f.value)
        return bool(value <= f.value)
    if isinstance(f, (StringStartsWith, StringEndsWith, StringContains)):
        if not isinstance(value, str) or not isinstance(f.value, str):
            return None
        if isinstance(f, StringStartsWith):
            return value.startswith(f.value)
        if isinstance(f, StringEndsWith):
            return value.endswith(f.value)
        return f.value in value
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _micros(value: Any) -> int | None:
    """Microseconds since the epoch of a zone-aware datetime (as Spark passes TIMESTAMP
    literals); None for anything else."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        return None
    return (value - _EPOCH) // timedelta(microseconds=1)


@dataclass
class _Pushed:
    """What a batch read's pushed filters leave to read. Plain data: pickled with the
    reader to Spark's Python workers."""

    #: Filters on `topic`, decided on each subscribed topic's name.
    topics: list[Filter] = field(default_factory=list)
    #: A filter on a constant column (`partition`, `timestampType`: 0) that fails: no rows.
    nothing: bool = False
    #: Offsets [offset_from, offset_to) (offset_to None: no upper bound).
    offset_from: int = 0
    offset_to: int | None = None
    #: No record before the first whose timestamp is at or after this one matches.
    time_from_us: int | None = None

    def take(self, f: Filter) -> bool:
        """Notes what `f` allows to skip; True when it is applied exactly (Spark need not
        evaluate it again)."""
        column = _column(f)
        if column == ("topic",):
            if _holds(f, "") is None:
                return False
            self.topics.append(f)
            return True
        if column in (("partition",), ("timestampType",)):
            holds = _holds(f, 0)
            if holds is None:
                return False
            self.nothing = self.nothing or not holds
            return True
        if column in (("offset",), ("timestamp",)) and isinstance(f, (IsNull, IsNotNull)):
            # Never null: IS NULL holds for no row, IS NOT NULL for every one.
            self.nothing = self.nothing or isinstance(f, IsNull)
            return True
        if column == ("offset",):
            return self._take_offset(f)
        if column == ("timestamp",):
            return self._take_time(f)
        return False

    def _take_offset(self, f: Filter) -> bool:
        if isinstance(f, In):
            if f.value and all(_is_int(v) for v in f.value):
                # Only the span narrows what is read; Spark keeps the rows in the list.
                self._offsets(min(f.value), max(f.value) + 1)
            return False
        value = getattr(f, "value", None)
        if not _is_int(value) or not isinstance(f, _COMPARISONS):
            return False
        if isinstance(f, (EqualTo, EqualNullSafe)):
            self._offsets(value, value + 1)
        elif isinstance(f, GreaterThan):
            self._offsets(value + 1, None)
        elif isinstance(f, GreaterThanOrEqual):
            self._offsets(value, None)
        elif isinstance(f, LessThan):
            self._offsets(0, value)
        else:
            self._offsets(0, value + 1)
        return True

    def _offsets(self, lo: int, hi: int | None) -> None:
        self.offset_from = max(self.offset_from, lo)
        if hi is not None:
            self.offset_to = hi if self.offset_to is None else min(self.offset_to, hi)

    def _take_time(self, f: Filter) -> bool:
        # Only a lower bound narrows: a record after the first at or after a time may be
        # older (timestamps are the writer's), so upper bounds skip nothing.
        if isinstance(f, In):
            times = [_micros(v) for v in f.value]
            lowest = min(times) if times and None not in times else None
        elif isinstance(f, (EqualTo, EqualNullSafe, GreaterThanOrEqual)):
            lowest = _micros(f.value)
        elif isinstance(f, GreaterThan):
            at = _micros(f.value)
            lowest = None if at is None else at + 1
        else:
            lowest = None
        if lowest is not None and lowest > 0:
            self.time_from_us = max(self.time_from_us or 0, lowest)
        return False

    def narrow(
        self, wal: tidelog.Wal | _Bucket, ranges: dict[str, tuple[int, int]]
    ) -> dict[str, tuple[int, int]]:
        """`ranges` ({topic: (start, end)}) less what the filters rule out: topics dropped,
        offsets clamped, starts moved to the first record at or after the time bound."""
        narrowed = {}
        for topic, (start, end) in ranges.items():
            if self.nothing or not all(_holds(f, topic) for f in self.topics):
                continue
            lo = max(start, self.offset_from)
            hi = end if self.offset_to is None else min(end, self.offset_to)
            if lo < hi and self.time_from_us is not None:
                lo = max(lo, _offset_for_time(wal, topic, self.time_from_us))
            if lo < hi:
                narrowed[topic] = (lo, hi)
        return narrowed


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {topic: next offset to read}. startingOffsets defaults to latest, as in
    Spark's Kafka source; a topic missing from a checkpointed offset starts at its earliest.

    Spark calls everything but `read` in one long-lived driver-side process, so the
    AvailableNow target kept on self lasts the query; `read` runs on a pickled copy."""

    def __init__(self, options: _Options) -> None:
        self.options = options
        self.target: dict[str, int] | None = None
        # When the last batch was planned (minOffsetsPerTrigger waits from there).
        self.last_batch: float | None = None

    def _bounds(self) -> dict[str, tuple[int, int]]:
        """(first, next) of every subscribed topic, from one open of the handle."""
        with self.options.open() as wal:
            return self.options.bounds(wal)

    def _next_offsets(self) -> dict[str, int]:
        return {topic: next_ for topic, (_, next_) in self._bounds().items()}

    def _begin(
        self, start: Mapping[str, Any], bounds: dict[str, tuple[int, int]]
    ) -> dict[str, int]:
        """Where each subscribed topic's next batch starts: the checkpointed offset, or
        its earliest for a topic the checkpoint lacks (one a pattern matched since). An
        offset below the first stored is data loss: an error, or the first with
        failOnDataLoss=false."""
        begin = {}
        for topic, (first, _) in bounds.items():
            offset = int(start[topic]) if topic in start else first
            if offset < first:
                if self.options.fail_on_data_loss:
                    raise tidelog.OffsetOutOfRangeError(
                        f"tidelog data source: topic {topic!r} lost offsets {offset}..{first} "
                        "(removed by retention before the query read them); set "
                        "failOnDataLoss=false to go on from the earliest stored",
                        topic=topic,
                        offset=offset,
                    )
                offset = first
            begin[topic] = offset
        return begin

    def initialOffset(self) -> dict[str, int]:
        with self.options.open() as wal:
            bounds = self.options.bounds(wal)
            return self.options.resolve("startingOffsets", "latest", wal, bounds)

    def getDefaultReadLimit(self) -> ReadLimit:
        options = self.options
        if options.max_offsets_per_trigger is not None:
            return ReadMaxRows(options.max_offsets_per_trigger)
        if options.min_offsets_per_trigger is not None:
            return ReadMinRows(options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._next_offsets()

    def reportLatestOffset(self) -> dict[str, int]:
        return self._next_offsets()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        bounds = self._bounds()
        begin = self._begin(start, bounds)
        latest = {topic: next_ for topic, (_, next_) in bounds.items()}
        if self.target is not None:
            latest = {t: min(latest[t], self.target.get(t, latest[t])) for t in latest}
        backlog = {t: max(0, latest[t] - begin[t]) for t in begin}
        if self._waits(sum(backlog.values())):
            return begin
        if isinstance(limit, ReadMaxRows):
            backlog = _prorate(backlog, limit.max_rows)
        end = {t: begin[t] + backlog[t] for t in begin}
        if end != begin:
            self.last_batch = time.monotonic()
        return end

    def _waits(self, available: int) -> bool:
        """minOffsetsPerTrigger: fewer records than that wait, until maxTriggerDelay has
        passed since the last batch (never with availableNow, which reads what it found)."""
        least = self.options.min_offsets_per_trigger
        if least is None or self.target is not None or available >= least:
            return False
        now = time.monotonic()
        if self.last_batch is None:
            self.last_batch = now
        return now - self.last_batch < self.options.max_trigger_delay_s

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[TopicRange]:
        begin = self._begin(start, self._bounds())
        ranges = {t: (begin[t], int(end[t])) for t in begin if t in end}
        return _split(ranges, self.options.max_records_per_partition, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicRange)
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the log keeps records by its own retention."""


# --- writes ---

# Topic, job, part and sink names: the engine's rule.
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}")
# Room for the "-b<micro-batch id>" of a sink's job names within 249 characters.
SINK_ID_MAX = 200
_NAME_RULE = "ASCII letters, digits, '.', '_' and '-', not starting with '.'"
# Options passed on to tidelog.open when the commit publishes the job itself.
_OPEN_OPTIONS = ("backend", "device")


def _column_type(
    types: Mapping[str, DataType], column: str, allowed: tuple[type[DataType], ...], hint: str
) -> bool:
    """Whether the input has `column`; an error if it has it with another type."""
    found = types.get(column)
    if found is None:
        return False
    if not isinstance(found, allowed):
        raise _invalid(
            column,
            f"column {column} must be {hint}, not {found.simpleString().upper()} (cast it, "
            f"e.g. cast({column} AS {hint.split()[0]}))",
        )
    return True


def _check_headers_column(found: DataType | None) -> bool:
    """Whether the input has a headers column; an error unless it is Kafka's:
    array<struct<key: string, value: binary or string>>."""
    if found is None:
        return False
    fields = (
        {f.name: f.dataType for f in found.elementType.fields}
        if isinstance(found, ArrayType) and isinstance(found.elementType, StructType)
        else {}
    )
    if not (
        isinstance(fields.get("key"), StringType)
        and isinstance(fields.get("value"), (BinaryType, StringType))
    ):
        raise _invalid(
            "headers",
            f"column headers must be ARRAY<STRUCT<key: STRING, value: BINARY>> (Kafka's), not "
            f"{found.simpleString().upper()}",
        )
    return True


@dataclass(frozen=True)
class _WriteOptions:
    """What a write needs, checked on the driver before any task runs: plain data, pickled
    to the tasks and the commit."""

    path: str
    # The topic option; None: each row's topic column.
    topic: str | None
    key: bool
    timestamp: bool
    headers: bool
    open_options: dict[str, Any]
    # Options of the bucket when `path` is a bucket URL (Spark options `storage.KEY`).
    storage_options: dict[str, str]
    # How long the driver's commit waits for the job's publish (option commitTimeoutMs).
    commit_timeout_s: float

    @property
    def bucket(self) -> bool:
        """Writes go through a tier's bucket, which its producer publishes from."""
        return _is_url(self.path)

    @classmethod
    def parse(
        cls, options: Mapping[str, str], schema: StructType, overwrite: bool, append_hint: str
    ) -> _WriteOptions:
        path = options.get("path")
        if not path:
            raise _invalid(
                "path",
                "option path is required: the tidelog directory, as "
                'df.write.format("tidelog").save(path) or .option("path", ...)',
            )
        if overwrite:
            raise _invalid(
                "mode",
                f"a tidelog topic is an append-only log and cannot be overwritten: use "
                f"{append_hint}",
            )
        types = {f.name: f.dataType for f in schema.fields}
        bytes_hint = "BINARY or STRING"
        if not _column_type(types, "value", (BinaryType, StringType), bytes_hint):
            raise _invalid(
                "value",
                f"the input needs a value column (BINARY or STRING); it has "
                f"{', '.join(types) or 'no columns'}",
            )
        key = _column_type(types, "key", (BinaryType, StringType), bytes_hint)
        timestamp = _column_type(types, "timestamp", (TimestampType,), "TIMESTAMP")
        headers = _check_headers_column(types.get("headers"))
        topic = options.get("topic")
        if topic is not None:
            # Overrides the topic column, as in Kafka's sink.
            topic = str(topic).strip()
            if not _NAME.fullmatch(topic):
                raise _invalid(
                    "topic",
                    f"option topic: {topic!r} is not a topic name ({_NAME_RULE}, at most "
                    f"249 characters)",
                )
        elif not _column_type(types, "topic", (StringType,), "STRING"):
            raise _invalid(
                "topic",
                'no topic: set option topic (.option("topic", "results")) or give the '
                "input a topic column (STRING)",
            )
        return cls(
            path=str(path),
            topic=topic,
            key=key,
            timestamp=timestamp,
            headers=headers,
            open_options={o: str(options[o]) for o in _OPEN_OPTIONS if options.get(o)},
            storage_options=_storage_options(options),
            commit_timeout_s=_positive_int(options, "commitTimeoutMs", COMMIT_TIMEOUT_MS_DEFAULT)
            / 1000,
        )


def _sink_id(options: Mapping[str, str]) -> str | None:
    text = options.get("sinkid")
    if text is None:
        return None
    sink = str(text).strip()
    if len(sink) > SINK_ID_MAX or not _NAME.fullmatch(sink):
        raise _invalid(
            "sinkId",
            f"option sinkId: {sink!r} is not a sink name ({_NAME_RULE}, at most "
            f"{SINK_ID_MAX} characters)",
        )
    return sink


@dataclass(frozen=True)
class StagedPart(WriterCommitMessage):
    """What a task tells the commit: the part of `job` it staged (None: it had no rows)."""

    job: str
    part: str | None
    records: int
    # The streaming sink whose micro-batch the job is.
    sink: str | None = None


def _part_name(prefix: str = "") -> str:
    """One part per task attempt: a retried or speculative attempt writes its own."""
    ctx = TaskContext.get()
    if ctx is None:  # called outside a Spark task
        return f"{prefix}{uuid.uuid4().hex}"
    return f"{prefix}p{ctx.partitionId()}-a{ctx.taskAttemptId()}"


def _by_topic(
    options: _WriteOptions, batch: pa.RecordBatch
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of a batch from Spark as (topic, value/key/timestamp/headers batch), each
    topic's rows in their order; Arrow compute only, no Python object per row."""
    if batch.num_rows == 0:
        return
    values = batch.column("value")
    if values.null_count:
        raise _invalid(
            "value",
            f"column value has {values.null_count} null(s): every record needs a value "
            "(filter those rows out, or fill them)",
        )
    names = (
        ["value"]
        + ["key"] * options.key
        + ["timestamp"] * options.timestamp
        + ["headers"] * options.headers
    )
    data = pa.RecordBatch.from_arrays([batch.column(n) for n in names], names=names)
    if options.topic is not None:
        yield options.topic, data
        return
    topics = batch.column("topic")
    if topics.null_count:
        raise _invalid(
            "topic",
            f"column topic has {topics.null_count} null(s): give every row a topic, or set "
            "option topic",
        )
    encoded = pc.dictionary_encode(topics)
    topic_names = encoded.dictionary.to_pylist()
    if len(topic_names) == 1:
        yield topic_names[0], data
        return
    # A stable sort groups each topic's rows and keeps their order.
    data = data.take(pc.sort_indices(encoded.indices))
    counts = pc.value_counts(encoded.indices)
    count_of = dict(
        zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    )
    start = 0
    for index, topic in enumerate(topic_names):
        yield topic, data.slice(start, count_of[index])
        start += count_of[index]


def _stage(
    options: _WriteOptions,
    job: str,
    part: str,
    batches: Iterable[pa.RecordBatch],
    sink: str | None = None,
) -> StagedPart:
    """Stages a task's rows as part `part` of `job`; a task without rows stages nothing."""
    if options.bucket:
        # The task stages on its own disk, then puts the part in the bucket.
        with tempfile.TemporaryDirectory(prefix="tidelog-stage-") as local:
            records = _stage_into(options, local, job, part, batches)
            if records is not None:
                tidelog.bucket_stage_upload(
                    local, job, part, options.path, storage_options=options.storage_options
                )
    else:
        records = _stage_into(options, options.path, job, part, batches)
    if records is None:
        return StagedPart(job, None, 0, sink)
    return StagedPart(job, part, records, sink)


def _stage_into(
    options: _WriteOptions, path: str, job: str, part: str, batches: Iterable[pa.RecordBatch]
) -> int | None:
    """Stages the rows as part `part` of `job` in the directory `path`: its records, or
    None (nothing staged) for no rows."""
    staged = None
    for batch in batches:
        for topic, chunk in _by_topic(options, batch):
            if staged is None:
                staged = tidelog.StagedWriter(path, job, part)
            staged.append_arrow(topic, chunk)
    return None if staged is None else staged.finish()


def _abort(options: _WriteOptions, job: str) -> None:
    if options.bucket:
        tidelog.bucket_stage_abort(options.path, job, storage_options=options.storage_options)
    else:
        tidelog.stage_abort(options.path, job)


def _sink_batch(options: _WriteOptions, sink: str) -> int | None:
    if options.bucket:
        return tidelog.bucket_stage_sink_batch(
            options.path, sink, storage_options=options.storage_options
        )
    return tidelog.stage_sink_batch(options.path, sink)


def _publish(
    options: _WriteOptions,
    job: str,
    messages: Iterable[WriterCommitMessage | None],
    sink: str | None = None,
    batch: int | None = None,
) -> None:
    """Publishes the parts the messages name, in their order (Spark's partition order)."""
    parts = [m.part for m in messages if isinstance(m, StagedPart) and m.part is not None]
    if not parts:
        _abort(options, job)
        return
    if options.bucket:
        # The producer whose tier the bucket is publishes it; this waits for it.
        tidelog.commit_staged(
            options.path,
            job,
            parts,
            sink=sink,
            batch=batch,
            timeout=options.commit_timeout_s,
            storage_options=options.storage_options,
        )
        return
    # Opens the directory to publish; if a process holds it for writing, that one
    # publishes, and this waits.
    try:
        tidelog.commit_staged(
            options.path, job, parts, sink=sink, batch=batch, **options.open_options
        )
    except InvalidArgumentError as e:
        if e.name != "backend" or "backend" in options.open_options:
            raise
        raise _invalid("backend", f'{e}: set .option("backend", "ring")') from e


class TidelogBatchWriter(DataSourceArrowWriter):
    """Exactly once per job: each task attempt stages its own part of the job; the commit
    publishes the parts of the attempts that succeeded, abort discards them all. Nothing is
    visible until the commit, and everything then."""

    def __init__(self, options: _WriteOptions, job: str) -> None:
        self.options = options
        self.job = job
        if not options.bucket:
            os.makedirs(options.path, exist_ok=True)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        return _stage(self.options, self.job, _part_name(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _publish(self.options, self.job, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.options, self.job)


def _stream_job(sink: str, batch_id: int) -> str:
    return f"{sink}-b{batch_id}"


class TidelogStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch is staged as job "<sink>-b<batch id>" and published with the batch
    id recorded as the sink's last, in one step; a batch id the sink already published (a
    replay after a crash) is dropped. The sink is option sinkId, by default
    "spark-<query id>" (the id lives in the checkpoint, so a restart keeps it)."""

    def __init__(self, options: _WriteOptions, sink_id: str | None) -> None:
        self.options = options
        self.sink_id = sink_id
        # Task attempt ids restart with the SparkContext: part names must not collide with
        # those of a replayed batch's earlier run.
        self.run = uuid.uuid4().hex[:12]
        if not options.bucket:
            os.makedirs(options.path, exist_ok=True)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        if batch_id is None or query_id is None:
            raise RuntimeError(
                "tidelog data source: the stream writer runs only in micro-batch queries "
                "(found no micro-batch id in the task)"
            )
        sink = self.sink_id or f"spark-{query_id}"
        job = _stream_job(sink, int(batch_id))
        return _stage(self.options, job, _part_name(f"{self.run}-"), iterator, sink)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m for m in messages if isinstance(m, StagedPart)]
        if not staged:
            return
        sink, job = staged[0].sink, staged[0].job
        assert sink is not None and job == _stream_job(sink, batchId), (job, batchId)
        last = _sink_batch(self.options, sink)
        if last is not None and last >= batchId:
            # A replay: Spark stopped after the publish but before recording its commit.
            if self.options.bucket:
                parts = [m.part for m in staged if m.part is not None]
                tidelog.bucket_stage_abort(
                    self.options.path, job, parts, storage_options=self.options.storage_options
                )
            else:
                tidelog.stage_abort(self.options.path, job)
            return
        _publish(self.options, job, staged, sink=sink, batch=batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        jobs = {m.job for m in messages if isinstance(m, StagedPart)}
        if self.sink_id is not None:
            jobs.add(_stream_job(self.sink_id, batchId))
        for job in sorted(jobs):
            _abort(self.options, job)


def _prorate(backlog: dict[str, int], budget: int) -> dict[str, int]:
    """Spreads `budget` records over the topics in proportion to their backlogs, as Kafka's
    source does (`maxOffsetsPerTrigger`): each takes budget * backlog / total, rounded down,
    but up when below one, so every topic with a backlog moves."""
    total = sum(backlog.values())
    if total <= budget:
        return dict(backlog)
    taken = {}
    for topic, size in backlog.items():
        share = budget * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        taken[topic] = min(take, size)
    return taken

"""The Spark data source (tidelog.spark): batch and streaming writes through PySpark.

Tasks stage their rows (tidelog.StagedWriter, no lock) and the driver's commit publishes
the parts of the attempts that succeeded: a batch job is exactly-once, a streaming
micro-batch is published at most once per id. conftest's `spark` session runs on
local[2,2], so a failed task is retried once, as on a cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import tidelog
from conftest import RING_CAPACITY, open_small, payload, run_python
from pyspark import TaskContext
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import BinaryType, StructField, StructType
from tidelog.spark import StagedPart, TidelogBatchWriter, TidelogDataSource

TS0 = 1_700_000_000_000_000  # microseconds since the epoch

# Rows with ids 0..n-1: binary values and keys (null, empty, non-empty in turn), timestamps.
COLUMNS = [
    "cast(concat('value-', id) as binary) as value",
    "case id % 3 when 0 then null when 1 then x'' else cast(concat('k', id) as binary) end as key",
    f"timestamp_micros({TS0} + id) as timestamp",
]


def key_of(i: int) -> bytes | None:
    return (None, b"", b"k%d" % i)[i % 3]


def expected(ids: range) -> list[tuple[Any, ...]]:
    """(key, value, microseconds) of the rows with these ids."""
    return [(key_of(i), b"value-%d" % i, TS0 + i) for i in ids]


def rows(spark: SparkSession, n: int, partitions: int = 2, *extra: str) -> DataFrame:
    """Rows with ids 0..n-1 in `partitions` partitions, in id order."""
    return spark.range(0, n, 1, partitions).selectExpr(*COLUMNS, *extra)


def stored(path: Path, topic: str) -> list[tuple[Any, ...]]:
    """(key, value, microseconds) of every record of `topic`, in offset order (checked to
    be 0, 1, 2, ...)."""
    with tidelog.open(path, readonly=True) as wal:
        batch = wal.read_arrow(topic, 0)
    assert batch.column("offset").to_pylist() == list(range(batch.num_rows))
    stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    return list(
        zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), stamps, strict=True)
    )


def topics(path: Path) -> list[str]:
    with tidelog.open(path, readonly=True) as wal:
        return sorted(wal.topics())


def staged_jobs(path: Path) -> list[str]:
    """Jobs staged but not published or aborted (names starting with "." are the engine's
    own: sink ledgers, records of published jobs)."""
    staging = path / "staging"
    if not staging.exists():
        return []
    return sorted(p.name for p in staging.iterdir() if not p.name.startswith("."))


def now_us(spark: SparkSession) -> int:
    return int(spark.sql("SELECT unix_micros(current_timestamp())").first()[0])


def append(df: DataFrame, path: Path, **options: Any) -> None:
    df.write.format("tidelog").mode("append").options(**options).save(str(path))


# --- batch writes ---


def test_batch_write_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"  # created by the write
    append(rows(spark, 50), data, topic="events")
    # Offsets follow the partitions' order; keys, values and timestamps round-trip.
    assert stored(data, "events") == expected(range(50))
    got = spark.read.format("tidelog").option("subscribe", "events").load(str(data))
    assert sorted(
        tuple(r)
        for r in got.selectExpr("offset", "key", "value", "unix_micros(timestamp)").collect()
    ) == [(i, *e) for i, e in enumerate(expected(range(50)))]
    assert staged_jobs(data) == []

    # A second job appends after the first. STRING values and keys; no timestamp column, and
    # a null timestamp, mean the time of the write.
    before = now_us(spark)
    strings = spark.range(0, 4, 1, 2).selectExpr(
        "concat('s', id) as value", "cast(id as string) as key"
    )
    append(strings, data, topic="events")
    nulls = spark.range(0, 2, 1, 1).selectExpr(
        "concat('n', id) as value", "cast(null as timestamp) as timestamp"
    )
    append(nulls, data, topic="events")
    after = now_us(spark)
    tail = stored(data, "events")[50:]
    assert [(k, v) for k, v, _ in tail] == [
        (b"0", b"s0"),
        (b"1", b"s1"),
        (b"2", b"s2"),
        (b"3", b"s3"),
        (None, b"n0"),
        (None, b"n1"),
    ]
    assert all(before <= ts <= after for _, _, ts in tail)


def test_topic_from_a_column_or_the_option(spark: SparkSession, tmp_path: Path) -> None:
    # Three topics in each partition; each topic's records keep their rows' order.
    df = rows(spark, 60, 2, "concat('t', id % 3) as topic")
    append(df, tmp_path)
    assert topics(tmp_path) == ["t0", "t1", "t2"]
    for t in range(3):
        assert stored(tmp_path, f"t{t}") == expected(range(t, 60, 3))

    # The option overrides the column, as in Kafka's sink: copy t1 into "copy".
    read = spark.read.format("tidelog").option("subscribe", "t1").load(str(tmp_path))
    append(read, tmp_path, topic="copy")
    assert stored(tmp_path, "copy") == expected(range(1, 60, 3))


MAPPED = pa.schema(
    [("value", pa.binary()), ("key", pa.binary()), ("timestamp", pa.timestamp("us", tz="UTC"))]
)
MAPPED_DDL = "value BINARY, key BINARY, timestamp TIMESTAMP"


def failing(always: bool) -> Any:
    """A mapInArrow function that passes its rows on and then, in every attempt or in
    partition 0's first attempt only, a row without a value: the writer stages the rows
    (in batches of maxRecordsPerBatch) and then fails its task. (A nested function, so
    Spark pickles it by value: workers cannot import this module.)"""

    def fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_arrays(batch.columns, schema=MAPPED)
        ctx = TaskContext.get()
        assert ctx is not None
        if always or (ctx.partitionId() == 0 and ctx.attemptNumber() == 0):
            yield pa.RecordBatch.from_pylist([{"value": None}], schema=MAPPED)

    return fail


def seeing_source(name: str, seen: Path) -> type[TidelogDataSource]:
    """Format `name`: tidelog's, with a commit and abort that first write down the part
    files they find (name and size) into `seen`/commit or `seen`/abort."""

    class Writer(TidelogBatchWriter):
        def see(self, what: str) -> None:
            job = Path(self.options.path) / "staging" / self.job
            parts = sorted((p.name, p.stat().st_size) for p in job.iterdir())
            (seen / what).write_text(json.dumps(parts))

        def commit(self, messages: list[WriterCommitMessage | None]) -> None:
            self.see("commit")
            super().commit(messages)

        def abort(self, messages: list[WriterCommitMessage | None]) -> None:
            self.see("abort")
            super().abort(messages)

    class Source(TidelogDataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def writer(self, schema: StructType, overwrite: bool) -> TidelogBatchWriter:
            plain = super().writer(schema, overwrite)
            return Writer(plain.options, plain.job)

    return Source


@pytest.fixture
def small_batches(spark: SparkSession) -> Iterator[None]:
    """Spark hands the writer batches of 100 rows."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def staged_bytes(seen: Path, what: str) -> dict[str, int]:
    """The part files the commit or abort found: {name: bytes}."""
    return dict(json.loads((seen / what).read_text()))


def parts_found(files: dict[str, int]) -> tuple[list[str], list[str]]:
    """(finished parts, unfinished parts) among a job's files: a part is finished once its
    manifest `PART.stage` exists; until then only its segments `PART.N.seg` do."""
    finished = sorted(f.removesuffix(".stage") for f in files if f.endswith(".stage"))
    started = {f.rsplit(".", 2)[0] for f in files if f.endswith(".seg")}
    return finished, sorted(started - set(finished))


@pytest.mark.usefixtures("small_batches")
def test_exactly_once_when_a_task_is_retried(spark: SparkSession, tmp_path: Path) -> None:
    data, seen = tmp_path / "data", tmp_path
    spark.dataSource.register(seeing_source("tidelog_seen_retry", seen))
    df = rows(spark, 800, 2).mapInArrow(failing(always=False), MAPPED_DDL)
    df.write.format("tidelog_seen_retry").mode("append").option("topic", "t").save(str(data))
    # The commit found three parts: one per successful attempt (a manifest and its segment),
    # and the failed attempt's segment, which has no manifest: the part never finished.
    finished, unfinished = parts_found(staged_bytes(seen, "commit"))
    assert [p.split("-")[0] for p in finished] == ["p0", "p1"]
    assert len(unfinished) == 1 and unfinished[0].startswith("p0-")
    # That part is never published: each row once, in partition order.
    assert stored(data, "t") == expected(range(800))
    assert staged_jobs(data) == []


@pytest.mark.usefixtures("small_batches")
def test_a_failed_job_publishes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    data, seen = tmp_path / "data", tmp_path
    spark.dataSource.register(seeing_source("tidelog_seen_abort", seen))
    # One partition, so no other task of the job still runs when Spark aborts it.
    df = rows(spark, 400, 1).mapInArrow(failing(always=True), MAPPED_DDL)
    with pytest.raises(Exception, match="column value has 1 null"):
        df.write.format("tidelog_seen_abort").mode("append").option("topic", "t").save(str(data))
    # Both attempts began staging before they failed, neither finished; abort discarded them.
    finished, unfinished = parts_found(staged_bytes(seen, "abort"))
    assert finished == [] and len(unfinished) == 2
    assert topics(data) == []
    assert staged_jobs(data) == []


@pytest.mark.usefixtures("backend")
def test_commit_while_this_process_holds_the_directory(spark: SparkSession, tmp_path: Path) -> None:
    """The common set-up: this process holds the directory for writing and keeps appending;
    the commit (in a Spark process) cannot open it, so this process's housekeeping thread
    publishes the job, and the commit waits for that."""
    wal = open_small(tmp_path)
    stop = threading.Event()
    written = [0]

    def produce() -> None:
        while not stop.wait(0.002) and written[0] < 20_000:
            wal.append_batch("events", [payload(written[0] + i, 30) for i in range(10)])
            written[0] += 10

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        append(rows(spark, 300, 2), tmp_path, topic="results")
        # Published by this handle: visible here at once, in one contiguous range.
        assert wal.topic_info("results").next_offset == 300
    finally:
        stop.set()
        producer.join()
    try:
        events = wal.read_arrow("events", 0)
        assert events.column("value").to_pylist() == [payload(i, 30) for i in range(written[0])]
    finally:
        wal.close()
    assert stored(tmp_path, "results") == expected(range(300))
    assert staged_jobs(tmp_path) == []


# --- streaming writes ---


def stream_copy(
    spark: SparkSession, source: Path, target: Path, checkpoint: Path, **options: Any
) -> Any:
    """Copies topic "in" of `source` into `target` with trigger(availableNow=True), at most
    20 records per micro-batch; returns the finished query."""
    query = (
        spark.readStream.format("tidelog")
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 20)
        .load(str(source))
        .writeStream.format("tidelog")
        .options(**options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(target))
    )
    query.awaitTermination(120)
    assert not query.isActive
    assert query.exception() is None
    return query


def test_stream_write_drops_a_replayed_micro_batch(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    checkpoint = tmp_path / "checkpoint"
    with open_small(data) as wal:
        wal.append_batch("in", [payload(i, 12) for i in range(30)])

    def copied() -> list[bytes]:
        return [v for _, v, _ in stored(data, "out")]

    # The option topic overrides the rows' topic ("in"). Two micro-batches: 20 + 10.
    query = stream_copy(spark, data, data, checkpoint, topic="out")
    sink = f"spark-{query.id}"
    assert copied() == [payload(i, 12) for i in range(30)]
    assert tidelog.stage_sink_batch(data, sink) == 1

    # As if Spark had died after the publish but before recording the commit of batch 1:
    # the restart runs batch 1 again, and the sink drops it.
    (checkpoint / "commits" / "1").unlink()
    (checkpoint / "commits" / ".1.crc").unlink()
    replay = stream_copy(spark, data, data, checkpoint, topic="out")
    assert replay.id == query.id
    assert [p["batchId"] for p in replay.recentProgress] == [1]
    assert (checkpoint / "commits" / "1").exists()
    assert copied() == [payload(i, 12) for i in range(30)]
    assert staged_jobs(data) == []

    # New records go on in batch 2.
    with open_small(data) as wal:
        wal.append_batch("in", [payload(i, 12) for i in range(30, 35)])
    stream_copy(spark, data, data, checkpoint, topic="out")
    assert copied() == [payload(i, 12) for i in range(35)]
    assert tidelog.stage_sink_batch(data, sink) == 2


def test_stream_write_topics_from_the_column_with_a_sink_id(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    with open_small(source) as wal:
        wal.append_batch("in", [payload(i, 8) for i in range(25)])
    # Into another directory, each row into its topic column's topic ("in").
    stream_copy(spark, source, target, tmp_path / "checkpoint", sinkId="copy-in")
    assert [v for _, v, _ in stored(target, "in")] == [payload(i, 8) for i in range(25)]
    assert tidelog.stage_sink_batch(target, "copy-in") == 1
    # A new query (a fresh checkpoint, so a new query id and default sink) starts again at
    # batch 0: another sink's ledger does not make it drop its batches.
    stream_copy(spark, source, target, tmp_path / "fresh")
    assert [v for _, v, _ in stored(target, "in")] == 2 * [payload(i, 8) for i in range(25)]


# --- user mistakes ---


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        (["'v' as value"], {"path": None, "topic": "t"}, "option path is required"),
        (["'v' as value"], {}, "no topic: set option topic"),
        (["'v' as value"], {"topic": "a b"}, "option topic: 'a b' is not a topic name"),
        (["'v' as value", "1 as topic"], {}, "column topic must be STRING, not INT"),
        (["'v' as val"], {"topic": "t"}, "the input needs a value column"),
        (["1 as value"], {"topic": "t"}, "column value must be BINARY or STRING, not INT"),
        (["'v' as value", "1.5 as key"], {"topic": "t"}, "column key must be BINARY or STRING"),
        (["'v' as value", "1 as timestamp"], {"topic": "t"}, "column timestamp must be TIMESTAMP"),
        # Found in the task (and the retry), after the driver's checks.
        (
            ["if(id = 1, null, 'v') as value"],
            {"topic": "t"},
            "column value has 1 null(s): every record needs a value",
        ),
        (
            ["'v' as value", "if(id = 2, null, 't') as topic"],
            {},
            "column topic has 1 null(s)",
        ),
    ],
)
def test_batch_write_mistakes(
    spark: SparkSession,
    tmp_path: Path,
    columns: list[str],
    options: dict[str, Any],
    message: str,
) -> None:
    df = spark.range(0, 3, 1, 1).selectExpr(*columns)
    writer = df.write.format("tidelog").mode("append")
    path = None if options.pop("path", "given") is None else str(tmp_path / "data")
    with pytest.raises(Exception, match="tidelog data source: ") as info:
        writer.options(**options).save(path)
    assert message in str(info.value)
    if (tmp_path / "data").exists():
        assert topics(tmp_path / "data") == []
        assert staged_jobs(tmp_path / "data") == []


def test_save_modes(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.range(1).selectExpr("'v' as value")
    # Spark itself rejects its default mode, ErrorIfExists.
    with pytest.raises(AnalysisException, match='cannot be written in the "ErrorIfExists" mode'):
        df.write.format("tidelog").option("topic", "t").save(str(tmp_path))
    with pytest.raises(AnalysisException, match="append-only log and cannot be overwritten"):
        df.write.format("tidelog").mode("overwrite").option("topic", "t").save(str(tmp_path))
    append(df, tmp_path, topic="t")
    assert [v for _, v, _ in stored(tmp_path, "t")] == [b"v"]


def test_crashed_ring_directory_needs_the_backend_option(
    spark: SparkSession, tmp_path: Path
) -> None:
    # A ring-fronted directory whose writer died: only a ring-backed open (which replays
    # the ring) may open it, so the commit, publishing the job itself, needs backend "ring".
    crashed = run_python(
        f"""
        import os, tidelog
        wal = tidelog.open({str(tmp_path)!r}, backend="ring", capacity={RING_CAPACITY})
        wal.append("t", b"before")
        os._exit(0)
        """
    )
    assert crashed.returncode == 0, crashed.stderr
    df = spark.range(0, 3, 1, 1).selectExpr("concat('r', id) as value")
    with pytest.raises(Exception, match=r'ring backend: set \.option\("backend", "ring"\)'):
        append(df, tmp_path, topic="t")
    assert staged_jobs(tmp_path) == []
    append(df, tmp_path, topic="t", backend="ring")
    assert [v for _, v, _ in stored(tmp_path, "t")] == [b"before", b"r0", b"r1", b"r2"]


def test_stream_write_mistakes(spark: SparkSession, tmp_path: Path) -> None:
    with open_small(tmp_path / "data") as wal:
        wal.append("in", b"x")
    events = (
        spark.readStream.format("tidelog")
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .load(str(tmp_path / "data"))
    )

    def run(df: DataFrame, name: str, mode: str = "append", **options: Any) -> None:
        query = (
            df.writeStream.format("tidelog")
            .outputMode(mode)
            .options(**options)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start(str(tmp_path / "data"))
        )
        query.awaitTermination(60)

    with pytest.raises(StreamingQueryException, match="option sinkId: 'no/slash' is not a sink"):
        run(events, "sink", topic="out", sinkId="no/slash")
    counts = events.groupBy("topic").count().selectExpr("cast(count as string) as value")
    with pytest.raises(StreamingQueryException, match="cannot be overwritten"):
        run(counts, "complete", mode="complete", topic="out")
    assert topics(tmp_path / "data") == ["in"]


def test_writer_without_spark_tasks(tmp_path: Path) -> None:
    """The writer's protocol called directly, as Spark would: parts from two attempts of
    the same partition, only the one named in the commit is published."""
    source = TidelogDataSource({"path": str(tmp_path), "topic": "t"})
    writer = source.writer(StructType([StructField("value", BinaryType())]), overwrite=False)
    batch = pa.record_batch([pa.array([b"a", b"b"])], names=["value"])
    lost = writer.write(iter([batch]))
    kept = writer.write(iter([batch, batch.slice(0, 1)]))
    empty = writer.write(iter([]))
    assert isinstance(lost, StagedPart) and lost.records == 2
    assert (kept.records, empty.part) == (3, None)
    writer.commit([kept, empty])
    assert [v for _, v, _ in stored(tmp_path, "t")] == [b"a", b"b", b"a"]
    assert staged_jobs(tmp_path) == []

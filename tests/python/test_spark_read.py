"""The Spark data source (tidelog.spark): batch and streaming reads through PySpark.

One local[2] SparkSession (conftest's `spark` fixture) serves them all. Spark runs the data
source in its own Python worker processes, which open the directory read-only; the test
process meanwhile may hold it open for writing, as a producer would.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import tidelog
import tidelog.spark
from conftest import open_small, payload, run_python
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    Not,
    StringStartsWith,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

TS0 = 1_700_000_000_000_000  # microseconds since the epoch

SPARK_SCHEMA = StructType(
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


def key_of(i: int) -> bytes | None:
    """Null, empty and non-empty keys in turn."""
    return (None, b"", b"k%d" % i)[i % 3]


def fill(path: Path, counts: dict[str, int]) -> None:
    """Appends `counts[topic]` records to each topic, and closes (so all are durable)."""
    with open_small(path) as wal:
        for topic, count in counts.items():
            for i in range(count):
                wal.append(topic, payload(i, 20 + i % 7), key=key_of(i), timestamp=TS0 + i)


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """(topic, offset, key, value, microseconds) sorted; timestamps as integers so the
    machine's time zone does not matter."""
    got = df.selectExpr("topic", "offset", "key", "value", "unix_micros(timestamp)").collect()
    return sorted((r[0], r[1], r[2], r[3], r[4]) for r in got)


def expected(topic: str, offsets: range) -> list[tuple[Any, ...]]:
    return [(topic, i, key_of(i), payload(i, 20 + i % 7), TS0 + i) for i in offsets]


def read(spark: SparkSession, path: Path | str, **options: Any) -> DataFrame:
    return spark.read.format("tidelog").options(**options).load(str(path))


# --- batch reads ---


def test_import_tidelog_does_not_import_pyspark() -> None:
    proc = run_python(
        """
        import sys
        import tidelog
        loaded = sorted(m for m in sys.modules if m.startswith("pyspark"))
        assert not loaded, loaded
        """
    )
    assert proc.returncode == 0, proc.stderr


def test_batch_read_round_trip_without_register(spark: SparkSession, tmp_path: Path) -> None:
    # First use in the session: format("tidelog") resolves through the pyspark_tidelog module.
    fill(tmp_path, {"a": 45, "b": 12, "c": 3})
    df = read(spark, tmp_path, subscribe="a,b", maxRecordsPerPartition=10)
    assert df.schema == SPARK_SCHEMA
    # 45 records split into 5 partitions, 12 into 2.
    assert df.rdd.getNumPartitions() == 7
    assert rows(df) == expected("a", range(45)) + expected("b", range(12))


def test_register_and_arrow_types(spark: SparkSession, tmp_path: Path) -> None:
    tidelog.spark.register(spark)
    fill(tmp_path, {"t": 5})
    table = read(spark, tmp_path, subscribe="t").toArrow()
    assert [(f.name, f.type) for f in table.schema] == [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [TS0 + i for i in range(5)]
    assert table.column("key").to_pylist() == [key_of(i) for i in range(5)]


def test_starting_and_ending_offsets(spark: SparkSession, tmp_path: Path) -> None:
    fill(tmp_path, {"a": 30, "b": 20})

    def offsets(**options: Any) -> dict[str, list[int]]:
        got: dict[str, list[int]] = {"a": [], "b": []}
        for topic, offset, *_ in rows(read(spark, tmp_path, subscribe="a, b", **options)):
            got[topic].append(offset)
        return got

    assert offsets(startingOffsets="earliest", endingOffsets="latest") == {
        "a": list(range(30)),
        "b": list(range(20)),
    }
    # The ending offset is exclusive; a topic left out of the JSON takes the default.
    assert offsets(startingOffsets='{"a": 5}', endingOffsets='{"a": 9, "b": 3}') == {
        "a": [5, 6, 7, 8],
        "b": [0, 1, 2],
    }
    # Kafka's -2 (earliest) and -1 (latest) inside the JSON.
    assert offsets(startingOffsets='{"a": 28, "b": -1}', endingOffsets='{"a": -1}') == {
        "a": [28, 29],
        "b": [],
    }
    assert offsets(startingOffsets="latest") == {"a": [], "b": []}
    assert offsets(endingOffsets="earliest") == {"a": [], "b": []}
    assert offsets(startingOffsets='{"a": 30, "b": 20}') == {"a": [], "b": []}


def test_sql_temporary_view(spark: SparkSession, tmp_path: Path) -> None:
    fill(tmp_path, {"orders": 25})
    spark.sql(
        f"""CREATE OR REPLACE TEMPORARY VIEW orders USING tidelog OPTIONS (
            path '{tmp_path}', subscribe 'orders', startingOffsets '{{"orders": 10}}')"""
    )
    got = spark.sql("SELECT count(*), min(offset), max(offset) FROM orders").collect()
    assert tuple(got[0]) == (15, 10, 24)
    spark.catalog.dropTempView("orders")


@pytest.mark.usefixtures("backend")
def test_reads_while_a_writer_appends(spark: SparkSession, tmp_path: Path) -> None:
    """The common set-up: this process holds the directory open for writing and keeps
    appending; Spark's workers read what is durable, a contiguous prefix, without a lock."""
    wal = open_small(tmp_path)
    stop = threading.Event()
    written = [0]

    def produce() -> None:
        # Paced and capped, so the reads overlap the appends yet stay small on a fast disk.
        while not stop.wait(0.005) and written[0] < 4000:
            n = written[0]
            wal.append_batch("events", [payload(n + i, 30) for i in range(20)])
            wal.flush()  # durable, so read-only handles see it
            written[0] = n + 20

    try:
        wal.append_batch("events", [payload(i, 30) for i in range(100)])
        wal.flush()
        written[0] = 100
        producer = threading.Thread(target=produce)
        producer.start()
        try:
            counts = []
            for _ in range(2):
                got = read(spark, tmp_path, subscribe="events", maxRecordsPerPartition=1000)
                values = got.select("offset", "value").collect()
                offsets = sorted(r.offset for r in values)
                assert offsets == list(range(len(offsets)))
                assert all(r.value == payload(r.offset, 30) for r in values)
                counts.append(len(offsets))
        finally:
            stop.set()
            producer.join()
        assert 100 <= counts[0] <= counts[1] <= written[0]
        # Once the producer is done, a read sees every record, the writer still open.
        assert read(spark, tmp_path, subscribe="events").count() == written[0]
    finally:
        wal.close()


def test_map_in_arrow_with_read_arrow(spark: SparkSession, tmp_path: Path) -> None:
    """Plain per-partition use: each task reads its own range with read_arrow."""
    fill(tmp_path, {"t": 40})
    path = str(tmp_path)
    out_schema = pa.schema([pa.field("offset", pa.int64()), pa.field("value", pa.binary())])

    def read_ranges(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with tidelog.open(path, readonly=True) as wal:
            for ranges in batches:
                for start, end in zip(*ranges.to_pydict().values(), strict=True):
                    batch = wal.read_arrow("t", start, end)
                    yield pa.RecordBatch.from_arrays(
                        [batch.column("offset"), batch.column("value")], schema=out_schema
                    )

    ranges = spark.createDataFrame([(0, 15), (15, 30), (30, 40)], "start BIGINT, end BIGINT")
    got = ranges.repartition(2).mapInArrow(read_ranges, "offset BIGINT, value BINARY").collect()
    assert sorted((r.offset, r.value) for r in got) == [
        (i, payload(i, 20 + i % 7)) for i in range(40)
    ]


# --- streaming reads ---


def test_stream_available_now_with_admission_control_and_restart(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    checkpoint = tmp_path / "checkpoint"
    # The producer holds the directory open for writing all along.
    wal = open_small(data)
    batches: list[tuple[int, list[tuple[str, int, bytes]]]] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        got = [
            (r.topic, r.offset, r.value) for r in df.select("topic", "offset", "value").collect()
        ]
        batches.append((batch_id, sorted(got)))

    def append(topic: str, offsets: range) -> None:
        wal.append_batch(topic, [payload(i, 10) for i in offsets])

    def run_query() -> None:
        query = (
            spark.readStream.format("tidelog")
            .option("subscribe", "a,b")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 40)
            .option("maxRecordsPerPartition", 15)
            .load(str(data))
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert not query.isActive
        assert query.exception() is None

    try:
        append("a", range(50))
        append("b", range(30))
        wal.flush()
        run_query()
        # 40 per batch, in proportion to the backlogs (Kafka's rule): 25 of a's 50 and 15
        # of b's 30, then the 40 left.
        assert [len(b) for _, b in batches] == [40, 40]
        assert [sum(t == "b" for t, _, _ in b) for _, b in batches] == [15, 15]

        append("a", range(50, 70))
        append("b", range(30, 35))
        wal.flush()
        run_query()
        # The restart reads only what was appended since: 25 records, one batch.
        assert [len(b) for _, b in batches] == [40, 40, 25]
        assert [batch_id for batch_id, _ in batches] == [0, 1, 2]
        seen = [(t, o) for _, b in batches for t, o, _ in b]
        assert sorted(seen) == [("a", i) for i in range(70)] + [("b", i) for i in range(35)]
        assert all(v == payload(o, 10) for _, b in batches for _, o, v in b)
    finally:
        wal.close()


def stream_reader(path: Path, **options: Any) -> tidelog.spark.TidelogStreamReader:
    """The stream reader Spark would build, called directly (its offsets logic needs no
    Spark job)."""
    source = tidelog.spark.TidelogDataSource({k.lower(): str(v) for k, v in options.items()})
    source.options["path"] = str(path)
    return source.streamReader(SPARK_SCHEMA)


def test_stream_offsets_and_available_now_target(tmp_path: Path) -> None:
    fill(tmp_path, {"a": 10, "b": 4, "c": 1})
    with open_small(tmp_path) as wal:
        reader = stream_reader(tmp_path, subscribe="a,b,c", maxOffsetsPerTrigger=9)
        assert reader.getDefaultReadLimit() == ReadMaxRows(9)
        # startingOffsets defaults to latest, as in Spark's Kafka source.
        assert reader.initialOffset() == {"a": 10, "b": 4, "c": 1}
        start = {"a": 0, "b": 0, "c": 0}
        # 9 over backlogs of 10, 4 and 1, in proportion as Kafka's source does: 6, 2.4 and
        # 0.6, rounded down, but up below one.
        assert reader.latestOffset(start, ReadMaxRows(9)) == {"a": 6, "b": 2, "c": 1}
        assert reader.latestOffset(start, ReadMaxRows(2)) == {"a": 1, "b": 1, "c": 1}
        assert reader.latestOffset(start, ReadAllAvailable()) == {"a": 10, "b": 4, "c": 1}
        # A topic missing from a checkpointed offset starts at its earliest.
        assert reader.latestOffset({"a": 10}, ReadMaxRows(100)) == {"a": 10, "b": 4, "c": 1}

        reader.prepareForTriggerAvailableNow()
        wal.append("a", b"late")
        wal.flush()
        # Never past the target recorded when AvailableNow started...
        assert reader.latestOffset(start, ReadAllAvailable()) == {"a": 10, "b": 4, "c": 1}
        assert reader.latestOffset({"a": 10, "b": 4, "c": 1}, ReadMaxRows(9)) == {
            "a": 10,
            "b": 4,
            "c": 1,
        }
        # ...while a plain trigger sees the new record.
        fresh = stream_reader(tmp_path, subscribe="a,b,c")
        assert fresh.getDefaultReadLimit() == ReadAllAvailable()
        assert fresh.latestOffset(start, ReadAllAvailable())["a"] == 11
        assert fresh.reportLatestOffset() == {"a": 11, "b": 4, "c": 1}

    end = {"a": 10, "b": 4, "c": 1}
    assert reader.partitions(end, end) == []
    parts = stream_reader(tmp_path, subscribe="a,b,c", maxRecordsPerPartition=4).partitions(
        {"a": 1, "b": 4, "c": 0}, end
    )
    assert [(p.topic, p.start, p.end) for p in parts] == [
        ("a", 1, 5),
        ("a", 5, 9),
        ("a", 9, 10),
        ("c", 0, 1),
    ]
    earliest = stream_reader(tmp_path, subscribe="a,b", startingOffsets='{"b": 3}')
    assert earliest.initialOffset() == {"a": 0, "b": 3}


# --- user mistakes ---


def load_and_collect(spark: SparkSession, path: Path | None, **options: Any) -> None:
    reader = spark.read.format("tidelog").options(**options)
    (reader.load() if path is None else reader.load(str(path))).collect()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"path": None, "subscribe": "a"}, "option path is required"),
        ({"path": "missing", "subscribe": "a"}, "No such file or directory"),
        ({}, "with exactly one of the options subscribe"),
        ({"subscribe": " , "}, "no topic named"),
        ({"subscribe": "a", "subscribePattern": "a.*"}, "got subscribe, subscribePattern"),
        ({"subscribePattern": "zz.*"}, "no topic of"),
        ({"subscribePattern": "(unclosed"}, "is not a pattern"),
        ({"assign": '{"a": [1]}'}, "a tidelog topic is one partition"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"1": 0}}'}, "names partitions ['1']"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, 'must be "true" or "false"'),
        ({"subscribe": "a", "startingTimestamp": "-5"}, "must be an integer >= 0"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "x"}, '"error" or "latest"'),
        ({"subscribe": "a", "startingTimestamp": str(2**50)}, "no record at or after"),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be a"),
        ({"subscribe": "a,nope"}, "topic 'nope', which does not exist"),
        ({"subscribe": "a", "startingOffsets": "{oops"}, "option startingOffsets must be"),
        ({"subscribe": "a", "endingOffsets": "[1]"}, "option endingOffsets must be a JSON object"),
        ({"subscribe": "a", "startingOffsets": '{"b": 0}'}, "names topic 'b', which is not"),
        ({"subscribe": "a", "startingOffsets": '{"a": "x"}'}, "must be an integer >= 0"),
        ({"subscribe": "a", "startingOffsets": '{"a": 99}'}, "offset 99 of topic 'a' is out of"),
        ({"subscribe": "a", "endingOffsets": '{"a": 11}'}, "stored offsets are 0..10"),
        ({"subscribe": "a", "startingOffsets": '{"a": 5}', "endingOffsets": '{"a": 2}'}, "past"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "many"}, "maxOffsetsPerTrigger must be a"),
        ({"subscribe": "a", "maxRecordsPerPartition": "0"}, "maxRecordsPerPartition must be a"),
    ],
)
def test_batch_mistakes(
    spark: SparkSession, tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    fill(tmp_path / "wal", {"a": 10})
    options = dict(options)
    path: Path | None = tmp_path / "wal"
    if "path" in options:
        given = options.pop("path")
        path = None if given is None else tmp_path / given
    with pytest.raises(AnalysisException) as info:
        load_and_collect(spark, path, **options)
    assert message in str(info.value)


def test_fixed_schema_and_stream_mistakes(spark: SparkSession, tmp_path: Path) -> None:
    fill(tmp_path / "wal", {"a": 3})
    with pytest.raises(AnalysisException, match="the schema is fixed"):
        spark.read.format("tidelog").schema("value BINARY").option("subscribe", "a").load(
            str(tmp_path / "wal")
        ).collect()

    def stream(name: str, **options: Any) -> None:
        query = (
            spark.readStream.format("tidelog")
            .options(subscribe="a", **options)
            .load(str(tmp_path / "wal"))
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(60)

    # A stream checks its options when the query starts.
    with pytest.raises(StreamingQueryException, match="endingOffsets is for batch reads only"):
        stream("ending", endingOffsets="latest")
    with pytest.raises(StreamingQueryException, match="offset 7 of topic 'a' is out of range"):
        stream("range", startingOffsets=json.dumps({"a": 7}))


# --- reads from a bucket (the tier) ---


@pytest.mark.mmap_only("the tier needs the data files alone")
def test_batch_and_stream_reads_from_a_bucket_alone(spark: SparkSession, tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    log = tmp_path / "log"
    with tidelog.open(log, tier=bucket.as_uri(), block_size=65536) as wal:
        for topic, count in {"a": 300, "b": 7}.items():
            for i in range(count):
                wal.append(topic, payload(i, 20 + i % 7), key=key_of(i), timestamp=TS0 + i)
        wal.tier_flush(timeout=60)
    # Every task reads the bucket: the producer's directory is gone.
    shutil.rmtree(log)
    url = bucket.as_uri()
    df = read(spark, url, subscribe="a,b", maxRecordsPerPartition=100)
    assert rows(df) == expected("a", range(300)) + expected("b", range(7))
    ranged = read(spark, url, subscribe="a", startingOffsets='{"a": 250}')
    assert rows(ranged) == expected("a", range(250, 300))
    query = (
        spark.readStream.format("tidelog")
        .option("subscribe", "b")
        .option("startingOffsets", "earliest")
        .load(url)
        .writeStream.format("memory")
        .queryName("from_bucket")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    got = spark.sql("select offset from from_bucket").collect()
    assert sorted(r[0] for r in got) == list(range(7))


@pytest.mark.mmap_only("the tier needs the data files alone")
def test_batch_and_stream_writes_through_a_bucket(spark: SparkSession, tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    url = bucket.as_uri()
    with tidelog.open(tmp_path / "log", tier=url, block_size=65536) as wal:
        wal.append("out", b"before")
        # The tasks put their parts in the bucket; this process (the producer) publishes.
        df = spark.createDataFrame(
            [(f"v{i}".encode(), f"k{i}") for i in range(500)], "value binary, key string"
        ).repartition(4)
        df.write.format("tidelog").mode("append").option("topic", "out").save(url)
        assert wal.topic_info("out").next_offset == 501
        got = sorted(bytes(wal.read("out", o).value) for o in range(1, 501))
        assert got == sorted(f"v{i}".encode() for i in range(500))
        # A stream: each micro-batch once, through the bucket's sink record.
        source = tmp_path / "source"
        source.mkdir()
        (source / "a.json").write_text(
            "".join(json.dumps({"value": f"s{i}"}) + "\n" for i in range(30))
        )
        query = (
            spark.readStream.schema("value string")
            .json(str(source))
            .writeStream.format("tidelog")
            .option("topic", "stream")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start(url)
        )
        query.awaitTermination(120)
        assert wal.topic_info("stream").next_offset == 30
        assert tidelog.bucket_stage_sink_batch(url, f"spark-{query.id}") == 0
        # Staged parts leave the bucket once published.
        assert not list((bucket / "_tidelog" / "staging").rglob("*.seg"))
    # No producer attached: the commit waits its timeout and says why.
    lonely = (tmp_path / "lonely").as_uri()
    with pytest.raises(Exception, match="no producer"):
        spark.createDataFrame([(b"v",)], "value binary").write.format("tidelog").mode(
            "append"
        ).option("topic", "t").option("commitTimeoutMs", "1500").save(lonely)


# --- Kafka's source's options and columns ---

MS0 = TS0 // 1000  # milliseconds since the epoch


def fill_by_ms(path: Path, counts: dict[str, int]) -> None:
    """As `fill`, with record i of each topic at MS0 + i milliseconds."""
    with open_small(path) as wal:
        for topic, count in counts.items():
            for i in range(count):
                wal.append(topic, payload(i, 20 + i % 7), key=key_of(i), timestamp=TS0 + i * 1000)


def offsets_of(df: DataFrame) -> list[tuple[str, int]]:
    return sorted((r[0], r[1]) for r in df.select("topic", "offset").collect())


def test_kafka_topics_offsets_timestamps_and_columns(spark: SparkSession, tmp_path: Path) -> None:
    fill_by_ms(tmp_path, {"ab1": 30, "ab2": 5, "other": 3})
    # Kafka's columns: partition 0, timestampType 0 (create time).
    df = read(spark, tmp_path, subscribePattern="ab[0-9]")
    got = df.select("topic", "partition", "timestampType").distinct().collect()
    assert sorted((r[0], r[1], r[2]) for r in got) == [("ab1", 0, 0), ("ab2", 0, 0)]
    assert len(offsets_of(df)) == 35
    assert offsets_of(read(spark, tmp_path, assign='{"ab2": [0]}')) == [
        ("ab2", i) for i in range(5)
    ]
    # Offsets in Kafka's shape, and flat.
    kafka_shaped = read(
        spark,
        tmp_path,
        subscribe="ab1,ab2",
        startingOffsets='{"ab1": {"0": 25}, "ab2": {"0": -1}}',
        endingOffsets='{"ab1": {"0": 28}}',
    )
    assert offsets_of(kafka_shaped) == [("ab1", 25), ("ab1", 26), ("ab1", 27)]
    # By time: the first record at or after the start, up to the first at or after the end.
    timed = read(
        spark, tmp_path, subscribe="ab1", startingTimestamp=MS0 + 10, endingTimestamp=MS0 + 13
    )
    assert offsets_of(timed) == [("ab1", 10), ("ab1", 11), ("ab1", 12)]
    per_topic = read(
        spark,
        tmp_path,
        subscribe="ab1,ab2",
        startingOffsetsByTimestamp=json.dumps({"ab1": {"0": MS0 + 28}, "ab2": {"0": MS0 + 3}}),
    )
    assert offsets_of(per_topic) == [("ab1", 28), ("ab1", 29), ("ab2", 3), ("ab2", 4)]
    # The global timestamp wins over the per-topic one and over offsets (Kafka's order).
    both = read(
        spark,
        tmp_path,
        subscribe="ab2",
        startingTimestamp=MS0 + 4,
        startingOffsetsByTimestamp=json.dumps({"ab2": {"0": MS0}}),
        startingOffsets="earliest",
    )
    assert offsets_of(both) == [("ab2", 4)]
    # Past the last record: an error by default, the end with the "latest" strategy.
    late = {"subscribe": "ab2", "startingTimestamp": MS0 + 999}
    with pytest.raises(AnalysisException, match="no record at or after"):
        read(spark, tmp_path, **late).collect()
    assert read(spark, tmp_path, startingOffsetsByTimestampStrategy="latest", **late).count() == 0
    # minPartitions: at least that many, where the records allow.
    assert read(spark, tmp_path, subscribe="ab1", minPartitions=6).rdd.getNumPartitions() >= 6


def test_fail_on_data_loss(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with open_small(path, retention_bytes=4096) as wal:
        for i in range(400):
            wal.append("r", payload(i, 200))
        wal.flush()
        deadline = time.monotonic() + 30
        while wal.topic_info("r").first_offset == 0:
            assert time.monotonic() < deadline, "retention never ran"
            time.sleep(0.02)
            wal.flush()
        first = wal.topic_info("r").first_offset
    # Offsets retention removed: an error, or skipped with failOnDataLoss=false.
    with pytest.raises(AnalysisException, match="failOnDataLoss"):
        read(spark, path, subscribe="r", startingOffsets='{"r": 0}').collect()
    kept = read(spark, path, subscribe="r", startingOffsets='{"r": 0}', failOnDataLoss="false")
    assert offsets_of(kept) == [("r", i) for i in range(first, 400)]
    # A stream whose checkpoint is behind the first stored offset.
    strict = stream_reader(path, subscribe="r")
    with pytest.raises(tidelog.OffsetOutOfRangeError, match="failOnDataLoss"):
        strict.latestOffset({"r": 0}, ReadAllAvailable())
    lenient = stream_reader(path, subscribe="r", failOnDataLoss="false")
    assert lenient.partitions({"r": 0}, {"r": 400})[0].start == first


def test_subscribe_pattern_streams_pick_up_new_topics(tmp_path: Path) -> None:
    fill(tmp_path, {"ev-a": 3})
    reader = stream_reader(tmp_path, subscribePattern="ev-.*", startingOffsets="earliest")
    assert reader.initialOffset() == {"ev-a": 0}
    fill(tmp_path, {"ev-b": 2, "other": 1})
    # A topic created since joins at its next trigger, from its earliest.
    assert reader.latestOffset({"ev-a": 0}, ReadAllAvailable()) == {"ev-a": 3, "ev-b": 2}
    assert [
        (p.topic, p.start, p.end) for p in reader.partitions({"ev-a": 3}, {"ev-a": 3, "ev-b": 2})
    ] == [("ev-b", 0, 2)]


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(tmp_path: Path) -> None:
    fill(tmp_path, {"m": 5})
    options = {"subscribe": "m", "minOffsetsPerTrigger": 10, "maxTriggerDelay": "300ms"}
    reader = stream_reader(tmp_path, **options)
    assert reader.getDefaultReadLimit() == ReadMinRows(10)
    # 5 records, fewer than 10: the trigger waits (no new end)...
    assert reader.latestOffset({"m": 0}, ReadMinRows(10)) == {"m": 0}
    time.sleep(0.35)
    # ...until the delay has passed: then it takes what there is.
    assert reader.latestOffset({"m": 0}, ReadMinRows(10)) == {"m": 5}
    fill(tmp_path, {"m": 12})
    # Enough at once: no wait.
    assert reader.latestOffset({"m": 5}, ReadMinRows(10)) == {"m": 17}
    # availableNow reads what it found, however little.
    fresh = stream_reader(tmp_path, **options)
    fresh.prepareForTriggerAvailableNow()
    assert fresh.latestOffset({"m": 15}, ReadMinRows(10)) == {"m": 17}
    with pytest.raises(tidelog.InvalidArgumentError, match="duration"):
        stream_reader(tmp_path, subscribe="m", maxTriggerDelay="soon")


def test_include_headers_reads_kafkas_column_and_the_sink_writes_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    with open_small(src) as wal:
        wal.append("t", b"none")
        wal.append("t", b"two", headers=[("a", b"1"), ("a", None)])
        wal.append("t", b"one", headers=[("trace", b"t-9")])
    # Without the option: Kafka's seven columns; with it, headers last, null when none.
    assert read(spark, src, subscribe="t").columns == SPARK_SCHEMA.names
    df = read(spark, src, subscribe="t", includeHeaders="true")
    assert df.columns == [*SPARK_SCHEMA.names, "headers"]
    assert df.schema["headers"].dataType.simpleString() == (
        "array<struct<key:string,value:binary>>"
    )
    got = sorted((r.offset, r.headers) for r in df.select("offset", "headers").collect())
    assert [(o, None if h is None else [(x.key, x.value) for x in h]) for o, h in got] == [
        (0, None),
        (1, [("a", bytearray(b"1")), ("a", None)]),
        (2, [("trace", bytearray(b"t-9"))]),
    ]
    # The sink takes the same column: a copy keeps every header.
    df.select("value", "headers").write.format("tidelog").option("topic", "copy").mode(
        "append"
    ).save(str(dst))
    with tidelog.open(dst, readonly=True) as wal:
        assert [wal.read("copy", i).headers for i in range(3)] == [
            [],
            [("a", b"1"), ("a", None)],
            [("trace", b"t-9")],
        ]
    bad = spark.createDataFrame([(b"v", ["x"])], "value binary, headers array<string>")
    with pytest.raises(Exception, match="column headers must be"):
        bad.write.format("tidelog").option("topic", "copy").mode("append").save(str(dst))


# --- filter pushdown ---


def fill_out_of_order(path: Path) -> None:
    """Topics a (40 records), b (10), c (5), record i at MS0 + i ms, except a's record 20,
    written at MS0 + 5 ms: timestamps are the writer's and need not grow with offsets."""
    with open_small(path) as wal:
        for topic, count in {"a": 40, "b": 10, "c": 5}.items():
            for i in range(count):
                at = 5 if (topic, i) == ("a", 20) else i
                wal.append(topic, payload(i, 20), timestamp=TS0 + at * 1000)


def at_ms(ms: int) -> datetime:
    """A TIMESTAMP literal as Spark hands it to pushFilters: zone-aware, UTC."""
    return datetime.fromtimestamp(0, UTC) + timedelta(microseconds=TS0 + ms * 1000)


def filtering_reader(path: Path, **options: Any) -> tidelog.spark.TidelogFilteringReader:
    """The batch reader Spark builds for a session with filter pushdown on."""
    source = tidelog.spark.TidelogFilteringSource({k.lower(): str(v) for k, v in options.items()})
    source.options["path"] = str(path)
    return source.reader(SPARK_SCHEMA)


def ranges_of(parts: list[tidelog.spark.TopicRange]) -> list[tuple[str, int, int]]:
    return sorted((p.topic, p.start, p.end) for p in parts if p.start < p.end)


def test_pushed_filters_narrow_topics_offsets_and_times(tmp_path: Path) -> None:
    fill_out_of_order(tmp_path)
    subscribe = {"subscribe": "a,b,c", "maxRecordsPerPartition": 1000}
    # Topic and offset filters are applied exactly and not handed back; a time lower bound
    # moves each start to the first record at or after it, and Spark still evaluates it.
    reader = filtering_reader(tmp_path, **subscribe)
    in_ab = In(("topic",), ("a", "b"))
    since = GreaterThanOrEqual(("timestamp",), at_ms(7))
    pushed = [in_ab, GreaterThanOrEqual(("offset",), 3), LessThan(("offset",), 30), since]
    assert list(reader.pushFilters(pushed)) == [since]
    # a: 7..29 (record 20, older, is read: Spark's own filter drops it); b: 7..9.
    assert ranges_of(reader.partitions()) == [("a", 7, 30), ("b", 7, 10)]

    # What cannot be decided here goes back to Spark, untouched by reference.
    reader = filtering_reader(tmp_path, **subscribe)
    back = [
        EqualTo(("key",), b"k"),
        Not(EqualTo(("offset",), 3)),
        GreaterThan(("offset",), 2.5),
        EqualTo(("topic",), 7),
        In(("topic",), ("a", None)),
        LessThan(("timestamp",), at_ms(3)),
        GreaterThan(("timestamp",), datetime(2024, 1, 1)),  # naive: its zone is unknown
    ]
    returned = list(reader.pushFilters(back))
    assert len(returned) == len(back) and all(r is f for r, f in zip(returned, back, strict=True))
    assert ranges_of(reader.partitions()) == [("a", 0, 40), ("b", 0, 10), ("c", 0, 5)]

    # An IN list of offsets narrows to its span; Spark keeps only the listed rows.
    reader = filtering_reader(tmp_path, **subscribe)
    listed = In(("offset",), (4, 8, 6))
    assert list(reader.pushFilters([listed, EqualTo(("topic",), "b")])) == [listed]
    assert ranges_of(reader.partitions()) == [("b", 4, 9)]

    # Names: prefixes, negations, comparisons as Spark orders strings.
    reader = filtering_reader(tmp_path, **subscribe)
    names = [Not(EqualTo(("topic",), "b")), GreaterThan(("topic",), "a"), IsNotNull(("topic",))]
    assert list(reader.pushFilters(names)) == []
    assert ranges_of(reader.partitions()) == [("c", 0, 5)]
    reader = filtering_reader(tmp_path, **subscribe)
    assert list(reader.pushFilters([StringStartsWith(("topic",), "b")])) == []
    assert ranges_of(reader.partitions()) == [("b", 0, 10)]

    # Constant columns: partition and timestampType are 0; nulls are never stored.
    for nothing in (EqualTo(("partition",), 1), IsNull(("offset",)), IsNull(("timestamp",))):
        reader = filtering_reader(tmp_path, **subscribe)
        assert list(reader.pushFilters([nothing])) == []
        parts = reader.partitions()
        assert len(parts) == 1 and ranges_of(parts) == []
    reader = filtering_reader(tmp_path, **subscribe)
    kafka = [EqualTo(("partition",), 0), In(("timestampType",), (0, 1))]
    assert list(reader.pushFilters(kafka)) == []
    assert ranges_of(reader.partitions()) == [("a", 0, 40), ("b", 0, 10), ("c", 0, 5)]

    # Filters narrow the options' range, never widen it; an empty overlap reads nothing.
    reader = filtering_reader(
        tmp_path,
        startingOffsets='{"a": 10, "b": 0, "c": 0}',
        endingOffsets='{"a": 20}',
        **subscribe,
    )
    assert list(reader.pushFilters([GreaterThan(("offset",), 14), LessThan(("offset",), 40)])) == []
    assert ranges_of(reader.partitions()) == [("a", 15, 20)]
    reader = filtering_reader(tmp_path, **subscribe)
    assert list(reader.pushFilters([GreaterThan(("offset",), 99)])) == []
    assert ranges_of(reader.partitions()) == []
    # Past every record's time: nothing to read.
    reader = filtering_reader(tmp_path, **subscribe)
    late = GreaterThan(("timestamp",), at_ms(40))
    assert list(reader.pushFilters([late])) == [late]
    assert ranges_of(reader.partitions()) == []


def test_spark_pushes_filters_into_the_plan(spark: SparkSession, tmp_path: Path) -> None:
    fill_out_of_order(tmp_path)
    tidelog.spark.register(spark)  # local_session turned pushdown on: filters are pushed
    df = read(spark, tmp_path, subscribe="a,b,c", maxRecordsPerPartition=10)
    assert df.rdd.getNumPartitions() == 6
    only = df.filter("topic = 'a' AND offset >= 30")
    assert only.rdd.getNumPartitions() == 1
    assert offsets_of(only) == [("a", i) for i in range(30, 40)]
    # Times: the lower bound skips records, the rows are exact (a's record 20 is older).
    micros = TS0 + 5_000
    timed = df.filter(f"timestamp >= timestamp_micros({micros}) AND topic = 'a'")
    assert timed.rdd.getNumPartitions() == 4  # offsets 5..39
    assert offsets_of(timed) == [("a", i) for i in range(5, 40)]
    window = df.filter(
        f"timestamp >= timestamp_micros({micros}) AND timestamp < timestamp_micros({micros + 2000})"
    )
    assert offsets_of(window) == [("a", 5), ("a", 6), ("a", 20), ("b", 5), ("b", 6)]
    # Filters Spark cannot push (a key, an OR across columns) still give exact rows.
    either = df.filter("offset = 2 OR key IS NOT NULL").filter("topic = 'c'")
    assert offsets_of(either) == [("c", 2)]

    # With the setting off, a filtering reader is refused: register says so, and registers
    # the plain source by default.
    spark.conf.set(tidelog.spark.PUSHDOWN_CONF, "false")
    try:
        with pytest.raises(tidelog.InvalidArgumentError, match="filterPushdown"):
            tidelog.spark.register(spark, push_filters=True)
        tidelog.spark.register(spark)
        plain = read(spark, tmp_path, subscribe="a,b,c", maxRecordsPerPartition=10)
        assert plain.filter("offset >= 38").rdd.getNumPartitions() == 6
        assert offsets_of(plain.filter("offset >= 38")) == [("a", 38), ("a", 39)]
    finally:
        spark.conf.set(tidelog.spark.PUSHDOWN_CONF, "true")
        tidelog.spark.register(spark)

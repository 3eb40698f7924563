"""The pipeline of spark_pipeline.py, with Spark reading and writing through object storage.

Run from the repository root, with tidelog installed with its Spark and test extras
(`pip install ".[spark,test]"`: the test extra brings the local S3 server, moto):

    python3 examples/spark_cluster_pipeline.py [WORK_DIR] [--orders N]

1. A local S3 API server (moto) starts on 127.0.0.1 with a fresh bucket.
2. A producer appends N orders (default 100,000) to the topic `orders` of its directory,
   with the bucket as its tier (`tier="s3://..."`), and `tier_flush`es: every order is in
   the bucket. It keeps the directory open, as a service would: it publishes what Spark
   writes to the bucket.
3. A Spark batch job reads `orders` from the bucket (`load("s3://...")`: its tasks need no
   access to the producer's disk, as on a cluster), sums revenue per country and writes the
   result to `s3://...` (topic `revenue_by_country`); the producer publishes it exactly once.
4. A Spark streaming query (`trigger(availableNow=True)`) reads `orders` from the bucket and
   writes the large orders back through it (topic `large_orders`).
5. The results are read back, from the producer's directory and from the bucket alone
   (`tidelog.open_remote`), and checked against what was produced.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import tidelog

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_pipeline import BATCH, LARGE_CENTS, ORDER_SCHEMA, produce, spark_session

PER_TRIGGER = 25_000


def start_s3() -> tuple[object, str, dict[str, str]]:
    """A local S3 API server with a fresh bucket: the server, the tier URL, its options."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        sys.exit('this example needs moto: pip install "moto[server]" (or ".[spark,test]")')
    # Its request log is not this example's output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bucket = f"tidelog-{uuid.uuid4().hex[:12]}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"))
    options = {
        "aws_endpoint": endpoint,
        "aws_allow_http": "true",
        "aws_region": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    return server, f"s3://{bucket}/pipeline", options


def storage(reader_or_writer, options: dict[str, str]):  # type: ignore[no-untyped-def]
    """Spark options `storage.KEY`: the bucket's options."""
    for key, value in options.items():
        reader_or_writer = reader_or_writer.option(f"storage.{key}", value)
    return reader_or_writer


def batch_job(spark, url: str, options: dict[str, str]) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Revenue per country from the bucket into `revenue_by_country` through the bucket."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    orders = (
        storage(spark.read.format("tidelog").option("subscribe", "orders"), options)
        .load(url)
        .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
        .select("o.*")
    )
    totals = orders.groupBy("country").agg(F.sum("cents").alias("cents"), F.count("*").alias("n"))
    rows = totals.collect()
    out = spark.createDataFrame(
        [
            (r["country"].encode(), json.dumps({"cents": r["cents"], "orders": r["n"]}).encode())
            for r in rows
        ],
        "key BINARY, value BINARY",
    )
    writer = out.write.format("tidelog").option("topic", "revenue_by_country").mode("append")
    storage(writer, options).save(url)
    return time.perf_counter() - started, sum(r["n"] for r in rows)


def streaming_job(spark, url: str, options: dict[str, str], checkpoints: Path) -> float:  # type: ignore[no-untyped-def]
    """Large orders from the bucket into `large_orders` through it, with availableNow."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    stream = storage(
        spark.readStream.format("tidelog")
        .option("subscribe", "orders")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", PER_TRIGGER),
        options,
    ).load(url)
    cents = F.get_json_object(F.col("value").cast("string"), "$.cents").cast("long")
    large = stream.where(cents >= LARGE_CENTS).select("key", "value", "timestamp")
    writer = (
        large.writeStream.format("tidelog")
        .option("topic", "large_orders")
        .option("checkpointLocation", str(checkpoints / "large_orders"))
        .trigger(availableNow=True)
    )
    query = storage(writer, options).start(url)
    query.awaitTermination()
    return time.perf_counter() - started


def run(work: Path, total: int) -> None:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    server, url, options = start_s3()
    print(f"tidelog cluster pipeline: {total:,} orders, tier {url} (a local S3 server)")
    try:
        with tidelog.open(work / "data", tier=url, storage_options=options) as wal:
            produce_s, revenue, large = produce(wal, total)
            started = time.perf_counter()
            wal.tier_flush(timeout=300)
            upload_s = time.perf_counter() - started
            print(
                f"  produced {total:,} orders in {produce_s:.2f} s (batches of {BATCH}); "
                f"tier_flush {upload_s:.2f} s: all in the bucket"
            )
            print("  starting Spark (local[2]), reading and writing only the bucket...")
            spark = spark_session()
            try:
                batch_s, read = batch_job(spark, url, options)
                stream_s = streaming_job(spark, url, options, work / "checkpoints")
            finally:
                spark.stop()
            # The producer published both jobs into its directory, once.
            by_country = {
                bytes(r.key or b"").decode(): json.loads(bytes(r))
                for r in wal.reader("revenue_by_country", start="earliest")
            }
            large_found = wal.topic_info("large_orders").next_offset
            wal.tier_flush(timeout=300)
        remote = tidelog.open_remote(url, storage_options=options)
        remote_large = remote.topic_info("large_orders")["next_offset"]
        remote_orders = remote.topic_info("orders")["next_offset"]
    finally:
        server.stop()  # type: ignore[attr-defined]
    assert read == total, f"the batch job read {read} orders, not {total}"
    assert {c: v["cents"] for c, v in by_country.items()} == revenue, "revenue differs"
    assert large_found == large, f"{large_found} large orders written, {large} expected"
    assert (remote_orders, remote_large) == (total, large), "the bucket misses records"
    print(f"  batch job from the bucket: read {read:,} orders, wrote {len(by_country)} totals")
    print(f"    through the bucket in {batch_s:.2f} s (Spark start-up included)")
    print(f"  streaming (availableNow) through the bucket: {large_found:,} large orders")
    print(f"    in {stream_s:.2f} s")
    print("ok: every result matches what was produced, in the directory and in the bucket")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", nargs="?", help="work directory (default: a temporary one)")
    parser.add_argument("--orders", type=int, default=100_000)
    args = parser.parse_args()
    if args.work:
        run(Path(args.work), args.orders)
    else:
        with tempfile.TemporaryDirectory(prefix="tidelog-cluster-", dir=".") as tmp:
            run(Path(tmp) / "work", args.orders)


if __name__ == "__main__":
    main()

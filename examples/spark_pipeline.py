"""The main job: an order stream into tidelog, Spark jobs over it, results back into tidelog.

Run from the repository root (`bash scripts/pipeline.sh` installs what it needs first):

    python3 examples/spark_pipeline.py [DATA_DIR] [--orders N]

1. A producer appends N orders (default 1,000,000; JSON values keyed by customer) to the
   topic `orders` with durable appends, and keeps the directory open for writing, as a
   service would.
2. A Spark batch job reads `orders` through the `tidelog` data source, sums revenue per
   country and writes the result to the topic `revenue_by_country` (published exactly once;
   the producer's process publishes it, since it holds the directory).
3. A Spark streaming query (`trigger(availableNow=True)`, 250,000 orders per micro-batch)
   reads `orders` from the start and writes the large orders to the topic `large_orders`.
4. The results are read back with tidelog's own reader and checked against what was
   produced; a short report with throughput figures ends the run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import tidelog

COUNTRIES = ["DE", "FR", "US", "JP", "BR", "IN", "GB", "ES", "IT", "NL"]
LARGE_CENTS = 95_000
BATCH = 2_000
PER_TRIGGER = 250_000


def order(i: int) -> tuple[bytes, bytes, int]:
    """Order `i`: (key, value, amount in cents), deterministic so the totals can be checked."""
    cents = 100 + (i * 7919) % 99_900
    country = COUNTRIES[(i * 31) % len(COUNTRIES)]
    customer = f"customer-{(i * 13) % 50_000:05d}"
    value = json.dumps(
        {"order": i, "customer": customer, "country": country, "cents": cents},
        separators=(",", ":"),
    ).encode()
    return customer.encode(), value, cents


def progress(done: int, total: int, started: float) -> None:
    width = 40
    filled = width * done // total
    rate = done / max(time.perf_counter() - started, 1e-9)
    bar = "#" * filled + "." * (width - filled)
    end = "\n" if done == total else ""
    print(f"\r  producing [{bar}] {done:>9,}/{total:,} ({rate:,.0f}/s)", end=end, flush=True)


def produce(wal: tidelog.Wal, total: int) -> tuple[float, dict[str, int], int]:
    """Appends `total` orders in durable batches; returns (seconds, revenue per country,
    number of large orders)."""
    import pyarrow as pa

    revenue: dict[str, int] = dict.fromkeys(COUNTRIES, 0)
    large = 0
    started = time.perf_counter()
    for at in range(0, total, BATCH):
        keys, values = [], []
        for i in range(at, min(at + BATCH, total)):
            key, value, cents = order(i)
            keys.append(key)
            values.append(value)
            revenue[COUNTRIES[(i * 31) % len(COUNTRIES)]] += cents
            large += cents >= LARGE_CENTS
        # One crash-atomic, durable batch per call: no Python object per record in tidelog.
        batch = pa.record_batch(
            [pa.array(keys, pa.binary()), pa.array(values, pa.binary())], names=["key", "value"]
        )
        wal.append_arrow("orders", batch)
        if (at // BATCH) % 25 == 0 or at + BATCH >= total:
            progress(min(at + BATCH, total), total, started)
    return time.perf_counter() - started, revenue, large


def spark_session():  # type: ignore[no-untyped-def]
    # Local Spark with its Python workers on this interpreter (see tidelog.spark).
    from tidelog.spark import local_session

    return local_session("tidelog-pipeline")


ORDER_SCHEMA = "order BIGINT, customer STRING, country STRING, cents BIGINT"


def batch_job(spark, data: Path) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Revenue per country into `revenue_by_country`; returns (seconds, orders read)."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    orders = (
        spark.read.format("tidelog")
        .option("subscribe", "orders")
        .load(str(data))
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
    out.write.format("tidelog").option("topic", "revenue_by_country").mode("append").save(str(data))
    return time.perf_counter() - started, sum(r["n"] for r in rows)


def streaming_job(spark, data: Path) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Large orders into `large_orders` with availableNow; returns (seconds, batches)."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    stream = (
        spark.readStream.format("tidelog")
        .option("subscribe", "orders")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", PER_TRIGGER)
        .load(str(data))
    )
    cents = F.get_json_object(F.col("value").cast("string"), "$.cents").cast("long")
    large = stream.where(cents >= LARGE_CENTS).select("key", "value", "timestamp")
    query = (
        large.writeStream.format("tidelog")
        .option("topic", "large_orders")
        .option("checkpointLocation", str(data / "spark-checkpoints" / "large_orders"))
        .trigger(availableNow=True)
        .start(str(data))
    )
    query.awaitTermination()
    batches = len([p for p in query.recentProgress if p["numInputRows"] > 0])
    return time.perf_counter() - started, batches


def run(data: Path, total: int) -> None:
    if data.exists():
        shutil.rmtree(data)
    print(f"tidelog pipeline: {total:,} orders in {data}")
    # Durable appends: each batch returns once it is on disk (group commit).
    with tidelog.open(data, fsync="always") as wal:
        produce_s, revenue, large = produce(wal, total)
        print(
            f"  produced {total:,} orders in {produce_s:.2f} s "
            f"({total / produce_s:,.0f} orders/s, durable batches of {BATCH})"
        )
        print("  starting Spark (local[2])...", flush=True)
        spark = spark_session()
        try:
            batch_s, read = batch_job(spark, data)
            stream_s, batches = streaming_job(spark, data)
        finally:
            spark.stop()
        # The producer still holds the directory: it published both Spark jobs' results.
        by_country = {
            bytes(r.key or b"").decode(): json.loads(bytes(r))
            for r in wal.reader("revenue_by_country", start="earliest")
        }
        large_found = wal.topic_info("large_orders").next_offset
    assert read == total, f"the batch job read {read} orders, not {total}"
    assert {c: v["cents"] for c, v in by_country.items()} == revenue, "revenue differs"
    assert large_found == large, f"{large_found} large orders written, {large} expected"
    print(
        f"  batch job: read {read:,} orders, wrote {len(by_country)} totals in {batch_s:.2f} s "
        f"({read / batch_s:,.0f} orders/s, Spark start-up included)"
    )
    print(
        f"  streaming (availableNow): {batches} micro-batches, {large_found:,} large orders "
        f"in {stream_s:.2f} s ({total / stream_s:,.0f} orders/s)"
    )
    print("  revenue by country (checked against the producer's own totals):")
    for country, v in sorted(by_country.items(), key=lambda kv: -kv[1]["cents"]):
        print(f"    {country}  {v['cents'] / 100:>14,.2f}  ({v['orders']:,} orders)")
    print("ok: every result matches what was produced")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", help="data directory (default: a temporary one)")
    parser.add_argument("--orders", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.data:
        run(Path(args.data), args.orders)
    else:
        with tempfile.TemporaryDirectory(prefix="tidelog-pipeline-", dir=".") as tmp:
            run(Path(tmp) / "data", args.orders)


if __name__ == "__main__":
    main()

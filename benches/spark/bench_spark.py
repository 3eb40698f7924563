"""The Spark targets of issue 6, against Spark's Parquet source on the same rows, same run:

- read: 1 million rows of 100-byte values from a tidelog topic into Spark (`noop` sink),
  against the same rows from Parquet: >= 1.5 million rows/s and >= 0.5 of Parquet;
- write: the same rows from Spark into a tidelog topic (exactly-once staged write), against
  writing them as Parquet: >= 1 million rows/s and >= 1.0 of Parquet.

Method: one local[2] session; each case runs once untimed (Python workers start, JIT), then
REPS timed times, tidelog and Parquet interleaved; figures are medians, the ratio the median
of per-repetition ratios. Data lives under a scratch directory next to this file's
repository checkout (`target/`), never /tmp (a tmpfs would flatter both).

Run (after `pip install ".[spark]"`): `python3 benches/spark/bench_spark.py [--rows N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import tidelog

REPS = 3
VALUE_BYTES = 100
TARGETS = {"read": (1.5e6, 0.5), "write": (1.0e6, 1.0)}


def session():  # type: ignore[no-untyped-def]
    from tidelog.spark import local_session

    return local_session("tidelog-bench", conf={"spark.driver.memory": "2g"})


def fill_topic(path: Path, rows: int) -> None:
    """`rows` records of VALUE_BYTES into topic `t`, appended as Arrow batches."""
    with tidelog.open(path) as wal:
        step = 50_000
        for at in range(0, rows, step):
            n = min(step, rows - at)
            values = pa.array([b"v" * VALUE_BYTES] * n, pa.binary())
            wal.append_arrow("t", values)
        wal.flush()


def timed(f) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    rows = args.rows
    root = Path(__file__).resolve().parents[2] / "target"
    root.mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=root))
    try:
        run(scratch, rows)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(scratch: Path, rows: int) -> None:
    spark = session()
    from pyspark.sql import functions as F

    source = scratch / "source"
    fill_topic(source, rows)
    parquet_in = scratch / "in.parquet"
    tidelog_df = spark.read.format("tidelog").option("subscribe", "t").load(str(source))
    tidelog_df.write.parquet(str(parquet_in))
    parquet_df = spark.read.parquet(str(parquet_in))
    gen = spark.range(rows, numPartitions=2).select(
        F.expr(f"unhex(repeat('76', {VALUE_BYTES}))").alias("value")
    )

    def read_tidelog() -> None:
        tidelog_df.write.format("noop").mode("overwrite").save()

    def read_parquet() -> None:
        parquet_df.write.format("noop").mode("overwrite").save()

    counter = iter(range(1_000_000))

    def write_tidelog() -> None:
        out = scratch / f"out-{next(counter)}"
        gen.write.format("tidelog").option("topic", "t").mode("append").save(str(out))

    def write_parquet() -> None:
        gen.write.parquet(str(scratch / f"out-{next(counter)}.parquet"))

    cases = {"read": (read_tidelog, read_parquet), "write": (write_tidelog, write_parquet)}
    results = {}
    for name, (ours, theirs) in cases.items():
        ours()
        theirs()
        mine, base, ratios = [], [], []
        for rep in range(REPS):
            order = [(ours, mine), (theirs, base)]
            if rep % 2:
                order.reverse()
            for f, acc in order:
                acc.append(rows / timed(f))
            ratios.append(mine[-1] / base[-1])
        results[name] = (mine, base, ratios)
    spark.stop()

    print(f"# tidelog vs Parquet on Spark local[2], {rows:,} rows of {VALUE_BYTES} B values")
    print()
    print("| case | tidelog rows/s | Parquet rows/s | ratio | target | met? |")
    print("|---|---|---|---|---|---|")
    for name, (mine, base, ratios) in results.items():
        rate, ratio = statistics.median(mine), statistics.median(ratios)
        floor, share = TARGETS[name]
        met = rate >= floor and ratio >= share
        print(
            f"| {name} | {rate:,.0f} | {statistics.median(base):,.0f} | {ratio:.2f} | "
            f">= {floor / 1e6:.1f} M/s and >= {share} | {'yes' if met else 'no'} |"
        )
    print()
    for name, (mine, base, ratios) in results.items():
        print(
            f"- {name}: tidelog {[round(x) for x in mine]}, Parquet {[round(x) for x in base]}, "
            f"ratios {[round(r, 2) for r in ratios]}"
        )
    print(f"- load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

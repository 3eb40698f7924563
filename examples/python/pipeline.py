"""The example pipeline: produce orders, consume them with a consumer group, restart, resume.

Run from the repository root after `python3 -m pip install .`:

    python3 examples/python/pipeline.py [DATA_DIR]

It appends a million small records to two topics (single appends and batches), reads them
back zero-copy with a committed consumer group, reopens the directory as after a restart,
checks that the group resumes where it committed, and summarises a topic with Arrow.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import tidelog

ORDERS = 200_000
CLICKS = 800_000
BATCH = 1_000


def produce(wal: tidelog.Wal) -> None:
    orders = wal.writer("orders")
    start = time.perf_counter()
    for i in range(ORDERS):
        body = json.dumps({"order": i, "cents": 100 + i % 900}).encode()
        orders.append(body, key=f"customer-{i % 97}".encode())
    clicks = [f"click-{i:07d}".encode() for i in range(CLICKS)]
    for at in range(0, CLICKS, BATCH):
        wal.append_batch("clicks", clicks[at : at + BATCH])
    wal.flush()
    elapsed = time.perf_counter() - start
    total = ORDERS + CLICKS
    print(f"produced {total:,} records in {elapsed:.2f} s ({total / elapsed:,.0f} records/s)")


def consume(wal: tidelog.Wal, stop_after: int | None = None) -> tuple[int, int]:
    """Reads `orders` with the `billing` group; returns (records read, cents summed)."""
    count = cents = 0
    with wal.reader("orders", "billing") as reader:
        for record in reader:
            # `record` is a zero-copy view of the mapped file; json needs bytes, so copy here.
            cents += json.loads(bytes(record))["cents"]
            count += 1
            if count == stop_after:
                break
        reader.commit()
    return count, cents


def main() -> None:
    if len(sys.argv) > 1:
        run(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="tidelog-") as data:
            run(Path(data))
    print("ok")


def run(data: Path) -> None:
    print(f"tidelog {tidelog.__version__}, data directory {data}")

    with tidelog.open(data) as wal:
        produce(wal)
        first, first_cents = consume(wal, stop_after=ORDERS // 2)
        print(f"billing read and committed {first:,} orders, then stopped")

    # A restart: the group resumes from its committed offset.
    with tidelog.open(data) as wal:
        rest, rest_cents = consume(wal)
        assert first + rest == ORDERS, (first, rest)
        expected = sum(100 + i % 900 for i in range(ORDERS))
        assert first_cents + rest_cents == expected
        print(f"after reopening, billing resumed at {first:,} and read the other {rest:,}")

        info = wal.topic_info("clicks")
        batch = wal.read_arrow("clicks", info.first_offset, max_records=65_536)
        print(
            f"clicks: {info.records:,} records, {info.bytes / 2**20:.1f} MiB; "
            f"first Arrow batch {batch.num_rows:,} rows x {batch.num_columns} columns "
            f"({', '.join(batch.schema.names)})"
        )
        for topic in sorted(wal.topics()):
            topic_info = wal.topic_info(topic)
            print(f"  {topic}: offsets {topic_info.first_offset}..{topic_info.next_offset}")
        print("(orders' blocks that every group committed past were deleted)")


if __name__ == "__main__":
    main()

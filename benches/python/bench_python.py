#!/usr/bin/env python3
"""Throughput of tidelog's Python binding on 100-byte records, against plain-Python baselines
measured in the same run.

    python3 benches/python/bench_python.py [--quick] [--records N] [--dir DIR]

Prints a markdown table: tidelog's rate, a baseline's rate, their ratio and the issue's
target for each row, then every repetition. tidelog runs with fsync="interval" (the default:
a background thread makes the log durable every 200 ms) unless a row says otherwise.

Baselines, all on the same records in the same temporary directory, are the plain-file and
sqlite3 peers of `tidelog bench` (imported from python_rows.py beside this file, so both
benchmarks measure the same code):
  (a) a Python loop writing each record, after its 4-byte length prefix (frames built once,
      untimed), to a buffered file, with flush + os.fdatasync every 1000 records (durable
      per 1000: stricter than "interval");
  (b) the same loop with no fsync at all (the Python per-call ceiling of a write loop);
  (c) sqlite3 in WAL mode with synchronous=NORMAL: per-row INSERTs committed every 1000
      (per-call rows) and executemany of 1000 rows per transaction (batch rows);
  reads: slicing length-prefixed records out of a plain file with Python, and iterating a
  sqlite SELECT.
Record formats: tidelog writes record format 2 (batch frames); the rows marked "format 1"
run the same operations on a log opened with record_format=1 (a 40-byte frame per record,
the format before), the before/after of the format change in one run.
A host speed probe (a Python loop calling len()) runs once per round; its spread shows how
much the (shared, virtual) host drifted during the run.

Each measurement is repeated 3 times, interleaved with the others (round 1 of everything,
then round 2, ...), and the best repetition is reported. Only the measured loop is timed,
with time.perf_counter and the cyclic GC off (as timeit does); opening, closing, deleting and
an os.sync() before every repetition are not. Needs tidelog and pyarrow.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

# numpy's OpenBLAS (pyarrow imports numpy) keeps a thread per core spinning after its calls:
# on a small host they take the core that `scan` builds its next batch on. Set before the
# import, as OpenBLAS reads it once.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pyarrow as pa
import tidelog
from python_rows import PlainFile, SqliteLog, frame, plain_file_scan, sqlite_scan

RECORD_BYTES = 100
BATCH = 1000  # records per append_batch call, per fsync of (a), per sqlite transaction
ARROW_BATCH = 65_536  # records per append_arrow / read_arrow call (the default batch limit)
REPS = 3
POOL = 4096  # distinct random records, cycled: incompressible without 200 MB of randomness
# A new log's housekeeping thread calibrates its clock during its first second; before that
# every append reads the OS clock. The Rust benches wait the same 1.5 s after opening.
SETTLE_S = 1.5
TOPIC = "bench"

# Targets from the issue, in records (or calls) per second.
TARGET_APPEND = 3_000_000
TARGET_BATCH = 15_000_000
TARGET_ITER = 5_000_000
TARGET_ARROW = 30_000_000


class Timer:
    """Times a block with perf_counter, the cyclic GC off inside it."""

    seconds: float = 0.0

    def __enter__(self) -> Timer:
        gc.collect()
        gc.disable()
        self._t0 = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.seconds = time.perf_counter() - self._t0
        gc.enable()


@dataclass
class Measure:
    """One measured operation: a label, and its rate in each repetition."""

    label: str
    run: Callable[[], float]  # does one repetition of `count` records; returns seconds
    count: int
    rates: list[float] = field(default_factory=list)

    def once(self) -> None:
        os.sync()  # write back the previous step's dirty pages outside the timed region
        self.rates.append(self.count / self.run())

    @property
    def best(self) -> float:
        return max(self.rates)


@dataclass
class Data:
    """The records every system gets, in the shapes their APIs take (built untimed)."""

    recs: list[bytes]
    batches: list[list[bytes]]
    frames: list[list[bytes]]  # `batches` as the plain file stores them
    rows: list[list[tuple[bytes]]]
    arrays: list[pa.Array]

    @classmethod
    def build(cls, n: int) -> Data:
        rng = random.Random(42)
        pool = [rng.randbytes(RECORD_BYTES) for _ in range(POOL)]
        framed = [frame(r) for r in pool]
        recs = [pool[i % POOL] for i in range(n)]
        batches = [recs[i : i + BATCH] for i in range(0, n, BATCH)]
        frames = [
            [framed[j % POOL] for j in range(i, min(i + BATCH, n))] for i in range(0, n, BATCH)
        ]
        rows = [[(r,) for r in b] for b in batches]
        arrays = [
            pa.array(recs[i : i + ARROW_BATCH], type=pa.binary()) for i in range(0, n, ARROW_BATCH)
        ]
        return cls(recs, batches, frames, rows, arrays)


# --- tidelog -------------------------------------------------------------------------------


def tl_wal_append(wal: tidelog.Wal, topic: str, d: Data) -> float:
    append = wal.append
    with Timer() as t:
        for r in d.recs:
            append(topic, r)
    return t.seconds


def tl_writer_append(wal: tidelog.Wal, topic: str, d: Data) -> float:
    append = wal.writer(topic).append
    with Timer() as t:
        for r in d.recs:
            append(r)
    return t.seconds


def tl_append_batch(wal: tidelog.Wal, topic: str, d: Data) -> float:
    append_batch = wal.append_batch
    with Timer() as t:
        for b in d.batches:
            append_batch(topic, b)
    return t.seconds


def tl_append_arrow(wal: tidelog.Wal, topic: str, d: Data) -> float:
    append_arrow = wal.append_arrow
    with Timer() as t:
        for a in d.arrays:
            append_arrow(topic, a)
    return t.seconds


def tl_iterate(wal: tidelog.Wal, n: int, verify: bool) -> float:
    with wal.reader(TOPIC, start="earliest", verify_checksums=verify) as reader:
        with Timer() as t:
            for _rec in reader:
                pass
        got = reader.position
    check(got == n, f"reader stopped at {got}, expected {n}")
    return t.seconds


def tl_read_arrow(wal: tidelog.Wal, n: int) -> float:
    read_arrow = wal.read_arrow
    got = 0
    with Timer() as t:
        for start in range(0, n, ARROW_BATCH):
            got += read_arrow(TOPIC, start, min(start + ARROW_BATCH, n)).num_rows
    check(got == n, f"read_arrow returned {got} records, expected {n}")
    return t.seconds


def tl_scan(wal: tidelog.Wal, n: int) -> float:
    """Every record as Arrow batches through the C stream (`scan`), as pyarrow reads it."""
    got = 0
    with Timer() as t:
        reader = pa.RecordBatchReader.from_stream(wal.scan(TOPIC, 0, n))
        for batch in reader:
            got += batch.num_rows
    check(got == n, f"scan returned {got} records, expected {n}")
    return t.seconds


# --- baselines -----------------------------------------------------------------------------


def file_append(root: Path, d: Data, durable: bool) -> float:
    path = root / "plain.log"
    try:
        with PlainFile(path) as f:
            write, sync = f.write, f.sync
            with Timer() as t:
                if durable:
                    for b in d.frames:
                        for fr in b:
                            write(fr)
                        sync()
                else:
                    for b in d.frames:
                        for fr in b:
                            write(fr)
    finally:
        path.unlink(missing_ok=True)
    return t.seconds


def sqlite_remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def sqlite_append(root: Path, d: Data, many: bool) -> float:
    path = root / "baseline.sqlite"
    try:
        with SqliteLog(path, "NORMAL") as db:
            insert = db.insert_batch if many else db.insert_each
            with Timer() as t:
                for rows in d.rows:
                    insert(rows)
    finally:
        sqlite_remove(path)
    return t.seconds


def file_iterate(path: Path, n: int) -> float:
    with Timer() as t:
        got, total = plain_file_scan(path)
    check(got == n and total == n * RECORD_BYTES, f"plain file read back {got} records, not {n}")
    return t.seconds


def sqlite_iterate(path: Path, n: int) -> float:
    conn = sqlite3.connect(path)
    try:
        with Timer() as t:
            got, _ = sqlite_scan(conn)
    finally:
        conn.close()
    check(got == n, f"sqlite holds {got} rows, expected {n}")
    return t.seconds


def probe(d: Data) -> float:
    """A plain Python loop with one C call per record: moves only with the host's speed."""
    f = len
    with Timer() as t:
        for r in d.recs:
            f(r)
    return t.seconds


# --- driver --------------------------------------------------------------------------------


def check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(what)


def rounds(measures: list[Measure]) -> None:
    """Runs every measure once per round, REPS rounds, so drift hits all of them alike."""
    for i in range(REPS):
        for m in measures:
            m.once()
            print(f"  round {i + 1}/{REPS}  {m.label:<44} {m.rates[-1] / 1e6:7.2f} M/s", flush=True)


def rate(r: float) -> str:
    return f"{r / 1e6:.2f} M/s"


def table(rows: list[tuple[Measure, Measure, int | None]]) -> str:
    lines = [
        "| benchmark | tidelog rate | baseline | baseline rate | ratio | target | met? |",
        "|---|---|---|---|---|---|---|",
    ]
    for tl, base, target in rows:
        goal = f">= {target / 1e6:g} M/s" if target else "-"
        met = ("yes" if tl.best >= target else "no") if target else "-"
        lines.append(
            f"| {tl.label} | {rate(tl.best)} | {base.label} | {rate(base.best)} "
            f"| {tl.best / base.best:.2f} | {goal} | {met} |"
        )
    return "\n".join(lines)


def environment(root: Path, n: int) -> str:
    return "\n".join(
        [
            f"- records: {n:,} x {RECORD_BYTES} B per repetition; best of {REPS}, interleaved",
            f"- tidelog {tidelog.__version__}, Python {platform.python_version()}, "
            f"pyarrow {pa.__version__}, SQLite {sqlite3.sqlite_version}",
            f"- {platform.platform()}, {os.cpu_count()} CPUs, data in {root}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="tidelog Python-binding throughput vs baselines")
    parser.add_argument("--quick", action="store_true", help="200k records instead of 2M")
    parser.add_argument("--records", type=int, help="records per repetition (overrides --quick)")
    parser.add_argument("--dir", help="parent of the temporary data directory (default: $TMPDIR)")
    args = parser.parse_args(argv)
    n = args.records or (200_000 if args.quick else 2_000_000)

    started = time.perf_counter()
    load_before = os.getloadavg()
    d = Data.build(n)
    with tempfile.TemporaryDirectory(prefix="tidelog-pybench-", dir=args.dir) as tmp:
        root = Path(tmp)

        # Appends. One log per fsync mode for the whole phase, one topic per operation, each
        # topic created before the settle so no repetition pays for creating it.
        print(f"appends: {n:,} records per repetition", flush=True)
        interval = tidelog.open(root / "interval", fsync="interval")
        never = tidelog.open(root / "never", fsync="never")
        v1 = tidelog.open(root / "format1", fsync="interval", record_format=1)
        topics = {"wal": interval, "writer": interval, "batch": interval, "arrow": interval}
        topics_v1 = {"batch": v1, "arrow": v1}
        for topic, wal in [*topics.items(), ("never", never), *topics_v1.items()]:
            wal.append(topic, d.recs[0])
        time.sleep(SETTLE_S)
        try:
            wal_append = Measure("Wal.append", lambda: tl_wal_append(interval, "wal", d), n)
            wal_never = Measure(
                'Wal.append, fsync="never"', lambda: tl_wal_append(never, "never", d), n
            )
            writer_append = Measure(
                "Writer.append", lambda: tl_writer_append(interval, "writer", d), n
            )
            batch = Measure(
                f"Wal.append_batch, {BATCH}/call",
                lambda: tl_append_batch(interval, "batch", d),
                n,
            )
            arrow_in = Measure(
                f"Wal.append_arrow, {ARROW_BATCH}/call",
                lambda: tl_append_arrow(interval, "arrow", d),
                n,
            )
            batch_v1 = Measure(
                f"Wal.append_batch, {BATCH}/call, format 1",
                lambda: tl_append_batch(v1, "batch", d),
                n,
            )
            arrow_in_v1 = Measure(
                f"Wal.append_arrow, {ARROW_BATCH}/call, format 1",
                lambda: tl_append_arrow(v1, "arrow", d),
                n,
            )
            file_d1 = Measure(
                f"(a) file write, fdatasync/{BATCH}", lambda: file_append(root, d, True), n
            )
            file_d0 = Measure("(b) file write, no fsync", lambda: file_append(root, d, False), n)
            sql_row = Measure(
                f"(c) sqlite INSERT, commit/{BATCH}", lambda: sqlite_append(root, d, False), n
            )
            sql_many = Measure(
                f"(c) sqlite executemany {BATCH}/txn", lambda: sqlite_append(root, d, True), n
            )
            speed = Measure("host speed probe (Python loop + len())", lambda: probe(d), n)
            appends = [speed, wal_append, file_d1, wal_never, file_d0, writer_append, sql_row]
            appends += [batch, sql_many, arrow_in, batch_v1, arrow_in_v1]
            rounds(appends)
            for topic, wal in [*topics.items(), ("never", never), *topics_v1.items()]:
                stored = wal.topic_info(topic).records
                check(stored == 1 + REPS * n, f"{topic}: {stored} records, expected {1 + REPS * n}")
        finally:
            interval.close()
            never.close()
            v1.close()
        for name in ["interval", "never", "format1"]:
            shutil.rmtree(root / name)

        # Reads of the same N records, written untimed, all hot in the page cache.
        print(f"reads: {n:,} records per repetition", flush=True)
        reads = tidelog.open(root / "reads")
        reads_v1 = tidelog.open(root / "reads1", record_format=1)
        try:
            for log in (reads, reads_v1):
                for b in d.batches:
                    log.append_batch(TOPIC, b)
                log.flush()
            stored = {f: log.topic_info(TOPIC).bytes for f, log in [(2, reads), (1, reads_v1)]}
            plain = root / "plain-read.log"
            with PlainFile(plain) as f:
                for b in d.frames:
                    f.file.writelines(b)
            sql = root / "read.sqlite"
            with SqliteLog(sql, "NORMAL") as db:
                for rows in d.rows:
                    db.insert_batch(rows)

            iterate = Measure("Reader iteration", lambda: tl_iterate(reads, n, True), n)
            iterate_raw = Measure(
                "Reader iteration, verify_checksums=False",
                lambda: tl_iterate(reads, n, False),
                n,
            )
            arrow_out = Measure(
                f"Wal.read_arrow, {ARROW_BATCH}/call", lambda: tl_read_arrow(reads, n), n
            )
            scan = Measure(
                f"Wal.scan (Arrow C stream), {ARROW_BATCH}/batch", lambda: tl_scan(reads, n), n
            )
            iterate_v1 = Measure(
                "Reader iteration, format 1", lambda: tl_iterate(reads_v1, n, True), n
            )
            arrow_out_v1 = Measure(
                f"Wal.read_arrow, {ARROW_BATCH}/call, format 1",
                lambda: tl_read_arrow(reads_v1, n),
                n,
            )
            scan_v1 = Measure(
                f"Wal.scan (Arrow C stream), {ARROW_BATCH}/batch, format 1",
                lambda: tl_scan(reads_v1, n),
                n,
            )
            file_read = Measure("file read + slicing", lambda: file_iterate(plain, n), n)
            sql_read = Measure("sqlite SELECT iteration", lambda: sqlite_iterate(sql, n), n)
            reads_all = [speed, iterate, iterate_v1, file_read, iterate_raw, arrow_out]
            rounds([*reads_all, arrow_out_v1, scan, scan_v1, sql_read])
        finally:
            reads.close()
            reads_v1.close()

    rows: list[tuple[Measure, Measure, int | None]] = [
        (wal_append, file_d1, TARGET_APPEND),
        (wal_append, file_d0, TARGET_APPEND),
        (wal_append, sql_row, TARGET_APPEND),
        (wal_never, file_d0, None),
        (writer_append, file_d1, None),
        (writer_append, file_d0, None),
        (batch, file_d1, TARGET_BATCH),
        (batch, file_d0, TARGET_BATCH),
        (batch, sql_many, TARGET_BATCH),
        (arrow_in, file_d1, None),
        (arrow_in, sql_many, None),
        (iterate, file_read, TARGET_ITER),
        (iterate, sql_read, TARGET_ITER),
        (iterate_raw, file_read, None),
        (arrow_out, file_read, TARGET_ARROW),
        (arrow_out, sql_read, TARGET_ARROW),
        (scan, file_read, TARGET_ARROW),
        (batch, batch_v1, TARGET_BATCH),
        (arrow_in, arrow_in_v1, None),
        (iterate, iterate_v1, TARGET_ITER),
        (arrow_out, arrow_out_v1, TARGET_ARROW),
        (scan, scan_v1, TARGET_ARROW),
    ]
    everything = [*appends, iterate, iterate_raw, arrow_out, scan, file_read, sql_read]
    everything += [iterate_v1, arrow_out_v1, scan_v1]
    drift = max(speed.rates) / min(speed.rates) - 1
    print()
    print(table(rows))
    print()
    print(environment(root, n))
    print(
        '- tidelog fsync="interval" (the default, durable within 200 ms) unless a row says '
        "otherwise; (a) is durable every 1000 records, (b) never, (c) at sqlite checkpoints"
    )
    print(
        f"- rates are records/s (calls/s for the per-record rows); load average "
        f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; "
        f"wall time {time.perf_counter() - started:.0f} s"
    )
    print(
        f"- host speed probe: {min(speed.rates) / 1e6:.1f}-{max(speed.rates) / 1e6:.1f} M/s "
        f"over the run ({drift:.0%} spread)"
        + (
            "; the host's speed drifted, so trust the ratios over the absolute rates"
            if drift > 0.25
            else ""
        )
    )
    print(
        f"- disk per {RECORD_BYTES} B record (batches of {BATCH}): "
        f"{stored[2] / n:.1f} B in record format 2, {stored[1] / n:.1f} B in format 1"
    )
    print()
    print("Repetitions (M records/s):")
    for m in everything:
        print(f"- {m.label}: " + ", ".join(f"{r / 1e6:.2f}" for r in m.rates))
    return 0


if __name__ == "__main__":
    sys.exit(main())

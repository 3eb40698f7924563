"""The Python rows of `tidelog bench`: tidelog's Python API and the Python peers.

Measures, single-threaded and for every record size, appends in the durability classes D0, D1
and D2 and a hot sequential read-back, for:

- tidelog (`Writer.append`, `Writer.append_batch`, a reader),
- a plain file (4-byte length prefix + record, buffered),
- sqlite3 in WAL mode,
- lmdb and rocksdict, when they are installed (otherwise their rows are reported skipped).

It prints one JSON object per row on stdout (JSON Lines, flushed per row), as the row contract
of `tidelog bench` defines; diagnostics go to stderr. `--list` prints the planned rows
(`"planned": true`; a row that would be skipped is printed as the skipped row it would give).

Only the write or read loop is timed (perf_counter_ns, cyclic GC off); opening, closing,
`os.sync()` before each row and deleting are not. Latency is per acknowledged operation: each
batch, each D2 record, and one D0 record in 64. Each system's read row reads back what its
first D0 row wrote.

Once per run (not per size), append to visible in another process (op "visible"): this
process appends stamped 100-byte records, paced, and a spawned reader process asleep in
`Reader.next(timeout=...)` measures how long each took to reach it; its baseline (a
"ceiling" row) sends the same messages through a pipe to a process blocked in `os.read`.

`tidelog bench` runs this file (benches/python/python_rows.py in the checkout it was built
from) with a Python that has `tidelog` installed, once per round. By hand:

    python3 benches/python/python_rows.py --dir D --sizes 100 --seconds 0.5

`--dir` must exist and be empty; each row works in its own subdirectory and deletes it
afterwards. Only stdlib, `tidelog` and the optional `lmdb` and `rocksdict` are used, so the
file runs on its own. Its plain-file and sqlite3 peers (`PlainFile`, `plain_file_scan`,
`SqliteLog`, `sqlite_scan`) are also the baselines of `bench_python.py`, which imports them.
"""

from __future__ import annotations

import argparse
import array
import gc
import itertools
import json
import math
import multiprocessing
import os
import shutil
import sqlite3
import struct
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

try:
    import tidelog
except ImportError:
    tidelog = None
try:
    import lmdb
except ImportError:
    lmdb = None
try:
    import rocksdict
except ImportError:
    rocksdict = None

POOL_RECORDS = 64
BATCH_RECORDS_MAX = 1000
BATCH_BYTES_MAX = 4 << 20
TOPIC = "bench"
# D0 per-record rows time one append in this many (as the Rust rows do).
LATENCY_SAMPLE_EVERY = 64
PREFIX = struct.Struct("<I")

Batches = list[list[Any]]


@dataclass
class Workload:
    """One record size: its payload pool, batch size, time budget and payload cap."""

    size: int
    pool: list[bytes]
    batch_records: int
    budget_ns: int
    cap_bytes: int

    @classmethod
    def build(cls, size: int, seconds: float, max_bytes: int) -> Workload:
        batch = max(1, min(BATCH_RECORDS_MAX, BATCH_BYTES_MAX // size))
        return cls(
            size=size,
            pool=[os.urandom(size) for _ in range(POOL_RECORDS)],
            batch_records=batch,
            budget_ns=int(seconds * 1e9),
            # At least one full batch, whatever the cap.
            cap_bytes=max(max_bytes, batch * size),
        )

    def batches(self, pool: Sequence[Any] | None = None) -> Batches:
        """Every batch the loops will see, in order, cycling through the pool: built here so
        the timed loops spend nothing on assembling them."""
        pool = self.pool if pool is None else pool
        b = self.batch_records
        period = POOL_RECORDS // math.gcd(b, POOL_RECORDS)
        return [[pool[(k * b + i) % POOL_RECORDS] for i in range(b)] for k in range(period)]


@dataclass
class Timed:
    """A timed write loop: records written, its nanoseconds, and the latency (ns) of each
    timed operation."""

    records: int
    ns: int
    latencies: array.array[int]
    latency_of: str


def per_record(op: Callable[[Any], object], batches: Batches, w: Workload) -> Timed:
    """Calls `op` once per record (D0), checking the budget and cap after every batch.

    Only one record in `LATENCY_SAMPLE_EVERY` is timed: reading the clock around every call
    would cost a good part of a fast append.
    """
    chunked = [
        [
            (batch[i], batch[i + 1 : i + LATENCY_SAMPLE_EVERY])
            for i in range(0, len(batch), LATENCY_SAMPLE_EVERY)
        ]
        for batch in batches
    ]
    clock = time.perf_counter_ns
    latencies: array.array[int] = array.array("q")
    mark = latencies.append
    b = w.batch_records
    cap = w.cap_bytes - b * w.size
    period = len(chunked)
    n = k = 0
    gc.disable()
    try:
        start = clock()
        deadline = start + w.budget_ns
        while True:
            for first, rest in chunked[k % period]:
                t0 = clock()
                op(first)
                mark(clock() - t0)
                for v in rest:
                    op(v)
            n += b
            k += 1
            t = clock()
            if t >= deadline or n * w.size > cap:
                return Timed(n, t - start, latencies, "record")
    finally:
        gc.enable()


def per_durable_record(op: Callable[[Any], object], batches: Batches, w: Workload) -> Timed:
    """Calls `op` once per record (D2), timing each and checking the budget and cap after
    each; at least one record is written (a batch of syncs could outlast the budget)."""
    clock = time.perf_counter_ns
    latencies: array.array[int] = array.array("q")
    mark = latencies.append
    cap = w.cap_bytes - w.size
    period = len(batches)
    n = k = 0
    gc.disable()
    try:
        start = prev = clock()
        deadline = start + w.budget_ns
        while True:
            for v in batches[k % period]:
                op(v)
                t = clock()
                mark(t - prev)
                prev = t
                n += 1
                if t >= deadline or n * w.size > cap:
                    return Timed(n, t - start, latencies, "record")
            k += 1
    finally:
        gc.enable()


def per_batch(op: Callable[[Any], object], batches: Batches, w: Workload) -> Timed:
    """Calls `op` once per batch, timing each and checking the budget and cap after each."""
    clock = time.perf_counter_ns
    latencies: array.array[int] = array.array("q")
    mark = latencies.append
    b = w.batch_records
    cap = w.cap_bytes - b * w.size
    period = len(batches)
    n = k = 0
    gc.disable()
    try:
        start = prev = clock()
        deadline = start + w.budget_ns
        while True:
            op(batches[k % period])
            t = clock()
            mark(t - prev)
            prev = t
            n += b
            k += 1
            if t >= deadline or n * w.size > cap:
                return Timed(n, t - start, latencies, "batch")
    finally:
        gc.enable()


def timed_read(scan: Callable[[], tuple[int, int]]) -> tuple[int, int, int]:
    """Runs `scan` (returns records and value bytes seen) with the cyclic GC off; returns
    records, bytes and nanoseconds."""
    clock = time.perf_counter_ns
    gc.disable()
    try:
        start = clock()
        records, total = scan()
        ns = clock() - start
    finally:
        gc.enable()
    return records, total, ns


def key_of(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


# ---- tidelog -------------------------------------------------------------------------------
# A write function takes (directory, workload, class) and returns the timed loop; a read
# function takes (directory, workload) and returns (records, value bytes, nanoseconds).


def tidelog_append(path: str, w: Workload, cls: str) -> Timed:
    wal = tidelog.open(os.path.join(path, "wal"), fsync="always" if cls == "D2" else "interval")
    try:
        writer = wal.writer(TOPIC)
        if cls == "D2":
            return per_durable_record(writer.append, w.batches(), w)
        return per_record(writer.append, w.batches(), w)
    finally:
        wal.close()


def tidelog_append_batch(path: str, w: Workload, cls: str) -> Timed:
    # With fsync="always" append_batch returns once the whole batch is durable.
    wal = tidelog.open(os.path.join(path, "wal"), fsync="always" if cls == "D1" else "interval")
    try:
        return per_batch(wal.writer(TOPIC).append_batch, w.batches(), w)
    finally:
        wal.close()


def tidelog_ring_append(path: str, w: Workload, cls: str) -> Timed:
    # The topic log with the ring in front (fsync="always" is its default): each append
    # returns once its ring block is durable.
    capacity = ring_capacity(w)
    wal = tidelog.open(os.path.join(path, "wal"), backend="ring", capacity=capacity)
    try:
        return per_durable_record(wal.writer(TOPIC).append, w.batches(), w)
    finally:
        wal.close()


def tidelog_ringwal(path: str, w: Workload, cls: str) -> Timed:
    # AutoMQ's WriteBench: appends return at once with a handle; only the last is waited
    # for, inside the timed span.
    ring = tidelog.RingWal(os.path.join(path, "ring.wal"), ring_capacity(w))
    try:
        last: list[Any] = [None]

        def append(v: bytes) -> None:
            last[0] = ring.append(v, space_timeout=5.0)

        timed = per_record(append, w.batches(), w)
        start = time.perf_counter_ns()
        if last[0] is not None:
            last[0].wait()
        timed.ns += time.perf_counter_ns() - start
        # The latencies are of the append call, which does not wait for durability.
        timed.latency_of = "append call (1 in 64 timed)"
        return timed
    finally:
        ring.close()


def ring_capacity(w: Workload) -> int:
    """A ring that holds a whole row (records, their headers and block padding), in whole
    MiB, at most 1 GiB; a row that would need more waits for room and fails after 5 s."""
    need = 2 * w.cap_bytes + (64 << 20)
    return min(need, 1 << 30) >> 20 << 20


def tidelog_read(path: str, w: Workload) -> tuple[int, int, int]:
    wal = tidelog.open(os.path.join(path, "wal"))
    try:
        with wal.reader(TOPIC, start="earliest") as reader:

            def scan() -> tuple[int, int]:
                n = total = 0
                for rec in reader:
                    n += 1
                    total += len(rec)  # the value's length; the value is a zero-copy view
                return n, total

            return timed_read(scan)
    finally:
        wal.close()


# ---- plain file ----------------------------------------------------------------------------
# The plain-file and sqlite3 peers are also the baselines of benches/python/bench_python.py,
# which imports them from here: one implementation of each.


def frame(value: bytes) -> bytes:
    """A record as the plain file stores it: its length as 4 little-endian bytes, then it."""
    return PREFIX.pack(len(value)) + value


class PlainFile:
    """The plain-file peer: frames (see `frame`) appended to a buffered file opened "ab",
    made durable with flush + fdatasync where asked."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.file = open(path, "ab")  # closed by close() or the with block
        # One buffered write per frame: a bound method, as cheap as calling the file's own.
        self.write = self.file.write
        self._fd = self.file.fileno()

    def sync(self) -> None:
        """Makes everything written so far durable: flush, then fdatasync."""
        self.file.flush()
        os.fdatasync(self._fd)

    def write_durable(self, frame: bytes) -> None:
        """One frame, durable before it returns (D2)."""
        self.write(frame)
        self.sync()

    def write_batch_durable(self, frames: list[bytes]) -> None:
        """A batch of frames in one call, durable before it returns (D1)."""
        self.file.writelines(frames)
        self.sync()

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> PlainFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plain_file_scan(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Reads a plain file whole and slices out every record (a memoryview, no copy); returns
    the records and value bytes seen."""
    unpack = PREFIX.unpack_from
    step = PREFIX.size
    with open(path, "rb") as f:
        data = f.read()
    view = memoryview(data)
    end = len(data)
    off = n = total = 0
    while off < end:
        (length,) = unpack(data, off)
        off += step
        value = view[off : off + length]
        off += length
        n += 1
        total += len(value)
    return n, total


def file_write(path: str, w: Workload, cls: str) -> Timed:
    # Frames are built once with the pool: the baseline at its cheapest.
    batches = w.batches([frame(v) for v in w.pool])
    with PlainFile(os.path.join(path, "log.bin")) as f:
        if cls == "D0":
            return per_record(f.write, batches, w)
        if cls == "D1":
            return per_batch(f.write_batch_durable, batches, w)
        return per_durable_record(f.write_durable, batches, w)


def file_read(path: str, w: Workload) -> tuple[int, int, int]:
    return timed_read(lambda: plain_file_scan(os.path.join(path, "log.bin")))


# ---- sqlite3 -------------------------------------------------------------------------------

SQLITE_INSERT = "INSERT INTO log(value) VALUES (?)"
SQLITE_SELECT = "SELECT value FROM log ORDER BY id"


class SqliteLog:
    """The sqlite3 peer: a table `log(id INTEGER PRIMARY KEY, value BLOB NOT NULL)` in WAL
    mode at the given `synchronous` level (NORMAL or FULL), transactions explicit."""

    def __init__(self, path: str | os.PathLike[str], synchronous: str) -> None:
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL").fetchall()
        con.execute(f"PRAGMA synchronous={synchronous}")
        con.execute("CREATE TABLE IF NOT EXISTS log(id INTEGER PRIMARY KEY, value BLOB NOT NULL)")
        self.con = con
        self._execute = con.execute
        self._executemany = con.executemany

    def insert_one(self, row: tuple[bytes]) -> None:
        """One INSERT in its own transaction, committed before it returns (autocommit)."""
        self._execute(SQLITE_INSERT, row)

    def insert_each(self, rows: list[tuple[bytes]]) -> None:
        """One INSERT per row, all in one transaction."""
        execute = self._execute
        execute("BEGIN")
        for row in rows:
            execute(SQLITE_INSERT, row)
        execute("COMMIT")

    def insert_batch(self, rows: list[tuple[bytes]]) -> None:
        """One executemany of all the rows in one transaction."""
        self._execute("BEGIN")
        self._executemany(SQLITE_INSERT, rows)
        self._execute("COMMIT")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> SqliteLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sqlite_scan(con: sqlite3.Connection) -> tuple[int, int]:
    """Iterates `SELECT value FROM log ORDER BY id`; returns the rows and value bytes seen."""
    n = total = 0
    for (value,) in con.execute(SQLITE_SELECT):
        n += 1
        total += len(value)
    return n, total


def sqlite_write(path: str, w: Workload, cls: str) -> Timed:
    with SqliteLog(os.path.join(path, "log.db"), "NORMAL" if cls == "D0" else "FULL") as db:
        batches = [[(v,) for v in batch] for batch in w.batches()]
        if cls == "D2":
            return per_durable_record(db.insert_one, batches, w)
        return per_batch(db.insert_batch, batches, w)


def sqlite_read(path: str, w: Workload) -> tuple[int, int, int]:
    con = sqlite3.connect(os.path.join(path, "log.db"))
    try:
        return timed_read(lambda: sqlite_scan(con))
    finally:
        con.close()


# ---- lmdb ----------------------------------------------------------------------------------


def lmdb_map_size(w: Workload) -> int:
    # Values past about 2 KiB go to overflow pages, which can double the space (a 4 KiB value
    # takes two 4 KiB pages); branch pages and copy-on-write add a little more.
    return 3 * w.cap_bytes + (64 << 20)


def lmdb_write(path: str, w: Workload, cls: str) -> Timed:
    env = lmdb.open(os.path.join(path, "db"), map_size=lmdb_map_size(w), sync=cls != "D0")
    try:
        seq = itertools.count()
        begin = env.begin
        if cls == "D2":

            def write_one(v: bytes) -> None:
                with begin(write=True) as txn:
                    txn.put(key_of(next(seq)), v, append=True)

            return per_durable_record(write_one, w.batches(), w)

        def write_batch(batch: list[bytes]) -> None:
            with begin(write=True) as txn:
                put = txn.put
                for v in batch:
                    put(key_of(next(seq)), v, append=True)

        return per_batch(write_batch, w.batches(), w)
    finally:
        env.close()


def lmdb_read(path: str, w: Workload) -> tuple[int, int, int]:
    env = lmdb.open(os.path.join(path, "db"), map_size=lmdb_map_size(w), readonly=True, lock=False)
    try:
        with env.begin(buffers=True) as txn:
            cursor = txn.cursor()

            def scan() -> tuple[int, int]:
                n = total = 0
                for value in cursor.iternext(keys=False, values=True):
                    n += 1
                    total += len(value)
                return n, total

            return timed_read(scan)
    finally:
        env.close()


# ---- rocksdict -----------------------------------------------------------------------------


def rocksdict_write(path: str, w: Workload, cls: str) -> Timed:
    db = rocksdict.Rdict(os.path.join(path, "db"), rocksdict.Options(raw_mode=True))
    try:
        opts = rocksdict.WriteOptions()
        opts.sync = cls != "D0"
        seq = itertools.count()
        if cls == "D2":
            put = db.put
            return per_durable_record(lambda v: put(key_of(next(seq)), v, opts), w.batches(), w)
        new_batch = rocksdict.WriteBatch
        write = db.write

        def write_batch(batch: list[bytes]) -> None:
            wb = new_batch(raw_mode=True)
            put = wb.put
            for v in batch:
                put(key_of(next(seq)), v)
            write(wb, opts)

        return per_batch(write_batch, w.batches(), w)
    finally:
        db.close()


def rocksdict_read(path: str, w: Workload) -> tuple[int, int, int]:
    db = rocksdict.Rdict(os.path.join(path, "db"), rocksdict.Options(raw_mode=True))
    try:

        def scan() -> tuple[int, int]:
            n = total = 0
            for value in db.values():
                n += 1
                total += len(value)
            return n, total

        return timed_read(scan)
    finally:
        db.close()


# ---- append to visible in another process --------------------------------------------------
# The writer (this process) puts the CLOCK_MONOTONIC time in nanoseconds (one clock for the
# whole machine) in each record's first 8 bytes just before appending it; a spawned reader
# process, asleep in `Reader.next(timeout=...)`, subtracts it from the same clock as soon as
# the call returns. The writer appends once per VISIBLE_PACE_S (sleeping, never spinning), so
# the reader is asleep again before each record; the first records are a warm-up and are not
# counted. The baseline sends the same messages through a pipe to a process blocked in
# `os.read`: the kernel's own wake-up, with Python on both ends.

VISIBLE_BYTES = 100
VISIBLE_PACE_S = 200e-6
# Timed samples: as many as --seconds holds at the pace, within these bounds...
VISIBLE_SAMPLES_MIN = 100
VISIBLE_SAMPLES_MAX = 2000
# ...after a tenth as many warm-up records, at least this many.
VISIBLE_WARM_UP_MIN = 20
# A reader that sees no record for this long gives up (the writer appends every 200 us).
VISIBLE_READ_TIMEOUT_S = 1.0
# How long the writer waits for the reader process to be ready, and for its result.
VISIBLE_CHILD_TIMEOUT_S = 30.0
# The stamp (ns) and the sequence number (from 1), then filler up to VISIBLE_BYTES.
VISIBLE_HEAD = struct.Struct("<QQ")
VISIBLE_FILLER = bytes(VISIBLE_BYTES - VISIBLE_HEAD.size)
VISIBLE_TOPIC = "visible"
VISIBLE_LATENCY_OF = "record, append to read (the reader asleep before each)"
VISIBLE_READY = "ready"


def visible_counts(seconds: float) -> tuple[int, int]:
    """Warm-up records and timed samples of a row with a budget of `seconds`."""
    samples = min(VISIBLE_SAMPLES_MAX, max(VISIBLE_SAMPLES_MIN, int(seconds / VISIBLE_PACE_S)))
    return max(VISIBLE_WARM_UP_MIN, samples // 10), samples


def visible_latency(now: int, value: bytes, expected: int) -> int | None:
    """Nanoseconds from the stamp in `value` to `now`; None for the setup record (stamp 0)
    that creates the topic. The message must be the `expected`-th."""
    stamp, seq = VISIBLE_HEAD.unpack_from(value)
    if stamp == 0:
        return None
    if seq != expected:
        raise RuntimeError(f"message {seq} arrived where {expected} was expected")
    return now - stamp


def visible_log_reader(path: str, count: int, conn: Connection) -> None:
    """The reader process of the tidelog row (spawned): opens `path` read-only and reads
    `count` stamped records from the end of the topic, asleep in `Reader.next(timeout=...)`
    whenever none is there. Sends "ready" before the first wait, then the latencies (ns), or
    the error as text."""
    try:
        wal = tidelog.open(path, readonly=True)
        try:
            reader = wal.reader(VISIBLE_TOPIC, start="latest", visibility="published")
            clock, mono = time.clock_gettime_ns, time.CLOCK_MONOTONIC
            next_record = reader.next
            latencies: list[int] = []
            conn.send(VISIBLE_READY)
            gc.disable()
            while len(latencies) < count:
                record = next_record(timeout=VISIBLE_READ_TIMEOUT_S)
                now = clock(mono)
                if record is None:
                    got = len(latencies)
                    raise RuntimeError(
                        f"no record for {VISIBLE_READ_TIMEOUT_S} s after {got} of {count}"
                    )
                ns = visible_latency(now, bytes(record), len(latencies) + 1)
                if ns is not None:
                    latencies.append(ns)
            conn.send(latencies)
        finally:
            wal.close()
    except Exception as err:
        conn.send(f"{type(err).__name__}: {err}")


def visible_pipe_reader(data: Connection, count: int, conn: Connection) -> None:
    """The reader process of the baseline (spawned): reads `count` messages from the pipe
    `data`, blocked in `os.read`; reports as `visible_log_reader` does."""
    try:
        fd = data.fileno()
        read = os.read
        clock, mono = time.clock_gettime_ns, time.CLOCK_MONOTONIC
        latencies: list[int] = []
        conn.send(VISIBLE_READY)
        gc.disable()
        for seq in range(1, count + 1):
            # Messages are written whole (under PIPE_BUF), so a read returns one whole.
            msg = read(fd, VISIBLE_BYTES)
            now = clock(mono)
            ns = visible_latency(now, msg, seq) if len(msg) == VISIBLE_BYTES else None
            if ns is None:
                raise RuntimeError(f"message {seq} of {count}: {len(msg)} bytes")
            latencies.append(ns)
        conn.send(latencies)
    except Exception as err:
        conn.send(f"{type(err).__name__}: {err}")


def visible_receive(conn: Connection, what: str) -> Any:
    """The reader process's next message: raises its error, or why none came."""
    if not conn.poll(VISIBLE_CHILD_TIMEOUT_S):
        raise RuntimeError(f"the reader process sent no {what} for {VISIBLE_CHILD_TIMEOUT_S} s")
    try:
        message = conn.recv()
    except EOFError:
        raise RuntimeError(f"the reader process ended before its {what}") from None
    if isinstance(message, str) and message != VISIBLE_READY:
        raise RuntimeError(f"the reader process failed: {message}")
    return message


def visible_run(
    reader: Callable[..., None],
    args: tuple[Any, ...],
    send: Callable[[bytes], object],
    count: int,
    handoff: tuple[Connection, ...] = (),
) -> list[int]:
    """Spawns `reader(*args, count, conn)`, closes our copies of `handoff` once it has
    started, and when it is ready sends `count` stamped messages with `send`, one per
    VISIBLE_PACE_S; returns the latencies the reader measured."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=reader, args=(*args, count, theirs), daemon=True)
    proc.start()
    try:
        theirs.close()
        for conn in handoff:
            conn.close()
        visible_receive(ours, "ready")
        clock, mono, sleep = time.clock_gettime_ns, time.CLOCK_MONOTONIC, time.sleep
        pack, filler = VISIBLE_HEAD.pack, VISIBLE_FILLER
        gc.disable()
        try:
            for seq in range(1, count + 1):
                sleep(VISIBLE_PACE_S)
                send(pack(clock(mono), seq) + filler)
        finally:
            gc.enable()
        latencies: list[int] = visible_receive(ours, "latencies")
        return latencies
    finally:
        ours.close()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()


def visible_tidelog(path: str, count: int) -> list[int]:
    wal_path = os.path.join(path, "wal")
    wal = tidelog.open(wal_path, fsync="never")
    try:
        writer = wal.writer(VISIBLE_TOPIC)
        # The setup record (stamp 0, which the reader skips) creates the topic, so that the
        # reader process can open it before the first timed append.
        writer.append(bytes(VISIBLE_BYTES))
        return visible_run(visible_log_reader, (wal_path,), writer.append, count)
    finally:
        wal.close()


def visible_pipe(path: str, count: int) -> list[int]:
    # On Linux a one-way multiprocessing pipe is an os.pipe(); the reader gets its read end.
    readable, writable = multiprocessing.get_context("spawn").Pipe(duplex=False)
    fd = writable.fileno()
    write = os.write
    try:
        return visible_run(
            visible_pipe_reader, (readable,), lambda msg: write(fd, msg), count, (readable,)
        )
    finally:
        writable.close()
        readable.close()


# ---- the row plan --------------------------------------------------------------------------


# Rows on the ring are held against the direct-I/O ceilings (names as `tidelog bench`
# measures them); every other row gets the ceiling of its durability class.
RING_CEILINGS = {
    "topic log on the ring, Writer.append/record, fsync=always": (
        "O_DIRECT+O_DSYNC write per record"
    ),
    "RingWal.append, pipelined, wait for the last": "O_DIRECT+O_DSYNC 256 KiB x4",
}


@dataclass(frozen=True)
class Spec:
    """One row: what it measures, and the function that measures it."""

    system: str
    config: str
    cls: str
    op: str
    latency_of: str | None
    run: Callable[..., Any] = field(compare=False)
    # "ceiling" for a baseline; else tidelog's rows are "tidelog" and the others "peer".
    kind: str | None = None
    # The ceiling row this row is held against, where not the rule for its class.
    ceiling: str | None = None

    def head(self, size: int) -> dict[str, Any]:
        head = {
            "system": self.system,
            "config": self.config,
            "lang": "python",
            "kind": self.kind or ("tidelog" if self.system == "tidelog" else "peer"),
            "class": self.cls,
            "op": self.op,
            "record_bytes": size,
            "threads": 1,
        }
        if self.ceiling:
            head["ceiling"] = self.ceiling
        elif self.config in RING_CEILINGS:
            head["ceiling"] = RING_CEILINGS[self.config]
        return head


@dataclass(frozen=True)
class System:
    """A system's rows: `source` writes the data its `read` row reads; then `others`."""

    source: Spec
    read: Spec
    others: tuple[Spec, ...]
    missing: str | None

    @classmethod
    def of(
        cls,
        name: str,
        missing: str | None,
        read: tuple[str, Callable[..., Any]],
        *writes: tuple[str, str, str, Callable[..., Any]],
    ) -> System:
        """`writes` are (class, latency_of, config, write function); the read row reads
        what the first one wrote."""
        specs = [Spec(name, config, c, "append", lat, run) for c, lat, config, run in writes]
        read_spec = Spec(name, read[0], specs[0].cls, "read", None, read[1])
        return cls(specs[0], read_spec, tuple(specs[1:]), missing)

    def rows(self) -> list[Spec]:
        return [self.source, self.read, *self.others]


def not_installed(module: object, name: str) -> str | None:
    return None if module else f"{name} is not installed (pip install {name})"


def systems() -> list[System]:
    return [
        System.of(
            "tidelog",
            not_installed(tidelog, "tidelog"),
            ("reader iteration, len(record)", tidelog_read),
            ("D0", "record", "Writer.append/record, fsync=interval", tidelog_append),
            ("D0", "batch", "Writer.append_batch, fsync=interval", tidelog_append_batch),
            ("D1", "batch", "Writer.append_batch, fsync=always", tidelog_append_batch),
            ("D2", "record", "Writer.append/record, fsync=always", tidelog_append),
            (
                "D2",
                "record",
                "topic log on the ring, Writer.append/record, fsync=always",
                tidelog_ring_append,
            ),
            ("D2a", None, "RingWal.append, pipelined, wait for the last", tidelog_ringwal),
        ),
        System.of(
            "file",
            None,
            ("read whole file, slice by length prefix", file_read),
            ("D0", "record", "buffered 'ab', 4 B length prefix, no fsync", file_write),
            ("D1", "batch", "buffered 'ab', writelines+flush+fdatasync/batch", file_write),
            ("D2", "record", "buffered 'ab', write+flush+fdatasync/record", file_write),
        ),
        System.of(
            "sqlite3",
            None,
            ("SELECT value ORDER BY id", sqlite_read),
            ("D0", "batch", "WAL synchronous=NORMAL, executemany/txn", sqlite_write),
            ("D1", "batch", "WAL synchronous=FULL, executemany/txn", sqlite_write),
            ("D2", "record", "WAL synchronous=FULL, INSERT+commit/record", sqlite_write),
        ),
        System.of(
            "lmdb",
            not_installed(lmdb, "lmdb"),
            ("cursor iteration, buffers=True", lmdb_read),
            ("D0", "batch", "sync=False, put(append=True), txn/batch", lmdb_write),
            ("D1", "batch", "sync=True, put(append=True), txn/batch", lmdb_write),
            ("D2", "record", "sync=True, put(append=True), txn/record", lmdb_write),
        ),
        System.of(
            "rocksdict",
            not_installed(rocksdict, "rocksdict"),
            ("values() iteration, raw_mode", rocksdict_read),
            ("D0", "batch", "WriteBatch/batch, sync=False", rocksdict_write),
            ("D1", "batch", "WriteBatch/batch, sync=True", rocksdict_write),
            ("D2", "record", "put/record, sync=True", rocksdict_write),
        ),
    ]


VISIBLE_PIPE_WAKE = "pipe wake-up (Python)"
VISIBLE_BASELINE = Spec(
    VISIBLE_PIPE_WAKE,
    "100 B os.write to a process blocked in os.read",
    "D0",
    "visible",
    VISIBLE_LATENCY_OF,
    visible_pipe,
    kind="ceiling",
)
VISIBLE_TIDELOG = Spec(
    "tidelog",
    "append to visible: reader in another process blocked in Reader.next(timeout), fsync=never",
    "D0",
    "visible",
    VISIBLE_LATENCY_OF,
    visible_tidelog,
    ceiling=VISIBLE_PIPE_WAKE,
)


def visible_chosen(only: str | None) -> list[Spec]:
    """The append-to-visible rows `--only` keeps, baseline first: the baseline runs with the
    tidelog row or when asked for itself."""
    if only is None:
        return [VISIBLE_BASELINE, VISIBLE_TIDELOG]
    ours = only in VISIBLE_TIDELOG.system or only in VISIBLE_TIDELOG.config
    base = ours or only in VISIBLE_BASELINE.system or only in VISIBLE_BASELINE.config
    return [s for s, keep in ((VISIBLE_BASELINE, base), (VISIBLE_TIDELOG, ours)) if keep]


def visible_missing(spec: Spec) -> str | None:
    return not_installed(tidelog, "tidelog") if spec is VISIBLE_TIDELOG else None


# ---- running -------------------------------------------------------------------------------


def emit(row: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(row) + "\n")
    sys.stdout.flush()


def disk_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def nearest_rank(ordered: list[int], p: float) -> int:
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def measured(spec: Spec, size: int, records: int, ns: int) -> dict[str, Any]:
    seconds = max(ns, 1) / 1e9
    row = spec.head(size)
    row.update(
        records=records,
        seconds=seconds,
        records_per_s=records / seconds,
        mb_per_s=records * size / seconds / 1e6,
        p50_us=None,
        p99_us=None,
        latency_of=None,
        disk_bytes=None,
    )
    return row


def skipped(spec: Spec, size: int, reason: str) -> dict[str, Any]:
    row = spec.head(size)
    row["skipped"] = reason
    return row


def failure(spec: Spec, size: int, err: BaseException) -> dict[str, Any]:
    traceback.print_exc(file=sys.stderr)
    return skipped(spec, size, f"failed: {type(err).__name__}: {err}")


class Runner:
    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.counter = itertools.count()

    def fresh_dir(self, spec: Spec, size: int) -> str:
        name = f"{spec.system}-{spec.cls}-{size}-{next(self.counter)}"
        path = os.path.join(self.scratch, name)
        os.mkdir(path)
        return path

    @staticmethod
    def settle() -> None:
        # Untimed: write back what the previous row left dirty, so it does not land here.
        gc.collect()
        os.sync()

    def write(self, spec: Spec, w: Workload, show: bool, keep: bool) -> tuple[str, int] | None:
        """Runs a write row; returns its directory and record count when `keep` (the read
        row deletes it), else deletes the directory."""
        path = self.fresh_dir(spec, w.size)
        kept = False
        try:
            self.settle()
            timed: Timed = spec.run(path, w, spec.cls)
            row = measured(spec, w.size, timed.records, timed.ns)
            ordered = sorted(timed.latencies)
            row.update(
                p50_us=nearest_rank(ordered, 0.50) / 1e3,
                p99_us=nearest_rank(ordered, 0.99) / 1e3,
                latency_of=timed.latency_of,
                disk_bytes=disk_bytes(path),
            )
            if show:
                emit(row)
            kept = keep
            return (path, timed.records) if keep else None
        except Exception as err:
            failed = failure(spec, w.size, err)
            if show:
                emit(failed)
            return None
        finally:
            if not kept:
                shutil.rmtree(path, ignore_errors=True)

    def read(self, spec: Spec, w: Workload, path: str, written: int) -> None:
        try:
            self.settle()
            records, total, ns = spec.run(path, w)
            if records != written or total != written * w.size:
                raise RuntimeError(
                    f"read back {records} records of {total} bytes, "
                    f"wrote {written} of {written * w.size}"
                )
            emit(measured(spec, w.size, records, ns))
        except Exception as err:
            emit(failure(spec, w.size, err))
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def visible(self, spec: Spec, seconds: float) -> None:
        """Runs an append-to-visible row (`spec.run(path, count)` gives every latency, the
        warm-up first)."""
        path = self.fresh_dir(spec, VISIBLE_BYTES)
        try:
            self.settle()
            warm, samples = visible_counts(seconds)
            latencies: list[int] = spec.run(path, warm + samples)
            timed = sorted(latencies[warm:])
            if len(timed) != samples:
                raise RuntimeError(f"{len(timed)} samples, {samples} expected")
            row = spec.head(VISIBLE_BYTES)
            row.update(
                records=samples,
                p50_us=nearest_rank(timed, 0.50) / 1e3,
                p99_us=nearest_rank(timed, 0.99) / 1e3,
                latency_of=spec.latency_of,
            )
            emit(row)
        except Exception as err:
            emit(failure(spec, VISIBLE_BYTES, err))
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def system(self, system: System, w: Workload, chosen: list[Spec]) -> None:
        if system.missing:
            for spec in chosen:
                emit(skipped(spec, w.size, system.missing))
            return
        want_read = system.read in chosen
        if system.source in chosen or want_read:
            kept = self.write(system.source, w, show=system.source in chosen, keep=want_read)
            if want_read:
                if kept is None:
                    emit(skipped(system.read, w.size, "the write row it reads failed"))
                else:
                    self.read(system.read, w, *kept)
        for spec in system.others:
            if spec in chosen:
                self.write(spec, w, show=True, keep=False)


def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text}") from err
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"needs positive integers: {text}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Python rows of `tidelog bench` (JSON Lines).")
    p.add_argument("--dir", help="scratch directory on the filesystem under test (empty)")
    p.add_argument("--sizes", type=int_list, default=[100, 1024, 65536, 1048576])
    p.add_argument("--threads", type=int_list, default=[1], help="accepted; rows run on 1")
    p.add_argument("--seconds", type=float, default=1.0, help="time budget per row")
    p.add_argument("--max-bytes", type=int, default=268435456, help="payload cap per row")
    p.add_argument("--only", help="run only rows whose system or config contains this")
    p.add_argument("--list", action="store_true", help="print the planned rows and exit")
    args = p.parse_args(argv)
    if not args.list and not args.dir:
        p.error("--dir is required (unless --list)")
    if args.seconds <= 0 or args.max_bytes <= 0:
        p.error("--seconds and --max-bytes must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = systems()

    def chosen(system: System) -> list[Spec]:
        rows = system.rows()
        if args.only is None:
            return rows
        return [s for s in rows if args.only in s.system or args.only in s.config]

    if args.list:
        for size in args.sizes:
            for system in plan:
                for spec in chosen(system):
                    if system.missing:
                        emit(skipped(spec, size, system.missing))
                    else:
                        emit({**spec.head(size), "latency_of": spec.latency_of, "planned": True})
        for spec in visible_chosen(args.only):
            missing = visible_missing(spec)
            if missing:
                emit(skipped(spec, VISIBLE_BYTES, missing))
            else:
                emit({**spec.head(VISIBLE_BYTES), "latency_of": spec.latency_of, "planned": True})
        return 0

    if not os.path.isdir(args.dir):
        print(f"python_rows: --dir {args.dir} is not a directory", file=sys.stderr)
        return 2
    runner = Runner(args.dir)
    for size in args.sizes:
        w = Workload.build(size, args.seconds, args.max_bytes)
        for system in plan:
            rows = chosen(system)
            if rows:
                runner.system(system, w, rows)
    for spec in visible_chosen(args.only):
        missing = visible_missing(spec)
        if missing:
            emit(skipped(spec, VISIBLE_BYTES, missing))
        else:
            runner.visible(spec, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

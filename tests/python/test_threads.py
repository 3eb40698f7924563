"""Concurrent appends from several threads: offsets per topic dense and unique."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import tidelog

# Every test runs on the mmap and the ring backend (see conftest.py).
pytestmark = pytest.mark.usefixtures("backend")

THREADS = 4
PER_THREAD = 400


def run_threads(target: Callable[[int], None], count: int = THREADS) -> None:
    """Starts `count` threads at once (a barrier) and re-raises the first failure."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(n: int) -> None:
        try:
            barrier.wait()
            target(n)
        except BaseException as exc:  # reported to the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a thread hung"
    if errors:
        raise errors[0]


def value(thread: int, seq: int) -> bytes:
    return f"t{thread}-s{seq}-".encode() * 8


def check_topic(wal: tidelog.Wal, topic: str, got: dict[int, list[int]]) -> None:
    """Offsets are 0..n-1 exactly once, each thread's are increasing, and every offset
    holds the value its appender wrote."""
    everything = sorted(o for offsets in got.values() for o in offsets)
    assert everything == list(range(len(everything)))
    assert wal.topic_info(topic).next_offset == len(everything)
    for thread, offsets in got.items():
        assert offsets == sorted(offsets)
        for seq, offset in enumerate(offsets):
            assert bytes(wal.read(topic, offset)) == value(thread, seq)


def test_threads_one_topic(wal: tidelog.Wal) -> None:
    got: dict[int, list[int]] = {n: [] for n in range(THREADS)}

    def append(n: int) -> None:
        for seq in range(PER_THREAD):
            got[n].append(wal.append("shared", value(n, seq)))

    run_threads(append)
    check_topic(wal, "shared", got)


def test_threads_share_one_writer(wal: tidelog.Wal) -> None:
    writer = wal.writer("shared", fsync="never")
    got: dict[int, list[int]] = {n: [] for n in range(THREADS)}

    def append(n: int) -> None:
        for seq in range(PER_THREAD):
            got[n].append(writer.append(value(n, seq)))

    run_threads(append)
    check_topic(wal, "shared", got)
    assert writer.next_offset == THREADS * PER_THREAD


def test_threads_many_topics(wal: tidelog.Wal) -> None:
    topics = [f"topic-{i}" for i in range(12)]
    # got[topic][thread] = offsets that thread got on that topic
    got: dict[str, dict[int, list[int]]] = {t: {n: [] for n in range(THREADS)} for t in topics}

    def append(n: int) -> None:
        for seq in range(PER_THREAD):
            topic = topics[(seq * 7 + n) % len(topics)]
            offsets = got[topic][n]
            offsets.append(wal.append(topic, value(n, len(offsets))))

    run_threads(append)
    assert wal.topics() == sorted(topics)
    for topic in topics:
        check_topic(wal, topic, got[topic])


def test_threads_batches_and_async(wal: tidelog.Wal) -> None:
    ranges: list[range] = []
    handles: list[tidelog.AppendHandle] = []
    lock = threading.Lock()

    def append(n: int) -> None:
        for seq in range(50):
            if seq % 2:
                r = wal.append_batch("mixed", [value(n, seq)] * (1 + seq % 5))
            else:
                h = wal.append_async("mixed", value(n, seq))
                r = h.offsets
                with lock:
                    handles.append(h)
            with lock:
                ranges.append(r)

    run_threads(append)
    # One flush makes every pending async append durable.
    wal.flush()
    assert all(h.is_durable() and h.wait(timeout=0) for h in handles)
    # Batches are contiguous: their ranges tile 0..n with no gap or overlap.
    ranges.sort(key=lambda r: r.start)
    position = 0
    for r in ranges:
        assert r.start == position
        position = r.stop
    assert wal.topic_info("mixed").next_offset == position


def test_readers_and_writers_concurrently(wal: tidelog.Wal) -> None:
    total = 600
    seen: list[int] = []
    # The topic exists before the reader opens; the rest arrives while it reads.
    wal.append("stream", value(0, 0))

    def role(n: int) -> None:
        if n == 0:
            for i in range(1, total):
                assert wal.append("stream", value(0, i)) == i
        else:
            with wal.reader("stream") as r:
                while r.position < total:
                    rec = r.next(timeout=0.5)
                    if rec is not None:
                        assert bytes(rec) == value(0, rec.offset)
                        seen.append(rec.offset)

    run_threads(role, count=2)
    assert seen == list(range(total))


def test_shared_reader_hands_out_each_record_once(wal: tidelog.Wal) -> None:
    wal.append_batch("t", [value(0, i) for i in range(2000)])
    reader = wal.reader("t")
    got: dict[int, list[int]] = {n: [] for n in range(THREADS)}

    def consume(n: int) -> None:
        while (rec := reader.next()) is not None:
            got[n].append(rec.offset)

    run_threads(consume)
    reader.close()
    everything = sorted(o for offsets in got.values() for o in offsets)
    assert everything == list(range(2000))

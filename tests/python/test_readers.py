"""Readers: start positions, groups and commits across reopen, seeking, batches, waiting."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import tidelog
from conftest import open_small, payload

# Every test runs on the mmap and the ring backend (see conftest.py).
pytestmark = pytest.mark.usefixtures("backend")


def fill(wal: tidelog.Wal, topic: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        assert wal.append(topic, payload(i, 20)) == i


def drain(reader: tidelog.Reader) -> list[int]:
    return [rec.offset for rec in reader]


def test_anonymous_reader_iterates_what_is_available(wal: tidelog.Wal) -> None:
    fill(wal, "t", 10)
    r = wal.reader("t")
    assert r.topic == "t"
    assert r.group is None
    assert r.committed is None
    assert r.position == 0
    assert r.lag == 10
    recs = list(r)
    assert [rec.offset for rec in recs] == list(range(10))
    assert [bytes(rec) for rec in recs] == [payload(i, 20) for i in range(10)]
    assert r.position == 10
    assert r.lag == 0
    assert r.next() is None
    with pytest.raises(StopIteration):
        next(r)
    # Iteration stops when caught up and resumes once more is appended.
    fill(wal, "t", 3, start=10)
    assert r.lag == 3
    assert drain(r) == [10, 11, 12]
    r.close()


def test_next_and_dunder_next(wal: tidelog.Wal) -> None:
    fill(wal, "t", 2)
    with wal.reader("t") as r:
        first = r.next()
        assert first is not None
        assert first.offset == 0
        assert next(r).offset == 1
        assert r.next() is None
        assert r.next(timeout=None) is None


def test_start_positions(wal: tidelog.Wal) -> None:
    fill(wal, "t", 10)
    with wal.reader("t", start="earliest") as r:
        assert r.position == 0
    with wal.reader("t", start="latest") as r:
        assert r.position == 10
        assert r.next() is None
        wal.append("t", b"new")
        rec = r.next()
        assert rec is not None
        assert (rec.offset, bytes(rec)) == (10, b"new")
    with wal.reader("t", start=4) as r:
        assert drain(r) == list(range(4, 11))
    # The next offset is a valid start; one past it is not.
    with wal.reader("t", start=11) as r:
        assert r.next() is None
    with pytest.raises(tidelog.OffsetOutOfRangeError):
        wal.reader("t", start=12)
    # "committed" without a group, or before the first commit, is the earliest offset.
    with wal.reader("t", start="committed") as r:
        assert r.position == 0
    with wal.reader("t", "fresh") as r:
        assert r.position == 0
        assert r.committed is None


def test_bad_start_is_rejected(wal: tidelog.Wal) -> None:
    fill(wal, "t", 1)
    with pytest.raises(tidelog.InvalidArgumentError):
        wal.reader("t", start="middle")  # type: ignore[arg-type]


def test_group_commits_survive_reopen(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        fill(wal, "t", 20)
        with wal.reader("t", "billing") as r:
            assert r.group == "billing"
            for _ in range(7):
                assert r.next() is not None
            r.commit()
            assert r.committed == 7
            # Reading on without committing does not move the group.
            assert r.next() is not None
        with wal.reader("t", "audit") as r:
            r.commit(15)
            assert r.committed == 15
            # An explicit commit does not move this reader.
            assert r.position == 0
        # A new reader of the group starts at its commit, in the same handle...
        with wal.reader("t", "billing") as r:
            assert r.position == 7
            assert r.committed == 7
    # ...and after a reopen.
    with open_small(tmp_path) as wal:
        assert wal.topic_info("t").groups == ["audit", "billing"]
        with wal.reader("t", "billing") as r:
            assert r.committed == 7
            assert r.position == 7
            assert r.lag == 13
            assert drain(r) == list(range(7, 20))
            r.commit()
        with wal.reader("t", "audit") as r:
            assert r.position == 15
        # A start option overrides the committed offset without changing it.
        with wal.reader("t", "audit", start="earliest") as r:
            assert r.position == 0
            assert r.committed == 15
    with open_small(tmp_path) as wal, wal.reader("t", "billing") as r:
        assert r.position == 20
        assert r.next() is None


def test_commit_past_end_is_out_of_range(wal: tidelog.Wal) -> None:
    fill(wal, "t", 3)
    with wal.reader("t", "g") as r:
        r.commit(3)
        with pytest.raises(tidelog.OffsetOutOfRangeError):
            r.commit(4)
        assert r.committed == 3


def test_anonymous_reader_cannot_commit(wal: tidelog.Wal) -> None:
    fill(wal, "t", 3)
    with wal.reader("t") as r, pytest.raises(tidelog.InvalidArgumentError):
        r.commit()


def test_seek_and_position(wal: tidelog.Wal) -> None:
    fill(wal, "t", 10)
    with wal.reader("t") as r:
        r.seek(6)
        assert r.position == 6
        rec = r.next()
        assert rec is not None
        assert rec.offset == 6
        r.seek(2)
        assert [rec.offset for rec in r.next_batch(3)] == [2, 3, 4]
        r.seek(10)
        assert r.next() is None
        with pytest.raises(tidelog.OffsetOutOfRangeError):
            r.seek(11)
        # A failed seek leaves the reader where it was.
        assert r.position == 10


def test_seek_time(wal: tidelog.Wal) -> None:
    base = 1_600_000_000_000_000
    for i in range(20):
        wal.append("t", payload(i, 30), timestamp=base + i * 1_000)
    with wal.reader("t") as r:
        assert r.seek_time(base + 5_000) == 5
        assert r.position == 5
        rec = r.next()
        assert rec is not None
        assert (rec.offset, rec.timestamp) == (5, base + 5_000)
        # Between two timestamps: the first record at or after it.
        assert r.seek_time(base + 7_500) == 8
        # Before everything: the first record; after everything: the end.
        assert r.seek_time(0) == 0
        assert r.seek_time(base + 1_000_000) == 20
        assert r.next() is None


def test_seek_time_across_blocks(wal: tidelog.Wal) -> None:
    base = 1_600_000_000_000_000
    # 2000-byte records: about 30 per 64 KiB block, so the index spans many extents.
    for i in range(200):
        wal.append("t", payload(i, 2000), timestamp=base + i * 10)
    with wal.reader("t") as r:
        for target in (0, 31, 64, 150, 199):
            assert r.seek_time(base + target * 10) == target
            rec = r.next()
            assert rec is not None
            assert bytes(rec) == payload(target, 2000)


def test_next_batch_limits(wal: tidelog.Wal) -> None:
    for i in range(10):
        wal.append("t", payload(i, 100))
    with wal.reader("t") as r:
        batch = r.next_batch(max_records=4)
        assert [rec.offset for rec in batch] == [0, 1, 2, 3]
        # max_bytes counts values: 250 bytes fit two 100-byte records.
        batch = r.next_batch(max_records=100, max_bytes=250)
        assert [rec.offset for rec in batch] == [4, 5]
        # A record larger than max_bytes is still returned alone, so readers progress.
        batch = r.next_batch(max_records=100, max_bytes=1)
        assert [rec.offset for rec in batch] == [6]
        batch = r.next_batch()
        assert [rec.offset for rec in batch] == [7, 8, 9]
        assert [bytes(rec) for rec in batch] == [payload(i, 100) for i in (7, 8, 9)]
        assert r.next_batch() == []


def test_next_with_timeout_waits_for_an_append(wal: tidelog.Wal) -> None:
    fill(wal, "t", 1)
    appended_at: list[float] = []

    def append_later() -> None:
        wal.append("t", b"late")
        appended_at.append(time.monotonic())

    with wal.reader("t", start="latest") as r:
        timer = threading.Timer(0.03, append_later)
        started = time.monotonic()
        timer.start()
        try:
            rec = r.next(timeout=0.2)
        finally:
            timer.join()
        assert rec is not None
        assert (rec.offset, bytes(rec)) == (1, b"late")
        # The record arrived while next() was waiting, not before the call.
        assert appended_at[0] > started


def test_next_with_timeout_returns_none_when_nothing_comes(wal: tidelog.Wal) -> None:
    fill(wal, "t", 1)
    with wal.reader("t", start="latest") as r:
        start = time.monotonic()
        assert r.next(timeout=0.1) is None
        elapsed = time.monotonic() - start
        assert 0.08 <= elapsed < 2.0


def test_reader_context_manager_and_close(wal: tidelog.Wal) -> None:
    fill(wal, "t", 2)
    with wal.reader("t") as r:
        assert r.closed is False
    assert r.closed is True
    with pytest.raises(tidelog.ClosedError):
        r.next()
    with pytest.raises(tidelog.ClosedError):
        r.seek(0)
    # Closing again is harmless; other readers are unaffected.
    r.close()
    with wal.reader("t") as other:
        assert drain(other) == [0, 1]


def test_reader_of_unknown_topic(wal: tidelog.Wal) -> None:
    with pytest.raises(tidelog.UnknownTopicError):
        wal.reader("missing")


def test_delete_group_fails_open_readers_on_commit(wal: tidelog.Wal) -> None:
    fill(wal, "t", 3)
    r = wal.reader("t", "g")
    r.next()
    r.commit()
    wal.delete_group("t", "g")
    with pytest.raises(tidelog.UnknownGroupError):
        r.commit()
    r.close()


def test_verify_checksums_off_reads_the_same(wal: tidelog.Wal) -> None:
    fill(wal, "t", 5)
    with wal.reader("t", verify_checksums=False) as r:
        assert [bytes(rec) for rec in r] == [payload(i, 20) for i in range(5)]


def test_readers_are_independent(wal: tidelog.Wal) -> None:
    fill(wal, "t", 6)
    with wal.reader("t", "a") as a, wal.reader("t", "b") as b:
        assert [rec.offset for rec in a.next_batch(4)] == [0, 1, 2, 3]
        assert [rec.offset for rec in b.next_batch(2)] == [0, 1]
        a.commit()
        b.commit()
        assert (a.committed, b.committed) == (4, 2)


def test_commit_modes_of_a_group(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        wal.append_batch("t", [b"%d" % i for i in range(10)])
        # auto: every 3 records the next read commits what came before (at least once).
        with wal.reader("t", "auto", commit="auto", auto_commit_every=3) as r:
            assert [bytes(r.next().value) for _ in range(4)] == [b"0", b"1", b"2", b"3"]
            # The 4th read committed the first 3.
            assert r.committed == 3
        with wal.reader("t", "auto", commit="auto", auto_commit_every=3) as r:
            assert r.position == 3  # a restart replays at most 3
        # strict: each record's successor is committed before it is returned (at most once).
        with wal.reader("t", "strict", commit="strict") as r:
            assert bytes(r.next().value) == b"0"
            assert r.committed == 1
        # explicit: only commit() persists.
        with wal.reader("t", "explicit") as r:
            r.next()
            assert r.committed is None
        with pytest.raises(tidelog.InvalidArgumentError, match="explicit"):
            wal.reader("t", "g", commit="sometimes")
        with pytest.raises(tidelog.InvalidArgumentError, match="auto_commit_every"):
            wal.reader("t", "g", commit="strict", auto_commit_every=5)
        with pytest.raises(tidelog.InvalidArgumentError, match="auto_commit_every"):
            wal.reader("t", "g", commit="auto", auto_commit_every=0)
        with pytest.raises(tidelog.InvalidArgumentError, match="need a group"):
            wal.reader("t", commit="auto")


def test_next_batch_waits_for_a_first_record(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        wal.append("t", b"x")
        with wal.reader("t", start="latest") as r:
            started = time.monotonic()
            assert r.next_batch(10, timeout=0.05) == []
            assert time.monotonic() - started >= 0.05

            def later() -> None:
                time.sleep(0.1)
                wal.append_batch("t", [b"a", b"b"])

            thread = threading.Thread(target=later)
            thread.start()
            got = r.next_batch(10, timeout=30)
            thread.join()
            assert [bytes(x.value) for x in got][:1] == [b"a"]


def test_wait_sees_a_record_without_reading_it(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        wal.append("t", b"a")
        with wal.reader("t", start="latest") as r:
            assert r.wait(0.02) is False
            wal.append("t", b"b")
            assert r.wait(0) is True
            assert r.position == 1  # not read
            assert bytes(r.next().value) == b"b"


def test_a_readers_repr_reads_as_python(wal: tidelog.Wal) -> None:
    wal.append("t", b"x")
    assert repr(wal.reader("t", start="earliest")) == 'Reader(topic="t", group=None, position=0)'
    grouped = wal.reader("t", "g", start="earliest")
    assert repr(grouped) == 'Reader(topic="t", group="g", position=0)'
    grouped.close()
    assert repr(grouped) == 'Reader(topic="t", group="g", position=closed)'

"""A Hypothesis state machine drives a Wal and checks it against an in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from typing import ClassVar

import hypothesis.strategies as st
import pytest
import tidelog
from conftest import RING_CAPACITY, open_small
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from other_process import OtherProcess

TOPICS = st.sampled_from(["alpha", "beta", "gamma"])
GROUPS = st.sampled_from([None, "g1", "g2"])
VALUES = st.binary(max_size=300)
KEYS = st.none() | st.binary(max_size=16)


@dataclass
class Stored:
    value: bytes
    key: bytes | None
    timestamp: int | None  # None: the append time, not checked exactly


@dataclass
class OpenReader:
    handle: tidelog.Reader
    topic: str
    group: str | None
    position: int


@dataclass
class Model:
    topics: dict[str, list[Stored]] = field(default_factory=dict)
    committed: dict[tuple[str, str], int] = field(default_factory=dict)


class WalMachine(RuleBasedStateMachine):
    # Extra `tidelog.open` options: the backend under test.
    OPTIONS: ClassVar[dict[str, object]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="tidelog-sm-")
        self.model = Model()
        self.wal: tidelog.Wal | None = None
        self.readers: list[OpenReader] = []
        # Views (Record, its value, a memoryview) and the bytes they must show, held across
        # reads, commits, closes and reopens.
        self.held: list[tuple[object, bytes]] = []
        self.timestamp = 1_000_000
        # A second writable handle on the directory: in shared mode it is what another
        # process holds (its own lock byte and process slot, its own view of each topic),
        # or another process indeed (`ProcessWalMachine`).
        self.other: tidelog.Wal | OtherProcess | None = None

    @initialize()
    def start(self) -> None:
        self.wal = open_small(self.dir, fsync="never", **self.OPTIONS)

    def teardown(self) -> None:
        if self.other is not None:
            self.other.close()
        if self.wal is not None and not self.wal.closed:
            self.wal.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def is_open(self) -> bool:
        return self.wal is not None

    def open_wal(self) -> tidelog.Wal:
        assert self.wal is not None
        return self.wal

    def check_record(self, topic: str, rec: tidelog.Record, offset: int) -> None:
        assert rec.offset == offset
        self.check_fields(topic, offset, bytes(rec), rec.key, rec.timestamp)

    def check_fields(
        self, topic: str, offset: int, value: bytes, key: bytes | None, timestamp: int
    ) -> None:
        want = self.model.topics[topic][offset]
        assert value == want.value
        assert key == want.key
        if want.timestamp is not None:
            assert timestamp == want.timestamp

    @precondition(is_open)
    @rule(topic=TOPICS, value=VALUES, key=KEYS, timed=st.booleans())
    def append(self, topic: str, value: bytes, key: bytes | None, timed: bool) -> None:
        ts = None
        if timed:
            self.timestamp += 17
            ts = self.timestamp
        offset = self.open_wal().append(topic, bytearray(value), key=key, timestamp=ts)
        stored = self.model.topics.setdefault(topic, [])
        assert offset == len(stored)
        stored.append(Stored(value, key, ts))

    @precondition(is_open)
    @rule(topic=TOPICS, values=st.lists(VALUES, min_size=1, max_size=6))
    def append_batch(self, topic: str, values: list[bytes]) -> None:
        got = self.open_wal().append_batch(topic, [memoryview(v) for v in values])
        stored = self.model.topics.setdefault(topic, [])
        assert got == range(len(stored), len(stored) + len(values))
        stored.extend(Stored(v, None, None) for v in values)

    @precondition(is_open)
    @rule(topic=TOPICS, data=st.data())
    def read(self, topic: str, data: st.DataObject) -> None:
        wal = self.open_wal()
        stored = self.model.topics.get(topic)
        if stored is None:
            with pytest.raises(tidelog.UnknownTopicError):
                wal.read(topic, 0)
            return
        offset = data.draw(st.integers(0, len(stored) + 2))
        if offset >= len(stored):
            with pytest.raises(tidelog.OffsetOutOfRangeError):
                wal.read(topic, offset)
        else:
            self.check_record(topic, wal.read(topic, offset), offset)

    @rule(topic=TOPICS, spin_us=st.sampled_from([0, 50, 10_000]))
    def follow(self, topic: str, spin_us: int) -> None:
        """A read-only handle (as another process opens one) sees every record appended,
        flushed or not (the writer runs with fsync="never"), and waits for none, whether
        its reader spins before it sleeps or not."""
        stored = self.model.topics.get(topic)
        with tidelog.open(self.dir, readonly=True) as ro:
            if stored is None:
                assert topic not in ro.topics()
                return
            info = ro.topic_info(topic)
            assert (info.first_offset, info.next_offset) == (0, len(stored))
            assert info.durable_offset <= info.next_offset
            reader = ro.reader(topic, start="earliest", spin_us=spin_us)
            for offset in range(len(stored)):
                rec = reader.next(timeout=5.0)
                assert rec is not None, f"{topic}: no record {offset}"
                self.check_record(topic, rec, offset)
            assert reader.next(timeout=0.001) is None
            durable = ro.reader(topic, start="earliest", visibility="durable")
            assert len(durable.next_batch(max_records=100_000)) == info.durable_offset

    def shared(self) -> bool:
        return "backend" not in self.OPTIONS

    @precondition(lambda self: self.shared() and self.other is None)
    @rule()
    def other_open(self) -> None:
        self.other = self.open_other()

    def open_other(self) -> tidelog.Wal | OtherProcess:
        return open_small(self.dir, fsync="never")

    def other_records(self, topic: str) -> list[tuple[int, bytes, bytes | None, int]]:
        """Every record of `topic` as the other handle reads it from the start."""
        assert isinstance(self.other, tidelog.Wal)
        reader = self.other.reader(topic, start="earliest")
        out = []
        while (rec := reader.next()) is not None:
            out.append((rec.offset, bytes(rec), rec.key, rec.timestamp))
        return out

    @precondition(lambda self: self.other is not None)
    @rule(topic=TOPICS, values=st.lists(VALUES, min_size=1, max_size=4), batch=st.booleans())
    def other_append(self, topic: str, values: list[bytes], batch: bool) -> None:
        """The other handle appends to the same topics: offsets continue densely after
        every handle's records."""
        assert self.other is not None
        stored = self.model.topics.setdefault(topic, [])
        if batch:
            got = self.other.append_batch(topic, values)
            assert got == range(len(stored), len(stored) + len(values))
            stored.extend(Stored(v, None, None) for v in values)
            return
        for v in values:
            assert self.other.append(topic, v) == len(stored)
            stored.append(Stored(v, None, None))

    @precondition(lambda self: self.other is not None and self.model.topics)
    @rule(data=st.data())
    def other_read(self, data: st.DataObject) -> None:
        """The other handle reads what both appended, without a flush."""
        assert self.other is not None
        topic = data.draw(st.sampled_from(sorted(self.model.topics)))
        stored = self.model.topics[topic]
        records = self.other_records(topic)
        assert [r[0] for r in records] == list(range(len(stored))), topic
        for offset, value, key, timestamp in records:
            self.check_fields(topic, offset, value, key, timestamp)

    @precondition(lambda self: self.other is not None and self.model.topics)
    @rule(data=st.data())
    def other_delete_topic(self, data: st.DataObject) -> None:
        """The other handle deletes a topic beside the first: it is gone for both (with its
        groups; the first handle's readers of it fail), and the name starts afresh at its
        next append in either."""
        assert self.other is not None
        topic = data.draw(st.sampled_from(sorted(self.model.topics)))
        self.other.delete_topic(topic)
        del self.model.topics[topic]
        self.model.committed = {k: v for k, v in self.model.committed.items() if k[0] != topic}
        for r in [r for r in self.readers if r.topic == topic]:
            self.readers.remove(r)
            with pytest.raises(tidelog.UnknownTopicError):
                r.handle.next()
            r.handle.close()

    @precondition(lambda self: self.other is not None)
    @rule()
    def other_close(self) -> None:
        assert self.other is not None
        self.other.close()
        self.other = None

    @precondition(is_open)
    @rule(topic=TOPICS, group=GROUPS)
    def open_reader(self, topic: str, group: str | None) -> None:
        if topic not in self.model.topics or len(self.readers) >= 4:
            return
        handle = self.open_wal().reader(topic, group)
        position = self.model.committed.get((topic, group), 0) if group else 0
        assert handle.position == position
        assert handle.committed == (self.model.committed.get((topic, group)) if group else None)
        self.readers.append(OpenReader(handle, topic, group, position))

    @precondition(lambda self: self.is_open() and self.readers)
    @rule(data=st.data(), count=st.integers(1, 5))
    def reader_next(self, data: st.DataObject, count: int) -> None:
        r = data.draw(st.sampled_from(self.readers))
        for _ in range(count):
            rec = r.handle.next()
            if r.position == len(self.model.topics[r.topic]):
                assert rec is None
                break
            assert rec is not None
            self.check_record(r.topic, rec, r.position)
            r.position += 1
        assert r.handle.position == r.position
        assert r.handle.lag == len(self.model.topics[r.topic]) - r.position

    @precondition(lambda self: self.is_open() and any(r.group for r in self.readers))
    @rule(data=st.data())
    def reader_commit(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from([r for r in self.readers if r.group]))
        assert r.group is not None
        r.handle.commit()
        self.model.committed[(r.topic, r.group)] = r.position
        assert r.handle.committed == r.position

    @precondition(lambda self: self.is_open() and self.readers)
    @rule(data=st.data())
    def reader_close(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from(self.readers))
        self.readers.remove(r)
        r.handle.close()
        assert r.handle.closed

    @precondition(lambda self: self.is_open() and self.model.topics)
    @rule(data=st.data())
    def hold_view(self, data: st.DataObject) -> None:
        topic = data.draw(st.sampled_from(sorted(self.model.topics)))
        offset = data.draw(st.integers(0, len(self.model.topics[topic]) - 1))
        rec = self.open_wal().read(topic, offset)
        kind = data.draw(st.sampled_from(["record", "value", "memoryview"]))
        view: object = {"record": rec, "value": rec.value, "memoryview": memoryview(rec)}[kind]
        self.held.append((view, self.model.topics[topic][offset].value))
        if len(self.held) > 8:
            self.held.pop(0)

    @precondition(is_open)
    @rule()
    def close(self) -> None:
        wal = self.open_wal()
        wal.close()
        assert wal.closed
        for r in self.readers:
            with pytest.raises(tidelog.ClosedError):
                r.handle.next()
        self.readers.clear()
        with pytest.raises(tidelog.ClosedError):
            wal.append("alpha", b"x")
        self.wal = None

    @precondition(lambda self: not self.is_open())
    @rule()
    def reopen(self) -> None:
        self.wal = open_small(self.dir, fsync="never", **self.OPTIONS)

    @invariant()
    def views_hold_their_bytes(self) -> None:
        for view, want in self.held:
            assert bytes(view) == want  # type: ignore[call-overload]

    @invariant()
    def topics_match(self) -> None:
        for wal in (self.wal, self.other):
            if wal is None:
                continue
            assert wal.topics() == sorted(self.model.topics)
            for topic, stored in self.model.topics.items():
                info = wal.topic_info(topic)
                assert (info.first_offset, info.next_offset) == (0, len(stored))
                groups = sorted(g for (t, g) in self.model.committed if t == topic)
                assert info.groups == groups


class RingWalMachine(WalMachine):
    """The same machine with a ring in front of the data files."""

    OPTIONS: ClassVar[dict[str, object]] = {"backend": "ring", "capacity": RING_CAPACITY}


class ProcessWalMachine(WalMachine):
    """The same machine whose other handle is another process's, which a step may SIGKILL
    (between its commands: it holds no lock then, and the page cache keeps what it
    appended, so the model stays as it is)."""

    def open_other(self) -> tidelog.Wal | OtherProcess:
        return OtherProcess(self.dir)

    def other_records(self, topic: str) -> list[tuple[int, bytes, bytes | None, int]]:
        assert isinstance(self.other, OtherProcess)
        return self.other.read_all(topic)

    @precondition(lambda self: self.other is not None)
    @rule()
    def other_kill(self) -> None:
        assert isinstance(self.other, OtherProcess)
        self.other.kill()
        self.other = None


for machine, examples in ((WalMachine, 60), (RingWalMachine, 60), (ProcessWalMachine, 20)):
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
TestWalMachine = WalMachine.TestCase
TestRingWalMachine = RingWalMachine.TestCase
TestProcessWalMachine = ProcessWalMachine.TestCase

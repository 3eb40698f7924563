"""The Python boundary's rules for waits: every timeout saturates (huge and infinite values
mean "as long as needed", NaN and negative values are `InvalidArgumentError`, 0 polls), every
wait can be interrupted with Ctrl-C, and no Rust panic reaches Python as `PanicException`."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tidelog
from conftest import open_small

HUGE = [1e19, 2.0**64, 1e300, math.inf, 10**19, 2**64]
BAD = [-1, -1e-9, -math.inf, math.nan]
# What a bad or out-of-range value may raise; anything else (PanicException is a
# BaseException only) breaks the rule.
ALLOWED = (tidelog.TidelogError, ValueError, TypeError, OverflowError)


def later(delay_s: float, action: Callable[[], Any]) -> threading.Timer:
    timer = threading.Timer(delay_s, action)
    timer.start()
    return timer


@pytest.fixture
def ring_wal(tmp_path: Path) -> Iterator[tidelog.RingWal]:
    ring = tidelog.RingWal(tmp_path / "ring", 1 << 20)
    try:
        yield ring
    finally:
        ring.close()


def waits(tmp_path: Path) -> dict[str, Callable[[Any], Any]]:
    """Every call of the binding that takes a wait in seconds, each set up so that a wait of
    any length ends at once (the thing waited for is already there)."""
    wal = open_small(tmp_path / "wal", fsync="never")
    wal.append("t", b"x")
    reader = wal.reader("t", start="earliest")
    handle = wal.append_async("t", b"y")
    wal.flush()
    staged = tidelog.StagedWriter(tmp_path / "wal", "published", "p0")
    staged.append("t", b"z")
    staged.finish()
    wal.commit_staged("published", ["p0"])
    ring = tidelog.RingWal(tmp_path / "ring", 1 << 20)
    ring_handle = ring.append(b"z")
    ring.flush()
    return {
        "Reader.next": lambda t: reader.next(timeout=t),
        "AppendHandle.wait": lambda t: handle.wait(timeout=t),
        "RingAppendHandle.wait": lambda t: ring_handle.wait(timeout=t),
        "RingWal.append(space_timeout)": lambda t: ring.append(b"w", space_timeout=t),
        "stage_wait": lambda t: tidelog.stage_wait(tmp_path / "wal", "published", timeout=t),
    }


@pytest.mark.parametrize("timeout", HUGE, ids=repr)
def test_every_timeout_saturates(tmp_path: Path, timeout: float) -> None:
    for name, call in waits(tmp_path).items():
        call(timeout)  # returns at once: a saturated wait that was already satisfied
        assert name


def test_huge_timeouts_wait_until_done(tmp_path: Path) -> None:
    wal = open_small(tmp_path, fsync="never")
    wal.append("t", b"a")
    reader = wal.reader("t", start="latest")
    later(0.2, lambda: wal.append("t", b"b"))
    record = reader.next(timeout=math.inf)
    assert record is not None
    assert bytes(record.value) == b"b"

    handle = wal.append_async("t", b"c")
    assert not handle.is_durable()
    later(0.2, wal.flush)
    start = time.monotonic()
    assert handle.wait(timeout=1e19) is True
    assert time.monotonic() - start >= 0.1
    assert handle.is_durable()
    wal.close()


def test_zero_timeout_polls(tmp_path: Path) -> None:
    wal = open_small(tmp_path, fsync="never")
    wal.append("t", b"a")
    reader = wal.reader("t", start="latest")
    handle = wal.append_async("t", b"b")
    start = time.monotonic()
    assert handle.wait(timeout=0) is False
    assert handle.wait(timeout=0.0) is False
    assert handle.wait(timeout=-0.0) is False
    assert reader.next(timeout=0) is not None  # "b" is published, only not yet durable
    assert reader.next(timeout=0) is None
    assert time.monotonic() - start < 1.0
    wal.close()


@pytest.mark.parametrize("timeout", BAD, ids=repr)
def test_nan_and_negative_timeouts_are_invalid_arguments(tmp_path: Path, timeout: float) -> None:
    for name, call in waits(tmp_path).items():
        with pytest.raises(tidelog.InvalidArgumentError) as info:
            call(timeout)
        assert isinstance(info.value, ValueError), name
        assert info.value.name in ("timeout", "space_timeout"), name


@pytest.mark.parametrize(
    "timeout", [*HUGE, *BAD, 10**400, -(10**400), 0, "1", None, object()], ids=repr
)
def test_no_panic_crosses(tmp_path: Path, timeout: Any) -> None:
    for name, call in waits(tmp_path).items():
        if timeout is None and name == "stage_wait":
            continue  # stage_wait's timeout is not optional
        try:
            call(timeout)
        except ALLOWED:
            pass
        except BaseException as e:  # PanicException derives from BaseException only
            pytest.fail(f"{name}({timeout!r}) raised {type(e).__module__}.{type(e).__name__}")


def interrupt_main_after(delay_s: float) -> threading.Timer:
    return later(delay_s, lambda: os.kill(os.getpid(), signal.SIGINT))


def assert_interrupted(wait: Callable[[], Any]) -> None:
    timer = interrupt_main_after(0.2)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            wait()
    finally:
        timer.cancel()
    assert time.monotonic() - start < 2.0


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals go to main"
)
@pytest.mark.usefixtures("python_sigint")
def test_waits_are_interruptible(tmp_path: Path) -> None:
    wal = open_small(tmp_path / "wal", fsync="never")
    handle = wal.append_async("t", b"x")
    # Under fsync="never" only a flush or close makes it durable: without signal checks this
    # blocks forever.
    assert_interrupted(handle.wait)
    assert_interrupted(lambda: handle.wait(timeout=math.inf))
    reader = wal.reader("t", start="latest")
    assert_interrupted(lambda: reader.next(timeout=math.inf))
    assert handle.wait(timeout=0) is False
    wal.flush()
    assert handle.wait() is True

    tidelog.StagedWriter(tmp_path / "wal", "job", "p0").finish()
    tidelog.stage_commit(tmp_path / "wal", "job", ["p0"])
    wal.close()  # nobody holds the directory: the commit is never published
    assert_interrupted(lambda: tidelog.stage_wait(tmp_path / "wal", "job", timeout=math.inf))


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals go to main"
)
@pytest.mark.usefixtures("python_sigint")
def test_waiting_for_a_busy_reader_is_interruptible(tmp_path: Path) -> None:
    wal = open_small(tmp_path, fsync="never")
    wal.append("t", b"a")
    reader = wal.reader("t", start="latest")
    outcome: list[BaseException | None] = []

    def wait_forever() -> None:
        try:
            reader.next(timeout=math.inf)
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    waiter = threading.Thread(target=wait_forever)
    waiter.start()
    time.sleep(0.1)
    assert "busy" in repr(reader)  # repr never waits for the lock
    assert_interrupted(lambda: reader.position)
    # Closing the reader ends the other thread's wait.
    reader.close()
    waiter.join(5)
    assert not waiter.is_alive()
    assert isinstance(outcome[0], tidelog.ClosedError)
    assert reader.closed
    wal.close()


def held_files(directory: Path) -> tuple[list[str], list[str]]:
    """The files under `directory` this process has open, and those it has mapped."""
    root = str(directory.resolve())
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own fd)
        if target.startswith(root):
            fds.append(target)
    with open("/proc/self/maps") as maps:
        mapped = sorted({line.split()[-1] for line in maps if root in line})
    return fds, mapped


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_close_releases_everything(tmp_path: Path, backend: str) -> None:
    before = threads()
    wal = open_small(tmp_path, fsync="never")  # on both backends (the `backend` fixture)
    wal.append("t", b"x" * 100)
    # Every kind of object that references the Wal, alive across the close.
    reader = wal.reader("t", start="earliest")
    group_reader = wal.reader("t", "g")
    writer = wal.writer("t")
    handle = wal.append_async("t", b"y")
    assert reader.next() is not None  # the reader now holds a block of the data file
    writer.append(b"z")
    fds, mapped = held_files(tmp_path)
    assert fds and mapped
    assert threads() > before

    wal.close()

    assert held_files(tmp_path) == ([], []), "close() left files open or mapped"
    assert threads() == before, "close() left background threads running"
    assert reader.closed and group_reader.closed
    with pytest.raises(tidelog.ClosedError):
        reader.next()
    with pytest.raises(tidelog.ClosedError):
        writer.append(b"w")
    with pytest.raises(tidelog.ClosedError):
        _ = writer.next_offset
    assert writer.topic == "t"
    assert "closed" in repr(writer)
    assert handle.wait(timeout=0) is True  # close made it durable
    wal.close()  # idempotent


def test_a_record_keeps_only_its_own_file_mapped(tmp_path: Path) -> None:
    wal = open_small(tmp_path, fsync="never")
    wal.append("t", b"x" * 100)
    record = wal.read("t", 0)
    view = record.value
    wal.close()
    fds, mapped = held_files(tmp_path)
    # Documented: a record keeps its data file (and no other) open and mapped while it lives.
    assert len(mapped) == 1
    assert set(fds) <= set(mapped)
    assert bytes(view) == b"x" * 100
    del view, record
    assert held_files(tmp_path) == ([], [])


def test_ring_close_releases_everything(tmp_path: Path) -> None:
    before = threads()
    ring = tidelog.RingWal(tmp_path / "ring", 1 << 20)
    handle = ring.append(b"x")
    records = ring.recover()
    assert held_files(tmp_path)[0]
    ring.close()
    assert held_files(tmp_path) == ([], []), "close() left the ring open"
    assert threads() == before
    assert handle.done
    del records

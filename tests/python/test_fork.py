"""A Wal opened before os.fork() refuses every call in the child (ForkedError)."""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import tidelog
from conftest import BACKEND, open_small

# Every test runs on the mmap and the ring backend (see conftest.py).
pytestmark = pytest.mark.usefixtures("backend")


def in_child(body: Callable[[], int], timeout_s: float = 20.0) -> int:
    """Runs `body` in a forked child and returns its exit code (the child's verdict).

    The child leaves with os._exit so no finaliser of the parent's objects runs there; a
    hang is killed and fails the test."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = body()
        except BaseException:
            traceback.print_exc()
            code = 98
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.WIFEXITED(status), f"child died by signal {os.WTERMSIG(status)}"
    return os.WEXITSTATUS(status)


def test_forked_child_gets_forked_error(tmp_path: Path) -> None:
    parent = os.getpid()
    with open_small(tmp_path) as wal:
        wal.append("t", b"before fork")
        writer = wal.writer("t")
        reader = wal.reader("t")

        def child() -> int:
            calls: list[Callable[[], object]] = [
                lambda: wal.append("t", b"from child"),
                lambda: wal.append_batch("t", [b"from child"]),
                lambda: wal.read("t", 0),
                lambda: wal.flush(),
                lambda: wal.reader("t"),
                lambda: wal.close(),
                lambda: writer.append(b"from child"),
                lambda: reader.next(),
            ]
            for n, call in enumerate(calls):
                try:
                    call()
                except tidelog.ForkedError as exc:
                    if exc.opener_pid != parent:
                        return 10 + n
                    continue
                return 40 + n  # the call succeeded in the child
            return 0

        assert in_child(child) == 0
        # The parent is untouched by the child's attempts and exit.
        assert wal.append("t", b"after fork") == 1
        assert bytes(wal.read("t", 0)) == b"before fork"
        rec = reader.next()
        assert rec is not None
        assert rec.offset == 0
        reader.close()


def test_forked_child_opens_its_own_shared_handle(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        wal.append("t", b"parent")

        def child() -> int:
            # The inherited handle is the parent's; a new one is the child's own.
            try:
                wal.append("t", b"inherited")
            except tidelog.ForkedError:
                pass
            else:
                return 1
            if BACKEND["name"] == "ring":
                # The ring backend is single-process.
                try:
                    open_small(tmp_path)
                except tidelog.LockedError:
                    return 0
                return 3
            with open_small(tmp_path) as own:
                own.append("t", b"child")
                return 0 if bytes(own.read("t", 0)) == b"parent" else 2

        assert in_child(child) == 0
        if BACKEND["name"] == "ring":
            return
        assert wal.append("t", b"parent again") == 2
        reader = wal.reader("t", start="earliest")
        assert [bytes(r.value) for r in reader] == [b"parent", b"child", b"parent again"]


def test_forked_child_cannot_take_an_exclusive_lock_but_can_read(tmp_path: Path) -> None:
    with open_small(tmp_path, exclusive=True) as wal:
        wal.append("t", b"durable")
        wal.flush()

        def child() -> int:
            try:
                open_small(tmp_path, exclusive=True)
            except tidelog.LockedError:
                pass
            else:
                return 1
            # A fresh read-only handle opened in the child works.
            with tidelog.open(tmp_path, readonly=True) as ro:
                return 0 if bytes(ro.read("t", 0)) == b"durable" else 2

        assert in_child(child) == 0
        assert wal.append("t", b"still mine") == 1


def test_records_read_before_fork_stay_readable_in_child(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        wal.append("t", b"shared mapping")
        rec = wal.read("t", 0)

        def child() -> int:
            # The mapping is inherited: bytes already handed out can still be read.
            return 0 if bytes(rec) == b"shared mapping" else 1

        assert in_child(child) == 0


def test_an_inherited_ring_refuses_every_call_in_the_child(tmp_path: Path) -> None:
    """A `RingWal` has no workers in a forked child: each call raises `ForkedError` there
    (none waits for ever), and dropping it writes nothing the parent owns."""
    ring_path = tmp_path / "ring"
    ring = tidelog.RingWal(ring_path, 1 << 20, block_bytes=64 * 1024)
    ring.append(b"before fork").wait()
    pending = ring.append(b"in flight")

    def child() -> int:
        calls: list[Callable[[], object]] = [
            lambda: ring.append(b"from child"),
            lambda: ring.flush(),
            lambda: ring.trim(0),
            lambda: ring.recover(),
            lambda: pending.wait(),
            lambda: ring.close(),
        ]
        for n, call in enumerate(calls):
            try:
                call()
            except tidelog.ForkedError:
                continue
            return 40 + n
        return 0

    assert in_child(child) == 0
    pending.wait()
    ring.append(b"after fork").wait()
    ring.close()
    with tidelog.RingWal(ring_path) as again:
        assert again.recovery.clean_shutdown
        assert [bytes(v) for _, v in again.recover()] == [
            b"before fork",
            b"in flight",
            b"after fork",
        ]

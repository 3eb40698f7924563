"""A second process that holds a directory in shared mode and answers commands over a pipe:
the state machine's other handle, as a real process (which the test may SIGKILL)."""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import tidelog
from conftest import open_small

# Generous: CI machines are slow and busy.
WAIT_S = 30.0


def serve(conn: Any, path: str) -> None:
    """The child: opens `path` and runs each command it receives, replying `("ok", result)`
    or `("err", exception class name)`, until `close` or the pipe closes. SIGUSR1 prints
    its Python threads' stacks to stderr (the test's captured output)."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    wal = open_small(path, fsync="never")
    conn.send(("ok", None))
    while True:
        try:
            command, args = conn.recv()
        except EOFError:
            return
        try:
            result = run(wal, command, args)
        except tidelog.TidelogError as e:
            conn.send(("err", type(e).__name__))
            continue
        conn.send(("ok", result))
        if command == "close":
            return


def run(wal: tidelog.Wal, command: str, args: tuple[Any, ...]) -> Any:
    if command == "append":
        return wal.append(*args)
    if command == "append_batch":
        got = wal.append_batch(*args)
        return (got.start, got.stop)
    if command == "read_all":
        reader = wal.reader(args[0], start="earliest")
        out = []
        while (rec := reader.next()) is not None:
            out.append((rec.offset, bytes(rec), rec.key, rec.timestamp))
        return out
    if command == "delete_topic":
        return wal.delete_topic(*args)
    if command == "topics":
        return wal.topics()
    if command == "topic_info":
        info = wal.topic_info(*args)
        return (info.first_offset, info.next_offset, info.groups)
    if command == "close":
        return wal.close()
    raise ValueError(f"unknown command {command!r}")


class OtherProcess:
    """This test's view of the child: the `Wal` methods the state machine calls on it."""

    def __init__(self, path: str) -> None:
        # `fork`: a child opens its own handle (the parent's raises `ForkedError` there).
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, path), daemon=True)
        self.process.start()
        child.close()
        self.call_result()

    def call_result(self) -> Any:
        if not self.conn.poll(WAIT_S):
            raise TimeoutError(f"the other process did not answer: {self.hung()}")
        status, result = self.conn.recv()
        if status == "err":
            raise getattr(tidelog, result)(f"raised in the other process: {result}")
        return result

    def hung(self) -> str:
        """What a child that does not answer is doing: its Python stacks go to stderr, and
        each thread's kernel wait is returned. Then it is killed, so the locks it holds go
        with it and later steps do not wait for them too."""
        pid = self.process.pid
        assert pid is not None
        threads = []
        try:
            os.kill(pid, signal.SIGUSR1)
            time.sleep(0.5)
            for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
                name = (task / "comm").read_text().strip()
                wchan = (task / "wchan").read_text().strip()
                call = (task / "syscall").read_text().split(" ")[0]
                threads.append(f"{name} (wait {wchan or '-'}, syscall {call})")
        except OSError as e:
            threads.append(f"not readable: {e}")
        os.kill(pid, signal.SIGKILL)
        self.process.join(WAIT_S)
        return "; ".join(threads)

    def call(self, command: str, *args: Any) -> Any:
        self.conn.send((command, args))
        return self.call_result()

    def append(self, topic: str, value: bytes) -> int:
        return int(self.call("append", topic, value))

    def append_batch(self, topic: str, values: list[bytes]) -> range:
        start, stop = self.call("append_batch", topic, values)
        return range(start, stop)

    def read_all(self, topic: str) -> list[tuple[int, bytes, bytes | None, int]]:
        return list(self.call("read_all", topic))

    def delete_topic(self, topic: str) -> None:
        self.call("delete_topic", topic)

    def topics(self) -> list[str]:
        return list(self.call("topics"))

    def topic_info(self, topic: str) -> SimpleNamespace:
        first, next_offset, groups = self.call("topic_info", topic)
        return SimpleNamespace(first_offset=first, next_offset=next_offset, groups=groups)

    def close(self) -> None:
        self.call("close")
        self.process.join(WAIT_S)
        self.conn.close()

    def kill(self) -> None:
        """SIGKILL: no close, no flush (what the page cache holds stays)."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(WAIT_S)
        self.conn.close()

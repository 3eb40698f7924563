"""tidelog for asyncio: a handle whose appends, flushes and commits are awaited, and whose
readers are async iterators that wait for new records without blocking the event loop.

    async with tidelog.aio.open("data", fsync="always") as wal:
        offset = await wal.append("orders", b"...")   # returns once durable (fsync="always")
        async for record in wal.reader("orders", "billing"):
            ...
            await reader.commit()

Appends are reserved and copied on the event loop's thread (they take microseconds and never
wait for the disk); waiting for durability, flushes, commits and waits for records run on
one waiter thread per handle and one per reader that waits, never a thread per call. A
cancelled await stops waiting (its append stays appended).
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self, TypeVar

import tidelog

__all__ = ["Reader", "Wal", "open"]

T = TypeVar("T")

# How long one blocking wait of a waiter thread runs before it looks for cancellation.
_SLICE_S = 0.05


def _seconds(timeout: float) -> float:
    """A `timeout=` in seconds, checked as the handles' own waits check it: NaN and negative
    values are `InvalidArgumentError` (a NaN deadline would never pass)."""
    if timeout != timeout or timeout < 0:
        reason = f"{timeout} is not a non-negative number of seconds"
        raise tidelog.InvalidArgumentError(
            f"invalid timeout: {reason}", name="timeout", reason=reason
        )
    return timeout


class _Waiter:
    """One daemon thread that runs blocking calls in order and hands each result to its
    future on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self._loop = loop
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], T]) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self._loop.create_future()
        if self._stopped:
            future.set_exception(tidelog.ClosedError("the handle was closed"))
        else:
            self._jobs.put((job, future))
        return future

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                # Closed: what is still queued fails instead of waiting for ever.
                while not self._jobs.empty():
                    left = self._jobs.get()
                    if left is not None:
                        self._settle(left[1], None, tidelog.ClosedError("the handle was closed"))
                return
            job, future = item
            if future.cancelled():
                continue
            try:
                result = job()
            except BaseException as e:  # handed to the awaiting task, not lost here
                self._settle(future, None, e)
            else:
                self._settle(future, result, None)

    def _settle(
        self, future: asyncio.Future[Any], result: Any, error: BaseException | None
    ) -> None:
        def settle() -> None:
            if future.cancelled():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        try:
            self._loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass  # the loop closed: nobody awaits it any more

    def stop(self) -> None:
        self._stopped = True
        self._jobs.put(None)


def open(path: str | os.PathLike[str], **options: Any) -> _Opening:
    """Opens `path` as `tidelog.open` does (same options), without blocking the event loop
    while it recovers: `async with tidelog.aio.open(path) as wal`, or
    `wal = await tidelog.aio.open(path)` (then `await wal.close()`)."""
    return _Opening(path, options)


class _Opening:
    """An open under way: awaitable, or an async context manager that closes the handle."""

    def __init__(self, path: str | os.PathLike[str], options: dict[str, Any]) -> None:
        self._path = path
        self._options = options
        self._wal: Wal | None = None

    async def _open(self) -> Wal:
        wal = await asyncio.to_thread(tidelog.open, self._path, **self._options)
        return Wal(wal, asyncio.get_running_loop())

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> Wal:
        self._wal = await self._open()
        return self._wal

    async def __aexit__(self, *exc: object) -> None:
        if self._wal is not None:
            await self._wal.close()


class Wal:
    """An asyncio face of a `tidelog.Wal` (`tidelog.aio.open`). An async context manager."""

    def __init__(self, wal: tidelog.Wal, loop: asyncio.AbstractEventLoop) -> None:
        self.wal = wal
        self._loop = loop
        self._waiter = _Waiter(loop, "tidelog-aio")
        self._writers: dict[str, tidelog.Writer] = {}
        self._readers: list[Reader] = []

    def _writer(self, topic: str) -> tidelog.Writer:
        writer = self._writers.get(topic)
        if writer is None:
            writer = self._writers[topic] = self.wal.writer(topic)
        return writer

    async def append(
        self,
        topic: str,
        value: Any,
        *,
        key: Any = None,
        timestamp: int | None = None,
        headers: Any = None,
    ) -> int:
        """Appends a record; returns its offset once it is durable as the fsync mode says:
        at once with "interval" or "never", after its group commit with "always"."""
        writer = self._writer(topic)
        return await _append(self._waiter, writer, value, key, timestamp, headers)

    def writer(self, topic: str, *, fsync: str | None = None) -> Writer:
        return Writer(self.wal.writer(topic, fsync=fsync), self._waiter)  # type: ignore[arg-type]

    def reader(self, topic: str, group: str | None = None, **options: Any) -> Reader:
        """A reader as `Wal.reader` makes it (same options); `async for` waits for records."""
        reader = Reader(self.wal.reader(topic, group, **options), self._loop)
        self._readers.append(reader)
        return reader

    async def flush(self) -> None:
        """Makes every record appended so far durable."""
        await self._waiter.submit(self.wal.flush)

    async def delete_records(self, topic: str, before_offset: int) -> int:
        """`Wal.delete_records` (it syncs), off the event loop."""
        return await self._waiter.submit(lambda: self.wal.delete_records(topic, before_offset))

    async def close(self) -> None:
        """Closes the handle and its readers; waits in progress end with `ClosedError`."""
        for reader in self._readers:
            reader.stop()
        await asyncio.to_thread(self.wal.close)
        self._waiter.stop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        # Calls that never wait (topics, topic_info, read, read_arrow, scan, ...).
        return getattr(self.wal, name)


class Writer:
    """An asyncio face of a `tidelog.Writer`."""

    def __init__(self, writer: tidelog.Writer, waiter: _Waiter) -> None:
        self.writer = writer
        self._waiter = waiter

    @property
    def topic(self) -> str:
        return self.writer.topic

    async def append(
        self, value: Any, *, key: Any = None, timestamp: int | None = None, headers: Any = None
    ) -> int:
        """As `Wal.append`, to this writer's topic under its fsync mode."""
        return await _append(self._waiter, self.writer, value, key, timestamp, headers)


async def _append(
    waiter: _Waiter,
    writer: tidelog.Writer,
    value: Any,
    key: Any,
    timestamp: int | None,
    headers: Any,
) -> int:
    handle = writer.append_async(value, key=key, timestamp=timestamp, headers=headers)
    if writer.fsync == "always" and not handle.is_durable():
        await waiter.submit(lambda: _until(handle.wait))
    return handle.offset


def _until(wait: Callable[[float], bool]) -> None:
    """Calls `wait(slice)` until it says done (a sliced wait stays interruptible)."""
    while not wait(_SLICE_S):
        pass


class Reader:
    """An asyncio face of a `tidelog.Reader`: `async for record in reader` waits for new
    records without blocking the event loop. Its waits run on a thread of its own; the
    records are read on the loop's thread (from memory, or for offsets a tier moved off the
    disk, from the bucket: use `scan` or a thread for those). Use it from one task at a
    time: a call beside a wait under way waits for the wait's 50 ms slice."""

    def __init__(self, reader: tidelog.Reader, loop: asyncio.AbstractEventLoop) -> None:
        self.reader = reader
        self._loop = loop
        self._waiter: _Waiter | None = None
        self._stopped = threading.Event()

    @property
    def topic(self) -> str:
        return self.reader.topic

    @property
    def position(self) -> int:
        return self.reader.position

    def _thread(self) -> _Waiter:
        if self._waiter is None:
            self._waiter = _Waiter(self._loop, f"tidelog-aio-reader-{self.reader.topic}")
        return self._waiter

    async def next(self, timeout: float | None = None) -> tidelog.Record | None:
        """The next record; with nothing there, waits up to `timeout` seconds (None: until
        one arrives) without blocking the loop. None when the timeout passed. The record is
        read on the loop's thread, so a cancelled wait never takes one."""
        deadline = None if timeout is None else self._loop.time() + _seconds(timeout)
        while True:
            record = self.reader.next()
            if record is not None:
                return record
            if deadline is not None and self._loop.time() >= deadline:
                return None
            if not await self._ready(deadline):
                return None

    async def _ready(self, deadline: float | None) -> bool:
        """Waits on the reader's thread until a record is there (True) or `deadline` (a
        loop time) passes (False)."""
        future: asyncio.Future[bool] | None = None

        def wait() -> bool:
            while not self._stopped.is_set():
                if future is not None and future.cancelled():
                    return False
                left = _SLICE_S
                if deadline is not None:
                    left = min(left, deadline - self._loop.time())
                    if left <= 0:
                        return False
                if self.reader.wait(left):
                    return True
            raise tidelog.ClosedError("the reader was closed")

        future = self._thread().submit(wait)
        try:
            return await future
        except asyncio.CancelledError:
            future.cancel()
            raise

    async def next_batch(
        self, max_records: int = 1000, max_bytes: int = 16777216, timeout: float | None = None
    ) -> list[tidelog.Record]:
        """As `Reader.next_batch`; with `timeout`, waits for a first record off the loop."""
        if timeout is not None:
            timeout = _seconds(timeout)
        batch = self.reader.next_batch(max_records, max_bytes)
        if batch or not timeout:
            return batch
        if await self._ready(self._loop.time() + timeout):
            return self.reader.next_batch(max_records, max_bytes)
        return []

    async def commit(self, offset: int | None = None) -> None:
        """Persists `offset` (default: the position) as the group's committed offset."""
        await self._thread().submit(lambda: self.reader.commit(offset))

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> tidelog.Record:
        try:
            record = await self.next()
        except tidelog.ClosedError:
            if self._stopped.is_set():
                raise StopAsyncIteration from None
            raise
        if record is None:
            raise StopAsyncIteration
        return record

    def stop(self) -> None:
        self._stopped.set()
        if self._waiter is not None:
            self._waiter.stop()

    def close(self) -> None:
        self.stop()
        self.reader.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

"""tidelog.aio: awaited appends, flushes and commits, and async readers that wait for records
without blocking the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import tidelog
import tidelog.aio
from conftest import SMALL


def run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def test_appends_are_durable_when_awaited_and_readers_iterate(tmp_path: Path) -> None:
    async def main() -> None:
        async with tidelog.aio.open(tmp_path, fsync="always", **SMALL) as wal:
            offsets = [await wal.append("t", b"v%d" % i) for i in range(5)]
            assert offsets == list(range(5))
            # "always": each await returned once its record was durable.
            assert wal.topic_info("t").durable_offset == 5
            writer = wal.writer("t")
            assert await writer.append(b"w", key=b"k", headers=[("h", b"1")]) == 5
            assert wal.read("t", 5).headers == [("h", b"1")]
            assert await wal.delete_records("t", 1) == 1
            assert wal.topic_info("t").first_offset == 1
            await wal.flush()
            got = []
            async with wal.reader("t", "g", start="earliest") as reader:
                async for record in reader:
                    got.append(bytes(record.value))
                    if len(got) == 5:
                        break
                await reader.commit()
                assert reader.position == 6
            assert got == [b"v1", b"v2", b"v3", b"v4", b"w"]

    run(main())
    with tidelog.open(tmp_path, **SMALL) as wal:
        assert wal.reader("t", "g").position == 6


def test_a_waiting_reader_does_not_block_the_loop(tmp_path: Path) -> None:
    async def main() -> None:
        wal = await tidelog.aio.open(tmp_path, **SMALL)
        await wal.append("t", b"first")
        reader = wal.reader("t", start="latest")
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        tick = asyncio.create_task(ticker())
        started = time.monotonic()
        # Nothing comes: the wait ends at its timeout, and the loop kept running meanwhile.
        assert await reader.next(timeout=0.3) is None
        assert time.monotonic() - started >= 0.3
        assert ticks >= 20, ticks
        # A record appended by another thread wakes the waiting reader.
        threading.Timer(0.1, lambda: wal.wal.append("t", b"late")).start()
        record = await asyncio.wait_for(reader.next(), timeout=30)
        assert record is not None and bytes(record.value) == b"late"
        # A cancelled wait stops; the reader goes on working.
        waiting = asyncio.create_task(reader.next())
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        wal.wal.append("t", b"after")
        assert bytes((await reader.next(timeout=30)).value) == b"after"  # type: ignore[union-attr]
        batch = await reader.next_batch(10, timeout=0.05)
        assert batch == []
        # Closing the handle ends an async for that waits.
        iterating = wal.reader("t", start="latest")

        async def drain() -> int:
            return len([r async for r in iterating])

        draining = asyncio.create_task(drain())
        await asyncio.sleep(0.05)
        await wal.close()
        assert await asyncio.wait_for(draining, timeout=30) == 0
        tick.cancel()

    run(main())


def test_tidelog_aio_is_reachable_as_an_attribute() -> None:
    assert tidelog.aio.open is not None
    with pytest.raises(AttributeError):
        _ = tidelog.no_such_module  # type: ignore[attr-defined]


def test_waits_after_close_fail_instead_of_hanging(tmp_path: Path) -> None:
    async def main() -> None:
        wal = await tidelog.aio.open(tmp_path, **SMALL)
        await wal.append("t", b"x")
        reader = wal.reader("t", "g")
        await wal.close()
        with pytest.raises(tidelog.ClosedError):
            await asyncio.wait_for(wal.flush(), timeout=10)
        with pytest.raises(tidelog.ClosedError):
            await asyncio.wait_for(reader.commit(), timeout=10)

    run(main())


@pytest.mark.parametrize("timeout", [-1.0, float("nan")])
def test_a_nan_or_negative_timeout_is_refused_as_the_handles_refuse_it(
    tmp_path: Path, timeout: float
) -> None:
    """As `Reader.next`: `InvalidArgumentError`, not a wait (a NaN deadline never passed,
    so `next(nan)` waited for ever) and not an empty answer."""

    async def main() -> None:
        async with tidelog.aio.open(tmp_path, **SMALL) as wal:
            await wal.append("t", b"x")
            async with wal.reader("t", start="latest") as reader:
                with pytest.raises(tidelog.InvalidArgumentError, match="timeout"):
                    await asyncio.wait_for(reader.next(timeout), 10)
                with pytest.raises(tidelog.InvalidArgumentError, match="timeout"):
                    await asyncio.wait_for(reader.next_batch(timeout=timeout), 10)
                # A valid one still times out with nothing new.
                assert await reader.next(0.01) is None

    run(main())
    with tidelog.open(tmp_path, **SMALL) as wal:
        with pytest.raises(tidelog.InvalidArgumentError, match="timeout"):
            wal.reader("t", start="latest").next(timeout)

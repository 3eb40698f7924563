"""`tidelog.RingWal`: the write-ahead ring on a preallocated file or a block device."""

from __future__ import annotations

import _thread
import array
import errno
import gc
import itertools
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tidelog
from conftest import LOOP_DEVICE_BYTES, kill_after_first_line, payload

KIB = 1024
MIB = 1024 * KIB
HEADER_BYTES = 8192
# A small ring: a few MiB of records wrap it several times.
SMALL: dict[str, Any] = {"block_bytes": 64 * KIB, "max_record_bytes": 16 * KIB}


def open_ring(
    path: str | os.PathLike[str], capacity: int | None = MIB, **options: Any
) -> tidelog.RingWal:
    return tidelog.RingWal(path, capacity, **{**SMALL, **options})


@pytest.fixture
def ring_path(tmp_path: Path) -> Path:
    return tmp_path / "ring"


@pytest.fixture
def ring(ring_path: Path) -> Iterator[tidelog.RingWal]:
    handle = open_ring(ring_path)
    try:
        yield handle
    finally:
        handle.close()


def fs_type(path: str | os.PathLike[str]) -> str:
    proc = subprocess.run(
        ["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def recovered(ring: tidelog.RingWal) -> list[tuple[int, bytes]]:
    return list(ring.recover())


# Round trips.


def test_create_append_reopen_recover(ring_path: Path) -> None:
    values = [payload(i, (i * 37) % 3000) for i in range(300)] + [b""]
    with open_ring(ring_path) as ring:
        assert ring.path == str(ring_path)
        assert ring.capacity == MIB
        assert ring.ring_bytes == MIB - HEADER_BYTES
        assert ring.next_offset == ring.flushed_offset == ring.trim_offset == 0
        assert ring.recovery.records == 0
        assert not ring.closed
        handles = [ring.append(v) for v in values]
        offsets = [h.offset for h in handles]
        assert offsets == sorted(set(offsets))
        for h, nxt in itertools.pairwise(handles):
            assert h.offset < h.end_offset <= nxt.offset
        flushed = handles[-1].wait()
        assert flushed is not None
        assert flushed >= handles[-1].end_offset
        assert all(h.done for h in handles)
        assert ring.flush() >= flushed
        assert ring.next_offset == handles[-1].end_offset
        live = recovered(ring)
        assert live == list(zip(offsets, values, strict=True))
        assert all(type(v) is bytes for _, v in live)
    assert ring.closed
    assert ring_path.stat().st_size == MIB

    with tidelog.RingWal(ring_path) as again:
        assert again.capacity == MIB
        report = again.recovery
        assert isinstance(report, tidelog.RingRecovery)
        assert report.records == len(values)
        assert report.record_bytes == sum(len(v) for v in values)
        assert report.clean_shutdown
        assert report.clean_end_offset == report.end_offset
        assert report.start_offset == 0
        assert report.blocks >= 1
        assert report.blocks_past_end == 0
        assert report.stop_reason
        assert "RingRecovery(records=" in repr(report)
        assert recovered(again) == list(zip(offsets, values, strict=True))
        # Appends continue past the recovered log.
        h = again.append(b"after")
        assert h.offset >= report.end_offset
        h.wait()
        assert recovered(again)[-1] == (h.offset, b"after")
    with tidelog.RingWal(ring_path) as third:
        assert third.recovery.records == len(values) + 1


def test_accepts_any_contiguous_buffer(ring: tidelog.RingWal) -> None:
    inputs: list[Any] = [b"bytes", bytearray(b"bytearray"), memoryview(b"xxmemoryview")[2:]]
    inputs.append(array.array("I", [1, 2, 3]))
    offsets = [ring.append(v).offset for v in inputs]
    ring.flush()
    assert recovered(ring) == [(o, bytes(v)) for o, v in zip(offsets, inputs, strict=True)]


def test_properties_and_repr(ring: tidelog.RingWal) -> None:
    assert ring.free_bytes <= ring.ring_bytes
    before = ring.free_bytes
    h = ring.append(b"x" * 1000)
    assert ring.next_offset == h.end_offset
    assert ring.free_bytes < before
    text = repr(ring)
    assert text.startswith("RingWal(path=") and "closed=False" in text
    assert "RingAppendHandle(offset=" in repr(h)
    assert h.wait(timeout=10.0) is not None
    assert ring.flushed_offset >= h.end_offset


def test_recover_iterator_outlives_close_and_the_ring(ring_path: Path) -> None:
    ring = open_ring(ring_path)
    values = [payload(i, 2000) for i in range(200)]
    for v in values:
        ring.append(v)
    ring.flush()
    it = ring.recover()
    assert iter(it) is it
    first = next(it)
    ring.close()
    rest = list(it)
    assert [v for _, v in [first, *rest]] == values
    assert list(it) == []
    # The iterator keeps the ring's device open after the ring object is gone.
    ring = tidelog.RingWal(ring_path)
    it = ring.recover()
    del ring
    gc.collect()
    assert [v for _, v in it] == values
    with pytest.raises(StopIteration):
        next(it)


def test_concurrent_appends_from_threads(ring: tidelog.RingWal) -> None:
    got: dict[int, bytes] = {}
    lock = threading.Lock()

    def work(t: int) -> None:
        for i in range(200):
            value = payload(t * 1000 + i, 100 + i)
            h = ring.append(value)
            with lock:
                got[h.offset] = value
        h.wait()

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ring.flush()
    assert recovered(ring) == sorted(got.items())


# Wrapping, trimming, full.


def test_wraps_over_several_laps_with_trims(ring_path: Path) -> None:
    rng = random.Random(7)
    ring = open_ring(ring_path)
    live: list[tuple[int, bytes]] = []
    seq = 0
    while ring.next_offset < 4 * ring.ring_bytes:
        value = payload(seq, rng.randrange(0, 16 * KIB))
        try:
            h = ring.append(value)
        except tidelog.RingFullError:
            ring.flush()
            # Keep the newer half: trim at the first record kept.
            keep = len(live) // 2
            ring.trim(live[keep][0])
            assert ring.trim_offset == live[keep][0]
            del live[:keep]
            continue
        live.append((h.offset, value))
        seq += 1
    ring.flush()
    assert ring.next_offset > 4 * ring.ring_bytes
    assert recovered(ring) == live
    trim = ring.trim_offset
    ring.close()
    with open_ring(ring_path) as again:
        assert again.trim_offset == trim
        assert again.recovery.records == len(live)
        assert again.recovery.clean_shutdown
        assert recovered(again) == live


def test_full_ring_raises_at_once(ring: tidelog.RingWal) -> None:
    start = time.monotonic()
    with pytest.raises(tidelog.RingFullError) as info:
        for _ in range(ring.ring_bytes // 8000 + 10):
            ring.append(b"f" * 8000)
    assert time.monotonic() - start < 5.0
    err = info.value
    assert isinstance(err, tidelog.CapacityError)
    assert err.requested_bytes > err.free_bytes
    assert "full" in str(err)
    # A zero timeout is "do not wait".
    with pytest.raises(tidelog.RingFullError):
        ring.append(b"f" * 8000, space_timeout=0)


def test_space_timeout_waits_for_a_trim(ring: tidelog.RingWal) -> None:
    with pytest.raises(tidelog.RingFullError):
        while True:
            ring.append(b"g" * 8000)

    def trim_later() -> None:
        time.sleep(0.2)
        ring.trim(ring.flush())

    trimmer = threading.Thread(target=trim_later)
    start = time.monotonic()
    trimmer.start()
    # While this waits (GIL released), the trimmer thread runs.
    h = ring.append(b"after the trim", space_timeout=30.0)
    elapsed = time.monotonic() - start
    trimmer.join()
    assert 0.1 < elapsed < 20.0
    h.wait()
    assert recovered(ring) == [(h.offset, b"after the trim")]


def test_space_timeout_expires(ring: tidelog.RingWal) -> None:
    with pytest.raises(tidelog.RingFullError):
        while True:
            ring.append(b"h" * 8000)
    start = time.monotonic()
    with pytest.raises(tidelog.RingFullError):
        ring.append(b"h" * 8000, space_timeout=0.3)
    elapsed = time.monotonic() - start
    assert 0.25 <= elapsed < 5.0


@pytest.mark.usefixtures("python_sigint")
def test_space_wait_is_interruptible(ring: tidelog.RingWal) -> None:
    with pytest.raises(tidelog.RingFullError):
        while True:
            ring.append(b"i" * 8000)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ring.append(b"i", space_timeout=60.0)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 10.0


@pytest.mark.usefixtures("python_sigint")
def test_durability_wait_is_interruptible(ring_path: Path) -> None:
    # A one-second block delay keeps the record's block open that long.
    with open_ring(ring_path, block_delay=1.0, seal_when_idle=False) as ring:
        h = ring.append(b"slow")
        assert h.wait(timeout=0.05) is None
        timer = threading.Timer(0.1, _thread.interrupt_main)
        start = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                h.wait()
        finally:
            timer.cancel()
        assert time.monotonic() - start < 0.9
        assert ring.flush() >= h.end_offset
        assert h.done


def test_trim_rules(ring_path: Path) -> None:
    ring = open_ring(ring_path)
    handles = [ring.append(payload(i, 500)) for i in range(50)]
    ring.flush()
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        ring.trim(ring.flushed_offset + 1)
    assert info.value.name == "offset"
    cut = handles[20].offset
    ring.trim(cut)
    assert ring.trim_offset == cut
    ring.trim(handles[5].offset)  # below the trim: no-op
    assert ring.trim_offset == cut
    assert recovered(ring)[0] == (cut, payload(20, 500))
    ring.close()
    with open_ring(ring_path) as again:
        assert again.trim_offset == cut
        live = recovered(again)
        assert live[0][0] == cut
        assert [v for _, v in live] == [payload(i, 500) for i in range(20, 50)]
        end = again.reset()
        assert end == again.flushed_offset == again.trim_offset
        assert recovered(again) == []
    with open_ring(ring_path) as third:
        assert recovered(third) == []
        assert third.recovery.records == 0


# Bad input.


@pytest.mark.parametrize("capacity", [MIB + 100, 4096 * 4, 0])
def test_bad_capacity(ring_path: Path, capacity: int) -> None:
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        tidelog.RingWal(ring_path, capacity)
    assert info.value.name == "capacity"
    assert not ring_path.exists()


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"direct_io": "bogus"}, "direct_io"),
        ({"direct_io": True}, "direct_io"),
        ({"block_bytes": 1000}, "block_bytes"),
        ({"inflight_blocks": 0}, "inflight_blocks"),
        ({"inflight_blocks": 65}, "inflight_blocks"),
        ({"block_delay": -1.0}, "block_delay"),
        ({"block_delay": float("nan")}, "block_delay"),
        ({"max_record_bytes": 0}, "max_record_bytes"),
    ],
)
def test_bad_options(ring_path: Path, options: dict[str, Any], argument: str) -> None:
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        open_ring(ring_path, **options)
    assert info.value.name == argument
    assert isinstance(info.value, ValueError)
    assert not ring_path.exists()


@pytest.mark.parametrize(
    ("options", "limit"),
    [
        ({"block_delay": 2.0}, "block_delay_us"),
        ({"max_record_bytes": 65 * MIB}, "max_record_bytes"),
    ],
)
def test_options_over_limits(ring_path: Path, options: dict[str, Any], limit: str) -> None:
    with pytest.raises(tidelog.LimitExceededError) as info:
        open_ring(ring_path, **options)
    assert info.value.limit == limit


def test_missing_file_needs_a_capacity(ring_path: Path) -> None:
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        tidelog.RingWal(ring_path)
    assert info.value.name == "capacity"
    assert not ring_path.exists()


@pytest.mark.parametrize("fill", [b"\0", b"\1"])
def test_existing_file_is_formatted_only_when_asked(ring_path: Path, fill: bytes) -> None:
    ring_path.write_bytes(fill * MIB)
    with pytest.raises(tidelog.NotFormattedError) as info:
        tidelog.RingWal(ring_path)
    assert info.value.path == str(ring_path)
    assert info.value.reason
    assert "format=True" in str(info.value)
    assert ring_path.read_bytes() == fill * MIB  # untouched
    with open_ring(ring_path, None, format=True) as ring:
        assert ring.capacity == MIB
        assert not ring.recovery.clean_shutdown
        ring.append(b"formatted").wait()
    with tidelog.RingWal(ring_path) as ring:
        assert [v for _, v in ring.recover()] == [b"formatted"]
    # Formatting again discards the old ring.
    with tidelog.RingWal(ring_path, format=True) as ring:
        assert recovered(ring) == []


def test_capacity_mismatch(ring_path: Path) -> None:
    open_ring(ring_path).close()
    with pytest.raises(tidelog.CapacityMismatchError) as info:
        tidelog.RingWal(ring_path, 2 * MIB)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.expected, err.found) == (2 * MIB, MIB)
    assert err.path == str(ring_path)
    assert err.what
    # A file that grew after it was formatted.
    with ring_path.open("ab") as f:
        f.write(b"\0" * 4096)
    with pytest.raises(tidelog.CapacityMismatchError) as info:
        tidelog.RingWal(ring_path)
    assert (info.value.expected, info.value.found) == (MIB, MIB + 4096)


def test_record_too_large(ring: tidelog.RingWal) -> None:
    ring.append(b"r" * (16 * KIB))
    with pytest.raises(tidelog.LimitExceededError) as info:
        ring.append(b"r" * (16 * KIB + 1))
    assert info.value.limit == "max_record_bytes"
    assert (info.value.value, info.value.max) == (16 * KIB + 1, 16 * KIB)


def test_closed_ring(ring_path: Path) -> None:
    ring = open_ring(ring_path)
    h = ring.append(b"last")
    ring.close()
    ring.close()  # idempotent
    assert ring.closed
    assert "closed=True" in repr(ring)
    assert h.done
    assert h.wait() is not None
    for call in (
        lambda: ring.append(b"x"),
        lambda: ring.append(b"x", space_timeout=1.0),
        ring.flush,
        ring.reset,
        lambda: ring.trim(0),
        ring.recover,
    ):
        with pytest.raises(tidelog.ClosedError):
            call()
    # Properties still answer.
    assert ring.next_offset == h.end_offset
    assert ring.capacity == MIB


@pytest.mark.parametrize("data", ["text", 12, None, [1, 2], 1.5])
def test_non_bytes_data(ring: tidelog.RingWal, data: Any) -> None:
    with pytest.raises(TypeError):
        ring.append(data)
    assert ring.next_offset == 0


@pytest.mark.parametrize("timeout", [-1.0, float("nan")])
def test_bad_timeouts(ring: tidelog.RingWal, timeout: float) -> None:
    with pytest.raises(tidelog.InvalidArgumentError):
        ring.append(b"x", space_timeout=timeout)
    h = ring.append(b"x")
    with pytest.raises(tidelog.InvalidArgumentError):
        h.wait(timeout)


def test_infinite_timeouts_wait_as_long_as_needed(ring: tidelog.RingWal) -> None:
    h = ring.append(b"x", space_timeout=float("inf"))
    assert h.wait(float("inf")) == ring.flushed_offset


def test_exception_classes() -> None:
    e = tidelog.exceptions
    assert issubclass(e.RingFullError, e.CapacityError)
    assert issubclass(e.NotFormattedError, e.TidelogError)
    assert issubclass(e.CapacityMismatchError, e.TidelogError)
    assert issubclass(e.CapacityMismatchError, ValueError)
    for cls in (e.RingFullError, e.NotFormattedError, e.CapacityMismatchError):
        assert cls.__name__ in e.__all__
        assert getattr(tidelog, cls.__name__) is cls
    full = e.RingFullError("full", requested_bytes=8192, free_bytes=4096)
    assert (full.requested_bytes, full.free_bytes) == (8192, 4096)


# Direct I/O.


def test_direct_io_on_a_disk_file(tmp_path: Path) -> None:
    kind = fs_type(tmp_path)
    if kind not in ("ext2/ext3", "ext4", "xfs", "btrfs"):
        pytest.skip(f"temporary directory is on {kind or 'an unknown file system'}")
    with open_ring(tmp_path / "direct", direct_io="required") as ring:
        assert ring.direct_io
        ring.append(b"direct").wait()
    with open_ring(tmp_path / "direct", direct_io="off") as ring:
        assert not ring.direct_io
        assert [v for _, v in ring.recover()] == [b"direct"]
    with open_ring(tmp_path / "direct") as ring:
        assert ring.direct_io


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    if not os.path.isdir("/dev/shm") or fs_type("/dev/shm") != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="tidelog-ring-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def accepts_o_direct(directory: Path) -> bool:
    probe = directory / "probe"
    probe.write_bytes(b"\0" * 4096)
    try:
        fd = os.open(probe, os.O_RDWR | os.O_DIRECT)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return False
    finally:
        probe.unlink()
    os.close(fd)
    return True


def test_direct_io_on_tmpfs(shm_dir: Path) -> None:
    if accepts_o_direct(shm_dir):
        # tmpfs takes O_DIRECT since Linux 6.6: nothing falls back there.
        with open_ring(shm_dir / "ring", direct_io="required") as ring:
            assert ring.direct_io
        pytest.skip("this kernel's tmpfs accepts O_DIRECT")
    with open_ring(shm_dir / "ring") as ring:
        assert not ring.direct_io  # "auto" fell back to buffered I/O
        ring.append(b"buffered").wait()
    with pytest.raises(OSError) as info:
        open_ring(shm_dir / "ring", direct_io="required")
    assert info.value.errno == errno.EINVAL
    with open_ring(shm_dir / "ring", direct_io="auto") as ring:
        assert [v for _, v in ring.recover()] == [b"buffered"]


# A loop device.


def test_loop_device(loop_device: str) -> None:
    with pytest.raises(tidelog.NotFormattedError):
        tidelog.RingWal(loop_device, **SMALL)
    values = [payload(i, 3000) for i in range(500)]
    with tidelog.RingWal(loop_device, format=True, **SMALL) as ring:
        assert ring.capacity == LOOP_DEVICE_BYTES
        assert ring.path == loop_device
        offsets = [ring.append(v).offset for v in values]
        ring.flush()
    with tidelog.RingWal(loop_device, **SMALL) as ring:
        assert ring.recovery.clean_shutdown
        assert ring.recovery.records == len(values)
        assert recovered(ring) == list(zip(offsets, values, strict=True))
    # An explicit capacity may be smaller than the device, never larger.
    with pytest.raises(tidelog.CapacityMismatchError):
        tidelog.RingWal(loop_device, 2 * LOOP_DEVICE_BYTES, **SMALL)


# kill -9 while appending.

CHILD = """
import sys
import tidelog

path, capacity, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def value(seq):
    size = 1024 + (seq * 7919) % (15 * 1024)
    seed = f"{seq:010d}|".encode()
    return (seed * (size // len(seed) + 1))[:size]


ring = tidelog.RingWal(path, capacity, block_bytes=65536, max_record_bytes=16384)
out = sys.stdout
while True:
    burst = []
    for _ in range(1 + seq % 6):
        try:
            h = ring.append(value(seq))
        except tidelog.RingFullError:
            # Keep about half the ring; the parent checks only what is above the trim.
            end = ring.flush()
            ring.trim(max(ring.trim_offset, end - ring.ring_bytes // 2))
            h = ring.append(value(seq), space_timeout=10.0)
        burst.append((seq, h))
        seq += 1
    for s, h in burst:
        h.wait()
        out.write(f"{s} {h.offset}\\n")
        out.flush()
"""


def crash_value(seq: int) -> bytes:
    size = 1024 + (seq * 7919) % (15 * 1024)
    seed = f"{seq:010d}|".encode()
    return (seed * (size // len(seed) + 1))[:size]


def run_and_kill(path: Path, capacity: int, seq: int, rng: random.Random) -> list[tuple[int, int]]:
    """Starts a child appending from `seq`, SIGKILLs it 20-150 ms after its first ack and
    returns every `(seq, offset)` it acknowledged."""
    lines = kill_after_first_line(
        CHILD, str(path), str(capacity), str(seq), delay_s=rng.uniform(0.02, 0.15)
    )
    return [(int(s), int(o)) for s, o in (line.split() for line in lines)]


@pytest.fixture(params=["file", "loop device"])
def crash_target(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where the kill -9 loop's ring lives: a file, or a loop device (formatted first: a
    device is never formatted without asking, and the children do not ask)."""
    if request.param == "file":
        return tmp_path / "crash-ring"
    device = Path(request.getfixturevalue("loop_device"))
    tidelog.RingWal(device, MIB, format=True, **SMALL).close()
    return device


def test_kill_9_loses_no_acknowledged_record(crash_target: Path) -> None:
    rng = random.Random(2024)
    path = crash_target
    capacity = MIB
    acked: dict[int, int] = {}  # offset -> seq
    seq = 0
    trims = 0
    started = time.monotonic()
    cycles = 0
    while cycles < 50 or time.monotonic() - started < 1.0:
        for s, offset in run_and_kill(path, capacity, seq, rng):
            acked[offset] = s
        with tidelog.RingWal(path, capacity, **SMALL) as ring:
            assert not ring.recovery.clean_shutdown
            live = recovered(ring)
            offsets = [o for o, _ in live]
            assert offsets == sorted(set(offsets))
            assert not offsets or offsets[0] >= ring.trim_offset
            seqs = []
            for offset, value in live:
                s = int(value[:10])
                assert value == crash_value(s), offset
                seqs.append(s)
            assert seqs == sorted(set(seqs))
            found = dict(live)
            for offset, s in acked.items():
                if offset >= ring.trim_offset:
                    assert found.get(offset) == crash_value(s), (cycles, offset, s)
            if seqs:
                seq = seqs[-1] + 1
            # Trim sometimes, and always once half the ring is used, so it wraps.
            if live and (rng.random() < 0.3 or ring.free_bytes < ring.ring_bytes // 2):
                ring.trim(live[rng.randrange(len(live))][0])
                trims += 1
            acked = {o: s for o, s in acked.items() if o >= ring.trim_offset}
            end = ring.next_offset
        cycles += 1
    assert trims > 0
    assert end > ring.ring_bytes, "the ring never wrapped"


@pytest.mark.parametrize("engine", ["threads", "io_uring"])
def test_io_engines_round_trip(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "ring"
    try:
        ring = tidelog.RingWal(path, 1 << 20, io_engine=engine)  # type: ignore[arg-type]
    except OSError:
        if engine != "io_uring":
            raise
        pytest.skip("io_uring is not available here")
    with ring:
        assert ring.io_engine == engine
        handles = [ring.append(b"r%d" % i) for i in range(100)]
        ring.flush()
        assert [v for _, v in ring.recover()] == [b"r%d" % i for i in range(100)]
        assert all(h.done for h in handles)
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.RingWal(path, io_engine="bogus")  # type: ignore[arg-type]


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ring"
    with tidelog.RingWal(path, 1 << 20) as ring:
        with pytest.raises(tidelog.LockedError):
            tidelog.RingWal(path)
        ring.append(b"a").wait()
    with tidelog.RingWal(path) as again:
        assert [v for _, v in again.recover()] == [b"a"]

"""The topic log on the ring (`backend="ring"`): what only this backend does.

The API tests of the other modules already run on both backends (conftest's `backend`
fixture); these cover the ring's options, its file and marker, checkpoints, replay after a
crash (also with every data file lost) and the ring's entry limit."""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import shutil
import signal
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import tidelog
from conftest import (
    LOOP_DEVICE_BYTES,
    RING_CAPACITY,
    SMALL,
    data_files,
    kill_after_first_line,
    run_python,
    wait_until,
)

KIB = 1024
MIB = 1024 * KIB
# The ring's header slots, before the record ring.
RING_HEADER_BYTES = 8192
# Long enough that the uploader never checkpoints on time during a test: only `flush()`, a
# half-full ring or a full one do.
NO_TIMED_CHECKPOINT_MS = 3_600_000
# The record and batch limits of this backend (with data files large enough not to lower
# them).
ENTRY_LIMIT = 4 * MIB
TOPICS = ("alpha", "beta", "gamma")


def ring_options(**options: Any) -> dict[str, Any]:
    """`tidelog.open` options of a small ring (1 MiB) in front of small data files."""
    return {**SMALL, "backend": "ring", "capacity": MIB, **options}


def open_ring(path: str | os.PathLike[str], **options: Any) -> tidelog.Wal:
    return tidelog.open(path, **ring_options(**options))


def ring_stats(wal: tidelog.Wal) -> dict[str, Any]:
    """The stats of the ring in front of `wal`."""
    stats = wal.ring_stats()
    assert stats is not None
    return stats


def value(topic: str, offset: int) -> bytes:
    """The value at `offset` of `topic`: deterministic, so a child's records can be checked
    without its output; 32 bytes to about 3 KiB (one ring block per append)."""
    size = 32 + (offset * 7919 + len(topic) * 131) % 3000
    seed = f"{topic}:{offset}|".encode()
    return (seed * (size // len(seed) + 1))[:size]


# Children start with this source, so they write exactly what the parent expects.
VALUE_SOURCE = "import os, signal, sys, json\nimport tidelog\n" + inspect.getsource(value)


def run_child(body: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Runs `body` (after `value` and the imports) in a fresh interpreter."""
    return run_python(VALUE_SOURCE + textwrap.dedent(body), *args, timeout=timeout)


def check_records(wal: tidelog.Wal, topic: str, count: int, name: str | None = None) -> None:
    """`topic` holds exactly offsets 0..count, each `value(name or topic, offset)`, and a
    reader returns them in offset order."""
    info = wal.topic_info(topic)
    assert (info.first_offset, info.next_offset) == (0, count), topic
    expected = [value(name or topic, o) for o in range(count)]
    assert [bytes(wal.read(topic, o)) for o in range(count)] == expected, topic
    with wal.reader(topic, start="earliest") as reader:
        records = reader.next_batch(max_records=count + 1, max_bytes=1 << 30)
    assert [r.offset for r in records] == list(range(count))
    assert [bytes(r) for r in records] == expected


# Options.


def test_unknown_backend_is_refused(tmp_path: Path) -> None:
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        tidelog.open(tmp_path, backend="bogus")  # type: ignore[arg-type]
    assert info.value.name == "backend"
    assert "bogus" in str(info.value)


@pytest.mark.parametrize(
    "option",
    [
        {"device": "elsewhere.ring"},
        {"capacity": MIB},
        {"direct_io": "off"},
        {"direct_io": "auto"},
        {"format": True},
    ],
)
@pytest.mark.parametrize("backend_name", [None, "mmap"])
def test_ring_options_need_the_ring_backend(
    tmp_path: Path, option: dict[str, Any], backend_name: str | None
) -> None:
    options = option if backend_name is None else {**option, "backend": backend_name}
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        tidelog.open(tmp_path / "wal", **options)
    (name,) = option
    assert info.value.name == "backend"
    assert f"{name}=" in str(info.value)
    assert not (tmp_path / "elsewhere.ring").exists()


def test_bad_direct_io_mode(tmp_path: Path) -> None:
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        open_ring(tmp_path / "wal", direct_io="bogus")
    assert type(info.value) is tidelog.InvalidArgumentError
    assert info.value.name == "direct_io"


@pytest.mark.parametrize(
    "capacity",
    [
        0,
        4096,  # not even room for the header slots and a block
        64 * KIB,  # below the minimum
        MIB + 1,  # not a multiple of 4096
        MIB + 512,
    ],
)
def test_bad_capacity(tmp_path: Path, capacity: int) -> None:
    path = tmp_path / "wal"
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        open_ring(path, capacity=capacity)
    assert type(info.value) is tidelog.InvalidArgumentError
    assert info.value.name == "capacity"
    assert str(capacity) in str(info.value)
    # A refused ring leaves neither a ring file nor a marker: the directory opens without it.
    assert not (path / "ring.wal").exists()
    assert not (path / "RING").exists()
    with tidelog.open(path, **SMALL) as wal:
        assert wal.backend == "mmap"


def test_capacity_of_an_existing_ring_must_match(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with open_ring(path) as wal:
        wal.append("t", b"x")
    with pytest.raises(tidelog.CapacityMismatchError) as info:
        open_ring(path, capacity=2 * MIB)
    err = info.value
    assert (err.expected, err.found) == (2 * MIB, MIB)
    assert err.path == str(path / "ring.wal")
    # Without capacity= the file's size is the ring's.
    with open_ring(path, capacity=None) as wal:
        stats = ring_stats(wal)
        assert stats["capacity"] == MIB
        assert bytes(wal.read("t", 0)) == b"x"
    assert (path / "ring.wal").stat().st_size == MIB


# Defaults and stats.


def test_defaults(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with tidelog.open(path, backend="ring") as wal:
        assert wal.backend == "ring"
        ring_file = path / "ring.wal"
        # The default capacity: 256 MiB.
        assert ring_file.stat().st_size == 256 * MIB
        assert (path / "RING").exists()
        stats = ring_stats(wal)
        assert stats == {
            "device": str(ring_file),
            "capacity": 256 * MIB,
            "trim_offset": 0,
            "next_offset": 0,
            "flushed_offset": 0,
            "free_bytes": 256 * MIB - RING_HEADER_BYTES,
            "checkpoints": 0,
            "direct_io": stats["direct_io"],
        }
        assert isinstance(stats["direct_io"], bool)
        # A durable append is one ring block write: "always" is this backend's default.
        assert wal.writer("t").fsync == "always"
        assert wal.writer("t", fsync="interval").fsync == "interval"
    # A clean close keeps the ring file and removes the marker.
    assert ring_file.stat().st_size == 256 * MIB
    assert not (path / "RING").exists()
    ring_file.unlink()  # 256 MiB of allocated disk need not outlive the test


def test_capacity_sizes_a_new_ring_file(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with open_ring(path, capacity=2 * MIB, fsync="interval") as wal:
        assert (path / "ring.wal").stat().st_size == 2 * MIB
        stats = ring_stats(wal)
        assert stats["capacity"] == 2 * MIB
        assert wal.writer("t").fsync == "interval"


def test_direct_io_off_is_reported(tmp_path: Path) -> None:
    with open_ring(tmp_path / "wal", direct_io="off") as wal:
        wal.append("t", b"x")
        stats = ring_stats(wal)
        assert stats["direct_io"] is False


def test_mmap_backend_has_no_ring(tmp_path: Path) -> None:
    with tidelog.open(tmp_path / "wal", **SMALL) as wal:
        assert wal.backend == "mmap"
        assert wal.ring_stats() is None
        wal.append("t", b"x")
        assert not (tmp_path / "wal" / "ring.wal").exists()
        assert not (tmp_path / "wal" / "RING").exists()


def test_ring_stats_stay_consistent_while_appending(tmp_path: Path) -> None:
    with open_ring(tmp_path / "wal") as wal:
        last_next = 0
        for i in range(300):
            wal.append(TOPICS[i % 3], value(TOPICS[i % 3], i // 3))
            stats = ring_stats(wal)
            trim, nxt = stats["trim_offset"], stats["next_offset"]
            assert isinstance(trim, int) and isinstance(nxt, int)
            assert trim <= stats["flushed_offset"]
            assert trim <= nxt
            # fsync="always": everything appended is durable.
            assert stats["flushed_offset"] >= nxt
            assert nxt > last_next
            # A ring full for a moment (a checkpoint is due) has no free bytes.
            assert 0 <= stats["free_bytes"] <= MIB - RING_HEADER_BYTES
            last_next = nxt
        # 300 appends of up to 3 KiB, one block each, wrap a 1 MiB ring: checkpoints ran.
        assert last_next > MIB
        stats = ring_stats(wal)
        assert stats["checkpoints"] > 0
        for topic in TOPICS:
            check_records(wal, topic, 100)


# The device and the marker.

CRASHING_CHILD = """
wal = tidelog.open(sys.argv[1], **json.loads(sys.argv[2]))
for i in range(int(sys.argv[3])):
    for topic in ("alpha", "beta", "gamma"):
        assert wal.append(topic, value(topic, i)) == i
os._exit(0)  # no close: the ring keeps what it holds and the marker stays
"""


def crash_after_appends(path: Path, count: int, **options: Any) -> None:
    """A child opens `path` on the ring, appends `count` records to each of TOPICS and exits
    without closing."""
    proc = run_child(CRASHING_CHILD, str(path), json.dumps(ring_options(**options)), str(count))
    assert proc.returncode == 0, proc.stderr


def test_marker_after_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    crash_after_appends(path, 50)
    marker = path / "RING"
    # The ring inside the directory is named by its file name (the directory can move with
    # it), and by the id of the ring, so no other ring stands in for it.
    lines = marker.read_text().split("\n")
    assert lines[:2] == ["tidelog ring v1", "device ring.wal"]
    assert re.fullmatch(r"ring [0-9a-f]{8}", lines[2]) and lines[3:] == [""]
    # The ring may hold appends the data files lack: no writable open without it.
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        tidelog.open(path, **SMALL)
    assert info.value.name == "backend"
    assert "ring" in str(info.value)
    assert marker.exists()
    # Read-only handles read the data files alone (what the last checkpoint made durable).
    with tidelog.open(path, readonly=True) as ro:
        assert ro.backend == "mmap"
        assert sorted(ro.topics()) == list(TOPICS)
        for topic in TOPICS:
            end = ro.topic_info(topic).next_offset
            assert end <= 50
            assert [bytes(ro.read(topic, o)) for o in range(end)] == [
                value(topic, o) for o in range(end)
            ]
    # The ring backend replays; another crash right after the replay loses nothing either.
    crash_after_appends(path, 0)
    assert marker.exists()
    with open_ring(path) as wal:
        stats = ring_stats(wal)
        # The replayed ring was emptied at open.
        assert stats["trim_offset"] == stats["next_offset"]
        for topic in TOPICS:
            check_records(wal, topic, 50)
        assert marker.exists()
    # A clean close removes the marker: the default backend opens the directory again.
    assert not marker.exists()
    with tidelog.open(path, **SMALL) as wal:
        assert wal.backend == "mmap"
        for topic in TOPICS:
            check_records(wal, topic, 50)


def test_explicit_device_outside_the_directory(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    device = tmp_path / "elsewhere.ring"
    with open_ring(path, device=device) as wal:
        stats = ring_stats(wal)
        assert stats["device"] == str(device)
        assert stats["capacity"] == MIB
        assert device.stat().st_size == MIB
        assert not (path / "ring.wal").exists()
        assert (path / "RING").read_text().startswith(f"tidelog ring v1\ndevice {device}\nring ")
        wal.append("t", b"x")
    crash_after_appends(path, 20, device=str(device))
    other = tmp_path / "other.ring"
    for wrong in ({"device": other}, {}):  # another file, or the directory's own ring.wal
        with pytest.raises(tidelog.InvalidArgumentError) as info:
            open_ring(path, **wrong)
        assert info.value.name == "device"
        assert str(device) in str(info.value)
    # The refused opens created no ring.
    assert not other.exists()
    assert not (path / "ring.wal").exists()
    # The same file under another spelling is the same ring.
    same = tmp_path / "wal" / ".." / "elsewhere.ring"
    with open_ring(path, device=same) as wal:
        assert bytes(wal.read("t", 0)) == b"x"
        for topic in TOPICS:
            check_records(wal, topic, 20)
    # Closed cleanly: the directory is free to take another ring.
    with open_ring(path, device=other) as wal:
        assert other.stat().st_size == MIB
        check_records(wal, "alpha", 20)


def test_a_device_without_a_ring_needs_format(tmp_path: Path) -> None:
    device = tmp_path / "junk.ring"
    device.write_bytes(b"\x07" * MIB)
    with pytest.raises(tidelog.NotFormattedError) as info:
        open_ring(tmp_path / "wal", device=device, capacity=None)
    assert info.value.path == str(device)
    assert not (tmp_path / "wal" / "RING").exists()
    with open_ring(tmp_path / "wal", device=device, capacity=None, format=True) as wal:
        stats = ring_stats(wal)
        assert (stats["capacity"], stats["next_offset"]) == (MIB, 0)
        assert wal.append("t", b"x") == 0


# Checkpoints.


def test_flush_checkpoints_and_trims_the_ring(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with open_ring(path, fsync_interval_ms=NO_TIMED_CHECKPOINT_MS) as wal:
        for i in range(20):
            wal.append("t", value("t", i))
        before = ring_stats(wal)
        assert before["checkpoints"] == 0
        assert before["trim_offset"] == 0 < before["next_offset"]
        with tidelog.open(path, readonly=True) as ro:
            # Not checkpointed yet: published (readers see them), but the data files hold
            # nothing durable.
            info = ro.topic_info("t")
            assert (info.next_offset, info.durable_offset) == (20, 0)
            wal.flush()
            after = ring_stats(wal)
            assert after["checkpoints"] == before["checkpoints"] + 1
            # Everything is trimmed: the trim passes the last block's tail, and the next
            # entry starts there.
            assert after["trim_offset"] == after["next_offset"] >= before["next_offset"]
            assert after["free_bytes"] == MIB - RING_HEADER_BYTES
            # The checkpoint made them durable in the data files: durable readers see them.
            ro.refresh()
            assert ro.topic_info("t").durable_offset == 20
            check_records(ro, "t", 20)
        # A flush with nothing new still counts, and trims nothing more.
        wal.flush()
        again = ring_stats(wal)
        assert again["checkpoints"] == after["checkpoints"] + 1
        assert again["trim_offset"] == after["trim_offset"]


def test_uploader_checkpoints_every_interval(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with open_ring(path, fsync_interval_ms=20) as wal, tidelog.open(path, readonly=True) as ro:
        for i in range(10):
            wal.append("t", value("t", i))

        def checkpointed() -> bool:
            stats = ring_stats(wal)
            return stats["trim_offset"] == stats["next_offset"]

        wait_until(checkpointed, "a timed checkpoint")

        def visible() -> bool:
            ro.refresh()
            return ro.topic_info("t").next_offset == 10

        wait_until(visible, "the checkpointed records in a read-only handle")
        check_records(ro, "t", 10)


def test_small_ring_appenders_wait_for_checkpoints(tmp_path: Path) -> None:
    # 20 MiB through a 1 MiB ring, no timed checkpoints: appends outrun the ring many times
    # and must wait for the half-full and full checkpoints instead of failing.
    threads = 4
    per_thread_bytes = 5 * MIB
    appended: list[list[tuple[int, bytes]]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    with open_ring(tmp_path / "wal", fsync_interval_ms=NO_TIMED_CHECKPOINT_MS) as wal:

        def append(t: int) -> None:
            try:
                total, i = 0, 0
                while total < per_thread_bytes:
                    if i % 10 == 9:
                        values = [value(f"w{t}", i + j) for j in range(4)]
                        span = wal.append_batch("shared", values)
                        appended[t].extend(zip(span, values, strict=True))
                    else:
                        values = [value(f"w{t}", i)]
                        appended[t].append((wal.append("shared", values[0]), values[0]))
                    total += sum(map(len, values))
                    i += len(values)
            except BaseException as e:
                errors.append(e)

        workers = [threading.Thread(target=append, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, errors
        stats = ring_stats(wal)
        assert stats["next_offset"] > 20 * MIB
        # Each checkpoint trims at most a ring's worth.
        ring_bytes = MIB - RING_HEADER_BYTES
        assert stats["checkpoints"] * ring_bytes >= stats["next_offset"] - ring_bytes
        # Each thread's appends took increasing offsets; together, every offset once.
        for mine in appended:
            assert [o for o, _ in mine] == sorted(o for o, _ in mine)
        by_offset = dict(pair for mine in appended for pair in mine)
        count = len(by_offset)
        assert sorted(by_offset) == list(range(count))
        assert wal.topic_info("shared").next_offset == count
        with wal.reader("shared", start="earliest") as reader:
            seen = 0
            while seen < count:
                batch = reader.next_batch(max_records=1000)
                assert batch
                for record in batch:
                    assert record.offset == seen
                    assert bytes(record) == by_offset[seen], seen
                    seen += 1


# Replay when the data files lost everything since the last checkpoint.

ACKING_CHILD = """
wal = tidelog.open(sys.argv[1], **json.loads(sys.argv[2]))
n = int(sys.argv[3])

def ack(topic, offsets):
    for offset in offsets:
        print(topic, offset, flush=True)

for i in range(n):
    for topic in ("alpha", "beta"):
        ack(topic, [wal.append(topic, value(topic, i))])
    ack("gamma", [wal.append("gamma", value("gamma", i), key=b"k%d" % i, timestamp=1000 + i)])
ack("alpha", wal.append_batch("alpha", [value("alpha", n + j) for j in range(5)]))
handle = wal.append_async("beta", value("beta", n))
assert handle.wait(timeout=30.0)
ack("beta", handle.offsets)
print("checkpoints", wal.ring_stats()["checkpoints"], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def durable_options(**options: Any) -> dict[str, Any]:
    """Durable appends, and a ring that never checkpoints (no timed checkpoint, never half
    full): the ring alone holds every acknowledged append. `options` override these."""
    return ring_options(
        **{
            "capacity": RING_CAPACITY,
            "fsync": "always",
            "fsync_interval_ms": NO_TIMED_CHECKPOINT_MS,
            **options,
        }
    )


def parse_acks(lines: list[str]) -> dict[str, list[int]]:
    acks: dict[str, list[int]] = {topic: [] for topic in TOPICS}
    for line in lines:
        topic, offset = line.split()
        acks[topic].append(int(offset))
    return acks


def lose_data_files(path: Path) -> None:
    """Deletes every data file: what the ring does not hold is gone."""
    files = data_files(path)
    assert files
    for f in files:
        f.unlink()


def acked_then_killed(path: Path, n: int, options: dict[str, Any]) -> dict[str, list[int]]:
    """Runs ACKING_CHILD (`n` rounds) on `path` with `options` until it kills itself with no
    checkpoint made; returns what it acknowledged, per topic."""
    proc = run_child(ACKING_CHILD, str(path), json.dumps(options), str(n))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "checkpoints 0"
    acks = parse_acks(lines[:-1])
    assert {t: len(o) for t, o in acks.items()} == {"alpha": n + 5, "beta": n + 1, "gamma": n}
    return acks


def test_acknowledged_appends_survive_losing_every_data_file(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    n = 40
    acks = acked_then_killed(path, n, durable_options())
    lose_data_files(path)
    with tidelog.open(path, **durable_options()) as wal:
        assert sorted(wal.topics()) == list(TOPICS)
        for topic, offsets in acks.items():
            assert offsets == list(range(len(offsets)))
            check_records(wal, topic, len(offsets))
        # Keys and timestamps come back from the ring too.
        for i in range(n):
            record = wal.read("gamma", i)
            assert (record.key, record.timestamp) == (b"k%d" % i, 1000 + i)
    assert not (path / "RING").exists()
    with tidelog.open(path, **SMALL) as wal:
        for topic, offsets in acks.items():
            check_records(wal, topic, len(offsets))


def test_on_a_loop_device(tmp_path: Path, loop_device: str) -> None:
    """The topic log on a block device: formatted only when asked, written with O_DIRECT at
    the device's size, and every acknowledged append replayed from it after a kill -9 that
    also loses every data file."""
    path = tmp_path / "wal"
    device = {"device": loop_device, "capacity": None}
    with pytest.raises(tidelog.NotFormattedError):
        tidelog.open(path, **durable_options(**device))
    assert not (path / "RING").exists()
    n = 40
    acks = acked_then_killed(path, n, durable_options(**device, format=True))
    lose_data_files(path)
    with tidelog.open(path, **durable_options(**device)) as wal:
        stats = ring_stats(wal)
        assert (stats["device"], stats["capacity"]) == (loop_device, LOOP_DEVICE_BYTES)
        assert stats["direct_io"]
        for topic, offsets in acks.items():
            assert offsets == list(range(len(offsets)))
            check_records(wal, topic, len(offsets))
        assert wal.append("alpha", value("alpha", n + 5)) == n + 5
    with tidelog.open(path, **SMALL) as wal:
        check_records(wal, "alpha", n + 6)
        check_records(wal, "beta", n + 1)


RANDOM_CHILD = """
wal = tidelog.open(sys.argv[1], **json.loads(sys.argv[2]))
budget = wal.ring_stats()["capacity"] // 4  # far from half full: no checkpoint
nexts = {"alpha": 0, "beta": 0, "gamma": 0}
i = 0
while wal.ring_stats()["next_offset"] < budget:
    topic = ("alpha", "beta", "gamma")[i % 3]
    first = nexts[topic]
    if i % 7 == 3:
        span = wal.append_batch(topic, [value(topic, first + j) for j in range(3)])
    elif i % 7 == 5:
        handle = wal.append_async(topic, value(topic, first))
        assert handle.wait(timeout=30.0)
        span = handle.offsets
    else:
        span = range(wal.append(topic, value(topic, first)), first + 1)
    assert span.start == first, (topic, span, first)
    nexts[topic] = span.stop
    for offset in span:
        print(topic, offset, flush=True)
    i += 1
print("budget spent", flush=True)
signal.pause()
"""


def run_and_kill(path: Path, rng: random.Random) -> list[str]:
    """Starts RANDOM_CHILD on `path`, SIGKILLs it 10-50 ms after its first acknowledgement
    and returns its complete output lines."""
    lines = kill_after_first_line(
        VALUE_SOURCE + textwrap.dedent(RANDOM_CHILD),
        str(path),
        json.dumps(durable_options()),
        delay_s=rng.uniform(0.01, 0.05),  # the crash lands anywhere in the appends
    )
    assert "budget spent" not in lines, "the child ran out of ring before the kill"
    return lines


def test_kill_9_at_random_moments_loses_no_acknowledged_append(tmp_path: Path) -> None:
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    for cycle in range(10):
        path = tmp_path / f"wal-{cycle}"
        acks = parse_acks(run_and_kill(path, rng))
        assert any(acks.values())
        lose_data_files(path)
        with tidelog.open(path, **durable_options()) as wal:
            for topic, offsets in acks.items():
                # The child acknowledges in offset order, from 0.
                assert offsets == list(range(len(offsets))), (seed, cycle, topic)
                if not offsets and topic not in wal.topics():
                    continue
                # Every acknowledged append is back; unacknowledged ones may be too (written
                # to the ring before the kill), but only whole, dense and intact.
                end = wal.topic_info(topic).next_offset
                assert end >= len(offsets), (seed, cycle, topic, end, len(offsets))
                check_records(wal, topic, end)
        shutil.rmtree(path)  # the ring's allocated 16 MiB need not outlive the cycle


# Limits.


def test_records_and_batches_over_4_mib_are_refused(tmp_path: Path) -> None:
    # Default (large) data files, so the ring's 4 MiB limits are the ones in force.
    with tidelog.open(tmp_path / "wal", backend="ring", capacity=16 * MIB) as wal:
        assert wal.append("t", b"r" * ENTRY_LIMIT) == 0
        with pytest.raises(tidelog.RecordTooLargeError) as record_info:
            wal.append("t", b"r" * (ENTRY_LIMIT + 1))
        assert (record_info.value.limit, record_info.value.max) == (
            "max_record_bytes",
            ENTRY_LIMIT,
        )
        assert wal.append_batch("t", [b"b" * MIB] * 4) == range(1, 5)
        with pytest.raises(tidelog.RecordTooLargeError) as batch_info:
            wal.append_batch("t", [b"b" * MIB] * 4 + [b"!"])
        err = batch_info.value
        assert (err.limit, err.value, err.max) == ("max_batch_bytes", ENTRY_LIMIT + 1, ENTRY_LIMIT)
        # Within the batch limit, but its record headers overflow the ring entry's room.
        values = [b"h" * 838] * 4999
        values.append(b"h" * (ENTRY_LIMIT - sum(map(len, values))))
        with pytest.raises(tidelog.LimitExceededError) as entry_info:
            wal.append_batch("t", values)
        assert type(entry_info.value) is tidelog.LimitExceededError
        assert entry_info.value.limit == "ring_entry_bytes"
        assert entry_info.value.value > entry_info.value.max > ENTRY_LIMIT
        # Nothing of a refused call was appended.
        assert wal.topic_info("t").next_offset == 5
        assert [len(wal.read("t", o)) for o in range(5)] == [ENTRY_LIMIT] + [MIB] * 4


def test_a_raised_batch_limit_raises_the_entry_limit(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    values = [bytes([65 + o]) * (2 * MIB) for o in range(3)]
    with tidelog.open(path, backend="ring", capacity=32 * MIB, max_batch_bytes=8 * MIB) as wal:
        assert wal.append_batch("t", values) == range(0, 3)
        assert [bytes(wal.read("t", o)) for o in range(3)] == values


def test_a_record_near_the_ring_size_fits_wherever_the_ring_stands(tmp_path: Path) -> None:
    # A 1 MiB ring and the default 4 MiB record limit: after a 500 KB record and its
    # checkpoint the ring is empty, so a 600 KB record (well under the ring's size) must
    # go in, or be refused at once; not wait a minute for room a checkpoint cannot make.
    body = """
        wal = tidelog.open(sys.argv[1], backend="ring", capacity=1 << 20)
        wal.append("t", b"a" * 500_000)
        wal.flush()
        try:
            print("appended", wal.append("t", b"b" * 600_000))
        except tidelog.LimitExceededError as e:
            print("refused", e.limit)
        wal.close()
        """
    try:
        proc = run_child(body, str(tmp_path / "wal"), timeout=10.0)
    except subprocess.TimeoutExpired:
        pytest.fail("the append waits for ring room that no checkpoint can make")
    assert proc.returncode == 0, proc.stderr
    outcome = proc.stdout.split()
    assert outcome[0] in ("appended", "refused"), proc.stdout
    if outcome[0] == "appended":
        with tidelog.open(tmp_path / "wal") as wal:
            assert bytes(wal.read("t", 1)) == b"b" * 600_000


# Deleting a topic.

DELETING_CHILD = """
wal = tidelog.open(sys.argv[1], **json.loads(sys.argv[2]))
for i in range(30):
    for topic in ("alpha", "beta", "gamma"):
        assert wal.append(topic, value(topic, i)) == i
wal.delete_topic("beta")
for i in range(30, 40):
    assert wal.append("alpha", value("alpha", i)) == i
# The name again: a new topic from offset 0.
for i in range(3):
    assert wal.append("beta", value("beta-again", i)) == i
wal.delete_topic("gamma")  # the last thing before the crash
os._exit(0)
"""


def test_a_deleted_topic_does_not_come_back_after_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    options = ring_options(fsync_interval_ms=NO_TIMED_CHECKPOINT_MS)
    proc = run_child(DELETING_CHILD, str(path), json.dumps(options))
    assert proc.returncode == 0, proc.stderr
    assert (path / "RING").exists()
    with tidelog.open(path, **options) as wal:
        assert sorted(wal.topics()) == ["alpha", "beta"]
        check_records(wal, "alpha", 40)
        check_records(wal, "beta", 3, name="beta-again")


GAP_CHILD = """
wal = tidelog.open(sys.argv[1], **json.loads(sys.argv[2]))
for i in range(20):
    if i == 10:
        wal.flush()  # a checkpoint: the ring lets go of 0..10, the data files hold them
    assert wal.append("alpha", value("alpha", i)) == i
os._exit(0)
"""


def test_replay_refuses_to_leave_a_gap(tmp_path: Path) -> None:
    # Data files that lost what a checkpoint made durable in them: the ring's entries cannot
    # follow on, and the open says so instead of renumbering them.
    path = tmp_path / "wal"
    proc = run_child(GAP_CHILD, str(path), json.dumps(durable_options()))
    assert proc.returncode == 0, proc.stderr
    lose_data_files(path)
    with pytest.raises(tidelog.CorruptionError) as info:
        tidelog.open(path, **durable_options())
    assert info.value.topic == "alpha"
    assert info.value.path == str(path / "ring.wal")
    assert (path / "RING").exists()

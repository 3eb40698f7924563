"""Readers in other processes (multiprocessing, spawn and fork) see each append as soon as it
returns, without a flush, by waiting in Reader.next(timeout); durable readers wait for the
sync; a handle opened before a fork refuses in the child, which opens its own.

The writer runs with fsync="never" and does not flush while the children read: the only way
a child can see a record is the shared state file. Timings belong to the benchmarks
(`tidelog bench`); a lost wake-up here shows as a child running into its long timeout."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import tidelog

WAIT_S = 30.0


def value(i: int) -> bytes:
    return (b"%08d-" % i) * (1 + i % 17)


def follow(path: str, topic: str, count: int, visibility: str, out: Any, ready: Any) -> None:
    """Child: opens `path` read-only and reads `count` records of `topic` through waits;
    sends back [(offset, value)] or the error's text."""
    try:
        with tidelog.open(path, readonly=True) as ro:
            reader = ro.reader(topic, start="earliest", visibility=visibility)
            ready.set()
            got = []
            while len(got) < count:
                record = reader.next(timeout=WAIT_S)
                if record is None:
                    out.put(f"no record {len(got)} within {WAIT_S} s")
                    return
                got.append((record.offset, bytes(record)))
            out.put(got)
    except BaseException as e:  # reported to the parent as text
        out.put(f"{type(e).__name__}: {e}")


def run_followers(
    tmp_path: Path, method: str, followers: int, count: int, visibility: str = "published"
) -> list[Any]:
    ctx = mp.get_context(method)
    with tidelog.open(tmp_path, fsync="never", block_size=64 * 1024) as wal:
        wal.append("t", value(0))
        out = ctx.Queue()
        readies = [ctx.Event() for _ in range(followers)]
        procs = [
            ctx.Process(target=follow, args=(str(tmp_path), "t", count, visibility, out, r))
            for r in readies
        ]
        for p in procs:
            p.start()
        for r in readies:
            assert r.wait(WAIT_S), "a child did not start"
        for i in range(1, count):
            assert wal.append("t", value(i)) == i
        if visibility == "durable":
            wal.flush()
        results = [out.get(timeout=WAIT_S * 2) for _ in procs]
        for p in procs:
            p.join(WAIT_S)
            assert p.exitcode == 0
    return results


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_readers_in_other_processes_see_appends_without_a_flush(
    tmp_path: Path, method: str
) -> None:
    count = 2_000
    expected = [(i, value(i)) for i in range(count)]
    for got in run_followers(tmp_path, method, followers=2, count=count):
        assert got == expected


def test_a_durable_reader_in_another_process_waits_for_the_flush(tmp_path: Path) -> None:
    count = 300
    (got,) = run_followers(tmp_path, "spawn", followers=1, count=count, visibility="durable")
    assert got == [(i, value(i)) for i in range(count)]


def test_durable_readers_and_offsets(tmp_path: Path) -> None:
    with tidelog.open(tmp_path, fsync="never") as wal, tidelog.open(tmp_path, readonly=True) as ro:
        wal.append("t", b"a")
        ro.refresh()
        for handle in (wal, ro):
            info = handle.topic_info("t")
            assert (info.next_offset, info.durable_offset) == (1, 0)
            durable = handle.reader("t", start="earliest", visibility="durable")
            assert durable.visibility == "durable"
            assert durable.next(timeout=0.01) is None
            assert durable.lag == 0
            published = handle.reader("t", start="earliest")
            assert published.visibility == "published"
            assert bytes(published.next()) == b"a"
        wal.flush()
        ro.refresh()
        for handle in (wal, ro):
            assert handle.topic_info("t").durable_offset == 1
            durable = handle.reader("t", start="earliest", visibility="durable")
            assert bytes(durable.next(timeout=WAIT_S)) == b"a"
    with pytest.raises(tidelog.InvalidArgumentError, match="visibility"):
        with tidelog.open(tmp_path) as wal:
            wal.reader("t", visibility="sometimes")


def test_a_waiting_reader_wakes_when_the_wal_closes(tmp_path: Path) -> None:
    import threading

    wal = tidelog.open(tmp_path, fsync="never")
    wal.append("t", b"a")
    reader = wal.reader("t", start="latest")
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            reader.next(timeout=WAIT_S)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wal.close()
    t.join(WAIT_S)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], tidelog.ClosedError), errors


def test_a_read_only_next_sees_what_the_writer_published(tmp_path: Path) -> None:
    with tidelog.open(tmp_path, fsync="never", block_size=64 * 1024) as wal:
        wal.append("t", value(0))
        with tidelog.open(tmp_path, readonly=True) as ro:
            reader = ro.reader("t", start="earliest")
            # No timeout, no refresh: next() catches up by itself, across rolls too.
            read = 0
            for i in range(1, 500):
                wal.append("t", value(i))
                if i % 7 == 0:
                    while (rec := reader.next()) is not None:
                        assert (rec.offset, bytes(rec)) == (read, value(read))
                        read += 1
                    assert read == i + 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_a_reader_without_write_permission_follows_the_writer() -> None:
    """A reader in a process of another user, who may read the directory but not write it
    (nor the state file), still sees each append without a flush: it maps the state file
    read-only and polls its words."""
    base = tempfile.mkdtemp(prefix="tidelog-perm-")
    try:
        os.chmod(base, 0o755)
        with tidelog.open(base, fsync="never") as wal:
            wal.append("t", value(0))
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.close(r)
                    os.setgid(65534)
                    os.setuid(65534)
                    with tidelog.open(base, readonly=True) as ro:
                        reader = ro.reader("t", start="earliest")
                        got = [bytes(reader.next(timeout=WAIT_S))]
                        os.write(w, b"r")
                        # The rest arrive one by one: the reader waits for most of them.
                        got += [bytes(reader.next(timeout=WAIT_S)) for _ in range(99)]
                        code = 0 if got == [value(i) for i in range(100)] else 2
                finally:
                    os._exit(code)
            os.close(w)
            assert os.read(r, 1) == b"r", "the child read the first record"
            for i in range(1, 100):
                wal.append("t", value(i))
                time.sleep(0.001)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        shutil.rmtree(base, ignore_errors=True)

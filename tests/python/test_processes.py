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


def follow(
    path: str, topic: str, count: int, visibility: str, out: Any, ready: Any, spin_us: int = 0
) -> None:
    """Child: opens `path` read-only and reads `count` records of `topic` through waits;
    sends back [(offset, value)] or the error's text."""
    try:
        with tidelog.open(path, readonly=True) as ro:
            reader = ro.reader(topic, start="earliest", visibility=visibility, spin_us=spin_us)
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
    tmp_path: Path,
    method: str,
    followers: int,
    count: int,
    visibility: str = "published",
    spin_us: int = 0,
) -> list[Any]:
    ctx = mp.get_context(method)
    with tidelog.open(tmp_path, fsync="never", block_size=64 * 1024) as wal:
        wal.append("t", value(0))
        out = ctx.Queue()
        readies = [ctx.Event() for _ in range(followers)]
        procs = [
            ctx.Process(
                target=follow, args=(str(tmp_path), "t", count, visibility, out, r, spin_us)
            )
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


def test_a_spinning_reader_in_another_process_reads_every_append(tmp_path: Path) -> None:
    count = 500
    (got,) = run_followers(tmp_path, "spawn", followers=1, count=count, spin_us=10_000)
    assert got == [(i, value(i)) for i in range(count)]
    with tidelog.open(tmp_path) as wal:
        reader = wal.reader("t", start="latest", spin_us=10_000)
        assert reader.spin_us == 10_000
        assert reader.next(timeout=0.001) is None
        assert wal.reader("t").spin_us == 0
        with pytest.raises(tidelog.InvalidArgumentError, match="spin"):
            wal.reader("t", spin_us=10_001)


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


# Appenders in several processes (shared mode, the default).


def tagged(worker: int, seq: int) -> bytes:
    return b"%d:%d:" % (worker, seq) + b"x" * (seq % 50)


def parse(v: bytes) -> tuple[int, int]:
    worker, seq, _ = v.split(b":", 2)
    return int(worker), int(seq)


def append_worker(path: str, worker: int, count: int) -> int:
    """Pool worker: opens `path` (shared) and appends `count` tagged records to "t" (single
    appends and batches) and one per pass to its own topic."""
    with tidelog.open(path, block_size=64 * 1024) as wal:
        seq = 0
        while seq < count:
            if seq % 5 == 2 and seq + 3 <= count:
                wal.append_batch("t", [tagged(worker, s) for s in range(seq, seq + 3)])
                seq += 3
            else:
                wal.append("t", tagged(worker, seq))
                seq += 1
            wal.append(f"own-{worker}", tagged(worker, seq))
    return worker


def check_dense(records: list[tuple[int, bytes]]) -> dict[int, list[int]]:
    """Offsets 0..n-1, each worker's sequence numbers increasing; returns them by worker."""
    per_worker: dict[int, list[int]] = {}
    for i, (offset, v) in enumerate(records):
        assert offset == i, "offsets must be dense"
        worker, seq = parse(v)
        assert v == tagged(worker, seq)
        seqs = per_worker.setdefault(worker, [])
        assert not seqs or seqs[-1] < seq, f"worker {worker} out of order at {offset}"
        seqs.append(seq)
    return per_worker


def read_topic(wal: tidelog.Wal, topic: str) -> list[tuple[int, bytes]]:
    return [(r.offset, bytes(r)) for r in wal.reader(topic, start="earliest")]


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_a_pool_of_appenders_shares_one_directory(tmp_path: Path, method: str) -> None:
    workers, count = 4, 600
    # The parent holds the directory too (as a web app's master would) while the pool works.
    with tidelog.open(tmp_path, block_size=64 * 1024) as wal:
        wal.append("t", tagged(99, 0))
        with mp.get_context(method).Pool(workers) as pool:
            done = pool.starmap(append_worker, [(str(tmp_path), w, count) for w in range(workers)])
        assert sorted(done) == list(range(workers))
        for handle in (wal,):
            per_worker = check_dense(read_topic(handle, "t"))
            assert per_worker[99] == [0]
            for w in range(workers):
                assert per_worker[w] == list(range(count))
                own = read_topic(handle, f"own-{w}")
                check_dense(own)
        assert sorted(wal.topics()) == ["own-0", "own-1", "own-2", "own-3", "t"]
    # From the files alone, after every process closed.
    with tidelog.open(tmp_path, exclusive=True) as wal:
        assert len(check_dense(read_topic(wal, "t"))) == workers + 1


def tail_worker(path: str, count: int, out: Any) -> None:
    """Child: appends `count` records, one by one, while the parent tails them."""
    try:
        with tidelog.open(path) as wal:
            for i in range(count):
                wal.append("tail", tagged(os.getpid(), i))
        out.put("ok")
    except BaseException as e:  # reported to the parent as text
        out.put(f"{type(e).__name__}: {e}")


def test_a_reader_tails_appenders_of_other_processes(tmp_path: Path) -> None:
    count = 500
    ctx = mp.get_context("spawn")
    with tidelog.open(tmp_path) as wal:
        wal.append("tail", tagged(0, 0))
        reader = wal.reader("tail", start="earliest")
        out = ctx.Queue()
        procs = [
            ctx.Process(target=tail_worker, args=(str(tmp_path), count, out)) for _ in range(2)
        ]
        for p in procs:
            p.start()
        got = []
        while len(got) < 1 + 2 * count:
            record = reader.next(timeout=WAIT_S)
            assert record is not None, f"record {len(got)} did not come within {WAIT_S} s"
            got.append((record.offset, bytes(record)))
        assert [out.get(timeout=WAIT_S) for _ in procs] == ["ok", "ok"]
        for p in procs:
            p.join(WAIT_S)
        per_worker = check_dense(got)
        assert sorted(len(s) for s in per_worker.values()) == [1, count, count]


def chaos_worker(path: str, worker: int, acks: str) -> None:
    """Chaos child: appends tagged records until killed; after each append returns it
    records the sequence number in `acks` (the record is acknowledged)."""
    fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with tidelog.open(path, fsync="never", block_size=64 * 1024) as wal:
        seq = 0
        while True:
            if seq % 4 == 1:
                wal.append_batch("c", [tagged(worker, s) for s in range(seq, seq + 2)])
                seq += 2
            else:
                wal.append("c", tagged(worker, seq))
                seq += 1
            os.write(fd, b"%d\n" % (seq - 1))


class Workers:
    """The appender processes of a chaos loop: each runs `target(data, worker, acks)` and
    writes the sequence numbers it saw acknowledged to its own file under `acks`."""

    def __init__(self, target: Any, data: Path, acks: Path) -> None:
        self.ctx = mp.get_context("fork")
        self.target = target
        self.data = data
        self.acks = acks
        acks.mkdir()
        self.started = 0
        self.live: dict[int, Any] = {}

    def spawn(self) -> None:
        worker = self.started
        self.started += 1
        args = (str(self.data), worker, str(self.acks / str(worker)))
        p = self.ctx.Process(target=self.target, args=args)
        p.start()
        self.live[worker] = p

    def kill(self, worker: int) -> None:
        import signal

        os.kill(self.live[worker].pid, signal.SIGKILL)
        self.live.pop(worker).join(WAIT_S)

    def kill_all(self) -> None:
        for worker in sorted(self.live):
            self.kill(worker)

    def acked(self, worker: int) -> list[int]:
        return [int(x) for x in (self.acks / str(worker)).read_text().split()]


def test_kill_9_among_appenders_loses_no_acknowledged_record(tmp_path: Path) -> None:
    """A chaos loop: three appender processes; a killer SIGKILLs one every 20-80 ms (in
    the middle of an append, holding a topic lock, rolling) and starts a new one. Every
    acknowledged record must be there, offsets dense, each writer's records in order, and
    the survivors must never stall behind a dead one."""
    import random

    rng = random.Random(20)
    workers = Workers(chaos_worker, tmp_path / "data", tmp_path / "acks")
    with tidelog.open(workers.data, block_size=64 * 1024) as wal:
        wal.append("c", tagged(1_000_000, 0))
        for _ in range(3):
            workers.spawn()
        deadline = time.monotonic() + 6.0
        kills = 0
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.02, 0.08))
            workers.kill(rng.choice(sorted(workers.live)))
            kills += 1
            workers.spawn()
        # The parent still appends at once: no lock is left to a dead holder.
        start = time.monotonic()
        wal.append("c", tagged(1_000_000, 1))
        assert time.monotonic() - start < 1.0
        workers.kill_all()
        records = read_topic(wal, "c")
    per_worker = check_dense(records)
    acked = 0
    for worker in range(workers.started):
        lines = workers.acked(worker)
        seqs = set(per_worker.get(worker, []))
        for seq in lines:
            assert seq in seqs, f"worker {worker}'s acknowledged record {seq} is lost"
        acked += len(lines)
    assert kills > 20 and acked > 1000, (kills, acked)
    # And from the files alone.
    with tidelog.open(workers.data, exclusive=True) as wal:
        assert read_topic(wal, "c") == records


def fork_then_append(path: str, others: int) -> None:
    """Child: holds `others` other directories open, opens `path`, forks a grandchild that
    only sleeps (it inherits this process's descriptors), then appends until its crash point
    kills it holding the topic's lock."""
    held = [tidelog.open(f"{path}-others/{i}") for i in range(others)]
    assert len(held) == others
    with tidelog.open(path) as wal:
        wal.append("f", b"child")
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        with open(os.path.join(path, "grandchild"), "w") as f:
            f.write(str(pid))
        while True:
            wal.append("f", b"child")


@pytest.mark.parametrize("others", [0, 40])
def test_a_forked_grandchild_does_not_keep_a_dead_holder_alive(tmp_path: Path, others: int) -> None:
    """The fork handler detaches a child's copies of the lock descriptors: a process killed
    holding a topic's lock is seen dead although a process it forked lives on, also when
    that process held many other directories open (each handle's descriptors count)."""
    import signal

    ctx = mp.get_context("spawn")
    with tidelog.open(tmp_path) as wal:
        wal.append("f", b"parent")
        os.environ["TIDELOG_CRASH_AT"] = "kill:append-locked:20"
        try:
            p = ctx.Process(target=fork_then_append, args=(str(tmp_path), others))
            p.start()
        finally:
            del os.environ["TIDELOG_CRASH_AT"]
        # (Not join: the grandchild holds the child's end of multiprocessing's pipe.)
        deadline = time.monotonic() + WAIT_S
        while p.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.exitcode == -signal.SIGKILL
        grandchild = int((tmp_path / "grandchild").read_text())
        try:
            start = time.monotonic()
            wal.append("f", b"parent")
            assert time.monotonic() - start < 1.0, "the dead holder was taken for alive"
        finally:
            os.kill(grandchild, signal.SIGKILL)
        values = [bytes(r) for r in wal.reader("f", start="earliest")]
        assert values[0] == b"parent" and values[-1] == b"parent"
        assert values[1:-1] == [b"child"] * (len(values) - 2)


def lead_worker(path: str, ready: Any) -> None:
    """Child: opens `path` first (so it leads housekeeping) and appends until killed."""
    with tidelog.open(path, fsync="never", fsync_interval_ms=20, block_size=64 * 1024) as wal:
        wal.append("t", b"lead")
        deadline = time.monotonic() + WAIT_S
        while (wal.leader() or {}).get("pid") != os.getpid():
            assert time.monotonic() < deadline, "the first opener never led"
            time.sleep(0.01)
        ready.set()
        while True:
            time.sleep(1)


def test_housekeeping_passes_to_another_process_when_its_leader_dies(tmp_path: Path) -> None:
    """The first process leads housekeeping; killed, another process's housekeeping takes
    over within a few sync intervals, under a new epoch, and retention goes on there."""
    import signal

    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=lead_worker, args=(str(tmp_path), ready))
    child.start()
    try:
        assert ready.wait(WAIT_S)
        with tidelog.open(
            tmp_path,
            fsync="never",
            fsync_interval_ms=20,
            block_size=64 * 1024,
            topic_retention={"t": {"retention_bytes": 128 * 1024}},
        ) as wal:
            before = wal.leader()
            assert before is not None and before["pid"] == child.pid
            assert before["idle_ms"] < 10_000
            os.kill(child.pid, signal.SIGKILL)
            child.join(WAIT_S)
            deadline = time.monotonic() + WAIT_S
            while (wal.leader() or {}).get("pid") != os.getpid():
                assert time.monotonic() < deadline, f"nobody took the lead: {wal.leader()}"
                time.sleep(0.01)
            after = wal.leader()
            assert after is not None and after["epoch"] > before["epoch"]
            # The new leader reclaims: old records of "t" go (each batch fills extents of
            # its own).
            for _ in range(4):
                wal.append_batch("t", [b"v" * 1000] * 200)
            while wal.topic_info("t").first_offset == 0:
                assert time.monotonic() < deadline, "retention never ran in the new leader"
                time.sleep(0.01)
    finally:
        if child.is_alive():
            child.kill()
            child.join(WAIT_S)


def test_an_exclusive_handle_has_no_leader(tmp_path: Path) -> None:
    with tidelog.open(tmp_path, exclusive=True) as wal:
        wal.append("t", b"x")
        assert wal.leader() is None


def test_an_open_alone_fails_on_a_foreign_lock_of_the_publish_turn(tmp_path: Path) -> None:
    """A lock on the publish byte (byte 3 of `LOCK`) that no handle holds (here a POSIX record
    lock of this process, which conflicts with the handles' descriptor locks) fails the open
    alone with `LockedError` after a bounded wait, instead of blocking it for ever."""
    import fcntl

    with tidelog.open(tmp_path) as wal:
        wal.append("t", b"kept")
    with open(tmp_path / "LOCK", "r+b") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 3)
        started = time.monotonic()
        with pytest.raises(tidelog.LockedError):
            tidelog.open(tmp_path)
        assert time.monotonic() - started < WAIT_S
    # Released with the descriptor: the next open goes ahead and keeps the record.
    with tidelog.open(tmp_path) as wal:
        assert wal.read("t", 0).value == b"kept"


def hold_worker(path: str, ready: Any, stop: Any) -> None:
    """Child: holds `path` open in shared mode (appending to `own`) until `stop` is set."""
    with tidelog.open(path, fsync_interval_ms=20) as wal:
        wal.append("own", b"child")
        ready.set()
        stop.wait(WAIT_S)


def test_a_commit_is_published_and_a_deletion_seen_beside_other_processes(
    tmp_path: Path,
) -> None:
    """With two processes sharing the directory, a job committed without a handle (as
    Spark's driver does) is published by their housekeeping leader, in one range; a topic
    deleted in one process is gone in the other, whose next append of the name starts a
    new topic."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    child = ctx.Process(target=hold_worker, args=(str(tmp_path), ready, stop))
    child.start()
    try:
        assert ready.wait(WAIT_S)
        with tidelog.open(tmp_path, fsync_interval_ms=20) as wal:
            wal.append("t", b"before")
            w = tidelog.StagedWriter(tmp_path, "job", "p0")
            for i in range(100):
                w.append("t", b"job %d" % i)
            assert w.finish() == 100
            tidelog.commit_staged(tmp_path, "job", ["p0"], timeout=WAIT_S)
            values = [bytes(r) for r in wal.reader("t", start="earliest")]
            assert values == [b"before"] + [b"job %d" % i for i in range(100)]
            assert not (tmp_path / "staging" / "job").exists()

            reader = wal.reader("own", start="earliest")
            assert bytes(next(reader)) == b"child"
            wal.delete_topic("own")
            with pytest.raises(tidelog.UnknownTopicError):
                reader.next(0)
            assert "own" not in wal.topics()
            assert wal.append("own", b"new") == 0
    finally:
        stop.set()
        child.join(WAIT_S)
    assert child.exitcode == 0


def retained_worker(path: str, worker: int, acks: str) -> None:
    """Chaos child under retention: as `chaos_worker`, in a directory whose old records
    the housekeeping leader (one of these children) deletes meanwhile."""
    fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with tidelog.open(path, **RETAINED) as wal:
        seq = 0
        while True:
            wal.append("c", tagged(worker, seq) + b"." * 200)
            os.write(fd, b"%d\n" % seq)
            seq += 1


RETAINED: dict[str, Any] = {
    "fsync": "never",
    "fsync_interval_ms": 20,
    "block_size": 64 * 1024,
    "file_size": 16 * 64 * 1024 + 4096,
    "topic_retention": {"c": {"retention_bytes": 4 * 64 * 1024}},
}


def test_kill_9_of_the_leader_under_retention_loses_no_retained_record(tmp_path: Path) -> None:
    """A chaos loop among three appender processes whose housekeeping leader deletes old
    records and files meanwhile: every other kill is the leader's (in the middle of its
    pass, retiring extents or deleting files). Whatever retention kept is dense and whole:
    each writer's acknowledged records from its oldest one kept on are all there, in order,
    in the view of a read-only process and from the files alone; and files do go."""
    import random

    rng = random.Random(21)
    workers = Workers(retained_worker, tmp_path / "data", tmp_path / "acks")
    workers.spawn()
    deadline = time.monotonic() + WAIT_S
    while not (workers.data / "LOCK").exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for _ in range(2):
        workers.spawn()
    kills = leader_kills = 0
    with tidelog.open(workers.data, readonly=True) as view:
        deadline = time.monotonic() + 6.0
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.02, 0.12))
            leader = (view.leader() or {}).get("pid")
            by_pid = {p.pid: w for w, p in workers.live.items()}
            if kills % 2 == 0 and leader in by_pid:
                victim = by_pid[leader]
                leader_kills += 1
            else:
                victim = rng.choice(sorted(workers.live))
            workers.kill(victim)
            kills += 1
            workers.spawn()
        workers.kill_all()
        seen = read_topic(view, "c")

    def check(records: list[tuple[int, bytes]]) -> None:
        offsets = [o for o, _ in records]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "dense"
        kept: dict[int, list[int]] = {}
        for _, v in records:
            worker, seq = parse(v)
            kept.setdefault(worker, []).append(seq)
        for worker, seqs in kept.items():
            assert seqs == sorted(seqs), f"worker {worker}'s records out of order"
            lost = [s for s in workers.acked(worker) if s >= seqs[0] and s not in set(seqs)]
            assert not lost, f"worker {worker} lost acknowledged records {lost[:5]}"

    check(seen)
    with tidelog.open(workers.data, **RETAINED) as wal:
        records = read_topic(wal, "c")
        check(records)
        assert records[0][0] > 0, "retention deleted old records"
    assert kills > 20 and leader_kills > 5, (kills, leader_kills)

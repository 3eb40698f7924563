"""Staged appends from Python, without Spark: parts, commit, abort, sink ledgers, errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import tidelog


def stage(path: Path, job: str, part: str, values: list[bytes], topic: str = "t") -> int:
    w = tidelog.StagedWriter(path, job, part)
    assert w.part == part
    w.append(topic, values[0], key=b"k", timestamp=1_000)
    if values[1:]:
        w.append_arrow(topic, pa.array(values[1:], pa.binary()))
    assert w.records == len(values)
    return w.finish()


def test_commit_publishes_named_parts_in_order(tmp_path: Path) -> None:
    assert stage(tmp_path, "job", "p1", [b"c", b"d"]) == 2
    assert stage(tmp_path, "job", "p0", [b"a", b"b"]) == 2
    stage(tmp_path, "job", "p0-retry", [b"x", b"y"])  # an attempt the commit leaves out
    with tidelog.open(tmp_path) as wal:
        wal.append("t", b"first")
        assert wal.commit_staged("job", ["p0", "p1"]) == {"t": range(1, 5)}
        assert [bytes(r) for r in wal.reader("t", start="earliest")] == [
            b"first",
            b"a",
            b"b",
            b"c",
            b"d",
        ]
        record = wal.read("t", 1)
        assert (record.key, record.timestamp) == (b"k", 1_000)
        with pytest.raises(tidelog.InvalidArgumentError):
            wal.commit_staged("job", ["p0"])  # published already: its directory is gone
    assert not (tmp_path / "staging" / "job").exists()


def test_a_finished_writer_is_closed_and_names_are_checked(tmp_path: Path) -> None:
    w = tidelog.StagedWriter(tmp_path, "job", "p0")
    w.append("t", b"v")
    w.finish()
    with pytest.raises(tidelog.ClosedError):
        w.append("t", b"late")
    with pytest.raises(tidelog.ClosedError):
        w.finish()
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.StagedWriter(tmp_path, "job", "p0")  # the part exists
    with pytest.raises(tidelog.InvalidTopicError):
        tidelog.StagedWriter(tmp_path, "../escape", "p")
    with pytest.raises(tidelog.InvalidTopicError):
        w2 = tidelog.StagedWriter(tmp_path, "job", "p1")
        w2.append("bad/topic", b"v")
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.stage_commit(tmp_path, "job", ["p0", "never-staged"])


def test_abort_and_empty_commit_leave_nothing(tmp_path: Path) -> None:
    stage(tmp_path, "gone", "p0", [b"a", b"b"])
    tidelog.stage_abort(tmp_path, "gone")
    stage(tmp_path, "empty", "p0", [b"a", b"b"])
    tidelog.commit_staged(tmp_path, "empty", [])
    with tidelog.open(tmp_path) as wal:
        assert wal.topics() == []
    assert list((tmp_path / "staging").iterdir()) == []


def test_jobs_nobody_committed_go_after_staged_ttl_ms(tmp_path: Path) -> None:
    stage(tmp_path, "orphan", "p0", [b"a", b"b"])
    # The default (a day) and None both keep a job staged moments ago.
    tidelog.open(tmp_path).close()
    tidelog.open(tmp_path, staged_ttl_ms=None).close()
    assert (tmp_path / "staging" / "orphan").is_dir()
    with tidelog.open(tmp_path, staged_ttl_ms=0) as wal:
        assert wal.topics() == []
    assert not (tmp_path / "staging" / "orphan").exists()
    with pytest.raises(OverflowError):
        tidelog.open(tmp_path, staged_ttl_ms=-1)


def test_sink_batches_publish_once(tmp_path: Path) -> None:
    assert tidelog.stage_sink_batch(tmp_path, "sink") is None
    stage(tmp_path, "b3", "p0", [b"a", b"b"])
    tidelog.commit_staged(tmp_path, "b3", ["p0"], sink="sink", batch=3)
    assert tidelog.stage_sink_batch(tmp_path, "sink") == 3
    # A replay of batch 3 committed again adds nothing.
    stage(tmp_path, "b3-again", "p0", [b"a", b"b"])
    tidelog.commit_staged(tmp_path, "b3-again", ["p0"], sink="sink", batch=3)
    with tidelog.open(tmp_path) as wal:
        assert wal.topic_info("t").next_offset == 2
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.stage_commit(tmp_path, "b4", ["p0"], sink="sink")  # batch missing


def test_a_holder_publishes_another_process_commit(tmp_path: Path) -> None:
    with tidelog.open(tmp_path, fsync_interval_ms=20) as holder:
        stage(tmp_path, "job", "p0", [b"a", b"b", b"c"])
        # This process holds the directory: the commit hands the job over and waits.
        tidelog.commit_staged(tmp_path, "job", ["p0"], timeout=20.0)
        assert holder.topic_info("t").next_offset == 3
        stage(tmp_path, "late", "p0", [b"z"])
        tidelog.stage_commit(tmp_path, "late", ["p0"])
        tidelog.stage_wait(tmp_path, "late", timeout=20.0)
        assert holder.topic_info("t").next_offset == 4


def test_a_wait_answers_published_only_from_a_record_of_the_publish(tmp_path: Path) -> None:
    # A name never committed, and a commit aborted before any publish: errors, never a
    # publish (the job's records are not in the directory).
    with pytest.raises(tidelog.InvalidArgumentError, match="not committed"):
        tidelog.stage_wait(tmp_path, "never", 0)
    stage(tmp_path, "aborted", "p0", [b"x"])
    tidelog.stage_commit(tmp_path, "aborted", ["p0"])
    tidelog.stage_abort(tmp_path, "aborted")
    with pytest.raises(tidelog.InvalidArgumentError, match="not committed"):
        tidelog.stage_wait(tmp_path, "aborted", 0.2)
    # A streaming sink's micro-batch and its replay: both answered as published.
    stage(tmp_path, "s-1", "p0", [b"a"])
    tidelog.commit_staged(tmp_path, "s-1", ["p0"], sink="s", batch=1)
    stage(tmp_path, "s-1-replay", "p0", [b"b"])
    tidelog.commit_staged(tmp_path, "s-1-replay", ["p0"], sink="s", batch=1)
    tidelog.stage_wait(tmp_path, "s-1-replay", 0)
    # Its record gone (as after staged_ttl_ms), a micro-batch is told by its sink's ledger.
    (tmp_path / "staging" / ".published" / "s-1").unlink()
    tidelog.stage_wait(tmp_path, "s-1", 0, sink="s", batch=1)
    with pytest.raises(tidelog.InvalidArgumentError, match="not committed"):
        tidelog.stage_wait(tmp_path, "s-1", 0)
    with pytest.raises(tidelog.InvalidArgumentError, match="go together"):
        tidelog.stage_wait(tmp_path, "s-1", 0, sink="s")
    with tidelog.open(tmp_path) as wal:
        assert [bytes(r) for r in wal.reader("t", start="earliest")] == [b"a"]


def test_a_job_that_cannot_be_published_is_set_aside_and_reported(tmp_path: Path) -> None:
    stage(tmp_path, "bad", "p0", [b"v" * 50] * 20)
    with pytest.raises(tidelog.InvalidArgumentError, match="named twice"):
        tidelog.commit_staged(tmp_path, "bad", ["p0", "p0"])
    tidelog.stage_commit(tmp_path, "bad", ["p0"])
    # A damaged record in the segment (small: its records would be copied).
    segment = tmp_path / "staging" / "bad" / "p0.0.seg"
    data = bytearray(segment.read_bytes())
    data[4096 + 4096 + 60] ^= 0xFF
    segment.write_bytes(bytes(data))
    stage(tmp_path, "good", "p0", [b"g"])
    with pytest.raises(tidelog.InvalidArgumentError, match="set aside"):
        tidelog.commit_staged(tmp_path, "bad", ["p0"], timeout=5.0)
    tidelog.commit_staged(tmp_path, "good", ["p0"], timeout=5.0)
    tidelog.commit_staged(tmp_path, "good", ["p0"], timeout=5.0)  # again: nothing more
    with tidelog.open(tmp_path) as wal:
        assert [bytes(r) for r in wal.reader("t", start="earliest")] == [b"g"]
        wal.flush()
    with pytest.raises(tidelog.InvalidArgumentError, match="set aside"):
        tidelog.stage_wait(tmp_path, "bad", 1.0)
    assert segment.exists()
    tidelog.stage_abort(tmp_path, "bad")
    assert not (tmp_path / "staging" / "bad").exists()


def _file_version(path: Path) -> int:
    with path.open("rb") as f:
        return int.from_bytes(f.read(12)[8:12], "little")


def _adopted_files(path: Path) -> list[Path]:
    """Data files whose header says they were adopted from a staged segment (version 4, or 2
    for segments of record frames)."""
    return [f for f in sorted(path.glob("*.tdl")) if _file_version(f) in (2, 4)]


@pytest.mark.parametrize(("record_format", "file_version"), [(2, 4), (1, 2)])
def test_staged_record_formats_adopt_and_read_alike(
    tmp_path: Path, record_format: int, file_version: int
) -> None:
    n = 20_000
    values = [b"%099d" % i for i in range(n)]
    w = tidelog.StagedWriter(tmp_path, "job", "p0", record_format=record_format)
    w.append_arrow("t", pa.array(values[:-100], pa.binary()))
    for v in values[-100:]:
        w.append("t", v, timestamp=7)
    assert w.finish() == n
    (segment,) = (tmp_path / "staging" / "job").glob("*.seg")
    # A 100-byte value costs about 108 bytes in a batch frame, 144 in a frame of its own.
    per_record = 112 if record_format == 2 else 150
    staged_bytes = segment.stat().st_blocks * 512
    assert staged_bytes < n * per_record, staged_bytes
    tidelog.commit_staged(tmp_path, "job", ["p0"], staged_adopt_bytes_min=0)
    assert [_file_version(f) for f in _adopted_files(tmp_path)] == [file_version]
    with tidelog.open(tmp_path, readonly=True) as ro:
        got = ro.read_arrow("t", 0, n, max_records=n)
        assert got.column("value").to_pylist() == values
        assert bytes(ro.read("t", n - 1).value) == values[-1]
    with pytest.raises(tidelog.InvalidArgumentError, match="record_format"):
        tidelog.StagedWriter(tmp_path, "job2", "p0", record_format=3)


def test_a_large_part_is_adopted_not_copied(tmp_path: Path) -> None:
    n = 60_000  # 100-byte values: about 8 MiB of records, above the 4 MiB default
    values = pa.array([b"%099d" % i for i in range(n)], pa.binary())
    w = tidelog.StagedWriter(tmp_path, "job", "p0")
    w.append_arrow("t", values)
    assert w.finish() == n
    with tidelog.open(tmp_path) as wal:
        wal.append("t", b"first")
        assert wal.commit_staged("job", ["p0"]) == {"t": range(1, n + 1)}
        assert len(_adopted_files(tmp_path)) == 1
        assert wal.append("t", b"last") == n + 1
        got = wal.read_arrow("t", 0, n + 2, max_records=n + 2).column("value").to_pylist()
        assert got == [b"first", *values.to_pylist(), b"last"]
    with tidelog.open(tmp_path, readonly=True) as ro:
        assert ro.topic_info("t").next_offset == n + 2
        assert bytes(ro.read("t", 12_345).value) == b"%099d" % 12_344


def test_staged_adopt_bytes_sets_what_is_copied(tmp_path: Path) -> None:
    w = tidelog.StagedWriter(tmp_path, "job", "p0")
    w.append_arrow("t", pa.array([b"v" * 100] * 1000, pa.binary()))
    w.finish()
    # Above every segment: copied, no adopted file.
    tidelog.commit_staged(tmp_path, "job", ["p0"], staged_adopt_bytes_min=1 << 40)
    assert _adopted_files(tmp_path) == []
    w = tidelog.StagedWriter(tmp_path, "job2", "p0")
    w.append_arrow("t", pa.array([b"w" * 100] * 1000, pa.binary()))
    w.finish()
    tidelog.commit_staged(tmp_path, "job2", ["p0"], staged_adopt_bytes_min=0)
    assert len(_adopted_files(tmp_path)) == 1
    with tidelog.open(tmp_path) as wal:
        assert wal.topic_info("t").next_offset == 2000
        assert bytes(wal.read("t", 999).value) == b"v" * 100
        assert bytes(wal.read("t", 1000).value) == b"w" * 100
    with pytest.raises(OverflowError):
        tidelog.open(tmp_path, staged_adopt_bytes_min=-1)


def test_staged_adopt_bytes_is_the_deprecated_name_of_staged_adopt_bytes_min(
    tmp_path: Path,
) -> None:
    with pytest.warns(DeprecationWarning, match="staged_adopt_bytes_min"):
        wal = tidelog.open(tmp_path / "old", staged_adopt_bytes=0)
    wal.close()
    with pytest.raises(tidelog.InvalidArgumentError, match="staged_adopt_bytes_min only"):
        tidelog.open(tmp_path / "both", staged_adopt_bytes=0, staged_adopt_bytes_min=0)
    assert not (tmp_path / "both").exists()

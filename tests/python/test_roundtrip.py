"""Round trips through every append API, for every accepted input type."""

from __future__ import annotations

import array
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tidelog
from conftest import BLOCK, data_files, open_small, payload

# Every test runs on the mmap and the ring backend (see conftest.py).
pytestmark = pytest.mark.usefixtures("backend")

# Every bytes-like input the binding must accept, built from the same bytes.
INPUTS: dict[str, Callable[[bytes], Any]] = {
    "bytes": bytes,
    "bytearray": bytearray,
    "memoryview": memoryview,
    "memoryview-of-bytearray": lambda b: memoryview(bytearray(b)),
    "memoryview-slice": lambda b: memoryview(b"<<" + b + b">>")[2 : 2 + len(b)],
    "numpy-uint8": lambda b: np.frombuffer(b, dtype=np.uint8),
}


@pytest.mark.parametrize("kind", list(INPUTS))
def test_wal_append_accepts_buffers(wal: tidelog.Wal, kind: str) -> None:
    make = INPUTS[kind]
    values = [b"first", b"", payload(2, 3000)]
    offsets = [wal.append("t", make(v)) for v in values]
    assert offsets == [0, 1, 2]
    for offset, value in zip(offsets, values, strict=True):
        rec = wal.read("t", offset)
        assert rec.offset == offset
        assert bytes(rec) == value
        assert bytes(rec.value) == value
        assert len(rec) == len(value)
        assert rec.key is None


@pytest.mark.parametrize("kind", list(INPUTS))
def test_keys_accept_buffers(wal: tidelog.Wal, kind: str) -> None:
    make = INPUTS[kind]
    offset = wal.append("t", b"v", key=make(b"the-key"))
    assert wal.read("t", offset).key == b"the-key"
    w = wal.writer("t")
    offset = w.append(b"w", key=make(b"writer-key"))
    assert wal.read("t", offset).key == b"writer-key"


@pytest.mark.parametrize("kind", list(INPUTS))
def test_append_batch_accepts_buffers(wal: tidelog.Wal, kind: str) -> None:
    make = INPUTS[kind]
    values = [payload(i, 10 + i) for i in range(5)]
    assert wal.append_batch("t", [make(v) for v in values]) == range(0, 5)
    assert wal.writer("t").append_batch([make(v) for v in values]) == range(5, 10)
    for i, value in enumerate(values + values):
        assert bytes(wal.read("t", i)) == value


@pytest.mark.parametrize("kind", list(INPUTS))
def test_append_async_accepts_buffers(wal: tidelog.Wal, kind: str) -> None:
    make = INPUTS[kind]
    handle = wal.append_async("t", make(b"async"), key=make(b"k"))
    assert handle.offset == 0
    assert handle.offsets == range(0, 1)
    assert handle.wait(timeout=10.0) is True
    assert handle.is_durable()
    rec = wal.read("t", 0)
    assert bytes(rec) == b"async"
    assert rec.key == b"k"


def test_multibyte_buffer_is_taken_as_raw_bytes(wal: tidelog.Wal) -> None:
    # Any C-contiguous buffer is accepted; its memory is stored byte for byte.
    ints = array.array("i", [1, 2, 3, -1])
    wal.append("t", ints)
    assert bytes(wal.read("t", 0)) == ints.tobytes()
    matrix = np.arange(12, dtype=np.uint32).reshape(3, 4)
    wal.append("t", matrix)
    assert bytes(wal.read("t", 1)) == matrix.tobytes()


def test_non_contiguous_buffer_is_rejected(wal: tidelog.Wal) -> None:
    strided = memoryview(b"abcdefgh")[::2]
    with pytest.raises((BufferError, TypeError)):
        wal.append("t", strided)
    assert "t" not in wal.topics()


def test_a_released_memoryview_says_it_is_released(wal: tidelog.Wal) -> None:
    """Its exporter's own error, not "must be bytes-like ... not memoryview"."""
    view = memoryview(b"abc")
    view.release()
    with pytest.raises(ValueError, match="released"):
        wal.append("t", view)
    assert "t" not in wal.topics()


def test_str_is_rejected_everywhere(wal: tidelog.Wal) -> None:
    w = wal.writer("t")
    calls: list[Callable[[], object]] = [
        lambda: wal.append("t", "text"),  # type: ignore[arg-type]
        lambda: wal.append("t", b"v", key="text"),  # type: ignore[arg-type]
        lambda: wal.append_batch("t", [b"ok", "text"]),  # type: ignore[list-item]
        lambda: wal.append_async("t", "text"),  # type: ignore[arg-type]
        lambda: w.append("text"),  # type: ignore[arg-type]
        lambda: w.append(b"v", key="text"),  # type: ignore[arg-type]
        lambda: w.append_batch(["text"]),  # type: ignore[list-item]
        lambda: w.append_async("text"),  # type: ignore[arg-type]
        lambda: wal.append("t", 42),  # type: ignore[arg-type]
        lambda: wal.append("t", None),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(TypeError):
            call()
    # A rejected batch is rejected whole: nothing of it was appended.
    assert w.next_offset == 0


def test_empty_key_differs_from_no_key(wal: tidelog.Wal) -> None:
    wal.append("t", b"a")
    wal.append("t", b"b", key=b"")
    wal.append("t", b"c", key=b"k")
    assert wal.read("t", 0).key is None
    assert wal.read("t", 1).key == b""
    assert wal.read("t", 2).key == b"k"


def test_headers_on_every_append_path(tmp_path: Path, wal: tidelog.Wal) -> None:
    pairs = [("trace", b"t-1"), ("trace", None), ("", b""), ("text", b"\xc3\xa9")]
    given = [(k, "é" if k == "text" else v) for k, v in pairs]  # a str value is UTF-8
    writer = wal.writer("t")
    assert wal.append("t", b"a", headers=given) == 0
    assert writer.append(b"b", headers=given) == 1
    wal.append_async("t", b"c", headers=given).wait(10.0)
    writer.append_async(b"d", headers=given).wait(10.0)
    assert wal.append("t", b"e", headers=[]) == 4
    assert wal.append("t", b"f", headers={"one": bytearray(b"1")}) == 5
    for offset in range(4):
        assert wal.read("t", offset).headers == pairs
    assert wal.read("t", 4).headers == []
    assert wal.read("t", 5).headers == [("one", b"1")]
    with wal.reader("t", start=0) as reader:
        assert [r.headers for r in reader.next_batch(10)][:2] == [pairs, pairs]
    staged = tidelog.StagedWriter(wal.path, "job", "p0")
    staged.append("s", b"v", key=b"k", headers=given)
    staged.finish()
    wal.commit_staged("job", ["p0"])
    assert wal.read("s", 0).headers == pairs
    # Bad headers are refused before anything is appended.
    for bad, error in [
        ("ab", TypeError),
        ([("k",)], TypeError),
        ([(1, b"v")], TypeError),
        ([("k", 5)], TypeError),
        (5, TypeError),
        ([("k" * 20_000, b"v")], tidelog.InvalidArgumentError),
        ([("k", b"v")] * 5_000, tidelog.InvalidArgumentError),
    ]:
        with pytest.raises(error):
            wal.append("t", b"x", headers=bad)
    assert wal.topic_info("t").next_offset == 6
    # Headers count toward the record size limit.
    with tidelog.open(tmp_path / "small", max_record_bytes=100) as small:
        with pytest.raises(tidelog.LimitExceededError):
            small.append("t", b"v", headers=[("big", b"x" * 100)])


def test_timestamps(wal: tidelog.Wal) -> None:
    before = time.time_ns() // 1000
    wal.append("t", b"now")
    after = time.time_ns() // 1000
    explicit = 1_700_000_000_123_456
    wal.append("t", b"then", timestamp=explicit)
    wal.writer("t").append(b"writer", timestamp=explicit + 1)
    wal.append_async("t", b"async", timestamp=explicit + 2).wait(10.0)
    # Default timestamps are the append time (allowing a little clock slack).
    assert before - 1_000_000 <= wal.read("t", 0).timestamp <= after + 1_000_000
    assert wal.read("t", 1).timestamp == explicit
    assert wal.read("t", 2).timestamp == explicit + 1
    assert wal.read("t", 3).timestamp == explicit + 2


def test_record_value_is_read_only_zero_copy_view(wal: tidelog.Wal) -> None:
    wal.append("t", b"\x00\x01\x02\xff")
    rec = wal.read("t", 0)
    mv = rec.value
    assert isinstance(mv, memoryview)
    assert mv.readonly
    assert mv.tobytes() == b"\x00\x01\x02\xff"
    whole = memoryview(rec)
    assert whole.readonly
    assert whole.format == "B"
    assert whole.nbytes == 4
    with pytest.raises(TypeError):
        whole[0] = 7
    arr = np.frombuffer(rec, dtype=np.uint8)
    assert arr.tolist() == [0, 1, 2, 255]
    assert not arr.flags.writeable


def test_writer(wal: tidelog.Wal) -> None:
    w = wal.writer("orders")
    assert w.topic == "orders"
    assert w.next_offset == 0
    assert w.fsync == ("always" if wal.backend == "ring" else "interval")
    assert w.append(b"a") == 0
    assert w.append_batch([b"b", b"c"]) == range(1, 3)
    h = w.append_async(b"d")
    assert h.offsets == range(3, 4)
    w.flush()
    assert h.is_durable()
    assert w.next_offset == 4
    assert wal.writer("orders", fsync="always").fsync == "always"
    assert wal.writer("orders", fsync="never").fsync == "never"
    strict = wal.writer("orders", fsync="always")
    assert strict.append(b"e") == 4
    assert [bytes(wal.read("orders", i)) for i in range(5)] == [b"a", b"b", b"c", b"d", b"e"]


def test_writer_follows_wal_fsync(tmp_path: Path) -> None:
    with open_small(tmp_path, fsync="never") as wal:
        assert wal.writer("t").fsync == "never"
    with open_small(tmp_path, fsync="always") as wal:
        w = wal.writer("t")
        assert w.fsync == "always"
        assert w.append(b"durable") == 0


def test_append_batch_accepts_any_iterable(wal: tidelog.Wal) -> None:
    gen = (payload(i, 7) for i in range(4))
    assert wal.append_batch("t", gen) == range(0, 4)
    assert wal.append_batch("t", (b"x", bytearray(b"y"))) == range(4, 6)
    assert bytes(wal.read("t", 5)) == b"y"


def test_records_span_blocks_and_files(wal: tidelog.Wal) -> None:
    # 300 records of 5 KiB: many 64 KiB blocks and more than one 512 KiB file.
    sizes = [5000 + (i % 7) for i in range(300)]
    for i, size in enumerate(sizes):
        assert wal.append("t", payload(i, size)) == i
    # A record larger than one block gets an extent of several blocks.
    big = payload(999, 3 * BLOCK)
    assert wal.append("t", big) == 300
    for i, size in enumerate(sizes):
        assert bytes(wal.read("t", i)) == payload(i, size)
    assert bytes(wal.read("t", 300)) == big
    assert len(data_files(wal.path)) >= 2


def test_topics_and_topic_info(wal: tidelog.Wal) -> None:
    assert wal.topics() == []
    wal.append_batch("b", [b"1", b"2", b"3"])
    wal.append("a", b"x")
    assert wal.topics() == ["a", "b"]
    with wal.reader("b", "g2") as r:
        r.commit()
    with wal.reader("b", "g1") as r:
        r.commit()
    info = wal.topic_info("b")
    assert isinstance(info, tidelog.TopicInfo)
    assert info.name == "b"
    assert info.first_offset == 0
    assert info.next_offset == 3
    assert info.records == 3
    # One batch frame: a 36-byte header, 6 bytes per 1-byte record, padded to 8.
    assert info.bytes == 56
    assert info.extents >= 1
    assert info.groups == ["g1", "g2"]
    assert wal.topic_info("a").groups == []


def test_delete_topic_and_recreate(wal: tidelog.Wal) -> None:
    wal.append_batch("gone", [b"1", b"2"])
    wal.append("kept", b"k")
    wal.delete_topic("gone")
    assert wal.topics() == ["kept"]
    with pytest.raises(tidelog.UnknownTopicError):
        wal.read("gone", 0)
    # A later append creates a new, empty topic of that name.
    assert wal.append("gone", b"again") == 0
    assert bytes(wal.read("gone", 0)) == b"again"
    assert bytes(wal.read("kept", 0)) == b"k"


def test_delete_group(wal: tidelog.Wal) -> None:
    wal.append("t", b"x")
    with wal.reader("t", "g") as r:
        r.next()
        r.commit()
    assert wal.topic_info("t").groups == ["g"]
    wal.delete_group("t", "g")
    assert wal.topic_info("t").groups == []
    # The group starts again from the beginning.
    with wal.reader("t", "g") as r:
        assert r.committed is None
        assert r.position == 0


def test_delete_records(tmp_path: Path, wal: tidelog.Wal) -> None:
    wal.append_batch("t", [b"v%d" % i for i in range(100)])
    with wal.reader("t", "g") as r:
        r.commit(10)
    assert wal.delete_records("t", 40) == 40
    assert wal.topic_info("t").first_offset == 40
    with pytest.raises(tidelog.OffsetOutOfRangeError):
        wal.read("t", 39)
    assert bytes(wal.read("t", 40).value) == b"v40"
    with wal.reader("t", "g") as r:  # committed below: resumes at the start
        assert r.position == 40
    assert wal.read_arrow("t", 40).column("offset").to_pylist()[0] == 40
    assert wal.delete_records("t", 5) == 40  # never backwards
    with pytest.raises(tidelog.OffsetOutOfRangeError):
        wal.delete_records("t", 101)
    with pytest.raises(tidelog.UnknownTopicError):
        wal.delete_records("nope", 0)
    with pytest.raises((OverflowError, TypeError)):
        wal.delete_records("t", -1)
    path = wal.path
    wal.close()
    with tidelog.open(path, readonly=True) as ro:
        assert ro.topic_info("t").first_offset == 40
        with pytest.raises(tidelog.ReadOnlyError):
            ro.delete_records("t", 50)


def test_disk_usage(wal: tidelog.Wal) -> None:
    wal.append("t", payload(0, 1000))
    usage = wal.disk_usage()
    assert isinstance(usage, dict)
    assert usage["files"] >= 1
    assert usage["bytes"] >= 4096 + BLOCK
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in usage.items())


def test_wal_properties_and_context_manager(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        assert wal.path == str(tmp_path)
        assert wal.readonly is False
        assert wal.closed is False
        wal.append("t", b"x")
    assert wal.closed is True
    # Closing twice is harmless.
    wal.close()
    assert wal.closed


def test_context_manager_closes_on_exception(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), open_small(tmp_path) as wal:
        wal.append("t", b"x")
        raise RuntimeError("boom")
    assert wal.closed
    # The lock was released: the directory opens for writing again.
    with open_small(tmp_path) as again:
        assert bytes(again.read("t", 0)) == b"x"


def test_reopen_keeps_records_and_offsets(tmp_path: Path) -> None:
    values = [payload(i, 100 + i) for i in range(50)]
    with open_small(str(tmp_path)) as wal:
        wal.append_batch("t", values[:25])
        for v in values[25:]:
            wal.append("t", v, key=v[:3], timestamp=1_000 + len(v))
    with open_small(tmp_path) as wal:
        info = wal.topic_info("t")
        assert (info.first_offset, info.next_offset) == (0, 50)
        for i, v in enumerate(values):
            rec = wal.read("t", i)
            assert bytes(rec) == v
            if i >= 25:
                assert rec.key == v[:3]
                assert rec.timestamp == 1_000 + len(v)
        assert wal.append("t", b"next") == 50


def test_readonly_handle_sees_flushed_records(tmp_path: Path) -> None:
    with open_small(tmp_path, fsync="never") as wal:
        wal.append("t", b"one")
        wal.flush()
        ro = tidelog.open(tmp_path, readonly=True)
        ro2 = tidelog.open(tmp_path, readonly=True)
        try:
            assert ro.readonly is True
            assert bytes(ro.read("t", 0)) == b"one"
            wal.append("t", b"two")
            wal.flush()
            ro.refresh()
            assert bytes(ro.read("t", 1)) == b"two"
            assert ro.topic_info("t").next_offset == 2
            assert bytes(ro2.read("t", 0)) == b"one"
        finally:
            ro.close()
            ro2.close()


def test_version_and_exports() -> None:
    assert isinstance(tidelog.__version__, str)
    assert tidelog.__version__
    for name in tidelog.__all__:
        assert hasattr(tidelog, name), name


def test_every_documented_option_is_accepted(tmp_path: Path) -> None:
    options: dict[str, Any] = {
        "fsync": "always",
        "fsync_interval_ms": 50,
        "readonly": False,
        "block_size": BLOCK,
        "file_size": 4096 + 4 * BLOCK,
        "max_record_bytes": 10_000,
        "max_batch_records": 100,
        "max_batch_bytes": 20_000,
        "max_topics": 10,
        "retention_ms": 3_600_000,
        "retention_bytes": 10 * BLOCK,
        "topic_retention": {"short": {"retention_ms": 1000, "retention_bytes": BLOCK}},
        "disk_bytes_max": 64 * BLOCK,
        "space_wait_ms": 10,
        "group_wait_us": 100,
        "group_bytes_max": 1 << 20,
        "recovery_threads": 2,
    }
    with tidelog.open(tmp_path, **options) as wal:
        assert wal.append("short", b"x") == 0
        assert wal.writer("short").fsync == "always"
        assert wal.append_batch("t", [b"y"] * 100) == range(0, 100)
    with tidelog.open(tmp_path, recovery_threads=1, readonly=True) as ro:
        assert ro.topic_info("t").next_offset == 100
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(tmp_path, recovery_threads=65)
    with pytest.raises((OverflowError, TypeError)):
        tidelog.open(tmp_path, recovery_threads=-1)


@pytest.mark.mmap_only(
    "fsync='never' leaves appends pending only in the data files; a ring writes blocks at once"
)
def test_append_handle_waits_for_durability(tmp_path: Path) -> None:
    # Without a background flush nothing becomes durable until flush().
    with open_small(tmp_path, fsync="never") as wal:
        handle = wal.append_async("t", b"pending")
        assert handle.wait(timeout=0.05) is False
        assert handle.is_durable() is False
        wal.flush()
        assert handle.wait(timeout=5) is True
        assert handle.wait() is True
        assert handle.is_durable()
        # A writer asking for "always" gets durable appends on its own.
        strict = wal.writer("t", fsync="always").append_async(b"strict")
        assert strict.wait(timeout=5) is True
        assert strict.offset == 1


Row = tuple[bytes | None, bytes, list[tuple[str, bytes]]]


def _record_format_rows(n: int, first: int) -> list[Row]:
    return [
        (
            f"k{i}".encode() if i % 3 == 0 else None,
            payload(i, 50 + i % 300),
            [("i", str(i).encode())] if i % 4 == 0 else [],
        )
        for i in range(first, first + n)
    ]


def test_record_formats_mix_in_one_directory(tmp_path: Path) -> None:
    """A directory written with record_format=1 reads whole, through every read path, after
    an open that writes format 2 and goes on appending."""
    rows = _record_format_rows(400, 0) + _record_format_rows(1200, 400)
    with open_small(tmp_path, record_format=1) as wal:
        for key, value, headers in rows[:400]:
            wal.append("t", value, key=key, headers=headers)
    with open_small(tmp_path) as wal:
        batch = rows[400:]
        for i in range(0, len(batch), 100):
            for key, value, headers in batch[i : i + 100]:
                wal.append("t", value, key=key, headers=headers)
            wal.append_batch("u", [v for _, v, _ in batch[i : i + 100]])
        wal.flush()
    with open_small(tmp_path) as wal:
        got = [(r.key, r.value, r.headers) for r in wal.reader("t", start="earliest")]
        assert got == [(k, v, h) for k, v, h in rows]
        table = wal.read_arrow("t", 0, len(rows))
        assert table.column("value").to_pylist() == [v for _, v, _ in rows]
        assert wal.read("t", 123).value == rows[123][1]
        assert wal.read("t", 1234).value == rows[1234][1]
        assert [r.value for r in wal.reader("u", start="earliest")] == [v for _, v, _ in batch]


@pytest.mark.parametrize("bad", [0, 3, -1])
def test_record_format_must_be_1_or_2(tmp_path: Path, bad: int) -> None:
    with pytest.raises(tidelog.InvalidArgumentError, match="record_format"):
        tidelog.open(tmp_path, record_format=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tidelog.open(tmp_path, record_format="2")  # type: ignore[arg-type]

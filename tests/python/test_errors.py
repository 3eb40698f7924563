"""Every exception class, raised by the input that should raise it."""

from __future__ import annotations

import errno
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
import tidelog
from conftest import BLOCK, FILE_SIZE, data_files, open_small, payload, wait_until

# Every test runs on the mmap and the ring backend (see conftest.py).
pytestmark = pytest.mark.usefixtures("backend")

BAD_NAMES = ["", ".", "..", ".hidden", "a/b", "a b", "a@b", "x" * 250, "caf\u00e9", "tab\t"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_topic_names(wal: tidelog.Wal, name: str) -> None:
    with pytest.raises(tidelog.InvalidTopicError) as info:
        wal.append(name, b"x")
    assert info.value.name == name
    assert info.value.reason
    assert isinstance(info.value, tidelog.InvalidArgumentError)
    assert isinstance(info.value, ValueError)
    with pytest.raises(tidelog.InvalidTopicError):
        wal.writer(name)
    with pytest.raises(tidelog.InvalidTopicError):
        wal.append_batch(name, [b"x"])
    assert wal.topics() == []


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_group_names(wal: tidelog.Wal, name: str) -> None:
    wal.append("t", b"x")
    with pytest.raises(tidelog.InvalidTopicError):
        wal.reader("t", name)
    with pytest.raises(tidelog.InvalidTopicError):
        wal.delete_group("t", name)


def test_valid_name_edges(wal: tidelog.Wal) -> None:
    for name in ["x" * 249, "a.b_c-D9", "0", "a..b", "trailing."]:
        assert wal.append(name, b"x") == 0
        with wal.reader(name, name) as r:
            r.commit()
    assert len(wal.topics()) == 5


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"fsync": "sometimes"}, "fsync"),
        ({"block_size": 5000}, "block_size"),  # not a multiple of the 4096-byte page
        ({"block_size": 4096}, "block_size"),  # below two pages
        ({"file_size": 4096 + BLOCK + 1}, "file_size"),
        ({"file_size": 4096}, "file_size"),  # no room for a block
        ({"file_size": 8 * 1024**3}, "file_size"),  # positions are 32-bit
        ({"max_record_bytes": 0}, "max_record_bytes"),
        ({"max_record_bytes": 10 * FILE_SIZE}, "max_record_bytes"),
        ({"max_batch_records": 0}, "max_batch_records"),
        ({"max_batch_bytes": 0}, "max_batch_bytes"),
        ({"max_topics": 0}, "max_topics"),
        ({"fsync_interval_ms": 0}, "interval"),
        ({"group_wait_us": 10_000_000}, "group_wait_us"),
        ({"group_bytes_max": 0}, "group_bytes_max"),
        ({"retention_ms": 0}, "max_age_ms"),
        ({"retention_bytes": 0}, "max_bytes"),
        ({"disk_bytes_max": 4096}, "disk_bytes_max"),  # not even one file header and block
        ({"space_wait_ms": 10**10}, "space_wait_ms"),
        ({"topic_retention": {"t": {"retention_days": 1}}}, "topic_retention"),
    ],
)
def test_invalid_options(tmp_path: Path, options: dict[str, Any], argument: str) -> None:
    with pytest.raises(tidelog.InvalidArgumentError) as info:
        open_small(tmp_path, **options)
    assert isinstance(info.value, ValueError)
    # The message names the offending option (in the engine's or the binding's spelling).
    assert argument.split("_")[0] in str(info.value)
    # Nothing was left holding the directory.
    with open_small(tmp_path) as wal:
        wal.append("t", b"x")


def test_invalid_topic_in_topic_retention(tmp_path: Path) -> None:
    with pytest.raises(tidelog.InvalidTopicError):
        open_small(tmp_path, topic_retention={"bad/name": {"retention_ms": 1000}})


def test_invalid_writer_fsync(wal: tidelog.Wal) -> None:
    with pytest.raises(tidelog.InvalidArgumentError):
        wal.writer("t", fsync="sometimes")  # type: ignore[arg-type]


def test_record_too_large(tmp_path: Path) -> None:
    with open_small(tmp_path, max_record_bytes=1000) as wal:
        assert wal.append("t", b"x" * 1000) == 0
        with pytest.raises(tidelog.RecordTooLargeError) as info:
            wal.append("t", b"x" * 1001)
        err = info.value
        assert isinstance(err, tidelog.LimitExceededError)
        assert isinstance(err, ValueError)
        assert (err.limit, err.value, err.max) == ("max_record_bytes", 1001, 1000)
        # The key counts towards the record size.
        with pytest.raises(tidelog.RecordTooLargeError):
            wal.append("t", b"x" * 600, key=b"k" * 600)
        with pytest.raises(tidelog.RecordTooLargeError):
            wal.writer("t").append(b"x" * 1001)
        with pytest.raises(tidelog.RecordTooLargeError):
            wal.append_batch("t", [b"ok", b"x" * 1001])
        # Nothing of a rejected call was appended.
        assert wal.topic_info("t").next_offset == 1


def test_batch_too_large(tmp_path: Path) -> None:
    with open_small(tmp_path, max_batch_bytes=1000, max_batch_records=4) as wal:
        with pytest.raises(tidelog.RecordTooLargeError) as info:
            wal.append_batch("t", [b"x" * 400] * 3)
        assert info.value.limit == "max_batch_bytes"
        with pytest.raises(tidelog.LimitExceededError) as count_info:
            wal.append_batch("t", [b"x"] * 5)
        assert count_info.value.limit == "max_batch_records"
        assert not isinstance(count_info.value, tidelog.RecordTooLargeError)
        assert wal.append_batch("t", [b"x"] * 4) == range(0, 4)


def test_too_many_topics(tmp_path: Path) -> None:
    with open_small(tmp_path, max_topics=2) as wal:
        wal.append("a", b"x")
        wal.append("b", b"x")
        with pytest.raises(tidelog.LimitExceededError) as info:
            wal.append("c", b"x")
        assert info.value.limit == "max_topics"
        assert info.value.max == 2
        assert wal.topics() == ["a", "b"]
        # Existing topics still take appends.
        assert wal.append("a", b"y") == 1


def test_capacity_error_at_disk_cap(tmp_path: Path) -> None:
    # A cap of one full data file (header and 8 blocks): about 480 records of 1000 bytes.
    with open_small(tmp_path, fsync="never", disk_bytes_max=FILE_SIZE) as wal:
        appended = 0
        with pytest.raises(tidelog.CapacityError) as info:
            for i in range(5000):
                assert wal.append("t", payload(i, 1000)) == i
                appended += 1
        assert not isinstance(info.value, tidelog.DiskFullError)
        assert 0 < appended < 5000
        assert wal.disk_usage()["bytes"] <= FILE_SIZE
        # Nothing was written by the failed append, and what was written reads back.
        assert wal.topic_info("t").next_offset == appended
        assert bytes(wal.read("t", appended - 1)) == payload(appended - 1, 1000)
        # Another failure, not a hang, while the disk stays full.
        with pytest.raises(tidelog.CapacityError):
            wal.append("t", payload(appended, 1000))


def test_capacity_freed_by_consumption(tmp_path: Path) -> None:
    cap = 2 * FILE_SIZE
    with open_small(tmp_path, fsync="never", disk_bytes_max=cap) as wal:
        appended = 0
        with pytest.raises(tidelog.CapacityError):
            for i in range(10_000):
                wal.append("t", payload(i, 1000))
                appended += 1
        with wal.reader("t", "g") as r:
            r.seek(appended)
            r.commit()

        def append_ok() -> bool:
            try:
                wal.append("t", payload(appended, 1000))
            except tidelog.CapacityError:
                return False
            return True

        # Deletion runs on a background thread: appends work again once it freed a file.
        wait_until(append_ok, "consumed files to free space under the cap")
        assert wal.topic_info("t").next_offset == appended + 1


def test_locked_by_second_open(tmp_path: Path) -> None:
    with open_small(tmp_path, exclusive=True):
        with pytest.raises(tidelog.LockedError) as info:
            open_small(tmp_path)
        with pytest.raises(tidelog.LockedError):
            open_small(tmp_path, exclusive=True)
        assert isinstance(info.value, OSError)
        assert isinstance(info.value, tidelog.TidelogError)
        # Read-only handles take no lock.
        with tidelog.open(tmp_path, readonly=True) as ro:
            assert ro.readonly
    # Closing releases the lock.
    with open_small(tmp_path) as wal:
        assert not wal.closed


def test_read_only_handle_refuses_writes(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        wal.append("t", b"x")
        with wal.reader("t", "g") as r:
            r.commit()
    with tidelog.open(tmp_path, readonly=True) as ro:
        assert ro.readonly
        with pytest.raises(tidelog.ReadOnlyError):
            ro.append("t", b"y")
        with pytest.raises(tidelog.ReadOnlyError):
            ro.append_batch("t", [b"y"])
        with pytest.raises(tidelog.ReadOnlyError):
            ro.append_async("t", b"y")
        with pytest.raises(tidelog.ReadOnlyError):
            ro.delete_topic("t")
        with pytest.raises(tidelog.ReadOnlyError):
            ro.delete_group("t", "g")
        with ro.reader("t", "g") as r, pytest.raises(tidelog.ReadOnlyError):
            r.commit()
        assert bytes(ro.read("t", 0)) == b"x"
        assert ro.topic_info("t").next_offset == 1


def test_closed_wal(tmp_path: Path) -> None:
    wal = open_small(tmp_path)
    wal.append("t", b"x")
    writer = wal.writer("t")
    reader = wal.reader("t")
    wal.close()
    calls = [
        lambda: wal.append("t", b"y"),
        lambda: wal.append_batch("t", [b"y"]),
        lambda: wal.append_async("t", b"y"),
        lambda: wal.read("t", 0),
        lambda: wal.reader("t"),
        lambda: wal.writer("t"),
        lambda: wal.flush(),
        lambda: wal.topic_info("t"),
        lambda: wal.delete_topic("t"),
        lambda: wal.read_arrow("t", 0),
        lambda: writer.append(b"y"),
        lambda: writer.flush(),
        lambda: reader.next(),
        lambda: reader.commit(),
    ]
    for call in calls:
        with pytest.raises(tidelog.ClosedError):
            call()
    assert issubclass(tidelog.ClosedError, ValueError)


def test_closed_reader(wal: tidelog.Wal) -> None:
    wal.append("t", b"x")
    r = wal.reader("t", "g")
    r.close()
    for call in (r.next, r.next_batch, r.commit, lambda: r.seek(0), lambda: r.seek_time(0)):
        with pytest.raises(tidelog.ClosedError):
            call()
    with pytest.raises(tidelog.ClosedError):
        list(r)


def test_unknown_topic(wal: tidelog.Wal) -> None:
    with pytest.raises(tidelog.UnknownTopicError) as info:
        wal.read("nope", 0)
    assert info.value.topic == "nope"
    assert isinstance(info.value, LookupError)
    with pytest.raises(tidelog.UnknownTopicError):
        wal.topic_info("nope")
    with pytest.raises(tidelog.UnknownTopicError):
        wal.delete_topic("nope")
    with pytest.raises(tidelog.UnknownTopicError):
        wal.read_arrow("nope", 0)


def test_deleted_topic_fails_its_readers(wal: tidelog.Wal) -> None:
    wal.append("t", b"x")
    r = wal.reader("t")
    wal.delete_topic("t")
    with pytest.raises(tidelog.UnknownTopicError):
        r.next()
    r.close()


def test_unknown_group(wal: tidelog.Wal) -> None:
    wal.append("t", b"x")
    with pytest.raises(tidelog.UnknownGroupError) as info:
        wal.delete_group("t", "nobody")
    assert (info.value.topic, info.value.group) == ("t", "nobody")
    assert isinstance(info.value, LookupError)


def test_offset_out_of_range(wal: tidelog.Wal) -> None:
    wal.append_batch("t", [b"a", b"b", b"c"])
    with pytest.raises(tidelog.OffsetOutOfRangeError) as info:
        wal.read("t", 3)
    err = info.value
    assert (err.topic, err.offset, err.first, err.next) == ("t", 3, 0, 3)
    assert isinstance(err, IndexError)
    with pytest.raises(tidelog.OffsetOutOfRangeError):
        wal.read("t", 10**12)
    with pytest.raises(tidelog.OffsetOutOfRangeError):
        wal.reader("t", start=4)
    with pytest.raises(tidelog.OffsetOutOfRangeError):
        wal.read_arrow("t", 4)


def test_negative_offset_is_rejected(wal: tidelog.Wal) -> None:
    wal.append("t", b"a")
    with pytest.raises((OverflowError, ValueError)):
        wal.read("t", -1)


def _flip_in_value(path: Path, marker: bytes) -> None:
    """Flips one byte inside the value that contains `marker`, in its data file."""
    for file in data_files(path):
        data = bytearray(file.read_bytes())
        at = data.find(marker)
        if at >= 0:
            assert data.find(marker, at + 1) < 0, "marker must be unique"
            data[at + 3] ^= 0x5A
            file.write_bytes(bytes(data))
            return
    raise AssertionError(f"{marker!r} not found in any data file")


def test_corruption_in_scanned_extent_fails_open(tmp_path: Path) -> None:
    # An extent that is not sealed is scanned at open, so the damage is found there.
    with open_small(tmp_path) as wal:
        for i in range(20):
            wal.append("bits", payload(i, 50) + f"<MARK{i:04d}>".encode())
    _flip_in_value(tmp_path, b"<MARK0005>")
    with pytest.raises(tidelog.CorruptionError) as info:
        open_small(tmp_path)
    err = info.value
    assert err.topic == "bits"
    assert err.offset == 5
    assert err.path.endswith(".tdl")
    assert err.position > 0
    assert err.reason
    # The failed open released the lock; a read-only open reports the same damage.
    with pytest.raises(tidelog.CorruptionError):
        tidelog.open(tmp_path, readonly=True)


def test_corruption_in_sealed_extent_fails_the_read(tmp_path: Path) -> None:
    # 150 records of 1000 bytes fill more than two 64 KiB extents; the first is sealed and
    # trusted at open, so the damaged record is reported when it is read.
    with open_small(tmp_path) as wal:
        for i in range(150):
            wal.append("bits", f"<MARK{i:04d}>".encode() + payload(i, 990))
    _flip_in_value(tmp_path, b"<MARK0003>")
    with open_small(tmp_path) as wal:
        with pytest.raises(tidelog.CorruptionError) as info:
            wal.read("bits", 3)
        assert (info.value.topic, info.value.offset) == ("bits", 3)
        assert bytes(wal.read("bits", 2))[:10] == b"<MARK0002>"
        assert bytes(wal.read("bits", 120))[:10] == b"<MARK0120>"
        with wal.reader("bits") as r:
            assert [rec.offset for rec in r.next_batch(3)] == [0, 1, 2]
            with pytest.raises(tidelog.CorruptionError):
                r.next()
            # The reader stays at the damaged record.
            assert r.position == 3
        # Without checksum verification the damaged bytes are returned as stored.
        with wal.reader("bits", start=3, verify_checksums=False) as r:
            rec = r.next()
            assert rec is not None
            assert bytes(rec)[:10] != b"<MARK0003>"


def test_unsupported_version(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        wal.append("t", b"x")
    first = data_files(tmp_path)[0]
    header = bytearray(first.read_bytes()[:52])
    # File header: version u32 at byte 8, CRC-32 of bytes 0..48 at byte 48.
    struct.pack_into("<I", header, 8, 99)
    struct.pack_into("<I", header, 48, zlib.crc32(bytes(header[:48])))
    with first.open("r+b") as f:
        f.write(header)
    with pytest.raises(tidelog.UnsupportedVersionError) as info:
        open_small(tmp_path)
    assert "99" in str(info.value)


def test_os_errors_are_builtin_classes(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError) as info:
        tidelog.open(missing, readonly=True)
    assert not isinstance(info.value, tidelog.TidelogError)
    assert info.value.errno == errno.ENOENT
    assert info.value.filename == str(missing)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"")
    with pytest.raises(OSError) as info2:
        tidelog.open(not_a_dir)
    assert not isinstance(info2.value, tidelog.TidelogError)
    assert info2.value.errno in (errno.EEXIST, errno.ENOTDIR)
    assert info2.value.filename


def test_exception_hierarchy() -> None:
    e = tidelog.exceptions
    expected: dict[type[BaseException], tuple[type[BaseException], ...]] = {
        e.InvalidArgumentError: (e.TidelogError, ValueError),
        e.InvalidTopicError: (e.InvalidArgumentError, ValueError),
        e.LimitExceededError: (e.TidelogError, ValueError),
        e.RecordTooLargeError: (e.LimitExceededError,),
        e.CapacityError: (e.TidelogError,),
        e.DiskFullError: (e.CapacityError, OSError),
        e.RingFullError: (e.CapacityError,),
        e.LockedError: (e.TidelogError, OSError),
        e.LockTimeoutError: (e.TidelogError, TimeoutError, OSError),
        e.ReadOnlyError: (e.TidelogError,),
        e.ClosedError: (e.TidelogError, ValueError),
        e.ForkedError: (e.TidelogError,),
        e.PoisonedError: (e.TidelogError, OSError),
        e.CorruptionError: (e.TidelogError,),
        e.UnknownTopicError: (e.TidelogError, LookupError),
        e.UnknownGroupError: (e.TidelogError, LookupError),
        e.OffsetOutOfRangeError: (e.TidelogError, IndexError),
        e.UnsupportedVersionError: (e.TidelogError,),
        e.NotFormattedError: (e.TidelogError,),
        e.CapacityMismatchError: (e.TidelogError, ValueError),
        e.InternalError: (e.TidelogError,),
        e.TierError: (e.TidelogError, OSError),
        e.TierCorruptionError: (e.TierError,),
        e.FencedError: (e.TierError, OSError),
        e.TierTimeoutError: (e.TierError, TimeoutError),
    }
    for cls, bases in expected.items():
        for base in bases:
            assert issubclass(cls, base), (cls, base)
        # The package re-exports the very same classes.
        assert getattr(tidelog, cls.__name__) is cls
    assert issubclass(e.TidelogError, Exception)
    assert set(e.__all__) == {c.__name__ for c in expected} | {"TidelogError"}


def test_os_flavoured_errors_carry_errno() -> None:
    full = tidelog.DiskFullError(errno.ENOSPC, "disk full", "/data/00000000000000000001.tdl")
    assert full.errno == errno.ENOSPC
    assert full.filename == "/data/00000000000000000001.tdl"
    assert isinstance(full, tidelog.CapacityError)
    poisoned = tidelog.PoisonedError(errno.EIO, "msync failed", "/data/x.tdl")
    assert poisoned.errno == errno.EIO
    assert isinstance(poisoned, OSError)
    # A generic OSError handler catches them, as it would the built-in classes.
    for exc in (full, poisoned):
        with pytest.raises(OSError):
            raise exc


@pytest.mark.parametrize("timestamp", [2**63, 2**64 - 1])
def test_a_timestamp_past_i64_max_is_refused(wal: tidelog.Wal, timestamp: int) -> None:
    """Stored, it came back clamped to i64::MAX from `read_arrow` and `scan`."""
    with pytest.raises(tidelog.InvalidArgumentError, match="timestamp"):
        wal.append("t", b"v", timestamp=timestamp)
    with pytest.raises(tidelog.InvalidArgumentError, match="timestamp"):
        wal.writer("t").append(b"v", timestamp=timestamp)
    assert wal.append("t", b"v", timestamp=2**63 - 1) == 0
    assert wal.read("t", 0).timestamp == 2**63 - 1
    column = wal.read_arrow("t", 0).column("timestamp").cast("int64").to_pylist()
    assert column == [2**63 - 1]

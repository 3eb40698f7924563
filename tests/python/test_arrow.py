"""Arrow import and export: read_arrow's schema and contents, append_arrow's inputs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
import tidelog
from conftest import data_files, open_small, payload, run_python

# Every test runs on the mmap and the ring backend (see conftest.py).
pytestmark = pytest.mark.usefixtures("backend")

UTC_US = pa.timestamp("us", tz="UTC")


def test_read_arrow_schema_and_values(wal: tidelog.Wal) -> None:
    ts = 1_700_000_000_000_000
    wal.append("t", b"v0", key=b"k0", timestamp=ts)
    wal.append("t", b"", timestamp=ts + 1)
    wal.append("t", payload(2, 5000), key=b"", timestamp=ts + 2)
    batch = wal.read_arrow("t", 0)
    assert isinstance(batch, pa.RecordBatch)
    assert batch.schema.names == ["topic", "offset", "timestamp", "key", "value", "headers"]
    assert batch.schema.field("topic").type == pa.string()
    assert batch.schema.field("offset").type == pa.int64()
    assert batch.schema.field("timestamp").type == UTC_US
    assert batch.schema.field("key").type == pa.binary()
    assert batch.schema.field("key").nullable
    assert batch.schema.field("value").type == pa.binary()
    batch.validate(full=True)
    assert batch.num_rows == 3
    assert batch.column("topic").to_pylist() == ["t"] * 3
    assert batch.column("offset").to_pylist() == [0, 1, 2]
    assert batch.column("key").to_pylist() == [b"k0", None, b""]
    assert batch.column("value").to_pylist() == [b"v0", b"", payload(2, 5000)]
    assert batch.column("timestamp").to_pylist() == [
        dt.datetime(2023, 11, 14, 22, 13, 20, us, tzinfo=dt.UTC) for us in (0, 1, 2)
    ]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [ts, ts + 1, ts + 2]
    assert batch.schema.field("headers").type == pa.list_(
        pa.field(
            "item",
            pa.struct(
                [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]
            ),
            nullable=False,
        )
    )
    assert batch.column("headers").to_pylist() == [[], [], []]


def test_headers_through_read_arrow_scan_and_append_arrow(wal: tidelog.Wal) -> None:
    wal.append("t", b"none")
    wal.append("t", b"two", headers=[("a", b"1"), ("a", None)])
    wal.append("t", b"text", headers={"s": "é"})
    want = [
        [],
        [{"key": "a", "value": b"1"}, {"key": "a", "value": None}],
        [{"key": "s", "value": "é".encode()}],
    ]
    batch = wal.read_arrow("t", 0)
    batch.validate(full=True)
    assert batch.column("headers").to_pylist() == want
    streamed = pa.RecordBatchReader.from_stream(wal.scan("t")).read_all()
    assert streamed.column("headers").to_pylist() == want
    # A batch read back is appended as it is: headers included, even from a slice.
    offsets = wal.append_arrow("t", batch.slice(1))
    assert offsets == range(3, 5)
    assert wal.read_arrow("t", 3).column("headers").to_pylist() == want[1:]
    # A null list is no headers; large lists and large strings are taken.
    table = pa.table(
        {
            "value": [b"x", b"y"],
            "headers": pa.array(
                [None, [{"key": "k", "value": b"v"}]],
                pa.large_list(pa.struct([("key", pa.large_string()), ("value", pa.binary())])),
            ),
        }
    )
    assert wal.append_arrow("t", table) == range(5, 7)
    assert wal.read("t", 5).headers == []
    assert wal.read("t", 6).headers == [("k", b"v")]
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    bad = pa.table(
        {"value": [b"x"], "headers": pa.array([[{"key": None, "value": b"v"}]], pa.list_(header))}
    )
    with pytest.raises(tidelog.InvalidArgumentError):
        wal.append_arrow("t", bad)
    with pytest.raises(TypeError):
        wal.append_arrow("t", pa.table({"value": [b"x"], "headers": [b"not a list"]}))
    assert wal.topic_info("t").next_offset == 7


def test_read_arrow_ranges(wal: tidelog.Wal) -> None:
    wal.append_batch("t", [payload(i, 10 + i) for i in range(20)])
    assert wal.read_arrow("t", 5, 9).column("offset").to_pylist() == [5, 6, 7, 8]
    assert wal.read_arrow("t", 5, max_records=3).column("offset").to_pylist() == [5, 6, 7]
    assert wal.read_arrow("t", 5, 7, max_records=3).column("offset").to_pylist() == [5, 6]
    assert wal.read_arrow("t", 15).column("offset").to_pylist() == list(range(15, 20))
    tail = wal.read_arrow("t", 18)
    assert tail.column("value").to_pylist() == [payload(18, 28), payload(19, 29)]
    # An empty range (start at the end, or start == end) is an empty batch, same schema.
    empty = wal.read_arrow("t", 20)
    assert empty.num_rows == 0
    assert empty.schema == tail.schema
    assert wal.read_arrow("t", 3, 3).num_rows == 0


def test_read_arrow_across_extents(wal: tidelog.Wal) -> None:
    for i in range(300):
        wal.append("t", payload(i, 3000))
    batch = wal.read_arrow("t", 0)
    batch.validate(full=True)
    assert batch.num_rows == 300
    values = batch.column("value")
    assert all(values[i].as_py() == payload(i, 3000) for i in range(0, 300, 37))


def test_append_arrow_binary_and_string_arrays(wal: tidelog.Wal) -> None:
    assert wal.append_arrow("t", pa.array([b"a", b"", b"ccc"], pa.binary())) == range(0, 3)
    assert wal.append_arrow("t", pa.array(["x", "y\u00e9"])) == range(3, 5)
    assert wal.append_arrow("t", pa.array([b"big"], pa.large_binary())) == range(5, 6)
    assert wal.append_arrow("t", pa.array(["large"], pa.large_string())) == range(6, 7)
    got = [bytes(wal.read("t", i)) for i in range(7)]
    assert got == [b"a", b"", b"ccc", b"x", "y\u00e9".encode(), b"big", b"large"]
    assert all(wal.read("t", i).key is None for i in range(7))


def test_append_arrow_slices(wal: tidelog.Wal) -> None:
    arr = pa.array([payload(i, 5 + i) for i in range(10)], pa.binary())
    # A slice shares its parent's buffers with an offset: only its own values go in.
    assert wal.append_arrow("t", arr.slice(3, 4)) == range(0, 4)
    assert [bytes(wal.read("t", i)) for i in range(4)] == [payload(i, 5 + i) for i in (3, 4, 5, 6)]
    batch = pa.record_batch({"value": arr, "key": pa.array([b"k%d" % i for i in range(10)])})
    assert wal.append_arrow("t", batch.slice(8)) == range(4, 6)
    assert [wal.read("t", i).key for i in (4, 5)] == [b"k8", b"k9"]
    strings = pa.array(["zero", "one", "two", "three"])
    assert wal.append_arrow("t", strings.slice(1, 2)) == range(6, 8)
    assert bytes(wal.read("t", 7)) == b"two"


def test_append_arrow_record_batch_with_key_and_timestamp(wal: tidelog.Wal) -> None:
    ts = 1_650_000_000_000_000
    batch = pa.record_batch(
        {
            "value": pa.array([b"v0", b"v1", b"v2"]),
            "key": pa.array([b"k0", None, b""]),
            "timestamp": pa.array([ts, ts + 5, ts + 10], UTC_US),
        }
    )
    assert wal.append_arrow("t", batch) == range(0, 3)
    recs = [wal.read("t", i) for i in range(3)]
    assert [bytes(r) for r in recs] == [b"v0", b"v1", b"v2"]
    assert [r.key for r in recs] == [b"k0", None, b""]
    assert [r.timestamp for r in recs] == [ts, ts + 5, ts + 10]


def test_append_arrow_value_only_batch_and_table(wal: tidelog.Wal) -> None:
    before = wal.append("t", b"first")
    assert before == 0
    batch = pa.record_batch({"value": pa.array([b"a", b"b"])})
    assert wal.append_arrow("t", batch) == range(1, 3)
    table = pa.table({"value": pa.array([b"c", b"d", b"e"])})
    assert wal.append_arrow("t", table) == range(3, 6)
    assert [bytes(wal.read("t", i)) for i in range(6)] == [b"first", b"a", b"b", b"c", b"d", b"e"]


def test_append_arrow_chunked_inputs(wal: tidelog.Wal) -> None:
    chunked = pa.chunked_array([[b"a"], [b"b", b"c"]], pa.binary())
    assert wal.append_arrow("t", chunked) == range(0, 3)
    table = pa.concat_tables(
        [
            pa.table({"value": pa.array([b"d"]), "key": pa.array([b"kd"])}),
            pa.table({"value": pa.array([b"e", b"f"]), "key": pa.array([None, b"kf"])}),
        ]
    )
    assert table.column("value").num_chunks == 2
    assert wal.append_arrow("t", table) == range(3, 6)
    assert [bytes(wal.read("t", i)) for i in range(6)] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert [wal.read("t", i).key for i in range(3, 6)] == [b"kd", None, b"kf"]


def test_arrow_round_trip(wal: tidelog.Wal) -> None:
    ts = 1_600_000_000_000_000
    for i in range(50):
        wal.append("src", payload(i, 100 + i), key=None if i % 3 else b"k%d" % i, timestamp=ts + i)
    exported = wal.read_arrow("src", 0)
    # What read_arrow exports, append_arrow takes back (its value, key and timestamp).
    again = exported.select(["value", "key", "timestamp"])
    assert wal.append_arrow("dst", again) == range(0, 50)
    copy = wal.read_arrow("dst", 0)
    for column in ("offset", "timestamp", "key", "value"):
        assert copy.column(column).equals(exported.column(column)), column
    assert copy.column("topic").to_pylist() == ["dst"] * 50


def test_append_arrow_rejects_null_values(wal: tidelog.Wal) -> None:
    wal.append("t", b"x")
    with pytest.raises(tidelog.InvalidArgumentError):
        wal.append_arrow("t", pa.array([b"a", None, b"c"]))
    with pytest.raises(tidelog.InvalidArgumentError):
        wal.append_arrow("t", pa.record_batch({"value": pa.array(["a", None])}))
    # The batch is all or nothing: no record of it was appended.
    assert wal.topic_info("t").next_offset == 1
    # A slice that leaves the null out is fine.
    assert wal.append_arrow("t", pa.array([b"a", None, b"c"]).slice(2)) == range(1, 2)


def test_append_arrow_rejects_bad_input(wal: tidelog.Wal) -> None:
    with pytest.raises((TypeError, tidelog.InvalidArgumentError)):
        wal.append_arrow("t", pa.array([1, 2, 3]))
    with pytest.raises((TypeError, tidelog.InvalidArgumentError)):
        wal.append_arrow("t", [b"not", b"arrow"])
    with pytest.raises(tidelog.InvalidArgumentError):
        wal.append_arrow("t", pa.record_batch({"payload": pa.array([b"a"])}))
    # Nothing was appended and no topic was created: input is checked before the topic is.
    assert "t" not in wal.topics()


def test_append_arrow_respects_limits(wal: tidelog.Wal) -> None:
    with pytest.raises(tidelog.InvalidTopicError):
        wal.append_arrow("bad/topic", pa.array([b"a"]))
    too_big = pa.array([b"x" * (8 * 64 * 1024)])
    with pytest.raises(tidelog.RecordTooLargeError):
        wal.append_arrow("t", too_big)


def test_read_arrow_value_buffers_outlive_the_wal(wal: tidelog.Wal) -> None:
    wal.append_batch("t", [payload(i, 64) for i in range(10)])
    batch = wal.read_arrow("t", 0)
    wal.close()
    assert batch.column("value").to_pylist() == [payload(i, 64) for i in range(10)]


# --- scan: the Arrow C stream ---


def test_scan_is_an_arrow_c_stream_pyarrow_reads(tmp_path: Path) -> None:
    with open_small(tmp_path) as wal:
        keys = [None, b"", b"k"] * 4
        for i, key in enumerate(keys):
            wal.append("t", b"v%d" % i, key=key, timestamp=1_000 + i)
        whole = pa.RecordBatchReader.from_stream(wal.scan("t")).read_all()
        expected = pa.Table.from_batches([wal.read_arrow("t", 0)])
        assert whole.schema == expected.schema
        assert whole.equals(expected)
        # Batches of at most batch_records, from start up to end (exclusive).
        reader = pa.RecordBatchReader.from_stream(wal.scan("t", 2, 9, batch_records=3))
        sizes = [batch.num_rows for batch in reader]
        assert sizes == [3, 3, 1]
        part = pa.RecordBatchReader.from_stream(wal.scan("t", 2, 9)).read_all()
        assert part.column("offset").to_pylist() == list(range(2, 9))
        assert part.column("key").to_pylist() == keys[2:9]
        # Records appended before the consumer gets there are in it.
        stream = wal.scan("t", 10)
        wal.append("t", b"late")
        assert pa.RecordBatchReader.from_stream(stream).read_all().num_rows == 3
        # Each read of it reads from its start again; bad arguments are refused at once.
        stream = wal.scan("t", 11)
        assert pa.RecordBatchReader.from_stream(stream).read_all().num_rows == 2
        assert pa.RecordBatchReader.from_stream(stream).read_all().num_rows == 2
        with pytest.raises(tidelog.InvalidArgumentError):
            wal.scan("t", batch_records=0)
        # An end before the start, as in read_arrow.
        with pytest.raises(tidelog.InvalidArgumentError, match="before start"):
            wal.scan("t", 5, 4)
        with pytest.raises(tidelog.InvalidArgumentError, match="before start"):
            wal.read_arrow("t", 5, 4)
        with pytest.raises(tidelog.OffsetOutOfRangeError):
            wal.scan("t", 99)
        with pytest.raises(tidelog.UnknownTopicError):
            wal.scan("nope")
        # A handle closed under a stream: the consumer gets the error, not a crash.
        stream = wal.scan("t")
    with pytest.raises(pa.ArrowException, match="closed"):
        pa.RecordBatchReader.from_stream(stream).read_all()
    with tidelog.open(tmp_path, readonly=True) as ro:
        assert pa.RecordBatchReader.from_stream(ro.scan("t")).read_all().num_rows == 13


def damage_record(path: Path, i: int) -> None:
    """Flips bits in the value of the record marked `<R{i:05d}>` in the data files."""
    for file in data_files(path):
        data = bytearray(file.read_bytes())
        at = data.find(b"<R%05d>" % i)
        if at >= 0:
            data[at + 20] ^= 0x5A
            file.write_bytes(bytes(data))
            return
    raise AssertionError("the record to damage is in no data file")


def test_scan_in_any_batch_size_reads_what_read_arrow_reads_and_damage_in_turn(
    tmp_path: Path,
) -> None:
    # A stream builds the batch after the one it hands out on another thread: batches of
    # any size hold the same rows, and a damaged record fails its own batch, after every
    # batch before it.
    n = 3000
    with open_small(tmp_path) as wal:
        for start in range(0, n, 100):
            wal.append_batch(
                "t", [b"<R%05d>" % i + payload(i, 90) for i in range(start, start + 100)]
            )
        whole = pa.Table.from_batches([wal.read_arrow("t", 0)])
        assert whole.num_rows == n
        for batch_records in (1, 7, 256, 2999, 3000, 65536):
            reader = pa.RecordBatchReader.from_stream(wal.scan("t", batch_records=batch_records))
            batches = list(reader)
            assert all(b.num_rows == batch_records for b in batches[:-1]), batch_records
            assert pa.Table.from_batches(batches).equals(whole), batch_records
        assert wal.topic_info("t").extents > 3
    damaged = 1500
    damage_record(tmp_path, damaged)
    with open_small(tmp_path) as wal:
        for batch_records in (256, 1000):
            reader = pa.RecordBatchReader.from_stream(wal.scan("t", batch_records=batch_records))
            rows = 0
            with pytest.raises(pa.ArrowException, match=r"(?i)corrupt"):
                for batch in reader:
                    rows += batch.num_rows
            assert rows == damaged // batch_records * batch_records, batch_records


def test_scan_needs_no_pyarrow(tmp_path: Path) -> None:
    proc = run_python(
        f"""
        import ctypes, sys
        sys.modules["pyarrow"] = None  # any import of it fails
        import tidelog
        with tidelog.open({str(tmp_path)!r}) as wal:
            wal.append("t", b"x")
            capsule = wal.scan("t").__arrow_c_stream__()
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype = ctypes.c_char_p
        get_name.argtypes = [ctypes.py_object]
        assert get_name(capsule) == b"arrow_array_stream", get_name(capsule)
        del capsule  # released unread
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_scan_reads_into_duckdb(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    with open_small(tmp_path) as wal:
        wal.append_batch("t", [b"%d" % i for i in range(100)])
        stream = wal.scan("t")  # noqa: F841 (duckdb finds it by its name)
        got = duckdb.sql('select count(*), max("offset") from stream').fetchall()
        assert got == [(100, 99)]


def test_a_large_read_arrow_reads_what_the_reader_reads_and_damage_in_either_half(
    tmp_path: Path,
) -> None:
    # A read_arrow of many records builds its two halves on two threads and joins them:
    # any range holds the rows a reader hands over one by one (keys and headers on some
    # rows only), and a damaged record in either half fails the call.
    n = 40_000
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    with open_small(tmp_path) as wal:
        for start in range(0, n, 4000):
            rows = range(start, start + 4000)
            table = pa.table(
                {
                    "value": pa.array([b"<R%05d>" % i + payload(i, 60) for i in rows]),
                    "key": pa.array([b"k%d" % i if i % 3 == 0 else None for i in rows]),
                    "headers": pa.array(
                        [[{"key": "h", "value": b"%d" % i}] if i % 5 == 0 else [] for i in rows],
                        header_type,
                    ),
                }
            )
            wal.append_arrow("t", table)
        records = list(wal.reader("t", start="earliest"))
        assert len(records) == n
        for start, end, max_records in (
            (0, None, None),
            (1, n - 3, None),
            (7_001, None, 20_001),
            (n - 16_384, None, None),
        ):
            batch = wal.read_arrow("t", start, end, max_records)
            stop = min(n if end is None else end, start + (max_records or n))
            want = records[start:stop]
            assert batch.num_rows == len(want), (start, end, max_records)
            assert batch.column("offset").to_pylist() == [r.offset for r in want]
            assert batch.column("key").to_pylist() == [r.key and bytes(r.key) for r in want]
            assert batch.column("value").to_pylist() == [bytes(r.value) for r in want]
            headers = [[(h["key"], h["value"]) for h in hs] for hs in batch["headers"].to_pylist()]
            assert headers == [r.headers for r in want]
        del records
    # The second half damaged alone, then the first too. A damaged byte fails its whole
    # frame (up to 64 KiB of records, within one append_arrow call of 4000): the intact
    # reads keep clear of it.
    for damaged, intact in ((30_000, (35_000, n)), (5_000, (0, 4_000))):
        damage_record(tmp_path, damaged)
        with open_small(tmp_path) as wal:
            with pytest.raises(tidelog.CorruptionError):
                wal.read_arrow("t", 0)
            assert wal.read_arrow("t", *intact).num_rows == intact[1] - intact[0]

"""The tier from Python: `tidelog.open(path, tier=..., storage_options=...)`,
`Wal.tier_flush`, `Wal.tier_status`, fencing, and the errors of bad settings."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import shutil
import ssl
import threading
import time
import urllib.request
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import tidelog

GEOMETRY: dict[str, Any] = {"block_size": 65536, "file_size": 4096 + 16 * 65536}


def value(topic: str, offset: int) -> bytes:
    return f"{topic}:{offset}:".encode().ljust(900, b"v")


def open_tiered(path: Path, bucket: Path, **kwargs: Any) -> tidelog.Wal:
    return tidelog.open(path, tier=bucket.as_uri(), fsync_interval_ms=50, **GEOMETRY, **kwargs)


def deltas(bucket: Path) -> list[dict[str, Any]]:
    """The manifest's deltas, checked (magic, length, CRC-32), in order."""
    out = []
    for i, path in enumerate(sorted((bucket / "_tidelog" / "manifest").iterdir())):
        assert path.name == f"{i + 1:020}.delta"
        header, body = path.read_bytes().split(b"\n", 1)
        magic, crc, length = header.decode().split(" ")
        assert magic == "TLDELTA1"
        assert int(length) == len(body)
        assert int(crc, 16) == zlib.crc32(body)
        out.append(json.loads(body))
    return out


def objects(bucket: Path, topic: str) -> list[dict[str, Any]]:
    entries = [e for d in deltas(bucket) for e in d["entries"]]
    ids = [e["topic"]["id"] for e in entries if "topic" in e and e["topic"]["name"] == topic]
    return [e["add"] for e in entries if "add" in e and e["add"]["topic"] in ids]


def records_in_bucket(bucket: Path, topic: str) -> int:
    """Records the bucket holds for `topic`, checking the objects follow each other."""
    expect = 0
    for add in objects(bucket, topic):
        assert add["first_offset"] == expect
        data = (bucket / add["key"]).read_bytes()
        assert len(data) == add["bytes"] and data[:8] == b"TDLBLOCK"
        expect += add["records"]
    return expect


def test_tier_flush_puts_every_record_in_the_bucket(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    with open_tiered(tmp_path / "log", bucket) as wal:
        writer = wal.writer("orders")
        for i in range(250):
            assert writer.append(value("orders", i)) == i
        wal.append("tiny", b"one")
        wal.tier_flush(timeout=60)
        assert records_in_bucket(bucket, "orders") == 250
        assert records_in_bucket(bucket, "tiny") == 1
        status = wal.tier_status()
        assert status is not None
        assert status["url"] == bucket.as_uri()
        assert status["lag_records"] == 0
        assert status["uploaded_objects"] == len(objects(bucket, "orders")) + 1
        assert status["uploading"] is True and status["fenced"] is False
        assert status["last_error"] is None
        # New appends go to new extents; the next flush covers them.
        writer.append(value("orders", 250))
        wal.tier_flush(timeout=60)
        assert records_in_bucket(bucket, "orders") == 251
    # Reopened: the same producer in a new epoch, and nothing local is lost.
    with open_tiered(tmp_path / "log", bucket) as wal:
        assert wal.read("orders", 0).value == value("orders", 0)
        wal.append("orders", value("orders", 251))
        wal.tier_flush(timeout=60)
        assert records_in_bucket(bucket, "orders") == 252
        claims = [e["claim"] for d in deltas(bucket) for e in d["entries"] if "claim" in e]
        assert [c["epoch"] for c in claims] == [1, 2]


def test_memory_buckets_are_shared_within_a_process(tmp_path: Path) -> None:
    url = "memory://test-tier/prefix"
    with tidelog.open(tmp_path / "log", tier=url, **GEOMETRY) as wal:
        for i in range(120):
            wal.append("t", value("t", i))
        wal.tier_flush(timeout=60)
        status = wal.tier_status()
        assert status is not None and status["uploaded_objects"] >= 2
    # Another directory on the same URL in this process meets the first one's claim.
    with pytest.raises(tidelog.FencedError):
        tidelog.open(tmp_path / "other", tier=url, **GEOMETRY)


def test_another_directory_is_fenced_unless_it_takes_over(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    first = open_tiered(tmp_path / "a", bucket)
    first.append("t", b"x")
    first.tier_flush(timeout=60)
    with pytest.raises(tidelog.FencedError) as refused:
        open_tiered(tmp_path / "b", bucket)
    assert refused.value.epoch == 1
    assert isinstance(refused.value, tidelog.TierError)
    second = open_tiered(tmp_path / "b", bucket, tier_takeover=True)
    second.append("u", b"y")
    second.tier_flush(timeout=60)
    first.append("t", b"z")
    with pytest.raises(tidelog.FencedError) as fenced:
        first.tier_flush(timeout=60)
    status = second.tier_status()
    assert status is not None
    assert fenced.value.producer == status["producer"]
    first_status = first.tier_status()
    assert first_status is not None and first_status["fenced"] is True
    # Its local data is intact.
    assert [first.read("t", i).value for i in range(2)] == [b"x", b"z"]
    first.close()
    second.close()


def test_a_bucket_that_refuses_uploads_times_the_flush_out(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    blocker = bucket / "topics"
    blocker.write_bytes(b"a file where a directory should be")
    with open_tiered(tmp_path / "log", bucket) as wal:
        for i in range(100):
            wal.append("t", value("t", i))
        with pytest.raises(tidelog.TierTimeoutError) as timed_out:
            wal.tier_flush(timeout=0.5)
        assert timed_out.value.pending_records == 100
        assert isinstance(timed_out.value, TimeoutError)
        status = wal.tier_status()
        assert status is not None and status["retries"] > 0 and status["last_error"]
        blocker.unlink()
        wal.tier_flush(timeout=60)
        assert records_in_bucket(bucket, "t") == 100
        # The failure is over: the status stops reporting it.
        deadline = time.monotonic() + 30
        while (wal.tier_status() or {}).get("last_error") is not None:
            assert time.monotonic() < deadline, wal.tier_status()
            time.sleep(0.02)


def _append_worker(args: tuple[str, str, str, int]) -> int:
    path, url, topic, n = args
    with tidelog.open(path, tier=url, fsync_interval_ms=50, **GEOMETRY) as wal:
        writer = wal.writer(topic)
        for i in range(n):
            writer.append(value(topic, i))
        wal.tier_flush(timeout=120)
        return n


def test_processes_of_one_directory_share_the_upload(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    path = str(tmp_path / "log")
    jobs = [(path, bucket.as_uri(), f"p{i}", 60) for i in range(3)]
    with mp.get_context("spawn").Pool(3) as pool:
        assert pool.map(_append_worker, jobs) == [60, 60, 60]
    for i in range(3):
        assert records_in_bucket(bucket, f"p{i}") == 60
    # However many processes uploaded in turn, each claim is the same directory's.
    claims = [e["claim"] for d in deltas(bucket) for e in d["entries"] if "claim" in e]
    assert len({c["producer"] for c in claims}) == 1


def test_bad_tier_settings_are_refused(tmp_path: Path) -> None:
    log = tmp_path / "log"
    bucket = (tmp_path / "bucket").as_uri()
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, storage_options={"aws_region": "eu-west-1"})
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, tier_takeover=True)
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, local_retention_ms=1000)
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, tier=bucket, retention_ms=1000, local_retention_ms=5000)
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, tier="s3://bucket/x", storage_options={"aws_no_such_key": "1"})
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, tier="s3://bucket/x", storage_options={"aws_region": ["a"]})  # type: ignore[dict-item]
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, tier=bucket, storage_options={"aws_region": "eu-west-1"})
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, tier="not a url")
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(log, tier=bucket, backend="ring")
    with tidelog.open(log) as wal:
        assert wal.tier_status() is None
        with pytest.raises(tidelog.InvalidArgumentError):
            wal.tier_flush()
    with tidelog.open(log, tier=bucket) as wal:
        with pytest.raises(tidelog.InvalidArgumentError):
            wal.tier_flush(timeout=-1)
    # Booleans are written as the store expects them; a bucket nobody serves does not stop
    # the open (the status says why nothing is uploaded).
    options = {
        "aws_endpoint": "http://127.0.0.1:1",
        "aws_allow_http": True,
        "aws_region": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    with tidelog.open(tmp_path / "s3log", tier="s3://bucket/x", storage_options=options) as wal:
        wal.append("t", b"kept")
        status = wal.tier_status()
        assert status is not None and status["last_error"]
        with pytest.raises(tidelog.TierTimeoutError):
            wal.tier_flush(timeout=0.2)
    with tidelog.open(log, readonly=True, tier=bucket) as ro:
        assert ro.tier_status() is None


@contextlib.contextmanager
def local_s3(tls: bool) -> Iterator[tuple[str, dict[str, str]]]:
    """A local S3 API server (moto) with a fresh bucket, over TLS with a self-signed
    certificate when `tls`: its `s3://` URL and the options."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import generate_adhoc_ssl_context, make_server

    app = DomainDispatcherApplication(create_backend_app)
    tls_context = generate_adhoc_ssl_context() if tls else None
    server = make_server("127.0.0.1", 0, app, threaded=True, ssl_context=tls_context)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    bucket = f"tidelog-{uuid.uuid4().hex[:12]}"
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    urllib.request.urlopen(request, context=unverified if tls else None)
    options = {
        "aws_endpoint": endpoint,
        "aws_region": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    if not tls:
        options["aws_allow_http"] = "true"
    try:
        yield f"s3://{bucket}/prefix", options
    finally:
        server.shutdown()
        thread.join()


@pytest.fixture
def s3() -> Iterator[tuple[str, dict[str, str]]]:
    with local_s3(tls=False) as bucket:
        yield bucket


@pytest.fixture
def s3_tls() -> Iterator[tuple[str, dict[str, str]]]:
    with local_s3(tls=True) as bucket:
        yield bucket


def test_a_bucket_over_tls_checks_the_certificate(
    tmp_path: Path, s3_tls: tuple[str, dict[str, str]]
) -> None:
    # The HTTPS client (rustls) refuses a certificate no authority signed: the upload fails
    # and its error says why (the store's error with its causes), nothing is lost locally.
    # Told to accept it, every record goes up and reads back through TLS.
    url, options = s3_tls
    with tidelog.open(tmp_path / "log", tier=url, storage_options=options, **GEOMETRY) as wal:
        for i in range(50):
            wal.append("t", value("t", i))
        with pytest.raises(tidelog.TierTimeoutError):
            wal.tier_flush(timeout=3)
        status = wal.tier_status()
        assert status is not None and "certificate" in (status["last_error"] or "").lower()
    accepting = {**options, "allow_invalid_certificates": "true"}
    with tidelog.open(tmp_path / "log", tier=url, storage_options=accepting, **GEOMETRY) as wal:
        wal.tier_flush(timeout=60)
    remote = tidelog.open_remote(url, storage_options=accepting)
    values = remote.read_arrow("t", 0).column("value").to_pylist()
    assert values == [value("t", i) for i in range(50)]


def s3_objects(url: str, options: dict[str, str], into: Path) -> Path:
    """Copies every object under `url` into the directory `into` (same names), so the
    bucket's contents can be checked as a `file://` bucket's are."""
    import boto3

    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    client = boto3.client(
        "s3",
        endpoint_url=options["aws_endpoint"],
        region_name=options["aws_region"],
        aws_access_key_id=options["aws_access_key_id"],
        aws_secret_access_key=options["aws_secret_access_key"],
    )
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            path = into / obj["Key"].removeprefix(prefix + "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
    return into


def test_an_s3_bucket_gets_every_record(tmp_path: Path, s3: tuple[str, dict[str, str]]) -> None:
    url, options = s3
    with tidelog.open(tmp_path / "log", tier=url, storage_options=options, **GEOMETRY) as wal:
        for i in range(200):
            wal.append("orders", value("orders", i))
        wal.tier_flush(timeout=60)
        status = wal.tier_status()
        assert status is not None and status["lag_records"] == 0 and status["last_error"] is None
    copy = s3_objects(url, options, tmp_path / "copy")
    assert records_in_bucket(copy, "orders") == 200


def test_s3_conditional_puts_fence_another_directory(
    tmp_path: Path, s3: tuple[str, dict[str, str]]
) -> None:
    url, options = s3
    first = tidelog.open(tmp_path / "a", tier=url, storage_options=options, **GEOMETRY)
    first.append("t", b"x")
    first.tier_flush(timeout=60)
    with pytest.raises(tidelog.FencedError):
        tidelog.open(tmp_path / "b", tier=url, storage_options=options, **GEOMETRY)
    second = tidelog.open(
        tmp_path / "b", tier=url, storage_options=options, tier_takeover=True, **GEOMETRY
    )
    second.append("u", b"y")
    second.tier_flush(timeout=60)
    first.append("t", b"z")
    with pytest.raises(tidelog.FencedError):
        first.tier_flush(timeout=60)
    first.close()
    second.close()
    copy = s3_objects(url, options, tmp_path / "copy")
    claims = [e["claim"] for d in deltas(copy) for e in d["entries"] if "claim" in e]
    assert [c["epoch"] for c in claims] == [1, 2]
    assert records_in_bucket(copy, "t") == 1 and records_in_bucket(copy, "u") == 1


def _forked_child_uploads(path: str, bucket: str) -> int:
    # The parent's tier runtime has no threads here: the child's open makes its own.
    with open_tiered(Path(path), Path(bucket)) as wal:
        for i in range(80):
            wal.append("child", value("child", i))
        wal.tier_flush(timeout=60)
        return records_in_bucket(Path(bucket), "child")


def test_a_forked_child_uploads_with_a_runtime_of_its_own(tmp_path: Path) -> None:
    with open_tiered(tmp_path / "parent", tmp_path / "parent-bucket") as wal:
        for i in range(80):
            wal.append("p", value("p", i))
        wal.tier_flush(timeout=60)
        ctx = mp.get_context("fork")
        with ctx.Pool(1) as pool:
            got = pool.apply(
                _forked_child_uploads, (str(tmp_path / "child"), str(tmp_path / "child-bucket"))
            )
        assert got == 80
        # The parent's tier goes on.
        wal.append("p", value("p", 80))
        wal.tier_flush(timeout=60)
        assert records_in_bucket(tmp_path / "parent-bucket", "p") == 81


def test_open_remote_reads_what_the_producer_uploaded(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    with open_tiered(tmp_path / "log", bucket) as wal:
        for i in range(150):
            wal.append("r", value("r", i))
        wal.append("keyed", b"v", key=b"k", timestamp=1234)
        wal.tier_flush(timeout=60)
    # The directory is gone: the bucket alone answers.
    shutil.rmtree(tmp_path / "log")
    remote = tidelog.open_remote(bucket.as_uri())
    assert remote.topics() == ["keyed", "r"]
    info = remote.topic_info("r")
    assert (info["first_offset"], info["next_offset"]) == (0, 150)
    assert remote.read("r", 77).value == value("r", 77)
    records = remote.read_range("r", 100)
    assert [r.offset for r in records] == list(range(100, 150))
    assert [r.value for r in records] == [value("r", i) for i in range(100, 150)]
    assert len(remote.read_range("r", 0, 150, max_records=7)) == 7
    keyed = remote.read("keyed", 0)
    assert (keyed.key, keyed.value, keyed.timestamp) == (b"k", b"v", 1234)
    batch = remote.read_arrow("r", 10, 20)
    assert batch.column("offset").to_pylist() == list(range(10, 20))
    assert batch.column("value").to_pylist() == [value("r", i) for i in range(10, 20)]
    assert batch.column("topic").to_pylist() == ["r"] * 10
    assert remote.read_arrow("keyed", 0).column("key").to_pylist() == [b"k"]
    assert remote.read_arrow("r", 140, max_records=3).num_rows == 3
    with pytest.raises(tidelog.InvalidArgumentError):
        remote.read_arrow("r", 20, 10)
    with pytest.raises(tidelog.OffsetOutOfRangeError):
        remote.read("r", 150)
    with pytest.raises(tidelog.UnknownTopicError):
        remote.read("missing", 0)
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open_remote("not a url")


def test_local_retention_trims_the_disk_only(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    with open_tiered(tmp_path / "log", bucket, local_retention_bytes=65536) as wal:
        for i in range(300):
            wal.append("l", value("l", i))
        wal.tier_flush(timeout=60)
        deadline = time.monotonic() + 30
        while wal.topic_info("l").local_first_offset == 0:
            assert time.monotonic() < deadline, "local retention never ran"
            time.sleep(0.02)
        info = wal.topic_info("l")
        assert info.first_offset == 0 and info.records == 300
        # Offsets no longer on disk are read from the bucket, through the same calls.
        assert bytes(wal.read("l", 0).value) == value("l", 0)
        with wal.reader("l", start="earliest") as reader:
            assert [bytes(r.value) for r in reader] == [value("l", i) for i in range(300)]
        batch = wal.read_arrow("l", 0)
        assert batch.column("offset").to_pylist() == list(range(300))
        assert batch.column("value").to_pylist() == [value("l", i) for i in range(300)]
        with wal.reader("l", start="earliest") as reader:
            assert reader.seek_time(0) == 0
    assert tidelog.open_remote(bucket.as_uri()).read("l", 0).value == value("l", 0)


def test_a_remote_reader_seeks_tails_and_reads_arrow(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    wal = open_tiered(tmp_path / "log", bucket)
    for i in range(600):
        wal.append("t", value("t", i), timestamp=1_000_000 + 10 * i)
    wal.tier_flush(timeout=60)
    remote = tidelog.open_remote(bucket.as_uri())
    assert remote.topic_info("t")["objects"] > 4
    with remote.reader("t") as reader:
        assert [r.offset for r in reader] == list(range(600))
        assert reader.next() is None and reader.lag == 0
        reader.seek(123)
        assert reader.next().value == value("t", 123)
        assert reader.seek_time(1_000_000 + 10 * 400 - 1) == 400
        assert [r.offset for r in reader.next_batch(3)] == [400, 401, 402]
        assert reader.seek_time(2**63) == 600
        reader.seek(0)
        batch = reader.read_arrow(max_records=250, end=500)
        assert batch.column("offset").to_pylist() == list(range(250))
        assert reader.read_arrow(end=500).num_rows == 250
        assert reader.read_arrow(end=500).num_rows == 0 and reader.position == 500
        assert reader.read_arrow().column("value").to_pylist()[-1] == value("t", 599)
        with pytest.raises(tidelog.OffsetOutOfRangeError):
            reader.seek(601)
    assert reader.closed
    with pytest.raises(tidelog.ClosedError):
        reader.next()
    # The Arrow C stream of the bucket's records.
    table = pa.RecordBatchReader.from_stream(remote.scan("t", 100, 400)).read_all()
    assert table.column("offset").to_pylist() == list(range(100, 400))
    assert table.column("value").to_pylist()[0] == value("t", 100)
    assert remote.reader("t", start="latest").position == 600
    assert remote.reader("t", start=42).next().offset == 42
    with pytest.raises(tidelog.InvalidArgumentError, match="group"):
        remote.reader("t", "group")
    with pytest.raises(tidelog.UnknownTopicError):
        remote.reader("missing")

    # A tailing reader sees a later upload within its timeout, with no refresh of its own.
    tail = remote.reader("t", start="latest")
    started = time.monotonic()
    assert tail.next(timeout=0.1) is None
    assert time.monotonic() - started >= 0.1
    wal.append("t", value("t", 600))
    wal.tier_flush(timeout=60)
    got = tail.next(timeout=30)
    assert got is not None and got.value == value("t", 600)
    wal.close()


def test_a_remote_reader_on_s3_reads_every_record(
    tmp_path: Path, s3: tuple[str, dict[str, str]]
) -> None:
    url, options = s3
    with tidelog.open(tmp_path / "log", tier=url, storage_options=options, **GEOMETRY) as wal:
        for i in range(500):
            wal.append("s", value("s", i))
        wal.tier_flush(timeout=60)
    shutil.rmtree(tmp_path / "log")
    remote = tidelog.open_remote(url, storage_options=options)
    reader = remote.reader("s")
    values = []
    while True:
        batch = reader.read_arrow(max_records=64)
        if batch.num_rows == 0:
            break
        values += batch.column("value").to_pylist()
    assert values == [value("s", i) for i in range(500)]
    assert reader.seek_time(0) == 0


def test_retention_governs_the_bucket(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    with open_tiered(
        tmp_path / "log", bucket, retention_bytes=131072, tier_delete_delay_ms=0
    ) as wal:
        for i in range(800):
            wal.append("r", value("r", i))
        wal.tier_flush(timeout=60)
        deadline = time.monotonic() + 30
        while tidelog.open_remote(bucket.as_uri()).topic_info("r")["first_offset"] == 0:
            assert time.monotonic() < deadline, "the bucket was never trimmed"
            time.sleep(0.05)
        remote = tidelog.open_remote(bucket.as_uri())
        first = remote.topic_info("r")["first_offset"]
        assert remote.read("r", first).value == value("r", first)
        with pytest.raises(tidelog.OffsetOutOfRangeError):
            remote.read("r", first - 1)
        # Deleted once the manifest no longer names them: only named objects stay.
        named = {add["key"] for add in objects(bucket, "r") if add["first_offset"] >= first}
        while {str(p.relative_to(bucket)) for p in (bucket / "topics").rglob("*.extent")} != named:
            assert time.monotonic() < deadline, "the dropped objects were never deleted"
            time.sleep(0.05)


def test_tail_upload_ms_bounds_the_bucket_lag(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    with open_tiered(tmp_path / "log", bucket, tail_upload_ms=100) as wal:
        wal.append("t", b"one")
        deadline = time.monotonic() + 20
        while True:
            try:
                reader = tidelog.open_remote(bucket.as_uri()).reader("t")
                break
            except tidelog.UnknownTopicError:
                assert time.monotonic() < deadline, "never uploaded"
                time.sleep(0.05)
        assert reader.next(timeout=20).value == b"one"
        wal.append("t", b"two")
        got = reader.next(timeout=20)
        assert got is not None and got.value == b"two"
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.open(tmp_path / "other", tail_upload_ms=100)
    with pytest.raises(tidelog.InvalidArgumentError):
        open_tiered(tmp_path / "zero", bucket, tail_upload_ms=0)

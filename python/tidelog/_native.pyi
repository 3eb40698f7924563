"""Type stubs for the compiled module `tidelog._native` (the Rust engine's binding)."""

import os
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias, final

from typing_extensions import Buffer

__all__ = [
    "AppendHandle",
    "ArrowBatch",
    "ArrowStream",
    "Reader",
    "Record",
    "RecoveryReport",
    "RemoteLog",
    "RemoteReader",
    "RemoteRecord",
    "RingAppendHandle",
    "RingRecoverIter",
    "RingRecovery",
    "RingWal",
    "StagedWriter",
    "TopicInfo",
    "Wal",
    "Writer",
    "__version__",
    "bucket_stage_abort",
    "bucket_stage_commit",
    "bucket_stage_sink_batch",
    "bucket_stage_upload",
    "bucket_stage_wait",
    "cli",
    "open",
    "open_remote",
    "stage_abort",
    "stage_commit",
    "stage_sink_batch",
    "stage_wait",
]

__version__: str

_HeaderValue: TypeAlias = Buffer | str | None
# Record headers: (key, value) pairs in order, keys may repeat; a None value is null and a
# str value is stored as UTF-8. A mapping gives one header per key.
_Headers: TypeAlias = Iterable[tuple[str, _HeaderValue]] | Mapping[str, _HeaderValue]

@final
class ArrowStream:
    """A topic's records from a start to an end (`Wal.scan`, `RemoteLog.scan`) as an Arrow C
    stream, built in Rust as the consumer pulls each batch: pyarrow
    (`pyarrow.RecordBatchReader.from_stream`), polars, duckdb and other readers of the
    Arrow PyCapsule interface take it, with no pyarrow needed by tidelog. Columns as
    `read_arrow`'s: topic, offset, timestamp, key, value, headers. Each consumer (each call
    of `__arrow_c_stream__`) reads it from its start again."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The stream, a PyCapsule named "arrow_array_stream" (the schema is fixed: a
        requested one is for the consumer to cast to)."""

@final
class ArrowBatch:
    """One record batch built in Rust (`read_arrow`), handed over through the Arrow C data
    interface: `pyarrow.record_batch(batch)` imports it without a copy."""

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        """(schema capsule, array capsule) of the batch as a struct array."""
    def __len__(self) -> int: ...

@final
class Record:
    """One record. Its value is a read-only, zero-copy view of the mapped file.

    A Record keeps its data file mapped for as long as it (or any view of it) lives, so
    the view stays valid after the reader moves on, the Wal is closed or the file is
    deleted. It exports the buffer protocol: `memoryview(rec)`, `bytes(rec)` and
    `numpy.frombuffer(rec, dtype=numpy.uint8)` all see the value.
    """

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int:
        """Microseconds since the Unix epoch."""
    @property
    def key(self) -> bytes | None: ...
    @property
    def headers(self) -> list[tuple[str, bytes | None]]:
        """The headers in order as (key, value) pairs (a None value is null); empty when
        the record has none."""
    @property
    def value(self) -> memoryview:
        """The value as a read-only memoryview (no copy)."""
    def __len__(self) -> int: ...
    # CPython 3.12+ shows the buffer protocol as these methods; on 3.11 it is only the C
    # slot, so stubtest's allowlist names them (as typeshed declares them for `bytes`).
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class TopicInfo:
    @property
    def name(self) -> str: ...
    @property
    def first_offset(self) -> int:
        """First offset still stored: on disk, or in the tier's bucket (readers of the
        handle read those too)."""
    @property
    def local_first_offset(self) -> int:
        """First offset still on disk (`first_offset` without a tier)."""
    @property
    def next_offset(self) -> int: ...
    @property
    def durable_offset(self) -> int:
        """Offset after the last record known to be durable."""
    @property
    def records(self) -> int:
        """Records stored: `next_offset - first_offset`."""
    @property
    def bytes(self) -> int:
        """Bytes of record frames stored (headers included)."""
    @property
    def extents(self) -> int: ...
    @property
    def groups(self) -> list[str]: ...

@final
class RecoveryReport:
    """What the open found and repaired."""

    @property
    def files(self) -> int:
        """Data files found."""
    @property
    def extents(self) -> int:
        """Extents holding records."""
    @property
    def sealed_extents(self) -> int:
        """Extents trusted from their seal without scanning."""
    @property
    def scanned_extents(self) -> int:
        """Extents scanned record by record."""
    @property
    def scanned_bytes(self) -> int:
        """Bytes of records scanned."""
    @property
    def torn_tails(self) -> int:
        """Torn tails cut off (an extent whose scan ended on an invalid or incomplete record)."""
    @property
    def torn_records(self) -> int:
        """Records dropped from torn tails: the complete records of an incomplete batch."""
    @property
    def records_past_tear(self) -> int:
        """Valid records found past a torn tail, cut with it (never acknowledged as durable)."""
    @property
    def damaged_progress_slots(self) -> int:
        """Progress slots that failed their checks: their extents were scanned instead."""
    @property
    def repaired_from_copies(self) -> int:
        """Extents whose newest records differed from their commit copy and were rewritten
        from it (a power loss during that group commit's sync, or damage); in a read-only
        handle, read from it in memory instead."""
    @property
    def damaged_commit_copies(self) -> int:
        """Commit-copy slots that fail their checks (a torn header write, or damage): ignored,
        their records read from their own frames."""
    @property
    def deleted_remnants(self) -> int:
        """Extents of a deleted topic left by a deletion a crash cut short."""
    @property
    def dropped_extents(self) -> int:
        """Extents dropped because they followed a gap in their topic's offsets."""
    @property
    def ring_records_replayed(self) -> int:
        """Ring backend: records replayed from the ring into the data files."""
    @property
    def ring_records_held(self) -> int:
        """Ring backend: records in the ring that the data files already held."""

@final
class AppendHandle:
    """The offsets of an `append_async`, and a way to wait until they are durable."""

    @property
    def offset(self) -> int: ...
    @property
    def offsets(self) -> range: ...
    def is_durable(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool:
        """Waits until durable; False if `timeout` seconds passed first. Under
        `fsync="never"` only a flush or close ends the wait; Ctrl-C interrupts it."""

@final
class Writer:
    """Appends to one topic. Safe to share between threads."""

    @property
    def topic(self) -> str: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def fsync(self) -> Literal["interval", "always", "never"]: ...
    def append(
        self,
        value: Buffer,
        *,
        key: Buffer | None = None,
        timestamp: int | None = None,
        headers: _Headers | None = None,
    ) -> int: ...
    def append_batch(self, values: Iterable[Buffer]) -> range: ...
    def append_async(
        self,
        value: Buffer,
        *,
        key: Buffer | None = None,
        timestamp: int | None = None,
        headers: _Headers | None = None,
    ) -> AppendHandle: ...
    def flush(self) -> None: ...

@final
class Reader:
    """Reads one topic in offset order. A context manager; safe to share between threads
    (calls are serialised)."""

    @property
    def topic(self) -> str: ...
    @property
    def group(self) -> str | None: ...
    @property
    def visibility(self) -> Literal["published", "durable"]: ...
    @property
    def spin_us(self) -> int:
        """How long `next(timeout)` watches for a record before it sleeps, in microseconds."""
    @property
    def position(self) -> int:
        """The offset the next call returns."""
    @property
    def committed(self) -> int | None: ...
    @property
    def lag(self) -> int: ...
    def next(self, timeout: float | None = None) -> Record | None:
        """The next record; None when none is available (a read-only handle first catches
        up with what the writer published). With `timeout` (seconds) it waits
        up to that long for one to be appended, in this process or another (it sleeps on a
        futex the append wakes, without polling the directory). `close()` from another
        thread ends the wait with `ClosedError`."""
    def next_batch(
        self, max_records: int = 1000, max_bytes: int = 16777216, timeout: float | None = None
    ) -> list[Record]:
        """Up to `max_records` records and about `max_bytes` of values (at least one if any
        is available); with `timeout` (seconds), waits up to that long for a first one."""
    def wait(self, timeout: float | None = None) -> bool:
        """Waits up to `timeout` seconds (None: as long as it takes) for a record to read,
        without reading it: True when one is there. Ctrl-C and `close()` end it."""
    def seek(self, offset: int) -> None: ...
    def seek_time(self, timestamp_us: int) -> int:
        """Moves to the first record at or after `timestamp_us`; returns its offset."""
    def commit(self, offset: int | None = None) -> None:
        """Persists `offset` (default: `position`) as the group's committed offset."""
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __iter__(self) -> Iterator[Record]: ...
    def __next__(self) -> Record: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

@final
class Wal:
    """An open log directory. Use `tidelog.open`; a context manager; thread-safe."""

    @property
    def path(self) -> str: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def backend(self) -> Literal["mmap", "ring"]:
        """`"ring"` when a ring fronts the data files, else `"mmap"`."""
    def ring_stats(self) -> dict[str, int | str | bool] | None:
        """The ring in front of the data files (`device`, `capacity`, `trim_offset`,
        `next_offset`, `flushed_offset`, `free_bytes`, `checkpoints`, `direct_io`), or None
        without the ring backend."""
    def append(
        self,
        topic: str,
        value: Buffer,
        *,
        key: Buffer | None = None,
        timestamp: int | None = None,
        headers: _Headers | None = None,
    ) -> int: ...
    def append_batch(self, topic: str, values: Iterable[Buffer]) -> range: ...
    def append_async(
        self,
        topic: str,
        value: Buffer,
        *,
        key: Buffer | None = None,
        timestamp: int | None = None,
        headers: _Headers | None = None,
    ) -> AppendHandle: ...
    def append_arrow(self, topic: str, data: Any) -> range:
        """Appends a pyarrow binary/string array, or a RecordBatch/Table with a `value`
        column and optional `key`, `timestamp` and `headers`
        (list<struct<key: string, value: binary>>) columns, as one crash-atomic batch."""
    def writer(
        self, topic: str, *, fsync: Literal["interval", "always", "never"] | None = None
    ) -> Writer: ...
    def reader(
        self,
        topic: str,
        group: str | None = None,
        *,
        start: Literal["committed", "earliest", "latest"] | int = "committed",
        verify_checksums: bool = True,
        visibility: Literal["published", "durable"] = "published",
        spin_us: int = 0,
        commit: Literal["explicit", "auto", "strict"] = "explicit",
        auto_commit_every: int | None = None,
    ) -> Reader:
        """A reader of `topic`. `visibility="published"` returns every record whose append
        returned, in any process; `"durable"` only records already on disk (what survives a
        crash of the machine). `spin_us`: how long `next(timeout)` watches for a record on a
        CPU before it sleeps (at most 10000; 0 sleeps at once): a record appended meanwhile,
        in any process, arrives without a wake-up, at the cost of that CPU. With a `group`,
        `commit` says when its position persists: "explicit" (only `commit()`), "auto" (at
        least once: every `auto_commit_every` records, default 1000, the next read first
        commits what came before; a crash replays at most that many) or "strict" (at most
        once: each record's successor is committed before the record is returned). A
        read-only handle refuses "auto" and "strict" with `ReadOnlyError`."""
    def read(self, topic: str, offset: int) -> Record: ...
    def scan(
        self,
        topic: str,
        start: int | None = None,
        end: int | None = None,
        *,
        batch_records: int = 65536,
    ) -> ArrowStream:
        """`topic`'s records from `start` (default: the earliest, in the tier's bucket too)
        up to `end` (exclusive; default: what is published when the consumer gets there), as
        an Arrow C stream of batches of at most `batch_records` records, built two at a
        time on two threads when enough records are published. An `end` before `start` is
        `InvalidArgumentError`, as in `read_arrow`. Works on read-only handles."""
    def read_arrow(
        self,
        topic: str,
        start: int,
        end: int | None = None,
        max_records: int | None = None,
    ) -> Any:
        """A pyarrow.RecordBatch of offsets [start, end) with columns topic, offset,
        timestamp, key, value, headers (list<struct<key, value>>)."""
    def flush(self) -> None: ...
    def close(self) -> None: ...
    def topics(self) -> list[str]: ...
    def topic_info(self, topic: str) -> TopicInfo: ...
    def recovery_report(self) -> RecoveryReport:
        """What the open found and repaired (torn tails cut, records repaired from commit
        copies, damaged progress slots, ...)."""
    def commit_staged(self, job: str, parts: list[str]) -> dict[str, range]:
        """Publishes the staged `parts` of `job` exactly once, in order; returns the offsets
        the job got per topic. Other appends to those topics wait meanwhile. A job whose
        lock another holds for 2 s (an abort removing it) raises `TimeoutError`, the job
        still committed for a retry; one aborted meanwhile raises `InvalidArgumentError`."""
    def delete_topic(self, topic: str) -> None: ...
    def delete_group(self, topic: str, group: str) -> None: ...
    def delete_records(self, topic: str, before_offset: int) -> int:
        """Kafka's DeleteRecords: the records of `topic` below `before_offset` (at most its
        next offset) are no longer read by any handle (`OffsetOutOfRangeError`), groups
        committed below resume there, and extents wholly below it are freed. Durable on
        return. Returns the topic's first offset after the call (unchanged when
        `before_offset` is at or below it)."""
    def refresh(self) -> None: ...
    def disk_usage(self) -> dict[str, int]: ...
    def leader(self) -> dict[str, int] | None: ...
    def tier_flush(self, timeout: float | None = None) -> None:
        """Ends every topic's open extent and returns once the tier's bucket and manifest
        hold every record appended before the call. Raises `TierTimeoutError` after
        `timeout` seconds, `FencedError` once another directory took the prefix, `TierError`
        for a topic that cannot be uploaded, `InvalidArgumentError` without a tier. Beside
        other processes, the housekeeping leader uploads and this call waits for it."""
    def tier_status(self) -> dict[str, str | int | bool | None] | None:
        """`None` without a tier; else `url`, `producer`, `uploading` (this handle uploads:
        the housekeeping leader), `epoch`, `manifest_version`, `uploaded_objects`,
        `uploaded_bytes`, `pending_extents`, `pending_bytes`, `lag_records` (records of
        this handle's topics the manifest lacks), `retries`, `last_error` (`None` once a
        round of the upload thread's requests succeeds again) and `fenced`."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

@final
class RingAppendHandle:
    """A record appended to a `RingWal`: its offsets now, its durability later."""

    @property
    def offset(self) -> int:
        """The record's logical offset."""
    @property
    def end_offset(self) -> int:
        """The logical offset just past the record."""
    @property
    def done(self) -> bool:
        """True once the record is durable."""
    def wait(self, timeout: float | None = None) -> int | None:
        """Waits until the record is durable and returns the flushed offset (everything
        below it is durable); None if `timeout` seconds passed first."""

@final
class RingRecovery:
    """What the scan at open found."""

    @property
    def records(self) -> int:
        """Live records found (at or past the trim offset)."""
    @property
    def record_bytes(self) -> int:
        """Their value bytes."""
    @property
    def blocks(self) -> int:
        """Blocks accepted (data and padding)."""
    @property
    def start_offset(self) -> int:
        """Where the scan started: the block holding the trim offset."""
    @property
    def end_offset(self) -> int:
        """Where the valid log ends: appends continue here."""
    @property
    def stop_reason(self) -> str:
        """Why the scan stopped at `end_offset`."""
    @property
    def blocks_past_end(self) -> int:
        """Well-formed blocks past the end that were never acknowledged (ignored)."""
    @property
    def clean_shutdown(self) -> bool:
        """The previous session closed cleanly."""
    @property
    def clean_end_offset(self) -> int | None:
        """After a clean shutdown, the end it recorded."""

@final
class RingRecoverIter:
    """`(offset, value)` of every live record of a `RingWal`, read from its device."""

    def __iter__(self) -> Iterator[tuple[int, bytes]]: ...
    def __next__(self) -> tuple[int, bytes]: ...

@final
class RingWal:
    """A write-ahead ring on a block device or preallocated file. A context manager;
    thread-safe.

    A missing regular file is created at `capacity` bytes; a file or device that holds no
    ring is written only with `format=True`. `block_delay` is in seconds. A block is written
    when it holds `block_bytes`, after `block_delay`, or (with `seal_when_idle`) as soon as no
    other block is being written.
    """

    def __new__(
        cls,
        path: str | os.PathLike[str],
        capacity: int | None = None,
        *,
        direct_io: Literal["required", "auto", "off"] = "auto",
        format: bool = False,  # noqa: A002 (the documented option name)
        block_bytes: int | None = None,
        block_delay: float | None = None,
        seal_when_idle: bool = True,
        inflight_blocks: int | None = None,
        max_record_bytes: int | None = None,
        io_engine: Literal["auto", "io_uring", "threads"] = "auto",
    ) -> Self: ...
    @property
    def path(self) -> str: ...
    @property
    def capacity(self) -> int:
        """Total bytes, header slots included."""
    @property
    def ring_bytes(self) -> int:
        """Bytes of the record ring (capacity less the header slots)."""
    @property
    def trim_offset(self) -> int:
        """Records below this offset are gone."""
    @property
    def next_offset(self) -> int:
        """The logical offset just past the last appended record."""
    @property
    def flushed_offset(self) -> int:
        """Everything below this logical offset is durable."""
    @property
    def free_bytes(self) -> int: ...
    @property
    def io_engine(self) -> Literal["io_uring", "threads"]:
        """How block writes are issued."""
    @property
    def direct_io(self) -> bool:
        """True when the ring writes with `O_DIRECT`."""
    @property
    def closed(self) -> bool: ...
    @property
    def recovery(self) -> RingRecovery: ...
    def append(self, data: Buffer, *, space_timeout: float | None = None) -> RingAppendHandle:
        """Appends one record. Without `space_timeout` a full ring raises `RingFullError` at
        once; with it, waits up to that many seconds for a trim to make room."""
    def flush(self) -> int:
        """Writes everything appended and waits until it is durable; returns the flushed
        offset."""
    def trim(self, offset: int) -> None:
        """Discards every record below `offset` (at most `flushed_offset`)."""
    def reset(self) -> int:
        """Flushes, then trims everything; returns the flushed offset."""
    def recover(self) -> RingRecoverIter:
        """`(offset, value)` of every live record, up to the flushed offset as of this
        call."""
    def close(self) -> None:
        """Writes every appended record and records a clean shutdown. Idempotent."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

def cli(argv: list[str | os.PathLike[str]]) -> int:
    """Runs the `tidelog` command line `argv` (program name first) with the GIL released;
    returns its exit status. The `tidelog` console script calls it."""

def open(
    path: str | os.PathLike[str],
    *,
    fsync: Literal["interval", "always", "never"] | None = None,
    fsync_interval_ms: int = 200,
    readonly: bool = False,
    block_size: int | None = None,
    file_size: int | None = None,
    max_record_bytes: int | None = None,
    max_batch_records: int | None = None,
    max_batch_bytes: int | None = None,
    max_topics: int | None = None,
    retention_ms: int | None = None,
    retention_bytes: int | None = None,
    topic_retention: Mapping[str, Mapping[str, int]] | None = None,
    disk_bytes_max: int | None = None,
    space_wait_ms: int | None = None,
    group_wait_us: int | None = None,
    group_bytes_max: int | None = None,
    backend: Literal["mmap", "ring"] = "mmap",
    device: str | os.PathLike[str] | None = None,
    capacity: int | None = None,
    direct_io: Literal["required", "auto", "off"] = "auto",
    format: bool = False,  # noqa: A002 (the documented option name)
    staged_ttl_ms: int | None = 86400000,
    staged_adopt_bytes_min: int | None = 4194304,
    staged_adopt_bytes: int | None = None,
    exclusive: bool = False,
    tier: str | None = None,
    storage_options: Mapping[str, str | bool | int] | None = None,
    tier_takeover: bool = False,
    local_retention_ms: int | None = None,
    local_retention_bytes: int | None = None,
    tier_delete_delay_ms: int | None = 60000,
    tail_upload_ms: int | None = None,
    recovery_threads: int | None = None,
    record_format: Literal[1, 2] = 2,
) -> Wal:
    """Opens (creating if needed) the log directory at `path`.

    `fsync` defaults to "interval" ("always" with `backend="ring"`). `backend="ring"` puts a
    direct-I/O ring in front of the data files: `device` (default `path/ring.wal`), its
    `capacity` when the file is created (default 256 MiB), `direct_io` and `format` (write a
    new ring over a device or file that holds none) are its options, and are refused with
    the default backend. `staged_ttl_ms`: a staged job (`StagedWriter`) nobody committed or
    aborted is removed once its files have been idle this long (default a day; `None` keeps
    such jobs). `staged_adopt_bytes_min`: a staged segment holding at least this many bytes
    of records becomes a data file of its own when its job is published (no record is
    copied); smaller ones are copied into their topics. `staged_adopt_bytes` is its earlier
    name, deprecated (a `DeprecationWarning`).

    By default any number of processes of one host may open `path` at once and append to
    any topic (shared mode; refused on network file systems). `exclusive=True` allows one
    writing handle only: another open fails with `LockedError` (the ring backend always
    works so).

    `tier` puts object storage behind the directory: any URL the `object_store` crate
    parses (`s3://bucket/prefix`, `file:///path`, `memory://name/prefix`, ...). Sealed
    extents are uploaded as they are, and a manifest in the bucket says which objects hold
    which offsets; an extent leaves the local disk only once the bucket holds it.
    `storage_options` are the store's keys (`aws_endpoint`, `aws_region`,
    `aws_access_key_id`, `aws_secret_access_key`, `aws_allow_http`, ...; `google_*` for
    `gs://`, `azure_*` for `az://`); `AWS_*`, `GOOGLE_*` or `AZURE_*` environment variables
    fill those not given, and an unknown key is refused. Opening a
    directory on a prefix another directory holds raises `FencedError` unless
    `tier_takeover=True`. `retention_ms` / `retention_bytes` (and `topic_retention`) govern
    the bucket: the uploading handle drops the oldest objects from the manifest, and deletes
    them `tier_delete_delay_ms` later (default a minute, so readers of an older manifest
    still find them; objects a crash left unnamed go the same way).
    `local_retention_ms` / `local_retention_bytes` (Kafka's names) limit the local copy,
    each at most the retention's; a limit not given is the retention's. Readers, `read` and
    `read_arrow` of the handle read offsets no longer on disk from the bucket
    (`TopicInfo.first_offset` counts them; `local_first_offset` is the disk's).
    `tail_upload_ms`: at most this long after an append its record is in the bucket (open
    extents are ended and uploaded; a short time makes many small objects). A read-only
    handle has no tier. `recovery_threads`: topics an open checks at once (default 8, 1: one
    at a time, at most 64).

    `record_format`: how the data files this handle creates store records. 2 (the default):
    one batch frame per append, a few bytes per record; 1: a 40-byte frame per record, which
    builds before format 2 can read. Every build reads both, in any mix.
    """

@final
class RemoteRecord:
    """A record read from a bucket (`RemoteLog`): its bytes are its own."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int:
        """Microseconds since the Unix epoch."""
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes: ...
    @property
    def headers(self) -> list[tuple[str, bytes | None]]:
        """The headers in order as (key, value) pairs; empty when the record has none."""

@final
class RemoteReader:
    """Reads one topic of a bucket in offset order (`RemoteLog.reader`), up to the end of
    the manifest its `RemoteLog` last read. The objects after the position are fetched
    ahead, several requests in flight. Calls from several threads are serialised."""

    @property
    def topic(self) -> str: ...
    @property
    def position(self) -> int:
        """The offset the next record read has."""
    @property
    def lag(self) -> int:
        """Records the manifest last read holds at or after the position."""
    @property
    def closed(self) -> bool: ...
    def next(self, timeout: float | None = None) -> RemoteRecord | None:
        """The next record, or None at the end of what the manifest holds. With `timeout`
        (seconds), reads the manifest's new deltas every 200 ms (one LIST each) until a
        record arrives or the timeout passes."""
    def next_batch(self, max_records: int = 1000, max_bytes: int = 16777216) -> list[RemoteRecord]:
        """Up to `max_records` records and about `max_bytes` of values (at least one record
        if any is held); an empty list at the end."""
    def read_arrow(self, max_records: int | None = None, end: int | None = None) -> Any:
        """The next records before `end`, at most `max_records`, as a pyarrow.RecordBatch
        (columns as `Wal.read_arrow`; empty at the end). The position moves past them."""
    def seek(self, offset: int) -> None: ...
    def seek_time(self, timestamp_us: int) -> int:
        """Moves to the first record at or after `timestamp_us` (or the end); returns the
        new position."""
    def close(self) -> None:
        """Closes the reader; its reads under way are cancelled."""
    def __iter__(self) -> Iterator[RemoteRecord]: ...
    def __next__(self) -> RemoteRecord: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

@final
class RemoteLog:
    """A read-only handle on the records a tier's bucket holds, with no local directory
    (`open_remote`). It reads the manifest as it was when opened or last refreshed; every
    record is checked as a local one is (the extent's identity and salt, each frame's
    checksum and offset): damage raises `TierCorruptionError`."""

    @property
    def version(self) -> int:
        """The manifest version this handle reads."""
    def topics(self) -> list[str]: ...
    def topic_info(self, topic: str) -> dict[str, str | int]:
        """`name`, `first_offset`, `next_offset`, `objects`, `bytes`."""
    def read(self, topic: str, offset: int) -> RemoteRecord: ...
    def read_range(
        self, topic: str, start: int, end: int | None = None, max_records: int | None = None
    ) -> list[RemoteRecord]:
        """The records from `start` up to `end` (exclusive, clamped to what the bucket
        holds), at most `max_records`."""
    def read_arrow(
        self, topic: str, start: int, end: int | None = None, max_records: int | None = None
    ) -> Any:
        """A pyarrow.RecordBatch of offsets [start, end) (end capped at what the bucket
        holds) with columns topic, offset, timestamp, key, value, headers, as `Wal.read_arrow`."""
    def scan(
        self,
        topic: str,
        start: int | None = None,
        end: int | None = None,
        *,
        batch_records: int = 65536,
    ) -> ArrowStream:
        """As `Wal.scan`, from the bucket (objects fetched ahead)."""
    def reader(
        self,
        topic: str,
        group: str | None = None,
        *,
        start: Literal["committed", "earliest", "latest"] | int = "earliest",
        verify_checksums: bool = True,
    ) -> RemoteReader:
        """A reader of `topic` from `start` ("committed" is "earliest": there is no group).
        A bucket has no home for a group's cursor yet: a group raises
        `InvalidArgumentError`."""
    def refresh(self) -> None:
        """Reads the manifest's deltas written since the open or the last refresh."""

def open_remote(
    url: str, *, storage_options: Mapping[str, str | bool | int] | None = None
) -> RemoteLog:
    """Opens the tier bucket at `url` read-only, with no local directory: the records a
    producer's `tier=` uploaded. `storage_options` as for `open`. Raises
    `UnknownTopicError`, `OffsetOutOfRangeError`, `TierError` and `TierCorruptionError`."""

@final
class StagedWriter:
    """One part of a staged job (e.g. one Spark task attempt): records written without the
    directory's lock, invisible until a commit names the part. Thread-safe.

    `record_format`: how its segments store records, as `open`'s: 2 (the default), the records
    of each append in batch frames; 1, a frame per record (what builds before format 2
    publish). A directory opened with `record_format=1` copies segments of format 2 rather
    than adopting them."""

    def __new__(
        cls,
        path: str | os.PathLike[str],
        job: str,
        part: str,
        *,
        record_format: Literal[1, 2] = 2,
    ) -> Self: ...
    @property
    def part(self) -> str: ...
    @property
    def records(self) -> int:
        """Records staged so far."""
    def append(
        self,
        topic: str,
        value: Buffer,
        *,
        key: Buffer | None = None,
        timestamp: int | None = None,
        headers: _Headers | None = None,
    ) -> None: ...
    def append_arrow(self, topic: str, data: Any) -> None:
        """Stages a pyarrow binary/string array, or a batch/table with a `value` column and
        optional `key`, `timestamp` and `headers` columns."""
    def finish(self) -> int:
        """Makes the part durable and complete; returns its record count."""

def stage_commit(
    path: str | os.PathLike[str],
    job: str,
    parts: list[str],
    *,
    sink: str | None = None,
    batch: int | None = None,
) -> None:
    """Records the commit of `job`; the process holding the directory (or the next to open
    it) publishes it."""

def stage_wait(
    path: str | os.PathLike[str],
    job: str,
    timeout: float = 60.0,
    *,
    sink: str | None = None,
    batch: int | None = None,
) -> None:
    """Waits until committed `job` is published; `TimeoutError` after `timeout` seconds.
    A job set aside as one that cannot be published (a damaged segment, a record over the
    directory's limits) raises `InvalidArgumentError` with the reason at once; so does a
    job with no commit and no record of its publish (aborted, never committed). With `sink`
    and `batch` (as committed) the sink's ledger at or past `batch` counts as published
    (a replayed micro-batch)."""

def stage_abort(path: str | os.PathLike[str], job: str) -> None:
    """Discards a job that is not being published (or one set aside)."""

def stage_sink_batch(path: str | os.PathLike[str], sink: str) -> int | None:
    """The last micro-batch id streaming sink `sink` published, or None."""

# Staged jobs through a tier's bucket (writers that cannot reach the producer's directory).

def bucket_stage_upload(
    path: str | os.PathLike[str],
    job: str,
    part: str,
    url: str,
    *,
    storage_options: Mapping[str, str | bool | int] | None = None,
) -> None:
    """Puts part `part` of `job`, staged and finished with `StagedWriter` in the directory
    `path` (a task's own), into the bucket at `url`: its segments, then its manifest."""

def bucket_stage_commit(
    url: str,
    job: str,
    parts: list[str],
    *,
    sink: str | None = None,
    batch: int | None = None,
    storage_options: Mapping[str, str | bool | int] | None = None,
) -> bool:
    """Commits `job` in the bucket (put-if-absent): True when this commit is the job's,
    False when another commit of the same `sink` and `batch` came first (a replay; remove
    this one's parts with `bucket_stage_abort(url, job, parts)`). The producer whose tier
    the bucket is publishes it. `commit_staged(url, ...)` does this and waits."""

def bucket_stage_wait(
    url: str,
    job: str,
    timeout: float = 60.0,
    *,
    storage_options: Mapping[str, str | bool | int] | None = None,
) -> dict[str, tuple[int, int]]:
    """Waits until the producer published committed `job`: the offsets it got per topic,
    `(start, end)`. `TierTimeoutError` (its `waiting_for` says what the bucket shows of the
    producer) after `timeout`; `InvalidArgumentError` with the reason for a job the
    producer set aside."""

def bucket_stage_abort(
    url: str,
    job: str,
    parts: list[str] | None = None,
    *,
    storage_options: Mapping[str, str | bool | int] | None = None,
) -> None:
    """Removes uncommitted `job` from the bucket (a committed one is the producer's:
    `InvalidArgumentError`), or with `parts` only those parts."""

def bucket_stage_sink_batch(
    url: str, sink: str, *, storage_options: Mapping[str, str | bool | int] | None = None
) -> int | None:
    """The last micro-batch of streaming sink `sink` the bucket's producer published."""

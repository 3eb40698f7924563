"""tidelog: a crash-safe, embedded write-ahead log organised by topic.

>>> import tidelog
>>> with tidelog.open("data") as wal:                      # doctest: +SKIP
...     offset = wal.append("orders", b"order #1")        # -> 0, 1, 2, ...
...     for record in wal.reader("orders", "billing"):    # zero-copy records
...         print(record.offset, bytes(record))
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from tidelog import exceptions
from tidelog._native import (
    AppendHandle,
    ArrowStream,
    Reader,
    Record,
    RecoveryReport,
    RemoteLog,
    RemoteReader,
    RemoteRecord,
    RingAppendHandle,
    RingRecovery,
    RingWal,
    StagedWriter,
    TopicInfo,
    Wal,
    Writer,
    __version__,
    bucket_stage_abort,
    bucket_stage_commit,
    bucket_stage_sink_batch,
    bucket_stage_upload,
    bucket_stage_wait,
    open,
    open_remote,
    stage_abort,
    stage_commit,
    stage_sink_batch,
    stage_wait,
)
from tidelog.exceptions import (
    CapacityError,
    CapacityMismatchError,
    ClosedError,
    CorruptionError,
    DiskFullError,
    FencedError,
    ForkedError,
    InternalError,
    InvalidArgumentError,
    InvalidTopicError,
    LimitExceededError,
    LockedError,
    LockTimeoutError,
    NotFormattedError,
    OffsetOutOfRangeError,
    PoisonedError,
    ReadOnlyError,
    RecordTooLargeError,
    RingFullError,
    TidelogError,
    TierCorruptionError,
    TierError,
    TierTimeoutError,
    UnknownGroupError,
    UnknownTopicError,
    UnsupportedVersionError,
)

__all__ = [
    "AppendHandle",
    "ArrowStream",
    "CapacityError",
    "CapacityMismatchError",
    "ClosedError",
    "CorruptionError",
    "DiskFullError",
    "FencedError",
    "ForkedError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidTopicError",
    "LimitExceededError",
    "LockTimeoutError",
    "LockedError",
    "NotFormattedError",
    "OffsetOutOfRangeError",
    "PoisonedError",
    "ReadOnlyError",
    "Reader",
    "Record",
    "RecordTooLargeError",
    "RecoveryReport",
    "RemoteLog",
    "RemoteReader",
    "RemoteRecord",
    "RingAppendHandle",
    "RingFullError",
    "RingRecovery",
    "RingWal",
    "StagedWriter",
    "TidelogError",
    "TierCorruptionError",
    "TierError",
    "TierTimeoutError",
    "TopicInfo",
    "UnknownGroupError",
    "UnknownTopicError",
    "UnsupportedVersionError",
    "Wal",
    "Writer",
    "__version__",
    "bucket_stage_abort",
    "bucket_stage_commit",
    "bucket_stage_sink_batch",
    "bucket_stage_upload",
    "bucket_stage_wait",
    "commit_staged",
    "exceptions",
    "open",
    "open_remote",
    "stage_abort",
    "stage_commit",
    "stage_sink_batch",
    "stage_wait",
]


def __getattr__(name: str) -> Any:
    # `tidelog.aio` without importing asyncio for every user of tidelog.
    if name == "aio":
        import tidelog.aio

        return tidelog.aio
    raise AttributeError(f"module 'tidelog' has no attribute {name!r}")


def _is_url(path: str | bytes) -> bool:
    """A bucket URL (`s3://...`, `file:///...`, `memory://...`), not a directory."""
    text = path.decode() if isinstance(path, bytes) else path
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text) is not None


# How long a committer waits for the directory's holder before it tries to open it again.
_COMMIT_WAIT_SLICE = 0.1


def commit_staged(
    path: str | os.PathLike[str],
    job: str,
    parts: Iterable[str],
    *,
    sink: str | None = None,
    batch: int | None = None,
    timeout: float = 60.0,
    storage_options: Mapping[str, str | bool | int] | None = None,
    **options: Any,
) -> None:
    """Commits the staged `parts` of `job` (written with `StagedWriter`) and returns once
    they are published, exactly once. It opens `path` with `options` (as `tidelog.open`)
    to publish them itself; when another process holds the directory for writing, that
    process publishes them, and this waits up to `timeout` seconds (opening the directory
    itself should that process let go first). With `sink` and `batch` (a streaming sink's
    micro-batch id) the publish also records `batch` as the sink's last, so
    `stage_sink_batch` can recognise a replayed micro-batch. A part named twice or not
    staged is `InvalidArgumentError`; so is a job set aside at its publish as one that
    cannot be published (a damaged segment, a record over the directory's limits), with
    the reason: `stage_abort` removes it; and so is a job aborted (by `stage_abort`
    elsewhere) before it was published. Committing a published job again does nothing.

    `path` may be a tier's bucket URL (with `storage_options`): the parts were put there
    with `bucket_stage_upload`; the commit is written there, and the producer whose tier
    the bucket is publishes the job into its directory. A replayed micro-batch (another
    commit of the same `sink` and `batch` came first) has its own parts removed. Without a
    producer, `TierTimeoutError` after `timeout` says what the bucket shows."""
    parts = list(parts)
    if _is_url(os.fspath(path)):
        url = os.fspath(path)
        kwargs: dict[str, Any] = {"storage_options": storage_options}
        recorded = bucket_stage_commit(url, job, parts, sink=sink, batch=batch, **kwargs)
        if not recorded:
            # A replay: the first commit of this micro-batch stands. Its parts go, and this
            # waits for that commit's publish, so the next batch never overtakes it.
            bucket_stage_abort(url, job, parts, **kwargs)
        bucket_stage_wait(url, job, timeout, **kwargs)
        return
    if storage_options is not None:
        raise exceptions.InvalidArgumentError(
            "storage_options are for a bucket URL, not a directory", name="storage_options"
        )
    stage_commit(path, job, parts, sink=sink, batch=batch)
    if not parts:
        return  # nothing to publish: the commit removed what the job staged
    deadline = time.monotonic() + timeout
    while True:
        wait = min(_COMMIT_WAIT_SLICE, max(0.0, deadline - time.monotonic()))
        try:
            # Exclusive: beside a holder this waits for it to publish, and joins no
            # other process's shared directory.
            wal = open(path, **{**options, "exclusive": True})
        except exceptions.LockedError:
            # The holder publishes it; should it close before it saw the commit, the next
            # open does.
            pass
        else:
            # Opening published every committed job, or set aside one that cannot be.
            wal.close()
        try:
            # Returns at once once published; raises for a job set aside.
            stage_wait(path, job, wait, sink=sink, batch=batch)
            return
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job {job!r} was not published within {timeout} s: does the process "
                    "holding the directory run?"
                ) from None

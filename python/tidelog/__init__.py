"""tidelog: a crash-safe, embedded write-ahead log organised by topic.

>>> import tidelog
>>> with tidelog.open("data") as wal:                      # doctest: +SKIP
...     offset = wal.append("orders", b"order #1")        # -> 0, 1, 2, ...
...     for record in wal.reader("orders", "billing"):    # zero-copy records
...         print(record.offset, bytes(record))
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from tidelog import exceptions
from tidelog._native import (
    AppendHandle,
    Reader,
    Record,
    RingAppendHandle,
    RingRecovery,
    RingWal,
    StagedWriter,
    TopicInfo,
    Wal,
    Writer,
    __version__,
    open,
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
    ForkedError,
    InternalError,
    InvalidArgumentError,
    InvalidTopicError,
    LimitExceededError,
    LockedError,
    NotFormattedError,
    OffsetOutOfRangeError,
    PoisonedError,
    ReadOnlyError,
    RecordTooLargeError,
    RingFullError,
    TidelogError,
    UnknownGroupError,
    UnknownTopicError,
    UnsupportedVersionError,
)

__all__ = [
    "AppendHandle",
    "CapacityError",
    "CapacityMismatchError",
    "ClosedError",
    "CorruptionError",
    "DiskFullError",
    "ForkedError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidTopicError",
    "LimitExceededError",
    "LockedError",
    "NotFormattedError",
    "OffsetOutOfRangeError",
    "PoisonedError",
    "ReadOnlyError",
    "Reader",
    "Record",
    "RecordTooLargeError",
    "RingAppendHandle",
    "RingFullError",
    "RingRecovery",
    "RingWal",
    "StagedWriter",
    "TidelogError",
    "TopicInfo",
    "UnknownGroupError",
    "UnknownTopicError",
    "UnsupportedVersionError",
    "Wal",
    "Writer",
    "__version__",
    "commit_staged",
    "exceptions",
    "open",
    "stage_abort",
    "stage_commit",
    "stage_sink_batch",
    "stage_wait",
]


def commit_staged(
    path: str | os.PathLike[str],
    job: str,
    parts: Iterable[str],
    *,
    sink: str | None = None,
    batch: int | None = None,
    timeout: float = 60.0,
    **options: Any,
) -> None:
    """Commits the staged `parts` of `job` (written with `StagedWriter`) and returns once
    they are published, exactly once. It opens `path` with `options` (as `tidelog.open`)
    to publish them itself; when another process holds the directory for writing, that
    process publishes them, and this waits up to `timeout` seconds. With `sink` and `batch`
    (a streaming sink's micro-batch id) the publish also records `batch` as the sink's last,
    so `stage_sink_batch` can recognise a replayed micro-batch."""
    stage_commit(path, job, list(parts), sink=sink, batch=batch)
    try:
        wal = open(path, **options)
    except exceptions.LockedError:
        stage_wait(path, job, timeout)
        return
    # Opening published every committed job.
    wal.close()

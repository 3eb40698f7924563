"""tidelog: a crash-safe, embedded write-ahead log organised by topic.

>>> import tidelog
>>> with tidelog.open("data") as wal:                      # doctest: +SKIP
...     offset = wal.append("orders", b"order #1")        # -> 0, 1, 2, ...
...     for record in wal.reader("orders", "billing"):    # zero-copy records
...         print(record.offset, bytes(record))
"""

from tidelog import exceptions
from tidelog._native import (
    AppendHandle,
    Reader,
    Record,
    RingAppendHandle,
    RingRecovery,
    RingWal,
    TopicInfo,
    Wal,
    Writer,
    __version__,
    open,
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
    "TidelogError",
    "TopicInfo",
    "UnknownGroupError",
    "UnknownTopicError",
    "UnsupportedVersionError",
    "Wal",
    "Writer",
    "__version__",
    "exceptions",
    "open",
]

"""Every exception tidelog raises, in one place.

The tree mirrors the Rust engine's `tidelog::Error` enum one to one (the binding maps each
variant here and nowhere else). Classes that mean "bad input" also derive from `ValueError`,
lookups from `LookupError`/`IndexError`, and OS-level failures from `OSError` (with `errno`
set), so generic handlers keep working. An operating-system error with no tidelog meaning
(`Error::Io`) is raised as the built-in `OSError` subclass for its errno
(`FileNotFoundError`, `PermissionError`, ...), with `filename` set.
"""

from __future__ import annotations

__all__ = [
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
    "RecordTooLargeError",
    "RingFullError",
    "TidelogError",
    "TierCorruptionError",
    "TierError",
    "TierTimeoutError",
    "UnknownGroupError",
    "UnknownTopicError",
    "UnsupportedVersionError",
]


class TidelogError(Exception):
    """Base class of every tidelog error."""


class InvalidArgumentError(TidelogError, ValueError):
    """An argument or option is not valid. `name` is the argument, `reason` why."""

    def __init__(self, message: str, name: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.reason = reason


class InvalidTopicError(InvalidArgumentError):
    """A topic, group, staged job or part name broke the naming rule (`name` is the rejected
    name)."""


class LimitExceededError(TidelogError, ValueError):
    """A configured limit was exceeded: `limit` (the option), `value`, `max`."""

    def __init__(self, message: str, limit: str = "", value: int = 0, max: int = 0) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.max = max


class RecordTooLargeError(LimitExceededError):
    """A record (or batch) is larger than `max_record_bytes` (or `max_batch_bytes`)."""


class CapacityError(TidelogError):
    """There is no room for the append: the disk cap (`disk_bytes_max`), the disk or a ring
    is full. Nothing was written; appends work again once consumers, retention or a trim free
    space."""


class DiskFullError(CapacityError, OSError):
    """The file system is full (`errno.ENOSPC`); `filename` is the file that could not grow."""


class RingFullError(CapacityError):
    """The ring has no room for the record until it is trimmed. Nothing was written.
    `requested_bytes` is the ring space the record needs, `free_bytes` what is free now."""

    def __init__(self, message: str, requested_bytes: int = 0, free_bytes: int = 0) -> None:
        super().__init__(message)
        self.requested_bytes = requested_bytes
        self.free_bytes = free_bytes


class LockedError(TidelogError, OSError):
    """Another handle, in this or another process, holds the directory for writing."""


class LockTimeoutError(TidelogError, TimeoutError):
    """A lock another process of the directory holds was not released within the wait: its
    holder is alive but stopped or stuck. `lock` names it, `holder_pid` and `waited_ms`
    say who and how long. A dead holder's lock is taken over, never reported."""

    lock: str
    holder_pid: int
    waited_ms: int


class ReadOnlyError(TidelogError):
    """The handle was opened read-only and the call writes."""


class ClosedError(TidelogError, ValueError):
    """The Wal (or the reader) was closed."""


class ForkedError(TidelogError):
    """The handle was opened in a parent process before `os.fork()`; open the directory again
    in this process. `opener_pid` is the parent's pid."""

    def __init__(self, message: str, opener_pid: int = 0) -> None:
        super().__init__(message)
        self.opener_pid = opener_pid


class PoisonedError(TidelogError, OSError):
    """An earlier sync failed, so nothing since is known durable: every append and flush
    fails until the directory is reopened. `errno` is the original failure's."""


class CorruptionError(TidelogError):
    """A stored record failed validation: `topic`, `offset`, `path`, `position`, `reason`."""

    def __init__(
        self,
        message: str,
        topic: str = "",
        offset: int = 0,
        path: str = "",
        position: int = 0,
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.offset = offset
        self.path = path
        self.position = position
        self.reason = reason


class UnknownTopicError(TidelogError, LookupError):
    """The topic does not exist (`topic`)."""

    def __init__(self, message: str, topic: str = "") -> None:
        super().__init__(message)
        self.topic = topic


class UnknownGroupError(TidelogError, LookupError):
    """The consumer group has no cursor on the topic (`topic`, `group`)."""

    def __init__(self, message: str, topic: str = "", group: str = "") -> None:
        super().__init__(message)
        self.topic = topic
        self.group = group


class OffsetOutOfRangeError(TidelogError, IndexError):
    """The offset is not stored: `first <= offset < next` does not hold (it was trimmed by
    retention or consumption, or is not written yet)."""

    def __init__(
        self, message: str, topic: str = "", offset: int = 0, first: int = 0, next: int = 0
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.offset = offset
        self.first = first
        self.next = next


class UnsupportedVersionError(TidelogError):
    """A data file was written by a newer format version than this build reads."""


class NotFormattedError(TidelogError):
    """The ring's device or file holds no valid ring header (`path`, `reason`); open it with
    `format=True` to write a new, empty ring there."""

    def __init__(self, message: str, path: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class CapacityMismatchError(TidelogError, ValueError):
    """Two sizes of a ring disagree (`what`): the capacity asked for, the ring header's, the
    file's or the device's. `expected` and `found` are in bytes; `path` is the target."""

    def __init__(
        self, message: str, path: str = "", what: str = "", expected: int = 0, found: int = 0
    ) -> None:
        super().__init__(message)
        self.path = path
        self.what = what
        self.expected = expected
        self.found = found


class TierError(TidelogError, OSError):
    """A request to the tier's bucket failed, or a topic could not be uploaded there
    (`op`, `key`, `reason`). Uploads are retried; local data is not affected."""

    def __init__(self, message: str, op: str = "", key: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.op = op
        self.key = key
        self.reason = reason


class TierCorruptionError(TierError):
    """An object of the tier's manifest failed its checks or breaks its rules (`key`,
    `reason`)."""


class FencedError(TierError):
    """Another directory holds the tier's prefix (`url`, `epoch`, `producer`): this handle
    uploads nothing more there. Open with `tier_takeover=True` to take the prefix over."""

    def __init__(self, message: str, url: str = "", epoch: int = 0, producer: str = "") -> None:
        super().__init__(message)
        self.url = url
        self.epoch = epoch
        self.producer = producer


class TierTimeoutError(TierError, TimeoutError):
    """A wait on the tier ran out of time after `waited_ms`: `tier_flush` with
    `pending_records` records not yet in the bucket, or a commit of a staged job in a bucket
    that its producer did not publish in time. `waiting_for` says what it waited for and
    what the bucket says of it."""

    def __init__(
        self, message: str, waited_ms: int = 0, pending_records: int = 0, waiting_for: str = ""
    ) -> None:
        super().__init__(message)
        self.waited_ms = waited_ms
        self.pending_records = pending_records
        self.waiting_for = waiting_for


class InternalError(TidelogError):
    """A bug in tidelog (a Rust panic, caught at the boundary). Please report it."""

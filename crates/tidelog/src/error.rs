//! The one error type of the engine.
//!
//! Every variant names what went wrong and where (topic, offset, path, limit), so a caller
//! (or the Python binding, which mirrors this enum one to one) never parses a message.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure tidelog reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed. `op` names the operation, `path` the file.
    Io {
        /// What we were doing, e.g. `"create data file"` or `"msync"`.
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error (its `raw_os_error()` is the errno).
        source: io::Error,
    },
    /// The disk is full: space for a block or file could not be reserved.
    /// Nothing was written; appends work again once space is freed.
    DiskFull {
        /// The file that could not grow.
        path: PathBuf,
        /// The bytes we tried to reserve.
        requested_bytes: u64,
    },
    /// Stored bytes failed validation inside the region that was durable.
    Corruption {
        /// The topic whose record is bad (empty when the topic is unknown).
        topic: String,
        /// The record offset that could not be read.
        offset: u64,
        /// The data file.
        path: PathBuf,
        /// The byte position inside the data file.
        position: u64,
        /// What check failed.
        reason: String,
    },
    /// A name broke the naming rule topics share with groups, staged jobs and parts.
    InvalidTopic {
        /// The rejected name.
        name: String,
        /// The rule it broke.
        rule: &'static str,
    },
    /// A configured limit was exceeded.
    LimitExceeded {
        /// The limit's name in [`crate::Config`], e.g. `"max_record_bytes"`.
        limit: &'static str,
        /// The value that was asked for.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// A configuration value or argument is not valid.
    InvalidArgument {
        /// The argument or config field.
        name: &'static str,
        /// Why it is rejected.
        reason: String,
    },
    /// Another handle (in this or another process) holds the directory for writing.
    Locked {
        /// The data directory.
        path: PathBuf,
    },
    /// A lock another process of the directory holds (shared mode) was not released within
    /// the wait: its holder is alive but stopped or stuck (a process stopped by `SIGSTOP`, a
    /// debugger). A dead holder's lock is taken over, never reported. Nothing was written;
    /// a retry may succeed.
    LockTimeout {
        /// The lock: `"topic"`, `"topic sync"`, `"allocator"`, `"topic table"`, `"cursor"`, or
        /// `"staged publish"` (the topic is reserved for a staged job being published,
        /// by this process or, after it died, by the next publisher).
        lock: &'static str,
        /// The pid of the process holding it.
        holder_pid: u32,
        /// How long this call waited.
        waited_ms: u64,
    },
    /// The handle was opened read-only and the operation writes.
    ReadOnly,
    /// The handle was closed.
    Closed,
    /// The topic does not exist.
    UnknownTopic {
        /// The topic asked for.
        topic: String,
    },
    /// The offset is not in the topic's range `[first, next)`.
    OffsetOutOfRange {
        /// The topic.
        topic: String,
        /// The requested offset.
        offset: u64,
        /// The first offset still stored.
        first: u64,
        /// The offset the next append will get.
        next: u64,
    },
    /// An earlier sync failed, so this handle no longer knows what is durable: every append
    /// and flush fails until the directory is reopened (recovery then finds what survived).
    Poisoned {
        /// The failed operation, e.g. `"msync"`.
        op: &'static str,
        /// The file it failed on.
        path: PathBuf,
        /// The errno of the original failure, if it had one.
        errno: Option<i32>,
    },
    /// The consumer group has no cursor on the topic.
    UnknownGroup {
        /// The topic.
        topic: String,
        /// The group asked for.
        group: String,
    },
    /// The handle was opened in another process, which then forked this one. Open the
    /// directory again in this process (after the parent closed it, or read-only).
    Forked {
        /// The process that opened the handle.
        opener_pid: u32,
    },
    /// The ring has no room for the record until it is trimmed, or no block buffer came free
    /// within the ring's buffer wait (5 s: its device completed no write). Nothing was
    /// written; a retry may succeed.
    RingFull {
        /// Ring bytes the record needs (its block share, aligned).
        requested_bytes: u64,
        /// Ring bytes free now.
        free_bytes: u64,
    },
    /// The device or file holds no valid ring header, and formatting was not asked for.
    NotFormatted {
        /// The device or file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// The size of a ring device or file disagrees with its header or the configuration.
    CapacityMismatch {
        /// The device or file.
        path: PathBuf,
        /// Which two sizes disagree, e.g. `"file size vs capacity"`.
        what: &'static str,
        /// The size that was expected.
        expected: u64,
        /// The size found.
        found: u64,
    },
    /// A request to the tier's bucket failed (after its retries, where it has them).
    Tier {
        /// What we were doing, e.g. `"put"`, `"list"`.
        op: &'static str,
        /// The object (URL and key).
        key: String,
        /// What the store said.
        message: String,
    },
    /// An object in the tier's bucket failed its checks (a manifest delta or checkpoint, an
    /// extent object), or breaks the manifest's rules.
    TierCorruption {
        /// The object's key under the prefix.
        key: String,
        /// What check failed.
        reason: String,
    },
    /// Another directory (or a newer epoch of this one) holds the tier's prefix: this
    /// handle uploads no more there. See [`crate::TierConfig::takeover`].
    Fenced {
        /// The bucket URL.
        url: String,
        /// The epoch that holds it.
        epoch: u64,
        /// The producer id of the directory that holds it.
        producer: String,
    },
    /// A wait on the tier ran out of time: [`crate::Wal::tier_flush`] before the bucket
    /// held every record, or a commit of a staged job in the bucket before its producer
    /// published it.
    TierTimeout {
        /// How long it waited.
        waited_ms: u64,
        /// Records appended before the call that the manifest does not hold yet (0 for a
        /// staged job's commit).
        pending_records: u64,
        /// What it was waiting for, and what the bucket says of it.
        waiting_for: String,
    },
    /// A data file was written by a newer or unknown format version.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(name: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            name,
            reason: reason.into(),
        }
    }

    pub(crate) fn limit(limit: &'static str, value: u64, max: u64) -> Self {
        Error::LimitExceeded { limit, value, max }
    }

    /// The OS errno behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::DiskFull { .. } => Some(libc::ENOSPC),
            Error::Poisoned { errno, .. } => *errno,
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "{op} failed for {}: {source}", path.display())
            }
            Error::DiskFull {
                path,
                requested_bytes,
            } => write!(
                f,
                "disk full: could not reserve {requested_bytes} bytes in {}",
                path.display()
            ),
            Error::Corruption {
                topic,
                offset,
                path,
                position,
                reason,
            } => write!(
                f,
                "corrupt record in topic {topic:?} at offset {offset} ({} byte {position}): {reason}",
                path.display()
            ),
            Error::InvalidTopic { name, rule } => {
                // Topics, groups, jobs and parts share the rule: the message names none.
                write!(f, "invalid name {name:?}: {rule}")
            }
            Error::LimitExceeded { limit, value, max } => {
                write!(f, "{limit} exceeded: {value} > {max}")
            }
            Error::InvalidArgument { name, reason } => write!(f, "invalid {name}: {reason}"),
            Error::Locked { path } => write!(
                f,
                "directory {} is in use: another handle holds it open for writing",
                path.display()
            ),
            Error::LockTimeout {
                lock,
                holder_pid,
                waited_ms,
            } => write!(
                f,
                "the {lock} lock is held by process {holder_pid}, alive but not releasing it \
                 (stopped?), after waiting {waited_ms} ms"
            ),
            Error::ReadOnly => write!(f, "the log was opened read-only"),
            Error::Closed => write!(f, "the log is closed"),
            Error::UnknownTopic { topic } => write!(f, "unknown topic {topic:?}"),
            Error::OffsetOutOfRange {
                topic,
                offset,
                first,
                next,
            } => write!(
                f,
                "offset {offset} is out of range for topic {topic:?} (stored offsets are {first}..{next})"
            ),
            Error::Poisoned { op, path, errno } if path.as_os_str().is_empty() => write!(
                f,
                "an earlier {op} did not complete{}; nothing since is durable: reopen the directory",
                match errno {
                    Some(e) => format!(" ({})", io::Error::from_raw_os_error(*e)),
                    None => String::new(),
                }
            ),
            Error::Poisoned { op, path, errno } => {
                write!(
                    f,
                    "an earlier {op} of {} failed ({}); nothing since is durable: reopen the directory",
                    path.display(),
                    match errno {
                        Some(e) => io::Error::from_raw_os_error(*e).to_string(),
                        None => "no errno".to_owned(),
                    }
                )
            }
            Error::UnknownGroup { topic, group } => {
                write!(f, "group {group:?} has no cursor on topic {topic:?}")
            }
            Error::Forked { opener_pid } => write!(
                f,
                "this handle was opened by process {opener_pid} before it forked this one \
                 ({}); open the directory again in this process",
                std::process::id()
            ),
            Error::RingFull {
                requested_bytes,
                free_bytes,
            } => write!(
                f,
                "the ring is full: the record needs {requested_bytes} bytes and {free_bytes} are \
                 free; trim the ring to make room"
            ),
            Error::NotFormatted { path, reason } => write!(
                f,
                "{} holds no tidelog ring ({reason}); open it with format=True to format it",
                path.display()
            ),
            Error::CapacityMismatch {
                path,
                what,
                expected,
                found,
            } => write!(
                f,
                "{}: {what} disagree: expected {expected} bytes, found {found}",
                path.display()
            ),
            Error::Tier { op, key, message } => write!(f, "tier {op} of {key} failed: {message}"),
            Error::TierCorruption { key, reason } => {
                write!(f, "damaged tier manifest object {key}: {reason}")
            }
            Error::Fenced {
                url,
                epoch,
                producer,
            } => write!(
                f,
                "the tier {url} is held by another producer ({producer}, epoch {epoch}); \
                 open with tier_takeover to take it over"
            ),
            Error::TierTimeout {
                waited_ms,
                waiting_for,
                ..
            } => write!(
                f,
                "timed out after {waited_ms} ms waiting for {waiting_for}"
            ),
            Error::UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found}; this build reads versions up to {supported}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

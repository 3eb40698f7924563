//! `tidelog::Error` to Python exceptions: the one place the mapping lives.
//!
//! The classes are defined in Python (`tidelog/exceptions.py`) so they can derive from
//! `ValueError`, `OSError`, `LookupError`; this module imports them once and raises them
//! with the variant's fields as attributes.

use std::any::Any;

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use tidelog::Error;

const MODULE: &str = "tidelog.exceptions";

macro_rules! exception_classes {
    ($($fn_name:ident => $class:literal),* $(,)?) => {
        $(
            fn $fn_name(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
                static CELL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
                CELL.import(py, MODULE, $class)
            }
        )*
    };
}

exception_classes! {
    invalid_argument => "InvalidArgumentError",
    invalid_topic => "InvalidTopicError",
    limit_exceeded => "LimitExceededError",
    record_too_large => "RecordTooLargeError",
    capacity => "CapacityError",
    disk_full => "DiskFullError",
    locked => "LockedError",
    lock_timeout => "LockTimeoutError",
    read_only => "ReadOnlyError",
    closed => "ClosedError",
    forked => "ForkedError",
    poisoned => "PoisonedError",
    corruption => "CorruptionError",
    unknown_topic => "UnknownTopicError",
    unknown_group => "UnknownGroupError",
    offset_out_of_range => "OffsetOutOfRangeError",
    unsupported_version => "UnsupportedVersionError",
    ring_full => "RingFullError",
    not_formatted => "NotFormattedError",
    capacity_mismatch => "CapacityMismatchError",
    tier => "TierError",
    tier_corruption => "TierCorruptionError",
    fenced => "FencedError",
    tier_timeout => "TierTimeoutError",
    internal => "InternalError",
}

/// Converts an engine error to the matching Python exception.
pub fn to_py(err: Error) -> PyErr {
    Python::attach(|py| match build(py, &err) {
        Ok(e) => e,
        // Only if `tidelog.exceptions` cannot be imported: still an exception, never a panic.
        Err(import_error) => {
            let e = PyRuntimeError::new_err(err.to_string());
            e.set_cause(py, Some(import_error));
            e
        }
    })
}

fn build(py: Python<'_>, err: &Error) -> PyResult<PyErr> {
    let message = err.to_string();
    let attrs = PyDict::new(py);
    let class = match err {
        Error::Io { path, source, .. } => {
            // The built-in class for the errno (FileNotFoundError, PermissionError, ...).
            let errno = errno_of(source);
            return Ok(PyOSError::new_err((
                errno,
                message,
                path.display().to_string(),
            )));
        }
        Error::DiskFull {
            path,
            requested_bytes,
        } => {
            let e = disk_full(py)?.call1((libc::ENOSPC, message, path.display().to_string()))?;
            e.setattr("requested_bytes", requested_bytes)?;
            return Ok(PyErr::from_value(e));
        }
        Error::Locked { path } => {
            let e = locked(py)?.call1((libc::EAGAIN, message, path.display().to_string()))?;
            return Ok(PyErr::from_value(e));
        }
        Error::LockTimeout {
            lock,
            holder_pid,
            waited_ms,
        } => {
            let e = lock_timeout(py)?.call1((libc::ETIMEDOUT, message))?;
            e.setattr("lock", lock)?;
            e.setattr("holder_pid", holder_pid)?;
            e.setattr("waited_ms", waited_ms)?;
            return Ok(PyErr::from_value(e));
        }
        Error::Poisoned { op, path, errno } => {
            let e =
                poisoned(py)?.call1((errno.unwrap_or(0), message, path.display().to_string()))?;
            e.setattr("op", op)?;
            return Ok(PyErr::from_value(e));
        }
        Error::Corruption {
            topic,
            offset,
            path,
            position,
            reason,
        } => {
            attrs.set_item("topic", topic)?;
            attrs.set_item("offset", offset)?;
            attrs.set_item("path", path.display().to_string())?;
            attrs.set_item("position", position)?;
            attrs.set_item("reason", reason)?;
            corruption(py)?
        }
        Error::InvalidTopic { name, rule } => {
            attrs.set_item("name", name)?;
            attrs.set_item("reason", rule)?;
            invalid_topic(py)?
        }
        Error::LimitExceeded { limit, value, max } => {
            attrs.set_item("limit", limit)?;
            attrs.set_item("value", value)?;
            attrs.set_item("max", max)?;
            match *limit {
                "max_record_bytes" | "max_batch_bytes" => record_too_large(py)?,
                "disk_bytes_max" => {
                    let e = capacity(py)?.call1((message,))?;
                    for (k, v) in attrs.iter() {
                        e.setattr(k.cast::<pyo3::types::PyString>()?, v)?;
                    }
                    return Ok(PyErr::from_value(e));
                }
                _ => limit_exceeded(py)?,
            }
        }
        Error::InvalidArgument { name, reason } => {
            attrs.set_item("name", name)?;
            attrs.set_item("reason", reason)?;
            invalid_argument(py)?
        }
        Error::ReadOnly => read_only(py)?,
        Error::Closed => closed(py)?,
        Error::UnknownTopic { topic } => {
            attrs.set_item("topic", topic)?;
            unknown_topic(py)?
        }
        Error::OffsetOutOfRange {
            topic,
            offset,
            first,
            next,
        } => {
            attrs.set_item("topic", topic)?;
            attrs.set_item("offset", offset)?;
            attrs.set_item("first", first)?;
            attrs.set_item("next", next)?;
            offset_out_of_range(py)?
        }
        Error::UnknownGroup { topic, group } => {
            attrs.set_item("topic", topic)?;
            attrs.set_item("group", group)?;
            unknown_group(py)?
        }
        Error::Forked { opener_pid } => {
            attrs.set_item("opener_pid", opener_pid)?;
            forked(py)?
        }
        Error::UnsupportedVersion {
            path,
            found,
            supported,
        } => {
            let e = unsupported_version(py)?.call1((message,))?;
            e.setattr("path", path.display().to_string())?;
            e.setattr("found", found)?;
            e.setattr("supported", supported)?;
            return Ok(PyErr::from_value(e));
        }
        Error::RingFull {
            requested_bytes,
            free_bytes,
        } => {
            attrs.set_item("requested_bytes", requested_bytes)?;
            attrs.set_item("free_bytes", free_bytes)?;
            ring_full(py)?
        }
        Error::NotFormatted { path, reason } => {
            attrs.set_item("path", path.display().to_string())?;
            attrs.set_item("reason", reason)?;
            not_formatted(py)?
        }
        Error::CapacityMismatch {
            path,
            what,
            expected,
            found,
        } => {
            attrs.set_item("path", path.display().to_string())?;
            attrs.set_item("what", what)?;
            attrs.set_item("expected", expected)?;
            attrs.set_item("found", found)?;
            capacity_mismatch(py)?
        }
        Error::Tier { op, key, message } => {
            attrs.set_item("op", op)?;
            attrs.set_item("key", key)?;
            attrs.set_item("reason", message)?;
            tier(py)?
        }
        Error::TierCorruption { key, reason } => {
            attrs.set_item("op", "read manifest")?;
            attrs.set_item("key", key)?;
            attrs.set_item("reason", reason)?;
            tier_corruption(py)?
        }
        Error::Fenced {
            url,
            epoch,
            producer,
        } => {
            attrs.set_item("url", url)?;
            attrs.set_item("epoch", epoch)?;
            attrs.set_item("producer", producer)?;
            fenced(py)?
        }
        Error::TierTimeout {
            waited_ms,
            pending_records,
            waiting_for,
        } => {
            attrs.set_item("waited_ms", waited_ms)?;
            attrs.set_item("pending_records", pending_records)?;
            attrs.set_item("waiting_for", waiting_for)?;
            tier_timeout(py)?
        }
        // A variant added to the engine and not yet mapped here.
        other => {
            return Ok(PyErr::from_value(
                internal(py)?.call1((format!("unmapped error: {other}"),))?,
            ));
        }
    };
    let e = class.call((message,), Some(&attrs))?;
    Ok(PyErr::from_value(e))
}

/// The errno of an OS error, or the closest one for an error built from its kind alone,
/// so Python picks the matching `OSError` subclass.
fn errno_of(e: &std::io::Error) -> i32 {
    use std::io::ErrorKind as K;
    e.raw_os_error().unwrap_or(match e.kind() {
        K::NotFound => libc::ENOENT,
        K::PermissionDenied => libc::EACCES,
        K::AlreadyExists => libc::EEXIST,
        K::WouldBlock => libc::EAGAIN,
        K::Interrupted => libc::EINTR,
        K::NotADirectory => libc::ENOTDIR,
        K::IsADirectory => libc::EISDIR,
        K::StorageFull => libc::ENOSPC,
        K::ReadOnlyFilesystem => libc::EROFS,
        K::TimedOut => libc::ETIMEDOUT,
        K::InvalidInput | K::InvalidData => libc::EINVAL,
        K::UnexpectedEof => libc::EIO,
        _ => 0,
    })
}

/// A Rust panic caught at the boundary, as `tidelog.InternalError`.
pub fn from_panic(payload: Box<dyn Any + Send>) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    Python::attach(|py| {
        match internal(py).and_then(|c| c.call1((format!("tidelog bug (panic): {what}"),))) {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        }
    })
}

//! The buffer protocol, both ways: borrowing bytes from Python objects for appends, and
//! exporting read-only views of mapped records (and of Arrow buffers built in Rust).
//!
//! The only `unsafe` of the binding lives here; docs/SAFETY.md lists each block.
#![expect(unsafe_code, reason = "the CPython buffer protocol is a raw C API")]

use std::ffi::{c_int, c_void};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// Bytes borrowed from a Python object for the length of one call.
pub enum InputBytes<'a> {
    /// A `bytes` object: immutable, read without a buffer export.
    Bytes(&'a [u8]),
    /// Any other C-contiguous buffer (bytearray, memoryview, numpy array, ...). The export
    /// pins its memory (a bytearray cannot be resized while exported) until dropped.
    Buffer(PyUntypedBuffer),
}

impl<'a> InputBytes<'a> {
    /// Borrows `obj`'s bytes. `str` is rejected: text has no single byte encoding here.
    pub fn extract(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<InputBytes<'a>> {
        if let Ok(bytes) = obj.cast::<PyBytes>() {
            return Ok(InputBytes::Bytes(bytes.as_bytes()));
        }
        if obj.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(format!(
                "{what} must be bytes-like (bytes, bytearray, memoryview), not str: encode it first"
            )));
        }
        let buffer = PyUntypedBuffer::get(obj).map_err(|e| {
            // An exporter that refused (a released memoryview: ValueError) says why itself.
            if !e.is_instance_of::<PyTypeError>(obj.py()) {
                return e;
            }
            PyTypeError::new_err(format!(
                "{what} must be bytes-like (bytes, bytearray, memoryview), not {}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string())
            ))
        })?;
        if !buffer.is_c_contiguous() {
            return Err(PyBufferError::new_err(format!(
                "{what} must be a C-contiguous buffer"
            )));
        }
        Ok(InputBytes::Buffer(buffer))
    }

    /// Exports `obj`'s buffer (owned: no borrow of `obj` is kept).
    pub fn export(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<InputBytes<'static>> {
        let buffer = PyUntypedBuffer::get(obj).map_err(|_| {
            PyTypeError::new_err(format!("{what} must support the buffer protocol"))
        })?;
        if !buffer.is_c_contiguous() {
            return Err(PyBufferError::new_err(format!(
                "{what} must be a C-contiguous buffer"
            )));
        }
        Ok(InputBytes::Buffer(buffer))
    }

    /// The borrowed bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            InputBytes::Bytes(bytes) => bytes,
            InputBytes::Buffer(buffer) => {
                let len = buffer.len_bytes();
                if len == 0 {
                    return &[];
                }
                // SAFETY: the export is C-contiguous (checked in `extract`), so `len_bytes`
                // bytes start at `buf_ptr`, and it stays valid and unresized until `buffer`
                // is dropped, which the borrow of `self` outlives. Concurrent writes by
                // another thread to a mutable exporter (a bytearray) may tear the copy,
                // exactly as they would for `bytes(b)`; they cannot free the memory.
                unsafe { std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), len) }
            }
        }
    }
}

/// The format string of an unsigned-byte buffer.
const FORMAT_BYTES: &std::ffi::CStr = c"B";

/// Fills `view` with a read-only, one-dimensional view of the `len` bytes at `data`, owned
/// by `owner`.
///
/// # Safety
/// `view` must be the pointer CPython passed to `bf_getbuffer`, and the `len` bytes at `data`
/// must stay valid and unchanged for as long as `owner` lives (the view holds a strong
/// reference to it).
pub unsafe fn export_readonly(
    view: *mut ffi::Py_buffer,
    flags: c_int,
    data: *const u8,
    len: usize,
    owner: Bound<'_, PyAny>,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("null Py_buffer"));
    }
    if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err(
            "tidelog records are read-only: copy with bytes(record) to modify",
        ));
    }
    let len = isize::try_from(len)
        .map_err(|_| PyBufferError::new_err("buffer larger than isize::MAX"))?;
    // `shape` and `strides` point into the view itself (its `len` and `itemsize`), which
    // CPython keeps alive as long as the view: plain address arithmetic, no dereference.
    let field = |offset: usize| view.cast::<u8>().wrapping_add(offset).cast::<isize>();
    let filled = ffi::Py_buffer {
        buf: data.cast_mut().cast::<c_void>(),
        obj: owner.into_ptr(),
        len,
        itemsize: 1,
        readonly: 1,
        ndim: 1,
        format: if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
            FORMAT_BYTES.as_ptr().cast_mut()
        } else {
            std::ptr::null_mut()
        },
        shape: if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
            field(std::mem::offset_of!(ffi::Py_buffer, len))
        } else {
            std::ptr::null_mut()
        },
        strides: if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
            field(std::mem::offset_of!(ffi::Py_buffer, itemsize))
        } else {
            std::ptr::null_mut()
        },
        suboffsets: std::ptr::null_mut(),
        internal: std::ptr::null_mut(),
    };
    // SAFETY: `view` is non-null and points to a `Py_buffer` CPython allocated for this call
    // (the caller's contract); we initialise it whole. The static format string is never
    // freed, so `__releasebuffer__` has nothing to release.
    unsafe { view.write(filled) };
    Ok(())
}

//! Direct-I/O support: aligned buffers and the device's alignment probe.
//!
//! The only unsafe code of the ring backend (inventoried in docs/SAFETY.md):
//! - [`AlignedBuf`] owns one allocation made with `alloc_zeroed` and a [`Layout`] whose
//!   alignment is [`ALIGN_BYTES`]; it is freed once, with that same layout, in `Drop`, and it
//!   hands out slices only within its length;
//! - [`dio_alignment`] calls `statx` with a valid NUL-terminated path and a zeroed out-struct.

#![expect(
    unsafe_code,
    reason = "O_DIRECT needs memory aligned beyond what Vec guarantees, and statx has no std wrapper"
)]

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

/// The alignment of direct-I/O buffers, offsets and lengths (the largest logical sector
/// size in use; the ring is laid out in units of it).
pub const ALIGN_BYTES: u64 = 4096;

/// A zero-initialised heap buffer aligned to [`ALIGN_BYTES`], allocated once.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain owned memory with no thread affinity; `&AlignedBuf` only gives
// shared slices and `&mut AlignedBuf` exclusive ones, so the usual borrow rules make it safe
// to send and share.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zero bytes (`len` a positive multiple of [`ALIGN_BYTES`]).
    pub fn zeroed(len: usize) -> io::Result<AlignedBuf> {
        assert!(
            len > 0 && (len as u64).is_multiple_of(ALIGN_BYTES),
            "bad aligned length {len}"
        );
        let layout = Self::layout(len)?;
        // SAFETY: `layout` has a non-zero size (asserted above).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(AlignedBuf { ptr, len })
    }

    fn layout(len: usize) -> io::Result<Layout> {
        Layout::from_size_align(len, ALIGN_BYTES as usize)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialised bytes owned by `self` until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only live slice.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Ok(layout) = Self::layout(self.len) {
            // SAFETY: allocated in `zeroed` with this same layout and freed only here.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

/// The direct-I/O offset alignment the kernel reports for `path` (`statx` `STATX_DIOALIGN`),
/// or `None` when it reports none (old kernels, or a file system without direct I/O).
pub fn dio_alignment(path: &Path) -> Option<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and outlives the call; `stx` is a valid out-pointer.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            0,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some(u64::from(
        stx.stx_dio_offset_align.max(stx.stx_dio_mem_align),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        let mut b = AlignedBuf::zeroed(3 * ALIGN_BYTES as usize).expect("alloc");
        assert_eq!(b.as_ptr() as usize % ALIGN_BYTES as usize, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[5] = 1;
        assert_eq!(b[5], 1);
        assert_eq!(b.len(), 3 * ALIGN_BYTES as usize);
    }
}

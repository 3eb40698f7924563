//! The shared mapping of one data file: the only place that touches mapped memory.
//!
//! Invariants the rest of the crate keeps (see docs/SAFETY.md):
//! - data files are created at their full length and never truncated while mapped, so every
//!   in-bounds access is backed by the file (no SIGBUS from truncation);
//! - a byte range is written only by the one writer that reserved it, before it is
//!   published; after publication it is never written again;
//! - slices are handed out only for published (or, in another process, durable) ranges;
//! - disk space for a range is reserved with fallocate before it is written (no SIGBUS on a
//!   full disk).

#![expect(
    unsafe_code,
    reason = "mapped memory is raw memory shared with the kernel and other processes"
)]

use std::fmt;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

/// One `MAP_SHARED` mapping of a whole data file.
pub struct Mapping {
    raw: MmapRaw,
    len: usize,
    writable: bool,
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

impl Mapping {
    /// Maps the first `len` bytes of `file`, read-write or read-only.
    pub fn map(file: &File, len: u64, writable: bool) -> io::Result<Mapping> {
        let len_usize =
            usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let mut opts = MmapOptions::new();
        opts.len(len_usize);
        let raw = if writable {
            opts.map_raw(file)?
        } else {
            opts.map_raw_read_only(file)?
        };
        Ok(Mapping {
            raw,
            len: len_usize,
            writable,
        })
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a mapping of no bytes (never made: files are never empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Faults in `[at, at + len)` writable without changing its bytes
    /// (`MADV_POPULATE_WRITE`, Linux 5.14+). The caller passes only reserved ranges, so no
    /// page needs new disk space.
    pub fn populate_write(&self, at: u64, len: u64) -> io::Result<()> {
        const PAGE: u64 = 4096;
        let start = at / PAGE * PAGE;
        let end = (at + len).min(self.len as u64);
        if !self.writable || end <= start {
            return Ok(());
        }
        let (offset, len) = (
            usize::try_from(start).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?,
            usize::try_from(end - start).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?,
        );
        self.raw
            .advise_range(memmap2::Advice::PopulateWrite, offset, len)
    }

    /// Copies `parts` one after another into the mapping starting at `at`.
    ///
    /// # Safety
    /// The range `[at, at + total)` must be in bounds, reserved for this caller alone, and not
    /// covered by any live `&[u8]` from [`Mapping::slice`] in this process (it is not yet
    /// published).
    pub unsafe fn write(&self, at: usize, parts: &[&[u8]]) {
        assert!(self.writable, "write to a read-only mapping");
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            at.checked_add(total).is_some_and(|end| end <= self.len),
            "write out of bounds"
        );
        let mut dst = at;
        for part in parts {
            let to = self.raw.as_mut_ptr().wrapping_add(dst);
            // SAFETY: `[dst, dst + len)` is in bounds (asserted above), so `to` points into the
            // mapping; the caller guarantees exclusive access to the range, and `part` lies
            // outside it, so the copy does not overlap.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), to, part.len()) };
            dst += part.len();
        }
    }

    /// Hands `[at, at + len)` to `fill` to write in place.
    ///
    /// # Safety
    /// As [`Mapping::write`]: the range must be in bounds, reserved for this caller alone,
    /// and not covered by any live `&[u8]` from [`Mapping::slice`] in this process.
    pub unsafe fn fill<R>(&self, at: usize, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> R {
        assert!(self.writable, "write to a read-only mapping");
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "write out of bounds"
        );
        let to = self.raw.as_mut_ptr().wrapping_add(at);
        // SAFETY: `[at, at + len)` is in bounds (asserted above) of a writable mapping that
        // outlives the call; the caller guarantees no other reference covers the range, so
        // the one `&mut` handed to `fill` is exclusive for its duration.
        let range = unsafe { std::slice::from_raw_parts_mut(to, len) };
        fill(range)
    }

    /// Borrows `[at, at + len)`.
    ///
    /// # Safety
    /// The range must be in bounds and immutable for the lifetime of the borrow: published
    /// records (in the writing process, or as it reported them to a read-only one) or
    /// durable records (in a read-only process).
    pub unsafe fn slice(&self, at: usize, len: usize) -> &[u8] {
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "slice out of bounds"
        );
        let from = self.raw.as_ptr().wrapping_add(at);
        // SAFETY: `[at, at + len)` is in bounds (asserted), the mapping lives as long as
        // `self`, and the caller guarantees nobody writes the range while the borrow lives.
        unsafe { std::slice::from_raw_parts(from, len) }
    }

    /// Copies `[at, at + out.len())` out of the mapping. Safe for ranges that may change under
    /// us (header slots another process rewrites): the copy is validated by its checksum.
    pub fn copy_out(&self, at: usize, out: &mut [u8]) {
        assert!(
            at.checked_add(out.len()).is_some_and(|end| end <= self.len),
            "copy out of bounds"
        );
        let base = self.raw.as_ptr().wrapping_add(at);
        // Bytes up to an 8-byte boundary, whole words, then the last bytes: a word read is
        // eight times fewer volatile reads (they cannot be merged or vectorised).
        let head = base.align_offset(8).min(out.len());
        let words = (out.len() - head) / 8;
        for (i, byte) in out[..head].iter_mut().enumerate() {
            // SAFETY: in bounds (asserted); a volatile byte read of shared memory that another
            // party may be writing creates no reference and yields some byte value.
            *byte = unsafe { std::ptr::read_volatile(base.wrapping_add(i)) };
        }
        for (w, chunk) in out[head..head + words * 8].chunks_exact_mut(8).enumerate() {
            let from = base.wrapping_add(head + w * 8).cast::<u64>();
            // SAFETY: in bounds (asserted) and 8-byte aligned (`head` reaches the boundary);
            // a volatile read creates no reference and yields some value, checked by the
            // caller's CRC like the bytes. (A `[u8; 8]` read would be eight loads.)
            let word = unsafe { std::ptr::read_volatile(from) };
            #[expect(
                clippy::host_endian_bytes,
                reason = "the word's bytes back in memory order"
            )]
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        for (i, byte) in out.iter_mut().enumerate().skip(head + words * 8) {
            // SAFETY: as the first bytes.
            *byte = unsafe { std::ptr::read_volatile(base.wrapping_add(i)) };
        }
    }

    /// Overwrites `[at, at + bytes.len())`, for header slots that only the flusher or the
    /// recovering writer writes and no slice covers.
    pub fn write_header(&self, at: usize, bytes: &[u8]) {
        assert!(self.writable, "write to a read-only mapping");
        assert!(
            at.checked_add(bytes.len())
                .is_some_and(|end| end <= self.len),
            "write out of bounds"
        );
        let base = self.raw.as_mut_ptr().wrapping_add(at);
        for (i, byte) in bytes.iter().enumerate() {
            let to = base.wrapping_add(i);
            // SAFETY: in bounds (asserted); header slots and footers are never handed out as
            // slices, and concurrent readers only use `copy_out`, so no reference aliases them.
            unsafe { std::ptr::write_volatile(to, *byte) };
        }
    }

    /// The 8-byte word at `at` of a writable mapping, as an atomic shared with every process
    /// that maps the file (the shared state file's words).
    pub fn atomic_u64(&self, at: usize) -> &AtomicU64 {
        assert!(self.writable, "atomic access to a read-only mapping");
        let ptr = self.word_ptr(at, 8);
        // SAFETY: `word_ptr` checked that `[at, at + 8)` is in bounds and 8-aligned (the
        // mapping starts on a page); the memory lives as long as `self`, which the reference
        // cannot outlive. Every party touches these words only through atomics (other
        // processes included), and an `AtomicU64` has the layout of a `u64`.
        unsafe { &*ptr.cast::<AtomicU64>() }
    }

    /// The 4-byte word at `at` of a writable mapping, as an atomic (see
    /// [`Mapping::atomic_u64`]); futex words are of this size.
    pub fn atomic_u32(&self, at: usize) -> &AtomicU32 {
        assert!(self.writable, "atomic access to a read-only mapping");
        let ptr = self.word_ptr(at, 4);
        // SAFETY: as in `atomic_u64`: in bounds, 4-aligned, alive as long as `self`, only
        // ever accessed atomically.
        unsafe { &*ptr.cast::<AtomicU32>() }
    }

    /// An atomic load of the 8-byte word at `at`, on a mapping of either kind (a read-only
    /// mapping hands out no atomics: a store through one would fault).
    pub fn load_u64(&self, at: usize, order: Ordering) -> u64 {
        let ptr = self.word_ptr(at, 8);
        // SAFETY: in bounds and 8-aligned (checked by `word_ptr`); the reference lives only
        // for this load, which reads the word as every other party writes it: atomically.
        unsafe { (*ptr.cast::<AtomicU64>()).load(order) }
    }

    /// An atomic load of the 4-byte word at `at`, on a mapping of either kind.
    pub fn load_u32(&self, at: usize, order: Ordering) -> u32 {
        let ptr = self.word_ptr(at, 4);
        // SAFETY: as in `load_u64`: in bounds and 4-aligned; the reference lives only for
        // this atomic load.
        unsafe { (*ptr.cast::<AtomicU32>()).load(order) }
    }

    /// The address of `[at, at + size)` after checking bounds and `size` alignment.
    fn word_ptr(&self, at: usize, size: usize) -> *mut u8 {
        assert!(
            at.checked_add(size).is_some_and(|end| end <= self.len),
            "word out of bounds"
        );
        let ptr = self.raw.as_mut_ptr().wrapping_add(at);
        assert!((ptr as usize).is_multiple_of(size), "unaligned word");
        ptr
    }

    /// `msync(MS_SYNC)` of `[offset, offset + len)`, widened to whole pages.
    pub fn sync_range(&self, offset: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.raw.flush_range(offset, len)
    }
}

/// A read-only mapping of a whole file that nothing writes or truncates while it is mapped
/// (a complete staged part: renamed into place once durable, then only read or unlinked).
pub struct FrozenFile {
    map: Mapping,
}

impl fmt::Debug for FrozenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenFile")
            .field("len", &self.map.len)
            .finish()
    }
}

impl FrozenFile {
    /// Maps the first `len` bytes of `file` (all of it; `len` read by the caller, through
    /// its storage).
    ///
    /// # Safety
    /// Nothing may write to or truncate `file` while the result lives.
    pub unsafe fn map(file: &File, len: u64) -> io::Result<FrozenFile> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(FrozenFile {
            map: Mapping::map(file, len, false)?,
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the range is the whole mapping, and `map`'s caller guaranteed that nothing
        // writes the file while `self` (which the borrow cannot outlive) lives.
        unsafe { self.map.slice(0, self.map.len) }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn copy_out_reads_every_start_and_length_exactly() {
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut file = tempfile::tempfile().expect("temp file");
        file.write_all(&bytes).expect("write");
        let map = Mapping::map(&file, bytes.len() as u64, false).expect("map");
        for at in 0..24 {
            for len in 0..48 {
                let mut out = vec![0xAA; len];
                map.copy_out(at, &mut out);
                assert_eq!(out, &bytes[at..at + len], "at {at}, len {len}");
            }
        }
        let mut tail = [0u8; 13];
        map.copy_out(bytes.len() - 13, &mut tail);
        assert_eq!(tail, bytes[bytes.len() - 13..]);
    }
}

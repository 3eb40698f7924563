//! The one `unsafe` of the benchmark: a writable shared mapping of a file it just created,
//! for the mmap-write ceiling (see docs/SAFETY.md).

use std::fs::File;

use memmap2::MmapMut;

/// A writable mapping of a file nobody else knows about.
#[derive(Debug)]
pub(crate) struct PrivateMapping {
    map: MmapMut,
}

impl PrivateMapping {
    /// Maps `file`, which the caller created with `create_new` in its own scratch
    /// directory and never truncates while the mapping lives.
    pub(crate) fn new(file: &File) -> std::io::Result<PrivateMapping> {
        #[expect(unsafe_code, reason = "memmap2 cannot know who else changes the file")]
        // SAFETY: the file was created by this process with `create_new` in a scratch
        // directory and is never truncated or resized while mapped, so no other writer can
        // change or shrink the mapped bytes behind the `&mut [u8]` memmap2 hands out.
        let map = unsafe { MmapMut::map_mut(file)? };
        Ok(PrivateMapping { map })
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }
}

//! The block allocator: hands out `(file, block index, block count)` behind a spin lock.
//!
//! The critical section only moves a cursor. Files are created outside the lock, by the
//! background thread ahead of need (the "spare") or, if none is ready, by the allocating
//! thread before it retakes the lock. Disk space is reserved (fallocate) after the lock is
//! released, before the extent is handed to a writer.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::block::Block;
use crate::error::{Error, Result};
use crate::file::DataFile;
use crate::io::Storage;
use crate::spin::SpinLock;

#[derive(Debug, Default)]
struct AllocState {
    current: Option<Arc<DataFile>>,
    next_block: u32,
    spare: Option<Arc<DataFile>>,
}

/// A reserved extent, disk space included.
#[derive(Debug)]
pub struct Extent {
    pub file: Arc<DataFile>,
    pub block_index: u32,
    pub block_count: u32,
}

/// Hands out extents of consecutive blocks, file after file.
#[derive(Debug)]
pub struct BlockAllocator {
    dir: PathBuf,
    file_size_bytes: u64,
    block_size_bytes: u64,
    state: SpinLock<AllocState>,
    next_seq: AtomicU64,
    /// Serializes file creation, so two threads that both find no spare make one file.
    create: Mutex<()>,
}

impl BlockAllocator {
    pub fn new(
        dir: PathBuf,
        file_size_bytes: u64,
        block_size_bytes: u64,
        next_seq: u64,
        current: Option<(Arc<DataFile>, u32)>,
        spare: Option<Arc<DataFile>>,
    ) -> Self {
        let (current, next_block) = match current {
            Some((f, n)) => (Some(f), n),
            None => (None, 0),
        };
        BlockAllocator {
            dir,
            file_size_bytes,
            block_size_bytes,
            state: SpinLock::new(AllocState {
                current,
                next_block,
                spare,
            }),
            next_seq: AtomicU64::new(next_seq),
            create: Mutex::new(()),
        }
    }

    /// Reserves an extent with room for `frame_bytes` of records (disk space included).
    pub fn allocate(
        &self,
        storage: &dyn Storage,
        frame_bytes: u64,
        index_interval_bytes: u64,
    ) -> Result<Extent> {
        let (file, block_index, block_count) =
            self.take(storage, frame_bytes, index_interval_bytes)?;
        let start = file.block_position(block_index);
        let len = u64::from(block_count) * file.header.block_size_bytes;
        if let Err(e) = storage.allocate(&file.file, &file.path, start, len) {
            // The blocks stay unused: their identity slot is never written, so recovery
            // skips them.
            if e.raw_os_error() == Some(libc::ENOSPC) {
                return Err(Error::DiskFull {
                    path: file.path.clone(),
                    requested_bytes: len,
                });
            }
            return Err(Error::io("fallocate", &file.path, e));
        }
        Ok(Extent {
            file,
            block_index,
            block_count,
        })
    }

    fn take(
        &self,
        storage: &dyn Storage,
        frame_bytes: u64,
        interval: u64,
    ) -> Result<(Arc<DataFile>, u32, u32)> {
        // Each file carries its own geometry, so the block count is computed per file.
        let count_for =
            |f: &DataFile| Block::blocks_needed(frame_bytes, f.header.block_size_bytes, interval);
        loop {
            {
                let mut st = self.state.lock();
                if let Some(cur) = st.current.clone() {
                    let count = count_for(&cur);
                    if u64::from(st.next_block) + count <= u64::from(cur.block_count) {
                        let index = st.next_block;
                        st.next_block += count as u32;
                        return Ok((cur, index, count as u32));
                    }
                }
                if let Some(spare) = st.spare.take() {
                    let count = count_for(&spare);
                    if count > u64::from(spare.block_count) {
                        let max = u64::from(spare.block_count);
                        st.spare = Some(spare);
                        return Err(Error::limit("blocks per extent", count, max));
                    }
                    st.current = Some(spare);
                    st.next_block = 0;
                    continue;
                }
            }
            self.prepare_spare(storage)?;
        }
    }

    /// Creates the next data file unless a spare is already waiting. Called by the background
    /// thread ahead of need, and by an allocating thread that found none.
    pub fn prepare_spare(&self, storage: &dyn Storage) -> Result<()> {
        let _create = self.create.lock().unwrap_or_else(|p| p.into_inner());
        if self.state.lock().spare.is_some() {
            return Ok(());
        }
        let seq = self.next_seq.load(Ordering::Acquire);
        let file = DataFile::create(
            storage,
            &self.dir,
            seq,
            self.file_size_bytes,
            self.block_size_bytes,
        )?;
        self.next_seq.store(seq + 1, Ordering::Release);
        self.state.lock().spare = Some(file);
        Ok(())
    }

    /// True when the current file is at least half used and no spare is ready: time for the
    /// background thread to make one.
    pub fn wants_spare(&self) -> bool {
        let st = self.state.lock();
        st.spare.is_none()
            && st
                .current
                .as_ref()
                .is_some_and(|cur| st.next_block * 2 >= cur.block_count)
    }
}

//! An extent (one or more consecutive blocks) owned by one topic: its reservation-free write
//! into the mapping, its publication watermark, its sparse index, and its sync/seal state.
//!
//! Positions are relative to the extent start. Records begin after the block header page.
//! Publication is one atomic word packing `(records, end)`, so readers and the flusher always
//! see a consistent pair.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use crate::error::{Error, Result};
use crate::file::DataFile;
use crate::format::{
    self, BlockIdentity, CommitCopy, FrameError, FrameView, IndexEntry, Progress, ProgressState,
};
use crate::io::Storage;
use crate::poison::Recover;

const NOT_FINAL: u64 = u64::MAX;

/// Packs a record count and an end position into one word.
#[inline]
pub fn pack(count: u64, end: u64) -> u64 {
    debug_assert!(count <= u64::from(u32::MAX) && end <= u64::from(u32::MAX));
    (count << 32) | end
}

/// Splits a packed word into `(count, end)`.
#[inline]
pub fn unpack(word: u64) -> (u64, u64) {
    (word >> 32, word & 0xFFFF_FFFF)
}

/// State only the flusher touches.
#[derive(Debug, Default)]
pub struct SyncState {
    /// End of the data made durable so far (0 before the first sync, which also covers the
    /// identity slot).
    pub synced_end: u64,
    /// The progress slot says `Sealed` and is durable.
    pub sealed_on_disk: bool,
    /// The progress slot says `Clean` at `synced_end` and is durable.
    pub clean_on_disk: bool,
    /// End the progress slot claims, with the commit copy that continues it (a group commit
    /// syncs them before it acknowledges; the flusher writes and syncs the slot after the
    /// data).
    pub progress_end: u64,
    /// The progress slot says `Consumed` or `Deleted`: nothing more is written.
    pub deleted: bool,
}

/// One extent of a topic.
#[derive(Debug)]
pub struct Extent {
    pub file: Arc<DataFile>,
    /// Byte position of the extent inside its file.
    pub start: u64,
    /// Extent length in bytes.
    pub len: u64,
    /// Records may not extend past this position (the footer reserve follows).
    pub data_limit: u64,
    pub block_index: u32,
    pub extent_count: u32,
    pub topic_id: u32,
    pub salt: u32,
    pub first_offset: u64,
    /// `pack(records, end)` of the published records.
    published: AtomicU64,
    /// `pack(records, end)` once no more records will be added, else `NOT_FINAL`.
    final_word: AtomicU64,
    /// Largest timestamp reserved in this extent (an upper bound for what is published).
    max_timestamp_us: AtomicU64,
    /// Sparse index of this extent, in offset order. `None` until loaded for extents whose
    /// index lives only in their footer.
    index: RwLock<Option<Vec<IndexEntry>>>,
    sync: Mutex<SyncState>,
    /// Counted in the file's `held_blocks` (a writer appends here).
    writer_held: AtomicBool,
    /// Counted in the file's `consumed_blocks`.
    consumed: AtomicBool,
    /// A read-only handle's copy of the extent's first bytes with records that differ on
    /// disk from their commit copy put back from it (recovery, which writes nothing): a
    /// frame that starts below its end is read here, any other from the mapping. Its bytes
    /// are what the file holds once a writable open repairs it, so it never goes stale.
    image: OnceLock<Arc<[u8]>>,
    /// Bytes from the extent's start this process knows are backed by disk space
    /// (`fallocate`d): nothing is stored into the mapping past them (a store to a page the
    /// file system cannot back is `SIGBUS`). 0 when unknown (a recovered extent, or one
    /// another process made): the next write reserves from the start again, which costs
    /// nothing where space is already allocated.
    reserved: AtomicU64,
    /// Serializes this process's reservations of the extent.
    reserving: Mutex<()>,
}

/// Disk space is reserved this far ahead of a topic's records, in one `fallocate`: a topic
/// holds at most about this much beyond its data, instead of a whole extent.
pub const RESERVE_AHEAD_BYTES: u64 = 1 << 20;

impl Extent {
    #[expect(
        clippy::too_many_arguments,
        reason = "plain constructor of a plain struct"
    )]
    pub fn new(
        file: Arc<DataFile>,
        block_index: u32,
        extent_count: u32,
        topic_id: u32,
        salt: u32,
        first_offset: u64,
        index_interval_bytes: u64,
        index: Option<Vec<IndexEntry>>,
    ) -> Extent {
        let start = file.block_position(block_index);
        let len = u64::from(extent_count) * file.header.block_size_bytes;
        let data_limit = len - format::footer_bytes_max(len, index_interval_bytes);
        Extent {
            file,
            start,
            len,
            data_limit,
            block_index,
            extent_count,
            topic_id,
            salt,
            first_offset,
            published: AtomicU64::new(pack(0, format::BLOCK_HEADER_BYTES)),
            final_word: AtomicU64::new(NOT_FINAL),
            max_timestamp_us: AtomicU64::new(0),
            index: RwLock::new(index),
            sync: Mutex::new(SyncState::default()),
            writer_held: AtomicBool::new(false),
            consumed: AtomicBool::new(false),
            image: OnceLock::new(),
            reserved: AtomicU64::new(0),
            reserving: Mutex::new(()),
        }
    }

    /// Bytes from the extent's start backed by disk space, as far as this process knows.
    #[inline]
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// Records that the allocator reserved the first `bytes` of the extent.
    pub fn note_reserved(&self, bytes: u64) {
        self.reserved
            .fetch_max(bytes.min(self.len), Ordering::AcqRel);
    }

    /// Whether the reservation should grow before records reach `end`: less than half of
    /// [`RESERVE_AHEAD_BYTES`] would be left beyond it (and the extent is not all reserved).
    /// Growing early keeps the prefault window (which stops at the reservation) ahead of
    /// the appender.
    #[inline]
    pub fn reserve_due(&self, end: u64) -> bool {
        self.reserved() < end.saturating_add(RESERVE_AHEAD_BYTES / 2).min(self.len)
    }

    /// Makes sure disk space backs the extent's first `end` bytes, reserving up to
    /// [`RESERVE_AHEAD_BYTES`] beyond them (never past the extent) in one `fallocate` once
    /// less than half of that is left, so the next appends find their space reserved. A
    /// full disk is `DiskFull` when `end` itself is not backed, before anything is stored
    /// there; when only the room ahead is lacking the call succeeds (a later one retries).
    /// No lock but the extent's own reservation lock is held.
    pub fn ensure_reserved(&self, storage: &dyn Storage, end: u64) -> Result<()> {
        if !self.reserve_due(end) {
            return Ok(());
        }
        let _one = self.reserving.lock().recover();
        let have = self.reserved();
        if !self.reserve_due(end) {
            return Ok(());
        }
        assert!(end <= self.len, "reservation past the extent");
        let target = format::align_up(end.saturating_add(RESERVE_AHEAD_BYTES), format::PAGE_BYTES)
            .min(self.len);
        let path = &self.file.path;
        match storage.allocate(&self.file.file, path, self.start + have, target - have) {
            Ok(()) => {
                self.reserved.fetch_max(target, Ordering::AcqRel);
                Ok(())
            }
            // The bytes asked for are backed: only the room ahead is not, for now.
            Err(_) if end <= have => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Err(Error::DiskFull {
                path: path.clone(),
                requested_bytes: target - have,
            }),
            Err(e) => Err(Error::io("fallocate", path, e)),
        }
    }

    /// Reads the frames below the end of `image` from it (see the field); once.
    pub fn set_image(&self, image: Arc<[u8]>) {
        debug_assert!(image.len() as u64 <= self.data_limit);
        let _ = self.image.set(image);
    }

    /// Whether recovery gave the extent an image.
    pub fn has_image(&self) -> bool {
        self.image.get().is_some()
    }

    /// Marks the extent as held by its writer (the file's counter already counts it).
    pub fn hold(&self) {
        self.writer_held.store(true, Ordering::Release);
    }

    /// The writer is done with this extent. True when its file became deletable.
    pub fn release_writer(&self) -> bool {
        self.writer_held.swap(false, Ordering::AcqRel)
            && self.file.counters.release(self.extent_count)
    }

    /// Every consumer is done with this extent (or retention dropped it). Counted once; true
    /// when its file became deletable.
    pub fn mark_consumed(&self) -> bool {
        debug_assert!(!self.writer_held.load(Ordering::Acquire));
        !self.consumed.swap(true, Ordering::AcqRel) && self.file.counters.consume(self.extent_count)
    }

    /// Whether `mark_consumed` ran.
    pub fn is_consumed(&self) -> bool {
        self.consumed.load(Ordering::Acquire)
    }

    /// True for an extent adopted from a staged segment: its frames carry topic id 0 and
    /// their index in the extent instead of the topic's id and their offset.
    #[inline]
    pub fn relative(&self) -> bool {
        format::version_relative(self.file.header.version)
    }

    /// True for an extent of batch frames (`crate::batch`).
    #[inline]
    pub fn batched(&self) -> bool {
        format::version_batched(self.file.header.version)
    }

    /// What the offsets in this extent's frames and footer are relative to: its first
    /// offset in an adopted extent (written before the offsets were known), 0 otherwise.
    #[inline]
    pub fn base(&self) -> u64 {
        if self.relative() {
            self.first_offset
        } else {
            0
        }
    }

    /// What this extent's frames store for `offset`, and the topic id they carry: both
    /// relative to the extent in an adopted one, as they are otherwise.
    #[inline]
    fn stored(&self, offset: u64) -> Result<(u64, u32), FrameError> {
        let stored = offset
            .checked_sub(self.base())
            .ok_or(FrameError::WrongOffset)?;
        let topic_id = if self.relative() { 0 } else { self.topic_id };
        Ok((stored, topic_id))
    }

    /// [`Extent::decode_frame`] for a walker that remembers the frame it decoded last
    /// (`checked`): a frame's checksum is checked once, and a batch frame's later records are
    /// read from their entries alone.
    #[inline]
    pub fn decode_walking(
        &self,
        bytes: &[u8],
        position: u64,
        offset: u64,
        verify: bool,
        checked: &mut format::Checked,
    ) -> Result<FrameView, FrameError> {
        if self.batched() {
            let (stored, topic_id) = self.stored(offset)?;
            let mut view = crate::batch::decode_walking(
                bytes,
                position as usize,
                self.salt,
                topic_id,
                stored,
                verify,
                checked,
            )?;
            view.offset = offset;
            return Ok(view);
        }
        checked.walk(position, verify, |check| {
            self.decode_frame(bytes, position, offset, check)
        })
    }

    /// Decodes (and with `verify`, checks) the record of `offset` at `position` of `bytes`
    /// (this extent's bytes from its start), whatever the extent's frame version.
    #[inline]
    pub fn decode_frame(
        &self,
        bytes: &[u8],
        position: u64,
        offset: u64,
        verify: bool,
    ) -> Result<FrameView, FrameError> {
        let (stored, topic_id) = self.stored(offset)?;
        let position = position as usize;
        let mut view = if self.batched() {
            crate::batch::decode(bytes, position, self.salt, topic_id, stored, verify)?
        } else {
            format::decode_frame(bytes, position, self.salt, topic_id, stored, verify)?
        };
        view.offset = offset;
        Ok(view)
    }

    /// Extent length in blocks needed for one frame of `frame_bytes` (a record or a batch).
    pub fn blocks_needed(frame_bytes: u64, block_size: u64, index_interval_bytes: u64) -> u64 {
        let mut count = 1;
        loop {
            let len = count * block_size;
            let room = len - format::footer_bytes_max(len, index_interval_bytes);
            if format::BLOCK_HEADER_BYTES + frame_bytes <= room {
                return count;
            }
            count += 1;
        }
    }

    /// The identity slot now on disk at this extent's block, if it is a valid one.
    fn identity_on_disk(&self) -> Option<BlockIdentity> {
        let mut slot = [0u8; format::ID_LEN];
        self.file
            .map
            .copy_out(self.abs(format::ID_SLOT_AT as u64), &mut slot);
        BlockIdentity::decode(&slot)
    }

    /// An invariant broken: the block at this extent's place holds another extent's
    /// identity (`found`), which a write here would destroy.
    fn foreign_block(&self, topic: &str, what: &str, found: Option<BlockIdentity>) -> Error {
        Error::Corruption {
            topic: topic.to_owned(),
            offset: self.first_offset,
            path: self.file.path.clone(),
            position: self.start,
            reason: format!(
                "{what} block {} of this file, which holds {}; nothing was written there",
                self.block_index,
                found.map_or_else(
                    || "no extent".to_owned(),
                    |id| format!(
                        "an extent of topic {:?} from offset {}",
                        id.topic, id.first_offset
                    )
                ),
            ),
        }
    }

    /// Only over this extent's own identity (its salt) may its header be written: anything
    /// else there is another extent, which `what` would destroy.
    fn check_own_identity(&self, topic: &str, what: &str) -> Result<()> {
        let found = self.identity_on_disk();
        if found.as_ref().is_none_or(|id| id.salt != self.salt) {
            return Err(self.foreign_block(topic, what, found));
        }
        Ok(())
    }

    /// Writes the identity slot (before any record is written into the extent). The
    /// allocator hands out only blocks past every extent: one whose slot holds a valid
    /// identity is refused, not overwritten.
    pub fn write_identity(&self, topic: &str) -> Result<()> {
        debug_assert!(
            !self.relative(),
            "adopted extents keep their staged identity"
        );
        if let Some(found) = self.identity_on_disk() {
            return Err(self.foreign_block(topic, "the allocator handed out", Some(found)));
        }
        let id = BlockIdentity {
            version: self.file.header.version,
            topic_id: self.topic_id,
            block_index: self.block_index,
            extent_count: self.extent_count,
            salt: self.salt,
            file_seq: self.file.seq,
            first_offset: self.first_offset,
            topic: topic.to_owned(),
        };
        self.file
            .map
            .write_header(self.abs(format::ID_SLOT_AT as u64), &id.encode());
        Ok(())
    }

    /// Absolute position in the file's mapping of relative position `rel`.
    #[inline]
    pub fn abs(&self, rel: u64) -> usize {
        (self.start + rel) as usize
    }

    /// Copies a frame (header, then the payload) into its reserved range.
    #[inline]
    pub fn write_frame(&self, position: u64, header: &[u8], parts: &format::FrameParts<'_>) {
        let payload = parts.payload_len();
        let padded = format::frame_padded_len(payload);
        assert!(
            position + padded <= self.data_limit.min(self.reserved()),
            "frame past the extent's data limit or its disk space"
        );
        let pad_len = (padded - format::FRAME_HEADER_BYTES - payload) as usize;
        let pad = [0u8; format::FRAME_ALIGN as usize];
        let key = parts.key.unwrap_or(&[]);
        let headers_len = parts.headers.map(|h| (h.len() as u32).to_le_bytes());
        let (len, headers): (&[u8], &[u8]) = match (&headers_len, parts.headers) {
            (Some(len), Some(h)) => (len, h),
            _ => (&[], &[]),
        };
        #[expect(unsafe_code, reason = "writes into the mapped file")]
        // SAFETY: `[position, position + padded)` was reserved for this caller under the
        // topic lock and is not yet published, so no reader holds a slice over it.
        unsafe {
            self.file.map.write(
                self.abs(position),
                &[header, key, len, headers, parts.value, &pad[..pad_len]],
            );
        }
    }

    /// Lets `encode` write a frame of `len` bytes in place, at `position` of its reserved
    /// range: a batch frame encoded straight into the mapping, with no buffer between.
    #[inline]
    pub fn write_in_place<R>(
        &self,
        position: u64,
        len: u64,
        encode: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        assert!(
            position + len <= self.data_limit.min(self.reserved()),
            "frame past the extent's data limit or its disk space"
        );
        let len = usize::try_from(len).expect("a frame fits its extent");
        #[expect(unsafe_code, reason = "writes into the mapped file")]
        // SAFETY: `[position, position + len)` was reserved for this caller under the topic
        // lock and is not yet published, so no reader holds a slice over it.
        unsafe {
            self.file.map.fill(self.abs(position), len, encode)
        }
    }

    /// Copies an already encoded, padded frame into its reserved range.
    #[inline]
    pub fn write_encoded(&self, position: u64, frame: &[u8]) {
        assert!(
            position + frame.len() as u64 <= self.data_limit.min(self.reserved()),
            "frame past the extent's data limit or its disk space"
        );
        #[expect(unsafe_code, reason = "writes into the mapped file")]
        // SAFETY: `[position, position + len)` was reserved for this caller under the topic
        // lock and is not yet published, so no reader holds a slice over it.
        unsafe {
            self.file.map.write(self.abs(position), &[frame]);
        }
    }

    /// The published records: `(count, end)`.
    #[inline]
    pub fn published(&self) -> (u64, u64) {
        unpack(self.published.load(Ordering::Acquire))
    }

    #[inline]
    pub fn publish(&self, count: u64, end: u64) {
        self.published.store(pack(count, end), Ordering::Release);
    }

    /// Publishes `(count, end)` unless more is published already: a follower's move, which
    /// may race this process's own appender (shared mode); both only grow.
    pub fn publish_at_least(&self, count: u64, end: u64) {
        self.published.fetch_max(pack(count, end), Ordering::AcqRel);
    }

    /// `(count, end)` once the extent will take no more records.
    #[inline]
    pub fn final_state(&self) -> Option<(u64, u64)> {
        let w = self.final_word.load(Ordering::Acquire);
        (w != NOT_FINAL).then(|| unpack(w))
    }

    pub fn set_final(&self, count: u64, end: u64) {
        self.final_word.store(pack(count, end), Ordering::Release);
    }

    pub fn max_timestamp_us(&self) -> u64 {
        self.max_timestamp_us.load(Ordering::Acquire)
    }

    /// Sets the largest reserved timestamp (the topic lock holder only).
    pub fn set_max_timestamp(&self, ts: u64) {
        self.max_timestamp_us.store(ts, Ordering::Release);
    }

    /// Adds an index entry (the writer, under its topic lock).
    pub fn push_index(&self, entry: IndexEntry) {
        let mut index = self.index.write().recover();
        index.get_or_insert_with(Vec::new).push(entry);
    }

    pub fn sync_state(&self) -> MutexGuard<'_, SyncState> {
        self.sync.lock().recover()
    }

    /// Borrows `[rel, rel + len)` of published bytes.
    #[inline]
    pub fn bytes(&self, rel: usize, len: usize) -> &[u8] {
        let frames = self.published_frames();
        assert!(
            (rel + len) as u64 <= frames.end,
            "read past the published end"
        );
        frames.bytes(rel..rel + len)
    }

    /// Borrows the extent's bytes below `end`, a publication end the caller loaded.
    #[inline]
    fn published_prefix(&self, end: u64) -> &[u8] {
        #[expect(unsafe_code, reason = "borrows the mapped file")]
        // SAFETY: bytes below the published end were written before the Release store that
        // published them (the caller loaded it with Acquire) and are never written again; in a
        // read-only handle they are durable records the writer no longer touches.
        unsafe {
            self.file.map.slice(self.abs(0), end as usize)
        }
    }

    /// Borrows the extent's first `limit` bytes for recovery.
    ///
    /// Only recovery calls this: a writable open holds the directory lock and runs before any
    /// writer thread exists; a read-only open passes a limit no higher than the durable
    /// watermark or an end the writer reported published, below which the writer never
    /// writes again (or, in an extent the writer left, the end of one frame at a time).
    pub fn recovery_bytes(&self, limit: u64) -> &[u8] {
        self.recovery_bytes_at(u64::MAX, limit)
    }

    /// [`Extent::recovery_bytes`] for reading the frame at `position`: the image, when the
    /// extent has one that `position` lies in (the frame then ends in it too: a commit copy
    /// holds whole frames).
    pub fn recovery_bytes_at(&self, position: u64, limit: u64) -> &[u8] {
        if let Some(image) = self.image.get()
            && position < image.len() as u64
        {
            return &image[..image
                .len()
                .min(usize::try_from(limit).unwrap_or(usize::MAX))];
        }
        let limit = limit.min(self.len) as usize;
        #[expect(unsafe_code, reason = "borrows the mapped file")]
        // SAFETY: in bounds (clamped to the extent); per the contract above nobody writes
        // these bytes while recovery borrows them.
        unsafe {
            self.file.map.slice(self.abs(0), limit)
        }
    }

    /// A copy of the in-memory index.
    pub fn index_snapshot(&self) -> Vec<IndexEntry> {
        self.index.read().recover().clone().unwrap_or_default()
    }

    /// Replaces the in-memory index (recovery).
    pub fn set_index(&self, entries: Vec<IndexEntry>) {
        *self.index.write().recover() = Some(entries);
    }

    /// Decodes the published frame at `position`, expecting `offset`.
    #[inline]
    pub fn frame_at(
        &self,
        position: u64,
        offset: u64,
        verify: bool,
    ) -> Result<FrameView, FrameError> {
        self.published_frames().frame_at(position, offset, verify)
    }

    /// [`Extent::frame_at`] for a walker (see [`Extent::decode_walking`]).
    #[inline]
    pub fn frame_walking(
        &self,
        position: u64,
        offset: u64,
        verify: bool,
        checked: &mut format::Checked,
    ) -> Result<FrameView, FrameError> {
        self.published_frames()
            .frame_walking(position, offset, verify, checked)
    }

    /// The published bytes, loaded once, for reading many frames (a scan).
    pub fn published_frames(&self) -> PublishedFrames<'_> {
        let (_, end) = self.published();
        PublishedFrames {
            block: self,
            bytes: self.published_prefix(end),
            image: self.image.get().map(|image| &image[..]),
            end,
        }
    }

    /// The corruption error for a frame failure at `position`.
    pub fn corruption(&self, topic: &str, offset: u64, position: u64, err: FrameError) -> Error {
        Error::Corruption {
            topic: topic.to_owned(),
            offset,
            path: self.file.path.clone(),
            position: self.start + position,
            reason: err.describe().to_owned(),
        }
    }

    /// Start position and offset for a scan towards `target` offset: the last index entry at
    /// or before it (or the first record).
    pub fn index_floor_offset(&self, topic: &str, target: u64) -> Result<(u64, u64)> {
        let index = self.load_index(topic)?;
        let guard = index.read().recover();
        let entries = guard.as_deref().unwrap_or(&[]);
        let i = entries.partition_point(|e| e.offset <= target);
        Ok(match i {
            0 => (format::BLOCK_HEADER_BYTES, self.first_offset),
            _ => (entries[i - 1].position, entries[i - 1].offset),
        })
    }

    /// Start position and offset for a scan towards the first timestamp `>= target`.
    pub fn index_floor_time(&self, topic: &str, target: u64) -> Result<(u64, u64)> {
        let index = self.load_index(topic)?;
        let guard = index.read().recover();
        let entries = guard.as_deref().unwrap_or(&[]);
        let i = entries.partition_point(|e| e.max_timestamp_us < target);
        Ok(match i {
            0 => (format::BLOCK_HEADER_BYTES, self.first_offset),
            _ => (entries[i - 1].position, entries[i - 1].offset),
        })
    }

    /// The index, loading it from the footer the first time for recovered sealed extents.
    fn load_index(&self, topic: &str) -> Result<&RwLock<Option<Vec<IndexEntry>>>> {
        if self.index.read().recover().is_some() {
            return Ok(&self.index);
        }
        let mut slot = [0u8; format::PG_LEN];
        self.file
            .map
            .copy_out(self.abs(format::PG_SLOT_AT as u64), &mut slot);
        let entries = match Progress::decode(&slot) {
            Some(p) if p.state == ProgressState::Sealed => self.read_footer(topic, &p)?,
            // No usable footer: an empty index still works (scans from the first record).
            _ => Vec::new(),
        };
        *self.index.write().recover() = Some(entries);
        Ok(&self.index)
    }

    /// Reads and checks the footer of a sealed extent.
    pub fn read_footer(&self, topic: &str, progress: &Progress) -> Result<Vec<IndexEntry>> {
        // Both counts come from disk: checked, so a slot claiming more than the extent holds
        // is corruption, not an overflow.
        let at = progress.durable_end;
        let bytes_len = usize::try_from(progress.footer_count)
            .ok()
            .and_then(|n| n.checked_mul(format::IX_LEN))
            .filter(|&n| at.checked_add(n as u64).is_some_and(|end| end <= self.len));
        let Some(bytes_len) = bytes_len else {
            let position = at.min(self.len);
            return Err(self.corruption(topic, self.first_offset, position, FrameError::Truncated));
        };
        let mut buf = vec![0u8; bytes_len];
        self.file.map.copy_out(self.abs(at), &mut buf);
        if crc32fast::hash(&buf) != progress.footer_crc {
            return Err(Error::Corruption {
                topic: topic.to_owned(),
                offset: self.first_offset,
                path: self.file.path.clone(),
                position: self.start + at,
                reason: "index footer checksum mismatch".to_owned(),
            });
        }
        let base = self.base();
        buf.chunks_exact(format::IX_LEN)
            .filter_map(IndexEntry::decode)
            .map(|e| {
                let offset = e.offset.checked_add(base)?;
                Some(IndexEntry { offset, ..e })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Corruption {
                topic: topic.to_owned(),
                offset: self.first_offset,
                path: self.file.path.clone(),
                position: self.start + at,
                reason: "index footer offset past the largest offset".to_owned(),
            })
    }

    /// A sealed extent's bytes as its tier object (header, frames and index footer) and its
    /// progress slot; `None` unless the slot in the mapping says `Sealed`. Read with
    /// `pread` (the page cache's bytes, as the mapping's, without faulting the mapping in).
    /// A footer that fails its checksum, or a short read, is `Corruption`: damaged bytes are
    /// never uploaded.
    #[cfg(feature = "tier")]
    pub fn sealed_object(
        &self,
        storage: &dyn Storage,
        topic: &str,
    ) -> Result<Option<(Progress, Vec<u8>)>> {
        let Some(progress) = self
            .progress_on_disk()
            .filter(|p| p.state == ProgressState::Sealed)
        else {
            return Ok(None);
        };
        let end = usize::try_from(progress.footer_count)
            .ok()
            .and_then(|n| n.checked_mul(format::IX_LEN))
            .and_then(|n| progress.durable_end.checked_add(n as u64))
            .filter(|&end| end <= self.len && progress.durable_end >= format::BLOCK_HEADER_BYTES);
        let Some(end) = end else {
            let position = progress.durable_end.min(self.len);
            return Err(self.corruption(topic, self.first_offset, position, FrameError::Truncated));
        };
        let mut bytes = vec![0u8; end as usize];
        let read = storage
            .read_at(
                &self.file.file,
                &self.file.path,
                &mut bytes,
                self.abs(0) as u64,
            )
            .map_err(|e| Error::io("read data file", &self.file.path, e))?;
        if read != bytes.len() {
            let position = read as u64;
            return Err(self.corruption(topic, self.first_offset, position, FrameError::Truncated));
        }
        if crc32fast::hash(&bytes[progress.durable_end as usize..]) != progress.footer_crc {
            return Err(Error::Corruption {
                topic: topic.to_owned(),
                offset: self.first_offset,
                path: self.file.path.clone(),
                position: self.start + progress.durable_end,
                reason: "index footer checksum mismatch".to_owned(),
            });
        }
        Ok(Some((progress, bytes)))
    }

    /// Makes the published records durable and records that in the progress slot; seals the
    /// extent (footer, then `Sealed`) once it is final and complete. Returns true when sealed.
    ///
    /// Order: data (and the identity slot on the first sync) are msynced before the progress
    /// slot that describes them is written, so a durable progress slot never claims bytes that
    /// are not durable.
    /// With `closing`, a non-final extent is marked `Clean` instead of `Open` (no appends
    /// follow until the next open).
    pub fn sync(&self, storage: &dyn Storage, topic: &str, closing: bool) -> Result<bool> {
        self.sync_inner(storage, topic, closing, true)
    }

    /// [`Extent::sync`]; without `may_seal` a final extent gets an `Open` (or `Clean`) claim
    /// instead of its seal (shared mode seals only under the topic's seal lock).
    fn sync_inner(
        &self,
        storage: &dyn Storage,
        topic: &str,
        closing: bool,
        may_seal: bool,
    ) -> Result<bool> {
        let mut st = self.sync_state();
        if st.sealed_on_disk || st.deleted {
            return Ok(true);
        }
        let (count, end) = self.published();
        let sealing = may_seal && self.final_state() == Some((count, end));
        if !sealing && end <= st.progress_end && (!closing || st.clean_on_disk) {
            return Ok(false);
        }
        let footer = if sealing {
            let footer = self.footer(topic, end)?;
            // Reserved at the roll for extents this process wrote; a recovered one's here.
            self.ensure_reserved(storage, end + footer.bytes.len() as u64)?;
            self.file.map.write_header(self.abs(end), &footer.bytes);
            Some(footer)
        } else {
            None
        };
        let data_end = end + footer.as_ref().map_or(0, |f| f.bytes.len() as u64);
        self.sync_data(&mut st, storage, data_end)?;
        let clean = !sealing && closing;
        let progress = Progress {
            state: if sealing {
                ProgressState::Sealed
            } else if clean {
                ProgressState::Clean
            } else {
                ProgressState::Open
            },
            durable_end: end,
            record_count: count,
            max_timestamp_us: self.max_timestamp_us(),
            footer_count: footer.as_ref().map_or(0, |f| f.count),
            footer_crc: footer.as_ref().map_or(0, |f| f.crc),
        };
        self.clear_copies(end);
        self.write_progress(storage, topic, &progress)?;
        st.progress_end = end;
        st.sealed_on_disk = sealing;
        st.clean_on_disk = clean;
        Ok(sealing)
    }

    /// At most the bytes of the index footer a seal writes after records ending at `end`.
    pub fn footer_bytes_bound(&self, end: u64) -> u64 {
        let entries = self
            .index
            .read()
            .recover()
            .as_ref()
            .map_or(u64::MAX, |e| e.len() as u64);
        entries
            .saturating_mul(format::IX_LEN as u64)
            .min(self.len.saturating_sub(end))
    }

    /// The index footer of this extent, ended at `end`, as a seal writes it right after the
    /// last record.
    fn footer(&self, topic: &str, end: u64) -> Result<Footer> {
        let index = self.load_index(topic)?;
        let guard = index.read().recover();
        let entries = guard.as_deref().unwrap_or(&[]);
        // Records written under a coarser index interval than this open's may leave less
        // room than the index needs: then every k-th entry goes to disk (the first always),
        // a sparser index that seeks use the same way.
        let room = ((self.len - end) / format::IX_LEN as u64) as usize;
        let stride = entries.len().div_ceil(room.max(1)).max(1);
        let kept = entries.iter().step_by(stride).take(room);
        let mut bytes = Vec::with_capacity(entries.len().min(room) * format::IX_LEN);
        let base = self.base();
        for e in kept {
            let stored = IndexEntry {
                offset: e.offset - base,
                ..*e
            };
            bytes.extend_from_slice(&stored.encode());
        }
        assert!(
            end + bytes.len() as u64 <= self.len,
            "footer past the extent"
        );
        Ok(Footer {
            count: (bytes.len() / format::IX_LEN) as u64,
            crc: crc32fast::hash(&bytes),
            bytes,
        })
    }

    /// Shared mode's [`Extent::sync`]: other processes append to and sync this extent too.
    /// The progress slot and the commit copies are written into the mapping only under the
    /// topic's append lock (`lock`, `None` when it could not be had in time: the slot waits
    /// for the next pass, the data is made durable all the same), and never over what
    /// another process wrote there: a seal stays, a retired extent stays, a durable end never
    /// moves back; their msyncs run after it is released. A few new records take one msync
    /// (their bytes in a commit copy beside the claim, see [`Extent::stage_commit`];
    /// `durable_offset` is the topic's durable next offset across processes); otherwise the
    /// data is made durable without any lock (the page cache is one, so any process's msync
    /// covers everyone's bytes), then the claim. An extent that ended is sealed under the
    /// topic's seal lock (`seal_lock`, see [`Extent::seal_shared`]). Returns true when the
    /// extent is sealed (here or by another process) or retired: nothing more to do.
    pub fn sync_shared<S, G>(
        &self,
        storage: &dyn Storage,
        topic: &str,
        closing: bool,
        durable_offset: u64,
        (seal_lock, lock): (impl FnOnce() -> Option<S>, impl Fn() -> Option<G>),
    ) -> Result<bool> {
        let st = self.sync_state();
        if st.sealed_on_disk || st.deleted {
            return Ok(true);
        }
        let (count, end) = self.published();
        if self.final_state() == Some((count, end)) {
            drop(st);
            return self.seal_shared(storage, topic, seal_lock, lock);
        }
        if closing || end <= st.progress_end {
            return self.sync_shared_in_two(st, storage, topic, closing, lock);
        }
        // The topic's lock before this extent's sync state, never after: an appender holding
        // the lock may restore the extent's sync state (a line-up after another's roll).
        drop(st);
        let Some(guard) = lock() else {
            return self.sync_shared_in_two(
                self.sync_state(),
                storage,
                topic,
                closing,
                || None::<G>,
            );
        };
        if let Some(done) = self.settled_on_disk() {
            return Ok(done);
        }
        match self.stage_commit(topic, count, end, durable_offset)? {
            Some(true) => {
                // Appenders go on meanwhile; a later writer of this header keeps the copy
                // that continues the claim, which is this one until it is durable.
                drop(guard);
                crate::process::crash_point("commit-staged");
                let (map, path) = (&self.file.map, &self.file.path);
                storage
                    .sync_map(map, path, self.abs(0), end as usize)
                    .map_err(|e| Error::io("msync", path, e))?;
                self.note_committed(end);
                Ok(false)
            }
            Some(false) => {
                // Another process's sync claimed these records already.
                self.note_committed(end);
                Ok(false)
            }
            None => {
                self.sync_shared_in_two(self.sync_state(), storage, topic, closing, || Some(guard))
            }
        }
    }

    /// Under the topic's append lock (or, for a seal, its seal lock): true or false when the
    /// progress slot on disk settles the extent (sealed, or retired: nothing more to do),
    /// `None` otherwise.
    fn settled_on_disk(&self) -> Option<bool> {
        let mut st = self.sync_state();
        if st.sealed_on_disk || st.deleted {
            return Some(true);
        }
        match self.progress_on_disk().map(|p| p.state) {
            Some(ProgressState::Sealed) => {
                st.sealed_on_disk = true;
                Some(true)
            }
            Some(ProgressState::Deleted | ProgressState::Consumed) => {
                st.deleted = true;
                Some(true)
            }
            _ => None,
        }
    }

    /// [`Extent::sync_shared`] in two steps: the data (no lock), then the claim under the
    /// lock. An `Open` claim is written into the mapping under the lock and made durable
    /// after it is released (it claims only bytes the first msync made durable, so writeback
    /// may take it to disk at any moment); a close's `Clean` mark is written and synced
    /// under it. Never seals: only [`Extent::seal_shared`] does, under the seal lock.
    fn sync_shared_in_two<G>(
        &self,
        mut st: MutexGuard<'_, SyncState>,
        storage: &dyn Storage,
        topic: &str,
        closing: bool,
        lock: impl FnOnce() -> Option<G>,
    ) -> Result<bool> {
        if st.sealed_on_disk || st.deleted {
            return Ok(true);
        }
        let (count, end) = self.published();
        self.sync_data(&mut st, storage, end)?;
        if end <= st.progress_end && (!closing || st.clean_on_disk) {
            return Ok(false);
        }
        drop(st);
        let Some(guard) = lock() else {
            return Ok(false);
        };
        if let Some(done) = self.settled_on_disk() {
            return Ok(done);
        }
        // Another process claimed more, or as much (a close still marks it clean); a claim
        // over what a commit copy holds never moves back to before its end.
        if let Some(p) = self.progress_on_disk() {
            let claimed = self.claim_with_copies(p);
            if claimed > end || (claimed == end && !closing) {
                let mut st = self.sync_state();
                st.progress_end = st.progress_end.max(p.durable_end);
                return Ok(false);
            }
        }
        if closing {
            return self.sync_inner(storage, topic, closing, false);
        }
        self.check_own_identity(topic, "a progress slot was to be written into")?;
        let Some(at) = self.note_synced(count, end) else {
            return Ok(false);
        };
        drop(guard);
        crate::process::crash_point("claim-written");
        self.sync_progress(storage, at)?;
        Ok(false)
    }

    /// Shared mode's seal of an extent that ended, every record of it published: data and
    /// index footer are made durable, then the `Sealed` slot that names the footer's
    /// checksum. Only the holder of the topic's seal lock (`seal_lock`) writes a footer, so
    /// the footer stays this process's until its slot is written; the append lock (`lock`)
    /// is held only to look at the slot and to write it into the mapping, never across an
    /// msync, so appenders of every process go on while a seal syncs. Without the seal lock
    /// (another process holds it past its wait) the extent gets an `Open` claim instead, and
    /// its seal is left to a later pass. Returns true once the extent is sealed or retired.
    fn seal_shared<S, G>(
        &self,
        storage: &dyn Storage,
        topic: &str,
        seal_lock: impl FnOnce() -> Option<S>,
        lock: impl Fn() -> Option<G>,
    ) -> Result<bool> {
        let (count, end) = self.published();
        let Some(_seal) = seal_lock() else {
            // Claimed `Open` meanwhile: the records are durable and claimed all the same.
            return self.sync_shared_in_two(self.sync_state(), storage, topic, false, lock);
        };
        // Sealed (by the seal lock's last holder) or retired meanwhile: its footer stays.
        // Read without the append lock: only seal-lock holders write a `Sealed` slot, and
        // only a retirement writes over one (a torn read then costs a footer write into an
        // extent no one reads again).
        if let Some(done) = self.settled_on_disk() {
            return Ok(done);
        }
        crate::process::crash_point("seal-checked");
        let footer = self.footer(topic, end)?;
        let footer_end = end + footer.bytes.len() as u64;
        self.ensure_reserved(storage, footer_end)?;
        self.file.map.write_header(self.abs(end), &footer.bytes);
        self.sync_data(&mut self.sync_state(), storage, footer_end)?;
        crate::process::crash_point("seal-footer");
        let progress = Progress {
            state: ProgressState::Sealed,
            durable_end: end,
            record_count: count,
            max_timestamp_us: self.max_timestamp_us(),
            footer_count: footer.count,
            footer_crc: footer.crc,
        };
        let at = {
            let Some(_guard) = lock() else {
                return Ok(false);
            };
            if let Some(done) = self.settled_on_disk() {
                return Ok(done);
            }
            self.clear_copies(end);
            self.put_progress(topic, &progress)?
        };
        self.sync_progress(storage, at)?;
        let mut st = self.sync_state();
        st.synced_end = st.synced_end.max(end);
        st.progress_end = end;
        st.sealed_on_disk = true;
        st.clean_on_disk = false;
        Ok(true)
    }

    /// Makes the bytes below `to` durable (from where the last sync of this handle ended,
    /// `st`), claiming nothing.
    fn sync_data(&self, st: &mut SyncState, storage: &dyn Storage, to: u64) -> Result<()> {
        if to > st.synced_end {
            let (map, path) = (&self.file.map, &self.file.path);
            storage
                .sync_map(
                    map,
                    path,
                    self.abs(st.synced_end),
                    (to - st.synced_end) as usize,
                )
                .map_err(|e| Error::io("msync", path, e))?;
            // A footer past the records is not theirs: the records end at the published end.
            st.synced_end = to.min(self.published().1);
        }
        Ok(())
    }

    /// How far the progress slot `p` and the commit copies that continue it claim.
    fn claim_with_copies(&self, mut p: Progress) -> u64 {
        if p.state != ProgressState::Open {
            return p.durable_end;
        }
        let copies = self.copies_on_disk();
        for _ in 0..copies.len() {
            let Some(c) = CommitCopy::continuing(&copies, p.durable_end, |_| true) else {
                break;
            };
            p.extend_over(c);
        }
        p.durable_end
    }

    /// True when everything published is durable (sealed, retired, or synced through its
    /// published end).
    pub fn is_synced(&self) -> bool {
        let st = self.sync_state();
        st.sealed_on_disk || st.deleted || st.synced_end >= self.published().1
    }

    /// The published range not yet made durable, `(from, count, end)` with `count` the
    /// records below `end`; `None` when there is none. On the first sync `from` is 0, so the
    /// identity slot is included.
    pub fn unsynced_range(&self) -> Option<(u64, u64, u64)> {
        let st = self.sync_state();
        if st.sealed_on_disk || st.deleted {
            return None;
        }
        let (count, end) = self.published();
        (end > st.synced_end).then_some((st.synced_end, count, end))
    }

    /// A group commit made the data below `end` (`count` records) durable: records that,
    /// and writes the progress slot (state `Open`) claiming it, unsynced. Returns the slot's
    /// absolute position when it was written; the caller msyncs it before acknowledging, so
    /// the durable point on disk covers every acknowledged record.
    pub fn note_synced(&self, count: u64, end: u64) -> Option<usize> {
        let mut st = self.sync_state();
        st.synced_end = st.synced_end.max(end);
        // A retired or sealed extent's slot is final; an older claim is never written back.
        if st.deleted || st.sealed_on_disk || end <= st.progress_end {
            return None;
        }
        let progress = Progress {
            state: ProgressState::Open,
            durable_end: end,
            record_count: count,
            max_timestamp_us: self.max_timestamp_us(),
            footer_count: 0,
            footer_crc: 0,
        };
        self.clear_copies(end);
        let at = self.abs(format::PG_SLOT_AT as u64);
        self.file.map.write_header(at, &progress.encode());
        st.progress_end = end;
        st.clean_on_disk = false;
        Some(at)
    }

    /// A one-sync group commit (FORMAT.md, "commit copies"): writes, unsynced, the progress
    /// slot's claim moved as far as is known durable, and a copy of the published bytes from
    /// there to `end` (`count` records) into the copy slot the claim on disk does not rely
    /// on. `durable_offset`: the topic's records below it are durable (their syncs returned).
    /// The caller holds off every other writer of this header (the flusher's lock, or in
    /// shared mode the topic's append lock), msyncs `[abs(0), abs(end))` and then calls
    /// [`Extent::note_committed`]. `Some(false)`: the claim on disk already covers `end`.
    /// `None`: this group cannot take the path (the slot is not `Open` or is damaged, or the
    /// bytes do not fit a copy): sync the data, then the claim.
    pub fn stage_commit(
        &self,
        topic: &str,
        count: u64,
        end: u64,
        durable_offset: u64,
    ) -> Result<Option<bool>> {
        let st = self.sync_state();
        // Before the identity slot is durable, nothing else goes into its page: a torn write
        // of the page could keep a copy and lose the identity, which recovery would take for
        // damage. The first sync (from 0) takes the two-step path, identity included.
        if st.sealed_on_disk || st.deleted || st.synced_end == 0 {
            return Ok(None);
        }
        let Some(disk) = self.claim_on_disk() else {
            return Ok(None);
        };
        let copies = self.copies_on_disk();
        // The claim moves over copies whose records are known durable, in chain order.
        let mut claim = disk;
        for _ in 0..copies.len() {
            let Some(c) = CommitCopy::continuing(&copies, claim.durable_end, |c| {
                self.first_offset.saturating_add(c.record_count) <= durable_offset
            }) else {
                break;
            };
            claim.extend_over(c);
        }
        if end <= claim.durable_end {
            return Ok(Some(false));
        }
        let len = (end - claim.durable_end) as usize;
        if len > format::CC_PAYLOAD_MAX || count < claim.record_count {
            return Ok(None);
        }
        self.check_own_identity(topic, "a commit copy was to be written into")?;
        // Keep the copy that continues the claim on disk (the longer, if both do): a torn
        // write of this header must still leave a chain from it. Else overwrite the older.
        let rank = |c: &Option<CommitCopy>| {
            c.as_ref()
                .map_or((false, 0), |c| (c.start == disk.durable_end, c.end()))
        };
        let slot = usize::from(rank(&copies[0]) > rank(&copies[1]));
        let mut bytes = vec![0u8; len];
        self.file
            .map
            .copy_out(self.abs(claim.durable_end), &mut bytes);
        let copy = CommitCopy {
            salt: self.salt,
            start: claim.durable_end,
            record_count: count,
            max_timestamp_us: self.max_timestamp_us(),
            bytes,
        };
        if claim != disk {
            let at = self.abs(format::PG_SLOT_AT as u64);
            self.file.map.write_header(at, &claim.encode());
        }
        let at = self.abs(format::CC_SLOTS_AT[slot] as u64);
        self.file.map.write_header(at, &copy.encode());
        drop(st);
        Ok(Some(true))
    }

    /// A one-sync group commit's msync returned: everything below `end` is durable and
    /// claimed (by the progress slot and a commit copy).
    pub fn note_committed(&self, end: u64) {
        let mut st = self.sync_state();
        st.synced_end = st.synced_end.max(end);
        st.progress_end = st.progress_end.max(end);
        st.clean_on_disk = false;
    }

    /// The progress slot on disk as a claim a group commit may move: an `Open` one, or none
    /// yet (a blank slot claims the start of the records). `None` for any other state and
    /// for a damaged slot.
    fn claim_on_disk(&self) -> Option<Progress> {
        let disk = self.progress_bytes();
        match Progress::decode(&disk) {
            Some(p) if p.state == ProgressState::Open => Some(p),
            Some(_) => None,
            None if disk.iter().all(|&b| b == 0) => Some(Progress::blank()),
            None => None,
        }
    }

    /// Zeroes the commit-copy slots a claim up to `end` makes needless (every one but a copy
    /// of this extent reaching past `end`), in the header page the claim's msync writes: so
    /// a copy never outlives its use, and damage to one is told from a stale one.
    fn clear_copies(&self, end: u64) {
        for at in format::CC_SLOTS_AT {
            let at = self.abs(at as u64);
            let mut b = [0u8; format::CC_SLOT_LEN];
            self.file.map.copy_out(at, &mut b);
            // Most extents never had a copy: a blank slot is left as it is, undecoded.
            if b.iter().all(|&x| x == 0) {
                continue;
            }
            let needed =
                CommitCopy::decode(&b).is_some_and(|c| c.salt == self.salt && c.end() > end);
            if !needed {
                self.file.map.write_header(at, &[0u8; format::CC_SLOT_LEN]);
            }
        }
    }

    /// The two commit copies in the header, those of this extent (its salt) only.
    fn copies_on_disk(&self) -> [Option<CommitCopy>; 2] {
        let mut header = [0u8; format::BLOCK_HEADER_BYTES as usize];
        self.file.map.copy_out(self.abs(0), &mut header);
        CommitCopy::decode_slots(&header)
            .0
            .map(|c| c.filter(|c| c.salt == self.salt))
    }

    /// Marks the extent `Consumed` (every consumer is done with it, or retention dropped it)
    /// or `Deleted` (its topic was deleted) on disk; recovery skips it from then on and the
    /// flusher no longer touches it.
    pub fn retire(&self, storage: &dyn Storage, topic: &str, state: ProgressState) -> Result<()> {
        debug_assert!(matches!(
            state,
            ProgressState::Consumed | ProgressState::Deleted
        ));
        let mut st = self.sync_state();
        if st.deleted {
            return Ok(());
        }
        let (count, end) = self.published();
        let progress = Progress {
            state,
            durable_end: end,
            record_count: count,
            max_timestamp_us: self.max_timestamp_us(),
            footer_count: 0,
            footer_crc: 0,
        };
        self.write_progress(storage, topic, &progress)?;
        st.deleted = true;
        Ok(())
    }

    /// Shared mode, under the topic's append lock, after a holder died: erases the frames
    /// it copied from `from` (the published end) on and never published. Each frame's
    /// header is zeroed, in order, up to the first header that is already zero (a dead
    /// holder's frames are contiguous from the published end; one torn mid-copy ends them),
    /// so no scan reads them as records, and no later extent's offsets collide with theirs.
    /// No reader borrows these bytes: they lie past the published end. The zeroed range is
    /// made durable: after a power loss a frame that writeback had flushed would be back.
    pub fn erase_frames_from(&self, storage: &dyn Storage, from: u64) -> Result<()> {
        let mut pos = from;
        let mut erased_to = from;
        while pos + format::FRAME_HEADER_BYTES <= self.len {
            let mut header = [0u8; format::FRAME_HEADER];
            self.file.map.copy_out(self.abs(pos), &mut header);
            if header.iter().all(|&b| b == 0) {
                break;
            }
            self.file
                .map
                .write_header(self.abs(pos), &[0u8; format::FRAME_HEADER]);
            erased_to = pos + format::FRAME_HEADER_BYTES;
            let len = if self.batched() {
                // A batch frame is longer than a version-1 header: zeroing that much of it
                // never reaches the next frame.
                crate::batch::frame_span(&header)
            } else {
                let magic =
                    u16::from_le_bytes([header[format::FR_MAGIC], header[format::FR_MAGIC + 1]]);
                let len = u64::from(format::get_u32(&header, format::FR_LEN));
                (magic == format::FRAME_MAGIC && len >= format::FRAME_HEADER_BYTES).then_some(len)
            };
            let Some(len) = len else {
                break;
            };
            pos += format::align_up(len, format::FRAME_ALIGN);
        }
        if erased_to > from {
            storage
                .sync_map(
                    &self.file.map,
                    &self.file.path,
                    self.abs(from),
                    (erased_to - from) as usize,
                )
                .map_err(|e| Error::io("msync", &self.file.path, e))?;
        }
        Ok(())
    }

    /// Shared mode: true when the extent's progress slot on disk (through the mapping) says
    /// it is retired (`Consumed` or `Deleted`, by the housekeeping leader); it is then known
    /// as such here too, so no sync of this handle touches it again.
    pub fn check_retired_on_disk(&self) -> bool {
        let mut st = self.sync_state();
        if st.deleted {
            return true;
        }
        let retired = self
            .progress_on_disk()
            .is_some_and(|p| matches!(p.state, ProgressState::Consumed | ProgressState::Deleted));
        st.deleted |= retired;
        retired
    }

    /// The progress slot as it is in the mapping (other processes write it too); `None`
    /// when blank or damaged.
    fn progress_on_disk(&self) -> Option<Progress> {
        Progress::decode(&self.progress_bytes())
    }

    /// The progress slot's bytes as they are in the mapping.
    fn progress_bytes(&self) -> [u8; format::PG_LEN] {
        let mut disk = [0u8; format::PG_LEN];
        self.file
            .map
            .copy_out(self.abs(format::PG_SLOT_AT as u64), &mut disk);
        disk
    }

    /// Writes and msyncs the progress slot.
    pub fn write_progress(
        &self,
        storage: &dyn Storage,
        topic: &str,
        progress: &Progress,
    ) -> Result<()> {
        let at = self.put_progress(topic, progress)?;
        self.sync_progress(storage, at)
    }

    /// Writes the progress slot into the mapping, over this extent's own identity only;
    /// returns its absolute position for [`Extent::sync_progress`].
    fn put_progress(&self, topic: &str, progress: &Progress) -> Result<usize> {
        self.check_own_identity(topic, "a progress slot was to be written into")?;
        let at = self.abs(format::PG_SLOT_AT as u64);
        self.file.map.write_header(at, &progress.encode());
        Ok(at)
    }

    /// Makes the progress slot at `at` (and the header page around it) durable.
    fn sync_progress(&self, storage: &dyn Storage, at: usize) -> Result<()> {
        storage
            .sync_map(&self.file.map, &self.file.path, at, format::PG_LEN)
            .map_err(|e| Error::io("msync", &self.file.path, e))
    }

    /// Sets state recovered from disk.
    pub fn restore(&self, count: u64, end: u64, max_ts: u64, synced_end: u64, disk: ProgressState) {
        self.publish(count, end);
        self.max_timestamp_us.store(max_ts, Ordering::Release);
        let mut st = self.sync_state();
        st.synced_end = synced_end;
        st.progress_end = synced_end;
        st.sealed_on_disk = disk == ProgressState::Sealed;
        st.clean_on_disk = disk == ProgressState::Clean && synced_end == end;
    }
}

/// An index footer as a seal writes it: its bytes, entries and checksum.
#[derive(Debug)]
struct Footer {
    bytes: Vec<u8>,
    count: u64,
    crc: u32,
}

/// An extent's published bytes as of one load of its publication word.
#[derive(Debug)]
pub struct PublishedFrames<'a> {
    block: &'a Extent,
    bytes: &'a [u8],
    /// The extent's image (see `Extent::image`), read for the frames that start in it.
    image: Option<&'a [u8]>,
    end: u64,
}

impl<'a> PublishedFrames<'a> {
    /// The published end this view covers.
    #[inline]
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Decodes (and with `verify`, checks) the frame of `offset` at `position`.
    #[inline]
    pub fn frame_at(
        &self,
        position: u64,
        offset: u64,
        verify: bool,
    ) -> Result<FrameView, FrameError> {
        self.frame_walking(position, offset, verify, &mut format::Checked::default())
    }

    /// [`PublishedFrames::frame_at`] for a walker (see [`Extent::decode_walking`]).
    #[inline]
    pub fn frame_walking(
        &self,
        position: u64,
        offset: u64,
        verify: bool,
        checked: &mut format::Checked,
    ) -> Result<FrameView, FrameError> {
        if position >= self.end {
            return Err(FrameError::End);
        }
        let bytes = match self.image {
            Some(image) if position < image.len() as u64 => image,
            _ => self.bytes,
        };
        match self
            .block
            .decode_walking(bytes, position, offset, verify, checked)
        {
            // Zero bytes inside the published range are damage, not the end.
            Err(FrameError::End) => Err(FrameError::BadMagic),
            other => other,
        }
    }

    /// The records after `view` (one this view decoded) in its batch frame, for a scan to
    /// read in order; `None` in a frame of one record.
    #[inline]
    pub fn walk_after(&self, view: &FrameView) -> Option<crate::batch::FrameWalk<'a>> {
        if !self.block.batched() {
            return None;
        }
        let (stored, _) = self.block.stored(view.offset).ok()?;
        crate::batch::FrameWalk::after(self.bytes(view.checked.clone()), view, stored)
    }

    /// The bytes of `range` (inside a frame this view decoded).
    #[inline]
    pub fn bytes(&self, range: std::ops::Range<usize>) -> &'a [u8] {
        match self.image {
            Some(image) if range.end <= image.len() => &image[range],
            _ => &self.bytes[range],
        }
    }
}

//! Readers: zero-copy records, named cursors with commit modes, seek by offset and by time.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{CommitMode, ReaderOptions, SPIN_MAX, StartPosition, Visibility};
use crate::cursor::CursorFile;
use crate::error::{Error, Result};
use crate::extent::Extent;
use crate::format::{Checked, FrameView};
use crate::headers::{HeaderBlock, HeaderIter};
use crate::reclaim::Reclaimer;
use crate::status::Status;
use crate::tier::{LoadedObject, RemoteReader, Tier};
use crate::topic::Topic;

/// A record borrowed from the mapping: valid until the reader moves on.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// The record's offset in its topic.
    pub offset: u64,
    /// Microseconds since the Unix epoch.
    pub timestamp_us: u64,
    /// The key, if the record has one.
    pub key: Option<&'a [u8]>,
    /// The value, borrowed from the mapped file (or an object read from the tier).
    pub value: &'a [u8],
    /// The headers, if the record has any.
    pub headers: Option<HeaderBlock<'a>>,
    holder: HolderRef<'a>,
    key_range: Option<(usize, usize)>,
    headers_range: Option<(usize, usize)>,
    value_range: (usize, usize),
}

/// What a record's bytes live in: a mapped extent, or an extent object read from the
/// tier's bucket (offsets below the first one kept on disk).
#[derive(Debug, Clone)]
enum Holder {
    Extent(Arc<Extent>),
    Object(Arc<LoadedObject>),
}

impl Holder {
    fn bytes(&self, range: Range<usize>) -> &[u8] {
        match self {
            Holder::Extent(block) => block.bytes(range.start, range.len()),
            Holder::Object(object) => object.bytes(range),
        }
    }
}

/// A borrowed [`Holder`].
#[derive(Debug, Clone, Copy)]
enum HolderRef<'a> {
    Extent(&'a Arc<Extent>),
    Object(&'a Arc<LoadedObject>),
}

impl<'a> RecordRef<'a> {
    /// The data file holding the record and the byte position of its value in that file
    /// (for inspection tools); `None` for a record read from the tier's bucket.
    pub fn location(&self) -> Option<(&'a std::path::Path, u64)> {
        match self.holder {
            HolderRef::Extent(block) => Some((
                &block.file.path,
                block.abs(self.value_range.0 as u64) as u64,
            )),
            HolderRef::Object(_) => None,
        }
    }

    /// The record `view` decoded in `holder`, its parts borrowed from `bytes`.
    fn from_view(
        holder: HolderRef<'a>,
        view: &FrameView,
        bytes: impl Fn(Range<usize>) -> &'a [u8],
    ) -> RecordRef<'a> {
        RecordRef {
            offset: view.offset,
            timestamp_us: view.timestamp_us,
            key: view.key.clone().map(&bytes),
            value: bytes(view.value.clone()),
            headers: view.headers.clone().map(|r| HeaderBlock::checked(bytes(r))),
            holder,
            key_range: view.key.as_ref().map(|r| (r.start, r.end)),
            headers_range: view.headers.as_ref().map(|r| (r.start, r.end)),
            value_range: (view.value.start, view.value.end),
        }
    }

    /// The headers in order; empty when the record has none.
    pub fn headers(&self) -> HeaderIter<'a> {
        self.headers
            .map_or_else(HeaderIter::empty, HeaderBlock::iter)
    }

    /// An owned handle to the same bytes (no copy: it keeps the mapping alive).
    pub fn to_record(&self) -> Record {
        let holder = match self.holder {
            HolderRef::Extent(block) => Holder::Extent(Arc::clone(block)),
            HolderRef::Object(object) => Holder::Object(Arc::clone(object)),
        };
        Record {
            holder,
            offset: self.offset,
            timestamp_us: self.timestamp_us,
            key: self.key_range.map(|(a, b)| a..b),
            headers: self.headers_range.map(|(a, b)| a..b),
            value: self.value_range.0..self.value_range.1,
        }
    }
}

/// An owned, zero-copy record: holds its file's mapping alive for as long as it lives.
#[derive(Debug, Clone)]
pub struct Record {
    holder: Holder,
    offset: u64,
    timestamp_us: u64,
    key: Option<Range<usize>>,
    headers: Option<Range<usize>>,
    value: Range<usize>,
}

impl Record {
    fn new(holder: Holder, view: &FrameView) -> Record {
        Record {
            offset: view.offset,
            timestamp_us: view.timestamp_us,
            key: view.key.clone(),
            headers: view.headers.clone(),
            value: view.value.clone(),
            holder,
        }
    }
    /// The record's offset in its topic.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Microseconds since the Unix epoch.
    pub fn timestamp_us(&self) -> u64 {
        self.timestamp_us
    }
    /// The key, if the record has one.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.clone().map(|r| self.holder.bytes(r))
    }
    /// The value, borrowed from the mapped file (or an object read from the tier).
    pub fn value(&self) -> &[u8] {
        self.holder.bytes(self.value.clone())
    }
    /// The headers' entries, if the record has any.
    pub fn header_block(&self) -> Option<HeaderBlock<'_>> {
        self.headers
            .clone()
            .map(|r| HeaderBlock::checked(self.holder.bytes(r)))
    }
    /// The headers in order; empty when the record has none.
    pub fn headers(&self) -> HeaderIter<'_> {
        self.header_block()
            .map_or_else(HeaderIter::empty, HeaderBlock::iter)
    }
}

/// What a reader needs of the handle it was made from.
#[derive(Debug)]
pub(crate) struct ReaderHandle {
    /// Closed, forked, read-only.
    pub status: Arc<Status>,
    /// Runs after a commit: the slowest group may have moved.
    pub reclaim: Arc<Reclaimer>,
    /// The handle's tier: offsets below the first kept on disk are read from its bucket.
    pub tier: Option<Arc<Tier>>,
}

/// Reads one topic in offset order, from the mapping, with no copy.
#[derive(Debug)]
pub struct Reader {
    handle: ReaderHandle,
    topic: Arc<Topic>,
    cursor: Option<Arc<CursorFile>>,
    mode: CommitMode,
    verify: bool,
    visibility: Visibility,
    spin: Duration,
    /// Extent holding `next_offset`, once resolved.
    block: Option<Arc<Extent>>,
    /// Position of `next_offset` in `block`.
    pos: u64,
    /// Bytes of `block` whose checksum this reader checked.
    checked: Checked,
    next_offset: u64,
    /// Records returned since the last commit (auto-commit mode).
    uncommitted: u64,
    /// Reads the tier's bucket while `next_offset` is below the first offset on disk
    /// (`block` and `pos` are unused meanwhile).
    below: Option<RemoteReader>,
}

impl Reader {
    pub(crate) fn new(
        handle: ReaderHandle,
        topic: Arc<Topic>,
        cursor: Option<Arc<CursorFile>>,
        options: &ReaderOptions,
    ) -> Result<Reader> {
        if let CommitMode::AutoEvery(0) = options.commit {
            return Err(Error::invalid(
                "commit",
                "AutoEvery needs a positive record count",
            ));
        }
        if options.spin > SPIN_MAX {
            return Err(Error::invalid(
                "spin",
                format!("at most {SPIN_MAX:?}, not {:?}", options.spin),
            ));
        }
        // Its first read would fail to commit: refused at once.
        if handle.status.is_read_only() && options.commit != CommitMode::Explicit {
            return Err(Error::ReadOnly);
        }
        if cursor.is_none() && options.commit != CommitMode::Explicit {
            return Err(Error::invalid(
                "commit",
                "automatic commit modes need a group",
            ));
        }
        let mut reader = Reader {
            handle,
            topic,
            cursor,
            mode: options.commit,
            verify: !options.skip_checksums,
            visibility: options.visibility,
            spin: options.spin,
            block: None,
            pos: 0,
            checked: Checked::default(),
            next_offset: 0,
            uncommitted: 0,
            below: None,
        };
        let first = reader.first_offset();
        let start = match options.start {
            StartPosition::Committed => reader
                .cursor
                .as_ref()
                .and_then(|c| c.committed())
                .map_or(first, |c| c.clamp(first, reader.topic.next_offset())),
            StartPosition::Earliest => first,
            StartPosition::Latest => reader.visible_next(),
            StartPosition::Offset(o) => o,
        };
        reader.seek(start)?;
        Ok(reader)
    }

    /// The topic this reader reads.
    pub fn topic(&self) -> &str {
        &self.topic.name
    }

    /// The offset the next call to [`Reader::next`] returns.
    pub fn position(&self) -> u64 {
        self.next_offset
    }

    /// The group's committed offset (`None` without a group or before the first commit).
    pub fn committed(&self) -> Option<u64> {
        self.cursor.as_ref().and_then(|c| c.committed())
    }

    /// Records available to read right now (visible offsets at or after the position).
    pub fn lag(&self) -> u64 {
        self.visible_next().saturating_sub(self.next_offset)
    }

    /// Which records this reader returns.
    pub fn visibility(&self) -> Visibility {
        self.visibility
    }

    /// How long a wait for this reader's records watches before it sleeps.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// The offset after the last record this reader may return now.
    #[inline]
    pub(crate) fn visible_next(&self) -> u64 {
        visible_next(&self.topic, self.visibility)
    }

    /// The first offset this reader may read: on disk, or in the tier's bucket.
    fn first_offset(&self) -> u64 {
        first_readable(&self.topic, self.handle.tier.as_deref())
    }

    /// True when the record at `next_offset` is read from the tier's bucket: below the
    /// first offset on disk, and held there. Makes (or drops) the reader of the bucket.
    fn use_below(&mut self) -> Result<bool> {
        if self.next_offset >= self.topic.first_offset() {
            self.below = None;
            return Ok(false);
        }
        if self
            .below
            .as_ref()
            .is_some_and(|b| b.position() == self.next_offset)
        {
            return Ok(true);
        }
        let Some(tier) = &self.handle.tier else {
            return Ok(false);
        };
        self.below = RemoteReader::below(tier, &self.topic.name, self.next_offset)?;
        self.block = None;
        Ok(self.below.is_some())
    }

    /// The topic this reader reads (for the facade's waits).
    pub(crate) fn topic_handle(&self) -> &Arc<Topic> {
        &self.topic
    }

    /// Moves to `offset`, which must lie between the first stored offset and the next offset.
    pub fn seek(&mut self, offset: u64) -> Result<()> {
        self.handle.status.check_open()?;
        let first = self.first_offset();
        let next = self.topic.next_offset();
        if offset < first || offset > next {
            return Err(Error::OffsetOutOfRange {
                topic: self.topic.name.clone(),
                offset,
                first,
                next,
            });
        }
        self.next_offset = offset;
        self.block = None;
        self.pos = 0;
        self.below = None;
        Ok(())
    }

    /// Moves to the first record whose timestamp is at or after `timestamp_us` (or to the end
    /// when there is none); returns the new position.
    pub fn seek_time(&mut self, timestamp_us: u64) -> Result<u64> {
        self.handle.status.check_open()?;
        // The bucket's records come first, when there are any below the disk's.
        let local_first = self.topic.first_offset();
        let first = self.first_offset();
        if first < local_first
            && let Some(tier) = &self.handle.tier
            && let Some(mut below) = RemoteReader::below(tier, &self.topic.name, first)?
            && below.seek_time(timestamp_us)? < local_first
        {
            if below.position() < first {
                // Before the log start: the first record kept comes first.
                below.seek(first)?;
            }
            self.next_offset = below.position();
            self.below = Some(below);
            self.block = None;
            return Ok(self.next_offset);
        }
        self.below = None;
        match self.topic.seek_time(timestamp_us)? {
            // Below the log start: the first record kept is the first at or after the time.
            Some((_, _, offset)) if offset < first => self.seek(first)?,
            Some((block, pos, offset)) => {
                self.block = Some(block);
                self.pos = pos;
                self.checked.clear();
                self.next_offset = offset;
            }
            None => {
                self.next_offset = self.topic.next_offset();
                self.block = None;
            }
        }
        Ok(self.next_offset)
    }

    /// Durably commits the current position for the group.
    pub fn commit(&mut self) -> Result<()> {
        self.commit_offset(self.next_offset)
    }

    /// Durably commits `offset` (the next offset the group should read).
    pub fn commit_offset(&mut self, offset: u64) -> Result<()> {
        self.handle.status.check_open()?;
        if self.handle.status.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let Some(cursor) = &self.cursor else {
            return Err(Error::invalid(
                "group",
                "an anonymous reader has no cursor to commit",
            ));
        };
        // Deleted, here or by another process: the commit would bring a cursor of the
        // deleted topic back.
        if self.topic.is_gone() {
            return Err(Error::UnknownTopic {
                topic: self.topic.name.clone(),
            });
        }
        let next = self.topic.next_offset();
        if offset > next {
            return Err(Error::OffsetOutOfRange {
                topic: self.topic.name.clone(),
                offset,
                first: self.topic.first_offset(),
                next,
            });
        }
        cursor.commit(self.handle.reclaim.storage(), offset)?;
        self.uncommitted = 0;
        // The slowest group may have moved: extents behind every group can go.
        self.handle.reclaim.reclaim_topic(&self.topic);
        Ok(())
    }

    /// `OffsetOutOfRange` once `delete_records` moved the log start past the position
    /// (by this handle or another process): those records are gone, as after retention.
    #[inline]
    fn check_log_start(&self) -> Result<()> {
        let start = self.topic.log_start();
        if self.next_offset >= start {
            return Ok(());
        }
        Err(Error::OffsetOutOfRange {
            topic: self.topic.name.clone(),
            offset: self.next_offset,
            first: start,
            next: self.topic.next_offset(),
        })
    }

    /// Finds the extent holding `next_offset`; false when it is not published yet.
    fn resolve(&mut self) -> Result<bool> {
        if self.next_offset >= self.visible_next() {
            return Ok(false);
        }
        let Some(block) = self.topic.extent_for(self.next_offset) else {
            return Err(Error::OffsetOutOfRange {
                topic: self.topic.name.clone(),
                offset: self.next_offset,
                first: self.topic.first_offset(),
                next: self.topic.next_offset(),
            });
        };
        self.pos = self.topic.position_in(&block, self.next_offset)?;
        self.block = Some(block);
        self.checked.clear();
        Ok(true)
    }

    /// Positions on the next published record without consuming it or committing; returns its
    /// frame (checksum verified when `verify`), `None` at the end.
    fn peek(&mut self, verify: bool) -> Result<Option<FrameView>> {
        self.check_log_start()?;
        if self.use_below()? {
            let Some(below) = self.below.as_mut() else {
                return Ok(None);
            };
            // What the bucket holds is durable: every visibility may read it.
            return below.peek(verify);
        }
        loop {
            if self.topic.is_gone() {
                return Err(Error::UnknownTopic {
                    topic: self.topic.name.clone(),
                });
            }
            let Some(block) = &self.block else {
                if !self.resolve()? {
                    return Ok(None);
                }
                continue;
            };
            let (_, end) = block.published();
            if self.pos < end {
                if self.visibility == Visibility::Durable && self.next_offset >= self.visible_next()
                {
                    return Ok(None);
                }
                let view = block
                    .frame_walking(self.pos, self.next_offset, verify, &mut self.checked)
                    .map_err(|e| {
                        block.corruption(&self.topic.name, self.next_offset, self.pos, e)
                    })?;
                return Ok(Some(view));
            }
            if block
                .final_state()
                .is_some_and(|(_, final_end)| final_end == self.pos)
            {
                self.block = None;
                if !self.resolve()? {
                    return Ok(None);
                }
                continue;
            }
            // Retention passed the reader while its extent, no longer in the chain, still
            // looked open here (a handle that follows other processes learns an extent's
            // end from the chain, which dropped it): what it waits for is gone.
            if self.next_offset < self.topic.first_offset() {
                self.block = None;
                continue;
            }
            return Ok(None);
        }
    }

    /// Moves to the next published record and returns where it is; `None` at the end.
    fn step(&mut self) -> Result<Option<FrameView>> {
        self.handle.status.check_open()?;
        if let CommitMode::AutoEvery(n) = self.mode
            && self.uncommitted >= n
        {
            self.commit()?;
        }
        let Some(view) = self.peek(self.verify)? else {
            return Ok(None);
        };
        if self.mode == CommitMode::Strict {
            self.commit_offset(self.next_offset + 1)?;
        }
        match self.below.as_mut() {
            Some(below) => below.advance(&view),
            None => self.pos = view.next_position as u64,
        }
        self.next_offset += 1;
        self.uncommitted += 1;
        Ok(Some(view))
    }

    /// The next record, borrowed from the mapping; `Ok(None)` when nothing more is published.
    /// A record that fails validation is an [`Error::Corruption`] and the reader stays put.
    /// In a read-only handle, what the writing process published since appears after
    /// [`crate::Wal::wait_for_records`] (a zero timeout only catches up) or
    /// [`crate::Wal::refresh`].
    #[expect(
        clippy::should_implement_trait,
        reason = "a lending iterator, not an Iterator"
    )]
    pub fn next(&mut self) -> Result<Option<RecordRef<'_>>> {
        let Some(view) = self.step()? else {
            return Ok(None);
        };
        self.borrow_current(&view).map(Some)
    }

    /// The record `view` describes in the current extent, borrowed from the mapping.
    fn borrow_current(&self, view: &FrameView) -> Result<RecordRef<'_>> {
        if let Some(below) = &self.below {
            let Some(object) = below.current_object() else {
                return Err(Error::Closed);
            };
            return Ok(RecordRef::from_view(HolderRef::Object(object), view, |r| {
                object.bytes(r)
            }));
        }
        let Some(block) = self.block.as_ref() else {
            return Err(Error::Closed);
        };
        Ok(RecordRef::from_view(HolderRef::Extent(block), view, |r| {
            block.bytes(r.start, r.len())
        }))
    }

    /// The next record as an owned zero-copy handle.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        let Some(view) = self.step()? else {
            return Ok(None);
        };
        let holder = match (&self.below, &self.block) {
            (Some(below), _) => below.current_object().cloned().map(Holder::Object),
            (None, Some(block)) => Some(Holder::Extent(Arc::clone(block))),
            (None, None) => None,
        };
        let Some(holder) = holder else {
            return Err(Error::Closed);
        };
        Ok(Some(Record::new(holder, &view)))
    }

    /// Calls `visit` with up to `max_records` records in offset order, borrowed from the
    /// mapping, and returns how many it consumed. `visit` returns false to stop; that record
    /// is not consumed. The same records, checks and errors as [`Reader::next`], with the
    /// per-record bookkeeping done once per extent: the path for bulk consumers (Arrow).
    pub fn scan(
        &mut self,
        max_records: usize,
        mut visit: impl FnMut(&RecordRef<'_>) -> bool,
    ) -> Result<usize> {
        let mut consumed = 0;
        self.handle.status.check_open()?;
        while consumed < max_records {
            if self.mode != CommitMode::Explicit || self.use_below()? {
                // Commit modes act per record: keep their exact points. Records from the
                // bucket go one by one too, up to the first offset on disk.
                let Some(record) = self.peek_record()? else {
                    break;
                };
                if !visit(&record) {
                    break;
                }
                self.step()?;
                consumed += 1;
                continue;
            }
            // Positions on the next record (rolling to the next extent, checking deletion).
            if self.peek(false)?.is_none() {
                break;
            }
            let Some(block) = self.block.clone() else {
                break;
            };
            let frames = block.published_frames();
            let limit = match self.visibility {
                Visibility::Published => u64::MAX,
                Visibility::Durable => self.visible_next(),
            };
            // Hands the record `$view` to `visit` and moves past it; returns when refused. A
            // macro, not a method: the call measured 10% slower in this loop.
            macro_rules! hand_over {
                ($view:expr) => {{
                    let view = $view;
                    let record =
                        RecordRef::from_view(HolderRef::Extent(&block), &view, |r| frames.bytes(r));
                    if !visit(&record) {
                        return Ok(consumed);
                    }
                    self.pos = view.next_position as u64;
                    self.next_offset += 1;
                    consumed += 1;
                    view
                }};
            }
            while consumed < max_records && self.pos < frames.end() && self.next_offset < limit {
                let view = frames
                    .frame_walking(self.pos, self.next_offset, self.verify, &mut self.checked)
                    .map_err(|e| {
                        block.corruption(&self.topic.name, self.next_offset, self.pos, e)
                    })?;
                let view = hand_over!(view);
                // The rest of a batch frame, entry after entry.
                let Some(mut walk) = frames.walk_after(&view) else {
                    continue;
                };
                while consumed < max_records && self.next_offset < limit {
                    let Some(view) = walk.next_view() else {
                        break;
                    };
                    let view = view.map_err(|e| {
                        block.corruption(&self.topic.name, self.next_offset, self.pos, e)
                    })?;
                    hand_over!(view);
                }
            }
        }
        Ok(consumed)
    }

    /// The next record without consuming it.
    fn peek_record(&mut self) -> Result<Option<RecordRef<'_>>> {
        self.handle.status.check_open()?;
        let Some(view) = self.peek(self.verify)? else {
            return Ok(None);
        };
        self.borrow_current(&view).map(Some)
    }

    /// Up to `max_records` records whose values total at most `max_bytes`, as owned handles.
    /// The first record is returned even if it alone is larger than `max_bytes`, so a reader
    /// always makes progress.
    pub fn next_batch(&mut self, max_records: usize, max_bytes: u64) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        let mut bytes = 0u64;
        while out.len() < max_records {
            if !out.is_empty() {
                self.handle.status.check_open()?;
                match self.peek(false)? {
                    Some(view) if bytes + view.value.len() as u64 <= max_bytes => {}
                    _ => break,
                }
            }
            match self.next_record()? {
                Some(r) => {
                    bytes += r.value().len() as u64;
                    out.push(r);
                }
                None => break,
            }
        }
        Ok(out)
    }
}

/// The offset after the last record of `topic` a reader with `visibility` may return.
#[inline]
pub(crate) fn visible_next(topic: &Topic, visibility: Visibility) -> u64 {
    let next = topic.next_offset();
    match visibility {
        Visibility::Published => next,
        Visibility::Durable => topic.durable_next().min(next),
    }
}

/// The first offset of `topic` a reader may read: on disk, or in the bucket of `tier`, and
/// not below the log start (`Wal::delete_records`).
pub(crate) fn first_readable(topic: &Topic, tier: Option<&Tier>) -> u64 {
    let local = topic.first_offset();
    let stored = tier
        .and_then(|tier| RemoteReader::first_below(tier, &topic.name))
        .map_or(local, |remote| remote.min(local));
    stored.max(topic.log_start())
}

/// Reads the single record at `offset` of `topic`.
pub(crate) fn read_at(topic: &Topic, tier: Option<&Arc<Tier>>, offset: u64) -> Result<Record> {
    let first = topic.first_offset();
    let next = topic.next_offset();
    let start = topic.log_start();
    if offset < start {
        return Err(Error::OffsetOutOfRange {
            topic: topic.name.clone(),
            offset,
            first: start,
            next,
        });
    }
    if offset < first
        && let Some(tier) = tier
        && let Some(mut below) = RemoteReader::below(tier, &topic.name, offset)?
        && let Some(view) = below.peek(true)?
        && let Some(object) = below.current_object()
    {
        return Ok(Record::new(Holder::Object(Arc::clone(object)), &view));
    }
    if offset < first || offset >= next {
        return Err(Error::OffsetOutOfRange {
            topic: topic.name.clone(),
            offset,
            first,
            next,
        });
    }
    let Some(block) = topic.extent_for(offset) else {
        return Err(Error::OffsetOutOfRange {
            topic: topic.name.clone(),
            offset,
            first,
            next,
        });
    };
    let pos = topic.position_in(&block, offset)?;
    let view = block
        .frame_at(pos, offset, true)
        .map_err(|e| block.corruption(&topic.name, offset, pos, e))?;
    debug_assert!(view.next_position as u64 <= block.published().1);
    Ok(Record::new(Holder::Extent(block), &view))
}

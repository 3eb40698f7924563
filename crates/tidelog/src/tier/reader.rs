//! Reading one topic of a bucket in offset order ([`RemoteReader`]): the objects after the
//! position are fetched ahead, several requests in flight, while the current one is read;
//! each record is checked as a local one is.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::bucket::{Fetch, Fetched};
use super::manifest::ExtentObject;
use super::object::LoadedObject;
use super::source::{Source, bounds, known};
use super::state::Tier;
use crate::config::{CommitMode, ReaderOptions, StartPosition};
use crate::error::{Error, Result};
use crate::format::FrameView;
use crate::headers::HeaderBlock;

/// Objects fetched ahead of the one being read: the requests a reader keeps in flight.
pub const READAHEAD_OBJECTS: usize = 4;
/// How often a reader waiting for records reads the manifest's new deltas (one LIST each).
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(200);

/// One record read from the bucket, its bytes its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRecord {
    /// Its offset in its topic.
    pub offset: u64,
    /// Microseconds since the Unix epoch, as appended.
    pub timestamp_us: u64,
    /// Its key, if it has one.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Vec<u8>,
    /// Its headers in order (a `None` value is null).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// A record borrowed from an object a reader holds: valid during the visit.
#[derive(Debug, Clone, Copy)]
pub struct RemoteRecordRef<'a> {
    /// Its offset in its topic.
    pub offset: u64,
    /// Microseconds since the Unix epoch, as appended.
    pub timestamp_us: u64,
    /// Its key, if it has one.
    pub key: Option<&'a [u8]>,
    /// Its value.
    pub value: &'a [u8],
    /// Its headers, if it has any.
    pub headers: Option<HeaderBlock<'a>>,
}

impl RemoteRecordRef<'_> {
    /// The record with its bytes copied.
    pub fn to_record(&self) -> RemoteRecord {
        RemoteRecord {
            offset: self.offset,
            timestamp_us: self.timestamp_us,
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.to_vec(),
            headers: self
                .headers
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Reads one topic of a bucket in offset order, up to the end of the manifest its
/// [`crate::RemoteLog`] last read.
#[derive(Debug)]
pub struct RemoteReader {
    source: Source,
    topic: String,
    verify: bool,
    next_offset: u64,
    /// The object holding `next_offset` and where that record's frame starts.
    current: Option<(Arc<LoadedObject>, u64)>,
    /// Reads of the objects after `current`, in offset order, each checked and verified
    /// whole on the runtime's threads as it arrives.
    ahead: VecDeque<Fetch<Result<LoadedObject>>>,
    /// When a wait last read the manifest.
    refreshed: Option<Instant>,
}

impl RemoteReader {
    pub(crate) fn new(
        source: Source,
        topic: &str,
        options: &ReaderOptions,
    ) -> Result<RemoteReader> {
        if options.group.is_some() {
            return Err(Error::invalid(
                "group",
                "a bucket has no home for a group's cursor yet: read it without a group and \
                 keep the position yourself",
            ));
        }
        if options.commit != CommitMode::Explicit {
            return Err(Error::invalid(
                "commit",
                "automatic commit modes need a group",
            ));
        }
        let mut reader = RemoteReader {
            source,
            topic: topic.to_owned(),
            verify: !options.skip_checksums,
            next_offset: 0,
            current: None,
            ahead: VecDeque::new(),
            refreshed: None,
        };
        let (first, next) = reader.bounds()?;
        let start = match options.start {
            StartPosition::Committed | StartPosition::Earliest => first,
            StartPosition::Latest => next,
            StartPosition::Offset(o) => o,
        };
        reader.seek(start)?;
        Ok(reader)
    }

    /// A reader of `topic` from `offset` in the bucket of a directory's tier; `None` when
    /// the manifest (read again once if need be) holds no object with that offset.
    pub(crate) fn below(
        tier: &Arc<Tier>,
        topic: &str,
        offset: u64,
    ) -> Result<Option<RemoteReader>> {
        let source = Source::Tier(Arc::clone(tier));
        let held = |source: &Source| {
            source.with_manifest(|m| {
                m.topic(topic)
                    .map(|(_, t)| bounds(t))
                    .is_some_and(|(first, next)| offset >= first && offset < next)
            })
        };
        if !held(&source) {
            // Another process may have uploaded it (and deleted the local copy) since.
            source.refresh()?;
            if !held(&source) {
                return Ok(None);
            }
        }
        let options = ReaderOptions::default().start(StartPosition::Offset(offset));
        RemoteReader::new(source, topic, &options).map(Some)
    }

    /// The first offset the bucket of a directory's tier holds of `topic`, if it holds any.
    pub(crate) fn first_below(tier: &Tier, topic: &str) -> Option<u64> {
        tier.with_manifest(|m| {
            m.topic(topic)
                .filter(|(_, t)| !t.objects.is_empty())
                .map(|(_, t)| bounds(t).0)
        })
    }

    /// The topic this reader reads.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The offset the next record read has.
    pub fn position(&self) -> u64 {
        self.next_offset
    }

    /// The first offset the bucket holds of the topic and the offset after its last, as
    /// the manifest last read says.
    pub fn bounds(&self) -> Result<(u64, u64)> {
        self.source
            .with_manifest(|m| known(m, &self.topic).map(bounds))
    }

    /// Records the manifest last read holds at or after the position.
    pub fn lag(&self) -> Result<u64> {
        Ok(self.bounds()?.1.saturating_sub(self.next_offset))
    }

    /// Moves to `offset`, which must lie between the first offset the bucket holds and the
    /// offset after its last.
    pub fn seek(&mut self, offset: u64) -> Result<()> {
        let (first, next) = self.bounds()?;
        if offset < first || offset > next {
            return Err(Error::OffsetOutOfRange {
                topic: self.topic.clone(),
                offset,
                first,
                next,
            });
        }
        self.next_offset = offset;
        self.current = None;
        Ok(())
    }

    /// Moves to the first record whose timestamp is at or after `timestamp_us` (or to the
    /// end when there is none); returns the new position.
    pub fn seek_time(&mut self, timestamp_us: u64) -> Result<u64> {
        let (objects, next) = self.source.with_manifest(|manifest| {
            let t = known(manifest, &self.topic)?;
            // Each object's bound covers its records: the first record at or after the
            // time is in the first object whose bound reaches it, or a later one.
            let objects: Vec<ExtentObject> = t
                .objects
                .values()
                .skip_while(|o| o.max_timestamp_us < timestamp_us)
                .cloned()
                .collect();
            Ok::<_, Error>((objects, bounds(t).1))
        })?;
        for (i, object) in objects.iter().enumerate() {
            let loaded = self.load(object)?;
            let (mut offset, mut position) = loaded.floor_time(timestamp_us);
            while offset < object.next_offset() {
                let view = loaded.frame(position, offset, false)?;
                if view.timestamp_us >= timestamp_us {
                    self.next_offset = offset;
                    self.current = Some((loaded, position));
                    self.fetch_ahead(&objects[i + 1..], u64::MAX);
                    return Ok(offset);
                }
                position = view.next_position as u64;
                offset += 1;
            }
        }
        self.next_offset = next;
        self.current = None;
        Ok(next)
    }

    /// The next record, `None` at the end of what the manifest last read holds.
    #[expect(
        clippy::should_implement_trait,
        reason = "fallible; the Python binding makes it an iterator"
    )]
    pub fn next(&mut self) -> Result<Option<RemoteRecord>> {
        let mut out = None;
        self.scan(1, |r| {
            out = Some(r.to_record());
            true
        })?;
        Ok(out)
    }

    /// Up to `max_records` records whose values total at most `max_bytes`; the first is
    /// returned even if it alone is larger, so a reader always makes progress.
    pub fn next_batch(&mut self, max_records: usize, max_bytes: u64) -> Result<Vec<RemoteRecord>> {
        let mut out: Vec<RemoteRecord> = Vec::new();
        let mut bytes = 0u64;
        self.scan(max_records, |r| {
            let size = r.value.len() as u64;
            if !out.is_empty() && bytes.saturating_add(size) > max_bytes {
                return false;
            }
            bytes = bytes.saturating_add(size);
            out.push(r.to_record());
            true
        })?;
        Ok(out)
    }

    /// Calls `visit` with up to `max_records` records in offset order, borrowed from the
    /// objects read, and returns how many it consumed. `visit` returns false to stop; that
    /// record is not consumed.
    pub fn scan(
        &mut self,
        max_records: usize,
        visit: impl FnMut(&RemoteRecordRef<'_>) -> bool,
    ) -> Result<usize> {
        self.scan_until(u64::MAX, max_records, visit)
    }

    /// [`RemoteReader::scan`] of the records before offset `end` only: no object at or
    /// after it is fetched.
    pub fn scan_until(
        &mut self,
        end: u64,
        max_records: usize,
        mut visit: impl FnMut(&RemoteRecordRef<'_>) -> bool,
    ) -> Result<usize> {
        let mut consumed = 0;
        while consumed < max_records && self.next_offset < end && self.resolve(end)? {
            let Some((loaded, mut position)) = self.current.take() else {
                break;
            };
            let stop = loaded.object.next_offset().min(end);
            let mut stopped = false;
            let mut checked = crate::format::Checked::default();
            while consumed < max_records && self.next_offset < stop {
                let view = match loaded.frame_walking(
                    position,
                    self.next_offset,
                    self.verify,
                    &mut checked,
                ) {
                    Ok(view) => view,
                    Err(e) => {
                        self.current = Some((loaded, position));
                        return Err(e);
                    }
                };
                let record = RemoteRecordRef {
                    offset: self.next_offset,
                    timestamp_us: view.timestamp_us,
                    key: view.key.map(|k| loaded.bytes(k)),
                    value: loaded.bytes(view.value),
                    headers: view.headers.map(|h| HeaderBlock::checked(loaded.bytes(h))),
                };
                if !visit(&record) {
                    stopped = true;
                    break;
                }
                position = view.next_position as u64;
                self.next_offset += 1;
                consumed += 1;
            }
            self.current = Some((loaded, position));
            if stopped {
                break;
            }
        }
        Ok(consumed)
    }

    /// Waits until the manifest holds records at or after the position, or `until`
    /// passes: reads the manifest's new deltas every [`REFRESH_INTERVAL`], sleeping between.
    /// True when there are records to read.
    pub fn wait_for_records(&mut self, until: Instant) -> Result<bool> {
        loop {
            if self.lag()? > 0 {
                return Ok(true);
            }
            let now = Instant::now();
            let due = self.refreshed.map_or(now, |r| r + REFRESH_INTERVAL);
            if due >= until {
                std::thread::sleep(until.saturating_duration_since(now));
                return Ok(false);
            }
            std::thread::sleep(due.saturating_duration_since(now));
            self.source.refresh()?;
            self.refreshed = Some(Instant::now());
        }
    }

    /// Positions on the next record without consuming it: its frame, in the object
    /// [`RemoteReader::current_object`] returns; `None` at the end.
    pub(crate) fn peek(&mut self, verify: bool) -> Result<Option<FrameView>> {
        if !self.resolve(u64::MAX)? {
            return Ok(None);
        }
        match &self.current {
            Some((loaded, position)) => loaded.frame(*position, self.next_offset, verify).map(Some),
            None => Ok(None),
        }
    }

    /// Consumes the record whose frame [`RemoteReader::peek`] returned.
    pub(crate) fn advance(&mut self, view: &FrameView) {
        if let Some((_, position)) = &mut self.current {
            *position = view.next_position as u64;
        }
        self.next_offset += 1;
    }

    /// The object the last [`RemoteReader::peek`] found its record in.
    pub(crate) fn current_object(&self) -> Option<&Arc<LoadedObject>> {
        self.current.as_ref().map(|(loaded, _)| loaded)
    }

    /// Makes `current` the object holding `next_offset` and where its frame starts; false
    /// at the end of what the manifest holds. Starts reading the objects after it, before
    /// `end`.
    fn resolve(&mut self, end: u64) -> Result<bool> {
        if let Some((loaded, _)) = &self.current
            && self.next_offset < loaded.object.next_offset()
        {
            return Ok(true);
        }
        let found = self.source.with_manifest(|manifest| {
            let t = known(manifest, &self.topic)?;
            let (first, next) = bounds(t);
            if self.next_offset >= next {
                return Ok(None);
            }
            let object = t
                .objects
                .range(..=self.next_offset)
                .next_back()
                .map(|(_, o)| o.clone())
                .filter(|o| self.next_offset >= first && self.next_offset < o.next_offset())
                .ok_or_else(|| Error::OffsetOutOfRange {
                    topic: self.topic.clone(),
                    offset: self.next_offset,
                    first,
                    next,
                })?;
            let following: Vec<ExtentObject> = t
                .objects
                .range(object.first_offset.saturating_add(1)..)
                .map(|(_, o)| o)
                .take_while(|o| o.first_offset < end)
                .take(READAHEAD_OBJECTS)
                .cloned()
                .collect();
            Ok::<_, Error>(Some((object, following)))
        })?;
        let Some((object, following)) = found else {
            return Ok(false);
        };
        let loaded = self.load(&object)?;
        let (mut offset, mut position) = loaded.floor_offset(self.next_offset);
        while offset < self.next_offset {
            position = loaded.frame(position, offset, false)?.next_position as u64;
            offset += 1;
        }
        self.current = Some((loaded, position));
        self.fetch_ahead(&following, end);
        Ok(true)
    }

    /// The object, from a read started ahead, the kept ones, or the bucket now.
    fn load(&mut self, object: &ExtentObject) -> Result<Arc<LoadedObject>> {
        let ahead = self.ahead.iter().position(|f| f.key() == object.key);
        let bytes = match ahead {
            Some(i) => {
                // Those before it were for objects a seek passed over.
                self.ahead.drain(..i);
                let fetched = match self.ahead.pop_front() {
                    Some(fetch) => self.source.bucket().wait_then(fetch)?,
                    None => Fetched::Lost,
                };
                match fetched {
                    Fetched::Done(loaded) => {
                        let loaded = Arc::new(loaded?);
                        self.source.cache().keep(&loaded);
                        return Ok(loaded);
                    }
                    Fetched::Missing => None,
                    Fetched::Lost => self.source.bucket().get_bytes(&object.key)?,
                }
            }
            None => {
                if let Some(hit) = self.source.cache().cached(&object.key) {
                    return Ok(hit);
                }
                self.source.bucket().get_bytes(&object.key)?
            }
        };
        if bytes.is_none() {
            self.check_still_named(object)?;
        }
        self.source.cache().loaded(object, &self.topic, bytes)
    }

    /// An object the bucket no longer has: if a newer manifest no longer names it either,
    /// retention dropped it (its delete waited `delete_delay_ms`), and its offsets are out of
    /// range, not damaged.
    fn check_still_named(&self, object: &ExtentObject) -> Result<()> {
        self.source.refresh()?;
        let (named, (first, next)) = self.source.with_manifest(|m| {
            let t = known(m, &self.topic)?;
            let named = t
                .objects
                .get(&object.first_offset)
                .is_some_and(|o| o.key == object.key);
            Ok::<_, Error>((named, bounds(t)))
        })?;
        if named {
            return Ok(());
        }
        Err(Error::OffsetOutOfRange {
            topic: self.topic.clone(),
            offset: self.next_offset.max(object.first_offset),
            first,
            next,
        })
    }

    /// Keeps reads of `following` (the objects after the current one, up to
    /// [`READAHEAD_OBJECTS`]) under way; drops the others. A failed start is left to the
    /// read that needs the object.
    fn fetch_ahead(&mut self, following: &[ExtentObject], end: u64) {
        let mut old = std::mem::take(&mut self.ahead);
        for object in following
            .iter()
            .take_while(|o| o.first_offset < end)
            .take(READAHEAD_OBJECTS)
        {
            if let Some(i) = old.iter().position(|f| f.key() == object.key) {
                if let Some(fetch) = old.remove(i) {
                    self.ahead.push_back(fetch);
                }
                continue;
            }
            if self.source.cache().cached(&object.key).is_some() {
                continue;
            }
            let (checked, topic) = (object.clone(), self.topic.clone());
            let fetch = self
                .source
                .bucket()
                .spawn_get_then(&object.key, move |bytes| {
                    let mut loaded = LoadedObject::check(&checked, &topic, bytes)?;
                    loaded.verify_all();
                    Ok(loaded)
                });
            if let Ok(fetch) = fetch {
                self.ahead.push_back(fetch);
            }
        }
    }
}

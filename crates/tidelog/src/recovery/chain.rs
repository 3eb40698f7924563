//! Building each topic's chain from its extents: remnants forgotten, extents placed in
//! offset order, sealed ones trusted, the others scanned and their torn tails cut.

use super::*;
use crate::poison::Recover;

/// What every step of one recovery works with.
pub(super) struct Recovery<'a> {
    pub(super) storage: &'a dyn Storage,
    /// Repair what is found (a writable open), or only read.
    pub(super) writable: bool,
    /// Blocks a read-only handle already holds.
    pub(super) known: &'a Known,
    /// Published ends the writer reported (read-only handles).
    pub(super) published: &'a Published,
    /// Extents scanned go to the topic's flusher list: a writable open, and a shared-mode
    /// handle's reads of the directory, whose flush makes every process's extents durable
    /// in offset order (a later extent's durable claim never precedes an earlier one's).
    pub(super) track_unsynced: bool,
    /// This open's `index_interval_bytes`.
    pub(super) interval: u64,
    /// Read-ahead hints for the scans' records.
    pub(super) ahead: std::sync::Mutex<Ahead<'a>>,
    /// Set when an extent that claims durable records follows a gap (see `recover`).
    pub(super) gap: &'a std::sync::atomic::AtomicBool,
}

/// Where the extent after the one being placed starts, and whether any later extent
/// claims durable records.
#[derive(Debug, Clone, Copy)]
pub(super) struct Next {
    pub(super) first: u64,
    pub(super) durable_after: bool,
}

/// A topic's chain as recovery builds it, one extent at a time in offset order.
#[derive(Debug)]
pub(super) struct TopicChain {
    pub(super) name: String,
    pub(super) chain: Vec<Arc<Extent>>,
    pub(super) unsynced: Vec<Arc<Extent>>,
    pub(super) tail: Tail,
    /// The offset the next extent must start at, once an extent was placed.
    pub(super) expected: Option<u64>,
    /// An extent followed a gap: it and every later one are dropped.
    pub(super) dropping: bool,
    /// A read-only recovery's last placed extent and where it ends: final once a later
    /// extent with records joins the chain (one with none, an allocation whose writer died
    /// before its first publish, does not end it: another process may still append there).
    pub(super) ends_if_followed: Option<(Arc<Extent>, u64, u64)>,
    /// The highest first offset of the topic's extents marked `Consumed`, if any.
    pub(super) consumed_to: Option<u64>,
}

impl TopicChain {
    /// Forgets the extents placed so far: the chain starts again at the next one.
    fn restart(&mut self) {
        self.chain.clear();
        self.unsynced.clear();
        self.tail = Tail::default();
        self.expected = None;
        self.ends_if_followed = None;
    }
}

impl Recovery<'_> {
    /// Recovers topic `name` from its extents: the remnants of deleted topics of that name
    /// are forgotten (a writable open), then the live topic's extents are chained in offset
    /// order. `None` when no live topic remains.
    pub(super) fn recover_topic(
        &self,
        name: String,
        mut extents: Vec<Found>,
        grouped: &Grouped,
        report: &mut RecoveryReport,
    ) -> Result<Option<RecoveredTopic>> {
        let live = live_topic_id(&name, &extents, &grouped.deleting);
        for f in extents.iter().filter(|f| Some(f.id.topic_id) != live) {
            report.deleted_remnants += 1;
            if self.writable {
                forget_extent(self.storage, f, ProgressState::Deleted)?;
            }
        }
        let Some(topic_id) = live else {
            return Ok(None);
        };
        extents.retain(|f| f.id.topic_id == topic_id);
        extents.sort_by_key(|f| (f.id.first_offset, f.file.seq, f.id.block_index));
        let mut topic = TopicChain {
            name,
            chain: Vec::new(),
            unsynced: Vec::new(),
            tail: Tail::default(),
            expected: None,
            dropping: false,
            ends_if_followed: None,
            consumed_to: grouped.consumed_to.get(&topic_id).copied(),
        };
        let firsts: Vec<u64> = extents.iter().map(|f| f.id.first_offset).collect();
        // Whether an extent after the i-th claims durable records.
        let mut claims_after = vec![false; extents.len()];
        for i in (0..extents.len().saturating_sub(1)).rev() {
            claims_after[i] =
                claims_after[i + 1] || extents[i + 1].progress.is_some_and(|p| p.record_count > 0);
        }
        for (i, f) in extents.into_iter().enumerate() {
            let next = firsts.get(i + 1).map(|&first| Next {
                first,
                durable_after: claims_after[i],
            });
            self.add_extent(&mut topic, f, next, report)?;
        }
        topic.tail.next_offset = topic.expected.unwrap_or(0);
        Ok(Some(RecoveredTopic {
            name: topic.name,
            id: topic_id,
            chain: topic.chain,
            unsynced: topic.unsynced,
            tail: topic.tail,
        }))
    }

    /// The block of extent `f`: the one a read-only handle holds, or a new one.
    pub(super) fn block_of(&self, f: &Found) -> Arc<Extent> {
        match self.known.get(&(f.file.seq, f.id.block_index)) {
            Some(b) => Arc::clone(b),
            None => Arc::new(Extent::new(
                Arc::clone(&f.file),
                f.id.block_index,
                f.id.extent_count,
                f.id.topic_id,
                f.id.salt,
                f.id.first_offset,
                self.interval,
                None,
            )),
        }
    }

    /// A read-only open whose extent `f` holds records that differ from their commit copy:
    /// gives `block` its bytes up to the end of the last copy, read from the file with the
    /// copies' bytes in place of those records (once per extent: a handle that follows
    /// keeps the one it made first).
    fn put_image(&self, f: &Found, block: &Extent) -> Result<()> {
        let Some(end) = f.patches.iter().map(|(at, b)| at + b.len() as u64).max() else {
            return Ok(());
        };
        if block.has_image() {
            return Ok(());
        }
        let mut image = vec![0u8; usize::try_from(end).unwrap_or(usize::MAX)];
        let at = f.file.block_position(f.id.block_index);
        self.storage
            .read_at(&f.file.file, &f.file.path, &mut image, at)
            .map_err(|e| Error::io("read records under a commit copy", &f.file.path, e))?;
        for (pos, bytes) in &f.patches {
            let pos = *pos as usize;
            image[pos..pos + bytes.len()].copy_from_slice(bytes);
        }
        block.set_image(image.into());
        Ok(())
    }

    /// Adds extent `f` to `topic` (`next`: where the topic's next extent starts; `None` for
    /// its last): dropped after a gap, trusted from its seal, or scanned.
    pub(super) fn add_extent(
        &self,
        topic: &mut TopicChain,
        f: Found,
        next: Option<Next>,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let block = self.block_of(&f);
        self.put_image(&f, &block)?;
        if topic.dropping || topic.expected.is_some_and(|e| e != f.id.first_offset) {
            // An extent its allocator never named (it died rolling, in shared mode) holds no
            // record, and another extent starts at its first offset: it breaks nothing.
            if holds_no_record(&f, &block) {
                if self.writable {
                    forget_extent(self.storage, &f, ProgressState::Consumed)?;
                }
                return Ok(());
            }
            if topic.dropping || !self.prefix_retired_since(topic)? {
                return self.drop_after_gap(topic, &f, &block, report);
            }
            // The extents placed so far were retired after their slots were read: the
            // topic starts here.
            topic.restart();
        }
        let before = topic.ends_if_followed.take();
        let kept = match f.progress {
            Some(p) if p.state == ProgressState::Sealed => {
                self.restore_sealed(topic, &f, &block, p, report)?
            }
            _ => self.restore_scanned(topic, &f, &block, next, report)?,
        };
        match before {
            Some((before, count, end)) if kept => before.set_final(count, end),
            // An extent without records does not end the one before.
            before => {
                if topic.ends_if_followed.is_none() {
                    topic.ends_if_followed = before;
                }
            }
        }
        if kept {
            report.extents += 1;
            topic.chain.push(block);
        }
        Ok(())
    }

    /// Whether the extents placed so far in `topic` are retired on disk now, though they
    /// were live when their slots were read: a recovery that does not repair reads while
    /// the housekeeping leader retires extents front to back, so it may see an extent live
    /// and, a moment later, one after it retired, which looks like a gap. The last one
    /// placed tells (retirement goes front to back).
    fn prefix_retired_since(&self, topic: &TopicChain) -> Result<bool> {
        if self.writable {
            return Ok(false);
        }
        let Some(last) = topic.chain.last() else {
            return Ok(false);
        };
        let slots = read_slots(self.storage, &last.file, last.block_index)?;
        Ok(slots
            .progress
            .is_some_and(|p| matches!(p.state, ProgressState::Consumed | ProgressState::Deleted)))
    }

    /// Drops extent `f`, which follows a gap in its topic's offsets (a writable open marks
    /// it consumed). An extent whose progress slot claims durable records cannot follow a
    /// gap: that is lost records, corruption.
    pub(super) fn drop_after_gap(
        &self,
        topic: &mut TopicChain,
        f: &Found,
        block: &Extent,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        if let Some(p) = f.progress
            && p.record_count > 0
            && p.durable_end > format::BLOCK_HEADER_BYTES
        {
            self.gap.store(true, std::sync::atomic::Ordering::Relaxed);
            let expected = topic.expected.unwrap_or(f.id.first_offset);
            let mut err = block.corruption(
                &topic.name,
                expected,
                format::BLOCK_HEADER_BYTES,
                FrameError::WrongOffset,
            );
            if let Error::Corruption { reason, .. } = &mut err {
                *reason = gap_reason(topic, f, p, expected);
            }
            return Err(err);
        }
        topic.dropping = true;
        report.dropped_extents += 1;
        if self.writable {
            forget_extent(self.storage, f, ProgressState::Consumed)?;
        }
        Ok(())
    }

    /// Restores a sealed extent from its progress slot `p`, without a scan. True when it
    /// joins the chain (an extent sealed empty does not).
    pub(super) fn restore_sealed(
        &self,
        topic: &mut TopicChain,
        f: &Found,
        block: &Extent,
        p: Progress,
        report: &mut RecoveryReport,
    ) -> Result<bool> {
        // Against the extent itself, not this open's footer reserve: the extent may have
        // been written with another index interval.
        let footer_bytes = p.footer_count.saturating_mul(format::IX_LEN as u64);
        if p.durable_end < format::BLOCK_HEADER_BYTES
            || p.durable_end.saturating_add(footer_bytes) > block.len
        {
            return Err(block.corruption(&topic.name, f.id.first_offset, 0, FrameError::BadLength));
        }
        block.restore(
            p.record_count,
            p.durable_end,
            p.max_timestamp_us,
            p.durable_end,
            ProgressState::Sealed,
        );
        block.set_final(p.record_count, p.durable_end);
        report.sealed_extents += 1;
        if p.record_count == 0 {
            if self.writable {
                count_unused(&f.file, f.id.extent_count);
            }
            return Ok(false);
        }
        if self.writable {
            f.file.counters.recovered(f.id.extent_count, false);
        }
        topic.tail.max_ts = topic.tail.max_ts.max(p.max_timestamp_us);
        topic.expected = Some(f.id.first_offset + p.record_count);
        Ok(true)
    }

    /// Restores an extent that is not sealed by scanning its records: torn tails are cut
    /// (and counted, a writable open), an extent left empty is forgotten. True when it joins
    /// the chain.
    pub(super) fn restore_scanned(
        &self,
        topic: &mut TopicChain,
        f: &Found,
        block: &Arc<Extent>,
        next: Option<Next>,
        report: &mut RecoveryReport,
    ) -> Result<bool> {
        let is_last = next.is_none();
        let progress = f.progress;
        let durable = progress.map_or(format::BLOCK_HEADER_BYTES, |p| p.durable_end);
        // Records the writer reported published are read too (a read-only handle; the
        // writer reports none).
        let reported = self
            .published
            .ends
            .get(&(f.file.seq, f.id.block_index))
            .copied()
            .unwrap_or(0);
        let reach = durable.max(reported);
        // Records may reach past this open's footer reserve (an extent written with a
        // coarser index interval), never past the extent. A damaged progress slot says
        // nothing of what is durable: the extent is read as far as its records check,
        // read-only too.
        let limit = if self.writable || f.progress_damaged {
            block.len
        } else {
            reach.min(block.len)
        };
        let bound = match self.left_published(f, next, reported) {
            Some(records) => Bound::Records(records),
            None => Bound::Bytes(limit),
        };
        let mut s = self.scan_extent(f, block, bound, topic.tail.max_ts, report);
        // Damage below the durable point is corruption; below an end the writer only
        // reported (not durable data), the scan stops there instead.
        check_durable_reached(&topic.name, f, block, &s, durable)?;
        // After a clean close nothing was written past `durable_end`: bytes there are
        // stale (reused blocks), not a torn write.
        let clean_end =
            progress.is_some_and(|p| p.state == ProgressState::Clean && p.durable_end == s.end);
        let torn = !clean_end && (s.stop != FrameError::End || s.cut_records > 0);
        if torn && self.writable {
            count_tear(f, block, limit, &s, report);
        }
        block.set_index(std::mem::take(&mut s.index));
        let synced = progress.map_or(0, |p| p.durable_end.min(s.end));
        let clean = progress.is_some_and(|p| p.state == ProgressState::Clean);
        let resumable = self.writable && is_last && !torn && clean_end;
        // A resumed extent's slot is rewritten `Open` before the open returns (see
        // `resume_in_place`): the handle knows it so from now on.
        let disk = match progress {
            Some(p) if !resumable => p.state,
            _ => ProgressState::Open,
        };
        block.restore(s.count, s.end, s.max_ts, synced, disk);
        // A shared-mode roll names its new extent before the first record goes in: a
        // handle lining up to it finds it in its chain, empty.
        let named_empty = !self.writable && is_last && reported >= format::BLOCK_HEADER_BYTES;
        if s.count == 0 && !(self.writable && is_last && !torn && clean) && !named_empty {
            if self.writable {
                // Nothing to keep: forget the extent, so a torn first record is cut (and
                // counted) once, not at every later open.
                forget_extent(self.storage, f, ProgressState::Consumed)?;
            }
            // A later extent of the topic must continue from here: one that claims durable
            // records after this empty one means records were lost, which is corruption,
            // not a topic that starts later. Not so for the first extent found, with others
            // after it, when retention (or the groups) retired an extent from its first
            // offset on: an allocation whose writer died rolling, left behind when the
            // extents around it were retired. The topic starts at the next one.
            let below_retained = topic.expected.is_none()
                && !is_last
                && topic.consumed_to.is_some_and(|to| to >= f.id.first_offset);
            if !below_retained {
                topic.expected = Some(f.id.first_offset);
            }
            return Ok(false);
        }
        topic.tail.max_ts = topic.tail.max_ts.max(s.max_ts);
        topic.expected = Some(f.id.first_offset + s.count);
        self.place_scanned(topic, f, block, &s, is_last, resumable);
        Ok(true)
    }

    /// The records of extent `f` a read-only handle may read up to the next extent, past
    /// the end the writer reported for it (if any): the writers left it for the next one
    /// and published past that (a roll the shared state file no longer lists; only for an
    /// extent without a reported end, since a reported end and next offset are of one
    /// moment), or a later extent claims durable records, which were published after every
    /// record of this one. The slots are read after the reported ends, so a writer may have
    /// filled this extent, rolled and synced in between; and in shared mode a process may
    /// sync a later extent before another's progress slot claims an earlier one. `None`
    /// otherwise, and for the writer.
    fn left_published(&self, f: &Found, next: Option<Next>, reported_end: u64) -> Option<u64> {
        let next = next?;
        let published = self.published.next.get(&f.id.topic_id).copied();
        let rolled = reported_end == 0 && published.is_some_and(|p| p >= next.first);
        let passed = rolled || next.durable_after;
        (!self.writable && passed && next.first > f.id.first_offset)
            .then(|| next.first - f.id.first_offset)
    }

    /// Scans extent `f` up to `bound`, resuming where a read-only handle's last refresh
    /// stopped, with `max_ts` the topic's running maximum so far. The report counts it.
    pub(super) fn scan_extent(
        &self,
        f: &Found,
        block: &Extent,
        bound: Bound,
        max_ts: u64,
        report: &mut RecoveryReport,
    ) -> Scan {
        self.ahead
            .lock()
            .recover()
            .reach_extent(f.file.seq, f.id.block_index);
        let (count, pos) = block.published();
        let index = if self.known.contains_key(&(f.file.seq, f.id.block_index)) {
            block.index_snapshot()
        } else {
            Vec::new()
        };
        let last_index_pos = index.last().map(|e| e.position);
        let from = ScanPoint {
            pos,
            count,
            // Index entries and extent maxima are running maxima of the topic.
            max_ts: max_ts.max(block.max_timestamp_us()),
            index,
            last_index_pos,
        };
        let s = scan(block, bound, from, self.interval);
        report.scanned_extents += 1;
        report.scanned_bytes += s.end - pos;
        s
    }

    /// Settles a scanned extent that joins the chain: the topic's tail continues in it when
    /// `resumable` (the writable open's last extent, closed cleanly where its records
    /// end); otherwise it is final, unless it is a read-only handle's last extent, which
    /// the writer may still be filling.
    pub(super) fn place_scanned(
        &self,
        topic: &mut TopicChain,
        f: &Found,
        block: &Arc<Extent>,
        s: &Scan,
        is_last: bool,
        resumable: bool,
    ) {
        if self.writable {
            f.file.counters.recovered(f.id.extent_count, resumable);
        }
        if resumable {
            block.hold();
            topic.tail.block = Some(Arc::clone(block));
            topic.tail.pos = s.end;
            topic.tail.count = s.count;
            topic.tail.last_index_pos = s.last_index_pos;
        } else if self.writable {
            // Never append after a recovered tail: stale bytes may follow it.
            block.set_final(s.count, s.end);
        } else if !is_last {
            // In a read-only recovery an extent followed by another with records is
            // complete: the writers moved on, so readers move on too.
            topic.ends_if_followed = Some((Arc::clone(block), s.count, s.end));
        }
        if self.track_unsynced {
            topic.unsynced.push(Arc::clone(block));
        }
    }
}

/// Why extent `f`, which claims the durable records of `p`, cannot follow the extents placed
/// in `topic` (they end at offset `expected`): what each side holds, so a report tells an
/// extent read short from one that is missing.
fn gap_reason(topic: &TopicChain, f: &Found, p: Progress, expected: u64) -> String {
    let before = match topic.chain.last() {
        Some(last) => {
            let (records, end) = last.published();
            format!(
                "the extent before it (file {}, block {}) starts at offset {} and holds {records} \
                 records up to byte {end}",
                last.file.seq, last.block_index, last.first_offset
            )
        }
        None => "no extent comes before it".to_owned(),
    };
    format!(
        "{}: the extent at file {}, block {} starts at offset {} and claims {} durable records, \
         but the topic's records before it end at offset {expected}; {before}",
        FrameError::WrongOffset.describe(),
        f.file.seq,
        f.id.block_index,
        f.id.first_offset,
        p.record_count,
    )
}

/// True when extent `f` claims no durable record and its first frame is not a record of
/// its own (blank, or bytes of an earlier use of the blocks, which fail its checksum).
fn holds_no_record(f: &Found, block: &Extent) -> bool {
    if f.progress.is_some_and(|p| p.record_count > 0) {
        return false;
    }
    let first = format::BLOCK_HEADER_BYTES;
    let bytes = block.recovery_bytes_at(first, first + format::FRAME_HEADER_BYTES);
    let header_only = block.decode_frame(bytes, first, f.id.first_offset, false);
    if matches!(header_only, Err(FrameError::End | FrameError::BadMagic)) {
        return true;
    }
    let bytes = block.recovery_bytes_at(first, block.len);
    block
        .decode_frame(bytes, first, f.id.first_offset, true)
        .is_err()
}

/// Fails when the scan `s` of extent `f` stopped short of `watermark`, what its progress
/// slot says is durable: acknowledged records are damaged, which is corruption, never a
/// torn tail.
pub(super) fn check_durable_reached(
    topic: &str,
    f: &Found,
    block: &Extent,
    s: &Scan,
    watermark: u64,
) -> Result<()> {
    if s.end < watermark.min(block.len) {
        return Err(block.corruption(
            topic,
            f.id.first_offset + s.count,
            s.end,
            if s.stop == FrameError::End {
                FrameError::BadMagic
            } else {
                s.stop
            },
        ));
    }
    Ok(())
}

/// Counts the torn tail that the scan `s` of extent `f` (up to `limit`) ended on: the
/// records of an incomplete batch it cut, and the valid records past a bad frame.
pub(super) fn count_tear(
    f: &Found,
    block: &Extent,
    limit: u64,
    s: &Scan,
    report: &mut RecoveryReport,
) {
    report.torn_tails += 1;
    report.torn_records += s.cut_records;
    if s.stop != FrameError::End {
        report.records_past_tear += records_past(block, limit, s.end, f.id.first_offset + s.count);
    }
}

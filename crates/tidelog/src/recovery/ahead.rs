//! Reading ahead of recovery: the pages it will read one by one (each block slot's first
//! page, then the records of each extent it scans) are hinted to the kernel
//! ([`Storage::prefetch`]) a bounded window ahead of where it reads, so a cold open waits
//! for the device's many reads at once instead of for each in turn (issue 22: 1,000 topics
//! of 10 MiB took 3-5 s to open on a cold cache, then about 0.4 s). Only hints: every byte
//! is still read and checked where it was before, and a hint that fails costs only time.

use std::collections::VecDeque;

use super::*;

/// Bytes of block-slot first pages hinted ahead of the slot walk.
const SLOT_WINDOW: u64 = 16 << 20;
/// Bytes of records hinted ahead of the scans: about the page cache they hold at most.
const SCAN_WINDOW: u64 = 64 << 20;
/// Past the end an unsealed extent claims, what the scan of a writable open may still read
/// (records written after its last sync); a scan that goes on faults the rest in itself.
/// Unwritten (reserved) pages cost no read.
const SCAN_SLACK: u64 = 1 << 20;

/// A range recovery will read: `len` bytes at `offset` of `file`, by the `step`-th step of
/// its walk (a file's slot walk, an extent's scan).
#[derive(Debug)]
struct Range {
    file: Arc<DataFile>,
    offset: u64,
    len: u64,
    step: usize,
}

/// The ranges recovery reads, in its order (taken from `source` as the window moves, so
/// only the window's are held), and how far the hints went.
pub(super) struct Ahead<'a> {
    storage: &'a dyn Storage,
    source: Box<dyn Iterator<Item = Range> + Send + 'a>,
    /// A range taken from `source` that did not fit in the window yet.
    pending: Option<Range>,
    window: u64,
    /// Ranges hinted, of steps recovery is not done with, and their bytes.
    hinted: VecDeque<Range>,
    in_window: u64,
    /// The step of each extent a scan reads, by file sequence and block.
    steps: HashMap<(u64, u32), usize>,
}

impl std::fmt::Debug for Ahead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead")
            .field("window", &self.window)
            .field("hinted", &self.hinted.len())
            .field("in_window", &self.in_window)
            .finish_non_exhaustive()
    }
}

impl<'a> Ahead<'a> {
    /// Hints for `source`'s ranges (steps never going back), at most `window` bytes ahead
    /// of recovery.
    fn new(
        storage: &'a dyn Storage,
        window: u64,
        source: impl Iterator<Item = Range> + Send + 'a,
    ) -> Self {
        Ahead {
            storage,
            source: Box::new(source.filter(|r| r.len > 0)),
            pending: None,
            window,
            hinted: VecDeque::new(),
            in_window: 0,
            steps: HashMap::new(),
        }
    }

    /// No hints (a read-only refresh).
    pub(super) fn none(storage: &'a dyn Storage) -> Self {
        Ahead::new(storage, 0, std::iter::empty())
    }

    /// Recovery is about to take step `step`: the steps before it are done, and hints go out
    /// up to the window ahead (always through `step` itself).
    pub(super) fn reach(&mut self, step: usize) {
        while let Some(r) = self.hinted.front()
            && r.step < step
        {
            self.in_window -= r.len;
            self.hinted.pop_front();
        }
        while let Some(r) = self.pending.take().or_else(|| self.source.next()) {
            // A range of a step already done was never hinted: skipped.
            if r.step < step {
                continue;
            }
            if r.step > step && self.in_window + r.len > self.window {
                self.pending = Some(r);
                break;
            }
            // Only a hint: the reads it prepares report their own errors.
            let _ = self
                .storage
                .prefetch(&r.file.file, &r.file.path, r.offset, r.len);
            self.in_window += r.len;
            self.hinted.push_back(r);
        }
    }

    /// A scan of the extent at block `block` of file `seq` is about to start.
    pub(super) fn reach_extent(&mut self, seq: u64, block: u32) {
        if let Some(&step) = self.steps.get(&(seq, block)) {
            self.reach(step);
        }
    }
}

/// The first page of every block slot of `files` (the `i`-th file is step `i`): the slot
/// walk reads those of extent starts, which are most of them; a page in the middle of a
/// longer extent, or of a block never written, costs little.
pub(super) fn slot_pages(storage: &dyn Storage, files: Vec<Arc<DataFile>>) -> Ahead<'_> {
    let pages = files.into_iter().enumerate().flat_map(|(step, file)| {
        (0..file.extent_count).map(move |index| Range {
            file: Arc::clone(&file),
            offset: file.block_position(index),
            len: format::BLOCK_HEADER_BYTES,
            step,
        })
    });
    Ahead::new(storage, SLOT_WINDOW, pages)
}

/// The records the scans will read, in their order (topics by name, each one's live
/// extents by offset; each extent is a step): of every extent that is not sealed, from
/// where its scan starts (after its first page, or where a read-only handle's last pass
/// stopped) to the end its progress slot or the writer claims, and a little past it (the
/// frame that ends the scan; records a writable open may find after its last sync).
pub(super) fn scan_ranges<'a>(
    storage: &'a dyn Storage,
    writable: bool,
    known: &Known,
    published: &Published,
    grouped: &Grouped,
) -> Ahead<'a> {
    let mut ranges = Vec::new();
    let mut steps = HashMap::new();
    for (name, extents) in &grouped.by_topic {
        let live = live_topic_id(name, extents, &grouped.deleting);
        let mut order: Vec<&Found> = extents
            .iter()
            .filter(|f| Some(f.id.topic_id) == live)
            .filter(|f| f.progress.is_none_or(|p| p.state != ProgressState::Sealed))
            .collect();
        // As `recover_topic` takes them.
        order.sort_by_key(|f| (f.id.first_offset, f.file.seq, f.id.block_index));
        for f in order {
            let step = steps.len();
            steps.insert((f.file.seq, f.id.block_index), step);
            let block_len = u64::from(f.id.extent_count) * f.file.header.block_size_bytes;
            let start = match known.get(&(f.file.seq, f.id.block_index)) {
                Some(b) => b.published().1,
                None => format::BLOCK_HEADER_BYTES,
            };
            let claimed = f.progress.map_or(0, |p| p.durable_end);
            let reported = published
                .ends
                .get(&(f.file.seq, f.id.block_index))
                .copied()
                .unwrap_or(0);
            // A read-only scan stops at the claimed end (unless the slot is damaged).
            let past = match f.progress {
                _ if !writable && !f.progress_damaged => 0,
                Some(p) if p.state == ProgressState::Clean => format::FRAME_HEADER_BYTES,
                _ => SCAN_SLACK,
            };
            let end = claimed
                .max(reported)
                .max(format::BLOCK_HEADER_BYTES)
                .saturating_add(past)
                .min(block_len);
            ranges.push(Range {
                file: Arc::clone(&f.file),
                offset: f.file.block_position(f.id.block_index) + start,
                len: end.saturating_sub(start),
                step,
            });
        }
    }
    let mut ahead = Ahead::new(storage, SCAN_WINDOW, ranges.into_iter());
    ahead.steps = steps;
    ahead
}

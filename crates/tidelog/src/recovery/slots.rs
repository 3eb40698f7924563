//! An extent's first page: its identity, progress and commit-copy slots read, classified
//! and retired.

use super::*;
use crate::format::CommitCopy;

/// An extent found on disk.
#[derive(Debug)]
pub(super) struct Found {
    pub(super) file: Arc<DataFile>,
    pub(super) id: BlockIdentity,
    pub(super) progress: Option<Progress>,
    /// The progress slot is not blank but fails its checks.
    pub(super) progress_damaged: bool,
    /// Commit copies whose records differ on disk (a read-only open, which repairs
    /// nothing): `(position in the extent, the copy's bytes)`, read from the copies.
    pub(super) patches: Vec<(u64, Vec<u8>)>,
}

/// What the first page of a block slot holds.
#[derive(Debug)]
pub(super) struct Slots {
    pub(super) id: Option<BlockIdentity>,
    pub(super) progress: Option<Progress>,
    /// The identity slot's bytes are all zero: the block was never handed out.
    pub(super) id_blank: bool,
    /// The progress slot's bytes are all zero.
    pub(super) progress_blank: bool,
    pub(super) copies: Copies,
}

/// The commit copies of a block header, and how many of its copy slots carry the copy
/// magic but fail their checks (a torn write of the header, or damage).
pub(super) type Copies = ([Option<CommitCopy>; 2], u64);

/// The identity, progress and commit-copy slots of the extent that would start at block
/// `index`: its whole first page, in one read.
///
/// Read with `pread`, not through the mapping: a fault on a sparse file's hole reads around
/// it (`read_ahead_kb`, 8 MiB on some VMs) and zero-fills every page of that window, so
/// touching each block's first page through the mapping cost a cold open of a 1 GiB file
/// about 0.2 s and as much page cache as the file's size. A small `pread` reads a page.
pub(super) fn read_slots(storage: &dyn Storage, file: &DataFile, index: u32) -> Result<Slots> {
    const _: () = assert!(format::ID_SLOT_AT + format::ID_LEN <= format::PG_SLOT_AT);
    let at = file.block_position(index);
    let mut buf = [0u8; format::BLOCK_HEADER_BYTES as usize];
    // The file's length was checked against its header at open, so the read is whole.
    storage
        .read_at(&file.file, &file.path, &mut buf, at)
        .map_err(|e| Error::io("read extent slots", &file.path, e))?;
    let id = &buf[format::ID_SLOT_AT..format::ID_SLOT_AT + format::ID_LEN];
    let pg = &buf[format::PG_SLOT_AT..format::PG_SLOT_AT + format::PG_LEN];
    Ok(Slots {
        id: BlockIdentity::decode(id),
        progress: Progress::decode(pg),
        id_blank: id.iter().all(|&b| b == 0),
        progress_blank: pg.iter().all(|&b| b == 0),
        copies: CommitCopy::decode_slots(&buf),
    })
}

/// Whether the first frame header of the extent at block `index` is all zeros (no record
/// was ever written there).
pub(super) fn first_frame_blank(
    storage: &dyn Storage,
    file: &DataFile,
    index: u32,
) -> Result<bool> {
    let mut buf = [0u8; format::FRAME_HEADER_BYTES as usize];
    let at = file.block_position(index) + format::BLOCK_HEADER_BYTES;
    storage
        .read_at(&file.file, &file.path, &mut buf, at)
        .map_err(|e| Error::io("read extent", &file.path, e))?;
    Ok(buf.iter().all(|&b| b == 0))
}

/// What a block slot is: the start of an extent, a block never handed out, or damage.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "made once per block slot and taken apart at once, never stored"
)]
pub(super) enum SlotKind {
    /// An extent's identity, its progress slot, whether that slot is damaged (not blank,
    /// yet failing its checks), and its commit copies.
    Extent(BlockIdentity, Option<Progress>, bool, Copies),
    Unused,
}

/// Classifies block slot `index` of `file`. A blank identity slot is a block never handed
/// out. An identity slot that is not blank but fails its checks is an allocation torn by a
/// crash only when nothing else of the extent was ever written (its identity is written
/// before its first record and before its first progress slot); anything else is damage,
/// reported, never read as unused.
pub(super) fn classify_slot(
    storage: &dyn Storage,
    file: &DataFile,
    index: u32,
) -> Result<SlotKind> {
    // A read-only handle may read a slot while the writer rewrites it: a slot that fails its
    // checks is read again before it counts as damaged.
    const READS_MAX: u32 = 3;
    let mut slots = read_slots(storage, file, index)?;
    for _ in 1..READS_MAX {
        let suspect = (slots.id.is_none() && !slots.id_blank)
            || (slots.id_blank && slots.progress.as_ref().is_some_and(claims_records))
            || (slots.progress.is_none() && !slots.progress_blank)
            || slots.copies.1 > 0;
        if !suspect {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        slots = read_slots(storage, file, index)?;
    }
    let position = file.block_position(index);
    if let Some(id) = slots.id {
        // A file holds extents of its own version only (see `format::VERSION_RELATIVE`).
        let fits = id.extent_count >= 1
            && u64::from(index) + u64::from(id.extent_count) <= u64::from(file.extent_count);
        if id.version == file.header.version
            && id.block_index == index
            && id.file_seq == file.seq
            && fits
        {
            let damaged = slots.progress.is_none() && !slots.progress_blank;
            return Ok(SlotKind::Extent(id, slots.progress, damaged, slots.copies));
        }
        return Err(Error::Corruption {
            topic: id.topic.clone(),
            offset: id.first_offset,
            path: file.path.clone(),
            position,
            reason: format!(
                "identity slot of block {index} names another place (version {}, block {} \
                 of {}, file {})",
                id.version, id.block_index, id.extent_count, id.file_seq
            ),
        });
    }
    if slots.id_blank {
        // A slot that claims records is written only once the identity is durable (its
        // first msync covers it): beside one, a blank identity is damage, not a free block.
        if let Some(p) = slots.progress.filter(claims_records) {
            return Err(Error::Corruption {
                topic: String::new(),
                offset: 0,
                path: file.path.clone(),
                position,
                reason: format!(
                    "identity slot of block {index} is blank, but its progress slot says \
                     {:?} with {} records",
                    p.state, p.record_count
                ),
            });
        }
        return Ok(SlotKind::Unused);
    }
    if slots.progress_blank && first_frame_blank(storage, file, index)? {
        return Ok(SlotKind::Unused);
    }
    Err(Error::Corruption {
        topic: String::new(),
        offset: 0,
        path: file.path.clone(),
        position,
        reason: format!("identity slot of block {index} is damaged"),
    })
}

/// Whether a progress slot says its extent holds records (`Open`, `Clean`, `Sealed`), as
/// only a slot written after the extent's identity was durable can; a retirement mark
/// (`Deleted`, `Consumed`) may go into the header with the identity's first write.
fn claims_records(progress: &Progress) -> bool {
    matches!(
        progress.state,
        ProgressState::Open | ProgressState::Clean | ProgressState::Sealed
    )
}

/// The claim of extent `id` (at block `index` of `file`, its progress slot `progress`, not
/// damaged) moved over the commit `copies` that continue it (FORMAT.md, "Commit copies"):
/// each copy's bytes are compared with the records at its place. Where they differ (a power
/// loss during the copy's msync, or damage) a writable open (`repair`) writes the copy's
/// bytes back, synced; a read-only open, which writes nothing, adds them to `patches`, which
/// its extent reads in place of the file's (`Extent::set_image`). Either counts the extent
/// in the report. With writers live, published records and their copy never differ. `None`
/// stays `None` when no copy continues a blank slot.
#[expect(
    clippy::too_many_arguments,
    reason = "the extent's place and slots as classified, and the open's mode and report"
)]
pub(super) fn extend_by_copies(
    storage: &dyn Storage,
    file: &DataFile,
    index: u32,
    id: &BlockIdentity,
    progress: Option<Progress>,
    copies: &[Option<CommitCopy>; 2],
    repair: bool,
    patches: &mut Vec<(u64, Vec<u8>)>,
    report: &mut RecoveryReport,
) -> Result<Option<Progress>> {
    let mut claim = match progress {
        Some(p) if p.state == ProgressState::Open => p,
        Some(_) => return Ok(progress),
        None => Progress::blank(),
    };
    let at = file.block_position(index);
    let extent_bytes = u64::from(id.extent_count) * file.header.block_size_bytes;
    let mut repaired = false;
    let mut moved = false;
    for _ in 0..copies.len() {
        let below = claim.record_count;
        let Some(copy) = CommitCopy::continuing(copies, claim.durable_end, |c| {
            c.salt == id.salt && c.end() <= extent_bytes && c.record_count >= below
        }) else {
            break;
        };
        let mut there = vec![0u8; copy.bytes.len()];
        storage
            .read_at(&file.file, &file.path, &mut there, at + copy.start)
            .map_err(|e| Error::io("read records under a commit copy", &file.path, e))?;
        if there != copy.bytes {
            // Not a tail to cut: the copy holds records that may have been acknowledged.
            repaired = true;
            if !repair {
                patches.push((copy.start, copy.bytes.clone()));
                claim.extend_over(copy);
                moved = true;
                continue;
            }
            storage
                .write_at(&file.file, &file.path, &copy.bytes, at + copy.start)
                .and_then(|()| storage.sync_file(&file.file, &file.path))
                .map_err(|e| Error::io("repair records from a commit copy", &file.path, e))?;
        }
        claim.extend_over(copy);
        moved = true;
    }
    report.repaired_from_copies += u64::from(repaired);
    Ok(if moved { Some(claim) } else { progress })
}

/// Counts an extent that holds nothing to read (empty, dropped, or of a deleted topic) as
/// handed out and consumed, so it never keeps its file alive.
pub(super) fn count_unused(file: &DataFile, blocks: u32) {
    file.counters.recovered(blocks, false);
    // The file is not fully allocated yet, so this cannot make it deletable here; the
    // open checks every file once recovery is done.
    let _ = file.counters.consume(blocks);
}

/// Drops an extent for good (a writable open): its progress slot is marked `state` and
/// synced, so later opens skip it (its identity stays, so the blocks it spans are never read
/// as slots of their own), and its blocks count as consumed. `Deleted` only for extents of a
/// deleted topic (one such mark means its deletion began); `Consumed` for an extent dropped
/// because it held nothing to keep.
pub(super) fn forget_extent(storage: &dyn Storage, f: &Found, state: ProgressState) -> Result<()> {
    count_unused(&f.file, f.id.extent_count);
    mark_retired(storage, &f.file, f.id.block_index, state)
}

/// Writes the progress slot of the extent at block `index` of `file` as retired (`state`,
/// nothing durable in it) and syncs it.
pub(super) fn mark_retired(
    storage: &dyn Storage,
    file: &DataFile,
    index: u32,
    state: ProgressState,
) -> Result<()> {
    let progress = Progress {
        state,
        durable_end: format::BLOCK_HEADER_BYTES,
        record_count: 0,
        max_timestamp_us: 0,
        footer_count: 0,
        footer_crc: 0,
    };
    let at = file.block_position(index) as usize + format::PG_SLOT_AT;
    file.map.write_header(at, &progress.encode());
    storage
        .sync_map(&file.map, &file.path, at, format::PG_LEN)
        .map_err(|e| Error::io("msync", &file.path, e))
}

/// Marks `Deleted` every extent of topic `topic_id` in the data files of `dir` that is not
/// retired on disk yet, and returns how many: a deletion another process began and died in
/// (shared mode; the caller holds the topic's append lock, and every process treats the
/// topic as deleted). `files`: those this handle has open (the others are opened here).
/// The marks go oldest file first, as a deletion's do.
pub fn mark_topic_deleted(
    storage: &dyn Storage,
    dir: &Path,
    files: &BTreeMap<u64, Arc<DataFile>>,
    topic_id: u32,
) -> Result<()> {
    let (listed, _) = list_files(storage, dir)?;
    for (seq, path) in &listed {
        let Some(file) = open_listed(storage, *seq, path, true, files)? else {
            continue;
        };
        let mut index = 0u32;
        while index < file.extent_count {
            match classify_slot(storage, &file, index)? {
                SlotKind::Unused => index += 1,
                SlotKind::Extent(id, progress, ..) => {
                    let retired = progress.is_some_and(|p| {
                        matches!(p.state, ProgressState::Consumed | ProgressState::Deleted)
                    });
                    if id.topic_id == topic_id && !retired {
                        mark_retired(storage, &file, index, ProgressState::Deleted)?;
                    }
                    index += id.extent_count;
                }
            }
        }
    }
    Ok(())
}

/// Whether every extent of `file` is retired on disk (`Consumed` or `Deleted`), judged from
/// its block slots alone: the housekeeping leader's test before it deletes a file that
/// other processes allocated in too (their counts are not this handle's). The caller holds
/// the allocator lock, knows the allocator moved past the file, and that no live process
/// still writes the identity of an extent it was handed there. A block slot never handed
/// out (or handed to a process that died before writing its identity) holds nothing; any
/// other slot, damaged ones included, keeps the file.
///
/// An extent that holds no record (no durable claim, its first frame blank) below its
/// topic's first offset (`below_first(topic id, first offset)`, the leader's view, lined up)
/// is a roll whose writer died before it named it, left behind when retention retired the
/// extents around it: it is marked `Consumed` here (no topic's chain holds it, so nothing
/// else ever would, and its file would stay for good). A live roll's extent starts at its
/// topic's next offset, never below the first.
///
/// An extent marked `Deleted` keeps its file until its topic's deletion ended
/// (`deletion_ended(topic id)`: every extent of the topic marked). Its mark is the
/// deletion's commit point, and a deleter that dies part way leaves the topic's later
/// extents unmarked: without the mark, a recovery would bring the topic back without its
/// head.
pub fn file_retired(
    storage: &dyn Storage,
    file: &DataFile,
    below_first: impl Fn(u32, u64) -> bool,
    deletion_ended: impl Fn(u32) -> bool,
) -> Result<bool> {
    let mut index = 0u32;
    while index < file.extent_count {
        match classify_slot(storage, file, index)? {
            SlotKind::Unused => index += 1,
            SlotKind::Extent(id, Some(p), false, _) if p.state == ProgressState::Consumed => {
                index += id.extent_count;
            }
            SlotKind::Extent(id, Some(p), false, _)
                if p.state == ProgressState::Deleted && deletion_ended(id.topic_id) =>
            {
                index += id.extent_count;
            }
            SlotKind::Extent(id, p, false, _)
                if p.is_none_or(|p| p.record_count == 0)
                    && below_first(id.topic_id, id.first_offset)
                    && first_frame_blank(storage, file, index)? =>
            {
                mark_retired(storage, file, index, ProgressState::Consumed)?;
                index += id.extent_count;
            }
            SlotKind::Extent(..) => return Ok(false),
        }
    }
    Ok(true)
}

//! The topic log on the ring: a [`RingWal`] in front of the data files.
//!
//! Every append writes one journal entry (topic, first offset, records) into the ring while
//! it holds its topic's reservation, so a topic's entries lie in the ring in offset order,
//! and copies the records into the data files as usual, where readers find them. An append
//! is durable once its ring block is. The uploader thread checkpoints: it makes the data
//! files durable in one pass (one `msync` per file) and then trims the ring past every entry
//! that pass covered. Opening replays the ring from its trim offset into the data files,
//! skipping what they already hold (idempotent by per-topic offset).
//!
//! Entry bytes are described in `docs/FORMAT.md` ("Journal entries").

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use crate::config::{Config, RING_CAPACITY_DEFAULT, RING_FILE, RingBackend};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::poison::Recover;
use crate::record::Append;
use crate::ring::entry::{encode, entry_bytes_max, entry_len};
use crate::ring::{RingAppend, RingWal};
use crate::topic::ReservedWrite;

/// Name of the marker file that says a data directory is fronted by a ring.
pub const MARKER_FILE: &str = "RING";
const MARKER_PREFIX: &str = "tidelog ring v1\ndevice ";
/// The marker's second line: the ring's id, 8 hex digits.
const MARKER_RING_PREFIX: &str = "ring ";

/// Longest the uploader sleeps between looks at how full the ring is.
const UPLOAD_POLL: Duration = Duration::from_millis(20);

thread_local! {
    /// Each appending thread's entry buffer, reused across appends.
    static ENTRY_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

#[derive(Debug, Default)]
struct UploadState {
    /// Checkpoints completed (successful or not).
    done: u64,
    /// An appender found the ring full: checkpoint now.
    wanted: bool,
    stop: bool,
}

/// The ring in front of a data directory, and its checkpoint state.
#[derive(Debug)]
pub struct Journal {
    ring: RingWal,
    /// Appends hold it shared from their ring write to their publish; a checkpoint takes it
    /// alone for a moment, so every entry below the ring end it reads is in the data files.
    gate: RwLock<()>,
    /// One checkpoint at a time.
    checkpointing: Mutex<()>,
    upload: Mutex<UploadState>,
    upload_cv: Condvar,
    entry_bytes_max: u64,
    device: PathBuf,
    marker: PathBuf,
}

impl Journal {
    /// Opens the ring of `backend` for the data directory `dir` (locked by the caller) and
    /// records in the directory that it is fronted by that ring.
    pub fn open(
        dir: &Path,
        config: &Config,
        backend: &RingBackend,
        storage: std::sync::Arc<dyn Storage>,
    ) -> Result<Journal> {
        let device = backend
            .device
            .clone()
            .unwrap_or_else(|| dir.join(RING_FILE));
        let marker = dir.join(MARKER_FILE);
        let recorded = read_marker(storage.as_ref(), dir, &marker)?;
        if let Some(Marker {
            device: recorded, ..
        }) = &recorded
        {
            if !same_file(storage.as_ref(), recorded, &device) {
                return Err(Error::invalid(
                    "device",
                    format!(
                        "{} is fronted by the ring at {}, not {}",
                        dir.display(),
                        recorded.display(),
                        device.display()
                    ),
                ));
            }
            // A new ring in place of a lost one would drop its appends without a word.
            if !crate::io::exists(storage.as_ref(), &device)? {
                return Err(Error::io(
                    "open the directory's ring",
                    &device,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
        }
        if backend.ring.format && crate::io::exists(storage.as_ref(), &marker)? {
            return Err(Error::invalid(
                "format",
                format!(
                    "the ring of {} may hold appends its data files lack: open it without \
                     format first (a clean close empties the ring)",
                    dir.display()
                ),
            ));
        }
        let entry_bytes_max = entry_bytes_max(
            config.effective_max_record_bytes(),
            config.effective_max_batch_bytes(),
        );
        let mut ring_config = backend.ring.clone().max_record_bytes(entry_bytes_max);
        if ring_config.capacity_bytes.is_none() && !crate::io::exists(storage.as_ref(), &device)? {
            ring_config = ring_config.capacity_bytes(RING_CAPACITY_DEFAULT);
        }
        let ring = RingWal::open_with_storage(&device, ring_config, storage.clone())?;
        check_owner(dir, &device, recorded.as_ref(), &ring)?;
        write_marker(storage.as_ref(), dir, &marker, &device, ring.ring_id())?;
        Ok(Journal {
            ring,
            gate: RwLock::new(()),
            checkpointing: Mutex::new(()),
            upload: Mutex::new(UploadState::default()),
            upload_cv: Condvar::new(),
            entry_bytes_max,
            device,
            marker,
        })
    }

    /// Refuses to open `dir` without its ring when a ring fronts it: the ring may hold
    /// acknowledged appends the data files do not.
    pub fn check_unfronted(storage: &dyn Storage, dir: &Path) -> Result<()> {
        match read_marker(storage, dir, &dir.join(MARKER_FILE))? {
            None => Ok(()),
            Some(Marker { device, .. }) => Err(Error::invalid(
                "backend",
                format!(
                    "{} is fronted by the ring at {}, which may hold appends not yet in its \
                     data files: open it with the ring backend",
                    dir.display(),
                    device.display()
                ),
            )),
        }
    }

    /// The ring.
    pub fn ring(&self) -> &RingWal {
        &self.ring
    }

    /// The ring's device or file.
    pub fn device(&self) -> &Path {
        &self.device
    }

    /// Checks that `records` of `name` fit one entry.
    pub fn check_fits(&self, name: &str, records: &[Append<'_>]) -> Result<()> {
        let len = entry_len(name, records);
        if len > self.entry_bytes_max {
            return Err(Error::limit("ring_entry_bytes", len, self.entry_bytes_max));
        }
        Ok(())
    }

    /// Held by an append from its ring write to its publish.
    pub fn gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().recover()
    }

    /// Checkpoints completed so far.
    pub fn checkpoints(&self) -> u64 {
        self.upload.lock().recover().done
    }

    /// Asks the uploader for a checkpoint and waits until one more than `seen` completed
    /// (true), or until `deadline` or the uploader stops (false).
    pub fn wait_checkpoint(&self, seen: u64, deadline: Instant) -> bool {
        let mut st = self.upload.lock().recover();
        st.wanted = true;
        self.upload_cv.notify_all();
        loop {
            if st.done > seen {
                return true;
            }
            let now = Instant::now();
            if st.stop || now >= deadline {
                return false;
            }
            st = self.upload_cv.wait_timeout(st, deadline - now).recover().0;
        }
    }

    /// Starts a checkpoint, which makes the data files hold everything the ring holds and
    /// then trims the ring: reads the ring end once no append is between its ring write and
    /// its publish. The caller makes everything published durable in the data files if
    /// [`Checkpoint::needs_flush`], then calls [`Checkpoint::finish`]. One at a time.
    pub fn begin_checkpoint(&self) -> Checkpoint<'_> {
        let one = self.checkpointing.lock().recover();
        let end = {
            let _all = self.gate.write().recover();
            self.ring.next_offset()
        };
        Checkpoint {
            journal: self,
            _one: one,
            end,
        }
    }

    /// True when the ring is at least half full of entries a checkpoint can trim.
    fn half_full(&self) -> bool {
        self.ring.next_offset() > self.ring.trim_offset()
            && self.ring.free_bytes() <= self.ring.ring_bytes() / 2
    }

    /// The uploader thread's wait: returns true once a checkpoint is due (`interval` after
    /// `last`, the ring half full, or an appender found it full), false once stopped.
    pub fn wait_until_due(&self, interval: Duration, last: Instant) -> bool {
        let mut st = self.upload.lock().recover();
        loop {
            if st.stop {
                return false;
            }
            if st.wanted || last.elapsed() >= interval || self.half_full() {
                st.wanted = false;
                return true;
            }
            let wait = UPLOAD_POLL.min(interval.saturating_sub(last.elapsed()));
            st = self.upload_cv.wait_timeout(st, wait).recover().0;
        }
    }

    /// Stops the uploader and wakes appenders waiting for a checkpoint.
    pub fn stop_uploader(&self) {
        let mut st = self.upload.lock().recover();
        st.stop = true;
        self.upload_cv.notify_all();
    }

    /// Closes the ring. With `store_durable` (the data files hold everything), the ring is
    /// emptied first and the marker removed, so the directory opens without it again.
    pub fn close(&self, storage: &dyn Storage, store_durable: bool) -> Result<()> {
        self.stop_uploader();
        let emptied = if store_durable {
            self.ring.reset().map(|_| ())
        } else {
            Ok(())
        };
        let closed = self.ring.close();
        emptied?;
        closed?;
        if store_durable {
            match storage.remove_file(&self.marker) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove ring marker", &self.marker, e)),
            }
            if let Some(dir) = self.marker.parent() {
                storage
                    .sync_dir(dir)
                    .map_err(|e| Error::io("fsync directory", dir, e))?;
            }
        }
        Ok(())
    }
}

/// A checkpoint in progress (see [`Journal::begin_checkpoint`]).
#[derive(Debug)]
#[must_use = "a checkpoint must be finished"]
pub(crate) struct Checkpoint<'a> {
    journal: &'a Journal,
    _one: MutexGuard<'a, ()>,
    /// The ring end when it began: every entry below it is published.
    end: u64,
}

impl Checkpoint<'_> {
    /// True when the ring holds entries the data files may not have made durable yet.
    pub fn needs_flush(&self) -> bool {
        self.end > self.journal.ring.trim_offset()
    }

    /// Trims the ring past what the data files now hold (`flushed`: the data files' flush,
    /// when [`Checkpoint::needs_flush`]; nothing is trimmed past entries if it failed), and
    /// counts the checkpoint.
    pub fn finish(self, flushed: Result<()>) -> Result<()> {
        let ring = &self.journal.ring;
        let result = if self.needs_flush() {
            flushed.and_then(|()| ring.trim(self.end.min(ring.flushed_offset())))
        } else {
            // Nothing new: the trim may still move past padding written since.
            flushed.and_then(|()| ring.trim(self.end))
        };
        let mut st = self.journal.upload.lock().recover();
        st.done += 1;
        self.journal.upload_cv.notify_all();
        result
    }
}

impl ReservedWrite for Journal {
    /// Writes the entry of `records` into the ring (called under the topic's reservation).
    fn write(
        &self,
        topic: &str,
        first: u64,
        records: &[Append<'_>],
        now_us: u64,
    ) -> Result<RingAppend> {
        ENTRY_BUF.with_borrow_mut(|buf| {
            encode(buf, topic, first, records, now_us);
            self.ring.append(buf)
        })
    }
}

/// What a directory's `RING` marker records.
#[derive(Debug)]
struct Marker {
    /// The ring's device or file (a bare name is inside the data directory).
    device: PathBuf,
    /// The id of the ring that fronts the directory (markers of older builds lack it).
    ring_id: Option<u32>,
}

/// The marker of directory `dir`, if it has one.
fn read_marker(storage: &dyn Storage, dir: &Path, marker: &Path) -> Result<Option<Marker>> {
    let Some(text) = crate::io::read_text_optional(storage, marker, "read ring marker")? else {
        return Ok(None);
    };
    let bad = || Error::Corruption {
        topic: String::new(),
        offset: 0,
        path: marker.to_owned(),
        position: 0,
        reason: "not a tidelog ring marker".to_owned(),
    };
    let rest = text.strip_prefix(MARKER_PREFIX).ok_or_else(bad)?;
    let mut lines = rest.split_terminator('\n');
    let device = lines.next().filter(|d| !d.is_empty()).ok_or_else(bad)?;
    let ring_id = match lines.next() {
        None => None,
        Some(line) => {
            let hex = line.strip_prefix(MARKER_RING_PREFIX).ok_or_else(bad)?;
            Some(u32::from_str_radix(hex, 16).map_err(|_| bad())?)
        }
    };
    if lines.next().is_some() || !text.ends_with('\n') {
        return Err(bad());
    }
    Ok(Some(Marker {
        device: dir.join(device),
        ring_id,
    }))
}

/// Writes the marker naming `device` and the ring's id (through a temporary file and a
/// rename). A ring inside the data directory is named by its file name alone, so the
/// directory can be moved or copied with its ring.
fn write_marker(
    storage: &dyn Storage,
    dir: &Path,
    marker: &Path,
    device: &Path,
    ring_id: u32,
) -> Result<()> {
    let inside = device.parent().is_some_and(|p| same_file(storage, p, dir));
    let device = match device.file_name() {
        Some(name) if inside => PathBuf::from(name),
        _ => std::path::absolute(device).unwrap_or_else(|_| device.to_owned()),
    };
    let Some(device_text) = device.to_str().filter(|d| !d.contains('\n')) else {
        return Err(Error::invalid(
            "device",
            "the ring's path must be UTF-8 without newlines",
        ));
    };
    let text = format!("{MARKER_PREFIX}{device_text}\n{MARKER_RING_PREFIX}{ring_id:08x}\n");
    if storage
        .read_file(marker)
        .is_ok_and(|t| t == text.as_bytes())
    {
        return Ok(());
    }
    crate::io::replace_file(storage, dir, marker, text.as_bytes(), "write ring marker")
}

/// A ring belongs to the directory that wrote it. With a marker, the ring must be the one it
/// names (a ring formatted again, or another ring at that path, lost the directory's
/// appends). Without one, the directory owes the ring nothing, so a ring that still holds
/// appends holds another directory's: replaying them here would mix two logs.
fn check_owner(dir: &Path, device: &Path, marker: Option<&Marker>, ring: &RingWal) -> Result<()> {
    match marker.and_then(|m| m.ring_id) {
        Some(id) if id != ring.ring_id() => Err(Error::invalid(
            "device",
            format!(
                "{} was fronted by ring {id:08x}, but {} holds ring {:08x}: the appends the \
                 directory's ring held are not there",
                dir.display(),
                device.display(),
                ring.ring_id()
            ),
        )),
        Some(_) => Ok(()),
        None if marker.is_none() && ring.recovery_report().records > 0 => Err(Error::invalid(
            "device",
            format!(
                "the ring at {} holds {} appends of another directory; open that directory \
                 with it, or format the ring to reuse it",
                device.display(),
                ring.recovery_report().records
            ),
        )),
        None => Ok(()),
    }
}

/// True when `a` and `b` name the same file (or the same path, where one does not exist).
fn same_file(storage: &dyn Storage, a: &Path, b: &Path) -> bool {
    match (storage.canonicalize(a), storage.canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

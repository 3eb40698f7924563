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
use std::sync::{Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use crate::config::{self, Config, RING_CAPACITY_DEFAULT, RING_FILE, RingBackend};
use crate::error::{Error, Result};
use crate::format::TOPIC_NAME_MAX;
use crate::io::Storage;
use crate::ring::{RingAppend, RingWal};
use crate::topic::Append;

/// Name of the marker file that says a data directory is fronted by a ring.
pub const MARKER_FILE: &str = "RING";
const MARKER_PREFIX: &str = "tidelog ring v1\ndevice ";
/// The marker's second line: the ring's id, 8 hex digits.
const MARKER_RING_PREFIX: &str = "ring ";

/// Entry kind: a batch of records of one topic.
const ENTRY_KIND_BATCH: u8 = 1;
const ENTRY_VERSION: u8 = 1;
/// Entry header: kind u8, version u8, name length u16, record count u32, first offset u64.
pub const EH_KIND: usize = 0;
pub const EH_VERSION: usize = EH_KIND + 1;
pub const EH_NAME_LEN: usize = EH_VERSION + 1;
pub const EH_COUNT: usize = EH_NAME_LEN + 2;
pub const EH_FIRST: usize = EH_COUNT + 4;
pub const EH_LEN: usize = EH_FIRST + 8;
/// Record header inside an entry: timestamp u64, key length u32 (`KEY_NONE`: no key),
/// value length u32.
pub const ER_TIMESTAMP: usize = 0;
pub const ER_KEY_LEN: usize = ER_TIMESTAMP + 8;
pub const ER_VALUE_LEN: usize = ER_KEY_LEN + 4;
pub const ER_LEN: usize = ER_VALUE_LEN + 4;
const KEY_NONE: u32 = u32::MAX;
const _: () = assert!(EH_LEN == 16 && ER_LEN == 16);
const _: () = assert!(TOPIC_NAME_MAX <= u16::MAX as usize);

/// Room reserved in every ring entry beyond the batch limit: the entry header, the longest
/// name and the record headers of a batch of up to about 4,000 records.
const ENTRY_OVERHEAD_BYTES: u64 = 64 * 1024;

/// Longest the uploader sleeps between looks at how full the ring is.
const UPLOAD_POLL: Duration = Duration::from_millis(20);

/// The largest journal entry the Wal's limits allow: the ring's record limit.
pub fn entry_bytes_max(record_bytes_max: u64, batch_bytes_max: u64) -> u64 {
    record_bytes_max.max(batch_bytes_max) + ENTRY_OVERHEAD_BYTES
}

/// Bytes of the entry for `records` of topic `name`.
pub fn entry_len(name: &str, records: &[Append<'_>]) -> u64 {
    let payload: u64 = records.iter().map(Append::payload_len).sum();
    (EH_LEN + name.len() + ER_LEN * records.len()) as u64 + payload
}

/// Encodes the entry of `records` (of `name`, starting at offset `first`; records without a
/// timestamp get `now_us`) into `buf`, replacing what it held.
pub(crate) fn encode(
    buf: &mut Vec<u8>,
    name: &str,
    first: u64,
    records: &[Append<'_>],
    now_us: u64,
) {
    buf.clear();
    buf.reserve(entry_len(name, records) as usize);
    buf.push(ENTRY_KIND_BATCH);
    buf.push(ENTRY_VERSION);
    buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
    buf.extend_from_slice(&(records.len() as u32).to_le_bytes());
    buf.extend_from_slice(&first.to_le_bytes());
    buf.extend_from_slice(name.as_bytes());
    for r in records {
        buf.extend_from_slice(&r.timestamp_us.unwrap_or(now_us).to_le_bytes());
        let key_len = r.key.map_or(KEY_NONE, |k| k.len() as u32);
        buf.extend_from_slice(&key_len.to_le_bytes());
        buf.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
        if let Some(k) = r.key {
            buf.extend_from_slice(k);
        }
        buf.extend_from_slice(r.value);
    }
    debug_assert_eq!(buf.len() as u64, entry_len(name, records));
}

/// A decoded entry, borrowing the ring record's body.
#[derive(Debug)]
pub struct Entry<'a> {
    pub topic: &'a str,
    pub first: u64,
    pub records: Vec<Append<'a>>,
}

/// Decodes and validates one entry; the error says which check failed.
pub fn decode(body: &[u8]) -> std::result::Result<Entry<'_>, String> {
    let head = body
        .get(..EH_LEN)
        .ok_or_else(|| format!("entry of {} bytes is shorter than its header", body.len()))?;
    if head[EH_KIND] != ENTRY_KIND_BATCH || head[EH_VERSION] != ENTRY_VERSION {
        return Err(format!(
            "unknown entry kind {} version {}",
            head[EH_KIND], head[EH_VERSION]
        ));
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let u64_at = |b: &[u8], at: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(x)
    };
    let name_len = usize::from(u16_at(head, EH_NAME_LEN));
    let count = u32_at(head, EH_COUNT) as usize;
    let first = u64_at(head, EH_FIRST);
    if count == 0 {
        return Err("entry holds no records".to_owned());
    }
    let mut at = EH_LEN + name_len;
    let name = body
        .get(EH_LEN..at)
        .and_then(|n| std::str::from_utf8(n).ok())
        .ok_or("entry topic name is cut or not UTF-8")?;
    config::validate_name(name).map_err(|e| e.to_string())?;
    first
        .checked_add(count as u64)
        .ok_or("entry offsets overflow")?;
    // Each record takes at least its header: bounds the allocation by the body size.
    if count > (body.len() - at) / ER_LEN {
        return Err(format!("entry announces {count} records, more than fit"));
    }
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let rh = body
            .get(at..at + ER_LEN)
            .ok_or("entry record header is cut")?;
        let timestamp_us = u64_at(rh, ER_TIMESTAMP);
        let key_len = u32_at(rh, ER_KEY_LEN);
        let value_len = u32_at(rh, ER_VALUE_LEN) as usize;
        at += ER_LEN;
        let key = if key_len == KEY_NONE {
            None
        } else {
            let k = body
                .get(at..at + key_len as usize)
                .ok_or("entry record key is cut")?;
            at += k.len();
            Some(k)
        };
        let value = body
            .get(at..at + value_len)
            .ok_or("entry record value is cut")?;
        at += value_len;
        records.push(Append {
            key,
            value,
            timestamp_us: Some(timestamp_us),
        });
    }
    if at != body.len() {
        return Err(format!(
            "entry has {} bytes after its last record",
            body.len() - at
        ));
    }
    Ok(Entry {
        topic: name,
        first,
        records,
    })
}

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
            if !crate::io::exists(storage.as_ref(), &device) {
                return Err(Error::io(
                    "open the directory's ring",
                    &device,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
        }
        if backend.ring.format && crate::io::exists(storage.as_ref(), &marker) {
            return Err(Error::invalid(
                "format",
                format!(
                    "the ring of {} may hold appends its data files lack: open it without \
                     format first (a clean close empties the ring)",
                    dir.display()
                ),
            ));
        }
        let entry_bytes_max = entry_bytes_max(config.record_bytes_max(), config.batch_bytes_max());
        let mut ring_config = backend.ring.clone().max_record_bytes(entry_bytes_max);
        if ring_config.capacity_bytes.is_none() && !crate::io::exists(storage.as_ref(), &device) {
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
        self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the entry of `records` into the ring (called under the topic's reservation).
    pub fn write(
        &self,
        name: &str,
        first: u64,
        records: &[Append<'_>],
        now_us: u64,
    ) -> Result<RingAppend> {
        ENTRY_BUF.with_borrow_mut(|buf| {
            encode(buf, name, first, records, now_us);
            self.ring.append(buf)
        })
    }

    /// Checkpoints completed so far.
    pub fn checkpoints(&self) -> u64 {
        self.upload.lock().unwrap_or_else(|p| p.into_inner()).done
    }

    /// Asks the uploader for a checkpoint and waits until one more than `seen` completed
    /// (true), or until `deadline` or the uploader stops (false).
    pub fn wait_checkpoint(&self, seen: u64, deadline: Instant) -> bool {
        let mut st = self.upload.lock().unwrap_or_else(|p| p.into_inner());
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
            st = self
                .upload_cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Makes the data files hold everything the ring holds, then trims the ring: reads the
    /// ring end once no append is between its ring write and its publish, runs `flush_store`
    /// (everything published is durable once it returns), and trims to that end (or to the
    /// ring's flushed offset, if lower).
    pub fn checkpoint(&self, flush_store: &dyn Fn() -> Result<()>) -> Result<()> {
        let _one = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
        let end = {
            let _all = self.gate.write().unwrap_or_else(|p| p.into_inner());
            self.ring.next_offset()
        };
        let result = if end > self.ring.trim_offset() {
            flush_store().and_then(|()| self.ring.trim(end.min(self.ring.flushed_offset())))
        } else {
            // Nothing new: the trim may still move past padding written since.
            self.ring.trim(end)
        };
        let mut st = self.upload.lock().unwrap_or_else(|p| p.into_inner());
        st.done += 1;
        self.upload_cv.notify_all();
        result
    }

    /// True when the ring is at least half full of entries a checkpoint can trim.
    fn half_full(&self) -> bool {
        self.ring.next_offset() > self.ring.trim_offset()
            && self.ring.free_bytes() <= self.ring.ring_bytes() / 2
    }

    /// The uploader thread: checkpoints every `interval`, when the ring is half full, and
    /// when an appender finds it full. Errors reach appenders through the poisoned store
    /// or ring; `report` keeps the first for the next flush.
    pub fn run_uploader(
        &self,
        interval: Duration,
        flush_store: &dyn Fn() -> Result<()>,
        report: &dyn Fn(Error),
    ) {
        let mut last = Instant::now();
        let mut st = self.upload.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if st.stop {
                return;
            }
            let due = st.wanted || last.elapsed() >= interval || self.half_full();
            if !due {
                let wait = UPLOAD_POLL.min(interval.saturating_sub(last.elapsed()));
                st = self
                    .upload_cv
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                continue;
            }
            st.wanted = false;
            drop(st);
            last = Instant::now();
            if let Err(e) = self.checkpoint(flush_store) {
                report(e);
            }
            st = self.upload.lock().unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Stops the uploader and wakes appenders waiting for a checkpoint.
    pub fn stop_uploader(&self) {
        let mut st = self.upload.lock().unwrap_or_else(|p| p.into_inner());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_reject_damage() {
        let records = [
            Append {
                key: Some(b"k"),
                value: b"v1",
                timestamp_us: Some(7),
            },
            Append {
                key: Some(b""),
                value: b"",
                timestamp_us: None,
            },
            Append::value(b"third"),
        ];
        let mut buf = Vec::new();
        encode(&mut buf, "orders", 41, &records, 99);
        let e = decode(&buf).expect("decodes");
        assert_eq!((e.topic, e.first, e.records.len()), ("orders", 41, 3));
        assert_eq!(e.records[0].key, Some(&b"k"[..]));
        assert_eq!(e.records[1].key, Some(&b""[..]));
        assert_eq!(e.records[2].key, None);
        assert_eq!(e.records[2].value, b"third");
        let stamps: Vec<_> = e.records.iter().map(|r| r.timestamp_us).collect();
        assert_eq!(stamps, [Some(7), Some(99), Some(99)]);
        for cut in 0..buf.len() {
            assert!(decode(&buf[..cut]).is_err(), "cut at {cut} accepted");
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut bad_kind = buf.clone();
        bad_kind[EH_KIND] = 9;
        assert!(decode(&bad_kind).is_err());
        let mut bad_name = buf;
        bad_name[EH_LEN] = b'/';
        assert!(decode(&bad_name).is_err());
    }
}

//! Model-based test: random operation sequences run against the engine and against a simple
//! in-memory model of what it must hold, with crashes that lose every write not made durable.
//!
//! The engine runs on [`CrashStorage`], a `Storage` that keeps, per file, the image a power
//! loss would leave (its "durable image"): `msync` and `fdatasync` copy bytes into it, and
//! created, renamed or removed names become durable only at the next `fsync` of their
//! directory. A crash writes that image into a new directory (optionally with a random
//! subset of the pages written since their last sync, as a kernel's writeback may have
//! flushed them) and opens a fresh `Wal` there. See `docs/TESTING.md`.
//!
//! `TIDELOG_MODEL_CASES=N` runs N cases instead of the default.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use tidelog::io::{DirEntry, Fault, FaultStorage, Mapping, Storage, points};
use tidelog::{
    Append, Config, Durability, Error, HeaderBlock, Headers, ReaderOptions, RecordFormat,
    Retention, StartPosition, Wal,
};

const PAGE: usize = 4096;

// ---------------------------------------------------------------------------------------------
// The crash-modelling storage
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Inode {
    /// What a power loss leaves of the file (its durable length is `durable.len()`).
    durable: Vec<u8>,
    /// Ranges written with `write_at` since the last `sync_file`.
    pending: Vec<(u64, usize)>,
}

/// What a power loss leaves of a directory: its entries as of its last `sync_dir`.
#[derive(Debug, Default)]
struct Listing {
    files: BTreeMap<OsString, u64>,
    /// Subdirectories by name, and their directory ids.
    dirs: BTreeMap<OsString, u64>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    inodes: HashMap<u64, Inode>,
    /// The live namespace: path of every file this storage knows, and its inode.
    names: HashMap<PathBuf, u64>,
    /// The live directories and their ids (a renamed directory keeps its id, and with it
    /// its durable listing: until its old parent is synced, a crash shows it at its old name).
    dirs: HashMap<PathBuf, u64>,
    /// The durable namespace: per directory id, the entries as of its last `sync_dir`.
    durable: HashMap<u64, Listing>,
    /// The root's directory id.
    root: u64,
}

impl State {
    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Moves every live name at or under `from` to the same place under `to`.
    fn move_tree(&mut self, from: &Path, to: &Path) {
        let moved = |p: &Path| -> Option<PathBuf> {
            let rest = p.strip_prefix(from).ok()?;
            Some(if rest.as_os_str().is_empty() {
                to.to_owned()
            } else {
                to.join(rest)
            })
        };
        self.names = std::mem::take(&mut self.names)
            .into_iter()
            .map(|(p, id)| (moved(&p).unwrap_or(p), id))
            .collect();
        self.dirs = std::mem::take(&mut self.dirs)
            .into_iter()
            .map(|(p, id)| (moved(&p).unwrap_or(p), id))
            .collect();
    }

    /// Forgets every live name at or under `dir`.
    fn forget_tree(&mut self, dir: &Path) {
        self.names.retain(|p, _| !p.starts_with(dir));
        self.dirs.retain(|p, _| !p.starts_with(dir));
    }
}

/// A `Storage` that models the page cache (see the module docs). Faults go through the
/// wrapped [`FaultStorage`].
#[derive(Debug, Clone)]
struct CrashStorage {
    root: PathBuf,
    faults: FaultStorage,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl CrashStorage {
    /// A storage for `root`, whose present content (files and listings) counts as durable.
    fn new(root: &Path) -> CrashStorage {
        let mut state = State::default();
        fn scan(state: &mut State, dir: &Path) -> u64 {
            let dir_id = state.new_id();
            state.dirs.insert(dir.to_owned(), dir_id);
            let mut listing = Listing::default();
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                let path = entry.path();
                if entry.file_type().unwrap().is_dir() {
                    let sub = scan(state, &path);
                    listing.dirs.insert(entry.file_name(), sub);
                } else {
                    let id = state.new_id();
                    let bytes = std::fs::read(&path).unwrap();
                    state.inodes.insert(
                        id,
                        Inode {
                            durable: bytes,
                            pending: Vec::new(),
                        },
                    );
                    state.names.insert(path, id);
                    listing.files.insert(entry.file_name(), id);
                }
            }
            state.durable.insert(dir_id, listing);
            dir_id
        }
        std::fs::create_dir_all(root).unwrap();
        state.root = scan(&mut state, root);
        CrashStorage {
            root: root.to_owned(),
            faults: FaultStorage::new(),
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn id_of(&self, path: &Path) -> Option<u64> {
        lock(&self.state).names.get(path).copied()
    }

    /// Copies `[offset, offset + len)` of the live bytes (`read` reads them) into the durable
    /// image of `path`, whose durable length becomes `live_len`.
    fn make_durable(
        &self,
        path: &Path,
        live_len: u64,
        ranges: &[(u64, usize)],
        read: &dyn Fn(u64, &mut [u8]),
    ) {
        let mut st = lock(&self.state);
        let Some(id) = st.names.get(path).copied() else {
            return;
        };
        let inode = st.inodes.entry(id).or_default();
        inode.durable.resize(live_len as usize, 0);
        for &(offset, len) in ranges {
            let end = (offset as usize + len).min(live_len as usize);
            if end <= offset as usize {
                continue;
            }
            let mut buf = vec![0u8; end - offset as usize];
            read(offset, &mut buf);
            inode.durable[offset as usize..end].copy_from_slice(&buf);
        }
    }

    /// Writes the durable state into `dst` (a new directory). With `torn`, each page whose
    /// live bytes differ from the durable ones takes the live bytes with probability 1/2
    /// (decided by `seed`): writeback may have flushed it before the crash.
    fn crash_image(&self, dst: &Path, torn: Option<u64>) {
        let st = lock(&self.state);
        let mut rng = torn.unwrap_or(0) | 1;
        let mut coin = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng & 1 == 1
        };
        // From the root down through the durable listings: a directory whose parent's
        // listing does not name it (created, renamed or removed since) is where that
        // listing says.
        let mut stack = vec![(st.root, dst.to_owned())];
        while let Some((dir_id, to_dir)) = stack.pop() {
            std::fs::create_dir_all(&to_dir).unwrap();
            let Some(listing) = st.durable.get(&dir_id) else {
                continue;
            };
            for (name, id) in &listing.files {
                let mut bytes = st
                    .inodes
                    .get(id)
                    .map(|i| i.durable.clone())
                    .unwrap_or_default();
                if torn.is_some() {
                    // The live content of this inode, if it still has a live name.
                    let live = st
                        .names
                        .iter()
                        .find(|(_, i)| *i == id)
                        .and_then(|(p, _)| std::fs::read(p).ok());
                    if let Some(live) = live {
                        for start in (0..bytes.len()).step_by(PAGE) {
                            let end = (start + PAGE).min(bytes.len()).min(live.len());
                            if end > start && bytes[start..end] != live[start..end] && coin() {
                                bytes[start..end].copy_from_slice(&live[start..end]);
                            }
                        }
                    }
                }
                std::fs::write(to_dir.join(name), &bytes).unwrap();
            }
            for (name, sub) in &listing.dirs {
                stack.push((*sub, to_dir.join(name)));
            }
        }
    }
}

impl Storage for CrashStorage {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        let f = self.faults.create_new(path)?;
        let mut st = lock(&self.state);
        let id = st.next_id;
        st.next_id += 1;
        st.inodes.insert(id, Inode::default());
        st.names.insert(path.to_owned(), id);
        Ok(f)
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<File> {
        self.faults.open(path, writable)
    }
    fn open_device(&self, path: &Path, direct: bool) -> io::Result<File> {
        // O_DSYNC writes: not used by the data files this test runs.
        self.faults.open_device(path, direct)
    }
    fn open_direct(&self, path: &Path) -> io::Result<File> {
        self.faults.open_direct(path)
    }
    fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        // The length becomes durable with the next sync of the file.
        self.faults.set_len(file, path, len)
    }
    fn allocate(&self, file: &File, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        self.faults.allocate(file, path, offset, len)
    }
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], offset: u64) -> io::Result<()> {
        // Remembered whether it fails or not: a short write leaves some bytes behind.
        let result = self.faults.write_at(file, path, buf, offset);
        if let Some(id) = self.id_of(path) {
            let mut st = lock(&self.state);
            st.inodes
                .entry(id)
                .or_default()
                .pending
                .push((offset, buf.len()));
        }
        result
    }
    fn read_at(&self, file: &File, path: &Path, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.faults.read_at(file, path, buf, offset)
    }
    fn sync_file(&self, file: &File, path: &Path) -> io::Result<()> {
        self.faults.sync_file(file, path)?;
        let live_len = file.metadata()?.len();
        let pending = {
            let mut st = lock(&self.state);
            match st.names.get(path).copied() {
                Some(id) => std::mem::take(&mut st.inodes.entry(id).or_default().pending),
                None => Vec::new(),
            }
        };
        self.make_durable(path, live_len, &pending, &|at, buf| {
            file.read_exact_at(buf, at).unwrap();
        });
        Ok(())
    }
    fn sync_map(&self, map: &Mapping, path: &Path, offset: usize, len: usize) -> io::Result<()> {
        self.faults.sync_map(map, path, offset, len)?;
        // msync works on whole pages.
        let start = offset / PAGE * PAGE;
        let end = (offset + len).div_ceil(PAGE) * PAGE;
        let end = end.min(map.len());
        let live_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        self.make_durable(
            path,
            live_len,
            &[(start as u64, end - start)],
            &|at, buf| map.copy_out(at as usize, buf),
        );
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.faults.sync_dir(dir)?;
        let mut st = lock(&self.state);
        let Some(&dir_id) = st.dirs.get(dir) else {
            return Ok(());
        };
        let child = |p: &Path| (p.parent() == Some(dir)).then(|| p.file_name().unwrap().to_owned());
        let listing = Listing {
            files: st
                .names
                .iter()
                .filter_map(|(p, id)| Some((child(p)?, *id)))
                .collect(),
            dirs: st
                .dirs
                .iter()
                .filter_map(|(p, id)| Some((child(p)?, *id)))
                .collect(),
        };
        st.durable.insert(dir_id, listing);
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.faults.rename(from, to)?;
        let mut st = lock(&self.state);
        if let Some(id) = st.names.remove(from) {
            st.names.insert(to.to_owned(), id);
        } else if st.dirs.contains_key(from) {
            // A directory: its files and subdirectories go with it.
            st.move_tree(from, to);
        }
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.faults.remove_file(path)?;
        lock(&self.state).names.remove(path);
        Ok(())
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.faults.create_dir_all(dir)?;
        // A new directory is durable in its parent at the parent's next sync, as renames
        // and removals are.
        let mut st = lock(&self.state);
        let mut missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|a| a.starts_with(&self.root) && !st.dirs.contains_key(*a))
            .collect();
        missing.reverse();
        for path in missing {
            let id = st.new_id();
            st.dirs.insert(path.to_owned(), id);
            st.durable.insert(id, Listing::default());
        }
        Ok(())
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.faults.remove_dir_all(dir)?;
        lock(&self.state).forget_tree(dir);
        Ok(())
    }
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.faults.read_dir(dir)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.faults.read_file(path)
    }
    fn file_metadata(&self, file: &File, path: &Path) -> io::Result<std::fs::Metadata> {
        self.faults.file_metadata(file, path)
    }
    fn metadata(&self, path: &Path) -> io::Result<std::fs::Metadata> {
        self.faults.metadata(path)
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self.faults.canonicalize(path)
    }
    fn try_lock(&self, file: &File, path: &Path) -> io::Result<()> {
        self.faults.try_lock(file, path)
    }
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

const TOPICS: [&str; 3] = ["t0", "t1", "t2"];
/// The topic kept by size (`Retention::max_bytes`): its oldest extents go while the rest
/// holds at least [`RETAINED_BYTES`] of frames.
const RETAINED_TOPIC: &str = "t2";
const RETAINED_BYTES: u64 = 4 * 1024;
/// More than a record's frame takes beyond its key, value and header bytes, in either record
/// format (a record frame's header and padding; a batch of one's header, entry and padding).
const FRAME_OVERHEAD_MAX: u64 = 128;
const GROUPS: [&str; 2] = ["g0", "g1"];
const FAULT_POINTS: [&str; 9] = [
    points::SYNC_MAP,
    points::SYNC_FILE,
    points::SYNC_DIR,
    points::CREATE,
    points::SET_LEN,
    points::ALLOCATE,
    points::WRITE,
    points::REMOVE,
    points::RENAME,
];
/// The points an open meets: reads of what recovery trusts first (an error there must fail
/// the open, never read as "absent" or "empty"), and the writes of its repairs. The
/// two-process model faults its opens at the same points.
pub(crate) const OPEN_FAULT_POINTS: [&str; 11] = [
    points::OPEN,
    points::READ,
    points::READ_DIR,
    points::READ_FILE,
    points::FILE_METADATA,
    points::METADATA,
    points::SYNC_MAP,
    points::SYNC_DIR,
    points::CREATE,
    points::SET_LEN,
    points::ALLOCATE,
];

#[derive(Debug, Clone)]
enum Op {
    /// One record; `len` bytes of value, maybe a key; `always`: a writer with `Always`.
    Append {
        topic: usize,
        len: usize,
        key: bool,
        always: bool,
        ts_step: u64,
    },
    /// A batch of `n` records.
    Batch {
        topic: usize,
        n: usize,
        len: usize,
        always: bool,
    },
    /// Reads the record at `pick` mod (records + 1) and checks it (or the error past the end).
    Read {
        topic: usize,
        pick: usize,
    },
    /// A grouped reader reads up to `n` records from its committed offset, then commits.
    GroupRead {
        topic: usize,
        group: usize,
        n: usize,
    },
    /// An anonymous reader seeks to an offset and reads the record there.
    Seek {
        topic: usize,
        pick: usize,
    },
    /// An anonymous reader seeks by time.
    SeekTime {
        topic: usize,
        pick: usize,
    },
    DeleteTopic {
        topic: usize,
    },
    /// `delete_records` below `pick` mod (records + 1).
    DeleteRecords {
        topic: usize,
        pick: usize,
    },
    /// A read-only handle (as another process opens one) reads the topic: every record
    /// published, through the shared state file; its durable readers at least what was
    /// acknowledged durable.
    Follow {
        topic: usize,
    },
    Flush,
    /// `n` records appended one `append_async` each (`Always`, or the Wal's durability). With
    /// `wait` every handle is waited on (after a `flush` for those not `Always`): durable
    /// once all complete. Without it the handles are dropped: the records are appended, not
    /// acknowledged durable.
    AppendAsync {
        topic: usize,
        n: usize,
        len: usize,
        always: bool,
        wait: bool,
    },
    /// Another process: a second writable handle on the directory (shared mode: its own
    /// lock byte, process slot and view of each topic) opens beside the first, appends `n`
    /// records with `Always` (durable when they return), and closes.
    Other {
        topic: usize,
        n: usize,
        len: usize,
    },
    /// Another process deletes the topic: a second writable handle opens beside the first
    /// (so the deletion runs beside another process: the slot marked, then released), deletes
    /// it and closes; the first handle then finds it deleted, and its next append starts a
    /// new topic.
    OtherDelete {
        topic: usize,
    },
    /// A task stages `n` records for the topic in a job of its own (a `StagedWriter` in the
    /// directory, through the same storage); with `commit` the job is committed and
    /// published (`Wal::commit_staged`: durable, one contiguous range, all or none), else it
    /// is left uncommitted and must never be published.
    Stage {
        topic: usize,
        n: usize,
        len: usize,
        commit: bool,
    },
    /// Clean close, then open again.
    Reopen,
    /// Power loss: only the durable image survives (`torn`: plus random unsynced pages).
    Crash {
        torn: Option<u64>,
    },
    /// The next operation's `skip`-th call of `point` fails with `errno` (or a short write).
    Fault {
        point: usize,
        errno: i32,
        skip: u64,
        short: bool,
    },
    /// A clean close (`crash`: a power loss), then an open whose `skip`-th call of
    /// `OPEN_FAULT_POINTS[point]` fails with `errno`.
    FaultedOpen {
        point: usize,
        errno: i32,
        skip: u64,
        crash: bool,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let topic = 0..TOPICS.len();
    prop_oneof![
        8 => (topic.clone(), prop_oneof![4 => 0usize..200, 1 => 200usize..30_000], any::<bool>(), prop::bool::weighted(0.3), 0u64..3)
            .prop_map(|(topic, len, key, always, ts_step)| Op::Append { topic, len, key, always, ts_step }),
        3 => (topic.clone(), 1usize..6, 0usize..3000, prop::bool::weighted(0.3))
            .prop_map(|(topic, n, len, always)| Op::Batch { topic, n, len, always }),
        3 => (topic.clone(), any::<usize>()).prop_map(|(topic, pick)| Op::Read { topic, pick }),
        2 => (topic.clone(), 0..GROUPS.len(), 0usize..6)
            .prop_map(|(topic, group, n)| Op::GroupRead { topic, group, n }),
        1 => (topic.clone(), any::<usize>()).prop_map(|(topic, pick)| Op::Seek { topic, pick }),
        1 => (topic.clone(), any::<usize>()).prop_map(|(topic, pick)| Op::SeekTime { topic, pick }),
        1 => topic.clone().prop_map(|topic| Op::DeleteTopic { topic }),
        1 => (topic.clone(), any::<usize>()).prop_map(|(topic, pick)| Op::DeleteRecords { topic, pick }),
        2 => topic.clone().prop_map(|topic| Op::Follow { topic }),
        2 => Just(Op::Flush),
        2 => (topic.clone(), 1usize..5, 0usize..3000, any::<bool>(), prop::bool::weighted(0.7))
            .prop_map(|(topic, n, len, always, wait)| Op::AppendAsync { topic, n, len, always, wait }),
        2 => (topic.clone(), 1usize..5, 0usize..3000).prop_map(|(topic, n, len)| Op::Other { topic, n, len }),
        1 => topic.clone().prop_map(|topic| Op::OtherDelete { topic }),
        2 => (topic.clone(), 1usize..6, 0usize..3000, prop::bool::weighted(0.8))
            .prop_map(|(topic, n, len, commit)| Op::Stage { topic, n, len, commit }),
        1 => Just(Op::Reopen),
        2 => prop::option::weighted(0.5, any::<u64>()).prop_map(|torn| Op::Crash { torn }),
        1 => (0..FAULT_POINTS.len(), prop_oneof![Just(libc::EIO), Just(libc::ENOSPC)], 0u64..4, prop::bool::weighted(0.2))
            .prop_map(|(point, errno, skip, short)| Op::Fault { point, errno, skip, short }),
        1 => (0..OPEN_FAULT_POINTS.len(), prop_oneof![Just(libc::EIO), Just(libc::ENOSPC)], 0u64..12, any::<bool>())
            .prop_map(|(point, errno, skip, crash)| Op::FaultedOpen { point, errno, skip, crash }),
    ]
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

/// Headers for every third value: one that repeats its key, one null.
fn headers_for(seq: u64) -> Option<Vec<u8>> {
    if !seq.is_multiple_of(3) {
        return None;
    }
    let seq = seq.to_le_bytes();
    let h = Headers::from_pairs([("seq", Some(&seq[..])), ("seq", None)]).expect("valid");
    h.block().map(|b| b.as_bytes().to_vec())
}

fn checked(bytes: &[u8]) -> HeaderBlock<'_> {
    HeaderBlock::parse(bytes).expect("headers the model built")
}

/// The appends that write `recs`.
fn appends_of(recs: &[Rec]) -> Vec<Append<'_>> {
    recs.iter()
        .map(|r| Append {
            headers: r.headers.as_deref().map(checked),
            key: r.key.as_deref(),
            value: &r.value,
            timestamp_us: Some(r.ts),
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    key: Option<Vec<u8>>,
    /// Encoded header entries, if any.
    headers: Option<Vec<u8>>,
    value: Vec<u8>,
    ts: u64,
    /// Records of one batch share an id: recovery keeps all of them or none.
    batch: u64,
}

#[derive(Debug, Default, Clone)]
struct TopicModel {
    /// Records from offset 0 (offsets are dense from 0).
    recs: Vec<Rec>,
    /// Records `[0, durable)` were acknowledged durable.
    durable: usize,
    /// Records appended by an operation that failed: they may or may not be there.
    maybe: Vec<Rec>,
    /// Staged jobs whose commit failed, and their records: the next open publishes a job
    /// whose commit stood, after whatever of the topic survived (`stage::wait_published`
    /// tells which).
    maybe_staged: Vec<(String, Vec<Rec>)>,
    /// Durably committed offset per group.
    groups: BTreeMap<String, u64>,
    /// Commits that failed: the group may hold this offset instead.
    maybe_groups: BTreeMap<String, u64>,
    /// A deletion of the topic failed: it may be gone.
    maybe_deleted: bool,
    /// The log start `delete_records` acknowledged: nothing below is read again.
    start: u64,
    /// A `delete_records` that failed may have moved the start this far.
    maybe_start: u64,
    /// Timestamp of the newest record (timestamps never decrease).
    last_ts: u64,
    /// Retention by size may have removed the records below this offset: the highest
    /// [`retention_floor`] over the records this topic has held (a power loss may take
    /// the newer records whose bytes let retention go that far).
    retained_below: u64,
}

impl TopicModel {
    /// Offsets below this may have been reclaimed (every group committed past them).
    fn reclaimable_below(&self) -> u64 {
        // A group whose only commit failed may not exist after a reopen (a cursor file with
        // no commit registers nothing), so it bounds reclaim only when no other group does.
        let maybe = |g: &String| self.maybe_groups.get(g).copied().unwrap_or(0);
        let by_groups = match self.groups.iter().map(|(g, &c)| c.max(maybe(g))).min() {
            Some(min) => min,
            None => self.maybe_groups.values().copied().max().unwrap_or(0),
        };
        by_groups
            .max(self.start)
            .max(self.maybe_start)
            .max(self.retained_below)
    }

    /// Raises [`TopicModel::retained_below`] to what the records appended so far (failed
    /// and staged ones included: they may be in the extents retention measures) allow.
    fn note_retention(&mut self, name: &str) {
        let staged = self.maybe_staged.iter().flat_map(|(_, recs)| recs);
        let all = self.recs.iter().chain(&self.maybe).chain(staged);
        self.retained_below = self.retained_below.max(retention_floor(name, all));
    }
}

/// The highest offset below which retention by size may remove records of `name`, whose
/// records from offset 0 are `recs`: an extent goes only while the records after it hold at
/// least `RETAINED_BYTES` of frames, so the records from any offset it removed up to the
/// end take at least that much, counted with each frame's largest overhead.
fn retention_floor<'a>(name: &str, recs: impl Iterator<Item = &'a Rec>) -> u64 {
    if name != RETAINED_TOPIC {
        return 0;
    }
    let bytes: Vec<u64> = recs
        .map(|r| {
            let payload = r.value.len() + r.key.as_ref().map_or(0, Vec::len);
            payload as u64 + r.headers.as_ref().map_or(0, |h| h.len() as u64) + FRAME_OVERHEAD_MAX
        })
        .collect();
    let mut from_end = 0;
    for (offset, b) in bytes.iter().enumerate().rev() {
        from_end += b;
        if from_end >= RETAINED_BYTES {
            return offset as u64;
        }
    }
    0
}

struct Harness {
    base: PathBuf,
    generation: u32,
    /// Opens since the first: every other one writes version-1 frames, so the directory
    /// holds both record formats.
    opens: u32,
    dir: PathBuf,
    storage: Arc<CrashStorage>,
    wal: Option<Wal>,
    topics: BTreeMap<String, TopicModel>,
    /// Topic names deleted since their last append (must not come back with records).
    deleted: BTreeSet<String>,
    next_batch: u64,
    value_seq: u64,
    /// A fault to arm for the next operation.
    pending_fault: Option<(usize, i32, u64, bool)>,
    /// A fault to arm for the next open: `(point, errno, skip)`.
    open_fault: Option<(&'static str, i32, u64)>,
    /// A fault was armed since the last open: errors are expected until the next reopen.
    faulted: bool,
    /// The last open followed a clean close.
    clean_open: bool,
    /// The Wal's durability: `Never`, or `Interval` with a periodic flush this often (ms),
    /// racing every operation and power loss.
    interval_ms: Option<u64>,
    log: Vec<String>,
}

/// The model's geometry; `interval_ms`: `Interval` durability with a periodic flush this
/// often, else `Never` (only `flush`, `Always` and a close make records durable).
fn config(interval_ms: Option<u64>) -> Config {
    let c = common::small().topic_retention(
        RETAINED_TOPIC,
        Retention::default().max_bytes(RETAINED_BYTES),
    );
    match interval_ms {
        None => c,
        Some(ms) => {
            let mut c = c.durability(Durability::Interval);
            c.sync_interval_ms = ms;
            c
        }
    }
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

macro_rules! check {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(fail(format!($($arg)*)));
        }
    };
}

impl Harness {
    fn new(base: &Path, interval_ms: Option<u64>) -> Harness {
        let dir = base.join("gen0");
        let storage = Arc::new(CrashStorage::new(&dir));
        let wal = Wal::open_with_storage(
            &dir,
            config(interval_ms),
            storage.clone() as Arc<dyn Storage>,
        )
        .unwrap();
        Harness {
            base: base.to_owned(),
            generation: 0,
            opens: 0,
            dir,
            storage,
            wal: Some(wal),
            topics: BTreeMap::new(),
            deleted: BTreeSet::new(),
            next_batch: 0,
            value_seq: 0,
            pending_fault: None,
            open_fault: None,
            faulted: false,
            clean_open: true,
            interval_ms,
            log: Vec::new(),
        }
    }

    fn wal(&self) -> &Wal {
        self.wal.as_ref().unwrap()
    }

    fn value(&mut self, topic: usize, len: usize) -> Vec<u8> {
        self.value_seq += 1;
        let seed = format!("{}:{}|", TOPICS[topic], self.value_seq);
        seed.bytes().cycle().take(len).collect()
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.log.push(format!("{op:?}"));
        let fault = match op {
            Op::Fault {
                point,
                errno,
                skip,
                short,
            } => {
                self.pending_fault = Some((*point, *errno, *skip, *short));
                return Ok(());
            }
            // Faults are for the first handle's operations: the other one's stay for the
            // next of those.
            Op::FaultedOpen {
                point,
                errno,
                skip,
                crash,
            } => {
                self.open_fault = Some((OPEN_FAULT_POINTS[*point], *errno, *skip));
                return if *crash {
                    self.crash(None)
                } else {
                    self.reopen(None, false)
                };
            }
            Op::Reopen | Op::Crash { .. } | Op::Other { .. } | Op::OtherDelete { .. } => None,
            _ => self.pending_fault.take(),
        };
        if let Some((point, errno, skip, short)) = fault {
            let point = FAULT_POINTS[point];
            let f = if short && point == points::WRITE {
                Fault::ShortWrite(7)
            } else {
                Fault::After { skip, errno }
            };
            self.storage.faults.arm(point, f);
        }
        let hits_before = self.fault_hits();
        let result = self.apply(op);
        for (name, t) in &mut self.topics {
            t.note_retention(name);
        }
        self.storage.faults.disarm_all();
        if self.fault_hits() > hits_before {
            self.log.push("  (fault fired)".to_owned());
            self.faulted = true;
        }
        match result {
            Ok(()) => Ok(()),
            Err(Outcome::Fail(e)) => Err(e),
            Err(Outcome::Engine(e)) => {
                check!(self.faulted, "{op:?} failed with no fault injected: {e}");
                // An error must never corrupt: reopen (a crash when the close fails too) and
                // check the invariant.
                self.log.push(format!("  -> failed: {e}; reopening"));
                self.reopen(None, true)
            }
        }
    }

    /// How many armed faults fired on the storage so far.
    fn fault_hits(&self) -> u64 {
        FAULT_POINTS
            .iter()
            .chain(&OPEN_FAULT_POINTS)
            .map(|p| self.storage.faults.hits(p))
            .sum()
    }

    fn apply(&mut self, op: &Op) -> Result<(), Outcome> {
        match *op {
            Op::Append {
                topic,
                len,
                key,
                always,
                ts_step,
            } => {
                let name = TOPICS[topic];
                let value = self.value(topic, len);
                let key = key.then(|| format!("k{}", self.value_seq).into_bytes());
                let ts = self.next_ts(name, ts_step);
                let batch = self.next_batch;
                self.next_batch += 1;
                let rec = Rec {
                    key: key.clone(),
                    headers: headers_for(self.value_seq),
                    value: value.clone(),
                    ts,
                    batch,
                };
                let append = Append {
                    headers: rec.headers.as_deref().map(checked),
                    key: key.as_deref(),
                    value: &value,
                    timestamp_us: Some(ts),
                };
                let result = if always {
                    self.wal()
                        .writer(name)
                        .and_then(|w| w.with_durability(Durability::Always).append_record(append))
                } else {
                    self.wal().append_record(name, append)
                };
                self.after_append(name, vec![rec], always, result.map(|o| o..o + 1))
            }
            Op::Batch {
                topic,
                n,
                len,
                always,
            } => {
                let name = TOPICS[topic];
                let (_, recs) = self.batch_recs(topic, n, len, b'k', 0);
                let appends = appends_of(&recs);
                let result = if always {
                    self.wal().writer(name).and_then(|w| {
                        w.with_durability(Durability::Always)
                            .append_batch_records(&appends)
                    })
                } else {
                    self.wal().append_batch_records(name, &appends)
                };
                drop(appends);
                self.after_append(name, recs, always, result)
            }
            Op::Read { topic, pick } => {
                let name = TOPICS[topic];
                let len = self.len(name);
                let offset = (pick % (len + 1)) as u64;
                self.check_read(name, offset)
            }
            Op::GroupRead { topic, group, n } => {
                let name = TOPICS[topic];
                let Some(t) = self.topics.get(name) else {
                    return Ok(());
                };
                if t.recs.is_empty() {
                    return Ok(());
                }
                let committed = t.groups.get(GROUPS[group]).copied();
                let durable = t.durable as u64;
                // Retention may have moved the topic's start past the commit too.
                let (start_lo, start_hi) = (t.start, t.maybe_start.max(t.retained_below));
                let mut reader = self
                    .wal()
                    .reader(name, GROUPS[group])
                    .map_err(Outcome::Engine)?;
                let start = reader.position();
                if let Some(c) = committed {
                    ours(reader.committed() == Some(c), || {
                        format!(
                            "{name}/{}: committed {:?}, model {c}",
                            GROUPS[group],
                            reader.committed()
                        )
                    })?;
                    // A group committed below the log start resumes there.
                    ours((c.max(start_lo)..=c.max(start_hi)).contains(&start), || {
                        format!(
                            "{name}: reader starts at {start}, committed {c}, log start \
                             {start_lo} (maybe {start_hi})"
                        )
                    })?;
                }
                for _ in 0..n {
                    let pos = reader.position();
                    match reader.next_record().map_err(Outcome::Engine)? {
                        Some(r) => self.compare(name, pos, &r)?,
                        None => {
                            ours(pos as usize == self.len(name), || {
                                format!("{name}: reader ended at {pos} of {}", self.len(name))
                            })?;
                            break;
                        }
                    }
                }
                // Commit no further than the durable records: a commit past records a crash
                // may lose is outside what the model checks.
                let at = reader.position().min(durable.max(start));
                let t = self.topics.get_mut(name).unwrap();
                if let Err(e) = reader.commit_offset(at) {
                    t.maybe_groups.insert(GROUPS[group].to_owned(), at);
                    return Err(Outcome::Engine(e));
                }
                t.groups.insert(GROUPS[group].to_owned(), at);
                Ok(())
            }
            Op::Seek { topic, pick } => {
                let name = TOPICS[topic];
                let len = self.len(name);
                if len == 0 {
                    return Ok(());
                }
                let first = self.first(name)?;
                let offset = first + (pick as u64 % (len as u64 - first + 1));
                let mut reader = match self.wal().reader_with(
                    name,
                    ReaderOptions::default().start(StartPosition::Earliest),
                ) {
                    Ok(r) => r,
                    Err(e) => return Err(Outcome::Engine(e)),
                };
                match reader.seek(offset) {
                    Ok(()) => {}
                    Err(Error::OffsetOutOfRange { .. }) if self.reclaimable(name, offset) => {
                        return Ok(());
                    }
                    Err(e) => return Err(Outcome::Engine(e)),
                }
                match reader.next_record().map_err(Outcome::Engine)? {
                    Some(r) => self.compare(name, offset, &r),
                    None => ours(offset as usize == len, || {
                        format!("{name}: nothing at {offset} of {len}")
                    }),
                }
            }
            Op::SeekTime { topic, pick } => {
                let name = TOPICS[topic];
                let len = self.len(name);
                if len == 0 {
                    return Ok(());
                }
                let first = self.first(name)?;
                let t = &self.topics[name];
                let lo = t.recs[first as usize..].first().map_or(0, |r| r.ts);
                let target = lo.saturating_sub(1) + (pick as u64 % (t.last_ts - lo + 3));
                let expected = (first as usize..len)
                    .find(|&i| t.recs[i].ts >= target)
                    .unwrap_or(len) as u64;
                let mut reader = self
                    .wal()
                    .reader_with(
                        name,
                        ReaderOptions::default().start(StartPosition::Earliest),
                    )
                    .map_err(Outcome::Engine)?;
                let got = reader.seek_time(target).map_err(Outcome::Engine)?;
                if got != expected && self.reclaimable(name, expected) {
                    return Ok(());
                }
                ours(got == expected, || {
                    format!("{name}: seek_time({target}) gave {got}, model {expected}")
                })
            }
            Op::DeleteTopic { topic } => self.delete_topic(topic, None),
            Op::DeleteRecords { topic, pick } => {
                let name = TOPICS[topic];
                let len = self.len(name);
                if len == 0 {
                    return Ok(());
                }
                let before = (pick % (len + 1)) as u64;
                let result = self.wal().delete_records(name, before);
                let t = self.topics.get_mut(name).unwrap();
                match result {
                    Ok(first) => {
                        t.start = t.start.max(before);
                        t.maybe_start = t.maybe_start.max(t.start);
                        // Made durable before the start was recorded.
                        t.durable = t.durable.max(before as usize);
                        ours(first >= t.start && first <= t.reclaimable_below(), || {
                            format!("{name}: delete_records({before}) gave first {first}")
                        })?;
                        self.check_read(name, before.saturating_sub(1))?;
                        self.check_read(name, before)
                    }
                    Err(e) => {
                        t.maybe_start = t.maybe_start.max(before);
                        Err(Outcome::Engine(e))
                    }
                }
            }
            Op::OtherDelete { topic } => {
                let other = self.open_other()?;
                let result = self.delete_topic(topic, Some(&other));
                let closed = other.close();
                result?;
                closed.map_err(|e| {
                    Outcome::Fail(fail(format!("the second handle failed to close: {e}")))
                })
            }
            Op::Follow { topic } => self.check_follower(TOPICS[topic]),
            Op::Flush => {
                self.wal().flush().map_err(Outcome::Engine)?;
                for t in self.topics.values_mut() {
                    t.durable = t.recs.len();
                }
                Ok(())
            }
            Op::AppendAsync {
                topic,
                n,
                len,
                always,
                wait,
            } => self.append_async(topic, n, len, always, wait),
            Op::Other { topic, n, len } => self.other_process(topic, n, len),
            Op::Stage {
                topic,
                n,
                len,
                commit,
            } => self.stage(topic, n, len, commit),
            Op::Reopen => self.reopen(None, false).map_err(Outcome::Fail),
            Op::Crash { torn } => self.crash(torn).map_err(Outcome::Fail),
            Op::Fault { .. } | Op::FaultedOpen { .. } => Ok(()),
        }
    }

    fn next_ts(&mut self, name: &str, step: u64) -> u64 {
        let t = self.topics.entry(name.to_owned()).or_default();
        t.last_ts = t.last_ts.max(1_000_000) + step;
        t.last_ts
    }

    fn after_append(
        &mut self,
        name: &str,
        recs: Vec<Rec>,
        always: bool,
        result: tidelog::Result<std::ops::Range<u64>>,
    ) -> Result<(), Outcome> {
        let t = self.topics.entry(name.to_owned()).or_default();
        match result {
            Ok(range) => {
                self.deleted.remove(name);
                let expect = t.recs.len() as u64..(t.recs.len() + recs.len()) as u64;
                ours(range == expect, || {
                    format!("{name}: append got offsets {range:?}, model {expect:?}")
                })?;
                t.recs.extend(recs);
                if always {
                    t.durable = t.recs.len();
                }
                Ok(())
            }
            Err(e @ (Error::LimitExceeded { .. } | Error::InvalidArgument { .. })) => {
                Err(Outcome::Fail(fail(format!("{name}: append refused: {e}"))))
            }
            Err(e) => {
                t.maybe.extend(recs);
                Err(Outcome::Engine(e))
            }
        }
    }

    /// `n` records of one new batch for `topic` (values from `len` bytes up); every other
    /// one, from the `keyed`th, has a key starting with `key_tag`.
    fn batch_recs(
        &mut self,
        topic: usize,
        n: usize,
        len: usize,
        key_tag: u8,
        keyed: usize,
    ) -> (u64, Vec<Rec>) {
        let name = TOPICS[topic];
        let batch = self.next_batch;
        self.next_batch += 1;
        let mut recs = Vec::new();
        for i in 0..n {
            let value = self.value(topic, len + i);
            let ts = self.next_ts(name, 1);
            recs.push(Rec {
                key: (i % 2 == keyed).then(|| vec![key_tag, i as u8]),
                headers: headers_for(self.value_seq),
                value,
                ts,
                batch,
            });
        }
        (batch, recs)
    }

    /// [`Op::Stage`]: stages `n` records in a job of their own and, with `commit`,
    /// publishes it.
    fn stage(&mut self, topic: usize, n: usize, len: usize, commit: bool) -> Result<(), Outcome> {
        let name = TOPICS[topic];
        let (batch, recs) = self.batch_recs(topic, n, len, b's', 1);
        let job = format!("job{batch}");
        let appends = appends_of(&recs);
        let storage = self.storage.clone() as Arc<dyn Storage>;
        let staged = tidelog::StagedWriter::create_with_storage(&self.dir, &job, "p0", storage)
            .and_then(|mut w| {
                w.append(name, &appends)?;
                w.finish()
            });
        drop(appends);
        if let Err(e) = staged {
            // Not committed: nothing of it may ever be published.
            return Err(Outcome::Engine(e));
        }
        if !commit {
            return Ok(());
        }
        let result = match self.wal().commit_staged(&job, &["p0"]) {
            Ok(ranges) => match ranges.as_slice() {
                [(topic, range)] if topic == name => Ok(range.clone()),
                other => {
                    return Err(Outcome::Fail(fail(format!(
                        "job {job} published as {other:?}, not one range of {name}"
                    ))));
                }
            },
            Err(e) => {
                let t = self.topics.entry(name.to_owned()).or_default();
                t.maybe_staged.push((job, recs));
                return Err(Outcome::Engine(e));
            }
        };
        self.after_append(name, recs, true, result)
    }

    /// Deletes `topic` through the first handle, or through `other` (a second one).
    fn delete_topic(&mut self, topic: usize, other: Option<&Wal>) -> Result<(), Outcome> {
        let name = TOPICS[topic];
        match other.unwrap_or_else(|| self.wal()).delete_topic(name) {
            Ok(()) => {}
            Err(Error::UnknownTopic { .. }) => {
                // A topic whose records were all lost is unknown; its cursors stay.
                ours(self.len(name) == 0, || {
                    format!("{name}: unknown to the engine, model has it")
                })?;
                return Ok(());
            }
            Err(e) => {
                // Whether the deletion happened is unknown: the reopen decides.
                self.topics
                    .entry(name.to_owned())
                    .or_default()
                    .maybe_deleted = true;
                return Err(Outcome::Engine(e));
            }
        }
        self.topics.remove(name);
        self.deleted.insert(name.to_owned());
        Ok(())
    }

    /// A second writable handle on the directory, as another process opens it.
    fn open_other(&self) -> Result<Wal, Outcome> {
        Wal::open_with_storage(
            &self.dir,
            self.config(),
            self.storage.clone() as Arc<dyn Storage>,
        )
        .map_err(|e| Outcome::Fail(fail(format!("a second handle failed to open: {e}"))))
    }

    /// `Op::Other`: a second handle appends `n` records to `topic` between the first one's
    /// operations; its appends are the model's like any other (dense after everything
    /// before), durable when they return, and the first handle reads them afterwards.
    fn other_process(&mut self, topic: usize, n: usize, len: usize) -> Result<(), Outcome> {
        let name = TOPICS[topic];
        let other = self.open_other()?;
        for i in 0..n {
            let rec = self.single(topic, len + i);
            let append = Append {
                headers: None,
                key: None,
                value: &rec.value,
                timestamp_us: Some(rec.ts),
            };
            let result = other
                .writer(name)
                .and_then(|w| w.with_durability(Durability::Always).append_record(append))
                .map(|o| o..o + 1);
            self.after_append(name, vec![rec], true, result)?;
        }
        other
            .close()
            .map_err(|e| Outcome::Fail(fail(format!("the second handle failed to close: {e}"))))
    }

    /// The model's next record of `topic` appended on its own: no key, `len` bytes, the
    /// next timestamp, a batch of its own.
    fn single(&mut self, topic: usize, len: usize) -> Rec {
        let value = self.value(topic, len);
        let ts = self.next_ts(TOPICS[topic], 1);
        let batch = self.next_batch;
        self.next_batch += 1;
        Rec {
            key: None,
            headers: None,
            value,
            ts,
            batch,
        }
    }

    /// `Op::AppendAsync`.
    fn append_async(
        &mut self,
        topic: usize,
        n: usize,
        len: usize,
        always: bool,
        wait: bool,
    ) -> Result<(), Outcome> {
        let name = TOPICS[topic];
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let rec = self.single(topic, len + i);
            let append = [Append {
                headers: None,
                key: None,
                value: &rec.value,
                timestamp_us: Some(rec.ts),
            }];
            let result = self.wal().writer(name).and_then(|w| {
                let w = if always {
                    w.with_durability(Durability::Always)
                } else {
                    w
                };
                w.append_batch_async(&append)
            });
            match result {
                Ok(h) => {
                    self.after_append(name, vec![rec], false, Ok(h.offsets()))?;
                    handles.push(h);
                }
                Err(e) => return self.after_append(name, vec![rec], false, Err(e)),
            }
        }
        if !wait {
            return Ok(());
        }
        if !always {
            // Handles not `Always` complete at the next flush.
            self.wal().flush().map_err(Outcome::Engine)?;
        }
        for h in &handles {
            let done = h
                .wait_timeout(Duration::from_secs(30))
                .map_err(Outcome::Engine)?;
            ours(done && h.is_durable(), || {
                format!("{name}: the handle of {:?} did not complete", h.offsets())
            })?;
        }
        let t = self.topics.entry(name.to_owned()).or_default();
        let end = handles.last().map_or(0, |h| h.offsets().end) as usize;
        t.durable = t.durable.max(end);
        Ok(())
    }

    fn len(&self, name: &str) -> usize {
        self.topics.get(name).map_or(0, |t| t.recs.len())
    }

    fn reclaimable(&self, name: &str, offset: u64) -> bool {
        self.topics
            .get(name)
            .is_some_and(|t| offset < t.reclaimable_below())
    }

    /// The engine's first offset of `name`, checked against the model.
    fn first(&self, name: &str) -> Result<u64, Outcome> {
        let info = self.wal().topic_info(name).map_err(Outcome::Engine)?;
        let t = &self.topics[name];
        ours(info.first_offset >= t.start, || {
            format!(
                "{name}: first offset {} below the log start {}",
                info.first_offset, t.start
            )
        })?;
        ours(info.first_offset <= t.reclaimable_below(), || {
            format!(
                "{name}: first offset {} but groups {:?}",
                info.first_offset, t.groups
            )
        })?;
        ours(info.next_offset as usize == t.recs.len(), || {
            format!(
                "{name}: next offset {} but model has {}",
                info.next_offset,
                t.recs.len()
            )
        })?;
        Ok(info.first_offset)
    }

    fn compare(&self, name: &str, offset: u64, r: &tidelog::Record) -> Result<(), Outcome> {
        let t = &self.topics[name];
        let Some(m) = t.recs.get(offset as usize) else {
            return Err(Outcome::Fail(fail(format!(
                "{name}: engine returned offset {offset}, model has {}",
                t.recs.len()
            ))));
        };
        ours(r.offset() == offset, || {
            format!("{name}: asked {offset}, got {}", r.offset())
        })?;
        ours(
            r.value() == m.value.as_slice()
                && r.key() == m.key.as_deref()
                && r.header_block().map(HeaderBlock::as_bytes) == m.headers.as_deref()
                && r.timestamp_us() == m.ts,
            || {
                format!(
                    "{name}@{offset}: engine ({:?}, {} bytes, ts {}) differs from model ({:?}, {} bytes, ts {})",
                    r.key(),
                    r.value().len(),
                    r.timestamp_us(),
                    m.key,
                    m.value.len(),
                    m.ts
                )
            },
        )
    }

    fn check_read(&self, name: &str, offset: u64) -> Result<(), Outcome> {
        let len = self.len(name) as u64;
        match self.wal().read(name, offset) {
            Ok(r) => {
                ours(offset < len, || {
                    format!("{name}: read {offset} past the end {len}")
                })?;
                self.compare(name, offset, &r)
            }
            Err(Error::UnknownTopic { .. }) => ours(len == 0, || {
                format!("{name}: unknown topic, model has {len} records")
            }),
            Err(Error::OffsetOutOfRange { .. }) => {
                ours(offset >= len || self.reclaimable(name, offset), || {
                    format!("{name}: {offset} out of range, model has {len}")
                })
            }
            Err(e) => Err(Outcome::Engine(e)),
        }
        .and_then(|()| {
            // Below an acknowledged log start nothing is read, whatever else holds.
            let start = self.topics.get(name).map_or(0, |t| t.start);
            ours(offset >= start || !self.read_ok(name, offset), || {
                format!("{name}: read {offset} below the log start {start}")
            })
        })
    }

    /// Whether `Wal::read` returns a record at `offset` of `name` now.
    fn read_ok(&self, name: &str, offset: u64) -> bool {
        self.wal().read(name, offset).is_ok()
    }

    /// A read-only handle on the live directory reads `name`: exactly the model's records
    /// from the first offset still stored (unless a failed operation may have left more),
    /// and durable readers at least the acknowledged-durable ones.
    fn check_follower(&self, name: &str) -> Result<(), Outcome> {
        let Some(t) = self.topics.get(name) else {
            return Ok(());
        };
        if t.recs.is_empty() || !t.maybe.is_empty() || self.faulted {
            return Ok(());
        }
        let ro = Wal::open_read_only_with(&self.dir, config(self.interval_ms))
            .map_err(Outcome::Engine)?;
        let info = ro.topic_info(name).map_err(Outcome::Engine)?;
        ours(info.next_offset == t.recs.len() as u64, || {
            format!(
                "{name}: follower sees {} records, model {}",
                info.next_offset,
                t.recs.len()
            )
        })?;
        ours(
            (t.durable as u64..=info.next_offset).contains(&info.durable_offset),
            || {
                format!(
                    "{name}: follower's durable offset {} outside {}..={}",
                    info.durable_offset, t.durable, info.next_offset
                )
            },
        )?;
        let mut reader = ro
            .reader_with(
                name,
                ReaderOptions::default().start(StartPosition::Earliest),
            )
            .map_err(Outcome::Engine)?;
        let mut offset = reader.position();
        while let Some(r) = reader.next_record().map_err(Outcome::Engine)? {
            self.compare(name, offset, &r)?;
            offset += 1;
        }
        ours(offset == t.recs.len() as u64, || {
            format!(
                "{name}: follower read up to {offset}, model has {}",
                t.recs.len()
            )
        })?;
        let mut durable = ro
            .reader_with(
                name,
                ReaderOptions::default()
                    .start(StartPosition::Earliest)
                    .visibility(tidelog::Visibility::Durable),
            )
            .map_err(Outcome::Engine)?;
        let mut read = durable.position();
        while durable.next().map_err(Outcome::Engine)?.is_some() {
            read += 1;
        }
        // A periodic flush (`Interval`) may move the durable offset meanwhile, never back.
        let after = ro.topic_info(name).map_err(Outcome::Engine)?.durable_offset;
        ours((info.durable_offset..=after).contains(&read), || {
            format!(
                "{name}: durable reader read to {read}, durable offset {} before, {after} after",
                info.durable_offset
            )
        })
    }

    /// The configuration of the next open: [`config`], in the record format of its turn.
    fn config(&self) -> Config {
        let format = if self.opens % 2 == 1 {
            RecordFormat::V1
        } else {
            RecordFormat::V2
        };
        config(self.interval_ms).record_format(format)
    }

    /// Power loss: the durable image goes to a new directory, a fresh `Wal` opens there.
    fn crash(&mut self, torn: Option<u64>) -> Result<(), TestCaseError> {
        self.power_loss(torn);
        self.open_and_check()
    }

    /// The durable image of the directory goes to a new one, which the next open opens.
    fn power_loss(&mut self, torn: Option<u64>) {
        self.generation += 1;
        let dst = self.base.join(format!("gen{}", self.generation));
        self.storage.crash_image(&dst, torn);
        // The old handle flushes when dropped: only its own (abandoned) directory sees that.
        drop(self.wal.take());
        self.dir = dst;
        self.storage = Arc::new(CrashStorage::new(&self.dir));
        self.clean_open = false;
    }

    /// Clean close and open; `after_error`: a close that fails becomes a crash.
    fn reopen(&mut self, torn: Option<u64>, after_error: bool) -> Result<(), TestCaseError> {
        let closed = self.wal().close();
        match closed {
            Ok(()) => {
                for t in self.topics.values_mut() {
                    t.durable = t.recs.len();
                }
            }
            Err(e) => {
                check!(
                    after_error || self.faulted,
                    "close failed with no fault injected: {e}"
                );
                self.log.push(format!("  -> close failed: {e}; crashing"));
                return self.crash(torn);
            }
        }
        drop(self.wal.take());
        self.storage = Arc::new(CrashStorage::new(&self.dir));
        self.clean_open = !after_error && !self.faulted;
        self.open_and_check()
    }

    fn open_and_check(&mut self) -> Result<(), TestCaseError> {
        self.faulted = false;
        self.pending_fault = None;
        if let Some((point, errno, skip)) = self.open_fault.take() {
            // The open itself meets the fault: one that fails must leave the directory as
            // recoverable as before, now (a second open) or after a power loss (odd skips).
            self.opens += 1;
            self.storage.faults.arm(point, Fault::After { skip, errno });
            let hits_before = self.fault_hits();
            let opened = Wal::open_with_storage(
                &self.dir,
                self.config(),
                self.storage.clone() as Arc<dyn Storage>,
            );
            self.storage.faults.disarm_all();
            let fired = self.fault_hits() > hits_before;
            match opened {
                Ok(wal) => {
                    // A fault it met and got past may still fail a later operation.
                    self.faulted = fired;
                    self.wal = Some(wal);
                    return self.check_recovered();
                }
                Err(e) => {
                    check!(fired, "open failed with no fault injected: {e}");
                    self.log
                        .push(format!("  -> open failed: {e}; opening again"));
                    // What the failed open began is as a crash leaves it.
                    self.clean_open = false;
                    if skip % 2 == 1 {
                        self.log
                            .push("  power loss before the next open".to_owned());
                        self.power_loss(None);
                    }
                }
            }
        }
        self.opens += 1;
        let wal = Wal::open_with_storage(
            &self.dir,
            self.config(),
            self.storage.clone() as Arc<dyn Storage>,
        )
        .map_err(|e| fail(format!("reopen failed: {e}")))?;
        self.wal = Some(wal);
        self.check_recovered()
    }

    /// The invariant after an open: each topic holds a prefix of its appended records (maybe
    /// records included) with every acknowledged one, ending on a batch boundary; reads
    /// return them; deleted topics stay gone; cursors hold their durable commits.
    fn check_recovered(&mut self) -> Result<(), TestCaseError> {
        let report = self.wal().recovery_report();
        self.log.push(format!("  recovered: {report:?}"));
        check!(
            report.ring_records_replayed == 0 && report.ring_records_held == 0,
            "ring counters without a ring: {report:?}"
        );
        check!(
            report.sealed_extents <= report.extents + report.deleted_remnants
                && (report.extents == 0 || report.files > 0)
                && report.torn_tails <= report.scanned_extents,
            "report counts do not add up: {report:?}"
        );
        if self.clean_open {
            check!(
                report.torn_tails == 0
                    && report.torn_records == 0
                    && report.records_past_tear == 0
                    && report.damaged_progress_slots == 0
                    && report.dropped_extents == 0,
                "a clean close left damage: {report:?}"
            );
        }
        let engine_topics: BTreeSet<String> = self.wal().topics().into_iter().collect();
        let with_records = engine_topics
            .iter()
            .filter(|n| {
                self.wal()
                    .topic_info(n)
                    .is_ok_and(|i| i.next_offset > i.first_offset)
            })
            .count() as u64;
        // A job whose commit failed is published by the open, after the scan it reports.
        let published_at_open = self.topics.values().any(|t| !t.maybe_staged.is_empty());
        check!(
            published_at_open || report.extents >= with_records,
            "{with_records} topics with records from {} extents: {report:?}",
            report.extents
        );
        for name in &engine_topics {
            let known = self.topics.get(name).is_some_and(|t| {
                !t.recs.is_empty() || !t.maybe.is_empty() || !t.maybe_staged.is_empty()
            });
            if !known {
                let info = self
                    .wal()
                    .topic_info(name)
                    .map_err(|e| fail(e.to_string()))?;
                check!(
                    info.next_offset == 0,
                    "topic {name} recovered with {} records, model has none (deleted: {})",
                    info.next_offset,
                    self.deleted.contains(name)
                );
            }
        }
        let names: Vec<String> = self.topics.keys().cloned().collect();
        for name in names {
            let (first, next) = if engine_topics.contains(&name) {
                let info = self
                    .wal()
                    .topic_info(&name)
                    .map_err(|e| fail(e.to_string()))?;
                (info.first_offset, info.next_offset)
            } else {
                (0, 0)
            };
            let t = self.topics.get_mut(&name).unwrap();
            if t.maybe_deleted && next == 0 {
                // The failed deletion happened.
                self.topics.remove(&name);
                continue;
            }
            // A deletion cut short may have removed cursors before any record.
            let partly_deleted = std::mem::take(&mut t.maybe_deleted);
            let base: Vec<Rec> = t.recs.iter().chain(t.maybe.iter()).cloned().collect();
            let n = next as usize;
            // Jobs whose commit stood were published last: after what survived.
            let mut staged = Vec::new();
            for (job, recs) in std::mem::take(&mut t.maybe_staged) {
                if tidelog::stage::wait_published(&self.dir, &job, Duration::ZERO).is_ok() {
                    staged.extend(recs);
                }
            }
            let all: Vec<Rec> = if staged.is_empty() {
                base
            } else {
                let p = n.saturating_sub(staged.len());
                check!(
                    n >= staged.len() && p >= t.durable && p <= base.len(),
                    "{name}: recovered {n} records with {} of a published job, model appended {}, {} acknowledged durable",
                    staged.len(),
                    base.len(),
                    t.durable
                );
                check!(
                    p == 0 || p == base.len() || base[p - 1].batch != base[p].batch,
                    "{name}: a published job follows a cut batch at offset {p}"
                );
                base[..p].iter().cloned().chain(staged).collect()
            };
            check!(
                n >= t.durable && n <= all.len(),
                "{name}: recovered {n} records, model appended {} (+{} maybe), {} acknowledged durable",
                t.recs.len(),
                t.maybe.len(),
                t.durable
            );
            check!(
                n == 0 || n == all.len() || all[n - 1].batch != all[n].batch,
                "{name}: recovery cut batch {} at offset {n}",
                all[n].batch
            );
            check!(
                first <= n as u64 && (first == 0 || first <= t.reclaimable_below()),
                "{name}: first offset {first} but groups {:?}",
                t.groups
            );
            check!(
                first >= t.start.min(n as u64),
                "{name}: first offset {first} after reopen, below the log start {}",
                t.start
            );
            // What the open found decides a failed delete_records.
            t.start = t.start.max(first);
            t.maybe_start = t.start;
            t.recs = all[..n].to_vec();
            t.maybe.clear();
            // What a writable open recovered is on disk: it survives the next crash.
            t.durable = n;
            let t = t.clone();
            for offset in first..next {
                let r = self
                    .wal()
                    .read(&name, offset)
                    .map_err(|e| fail(format!("{name}: read {offset} after reopen: {e}")))?;
                self.compare(&name, offset, &r)
                    .map_err(Outcome::into_fail)?;
            }
            if n > 0 || engine_topics.contains(&name) {
                match self.wal().read(&name, next) {
                    Err(Error::OffsetOutOfRange { .. }) => {}
                    other => {
                        return Err(fail(format!(
                            "{name}: read at the end {next} gave {:?}",
                            other.map(|r| r.offset())
                        )));
                    }
                }
            }
            let groups: BTreeSet<&String> = t.groups.keys().chain(t.maybe_groups.keys()).collect();
            // A topic left with no records is not recovered: its cursors wait for it.
            let groups = if engine_topics.contains(&name) {
                groups
            } else {
                BTreeSet::new()
            };
            for group in groups {
                let c = t.groups.get(group).copied().unwrap_or(0);
                let reader = self
                    .wal()
                    .reader(&name, group)
                    .map_err(|e| fail(format!("{name}/{group}: reader after reopen: {e}")))?;
                let maybe = t.maybe_groups.get(group).copied();
                check!(
                    reader.committed() == t.groups.get(group).copied()
                        || (maybe.is_some() && reader.committed() == maybe)
                        || (partly_deleted && reader.committed().is_none()),
                    "{name}/{group}: committed {:?} after reopen, model {c} (maybe {maybe:?})",
                    reader.committed()
                );
                let t = self.topics.get_mut(&name).unwrap();
                match reader.committed() {
                    Some(now) => t.groups.insert(group.clone(), now),
                    None => t.groups.remove(group),
                };
            }
            if let Some(t) = self.topics.get_mut(&name) {
                t.maybe_groups.clear();
            }
            if n == 0 && t.groups.is_empty() {
                self.topics.remove(&name);
            }
        }
        Ok(())
    }
}

enum Outcome {
    /// The model found a violation.
    Fail(TestCaseError),
    /// The engine returned an error (allowed only after an injected fault).
    Engine(Error),
}

impl Outcome {
    fn into_fail(self) -> TestCaseError {
        match self {
            Outcome::Fail(e) => e,
            Outcome::Engine(e) => fail(format!("engine error: {e}")),
        }
    }
}

fn ours(cond: bool, msg: impl FnOnce() -> String) -> Result<(), Outcome> {
    if cond {
        Ok(())
    } else {
        Err(Outcome::Fail(fail(msg())))
    }
}

fn run_ops(ops: &[Op]) -> Result<(), TestCaseError> {
    run_ops_with(ops, None)
}

/// [`run_ops`] with the Wal's durability `Interval`, flushing every `interval_ms`, when set.
fn run_ops_with(ops: &[Op], interval_ms: Option<u64>) -> Result<(), TestCaseError> {
    let tmp = common::tempdir();
    let mut h = Harness::new(tmp.path(), interval_ms);
    h.log.push(format!(
        "durability: {interval_ms:?} ms interval (None: Never)"
    ));
    let mut result = Ok(());
    for op in ops {
        result = h.run(op);
        if result.is_err() {
            break;
        }
    }
    // A final crash checks what the last operations left durable.
    if result.is_ok() {
        h.log.push("final Crash".to_owned());
        result = h.crash(None);
    }
    if let Err(e) = &result {
        eprintln!("model failure: {e}\noperations:\n  {}", h.log.join("\n  "));
    }
    result
}

/// Cases of the model test (`TIDELOG_MODEL_CASES`, default 96).
pub(crate) fn cases() -> u32 {
    std::env::var("TIDELOG_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

#[test]
fn random_operations_keep_the_model() {
    let mut runner = TestRunner::new(PtConfig {
        cases: cases(),
        failure_persistence: None,
        ..PtConfig::default()
    });
    // A third of the cases with a periodic flush racing every step.
    let interval = prop::option::weighted(0.33, 1u64..20);
    let result = runner.run(
        &(prop::collection::vec(op_strategy(), 1..40), interval),
        |(ops, interval_ms)| run_ops_with(&ops, interval_ms),
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn replay(ops: Vec<Op>) {
    if let Err(e) = run_ops(&ops) {
        panic!("{e}");
    }
}

#[test]
fn regression_commit_of_every_durable_record_then_crash() {
    replay(vec![
        Op::Append {
            topic: 1,
            len: 0,
            key: false,
            always: false,
            ts_step: 0,
        },
        Op::Flush,
        Op::Append {
            topic: 1,
            len: 0,
            key: false,
            always: false,
            ts_step: 0,
        },
        Op::GroupRead {
            topic: 1,
            group: 0,
            n: 2,
        },
    ]);
}

#[test]
fn regression_torn_record_recovered_then_lost() {
    let append = Op::Append {
        topic: 1,
        len: 0,
        key: false,
        always: false,
        ts_step: 0,
    };
    replay(vec![
        append.clone(),
        Op::Crash {
            torn: Some(14226084071161983822),
        },
        append,
        Op::GroupRead {
            topic: 1,
            group: 0,
            n: 1,
        },
    ]);
}

#[test]
fn regression_reclaim_of_the_newest_durable_extent() {
    let append = Op::Append {
        topic: 1,
        len: 0,
        key: false,
        always: false,
        ts_step: 0,
    };
    replay(vec![
        append.clone(),
        Op::Flush,
        Op::Crash { torn: None },
        append,
        Op::GroupRead {
            topic: 1,
            group: 0,
            n: 1,
        },
    ]);
}

#[test]
fn regression_second_handle_appends_after_a_torn_first_record() {
    replay(vec![
        Op::Append {
            topic: 0,
            len: 1609,
            key: false,
            always: false,
            ts_step: 0,
        },
        Op::Crash {
            torn: Some(9073001435712506754),
        },
        Op::Other {
            topic: 0,
            n: 1,
            len: 0,
        },
        Op::Reopen,
    ]);
}

/// Another process deleted the topic (and its cursor files) while this handle had a cursor
/// of one of its groups open: a reader of the name's new topic took that cursor, and its
/// commit went to the removed file (lost at the reopen). A cursor whose file was removed
/// or replaced since is loaded afresh.
#[test]
fn regression_a_commit_after_another_process_deleted_the_topic() {
    replay(vec![
        Op::Batch {
            topic: 2,
            n: 1,
            len: 0,
            always: false,
        },
        Op::GroupRead {
            topic: 2,
            group: 0,
            n: 0,
        },
        Op::OtherDelete { topic: 2 },
        Op::Append {
            topic: 2,
            len: 0,
            key: false,
            always: true,
            ts_step: 0,
        },
        Op::GroupRead {
            topic: 2,
            group: 0,
            n: 0,
        },
        Op::Reopen,
    ]);
}

/// An open whose read of the kernel's boot id failed (ENOSPC here) took it for zeros and
/// went on: its shared state file then named a boot no other process computes, and a second
/// handle could not join ("its tidelog.state is not current"). Such an open now fails.
#[test]
fn regression_an_open_that_cannot_read_the_boot_id_fails() {
    replay(vec![
        Op::FaultedOpen {
            point: 3,
            errno: 28,
            skip: 1,
            crash: true,
        },
        Op::Other {
            topic: 0,
            n: 1,
            len: 1300,
        },
    ]);
}

/// A published job, then another handle deletes its topic, then a power loss: the job's
/// directory was renamed away and its parent synced when the publish returned, so the job
/// is not published again into the name's new topic. (The crash model did not follow the
/// rename of a directory, and recreated the job.)
#[test]
fn regression_a_published_job_stays_published_after_its_topic_goes() {
    replay(vec![
        Op::Stage {
            topic: 0,
            n: 2,
            len: 1996,
            commit: true,
        },
        Op::OtherDelete { topic: 0 },
        Op::Crash { torn: None },
    ]);
}

/// A commit whose directory fsync fails: the commit may stand, so the reopen publishes
/// the job (its records were "maybe" records), after the recovery scan it reports.
#[test]
fn regression_a_commit_that_failed_its_fsync_is_published_by_the_next_open() {
    replay(vec![
        Op::Fault {
            point: 2,
            errno: 5,
            skip: 1,
            short: false,
        },
        Op::Stage {
            topic: 0,
            n: 1,
            len: 0,
            commit: true,
        },
    ]);
}

/// A record never made durable, then a commit that fails mid-publish (its ledger's write):
/// the power loss takes the record, and the next open publishes the job where the topic
/// now ends, at offset 0.
#[test]
fn regression_a_job_published_at_open_takes_the_offsets_of_lost_records() {
    replay(vec![
        Op::Append {
            topic: 0,
            len: 0,
            key: false,
            always: false,
            ts_step: 0,
        },
        Op::Fault {
            point: 1,
            errno: 5,
            skip: 3,
            short: false,
        },
        Op::Stage {
            topic: 0,
            n: 1,
            len: 0,
            commit: true,
        },
    ]);
}

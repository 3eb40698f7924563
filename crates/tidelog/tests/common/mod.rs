//! Helpers shared by every integration test binary: small geometries, temp dirs, deterministic
//! and self-checking payloads, directory copies (crash images), a raw frame walker over data
//! files, re-executing the test binary as a child process (to crash without running
//! destructors, to hold a directory from another process, or to talk to it line by line), and
//! the deletion and ring tests' helpers.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tidelog::format::{self, BlockIdentity, Progress};
use tidelog::io::{Mapping, StdStorage, Storage};
use tidelog::{Config, Durability, ReaderOptions, StartPosition, Wal};

/// Env var naming the data dir a child process works in; absent in normal runs.
pub const CHILD_DIR: &str = "TIDELOG_CHILD_DIR";
/// Env var selecting what the child does.
pub const CHILD_MODE: &str = "TIDELOG_CHILD_MODE";

pub const BLOCK: u64 = 64 * 1024;

/// 8 blocks of 64 KiB per file, no background flush (tests decide when data is durable).
pub fn small() -> Config {
    geometry(8, BLOCK)
}

/// `blocks` blocks of `block` bytes per file, no background flush.
pub fn geometry(blocks: u64, block: u64) -> Config {
    Config::default()
        .file_size_bytes(format::FILE_HEADER_BYTES + blocks * block)
        .block_size_bytes(block)
        .durability(Durability::Never)
}

pub fn tempdir() -> tempfile::TempDir {
    let mut d = tempfile::tempdir().expect("create temp dir");
    if std::env::var_os("TIDELOG_KEEP_TEST_DIRS").is_some() {
        d.disable_cleanup(true);
    }
    d
}

/// Copies `src` (data files, cursors, lock file) into `dst`: a crash image of `src`.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

/// Data files of `dir`, in sequence order.
pub fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tdl"))
        .collect();
    files.sort();
    files
}

/// One extent found by walking a data file's block headers.
#[derive(Debug, Clone)]
pub struct ExtentLoc {
    pub file: PathBuf,
    /// Byte position of the extent in its file.
    pub start: u64,
    pub len: u64,
    pub id: BlockIdentity,
    pub progress: Option<Progress>,
}

/// One frame found by walking an extent's records (magic and length only; no checksum).
#[derive(Debug, Clone)]
pub struct FrameLoc {
    pub file: PathBuf,
    pub topic: String,
    /// Byte position of the frame in its file.
    pub pos: u64,
    /// Header, key and value bytes (padding excluded).
    pub frame_len: u64,
    pub offset: u64,
    pub key_len: u64,
    /// File position of the value's first byte.
    pub value_at: u64,
    pub batch_count: u32,
}

impl FrameLoc {
    /// File position of the value's first byte.
    pub fn value_pos(&self) -> u64 {
        self.value_at
    }
    pub fn end(&self) -> u64 {
        self.pos + self.frame_len
    }
}

/// Every extent with a valid identity slot in `dir`, in file then block order.
pub fn extents(dir: &Path) -> Vec<ExtentLoc> {
    let mut out = Vec::new();
    for path in data_files(dir) {
        let bytes = std::fs::read(&path).unwrap();
        let block = format::get_u64(&bytes, format::FH_BLOCK_SIZE);
        let mut at = format::FILE_HEADER_BYTES;
        while at + block <= bytes.len() as u64 {
            let hdr = &bytes[at as usize..(at + format::BLOCK_HEADER_BYTES) as usize];
            match BlockIdentity::decode(&hdr[format::ID_SLOT_AT..]) {
                Some(id) => {
                    let len = u64::from(id.extent_count) * block;
                    let progress = Progress::decode(&hdr[format::PG_SLOT_AT..]);
                    out.push(ExtentLoc {
                        file: path.clone(),
                        start: at,
                        len,
                        id,
                        progress,
                    });
                    at += len;
                }
                None => at += block,
            }
        }
    }
    out
}

/// The valid commit copies of extent `e` (those of its salt), read from its file.
pub fn commit_copies(e: &ExtentLoc) -> Vec<format::CommitCopy> {
    let bytes = std::fs::read(&e.file).unwrap();
    format::CC_SLOTS_AT
        .iter()
        .filter_map(|&at| format::CommitCopy::decode(&bytes[e.start as usize + at..]))
        .filter(|c| c.salt == e.id.salt)
        .collect()
}

/// Every frame in `dir` (walking each extent from its first record while the magic holds).
pub fn frames(dir: &Path) -> Vec<FrameLoc> {
    let mut out = Vec::new();
    for ext in extents(dir) {
        let bytes = std::fs::read(&ext.file).unwrap();
        if ext.id.version == format::VERSION_BATCHED {
            out.extend(batched_frames(&ext, &bytes));
            continue;
        }
        let mut pos = ext.start + format::BLOCK_HEADER_BYTES;
        while pos + format::FRAME_HEADER_BYTES <= ext.start + ext.len {
            let h = &bytes[pos as usize..pos as usize + format::FRAME_HEADER];
            if u16::from_le_bytes([h[format::FR_MAGIC], h[format::FR_MAGIC + 1]])
                != format::FRAME_MAGIC
            {
                break;
            }
            let frame_len = u64::from(format::get_u32(h, format::FR_LEN));
            let key_len = u64::from(format::get_u32(h, format::FR_KEY_LEN));
            let headers_bytes = if h[format::FR_FLAGS] & format::FLAG_HEADERS != 0 {
                let at = (pos + format::FRAME_HEADER_BYTES + key_len) as usize;
                format::HEADERS_LEN_BYTES as u64 + u64::from(format::get_u32(&bytes, at))
            } else {
                0
            };
            out.push(FrameLoc {
                file: ext.file.clone(),
                topic: ext.id.topic.clone(),
                pos,
                frame_len,
                offset: format::get_u64(h, format::FR_OFFSET),
                key_len,
                value_at: pos + format::FRAME_HEADER_BYTES + key_len + headers_bytes,
                batch_count: format::get_u32(h, format::FR_BATCH_COUNT),
            });
            pos += format::align_up(frame_len, format::FRAME_ALIGN);
        }
    }
    out
}

/// The records of an extent of batch frames (`ext`, in its file's `bytes`), walked with the
/// engine's decoder, checksums unchecked: a record's "frame" is its bytes in its batch frame
/// (the batch header with its first entry, or its entry).
fn batched_frames(ext: &ExtentLoc, bytes: &[u8]) -> Vec<FrameLoc> {
    let extent = &bytes[ext.start as usize..(ext.start + ext.len) as usize];
    let mut out = Vec::new();
    let mut pos = format::BLOCK_HEADER_BYTES as usize;
    let mut offset = ext.id.first_offset;
    while let Ok(v) =
        tidelog::batch::decode(extent, pos, ext.id.salt, ext.id.topic_id, offset, false)
    {
        let at = |p: usize| ext.start + p as u64;
        out.push(FrameLoc {
            file: ext.file.clone(),
            topic: ext.id.topic.clone(),
            pos: at(pos),
            frame_len: (v.value.end - pos) as u64,
            offset,
            key_len: v.key.as_ref().map_or(0, |k| k.len() as u64),
            value_at: at(v.value.start),
            batch_count: v.batch_count,
        });
        pos = v.next_position;
        offset += 1;
    }
    out
}

/// The frame of `topic` at `offset` (the last one found, should an old copy exist).
pub fn frame_of(dir: &Path, topic: &str, offset: u64) -> FrameLoc {
    frames(dir)
        .into_iter()
        .rev()
        .find(|f| f.topic == topic && f.offset == offset)
        .unwrap_or_else(|| panic!("no frame for {topic}@{offset}"))
}

/// Overwrites `[from, to)` of `path` with zeros.
pub fn zero_range(path: &Path, from: u64, to: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[from as usize..to as usize].fill(0);
    std::fs::write(path, bytes).unwrap();
}

/// Overwrites `path` at `pos` with `bytes` (a crash image or a damaged ring).
pub fn patch(path: &Path, pos: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, pos).unwrap();
}

/// Flips every bit of the byte at `pos` of `path`.
pub fn flip_byte(path: &Path, pos: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[pos as usize] ^= 0xFF;
    std::fs::write(path, bytes).unwrap();
}

/// Small deterministic PRNG (xorshift64*), so payloads and choices are reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// `len` pseudo-random bytes, none of them zero (so zeroing any byte changes the value),
/// fully determined by `seed`.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        for b in rng.next_u64().to_le_bytes() {
            if out.len() < len {
                out.push(b | 1);
            }
        }
    }
    out
}

/// `len` bytes of record `i` of stream `salt` (a [`payload`] whose seed mixes both).
pub fn stream_payload(salt: u64, i: u64, len: usize) -> Vec<u8> {
    payload(
        salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i.wrapping_mul(0xBF58_476D_1CE4_E5B9),
        len,
    )
}

/// A value that names its writer (`tag`) and sequence number, padded to a length that varies
/// with `seq`, every byte derived from both, so a partial or mixed-up record is detected.
pub fn tagged_value(tag: u32, seq: u64, max_pad: u64) -> Vec<u8> {
    let pad = (seq.wrapping_mul(2_654_435_761) ^ u64::from(tag)) % (max_pad + 1);
    let mut v = Vec::with_capacity(12 + pad as usize);
    v.extend_from_slice(&tag.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    for j in 0..pad {
        v.push(tagged_filler(tag, seq, j));
    }
    v
}

fn tagged_filler(tag: u32, seq: u64, j: u64) -> u8 {
    (u64::from(tag).wrapping_mul(31) ^ seq.wrapping_mul(7) ^ j.wrapping_mul(13)) as u8
}

/// Decodes and fully checks a value from [`tagged_value`]; `None` when any byte is wrong.
pub fn parse_tagged(value: &[u8]) -> Option<(u32, u64)> {
    let tag = u32::from_le_bytes(value.get(0..4)?.try_into().ok()?);
    let seq = u64::from_le_bytes(value.get(4..12)?.try_into().ok()?);
    let pad = &value[12..];
    let ok = pad
        .iter()
        .enumerate()
        .all(|(j, &b)| b == tagged_filler(tag, seq, j as u64));
    ok.then_some((tag, seq))
}

/// FNV-1a, 64-bit: a dependency-free checksum for comparing what two processes read.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn record(&mut self, topic: &str, offset: u64, value: &[u8]) {
        self.update(topic.as_bytes());
        self.update(&offset.to_le_bytes());
        self.update(&(value.len() as u64).to_le_bytes());
        self.update(value);
    }
}

/// Every record of `topic` from the first stored one, as `(offset, key, value)`.
pub fn read_all(wal: &Wal, topic: &str) -> Vec<(u64, Option<Vec<u8>>, Vec<u8>)> {
    let mut reader = wal
        .reader_with(
            topic,
            ReaderOptions::default().start(StartPosition::Earliest),
        )
        .unwrap();
    let mut out = Vec::new();
    while let Some(r) = reader.next().unwrap() {
        out.push((r.offset, r.key.map(<[u8]>::to_vec), r.value.to_vec()));
    }
    out
}

/// `topic`'s info and every record read from its first stored offset, in offset order
/// (checked dense), as one pass saw them; while retention passes the reader
/// (`OffsetOutOfRange`) it reads again, up to 100 times.
pub fn read_retained(wal: &Wal, topic: &str) -> (tidelog::TopicInfo, Vec<(u64, Vec<u8>)>) {
    for _ in 0..100 {
        let info = wal.topic_info(topic).unwrap();
        let mut reader = earliest(wal, topic, tidelog::Visibility::Published);
        let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
        let whole = loop {
            match reader.next() {
                Ok(Some(r)) => {
                    if let Some((last, _)) = out.last() {
                        assert_eq!(r.offset, last + 1, "{topic}: offsets dense");
                    }
                    out.push((r.offset, r.value.to_vec()));
                }
                Ok(None) => break true,
                Err(tidelog::Error::OffsetOutOfRange { .. }) => break false,
                Err(e) => panic!("reading {topic}: {e:?}"),
            }
        };
        if whole {
            return (info, out);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("retention kept overtaking the reader of {topic}");
}

/// A reader of `topic` from its first stored offset, with `visibility`.
pub fn earliest(wal: &Wal, topic: &str, visibility: tidelog::Visibility) -> tidelog::Reader {
    wal.reader_with(
        topic,
        tidelog::ReaderOptions::default()
            .start(tidelog::StartPosition::Earliest)
            .visibility(visibility),
    )
    .expect("reader")
}

/// Every record of `topic` from the first stored one, as `(offset, value)`.
pub fn read_values(wal: &Wal, topic: &str) -> Vec<(u64, Vec<u8>)> {
    read_all(wal, topic)
        .into_iter()
        .map(|(offset, _, value)| (offset, value))
        .collect()
}

/// `topic` holds exactly `count` records, dense from offset 0, each equal to `value(offset)`.
#[track_caller]
pub fn check_dense(wal: &Wal, topic: &str, count: u64, value: impl Fn(u64) -> Vec<u8>, ctx: &str) {
    let got = read_all(wal, topic);
    assert_eq!(got.len() as u64, count, "{ctx}");
    for (i, (offset, _, v)) in got.iter().enumerate() {
        assert_eq!(*offset, i as u64, "{ctx}: offsets must be dense");
        assert!(*v == value(*offset), "{ctx}: record {offset} differs");
    }
}

// Child processes: every test file that re-executes the test binary has a test named
// `child_process_entry`, a no-op unless the environment names a child's data directory.

/// True in the re-executed child: returns its data dir and mode.
pub fn child_env() -> Option<(PathBuf, String)> {
    let dir = std::env::var_os(CHILD_DIR)?;
    let mode = std::env::var(CHILD_MODE).unwrap_or_default();
    Some((PathBuf::from(dir), mode))
}

/// Name of the test each re-executing module has as its child's side.
pub const CHILD_ENTRY: &str = "child_process_entry";

/// The command that re-runs this test binary as a child that runs only the
/// `child_process_entry` test of `module` (the caller's `module_path!()`), with `dir` and
/// `mode` in its environment and stdin closed.
pub fn child_command(module: &str, dir: &Path, mode: &str) -> Command {
    // libtest names a test by its path without the crate's name (`area::file::test`).
    let entry = match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{CHILD_ENTRY}"),
        None => CHILD_ENTRY.to_owned(),
    };
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", &entry, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .env(CHILD_MODE, mode)
        .stdin(Stdio::null());
    cmd
}

/// Runs the child of `module` to completion and checks that it ran its one test and exited
/// with status 0.
pub fn run_child(module: &str, dir: &Path, mode: &str) -> Output {
    let out = child_command(module, dir, mode).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("running 1 test"),
        "child {mode} of {module} failed: {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Prints one reply line for the parent of a [`ChildSession`]. The test harness may have
/// printed part of a line already, so the reply is framed by a marker the parent searches for.
pub fn reply(text: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n@@reply {text} @@").expect("write to the parent");
    out.flush().expect("flush to the parent");
}

/// The child of `module` (the caller's `module_path!()`, see [`child_command`]) with `mode`,
/// killed or stopped at crash point `crash_at` when given (`TIDELOG_CRASH_AT`), once it
/// replied `open` (within `wait`).
pub fn open_child(
    module: &str,
    dir: &Path,
    mode: &str,
    crash_at: Option<&str>,
    wait: Duration,
) -> ChildSession {
    let mut cmd = child_command(module, dir, mode);
    if let Some(point) = crash_at {
        cmd.env("TIDELOG_CRASH_AT", point);
    }
    let mut session = ChildSession::spawn(&mut cmd);
    assert_eq!(session.recv(wait), "open");
    session
}

/// Waits until process `pid` is stopped (`SIGSTOP`: a `stop:` crash point); fails the test
/// after `wait`, naming `place`.
#[track_caller]
pub fn wait_until_stopped(pid: u32, wait: Duration, place: &str) {
    let stat = format!("/proc/{pid}/stat");
    let deadline = Instant::now() + wait;
    while !std::fs::read_to_string(&stat)
        .unwrap()
        .rsplit(')')
        .next()
        .is_some_and(|rest| rest.trim_start().starts_with('T'))
    {
        assert!(Instant::now() < deadline, "the child never stopped {place}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `done` holds, polling every 10 ms; fails the test after `wait`.
#[track_caller]
pub fn eventually(what: &str, wait: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < wait, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads commands from stdin in a [`ChildSession`]'s child, one per line, until EOF.
pub fn child_commands() -> impl Iterator<Item = String> {
    std::io::stdin().lines().map_while(Result::ok)
}

/// A running child that talks in lines: commands on stdin, replies on stdout.
#[derive(Debug)]
pub struct ChildSession {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<String>,
}

impl ChildSession {
    pub fn spawn(cmd: &mut Command) -> ChildSession {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child test process");
        let stdout = child.stdout.take().expect("child stdout is piped");
        let stdin = child.stdin.take();
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(start) = line.find("@@reply ") {
                    let rest = &line[start + "@@reply ".len()..];
                    let text = rest.strip_suffix(" @@").unwrap_or(rest);
                    if tx.send(text.to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        ChildSession {
            child,
            stdin,
            replies,
        }
    }

    pub fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin is open");
        writeln!(stdin, "{command}").expect("write a command to the child");
        stdin.flush().expect("flush the command to the child");
    }

    /// The next reply, waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> String {
        self.replies
            .recv_timeout(timeout)
            .expect("the child replied in time (see its stderr above)")
    }

    /// The next reply, if one comes within `timeout`.
    pub fn try_recv(&mut self, timeout: Duration) -> Option<String> {
        self.replies.recv_timeout(timeout).ok()
    }

    /// SIGKILLs the child and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// True once the child exited (or was killed).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Closes stdin and waits (bounded) for a successful exit.
    pub fn finish(mut self, timeout: Duration) {
        drop(self.stdin.take());
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait().expect("poll the child") {
                Some(status) => {
                    assert!(status.success(), "child failed: {status}");
                    return;
                }
                None if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("child did not exit in time");
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

impl Drop for ChildSession {
    fn drop(&mut self) {
        // A test that panicked midway must not leave its child running.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// Kill -9 campaigns: a child prints an `@@` line for everything it got acknowledged; the
// parent SIGKILLs it at a random moment and checks the directory against those lines.

/// How long a campaign waits for a child's first `@@` line.
pub const FIRST_LINE_WAIT: Duration = Duration::from_secs(60);

/// The number in environment variable `name`, if set; panics on anything else.
pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}")),
    )
}

/// A campaign's cycle count (`TIDELOG_CRASH_CYCLES`, else `default_cycles`) and seed
/// (`TIDELOG_CRASH_SEED`, else the clock), printed so a failure can be replayed.
pub fn campaign_params(name: &str, default_cycles: u64) -> (u64, u64) {
    let cycles = env_u64("TIDELOG_CRASH_CYCLES").unwrap_or(default_cycles);
    assert!(cycles > 0, "TIDELOG_CRASH_CYCLES must be at least 1");
    let seed = env_u64("TIDELOG_CRASH_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64
    });
    eprintln!("{name}: TIDELOG_CRASH_SEED={seed} TIDELOG_CRASH_CYCLES={cycles}");
    (cycles, seed)
}

/// A running child and the threads that collect its `@@` lines and its stderr.
#[derive(Debug)]
pub struct Running {
    child: Child,
    lines: JoinHandle<Vec<String>>,
    stderr: JoinHandle<String>,
    /// Each `@@` line as it comes (the collected ones are in `lines`).
    seen: Receiver<String>,
}

/// What a child left: its `@@` lines (without the marker), how it ended, its stderr.
#[derive(Debug)]
pub struct Ended {
    pub lines: Vec<String>,
    pub status: ExitStatus,
    pub stderr: String,
}

impl Ended {
    pub fn killed(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal() == Some(libc::SIGKILL)
    }
}

impl Running {
    /// Spawns `cmd` (a [`child_command`]) with its stdout and stderr collected.
    pub fn spawn(cmd: &mut Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let (tx, seen) = mpsc::channel();
        // Reads to EOF: lines still in the pipe at the kill count all the same.
        let lines = std::thread::spawn(move || {
            let mut out = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The first line may share a line with libtest's "test ... child_process_entry ... ".
                if let Some((_, rest)) = line.split_once("@@") {
                    let line = rest.trim().to_owned();
                    let _ = tx.send(line.clone());
                    out.push(line);
                }
            }
            out
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Running {
            child,
            lines,
            stderr,
            seen,
        }
    }

    /// Waits up to `wait` for the child's first `@@` line; false if none came.
    pub fn started(&self, wait: Duration) -> bool {
        self.seen.recv_timeout(wait).is_ok()
    }

    /// Waits up to `wait` for an `@@` line that starts with `prefix` (the lines before it
    /// are passed over here, not lost: [`Running::wait`] returns them all).
    pub fn saw(&self, prefix: &str, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.seen.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    /// Sends SIGKILL and returns at once (several children die as one with a power loss);
    /// [`Running::wait`] collects what it left.
    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child's first `@@` line (up to a minute), then `delay`, then kills it.
    pub fn kill_after_first_line(self, delay: Duration) -> Ended {
        let started = self.started(FIRST_LINE_WAIT);
        if started {
            std::thread::sleep(delay);
        }
        let ended = self.kill();
        assert!(
            started,
            "the child printed nothing within {FIRST_LINE_WAIT:?} ({}):\n{}",
            ended.status, ended.stderr
        );
        ended
    }

    /// Kills the child `delay` after its start (maybe in its open, its recovery).
    pub fn kill_after(self, delay: Duration) -> Ended {
        std::thread::sleep(delay);
        self.kill()
    }

    /// SIGKILL: no destructor, no flush; whatever was mid-write stays as it is.
    pub fn kill(mut self) -> Ended {
        let _ = self.child.kill();
        self.wait()
    }

    pub fn wait(mut self) -> Ended {
        let status = self.child.wait().expect("wait for the child");
        Ended {
            lines: self.lines.join().expect("line reader"),
            status,
            stderr: self.stderr.join().expect("stderr reader"),
        }
    }

    /// Waits up to `limit` for the child to end by itself; kills it past that.
    pub fn wait_up_to(mut self, limit: Duration) -> Ended {
        let deadline = Instant::now() + limit;
        while self.child.try_wait().expect("poll the child").is_none() {
            if Instant::now() >= deadline {
                return self.kill();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.wait()
    }
}

/// When a campaign kills its child.
#[derive(Debug, Clone, Copy)]
pub enum Kill {
    /// This long after the child's first `@@` line.
    AfterFirstLine(Duration),
    /// This long after spawning, lines or not (maybe in the open and its recovery).
    AfterSpawn(Duration),
}

impl Kill {
    pub fn apply(self, child: Running) -> Ended {
        match self {
            Kill::AfterFirstLine(delay) => child.kill_after_first_line(delay),
            Kill::AfterSpawn(delay) => child.kill_after(delay),
        }
    }
}

/// One kill in eight 0..30 ms after the spawn (never in a `fresh` directory's first cycle, so
/// early kills meet data), else `lo..=hi` ms after the child's first line.
pub fn kill_time(rng: &mut Rng, fresh: bool, lo: u64, hi: u64) -> Kill {
    if !fresh && rng.range(0, 7) == 0 {
        Kill::AfterSpawn(Duration::from_millis(rng.range(0, 30)))
    } else {
        Kill::AfterFirstLine(Duration::from_millis(rng.range(lo, hi)))
    }
}

// Deletion tests (cursors, retention, topic deletion, the disk cap).

/// How long the deletion tests wait for the housekeeping thread.
pub const DELETE_DEADLINE: Duration = Duration::from_secs(10);

/// A value that depends on its topic (or stream) and offset, 700 to 1299 bytes.
pub fn topic_value(topic: &str, offset: u64) -> Vec<u8> {
    let seed = topic
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31) + u64::from(b));
    payload(
        seed.wrapping_mul(1_000_003) ^ offset,
        700 + (offset * 37 % 600) as usize,
    )
}

/// The data files on disk.
pub fn on_disk(dir: &Path) -> std::collections::BTreeSet<PathBuf> {
    data_files(dir).into_iter().collect()
}

/// The data files the Wal knows.
pub fn listed(wal: &Wal) -> std::collections::BTreeSet<PathBuf> {
    wal.file_states().into_iter().map(|s| s.path).collect()
}

/// Bytes `paths` occupy on disk (allocated blocks); a file deleted meanwhile counts 0.
pub fn real_bytes<'a>(paths: impl IntoIterator<Item = &'a PathBuf>) -> u64 {
    use std::os::unix::fs::MetadataExt;
    paths
        .into_iter()
        .map(|p| match std::fs::metadata(p) {
            Ok(m) => m.blocks() * 512,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => panic!("stat {p:?}: {e}"),
        })
        .sum()
}

/// Waits until every file of `gone` has left the disk.
pub fn wait_gone(gone: &std::collections::BTreeSet<PathBuf>) {
    let deadline = Instant::now() + DELETE_DEADLINE;
    while gone.iter().any(|p| p.exists()) {
        assert!(
            Instant::now() < deadline,
            "files still on disk after {DELETE_DEADLINE:?}: {:?}",
            gone.iter().filter(|p| p.exists()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the housekeeping thread has made the spare file it wants (the current file is
/// half used), so file counts do not change under a test.
pub fn settle_spare(wal: &Wal, blocks_per_file: u32) {
    let deadline = Instant::now() + DELETE_DEADLINE;
    loop {
        let states = wal.file_states();
        let open: Vec<_> = states.iter().filter(|s| !s.fully_allocated).collect();
        if !(open.len() == 1 && open[0].total_blocks * 2 >= blocks_per_file) {
            return;
        }
        assert!(Instant::now() < deadline, "no spare file appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Capacity of the small rings the ring tests use.
pub const RING_CAP: u64 = 4 << 20;

/// A small ring: 4 MiB, 64 KiB blocks and records, a short block timer.
pub fn ring_config() -> tidelog::RingConfig {
    tidelog::RingConfig::default()
        .capacity_bytes(RING_CAP)
        .block_bytes(64 << 10)
        .max_record_bytes(64 << 10)
        .block_delay_us(100)
}

/// Every live record of `ring`, as `recover()` returns them.
pub fn ring_records(ring: &tidelog::RingWal) -> Vec<(u64, Vec<u8>)> {
    ring.recover()
        .expect("recover")
        .collect::<tidelog::Result<Vec<_>>>()
        .expect("records")
}

/// Compares ring record lists by offset, then body, without printing megabytes on failure.
#[track_caller]
pub fn same_records(got: &[(u64, Vec<u8>)], want: &[(u64, Vec<u8>)]) {
    let offsets = |r: &[(u64, Vec<u8>)]| r.iter().map(|x| x.0).collect::<Vec<_>>();
    assert_eq!(offsets(got), offsets(want), "record offsets differ");
    for (g, w) in got.iter().zip(want) {
        assert!(g.1 == w.1, "body of record {} differs", g.0);
    }
}

/// A ring record body: `len` bytes derived from `i`.
pub fn ring_body(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// Appends `n` records of `len` bytes (ids from `first`), waits for each to be durable.
pub fn ring_append_n(
    ring: &tidelog::RingWal,
    first: u64,
    n: u64,
    len: usize,
) -> Vec<(u64, Vec<u8>)> {
    let handles: Vec<_> = (first..first + n)
        .map(|i| {
            let b = ring_body(i, len);
            (ring.append(&b).expect("append"), b)
        })
        .collect();
    handles
        .into_iter()
        .map(|(h, b)| {
            let flushed = h.wait().expect("durable");
            assert!(flushed >= h.end_offset());
            (h.offset, b)
        })
        .collect()
}

// ---- a storage layer that holds calls at a gate ----------------------------------------

#[derive(Debug, Default)]
pub struct GateState {
    /// The next this many `fallocate` calls are held.
    hold_allocates: u32,
    /// Every write to this path is held.
    hold_writes_to: Option<PathBuf>,
    /// The gate is open: held calls go on, and no more are held.
    open: bool,
    /// Calls held right now.
    waiting: u32,
}

/// What runs before a read (`path`, `offset`), once per call, holding no lock of the engine.
pub type ReadHook = Box<dyn Fn(&Path, u64) + Send + Sync>;

/// [`StdStorage`] with a gate in front of `fallocate` and of writes to one path, and a hook
/// before each read.
#[derive(Default)]
pub struct GateStorage {
    state: Mutex<GateState>,
    cv: Condvar,
    on_read: Option<ReadHook>,
}

impl std::fmt::Debug for GateStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateStorage")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl GateStorage {
    /// A storage that runs `hook` before every read.
    pub fn on_read(hook: ReadHook) -> GateStorage {
        GateStorage {
            on_read: Some(hook),
            ..GateStorage::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn hold_next_allocates(&self, n: u32) {
        self.lock().hold_allocates = n;
    }

    pub fn hold_writes_to(&self, path: &Path) {
        self.lock().hold_writes_to = Some(path.to_owned());
    }

    pub fn open(&self) {
        self.lock().open = true;
        self.cv.notify_all();
    }

    /// Waits until `n` calls are held.
    pub fn wait_held(&self, n: u32) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut st = self.lock();
        while st.waiting < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no call reached the gate");
            st = self.cv.wait_timeout(st, left).unwrap().0;
        }
    }

    fn pass(&self, hold: impl FnOnce(&mut GateState) -> bool) {
        let mut st = self.lock();
        if st.open || !hold(&mut st) {
            return;
        }
        st.waiting += 1;
        self.cv.notify_all();
        while !st.open {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.waiting -= 1;
    }
}

impl Storage for GateStorage {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        StdStorage.create_new(path)
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<File> {
        StdStorage.open(path, writable)
    }
    fn open_device(&self, path: &Path, direct: bool) -> io::Result<File> {
        StdStorage.open_device(path, direct)
    }
    fn open_direct(&self, path: &Path) -> io::Result<File> {
        StdStorage.open_direct(path)
    }
    fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        StdStorage.set_len(file, path, len)
    }
    fn allocate(&self, file: &File, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        // Data files' reservations only (not the shared state file's pages).
        let data = path.extension().is_some_and(|e| e == "tdl");
        self.pass(|st| {
            let hold = data && st.hold_allocates > 0;
            if hold {
                st.hold_allocates -= 1;
            }
            hold
        });
        StdStorage.allocate(file, path, offset, len)
    }
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], offset: u64) -> io::Result<()> {
        self.pass(|st| st.hold_writes_to.as_deref() == Some(path));
        StdStorage.write_at(file, path, buf, offset)
    }
    fn read_at(&self, file: &File, path: &Path, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(hook) = &self.on_read {
            hook(path, offset);
        }
        StdStorage.read_at(file, path, buf, offset)
    }
    fn sync_file(&self, file: &File, path: &Path) -> io::Result<()> {
        StdStorage.sync_file(file, path)
    }
    fn sync_map(&self, map: &Mapping, path: &Path, offset: usize, len: usize) -> io::Result<()> {
        StdStorage.sync_map(map, path, offset, len)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdStorage.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdStorage.remove_file(path)
    }
}

//! Helpers shared by the crash, recovery and durability tests: small geometries, temp dirs,
//! directory copies (crash images), a raw frame walker over data files, deterministic payloads
//! and the child-process re-exec used to crash without running destructors.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tidelog::format::{self, BlockIdentity, Progress};
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
    tempfile::tempdir().expect("create temp dir")
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
    pub batch_count: u32,
}

impl FrameLoc {
    /// File position of the value's first byte.
    pub fn value_pos(&self) -> u64 {
        self.pos + format::FRAME_HEADER_BYTES + self.key_len
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
                    let len = u64::from(id.block_count) * block;
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

/// Every frame in `dir` (walking each extent from its first record while the magic holds).
pub fn frames(dir: &Path) -> Vec<FrameLoc> {
    let mut out = Vec::new();
    for ext in extents(dir) {
        let bytes = std::fs::read(&ext.file).unwrap();
        let mut pos = ext.start + format::BLOCK_HEADER_BYTES;
        while pos + format::FRAME_HEADER_BYTES <= ext.start + ext.len {
            let h = &bytes[pos as usize..pos as usize + format::FRAME_HEADER];
            if u16::from_le_bytes([h[format::FR_MAGIC], h[format::FR_MAGIC + 1]])
                != format::FRAME_MAGIC
            {
                break;
            }
            let frame_len = u64::from(format::get_u32(h, format::FR_LEN));
            out.push(FrameLoc {
                file: ext.file.clone(),
                topic: ext.id.topic.clone(),
                pos,
                frame_len,
                offset: format::get_u64(h, format::FR_OFFSET),
                key_len: u64::from(format::get_u32(h, format::FR_KEY_LEN)),
                batch_count: format::get_u32(h, format::FR_BATCH_COUNT),
            });
            pos += format::align_up(frame_len, format::FRAME_ALIGN);
        }
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

/// True in the re-executed child: returns its data dir and mode.
pub fn child_env() -> Option<(PathBuf, String)> {
    let dir = std::env::var_os(CHILD_DIR)?;
    let mode = std::env::var(CHILD_MODE).unwrap_or_default();
    Some((PathBuf::from(dir), mode))
}

/// The command that re-runs this test binary's `entry` test in a child process.
pub fn child_command(entry: &str, dir: &Path, mode: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .env(CHILD_MODE, mode)
        .stdin(Stdio::null());
    cmd
}

/// Runs the child to completion and checks it exited with status 0.
pub fn run_child(entry: &str, dir: &Path, mode: &str) -> Output {
    let out = child_command(entry, dir, mode).output().unwrap();
    assert!(
        out.status.success(),
        "child {mode} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

// Deletion tests (cursors, retention, topic deletion, the disk cap).

/// How long the deletion tests wait for the housekeeping thread.
pub const DELETE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

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
    let deadline = std::time::Instant::now() + DELETE_DEADLINE;
    while gone.iter().any(|p| p.exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "files still on disk after {DELETE_DEADLINE:?}: {:?}",
            gone.iter().filter(|p| p.exists()).collect::<Vec<_>>()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Waits until the housekeeping thread has made the spare file it wants (the current file is
/// half used), so file counts do not change under a test.
pub fn settle_spare(wal: &Wal, blocks_per_file: u32) {
    let deadline = std::time::Instant::now() + DELETE_DEADLINE;
    loop {
        let states = wal.file_states();
        let open: Vec<_> = states.iter().filter(|s| !s.fully_allocated).collect();
        if !(open.len() == 1 && open[0].total_blocks * 2 >= blocks_per_file) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no spare file appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
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

//! Helpers shared by the API and concurrency integration tests: small geometries, payloads
//! that check themselves, a checksum, and re-executing the test binary as a child process.
//!
//! Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use tidelog::{Config, Durability};

/// Block size of the small test geometry.
pub const BLOCK: u64 = 64 * 1024;

/// Environment variable that turns a `child_process_entry` test into a child.
pub const CHILD_DIR_ENV: &str = "TIDELOG_CHILD_DIR";

/// A file of `blocks` blocks of 64 KiB; no background flush, so tests decide durability.
pub fn geometry(blocks: u64) -> Config {
    Config::default()
        .file_size_bytes(4096 + blocks * BLOCK)
        .block_size_bytes(BLOCK)
        .durability(Durability::Never)
}

/// The default small geometry: 8 blocks of 64 KiB per file.
pub fn small() -> Config {
    geometry(8)
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temporary directory")
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

/// A value that names its writer (`tag`) and sequence number, padded to a length that varies
/// with `seq`, every byte derived from both, so a partial or mixed-up record is detected.
pub fn tagged_value(tag: u32, seq: u64, max_pad: u64) -> Vec<u8> {
    let pad = (seq.wrapping_mul(2_654_435_761) ^ u64::from(tag)) % (max_pad + 1);
    let mut v = Vec::with_capacity(12 + pad as usize);
    v.extend_from_slice(&tag.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    for j in 0..pad {
        v.push(filler(tag, seq, j));
    }
    v
}

fn filler(tag: u32, seq: u64, j: u64) -> u8 {
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
        .all(|(j, &b)| b == filler(tag, seq, j as u64));
    ok.then_some((tag, seq))
}

/// Deterministic payload of a given length for record `i` of a stream `salt`.
pub fn payload(salt: u64, i: u64, len: usize) -> Vec<u8> {
    let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A command that re-runs this test binary with only `test_name`, as a child for `dir`.
pub fn child_command(test_name: &str, dir: &Path) -> Command {
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir);
    cmd
}

/// The data directory when this process is a child, else `None`.
pub fn child_dir() -> Option<std::path::PathBuf> {
    std::env::var_os(CHILD_DIR_ENV).map(Into::into)
}

/// Prints one reply line for the parent. The test harness may have printed part of a line
/// already, so the reply is framed by a marker the parent searches for.
pub fn reply(text: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n@@reply {text} @@").expect("write to the parent");
    out.flush().expect("flush to the parent");
}

/// A running child that talks in lines: commands on stdin, replies on stdout.
#[derive(Debug)]
pub struct ChildSession {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<String>,
}

impl ChildSession {
    pub fn spawn(mut cmd: Command) -> ChildSession {
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

    /// Closes stdin and waits (bounded) for a successful exit.
    pub fn finish(mut self, timeout: Duration) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.child.try_wait().expect("poll the child") {
                Some(status) => {
                    assert!(status.success(), "child failed: {status}");
                    return;
                }
                None if std::time::Instant::now() > deadline => {
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

/// Reads commands from stdin in a child, one per line, until EOF.
pub fn child_commands() -> impl Iterator<Item = String> {
    std::io::stdin().lines().map_while(Result::ok)
}

//! Goal: a full disk is a clean `Error::DiskFull` from the append that needed space, never a
//! SIGBUS; records written before stay readable and appends work again once space is back.
//! Method: (a) `FaultStorage` fails `fallocate` with ENOSPC, both for a new block and for a new
//! data file; (b) when running as root with a working `mount`, a real 2 MiB tmpfs is filled
//! by a child process, and the parent checks the child exited normally and the data reopens.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::common::{check_dense, child_env, data_files, payload, run_child, small, tempdir};
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{Error, Wal};

const TOPIC: &str = "fill";
const VALUE: usize = 1000;

fn value(i: u64) -> Vec<u8> {
    payload(i + 17, VALUE)
}

fn assert_disk_full(err: &Error, ctx: &str) {
    assert!(
        matches!(err, Error::DiskFull { .. }),
        "{ctx}: expected DiskFull, got {err}"
    );
    assert_eq!(err.errno(), Some(libc::ENOSPC), "{ctx}");
}

#[test]
fn enospc_on_new_block_is_disk_full() {
    let dir = tempdir();
    let fs = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), small(), Arc::new(fs.clone())).unwrap();
    for i in 0..10 {
        assert_eq!(wal.append(TOPIC, &value(i)).unwrap(), i);
    }
    fs.arm(points::ALLOCATE, Fault::Always(libc::ENOSPC));
    // Appends inside the current block still succeed; the one that needs a block fails.
    let mut next = 10;
    let err = loop {
        match wal.append(TOPIC, &value(next)) {
            Ok(o) => assert_eq!(o, next),
            Err(e) => break e,
        }
        next += 1;
        assert!(
            next < 1000,
            "a 64 KiB block cannot hold {next} records of {VALUE} bytes"
        );
    };
    assert_disk_full(&err, "append needing a new block");
    assert!(fs.hits(points::ALLOCATE) >= 1);
    // Nothing was consumed by the failure; it keeps failing cleanly while the disk is full.
    assert_eq!(wal.topic_info(TOPIC).unwrap().next_offset, next);
    assert_disk_full(
        &wal.append(TOPIC, &value(next)).unwrap_err(),
        "second append",
    );
    let batch = [value(next), value(next + 1)];
    assert_disk_full(&wal.append_batch(TOPIC, &batch).unwrap_err(), "batch");
    check_dense(&wal, TOPIC, next, value, "while full");
    wal.flush().unwrap();

    fs.disarm_all();
    for i in next..next + 100 {
        assert_eq!(
            wal.append(TOPIC, &value(i)).unwrap(),
            i,
            "after space came back"
        );
    }
    check_dense(&wal, TOPIC, next + 100, value, "after disarm");
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    check_dense(&wal, TOPIC, next + 100, value, "reopen");
}

#[test]
fn enospc_on_new_file_is_disk_full() {
    let dir = tempdir();
    let fs = FaultStorage::new();
    let wal = Wal::open_with_storage(dir.path(), small(), Arc::new(fs.clone())).unwrap();
    fs.arm(points::ALLOCATE, Fault::Always(libc::ENOSPC));
    // The first append has to create the first data file.
    assert_disk_full(&wal.append(TOPIC, &value(0)).unwrap_err(), "first append");
    assert!(
        data_files(dir.path()).is_empty(),
        "a failed creation must leave no file"
    );
    fs.disarm_all();
    assert_eq!(wal.append(TOPIC, &value(0)).unwrap(), 0);
    wal.close().unwrap();
    let wal = Wal::open_with(dir.path(), small()).unwrap();
    check_dense(&wal, TOPIC, 1, value, "reopen");
}

/// Child side (a no-op unless re-executed with `TIDELOG_CHILD_DIR`): appends into the data
/// dir (on a small tmpfs) until the disk is full, checks the error and the data, closes.
#[test]
fn child_process_entry() {
    let Some((dir, _mode)) = child_env() else {
        return;
    };
    let wal = Wal::open_with(&dir, small()).unwrap();
    let mut n = 0u64;
    let err = loop {
        match wal.append(TOPIC, &value(n)) {
            Ok(o) => assert_eq!(o, n),
            Err(e) => break e,
        }
        n += 1;
        assert!(n < 100_000, "a 2 MiB tmpfs never filled up");
    };
    assert_disk_full(&err, "tmpfs");
    assert!(n > 100, "only {n} records fitted in 2 MiB");
    check_dense(&wal, TOPIC, n, value, "tmpfs, after DiskFull");
    wal.flush().unwrap();
    wal.close().unwrap();
    println!("records {n}");
}

/// Unmounts on drop, so a failing assertion does not leave the mount behind.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("warning: could not unmount {}", self.0.display());
        }
    }
}

fn mount_tmpfs(at: &Path) -> Option<Mount> {
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(at)
        .output();
    match status {
        Ok(out) if out.status.success() => Some(Mount(at.to_owned())),
        Ok(out) => {
            let why = String::from_utf8_lossy(&out.stderr);
            eprintln!(
                "skipping the real tmpfs test: mount failed ({}): {why}",
                out.status
            );
            None
        }
        Err(e) => {
            eprintln!("skipping the real tmpfs test: cannot run mount: {e}");
            None
        }
    }
}

#[test]
fn real_small_tmpfs_fills_cleanly() {
    let mnt = tempdir();
    let Some(mount) = mount_tmpfs(mnt.path()) else {
        return;
    };
    let dir = mount.0.join("wal");
    // In a child, so a SIGBUS shows up as a signal exit status instead of killing this runner.
    let out = run_child(module_path!(), &dir, "");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let n: u64 = stdout
        .lines()
        .find_map(|l| l.split_once("records ").map(|(_, n)| n))
        .unwrap_or_else(|| panic!("child did not report its record count: {stdout}"))
        .trim()
        .parse()
        .unwrap();
    // Reopening on the still-full filesystem works and returns every record.
    let wal = Wal::open_with(&dir, small()).unwrap();
    check_dense(&wal, TOPIC, n, value, "tmpfs reopen");
    drop(wal);
    drop(mount);
}

//! Goal: closing a `Wal` releases its directory at once, even while another thread of the
//! process is spawning a child process.
//! Method: one thread spawns `true` in a loop while the test thread does 200 open / append /
//! close cycles on one directory; every open must succeed. A spawned child holds a copy of
//! every descriptor until its `exec` closes them, the lock file's included, so a lock that is
//! only released by closing the file outlives `close()` for that window.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{small, tempdir};
use tidelog::{Error, Wal};

#[test]
fn reopen_while_another_thread_spawns_processes() {
    let dir = tempdir();
    let stop = Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut spawned = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let status = Command::new("true")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .status()
                    .expect("run `true`");
                assert!(status.success());
                spawned += 1;
            }
            spawned
        })
    };
    let mut result = Ok(());
    for cycle in 0..200u64 {
        match Wal::open_with(dir.path(), small()) {
            Ok(wal) => {
                assert_eq!(wal.append("spawn", b"x").unwrap(), cycle);
                wal.close().unwrap();
            }
            Err(e) => {
                result = Err((cycle, e));
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let spawned = spawner.join().unwrap();
    if let Err((cycle, e)) = result {
        assert!(
            !matches!(e, Error::Locked { .. }),
            "cycle {cycle} ({spawned} spawns): {e}"
        );
        panic!("cycle {cycle}: {e}");
    }
}

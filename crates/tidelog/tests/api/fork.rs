//! A handle used in a forked child fails with `Error::Forked` and leaves the parent's handle,
//! lock and data untouched when the child drops it.

#![allow(clippy::unwrap_used)]

use crate::common;
use tidelog::{Error, Wal};

/// Longest a forked child may run: one that waits for the parent's threads hangs.
const CHILD_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Forks; the child runs `child` and exits with its return value (never unwinding into the
/// test harness); the parent gets the child's exit status, or fails the test when the child
/// hangs.
fn in_child(child: impl FnOnce() -> i32) -> i32 {
    #[expect(unsafe_code, reason = "fork has no safe wrapper")]
    // SAFETY: the child only runs `child`, which touches the Wal and exits with `_exit`
    // without returning into the (multi-threaded) test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        #[expect(unsafe_code, reason = "_exit has no safe wrapper")]
        // SAFETY: ends the child at once, running no destructors or atexit handlers.
        unsafe {
            libc::_exit(code)
        };
    }
    let mut status = 0;
    let deadline = std::time::Instant::now() + CHILD_WAIT;
    loop {
        #[expect(unsafe_code, reason = "waitpid has no safe wrapper")]
        // SAFETY: `status` is a valid out-pointer and `pid` is our own child.
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if waited == pid {
            break;
        }
        assert_eq!(waited, 0, "waitpid failed");
        if std::time::Instant::now() >= deadline {
            #[expect(unsafe_code, reason = "kill has no safe wrapper")]
            // SAFETY: kill takes no pointers; `pid` is our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL)
            };
            #[expect(unsafe_code, reason = "waitpid has no safe wrapper")]
            // SAFETY: `status` is a valid out-pointer and `pid` is our own child.
            unsafe {
                libc::waitpid(pid, &mut status, 0)
            };
            panic!("the forked child hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        libc::WIFEXITED(status),
        "child did not exit normally: {status}"
    );
    libc::WEXITSTATUS(status)
}

#[test]
fn inherited_handle_fails_in_the_child_and_the_parent_carries_on() {
    let dir = common::tempdir();
    let wal = Wal::open_with(dir.path(), common::small().exclusive(true)).unwrap();
    let writer = wal.writer("t").unwrap();
    writer.append(b"before fork").unwrap();
    // Taken (and dropped) only in the child's copy of memory.
    let mut handles = Some((wal, writer));

    let code = in_child(|| {
        let (wal, writer) = handles.take().unwrap();
        let parent = std::os::unix::process::parent_id();
        let forked = |e: &Error| matches!(e, Error::Forked { opener_pid } if *opener_pid == parent);
        let checks = [
            writer
                .append(b"from child")
                .err()
                .is_some_and(|e| forked(&e)),
            wal.flush().err().is_some_and(|e| forked(&e)),
            wal.read("t", 0).err().is_some_and(|e| forked(&e)),
            wal.reader("t", "g").err().is_some_and(|e| forked(&e)),
            wal.close().err().is_some_and(|e| forked(&e)),
        ];
        // Dropping the inherited handles must neither join the parent's threads nor unlock
        // the directory.
        drop(writer);
        drop(wal);
        let failed = checks.iter().filter(|ok| !**ok).count();
        i32::try_from(failed).unwrap()
    });
    assert_eq!(code, 0, "{code} checks failed in the child");

    // The parent's handle still works and still holds the lock.
    let (wal, writer) = handles.take().unwrap();
    assert!(matches!(Wal::open(dir.path()), Err(Error::Locked { .. })));
    assert_eq!(writer.append(b"after fork").unwrap(), 1);
    wal.close().unwrap();

    let wal = Wal::open_with(dir.path(), common::small()).unwrap();
    assert_eq!(wal.read("t", 0).unwrap().value(), b"before fork");
    assert_eq!(wal.read("t", 1).unwrap().value(), b"after fork");
    assert_eq!(wal.topic_info("t").unwrap().next_offset, 2);
}

#[test]
fn a_handle_opened_in_the_child_works() {
    let dir = common::tempdir();
    let path = dir.path().to_owned();
    let code = in_child(move || {
        let Ok(wal) = Wal::open_with(&path, common::small()) else {
            return 1;
        };
        let ok = wal.append("t", b"child").is_ok() && wal.close().is_ok();
        if ok { 0 } else { 2 }
    });
    assert_eq!(code, 0);
    let wal = Wal::open_with(dir.path(), common::small()).unwrap();
    assert_eq!(wal.read("t", 0).unwrap().value(), b"child");
}

#[test]
fn an_inherited_ring_fails_in_the_child_and_the_parent_carries_on() {
    let dir = common::tempdir();
    let path = dir.path().join("ring");
    let ring = tidelog::RingWal::open(&path, common::ring_config()).unwrap();
    let first = ring.append(b"before fork").unwrap();
    first.wait().unwrap();
    // An append the parent has not made durable yet when it forks.
    let pending = ring.append(b"in flight").unwrap();
    let mut handles = Some((ring, pending));

    let code = in_child(|| {
        let (ring, pending) = handles.take().unwrap();
        let parent = std::os::unix::process::parent_id();
        let forked = |e: &Error| matches!(e, Error::Forked { opener_pid } if *opener_pid == parent);
        let checks = [
            ring.append(b"from child").err().is_some_and(|e| forked(&e)),
            ring.flush().err().is_some_and(|e| forked(&e)),
            ring.trim(0).err().is_some_and(|e| forked(&e)),
            ring.recover().err().is_some_and(|e| forked(&e)),
            // No worker here could make it durable: the wait must not start.
            pending.wait().err().is_some_and(|e| forked(&e)),
            ring.close().err().is_some_and(|e| forked(&e)),
            !ring.is_closed(),
        ];
        // Dropping the inherited ring must neither join the parent's workers nor write the
        // ring's header.
        drop(pending);
        drop(ring);
        let failed = checks.iter().filter(|ok| !**ok).count();
        i32::try_from(failed).unwrap()
    });
    assert_eq!(code, 0, "{code} checks failed in the child");

    let (ring, pending) = handles.take().unwrap();
    pending.wait().unwrap();
    ring.append(b"after fork").unwrap().wait().unwrap();
    ring.close().unwrap();
    let ring = tidelog::RingWal::open(&path, common::ring_config()).unwrap();
    assert!(ring.recovery_report().clean_shutdown);
    let values: Vec<Vec<u8>> = common::ring_records(&ring)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        values,
        [&b"before fork"[..], b"in flight", b"after fork"].map(<[u8]>::to_vec)
    );
}

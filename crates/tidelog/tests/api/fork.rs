//! A handle used in a forked child fails with `Error::Forked` and leaves the parent's handle,
//! lock and data untouched when the child drops it.

#![allow(clippy::unwrap_used)]

use crate::common;
use tidelog::{Error, Wal};

/// Forks; the child runs `child` and exits with its return value (never unwinding into the
/// test harness); the parent gets the child's exit status.
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
    #[expect(unsafe_code, reason = "waitpid has no safe wrapper")]
    // SAFETY: `status` is a valid out-pointer and `pid` is our own child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
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

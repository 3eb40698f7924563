//! A panic inside the engine poisons the handle (`Error::Poisoned`) instead of being
//! swallowed: whether it unwinds through an appender's call or kills a background thread,
//! every later write fails, and a reopen recovers every record acknowledged before it.
//! Method: a fault-injecting storage panics in a chosen call.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;
use tidelog::io::{Fault, FaultStorage, points};
use tidelog::{Config, Durability, Error, Wal};

fn is_poisoned<T>(r: &tidelog::Result<T>) -> bool {
    matches!(r, Err(Error::Poisoned { .. }))
}

#[test]
fn a_panic_in_an_appenders_write_poisons_the_handle() {
    let dir = common::tempdir();
    let storage = FaultStorage::new();
    let config = common::small().durability(Durability::Always);
    let wal = Wal::open_with_storage(dir.path(), config.clone(), Arc::new(storage.clone()))
        .expect("open");
    assert_eq!(wal.append("t", b"kept").expect("append"), 0);
    storage.arm(points::WRITE, Fault::Panic);
    let caught = catch_unwind(AssertUnwindSafe(|| wal.append("t", b"lost")));
    assert!(caught.is_err(), "the injected panic unwinds to the caller");
    storage.disarm_all();
    assert!(is_poisoned(&wal.append("t", b"after")), "appends refused");
    assert!(is_poisoned(&wal.flush()), "flush refused");
    let e = wal.append("t", b"after").expect_err("poisoned");
    assert!(e.to_string().contains("reopen"), "{e}");
    drop(wal);
    let wal = Wal::open_with(dir.path(), config).expect("reopen");
    let got = common::read_all(&wal, "t");
    assert_eq!(got.first().map(|r| r.2.as_slice()), Some(&b"kept"[..]));
}

#[test]
fn a_panicking_sync_thread_poisons_the_handle() {
    let dir = common::tempdir();
    let storage = FaultStorage::new();
    let config = common::small()
        .durability(Durability::Interval)
        .sync_interval_ms(5);
    let wal = Wal::open_with_storage(dir.path(), config, Arc::new(storage.clone())).expect("open");
    wal.append("t", b"v").expect("append");
    storage.arm(points::SYNC_MAP, Fault::Panic);
    // The sync thread's periodic flush hits the panic; the handle refuses writes soon after.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = wal.append("t", b"more");
        if is_poisoned(&r) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sync thread's panic went unnoticed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    storage.disarm_all();
    assert!(is_poisoned(&wal.flush()));
    // Closing reports the poison instead of pretending everything was flushed.
    assert!(wal.close().is_err());
}

#[test]
fn a_panicking_group_commit_fails_its_waiters_and_poisons() {
    let dir = common::tempdir();
    let storage = FaultStorage::new();
    let config: Config = common::small().durability(Durability::Always);
    let wal = Wal::open_with_storage(dir.path(), config, Arc::new(storage.clone())).expect("open");
    wal.append("t", b"v").expect("append");
    storage.arm(points::SYNC_MAP, Fault::Panic);
    // The appender leads its own group commit, which panics in the msync.
    let caught = catch_unwind(AssertUnwindSafe(|| wal.append("t", b"w")));
    storage.disarm_all();
    match caught {
        Err(_) => {}
        Ok(r) => assert!(is_poisoned(&r), "got {r:?}"),
    }
    assert!(is_poisoned(&wal.append("t", b"x")));
    let handle = wal.writer("t").map(|_| ());
    assert!(is_poisoned(&handle), "{handle:?}");
}

//! A few scoped threads for recovery's per-topic work (checking each topic's chain, syncing
//! the slots of the extents it resumes): each slot's msync waits for the device, and the
//! scans' checksums of many cached topics take more than one CPU.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::poison::Recover;

/// Items a thread should get at least: for fewer, starting it costs more than it saves.
const ITEMS_PER_THREAD_MIN: usize = 4;

/// `work` applied to every item on up to `threads` threads, the results in item order. With
/// one thread's worth of items it all runs on the calling thread, as before threads.
///
/// The error is the one a walk item by item would meet first: items start in order, and
/// none starts after one failed, so every item before the first failure has run. Items after
/// it that were under way finish (a writable open may thus have repaired a later topic too,
/// as the next open would). A worker's panic becomes [`Error::Poisoned`] (`op` says where).
pub(super) fn map<T, R, F>(
    items: Vec<T>,
    threads: usize,
    op: &'static str,
    work: F,
) -> Result<Vec<R>>
where
    T: Send,
    R: Send,
    F: Fn(T) -> Result<R> + Sync,
{
    let threads = threads.min(items.len() / ITEMS_PER_THREAD_MIN);
    if threads <= 1 {
        return items.into_iter().map(work).collect();
    }
    let count = items.len();
    let queue = Mutex::new(items.into_iter().enumerate());
    // The lowest index that failed so far.
    let failed = AtomicUsize::new(usize::MAX);
    let run = || {
        let mut done = Vec::new();
        loop {
            let next = queue.lock().recover().next();
            let Some((i, item)) = next else { break };
            if i > failed.load(Ordering::Acquire) {
                break;
            }
            let r = work(item);
            if r.is_err() {
                failed.fetch_min(i, Ordering::AcqRel);
            }
            done.push((i, r));
        }
        done
    };
    let joined = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for _ in 0..threads {
            match std::thread::Builder::new()
                .name("tidelog-recover".into())
                .spawn_scoped(s, run)
            {
                Ok(h) => handles.push(h),
                // The threads that did start take every item.
                Err(_) => break,
            }
        }
        if handles.is_empty() {
            return vec![Ok(run())];
        }
        // Every handle joined here: `scope` itself never panics.
        handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    let mut slots: Vec<Option<Result<R>>> = (0..count).map(|_| None).collect();
    for worker in joined {
        let done = worker.map_err(|_| Error::Poisoned {
            op,
            path: PathBuf::new(),
            errno: None,
        })?;
        for (i, r) in done {
            slots[i] = Some(r);
        }
    }
    // In order: the first error, or every item's result (an item is missing only past a
    // failure, which ends the walk first).
    let mut out = Vec::with_capacity(count);
    for slot in slots {
        match slot {
            Some(r) => out.push(r?),
            None => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_item_order() {
        let items: Vec<u32> = (0..100).collect();
        let out = map(items, 4, "test", |i| Ok(i * 2)).expect("no error");
        assert_eq!(out, (0..100).map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn the_first_error_in_item_order_wins() {
        for threads in [1, 3, 8] {
            let items: Vec<u32> = (0..64).collect();
            let e = map(items, threads, "test", |i| {
                if i == 20 || i == 40 {
                    Err(Error::invalid("item", format!("{i}")))
                } else {
                    Ok(i)
                }
            })
            .expect_err("items 20 and 40 fail");
            assert!(e.to_string().contains("20"), "{e}");
        }
    }

    #[test]
    fn a_workers_panic_is_an_error() {
        let items: Vec<u32> = (0..64).collect();
        let r = map(items, 4, "recovery thread", |i| {
            assert!(i != 30, "injected");
            Ok(i)
        });
        assert!(
            matches!(
                r,
                Err(Error::Poisoned {
                    op: "recovery thread",
                    ..
                })
            ),
            "{r:?}"
        );
    }
}

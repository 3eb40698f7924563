//! Damage and recovery: corruption and torn tails reported, never read as data; the rules of
//! trust; the corruption sweep (`TIDELOG_SWEEP=full`); decoder properties
//! (`TIDELOG_PROPTEST_CASES`); records larger than a block across crashes; injected I/O faults,
//! failed syncs and a full disk.
//!
//! One module per test file; `common` holds the helpers all the test binaries share.

#[path = "../common/mod.rs"]
mod common;

mod decoders;
mod fault_injection;
mod full_disk;
mod large_records;
mod panics;
mod parallel;
mod recover_corruption;
mod recover_races;
mod recover_torn_tail;
mod sweep;
mod sync_failures;
mod trust;

//! The ring: `RingWal` on a file and on a loop device, the topic log fronted by a ring, and
//! read-only ring inspection.
//!
//! One module per test file; `common` holds the helpers all the test binaries share.

#[path = "../common/mod.rs"]
mod common;

mod ring;
mod ring_backend;
mod ring_inspect;
mod ring_targets;

//! The tier: sealed extents in object storage (`Config::tier`), the manifest's deltas,
//! `tier_flush`, fencing, reclaim held back until the bucket holds an extent, and a bucket
//! that fails or does not answer; `faults` fails each bucket request of a life in turn.
//!
//! One module per test file; `common` holds the helpers all the test binaries share.

#[path = "../common/mod.rs"]
mod common;

mod faults;
mod tier;

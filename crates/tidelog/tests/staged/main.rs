//! Staged appends: parts written without the lock, adopted or copied by a publish, untrusted
//! staged input, and a kill -9 campaign over publishes.
//!
//! One module per test file; `common` holds the helpers all the test binaries share.

#[path = "../common/mod.rs"]
mod common;

mod staged;
mod staged_adopt;
mod staged_input;
mod staged_shared;

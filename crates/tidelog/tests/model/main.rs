//! The model-based test (`TIDELOG_MODEL_CASES`): random operations, crashes and faults
//! against an in-memory model.
//!
//! One module per test file; `common` holds the helpers all the test binaries share.

#[path = "../common/mod.rs"]
mod common;

mod model;
mod two_processes;

//! Deleting data: files go exactly when consumer groups, retention or `delete_topic` allow it,
//! and `disk_bytes_max` holds appends back (or fails them) until files go.
//!
//! One module per test file; `common` holds the helpers all the test binaries share.

#[path = "../common/mod.rs"]
mod common;

mod back_pressure;
mod delete_shared;
mod delete_topic;
mod deletion_cursors;
mod retention;

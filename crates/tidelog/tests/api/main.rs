//! The API: round trips through every read path, seeks and scans, consumer groups, read-only
//! handles, many topics, bad input, reopening, durability modes, waits with `Duration::MAX`,
//! locking (in this process and from another), forked handles and concurrent writers.
//!
//! One module per test file; `common` holds the helpers all the test binaries share.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod cursors;
mod delete_records;
mod durability_modes;
mod duration_max;
mod follow;
mod fork;
mod headers;
mod housekeeping;
mod index_interval;
mod lock_waits;
mod locking;
mod many_topics;
mod processes;
mod read_only;
mod record_format;
mod reopen;
mod reservation;
mod round_trip;
mod scan;
mod seek;
mod smoke;
mod structure;
mod threads_many_topics;
mod threads_one_topic;

//! `visible_reader`: the reader process of `tidelog bench`'s append-to-visible rows (see
//! `tidelog_benches::compare` and docs/BENCHMARKS.md). `visible_reader tidelog DIR COUNT
//! SPIN_US` waits for stamped records in a log another process writes (spinning up to
//! SPIN_US before each sleep); `visible_reader pipe COUNT` for the same messages on stdin. It prints `ready`, then one JSON line of latencies.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(tidelog_benches::compare::visible_reader(std::env::args_os()))
}

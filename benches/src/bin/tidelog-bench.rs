//! `tidelog-bench`: the comparison benchmark, also run as `tidelog bench` by the `tidelog`
//! built beside it (see `tidelog_benches::compare` and docs/BENCHMARKS.md).

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(tidelog_benches::compare::run(std::env::args_os()))
}

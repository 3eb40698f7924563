//! `process_appender`: an appender process of `tidelog bench`'s many-processes rows (see
//! `tidelog_benches::compare` and docs/BENCHMARKS.md). `process_appender tidelog DIR TOPIC
//! interval|always shared|exclusive MAX INDEX` appends 100 B records to a log that other
//! processes append to as well; `process_appender fdatasync FILE MAX INDEX` writes them to a
//! plain file with `fdatasync` after each. It prints `ready`, waits for `go START DEADLINE`
//! on stdin, appends from START until DEADLINE and prints one JSON line of what it did.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(tidelog_benches::compare::process_appender(
        std::env::args_os(),
    ))
}

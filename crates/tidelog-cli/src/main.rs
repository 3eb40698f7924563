//! The `tidelog` binary: everything lives in the library, which the Python wheel shares.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(tidelog_cli::run(std::env::args_os()))
}

//! `tidelog bench`: hands its arguments to the comparison benchmark, the `tidelog-bench`
//! program of the benches package (`benches/src/compare`), which a checkout's build puts
//! next to this one. The command itself carries no benchmark code, so neither does the
//! Python wheel that ships it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use crate::Failure;

/// The benchmark's program, looked for in the directory of the running executable.
pub(crate) const PROGRAM: &str = "tidelog-bench";

/// What to say where there is no benchmark to run (one line, exit status 2).
pub(crate) const NOT_BUILT: &str = "bench: the comparison benchmark is not part of this build; \
from a checkout of tidelog run `bash scripts/bench.sh` (or `cargo build --release -p tidelog-cli \
-p tidelog-benches`, then `target/release/tidelog bench`)";

/// Where `tidelog bench` finds the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bench {
    /// `tidelog-bench` in the running executable's directory, if it is there.
    NextToThisProgram,
    /// Nowhere: the host ships no benchmark.
    Absent,
}

impl Bench {
    fn program(self) -> Option<PathBuf> {
        match self {
            Bench::NextToThisProgram => {
                let exe = std::env::current_exe().ok()?;
                Some(exe.parent()?.join(PROGRAM)).filter(|p| p.is_file())
            }
            Bench::Absent => None,
        }
    }

    /// Runs the benchmark with `args` (stdin, stdout and stderr are this process's) and
    /// returns its exit status.
    pub(crate) fn run(self, args: Vec<OsString>) -> Result<u8, Failure> {
        let Some(program) = self.program() else {
            return Err(Failure::Usage(NOT_BUILT.into()));
        };
        let status = Command::new(&program)
            .args(args)
            .status()
            .map_err(|e| Failure::Log(format!("cannot run {}: {e}", program.display())))?;
        Ok(exit_code(status))
    }
}

/// The child's exit status as ours: its code, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .map_or(1, |c| u8::try_from(c).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_benchmark_bench_is_one_usage_line() {
        let err = Bench::Absent.run(vec!["--quick".into()]);
        match err {
            Err(Failure::Usage(m)) => {
                assert!(m.contains("scripts/bench.sh"), "{m}");
                assert_eq!(m.lines().count(), 1);
            }
            other => panic!("expected a usage error, got {other:?}"),
        }
    }
}

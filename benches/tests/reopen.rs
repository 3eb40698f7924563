//! `reopen` end to end on a tiny log: a round is timed, the medians come out, the scratch log
//! is removed. Caches are dropped per file only: a test must not empty the machine's.

use std::process::Command;

#[test]
fn one_round_on_a_tiny_log_prints_its_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let out = Command::new(env!("CARGO_BIN_EXE_reopen"))
        .args(["--dir", dir_arg, "--topics", "3", "--topic-mib", "1"])
        .args(["--rounds", "1", "--cache-drop", "fadvise"])
        .output()
        .expect("run reopen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let round = stdout
        .lines()
        .find(|l| l.starts_with("| 0 | fadvise |"))
        .expect("round 0");
    // Three topics, each in one extent, scanned (closed cleanly, not sealed).
    assert!(round.contains("| 3 | 0 | 3 |"), "{round}");
    assert!(stdout.contains("median: open "), "{stdout}");
    let left = std::fs::read_dir(dir.path()).expect("read dir").count();
    assert_eq!(left, 0, "the scratch log is removed");
}

//! `append_stalls` end to end with a tiny budget: both modes run and the ratios come out;
//! bad input is refused.

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_append_stalls"))
        .args(args)
        .output()
        .expect("run append_stalls")
}

#[test]
fn one_round_of_each_mode_prints_rates_and_the_ratio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let out = run(&["--dir", dir_arg, "--rounds", "1", "--seconds", "0.05"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rounds: Vec<&str> = stdout.lines().filter(|l| l.starts_with("| 0 |")).collect();
    assert_eq!(rounds.len(), 2, "{stdout}");
    assert!(rounds[0].contains("| shared |") && rounds[1].contains("| exclusive |"));
    let ratio = stdout
        .lines()
        .find_map(|l| l.strip_prefix("shared over exclusive: records/s "))
        .expect("the ratio line");
    let x: f64 = ratio
        .split('x')
        .next()
        .unwrap_or("")
        .parse()
        .expect("a ratio");
    assert!(x > 0.0, "{ratio}");
    // Each round's log is removed after it.
    let left = std::fs::read_dir(dir.path()).expect("read dir").count();
    assert_eq!(left, 0);
}

#[test]
fn a_bad_budget_is_refused() {
    for args in [["--seconds", "0"], ["--rounds", "0"]] {
        let out = run(&args);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("must be"));
    }
}

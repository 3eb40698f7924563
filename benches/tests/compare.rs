//! The comparison benchmark (`tidelog-bench`, which `tidelog bench` runs) end to end on a
//! tiny budget: its JSON, its files and its bad input.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidelog-bench"))
        .args(args)
        .output()
        .expect("run tidelog-bench")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One round of 100 B records, 50 ms and at most 1 MiB per row, no producers: seconds.
const TINY: [&str; 13] = [
    "--sizes",
    "100",
    "--threads",
    "1",
    "--rounds",
    "1",
    "--seconds",
    "0.05",
    "--max-bytes",
    "1048576",
    "--python",
    "none",
    "--walrus",
];

#[test]
fn a_tiny_run_reports_ceilings_rows_and_ratios() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let scratch = tmp.path().to_str().expect("utf-8");
    let results = tmp.path().join("results");
    let mut args = TINY.to_vec();
    let results_arg = results.to_str().expect("utf-8");
    args.extend([
        "none",
        "--only",
        "fsync never",
        "--dir",
        scratch,
        "--out",
        results_arg,
        "--json",
    ]);
    let out = bench(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = report["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows
        .iter()
        .filter(|r| r["kind"] == "ceiling")
        .filter_map(|r| r["system"].as_str())
        .collect();
    for ceiling in [
        "mmap write",
        "buffered write",
        "write+fdatasync per record",
        "write+fdatasync per batch",
        "page-cache read",
        "memcpy",
    ] {
        assert!(names.contains(&ceiling), "{ceiling} missing from {names:?}");
    }
    // --only keeps the one mmap row in `Never` mode (and its read-back is not asked for).
    let ours: Vec<&serde_json::Value> = rows.iter().filter(|r| r["kind"] == "tidelog").collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    let row = ours[0];
    assert_eq!(row["class"], "D0");
    assert!(row["records_per_s"].as_f64().expect("rate") > 0.0);
    assert_eq!(row["ceiling_name"], "mmap write");
    assert!(row["ratio_ceiling"].as_f64().expect("ratio") > 0.0);
    let notes = report["notes"].as_array().expect("notes");
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.contains("walrus peer left out"))),
        "{notes:?}"
    );
    assert!(results.join("results.json").is_file());
    let md = std::fs::read_to_string(results.join("results.md")).expect("markdown");
    assert!(
        md.contains("### Ceilings") && md.contains("mmap, fsync never"),
        "{md}"
    );
    // The scratch directory is removed.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "results")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn append_to_visible_rows_report_latencies_against_the_pipe() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let scratch = tmp.path().to_str().expect("utf-8");
    let mut args = TINY.to_vec();
    args.extend([
        "none",
        "--only",
        "append to visible",
        "--dir",
        scratch,
        "--json",
    ]);
    let out = bench(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = report["rows"].as_array().expect("rows");
    let pipe = rows
        .iter()
        .find(|r| r["kind"] == "ceiling" && r["system"] == "pipe wake-up")
        .expect("the pipe baseline");
    assert!(pipe["p99_us"].as_f64().expect("p99") > 0.0, "{pipe}");
    let ours: Vec<&serde_json::Value> = rows.iter().filter(|r| r["kind"] == "tidelog").collect();
    assert_eq!(ours.len(), 3, "{ours:?}");
    for row in ours {
        assert_eq!(row["op"], "visible", "{row}");
        assert!(row.get("skipped").is_none(), "{row}");
        // --seconds 0.05 at one append per 200 us: 250 timed samples.
        assert_eq!(row["records"], 250, "{row}");
        let p50 = row["p50_us"].as_f64().expect("p50");
        assert!(
            p50 > 0.0 && p50 <= row["p99_us"].as_f64().expect("p99"),
            "{row}"
        );
        assert_eq!(row["ceiling_name"], "pipe wake-up", "{row}");
        assert!(
            row["ratio_ceiling_p50"].as_f64().expect("ratio") > 0.0,
            "{row}"
        );
        assert!(
            row["ratio_ceiling_p99"].as_f64().expect("ratio") > 0.0,
            "{row}"
        );
    }
    // Their directories and the scratch directory are removed.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn many_processes_rows_report_aggregate_rates_against_their_baselines() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let scratch = tmp.path().to_str().expect("utf-8");
    let mut args = TINY.to_vec();
    args.extend([
        "none",
        "--only",
        "many processes",
        "--dir",
        scratch,
        "--json",
    ]);
    let out = bench(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = report["rows"].as_array().expect("rows");
    for (name, processes) in [
        ("write+fdatasync per record, 1 process", 1),
        ("write+fdatasync per record, 8 processes", 8),
    ] {
        let fsync = rows
            .iter()
            .find(|r| r["kind"] == "ceiling" && r["system"] == name)
            .expect("the fdatasync baselines");
        assert!(
            fsync["records_per_s"].as_f64().expect("rate") > 0.0,
            "{fsync}"
        );
        assert_eq!(fsync["threads"], processes, "{fsync}");
    }
    let ours: Vec<&serde_json::Value> = rows.iter().filter(|r| r["kind"] == "tidelog").collect();
    assert_eq!(ours.len(), 5, "{ours:?}");
    let mut held = 0;
    for row in &ours {
        assert_eq!(row["op"], "processes", "{row}");
        assert!(row.get("skipped").is_none(), "{row}");
        assert!(row["records_per_s"].as_f64().expect("rate") > 0.0, "{row}");
        let config = row["config"].as_str().expect("config");
        let procs = row["threads"].as_u64().expect("processes");
        let expected = if config.contains("exclusive") {
            assert_eq!(procs, 1, "{row}");
            None
        } else if procs == 1 {
            Some("many processes: 1 process, exclusive mode, fsync interval")
        } else if procs == 4 {
            Some("many processes: 1 process, shared mode (the default), fsync interval")
        } else {
            assert!(config.contains("fsync always"), "{row}");
            Some("write+fdatasync per record, 1 process")
        };
        assert_eq!(row["ceiling_name"].as_str(), expected, "{row}");
        if expected.is_some() {
            held += 1;
            assert!(row["ratio_ceiling"].as_f64().expect("ratio") > 0.0, "{row}");
        }
    }
    assert_eq!(held, 4);
    // Their directories and the scratch directory are removed.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_killed_runs_scratch_is_removed_by_the_next_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // No process has this id (above the kernel's pid_max ceiling of 2^22).
    let stale = tmp.path().join("tidelog-bench-4194305");
    std::fs::create_dir_all(stale.join("round-0")).expect("mkdir");
    let unrelated = tmp.path().join("tidelog-bench-notes");
    std::fs::create_dir(&unrelated).expect("mkdir");
    let mut args = TINY.to_vec();
    let scratch = tmp.path().to_str().expect("utf-8");
    args.extend(["none", "--only", "fsync never", "--dir", scratch, "--json"]);
    let out = bench(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!stale.exists());
    assert!(unrelated.is_dir());
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    for (args, expect) in [
        (vec!["--sizes", "0"], "--sizes"),
        (vec!["--sizes", "2097152"], "--sizes"),
        (vec!["--rounds", "0"], "--rounds"),
        (vec!["--seconds", "0"], "--seconds"),
        (vec!["--threads", "0"], "--threads"),
        (
            vec!["--dir", "/nonexistent/tidelog-bench"],
            "not a directory",
        ),
    ] {
        let out = bench(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

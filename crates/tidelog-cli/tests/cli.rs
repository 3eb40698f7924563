//! The `tidelog` command end to end: each subcommand, its JSON, and its bad-input errors.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn tidelog(args: &[&str], stdin: &str) -> Output {
    tidelog_bytes(args, stdin.as_bytes())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn dir_arg(dir: &Path) -> String {
    dir.display().to_string()
}

#[test]
fn produce_consume_dump_stat_verify() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = dir_arg(&tmp.path().join("log"));
    let out = tidelog(
        &["produce", &dir, "orders", "--fsync", "always"],
        "a\nbb\nccc\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "appended 3 records to orders (offsets 0..3)\n"
    );

    let out = tidelog(
        &[
            "consume", &dir, "orders", "--group", "billing", "--limit", "2",
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "a\nbb\n");
    let out = tidelog(
        &[
            "consume",
            &dir,
            "orders",
            "--group",
            "billing",
            "--from",
            "committed",
        ],
        "",
    );
    assert_eq!(text(&out.stdout), "ccc\n");
    let out = tidelog(&["consume", &dir, "orders", "--from", "1", "--json"], "");
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("{\"offset\":1,"), "{}", lines[0]);
    assert!(
        lines[0].ends_with("\"key\":null,\"value\":\"bb\"}"),
        "{}",
        lines[0]
    );

    let out = tidelog(&["dump", &dir, "--json"], "");
    assert!(out.status.success());
    let dump = text(&out.stdout);
    assert_eq!(dump.lines().count(), 3);
    assert!(dump.contains("\"offset\":2,") && dump.contains("\"value_bytes\":3,"));
    assert!(dump.contains("\"file\":\"00000000000000000000.tdl\""));
    let out = tidelog(&["dump", &dir, "--topic", "orders", "--from", "2"], "");
    assert!(
        text(&out.stdout).contains("offset 2 "),
        "{}",
        text(&out.stdout)
    );

    let out = tidelog(&["stat", &dir, "--json"], "");
    let stat = text(&out.stdout);
    assert!(
        stat.contains("\"topic\":\"orders\",\"first_offset\":0,\"next_offset\":3"),
        "{stat}"
    );
    assert!(
        stat.contains("{\"group\":\"billing\",\"committed\":3,\"lag\":0}"),
        "{stat}"
    );
    let out = tidelog(&["stat", &dir], "");
    assert!(text(&out.stdout).contains("group billing: committed 3, lag 0"));

    let out = tidelog(&["verify", &dir], "");
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(text(&out.stdout).starts_with("ok: 1 topics, 3 records checked"));
}

#[test]
fn verify_names_a_corrupt_record_and_fails() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let values: String = (0..50).map(|i| format!("value-{i:04}\n")).collect();
    let out = tidelog(
        &["produce", &dir_arg(&dir), "t", "--fsync", "always"],
        &values,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Flip a byte inside record 20's value: find it through dump.
    let out = tidelog(
        &[
            "dump",
            &dir_arg(&dir),
            "--from",
            "20",
            "--limit",
            "1",
            "--json",
        ],
        "",
    );
    let line = text(&out.stdout);
    let position: u64 = line
        .split("\"position\":")
        .nth(1)
        .and_then(|p| p.trim_end_matches(['}', '\n']).parse().ok())
        .expect("a position");
    let file = dir.join("00000000000000000000.tdl");
    let mut bytes = std::fs::read(&file).expect("read");
    bytes[position as usize] ^= 0xFF;
    std::fs::write(&file, &bytes).expect("write");
    let out = tidelog(&["verify", &dir_arg(&dir)], "");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let report = text(&out.stdout);
    assert!(
        report.contains("corrupt:") && report.contains("20"),
        "{report}"
    );
    let out = tidelog(&["verify", &dir_arg(&dir), "--json"], "");
    assert!(text(&out.stdout).contains("\"ok\":false"));
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = dir_arg(&tmp.path().join("missing"));
    for args in [
        vec!["stat", missing.as_str()],
        vec!["verify", missing.as_str()],
        vec!["dump", missing.as_str()],
        vec!["consume", missing.as_str(), "t"],
    ] {
        let out = tidelog(&args, "");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("not a directory"), "{err}");
    }
    let dir = tmp.path().join("log");
    let out = tidelog(&["produce", &dir_arg(&dir), "t"], "x\n");
    assert!(out.status.success());
    let out = tidelog(&["consume", &dir_arg(&dir), "nosuch"], "");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "tidelog: unknown topic \"nosuch\"\n");
    let out = tidelog(&["consume", &dir_arg(&dir), "t", "--from", "soon"], "");
    assert_eq!(out.status.code(), Some(2));
    let out = tidelog(&["produce", &dir_arg(&dir), "bad/topic"], "x\n");
    assert_eq!(out.status.code(), Some(2));
    // A directory another handle holds for writing.
    let holder = tidelog::Wal::open_with(&dir, tidelog::Config::default().exclusive(true))
        .expect("hold the directory");
    let out = tidelog(&["produce", &dir_arg(&dir), "t"], "y\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("in use"),
        "{}",
        text(&out.stderr)
    );
    // Reading needs no lock.
    let out = tidelog(&["consume", &dir_arg(&dir), "t"], "");
    assert_eq!(text(&out.stdout), "x\n");
    drop(holder);
}

fn tidelog_bytes(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidelog"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tidelog");
    // A command that fails early closes its stdin: its exit status is what counts.
    let _ = child.stdin.take().expect("stdin").write_all(stdin);
    child.wait_with_output().expect("wait")
}

#[test]
fn produce_takes_binary_lines_and_length_prefixed_records() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = dir_arg(&tmp.path().join("log"));
    // Lines are bytes, not text: invalid UTF-8 and a last line without a newline.
    let out = tidelog_bytes(&["produce", &dir, "raw"], b"\xff\xfe\nlast");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut input = Vec::new();
    for value in [&b"with\nnewline"[..], b"", &[0u8; 300][..]] {
        input.extend_from_slice(&(value.len() as u32).to_le_bytes());
        input.extend_from_slice(value);
    }
    let out = tidelog_bytes(
        &["produce", &dir, "framed", "--format", "length-prefixed"],
        &input,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "appended 3 records to framed (offsets 0..3)\n"
    );
    let out = tidelog(&["dump", &dir, "--topic", "framed", "--json"], "");
    let sizes: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| {
            l.split("\"value_bytes\":")
                .nth(1)
                .and_then(|v| v.split(',').next())
                .expect("value_bytes")
                .to_owned()
        })
        .collect();
    assert_eq!(sizes, ["12", "0", "300"]);
    let out = tidelog(&["dump", &dir, "--topic", "raw", "--json"], "");
    assert!(text(&out.stdout).contains("\"value_bytes\":2,"));
    assert!(text(&out.stdout).contains("\"value_bytes\":4,"));

    // A record cut short is bad input, and names what is missing.
    let mut cut = 10u32.to_le_bytes().to_vec();
    cut.extend_from_slice(b"abc");
    let out = tidelog_bytes(
        &["produce", &dir, "framed", "--format", "length-prefixed"],
        &cut,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "tidelog: input ends inside a record of 10 bytes\n"
    );
    let out = tidelog_bytes(
        &["produce", &dir, "framed", "--format", "length-prefixed"],
        &[1, 0],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("length prefix"));
}

#[test]
fn stat_lists_staged_jobs_not_yet_published() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    tidelog::Wal::open(&dir)
        .expect("open")
        .close()
        .expect("close");
    let mut part = tidelog::StagedWriter::create(&dir, "job-7", "p0").expect("stage");
    part.append("t", &[tidelog::Append::value(b"v")])
        .expect("append");
    part.finish().expect("finish");
    let out = tidelog(&["stat", &dir_arg(&dir)], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("staged job job-7: not committed, 1 parts,"),
        "{}",
        text(&out.stdout)
    );
    tidelog::stage::commit(&dir, "job-7", &["p0"]).expect("commit");
    let out = tidelog(&["stat", &dir_arg(&dir), "--json"], "");
    assert!(
        text(&out.stdout).contains(
            "\"staged\":[{\"job\":\"job-7\",\"committed\":true,\"publishing\":false,\"parts\":1,"
        ),
        "{}",
        text(&out.stdout)
    );
}

/// `tidelog bench` hands everything after `bench` to `tidelog-bench` when a build put it
/// next to `tidelog`; without it, it says in one line how to get it. Either way a bad
/// option is one line and exit 2, and nothing is measured.
#[test]
fn bench_runs_the_benchmark_beside_it_or_says_how_to() {
    let beside = Path::new(env!("CARGO_BIN_EXE_tidelog"))
        .with_file_name("tidelog-bench")
        .is_file();
    let out = tidelog(&["bench", "--sizes", "0"], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let expect = if beside {
        "--sizes"
    } else {
        "scripts/bench.sh"
    };
    assert!(err.contains(expect), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn stat_names_the_housekeeping_leader_of_a_shared_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let config = tidelog::Config::default().sync_interval_ms(10);
    let wal = tidelog::Wal::open_with(&dir, config).expect("open");
    wal.append("t", b"x").expect("append");
    let start = std::time::Instant::now();
    while wal.leader().is_none_or(|l| l.pid != std::process::id()) {
        assert!(start.elapsed().as_secs() < 30, "this process never led");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let dir = dir_arg(&dir);
    let out = tidelog(&["stat", &dir, "--json"], "");
    let stat = text(&out.stdout);
    let want = format!("\"leader\":{{\"pid\":{},", std::process::id());
    assert!(stat.contains(&want), "{stat}");
    let out = tidelog(&["stat", &dir], "");
    let want = format!("housekeeping leader: pid {}, epoch ", std::process::id());
    assert!(text(&out.stdout).contains(&want), "{}", text(&out.stdout));
    wal.close().expect("close");
}

#[test]
fn groups_lists_resets_and_deletes_cursors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = dir_arg(&tmp.path().join("log"));
    let ok = |args: &[&str]| {
        let out = tidelog(args, "");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let out = tidelog(
        &["produce", &dir, "t", "--fsync", "always"],
        "a\nb\nc\nd\ne\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(ok(&["groups", &dir]), "no consumer groups\n");
    ok(&["consume", &dir, "t", "--group", "g", "--limit", "2"]);
    assert_eq!(ok(&["groups", &dir]), "t g: committed 2, next 5, lag 3\n");
    assert_eq!(
        ok(&["groups", &dir, "--json"]),
        "{\"groups\":[{\"topic\":\"t\",\"group\":\"g\",\"committed\":2,\"next_offset\":5,\"lag\":3}]}\n"
    );
    let reset = |to: &[&str]| {
        let mut args = vec![
            "groups",
            dir.as_str(),
            "reset",
            "--topic",
            "t",
            "--group",
            "g",
        ];
        args.extend_from_slice(to);
        ok(&args)
    };
    assert_eq!(reset(&["--to-latest"]), "t g: committed 2 -> 5\n");
    assert_eq!(reset(&["--to-earliest"]), "t g: committed 5 -> 0\n");
    assert_eq!(reset(&["--to-offset", "3"]), "t g: committed 0 -> 3\n");
    // Every record was appended now: a time long past is the first, one to come the end.
    assert_eq!(
        reset(&["--to-datetime", "2001-01-01T00:00:00Z"]),
        "t g: committed 3 -> 0\n"
    );
    assert_eq!(
        reset(&["--to-datetime", "2999-01-01T00:00:00+02:00"]),
        "t g: committed 0 -> 5\n"
    );
    assert_eq!(
        ok(&[
            "groups",
            &dir,
            "reset",
            "--topic",
            "t",
            "--group",
            "g",
            "--to-offset",
            "1",
            "--json"
        ]),
        "{\"topic\":\"t\",\"group\":\"g\",\"before\":5,\"committed\":1}\n"
    );
    // Mistakes: one line, exit 2.
    let reset_g = [
        "groups",
        dir.as_str(),
        "reset",
        "--topic",
        "t",
        "--group",
        "g",
    ];
    for args in [
        reset_g.to_vec(),
        [&reset_g[..], &["--to-offset", "9"]].concat(),
        [&reset_g[..], &["--to-datetime", "soon"]].concat(),
        [&reset_g[..], &["--to-latest", "--to-earliest"]].concat(),
        vec![
            "groups",
            dir.as_str(),
            "delete",
            "--topic",
            "t",
            "--group",
            "nope",
        ],
        vec![
            "groups",
            dir.as_str(),
            "reset",
            "--topic",
            "nope",
            "--group",
            "g",
            "--to-latest",
        ],
    ] {
        let out = tidelog(&args, "");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).trim().is_empty(), "{args:?}");
    }
    // No target: the error names each one, not only the first.
    let missing = text(&tidelog(&reset_g, "").stderr);
    for to in [
        "--to-offset",
        "--to-earliest",
        "--to-latest",
        "--to-datetime",
    ] {
        assert!(missing.contains(to), "{to}: {missing}");
    }
    assert_eq!(
        ok(&["groups", &dir, "delete", "--topic", "t", "--group", "g"]),
        "t g: deleted\n"
    );
    assert_eq!(ok(&["groups", &dir]), "no consumer groups\n");
}

#[test]
fn dump_shows_headers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    {
        let wal = tidelog::Wal::open(&dir).expect("open");
        let h = tidelog::Headers::from_pairs([
            ("trace", Some(&b"t-1"[..])),
            ("raw", Some(&[0xFF, 0x00][..])),
            ("gone", None),
        ])
        .expect("valid");
        let rec = tidelog::Append {
            key: None,
            value: b"v",
            timestamp_us: None,
            headers: h.block(),
        };
        wal.append_record("t", rec).expect("append");
        wal.append("t", b"plain").expect("append");
        wal.close().expect("close");
    }
    let out = tidelog(&["dump", &dir_arg(&dir)], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dump = text(&out.stdout);
    assert!(
        dump.contains("headers [\"trace\"=\"t-1\", \"raw\"=0xff00, \"gone\"=null]"),
        "{dump}"
    );
    let out = tidelog(&["dump", &dir_arg(&dir), "--json"], "");
    let dump = text(&out.stdout);
    assert!(
        dump.contains(
            "\"headers\":[{\"key\":\"trace\",\"value\":\"t-1\"},{\"key\":\"raw\",\"value_hex\":\"ff00\"},{\"key\":\"gone\",\"value\":null}]"
        ),
        "{dump}"
    );
    assert!(dump.contains("\"headers\":[],"), "{dump}");
}

#[test]
fn delete_records_moves_the_first_offset() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = dir_arg(&tmp.path().join("log"));
    let values: String = (0..20).map(|i| format!("v{i}\n")).collect();
    let out = tidelog(&["produce", &dir, "t", "--fsync", "always"], &values);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = tidelog(
        &["delete-records", &dir, "--topic", "t", "--before", "12"],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "t: records below 12 deleted\n");
    let out = tidelog(&["consume", &dir, "t", "--from", "earliest"], "");
    assert_eq!(text(&out.stdout).lines().next(), Some("v12"));
    let out = tidelog(
        &[
            "delete-records",
            &dir,
            "--topic",
            "t",
            "--before",
            "5",
            "--json",
        ],
        "",
    );
    assert_eq!(text(&out.stdout), "{\"topic\":\"t\",\"first_offset\":12}\n");
    // Past the end, or an unknown topic: an error naming it, exit status non-zero.
    let out = tidelog(
        &["delete-records", &dir, "--topic", "t", "--before", "99"],
        "",
    );
    assert!(!out.status.success());
    let out = tidelog(
        &["delete-records", &dir, "--topic", "nope", "--before", "1"],
        "",
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("nope"), "{}", text(&out.stderr));
}

/// `consume --json` keeps every byte: a key or value that is not UTF-8 goes as hex
/// (`key_hex`, `value_hex`), so two different values never print the same.
#[test]
fn consume_json_gives_bytes_that_are_not_utf8_as_hex() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let wal = tidelog::Wal::open(dir.path()).expect("open");
        wal.append("t", &[0xff, 0xfe]).expect("append");
        wal.append("t", &[0xfe, 0xff]).expect("append");
        let keyed = tidelog::Append {
            key: Some(&[0x80]),
            ..tidelog::Append::value(b"text")
        };
        wal.append_record("t", keyed).expect("append");
    }
    let out = tidelog(&["consume", &dir_arg(dir.path()), "t", "--json"], "");
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].ends_with("\"key\":null,\"value_hex\":\"fffe\"}"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].ends_with("\"key\":null,\"value_hex\":\"feff\"}"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].ends_with("\"key_hex\":\"80\",\"value\":\"text\"}"),
        "{}",
        lines[2]
    );
}

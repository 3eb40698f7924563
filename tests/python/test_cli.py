"""The `tidelog` command as the wheel installs it: a console script running the Rust CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tidelog


def tidelog_script() -> str:
    # The scripts directory of this interpreter first: PATH may hold another install.
    for candidate in (Path(sysconfig.get_path("scripts")) / "tidelog", shutil.which("tidelog")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("the tidelog console script is not installed (pip install .)")


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tidelog_script(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_version_and_help() -> None:
    out = run("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"tidelog {tidelog.__version__}"
    out = run("--help")
    assert out.returncode == 0
    for sub in ("produce", "consume", "dump", "stat", "verify", "bench"):
        assert sub in out.stdout


def test_produce_then_read_with_the_python_api(tmp_path: Path) -> None:
    out = run("produce", str(tmp_path / "log"), "orders", "--json", stdin="a\nbb\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "topic": "orders",
        "records": 2,
        "first_offset": 0,
        "next_offset": 2,
    }
    with tidelog.open(tmp_path / "log", readonly=True) as wal:
        assert [bytes(r) for r in wal.reader("orders", start="earliest")] == [b"a", b"bb"]


def test_stat_of_a_directory_written_from_python(tmp_path: Path) -> None:
    with tidelog.open(tmp_path / "log") as wal:
        wal.append_batch("clicks", [b"x"] * 10)
    out = run("stat", str(tmp_path / "log"), "--json")
    assert out.returncode == 0, out.stderr
    topics = json.loads(out.stdout)["topics"]
    assert [(t["topic"], t["next_offset"], t["durable_offset"]) for t in topics] == [
        ("clicks", 10, 10)
    ]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = run("stat", str(tmp_path / "missing"))
    assert out.returncode == 2
    assert out.stderr.strip() == f"tidelog: {tmp_path / 'missing'} is not a directory"
    assert "Traceback" not in out.stderr


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    with tidelog.open(tmp_path / "log") as wal:
        wal.append_batch("t", [b"v" * 100] * 20_000)
    # `tidelog dump DIR | head -1`: the reader goes away early.
    proc = subprocess.Popen(
        [tidelog_script(), "dump", str(tmp_path / "log")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert first.startswith(b"topic t:")
    assert b"Traceback" not in err and b"panicked" not in err


def test_the_cli_function_is_the_same_command() -> None:
    from tidelog._native import cli

    assert cli(["tidelog", "stat", "/nonexistent-tidelog-dir"]) == 2
    assert sys.modules["tidelog._native"].cli is cli


def test_bench_is_not_in_the_wheel_and_says_how_to_run_it() -> None:
    for args in (["bench", "--quick"], ["bench", "--help"]):
        out = run(*args)
        assert out.returncode == 2, out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "scripts/bench.sh" in lines[0], out.stderr
        assert out.stdout == ""


def flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 1]))


def test_verify_fails_on_a_cursor_with_no_valid_slot(tmp_path: Path) -> None:
    """Both slots of a group's cursor damaged: the group's reader raises `CorruptionError`,
    and `verify` names it and exits 1 (it said "ok" before)."""
    with tidelog.open(tmp_path) as wal:
        wal.append_batch("t", [b"x%d" % i for i in range(10)])
        with wal.reader("t", "g", start="earliest") as reader:
            reader.next_batch(5)
            reader.commit()
    # The crc field of each slot (FORMAT.md, "Cursor file": two slots of 1024 bytes).
    for slot_at in (0, 1024):
        flip(tmp_path / "cursors" / "t@g.cur", slot_at + 8)
    with tidelog.open(tmp_path, readonly=True) as ro, pytest.raises(tidelog.CorruptionError):
        ro.reader("t", "g")
    out = run("verify", str(tmp_path))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "group g" in out.stdout and "CORRUPT" in out.stdout


def test_verify_fails_on_a_staged_job_set_aside(tmp_path: Path) -> None:
    """A committed job whose segment fails its checks is reported by `verify` (exit 1)
    before its publish, and after the next writable open has set it aside (never published
    in part)."""
    with tidelog.open(tmp_path) as wal:
        wal.append("alpha", b"a")
    writer = tidelog.StagedWriter(tmp_path, "job1", "p0")
    for i in range(30):
        writer.append("st", b"v%d" % i * 20)
    writer.finish()
    tidelog.stage_commit(tmp_path, "job1", ["p0"])
    # The first batch frame of the segment's first extent (after the file and block headers).
    flip(tmp_path / "staging" / "job1" / "p0.0.seg", 4096 + 4096 + 20)
    # Committed, not published yet: checked as its publish will check it.
    out = run("verify", str(tmp_path))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "staged job job1 is committed, but its bytes fail" in out.stdout
    tidelog.open(tmp_path).close()
    with pytest.raises(tidelog.InvalidArgumentError):
        tidelog.stage_wait(tmp_path, "job1", timeout=5)
    out = run("verify", str(tmp_path))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "staged job job1 is set aside" in out.stdout

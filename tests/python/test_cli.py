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

"""The type stubs match the compiled module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tidelog._native

ALLOWLIST = Path(__file__).resolve().parent / "stubtest-allowlist.txt"


def test_stubtest_agrees_with_the_native_module(tmp_path: Path) -> None:
    # stubtest imports the module and compares every name, signature and property with
    # the .pyi next to it. The allowlist names what CPython 3.11 shows only as C slots.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "tidelog._native",
            "--allowlist",
            str(ALLOWLIST),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, f"stubtest failed:\n{proc.stdout}\n{proc.stderr}"


def test_stub_file_ships_next_to_the_module() -> None:
    package = Path(tidelog._native.__file__).parent
    assert (package / "_native.pyi").is_file()
    assert (package / "py.typed").is_file()


# Typical user code: what the stubs promise must type-check on every supported Python.
USER_CODE = """
import tidelog


def use(path: str) -> bytes:
    with tidelog.open(path, fsync="never", block_size=65536) as wal:
        offset: int = wal.append("t", b"value", key=bytearray(b"k"), timestamp=1)
        batch: range = wal.append_batch("t", [b"a", memoryview(b"b")])
        rec = wal.read("t", offset)
        # A Record is a buffer: these are the documented ways to use one.
        copied = bytes(rec)
        view = memoryview(rec)
        wal.append("copy", rec)
        with wal.reader("t", "group", start="earliest") as reader:
            for r in reader:
                copied += bytes(r.value)
            reader.commit()
        try:
            wal.read("t", batch.stop)
        except tidelog.OffsetOutOfRangeError as exc:
            copied += str(exc.next).encode()
        return copied + view.tobytes()


def use_ring(path: str) -> int:
    with tidelog.RingWal(path, 1 << 20, direct_io="auto", io_engine="threads") as ring:
        handle = ring.append(memoryview(b"x"), space_timeout=1.0)
        flushed: int | None = handle.wait(timeout=1.0)
        pairs: list[tuple[int, bytes]] = list(ring.recover())
        ring.trim(handle.offset)
        try:
            ring.append(b"y")
        except tidelog.RingFullError as exc:
            return exc.free_bytes
        return (flushed or 0) + len(pairs) + ring.recovery.records
"""


@pytest.mark.parametrize("python_version", ["3.11", "3.12"])
def test_user_code_type_checks(tmp_path: Path, python_version: str) -> None:
    source = tmp_path / "user.py"
    source.write_text(USER_CODE)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-version",
            python_version,
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, f"mypy ({python_version}) failed:\n{proc.stdout}\n{proc.stderr}"

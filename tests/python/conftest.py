"""Shared fixtures and helpers for the tidelog Python tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tidelog

BLOCK = 64 * 1024
BLOCKS_PER_FILE = 8
# A data file is a 4096-byte header page plus whole blocks.
FILE_SIZE = 4096 + BLOCKS_PER_FILE * BLOCK
# Small geometry so a few hundred records span several blocks and files.
SMALL: dict[str, Any] = {"block_size": BLOCK, "file_size": FILE_SIZE}
# How long background work (file deletion) may take before a test gives up.
DEADLINE_S = 10.0


def open_small(path: str | os.PathLike[str], **options: Any) -> tidelog.Wal:
    """Opens `path` with the small test geometry (options override it)."""
    return tidelog.open(path, **{**SMALL, **options})


@pytest.fixture
def wal(tmp_path: Path) -> Iterator[tidelog.Wal]:
    """A writable Wal on a fresh directory, closed after the test."""
    handle = open_small(tmp_path / "wal")
    try:
        yield handle
    finally:
        if not handle.closed:
            handle.close()


def data_files(path: str | os.PathLike[str]) -> list[Path]:
    """The data files of a log directory, oldest first (names are zero-padded sequences)."""
    return sorted(p for p in Path(path).iterdir() if p.suffix == ".tdl")


def wait_until(predicate: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    """Polls `predicate` until it holds; background threads do deletions asynchronously."""
    end = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def payload(i: int, size: int) -> bytes:
    """Deterministic, record-specific bytes, so a misplaced read is caught."""
    seed = f"{i:08d}|".encode()
    return (seed * (size // len(seed) + 1))[:size]


def run_python(code: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter: a crash (SIGSEGV, SIGBUS) shows as a negative
    return code there instead of killing the test run."""
    repo_root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=repo_root,
        env=env,
        check=False,
    )

"""Shared fixtures and helpers for the tidelog Python tests."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import tidelog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BLOCK = 64 * 1024
BLOCKS_PER_FILE = 8
# A data file is a 4096-byte header page plus whole blocks.
FILE_SIZE = 4096 + BLOCKS_PER_FILE * BLOCK
# Small geometry so a few hundred records span several blocks and files.
SMALL: dict[str, Any] = {"block_size": BLOCK, "file_size": FILE_SIZE}
# How long background work (file deletion) may take before a test gives up.
DEADLINE_S = 10.0


# Ring capacity for tests on the ring backend: small, so tests also wrap it and fill it.
RING_CAPACITY = 16 << 20
# The backend `open_small` uses; the `backend` fixture switches it for one test (and, through
# the environment, for the Python children the test starts).
BACKEND_ENV = "TIDELOG_TEST_BACKEND"
BACKEND = {"name": os.environ.get(BACKEND_ENV, "mmap")}


def backend_options() -> dict[str, Any]:
    """The `tidelog.open` options of the backend under test."""
    if BACKEND["name"] == "ring":
        return {"backend": "ring", "capacity": RING_CAPACITY}
    return {}


def open_small(path: str | os.PathLike[str], **options: Any) -> tidelog.Wal:
    """Opens `path` with the small test geometry (options override it), on the backend
    under test (read-only handles read the data files alone)."""
    if options.get("readonly"):
        return tidelog.open(path, **{**SMALL, **options})
    return tidelog.open(path, **{**SMALL, **backend_options(), **options})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mmap_only(reason): the test checks the data files of the mmap backend "
        "(runs once, not on the ring backend)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Runs every test of a module that uses the `backend` fixture on both backends, except
    those marked `mmap_only`."""
    if "backend" in metafunc.fixturenames:
        only_mmap = metafunc.definition.get_closest_marker("mmap_only") is not None
        metafunc.parametrize("backend", ["mmap"] if only_mmap else ["mmap", "ring"], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The backend `open_small` (and the `wal` fixture) use in this test."""
    BACKEND["name"] = request.param
    os.environ[BACKEND_ENV] = request.param
    try:
        yield request.param
    finally:
        BACKEND["name"] = "mmap"
        del os.environ[BACKEND_ENV]


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for the test (KeyboardInterrupt), whatever an earlier
    library call left installed (a full run once found SIGINT ignored by the time of the
    ring's interrupt tests); the previous handler comes back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One small local Spark session for every Spark test (starting one costs seconds);
    pyspark is imported only when a test asks for it."""
    from tidelog.spark import local_session

    # local[N, maxFailures]: a failed task is retried once, as on a cluster (plain local[2]
    # never retries); the write tests inject such a failure.
    session = local_session(
        "tidelog-tests",
        "local[2,2]",
        {
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            # The JVM runs briefly: a cheap JIT and GC start faster.
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        },
    )
    try:
        yield session
    finally:
        session.stop()


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


def kill_after_first_line(code: str, *args: str, delay_s: float) -> list[str]:
    """Runs `code` in a fresh interpreter, SIGKILLs it `delay_s` after its first complete
    output line (a crash at a random moment of its work) and returns its complete lines: a
    torn last line was never a complete acknowledgement."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    out = b""
    try:
        deadline = time.monotonic() + 30.0
        while b"\n" not in out:
            left = deadline - time.monotonic()
            assert left > 0, "the child printed nothing"
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                assert chunk, "the child exited before its first line"
                out += chunk
        time.sleep(delay_s)
    finally:
        proc.kill()
        rest, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    return (out + rest).decode().split("\n")[:-1]


# A loop device.

LOOP_DEVICE_BYTES = 64 << 20


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[str]:
    """A loop device (4096-byte sectors, direct I/O) over a LOOP_DEVICE_BYTES image, detached
    afterwards; skips where this machine cannot attach one (not root, no losetup)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to attach a loop device")
    if shutil.which("losetup") is None:
        pytest.skip("no losetup")
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.truncate(LOOP_DEVICE_BYTES)
    proc = subprocess.run(
        ["losetup", "-f", "--show", "--direct-io=on", "--sector-size", "4096", str(image)],
        capture_output=True,
        text=True,
        check=False,
    )
    device = proc.stdout.strip()
    if proc.returncode != 0 or not device.startswith("/dev/"):
        pytest.skip(f"losetup could not attach a loop device: {proc.stderr.strip()}")
    try:
        yield device
    finally:
        subprocess.run(["losetup", "-d", device], check=False)

"""The main job (the README's first command runs it at full size) at a small size, and its
cluster variant through a local S3 server. Both start when the first of these tests does and
run side by side (each spends most of its time waiting on its own Spark's start-up and
Python workers); each test then waits for its own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ORDERS = "20000"
TIMEOUT_S = 300


class Run:
    """One example script running in its own process, its output in files."""

    def __init__(self, work: Path, script: str, target: str) -> None:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        work.mkdir(parents=True)
        self.out_path, self.err_path = work / "stdout", work / "stderr"
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, script, str(work / target), "--orders", ORDERS],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=err,
                text=True,
            )

    def finish(self) -> str:
        """Waits for the script; its stdout, after checking it succeeded."""
        returncode = self.proc.wait(timeout=TIMEOUT_S)
        out, err = self.out_path.read_text(), self.err_path.read_text()
        assert returncode == 0, out[-3000:] + err[-3000:]
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    base = tmp_path_factory.mktemp("examples")
    started = {
        "local": Run(base / "local", "examples/spark_pipeline.py", "data"),
        "cluster": Run(base / "cluster", "examples/spark_cluster_pipeline.py", "work"),
    }
    try:
        yield started
    finally:
        for run in started.values():
            run.stop()


def test_spark_pipeline_runs_and_checks_its_results(runs: dict[str, Run]) -> None:
    out = runs["local"].finish()
    assert "produced 20,000 orders" in out
    assert "batch job: read 20,000 orders, wrote 10 totals" in out
    assert "ok: every result matches what was produced" in out


def test_spark_cluster_pipeline_reads_and_writes_through_a_local_s3_server(
    runs: dict[str, Run],
) -> None:
    out = runs["cluster"].finish()
    assert "batch job from the bucket: read 20,000 orders, wrote 10 totals" in out
    assert "ok: every result matches what was produced, in the directory and in the bucket" in out

"""The main job (the README's first command runs it at full size) at a small size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_spark_pipeline_runs_and_checks_its_results(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, "examples/spark_pipeline.py", str(tmp_path / "data"), "--orders", "20000"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "produced 20,000 orders" in proc.stdout
    assert "batch job: read 20,000 orders, wrote 10 totals" in proc.stdout
    assert "ok: every result matches what was produced" in proc.stdout


def test_spark_cluster_pipeline_reads_and_writes_through_a_local_s3_server(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [
            sys.executable,
            "examples/spark_cluster_pipeline.py",
            str(tmp_path / "work"),
            "--orders",
            "20000",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "batch job from the bucket: read 20,000 orders, wrote 10 totals" in proc.stdout
    assert "ok: every result matches what was produced, in the directory and in the bucket" in (
        proc.stdout
    )

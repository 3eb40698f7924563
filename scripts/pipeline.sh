#!/usr/bin/env bash
# The main job: installs tidelog with its Spark extra (and Java when missing), then runs the
# example pipeline (examples/spark_pipeline.py): a million durable order appends, a Spark
# batch job and a streaming query over them, results back into tidelog, and a report.
# Extra arguments go to the pipeline (a data directory, --orders N).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v python3 >/dev/null 2>&1; then
    echo "error: python3 (3.11 or newer, with pip) is required" >&2
    exit 1
fi
. scripts/ensure-java.sh
echo "== installing tidelog with its Spark extra (builds the Rust extension)"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore ".[spark]"
echo "== running examples/spark_pipeline.py"
exec python3 examples/spark_pipeline.py "$@"

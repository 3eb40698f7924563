#!/usr/bin/env bash
# The comparison benchmark (issue 7): installs tidelog with the benchmark's peers (lmdb,
# rocksdict, matplotlib), builds the `tidelog` command, the benchmark (`tidelog-bench`, in
# benches/) and the walrus peer in release mode, then runs `tidelog bench`, which prints the
# tables and writes results.json, results.md and the plots into docs/benchmarks/ (or the
# directory given with --out). The Python rows and the plots are run from benches/python/.
# Extra arguments go to `tidelog bench` (see `tidelog bench --help`; --quick for a smoke run).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v python3 >/dev/null 2>&1; then
    echo "error: python3 (3.11 or newer, with pip) is required" >&2
    exit 1
fi
echo "== installing tidelog with the benchmark's peers (builds the Rust extension)"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore ".[bench]"
echo "== building the tidelog command, the benchmark and the walrus peer (release)"
cargo build --release --quiet -p tidelog-cli -p tidelog-benches \
    --bin tidelog --bin tidelog-bench --bin walrus_peer --bin visible_reader --bin process_appender
release="${CARGO_TARGET_DIR:-target}/release"
out=docs/benchmarks
for arg in "$@"; do
    case "$arg" in --out|--out=*) out="";; esac
done
echo "== running tidelog bench"
if [ -n "$out" ]; then
    exec "$release/tidelog" bench --python python3 --out "$out" "$@"
fi
exec "$release/tidelog" bench --python python3 "$@"

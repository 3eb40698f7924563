#!/usr/bin/env bash
# A long kill -9 campaign: the crash tests with more cycles, in a release build.
# Usage: bash scripts/crash-campaign.sh [CYCLES] [SEED] [TEST...]
#   CYCLES  cycles of each campaign (default 1000)
#   SEED    replays a run's kill timings; '-' or absent: a random seed
#   TEST    test binaries to run (default crash_kill9; also crash_races, staged_adopt)
# A failure prints TIDELOG_CRASH_SEED; pass it back as SEED to replay the kill timings.
set -euo pipefail
cd "$(dirname "$0")/.."

cycles=${1:-1000}
if ! [[ $cycles =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [CYCLES] [SEED] [TEST...]" >&2
    exit 2
fi
export TIDELOG_CRASH_CYCLES=$cycles
if [[ $# -ge 2 && $2 != - ]]; then
    export TIDELOG_CRASH_SEED=$2
fi
tests=("${@:3}")
if [[ ${#tests[@]} -eq 0 ]]; then
    tests=(crash_kill9)
fi
args=()
for t in "${tests[@]}"; do
    args+=(--test "$t")
done
exec cargo test --release -p tidelog "${args[@]}" -- --nocapture --test-threads=1

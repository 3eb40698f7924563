#!/usr/bin/env bash
# A long kill -9 campaign: the crash_kill9 test with more cycles, in a release build.
# Usage: bash scripts/crash-campaign.sh [CYCLES] [SEED]   (default 1000 cycles, random seed)
# A failure prints TIDELOG_CRASH_SEED; pass it back as SEED to replay the kill timings.
set -euo pipefail
cd "$(dirname "$0")/.."

cycles=${1:-1000}
if ! [[ $cycles =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [CYCLES] [SEED]" >&2
    exit 2
fi
export TIDELOG_CRASH_CYCLES=$cycles
if [[ $# -ge 2 ]]; then
    export TIDELOG_CRASH_SEED=$2
fi
exec cargo test --release -p tidelog --test crash_kill9 -- --nocapture

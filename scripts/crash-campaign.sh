#!/usr/bin/env bash
# A long kill -9 campaign: the crash tests with more cycles, in a release build.
# Usage: bash scripts/crash-campaign.sh [CYCLES] [SEED] [TEST...]
#   CYCLES  cycles of each campaign (default 1000)
#   SEED    replays a run's kill timings; '-' or absent: a random seed
#   TEST    a test file's name (default crash_kill9; also crash_races, staged_adopt): the
#           tests of crates/tidelog/tests/<area>/<TEST>.rs, in its area's test binary; or
#           FILE::NAME for the tests of that file whose names start with NAME
# A failure prints TIDELOG_CRASH_SEED; pass it back as SEED to replay the kill timings.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    echo "usage: $0 [CYCLES] [SEED] [TEST...]" >&2
    exit 2
}

cycles=${1:-1000}
if ! [[ $cycles =~ ^[1-9][0-9]*$ ]]; then
    usage
fi
export TIDELOG_CRASH_CYCLES=$cycles
if [[ $# -ge 2 && $2 != - ]]; then
    export TIDELOG_CRASH_SEED=$2
fi
tests=("${@:3}")
if [[ ${#tests[@]} -eq 0 ]]; then
    tests=(crash_kill9)
fi
# Each test file is a module of its area's binary (tests/<area>/main.rs), and libtest names
# its tests `<file>::<test>`: run each area's binary once, filtered to the files asked for.
binaries=()
filters=()
for t in "${tests[@]}"; do
    file=${t%%::*}
    if ! [[ $file =~ ^[a-z0-9_]+$ ]]; then
        usage
    fi
    paths=(crates/tidelog/tests/*/"$file".rs)
    if [[ ! -f ${paths[0]} ]]; then
        echo "error: no test file $file.rs under crates/tidelog/tests/<area>/" >&2
        exit 2
    fi
    area=$(basename "$(dirname "${paths[0]}")")
    if [[ " ${binaries[*]} " != *" --test $area "* ]]; then
        binaries+=(--test "$area")
    fi
    if [[ $t == *::* ]]; then
        filters+=("$t")
    else
        filters+=("$file::")
    fi
done
exec cargo test --release -p tidelog "${binaries[@]}" -- "${filters[@]}" --nocapture --test-threads=1

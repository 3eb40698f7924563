#!/usr/bin/env bash
# The whole test suite: formatting, lints, every Rust test (unit, integration, doctests), then
# the Python package built from this checkout and its pytest suite (with the stub check).
# The README's test command and .ci/run both run exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo (Rust 1.89 or newer) is required; install a Rust toolchain first" >&2
    exit 1
fi
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        if command -v rustup >/dev/null 2>&1; then
            rustup component add "$component"
        else
            echo "error: the cargo $component component is missing" >&2
            exit 1
        fi
    fi
done

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"
rust_totals=$(awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed", p, f; exit (p == 0 || f != 0) }' "$log")

if ! command -v python3 >/dev/null 2>&1; then
    echo "error: python3 (3.11 or newer, with pip) is required for the Python tests" >&2
    exit 1
fi
# The Spark tests need Java 17 or newer (PySpark 4 starts a JVM).
java_major() {  # "17.0.15" -> 17, "1.8.0_402" -> 8, anything odd -> 0
    local major
    major=$(java -version 2>&1 | awk -F'"' '/version/ {
        split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit }')
    case "$major" in '' | *[!0-9]*) major=0 ;; esac
    echo "$major"
}
if ! command -v java >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== java: installing openjdk-17-jre-headless (for PySpark)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            openjdk-17-jre-headless
    else
        echo "error: java (17 or newer) is required for the Spark tests; install a JRE" \
            "(for example: apt-get install openjdk-17-jre-headless)" >&2
        exit 1
    fi
fi
if [ "$(java_major)" -lt 17 ]; then
    echo "error: PySpark needs java 17 or newer; found: $(java -version 2>&1 | head -n 1)" >&2
    exit 1
fi

echo "== python: build and install the package, with its test and Spark dependencies"
# Builds the abi3 wheel with maturin (fetched into an isolated build environment).
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    ".[test,spark]"
echo "== ruff"
python3 -m ruff check python tests/python benches/python examples/python
python3 -m ruff format --check python tests/python benches/python examples/python
echo "== pytest"
python3 -m pytest -q -p no:cacheprovider tests/python 2>&1 | tee "$log"
py_totals=$(awk '/ passed| failed/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p = $(i-1); if ($(i) ~ /^failed/) f = $(i-1) } } END { printf "%d passed, %d failed", p, f; exit (p == 0 || f != 0) }' "$log")

# One closing line with the totals over every test binary and the Python suite.
echo "tests: rust $rust_totals; python $py_totals"

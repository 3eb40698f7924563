#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every Rust test (unit, integration, doctests).
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
# One closing line with the totals over every test binary.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f; exit (p == 0 || f != 0) }' "$log"

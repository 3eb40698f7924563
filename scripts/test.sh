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

# Every warning is an error, clippy's included (`cargo clippy -- -D warnings`). Set for the
# whole run: every build below sees the same flags, so each reuses what the one before built.
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-Dwarnings"
# Clippy's driver compiles the workspace's own crates while the tests are built (as `cargo
# clippy` runs it: RUSTC_WORKSPACE_WRAPPER), so the dependencies are compiled once instead of
# checked for clippy and then compiled again for the tests (3 minutes of a CI run).
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if [ ! -x "$clippy_driver" ]; then
    echo "error: clippy-driver is not in the toolchain ($clippy_driver)" >&2
    exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
echo "== cargo clippy -D warnings (building every target)"
cargo test --workspace --all-targets --locked --no-run
# The workspace builds the engine with the tier (the binding asks for it); the engine alone
# builds without it.
cargo clippy -p tidelog --all-targets --locked
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
. scripts/ensure-java.sh

echo "== python: build the package into a test environment, with its test and Spark dependencies"
# A virtual environment under target/ that also sees the interpreter's own packages: what is
# installed there already is not installed again, and the package under test never replaces
# an installed release build. Without pip of its own (no ensurepip needed): the interpreter's
# pip, run from inside it, installs into it.
venv="$PWD/target/test-venv"
python3 -m venv --without-pip --system-site-packages "$venv"
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
# maturin (fetched into an isolated build environment) builds the extension with cargo's dev
# profile into target/, reusing every dependency `cargo test` compiled: one minute instead of
# six for the release build. The same code, with debug assertions on.
MATURIN_PEP517_ARGS="--profile dev" python3 -m pip install --quiet --disable-pip-version-check \
    --root-user-action=ignore ".[test,spark]"
echo "== ruff"
python3 -m ruff check python tests/python benches examples
python3 -m ruff format --check python tests/python benches examples
echo "== pytest"
python3 -m pytest -q -p no:cacheprovider --durations=10 tests/python 2>&1 | tee "$log"
py_totals=$(awk '/ passed| failed/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p = $(i-1); if ($(i) ~ /^failed/) f = $(i-1) } } END { printf "%d passed, %d failed", p, f; exit (p == 0 || f != 0) }' "$log")

# One closing line with the totals over every test binary and the Python suite.
echo "tests: rust $rust_totals; python $py_totals"

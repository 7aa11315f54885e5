#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run calls this) and what the README tells you to run.
# It installs what the tests need when it is missing, then checks formatting, lints and runs
# every test in the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_component() {
    if ! cargo "$1" --version >/dev/null 2>&1; then
        echo "test.sh: installing the $2 component" >&2
        rustup component add "$2"
    fi
}
need_component fmt rustfmt
need_component clippy clippy

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
# One closing line for the whole run (cargo prints one per test binary, the last often "0 passed").
awk '/^test result:/ { passed += $4; failed += $6 } END { printf "tests: %d passed, %d failed\n", passed, failed }' "$log"

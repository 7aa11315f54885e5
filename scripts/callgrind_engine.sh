#!/usr/bin/env bash
# Instructions per engine GET and per engine SET under callgrind: engine-bench (release, cache
# mode, 1M items of 8 B keys and 8 B values, uniform keys, batch 32) runs each phase for exactly
# ROUNDS batch calls; callgrind counts only inside get_phase (then set_phase), so preload and
# set-up are left out, and the count divided by the operations is the cost of one.
# Usage: [BIN=path] [DISPATCH=direct|enum] bash scripts/callgrind_engine.sh [ROUNDS]   (BIN skips the build;
# DISPATCH=enum goes through AnyPartition as the server does)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-2000}
bin=${BIN:-}
if [ -z "$bin" ]; then
    cargo build --release -p tierkv-bench --bin engine-bench >/dev/null 2>&1
    bin=./target/release/engine-bench
fi
for phase in get set; do
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect="engine_bench::${phase}_phase" \
        "$bin" --items 1000000 --no-hashmap --rounds "$rounds" --batch 32 --dispatch "${DISPATCH:-direct}" >/dev/null 2>&1
    ir=$(awk '/^summary:/ { print $2 }' "$out")
    rm -f "$out"
    echo "engine $phase: $ir instructions for $((rounds * 32)) ops; per op: $((ir / (rounds * 32)))"
done

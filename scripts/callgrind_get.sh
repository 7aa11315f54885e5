#!/usr/bin/env bash
# Instructions per GET under callgrind: the server (release build, one worker) serves two fixed
# streams of pipelined gets (scripts/callgrind_get.py), N1 and N2 requests; the difference in
# instructions divided by N2 - N1 is the cost of one request, start-up and shutdown cancelled.
# Usage: [OP=get|set] [DEPTH=16] [BIN=path] bash scripts/callgrind_get.sh [N1 N2]  (BIN skips the build;
# DEPTH is the requests per round trip, 1 for no pipelining)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n1=${1:-20000}
n2=${2:-120000}
op=${OP:-get}
bin=${BIN:-}
if [ -z "$bin" ]; then
    cargo build --release -p tierkv-server >/dev/null 2>&1
    bin=./target/release/tierkv
fi
total() {
    local port=$((20000 + RANDOM % 20000)) out
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" -t 1 -m 64 -p "$port" >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 300); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>/dev/null && break
        sleep 0.2
    done
    python3 scripts/callgrind_get.py "$port" "$1" "$op" "${DEPTH:-16}"
    kill -TERM "$pid"; wait "$pid" || true
    awk '/^summary:/ { print $2 }' "$out"
    rm -f "$out"
}
a=$(total "$n1")
b=$(total "$n2")
echo "instructions: $a for $n1 ${op}s, $b for $n2 ${op}s; per $op: $(( (b - a) / (n2 - n1) ))"

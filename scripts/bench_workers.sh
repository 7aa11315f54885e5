#!/usr/bin/env bash
# Issue 6's measurement: tierkv with two workers on this 2-core machine, the load generator on
# the same two cores, YCSB-B (zipf 0.99, 1M keys of 16 B, 32 B values), pipeline 16, 20
# connections. Each round runs, in turn: the main port (keys forwarded between workers),
# request direction through the direct ports (--direct, nothing forwarded), and a one-worker
# server. Prints one line per run with ops/s and server CPU time per operation.
#
#   bash scripts/bench_workers.sh [ROUNDS] [SECONDS] [PIPELINE] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
seconds=${2:-10}
pipeline=${3:-16}
connections=${4:-20}
cargo build --release -q -p tierkv-server -p tierkv-bench
bin=target/release
port=$(( 20000 + RANDOM % 5000 ))
direct=$(( port + 100 ))

start() { # start ARGS...: starts tierkv, waits for it, sets $pid
  "$bin/tierkv" -p "$port" -m 1024 "$@" &
  pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return; fi
    sleep 0.05
  done
  echo "tierkv did not start" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; }
run() { # run LABEL ARGS...: one measured run against the running server
  local label=$1; shift
  local out
  out=$("$bin/tierkv-bench" run --target "127.0.0.1:$port" --pipeline "$pipeline" --connections "$connections" \
    --threads 2 --seconds "$seconds" --server-pid "$pid" --json "$@" 2>/dev/null | tail -1)
  echo "$round $label $out"
}

for round in $(seq 1 "$rounds"); do
  start -t 2 --direct-ports "$direct"
  "$bin/tierkv-bench" run --target "127.0.0.1:$port" --pipeline 16 --connections 20 --seconds 1 --preload >/dev/null 2>&1
  if (( round % 2 )); then
    run forwarded; run direct --direct
  else
    run direct --direct; run forwarded
  fi
  stop
  start -t 1
  "$bin/tierkv-bench" run --target "127.0.0.1:$port" --pipeline 16 --connections 20 --seconds 1 --preload >/dev/null 2>&1
  run one-worker
  stop
done

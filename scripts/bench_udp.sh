#!/usr/bin/env bash
# Issue 6's UDP measurement: one worker pinned to core 0, the load generator on core 1,
# YCSB-B (zipf 0.99, 1M keys of 16 B, 32 B values), no pipelining, 50 requests in flight
# (50 TCP connections, or 50 UDP sockets with one datagram in flight each). Each round runs
# tierkv over TCP and over UDP, the network floor over TCP, and memcached over TCP and UDP.
# Prints one line per run with ops/s and server CPU time per operation.
#
#   bash scripts/bench_udp.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
seconds=${2:-10}
cargo build --release -q -p tierkv-server -p tierkv-bench
bin=target/release
port=$(( 20000 + RANDOM % 5000 ))
user=(); if [ "$(id -u)" = 0 ]; then user=(-u root); fi

wait_port() {
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return; fi
    sleep 0.05
  done
  echo "server did not start" >&2; exit 1
}
run() { # run LABEL ARGS...
  local label=$1; shift
  local out
  out=$(taskset -c 1 "$bin/tierkv-bench" run --target "127.0.0.1:$port" --pipeline 1 --connections 50 \
    --seconds "$seconds" --server-pid "$pid" --json "$@" 2>/dev/null | tail -1)
  echo "$round $label $out"
}
preload() {
  taskset -c 1 "$bin/tierkv-bench" run --target "127.0.0.1:$port" --pipeline 16 --connections 20 --seconds 1 \
    --preload >/dev/null 2>&1
}

for round in $(seq 1 "$rounds"); do
  taskset -c 0 "$bin/tierkv" -p "$port" -U "$port" -t 1 -m 1024 & pid=$!; wait_port; preload
  # An open TCP connection from 127.0.0.1 proves the address (no amplification bound);
  # 32-byte values are within the bound anyway.
  run tierkv-tcp; run tierkv-udp --udp
  kill "$pid"; wait "$pid" 2>/dev/null || true
  taskset -c 0 "$bin/tierkv-bench" floor --port "$port" & pid=$!; wait_port
  run floor-tcp
  kill "$pid"; wait "$pid" 2>/dev/null || true
  taskset -c 0 memcached -p "$port" -U "$port" -l 127.0.0.1 -t 1 -m 1024 "${user[@]}" & pid=$!; wait_port; preload
  run memcached-tcp; run memcached-udp --udp
  kill "$pid"; wait "$pid" 2>/dev/null || true
done

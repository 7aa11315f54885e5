#!/bin/bash
# Hot-key against uniform increments (20 connections, pipeline 16) on tierkv with combining on
# and off, and on memcached (incr), each server with 2 threads on its own port; prints ops/s,
# server CPU per op, the lookups combining saved, and whether the hot key counted every update.
# Usage: SECONDS_PER_RUN=5 bash scripts/atomic_bench.sh
set -e
cd "$(dirname "$0")/.."
cargo build --release -q -p tierkv-server -p tierkv-bench
S=${SECONDS_PER_RUN:-5}
port=23411
run() { # name, command...
  local name=$1; shift
  "$@" > /dev/null 2>&1 &
  local pid=$!
  sleep 0.5
  for keys in hot uniform; do
    ./target/release/atomic-bench --port $port --pid $pid --protocol $PROTO --keys $keys --seconds $S | sed "s/^/$name: /"
  done
  if [ "$PROTO" = tierkv ]; then
    printf 'stats tierkv\r\nquit\r\n' | timeout 2 nc -q1 127.0.0.1 $port | grep -E "atomic_(lookups|writes)_saved" | tr -d '\r' | sed "s/^/$name: /"
  fi
  kill $pid; wait $pid 2>/dev/null || true
  port=$((port + 1))
}
PROTO=tierkv run "tierkv (combining)" ./target/release/tierkv -p $port -t 2 -m 1024
PROTO=tierkv run "tierkv (no combining)" ./target/release/tierkv -p $port -t 2 -m 1024 --no-atomic-combining
USER_FLAG=""; [ "$(id -u)" = 0 ] && USER_FLAG="-u root"
PROTO=memcached run "memcached" memcached -p $port -t 2 -m 1024 -U 0 -l 127.0.0.1 $USER_FLAG

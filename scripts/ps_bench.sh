#!/bin/bash
# The parameter-server comparison: 10,000 f32 vectors of 1,024 elements, 8 connections pushing
# sparse and dense deltas and pulling slices, on tierkv (server-side vupd, pipeline 16 and 1)
# and on memcached (gets + modify + cas retry loops), each with THREADS threads (default 2) and
# -M: a parameter server must not lose a vector to eviction (tierkv's store mode).
# Usage: SECONDS_PER_RUN=5 THREADS=2 bash scripts/ps_bench.sh
set -e
cd "$(dirname "$0")/.."
cargo build --release -q -p tierkv-server -p tierkv-bench
S=${SECONDS_PER_RUN:-5}
T=${THREADS:-2}
port=23711
run() { # name, protocol, pipeline, command...
  local name=$1 proto=$2 pipeline=$3; shift 3
  "$@" > /dev/null 2>&1 &
  local pid=$!
  sleep 0.5
  ./target/release/ps-bench --port $port --pid $pid --protocol $proto --pipeline $pipeline --seconds $S | sed "s/^/$name: /"
  kill $pid; wait $pid 2>/dev/null || true
  port=$((port + 1))
  sleep 0.3
}
run "tierkv pipeline 16" tierkv 16 ./target/release/tierkv -p $port -t $T -m 1024 -M
run "tierkv pipeline 1" tierkv 1 ./target/release/tierkv -p $port -t $T -m 1024 -M
USER_FLAG=""; [ "$(id -u)" = 0 ] && USER_FLAG="-u root"
run "memcached gets+cas" memcached 1 memcached -p $port -t $T -m 1024 -M -U 0 -l 127.0.0.1 $USER_FLAG

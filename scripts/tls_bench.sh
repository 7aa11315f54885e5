#!/bin/bash
# TLS cost: server CPU per operation over TLS and over plain TCP, for tierkv (-Z) and Debian's
# memcached (-Z), in one run: workload B (95% GET), 100k keys, pipeline 1 and 16, each server
# with one worker pinned to CPU 0 and the load generator pinned to CPU 1. The certificates come
# from a throwaway CA made here (EC P-256). Prints one line per run, then the microseconds per
# operation TLS adds to each server.
# Usage: SECONDS_PER_RUN=5 bash scripts/tls_bench.sh
set -e
cd "$(dirname "$0")/.."
cargo build --release -q -p tierkv-server -p tierkv-bench
S=${SECONDS_PER_RUN:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(
  cd "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=bench CA" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' > ext.cnf
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf 2>/dev/null
)
USER_FLAG=""; [ "$(id -u)" = 0 ] && USER_FLAG="-u root"
TLS_OPTS="ssl_chain_cert=$dir/server.pem,ssl_key=$dir/server.key"
port=23811
results=$dir/results
run() { # label, tls (yes/no), server command...
  local label=$1 tls=$2; shift 2
  taskset -c 0 "$@" -p $port > /dev/null 2>&1 &
  local pid=$!
  sleep 0.5
  local extra=()
  [ "$tls" = yes ] && extra=(--tls-ca "$dir/ca.pem")
  for pipeline in 1 16; do
    local out
    out=$(taskset -c 1 ./target/release/tierkv-bench run --target 127.0.0.1:$port --workload B --keys 100000 \
      --connections 20 --pipeline $pipeline --seconds "$S" --preload --server-pid $pid "${extra[@]}" --json)
    local cpu ops
    cpu=$(echo "$out" | python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["server_cpu_us_per_op"])')
    ops=$(echo "$out" | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["ops_per_sec"])')
    echo "$label pipeline $pipeline: $ops ops/s, server CPU $cpu us/op"
    echo "$label $pipeline $cpu" >> "$results"
  done
  kill $pid; wait $pid 2>/dev/null || true
  port=$((port + 1))
}
run "tierkv plain" no ./target/release/tierkv -t 1 -m 1024
run "tierkv TLS" yes ./target/release/tierkv -t 1 -m 1024 -Z -o "$TLS_OPTS"
run "memcached plain" no memcached -t 1 -m 1024 -U 0 -l 127.0.0.1 $USER_FLAG
run "memcached TLS" yes memcached -t 1 -m 1024 -U 0 -l 127.0.0.1 $USER_FLAG -Z -o "$TLS_OPTS"
python3 - "$results" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    *label, pipeline, cpu = line.split()
    rows[(" ".join(label), pipeline)] = float(cpu)
for pipeline in ("1", "16"):
    t = rows[("tierkv TLS", pipeline)] - rows[("tierkv plain", pipeline)]
    m = rows[("memcached TLS", pipeline)] - rows[("memcached plain", pipeline)]
    print(f"pipeline {pipeline}: TLS adds {t:.3f} us/op to tierkv and {m:.3f} us/op to memcached")
PY

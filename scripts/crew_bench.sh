#!/usr/bin/env bash
# Issue 29's measurement: memcached -t 2 beside tierkv -t 2 (--concurrency crcw, crew and erew;
# with NO_YIELDS=1 also crcw with --idle-yields 0) and tierkv -t 1, YCSB-B (95% get, zipf 0.99 unless DIST says otherwise, 1M keys, 32-byte values)
# at pipeline 1 (50 connections) and 16 (20 connections), ROUNDS interleaved rounds; workload A
# (50% set) at pipeline 1 with GET_RATIO=0.5. Prints one line per run: server CPU per op and
# ops/s (tierkv-bench run --server-pid). The servers and the load generator share the cores.
#
# With RATE=N (ops/s) every server gets the same open-loop load at pipeline 1 instead (N requests
# a second over the 50 connections, pipeline 16 skipped): CPU per op at equal work, without the
# closed loop's feedback between the servers' speed and how the load generator is scheduled.
#
#   ROUNDS=3 SECONDS_PER_RUN=5 DIST=zipf:0.99 GET_RATIO=0.95 WITH_MEMCACHED_T1=1 bash scripts/crew_bench.sh
#   RATE=60000 ONLY=crcw ROUNDS=6 bash scripts/crew_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p tierkv-server -p tierkv-bench
B=target/release/tierkv-bench
T=target/release/tierkv
port=$(( 21000 + RANDOM % 4000 ))
ratio=${GET_RATIO:-0.95}
dist=${DIST:-zipf:0.99}

wait_port() {
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return; sleep 0.05; done
  echo "no server on $port" >&2; exit 1
}
measure() { # label, then the server command
  local label=$1; shift
  port=$((port + 1))
  "$@" -p "$port" >/dev/null 2>&1 &
  local pid=$!
  wait_port
  $B run --target "127.0.0.1:$port" --keys 1000000 --value-bytes 32 --dist "$dist" --get-ratio 1 --seconds 1 \
    --preload --connections 20 >/dev/null 2>&1
  local depths=(1 16) rate=()
  [ -n "${RATE:-}" ] && depths=(1) rate=(--rate "$RATE")
  for p in "${depths[@]}"; do
    local conns=50; [ "$p" = 16 ] && conns=20
    local out
    out=$($B run --target "127.0.0.1:$port" --keys 1000000 --value-bytes 32 --dist "$dist" --get-ratio "$ratio" \
      --seconds "${SECONDS_PER_RUN:-5}" --pipeline "$p" --connections "$conns" "${rate[@]}" --server-pid "$pid" 2>&1 |
      grep "ops/s" | head -1)
    echo "$round $label p$p: $(echo "$out" | grep -oE '[0-9]+ ops/s|server CPU [0-9.]+ us/op' | tr '\n' ' ')"
  done
  [ -n "${SHOW_COUNTS:-}" ] && python3 - "$port" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats tierkv\r\n"); time.sleep(0.2)
lines = s.recv(65536).decode().split("\r\n")
print("   ", " ".join(l[5:] for l in lines if l.split(" ")[1:2] and l.split(" ")[1] in ("forwarded_requests", "crew_reads", "locked_requests")))
PY
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

# ONLY=crcw measures memcached -t 2, crcw and tierkv -t 1 alone, in an order that rotates each
# round (so no server always runs first, or right after the same one).
for round in $(seq 1 "${ROUNDS:-3}"); do
  if [ "${ONLY:-}" = crcw ]; then
    for k in 0 1 2; do
      case $(( (k + round) % 3 )) in
        0) measure "memcached -t 2" /usr/bin/memcached -t 2 -m 1024 -U 0 -u root ;;
        1) measure "tierkv -t 2 crcw" $T -t 2 -m 1024 --concurrency crcw ;;
        2) measure "tierkv -t 1" $T -t 1 -m 1024 ;;
      esac
    done
    continue
  fi
  measure "memcached -t 2" /usr/bin/memcached -t 2 -m 1024 -U 0 -u root
  measure "tierkv -t 2 crcw" $T -t 2 -m 1024 --concurrency crcw
  measure "tierkv -t 2 crew" $T -t 2 -m 1024 --concurrency crew
  [ -n "${NO_YIELDS:-}" ] && measure "tierkv -t 2 crcw yields 0" $T -t 2 -m 1024 --concurrency crcw --idle-yields 0
  measure "tierkv -t 2 erew" $T -t 2 -m 1024 --concurrency erew
  measure "tierkv -t 1" $T -t 1 -m 1024
  [ -n "${WITH_MEMCACHED_T1:-}" ] && measure "memcached -t 1" /usr/bin/memcached -t 1 -m 1024 -U 0 -u root
  true
done

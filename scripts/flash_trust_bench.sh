#!/usr/bin/env bash
# Issue 28's figures: crash recovery time per GiB, the process's RSS beside the bound the README
# states (-m 64 and a flash tier of 5M items, both indexes), and what durable invalidations cost
# (SET latency and server CPU per op for keys with a flash copy against keys without one, with
# and without --flash-sync). Release builds; prints its figures; writes nothing but /tmp files.
# RECOVERY_INDEXES (default "full cascade") and SET_INDEXES (default "full") pick the indexes;
# ONLY_RECOVERY=1 stops after recovery, ONLY_SET_COST=1 runs only the SET cost.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -p tierkv-server -p tierkv-bench >/dev/null 2>&1
T=target/release/tierkv
B=target/release/tierkv-bench
F=${FLASH_FILE:-/tmp/tierkv-trust.flash}
PORT=22311

wait_port() {
  for _ in $(seq 400); do python3 -c "import socket;socket.create_connection(('127.0.0.1',$PORT))" 2>/dev/null && return; sleep 0.05; done
  echo "the server on port $PORT did not start" >&2; exit 1
}
stat_of() { python3 - "$PORT" "$1" "$2" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(f"stats {sys.argv[2]}\r\n".encode() if sys.argv[2] != "-" else b"stats\r\n")
out = b""
while not out.endswith(b"END\r\n"):
    out += s.recv(65536)
for line in out.decode().split("\r\n"):
    parts = line.split(" ")
    if len(parts) == 3 and parts[1] == sys.argv[3]:
        print(parts[2])
PY
}

if [ -z "${ONLY_SET_COST:-}" ]; then
for index in ${RECOVERY_INDEXES:-full cascade}; do
echo "== crash recovery: -t 2 -m 64 --flash-size 2g --flash-index $index, 2.2M items of 900 bytes, kill -9, restart"
rm -f "$F"; PORT=$((PORT + 1))
$T -p $PORT -t 2 -m 64 --flash-path "$F" --flash-size 2g --flash-index $index 2>/dev/null &
pid=$!; wait_port
$B run --target 127.0.0.1:$PORT --keys 2200000 --value-bytes 900 --dist uniform --get-ratio 1 --seconds 1 --preload --connections 8 >/dev/null
echo "items on flash before the kill: $(stat_of - extstore_objects_used)"
kill -9 $pid; wait $pid 2>/dev/null || true
start=$(date +%s%N)
$T -p $PORT -t 2 -m 64 --flash-path "$F" --flash-size 2g --flash-index $index 2>/tmp/trust-recover.log &
pid=$!
until [ "$(grep -c restored /tmp/trust-recover.log || true)" -ge 2 ]; do sleep 0.01; done
ms=$(( ($(date +%s%N) - start) / 1000000 ))
grep restored /tmp/trust-recover.log
wait_port
echo "recovered $(stat_of - flash_recovered_items) items in ${ms} ms from 2 GiB: $(python3 -c "print(round($ms/2000, 3))") s per GiB"
echo "served after the restart: $(stat_of - extstore_objects_used) on flash; page overflow drops $(stat_of - flash_page_overflow_drops), stream drops $(stat_of - flash_stream_drops)"
kill $pid; wait $pid 2>/dev/null || true
done
[ -n "${ONLY_RECOVERY:-}" ] && exit 0

for index in full cascade; do
  echo "== RSS: -t 2 -m 64 --flash-size 2g --flash-index $index, 5M items of 100 bytes"
  rm -f "$F"; PORT=$((PORT + 1))
  $T -p $PORT -t 2 -m 64 --flash-path "$F" --flash-size 2g --flash-index $index 2>/dev/null &
  pid=$!; wait_port
  $B run --target 127.0.0.1:$PORT --keys 5000000 --value-bytes 100 --dist uniform --get-ratio 1 --seconds 5 --preload --connections 8 >/dev/null
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  budget=$(stat_of settings flash_memory_mib); conn=$(stat_of settings conn_memory_mib || true)
  echo "curr_items $(stat_of - curr_items), on flash $(stat_of - extstore_objects_used), flash DRAM held $(( $(stat_of - flash_index_bytes) >> 20 )) MiB"
  echo "RSS $((rss / 1024)) MiB; bound: -m 64 + flash_memory_mib ${budget} + conn budget ${conn:-5} + 3 + 16 KiB x 9 connections = $((64 + budget + ${conn:-5} + 3)) MiB"
  kill $pid; wait $pid 2>/dev/null || true
done

fi

for index in ${SET_INDEXES:-full}; do
for sync in "" "--flash-sync"; do
  for keys in 200000 1000000; do
    echo "== SET cost: -t 1 -m 64 --flash-size 1g --flash-index $index $sync, $keys keys of 100 bytes (200k fit DRAM; 1M: about half on flash)"
    rm -f "$F"; PORT=$((PORT + 1))
    taskset -c 0 $T -p $PORT -t 1 -m 64 --flash-path "$F" --flash-size 1g --flash-index $index $sync 2>>/tmp/trust-server.log &
    pid=$!; wait_port
    taskset -c 1 $B run --target 127.0.0.1:$PORT --keys $keys --value-bytes 100 --dist uniform --get-ratio 1 --seconds 1 --preload --connections 8 >/dev/null
    before=$(stat_of - flash_durable_waits); before=${before:-0}
    taskset -c 1 $B run --target 127.0.0.1:$PORT --keys $keys --value-bytes 100 --dist uniform --get-ratio 0 --seconds 5 --connections 20 --server-pid $pid 2>&1 | grep -E "ops/s|p50|cpu|CPU" | tr '\n' ' '
    after=$(stat_of - flash_durable_waits)
    echo; echo "  durable waits during the run: $(( ${after:-0} - before )), commits $(stat_of - flash_commits)"
    echo "  workload A (50% GET) on the same keys:"
    taskset -c 1 $B run --target 127.0.0.1:$PORT --keys $keys --value-bytes 100 --dist uniform --workload A --seconds 5 --connections 20 --server-pid $pid 2>&1 | grep -E "ops/s|p50|cpu|CPU" | tr '\n' ' '
    echo
    kill $pid; wait $pid 2>/dev/null || true
  done
done
rm -f "$F"
done

#!/usr/bin/env bash
# Flash hits/s behind the server, old and new builds interleaved: tierkv -t 1 -m 64 with a 1 GiB
# flash file, 2M keys of 100 bytes preloaded, uniform GET-only load (8 connections x pipeline 32)
# for 10 s; hits/s = get_extstore delta / seconds. Usage: bash scripts/flash_hits_ab.sh OLD_BIN NEW_BIN [ROUNDS] [full|cascade]
# (absolute paths; server CPU per hit from /proc). Odd rounds run old first, even rounds new first,
# and each run starts after the previous one's writes reach the device (sync), so neither build
# always measures while the other's data is still being written back.
set -euo pipefail
old=$1; new=$2; rounds=${3:-3}; index=${4:-full}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bench=./target/release/tierkv-bench
mkdir -p target/flash-ab
stat() { python3 - "$1" "$2" <<'PY'
import socket,sys
s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); s.sendall(b"stats\r\n"); d=b""
while not d.endswith(b"END\r\n"): d+=s.recv(65536)
for l in d.decode().split("\r\n"):
    p=l.split(" ")
    if len(p)==3 and p[1]==sys.argv[2]: print(p[2])
PY
}
for r in $(seq "$rounds"); do
  order="old new"; [ $((r % 2)) = 0 ] && order="new old"
  for which in $order; do
    bin=$old; [ "$which" = new ] && bin=$new
    port=$((30000 + RANDOM % 20000))
    rm -f target/flash-ab/f.flash
    sync; sleep 2
    taskset -c 0 "$bin" -t 1 -m 64 -p "$port" --flash-path target/flash-ab/f.flash --flash-size 1024m --flash-index "$index" 2>/dev/null &
    pid=$!
    sleep 1
    taskset -c 1 "$bench" run --target 127.0.0.1:$port --keys 2000000 --value-bytes 100 --get-ratio 0 --dist uniform --connections 8 --pipeline 32 --seconds 0.1 --preload >/dev/null 2>&1 || true
    c0=$(awk '{print $14+$15}' /proc/$pid/stat)
    a=$(stat $port get_extstore); t0=$(date +%s.%N)
    taskset -c 1 "$bench" run --target 127.0.0.1:$port --keys 2000000 --value-bytes 100 --get-ratio 1 --dist uniform --connections 8 --pipeline 32 --seconds 10 --server-pid $pid >/tmp/w/run.txt 2>&1 || true
    b=$(stat $port get_extstore); t1=$(date +%s.%N)
    c1=$(awk '{print $14+$15}' /proc/$pid/stat)
    cpu=$(grep -o "server_cpu[^,]*" /tmp/w/run.txt | head -1 || true)
    echo "round $r $which $index: flash hits/s $(python3 -c "print(round(($b-$a)/($t1-$t0)))") ($((b-a)) in $(python3 -c "print(round($t1-$t0,2))") s), server CPU per flash hit $(python3 -c "print(round(($c1-$c0)/100/max(1,$b-$a)*1e6,2))") us"
    kill -TERM $pid; wait $pid 2>/dev/null || true
  done
done

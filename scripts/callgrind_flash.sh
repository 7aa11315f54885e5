#!/usr/bin/env bash
# Instructions per flash hit under callgrind: BIN with -t 1 -m 8, a 256 MiB flash file (thread-pool I/O),
# 200k keys of 100 bytes preloaded (most on flash), then uniform GETs for SECONDS; counters zeroed
# after the preload. Usage: bash scripts/callgrind_flash.sh BIN OUT (absolute paths).
set -euo pipefail
bin=$1; out=$2
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bench=./target/release/tierkv-bench
mkdir -p target/flash-ab
port=$((30000 + RANDOM % 20000))
rm -f target/flash-ab/cg.flash
valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" -t 1 -m 8 -p $port --flash-path target/flash-ab/cg.flash --flash-size 256m --flash-io threads >/dev/null 2>&1 &
pid=$!
for _ in $(seq 300); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>/dev/null && break; sleep 0.2; done
"$bench" run --target 127.0.0.1:$port --keys 200000 --value-bytes 100 --get-ratio 0 --dist uniform --connections 4 --pipeline 32 --seconds 0.1 --preload >/dev/null 2>&1 || true
stat() { python3 -c "
import socket
s=socket.create_connection(('127.0.0.1',$port)); s.sendall(b'stats\r\n'); d=b''
while not d.endswith(b'END\r\n'): d+=s.recv(65536)
print([l.split()[2] for l in d.decode().split('\r\n') if l.startswith('STAT $1 ')][0])"; }
callgrind_control -z $pid >/dev/null
a=$(stat get_extstore); g0=$(stat cmd_get)
"$bench" run --target 127.0.0.1:$port --keys 200000 --value-bytes 100 --get-ratio 1 --dist uniform --connections 4 --pipeline 16 --seconds 20 >/dev/null 2>&1 || true
b=$(stat get_extstore); g1=$(stat cmd_get)
callgrind_control -d $pid >/dev/null
sleep 1
total=$(ls -t ${out}* | head -1 | xargs awk '/^summary:/ {print $2} /^totals:/ {print $2}' | head -1)
echo "$(basename $bin): $((b-a)) flash hits of $((g1-g0)) gets; instructions $total; per get $((total/(g1-g0)))"
kill -TERM $pid; wait $pid 2>/dev/null || true

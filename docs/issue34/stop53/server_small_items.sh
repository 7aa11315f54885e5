#!/bin/bash
# $1 = binary, $2 = label
B=/work/main/target/release
PORT=$((22600 + RANDOM % 100))
F=/work/main/target/flash-fio/small.flash
rm -f $F
taskset -c 0 $1 -t 1 -m 64 -p $PORT --flash-path $F --flash-size 1024m --flash-index sets > /tmp/w8/small-$2.log 2>&1 &
SP=$!
sleep 1
taskset -c 1 $B/tierkv-bench run --target 127.0.0.1:$PORT --keys 6000000 --value-bytes 20 --dist uniform --connections 8 --pipeline 32 --seconds 0.1 --get-ratio 0 --preload > /tmp/w8/small-$2-preload.txt 2>&1
sleep 5
taskset -c 1 $B/tierkv-bench run --target 127.0.0.1:$PORT --keys 6000000 --value-bytes 20 --dist uniform --connections 8 --pipeline 32 --seconds 10 --get-ratio 1 > /tmp/w8/small-$2-get.txt 2>&1
python3 - $PORT > /tmp/w8/small-$2-stats.txt <<'PY'
import socket,sys
s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); s.sendall(b"stats\r\n"); d=b""
while not d.endswith(b"END\r\n"): d+=s.recv(65536)
print(d.decode())
PY
kill $SP; wait $SP
echo "$2: $(grep -o 'hit ratio [0-9.]*' /tmp/w8/small-$2-get.txt) $(grep -E 'STAT (extstore_objects_used|flash_index_evictions|flash_dram_bytes|curr_items|spill_dropped|flash_spill_dropped|flash_busy) ' /tmp/w8/small-$2-stats.txt | tr -d '\r' | awk '{printf "%s=%s ", $2, $3}')"

#!/bin/bash
# flash-bench's GET hits/s beside fio's 4 KiB random reads (O_DIRECT, io_uring, depth 32) on the
# very same file, interleaved ROUNDS times because a virtual disk's speed drifts.
# Usage: SIZE=8192 ROUNDS=2 GETS=1000000 bash scripts/flash_vs_fio.sh [flash-bench flags]
# Needs fio (apt-get install fio) and a release build of flash-bench.
set -e
cd "$(dirname "$0")/.."
cargo build --release -q -p tierkv-bench --bin flash-bench
SIZE=${SIZE:-1024}; ROUNDS=${ROUNDS:-3}; GETS=${GETS:-300000}
for r in $(seq $ROUNDS); do
  ./target/release/flash-bench --size-mib $SIZE --gets $GETS "$@" 2>&1 | sed "s/^/flash-bench: /"
  fio --name=r --filename=target/flash-bench.bin --readonly --rw=randread --bs=4k --direct=1 --ioengine=io_uring --iodepth=32 --runtime=6 --time_based --group_reporting 2>&1 | grep -E " IOPS" | sed "s/^/fio /"
done
rm -f target/flash-bench.bin

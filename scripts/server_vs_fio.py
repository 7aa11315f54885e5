#!/usr/bin/env python3
"""Flash hits/s behind the server beside fio's 4 KiB random reads on the same file.

One server (`BIN -t 1 -m 64`, a 1 GiB flash file, 2M keys of 100 bytes preloaded) on CPU 0; the
load generator on CPU 1. Each round, for each load D (64 and 512 requests in flight by default:
connections x pipeline): uniform GETs from `tierkv-bench run` for SECONDS, then fio at the
iodepth of the reads the server had in flight on the part of the file the server has written (O_DIRECT, io_uring, read-only), so the
device's drift falls on both alike. Reported per run: hits/s (get_extstore delta), the mean
flash reads in flight, server CPU per flash hit (/proc), and fio's IOPS and CPU per I/O (its
usr+sys). Then a pipeline-1 run (one connection): p50/p99 latency and server CPU per GET.

Usage: python3 scripts/server_vs_fio.py BIN [--index full|cascade] [--rounds N]
       [--depths 32,128] [--seconds S] [--dir DIR]   (needs fio: apt-get install fio)
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import threading
import time

from flash_hits_windows import cpu_seconds, start, stats  # the same server start and readings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "tierkv-bench")
KEYS = "2000000"
# Requests in flight from the load generator (connections x pipeline). Replies go back in order
# per connection, so fewer reads than this are at the device; fio runs at the depth the device
# saw (the mean of `flash_reads_in_flight` while busy).
SHAPES = {32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (8, 32), 512: (16, 32)}


def bench(port, connections, pipeline, seconds, *extra):
    cmd = ["taskset", "-c", "1", BENCH, "run", "--target", f"127.0.0.1:{port}", "--keys", KEYS,
           "--value-bytes", "100", "--dist", "uniform", "--connections", str(connections),
           "--pipeline", str(pipeline), "--seconds", str(seconds), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def server_run(proc, port, depth, seconds, seed):
    connections, pipeline = SHAPES[depth]
    samples = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                samples.append(int(stats(port).get("flash_reads_in_flight", 0)))
            except OSError:
                pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    before, cpu0, t0 = int(stats(port)["get_extstore"]), cpu_seconds(proc.pid), time.time()
    sampler.start()
    out = bench(port, connections, pipeline, seconds, "--get-ratio", "1", "--seed", str(seed))
    done.set()
    sampler.join()
    after, cpu1, t1 = int(stats(port)["get_extstore"]), cpu_seconds(proc.pid), time.time()
    hits = max(after - before, 1)
    busy = [s for s in samples if s > 0]
    mean = sum(busy) / len(busy) if busy else 0.0
    lat = re.search(r"p50 ([0-9.]+) us, p99 ([0-9.]+) us", out)
    return hits / (t1 - t0), (cpu1 - cpu0) / hits * 1e6, mean, lat.groups() if lat else ("?", "?")


def fio(path, written, depth, seconds):
    size = max(written & ~((1 << 20) - 1), 1 << 20)
    cmd = ["taskset", "-c", "1", "fio", "--name=r", f"--filename={path}", "--readonly", "--rw=randread",
           "--bs=4k", "--direct=1", "--ioengine=io_uring", f"--iodepth={depth}", f"--size={size}",
           f"--runtime={seconds}", "--time_based", "--group_reporting"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    iops = re.search(r"IOPS=([0-9.]+)(k?)", out)
    cpu = re.search(r"cpu\s*:\s*usr=([0-9.]+)%, sys=([0-9.]+)%", out)
    if not iops or not cpu:
        raise SystemExit(f"fio said:\n{out}")
    rate = float(iops.group(1)) * (1000 if iops.group(2) else 1)
    per_io = (float(cpu.group(1)) + float(cpu.group(2))) / 100 / rate * 1e6
    return rate, per_io


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--index", default="full", choices=["full", "cascade"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--depths", default="64,512", help="requests in flight: " + ",".join(map(str, SHAPES)))
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--dir", default=os.path.join(ROOT, "target", "flash-fio"))
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    if any(d not in SHAPES for d in depths):
        raise SystemExit(f"--depths: one of {sorted(SHAPES)}")
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "server.flash")
    proc, port = start(args.bin, path, args.index)
    try:
        bench(port, 8, 32, 0.1, "--get-ratio", "0", "--preload")
        os.sync()
        # Warm-up: until DRAM holds promoted items (clean: their flash copy is current), GETs
        # evict items never written to flash, and those writes would slow the reads measured.
        bench(port, 8, 32, args.warmup, "--get-ratio", "1")
        written = int(stats(port).get("extstore_bytes_written", 0))
        print(f"{os.path.basename(args.bin)} {args.index}: {written >> 20} MiB written", flush=True)
        for r in range(args.rounds):
            for depth in depths:
                rate, per_hit, mean, (p50, p99) = server_run(proc, port, depth, args.seconds, 10 * r + depth)
                fio_rate, fio_cpu = fio(path, written, max(1, round(mean)), args.seconds)
                print(f"round {r + 1} {depth} requests: server {rate:.0f} flash hits/s (mean {mean:.1f} reads "
                      f"in flight, p50 {p50} us, p99 {p99} us), {per_hit:.2f} us server CPU per hit; fio at "
                      f"depth {max(1, round(mean))} "
                      f"{fio_rate:.0f} IOPS, {fio_cpu:.2f} us CPU per I/O; ratio {rate / fio_rate:.2f}, "
                      f"CPU {per_hit / fio_cpu:.2f}x fio's", flush=True)
        out = bench(port, 1, 1, args.seconds, "--get-ratio", "1", "--seed", "999", "--server-pid", str(proc.pid))
        ops = re.search(r"([0-9]+) ops/s", out)
        lat = re.search(r"p50 ([0-9.]+) us, p99 ([0-9.]+) us", out)
        cpu = re.search(r"server CPU ([0-9.]+) us/op", out)
        if ops and lat and cpu:
            print(f"pipeline 1 (one connection): {ops.group(1)} GETs/s, p50 {lat.group(1)} us, p99 {lat.group(2)} "
                  f"us, server CPU {cpu.group(1)} us per GET", flush=True)
    finally:
        proc.terminate()
        proc.wait()
        if os.path.exists(path):
            os.remove(path)


if __name__ == "__main__":
    sys.exit(main())

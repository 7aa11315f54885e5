#!/usr/bin/env python3
"""Flash hits/s behind the server beside fio's 4 KiB random reads on the same file, interleaved.

One server (`BIN -t 1 -m 64`, a 1 GiB flash file, 2M keys of 100 bytes preloaded, then warmed
up) on CPU 0; the load generator and fio on CPU 1. For each depth D (32 and 128 by default),
PAIRS pairs of windows: SECONDS of uniform GETs with D requests in flight (`tierkv-bench run
--window`: CONNECTIONS connections each keeping D / CONNECTIONS requests in flight, a new one
sent as each reply arrives, as fio keeps its depth), then SECONDS of fio at --iodepth=D on the
part of the file the server has written (O_DIRECT, io_uring, read-only; unwritten extents would
read as zeros without touching the device), then fio at the queue depth the device saw under the
server (Q, from /proc/diskstats). The device's speed drifts over minutes on shared machines, so
each pair is a ratio of its own and the median of the ratios is the figure.

Replies go back in request order on each connection (memcached's protocol), so a read that
finishes early waits for the ones before it and D requests in flight keep fewer than D reads at
the device; fio has no such order. The ratio against fio at Q compares the server with the
device at the depth its clients gave it; the ratio against fio at D includes the order's cost.

Per window: flash hits/s (the get_extstore delta), server CPU per flash hit (/proc), and what
the block device saw (/proc/diskstats: reads/s, their mean latency and the mean queue); fio's
IOPS and CPU per I/O (its usr+sys). Then a window of GETs for keys the server never had
(device reads per miss: Bloom false positives and log tags that match), and a pipeline-1 run (one connection): p50/p99 latency
and server CPU per GET.

Usage: python3 scripts/server_vs_fio.py BIN [--index full|cascade|sets] [--pairs N] [--depths 32,128]
       [--connections C] [--seconds S] [--warmup S] [--dir DIR] [--flash-size 1024m] [--keys 2000000]
       [--item-bytes 116]
       [-- SERVER FLAGS...]
       (needs fio: apt-get install fio)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from flash_hits_windows import cpu_seconds, start, stats  # the same server start and readings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "tierkv-bench")
KEYS = 2_000_000  # preloaded keys (--keys)


def bench(port, connections, pipeline, seconds, *extra):
    cmd = ["taskset", "-c", "1", BENCH, "run", "--target", f"127.0.0.1:{port}", "--keys", str(KEYS),
           "--value-bytes", "100", "--dist", "uniform", "--connections", str(connections),
           "--pipeline", str(pipeline), "--seconds", str(seconds), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


class Device:
    """The block device under a file, read from /proc/diskstats."""

    def __init__(self, path):
        st = os.stat(path)
        link = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
        self.name = os.path.basename(link)

    def sample(self):
        with open("/proc/diskstats") as f:
            for line in f:
                fields = line.split()
                if fields[2] == self.name:
                    # reads completed, ms reading, weighted ms in queue, writes completed
                    return time.time(), int(fields[3]), int(fields[6]), int(fields[13]), int(fields[7])
        return time.time(), 0, 0, 0, 0

    @staticmethod
    def between(a, b):
        seconds = max(b[0] - a[0], 1e-9)
        reads = b[1] - a[1]
        return {"reads": reads / seconds, "latency_us": (b[2] - a[2]) * 1000 / max(reads, 1),
                "queue": (b[3] - a[3]) / 1000 / seconds, "writes": (b[4] - a[4]) / seconds}


def server_window(proc, port, device, shape, seconds, seed):
    connections, pipeline = shape
    before, cpu0, disk0 = int(stats(port)["get_extstore"]), cpu_seconds(proc.pid), device.sample()
    t0 = time.time()
    out = bench(port, connections, pipeline, seconds, "--get-ratio", "1", "--window", "--seed", str(seed))
    t1 = time.time()
    after, cpu1, disk1 = int(stats(port)["get_extstore"]), cpu_seconds(proc.pid), device.sample()
    hits = max(after - before, 1)
    lat = re.search(r"p50 ([0-9.]+) us, p99 ([0-9.]+) us", out)
    if not lat:
        raise SystemExit(f"tierkv-bench said:\n{out}")
    return {"rate": hits / (t1 - t0), "cpu": (cpu1 - cpu0) / hits * 1e6, "p50": float(lat.group(1)),
            "p99": float(lat.group(2)), "disk": Device.between(disk0, disk1)}


def fio(path, device, written, depth, seconds):
    # What the server wrote, within the file (the log is rewritten many times over: reads past
    # the end would return at once).
    written = min(written, os.path.getsize(path))
    size = max(written & ~((1 << 20) - 1), 1 << 20)
    cmd = ["taskset", "-c", "1", "fio", "--name=r", f"--filename={path}", "--readonly", "--rw=randread",
           "--bs=4k", "--direct=1", "--ioengine=io_uring", f"--iodepth={depth}", f"--size={size}",
           f"--runtime={seconds}", "--time_based", "--group_reporting"]
    disk0 = device.sample()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    disk1 = device.sample()
    iops = re.search(r"IOPS=([0-9.]+)(k?)", out)
    cpu = re.search(r"cpu\s*:\s*usr=([0-9.]+)%, sys=([0-9.]+)%", out)
    if not iops or not cpu:
        raise SystemExit(f"fio said:\n{out}")
    rate = float(iops.group(1)) * (1000 if iops.group(2) else 1)
    per_io = (float(cpu.group(1)) + float(cpu.group(2))) / 100 / rate * 1e6
    return {"rate": rate, "cpu": per_io, "disk": Device.between(disk0, disk1)}


def disk_text(d):
    return (f"device {d['reads']:.0f} reads/s, {d['latency_us']:.0f} us each, queue {d['queue']:.1f}, "
            f"{d['writes']:.0f} writes/s")


def absent_window(port, device, seconds):
    """GETs of keys the server never had (17-byte names beside the preload's 16): reads per miss."""
    before, disk0 = stats(port), device.sample()
    out = bench(port, 8, 4, seconds, "--get-ratio", "1", "--key-bytes", "17", "--seed", "4242")
    after, disk1 = stats(port), device.sample()
    delta = lambda name: int(after.get(name, 0)) - int(before.get(name, 0))
    misses, hits = delta("get_misses"), delta("get_hits")
    d = Device.between(disk0, disk1)
    reads = d["reads"] * (disk1[0] - disk0[0])
    if misses == 0:
        raise SystemExit(f"tierkv-bench said:\n{out}")
    print(f"absent keys (8 connections x 4, {seconds} s): {misses} GET misses, {hits} hits; {reads:.0f} device "
          f"reads = {reads / misses:.3f} per miss ({d['writes']:.0f} writes/s meanwhile); the sets' counters: "
          f"{delta('flash_sets_reads_miss')} reads in {delta('flash_sets_misses')} flash lookups of a key some "
          f"filter may hold, {delta('flash_sets_false_positives')} Bloom false positives", flush=True)


def pipeline_one(proc, port, seconds):
    out = bench(port, 1, 1, seconds, "--get-ratio", "1", "--seed", "999", "--server-pid", str(proc.pid))
    ops = re.search(r"([0-9]+) ops/s", out)
    lat = re.search(r"p50 ([0-9.]+) us, p99 ([0-9.]+) us", out)
    cpu = re.search(r"server CPU ([0-9.]+) us/op", out)
    if ops and lat and cpu:
        print(f"pipeline 1 (one connection): {ops.group(1)} GETs/s, p50 {lat.group(1)} us, p99 {lat.group(2)} "
              f"us, server CPU {cpu.group(1)} us per GET", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--index", default="full", choices=["full", "cascade", "sets"])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--depths", default="32,128", help="requests in flight, and fio's --iodepth")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--dir", default=os.path.join(ROOT, "target", "flash-fio"))
    ap.add_argument("--flash-size", default="1024m")
    ap.add_argument("--keys", type=int, default=2_000_000, help="keys preloaded (100-byte values)")
    ap.add_argument("--item-bytes", type=int, default=116,
                    help="--flash-item-bytes for the server: the preload's key + value (0: leave it out, for builds "
                         "before the flag)")
    ap.add_argument("flags", nargs="*", help="more server flags (after --)")
    args = ap.parse_args()
    global KEYS
    KEYS = args.keys
    depths = [int(d) for d in args.depths.split(",")]
    if any(d < args.connections or d % args.connections for d in depths):
        raise SystemExit(f"--depths: multiples of --connections ({args.connections})")
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "server.flash")
    flags = (["--flash-item-bytes", str(args.item_bytes)] if args.item_bytes else []) + args.flags
    proc, port = start(args.bin, path, args.index, flags, args.flash_size)
    device = Device(path)
    try:
        bench(port, 8, 32, 0.1, "--get-ratio", "0", "--preload")
        os.sync()
        # Warm-up: until DRAM holds promoted items (clean: their flash copy is current), GETs
        # evict items never written to flash, and those writes would slow the reads measured.
        bench(port, 8, 32, args.warmup, "--get-ratio", "1")
        st = stats(port)
        written = int(st.get("extstore_bytes_written", 0))
        items = int(st.get("extstore_objects_used", 0))
        dram = int(st.get("flash_index_bytes", 0))
        print(f"{os.path.basename(args.bin)} {args.index} {' '.join(args.flags)}: {written >> 20} MiB written, "
              f"device {device.name}; {items} flash items, {dram} bytes of flash-tier DRAM = "
              f"{dram / max(items, 1):.2f} per item", flush=True)
        for depth in depths:
            shape = (args.connections, depth // args.connections)
            ratios, at_queue, cpus = [], [], []
            for pair in range(args.pairs):
                s = server_window(proc, port, device, shape, args.seconds, 100 * depth + pair)
                f = fio(path, device, written, depth, args.seconds)
                queue = max(1, round(s["disk"]["queue"]))
                q = fio(path, device, written, queue, args.seconds)
                ratios.append(s["rate"] / f["rate"])
                at_queue.append(s["rate"] / q["rate"])
                cpus.append(s["cpu"] / f["cpu"])
                print(f"depth {depth} pair {pair + 1}: server {s['rate']:.0f} flash hits/s, {s['cpu']:.2f} us CPU "
                      f"per hit, p50 {s['p50']:.0f} us, p99 {s['p99']:.0f} us, {disk_text(s['disk'])} | fio at "
                      f"{depth}: {f['rate']:.0f} IOPS, {f['cpu']:.2f} us CPU per I/O | fio at {queue}: {q['rate']:.0f} "
                      f"IOPS, {q['cpu']:.2f} us | ratio {ratios[-1]:.2f} at {depth}, {at_queue[-1]:.2f} at the "
                      f"device's queue; CPU {cpus[-1]:.2f}x fio's", flush=True)
            print(f"depth {depth} ({shape[0]} connections x {shape[1]}): median ratio {statistics.median(ratios):.2f} "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f}) against fio at {depth}, "
                  f"{statistics.median(at_queue):.2f} (min {min(at_queue):.2f}, max {max(at_queue):.2f}) against fio "
                  f"at the device's queue; median CPU per hit {statistics.median(cpus):.2f}x fio's per I/O", flush=True)
        absent_window(port, device, args.seconds * 2)
        pipeline_one(proc, port, args.seconds * 2)
    finally:
        proc.terminate()
        proc.wait()
        if os.path.exists(path):
            os.remove(path)


if __name__ == "__main__":
    sys.exit(main())

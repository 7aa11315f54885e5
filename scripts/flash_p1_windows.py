#!/usr/bin/env python3
"""Flash GETs at pipeline 1 (or any load shape): latency and server CPU per GET, servers side by
side in alternating windows.

Every server given (`--server LABEL BIN "FLAGS"`, two or more; the same binary with different
flags is fine) runs at once, pinned to CPU 0 with its own flash file (-t 1 -m 64, a 1 GiB file,
2M keys of 100 bytes preloaded, then warmed up). The load generator (CPU 1) then drives one of
them at a time: one connection, one request in flight, uniform GETs for WINDOW seconds, servers
in rotating order, so a machine that drifts over minutes is seen equally by all. Each window
draws new keys (most are on flash only: DRAM holds about a fifth of them). Per window: GETs/s,
p50/p99 latency, server CPU per GET (from /proc) and the share of GETs answered from flash.
Prints every window, then each server's medians.

Usage: python3 scripts/flash_p1_windows.py --server A BIN "" --server B BIN "--flash-poll-us 0"
       [--windows N] [--window-seconds S] [--index full|cascade] [--dir DIR]
       [--connections C --pipeline P [--window]]   (default: one connection, one request)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from flash_hits_windows import BENCH, KEYS, cpu_seconds, start, stats


def load(port, seconds, seed, connections=1, pipeline=1, extra=()):
    cmd = ["taskset", "-c", "1", BENCH, "run", "--target", f"127.0.0.1:{port}", "--keys", KEYS,
           "--value-bytes", "100", "--dist", "uniform", "--connections", str(connections),
           "--pipeline", str(pipeline), "--seconds", str(seconds), "--seed", str(seed), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def window(proc, port, seconds, seed, shape):
    connections, pipeline, sliding = shape
    before, cpu0, time_before = stats(port), cpu_seconds(proc.pid), time.time()
    extra = ("--get-ratio", "1") + (("--window",) if sliding else ())
    out = load(port, seconds, seed, connections, pipeline, extra)
    after, cpu1, time_after = stats(port), cpu_seconds(proc.pid), time.time()
    gets = int(after["cmd_get"]) - int(before["cmd_get"])
    flash = int(after["get_extstore"]) - int(before["get_extstore"])
    reads = int(after["flash_device_reads"]) - int(before["flash_device_reads"])
    rate = re.search(r"([0-9]+) ops/s", out)
    lat = re.search(r"p50 ([0-9.]+) us, p99 ([0-9.]+) us", out)
    if not rate or not lat or gets == 0:
        raise SystemExit(f"tierkv-bench said:\n{out}")
    return {
        "rate": float(rate.group(1)),
        "p50": float(lat.group(1)),
        "p99": float(lat.group(2)),
        "cpu": (cpu1 - cpu0) / gets * 1e6,
        "flash": flash / gets,
        "reads": reads / max(flash, 1),
        "hits": flash / (time_after - time_before),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", nargs=3, action="append", metavar=("LABEL", "BIN", "FLAGS"), required=True)
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--window-seconds", type=float, default=3.0)
    ap.add_argument("--index", default="full", choices=["full", "cascade"])
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--pipeline", type=int, default=1)
    ap.add_argument("--window", action="store_true", help="a sliding window (tierkv-bench run --window)")
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(BENCH), "..", "flash-p1"))
    args = ap.parse_args()
    if len(args.server) < 2:
        raise SystemExit("give at least two --server")
    os.makedirs(args.dir, exist_ok=True)
    servers = {}
    try:
        for label, binary, flags in args.server:
            path = os.path.join(args.dir, f"{label}.flash")
            servers[label] = start(binary, path, args.index, flags.split())
            load(servers[label][1], 0.1, 1, 8, 32, ("--get-ratio", "0", "--preload"))
        os.sync()
        for label in servers:
            load(servers[label][1], 10, 2, 8, 32, ("--get-ratio", "1"))
        results = {label: [] for label in servers}
        labels = list(servers)
        for w in range(args.windows):
            shift = w % len(labels)
            for label in labels[shift:] + labels[:shift]:
                proc, port = servers[label]
                r = window(proc, port, args.window_seconds, 1000 + w, (args.connections, args.pipeline, args.window))
                results[label].append(r)
                print(f"window {w} {label}: {r['rate']:.0f} GETs/s, p50 {r['p50']:.1f} us, p99 {r['p99']:.1f} us, "
                      f"server CPU {r['cpu']:.1f} us per GET, {r['flash']:.0%} from flash ({r['hits']:.0f} flash "
                      f"hits/s, {r['reads']:.2f} device reads each)", flush=True)
        for label in labels:
            med = {k: statistics.median(r[k] for r in results[label]) for k in results[label][0]}
            print(f"{label}: median {med['rate']:.0f} GETs/s, p50 {med['p50']:.1f} us, p99 {med['p99']:.1f} us, "
                  f"server CPU {med['cpu']:.1f} us per GET, {med['flash']:.0%} from flash ({med['hits']:.0f} flash "
                  f"hits/s, {med['reads']:.2f} device reads each)")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
        for label in servers:
            path = os.path.join(args.dir, f"{label}.flash")
            if os.path.exists(path):
                os.remove(path)


if __name__ == "__main__":
    sys.exit(main())

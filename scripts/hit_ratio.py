#!/usr/bin/env python3
"""Hit ratio and server CPU per op at a small memory limit, tierkv beside memcached.

Each server starts with -m MEM -t 1 on a free loopback port (pinned to CPU 0; the load
generator to CPU 1), every key is written once (--preload), then SECONDS of zipfian load run
with tierkv-bench (8 connections x pipeline 16). Two loads by default:
  memtier: 1M keys, 32-byte values, 90% GETs (memtier_benchmark's 1:10 set:get)
  ycsb-a:  1 KiB values, 50% GETs (updates), keys for live data of 80% of -m
Prints hit ratio, ops/s, server CPU per op, evictions, and tierkv's bytes copied forward.

Usage: python3 scripts/hit_ratio.py [--mem 64] [--seconds 20] LABEL=BIN ... [memcached]
"""
import argparse
import os
import re
import subprocess
import sys

from hostile import launch
from memcached_t import free_port, stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "tierkv-bench")


def start(command, port):
    return launch(["taskset", "-c", "0", *command], port)


def bench(port, pid, load, seconds, preload):
    args = ["taskset", "-c", "1", BENCH, "run", "--target", f"127.0.0.1:{port}", "--keys", str(load["keys"]),
            "--value-bytes", str(load["value"]), "--dist", "zipf:0.99", "--get-ratio", str(load["gets"]),
            "--connections", "8", "--pipeline", "16", "--seconds", str(seconds), "--server-pid", str(pid)]
    if preload:
        args += ["--preload"]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mem", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("servers", nargs="+", help="LABEL=BIN for tierkv builds, or memcached")
    args = ap.parse_args()
    item = 1024 + 16 + 12
    loads = {
        "memtier": {"keys": 1_000_000, "value": 32, "gets": 0.9},
        "ycsb-a": {"keys": int(args.mem * (1 << 20) * 0.8 / item), "value": 1024, "gets": 0.5},
    }
    only = os.environ.get("LOADS")
    for name, load in loads.items():
        if only and name not in only.split(","):
            continue
        for server in args.servers:
            label, _, binary = server.partition("=")
            port = free_port()
            if label == "memcached":
                command = ["memcached", "-u", "nobody", "-U", "0", "-t", "1", "-m", str(args.mem), "-p", str(port)]
            else:
                command = [binary, "-t", "1", "-m", str(args.mem), "-p", str(port)]
            proc = start(command, port)
            try:
                bench(port, proc.pid, load, 0.1, True)
                out = bench(port, proc.pid, load, args.seconds, False)
                s = stats(port)
                extra = stats(port, " tierkv") if label != "memcached" else {}
            finally:
                proc.terminate()
                proc.wait()
            ratio = re.search(r"hit ratio ([0-9.]+)", out)
            ops = re.search(r"([0-9]+) ops/s", out)
            cpu = re.search(r"server CPU ([0-9.]+) us/op", out)
            copied = int(extra.get("log_bytes_copied_forward", 0))
            print(f"{name:8} {label:10} hit ratio {ratio.group(1) if ratio else '?'}, {ops.group(1) if ops else '?'} ops/s, "
                  f"server CPU {cpu.group(1) if cpu else '?'} us/op, evictions {s.get('evictions')}, items "
                  f"{s.get('curr_items')}, bytes {s.get('bytes')}, copied forward {copied >> 20} MiB", flush=True)


if __name__ == "__main__":
    sys.exit(main())

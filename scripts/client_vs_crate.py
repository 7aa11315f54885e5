#!/usr/bin/env python3
"""tierkv-client through direct ports against the Rust `memcache` crate through the main port,
same load, on one tierkv server with two workers (`-t 2 --direct-ports`).

Each round runs, in turn: single-key gets (pipeline 1: each thread has one request in flight)
and 100-key multi-gets, through tierkv-client (direct ports), the memcache crate, and
tierkv-client with --no-direct (main port, for the share request direction buys). Prints
keys/s and the server's CPU time per key for every run, then the medians and the ratios.

Usage: python3 scripts/client_vs_crate.py [--rounds 3] [--seconds 5] [--threads 4]
"""
import argparse
import os
import re
import statistics
import subprocess

from hostile import launch
from memcached_t import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "tierkv-bench")
TIERKV = os.path.join(ROOT, "target", "release", "tierkv")

MODES = [
    ("client direct, p1", ["--via", "client", "--batch", "1"]),
    ("memcache crate, p1", ["--via", "memcache-crate", "--batch", "1"]),
    ("client main port, p1", ["--via", "client", "--no-direct", "--batch", "1"]),
    ("client direct, get_many 100", ["--via", "client", "--batch", "100"]),
    ("memcache crate, gets 100", ["--via", "memcache-crate", "--batch", "100"]),
    ("client main port, get_many 100", ["--via", "client", "--no-direct", "--batch", "100"]),
]


def free_ports(count):
    while True:
        base = free_port()
        if all(can_bind(base + i) for i in range(count)):
            return base


def can_bind(port):
    import socket
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--keys", type=int, default=100000)
    args = parser.parse_args()
    port, base = free_port(), free_ports(2)
    server = launch([TIERKV, "-p", str(port), "-m", "256", "-t", "2", "--direct-ports", str(base)], port)
    figures = {label: [] for label, _ in MODES}
    try:
        for round_ in range(1, args.rounds + 1):
            for label, extra in MODES:
                command = [BENCH, "client-load", "--servers", f"127.0.0.1:{port}", "--threads", str(args.threads),
                           "--keys", str(args.keys), "--seconds", str(args.seconds), "--server-pids", str(server.pid),
                           *extra]
                out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                rate = float(re.search(r"keys/s=(\S+)", out).group(1))
                cpu = float(re.search(r"server_cpu_us_per_key=(\S+)", out).group(1))
                figures[label].append((rate, cpu))
                print(f"round {round_}  {label:32} {rate:>12,.0f} keys/s  {cpu:7.3f} us server CPU/key", flush=True)
    finally:
        server.kill()
        server.wait()
    print(f"\nmedians of {args.rounds} rounds, {args.threads} threads, tierkv -t 2 --direct-ports:")
    med = {label: (statistics.median(r for r, _ in runs), statistics.median(c for _, c in runs))
           for label, runs in figures.items()}
    for label, (rate, cpu) in med.items():
        print(f"  {label:32} {rate:>12,.0f} keys/s  {cpu:7.3f} us/key")
    for kind, ours, theirs in [("p1", "client direct, p1", "memcache crate, p1"),
                               ("100-key", "client direct, get_many 100", "memcache crate, gets 100")]:
        print(f"  {kind}: client/crate keys/s {med[ours][0] / med[theirs][0]:.2f}x, "
              f"server CPU/key {med[ours][1] / med[theirs][1]:.2f}x")


main()

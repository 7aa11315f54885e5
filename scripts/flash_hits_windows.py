#!/usr/bin/env python3
"""Flash hits/s behind the server, two builds side by side in short alternating windows.

Both builds run at once, each pinned to CPU 0 with its own flash file (-t 1 -m 64, a 1 GiB
file, 2M keys of 100 bytes preloaded); the load generator (CPU 1) then drives one of them at a
time for WINDOW seconds (uniform GETs, 8 connections x pipeline 32), alternating ABBA, so a device
or machine that drifts over minutes is seen equally by both. Per window: flash hits/s (the
get_extstore delta) and server CPU per flash hit (from /proc). Prints every window, then each
build's median and the median of the per-pair ratios.

Usage: python3 scripts/flash_hits_windows.py OLD_BIN NEW_BIN [--windows N] [--window-seconds S]
       [--index full|cascade] [--dir DIR]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "tierkv-bench")
KEYS = "2000000"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stats(port):
    """The server's `stats` lines as a dict."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    out = {}
    for line in data.decode().split("\r\n"):
        parts = line.split(" ")
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def stat(port, name):
    value = stats(port).get(name)
    if value is None:
        raise SystemExit(f"no stat {name} on port {port}")
    return int(value)


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(port, *args):
    cmd = ["taskset", "-c", "1", BENCH, "run", "--target", f"127.0.0.1:{port}", "--keys", KEYS,
           "--value-bytes", "100", "--dist", "uniform", "--connections", "8", "--pipeline", "32", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def start(binary, path, index, extra=(), size="1024m"):
    port = free_port()
    if os.path.exists(path):
        os.remove(path)
    proc = subprocess.Popen(["taskset", "-c", "0", binary, "-t", "1", "-m", "64", "-p", str(port),
                             "--flash-path", path, "--flash-size", size, "--flash-index", index, *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                raise SystemExit(f"{binary} did not start")
            time.sleep(0.05)
    return proc, port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--windows", type=int, default=12)
    ap.add_argument("--window-seconds", type=float, default=3.0)
    ap.add_argument("--index", default="full", choices=["full", "cascade"])
    ap.add_argument("--dir", default=os.path.join(ROOT, "target", "flash-ab"))
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    servers = {}
    try:
        for label, binary in (("old", args.old), ("new", args.new)):
            servers[label] = start(binary, os.path.join(args.dir, f"{label}.flash"), args.index)
            bench(servers[label][1], "--get-ratio", "0", "--seconds", "0.1", "--preload")
        os.sync()
        # One window each to settle (the first reads fill the index's and DRAM's steady state).
        for label in servers:
            bench(servers[label][1], "--get-ratio", "1", "--seconds", str(args.window_seconds))
        results = {"old": [], "new": []}
        for w in range(args.windows):
            order = ["old", "new"] if w % 2 == 0 else ["new", "old"]
            for label in order:
                proc, port = servers[label]
                hits0, cpu0, t0 = stat(port, "get_extstore"), cpu_seconds(proc.pid), time.time()
                bench(port, "--get-ratio", "1", "--seconds", str(args.window_seconds), "--seed", str(100 + w))
                hits1, cpu1, t1 = stat(port, "get_extstore"), cpu_seconds(proc.pid), time.time()
                hits = hits1 - hits0
                rate = hits / (t1 - t0)
                per_hit = (cpu1 - cpu0) / max(hits, 1) * 1e6
                results[label].append((rate, per_hit))
                print(f"window {w} {label} {args.index}: flash hits/s {rate:.0f}, "
                      f"server CPU per flash hit {per_hit:.2f} us", flush=True)
        for label in ("old", "new"):
            rates = [r for r, _ in results[label]]
            cpus = [c for _, c in results[label]]
            print(f"{label}: median flash hits/s {statistics.median(rates):.0f}, "
                  f"median server CPU per flash hit {statistics.median(cpus):.2f} us")
        pairs = [n[0] / o[0] for o, n in zip(results["old"], results["new"])]
        cpu_pairs = [n[1] / o[1] for o, n in zip(results["old"], results["new"])]
        med_old = statistics.median(r for r, _ in results["old"])
        med_new = statistics.median(r for r, _ in results["new"])
        print(f"new/old: medians {med_new / med_old - 1:+.1%}, median of per-window ratios "
              f"{statistics.median(pairs) - 1:+.1%} (flash hits/s); CPU per hit "
              f"{statistics.median(cpu_pairs) - 1:+.1%}")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
        for label in ("old", "new"):
            path = os.path.join(args.dir, f"{label}.flash")
            if os.path.exists(path):
                os.remove(path)


if __name__ == "__main__":
    sys.exit(main())

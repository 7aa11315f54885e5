#!/usr/bin/env python3
"""Hundreds of half-sent large sets beside honest clients (issue 56), tierkv beside memcached.

Usage: python3 scripts/large_writers.py [--tierkv PATH] [--servers tierkv,memcached]
                                        [--attackers 200] [--watch 70] [--extra "FLAGS"]

Each server starts at its defaults but `-m 64` (memcached's own default). N attackers each send
`set bN 0 0 1000000` and the first half of its value, as fast as the server takes it, and go
silent. A second later a legitimate client sends a whole 900 KB set (then, after it, a whole
100 KB set), while another client times small set + get round trips every 20 ms. Prints how long
each large set waited for STORED (or what it got), the small round trips' p50/p99/max, the
server's peak RSS, and how many attackers the server still holds open after 5, 10, 30 and
`--watch` seconds.
"""
import argparse
import os
import resource
import select
import socket
import subprocess
import threading
import time

from hostile import free_port, launch, rss, still_open

HALF = 500_000


def start(server, tierkv, port, extra):
    if server == "tierkv":
        return launch([tierkv, "-p", str(port), "-m", "64", *extra], port)
    command = ["memcached", "-p", str(port), "-l", "127.0.0.1", "-m", "64", "-U", "0"]
    if os.geteuid() == 0:
        command += ["-u", "root"]
    return launch(command, port)


def attack(port, count, stop):
    """Connects `count` attackers and pushes each one's half value until sent or `stop`."""
    sockets, left = [], {}
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        sockets.append(s)
        left[s] = memoryview(f"set b{i} 0 0 1000000\r\n".encode() + b"a" * HALF)

    def push():
        while left and not stop.is_set():
            _, writable, _ = select.select([], list(left), [], 0.1)
            for s in writable:
                try:
                    sent = s.send(left[s][:65536])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    del left[s]
                    continue
                left[s] = left[s][sent:]
                if not left[s]:
                    del left[s]

    threading.Thread(target=push, daemon=True).start()
    return sockets


def large_set(port, key, size, limit):
    """Seconds until a whole `size`-byte set of `key` is answered, and the answer."""
    began = time.time()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=limit) as s:
            s.sendall(f"set {key} 0 0 {size}\r\n".encode() + b"L" * size + b"\r\n")
            reply = s.recv(200).decode(errors="replace").strip()
    except OSError as e:
        reply = f"failed ({e})"
    return time.time() - began, reply


def small_round_trips(port, stop, times):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        while not stop.is_set():
            began = time.time()
            s.sendall(b"set s 0 0 10\r\n0123456789\r\nget s\r\n")
            got = b""
            while not got.endswith(b"END\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    return
                got += chunk
            times.append(time.time() - began)
            time.sleep(0.02)


def run(server, args):
    port = free_port()
    process = start(server, args.tierkv, port, args.extra.split())
    stop, times, peak = threading.Event(), [], [0]
    try:
        threading.Thread(target=small_round_trips, args=(port, stop, times), daemon=True).start()
        attackers = attack(port, args.attackers, stop)
        began = time.time()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss(process.pid))
                time.sleep(0.1)

        threading.Thread(target=sample, daemon=True).start()
        time.sleep(1)
        big = large_set(port, "legit900", 900_000, args.watch)
        small = large_set(port, "legit100", 100_000, args.watch)
        open_at = []
        for mark in sorted({5, 10, 30, args.watch}):
            while time.time() - began < mark:
                time.sleep(0.2)
            open_at.append(f"{sum(1 for s in attackers if still_open(s))} at {mark} s")
        stop.set()
        times.sort()
        pct = lambda q: times[min(len(times) - 1, int(q * len(times)))] * 1000 if times else float("nan")
        for s in attackers:
            s.close()
        return (
            f"| {server} | {big[0]:.2f} s ({big[1]}) | {small[0]:.2f} s ({small[1]}) | "
            f"{pct(0.5):.1f} / {pct(0.99):.1f} / {times[-1] * 1000 if times else 0:.1f} | "
            f"{peak[0] / (1 << 20):.0f} | {', '.join(open_at)} |"
        )
    finally:
        stop.set()
        process.kill()
        process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tierkv", default="target/release/tierkv")
    parser.add_argument("--servers", default="tierkv,memcached")
    parser.add_argument("--attackers", type=int, default=200)
    parser.add_argument("--watch", type=int, default=70)
    parser.add_argument("--extra", default="", help="more tierkv flags, space-separated")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print("| server | 900 KB set | then 100 KB set | small set+get p50/p99/max ms | peak RSS MiB | attackers open |")
    print("| --- | --- | --- | --- | --- | --- |")
    for server in args.servers.split(","):
        print(run(server, args), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Hostile and careless clients against tierkv and memcached, side by side (issue 13).

Usage: python3 scripts/hostile.py [--tierkv PATH] [--servers tierkv,memcached]
                                  [--connections 1000] [--scenarios a,b,...]

Each scenario starts a fresh server (`-t 1 -m 64`), stores a 1000-byte item, notes the idle
RSS, runs the attack while it samples the server's RSS every 100 ms and times a fresh client's
set + get round trip every 250 ms, then closes the attackers and notes RSS a second later.
Scenarios:
  never-reading  N connections each pipeline 10,000 gets of the item and never read
  half-sets      500 connections each send half of a 1 MB set and stop
  garbage        one connection sends 10 MB without a newline
  over-limit     N + 100 connections (more than -c 1024) each send `version` and wait 2 s
  idle           N connections that send nothing
Prints one markdown table row per scenario and server.
"""
import argparse
import os
import resource
import socket
import subprocess
import time

ITEM = b"v" * 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def start(server, tierkv, port):
    if server == "tierkv":
        command = [tierkv, "-p", str(port), "-t", "1", "-m", "64"]
    else:
        command = ["memcached", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "1", "-m", "64"]
        if os.geteuid() == 0:
            command += ["-u", "root"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return process
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{server} did not start")


def round_trip(port):
    """A set and a get of one small item on a new connection; seconds, or None on failure."""
    began = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"set fresh 0 0 2\r\nok\r\nget fresh\r\n")
            want = b"STORED\r\nVALUE fresh 0 2\r\nok\r\nEND\r\n"
            got = b""
            while len(got) < len(want):
                chunk = s.recv(4096)
                if not chunk:
                    return None
                got += chunk
            return time.monotonic() - began if got == want else None
    except OSError:
        return None


def connect_many(port, count):
    sockets = []
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            break
        s.setblocking(False)
        sockets.append(s)
    return sockets


def push(sockets, payload, sent):
    """Sends more of `payload` on every socket without blocking; `sent` counts per socket."""
    for i, s in enumerate(sockets):
        if sent[i] >= len(payload):
            continue
        try:
            sent[i] += s.send(payload[sent[i]:sent[i] + 65536])
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            sent[i] = len(payload)


def watch(process, port, seconds, sockets=None, payload=None):
    """Samples RSS and fresh round trips for `seconds` while pushing `payload`."""
    sent = [0] * len(sockets or [])
    peak, slowest, failures = 0, 0.0, 0
    end = time.monotonic() + seconds
    next_trip = 0.0
    while time.monotonic() < end:
        if payload is not None:
            push(sockets, payload, sent)
        peak = max(peak, rss(process.pid))
        if time.monotonic() >= next_trip:
            trip = round_trip(port)
            if trip is None:
                failures += 1
            else:
                slowest = max(slowest, trip)
            next_trip = time.monotonic() + 0.25
        time.sleep(0.1)
    return peak, slowest, failures


def over_limit(port, count):
    """Opens `count` connections, each sends `version`; counts answers, refusals and hangs."""
    sockets = []
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"version\r\n")
            sockets.append(s)
        except OSError:
            pass
    served = refused = hung = 0
    for s in sockets:
        s.settimeout(2)
        try:
            reply = s.recv(64)
            if reply.startswith(b"VERSION"):
                served += 1
            elif reply.startswith(b"ERROR Too many open connections") or reply == b"":
                refused += 1
            else:
                hung += 1
        except socket.timeout:
            hung += 1
        except OSError:
            refused += 1
    return sockets, f"{served} served, {refused} refused, {hung} hung"


def scenario(name, server, tierkv, connections):
    port = free_port()
    process = start(server, tierkv, port)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"set k 0 0 1000\r\n" + ITEM + b"\r\n")
            s.recv(64)
        time.sleep(0.3)
        idle = rss(process.pid)
        note = ""
        if name == "never-reading":
            sockets = connect_many(port, connections)
            peak, slowest, failures = watch(process, port, 6, sockets, b"get k\r\n" * 10_000)
        elif name == "half-sets":
            sockets = connect_many(port, 500)
            payload = b"set big 0 0 1048576\r\n" + b"x" * (1 << 19)
            peak, slowest, failures = watch(process, port, 6, sockets, payload)
        elif name == "garbage":
            sockets = connect_many(port, 1)
            peak, slowest, failures = watch(process, port, 4, sockets, b"x" * (10 << 20))
        elif name == "over-limit":
            sockets, note = over_limit(port, connections + 100)
            peak, slowest, failures = watch(process, port, 2)
        else:
            sockets = connect_many(port, connections)
            peak, slowest, failures = watch(process, port, 3)
        note = note or f"{len(sockets)} attackers"
        for s in sockets:
            s.close()
        time.sleep(1.5)
        after = rss(process.pid)
        mib = lambda b: f"{b / (1 << 20):.1f}"
        trip = f"{slowest * 1000:.1f}" + (f" ({failures} failed)" if failures else "")
        print(f"| {name} | {server} | {mib(idle)} | {mib(peak)} | {trip} | {mib(after)} | {note} |", flush=True)
    finally:
        process.kill()
        process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tierkv", default="target/release/tierkv")
    parser.add_argument("--servers", default="tierkv,memcached")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--scenarios", default="never-reading,half-sets,garbage,over-limit,idle")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print("| scenario | server | idle RSS MiB | peak RSS MiB | slowest fresh round trip ms | RSS after MiB | notes |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.scenarios.split(","):
        for server in args.servers.split(","):
            scenario(name, server, args.tierkv, args.connections)


if __name__ == "__main__":
    main()

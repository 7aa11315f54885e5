#!/usr/bin/env python3
"""Accepting connections: how fast, at what server CPU, and how evenly over the workers.

Usage: python3 scripts/accept_bench.py [--tierkv BIN ...] [--seconds S] [--clients N]

For each binary (and memcached), at -t 2: N client processes each connect, send `version`, read
the reply and close, in a loop for S seconds; prints connections per second and the server's CPU
time per connection (/proc/PID/stat). Then 100 clients connect at once and stay: for tierkv the
per-worker `curr_connections` from its metrics endpoint shows the spread.
"""
import argparse
import multiprocessing
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile import free_port, launch  # noqa: E402


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(port, seconds, counter):
    end, done = time.time() + seconds, 0
    while time.time() < end:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"version\r\n")
            s.recv(100)
        done += 1
    with counter.get_lock():
        counter.value += done


def spread(metrics):
    with socket.create_connection(("127.0.0.1", metrics)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        page = b""
        while chunk := s.recv(65536):
            page += chunk
    lines = [line for line in page.decode().splitlines() if line.startswith("tierkv_curr_connections{")]
    return " / ".join(line.split()[-1] for line in lines)


def measure(label, command, port, metrics, seconds, clients):
    process = launch(command, port)
    try:
        counter = multiprocessing.Value("l", 0)
        before = cpu_seconds(process.pid)
        procs = [multiprocessing.Process(target=client, args=(port, seconds, counter)) for _ in range(clients)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        used = cpu_seconds(process.pid) - before
        rate = counter.value / seconds
        result = f"| {label} | {rate:.0f} | {used * 1e6 / max(counter.value, 1):.1f} |"
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
        if metrics:
            time.sleep(1.5)
            result += f" {spread(metrics)} |"
        else:
            result += " n/a |"
        for s in held:
            s.close()
        return result
    finally:
        process.kill()
        process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tierkv", action="append", default=[])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binaries = args.tierkv or ["target/release/tierkv"]
    print("| server | connections/s | server CPU us per connection | 100 clients per worker |")
    print("| --- | --- | --- | --- |")
    for _ in range(args.rounds):
        for binary in binaries:
            port, metrics = free_port(), free_port()
            command = [binary, "-p", str(port), "-t", "2", "-m", "64", "--metrics-port", str(metrics)]
            print(measure(f"tierkv {binary}", command, port, metrics, args.seconds, args.clients), flush=True)
        port = free_port()
        command = ["memcached", "-p", str(port), "-l", "127.0.0.1", "-t", "2", "-m", "64", "-U", "0"]
        if os.geteuid() == 0:
            command += ["-u", "root"]
        print(measure("memcached", command, port, None, args.seconds, args.clients), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""memcached's own tests (t/*.t from its source) against a running server, beside Debian's memcached.

Each test file gets a fresh server on a free loopback port and runs with T_MEMD_USE_DAEMON, so
the test talks to that server instead of starting memcached-debug (memcached's "daemon mode").
The tests still ask memcached-debug -h what the build supports: the source directory gets a
memcached-debug link to Debian's memcached for that. Prints, per test and server, the
assertions passed, failed and planned, the first failures, and the server's curr_items, bytes
and evictions after the test.

Usage: python3 scripts/memcached_t.py --source DIR BIN [TEST ...] [-- SERVER FLAGS]
  DIR: memcached's source at its 1.6.18 tag (git clone https://github.com/memcached/memcached;
  git checkout 1.6.18). TESTs default to binary.t dyn-maxbytes.t stats.t issue_22.t.
"""
import argparse
import os
import re
import socket
import subprocess
import sys

from hostile import launch as start  # starts a command and waits until it accepts

DEFAULT_TESTS = ["binary.t", "dyn-maxbytes.t", "stats.t", "issue_22.t"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_test(source, test, port):
    env = dict(os.environ, T_MEMD_USE_DAEMON=f"127.0.0.1:{port}")
    done = subprocess.run(["perl", os.path.join("t", test)], cwd=source, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    out = done.stdout + done.stderr
    passed = len(re.findall(r"^ok \d+", out, re.M))
    failed = re.findall(r"^not ok \d+.*$", out, re.M)
    plan = re.search(r"^1\.\.(\d+)", out, re.M)
    died = re.search(r"^(.*(?:died|Died|at t/\S+ line \d+).*)$", out, re.M)
    return passed, failed, int(plan.group(1)) if plan else None, died.group(1) if died and not plan else None


def stats(port, group=""):
    """The `stats GROUP` figures of the server on `port`, by name."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"stats{group}\r\n".encode())
        data = b""
        while not data.endswith(b"END\r\n"):
            data += s.recv(65536)
    return dict(line.split(" ")[1:3] for line in data.decode().split("\r\n") if line.startswith("STAT "))


def after_stats(port):
    """curr_items, bytes and evictions of the server after a test."""
    figures = stats(port)
    return ", ".join(f"{name} {figures.get(name)}" for name in ("curr_items", "bytes", "evictions"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--memory", default="1024", help="-m for both servers")
    ap.add_argument("bin")
    ap.add_argument("tests", nargs="*")
    args, flags = ap.parse_known_args()
    link = os.path.join(args.source, "memcached-debug")
    if not os.path.exists(link):
        os.symlink("/usr/bin/memcached", link)
    servers = {
        "memcached": lambda port: ["memcached", "-u", "nobody", "-p", str(port), "-U", "0", "-m", args.memory],
        "tierkv": lambda port: [args.bin, "-p", str(port), "-m", args.memory, *flags],
    }
    for test in args.tests or DEFAULT_TESTS:
        for name, command in servers.items():
            port = free_port()
            proc = start(command(port), port)
            try:
                passed, failed, plan, died = run_test(args.source, test, port)
                after = after_stats(port)
            finally:
                proc.terminate()
                proc.wait()
            print(f"{test:18} {name:10} {passed} passed, {len(failed)} failed, plan {plan}"
                  + (f", stopped: {died}" if died else "") + f"; then {after}", flush=True)
            for line in failed[:5]:
                print(f"    {line}")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""`cache_memlimit` past `-m`: what the cache then holds, tierkv beside Debian's memcached.

Starts each server with `-m 256 -t 2` (memcached with `-U 0`), sends `cache_memlimit LIMIT`
(300 by default), writes 150,000 sets of 4,000-byte values three times over (pipelined, quiet),
and prints the reply, `limit_maxbytes`, `bytes`, `curr_items`, `evictions` and the RSS.

Usage: python3 scripts/memlimit_fill.py BIN [--limit MB] [--keys N]
"""
import argparse
import socket
import sys

from hostile import free_port, launch, rss, stat


def fill(port, keys, value_bytes):
    value = b"v" * value_bytes
    with socket.create_connection(("127.0.0.1", port)) as s:
        for start in range(0, keys, 200):
            batch = b"".join(b"set fill:%07d 0 0 %d noreply\r\n%s\r\n" % (i, value_bytes, value)
                             for i in range(start, min(start + 200, keys)))
            s.sendall(batch + b"mn\r\n")
            reply = b""
            while not reply.endswith(b"MN\r\n"):
                reply += s.recv(65536)


def run(name, command, limit, keys):
    port = free_port()
    proc = launch(command + ["-p", str(port)], port)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"cache_memlimit %d\r\n" % limit)
            reply = s.recv(100).decode().strip()
        for _ in range(3):
            fill(port, keys, 4000)
        figures = {n: stat(port, n) for n in ("limit_maxbytes", "bytes", "curr_items", "evictions")}
        print(f"{name:9} cache_memlimit {limit}: {reply}; " + ", ".join(f"{n} {v}" for n, v in figures.items())
              + f"; RSS {rss(proc.pid) / (1 << 20):.0f} MiB", flush=True)
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--keys", type=int, default=150_000)
    args = ap.parse_args()
    run("tierkv", [args.bin, "-m", "256", "-t", "2"], args.limit, args.keys)
    run("memcached", ["memcached", "-U", "0", "-u", "nobody", "-m", "256", "-t", "2"], args.limit, args.keys)


if __name__ == "__main__":
    sys.exit(main())

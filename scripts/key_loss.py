#!/usr/bin/env python3
"""Small keys written and read back: how many are missing, beside what `stats` counts.

Starts each server (tierkv BIN, and Debian's memcached unless --no-memcached) on a free
loopback port with `-m MB -t T`, writes N keys of 10-byte values (quiet sets, pipelined),
reads every key back with multi-gets, and prints the keys missing, `evictions`, `curr_items`,
and for tierkv the index's overflow buckets. With --past, it then writes on until evictions
begin and prints whether every key is read back or counted evicted.

Usage: python3 scripts/key_loss.py BIN [--keys N ...] [-m MB] [-t T ...] [--no-memcached] [--past]
"""
import argparse
import socket
import sys

from hostile import free_port, launch, stat


def store(port, first, count):
    with socket.create_connection(("127.0.0.1", port)) as s:
        for start in range(first, first + count, 5000):
            end = min(start + 5000, first + count)
            s.sendall(b"".join(b"set key:%08d 0 0 10 noreply\r\n0123456789\r\n" % i for i in range(start, end)) + b"mn\r\n")
            reply = b""
            while not reply.endswith(b"MN\r\n"):
                reply += s.recv(65536)


def readable(port, first, count):
    hits = 0
    with socket.create_connection(("127.0.0.1", port)) as s:
        for start in range(first, first + count, 100):
            keys = b" ".join(b"key:%08d" % i for i in range(start, min(start + 100, first + count)))
            s.sendall(b"get " + keys + b"\r\n")
            reply = b""
            while not reply.endswith(b"END\r\n"):
                reply += s.recv(1 << 20)
            hits += reply.count(b"VALUE ")
    return hits


def run(name, command, keys, past):
    port = free_port()
    proc = launch(command + ["-p", str(port)], port)
    try:
        store(port, 0, keys)
        hits = readable(port, 0, keys)
        figures = {n: stat(port, n) for n in ("evictions", "curr_items")}
        line = f"{name:10} {keys:>9} keys: {keys - hits} missing, evictions {figures['evictions']}, curr_items {figures['curr_items']}"
        if name == "tierkv":
            line += f", overflow buckets {stat_group(port, 'tierkv', 'index_overflow_buckets')}"
        print(line, flush=True)
        if past:
            written = keys
            while int(stat(port, "evictions")) == 0:
                store(port, written, keys // 4)
                written += keys // 4
            store(port, written, keys // 4)
            written += keys // 4
            evictions, items = int(stat(port, "evictions")), int(stat(port, "curr_items"))
            hits = readable(port, 0, written)
            after = int(stat(port, "evictions"))
            print(f"{'':10} past the budget: {written} written, {hits} read back, evictions {evictions} "
                  f"(after the reads {after}), curr_items {items}: curr_items + evictions - written = "
                  f"{items + evictions - written}, unread and uncounted = {max(0, written - hits - after)}", flush=True)
    finally:
        proc.terminate()
        proc.wait()


def stat_group(port, group, name):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"stats {group}\r\n".encode())
        data = b""
        while not data.endswith(b"END\r\n"):
            data += s.recv(65536)
    for line in data.decode().split("\r\n"):
        parts = line.split(" ")
        if len(parts) == 3 and parts[1] == name:
            return parts[2]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--keys", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("-m", default="256")
    ap.add_argument("-t", nargs="+", default=["1", "2"])
    ap.add_argument("--no-memcached", action="store_true")
    ap.add_argument("--past", action="store_true")
    args = ap.parse_args()
    for threads in args.t:
        for keys in args.keys:
            print(f"-m {args.m} -t {threads}:", flush=True)
            run("tierkv", [args.bin, "-m", args.m, "-t", threads], keys, args.past)
            if not args.no_memcached:
                run("memcached", ["memcached", "-U", "0", "-u", "nobody", "-m", args.m, "-t", threads], keys, args.past)


if __name__ == "__main__":
    sys.exit(main())

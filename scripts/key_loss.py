#!/usr/bin/env python3
"""Small keys written and read back: how many are missing, beside what `stats` counts.

Starts each server (tierkv BIN, and Debian's memcached unless --no-memcached) on a free
loopback port with `-m MB -t T`, writes N keys of 10-byte values (quiet sets, pipelined),
reads every key back with multi-gets, and prints the keys missing, `evictions`, `curr_items`,
and for tierkv the index's overflow buckets. With --past, it then writes on until evictions
begin and prints whether every key is read back or counted evicted.

With --flash PATH SIZE, tierkv runs with a flash tier there and the figures that count items
the flash tier dropped are printed beside the keys missing (tag twins among them).

Usage: python3 scripts/key_loss.py BIN [--keys N ...] [-m MB] [-t T ...] [--no-memcached] [--past]
           [--flash PATH SIZE]
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


# Figures of the flash tier's drops (and the twin checks' reads, not a drop).
# (flash_index_evictions are drops with the full index only: the cascade index demotes them.)
FLASH_DROPS = ("flash_tag_twin_drops", "flash_tag_twin_unchecked", "flash_index_evictions", "flash_spill_dropped",
               "flash_admission_rejects", "flash_spill_held", "flash_gc_drops", "flash_page_overflow_drops",
               "flash_stream_drops", "flash_tag_twin_reads")


def run(name, command, keys, past, flash=False):
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
        if flash:
            dropped = {n: int(stat(port, n)) for n in FLASH_DROPS}
            print(f"{'':10} flash: " + ", ".join(f"{n} {v}" for n, v in dropped.items()), flush=True)
            counted = sum(dropped.values()) - dropped["flash_tag_twin_reads"]
            if int(stat(port, "flash_tier2_items")) > 0 or int(stat(port, "flash_demotions")) > 0:
                counted -= dropped["flash_index_evictions"]
            print(f"{'':10} missing - counted drops = {keys - hits - counted}", flush=True)
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
    ap.add_argument("--flash", nargs=2, metavar=("PATH", "SIZE"))
    ap.add_argument("--flash-index", default="auto")
    args = ap.parse_args()
    flash = ["--flash-path", args.flash[0], "--flash-size", args.flash[1], "--flash-index", args.flash_index] if args.flash else []
    for threads in args.t:
        for keys in args.keys:
            print(f"-m {args.m} -t {threads}:", flush=True)
            run("tierkv", [args.bin, "-m", args.m, "-t", threads] + flash, keys, args.past, bool(flash))
            if not args.no_memcached:
                run("memcached", ["memcached", "-U", "0", "-u", "nobody", "-m", args.m, "-t", threads], keys, args.past)


if __name__ == "__main__":
    sys.exit(main())

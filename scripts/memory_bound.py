#!/usr/bin/env python3
"""Resident memory of tierkv (and memcached) at -m 64 under small, ~0.9 MB and mixed items.

Each phase writes about three times the item memory through several connections (pipelined
sets, the last of each batch read back) and samples the server's VmRSS every 20 ms; the peak
and the value after the phase are printed beside the bound the README states for those flags.
A program that prints figures, not a test (the test is `memory.rs`).

    python3 scripts/memory_bound.py [--tierkv target/release/tierkv] [--threads 2]
"""
import argparse
import os
import socket
import threading
import time

from hostile import free_port, launch, rss

MIB = 1 << 20


def read_until(sock, ending):
    data = b""
    while not data.endswith(ending):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("connection closed")
        data += chunk
    return data


def writer(port, name, sizes, total, errors):
    """Sets values of `sizes` (cycled, noreply, about 64 KiB at a time) until `total` bytes
    went out; the last key of each batch is read back."""
    sock = socket.create_connection(("127.0.0.1", port))
    sent, i = 0, 0
    try:
        while sent < total:
            batch, last = [], None
            batched = 0
            while batched < 64 << 10 and sent < total:
                size = sizes[i % len(sizes)]
                last = f"{name}:{i}"
                batch.append(f"set {last} 0 0 {size} noreply\r\n".encode() + b"v" * size + b"\r\n")
                batched += size
                sent += size
                i += 1
            sock.sendall(b"".join(batch) + f"get {last}\r\n".encode())
            reply = read_until(sock, b"END\r\n")
            if reply.startswith((b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR")):
                errors.append(reply[:80])
    finally:
        sock.close()


def phase(process, port, label, sizes, connections, memory_mib):
    stop = threading.Event()
    peak = [rss(process.pid)]

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss(process.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    errors = []
    total = 3 * memory_mib * MIB // connections
    threads = [
        threading.Thread(target=writer, args=(port, f"{label}{c}", sizes, total, errors)) for c in range(connections)
    ]
    started = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.time() - started
    time.sleep(0.5)
    stop.set()
    sampler.join()
    return peak[0], rss(process.pid), seconds, errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tierkv", default="target/release/tierkv")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--memory", type=int, default=64, help="-m in MiB")
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    phases = [
        ("small", [40, 100, 250]),
        ("large", [900_000, 950_000, 850_000]),
        ("mixed", [40, 900_000, 1000, 300_000, 100, 60_000, 5000]),
    ]
    m, t = args.memory, str(args.threads)
    servers = [("tierkv", [args.tierkv, "-m", str(m), "-t", t])]
    if os.path.exists("/usr/bin/memcached"):
        user = ["-u", "root"] if os.geteuid() == 0 else []
        servers.append(("memcached", ["/usr/bin/memcached", "-m", str(m), "-t", t, "-U", "0"] + user))
    for name, command in servers:
        port = free_port()
        process = launch(command + ["-p", str(port)], port)
        try:
            idle = rss(process.pid)
            print(f"{name} -m {m} -t {t}: idle RSS {idle / MIB:.1f} MiB")
            for label, sizes in phases:
                peak, after, seconds, errors = phase(process, port, label, sizes, args.connections, m)
                print(
                    f"  {label:6} items, {args.connections} connections: peak RSS {peak / MIB:.1f} MiB, "
                    f"after {after / MIB:.1f} MiB ({seconds:.1f} s, {len(errors)} unexpected replies)"
                )
        finally:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()

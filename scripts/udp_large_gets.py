#!/usr/bin/env python3
"""UDP datagrams asking a 1 MB value hundreds of times (issue 56): the server's peak RSS.

Usage: python3 scripts/udp_large_gets.py TIERKV_BINARY get|mg [THREADS]

Starts the server (`-m 64 -I 2m`, UDP on its TCP port), stores four 1,000,000-byte values over
TCP, then sends 20 datagrams, one at a time: `get` with the key 280 times (get), or 100
`mg KEY v` requests (mg). Samples the RSS every millisecond meanwhile and prints its peak and
final growth over the RSS before the datagrams, and how other workers' keys were read.
"""
import socket
import struct
import sys
import threading
import time

from hostile import free_port, launch, rss


def main():
    binary, mode = sys.argv[1], sys.argv[2]
    threads = sys.argv[3] if len(sys.argv) > 3 else "2"
    port = free_port()
    command = [binary, "-p", str(port), "-U", str(port), "-l", "127.0.0.1", "-m", "64", "-t", threads, "-I", "2m"]
    process = launch(command, port)
    try:
        time.sleep(0.2)
        tcp = socket.create_connection(("127.0.0.1", port))
        for k in range(4):
            tcp.sendall(f"set ubig{k} 0 0 1000000\r\n".encode() + b"u" * 1_000_000 + b"\r\n")
            tcp.recv(100)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.settimeout(0.3)
        time.sleep(0.3)
        before, peak, done = rss(process.pid), [0], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss(process.pid))
                time.sleep(0.001)

        threading.Thread(target=sample, daemon=True).start()
        for r in range(20):
            key = f"ubig{r % 4}"
            body = ("get" + f" {key}" * 280 + "\r\n") if mode == "get" else (f"mg {key} v\r\n" * 100)
            udp.sendto(struct.pack(">HHHH", r, 0, 1, 0) + body.encode(), ("127.0.0.1", port))
            try:
                while True:
                    udp.recvfrom(65536)
            except socket.timeout:
                pass
        done.set()
        tcp.sendall(b"stats tierkv\r\n")
        time.sleep(0.2)
        stats = tcp.recv(65536).decode()
        paths = [line[5:] for line in stats.split("\r\n") if line.split(" ")[1:2] in (["forwarded_requests"], ["crew_reads"], ["locked_requests"])]
        print(f"{mode}: peak growth {(peak[0] - before) >> 10} KiB, after {(rss(process.pid) - before) >> 10} KiB; {', '.join(paths)}")
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    main()

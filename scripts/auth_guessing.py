#!/usr/bin/env python3
"""Password guessing against `-Y` (issue 56), tierkv beside memcached.

Usage: python3 scripts/auth_guessing.py [--tierkv PATH] [--seconds 20] [--connections 8]

Each server starts with `-Y` (one user); N connections from 127.0.0.1 send wrong passwords one
after another (tierkv with `--auth-max-failures 0`, so no connection is closed; memcached never
closes). Prints the guesses answered per second (and so how long 10,000 would take), and how
long a client with the right password from 127.0.0.2 waits meanwhile.
"""
import argparse
import os
import socket
import tempfile
import threading
import time

from hostile import free_port, launch


def guesser(port, stop, counts, i):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        n = 0
        while not stop.is_set():
            s.sendall(f"set a 0 0 12\r\nalice wr{i:02d}{n % 100:02d}\r\n".encode())
            got = b""
            while not got.endswith(b"\r\n"):
                chunk = s.recv(100)
                if not chunk:
                    return
                got += chunk
            n += 1
            counts[i] = n


def right_password(port):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.settimeout(30)
    began = time.time()
    s.connect(("127.0.0.1", port))
    s.sendall(b"set a 0 0 11\r\nbob hunter2\r\n")
    reply = s.recv(100).decode().strip()
    s.close()
    return time.time() - began, reply


def run(server, args, users):
    port = free_port()
    if server == "tierkv":
        command = [args.tierkv, "-p", str(port), "-m", "64", "--auth-max-failures", "0", "-Y", users]
    else:
        command = ["memcached", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", "64", "-Y", users]
        if os.geteuid() == 0:
            command += ["-u", "root"]
    process = launch(command, port)
    try:
        stop, counts = threading.Event(), [0] * args.connections
        threads = [threading.Thread(target=guesser, args=(port, stop, counts, i), daemon=True) for i in range(args.connections)]
        for t in threads:
            t.start()
        time.sleep(args.seconds / 2)
        waited, reply = right_password(port)
        time.sleep(args.seconds / 2)
        stop.set()
        rate = sum(counts) / args.seconds
        return f"| {server} | {sum(counts)} in {args.seconds} s | {rate:.1f} | {10_000 / rate:.0f} s | {waited * 1000:.1f} ms ({reply}) |"
    finally:
        process.kill()
        process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tierkv", default="target/release/tierkv")
    parser.add_argument("--servers", default="tierkv,memcached")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".users", delete=False) as f:
        f.write("alice:secret\nbob:hunter2\n")
    os.chmod(f.name, 0o644)
    print("| server | wrong passwords answered | per second | 10,000 would take | right password from another address |")
    print("| --- | --- | --- | --- | --- |")
    for server in args.servers.split(","):
        print(run(server, args, f.name), flush=True)
    os.unlink(f.name)


if __name__ == "__main__":
    main()

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

With --attacks (issue 30) it runs these instead, each on a fresh server, and prints what a user
would notice (one row per attack and server):
  starvation     25 connections each send `set kN 0 0 1000000` (every other one as a binary SET
                 header declaring 1 MB) and 1 KB of it, then go silent;
                 then a 20 KB set from another client: how long until STORED
  trickle        the same 25 trickle a byte every 0.5 s under idle_timeout=3: the 20 KB set's
                 wait, and who was kicked
  stalled        4 connections send 900 KB of a 1 MB set and stop (tierkv: --conn-memory 1,
                 --request-grace 2, --request-min-rate 1024); then the 20 KB set; after 8 s,
                 how many of them the server closed
  port-join      another socket with SO_REUSEPORT binds the server's port: refused or joined
  metrics        10 silent connections to the metrics port, then a scrape: how long
  auth-guessing  2,000 wrong ASCII passwords (-Y) on one connection: how many are answered
  udp            a 5 KB item, a TCP connection open from 127.0.0.1, a 17-byte UDP get: the
                 reply's size over the request's
"""
import argparse
import os
import resource
import socket
import struct
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
    return start_with(server, tierkv, port)


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


def start_with(server, tierkv, port, tierkv_extra=(), memcached_extra=()):
    """Like start, with extra flags for each server."""
    if server == "tierkv":
        command = [tierkv, "-p", str(port), "-t", "1", "-m", "64", *tierkv_extra]
    else:
        command = ["memcached", "-p", str(port), "-l", "127.0.0.1", "-t", "1", "-m", "64", *memcached_extra]
        if "-U" not in memcached_extra:
            command += ["-U", "0"]
        if os.geteuid() == 0:
            command += ["-u", "root"]
    return launch(command, port)


def launch(command, port):
    """Starts `command` and waits until it accepts on `port`."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit(f"{command[0]} did not start")


def timed_reply(sock, expected, limit):
    """Seconds until `expected` arrives on sock (None after `limit` s or a close)."""
    began, got = time.time(), b""
    sock.settimeout(0.2)
    while time.time() - began < limit:
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        got += chunk
        if expected in got:
            return time.time() - began
    return None


def stat(port, name):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"stats\r\n")
        got = b""
        while not got.endswith(b"END\r\n"):
            got += s.recv(65536)
    for line in got.decode().split("\r\n"):
        if line.startswith(f"STAT {name} "):
            return line.split()[2]
    return "?"


def starvation(server, tierkv, trickle):
    port = free_port()
    extra = ["-o", "idle_timeout=3"] if trickle else []
    process = start_with(server, tierkv, port, extra, extra)
    try:
        attackers = []
        for i in range(25):
            s = socket.create_connection(("127.0.0.1", port))
            if i % 2:
                # A binary SET whose header declares a 1 MB value.
                key = f"b{i}".encode()
                header = struct.pack(">BBHBBHIIQ", 0x80, 0x01, len(key), 8, 0, 0, 8 + len(key) + 1000000, 0, 0)
                s.sendall(header + bytes(8) + key + b"a" * 1000)
            else:
                s.sendall(f"set k{i} 0 0 1000000\r\n".encode() + b"a" * 1000)
            attackers.append(s)
        time.sleep(0.3)
        victim = socket.create_connection(("127.0.0.1", port))
        victim.sendall(b"set w 0 0 20000\r\n" + b"w" * 20000 + b"\r\n")
        began, waited = time.time(), None
        victim.settimeout(0.1)
        got = b""
        while time.time() - began < 10:
            if trickle:
                for s in attackers:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
            try:
                chunk = victim.recv(100)
                if not chunk:
                    break
                got += chunk
                if b"STORED" in got:
                    waited = time.time() - began
                    break
            except socket.timeout:
                time.sleep(0.4 if trickle else 0)
            except OSError:
                break
        result = f"20 KB set stored after {waited:.2f} s" if waited is not None else "20 KB set not answered in 10 s"
        if trickle:
            # The attackers go on trickling past the idle timeout: who is still connected?
            for _ in range(12):
                for s in attackers:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
                time.sleep(0.5)
            open_now = sum(1 for s in attackers if still_open(s))
            result += f"; {25 - open_now} of 25 attackers closed, idle_kicks {stat(port, 'idle_kicks')}"
        for s in attackers + [victim]:
            s.close()
        return result
    finally:
        process.kill()
        process.wait()


def still_open(s):
    """Whether the server still has `s` open (no end of stream, no reset)."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def stalled(server, tierkv):
    port = free_port()
    flags = ["--conn-memory", "1", "--request-grace", "2", "--request-min-rate", "1024"]
    process = start_with(server, tierkv, port, flags)
    try:
        attackers = []
        for i in range(4):
            s = socket.create_connection(("127.0.0.1", port))
            s.settimeout(10)
            s.sendall(f"set k{i} 0 0 1000000\r\n".encode() + b"a" * 900_000)
            attackers.append(s)
        victim = socket.create_connection(("127.0.0.1", port))
        victim.settimeout(10)
        began = time.time()
        victim.sendall(b"set w 0 0 20000\r\n" + b"w" * 20000 + b"\r\n")
        try:
            reply = victim.recv(100)
            waited = f"20 KB set {reply.decode().strip()} after {time.time() - began:.2f} s"
        except OSError:
            waited = "20 KB set not answered in 10 s"
        time.sleep(8)
        closed = sum(1 for s in attackers if not still_open(s))
        for s in attackers + [victim]:
            s.close()
        return f"{waited}; after 8 s {closed} of 4 stalled attackers closed"
    finally:
        process.kill()
        process.wait()


def port_join(server, tierkv):
    port = free_port()
    process = start_with(server, tierkv, port)
    try:
        joiner = socket.socket()
        joiner.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        joiner.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            joiner.bind(("127.0.0.1", port))
            joiner.listen(16)
            return "JOINED: another process's SO_REUSEPORT bind succeeded"
        except OSError as e:
            return f"refused ({e.strerror})"
        finally:
            joiner.close()
    finally:
        process.kill()
        process.wait()


def metrics(server, tierkv):
    if server != "tierkv":
        return "n/a (no metrics endpoint)"
    port, mport = free_port(), free_port()
    process = start_with(server, tierkv, port, ["--metrics-port", str(mport)])
    try:
        time.sleep(0.3)
        idle = [socket.create_connection(("127.0.0.1", mport)) for _ in range(10)]
        began = time.time()
        with socket.create_connection(("127.0.0.1", mport), timeout=60) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            took = timed_reply(s, b"tierkv_uptime_seconds", 60)
        for s in idle:
            s.close()
        return f"scrape behind 10 idle connections: {took * 1000:.0f} ms" if took is not None else "no page"
    finally:
        process.kill()
        process.wait()


def auth_guessing(server, tierkv):
    path = f"/tmp/hostile-auth-{os.getpid()}"
    with open(path, "w") as f:
        f.write("alice:secret\n")
    port = free_port()
    process = start_with(server, tierkv, port, ["-Y", path], ["-Y", path])
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            guesses = b"".join(f"set a 0 0 {len(f'alice x{i}')}\r\nalice x{i}\r\n".encode() for i in range(2000))
            try:
                s.sendall(guesses)
            except OSError:
                pass
            s.settimeout(2)
            got = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except (socket.timeout, OSError):
                    break
                if not chunk:
                    got += b"<closed>"
                    break
                got += chunk
            answered = got.count(b"authentication failure")
            closed = ", then closed" if got.endswith(b"<closed>") else ", connection still open"
            return f"{answered} of 2000 guesses answered{closed}"
    finally:
        process.kill()
        process.wait()
        os.remove(path)


def udp(server, tierkv):
    port = free_port()
    process = start_with(server, tierkv, port, ["-U", str(port)], ["-U", str(port)])
    try:
        tcp = socket.create_connection(("127.0.0.1", port))
        tcp.sendall(b"set big 0 0 5000\r\n" + b"b" * 5000 + b"\r\n")
        tcp.recv(64)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        request = b"\x00\x01\x00\x00\x00\x01\x00\x00get big\r\n"
        u.sendto(request, ("127.0.0.1", port))
        u.settimeout(0.5)
        total = 0
        try:
            while True:
                total += len(u.recv(65536))
        except socket.timeout:
            pass
        tcp.close()
        return f"{total} bytes for a {len(request)}-byte datagram: {total / len(request):.1f}x (TCP open from 127.0.0.1)"
    finally:
        process.kill()
        process.wait()


ATTACKS = {
    "starvation": lambda server, tierkv: starvation(server, tierkv, False),
    "trickle": lambda server, tierkv: starvation(server, tierkv, True),
    "stalled": stalled,
    "port-join": port_join,
    "metrics": metrics,
    "auth-guessing": auth_guessing,
    "udp": udp,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tierkv", default="target/release/tierkv")
    parser.add_argument("--servers", default="tierkv,memcached")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--scenarios", default="never-reading,half-sets,garbage,over-limit,idle")
    parser.add_argument("--attacks", nargs="?", const=",".join(ATTACKS), help="issue 30's attacks (all by default)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.attacks:
        print("| attack | server | what a client notices |")
        print("| --- | --- | --- |")
        for name in args.attacks.split(","):
            for server in args.servers.split(","):
                print(f"| {name} | {server} | {ATTACKS[name](server, args.tierkv)} |", flush=True)
        return
    print("| scenario | server | idle RSS MiB | peak RSS MiB | slowest fresh round trip ms | RSS after MiB | notes |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.scenarios.split(","):
        for server in args.servers.split(","):
            scenario(name, server, args.tierkv, args.connections)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Issue 28's operator round trip: run A writes 60,000 keys (v1), run B (another layout) sets
every even key to v2 and deletes every odd one, run C (A's layout again) must serve no v1 value
and no deleted key. Every stop is a clean SIGTERM. Usage:
  flash_round_trip.py TIERKV FLASH_FILE 'ARGS_A' 'ARGS_B'   (e.g. '-t 2 --flash-size 256m')"""
import shlex, signal, socket, subprocess, sys, time

KEYS = 60_000
tierkv, path, args_a, args_b = sys.argv[1:5]


def start(args, port=22199):
    cmd = [tierkv, "-p", str(port), "-m", "16", "--flash-path", path] + shlex.split(args)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"version\r\n")
            s.recv(100)
            return proc, s
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the server did not start")


def stop(proc, s):
    s.close()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return err


def read_until(s, end, buf=bytearray()):
    while not buf.endswith(end):
        buf += s.recv(1 << 20)
    out = bytes(buf)
    buf.clear()
    return out


def pipeline(s, requests, end):
    for i in range(0, len(requests), 500):
        chunk = requests[i:i + 500]
        s.sendall(b"".join(chunk))
        read_until(s, end * 1) if False else None
        got = 0
        buf = bytearray()
        while got < len(chunk):
            buf += s.recv(1 << 20)
            got = buf.count(b"\r\n") if end == b"\r\n" else buf.count(end)
        yield bytes(buf)


def value(k, tag):
    return (f"{tag}:{k}:" * 10).encode()


def sets(s, keys, tag, delete_odd=False):
    reqs = []
    for k in keys:
        if delete_odd and k % 2:
            reqs.append(f"delete k{k}\r\n".encode())
        else:
            v = value(k, tag)
            reqs.append(f"set k{k} 0 0 {len(v)}\r\n".encode() + v + b"\r\n")
    for _ in pipeline(s, reqs, b"\r\n"):
        pass


def served(s):
    old = deleted = fresh = 0
    for k in range(KEYS):
        s.sendall(f"get k{k}\r\n".encode())
        reply = read_until(s, b"END\r\n")
        if value(k, "v1") in reply:
            old += 1
        elif value(k, "v2") in reply:
            fresh += 1
        elif k % 2 and b"VALUE" in reply:
            deleted += 1
    return old, deleted, fresh


proc, s = start(args_a)
sets(s, range(KEYS), "v1")
stop(proc, s)
proc, s = start(args_b)
sets(s, range(KEYS), "v2", delete_odd=True)
err_b = stop(proc, s)
proc, s = start(args_a)
old, deleted, fresh = served(s)
err_c = stop(proc, s)
print(f"A: {args_a} -> B: {args_b} -> C: {args_a}: old values served {old}, deleted keys served {deleted}, "
      f"v2 served {fresh} of {KEYS // 2}")
print("B said:", " | ".join(l for l in err_b.splitlines() if "flash" in l and "closed" not in l))
print("C said:", " | ".join(l for l in err_c.splitlines() if "flash" in l and "closed" not in l))

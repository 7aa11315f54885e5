#!/usr/bin/env python3
"""Drives a server with a fixed stream of pipelined single-key requests, for instruction counts.

Usage: callgrind_get.py PORT COUNT [get|set] [DEPTH]. Sets 100 keys of 32-byte values, then sends
COUNT gets (or sets of the same 32-byte values) over those keys in a fixed order, in rounds of
DEPTH (default 16), and reads every reply before the next round, so the server sees the same
stream every time.
"""
import socket
import sys

port, count = int(sys.argv[1]), int(sys.argv[2])
op = sys.argv[3] if len(sys.argv) > 3 else "get"
depth = int(sys.argv[4]) if len(sys.argv) > 4 else 16
s = socket.create_connection(("127.0.0.1", port))
value = b"v" * 32
s.sendall(b"".join(b"set key:%d 0 0 32\r\n%s\r\n" % (i, value) for i in range(100)))
want = b"STORED\r\n" * 100
got = b""
while len(got) < len(want):
    got += s.recv(65536)
if op == "get":
    request = b"get key:%d\r\n"
    reply = b"VALUE key:%d 0 32\r\n" + value + b"\r\nEND\r\n"
elif op == "set":
    request = b"set key:%d 0 0 32\r\n" + value + b"\r\n"
    reply = b"STORED\r\n"
else:
    sys.exit("op must be get or set")
sent = 0
while sent < count:
    round_keys = [(sent + i) % 100 for i in range(min(depth, count - sent))]
    s.sendall(b"".join(request % k for k in round_keys))
    want = sum(len(reply.replace(b"%d", b"%d" % k)) for k in round_keys)
    got = 0
    while got < want:
        got += len(s.recv(65536))
    sent += len(round_keys)
s.close()

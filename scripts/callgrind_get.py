#!/usr/bin/env python3
"""Drives a server with a fixed stream of pipelined single-key gets, for instruction counts.

Usage: callgrind_get.py PORT COUNT. Sets 100 keys of 32-byte values, then sends COUNT gets
(over those keys in a fixed order) in rounds of 16 and reads every reply before the next round,
so the server sees the same stream every time.
"""
import socket
import sys

port, count = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
value = b"v" * 32
s.sendall(b"".join(b"set key:%d 0 0 32\r\n%s\r\n" % (i, value) for i in range(100)))
want = b"STORED\r\n" * 100
got = b""
while len(got) < len(want):
    got += s.recv(65536)
reply = b"VALUE key:%d 0 32\r\n" + value + b"\r\nEND\r\n"
sent = 0
while sent < count:
    round_keys = [(sent + i) % 100 for i in range(min(16, count - sent))]
    s.sendall(b"".join(b"get key:%d\r\n" % k for k in round_keys))
    want = sum(len(reply % k) for k in round_keys)
    got = 0
    while got < want:
        got += len(s.recv(65536))
    sent += len(round_keys)
s.close()

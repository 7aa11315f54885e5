"""TLS checks against a server on 127.0.0.1:PORT started with -Z, from Python's ssl module and
pymemcache with an SSLContext. Exits non-zero on the first failed check.

Usage: python3 tls_client.py PORT DIR MODE
  DIR holds ca.pem, client.pem/client.key (signed by ca.pem) and other.pem/other.key (signed
  by another CA). MODE is what the server was started with:
  plain   -Z without client verification: pymemcache works, big values, pipelines, and a
          plain-text client is refused without a memcached reply
  require ssl_verify_mode 2 with ssl_ca_cert=ca.pem: no certificate or another CA's is
          refused, ca.pem's client is served
  request ssl_verify_mode 1: no certificate is served, another CA's is refused
"""

import socket
import ssl
import sys

from pymemcache.client.base import Client

port, directory, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]


def check(condition, what):
    if not condition:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


def context(cert=None):
    ctx = ssl.create_default_context(cafile=f"{directory}/ca.pem")
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(f"{directory}/{cert}.pem", f"{directory}/{cert}.key")
    return ctx


def served(cert=None):
    """Whether a client with `cert` (or none) gets a set and get through."""
    client = Client(("127.0.0.1", port), tls_context=context(cert), connect_timeout=5, timeout=5)
    try:
        client.set(f"who-{cert}", b"me", noreply=False)
        return client.get(f"who-{cert}") == b"me"
    except (ssl.SSLError, ConnectionError, OSError):
        return False
    finally:
        client.close()


if mode == "plain":
    c = Client(("127.0.0.1", port), tls_context=context(), connect_timeout=5, timeout=10)
    for i in range(300):
        c.set(f"k{i}", str(i).encode() * 10)
    got = c.get_many([f"k{i}" for i in range(300)])
    check(len(got) == 300 and got["k7"] == b"7" * 10, "a multi-get of 300 keys over TLS")
    big = bytes(range(256)) * 4000
    check(c.set("big", big, noreply=False) is True and c.get("big") == big, "a 1 MB value both ways")
    # A pipeline whose replies (40 MB) far exceed the socket buffers: records wait in rustls.
    raw = context().wrap_socket(socket.create_connection(("127.0.0.1", port)))
    raw.sendall(b"get big\r\n" * 40 + b"mn\r\n")
    reply = b""
    while not reply.endswith(b"MN\r\n"):
        chunk = raw.recv(1 << 20)
        check(chunk, "the pipelined replies all arrive")
        reply += chunk
    check(reply.count(b"VALUE big 0 1024000\r\n") == 40 and len(reply) > 40 * len(big), "pipelined big replies")
    raw.close()
    # A plain-text client: no memcached reply, the connection ends.
    plain = socket.create_connection(("127.0.0.1", port), timeout=5)
    plain.sendall(b"version\r\n")
    answer = b""
    while True:
        chunk = plain.recv(4096)
        if not chunk:
            break
        answer += chunk
    check(b"VERSION" not in answer and b"ERROR" not in answer, f"a plain-text client is refused: {answer!r}")
    check(c.get("k1") == b"1" * 10, "the server goes on after it")
elif mode == "require":
    check(not served(), "no client certificate is refused")
    check(not served("other"), "another CA's certificate is refused")
    check(served("client"), "the CA's client is served")
elif mode == "request":
    check(served(), "no client certificate is served (mode 1 only checks one that is sent)")
    check(not served("other"), "another CA's certificate is refused")
    check(served("client"), "the CA's client is served")
else:
    check(False, f"unknown mode {mode}")
print("all checks passed")

"""pymemcache (text protocol) against a server on 127.0.0.1:PORT: every command, noreply,
multi-gets of hundreds of keys, values up to the item size limit. Exits non-zero on the first
failed check. Usage: python3 pymemcache_client.py PORT [MAX_ITEM_BYTES]"""

import sys

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError

port = int(sys.argv[1])
max_item = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
c = Client(("127.0.0.1", port), connect_timeout=5, timeout=10)
quiet = Client(("127.0.0.1", port), connect_timeout=5, timeout=10, default_noreply=True)


def check(condition, what):
    if not condition:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


# Storage commands, with replies.
check(c.set("a", b"1", noreply=False) is True, "set")
check(c.get("a") == b"1", "get after set")
check(c.add("a", b"2", noreply=False) is False, "add over an existing key")
check(c.add("b", b"2", noreply=False) is True, "add of a new key")
check(c.replace("a", b"3", noreply=False) is True, "replace")
check(c.replace("nope", b"3", noreply=False) is False, "replace of a missing key")
check(c.append("a", b"4", noreply=False) is True and c.get("a") == b"34", "append")
check(c.prepend("a", b"2", noreply=False) is True and c.get("a") == b"234", "prepend")
value, cas = c.gets("a")
check(value == b"234" and cas is not None, "gets")
check(c.cas("a", b"new", cas, noreply=False) is True, "cas with the current token")
check(c.cas("a", b"newer", cas, noreply=False) is False, "cas with a stale token")
check(c.cas("missing", b"x", 1, noreply=False) is None, "cas of a missing key")
check(c.get("a") == b"new", "value after cas")
check(c.set("n", b"10", noreply=False) and c.incr("n", 5) == 15, "incr")
check(c.decr("n", 100) == 0, "decr stops at zero")
check(c.incr("missing", 1) is None, "incr of a missing key")
check(c.set("n", b"18446744073709551615", noreply=False) and c.incr("n", 2) == 1, "incr wraps at 2^64")
check(c.touch("a", 100, noreply=False) is True and c.touch("missing", 1, noreply=False) is False, "touch")
# pymemcache has no gat/gats method; its raw_command sends them as written.
check(c.raw_command(b"gat 100 a", b"END\r\n") == b"VALUE a 0 3\r\nnew\r\n", "gat")
check(c.raw_command(b"gats 100 a", b"END\r\n").startswith(b"VALUE a 0 3 "), "gats")
check(c.delete("a", noreply=False) is True and c.delete("a", noreply=False) is False, "delete")
check(c.get("a") is None, "get after delete")
c.set("w", b"abc", noreply=False)
try:
    c.incr("w", 1)
    check(False, "incr of a non-numeric value is an error")
except MemcacheClientError:
    pass

# Flags round-trip through a serializer-free client as raw bytes; expiry in the past deletes.
check(c.set("e", b"x", expire=-1, noreply=False) and c.get("e") is None, "negative expiry")

# noreply: every command, then a reply-bearing command proves the stream stayed in sync.
quiet.set("q", b"1")
quiet.add("q2", b"2")
quiet.replace("q", b"3")
quiet.append("q", b"4")
quiet.prepend("q", b"5")
quiet.incr("n", 1)
quiet.decr("n", 1)
quiet.touch("q", 100)
quiet.delete("q2")
# A reply on the same connection means the quiet commands before it were executed.
check(quiet.version().startswith(b"1.6.18"), "version after noreply commands")
check(c.get_many(["q", "q2"]) == {"q": b"534"}, "state after noreply commands")
quiet.flush_all()
quiet.version()
check(c.get("q") is None, "flush_all noreply")

# Multi-get of hundreds of keys (long keys too).
keys = ["key-%d-" % i + "k" * (200 if i % 7 == 0 else 5) for i in range(400)]
check(c.set_many({k: k.encode() for k in keys}, noreply=False) == [], "set_many")
got = c.get_many(keys + ["absent"])
check(len(got) == 400 and all(got[k] == k.encode() for k in keys), "get_many of 400 keys")
check(len(c.gets_many(keys[:300])) == 300, "gets_many of 300 keys")
check(c.delete_many(keys[:100], noreply=False) is True and c.get(keys[0]) is None, "delete_many")

# Large values up to the item limit; one beyond it is refused and the connection survives.
big = bytes(range(256)) * ((max_item - 512) // 256)
check(c.set("big", big, noreply=False) and c.get("big") == big, "value near the item size limit")
try:
    c.set("toobig", b"x" * (max_item + 1), noreply=False)
    check(False, "a value beyond the limit is refused")
except MemcacheServerError as error:
    check("too large" in str(error), "SERVER_ERROR object too large: %s" % error)
check(c.get("toobig") is None and c.get("big") == big, "the connection works after a refused value")

# Server commands.
check(c.version().startswith(b"1.6.18"), "version")
stats = c.stats()
check(stats[b"cmd_get"] > 0 and b"curr_items" in stats, "stats")
check(c.stats("settings")[b"item_size_max"] == max_item, "stats settings")
check(c.flush_all(noreply=False) is True and c.get("big") is None, "flush_all")
check(c.quit() is None, "quit")
print("pymemcache: all checks passed")

"""pymemcache against a tierkv with a small DRAM log and a flash file: items evicted from DRAM
come back from flash byte for byte (single gets and multi-gets), and every operation on a
flash-resident key sees its item (incr, append, prepend, touch, gat, cas, add, delete). Exits
non-zero on the first failed check. Usage: python3 flash_client.py PORT ITEMS"""

import sys

from pymemcache.client.base import Client

port = int(sys.argv[1])
items = int(sys.argv[2])
c = Client(("127.0.0.1", port), connect_timeout=5, timeout=20)


def check(condition, what):
    if not condition:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


def value(i):
    return (("%d:" % i) * 60).encode()[: 150 + i % 100]


for start in range(0, items, 100):
    failed = c.set_many({"k%d" % i: value(i) for i in range(start, min(items, start + 100))}, noreply=False)
    check(not failed, "set_many acknowledged")
stats = c.stats()
check(int(stats[b"evictions"]) > 0 or int(stats.get(b"extstore_objects_written", 0)) > 0, "DRAM overflowed")

misses = wrong = 0
for i in range(items):
    got = c.get("k%d" % i)
    if got is None:
        misses += 1
    elif got != value(i):
        wrong += 1
check(wrong == 0, "%d values differ from what was set" % wrong)
check(misses <= items // 200, "%d of %d items lost" % (misses, items))

# The same again through multi-gets of 100 keys mixing DRAM and flash.
misses = 0
for start in range(0, items, 100):
    keys = ["k%d" % i for i in range(start, min(items, start + 100))]
    got = c.get_many(keys)
    for key in keys:
        if key not in got:
            misses += 1
        else:
            check(got[key] == value(int(key[1:])), "multi-get value of " + key)
check(misses <= items // 200, "multi-gets lost %d" % misses)

# Push the first keys out of DRAM again, then operate on them.
for start in range(items, 2 * items, 100):
    c.set_many({"k%d" % i: value(i) for i in range(start, start + 100)}, noreply=False)


def resident(key):
    return c.get(key) is not None


check(c.set("n0", b"41", noreply=False), "set counter")
for start in range(0, items, 100):
    c.set_many({"fill%d" % i: value(i) for i in range(start, start + 100)}, noreply=False)
check(c.incr("n0", 1) == 42, "incr of a flash-resident counter")
check(c.get("n0") == b"42", "the counter after incr")
check(c.append("k1", b"+tail", noreply=False) is True, "append to a flash-resident key")
check(c.get("k1") == value(1) + b"+tail", "value after append")
check(c.prepend("k2", b"head+", noreply=False) is True, "prepend to a flash-resident key")
check(c.get("k2") == b"head+" + value(2), "value after prepend")
check(c.add("k3", b"x", noreply=False) is False, "add over a flash-resident key")
check(c.touch("k4", 3600, noreply=False) is True, "touch of a flash-resident key")
got, cas = c.gets("k5")
check(got == value(5), "gets of a flash-resident key")
check(c.cas("k5", b"swapped", cas, noreply=False) is True, "cas with the token read from flash")
check(c.cas("k5", b"again", cas, noreply=False) is False, "the old token no longer matches")
check(c.get("k5") == b"swapped", "value after cas")
check(c.delete("k6", noreply=False) is True, "delete of a flash-resident key")
check(c.get("k6") is None, "deleted stays deleted")
check(c.delete("k6", noreply=False) is False, "second delete")
print("all checks passed")

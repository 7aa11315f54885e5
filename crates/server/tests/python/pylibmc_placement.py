"""Where pylibmc (libmemcached, weighted ketama) puts keys: writes every key through a pylibmc
client of the whole fleet, then asks each server directly which keys it holds.

usage: pylibmc_placement.py SERVERS KEYS_FILE OUT_FILE [DEAD]

SERVERS is "host:port:weight,..." in fleet order. DEAD, if given, is a server of the fleet
that is down: the client ejects it (remove_failed) before the keys are written. OUT_FILE gets
"key host:port" lines. Run with Debian's python3 (python3-pylibmc).
"""
import sys
import time

import pylibmc


def main():
    servers = sys.argv[1].split(",")
    keys = open(sys.argv[2]).read().split()
    dead = sys.argv[4] if len(sys.argv) > 4 else None
    behaviors = {"ketama_weighted": True, "tcp_nodelay": True}
    if dead:
        # Ejected at its first failure, for ten minutes (libmemcached ejects on the attempt after
        # failure_limit failures, and keeps the server out for dead_timeout).
        behaviors.update({"remove_failed": 1, "failure_limit": 1, "retry_timeout": 600, "dead_timeout": 600,
                          "connect_timeout": 200})
    fleet = pylibmc.Client(servers, behaviors=behaviors)
    if dead:
        # Each failed request counts; once the dead server is ejected every key is stored.
        deadline = time.time() + 30
        while time.time() < deadline:
            failed = 0
            for i in range(200):
                try:
                    fleet.set("probe:%d" % i, b"p")
                except pylibmc.Error:
                    failed += 1
            if failed == 0:
                break
        else:
            sys.exit("pylibmc never ejected " + dead)
    for at in range(0, len(keys), 1000):
        batch = keys[at:at + 1000]
        failed = fleet.set_multi({k: b"x" for k in batch})
        if failed:
            sys.exit("pylibmc could not store %d keys" % len(failed))
    owner = {}
    for spec in servers:
        host, port = spec.split(":")[:2]
        if "%s:%s" % (host, port) == dead:
            continue
        one = pylibmc.Client(["%s:%s" % (host, port)])
        for at in range(0, len(keys), 1000):
            for key in one.get_multi(keys[at:at + 1000]):
                if key in owner:
                    sys.exit("%s is on two servers" % key)
                owner[key] = "%s:%s" % (host, port)
    with open(sys.argv[3], "w") as out:
        for key in keys:
            out.write("%s %s\n" % (key, owner.get(key, "-")))


main()

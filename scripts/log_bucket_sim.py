#!/usr/bin/env python3
"""How often a one-choice bucket of the sets index's log index overflows, by its width.

A full FIFO log of `load * buckets * ways` items: each new item goes to a random bucket, the
oldest item leaves the log (and its bucket) as each new one comes, and a new item arriving at a
full bucket pushes that bucket's oldest out (an item lost: `index evictions` in flash-bench).
Prints, per width and load, the share of inserts that push one out. Same total ways each time.

Usage: python3 scripts/log_bucket_sim.py [TOTAL_WAYS]
"""
import collections
import random
import sys


def overflow_share(buckets, ways, load, rounds=4):
    """Share of inserts that find their bucket full."""
    per_bucket = [collections.deque() for _ in range(buckets)]
    log = collections.deque()
    live = set()
    capacity = int(buckets * ways * load)
    inserts = capacity * rounds
    pushed_out = 0
    for item in range(inserts):
        if len(log) >= capacity:
            old, old_bucket = log.popleft()
            if old in live:
                live.discard(old)
                per_bucket[old_bucket].remove(old)
        b = random.randrange(buckets)
        if len(per_bucket[b]) >= ways:
            live.discard(per_bucket[b].popleft())
            pushed_out += 1
        per_bucket[b].append(item)
        live.add(item)
        log.append((item, b))
    return pushed_out / inserts


def main():
    total_ways = int(sys.argv[1]) if len(sys.argv) > 1 else 160_000
    random.seed(1)
    print("ways  load  overflow share")
    for ways in (8, 16, 32, 64):
        for load in (0.64, 0.72, 0.8):
            print(f"{ways:4}  {load:.2f}  {overflow_share(total_ways // ways, ways, load):.4f}")


if __name__ == "__main__":
    main()

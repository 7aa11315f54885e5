#!/usr/bin/env python3
"""How much of a request's life is spent at the device when replies go back in order.

A model, not a measurement: CONNECTIONS connections each keep WINDOW requests in flight (a new
one sent as each reply is delivered, as `tierkv-bench run --window` does); a share FLASH of the
requests needs a device read of random latency (exponential, or fixed, with mean MEAN ms), the
rest need none; a connection's replies are delivered in request order, so a finished read waits
for every earlier one. Prints the share of the requests' time spent at the device: what fio, with
no order among its reads, keeps at 1.0. Used in docs/benchmarks.md (issue 32).

Usage: python3 scripts/in_order_model.py [--connections 8] [--windows 1,4,16,32] [--flash 0.7]
"""
import argparse
import random


def device_share(window, flash, mean, fixed, requests, rng):
    def latency():
        if rng.random() >= flash:
            return 0.0
        return mean if fixed else rng.expovariate(1 / mean)

    pending = [(0.0, latency()) for _ in range(window)]
    delivered = 0.0
    at_device = life = 0.0
    for _ in range(requests):
        sent, took = pending.pop(0)
        delivered = max(sent + took, delivered)
        at_device += took
        life += delivered - sent
        pending.append((delivered, latency()))
    return at_device / life


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--windows", default="1,4,16,32")
    ap.add_argument("--flash", type=float, default=0.7, help="share of requests that read the device")
    ap.add_argument("--mean", type=float, default=1.2, help="mean read latency, ms")
    ap.add_argument("--requests", type=int, default=25000, help="per connection")
    args = ap.parse_args()
    for window in (int(w) for w in args.windows.split(",")):
        shares = []
        for fixed in (False, True):
            rng = random.Random(1)
            runs = [device_share(window, args.flash, args.mean, fixed, args.requests, rng)
                    for _ in range(args.connections)]
            shares.append(sum(runs) / len(runs))
        print(f"window {window}: share of request time at the device {shares[0]:.2f} (exponential "
              f"latency), {shares[1]:.2f} (fixed latency)")


if __name__ == "__main__":
    main()

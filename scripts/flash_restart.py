"""Warm restart retention: starts tierkv on a flash file, fills KEYS keys with values of MIN-MAX
bytes (each value derived from its key, so a wrong one is seen), reads every key, stops the
server (SIGTERM, or SIGKILL with --kill), starts it again on the same file and reads every key
again. Prints the keys served before and after, the share kept, and wrong values.

    python3 scripts/flash_restart.py [--index full|cascade|sets] [--keys N] [--min B] [--max B]
        [--size 1g] [--memory 32] [--kill] [--damage-snapshot] [--bin target/release/tierkv]

--damage-snapshot flips bytes in the first partition's index snapshot between the stop and the
restart (a clean stop only): that partition must come back through recovery from its segments.
"""
import argparse, os, random, signal, socket, subprocess, sys, tempfile, time


def value(i, lo, hi):
    n = random.Random(i).randint(lo, hi)
    return ((f"<{i}>" * (n // 3 + 2))[:n]).encode()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(args, path, port):
    cmd = [args.bin, "-p", str(port), "-U", "0", "-t", "2", "-m", str(args.memory), "--flash-path", path,
           "--flash-size", args.size, "--flash-index", args.index]
    log = open(path + ".log", "a")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit(f"the server did not start: {open(path + '.log').read()[-2000:]}")


def fill(port, args):
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    for lo in range(0, args.keys, 200):
        batch = b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v)
                         for i in range(lo, min(lo + 200, args.keys)) for v in [value(i, args.min, args.max)])
        s.sendall(batch + b"mn\r\n")
        assert f.readline() == b"MN\r\n"
    s.close()


def read_all(port, args):
    """Keys served (as a set) and wrong values."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    f = s.makefile("rb")
    served, wrong = set(), 0
    for lo in range(0, args.keys, 100):
        keys = range(lo, min(lo + 100, args.keys))
        s.sendall(b"get " + b" ".join(b"k%d" % i for i in keys) + b"\r\n")
        while True:
            line = f.readline()
            if line == b"END\r\n":
                break
            _, key, _, size = line.split()[:4]
            data = f.read(int(size) + 2)[:-2]
            i = int(key[1:])
            if data == value(i, args.min, args.max):
                served.add(i)
            else:
                wrong += 1
    s.close()
    return served, wrong


def stats(port):
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    s.sendall(b"stats\r\n")
    out = {}
    while (line := f.readline()) != b"END\r\n":
        parts = line.decode().split()
        out[parts[1]] = parts[2]
    s.close()
    return out


def damage_snapshot(path):
    """Flips bytes in the first partition's index snapshot (after the file header page and the region's two superblock pages)."""
    with open(path, "r+b") as f:
        f.seek(3 * 4096 + 100)
        chunk = bytearray(f.read(64))
        for j in range(len(chunk)):
            chunk[j] ^= 0x5A
        f.seek(3 * 4096 + 100)
        f.write(chunk)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--index", default="sets")
    p.add_argument("--keys", type=int, default=120000)
    p.add_argument("--min", type=int, default=200)
    p.add_argument("--max", type=int, default=1800)
    p.add_argument("--size", default="1g")
    p.add_argument("--memory", type=int, default=32)
    p.add_argument("--kill", action="store_true")
    p.add_argument("--damage-snapshot", action="store_true")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--bin", default="target/release/tierkv")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "restart.flash")
        port = free_port()
        proc = start(args, path, port)
        fill(port, args)
        time.sleep(1)
        before, wrong_before = read_all(port, args)
        st_before = stats(port)
        t = time.time()
        proc.send_signal(signal.SIGKILL if args.kill else signal.SIGTERM)
        proc.wait(timeout=60)
        stop_s = time.time() - t
        if args.damage_snapshot:
            damage_snapshot(path)
        proc = start(args, path, port)
        after, wrong_after = read_all(port, args)
        st = stats(port)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        kept = len(before & after)
        log = [l for l in open(path + ".log").read().splitlines() if "flash" in l.lower()]
    print(f"index {args.index}, {args.keys} keys of {args.min}-{args.max} B, -m {args.memory}, {args.size}, "
          f"{'kill -9' if args.kill else 'SIGTERM'}{' + damaged snapshot' if args.damage_snapshot else ''}: "
          f"served before {len(before)}, after {len(after)}, kept {kept} ({100.0 * kept / max(1, len(before)):.2f}%), "
          f"wrong {wrong_before} before / {wrong_after} after, stop {stop_s:.2f} s, "
          f"flash_recovered_items {st.get('flash_recovered_items', '-')}")
    if args.verbose:
        for k, v in st_before.items():
            if k.startswith("flash_") and v != "0":
                print(f"  before the stop: {k} {v}")
    for line in log[-8:]:
        print("  log:", line)


if __name__ == "__main__":
    main()

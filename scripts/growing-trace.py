#!/usr/bin/env python3
"""A trace whose working set outgrows a cache: for `cache-stress --trace`, to compare a
fixed-size cache with one that grows by policy (`--growth-policy`).

    scripts/growing-trace.py [REQUESTS [FIRST [LAST [SIZE [SEED]]]]] > trace.txt

Request n of N reads key k = floor(W * u^1.5), u uniform in [0, 1), over a working set
W that grows linearly from FIRST keys to LAST: low keys stay hot, new ones keep coming.
Each line is `KEY,SIZE`. Defaults: 2,000,000 requests, 20,000 to 200,000 keys, 200-byte
values, seed 7. Deterministic for a seed.
"""
import random
import sys


def main() -> None:
    a = sys.argv[1:]
    n = int(a[0]) if len(a) > 0 else 2_000_000
    first = int(a[1]) if len(a) > 1 else 20_000
    last = int(a[2]) if len(a) > 2 else 200_000
    size = int(a[3]) if len(a) > 3 else 200
    rng = random.Random(int(a[4]) if len(a) > 4 else 7)
    out = sys.stdout
    for i in range(n):
        w = int(first + (last - first) * i / n)
        out.write(f"k{int(w * rng.random() ** 1.5)},{size}\n")


if __name__ == "__main__":
    main()

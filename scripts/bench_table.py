#!/usr/bin/env python3
"""Turns bench.sh's raw lines into the DESIGN.md table: best and median ops/s per
peer and cell, and MappedCache's ratios to its peers: best/best, then in parentheses
median/median (the VM's fast and slow phases move a best by up to 2x; the medians show
whether a ratio is the design's or one lucky rep's).

A cell is (procs, read%, dist, keys, mget). Single-get cells compare mappedcache_word
with limit_c, limit_c_spin and lmdb_c; multi-get cells (mget > 1) compare
mappedcache_word_mget with limit_c_mget and redis_mget, and with MappedCache's own
single gets in the cell of the same keys ("mget/single"). Runs with their file on a
huge-page tmpfs (`*_huge`, bench.sh's HUGE_DIR) get a "huge/4K" ratio each."""
import json, re, statistics, sys
from collections import defaultdict

runs = defaultdict(list)  # (peer, procs, read, dist, keys, mget) -> [(ops, p50, p99)]
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.startswith("peer=") or " FAILED" in line:
        continue
    f = dict(re.findall(r"(\w+)=(\S+)", line.split(" json=")[0]))
    key = (f["peer"], int(f["procs"]), int(f["read_pct"]), f["dist"], int(f.get("keys", 100000)), int(f.get("mget", 1)))
    if " json=" in line:
        j = json.loads(line.split(" json=", 1)[1])
        # Peers time every kind of op into one histogram; at 0 % reads that is the sets.
        p50, p99 = (j["set_p50_ns"], j["set_p99_ns"]) if key[2] == 0 else (j["get_p50_ns"], j["get_p99_ns"])
        runs[key].append((j["ops_per_s"], p50, p99))
    elif "ops_per_s" in f:
        runs[key].append((float(f["ops_per_s"]), float(f["p50_ns"]), float(f["p99_ns"])))


def fmt(x):
    return f"{x/1e6:.2f}M" if x >= 1e6 else f"{x/1e3:.0f}k"


def stats(peer, cell):
    r = runs.get((peer,) + cell, [])
    if not r:
        return None
    b = max(r, key=lambda x: x[0])
    return {"best": b[0], "med": statistics.median(x[0] for x in r), "p50": b[1], "p99": b[2], "n": len(r)}


cells = sorted({k[1:] for k in runs}, key=lambda c: (c[4] > 1, c[3], c[0], -c[1], c[2], c[4]))
for multi in (False, True):
    group = [c for c in cells if (c[4] > 1) == multi]
    if not group:
        continue
    peers = sorted({k[0] for k in runs if k[1:] in group}, key=lambda p: (not p.startswith("mappedcache"), p))
    mc = "mappedcache_word_mget" if multi else "mappedcache_word"
    others = ["limit_c_mget", "redis_mget"] if multi else ["limit_c", "limit_c_spin", "lmdb_c"]
    others = [q for q in others if q in peers]
    extra = ["mget/single"] if multi else []
    huge = [p for p in peers if p.endswith("_huge")]
    print("| procs | read% | dist | keys | mget | " + " | ".join(peers) + " | "
          + " | ".join([f"MC/{q}" for q in others] + extra + [f"{p[:-5]} huge/4K" for p in huge]) + " |")
    print("|---|---|---|---|---|" + "---|" * (len(peers) + len(others) + len(extra) + len(huge)))
    for c in group:
        row = []
        for p in peers:
            s = stats(p, c)
            row.append("–" if s is None else
                       f"{fmt(s['best'])} (med {fmt(s['med'])}, p50 {s['p50']:.0f} ns, p99 {s['p99']:.0f} ns, {s['n']} runs)")
        m = stats(mc, c)

        def ratio(a, b):
            return f"{a['best'] / b['best']:.2f} ({a['med'] / b['med']:.2f})" if a and b else "–"

        ratios = [ratio(m, stats(q, c)) for q in others]
        if multi:
            ratios.append(ratio(m, stats("mappedcache_word", c[:4] + (1,))))
        ratios += [ratio(stats(p, c), stats(p[:-5], c)) for p in huge]
        print(f"| {c[0]} | {c[1]} | {c[2]} | {c[3]:,} | {c[4]} | " + " | ".join(row) + " | " + " | ".join(ratios) + " |")
    print()

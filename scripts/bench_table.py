#!/usr/bin/env python3
"""Turns bench.sh's raw lines into the DESIGN.md table: best and median ops/s per
peer and cell, and MappedCache's ratios to limit_c, limit_c_spin and LMDB: best/best,
then in parentheses median/median (the VM's fast and slow phases move a best by up to
2x; the medians show whether a ratio is the design's or one lucky rep's)."""
import json, re, statistics, sys
from collections import defaultdict

runs = defaultdict(list)  # (peer, procs, read, dist) -> [(ops, p50, p99, set_p99)]
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.startswith("peer="):
        continue
    f = dict(re.findall(r"(\w+)=(\S+)", line.split(" json=")[0]))
    key = (f["peer"], int(f["procs"]), int(f["read_pct"]), f["dist"])
    if " json=" in line:
        j = json.loads(line.split(" json=", 1)[1])
        # Peers time every kind of op into one histogram; at 0 % reads that is the sets.
        p50, p99 = (j["set_p50_ns"], j["set_p99_ns"]) if key[2] == 0 else (j["get_p50_ns"], j["get_p99_ns"])
        runs[key].append((j["ops_per_s"], p50, p99, j.get("set_p99_ns", 0)))
    else:
        runs[key].append((float(f["ops_per_s"]), float(f["p50_ns"]), float(f["p99_ns"]), 0))

def fmt(x):
    return f"{x/1e6:.2f}M" if x >= 1e6 else f"{x/1e3:.0f}k"

cells = sorted({k[1:] for k in runs}, key=lambda c: (c[0], -c[1], c[2]))
peers = sorted({k[0] for k in runs}, key=lambda p: (not p.startswith("mappedcache"), p))
print("| procs | read% | dist | " + " | ".join(peers) + " | MC/limit_c | MC/limit_c_spin | MC/lmdb_c |")
print("|---|---|---|" + "---|" * len(peers) + "---|---|---|")
for c in cells:
    row, best, med = [], {}, {}
    for p in peers:
        r = runs.get((p,) + c, [])
        if not r:
            row.append("–"); continue
        ops = [x[0] for x in r]
        b = max(r, key=lambda x: x[0])
        best[p] = b[0]
        med[p] = statistics.median(ops)
        row.append(f"{fmt(b[0])} (med {fmt(med[p])}, p50 {b[1]:.0f} ns, p99 {b[2]:.0f} ns)")
    mc, mcm = best.get("mappedcache_word", 0), med.get("mappedcache_word", 0)
    ratio = lambda q: f"{mc / best[q]:.2f} ({mcm / med[q]:.2f})" if best.get(q) else "–"
    print(f"| {c[0]} | {c[1]} | {c[2]} | " + " | ".join(row) + f" | {ratio('limit_c')} | {ratio('limit_c_spin')} | {ratio('lmdb_c')} |")

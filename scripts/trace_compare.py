#!/usr/bin/env python3
"""Hit ratios of MappedCache's eviction beside libCacheSim's policies, on the same traces
and cache sizes in objects (run by scripts/trace-compare.sh, which sets up the venv).

For each trace (synthetic ones generated here with libCacheSim's generator, plus any
trace file given) and each size (a fraction of the trace's distinct objects), it replays
the trace in `cache-stress --trace` twice: with `--count-limit N` (ours, count) and with
a file sized by bytes to hold N entries, no count limit (`--capacity-entries N`; ours,
bytes), and in libCacheSim with every object of size 1 and a cache of N: LRU, SIEVE,
S3-FIFO (small 10 %, ghost 90 %, move to main after 2 hits), ARC, W-TinyLFU, Belady.
Prints one markdown table (and, with --json FILE, the numbers).

Trace files: one key per line (integers, as libCacheSim's plain-text traces), or a
libCacheSim oracleGeneral binary (*.oracleGeneral.bin), converted here.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import libcachesim as lcs

POLICIES = [
    ("LRU", lambda n: lcs.LRU(n)),
    ("SIEVE", lambda n: lcs.Sieve(n)),
    ("S3-FIFO", lambda n: lcs.S3FIFO(n)),
    ("ARC", lambda n: lcs.ARC(n)),
    ("W-TinyLFU", lambda n: lcs.WTinyLFU(n)),
    ("Belady", lambda n: lcs.Belady(n)),
]


def zipf_ids(objects, requests, alpha, seed):
    """Object ids drawn by libCacheSim's own Zipf generator."""
    r = lcs.SyntheticReader(num_of_req=requests, obj_size=1, alpha=alpha, dist="zipf",
                            num_objects=objects, seed=seed)
    return [int(x) for x in r.obj_ids]


def uniform_ids(objects, requests, seed):
    r = lcs.SyntheticReader(num_of_req=requests, obj_size=1, dist="uniform", num_objects=objects, seed=seed)
    return [int(x) for x in r.obj_ids]


def scan_mix_ids(objects, requests, alpha, scan_share, seed):
    """Zipf requests with one-time keys (a scan) mixed in: block I/O's one-hit wonders."""
    hot = zipf_ids(objects, requests, alpha, seed)
    rng = np.random.default_rng(seed)
    out, fresh = [], objects + 1_000_000
    for x in hot:
        if rng.random() < scan_share:
            out.append(fresh)
            fresh += 1
        else:
            out.append(x)
    return out


def read_trace(path):
    if path.endswith(".oracleGeneral.bin"):
        data = open(path, "rb").read()
        return [struct.unpack_from("<IQIq", data, i)[1] for i in range(0, len(data) - 23, 24)]
    return [int(line) for line in open(path) if line.strip()]


def write_oracle(ids, path):
    """libCacheSim's oracleGeneral format: time u32, id u64, size u32, next access i64.
    Belady needs the next access; every policy reads this file, with sizes of 1."""
    nxt = [-1] * len(ids)
    last = {}
    for i in range(len(ids) - 1, -1, -1):
        nxt[i] = last.get(ids[i], -1)
        last[ids[i]] = i
    with open(path, "wb") as f:
        for i, o in enumerate(ids):
            f.write(struct.pack("<IQIq", i, o, 1, nxt[i]))


def ours(binary, trace_txt, n, mode):
    args = [binary, "--trace", trace_txt, "--json"]
    if mode == "count":
        # The file's own limits stay far above n: only the count limit decides.
        cap = max(16 << 20, n * 1024)
        args += ["--value-size", "64", "--count-limit", str(n), "--capacity", str(cap)]
    else:
        # A file holds at least 1 MiB: values large enough that n entries need more.
        value = max(64, -(-(3 << 20) // n))
        args += ["--value-size", str(value), "--capacity-entries", str(n)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="cache-stress binary")
    ap.add_argument("--fractions", default="0.05,0.1,0.2,0.4")
    ap.add_argument("--objects", type=int, default=20000, help="objects of the synthetic traces")
    ap.add_argument("--requests", type=int, default=200000, help="requests of the synthetic traces")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("traces", nargs="*", help="trace files (one key per line, or *.oracleGeneral.bin)")
    a = ap.parse_args()

    traces = []
    if not a.no_synthetic:
        for alpha in (0.6, 0.8, 1.0, 1.2):
            traces.append((f"zipf {alpha}", zipf_ids(a.objects, a.requests, alpha, a.seed)))
        traces.append(("zipf 1.0 + 30 % scan", scan_mix_ids(a.objects, a.requests, 1.0, 0.3, a.seed)))
        traces.append(("uniform", uniform_ids(a.objects, a.requests, a.seed)))
    for path in a.traces:
        traces.append((os.path.basename(path), read_trace(path)))

    fractions = [float(f) for f in a.fractions.split(",")]
    rows, results = [], []
    with tempfile.TemporaryDirectory(prefix="mc-trace-") as tmp:
        for name, ids in traces:
            txt = os.path.join(tmp, "trace.txt")
            with open(txt, "w") as f:
                f.write("\n".join(str(x) for x in ids) + "\n")
            og = os.path.join(tmp, "trace.oracleGeneral.bin")
            write_oracle(ids, og)
            reader = lcs.TraceReader(og, lcs.TraceType.ORACLE_GENERAL_TRACE,
                                     lcs.ReaderInitParam(ignore_obj_size=True))
            distinct = len(set(ids))
            one_hit = sum(1 for c in np.unique(np.array(ids), return_counts=True)[1] if c == 1)
            for frac in fractions:
                n = max(10, int(distinct * frac))
                r = {"trace": name, "requests": len(ids), "objects": distinct, "one_hit_share": one_hit / distinct,
                     "fraction": frac, "size": n}
                c = ours(a.bin, txt, n, "count")
                b = ours(a.bin, txt, n, "bytes")
                assert c["requests"] == len(ids), (c["requests"], len(ids))
                r["ours_count"] = c["hit_ratio"]
                r["ours_bytes"] = b["hit_ratio"]
                r["ours_bytes_entries"] = b["fitted_entries"]
                for pname, make in POLICIES:
                    r[pname] = 1 - make(n).process_trace(reader)[0]
                results.append(r)
                print(f"{name} {frac}: ours {r['ours_count']:.4f} / {r['ours_bytes']:.4f}, "
                      f"S3-FIFO {r['S3-FIFO']:.4f}", file=sys.stderr, flush=True)

    head = ["trace (requests, objects, one-hit)", "size", "ours count", "ours bytes"] + [p for p, _ in POLICIES] + \
        ["ours − S3-FIFO (count, bytes)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in results:
        cells = [f"{r['trace']} ({r['requests']:,}, {r['objects']:,}, {r['one_hit_share']:.0%})",
                 f"{r['fraction']:.0%} = {r['size']:,}",
                 f"{r['ours_count']:.4f}", f"{r['ours_bytes']:.4f} ({r['ours_bytes_entries']:,})"]
        cells += [f"{r[p]:.4f}" for p, _ in POLICIES]
        cells.append(f"{r['ours_count'] - r['S3-FIFO']:+.4f}, {r['ours_bytes'] - r['S3-FIFO']:+.4f}")
        print("| " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

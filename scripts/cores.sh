#!/usr/bin/env bash
# cores.sh - how MappedCache and limit_c (../shared/peers: the C baseline of the design,
# one flock for every writer) scale with processes: 1..N worker processes at 100, 90, 50
# and 0 % gets, uniform keys (and Zipf with DISTS="uniform zipf"), with Zipf (0.99) keys
# at 100, 90 and 0 % gets besides (ZIPF_READS: the hot keys' gets and sets), 12-byte keys
# and 64-byte values, interleaved reps through scripts/bench.sh. Prints bench.sh's table,
# then the scaling table: ops/s per cell (best of the reps, median in parentheses),
# each side's speed-up over its own 1-process run, and MappedCache / limit_c.
#
#   scripts/cores.sh                       # 1..$(nproc) processes, REPS=3, DURATION=3
#   PROCS="1 2 4 8 16" REPS=3 scripts/cores.sh      # a many-core machine
#   READS="100 0" DISTS="uniform zipf" scripts/cores.sh
#   ZIPF_READS="" scripts/cores.sh          # uniform keys only
#
# env: PROCS (default 1..nproc; more than 16 steps: powers of two and nproc), READS
#      (default "100 90 50 0"), DISTS (default uniform), ZIPF_READS (default "100 90 0":
#      Zipf cells added at these gets' shares when DISTS has no zipf), REPS (3), DURATION
#      (3), KEYS
#      (100000), and bench.sh's PEERS_DIR, NO_INSTALL, CAPACITY (default: 16 MiB for each
#      of the machine's default partitions, at least 32 MiB), OUT.
# A machine without Swift, a compiler or the network (how the 16-core run in
# docs/history/bench-history.md was made): build both here, carry them there, then
#   swift build -c release --product cache-stress --static-swift-stdlib     # here
#   gcc -O2 -o prebuilt/limit_c ../shared/peers/limit_c.c -lm -lpthread       # here
#   STRESS=./cache-stress PEERS_PREBUILT=prebuilt NO_INSTALL=1 scripts/cores.sh   # there
# The same command runs unchanged on a 2-core VM and a 192-core host: MappedCache's file
# has the default partition count for the machine it is created on (`mapped-cache info`
# shows it), limit_c its one lock.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
n=$(nproc)
if [ -z "${PROCS:-}" ]; then
  if [ "$n" -le 16 ]; then
    PROCS=$(seq -s ' ' 1 "$n")
  else
    PROCS=""
    p=1
    while [ "$p" -lt "$n" ]; do PROCS="$PROCS $p"; p=$((p * 2)); done
    PROCS="$PROCS $n"
  fi
fi
READS="${READS:-100 90 50 0}"
DISTS="${DISTS:-uniform}"
ZIPF_READS="${ZIPF_READS-100 90 0}"
KEYS="${KEYS:-100000}"
export REPS="${REPS:-3}" DURATION="${DURATION:-3}"
# MappedCache's file for 100,000 keys: large enough that its partitions are as many as the
# machine's default (32 a core, at most 1,024; each holds twelve 1 MiB values, so 16 MiB
# each is room), so that the capacity does not cap the writers' locks; bench.sh scales it
# with KEYS. The file is allocated whole when it is created: 8 GiB on 16 cores, 16 GiB
# from 32 cores on, in /dev/shm's memory while a run lasts (bench.sh checks it fits).
if [ -z "${CAPACITY:-}" ]; then
  parts=1
  while [ "$parts" -lt $((32 * n)) ] && [ "$parts" -lt 1024 ]; do parts=$((parts * 2)); done
  CAPACITY="$((parts * 16 > 32 ? parts * 16 : 32))MiB"
fi
export CAPACITY
export OUT="${OUT:-/tmp/mc-cores-$(date +%Y-%m-%d-%H%M%S).txt}"
cells=""
for dist in $DISTS; do
  for read in $READS; do
    for p in $PROCS; do cells="$cells $p:$read:$dist:$KEYS"; done
  done
done
if [[ " $DISTS " != *" zipf "* ]]; then
  for read in $ZIPF_READS; do
    for p in $PROCS; do cells="$cells $p:$read:zipf:$KEYS"; done
  done
fi
CELLS="$cells" PEERS=limit_c LOCKS=word "$HERE/scripts/bench.sh"
echo
python3 - "$OUT" <<'PY'
import re, statistics, sys
from collections import defaultdict
runs = defaultdict(list)  # (side, read, dist, procs) -> [ops/s]
for line in open(sys.argv[1]):
    if not line.startswith("peer=") or " FAILED" in line:
        continue
    f = dict(re.findall(r"(\w+)=(\S+)", line.split(" json=")[0]))
    side = {"mappedcache_word": "mc", "limit_c": "c"}.get(f["peer"])
    if side is None:
        continue
    if " json=" in line:
        ops = float(re.search(r'"ops_per_s"\s*:\s*([0-9.e+]+)', line.split(" json=", 1)[1]).group(1))
    else:
        ops = float(f["ops_per_s"])
    runs[(side, int(f["read_pct"]), f["dist"], int(f["procs"]))].append(ops)
def fmt(x):
    return f"{x/1e6:.2f}M" if x >= 1e6 else f"{x/1e3:.0f}k"
print("Scaling: ops/s best (median); speed-up = best / best of 1 process; MC/limit_c best/best (median/median)")
print("| read% | dist | procs | MappedCache | speed-up | limit_c | speed-up | MC/limit_c |")
print("|---|---|---|---|---|---|---|---|")
for read, dist in sorted({(k[1], k[2]) for k in runs}, key=lambda c: (-c[0], c[1])):
    procs = sorted({k[3] for k in runs if k[1:3] == (read, dist)})
    for p in procs:
        mc, c = runs.get(("mc", read, dist, p), []), runs.get(("c", read, dist, p), [])
        mc1, c1 = runs.get(("mc", read, dist, procs[0]), []), runs.get(("c", read, dist, procs[0]), [])
        def cell(r):
            return f"{fmt(max(r))} ({fmt(statistics.median(r))})" if r else "–"
        def up(r, r1):
            return f"{max(r) / max(r1):.2f}×" if r and r1 else "–"
        ratio = f"{max(mc) / max(c):.2f} ({statistics.median(mc) / statistics.median(c):.2f})" if mc and c else "–"
        print(f"| {read} | {dist} | {p} | {cell(mc)} | {up(mc, mc1)} | {cell(c)} | {up(c, c1)} | {ratio} |")
PY
echo "raw lines: $OUT" >&2

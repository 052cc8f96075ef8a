#!/usr/bin/env bash
# ab-pairs.sh - this checkout's cache-stress against another checkout's (BASE) with
# several processes, in pairs run back to back: for each rep, BASE's run then this
# one's (the order alternating), each on a file of its own prefilled for the run, with
# the CPUs' placement probed just before the pair (`scripts/pingpong.c`, as
# set-scaling.sh does). On a VM whose host moves its vCPUs between one L3 and two
# within seconds, two writers' rates move by ±30 % with the placement; the ratio within
# a pair, whose runs are seconds apart, moves far less. Prints each pair's ratio
# (main / base) tagged n (near: the probe under SPLIT_NS), f (far) or ? (no probe), and
# the median of the pairs' ratios, over all pairs and over the near and the far ones.
#
#   BASE=../base scripts/ab-pairs.sh REPS [cache-stress options]
#   BASE=../base scripts/ab-pairs.sh 10 --procs 2 --read-pct 0 --dist zipf
#
# Both checkouts must have a release build of cache-stress. Each run has --threads 1
# --keys 100000 --key-size 12 --value-size 64 --capacity 33MiB --track-every 16
# --check-every 64 unless the options given say otherwise (later options win).
# env: DURATION (seconds a run, default 2), SPLIT_NS (100).
set -euo pipefail
[ $# -ge 1 ] && [ -n "${BASE:-}" ] || { sed -n 2,19p "$0" >&2; exit 2; }
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=$1; shift
A="$BASE/.build/release/cache-stress" B="$HERE/.build/release/cache-stress"
[ -x "$A" ] && [ -x "$B" ] || { echo "error: build cache-stress in release in both checkouts" >&2; exit 2; }
DIR="$(mktemp -d /dev/shm/mc-ab-pairs.XXXXXX)"
trap 'rm -rf "$DIR"' EXIT
PROBE="$DIR/pingpong"
cc -O2 -o "$PROBE" "$HERE/scripts/pingpong.c" 2>/dev/null || PROBE=""
common=(--threads 1 --keys 100000 --key-size 12 --value-size 64 --capacity 33MiB --track-every 16
  --check-every 64 --duration "${DURATION:-2}")
for r in $(seq 1 "$REPS"); do
  pp=-
  [ -n "$PROBE" ] && pp=$("$PROBE" 0 1 50000 || echo -)
  sides="base main"; [ $((r % 2)) = 0 ] && sides="main base"
  for side in $sides; do
    bin=$A; [ "$side" = main ] && bin=$B
    "$bin" "${common[@]}" --path "$DIR/cache.mcache" --seed "$r" "$@" --json 2>/dev/null \
      | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['passed'] and d['corrupt_reads']==0, d; print('$r $side', d['ops_per_s'], '$pp')"
    rm -f "$DIR/cache.mcache"
  done
done | python3 -c "
import sys, statistics
split = float('${SPLIT_NS:-100}')
runs = {}
for line in sys.stdin:
    r, side, v, pp = line.split()
    runs.setdefault(r, {})[side] = float(v)
    runs[r]['tag'] = '?' if pp == '-' else ('n' if float(pp) < split else 'f')
pairs = [(d['main'] / d['base'], d['tag']) for d in runs.values()]
print(' '.join('%.3f%s' % p for p in pairs))
for name, sel in (('all', None), ('near', 'n'), ('far', 'f')):
    xs = [x for x, t in pairs if sel is None or t == sel]
    if xs:
        print('main/base %s: median %.3f over %d pairs' % (name, statistics.median(xs), len(xs)))
"

#!/usr/bin/env bash
# ab.sh - this checkout's cache-stress against another checkout's (BASE), on one file
# prefilled once by BASE's build, then read (or written) by both in interleaved runs
# (--no-prefill), so that both sides see the same records at the same offsets: a file
# prefilled anew for each run moves 10 M-key reads by ±10 % from layout alone.
#
#   BASE=/path/to/other/checkout scripts/ab.sh KEYS REPS [cache-stress options]
#   BASE=../base scripts/ab.sh 100000 8                  # gets, 100 k keys
#   BASE=../base scripts/ab.sh 10000000 6 --mget 16      # batch reads, 10 M keys
#   BASE=../base scripts/ab.sh 100000 8 --read-pct 0     # sets
#
# Both checkouts must have a release build of cache-stress. Prints each side's ops/s
# (best, median, every run) and main/base as best/best and median/median.
# env: DURATION (seconds a run, default 3), KEEP=1 (keep the prefilled file).
set -euo pipefail
[ $# -ge 2 ] && [ -n "${BASE:-}" ] || { sed -n 2,14p "$0" >&2; exit 2; }
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KEYS=$1 REPS=$2; shift 2
A="$BASE/.build/release/cache-stress" B="$HERE/.build/release/cache-stress"
[ -x "$A" ] && [ -x "$B" ] || { echo "error: build cache-stress in release in both checkouts" >&2; exit 2; }
cap=$(( 32 * KEYS / 100000 + 1 ))MiB
F="$(mktemp -u /dev/shm/mc-ab.XXXXXX.mcache)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -f "$F"' EXIT
common=(--procs 1 --threads 1 --keys "$KEYS" --key-size 12 --value-size 64 --read-pct 100 --dist uniform
  --capacity "$cap" --track-every 16 --check-every 64)
"$A" "${common[@]}" --duration 1 --path "$F" >/dev/null 2>&1 || { echo "error: the prefill by BASE failed" >&2; exit 1; }
for r in $(seq 1 "$REPS"); do
  sides="base main"; [ $((r % 2)) = 0 ] && sides="main base"
  for side in $sides; do
    bin=$A; [ $side = main ] && bin=$B
    "$bin" "${common[@]}" --duration "${DURATION:-3}" --path "$F" --no-prefill --seed "$r" "$@" --json 2>/dev/null \
      | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['passed'] and d['corrupt_reads']==0, d; print('$side', d['ops_per_s'])"
  done
done | python3 -c "
import sys, statistics
d = {}
for l in sys.stdin:
    s, v = l.split(); d.setdefault(s, []).append(float(v))
for s in ('base', 'main'):
    print(s, 'best %.2fM med %.2fM' % (max(d[s]) / 1e6, statistics.median(d[s]) / 1e6), ' '.join('%.2f' % (x / 1e6) for x in d[s]))
print('main/base best %.3f med %.3f' % (max(d['main']) / max(d['base']), statistics.median(d['main']) / statistics.median(d['base'])))
"

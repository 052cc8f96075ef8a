#!/usr/bin/env bash
# ab-builds.sh - several cache-stress binaries (builds of different checkouts, or
# variants of one) run in turn, one process each, rotating the order every rep, on one
# file prefilled once by the first (as scripts/ab.sh does for two), or with FRESH=1 on a
# file made anew for each run (needed when runs both read and write: on one file a run
# would read the values an earlier run's writer left, whose sequence numbers its own
# restart below). Prints each binary's best and median ops/s and their ratios to the
# first's.
#
#   scripts/ab-builds.sh KEYS REPS BIN0 BIN1 [BIN2 ...] [-- cache-stress options]
#   DURATION=1 scripts/ab-builds.sh 100000 30 ../base/cs ./cs-a ./cs-b -- --read-pct 0 --dist zipf
#   FRESH=1 scripts/ab-builds.sh 100000 16 ../base/cs ./cs -- --procs 2 --read-pct 90 --dist zipf
#
# Each run has --procs 1 --threads 1 --key-size 12 --value-size 64 --read-pct 100
# --dist uniform --capacity (32 MiB per 100,000 keys) --track-every 16 --check-every 64
# unless the options given say otherwise (later options win).
# env: DURATION (seconds a run, default 2), FRESH=1 (a new file each run), LABELS (a
#      name for each binary, in order, default their paths), KEEP=1 (keep the file).
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,19p "$0" >&2; exit 2; }
KEYS=$1 REPS=$2
shift 2
bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  [ -x "$1" ] || { echo "error: no cache-stress binary at $1" >&2; exit 2; }
  bins+=("$1")
  shift
done
[ $# -gt 0 ] && shift
cap=$(( 32 * KEYS / 100000 + 1 ))MiB
F="$(mktemp -u /dev/shm/mc-ab-builds.XXXXXX.mcache)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -f "$F"' EXIT
common=(--procs 1 --threads 1 --keys "$KEYS" --key-size 12 --value-size 64 --read-pct 100 --dist uniform
  --capacity "$cap" --track-every 16 --check-every 64)
[ -n "${FRESH:-}" ] || "${bins[0]}" "${common[@]}" --duration 1 --path "$F" >/dev/null 2>&1 ||
  { echo "error: the prefill by ${bins[0]} failed" >&2; exit 1; }
n=${#bins[@]}
for r in $(seq 1 "$REPS"); do
  for j in $(seq 0 $((n - 1))); do
    i=$(( (j + r) % n ))
    if [ -n "${FRESH:-}" ]; then rm -f "$F"; prefill=(); else prefill=(--no-prefill); fi
    "${bins[$i]}" "${common[@]}" --duration "${DURATION:-2}" --path "$F" "${prefill[@]}" --seed "$r" "$@" --json \
      2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['passed'] and d['corrupt_reads']==0, d; print($i, d['ops_per_s'])"
  done
done | python3 -c "
import sys, statistics
d = {}
for l in sys.stdin:
    i, v = l.split(); d.setdefault(int(i), []).append(float(v))
names = sys.argv[1].split() or sys.argv[2:]
b, m = max(d[0]), statistics.median(d[0])
for i in sorted(d):
    print('%s best %.2fM med %.2fM  /%s: best %.3f med %.3f  runs %s' % (names[i], max(d[i]) / 1e6,
          statistics.median(d[i]) / 1e6, names[0], max(d[i]) / b, statistics.median(d[i]) / m,
          ' '.join('%.2f' % (x / 1e6) for x in d[i])))
" "${LABELS:-}" "${bins[@]}"

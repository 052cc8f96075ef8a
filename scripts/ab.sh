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
# (best, median, every run) and its ratios to base, best/best and median/median
# (`scripts/ab-builds.sh`, which compares any number of builds, with two).
# env: DURATION (seconds a run, default 3), KEEP=1 (keep the prefilled file).
set -euo pipefail
[ $# -ge 2 ] && [ -n "${BASE:-}" ] || { sed -n 2,15p "$0" >&2; exit 2; }
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KEYS=$1 REPS=$2
shift 2
A="$BASE/.build/release/cache-stress" B="$HERE/.build/release/cache-stress"
[ -x "$A" ] && [ -x "$B" ] || { echo "error: build cache-stress in release in both checkouts" >&2; exit 2; }
DURATION="${DURATION:-3}" LABELS="base main" exec "$HERE/scripts/ab-builds.sh" "$KEYS" "$REPS" "$A" "$B" -- "$@"

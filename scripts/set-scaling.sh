#!/usr/bin/env bash
# set-scaling.sh - how sets scale from 1 to 2 writer processes on one file, by partition
# count and key distribution, beside the ceiling: two files, one process each.
#
#   scripts/set-scaling.sh                            # the automatic count, uniform and zipf
#   PARTS="8 16 64 auto" REPS=5 scripts/set-scaling.sh
#   CAPACITY=1GiB PARTS=auto scripts/set-scaling.sh   # the automatic count of a larger file
#
# Each cell runs `cache-stress --read-pct 0 --keys 100000 --key-size 12 --value-size 64`
# with 1 process, then 2, then (for the ceiling) two 1-process runs on two files at once,
# REPS times, interleaved. Prints one line a run and a table: per-rep ratios (2 / 1) and
# best over best.
#
# env: PARTS (partition counts, "auto" for the library's choice; default "auto"), DISTS
#      (default "uniform zipf"), REPS (3), DURATION (3 s), CAPACITY (cache-stress's
#      default, 256 MiB, when unset), BIN (a cache-stress binary; built when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS="${PARTS:-auto}"
DISTS="${DISTS:-uniform zipf}"
REPS="${REPS:-3}"
DURATION="${DURATION:-3}"
if [[ -z "${BIN:-}" ]]; then
  swift build -c release --product cache-stress >&2
  BIN="$(swift build -c release --show-bin-path)/cache-stress"
fi
DIR="$(mktemp -d /dev/shm/mc-set-scaling.XXXXXX)"
trap 'rm -rf "$DIR"' EXIT
LOG="$DIR/runs.txt"

# Sets per second of one cache-stress run: file, processes, partitions, distribution.
sets() {
  local args=(--path "$1" --procs "$2" --read-pct 0 --keys 100000 --key-size 12 --value-size 64
    --dist "$4" --duration "$DURATION" --check-every 64 --track-every 16 --json)
  [[ "$3" != auto ]] && args+=(--partitions "$3")
  [[ -n "${CAPACITY:-}" ]] && args+=(--capacity "$CAPACITY")
  "$BIN" "${args[@]}" 2>/dev/null | python3 -c 'import json, sys; print(int(json.load(sys.stdin)["ops_per_s"]))'
}

for rep in $(seq 1 "$REPS"); do
  for dist in $DISTS; do
    for parts in $PARTS; do
      rm -f "$DIR"/f*
      one=$(sets "$DIR/f0" 1 "$parts" "$dist")
      rm -f "$DIR"/f*
      two=$(sets "$DIR/f0" 2 "$parts" "$dist")
      echo "rep=$rep dist=$dist parts=$parts one=$one two=$two" | tee -a "$LOG"
    done
    # The ceiling: two files of the first count, against this rep's 1-process run of it.
    first_parts=${PARTS%% *}
    rm -f "$DIR"/f*
    sets "$DIR/f1" 1 "$first_parts" "$dist" >"$DIR/a" &
    sets "$DIR/f2" 1 "$first_parts" "$dist" >"$DIR/b"
    wait
    first=$(grep "rep=$rep dist=$dist parts=$first_parts " "$LOG" | sed 's/.* one=\([0-9]*\).*/\1/')
    echo "rep=$rep dist=$dist parts=two-files one=$first two=$(($(cat "$DIR/a") + $(cat "$DIR/b")))" | tee -a "$LOG"
  done
done

python3 - "$LOG" <<'PY'
import re, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    runs[(f["dist"], f["parts"])].append((int(f["one"]), int(f["two"])))
print("| dist | partitions | 2 / 1 per rep | best / best |")
print("|---|---|---|---|")
for (dist, parts), r in runs.items():
    per = [t / o for o, t in r]
    best = max(t for _, t in r) / max(o for o, _ in r)
    print(f"| {dist} | {parts} | {min(per):.2f}-{max(per):.2f} | {best:.2f} |")
PY

#!/usr/bin/env bash
# set-scaling.sh - how sets scale from 1 to 2 writer processes on one file, by partition
# count and key distribution, beside the ceiling: two files, one process each. Each run
# is tagged with where the two CPUs were (the placement probe below).
#
#   scripts/set-scaling.sh                            # the automatic count, uniform and zipf
#   PARTS="8 16 64 auto" REPS=5 scripts/set-scaling.sh
#   CAPACITY=1GiB PARTS=auto scripts/set-scaling.sh   # the automatic count of a larger file
#   LIMIT_C=/tmp/pb/limit_c scripts/set-scaling.sh    # also limit_c with no lock (LOCK=none)
#
# Each cell runs `cache-stress --read-pct 0 --keys 100000 --key-size 12 --value-size 64`
# with 1 process, then 2, then (for the ceiling) two 1-process runs on two files at once,
# REPS times, interleaved. With LIMIT_C, `limit_c` (../shared/peers) runs the same cell
# with LOCK=none, 1 process then 2: sets with no lock at all, unsafe with two writers but
# the most that two processes writing the same keys' lines can make in that placement.
#
# Placement: two writers on one file share the lines they write, and a line last written
# by the other CPU has to move; what that costs depends on where the CPUs are. A VM's
# host may run its two vCPUs on one L3 or on two, and move them within seconds.
# `scripts/pingpong.c` (built here with cc; skipped without one) times a line's transfer
# between CPUs 0 and 1 just before and just after each 2-process run: `near` when both
# are under SPLIT_NS, `far` when both are at or above it, `mixed` otherwise.
#
# Prints one line a run and a table: per-rep ratios (2 / 1, with n, f or m for the
# placement) and best over best, over all runs and over the near and the far ones.
#
# env: PARTS (partition counts, "auto" for the library's choice; default "auto"), DISTS
#      (default "uniform zipf"), REPS (3), DURATION (3 s), CAPACITY (cache-stress's
#      default, 256 MiB, when unset), BIN (a cache-stress binary; built when unset),
#      LIMIT_C (a limit_c binary), SPLIT_NS (100).
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS="${PARTS:-auto}"
DISTS="${DISTS:-uniform zipf}"
REPS="${REPS:-3}"
DURATION="${DURATION:-3}"
SPLIT_NS="${SPLIT_NS:-100}"
if [[ -z "${BIN:-}" ]]; then
  swift build -c release --product cache-stress >&2
  BIN="$(swift build -c release --show-bin-path)/cache-stress"
fi
DIR="$(mktemp -d /dev/shm/mc-set-scaling.XXXXXX)"
trap 'rm -rf "$DIR"' EXIT
LOG="$DIR/runs.txt"
PROBE="$DIR/pingpong"
if ! cc -O2 -o "$PROBE" scripts/pingpong.c 2>/dev/null; then
  echo "set-scaling: no C compiler, so no placement probe (runs tagged ?)" >&2
  PROBE=""
fi

# One-way line transfer between CPUs 0 and 1, in ns ("-" without the probe).
probe() { if [[ -n "$PROBE" ]]; then "$PROBE" 0 1 50000 || echo -; else echo -; fi; }

# Sets per second of one cache-stress run: file, processes, partitions, distribution.
sets() {
  local args=(--path "$1" --procs "$2" --read-pct 0 --keys 100000 --key-size 12 --value-size 64
    --dist "$4" --duration "$DURATION" --check-every 64 --track-every 16 --json)
  [[ "$3" != auto ]] && args+=(--partitions "$3")
  [[ -n "${CAPACITY:-}" ]] && args+=(--capacity "$CAPACITY")
  "$BIN" "${args[@]}" 2>/dev/null | python3 -c 'import json, sys; print(int(json.load(sys.stdin)["ops_per_s"]))'
}

# Sets per second of limit_c with no lock: processes, distribution.
limit_sets() {
  DIR="$DIR" LOCK=none "$LIMIT_C" --procs="$1" --read_pct=0 --keys=100000 --value=64 --dist="$2" \
    --duration="$DURATION" | sed -n 's/.*ops_per_s=\([0-9]*\).*/\1/p'
}

# The command "$@" (a 2-process run) between two probes, as "two=N pp=BEFORE/AFTER".
two_between_probes() {
  local before after two
  before=$(probe)
  two=$("$@")
  after=$(probe)
  echo "two=$two pp=$before/$after"
}

for rep in $(seq 1 "$REPS"); do
  for dist in $DISTS; do
    for parts in $PARTS; do
      rm -f "$DIR"/f*
      one=$(sets "$DIR/f0" 1 "$parts" "$dist")
      rm -f "$DIR"/f*
      echo "rep=$rep dist=$dist parts=$parts one=$one $(two_between_probes sets "$DIR/f0" 2 "$parts" "$dist")" |
        tee -a "$LOG"
    done
    # The ceiling: two files of the first count, against this rep's 1-process run of it.
    first_parts=${PARTS%% *}
    rm -f "$DIR"/f*
    before=$(probe)
    sets "$DIR/f1" 1 "$first_parts" "$dist" >"$DIR/a" &
    sets "$DIR/f2" 1 "$first_parts" "$dist" >"$DIR/b"
    wait
    after=$(probe)
    first=$(grep "rep=$rep dist=$dist parts=$first_parts " "$LOG" | sed 's/.* one=\([0-9]*\).*/\1/')
    echo "rep=$rep dist=$dist parts=two-files one=$first two=$(($(cat "$DIR/a") + $(cat "$DIR/b"))) pp=$before/$after" |
      tee -a "$LOG"
    if [[ -n "${LIMIT_C:-}" ]]; then
      one=$(limit_sets 1 "$dist")
      echo "rep=$rep dist=$dist parts=limit_c-no-lock one=$one $(two_between_probes limit_sets 2 "$dist")" |
        tee -a "$LOG"
    fi
  done
done

python3 - "$LOG" "$SPLIT_NS" <<'PY'
import re, sys
from collections import defaultdict
split = float(sys.argv[2])
def placement(pp):
    try:
        a, b = (float(x) for x in pp.split("/"))
    except ValueError:
        return "?"
    return "n" if a < split and b < split else "f" if a >= split and b >= split else "m"
runs = defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    runs[(f["dist"], f["parts"])].append((int(f["one"]), int(f["two"]), placement(f.get("pp", "-"))))
def best(r, where=None):
    twos = [t for _, t, p in r if where is None or p == where]
    return f"{max(twos) / max(o for o, _, _ in r):.2f}" if twos else "-"
print(f"placement: n near (both probes under {split:.0f} ns), f far, m mixed")
print("| dist | partitions | 2 / 1 per rep | best / best | near | far |")
print("|---|---|---|---|---|---|")
for (dist, parts), r in runs.items():
    per = " ".join(f"{t / o:.2f}{p}" for o, t, p in r)
    print(f"| {dist} | {parts} | {per} | {best(r)} | {best(r, 'n')} | {best(r, 'f')} |")
PY

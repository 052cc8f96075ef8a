#!/usr/bin/env bash
# bench.sh - MappedCache (cache-stress) against the peers in ../shared/peers, on the
# peers' workload (100,000 keys of 12 bytes, 64-byte values), in one run, with ratios.
#
#   scripts/bench.sh                 the matrix: procs {1,2} x read% {100,90,0} x {uniform,zipf}
#   CELLS="1:100:uniform 2:90:zipf" scripts/bench.sh     chosen cells (procs:read%:dist)
#
# env: REPS (passes over the matrix, default 2), DURATION (seconds per run, default 5),
#      PEERS (default "limit_c limit_c_spin lmdb_c"), CAPACITY (MappedCache file, default
#      32MiB: the size of limit_c's table), PEERS_DIR (default ../shared/peers),
#      NO_INSTALL=1 (the peers' script skips apt-get), OUT (raw lines; default
#      /tmp/mc-bench-<date>.txt).
# cache-stress here checks values as the peers do (--check-every 64): every read's key,
# length and writer (the peers: length and key digits), and the whole value, regenerated
# from its header and compared, on 1 read in 64 (the peers do the same). Its
# default, used by the tests and chaos runs, checks every byte of every read, which
# costs uniform reads about a third of their throughput (DESIGN.md, profiling notes).
# It tracks freshness (wrong_values) for 1 key in 16 (--track-every 16), so that its
# table of sequence numbers stays in the CPU cache rather than costing a memory miss per
# read that the peers do not pay.
# Each cell is measured REPS times, interleaving MappedCache and the peers, so a noisy
# moment does not hit one side only. The table shows the best and the median of the reps,
# and each ratio is best/best (the peers' README uses best, too), then median/median.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS_DIR="${PEERS_DIR:-$HERE/../shared/peers}"
REPS="${REPS:-2}"
DURATION="${DURATION:-5}"
PEERS="${PEERS:-limit_c limit_c_spin lmdb_c}"
CAPACITY="${CAPACITY:-32MiB}"
CELLS="${CELLS:-1:100:uniform 1:100:zipf 1:90:uniform 1:90:zipf 1:0:uniform 1:0:zipf 2:100:uniform 2:100:zipf 2:90:uniform 2:90:zipf 2:0:uniform 2:0:zipf}"
OUT="${OUT:-/tmp/mc-bench-$(date +%Y-%m-%d-%H%M%S).txt}"

cd "$HERE"
swift build -c release --product cache-stress >&2
STRESS="$(swift build -c release --show-bin-path)/cache-stress"
[ -x "$PEERS_DIR/run_all.sh" ] || { echo "error: no peers at $PEERS_DIR" >&2; exit 2; }

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(uname -r); DURATION=$DURATION REPS=$REPS CAPACITY=$CAPACITY" | tee "$OUT"
for rep in $(seq 1 "$REPS"); do
  for cell in $CELLS; do
    IFS=: read -r procs read dist <<<"$cell"
    for lock in word flock; do
      json=$("$STRESS" --procs "$procs" --threads 1 --duration "$DURATION" --keys 100000 --key-size 12 \
        --value-size 64 --read-pct "$read" --dist "$dist" --capacity "$CAPACITY" --lock "$lock" --seed "$rep" --track-every 16 --check-every 64 --json \
        2>/dev/null) || { echo "error: cache-stress failed in cell $cell" >&2; exit 1; }
      echo "peer=mappedcache_$lock procs=$procs read_pct=$read dist=$dist rep=$rep json=$json" | tee -a "$OUT" >&2
    done
    PROCS=$procs READ_PCT=$read DIST=$dist DURATION=$DURATION PEERS="$PEERS" "$PEERS_DIR/run_all.sh" 2>/dev/null \
      | sed "s/\$/ rep=$rep/" | tee -a "$OUT" >&2
  done
done
python3 "$HERE/scripts/bench_table.py" "$OUT"
echo "raw lines: $OUT" >&2

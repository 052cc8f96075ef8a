#!/usr/bin/env bash
# bench.sh - MappedCache (cache-stress) against the peers in ../shared/peers, on the
# peers' workload (12-byte keys, 64-byte values; 100,000 keys unless a cell says more),
# in one run, with ratios.
#
#   scripts/bench.sh                 the matrix: procs {1,2} x read% {100,90,0} x {uniform,zipf}
#   CELLS="1:100:uniform 2:90:zipf" scripts/bench.sh     chosen cells (procs:read%:dist)
#   CELLS="1:100:uniform:10000000 1:100:uniform:10000000:16" PEERS="limit_c lmdb_c" LOCKS=word \
#     scripts/bench.sh               big tables (procs:read%:dist:keys) and multi-get
#                                    (procs:read%:dist:keys:N, cache-stress --mget N against
#                                    limit_c_mget and redis_mget with MGET_N=N)
#
# env: REPS (passes over the cells, default 2), DURATION (seconds per run, default 5),
#      PEERS (single-get cells, default "limit_c limit_c_spin lmdb_c"), MGET_PEERS (multi-get
#      cells, default "limit_c_mget redis_mget"), LOCKS (MappedCache's write locks, default
#      "word flock"), CAPACITY (MappedCache file at 100,000 keys, default 32MiB: the size of
#      limit_c's table; scaled with the keys, so every table has the same load, 0.47),
#      PEERS_DIR (default ../shared/peers), STRESS (a cache-stress binary to run instead of
#      building one: a machine without Swift), PEERS_PREBUILT (a folder of peer binaries
#      built elsewhere, limit_c at least: the copy's build step copies them instead of
#      compiling, for a machine without a compiler or the peers' libraries), NO_INSTALL=1
#      (the peers' script skips apt-get),
#      HUGE_DIR (a tmpfs mounted huge=within_size: every MappedCache and limit_c run is
#      repeated with its file there, as mappedcache_*_huge and limit_c*_huge), OUT (raw
#      lines; default /tmp/mc-bench-<date>.txt).
# The peers are copied to a temporary folder and built there (the shared folder may be
# read-only or used by others); lmdb_c.c's 1 GiB map is made MAPSIZE bytes (env of the
# copy), sized here from the keys (256 bytes a key, at least 1 GiB; the file grows only
# as far as it is used).
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
MGET_PEERS="${MGET_PEERS:-limit_c_mget redis_mget}"
LOCKS="${LOCKS:-word flock}"
CAPACITY="${CAPACITY:-32MiB}"
HUGE_DIR="${HUGE_DIR:-}"
CELLS="${CELLS:-1:100:uniform 1:100:zipf 1:90:uniform 1:90:zipf 1:0:uniform 1:0:zipf 2:100:uniform 2:100:zipf 2:90:uniform 2:90:zipf 2:0:uniform 2:0:zipf}"
OUT="${OUT:-/tmp/mc-bench-$(date +%Y-%m-%d-%H%M%S).txt}"

cd "$HERE"
if [ -z "${STRESS:-}" ]; then
  swift build -c release --product cache-stress >&2
  STRESS="$(swift build -c release --show-bin-path)/cache-stress"
fi
[ -x "$STRESS" ] || { echo "error: no cache-stress at $STRESS" >&2; exit 2; }
[ -x "$PEERS_DIR/run_all.sh" ] || { echo "error: no peers at $PEERS_DIR" >&2; exit 2; }
PEERS_COPY="$(mktemp -d /tmp/mc-bench-peers.XXXXXX)"
trap 'rm -rf "$PEERS_COPY"' EXIT
cp -r "$PEERS_DIR"/. "$PEERS_COPY"/
rm -rf "$PEERS_COPY/build"
chmod -R u+w "$PEERS_COPY"
grep -q 'mdb_env_set_mapsize(ENV, (size_t)1 << 30)' "$PEERS_COPY/lmdb_c.c" \
  || { echo "error: lmdb_c.c no longer sets a 1 GiB map; update the MAPSIZE patch" >&2; exit 2; }
sed -i 's|mdb_env_set_mapsize(ENV, (size_t)1 << 30)|mdb_env_set_mapsize(ENV, getenv("MAPSIZE") ? (size_t)strtoull(getenv("MAPSIZE"), NULL, 10) : (size_t)1 << 30)|' \
  "$PEERS_COPY/lmdb_c.c"
if [ -n "${PEERS_PREBUILT:-}" ]; then
  [ -x "$PEERS_PREBUILT/limit_c" ] || { echo "error: no limit_c in PEERS_PREBUILT=$PEERS_PREBUILT" >&2; exit 2; }
  prebuilt="$(cd "$PEERS_PREBUILT" && pwd)"
  python3 - "$PEERS_COPY/run_all.sh" "$prebuilt" <<'PY'
import re, sys
path, prebuilt = sys.argv[1], sys.argv[2]
text = open(path).read()
text, n = re.subn(r'^build\(\) \{\n.*?^\}\n',
                  'build() {\n  mkdir -p "$BUILD"\n  cp "%s"/* "$BUILD"/\n}\n' % prebuilt,
                  text, count=1, flags=re.S | re.M)
if n != 1:
    sys.exit("error: run_all.sh has no build() to replace; update bench.sh's PEERS_PREBUILT patch")
open(path, "w").write(text)
PY
fi

# MappedCache's file for K keys: CAPACITY (for 100,000 keys) scaled by K / 100,000.
capacity_for() {
  local keys=$1 base
  base=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(KiB|MiB|GiB)?', sys.argv[1]); print(int(m[1]) * {None: 1, 'KiB': 1 << 10, 'MiB': 1 << 20, 'GiB': 1 << 30}[m[2]])" "$CAPACITY")
  echo $(( (base * keys / 100000 + (1 << 20) - 1) >> 20 ))MiB
}

# cache-stress allocates its file whole when it creates it (a full /dev/shm then fails
# the create, not a later write with SIGBUS): the largest cell's file must fit.
largest=0
for cell in $CELLS; do
  IFS=: read -r _ _ _ keys _ <<<"$cell"
  mib=$(capacity_for "${keys:-100000}")
  mib=${mib%MiB}
  [ "$mib" -gt "$largest" ] && largest=$mib
done
for dir in /dev/shm $HUGE_DIR; do
  free=$(($(df --output=avail -B1 "$dir" | tail -1) >> 20))
  [ "$largest" -le "$free" ] \
    || { echo "error: MappedCache's largest file is $largest MiB, $dir has $free MiB free; set CAPACITY" >&2; exit 2; }
done

# One cache-stress run: peer name, then its arguments; the line goes to OUT.
run_mc() {
  local name=$1 tag=$2; shift 2
  local json
  json=$("$STRESS" "$@" --json 2>/dev/null) || { echo "error: cache-stress failed: $*" >&2; exit 1; }
  echo "peer=$name $tag json=$json" | tee -a "$OUT" >&2
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(uname -r); DURATION=$DURATION REPS=$REPS CAPACITY=$CAPACITY HUGE_DIR=$HUGE_DIR shmem_enabled=$(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null)" | tee "$OUT"
for rep in $(seq 1 "$REPS"); do
  for cell in $CELLS; do
    IFS=: read -r procs read dist keys mget <<<"$cell"
    keys=${keys:-100000}
    mget=${mget:-1}
    cap=$(capacity_for "$keys")
    tag="procs=$procs read_pct=$read dist=$dist keys=$keys mget=$mget rep=$rep"
    args=(--procs "$procs" --threads 1 --duration "$DURATION" --keys "$keys" --key-size 12 --value-size 64
      --read-pct "$read" --dist "$dist" --capacity "$cap" --seed "$rep" --track-every 16 --check-every 64)
    [ "$mget" -gt 1 ] && args+=(--mget "$mget")
    for lock in $LOCKS; do
      name="mappedcache_$lock"
      [ "$mget" -gt 1 ] && name="mappedcache_${lock}_mget"
      run_mc "$name" "$tag" "${args[@]}" --lock "$lock"
      if [ -n "$HUGE_DIR" ]; then
        f="$HUGE_DIR/mc-bench-$$.mcache"
        run_mc "${name}_huge" "$tag" "${args[@]}" --lock "$lock" --path "$f"
        rm -f "$f"
      fi
    done
    peers=$PEERS
    [ "$mget" -gt 1 ] && peers=$MGET_PEERS
    # LMDB: 12 + 64 bytes and a node header per key, in B-tree pages half to wholly full.
    mapsize=$(( keys * 256 > (1 << 30) ? keys * 256 : (1 << 30) ))
    KEYS=$keys PROCS=$procs READ_PCT=$read DIST=$dist DURATION=$DURATION PEERS="$peers" MGET_N=$mget MAPSIZE=$mapsize \
      "$PEERS_COPY/run_all.sh" 2>/dev/null | sed "s/ rep=[0-9]*//; s/\$/ keys=$keys mget=$mget rep=$rep/" | tee -a "$OUT" >&2
    if [ -n "$HUGE_DIR" ]; then
      for p in $peers; do
        case $p in limit_c*) ;; *) continue ;; esac
        KEYS=$keys PROCS=$procs READ_PCT=$read DIST=$dist DURATION=$DURATION PEERS="$p" MGET_N=$mget DIR="$HUGE_DIR" \
          "$PEERS_COPY/run_all.sh" 2>/dev/null | sed "s/^peer=\([a-z_]*\)/peer=\1_huge/; s/ rep=[0-9]*//; s/\$/ keys=$keys mget=$mget rep=$rep/" \
          | tee -a "$OUT" >&2
      done
    fi
  done
done
python3 "$HERE/scripts/bench_table.py" "$OUT"
echo "raw lines: $OUT" >&2

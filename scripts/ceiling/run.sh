#!/usr/bin/env bash
# run.sh - the ceiling of format 5's read, or of its set: single gets (or sets) of
# `twoload_c` (format 5's read and overwrite in place written in C, see twoload_c.c)
# beside `limit_c` (one slot an operation) and cache-stress (the Swift engine),
# interleaved, on the peers' workload (12-byte keys, 64-byte values, one process).
#
#   scripts/ceiling/run.sh                     # gets, KEYS="1000 100000 10000000", REPS=3
#   KEYS="100000" REPS=5 DURATION=2 scripts/ceiling/run.sh
#   OP=set KEYS="1000 100000" DIST=zipf scripts/ceiling/run.sh   # sets, against limit_c_spin
#
# twoload_c / limit_c is what the layout allows (two dependent loads against one);
# MappedCache / twoload_c is what the Swift engine costs beyond the layout. With OP=set,
# twoload_swift is twoload_c with its set written in Swift (twoload_swift.swift): what
# the same work costs in Swift.
# env: OP (get or set; sets are timed against limit_c's spinlock, `limit_c_spin`, as
#      bench.sh's set target is), KEYS, DIST (uniform or zipf), REPS (3), DURATION (3 s),
#      PEERS_DIR (../shared/peers), STRESS (a cache-stress binary; built in release when
#      unset).
set -euo pipefail
cd "$(dirname "$0")/../.."
KEYS="${KEYS:-1000 100000 10000000}"
REPS="${REPS:-3}"
DURATION="${DURATION:-3}"
OP="${OP:-get}"
DIST="${DIST:-uniform}"
case "$OP" in
  get) READ=100 LOCK_C=flock BASELINE=limit_c ;;
  set) READ=0 LOCK_C=spin BASELINE=limit_c_spin ;;
  *) echo "error: OP must be get or set" >&2; exit 2 ;;
esac
PEERS_DIR="${PEERS_DIR:-../shared/peers}"
[[ -f "$PEERS_DIR/common.h" && -f "$PEERS_DIR/limit_c.c" ]] || { echo "error: no peers in $PEERS_DIR" >&2; exit 2; }
DIR="$(mktemp -d /tmp/mc-ceiling.XXXXXX)"
SHM="$(mktemp -d /dev/shm/mc-ceiling.XXXXXX)"  # cache-stress's files: this run's alone
trap 'rm -rf "$DIR" "$SHM"' EXIT
gcc -O2 -I "$PEERS_DIR" -o "$DIR/twoload_c" scripts/ceiling/twoload_c.c -lm
gcc -O2 -o "$DIR/limit_c" "$PEERS_DIR/limit_c.c" -lm -lpthread
SYSTEMS="limit_c twoload_c"
if [[ "$OP" = set ]]; then
  gcc -O2 -DSWIFT_SET -I "$PEERS_DIR" -c scripts/ceiling/twoload_c.c -o "$DIR/twoload_swift.o"
  swiftc -O -wmo -parse-as-library -import-objc-header scripts/ceiling/twoload_swift.h \
    scripts/ceiling/twoload_swift.swift Sources/MappedCache/Format/KeyHash.swift "$DIR/twoload_swift.o" \
    -o "$DIR/twoload_swift"
  SYSTEMS="$SYSTEMS twoload_swift"
fi
if [[ -z "${STRESS:-}" ]]; then
  swift build -c release --product cache-stress >&2
  STRESS="$(swift build -c release --show-bin-path)/cache-stress"
fi

peer() {  # binary keys -> ops/s
  KEYS=$2 VALUE=64 PROCS=1 READ_PCT=$READ DIST=$DIST DURATION="$DURATION" LOCK=$LOCK_C "$1" \
    | grep -oE 'ops_per_s=[0-9]+' | cut -d= -f2
}
stress() {  # keys -> ops/s
  local f="$SHM/cache.mcache"
  "$STRESS" --path "$f" --capacity "$((32 * $1 / 100000 + 1))MiB" --procs 1 --threads 1 --keys "$1" \
    --key-size 12 --value-size 64 --read-pct "$READ" --dist "$DIST" --duration "$DURATION" \
    --check-every 64 --track-every 16 --json 2>/dev/null \
    | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['passed'], d; print(d['ops_per_s'])"
  rm -f "$f"
}

for k in $KEYS; do
  for r in $(seq 1 "$REPS"); do
    for p in $SYSTEMS; do echo "$k $p $(peer "$DIR/$p" "$k")"; done
    echo "$k mappedcache $(stress "$k")"
  done
done | tee "$DIR/runs.txt" >&2
python3 - "$DIR/runs.txt" "$BASELINE" "$OP" "$DIST" <<'EOF'
import sys, statistics as st
d = {}
for line in open(sys.argv[1]):
    k, who, v = line.split()
    d.setdefault(int(k), {}).setdefault(who, []).append(float(v))
base, op, dist = sys.argv[2], sys.argv[3], sys.argv[4]
print("%ss, %s keys" % (op, dist))
swift = any("twoload_swift" in d[k] for k in d)
print("| keys | %s | twoload_c |%s MappedCache | twoload_c / %s |%s MappedCache / %s | MappedCache / twoload_c |"
      % (base, " twoload_swift |" if swift else "", base, " twoload_swift / twoload_c |" if swift else "", base))
print("|---|---|---|---|---|---|---|" + ("---|---|" if swift else ""))
for k in sorted(d):
    b = {w: max(v) for w, v in d[k].items()}
    m = {w: st.median(v) for w, v in d[k].items()}
    cell = lambda w: "%.2fM (%.2fM)" % (b[w] / 1e6, m[w] / 1e6)
    ratio = lambda x, y: "%.2f (%.2f)" % (b[x] / b[y], m[x] / m[y])
    extra = (" %s |" % cell("twoload_swift"), " %s |" % ratio("twoload_swift", "twoload_c")) if swift else ("", "")
    print("| %s | %s | %s |%s %s | %s |%s %s | %s |" % (f"{k:,}", cell("limit_c"), cell("twoload_c"), extra[0],
          cell("mappedcache"), ratio("twoload_c", "limit_c"), extra[1], ratio("mappedcache", "limit_c"),
          ratio("mappedcache", "twoload_c")))
print("best (median) of %d interleaved reps" % len(next(iter(d.values()))["limit_c"]))
EOF

#!/bin/bash
# The soak run (issue 21): cache-stress in chaos mode for HOURS, in segments of a few
# minutes that rotate through workloads (value sizes, TTLs, threads, processes, read
# mix, key distribution, --lock word|flock, a cache growing while it is used: its
# partitions split under the kills, and every other grower is killed too) and
# alternate between a file on /dev/shm and
# one on a disk-backed file system. After every segment the file is verified twice: by
# cache-stress itself (its verify_ok) and by `mapped-cache verify` from a fresh process.
# Prints one line per segment and the totals: reads checked (every read's header, and
# with the default --check-every 1 every byte), sets, SIGKILLs (and how many found the
# killed worker holding the write lock: lock takeovers), corrupt reads, wrong values,
# errors, failed verifies, and growths (and growers killed midway).
#
#   scripts/soak.sh 0.1                       # ~6 minutes: proves the script works
#   scripts/soak.sh 8                         # the long run (≥ 10^9 reads, ≥ 10^4 kills)
#   MC_SOAK_SEGMENT_S=300 MC_SOAK_KILLS_PER_S=4 scripts/soak.sh 2
#   MC_SOAK_DISK_DIR=/var/tmp scripts/soak.sh 1   # where the disk-backed file goes
#
# Exit status: 0 when every segment passed (0 corrupt, 0 wrong, 0 errors, every verify
# clean), 1 otherwise. Segment reports (JSON) and logs stay in $MC_SOAK_LOGS.
set -uo pipefail
cd "$(dirname "$0")/.."
HOURS=${1:?usage: scripts/soak.sh HOURS}
SEGMENT_S=${MC_SOAK_SEGMENT_S:-180}
KILLS_PER_S=${MC_SOAK_KILLS_PER_S:-3}
SHM_DIR=${MC_SOAK_SHM_DIR:-/dev/shm}
DISK_DIR=${MC_SOAK_DISK_DIR:-/var/tmp}
LOGS=${MC_SOAK_LOGS:-/tmp/soak-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$LOGS"

echo "== building cache-stress and mapped-cache (release)"
swift build -c release --product cache-stress > "$LOGS/build.log" 2>&1 &&
  swift build -c release --product mapped-cache >> "$LOGS/build.log" 2>&1 ||
  { echo "build failed: see $LOGS/build.log"; exit 1; }
BIN=$(swift build -c release --show-bin-path)
STRESS=$BIN/cache-stress
TOOL=$BIN/mapped-cache

fs_type() { findmnt -n -o FSTYPE -T "$1" 2>/dev/null | head -1 | grep . || stat -f -c %T "$1" 2>/dev/null || echo "?"; }
echo "== soak: $HOURS h in segments of $SEGMENT_S s, $KILLS_PER_S kills/s;" \
     "files on $SHM_DIR ($(fs_type "$SHM_DIR")) and $DISK_DIR ($(fs_type "$DISK_DIR")); logs in $LOGS"

# Workloads, rotated one per segment: cache-stress flags (the path, duration, kills and
# seed are added per segment).
# The growing ones double their file every 15 or 20 s, up to 1 GiB (a new file's most),
# each growth in a process of its own, every other one SIGKILLed among its steps
# (`--kill-growers`: the next growth, or the next writer, finishes what it left), while
# the workers are killed as in every segment.
WORKLOADS=(
  "--procs 4 --threads 1 --value-size 24-64 --keys 20000 --capacity 32MiB --read-pct 90 --lock word"
  "--procs 4 --threads 1 --value-size 24-2000 --keys 200000 --capacity 16MiB --grow-every 20 --grow-to 1GiB --kill-growers --read-pct 80 --lock word"
  "--procs 3 --threads 2 --value-size 24-4000 --keys 20000 --capacity 64MiB --read-pct 50 --ttl 0.5 --lock flock"
  "--procs 2 --threads 4 --value-size 64 --keys 5000 --capacity 16MiB --read-pct 20 --ttl 2 --lock word"
  "--procs 4 --threads 1 --value-size 24-60000 --keys 2000 --capacity 64MiB --read-pct 70 --lock word"
  "--procs 3 --threads 2 --value-size 16-600 --keys 300000 --capacity 16MiB --grow-every 15 --grow-to 1GiB --kill-growers --read-pct 50 --dist zipf --ttl 3 --lock flock"
  "--procs 3 --threads 2 --value-size 32-512 --keys 100000 --capacity 4MiB --read-through --dist zipf --lock flock"
  "--procs 6 --threads 1 --value-size 24-200 --keys 50000 --capacity 8MiB --read-pct 80 --dist uniform --ttl 5 --lock word"
)

deadline=$(python3 -c "import time; print(int(time.time() + float('$HOURS') * 3600))")
status=0
seg=0
while :; do
  now=$(date +%s)
  left=$(( deadline - now ))
  [ $left -lt 10 ] && break
  seconds=$(( left < SEGMENT_S ? left : SEGMENT_S ))
  w=${WORKLOADS[$(( seg % ${#WORKLOADS[@]} ))]}
  # Alternate the file system every segment; the workload rotation has an even length,
  # so each workload meets both over two rounds.
  if [ $(( (seg / ${#WORKLOADS[@]} + seg) % 2 )) = 0 ]; then dir=$SHM_DIR; where=shm; else dir=$DISK_DIR; where=disk; fi
  path=$dir/mc-soak-$$-$seg.mcache
  kills=$(( seconds * KILLS_PER_S )); [ $kills -gt 10000 ] && kills=10000
  seed=$(( (seg + 1) * 7919 ))
  seg=$((seg + 1))
  out=$LOGS/segment-$seg.json
  # shellcheck disable=SC2086
  "$STRESS" --path "$path" $w --duration "$seconds" --chaos-kills "$kills" --seed "$seed" --json \
    > "$out" 2> "$LOGS/segment-$seg.err"
  rc=$?
  "$TOOL" verify "$path" --json > "$LOGS/segment-$seg.verify.json" 2>&1
  vrc=$?
  rm -f "$path"
  line=$(python3 - "$out" "$LOGS/segment-$seg.verify.json" "$rc" "$vrc" "$where" "$seconds" "$w" <<'EOF'
import json, sys
out, vpath, rc, vrc, where, seconds, flags = sys.argv[1:]
try:
    j = json.load(open(out))
except Exception as e:
    j = {}
try:
    v = json.load(open(vpath)).get("ok", False)
except Exception:
    v = False
rec = {k: j.get(k, 0) for k in ("get_ops", "set_ops", "kills", "lock_takeovers", "corrupt_reads",
                                "wrong_values", "errors", "recoveries", "evictions", "expirations")}
growths = j.get("growths") or []
rec.update(growths=sum(g.get("to_bytes", 0) > g.get("from_bytes", 0) and not g.get("killed") for g in growths),
           grower_kills=sum(bool(g.get("killed")) for g in growths), verify_ok=bool(j.get("verify_ok")), tool_verify_ok=bool(v), exit=int(rc), tool_exit=int(vrc),
           where=where, seconds=int(seconds), flags=flags, passed=bool(j.get("passed")) and int(rc) == 0 and int(vrc) == 0)
print(json.dumps(rec))
EOF
)
  echo "$line" >> "$LOGS/segments.jsonl"
  echo "$line" | python3 -c "
import json,sys; r=json.load(sys.stdin)
print(f\"   segment $seg ({r['where']}, {r['seconds']} s, {r['flags']}): reads {r['get_ops']:,}, sets {r['set_ops']:,}, kills {r['kills']} \"
      f\"(lock takeovers {r['lock_takeovers']}), growths {r['growths']} (growers killed {r['grower_kills']}), corrupt {r['corrupt_reads']}, wrong {r['wrong_values']}, errors {r['errors']}, \"
      f\"verify {'ok' if r['verify_ok'] else 'FAILED'}/{'ok' if r['tool_verify_ok'] else 'FAILED'}{'' if r['passed'] else '  <-- FAILED'}\")"
  if ! echo "$line" | grep -q '"passed": true'; then
    status=1
    # Why, in cache-stress's words (its last line says FAILED and names the check).
    grep -h "FAILED" "$LOGS/segment-$seg.err" | tail -1 | cut -c1-400 | sed 's/^/      /'
  fi
done

echo "== soak totals ($seg segments; $LOGS/segments.jsonl)"
python3 - "$LOGS/segments.jsonl" <<'EOF'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()] if sys.argv[1] else []
def tot(k): return sum(r[k] for r in rs)
print(f"   time {tot('seconds'):,} s ({sum(r['seconds'] for r in rs if r['where'] == 'shm'):,} s on shm, "
      f"{sum(r['seconds'] for r in rs if r['where'] == 'disk'):,} s on disk)")
print(f"   reads checked {tot('get_ops'):,}, sets {tot('set_ops'):,}")
print(f"   SIGKILLs {tot('kills'):,} (of a worker holding the write lock: {tot('lock_takeovers'):,} lock takeovers), recoveries {tot('recoveries'):,}")
print(f"   growths {tot('growths')}, growers SIGKILLed midway {tot('grower_kills')} (the splits' steps under the workers' kills too)")
print(f"   corrupt reads {tot('corrupt_reads')}, wrong values {tot('wrong_values')}, errors {tot('errors')}")
print(f"   verifies: cache-stress {sum(r['verify_ok'] for r in rs)}/{len(rs)} ok, mapped-cache verify {sum(r['tool_verify_ok'] for r in rs)}/{len(rs)} ok")
print(f"   segments passed {sum(r['passed'] for r in rs)}/{len(rs)}")
EOF
exit $status

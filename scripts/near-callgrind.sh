#!/usr/bin/env bash
# Instructions per hit read, NearCache against plain SharedCache (same key, same 40-byte
# String value), counted by callgrind: `mc-test-helper near-insn-loop` runs N and 2N
# reads; the difference of the totals over N is one read. Starts its own redis-server on
# a loopback port (never 6379) and stops it after.
#
#   scripts/near-callgrind.sh          # N = 100000
#   CLUSTER=1 scripts/near-callgrind.sh  # in front of a 3-primary Redis Cluster (slot buckets)
#
# Needs valgrind and redis-server (and redis-cli with CLUSTER=1).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-100000}"
command -v valgrind >/dev/null || { echo "error: valgrind is not installed" >&2; exit 2; }
command -v redis-server >/dev/null || { echo "error: redis-server is not installed" >&2; exit 2; }
swift build -c release --product mc-test-helper >&2
DIR="$(mktemp -d /dev/shm/mc-nearcg.XXXXXX)"
PORT="${PORT:-$((20000 + RANDOM % 20000))}"
URL="redis://127.0.0.1:$PORT"
if [ "${CLUSTER:-0}" = 1 ]; then
  RPIDS=""
  for P in "$PORT" $((PORT + 1)) $((PORT + 2)); do
    mkdir -p "$DIR/$P"
    redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR/$P" --daemonize no \
      --cluster-enabled yes --cluster-config-file nodes.conf --loglevel warning >/dev/null 2>&1 &
    RPIDS="$RPIDS $!"
  done
  trap 'kill $RPIDS 2>/dev/null; wait $RPIDS 2>/dev/null; rm -rf "$DIR"' EXIT
  sleep 0.5
  redis-cli --cluster create 127.0.0.1:"$PORT" 127.0.0.1:$((PORT + 1)) 127.0.0.1:$((PORT + 2)) \
    --cluster-replicas 0 --cluster-yes >/dev/null
  for P in "$PORT" $((PORT + 1)) $((PORT + 2)); do
    until redis-cli -p "$P" cluster info | grep -q cluster_state:ok; do sleep 0.1; done
  done
  URL="redis-cluster://127.0.0.1:$PORT"
else
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" --daemonize no \
    --loglevel warning >/dev/null 2>&1 &
  RPID=$!
  trap 'kill $RPID 2>/dev/null; wait $RPID 2>/dev/null; rm -rf "$DIR"' EXIT
  sleep 0.5
fi
# Debug info stripped (valgrind 3.19 cannot read the toolchain's DWARF), symbols kept.
BIN="$DIR/mc-test-helper"
strip --strip-debug -o "$BIN" "$(swift build -c release --show-bin-path)/mc-test-helper"
count() {  # mode iterations -> total instructions
  valgrind --tool=callgrind --callgrind-out-file="$DIR/out.$1.$2" "$BIN" near-insn-loop "$URL" "$1" "$2" \
    >/dev/null 2>"$DIR/log.$1.$2"
  grep -E '^totals:' "$DIR/out.$1.$2" | awk '{print $2}'
}
line="insn-per-hit"
for mode in plain near; do
  a=$(count "$mode" "$N")
  b=$(count "$mode" $((2 * N)))
  line="$line $mode=$(( (b - a) / N ))"
done
echo "$line"

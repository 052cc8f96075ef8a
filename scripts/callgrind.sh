#!/usr/bin/env bash
# Instructions per hot operation, counted by callgrind (repeatable, unlike timings):
# each loop of `mc-test-helper insn-loop` runs for N and 2N iterations, and the
# difference of the two totals divided by N is the cost of one iteration (setup cancels).
#
#   scripts/callgrind.sh            # read, readb, set, insert, mget and incr, N = 100000
#   N=200000 scripts/callgrind.sh
#   STEPS=0 scripts/callgrind.sh    # without the writes' split into steps
#
# Prints `insn-per-op read=R readb=B set=S insert=A mget=M incr=I cget=C stress-get=G
# stress-publish=P` (R: a get by String key, B: by byte key, S: a set overwriting a 64-byte
# value, A: a set of a new key, M: a key's share of a 16-key batch read, I: an `increment`
# of an Int counter, C: B's get through the C ABI, `mc_get` in a C loop, G: a get of a
# cache-stress worker as bench.sh runs it against the peers, its loop and checks included:
# 1,000 keys, the measured loop's cost over its gets; P: the part of G that is the loop's
# timed flush of its counters, which varies with load). Then where those instructions go,
# step by step: for read, readb and mget the read protocol's (`scripts/callgrind_steps.py`:
# each instruction named by the functions inlined at its address; `call` the library's
# entry, exit and spills, `caller` the harness's loop), for set, insert and incr the write
# protocol's W0-W7 (`scripts/callgrind_write_steps.py`: API the public call's own, loop the
# harness's); DESIGN.md section 12 keeps both tables.
# Needs valgrind (apt-get install valgrind) and addr2line (binutils).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-100000}"
command -v valgrind >/dev/null || { echo "error: valgrind is not installed" >&2; exit 2; }
swift build -c release --product mc-test-helper >&2
swift build -c release --product cache-stress >&2
swift build -c release --product mappedcache >&2
DIR="$(mktemp -d /dev/shm/mc-callgrind.XXXXXX)"
trap 'rm -rf "$DIR"' EXIT
# Without its debug information: valgrind 3.19 cannot read the toolchain's DWARF and gives
# up on the binary. Its symbols stay (the steps' split names the library's functions by
# them), and so do its addresses (addr2line reads the unstripped binary's lines).
HELPER="$(swift build -c release --show-bin-path)/mc-test-helper"
BIN="$DIR/mc-test-helper"
strip --strip-debug -o "$BIN" "$HELPER"
count() {  # op iterations -> total instructions
  valgrind --tool=callgrind --dump-instr=yes --compress-pos=no --compress-strings=no \
    --callgrind-out-file="$DIR/out.$1.$2" "$BIN" insn-loop "$1" "$2" "$DIR/c.$1.$2.mcache" \
    >/dev/null 2>"$DIR/log.$1.$2"
  rm -f "$DIR/c.$1.$2.mcache"
  grep -E '^totals:' "$DIR/out.$1.$2" | awk '{print $2}'
}
line="insn-per-op"
for op in read readb set insert mget incr; do
  a=$(count "$op" "$N")
  b=$(count "$op" $((2 * N)))
  line="$line $op=$(( (b - a) / N ))"
done
# The C ABI's get (`mc_get`), in a C loop over the same keys and values as readb's
# (`scripts/callgrind_cget.c`), the library without its debug information as above.
mkdir -p "$DIR/lib"
strip --strip-debug -o "$DIR/lib/libmappedcache.so" "$(swift build -c release --show-bin-path)/libmappedcache.so"
cc -O2 -I Sources/CMappedCacheABI/include scripts/callgrind_cget.c -L "$DIR/lib" -lmappedcache -o "$DIR/cget"
ccount() {  # iterations -> total instructions
  LD_LIBRARY_PATH="$DIR/lib" valgrind --tool=callgrind --callgrind-out-file="$DIR/out.cget.$1" "$DIR/cget" "$1" \
    "$DIR/c.cget.$1.mcache" >/dev/null 2>"$DIR/log.cget.$1"
  grep -E '^totals:' "$DIR/out.cget.$1" | awk '{print $2}'
}
a=$(ccount "$N")
b=$(ccount $((2 * N)))
line="$line cget=$(( (b - a) / N ))"
steps=""
if [[ "${STEPS:-1}" != 0 ]]; then
  for op in set insert incr; do
    steps+="$op: $(PATH="$(dirname "$(command -v swift)"):$PATH" python3 scripts/callgrind_write_steps.py \
      "$(swift build -c release --show-bin-path)/mc-test-helper" "$DIR/out.$op.$N" "$DIR/out.$op.$((2 * N))" "$N")"$'\n'
  done
fi
# A worker of cache-stress, started through a wrapper that runs it under callgrind
# (`MC_STRESS_WORKER_EXEC`); the coordinator runs natively. A get's cost is the measured
# loop's (`ThreadLoop.run`, inclusive of all it calls) over the gets it made: the
# worker's start and prefill stay out, and so does its wait for the start, whose length
# under valgrind varies with the machine's load (two runs differenced kept that in).
STRESS="$(swift build -c release --show-bin-path)/cache-stress"
strip -o "$DIR/cache-stress" "$STRESS"
printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file="%s/worker.out.$$" "%s/cache-stress" "$@" 2>/dev/null\n' \
  "$DIR" "$DIR" >"$DIR/worker.sh"
chmod +x "$DIR/worker.sh"
MC_STRESS_WORKER_EXEC="$DIR/worker.sh" "$DIR/cache-stress" --procs 1 --threads 1 --keys 1000 --key-size 12 \
  --value-size 64 --read-pct 100 --dist uniform --capacity 2MiB --track-every 16 --check-every 64 \
  --duration 3 --json --path "$DIR/s.mcache" >"$DIR/s.json" 2>"$DIR/s.log" || {
  cat "$DIR/s.log" >&2
  exit 1
}
gets=$(grep -o '"get_ops": [0-9]*' "$DIR/s.json" | grep -o '[0-9]*$')
# A function's address in the unstripped binary names it in the stripped one's profile.
inclusive() {  # pattern of a symbol -> its inclusive instructions in the worker's profile
  local at
  at=$(nm "$STRESS" | awk -v p="$1" '!found && $0 ~ p { sub(/^0+/, "", $1); print $1; found = 1 }')
  callgrind_annotate --inclusive=yes "$DIR"/worker.out.* 2>/dev/null |
    awk -v a="0x0*$at " '!found && $0 ~ a { gsub(",", "", $1); print $1; found = 1 }'
}
loop_cost=$(inclusive 'ThreadLoopV3run5start3end.*F$')
# The loop's flush of its counters (`StatsBoard.publish`) runs every 50 ms of the clock,
# so its share of a get grows as valgrind runs slower (a loaded machine): printed apart
# (`stress-publish`, included in `stress-get`) so that runs can be compared without it.
publish_cost=$(inclusive 'StatsBoardC7publish.*F$')
[[ -n "$loop_cost" && -n "$publish_cost" && "$gets" -gt 0 ]] || {
  echo "error: no cost of cache-stress's loop in the worker's profile" >&2
  exit 1
}
line="$line stress-get=$((loop_cost / gets)) stress-publish=$((publish_cost / gets))"
echo "$line"
for op in read readb mget; do
  python3 scripts/callgrind_steps.py "$HELPER" Sources "$N" "$DIR/out.$op.$N" "$DIR/out.$op.$((2 * N))" "steps $op"
done
printf '%s' "$steps"

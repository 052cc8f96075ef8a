#!/usr/bin/env bash
# Instructions per hot operation, counted by callgrind (repeatable, unlike timings):
# each loop of `mc-test-helper insn-loop` runs for N and 2N iterations, and the
# difference of the two totals divided by N is the cost of one iteration (setup cancels).
#
#   scripts/callgrind.sh            # read, readb, set, insert, mget and incr, N = 100000
#   N=200000 scripts/callgrind.sh
#   STEPS=0 scripts/callgrind.sh    # without the writes' split into steps
#
# Prints `insn-per-op read=R readb=B set=S insert=A mget=M incr=I stress-get=G` (R: a get by
# String key, B: by byte key, S: a set overwriting a 64-byte value, A: a set of a new key,
# M: a key's share of a 16-key batch read, I: an `increment` of an Int counter, G: a get of
# a cache-stress worker as bench.sh runs it against the peers, its loop and checks
# included: 1,000 keys, the measured loop's cost over its gets). Then, for set, insert
# and incr, the split into the write protocol's steps (`scripts/callgrind_steps.py`: W0-W7
# of DESIGN.md section 4, API the public call's own, loop the harness's) and each step's
# functions.
# Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-100000}"
command -v valgrind >/dev/null || { echo "error: valgrind is not installed" >&2; exit 2; }
swift build -c release --product mc-test-helper >&2
swift build -c release --product cache-stress >&2
DIR="$(mktemp -d /dev/shm/mc-callgrind.XXXXXX)"
trap 'rm -rf "$DIR"' EXIT
# Stripped: valgrind 3.19 cannot read the toolchain's DWARF and gives up on the binary.
BIN="$DIR/mc-test-helper"
strip -o "$BIN" "$(swift build -c release --show-bin-path)/mc-test-helper"
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
steps=""
if [[ "${STEPS:-1}" != 0 ]]; then
  for op in set insert incr; do
    steps+="$op: $(PATH="$(dirname "$(command -v swift)"):$PATH" python3 scripts/callgrind_steps.py \
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
# The loop's address in the unstripped binary names it in the stripped one's profile.
loop=$(nm "$STRESS" | awk '!found && /ThreadLoopV3run5start3end.*F$/ { sub(/^0+/, "", $1); print $1; found = 1 }')
loop_cost=$(callgrind_annotate --inclusive=yes "$DIR"/worker.out.* 2>/dev/null |
  awk -v a="0x0*$loop " '!found && $0 ~ a { gsub(",", "", $1); print $1; found = 1 }')
[[ -n "$loop" && -n "$loop_cost" && "$gets" -gt 0 ]] || {
  echo "error: no cost of cache-stress's loop in the worker's profile" >&2
  exit 1
}
line="$line stress-get=$((loop_cost / gets))"
echo "$line"
printf '%s' "$steps"

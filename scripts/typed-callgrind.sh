#!/usr/bin/env bash
# Instructions per typed operation, counted by callgrind (repeatable, unlike timings),
# by `scripts/callgrind.sh`'s method: each `mc-test-helper typed-loop` op runs for N and
# 2N iterations; the difference of the totals divided by N is one operation's cost.
#
#   scripts/typed-callgrind.sh          # N = 20000
#   HELPER=/path/to/mc-test-helper scripts/typed-callgrind.sh
#
# Prints `insn-per-op struct-hot=... struct-bytes=... ...`. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-20000}"
command -v valgrind >/dev/null || { echo "error: valgrind is not installed" >&2; exit 2; }
if [ -z "${HELPER:-}" ]; then
  swift build -c release --product mc-test-helper >&2
  HELPER="$(swift build -c release --show-bin-path)/mc-test-helper"
fi
DIR="$(mktemp -d /dev/shm/mc-typed-callgrind.XXXXXX)"
trap 'rm -rf "$DIR"' EXIT
# Without debug info: valgrind 3.19 cannot read the toolchain's DWARF.
BIN="$DIR/mc-test-helper"
strip -g -o "$BIN" "$HELPER"
count() {  # op iterations -> total instructions
  valgrind --tool=callgrind --callgrind-out-file="$DIR/out.$1.$2" "$BIN" typed-loop "$1" "$2" "$DIR/c.$1.$2.mcache" \
    >/dev/null 2>"$DIR/log.$1.$2"
  grep -E '^totals:' "$DIR/out.$1.$2" | awk '{print $2}'
}
line="insn-per-op"
for op in struct-hot struct-bytes struct-decoding set-int incr-int; do
  a=$(count "$op" "$N")
  b=$(count "$op" $((2 * N)))
  line="$line $op=$(( (b - a) / N ))"
done
echo "$line"

#!/usr/bin/env bash
# The typed-value figures (DESIGN.md section 12): `mc-test-helper bench-typed` run REPS
# times from each helper binary in HELPERS, interleaved (A B A B ...), so that every
# binary sees the same phases of a noisy machine; per row and binary, the best and the
# median of the runs' figures (each itself the best of 3 inside the helper), and the
# ratios the targets are stated in.
#
#   scripts/bench-typed.sh                                  # this checkout's release build, REPS=5
#   HELPERS="/tmp/old-helper .build/release/mc-test-helper" REPS=7 N=200000 scripts/bench-typed.sh
#
# A row a binary lacks (an older build) is left empty for it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-5}"
N="${N:-200000}"
if [ -z "${HELPERS:-}" ]; then
  swift build -c release --product mc-test-helper >&2
  HELPERS="$(swift build -c release --show-bin-path)/mc-test-helper"
fi
OUT="$(mktemp -d /tmp/mc-bench-typed.XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
for rep in $(seq 1 "$REPS"); do
  b=0
  for h in $HELPERS; do
    b=$((b + 1))
    "$h" bench-typed "$N" > "$OUT/run.$b.$rep"
    echo "rep $rep binary $b done" >&2
  done
done
b=0
for h in $HELPERS; do
  b=$((b + 1))
  echo "binary $b: $h"
done
# Rows look like "name ...   123.4 ns/op"; collect name -> list of ns per binary.
awk -v nb="$b" '
  FNR == 1 { np = split(FILENAME, parts, "."); bin = parts[np - 1] }
  / ns\/op$/ {
    ns = $(NF - 1); name = $0; sub(/ +[0-9.]+ ns\/op$/, "", name)
    if (!(name in seen)) { seen[name] = 1; order[++rows] = name }
    vals[name, bin] = vals[name, bin] " " ns
  }
  function stats(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    if (n == 0) return ""
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    best[0] = a[1]; med[0] = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    return sprintf("%.1f (med %.1f)", best[0], med[0])
  }
  END {
    printf "%-42s", "row (ns/op: best (median))"
    for (k = 1; k <= nb; k++) printf " | binary %d", k
    printf "\n"
    for (r = 1; r <= rows; r++) {
      printf "%-42s", order[r]
      for (k = 1; k <= nb; k++) {
        s = ((order[r], k) in vals) ? stats(vals[order[r], k]) : ""
        printf " | %s", s
        if (s != "") { bestv[order[r], k] = best[0]; medv[order[r], k] = med[0] }
      }
      printf "\n"
    }
    npairs = split("get Codable struct hot (record)/get struct bytes [UInt8] (record);get Codable struct hot (inline)/get struct bytes [UInt8] (inline);get Codable struct decoding (record)/get struct bytes [UInt8] (record);increment Int/set Int;increment Int (record)/set Int (record)", pairs, ";")
    print ""
    for (p = 1; p <= npairs; p++) {
      split(pairs[p], ab, "/")
      for (k = 1; k <= nb; k++) if (((ab[1], k) in bestv) && ((ab[2], k) in bestv))
        printf "binary %d: %s / %s = %.2f (medians %.2f)\n", k, ab[1], ab[2], bestv[ab[1], k] / bestv[ab[2], k], medv[ab[1], k] / medv[ab[2], k]
    }
  }' "$OUT"/run.*

#!/usr/bin/env bash
# Tests scripts/check-signatures.py: the engine passes; a copy of it with a function of
# seven parameters, or one taking a `Partition` and a `WriteLock.Held` apart, planted
# fails, naming it; and what only looks like one (a comment, a string, a closure's or a
# generic type's commas, six parameters, a `LockedPartition`) does not fail it.
# Prints `N passed, N failed`; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
checker="$(pwd)/scripts/check-signatures.py"
. scripts/test-counts.sh

# 1. The engine passes.
if out=$(python3 "$checker" 2>&1); then
  ok "the engine passes ($(echo "$out" | tail -1))"
else
  bad "the engine fails the check:"
  echo "$out"
fi

# 2. Each planted offence fails the check and is named in its output; each look-alike
# passes. Every case runs over a copy of the engine with one file added.
mkdir -p "$scratch/engine"
cp Sources/MappedCache/Engine/*.swift "$scratch/engine/"
run() {  # file-text -> the checker's status and output, over the copy plus the file
  printf '%s\n' "$1" >"$scratch/engine/Planted.swift"
  out=$(python3 "$checker" "$scratch/engine" 2>&1)
  status=$?
  rm -f "$scratch/engine/Planted.swift"
}
fails() {
  local what=$1 text=$2 expect=$3
  run "$text"
  if [ "$status" -ne 0 ] && grep -qF -- "$expect" <<<"$out"; then ok "$what fails the check"; else
    bad "$what: exit $status, output:"
    echo "$out"
  fi
}
passes() {
  local what=$1 text=$2
  run "$text"
  if [ "$status" -eq 0 ]; then ok "$what passes"; else
    bad "$what: exit $status, output:"
    echo "$out"
  fi
}
fails "a function of seven parameters" \
  'extension Writer { func planted(_ a: Int, b: Int, c: Int, d: Int, e: Int, f: Int, g: Int) {} }' \
  "Planted.swift:1: planted: 7 parameters"
fails "an initializer of seven parameters, over lines" \
  'struct Planted {
  init(
    a: Int, b: Int, c: Int,
    d: Int, e: Int, f: Int, g: Int = 0
  ) {}
}' \
  "Planted.swift:2: init: 7 parameters"
fails "a function taking a Partition and a WriteLock.Held" \
  'extension Writer { func plantedApart(_ part: Partition, _ held: borrowing WriteLock.Held) {} }' \
  "plantedApart: takes a \`Partition\` and a \`WriteLock.Held\` apart"
fails "a generic function taking them, the witness first" \
  'func plantedGeneric<R>(_ held: borrowing WriteLock.Held, into part: Partition, _ body: () -> R) -> R { body() }' \
  "plantedGeneric: takes a"
passes "six parameters, a closure's and a dictionary's commas, a default with a comma" \
  'func plantedSix(
  _ a: Int, b: [Int: (Int, Int)], c: (Int, Int, Int) -> Void, d: Range<Int> = 0..<1, e: Dictionary<Int, Int>,
  f: Int = max(1, 2)
) {}'
passes "a LockedPartition" 'func plantedLocked(_ part: borrowing LockedPartition, _ n: Int) {}'
passes "a Partition alone, a WriteLock.Held alone" \
  'func plantedRead(_ part: Partition) {}
func plantedHeld(_ held: borrowing WriteLock.Held) {}'
passes "a comment and a string naming both" \
  '// func plantedComment(_ part: Partition, _ held: borrowing WriteLock.Held, a: Int, b: Int, c: Int, d: Int) {}
let plantedString = "func s(_ part: Partition, _ held: borrowing WriteLock.Held, a: Int, b: Int, c: Int, d: Int)"'

finish

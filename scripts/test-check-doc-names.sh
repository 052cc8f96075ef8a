#!/usr/bin/env bash
# Tests scripts/check-doc-names.py: the real tree passes; a copy of it with a stale name
# planted (a removed method, a renamed overload's labels, a bare member, a missing file, an
# unknown type's member) fails, naming each; and what is not ours to check (commands,
# options, env vars, C constants, allowlisted names) does not fail it.
# Prints `N passed, N failed`; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
checker="$root/scripts/check-doc-names.py"
. scripts/test-counts.sh

# A copy of what the checker reads (the tracked files and the working tree's changes);
# each planted name goes into a copy of one document, put back after.
mkdir -p "$scratch/tree"
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
  [ -f "$f" ] && printf '%s\0' "$f"
done | tar -cf - --null -T - | tar -xf - -C "$scratch/tree"

# 1. The real tree passes.
if out=$(python3 "$checker" 2>&1); then
  ok "the tree passes ($(echo "$out" | tail -1))"
else
  bad "the tree has stale names:"
  echo "$out"
fi

# 2. Each planted stale name fails the check and is named in its output.
plant() {
  local what=$1 doc=$2 line=$3 expect=$4
  cp "$scratch/tree/$doc" "$scratch/saved"
  printf '\n%s\n' "$line" >>"$scratch/tree/$doc"
  local out status
  out=$(python3 "$checker" --root "$scratch/tree" 2>&1)
  status=$?
  cp "$scratch/saved" "$scratch/tree/$doc"
  if [ "$status" -ne 0 ] && grep -qF -- "$expect" <<<"$out"; then
    ok "$what fails the check"
  else
    bad "$what: exit $status, output:"
    echo "$out"
  fi
}
plant "a renamed method's old labels" DESIGN.md \
  'Its slot is found from the record (`BucketIndex.entry(forRecord:)`).' 'BucketIndex.entry(forRecord:)'
plant "a removed bare member" docs/typed-values.md \
  'The stamped read (`probeStamped`).' '`probeStamped`'
plant "a member of a type that has none such" docs/free-lists.md \
  'See `FreeLists.evictToLimits`.' 'FreeLists.evictToLimits'
plant "a type that does not exist" README.md \
  'The index is a `SlotIndex`.' '`SlotIndex`'
plant "a missing folder" docs/reliability.md \
  'System calls live in `System/`.' '`System/`'
plant "a missing script in a command" docs/fuzzing.md \
  'Run `REPS=3 scripts/no-such-bench.sh 10`.' 'scripts/no-such-bench.sh'
plant "a missing C function" docs/python.md \
  'It calls `mc_no_such_call`.' 'mc_no_such_call'

# 3. What is not ours to check passes: commands, options, env vars, values, C and Swift
#    library names, allowlisted names, code blocks.
cat >>"$scratch/tree/docs/free-lists.md" <<'EOF'

Not names of ours: `--max-staleness`, `MC_LONG=1`, `MAP_SHARED`, `O_NOFOLLOW`, `0x5eed`,
`git diff HEAD~1`, `/dev/shm`, `.build/release/cache-stress`, `Codable`, `Hasher`, `nil`,
`flock(LOCK_EX)`, `redis://127.0.0.1:6379/0`, `../shared/peers/density.sh`.

```swift
let x = NoSuchType.noSuchMember(label: 1)
```
EOF
if out=$(python3 "$checker" --root "$scratch/tree" 2>&1); then
  ok "commands, options, env vars, values, external names and code blocks pass"
else
  bad "names that are not ours were flagged:"
  echo "$out"
fi

finish

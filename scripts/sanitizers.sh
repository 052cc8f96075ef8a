#!/bin/bash
# Runs the thread-heavy and multi-process tests under ThreadSanitizer and AddressSanitizer
# (issue 6). Too slow for CI's 10-minute budget, so it is a documented script instead:
#
#   scripts/sanitizers.sh                 # both sanitizers
#   scripts/sanitizers.sh thread          # one of them
#   MC_SANITIZER_FILTER='CoreConcurrencyTests' scripts/sanitizers.sh
#
# Builds go to /tmp/build-tsan and /tmp/build-asan. Child processes (mc-test-helper,
# cache-stress) are built with the same sanitizer; every process writes its reports to
# /tmp/sanitizer-logs/<sanitizer>.<pid>, which are summarised at the end. A child with a
# report exits non-zero, so the test that ran it fails too. The thread build defines
# MC_TSAN, which has `SeenMutex` tell TSan of each `Mutex` section (the toolchain's
# `Synchronization` is not built for TSan, which would report every pair of sections).
set -uo pipefail
cd "$(dirname "$0")/.."
FILTER="${MC_SANITIZER_FILTER:-CABITests|CoreConcurrencyTests|StressTests|TypedComputeTests|TypedTierTests|TypedAtomicTests|ReliabilityLockTests|ReliabilityResourceTests|ReliabilityFuzzTests}"
export MC_FUZZ_CASES="${MC_FUZZ_CASES:-120}"
LOGS=/tmp/sanitizer-logs
SANITIZERS=("${@:-thread address}")
toolchain="$(dirname "$(readlink -f "$(command -v swift)")")"
status=0
for san in ${SANITIZERS[@]}; do
  scratch="/tmp/build-${san:0:1}san"
  rm -rf "$LOGS/$san"
  mkdir -p "$LOGS/$san"
  flags=()
  [ "$san" = thread ] && flags=(-Xswiftc -DMC_TSAN)
  echo "== $san sanitizer: building into $scratch"
  if ! swift build --scratch-path "$scratch" --sanitize="$san" "${flags[@]}" --build-tests; then
    echo "== $san: build failed"; status=1; continue
  fi
  # halt_on_error=0 (TSan) lets a run report every race, not just the first.
  export TSAN_OPTIONS="log_path=$LOGS/$san/tsan halt_on_error=0 second_deadlock_stack=1"
  # Swift's runtime keeps metadata caches for the process lifetime: leak checks off.
  export ASAN_OPTIONS="log_path=$LOGS/$san/asan detect_leaks=0"
  # CABITests builds a C program against the instrumented libmappedcache: with the
  # toolchain's clang and the same sanitizer, whose thread runtime wants libdispatch.
  export MC_TEST_CC="$toolchain/clang"
  export MC_TEST_CFLAGS="-fsanitize=$san -L$toolchain/../lib/swift/linux -ldispatch -lBlocksRuntime -Wl,-rpath,$toolchain/../lib/swift/linux"
  echo "== $san: testing --filter '$FILTER'"
  swift test --scratch-path "$scratch" --sanitize="$san" "${flags[@]}" --skip-build --filter "$FILTER" 2>&1 \
    | tee "$LOGS/$san.log" | grep -E '✘|Suite .* (passed|failed)|Test run'
  test_status=${PIPESTATUS[0]}
  reports=$(cat "$LOGS/$san"/* 2>/dev/null | grep -cE '^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: AddressSanitizer)')
  echo "== $san: tests exit $test_status, sanitizer reports: $reports (in $LOGS/$san/)"
  if [ "$reports" != "0" ]; then
    # One line per distinct report: its kind and the first frame in this package.
    for f in "$LOGS/$san"/*; do
      awk '/^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: AddressSanitizer)/ {kind=$0; want=1; next}
           want && /Sources\/|Tests\/|Stress\// {sub(/^ *#[0-9]+ 0x[0-9a-f]+ in /, ""); print kind " @ " $0; want=0}' "$f"
    done | sort | uniq -c | sort -rn | head -20
    status=1
  fi
  [ "$test_status" = "0" ] || status=1
done
exit $status

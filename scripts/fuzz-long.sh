#!/bin/bash
# The long file-format fuzz run (issue 6): tens of thousands of damaged cache files, each
# run through every public operation in a child process. The quick version (300 cases)
# runs in CI as part of `swift test`.
#
#   scripts/fuzz-long.sh                 # 50,000 cases, as many jobs as cores
#   MC_FUZZ_CASES=200000 scripts/fuzz-long.sh
#   MC_FUZZ_SEED_BASE=0x1234 scripts/fuzz-long.sh   # another sequence of cases
#   MC_FUZZ_SEED=0x... MC_FUZZ_KEEP=1 scripts/fuzz-long.sh   # replay one failing case
#
# Prints a summary line `fuzz: N cases ...` and every failure with its seed.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRATCH="${SCRATCH:-/tmp/build-fuzz-long}"
export MC_FUZZ_CASES="${MC_FUZZ_CASES:-50000}"
export MC_FUZZ_JOBS="${MC_FUZZ_JOBS:-$(nproc)}"
swift build --scratch-path "$SCRATCH" --build-tests
swift test --scratch-path "$SCRATCH" --skip-build --filter ReliabilityFuzzTests 2>&1 | grep --line-buffered -E '^fuzz|✔|✘'

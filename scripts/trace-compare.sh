#!/usr/bin/env bash
# Hit ratios of MappedCache (`cache-stress --trace`) beside libCacheSim's LRU, SIEVE,
# S3-FIFO, ARC, W-TinyLFU and Belady, on the same traces and cache sizes in objects.
#
#   scripts/trace-compare.sh                          # synthetic traces + the CloudPhysics sample
#   scripts/trace-compare.sh my-trace.txt ...          # also these (one key per line, integers)
#   FRACTIONS=0.1,0.2 OBJECTS=50000 REQUESTS=500000 scripts/trace-compare.sh
#   BIN=.build/debug/cache-stress scripts/trace-compare.sh   # skip the release build
#
# Installs libcachesim from PyPI into .build/trace-venv when it is missing. The synthetic
# traces come from libCacheSim's own generator (Zipf, alphas 0.6-1.2; Zipf with a scan;
# uniform). The public block-I/O sample (CloudPhysics, 113,872 requests, 43 % of its
# objects requested once) is libCacheSim's data/cloudPhysicsIO.txt: set CLOUDPHYSICS to a
# copy, or the script downloads it (skipped, with a note, when offline). Hit ratios are
# deterministic (one process, no expiry), so one run is the figure.
# Prints a markdown table; JSON=FILE also writes the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.build/trace-venv
if ! "$VENV/bin/python" -c "import libcachesim" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet libcachesim
fi
if [[ -z "${BIN:-}" ]]; then
  swift build -c release --product cache-stress >&2
  BIN="$(swift build -c release --show-bin-path)/cache-stress"
fi
TRACES=("$@")
CP="${CLOUDPHYSICS:-.build/traces/cloudPhysicsIO.txt}"
if [[ ! -s "$CP" ]]; then
  mkdir -p "$(dirname "$CP")"
  curl -fsSL --max-time 60 -o "$CP" \
    https://raw.githubusercontent.com/1a1a11a/libCacheSim/develop/data/cloudPhysicsIO.txt ||
    { rm -f "$CP"; echo "note: cannot download cloudPhysicsIO.txt; set CLOUDPHYSICS=FILE" >&2; }
fi
[[ -s "$CP" ]] && TRACES+=("$CP")
ARGS=(--bin "$BIN" --fractions "${FRACTIONS:-0.05,0.1,0.2,0.4}" --objects "${OBJECTS:-20000}"
  --requests "${REQUESTS:-200000}")
[[ -n "${JSON:-}" ]] && ARGS+=(--json "$JSON")
exec "$VENV/bin/python" scripts/trace_compare.py "${ARGS[@]}" ${TRACES[@]+"${TRACES[@]}"}

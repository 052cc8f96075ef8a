#!/bin/bash
# Coverage-guided fuzzing (issue 21): builds every libFuzzer target with
# `-sanitize=fuzzer,address` and runs each for SECONDS, starting from the seed corpus
# kept in Fuzz/corpus/<target>/ (new inputs go to a scratch corpus, not the repository).
#
#   scripts/fuzz-guided.sh 60                    # every target, 60 s each (CI)
#   scripts/fuzz-guided.sh 300 cache-file        # one target
#   MC_FUZZ_BUILD=/tmp/fuzz-build scripts/fuzz-guided.sh 30
#   MC_FUZZ_MERGE=1 scripts/fuzz-guided.sh 600 binary-coding   # then fold the scratch
#                                                # corpus's coverage into Fuzz/corpus (minimised)
#   scripts/fuzz-guided.sh repro cache-file FILE # run one input (a crash reproducer)
#   scripts/fuzz-guided.sh totals                # sums of the runs made on this machine
#
# Targets (Fuzz/Targets/*.swift, see docs/fuzzing.md):
#   cache-file     a cache file whose header, index and logs the input patches, opened,
#                  read, written, verified and repaired with CacheFile and SharedCache
#   binary-coding  BinaryCoding.decode of nested Codable types; decoded values round-trip
#   tool-args      mapped-cache's command-line parser (every command, every typed option)
#   stress-args    cache-stress's option parser; parsed options survive the trip to a worker
#   resp           the Redis tier's RESP parser: any split of a stream gives the same values,
#                  and every value parsed round-trips through its encoding
#   cluster-nodes  the cluster holder's CLUSTER NODES parser and its migrations bookkeeping
#
# The library is compiled once (whole module, -O, -enable-testing so that targets may
# `@testable import` it); each target links against it. Per target the script prints
# executions, coverage (cov: edges, ft: features), corpus size, and crashes; crash,
# timeout (> 1 s per input, confirmed on a quiet machine: see confirm_timeout) and
# out-of-memory inputs are kept in .build/fuzz/work/<target>/artifacts and the script
# exits 1. Build time from a clean clone: ~70 s on 2 idle cores (~3 min when shared).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ "${1:-}" = "totals" ]; then
  # Sums of every run recorded on this machine (docs/fuzzing.md's table).
  for h in "${MC_FUZZ_BUILD:-$ROOT/.build/fuzz}"/work/*/history.log; do
    awk -v t="$(basename "$(dirname "$h")")" '
      { for (i = 1; i <= NF; i++) {
          if ($(i+1) == "s," && $i ~ /^[0-9]+$/) secs += $i
          if ($(i+1) == "execs") execs += $i
          if ($i == "cov") { c = $(i+1); sub(",", "", c); if (c + 0 > cov) cov = c + 0 }
          if ($i == "ft") { f = $(i+1); sub(",", "", f); if (f + 0 > ft) ft = f + 0 }
          if ($i == "corpus") corpus = $(i+1)
        } runs++ }
      END { printf "%s: %d runs, %d s, %d execs, max cov %d, max ft %d, corpus %s\n", t, runs, secs, execs, cov, ft, corpus }' "$h"
  done
  exit 0
fi
if [ "${1:-}" = "repro" ]; then
  MODE=repro; shift
  TARGETS=("$1"); REPRO_INPUT=$2; SECONDS_EACH=0
else
  MODE=run
  SECONDS_EACH=${1:?usage: scripts/fuzz-guided.sh SECONDS [TARGET...] | repro TARGET FILE}
  shift
  TARGETS=("$@")
fi
ALL_TARGETS=(cache-file binary-coding tool-args stress-args resp cluster-nodes)
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")

BUILD=${MC_FUZZ_BUILD:-$ROOT/.build/fuzz}
OUT=$BUILD/out
mkdir -p "$BUILD/lib" "$OUT"
SWIFTC=${SWIFTC:-swiftc}
# The clang of the Swift toolchain (its compiler-rt has the fuzzer and ASan runtimes the
# Swift side links), not whichever clang comes first on PATH.
TOOLCHAIN_BIN=$(dirname "$(command -v "$SWIFTC")")
CLANG=${CLANG:-$([ -x "$TOOLCHAIN_BIN/clang" ] && echo "$TOOLCHAIN_BIN/clang" || echo clang)}
SAN=(-sanitize=fuzzer,address)
# Swift 6 language mode, as SwiftPM builds these sources (swift-tools-version 6.0); one
# package name for every module, so that they see each other's `package` declarations.
OPT=(-O -g -swift-version 6 -package-name mappedcache)
# The linker warns about every ASan helper symbol it cannot export: noise.
quiet() { grep -vE 'Cannot export local symbol|^$' || true; }

# --- Build ---------------------------------------------------------------------------
# Rebuilt only when a source is newer than the product.
newer_than() { # product sources...
  local product=$1; shift
  [ ! -e "$product" ] && return 0
  [ -n "$(find "$@" -newer "$product" -print -quit 2>/dev/null)" ]
}

build_library() {
  local lib=$BUILD/lib
  cat > "$lib/module.modulemap" <<EOF
module CMappedCacheShim {
  header "$ROOT/Sources/CMappedCacheShim/include/mc_shim.h"
  export *
}
EOF
  if newer_than "$lib/MappedCache.o" Sources/MappedCache Sources/SystemCalls Sources/CMappedCacheShim; then
    echo "== building the library (fuzzer-instrumented, ASan)"
    local t0=$(date +%s)
    "$CLANG" -c -O1 -g -fsanitize=fuzzer-no-link,address -I Sources/CMappedCacheShim/include \
      Sources/CMappedCacheShim/mc_shim.c -o "$lib/mc_shim.o" || return 1
    # The system-call wrappers every module calls the C library through.
    rm -f "$lib/SystemCalls.o"
    build_module SystemCalls Sources/SystemCalls || return 1
    # shellcheck disable=SC2046
    "$SWIFTC" -c -parse-as-library -module-name MappedCache -wmo -enable-testing "${OPT[@]}" "${SAN[@]}" \
      -emit-module -emit-module-path "$lib/MappedCache.swiftmodule" -I "$lib" \
      $(find Sources/MappedCache -name '*.swift' | sort) -o "$lib/MappedCache.o" 2>&1 | quiet
    [ "${PIPESTATUS[0]}" = 0 ] || { rm -f "$lib/MappedCache.o"; return 1; }
    echo "   library built in $(( $(date +%s) - t0 )) s"
  fi
  # The modules the tools' sources import beside MappedCache: CacheTools (both tools),
  # MappedCacheRedis (mapped-cache's agent command, cache-stress --redis), RedisFaultProxy
  # (cache-stress --blackhole-every) and RedisServers (cache-stress --redis-spawn), each
  # compiled once like the library.
  build_module CacheTools Sources/CacheTools || return 1
  build_module MappedCacheRedis Sources/MappedCacheRedis || return 1
  build_module RedisFaultProxy Sources/RedisFaultProxy || return 1
  build_module RedisServers Sources/RedisServers || return 1
}

build_module() { # NAME DIR
  local lib=$BUILD/lib name=$1 dir=$2
  if newer_than "$lib/$name.o" "$dir" "$lib/MappedCache.o"; then
    echo "== building $name"
    # shellcheck disable=SC2046
    "$SWIFTC" -c -parse-as-library -module-name "$name" -wmo "${OPT[@]}" "${SAN[@]}" \
      -emit-module -emit-module-path "$lib/$name.swiftmodule" -I "$lib" \
      $(find "$dir" -name '*.swift' | sort) -o "$lib/$name.o" 2>&1 | quiet
    [ "${PIPESTATUS[0]}" = 0 ] || { rm -f "$lib/$name.o"; return 1; }
  fi
}

# The sources of each target (beyond its own file in Fuzz/Targets).
target_sources() {
  case $1 in
    # With cache-stress's seeded generator (SplitMix64) for the templates' values.
    cache-file) echo Fuzz/Targets/CacheFileFuzz.swift Stress/KeyDistribution.swift ;;
    binary-coding) echo Fuzz/Targets/BinaryCodingFuzz.swift ;;
    # The tool's own files, main.swift left out (it runs the tool and exits).
    tool-args) echo Fuzz/Targets/ToolArgsFuzz.swift $(find Sources/mapped-cache -name '*.swift' ! -name main.swift | sort) ;;
    stress-args) echo Fuzz/Targets/StressArgsFuzz.swift $(find Stress -name '*.swift' ! -name main.swift | sort) ;;
    # The parser's own file: it needs only MappedCache (for CacheError).
    resp) echo Fuzz/Targets/RESPFuzz.swift Sources/MappedCacheRedis/RESP.swift ;;
    # The parser and what it needs: the slot and node types, RESP values.
    cluster-nodes) echo Fuzz/Targets/ClusterNodesFuzz.swift Sources/MappedCacheRedis/ClusterMigrations.swift \
      Sources/MappedCacheRedis/ClusterSlots.swift Sources/MappedCacheRedis/RESP.swift ;;
    *) echo "unknown target $1" >&2; return 1 ;;
  esac
}

build_target() {
  local t=$1 srcs
  srcs=$(target_sources "$t") || return 1
  local objects=("$BUILD/lib/SystemCalls.o" "$BUILD/lib/MappedCache.o" "$BUILD/lib/CacheTools.o" \
    "$BUILD/lib/MappedCacheRedis.o" "$BUILD/lib/RedisFaultProxy.o" "$BUILD/lib/RedisServers.o")
  # shellcheck disable=SC2086
  if newer_than "$OUT/$t" $srcs "${objects[@]}"; then
    echo "== building $t"
    local module
    module=$(echo "$t" | tr -d '-')
    # shellcheck disable=SC2086
    "$SWIFTC" -parse-as-library -module-name "fuzz_$module" "${OPT[@]}" "${SAN[@]}" -I "$BUILD/lib" \
      $srcs "${objects[@]}" "$BUILD/lib/mc_shim.o" -o "$OUT/$t" 2>&1 | quiet
    [ "${PIPESTATUS[0]}" = 0 ] || { rm -f "$OUT/$t"; return 1; }
  fi
}

# --- Run -----------------------------------------------------------------------------
max_len() {
  case $1 in
    cache-file) echo 4096 ;;
    binary-coding) echo 4096 ;;
    tool-args|stress-args) echo 512 ;;
    resp) echo 4096 ;;
  esac
}

# Swift's runtime keeps metadata caches for the process lifetime: leak checks off.
# A trap (fatalError, overflow, bounds) reaches libFuzzer as a deadly signal.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=0:handle_abort=1:${ASAN_OPTIONS:-}"
# One in-process fuzzer per target, one target at a time (libFuzzer's -jobs would fork
# workers and write fuzz-N.log files into the current directory).
FUZZ_FLAGS=(-timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1)

status=0
t_start=$(date +%s)
build_library || { echo "== library build failed"; exit 1; }
for t in "${TARGETS[@]}"; do
  build_target "$t" || { echo "== $t: build failed"; status=1; continue; }
done
echo "   build done in $(( $(date +%s) - t_start )) s"
[ $status = 0 ] || exit $status

if [ $MODE = repro ]; then
  exec "$OUT/${TARGETS[0]}" -timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=512 "$REPRO_INPUT"
fi

# A timeout is confirmed before it counts: libFuzzer's timer is wall-clock, and on a
# loaded machine (CI runners, other builds) an input that takes 10 ms, or one whose reads
# wait out the cache's bounded backoff (a few ms quiet, where each sched_yield can cost a
# whole time slice when cores are contended), can pass a second. The timed-out input is
# run alone three times, after a seed (so that it is not the process's cold first input),
# once the machine is quiet (1-minute load average at most the number of cores; waiting
# up to 60 s for that). It counts only if it times out again. If it does not, or the
# machine never became quiet, it is kept under artifacts/unconfirmed/, reported, and
# fuzzing goes on for the time left. Crashes and out-of-memory inputs always count.
quiet_machine() {
  local i
  for i in $(seq 1 12); do
    awk -v n="$(nproc)" '{ exit !($1 <= n) }' /proc/loadavg && return 0
    sleep 5
  done
  return 1
}
confirm_timeout() { # target input
  local i warm
  quiet_machine || { echo "   (the machine stayed busy: load $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores)"; return 1; }
  warm=$(find "Fuzz/corpus/$1" -type f 2>/dev/null | sort | head -1)
  for i in 1 2 3; do
    # shellcheck disable=SC2086
    "$OUT/$1" -timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=512 $warm "$2" > /dev/null 2>&1 || return 0
  done
  return 1
}

SUMMARY=()
for t in "${TARGETS[@]}"; do
  work=$BUILD/work/$t
  corpus=$work/corpus
  artifacts=$work/artifacts
  mkdir -p "$corpus" "$artifacts/unconfirmed"
  seeds=()
  [ -d "Fuzz/corpus/$t" ] && seeds+=("Fuzz/corpus/$t")
  [ -d "Fuzz/regressions/$t" ] && seeds+=("Fuzz/regressions/$t")
  dict=()
  [ -f "Fuzz/dict/$t.dict" ] && dict=(-dict="Fuzz/dict/$t.dict")
  echo "== $t: fuzzing for $SECONDS_EACH s"
  t0=$(date +%s)
  execs=0; segment=0; unconfirmed=0; crashes=0; rc=0
  while :; do
    left=$(( SECONDS_EACH - ($(date +%s) - t0) ))
    [ $segment -gt 0 ] && [ $left -le 0 ] && break
    [ $left -lt 1 ] && left=1
    segment=$((segment + 1))
    log=$work/last.log
    stamp=$work/.started
    touch "$stamp"
    # The scratch corpus first: libFuzzer adds new inputs to the first directory only.
    "$OUT/$t" "${FUZZ_FLAGS[@]}" -max_len="$(max_len "$t")" -max_total_time="$left" \
      -artifact_prefix="$artifacts/" "${dict[@]}" "$corpus" "${seeds[@]}" > "$log" 2>&1
    rc=$?
    n=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    execs=$((execs + ${n:-0}))
    rate=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}')
    rss=$(grep -E '^stat::peak_rss_mb' "$log" | awk '{print $2}')
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | awk '{print $2}')
    ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | awk '{print $2}')
    corp=$(echo "$last" | grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' | awk '{print $2}')
    # libFuzzer exits 0 when time runs out; non-zero on a crash, timeout or OOM.
    [ $rc = 0 ] && break
    new=$(find "$artifacts" -maxdepth 1 -type f -newer "$stamp" 2>/dev/null)
    if [ -n "$new" ] && grep -q 'ERROR: libFuzzer: timeout' "$log" && ! confirm_timeout "$t" "$new"; then
      unconfirmed=$((unconfirmed + 1))
      mv "$new" "$artifacts/unconfirmed/"
      echo "   $t: a timeout that did not reproduce (the machine was busy); resuming"
      [ $unconfirmed -ge 20 ] && { echo "!! $t: 20 unconfirmed timeouts: the machine is too busy to fuzz"; status=1; break; }
      rc=0
      continue
    fi
    crashes=$(echo "$new" | grep -c . || true)
    status=1
    echo "!! $t: libFuzzer exit $rc; the report:"
    grep -E 'ERROR|SUMMARY|Fatal error|deadly signal|timeout|out-of-memory|Test unit written|#[0-9]+ 0x' "$log" | head -40
    break
  done
  line="$t: $(( $(date +%s) - t0 )) s, $execs execs (${rate:-0}/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, peak rss ${rss:-?} MB, crashes $crashes, unconfirmed timeouts $unconfirmed, exit $rc"
  echo "   $line"
  SUMMARY+=("$line")
  # One line per run, kept with the scratch corpus: totals over many runs (docs/fuzzing.md).
  echo "$(date -u +%FT%TZ) ${SECONDS_EACH}s $line" >> "$work/history.log"
  if [ "${MC_FUZZ_MERGE:-0}" = 1 ] && [ $rc = 0 ]; then
    mkdir -p "Fuzz/corpus/$t"
    "$OUT/$t" -merge=1 -max_len="$(max_len "$t")" -timeout=1 -rss_limit_mb=2048 \
      "Fuzz/corpus/$t" "$corpus" > "$work/merge.log" 2>&1 || echo "   merge failed (see $work/merge.log)"
    echo "   merged: Fuzz/corpus/$t has $(ls "Fuzz/corpus/$t" | wc -l) files, $(du -sh "Fuzz/corpus/$t" | cut -f1)"
  fi
done
echo "== fuzz summary ($SECONDS_EACH s per target)"
printf '   %s\n' "${SUMMARY[@]}"
exit $status

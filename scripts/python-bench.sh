#!/usr/bin/env bash
# The Python package's figures (docs/python.md), release builds:
#  1. from Python, gets and sets per second of mappedcache against
#     multiprocessing.Manager().dict(), diskcache, redis-py over a unix socket to a local
#     redis-server, pymemcache over a unix socket to a local memcached, and a plain dict
#     (scripts/python_bench.py: 100,000 keys, 64-byte values, 1 and 2 processes, REPS
#     interleaved passes, best and median);
#  2. from C, mc_get (Tests/CABI/bench_get.c) against Swift's own copyBytes(forKey:into:)
#     (mc-test-helper bench-copybytes) on the same file, keys and order, REPS interleaved
#     runs of each, best and median; and, where valgrind is installed, the instructions
#     each makes a get (callgrind: the same on every machine and every run).
#
#   scripts/python-bench.sh                       # REPS=3 SECONDS_PER_RUN=1 KEYS=100000
#   REPS=5 SECONDS_PER_RUN=2 scripts/python-bench.sh
#
# Installs what is missing (redis-server, memcached with apt-get; diskcache, redis,
# pymemcache from PyPI into .build/bench-python) and starts its own servers on unix
# sockets in a temporary directory (the packages' own daemons are never used).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-3}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-1}"
KEYS="${KEYS:-100000}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
if ! command -v redis-server >/dev/null 2>&1 || ! command -v memcached >/dev/null 2>&1; then
  $sudo apt-get update >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y redis-server memcached >&2
fi

swift build -c release --product mappedcache >&2
swift build -c release --product mc-test-helper >&2
bin="$(swift build -c release --show-bin-path)"
venv=.build/bench-python
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check diskcache redis pymemcache >&2
MAPPEDCACHE_LIB_DIR="$bin" "$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall \
  --no-deps ./bindings/python >&2

work="$(mktemp -d /tmp/mc-python-bench.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
  rm -f /dev/shm/mc-cabi-bench-$$.mcache
}
trap cleanup EXIT
redis-server --port 0 --unixsocket "$work/redis.sock" --unixsocketperm 700 --save "" --appendonly no \
  --dir "$work" --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
memcached -u "$(id -un)" -s "$work/memcached.sock" -a 0700 -m 256 -U 0 >"$work/memcached.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  [ -S "$work/redis.sock" ] && [ -S "$work/memcached.sock" ] && break
  sleep 0.1
done

echo "== machine: $(nproc) cores, $(uname -r); $(swift --version 2>&1 | head -1)"
echo "== 1. from Python (python_bench.py, $("$venv/bin/python" --version))"
"$venv/bin/python" scripts/python_bench.py --redis-socket "$work/redis.sock" \
  --memcached-socket "$work/memcached.sock" --keys "$KEYS" --seconds "$SECONDS_PER_RUN" --reps "$REPS"

echo
echo "== 2. from C: mc_get against Swift's copyBytes(forKey:into:), $KEYS keys, 64-byte values"
cc -std=c11 -O2 -I Sources/CMappedCacheABI/include Tests/CABI/bench_get.c -L "$bin" -lmappedcache \
  -Wl,-rpath,"$bin" -o "$work/bench_get"
file=/dev/shm/mc-cabi-bench-$$.mcache
"$work/bench_get" "$file" "$KEYS" 1 fill >/dev/null
n=2000000
for rep in $(seq 1 "$REPS"); do
  "$work/bench_get" "$file" "$KEYS" "$n" | awk '{print $2}' >>"$work/c.txt"
  "$bin/mc-test-helper" bench-copybytes "$file" "$KEYS" "$n" | awk '{print $2}' >>"$work/swift.txt"
done
python3 - "$work/c.txt" "$work/swift.txt" <<'PY'
import statistics, sys
c = [float(x) for x in open(sys.argv[1])]
s = [float(x) for x in open(sys.argv[2])]
print(f"C mc_get:                 best {min(c):6.1f} ns, median {statistics.median(c):6.1f} ns  ({len(c)} runs)")
print(f"Swift copyBytes(forKey:): best {min(s):6.1f} ns, median {statistics.median(s):6.1f} ns  ({len(s)} runs)")
print(f"C / Swift: {min(c) / min(s):.3f} best over best, {statistics.median(c) / statistics.median(s):.3f} median over median")
PY
if command -v valgrind >/dev/null 2>&1; then
  # Instructions a get: (total at 2N gets - total at N) / 3N (each run makes 3 passes).
  strip --strip-debug -o "$work/libmappedcache.so" "$bin/libmappedcache.so"
  strip --strip-debug -o "$work/mc-test-helper" "$bin/mc-test-helper"
  cc -std=c11 -O2 -I Sources/CMappedCacheABI/include Tests/CABI/bench_get.c -L "$work" -lmappedcache \
    -Wl,-rpath,"$work" -o "$work/bench_get_stripped"
  count() {
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.$2" "${@:3}" >/dev/null 2>&1
    awk '/^totals:/ {print $2}' "$work/cg.$1.$2"
  }
  m=50000
  c=$(( ($(count c 2 "$work/bench_get_stripped" "$file" "$KEYS" $((2 * m))) - $(count c 1 "$work/bench_get_stripped" "$file" "$KEYS" $m)) / (3 * m) ))
  s=$(( ($(count s 2 "$work/mc-test-helper" bench-copybytes "$file" "$KEYS" $((2 * m))) - $(count s 1 "$work/mc-test-helper" bench-copybytes "$file" "$KEYS" $m)) / (3 * m) ))
  echo "instructions a get (callgrind): C mc_get $c, Swift copyBytes(forKey:) $s"
fi

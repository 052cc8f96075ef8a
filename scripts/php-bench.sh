#!/usr/bin/env bash
# The PHP extension's figures (docs/php.md): gets per second from PHP of
# MappedCache\Cache::get and mappedcache_fetch against APCu's apcu_fetch (CLI,
# apc.enable_cli=1), phpredis and php-memcached (each over a unix socket to its own
# server): 100,000 keys, 64-byte values, 1 and 2 reader processes, REPS interleaved
# passes, best and median, and mappedcache's ratio to each (scripts/php_bench.php); and,
# where valgrind is installed, the instructions a get costs in PHP's process for
# mappedcache and APCu (callgrind: the same on every run; servers' work is not counted). APCu
# runs with apc.entries_hint sized for the keys (its default, 4,096 slots, would chain
# every lookup through some 25 entries).
#
#   scripts/php-bench.sh                                   # REPS=5 SECONDS_PER_RUN=1 KEYS=100000
#   MAPPEDCACHE_LIB_DIR=/path/to/lib scripts/php-bench.sh  # a built libmappedcache.so
#
# Without MAPPEDCACHE_LIB_DIR it builds the release library. Installs what is missing with
# apt-get (php-dev, php-apcu, php-redis, php-memcached, redis-server, memcached) and starts
# its own servers on unix sockets in a temporary directory (the packages' daemons are
# never used).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
REPS="${REPS:-5}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-1}"
KEYS="${KEYS:-100000}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
packages=(php-cli php-dev php-apcu php-redis php-memcached redis-server memcached)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  $sudo apt-get update >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}" >&2
fi

lib_dir=${MAPPEDCACHE_LIB_DIR:-}
if [[ -z $lib_dir ]]; then
  swift build -c release --product mappedcache >&2
  lib_dir="$(swift build -c release --show-bin-path)"
fi

work="$(mktemp -d /tmp/mc-php-bench.XXXXXX)"
cleanup() {
  [[ -n ${redis_pid:-} ]] && kill "$redis_pid" 2>/dev/null || true
  [[ -n ${memcached_pid:-} ]] && kill "$memcached_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The extension, built out of the checkout against a stripped copy of that library
# (valgrind 3.19 cannot read the toolchain's DWARF and gives up on the unstripped one).
mkdir "$work/lib"
strip -o "$work/lib/libmappedcache.so" "$lib_dir/libmappedcache.so"
cp -r bindings/php "$work/ext"
(cd "$work/ext" && phpize --clean >/dev/null
  phpize >/dev/null && MAPPEDCACHE_INCLUDE_DIR="$repo/Sources/CMappedCacheABI/include" \
    ./configure --quiet --with-mappedcache="$work/lib" && make -s -j2 >/dev/null) >&2
ext="$work/ext/modules/mappedcache.so"

redis-server --port 0 --unixsocket "$work/redis.sock" --save '' --appendonly no --daemonize no \
  >"$work/redis.log" 2>&1 &
redis_pid=$!
memcached -s "$work/memcached.sock" -m 256 -u "$(id -un)" >"$work/memcached.log" 2>&1 &
memcached_pid=$!
for _ in $(seq 100); do
  [[ -S $work/redis.sock && -S $work/memcached.sock ]] && break
  sleep 0.1
done

run() { # BACKEND PROCS TARGET
  php -d extension="$ext" -d apc.enable_cli=1 -d apc.shm_size=256M -d apc.entries_hint=131072 scripts/php_bench.php \
    "$1" "$KEYS" "$2" "$SECONDS_PER_RUN" "$3"
}
results="$work/results.jsonl"
for rep in $(seq "$REPS"); do
  for procs in 1 2; do
    for backend in mappedcache mappedcache_fetch apcu redis memcached; do
      case $backend in
        mappedcache*) target="$work/bench-$rep-$procs.mcache" ;;
        redis) target="$work/redis.sock"; redis-cli -s "$work/redis.sock" flushall >/dev/null ;;
        memcached) target="$work/memcached.sock" ;;
        apcu) target="" ;;
      esac
      run "$backend" "$procs" "$target" | tee -a "$results" >&2
      [[ $backend == mappedcache* ]] && rm -f "$target"
    done
  done
done

if command -v valgrind >/dev/null 2>&1; then
  # Two counts of gets differenced: the fill and PHP's start cancel out. The baseline (a
  # closure returning a string) is the loop's own cost, taken off the others.
  insn() { # BACKEND GETS
    rm -f "$work/insn.mcache" "$work/callgrind.out"
    valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" php -d extension="$ext" \
      -d apc.enable_cli=1 -d apc.shm_size=256M -d apc.entries_hint=131072 -d opcache.enable_cli=0 \
      scripts/php_bench.php "$1" "$KEYS" 0 "$2" "$work/insn.mcache" >/dev/null 2>&1
    awk '/^totals:/ {print $2}' "$work/callgrind.out"
  }
  per_get() { echo $((($(insn "$1" 20480) - $(insn "$1" 10240)) / 10240)); }
  loop=$(per_get baseline)
  {
    echo "instructions a get costs the PHP process (callgrind; the loop's own $loop taken off):"
    for backend in mappedcache mappedcache_fetch apcu; do
      echo "  $backend $(($(per_get "$backend") - loop))"
    done
  } >"$work/insn"
fi

php -r '
$rows = array_map(fn ($l) => json_decode($l, true), file($argv[1], FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES));
$by = [];
foreach ($rows as $r) { $by[$r["procs"]][$r["backend"]][] = $r["gets_per_s"]; }
$median = function (array $v) { sort($v); $n = count($v); return $n % 2 ? $v[intdiv($n, 2)] : ($v[$n / 2 - 1] + $v[$n / 2]) / 2; };
printf("%d keys, 64-byte values, %d interleaved passes of %s s, gets per second (all readers together)\n",
  $argv[2], $argv[3], $argv[4]);
foreach ($by as $procs => $backends) {
  printf("\n%d process%s       best         median     mappedcache / this (best, median)\n", $procs, $procs > 1 ? "es" : "");
  $mcBest = max($backends["mappedcache"]); $mcMedian = $median($backends["mappedcache"]);
  foreach ($backends as $name => $v) {
    printf("  %-18s %12s %12s   %6.2fx %6.2fx\n", $name, number_format(max($v)), number_format($median($v)),
      $mcBest / max($v), $mcMedian / $median($v));
  }
}' "$results" "$KEYS" "$REPS" "$SECONDS_PER_RUN"
if [[ -f $work/insn ]]; then
  echo
  cat "$work/insn"
fi

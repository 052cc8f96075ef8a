#!/usr/bin/env bash
# Rails cache stores from Ruby: MappedCacheStore against RedisCacheStore and MemCacheStore
# (dalli) over unix sockets and MemoryStore in-process (scripts/ruby_bench.rb; KEYS,
# VALUE_BYTES, SECONDS, ROUNDS and PROCESSES change its defaults). Starts its own
# redis-server and memcached on unix sockets in a temporary directory (never port 6379 or
# 11211) and stops them at the end. Installs Debian's ruby-redis, ruby-dalli, redis-server
# and memcached when missing, and the gem (against $MAPPEDCACHE_LIB_DIR, default
# .build/release, else .build/debug) into .build/ruby-bench-gems.
#
#   scripts/ruby-bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
missing=()
for p in ruby-dev ruby-activesupport ruby-redis ruby-dalli redis-server memcached; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
fi
lib=${MAPPEDCACHE_LIB_DIR:-}
if [[ -z $lib ]]; then
  for d in .build/release .build/debug; do [[ -e $d/libmappedcache.so ]] && { lib=$d; break; }; done
fi
[[ -n $lib ]] || { echo "error: no libmappedcache.so: run swift build -c release --product mappedcache" >&2; exit 1; }
gems=$PWD/.build/ruby-bench-gems
rm -rf "$gems" && mkdir -p "$gems"
(cd bindings/ruby && gem build mappedcache.gemspec --output "$gems/mappedcache.gem" >/dev/null)
MAPPEDCACHE_LIB_DIR=$lib gem install --local --no-document --install-dir "$gems" "$gems/mappedcache.gem" >/dev/null

dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir" /dev/shm/ruby-bench-$$.mcache
}
trap cleanup EXIT
redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" --appendonly no --daemonize no >"$dir/redis.log" 2>&1 &
pids+=($!)
export REDIS_PID=$!
user=()
if [[ $(id -u) -eq 0 ]]; then user=(-u root); fi
memcached "${user[@]}" -s "$dir/memcached.sock" -m 512 >"$dir/memcached.log" 2>&1 &
pids+=($!)
export MEMCACHED_PID=$!
for _ in $(seq 100); do [[ -S $dir/redis.sock && -S $dir/memcached.sock ]] && break; sleep 0.05; done
echo "library: $lib; machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
GEM_PATH="$gems:$(gem env gempath)" ruby scripts/ruby_bench.rb /dev/shm/ruby-bench-$$.mcache "$dir/redis.sock" "$dir/memcached.sock"

#!/usr/bin/env bash
# The aiocache backend's figure (docs/python.md): mappedcache.aiocache.MappedCache against
# aiocache's RedisCache on a local redis-server (loopback TCP, a port of its own), get and
# set from one event loop, one task and 32 at once, REPS interleaved passes, best and
# median (scripts/python_frameworks_bench.py).
#
#   scripts/python-frameworks-bench.sh                 # REPS=5 OPS=5000
#   MAPPEDCACHE_LIB_DIR=/path/to/release/lib scripts/python-frameworks-bench.sh
#
# Builds the release library unless MAPPEDCACHE_LIB_DIR names a built one; installs
# redis-server (apt-get) and aiocache, redis (PyPI, into .build/bench-frameworks) when
# missing. The package's own redis daemon on 6379 is never used.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-5}"
OPS="${OPS:-5000}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
if ! command -v redis-server >/dev/null 2>&1; then
  $sudo apt-get update >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y redis-server >&2
fi
lib="${MAPPEDCACHE_LIB_DIR:-}"
if [[ -z "$lib" ]]; then
  swift build -c release --product mappedcache >&2
  lib="$(swift build -c release --show-bin-path)"
fi
venv=.build/bench-frameworks
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check aiocache redis >&2
MAPPEDCACHE_LIB_DIR="$lib" "$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall \
  --no-deps ./bindings/python >&2

work="$(mktemp -d /tmp/mc-frameworks-bench.XXXXXX)"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --daemonize no \
  >"$work/redis.log" 2>&1 &
redis_pid=$!
path="/dev/shm/mc-frameworks-bench-$$.mcache"
trap 'kill "$redis_pid" 2>/dev/null || true; rm -rf "$work" "$path"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

echo "python-frameworks-bench: $(git rev-parse --short HEAD), $(nproc) cores, $(redis-server --version | cut -d' ' -f3)"
"$venv/bin/python" scripts/python_frameworks_bench.py --path "$path" --redis-port "$port" --reps "$REPS" --ops "$OPS"

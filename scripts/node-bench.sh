#!/usr/bin/env bash
# The Node addon against node-redis over a unix socket and an in-process lru-cache
# (Debian's node-redis and node-lru-cache): random gets of KEYS keys (100,000) of 64-byte
# string values, in 1 and 2 processes at once, ROUNDS (5) interleaved rounds; prints each
# contender's best and median gets per second (2 processes: their sum) and the ratios.
#
#   scripts/node-bench.sh                 # ROUNDS=5 KEYS=100000 OPS=1000000 REDIS_OPS=20000
#
# The addon is built if missing; it runs against a release libmappedcache
# (LIB_DIR, default .build/release: `swift build -c release --product mappedcache`).
# redis-server runs on its own unix socket in a temporary directory (never port 6379).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
KEYS=${KEYS:-100000}
OPS=${OPS:-1000000}
REDIS_OPS=${REDIS_OPS:-20000}
LIB_DIR=$(realpath "${LIB_DIR:-.build/release}")
export NODE_PATH=/usr/share/nodejs
export LD_LIBRARY_PATH=$LIB_DIR

if [[ ! -f $LIB_DIR/libmappedcache.so ]]; then swift build -c release --product mappedcache; fi
if [[ ! -d /usr/share/nodejs/redis || ! -d /usr/share/nodejs/lru-cache ]] || ! command -v redis-server >/dev/null; then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y node-redis node-lru-cache redis-server
fi
if [[ ! -f bindings/node/build/Release/mappedcache.node ]]; then
  (cd bindings/node && MAPPEDCACHE_LIB_DIR=$LIB_DIR node /usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js \
    rebuild --nodedir=/usr --loglevel=warn)
fi

work=$(mktemp -d)
redis_pid=""
cleanup() {
  if [[ -n $redis_pid ]]; then kill "$redis_pid" 2>/dev/null || true; fi
  rm -rf "$work" "/dev/shm/node-bench-$$.mcache"
}
trap cleanup EXIT
socket=$work/redis.sock
redis-server --port 0 --unixsocket "$socket" --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do [[ -S $socket ]] && break; sleep 0.05; done
path=/dev/shm/node-bench-$$.mcache
node scripts/node_bench.js fill "$path" "$KEYS" >/dev/null
node scripts/node_bench.js fill-redis "$socket" "$KEYS" >/dev/null

# One contender's run in N processes at once: the sum of their gets per wall-clock
# second, and per CPU second of the client processes (what a loaded machine disturbs
# less; for node-redis it leaves out the server's time and the waits).
run() {
  local n=$1
  shift
  local pids=() i
  for i in $(seq "$n"); do
    node scripts/node_bench.js "$@" >"$work/out.$i" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  cat "$work"/out.* | node -e '
    let wall = 0, cpu = 0;
    for (const l of require("fs").readFileSync(0, "utf8").trim().split("\n")) {
      const r = JSON.parse(l);
      wall += r.ops / r.seconds;
      cpu += r.ops / r.cpu;
    }
    console.log(Math.round(wall), Math.round(cpu));'
  rm -f "$work"/out.*
}

results=$work/results
for round in $(seq "$ROUNDS"); do
  for n in 1 2; do
    rates=$(run "$n" mappedcache "$path" "$KEYS" "$OPS")
    echo "mappedcache $n $rates" >>"$results"
    rates=$(run "$n" lru "$KEYS" "$OPS")
    echo "lru-cache $n $rates" >>"$results"
    rates=$(run "$n" redis "$socket" "$KEYS" "$REDIS_OPS")
    echo "node-redis $n $rates" >>"$results"
  done
  echo "round $round of $ROUNDS done" >&2
done

node - "$results" <<'JS'
const lines = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n");
const runs = {};
for (const l of lines) {
  const [name, n, wall, cpu] = l.split(" ");
  const r = (runs[`${name} ${n}`] ??= { wall: [], cpu: [] });
  r.wall.push(Number(wall));
  r.cpu.push(Number(cpu));
}
const best = (xs) => Math.max(...xs);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const f = (x) => x.toLocaleString("en-US");
console.log("contender     procs  best gets/s  median gets/s  best per CPU-s  median per CPU-s  runs (gets/s)");
for (const [key, r] of Object.entries(runs)) {
  const [name, n] = key.split(" ");
  console.log(
    `${name.padEnd(13)} ${n.padStart(5)} ${f(best(r.wall)).padStart(12)} ${f(median(r.wall)).padStart(14)} ` +
      `${f(best(r.cpu)).padStart(15)} ${f(median(r.cpu)).padStart(17)}  ${r.wall.map(f).join(", ")}`,
  );
}
for (const n of ["1", "2"]) {
  const m = runs[`mappedcache ${n}`];
  for (const other of ["node-redis", "lru-cache"]) {
    const o = runs[`${other} ${n}`];
    const ratio = (k, g) => (g(m[k]) / g(o[k])).toFixed(2);
    console.log(
      `${n} process${n === "1" ? ": " : "es:"} mappedcache / ${other.padEnd(10)} = ${ratio("wall", best)}x best, ` +
        `${ratio("wall", median)}x median (per CPU second: ${ratio("cpu", best)}x best, ${ratio("cpu", median)}x median)`,
    );
  }
}
JS

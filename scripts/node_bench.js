"use strict";
/*
 * One process of scripts/node-bench.sh: random gets of KEYS keys holding 64-byte string
 * values, timed, and printed as one JSON line { ops, seconds }.
 *
 *   node_bench.js fill PATH KEYS                 stores the keys in the cache at PATH
 *   node_bench.js fill-redis SOCKET KEYS         stores them in Redis
 *   node_bench.js mappedcache PATH KEYS OPS      gets from the shared file
 *   node_bench.js lru KEYS OPS                   gets from an in-process lru-cache (filled first)
 *   node_bench.js redis SOCKET KEYS OPS          gets from Redis (node-redis, one await a get)
 *
 * Every contender reads the same keys in the same random order (a fixed seed), as an
 * application would: a key string from an array, the value a string.
 */
const { Cache } = require("../bindings/node");

const VALUE = "v".repeat(56);
const keyOf = (i) => `key:${String(i).padStart(8, "0")}`;
const valueOf = (i) => `${VALUE}${String(i).padStart(8, "0")}`;

function order(keys, ops) {
  const picks = new Uint32Array(ops);
  let x = 0x9e3779b9;
  for (let i = 0; i < ops; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    picks[i] = (x >>> 0) % keys;
  }
  return picks;
}

const cpuSeconds = ({ user, system }) => (user + system) / 1e6;

function timeSync(get, keys, ops) {
  const names = Array.from({ length: keys }, (_, i) => keyOf(i));
  const picks = order(keys, ops);
  let bytes = 0;
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < ops; i++) bytes += get(names[picks[i]]).length;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = cpuSeconds(process.cpuUsage(c0));
  if (bytes !== ops * 64) throw new Error(`read ${bytes} bytes, expected ${ops * 64}: a key was missing`);
  return { ops, seconds, cpu };
}

async function timeAsync(get, keys, ops) {
  const names = Array.from({ length: keys }, (_, i) => keyOf(i));
  const picks = order(keys, ops);
  let bytes = 0;
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < ops; i++) bytes += (await get(names[picks[i]])).length;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = cpuSeconds(process.cpuUsage(c0));
  if (bytes !== ops * 64) throw new Error(`read ${bytes} bytes, expected ${ops * 64}: a key was missing`);
  return { ops, seconds, cpu };
}

async function redisClient(socket) {
  const { createClient } = require("redis");
  const client = createClient({ socket: { path: socket } });
  await client.connect();
  return client;
}

const commands = {
  fill(path, keys) {
    const cache = new Cache(path, { capacity: 64 << 20 });
    const n = Number(keys);
    for (let i = 0; i < n; i += 1000) {
      const batch = [];
      for (let j = i; j < Math.min(n, i + 1000); j++) batch.push([keyOf(j), valueOf(j)]);
      cache.setMany(batch);
    }
    return { entries: cache.size };
  },
  async "fill-redis"(socket, keys) {
    const client = await redisClient(socket);
    const n = Number(keys);
    for (let i = 0; i < n; i += 1000) {
      const batch = [];
      for (let j = i; j < Math.min(n, i + 1000); j++) batch.push(keyOf(j), valueOf(j));
      await client.mSet(batch);
    }
    await client.quit();
    return { entries: n };
  },
  mappedcache(path, keys, ops) {
    const cache = new Cache(path);
    timeSync((k) => cache.get(k), Number(keys), Math.min(Number(ops), 100_000));
    return timeSync((k) => cache.get(k), Number(keys), Number(ops));
  },
  lru(keys, ops) {
    const lib = require("lru-cache");
    const LRUCache = lib.LRUCache ?? lib; // lru-cache 7 exports the class itself, 8 and later a named one
    const lru = new LRUCache({ max: Number(keys) });
    for (let i = 0; i < Number(keys); i++) lru.set(keyOf(i), valueOf(i));
    timeSync((k) => lru.get(k), Number(keys), Math.min(Number(ops), 100_000));
    return timeSync((k) => lru.get(k), Number(keys), Number(ops));
  },
  async redis(socket, keys, ops) {
    const client = await redisClient(socket);
    await timeAsync((k) => client.get(k), Number(keys), Math.min(Number(ops), 2000));
    const r = await timeAsync((k) => client.get(k), Number(keys), Number(ops));
    await client.quit();
    return r;
  },
};

const [command, ...args] = process.argv.slice(2);
Promise.resolve(commands[command](...args)).then(
  (r) => console.log(JSON.stringify(r)),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);

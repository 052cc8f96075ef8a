"use strict";
/*
 * Node worker processes for the addon's multi-process tests (run as a script):
 *
 *   node_worker.js compute-race PATH KEY COUNTER_FILE START_MS COMPUTE_MS
 *       At wall-clock START_MS, getOrComputes KEY in a cache of strings (as the Swift
 *       helper's and py_worker.py's compute-race do); the compute appends a line to
 *       COUNTER_FILE and takes COMPUTE_MS (a timer: the event loop runs meanwhile).
 *       Prints "VALUE cached|computed", how many timer ticks ran meanwhile and how
 *       many milliseconds getOrCompute took.
 *
 *   node_worker.js chaos PATH SLOT KEYS PROBLEMS STOP
 *       Until the file STOP exists: sets and reads self-checking values (Tests/CheckedValues'
 *       format, as the Swift helper's writer and reader and py_worker.py do) on the shared
 *       keys k0..k{KEYS-1} and on keys of its own (node{SLOT}-k<n>) whose last write it
 *       tracks. A value that does not check is "corrupt", a key of its own that does not
 *       hold its last write "wrong"; each problem is appended to PROBLEMS at once (the
 *       worker may be SIGKILLed at any moment). Prints its counts when it stops.
 */
const fs = require("node:fs");
const { Cache } = require("../..");

const MASK = (1n << 64n) - 1n;

function fnv(bytes) {
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) h = ((h ^ BigInt(b)) * 0x100000001b3n) & MASK;
  return h;
}

/** CheckedValue.make: key NUL writer NUL seq NUL payload, then FNV-1a of it all (LE). */
function checkedValue(key, writer, seq, size) {
  const head = Buffer.from(`${key}\0${writer}\0${seq}\0`);
  const payload = Buffer.alloc(Math.max(0, size - head.length - 8));
  let x = ((BigInt(seq) * 0x9e3779b97f4a7c15n) & MASK) | 1n;
  for (let i = 0; i < payload.length; i++) {
    x ^= (x << 13n) & MASK;
    x ^= x >> 7n;
    x ^= (x << 17n) & MASK;
    payload[i] = Number(x & 0xffn);
  }
  const body = Buffer.concat([head, payload]);
  const sum = Buffer.alloc(8);
  sum.writeBigUInt64LE(fnv(body));
  return Buffer.concat([body, sum]);
}

/** CheckedValue.check: the value names the key and its checksum matches. */
function check(value, key) {
  const k = Buffer.from(key);
  if (value.length < k.length + 1 + 8) return false;
  const body = value.subarray(0, value.length - 8);
  return (
    value.readBigUInt64LE(value.length - 8) === fnv(body) &&
    value.subarray(0, k.length).equals(k) &&
    value[k.length] === 0
  );
}

const seqOf = (value) => Number(value.toString("latin1").split("\0")[2]);

async function computeRace(path, key, counter, startMs, computeMs) {
  const cache = new Cache(path, { capacity: 4 << 20, valueType: "string" });
  while (Date.now() < Number(startMs)) await new Promise((r) => setImmediate(r));
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  const began = performance.now();
  let computed = false;
  const value = await cache.getOrCompute(
    key,
    async () => {
      computed = true;
      fs.appendFileSync(counter, `computed by node ${process.pid}\n`);
      await new Promise((r) => setTimeout(r, Number(computeMs)));
      return `value-from-${process.pid}`;
    },
    { wait: 30 },
  );
  clearInterval(timer);
  const waited = Math.round(performance.now() - began);
  console.log(`${value} ${computed ? "computed" : "cached"} ticks=${ticks} waited=${waited}`);
}

function chaos(path, slot, keys, problems, stop) {
  const cache = new Cache(path, { valueType: "bytes", create: false });
  const writer = 2000 + Number(slot);
  let seq = (Date.now() % 1_000_000) * 1000;
  const mine = new Map();
  const counts = { sets: 0, reads: 0, hits: 0, corrupt: 0, wrong: 0 };
  const problem = (kind, text) => {
    counts[kind]++;
    fs.appendFileSync(problems, `${kind} node slot ${slot} pid ${process.pid}: ${text}\n`);
  };
  const sizes = [16, 64, 200, 1500];
  for (let n = 1; ; n++) {
    if (n % 64 === 0 && fs.existsSync(stop)) break;
    const own = Math.random() < 0.5;
    const key = own ? `node${slot}-k${Math.floor(Math.random() * 64)}` : `k${Math.floor(Math.random() * keys)}`;
    if (Math.random() < 0.4) {
      seq++;
      cache.set(key, checkedValue(key, writer, seq, sizes[Math.floor(Math.random() * sizes.length)]));
      counts.sets++;
      if (own) mine.set(key, seq);
      continue;
    }
    counts.reads++;
    const value = cache.get(key);
    if (value === undefined) {
      if (own && mine.has(key)) problem("wrong", `${key} missing after this process stored seq ${mine.get(key)}`);
      continue;
    }
    counts.hits++;
    if (!check(value, key)) problem("corrupt", `${key}: ${JSON.stringify(value.subarray(0, 40).toString("latin1"))}`);
    else if (own && mine.has(key) && seqOf(value) !== mine.get(key)) {
      problem("wrong", `${key} holds seq ${seqOf(value)}, this process stored ${mine.get(key)}`);
    }
  }
  console.log(JSON.stringify(counts));
}

if (require.main === module) {
  const [command, ...args] = process.argv.slice(2);
  const commands = { "compute-race": computeRace, chaos };
  if (!(command in commands)) {
    console.error(`usage: node_worker.js ${Object.keys(commands).join("|")} ...`);
    process.exit(64);
  }
  Promise.resolve(commands[command](...args)).catch((error) => {
    console.error(error);
    process.exit(1);
  });
}

module.exports = { checkedValue, check };

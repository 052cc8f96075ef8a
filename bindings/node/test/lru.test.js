"use strict";
const assert = require("node:assert/strict");
const { test } = require("node:test");
const { LRUCache } = require("..");
const { tempPath, needs, debianModule } = require("./support");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("lru-cache's synchronous interface over the file", async (t) => {
  const lru = new LRUCache({ path: tempPath(t), capacity: 4 << 20, ttl: 60_000 });
  assert.equal(lru.set("a", 1), lru);
  lru.set("b", "two").set("c", { three: 3 });
  assert.equal(lru.get("a"), 1);
  assert.equal(lru.peek("b"), "two");
  assert.deepEqual(lru.get("c"), { three: 3 });
  assert.equal(lru.get("missing"), undefined);
  assert.equal(lru.has("a"), true);
  assert.equal(lru.size, 3);
  assert.ok(lru.getRemainingTTL("a") > 59_000);
  assert.equal(lru.getRemainingTTL("missing"), 0);
  lru.set("forever", 1, { ttl: 0 });
  assert.equal(lru.getRemainingTTL("forever"), Infinity);
  assert.deepEqual([...lru.keys()].sort(), ["a", "b", "c", "forever"]);
  assert.equal(Object.fromEntries(lru).b, "two");
  const seen = [];
  lru.forEach((v, k, self) => seen.push([k, self === lru]));
  assert.equal(seen.length, 4);
  lru.set("a", undefined);
  assert.equal(lru.has("a"), false);
  assert.equal(lru.delete("b"), true);
  assert.equal(lru.delete("b"), false);
  lru.set("brief", 1, { ttl: 50 });
  await sleep(80);
  assert.equal(lru.get("brief"), undefined);
  lru.clear();
  assert.equal(lru.size, 0);
});

test("max is the file's entry limit, shared by every handle", (t) => {
  const path = tempPath(t);
  const lru = new LRUCache({ path, capacity: 4 << 20, max: 50 });
  for (let i = 0; i < 200; i++) lru.set(`k${i}`, i);
  assert.ok(lru.size <= 50, `size ${lru.size}`);
  assert.equal(lru.max, 50);
  assert.equal(new LRUCache({ path }).max, 50);
  assert.equal(lru.get("k199"), 199, "the newest entry stays");
});

test("fetch computes once with fetchMethod", async (t) => {
  let calls = 0;
  const lru = new LRUCache({
    path: tempPath(t),
    capacity: 4 << 20,
    fetchMethod: async (key) => {
      calls++;
      await sleep(30);
      return `fetched ${key}`;
    },
  });
  const got = await Promise.all([lru.fetch("x"), lru.fetch("x"), lru.fetch("x")]);
  assert.deepEqual(got, Array(3).fill("fetched x"));
  assert.equal(calls, 1);
  assert.equal(lru.get("x"), "fetched x");
});

test("bad options throw", (t) => {
  assert.throws(() => new LRUCache({}), TypeError);
  assert.throws(() => new LRUCache({ path: tempPath(t), ttl: -1 }), RangeError);
  assert.throws(() => new LRUCache({ path: tempPath(t), fetchMethod: 1 }), TypeError);
});

// The same calls on Debian's lru-cache (7) and on the facade give the same results
// (set(key, undefined) is left out: lru-cache 7 stores undefined, 10 deletes, as the facade does).
test("the facade answers as lru-cache does for the calls both have", (t) => {
  const lib = debianModule("lru-cache", "node-lru-cache");
  if (!needs(t, lib.missing)) return;
  const real = new lib.module({ max: 1000 });
  const ours = new LRUCache({ path: tempPath(t), capacity: 4 << 20, max: 1000 });
  const script = [
    ["set", "a", 1],
    ["set", "b", "x"],
    ["get", "a"],
    ["has", "b"],
    ["get", "zz"],
    ["delete", "a"],
    ["delete", "a"],
    ["has", "a"],
    ["delete", "b"],
    ["has", "b"],
    ["set", "c", 3],
    ["peek", "c"],
  ];
  for (const [op, ...args] of script) {
    const a = real[op](...args);
    const b = ours[op](...args);
    if (op === "set") assert.equal(b, ours);
    else assert.deepEqual(b, a, `${op}(${args})`);
  }
  assert.equal(ours.size, real.size);
});

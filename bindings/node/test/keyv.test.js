"use strict";
const assert = require("node:assert/strict");
const { test } = require("node:test");
const { Cache, KeyvMappedCache } = require("..");
const { tempPath, needs, debianModule } = require("./support");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const store = (t, options = {}) => new KeyvMappedCache(tempPath(t), { capacity: 4 << 20, ...options });

// The store adapter contract (KeyvStoreAdapter) on its own.
test("every method returns a promise, with the contract's results", async (t) => {
  const s = store(t);
  for (const call of [() => s.get("k"), () => s.set("k", "v"), () => s.has("k"), () => s.delete("k")]) {
    assert.ok(call() instanceof Promise);
  }
  assert.equal(await s.set("k", "v"), true);
  assert.equal(await s.get("k"), "v");
  assert.equal(await s.has("k"), true);
  assert.equal(await s.get("missing"), undefined);
  assert.equal(await s.has("missing"), false);
  assert.equal(await s.delete("k"), true);
  assert.equal(await s.delete("k"), false);
  assert.equal(await s.get("k"), undefined);
  assert.equal(await s.clear(), undefined);
  assert.equal(typeof s.on, "function");
  assert.equal(s.opts.dialect, "mappedcache");
  assert.equal(s.opts.path, s.cache.path);
});

test("ttl is in milliseconds", async (t) => {
  const s = store(t);
  await s.set("short", "v", 100);
  await s.set("long", "v", 60_000);
  await s.set("never", "v");
  const left = s.cache.ttl("long");
  assert.ok(left > 59 && left <= 60, `ttl ${left} s`);
  await sleep(150);
  assert.equal(await s.get("short"), undefined);
  assert.equal(await s.get("long"), "v");
  assert.equal(s.cache.ttl("never"), Infinity);
  await assert.rejects(s.set("k", "v", -5), RangeError);
});

test("getMany, setMany, deleteMany", async (t) => {
  const s = store(t);
  await s.setMany([
    { key: "a", value: 1 },
    { key: "b", value: "two", ttl: 60_000 },
  ]);
  assert.deepEqual(await s.getMany(["a", "missing", "b"]), [1, undefined, "two"]);
  assert.equal(await s.deleteMany(["a", "b"]), true);
  assert.equal(await s.deleteMany(["a", "b"]), false);
  assert.deepEqual(await s.getMany(["a", "b"]), [undefined, undefined]);
});

test("clear() removes only the namespace's keys; iterator lists them", async (t) => {
  const a = store(t);
  const b = new KeyvMappedCache(a.cache);
  a.namespace = "a";
  b.namespace = "b";
  await a.set("a:1", "x");
  await a.set("a:2", "y");
  await b.set("b:1", "z");
  assert.deepEqual((await collect(a.iterator())).sort(), [["a:1", "x"], ["a:2", "y"]]);
  await a.clear();
  assert.equal(await a.get("a:1"), undefined);
  assert.equal(await b.get("b:1"), "z");
  b.namespace = undefined;
  await b.clear();
  assert.equal(a.cache.size, 0);
});

test("errors reject (a bad key), the store stays usable", async (t) => {
  const s = store(t);
  await s.set("ok", 1);
  await assert.rejects(s.set("", 1), { code: "MC_E_EMPTY_KEY" });
  await assert.rejects(s.get("x".repeat(300)), { code: "MC_E_KEY_TOO_LARGE" });
  assert.equal(await s.get("ok"), 1);
  await s.disconnect();
  await assert.rejects(s.get("ok"), { code: "MC_E_CLOSED" });
});

test("an open Cache can back the store, shared with direct use", async (t) => {
  const cache = new Cache(tempPath(t), { capacity: 4 << 20 });
  const s = new KeyvMappedCache(cache);
  cache.set("direct", Buffer.from("bytes"));
  assert.deepEqual(await s.get("direct"), Buffer.from("bytes"));
});

// Keyv itself: Debian ships Keyv 4 inside node-got.
test("new Keyv({ store: new KeyvMappedCache(path) }) works", async (t) => {
  const keyv = debianModule("keyv", "node-got");
  if (!needs(t, keyv.missing)) return;
  const Keyv = keyv.module;
  const s = store(t);
  const k = new Keyv({ store: s });
  const other = new Keyv({ store: new KeyvMappedCache(s.cache), namespace: "other" });
  const errors = [];
  k.on("error", (e) => errors.push(e));
  assert.equal(s.namespace, "keyv");
  const values = [
    "text",
    "with \"quotes\" and 'apostrophes'",
    42,
    0,
    false,
    null,
    { nested: { a: [1, 2, { b: "c" }] } },
    [1, "two"],
    Buffer.from([0, 1, 255]),
  ];
  for (const [i, v] of values.entries()) {
    assert.equal(await k.set(`v${i}`, v), true);
    assert.deepEqual(await k.get(`v${i}`), v, `value ${i}`);
  }
  assert.equal(await k.get("missing"), undefined);
  await k.set("ttl", "soon gone", 100);
  await other.set("v0", "not keyv's");
  assert.equal(await k.get("ttl"), "soon gone");
  await sleep(150);
  assert.equal(await k.get("ttl"), undefined);
  assert.equal(await k.delete("v0"), true);
  assert.equal(await k.delete("v0"), false);
  assert.equal(await other.get("v0"), "not keyv's");
  await k.clear();
  assert.equal(await k.get("v1"), undefined);
  assert.equal(await other.get("v0"), "not keyv's", "clear() kept the other namespace");
  // A second process's view: the same file, opened again.
  const again = new Keyv({ store: new KeyvMappedCache(s.cache.path), namespace: "other" });
  assert.equal(await again.get("v0"), "not keyv's");
  await assert.rejects(k.set("x".repeat(300), 1), { code: "MC_E_KEY_TOO_LARGE" });
  assert.deepEqual(errors, []);
});

async function collect(iterator) {
  const out = [];
  for await (const item of iterator) out.push(item);
  return out;
}

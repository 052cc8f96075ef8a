"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const { test } = require("node:test");
const { Cache, CacheError, versions } = require("..");
const { tempPath } = require("./support");

const open = (t, options = {}) => new Cache(tempPath(t), { capacity: 4 << 20, ...options });

test("versions name the loaded library", () => {
  const v = versions();
  assert.equal(v.abi, 1);
  assert.match(v.library, /^\d+\.\d+\.\d+/);
  assert.ok(v.fileFormat >= 5);
});

test("a new file holds python values and reports its parameters", (t) => {
  const c = open(t, { maxKeySize: 100 });
  assert.equal(c.valueType, "python");
  assert.equal(c.capacity, 4 << 20);
  assert.equal(c.maxKeySize, 100);
  assert.ok(c.maxValueSize > 0);
  assert.ok(c.partitionCount >= 1);
  assert.equal(c.writable, true);
  assert.equal(c.closed, false);
});

test("get, set, add, replace, delete, has", (t) => {
  const c = open(t);
  assert.equal(c.get("k"), undefined);
  assert.equal(c.has("k"), false);
  assert.equal(c.set("k", "v1"), true);
  assert.equal(c.get("k"), "v1");
  assert.equal(c.has("k"), true);
  assert.equal(c.add("k", "v2"), false);
  assert.equal(c.get("k"), "v1");
  assert.equal(c.replace("k", "v3"), true);
  assert.equal(c.replace("other", "x"), false);
  assert.equal(c.get("other"), undefined);
  assert.equal(c.add("other", "y"), true);
  assert.equal(c.get("k"), "v3");
  assert.equal(c.delete("k"), true);
  assert.equal(c.delete("k"), false);
  assert.equal(c.get("k"), undefined);
});

test("string and Buffer keys name the same entry (UTF-8)", (t) => {
  const c = open(t);
  c.set("clé", 1);
  assert.equal(c.get(Buffer.from("clé")), 1);
  c.set(Buffer.from("b-key"), "x");
  assert.equal(c.get("b-key"), "x");
  assert.deepEqual([...c.keys()].sort(), ["b-key", "clé"]);
});

test("values of every JS kind read back as stored", (t) => {
  const c = open(t);
  const values = {
    text: "héllo 🎉",
    empty: "",
    buffer: Buffer.from([0, 1, 2, 255]),
    emptyBuffer: Buffer.alloc(0),
    int: 42,
    negative: -7,
    float: 1.25,
    nan: NaN,
    infinity: -Infinity,
    big: 2n ** 70n,
    unsafe: 2n ** 60n,
    object: { a: [1, "two", null], b: { c: true } },
    array: [1, 2, 3],
    yes: true,
    no: false,
    nothing: null,
  };
  for (const [k, v] of Object.entries(values)) c.set(k, v);
  for (const [k, v] of Object.entries(values)) assert.deepEqual(c.get(k), v, k);
  c.set("u8", new Uint8Array([9, 8]));
  assert.deepEqual(c.get("u8"), Buffer.from([9, 8]));
  c.set("ab", new Uint8Array([7]).buffer);
  assert.deepEqual(c.get("ab"), Buffer.from([7]));
});

test("strings of every length around the stack buffer, ending in characters of 1 to 4 bytes, store whole", (t) => {
  for (const type of ["python", "string", "bytes"]) {
    const c = open(t, { createValueType: type });
    for (const last of ["a", "é", "€", "🎉"]) {
      for (let n = 1010; n <= 1030; n++) {
        const text = "x".repeat(n) + last;
        c.set("k", text);
        const back = c.get("k");
        assert.equal(type === "bytes" ? back.toString() : back, text, `${type}: ${n} + ${last}`);
      }
    }
  }
});

test("a large value (past the stack buffer) reads back whole", (t) => {
  const c = open(t);
  const big = Buffer.alloc(200_000, 7);
  big[199_999] = 1;
  c.set("big", big);
  assert.deepEqual(c.get("big"), big);
  const text = "x".repeat(5000) + "é";
  c.set("text", text);
  assert.equal(c.get("text"), text);
  assert.deepEqual(c.getMany(["big", "text"]), [big, text]);
});

test("ttl in seconds: ttl() reports it, touch changes it, entries expire", async (t) => {
  const c = open(t);
  c.set("short", "v", 0.2);
  c.set("forever", "v");
  const left = c.ttl("short");
  assert.ok(left > 0 && left <= 0.2, `ttl ${left}`);
  assert.equal(c.ttl("forever"), Infinity);
  assert.equal(c.ttl("missing"), undefined);
  assert.equal(c.touch("forever", 100), true);
  assert.ok(c.ttl("forever") > 99);
  assert.equal(c.touch("missing", 1), false);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(c.get("short"), undefined);
  assert.equal(c.has("short"), false);
  assert.equal(c.get("forever"), "v");
});

test("incr and decr count atomically, from initial, as numbers or bigints", (t) => {
  const c = open(t);
  assert.equal(c.incr("n"), 1);
  assert.equal(c.incr("n", 10), 11);
  assert.equal(c.decr("n", 3), 8);
  assert.equal(c.decr("n"), 7);
  assert.equal(c.get("n"), 7);
  assert.equal(c.incr("m", 1, 0, 100), 101);
  assert.equal(c.incr("b", 2n ** 60n), 2n ** 60n);
  c.set("counter", 5);
  assert.equal(c.incr("counter", 5n), 10);
  c.set("text", "abc");
  assert.throws(() => c.incr("text"), { code: "MC_E_NOT_AN_INTEGER" });
  assert.equal(c.get("text"), "abc");
  c.set("max", 2n ** 63n - 1n);
  assert.throws(() => c.incr("max"), RangeError);
  assert.equal(c.get("max"), 2n ** 63n - 1n);
  assert.throws(() => c.incr("n", 1.5), TypeError);
  assert.throws(() => c.incr("n", 2 ** 64), RangeError);
});

test("gets and cas: a compare-and-swap on the entry's version", (t) => {
  const c = open(t);
  assert.equal(c.gets("k"), undefined);
  c.set("k", "a");
  const { value, version } = c.gets("k");
  assert.equal(value, "a");
  assert.equal(typeof version, "bigint");
  assert.equal(c.cas("k", "b", version), true);
  assert.equal(c.cas("k", "c", version), false);
  assert.equal(c.get("k"), "b");
  assert.throws(() => c.cas("k", "d", 1), TypeError);
});

test("getMany, setMany and deleteMany", (t) => {
  const c = open(t);
  c.setMany(new Map([["a", 1], ["b", "two"]]));
  c.setMany([["c", Buffer.from("3")]], 60);
  c.setMany({ d: { four: 4 } });
  assert.deepEqual(c.getMany(["a", "b", "missing", "c", "d"]), [1, "two", undefined, Buffer.from("3"), { four: 4 }]);
  assert.ok(c.ttl("c") > 59);
  assert.deepEqual(c.getMany([]), []);
  assert.equal(c.deleteMany(["a", "b", "missing"]), 2);
  assert.deepEqual(c.getMany(["a", "b", "c"]), [undefined, undefined, Buffer.from("3")]);
});

test("a bad entry fails setMany before anything is stored", (t) => {
  const c = open(t);
  assert.throws(() => c.setMany([["ok", 1], ["", 2]]), { code: "MC_E_EMPTY_KEY" });
  assert.throws(() => c.setMany([["ok", 1], ["bad", undefined]]), TypeError);
  assert.throws(() => c.setMany([["ok", 1], ["x".repeat(300), 2]]), { code: "MC_E_KEY_TOO_LARGE" });
  assert.equal(c.get("ok"), undefined);
  assert.throws(() => c.setMany("nope"), TypeError);
  assert.throws(() => c.setMany([["a"]]), TypeError);
});

test("a key past the limit is refused, never looked up or stored cut short (multi-byte characters)", (t) => {
  const c = open(t);
  for (const key of ["é".repeat(126), "🎉".repeat(63), "é".repeat(5000), "🎉".repeat(2000)]) {
    assert.throws(() => c.get(key), { code: "MC_E_KEY_TOO_LARGE" });
    assert.throws(() => c.getMany(["ok", key]), { code: "MC_E_KEY_TOO_LARGE" });
    assert.throws(() => c.setMany([[key, 1]]), { code: "MC_E_KEY_TOO_LARGE" });
    assert.throws(() => c.deleteMany([key]), { code: "MC_E_KEY_TOO_LARGE" });
  }
  assert.equal(c.size, 0);
  const longest = "é".repeat(125);
  c.setMany([[longest, 1]]);
  assert.deepEqual(c.getMany([longest]), [1]);
});

test("iteration: keys, values, entries, forEach, the iterator, size", (t) => {
  const c = open(t);
  const stored = { a: 1, b: "2", c: [3] };
  c.setMany(stored);
  assert.equal(c.size, 3);
  assert.deepEqual([...c.keys()].sort(), ["a", "b", "c"]);
  assert.deepEqual(Object.fromEntries(c), stored);
  assert.deepEqual(Object.fromEntries(c.entries()), stored);
  assert.equal([...c.values()].length, 3);
  const seen = {};
  c.forEach((value, key, cache) => {
    assert.equal(cache, c);
    seen[key] = value;
  });
  assert.deepEqual(seen, stored);
  // An entry removed after iteration began is skipped, not returned as undefined.
  const it = c.entries();
  const first = it.next().value;
  for (const k of Object.keys(stored)) if (k !== first[0]) c.delete(k);
  assert.deepEqual([...it], []);
});

test("stats count the file's operations", (t) => {
  const c = open(t);
  c.set("a", 1);
  c.get("a");
  c.get("missing");
  const s = c.stats();
  assert.equal(s.entries, 1);
  assert.ok(s.hits >= 1);
  assert.ok(s.misses >= 1);
  assert.ok(s.sets >= 1);
  assert.equal(s.capacity, 4 << 20);
});

test("clear, sweep, grow, limits and verify", async (t) => {
  const c = open(t);
  c.setMany({ a: 1, b: 2 });
  c.set("old", 1, 0.05);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(c.sweep(), 1);
  c.clear();
  assert.equal(c.size, 0);
  // Rounded down to whole partitions.
  const grown = c.grow(8 << 20);
  assert.ok(grown > 4 << 20 && grown <= 8 << 20, `grown to ${grown}`);
  assert.equal(c.capacity, grown);
  assert.throws(() => c.grow(1 << 20), { code: "MC_E_INVALID_ARGUMENT" });
  for (let i = 0; i < 20; i++) c.set(`k${i}`, i);
  c.setLimits({ count: 10 });
  assert.ok(c.size <= 10, `size ${c.size}`);
  assert.equal(c.stats().countLimit, 10);
  c.setLimits({ count: 0 });
  assert.equal(c.stats().countLimit, 0);
  assert.equal(c.verify(), 0);
  assert.equal(c.verify({ repair: true }), 0);
});

test("bad input throws a clear error and loses nothing stored", (t) => {
  const c = open(t);
  c.set("keep", "safe");
  const bad = [
    [() => c.get(""), { code: "MC_E_EMPTY_KEY" }],
    [() => c.set("x".repeat(251), 1), { code: "MC_E_KEY_TOO_LARGE" }],
    [() => c.get("x".repeat(100_000)), { code: "MC_E_KEY_TOO_LARGE" }],
    [() => c.get(Buffer.from([0xff, 0xfe])), { code: "MC_E_INVALID_KEY" }],
    [() => c.get(42), TypeError],
    [() => c.get(undefined), TypeError],
    [() => c.set("k", undefined), TypeError],
    [() => c.set("k", () => 1), TypeError],
    [() => c.set("k", Symbol("s")), TypeError],
    [() => c.set("k", 1, -1), { code: "MC_E_INVALID_ARGUMENT" }],
    [() => c.set("k", 1, NaN), { code: "MC_E_INVALID_ARGUMENT" }],
    [() => c.set("k", 1, "60"), TypeError],
    [() => c.set("k", Buffer.alloc(c.maxValueSize + 10)), { code: "MC_E_VALUE_TOO_LARGE" }],
    [() => c.getMany("a"), TypeError],
    [() => c.getMany([1]), TypeError],
    [() => c.deleteMany([""]), { code: "MC_E_EMPTY_KEY" }],
    [() => c.cas("k", 1, "v"), TypeError],
    [() => c.grow("big"), TypeError],
  ];
  for (const [fn, expected] of bad) assert.throws(fn, expected);
  const circular = {};
  circular.self = circular;
  assert.throws(() => c.set("k", circular), TypeError);
  const e = (() => {
    try {
      c.get("");
    } catch (error) {
      return error;
    }
  })();
  assert.ok(e instanceof CacheError);
  assert.equal(e.status, -5);
  assert.equal(c.get("keep"), "safe");
  assert.equal(c.get("k"), undefined);
  assert.equal(c.verify(), 0);
});

test("opening: bad options, a file that is no cache, read-only, create: false", (t) => {
  const p = tempPath(t);
  assert.throws(() => new Cache(p, { capacity: -1 }), RangeError);
  assert.throws(() => new Cache(p, { capacity: "big" }), RangeError);
  assert.throws(() => new Cache(p, { valueType: "pickle" }), RangeError);
  assert.throws(() => new Cache(42), TypeError);
  assert.throws(() => new Cache(p, { create: false }), (e) => e.code === "MC_E_SYSTEM" && e.errno === 2);
  fs.writeFileSync(p, "not a cache at all, just some text that is long enough to be looked at".repeat(100), {
    mode: 0o600,
  });
  assert.throws(() => new Cache(p), { code: "MC_E_NOT_A_CACHE_FILE" });
  fs.rmSync(p);
  const c = new Cache(p, { capacity: 4 << 20 });
  c.set("k", "v");
  const r = new Cache(p, { readOnly: true });
  assert.equal(r.writable, false);
  assert.equal(r.get("k"), "v");
  assert.throws(() => r.set("k", "w"), { code: "MC_E_READ_ONLY" });
  assert.equal(c.get("k"), "v");
  assert.throws(() => new Cache(p, { valueType: "string" }), { code: "MC_E_TYPE_MISMATCH" });
});

test("a closed cache throws MC_E_CLOSED; close twice is fine", (t) => {
  const c = open(t);
  c.set("k", 1);
  c.close();
  c.close();
  assert.equal(c.closed, true);
  assert.throws(() => c.get("k"), { code: "MC_E_CLOSED" });
  assert.throws(() => c.set("k", 2), { code: "MC_E_CLOSED" });
  assert.throws(() => [...c.keys()], { code: "MC_E_CLOSED" });
  const again = new Cache(c.path);
  assert.equal(again.get("k"), 1);
});

test("the native functions refuse anything but a cache handle: a TypeError, not a crash", async (t) => {
  const native = require("../lib/native");
  const c = open(t);
  assert.throws(() => Cache.prototype.get.call({}, "k"), TypeError);
  for (const handle of [undefined, null, {}, 42, "h", Buffer.alloc(64)]) {
    assert.throws(() => native.get(handle, "k"), TypeError);
    assert.throws(() => native.set(handle, "k", 1), TypeError);
    assert.throws(() => native.close(handle), TypeError);
  }
  assert.throws(() => native.get(), TypeError);
  // A claim is not a cache handle, nor a cache handle a claim.
  const h = native.open(c.path);
  const [status, claim] = native.claim(h, "k", false);
  assert.equal(status, native.status.CLAIMED);
  assert.throws(() => native.get(claim, "k"), TypeError);
  assert.throws(() => native.publish(h, h, 1), TypeError);
  native.abandon(claim);
  assert.throws(() => native.abandon(claim), { code: "MC_E_INVALID_ARGUMENT" });
  native.close(h);
});

"use strict";
/*
 * One file, every tool (issue 69, item 3), Node's cells: what the CLI (`mapped-cache
 * set`), Swift (SharedCache) and Python store reads back in Node, and what Node stores
 * reads back in each of them, for bytes, strings, counters and expiry, in files of every
 * value type. The expectations are the issue's: a value reads back as it was given; in an
 * untyped file (`mapped-cache create`'s default) as bytes, or as a string where the
 * file's type says so.
 */
const assert = require("node:assert/strict");
const path = require("node:path");
const { spawnSync } = require("node:child_process");
const { test } = require("node:test");
const { Cache } = require("..");
const { tempPath, needs, swiftBinary, pythonWithPackage, run } = require("./support");

const PY_CELLS = path.join(__dirname, "workers", "py_cells.py");
const TYPES = ["untyped", "bytes", "string", "int64", "python"];
const TEXT = "héllo wörld 🎉";
const BINARY = Buffer.from([0, 1, 2, 0xfe, 0xff]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* The tools, or a skip (a failure under MAPPEDCACHE_REQUIRE_ALL) saying what is missing. */
function tools(t, ...names) {
  const found = {};
  for (const name of names) {
    const tool = name === "python" ? pythonWithPackage() : swiftBinary(name);
    if (!needs(t, tool.missing)) return null;
    found[name] = tool.file;
  }
  return found;
}

/* A file of the given value type, made by the CLI as a user would. */
function create(t, cli, type) {
  const p = tempPath(t, type);
  run(cli, ["create", p, "--capacity", "4MiB", ...(type === "untyped" ? [] : ["--type", type])]);
  return p;
}

function cliSet(cli, p, key, value, ttl) {
  run(cli, ["set", p, key, "-", ...(ttl ? ["--ttl", ttl] : [])], { input: value });
}

/* The bytes `mapped-cache get` writes, or undefined when it exits 1 (missing). */
function cliGet(cli, p, key) {
  const r = run(cli, ["get", p, key], { encoding: "buffer", allow: [1] });
  return r.status === 1 ? undefined : r.stdout;
}

/* Python's results for ops (test/workers/py_cells.py). */
function python(exe, ops) {
  return JSON.parse(run(exe, [PY_CELLS, JSON.stringify(ops)]).stdout);
}
const pyValue = {
  bytes: (b) => ({ t: "bytes", v: Buffer.from(b).toString("base64") }),
  str: (s) => ({ t: "str", v: s }),
  int: (n) => ({ t: "int", v: String(n) }),
  float: (x) => ({ t: "float", v: x }),
};

// ---------------------------------------------------------------------------------------
// CLI -> Node

for (const type of TYPES) {
  test(`CLI set -> Node get: a string in a ${type} file`, (t) => {
    const { "mapped-cache": cli } = tools(t, "mapped-cache") ?? {};
    if (!cli) return;
    const p = create(t, cli, type);
    const given = type === "int64" ? "42" : TEXT;
    cliSet(cli, p, "k", given);
    const expected = { untyped: Buffer.from(given), bytes: Buffer.from(given), string: given, int64: 42, python: given };
    assert.deepEqual(new Cache(p).get("k"), expected[type]);
  });
}

for (const type of ["untyped", "bytes"]) {
  test(`CLI set -> Node get: bytes (not UTF-8) in a ${type} file`, (t) => {
    const { "mapped-cache": cli } = tools(t, "mapped-cache") ?? {};
    if (!cli) return;
    const p = create(t, cli, type);
    cliSet(cli, p, "k", BINARY);
    assert.deepEqual(new Cache(p).get("k"), BINARY);
  });
}

for (const type of ["untyped", "bytes", "string", "int64"]) {
  test(`counters: CLI set 41 -> Node incr -> CLI get 42 in a ${type} file`, (t) => {
    const { "mapped-cache": cli } = tools(t, "mapped-cache") ?? {};
    if (!cli) return;
    const p = create(t, cli, type);
    cliSet(cli, p, "n", "41");
    assert.equal(new Cache(p).incr("n"), 42);
    assert.equal(cliGet(cli, p, "n")?.toString(), "42");
  });
}

// ---------------------------------------------------------------------------------------
// Node -> CLI: what Node stores reads back in the CLI as it was given.

const NODE_VALUES = {
  untyped: [["text", TEXT], ["binary", BINARY], ["int", 42]],
  bytes: [["text", TEXT], ["binary", BINARY], ["int", 42]],
  string: [["text", TEXT], ["int", 42]],
  int64: [["int", 42], ["negative", -7]],
  python: [["text", TEXT], ["binary", BINARY], ["int", 42], ["negative", -7]],
};

for (const type of TYPES) {
  test(`Node set -> CLI get: values as given in a ${type} file`, (t) => {
    const { "mapped-cache": cli } = tools(t, "mapped-cache") ?? {};
    if (!cli) return;
    const p = create(t, cli, type);
    const c = new Cache(p);
    for (const [key, value] of NODE_VALUES[type]) c.set(key, value);
    for (const [key, value] of NODE_VALUES[type]) {
      const given = Buffer.isBuffer(value) ? value : Buffer.from(String(value));
      assert.deepEqual(cliGet(cli, p, key), given, `${key}: ${JSON.stringify(String(value))}`);
    }
  });

  test(`counters: Node incr -> CLI get in a ${type} file`, (t) => {
    const { "mapped-cache": cli } = tools(t, "mapped-cache") ?? {};
    if (!cli) return;
    const p = create(t, cli, type);
    const c = new Cache(p);
    c.incr("n");
    c.incr("n", 10);
    assert.equal(cliGet(cli, p, "n")?.toString(), "11");
  });
}

// Expiry cells use a TTL of a few seconds: the CLI and Python start in that time even on a
// loaded machine, and the test then waits until every entry is past it.
const BRIEF = 3;

async function sleepUntil(deadline) {
  await sleep(Math.max(0, deadline - Date.now()));
}

test("expiry: CLI --ttl -> Node, Node ttl -> CLI (untyped and python files)", async (t) => {
  const { "mapped-cache": cli } = tools(t, "mapped-cache") ?? {};
  if (!cli) return;
  const files = ["untyped", "python"].map((type) => create(t, cli, type));
  const stored = Date.now();
  for (const p of files) {
    cliSet(cli, p, "from-cli", "v", `${BRIEF}s`);
    new Cache(p).set("from-node", "v", BRIEF);
  }
  for (const p of files) {
    const c = new Cache(p);
    const left = c.ttl("from-cli");
    assert.ok(left > 0 && left <= BRIEF, `Node sees ${left} s left of the CLI's ${BRIEF} s`);
    assert.ok(cliGet(cli, p, "from-node") !== undefined);
    assert.match(run(cli, ["keys", p]).stdout, /^from-node .*\d ?s$/m, "the CLI lists the TTL Node gave");
  }
  await sleepUntil(stored + BRIEF * 1000 + 300);
  for (const p of files) {
    assert.equal(new Cache(p).get("from-cli"), undefined);
    assert.equal(cliGet(cli, p, "from-node"), undefined);
  }
});

// ---------------------------------------------------------------------------------------
// Python <-> Node

const PY_NODE = {
  python: [
    [pyValue.str(TEXT), TEXT],
    [pyValue.bytes(BINARY), BINARY],
    [pyValue.int(42), 42],
    [pyValue.int(-(2 ** 40)), -(2 ** 40)],
    [pyValue.float(1.5), 1.5],
  ],
  bytes: [[pyValue.bytes(BINARY), BINARY]],
  untyped: [[pyValue.bytes(BINARY), BINARY]],
  string: [[pyValue.str(TEXT), TEXT]],
  int64: [[pyValue.int(-7), -7]],
};

for (const type of TYPES) {
  test(`Python set -> Node get, Node set -> Python get: a ${type} file`, (t) => {
    const found = tools(t, "mapped-cache", "python");
    if (!found) return;
    const p = create(t, found["mapped-cache"], type);
    const cells = PY_NODE[type];
    python(found.python, cells.map(([v], i) => ({ path: p, do: "set", key: `py${i}`, value: v })));
    const c = new Cache(p);
    cells.forEach(([, expected], i) => assert.deepEqual(c.get(`py${i}`), expected, `Python's py${i} in Node`));
    cells.forEach(([, value], i) => c.set(`node${i}`, value));
    const back = python(found.python, cells.map((_, i) => ({ path: p, do: "get", key: `node${i}` })));
    cells.forEach(([v], i) => assert.deepEqual(back[i], v, `Node's node${i} in Python`));
  });
}

test("Node's JSON values (objects, arrays, booleans) read back in Python and the CLI (python file)", (t) => {
  const found = tools(t, "mapped-cache", "python");
  if (!found) return;
  const p = create(t, found["mapped-cache"], "python");
  const c = new Cache(p);
  const values = [{ a: [1, null, true], b: { c: "é" } }, [1, "two"], true, false];
  values.forEach((v, i) => c.set(`json${i}`, v));
  const back = python(found.python, values.map((_, i) => ({ path: p, do: "get", key: `json${i}` })));
  values.forEach((v, i) => {
    assert.equal(back[i]?.t, "json", `json${i} in Python: ${JSON.stringify(back[i])}`);
    assert.deepEqual(JSON.parse(back[i].v), v);
    assert.deepEqual(JSON.parse(cliGet(found["mapped-cache"], p, `json${i}`).toString()), v, `json${i} in the CLI`);
  });
});

for (const type of ["untyped", "python", "int64"]) {
  test(`counters and expiry: Node and Python in turn on a ${type} file`, async (t) => {
    const found = tools(t, "mapped-cache", "python");
    if (!found) return;
    const p = create(t, found["mapped-cache"], type);
    const c = new Cache(p);
    assert.equal(c.incr("n", 5), 5);
    assert.deepEqual(python(found.python, [{ path: p, do: "incr", key: "n", delta: 10 }]), [15]);
    assert.equal(c.incr("n"), 16);
    const stored = Date.now();
    c.set("node-brief", 1, BRIEF);
    const value = type === "int64" ? pyValue.int(1) : pyValue.bytes(BINARY);
    const [, left] = python(found.python, [
      { path: p, do: "set", key: "py-brief", value, ttl: BRIEF },
      { path: p, do: "ttl", key: "node-brief" },
    ]);
    assert.ok(left > 0 && left <= BRIEF, `Python sees ${JSON.stringify(left)} s left of Node's ${BRIEF}`);
    const nodeLeft = c.ttl("py-brief");
    assert.ok(nodeLeft > 0 && nodeLeft <= BRIEF, `Node sees ${nodeLeft} s left of Python's ${BRIEF}`);
    await sleepUntil(stored + BRIEF * 1000 + 1500);
    assert.equal(c.get("py-brief"), undefined);
    assert.deepEqual(python(found.python, [{ path: p, do: "get", key: "node-brief" }]), [null]);
  });
}

// ---------------------------------------------------------------------------------------
// Swift <-> Node (mc-test-helper's interop-write and interop-read, InteropValues' entries)

const SWIFT = {
  string: {
    valueType: "string",
    entries: [["plain", "hello"], ["accents", "héllo wörld"], ["emoji", "🎉 party"], ["empty", ""], ["nul", "a\0b"]],
    shown: (v) => JSON.stringify(v),
  },
  bytes: {
    valueType: "bytes",
    entries: [["zero", Buffer.from([0, 1, 2, 255])], ["empty", Buffer.alloc(0)], ["text", Buffer.from("abc")]],
    shown: (v) => v.toString("hex"),
  },
  int: {
    valueType: "int64",
    entries: [["one", 1], ["negative", -42], ["max", 2n ** 63n - 1n]],
    shown: (v) => String(v),
  },
};

for (const [kind, { valueType, entries, shown }] of Object.entries(SWIFT)) {
  test(`Swift -> Node, Node -> Swift: ${kind} values`, (t) => {
    const found = tools(t, "mc-test-helper");
    if (!found) return;
    const helper = found["mc-test-helper"];
    const fromSwift = tempPath(t, "swift");
    run(helper, ["interop-write", fromSwift, kind]);
    const c = new Cache(fromSwift);
    assert.equal(c.valueType, valueType);
    for (const [key, value] of entries) assert.deepEqual(c.get(key), value, key);
    const fromNode = tempPath(t, "node");
    const n = new Cache(fromNode, { capacity: 4 << 20, createValueType: valueType });
    for (const [key, value] of entries) n.set(key, value);
    const keys = entries.map(([key]) => key);
    const lines = run(helper, ["interop-read", fromNode, kind, ...keys]).stdout.trim().split("\n");
    assert.deepEqual(lines, entries.map(([, value]) => shown(value)));
  });
}

test("Swift increments and Node increments count together (int64)", (t) => {
  const found = tools(t, "mc-test-helper");
  if (!found) return;
  const p = tempPath(t);
  const c = new Cache(p, { capacity: 4 << 20, createValueType: "int64" });
  const r = spawnSync(found["mc-test-helper"], ["incr", p, "hits", "2000"], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  for (let i = 0; i < 500; i++) c.incr("hits");
  assert.equal(c.get("hits"), 2500);
});

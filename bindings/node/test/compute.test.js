"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawn } = require("node:child_process");
const { test } = require("node:test");
const { Cache } = require("..");
const { tempPath, needs, swiftBinary, pythonWithPackage } = require("./support");

const WORKER = path.join(__dirname, "workers", "node_worker.js");
const PY_WORKER = path.resolve(__dirname, "..", "..", "python", "tests", "py_worker.py");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function finish(child) {
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`exited ${code}: ${err}`))));
  });
}

test("getOrCompute: a hit returns the value, a miss computes and stores it", async (t) => {
  const c = new Cache(tempPath(t), { capacity: 4 << 20 });
  let calls = 0;
  const compute = async () => {
    calls++;
    return { built: calls };
  };
  assert.deepEqual(await c.getOrCompute("k", compute, { ttl: 60 }), { built: 1 });
  assert.deepEqual(await c.getOrCompute("k", compute), { built: 1 });
  assert.equal(calls, 1);
  assert.ok(c.ttl("k") > 59);
  assert.equal(await c.getOrCompute("sync", () => "plain function"), "plain function");
  assert.equal(c.isComputing("k"), false);
});

test("getOrCompute: concurrent callers in one process compute once; the loop runs while they wait", async (t) => {
  const c = new Cache(tempPath(t), { capacity: 4 << 20 });
  let calls = 0;
  let ticks = 0;
  const timer = setInterval(() => ticks++, 2);
  const compute = async () => {
    calls++;
    assert.equal(c.isComputing("k"), true);
    await sleep(150);
    return "v";
  };
  const results = await Promise.all(Array.from({ length: 8 }, () => c.getOrCompute("k", compute)));
  clearInterval(timer);
  assert.deepEqual(results, Array(8).fill("v"));
  assert.equal(calls, 1);
  // Seven callers waited 150 ms; a wait that blocked the loop would let no tick run.
  assert.ok(ticks >= 3, `only ${ticks} timer ticks ran during the wait`);
});

test("getOrCompute: a compute that throws releases the claim, rejects, and a waiter computes next", async (t) => {
  const c = new Cache(tempPath(t), { capacity: 4 << 20 });
  const failing = c.getOrCompute("k", async () => {
    await sleep(50);
    throw new Error("backend down");
  });
  await sleep(5);
  const waiting = c.getOrCompute("k", async () => "second");
  await assert.rejects(failing, /backend down/);
  assert.equal(await waiting, "second");
  assert.equal(c.get("k"), "second");
  // Nothing is cached for the failure, and a value that cannot be stored rejects too.
  await assert.rejects(c.getOrCompute("u", async () => undefined), TypeError);
  assert.equal(c.isComputing("u"), false);
  assert.equal(await c.getOrCompute("u", () => 1), 1);
});

test("getOrCompute: after `wait` seconds a waiter computes as well", async (t) => {
  const c = new Cache(tempPath(t), { capacity: 4 << 20 });
  let release;
  const slow = c.getOrCompute("k", () => new Promise((r) => (release = r)));
  await sleep(5);
  const impatient = await c.getOrCompute("k", () => "impatient", { wait: 0.05 });
  assert.equal(impatient, "impatient");
  release("slow");
  assert.equal(await slow, "slow");
  await assert.rejects(c.getOrCompute("k", () => 1, { wait: -1 }), RangeError);
  await assert.rejects(c.getOrCompute("k", "nope"), TypeError);
});

test("getOrCompute with serveStale returns the expired value while another recomputes", async (t) => {
  const c = new Cache(tempPath(t), { capacity: 4 << 20 });
  c.set("k", "old", 0.05);
  await sleep(80);
  let release;
  const recompute = c.getOrCompute("k", () => new Promise((r) => (release = r)));
  await sleep(5);
  assert.equal(await c.getOrCompute("k", () => "never", { serveStale: true }), "old");
  release("new");
  assert.equal(await recompute, "new");
});

test("getOrCompute runs once across Node, Swift and Python processes", async (t) => {
  const helper = swiftBinary("mc-test-helper");
  const python = pythonWithPackage();
  if (!needs(t, helper.missing) || !needs(t, python.missing)) return;
  const p = tempPath(t);
  const counter = `${p}.counter`;
  new Cache(p, { capacity: 4 << 20, createValueType: "string" }).close();
  const start = String(Date.now() + 3000);
  const children = [
    ...[1, 2, 3].map(() => spawn(process.execPath, [WORKER, "compute-race", p, "report", counter, start, "300"])),
    spawn(helper.file, ["compute-race", p, "report", counter, start, "300"]),
    spawn(python.file, [PY_WORKER, "compute-race", p, "report", counter, start, "300"]),
  ];
  const outputs = await Promise.all(children.map(finish));
  const lines = fs.readFileSync(counter, "utf8").trim().split("\n");
  assert.equal(lines.length, 1, `computed ${lines.length} times: ${lines}`);
  const values = new Set(outputs.map((o) => o.trim().split(" ")[0]));
  assert.equal(values.size, 1, `processes saw different values: ${outputs}`);
  // A Node worker that waited for another's compute kept its event loop turning (one
  // that started late, on a loaded machine, may have found the value at once).
  for (const o of outputs.slice(0, 3)) {
    const [, ticks, waited] = /ticks=(\d+) waited=(\d+)/.exec(o).map(Number);
    if (o.includes("cached") && waited >= 100) {
      assert.ok(ticks >= 3, `a Node worker's event loop ran ${ticks} ticks in a ${waited} ms wait: ${o}`);
    }
  }
});

test("a computer SIGKILLed mid-compute releases its claim: a waiter computes", async (t) => {
  const p = tempPath(t);
  const counter = `${p}.counter`;
  new Cache(p, { capacity: 4 << 20, valueType: "string" }).close();
  const victim = spawn(process.execPath, [WORKER, "compute-race", p, "k", counter, String(Date.now()), "60000"]);
  const c = new Cache(p, { valueType: "string" });
  while (!fs.existsSync(counter)) await sleep(10);
  assert.equal(c.isComputing("k"), true);
  const waiting = c.getOrCompute("k", () => "after the kill");
  await sleep(50);
  victim.kill("SIGKILL");
  assert.equal(await waiting, "after the kill");
});

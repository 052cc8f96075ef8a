"use strict";
/*
 * The chaos harness with Node workers: Node processes setting and reading self-checking
 * values (Tests/CheckedValues' format) are SIGKILLed at random and restarted, while Swift
 * processes (the helper's writers and reader, one writer killed and replaced mid-run) and
 * Python processes (py_worker.py chaos) set, read and check the same keys. Nothing read
 * may be corrupt or wrong, and the file must verify clean afterwards.
 * MAPPEDCACHE_CHAOS_SECONDS sets the length (5 s).
 */
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawn } = require("node:child_process");
const { test } = require("node:test");
const { Cache } = require("..");
const { tempPath, needs, swiftBinary, pythonWithPackage } = require("./support");

const WORKER = path.join(__dirname, "workers", "node_worker.js");
const PY_WORKER = path.resolve(__dirname, "..", "..", "python", "tests", "py_worker.py");
const SECONDS = Number(process.env.MAPPEDCACHE_CHAOS_SECONDS || 5);
const KEYS = 500;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* A child with its output collected; `done` settles with { code, signal, out, err }. */
function start(file, args) {
  const child = spawn(file, args);
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  child.done = new Promise((resolve) => child.on("close", (code, signal) => resolve({ code, signal, out, err })));
  return child;
}

test("Node workers SIGKILLed at random beside Swift and Python: 0 corrupt, 0 wrong, verify clean", async (t) => {
  const helper = swiftBinary("mc-test-helper");
  const python = pythonWithPackage();
  if (!needs(t, helper.missing) || !needs(t, python.missing)) return;
  const p = tempPath(t);
  const cache = new Cache(p, { capacity: 32 << 20, createValueType: "bytes" });
  const problems = `${p}.problems`;
  const stop = `${p}.stop`;
  const swiftWriter = (i) => start(helper.file, ["writer", p, String(i), String(SECONDS + 1), String(KEYS), "16", "2000"]);
  const nodeWorker = (slot) => start(process.execPath, [WORKER, "chaos", p, String(slot), String(KEYS), problems, stop]);
  const pythonWorker = (slot) => start(python.file, [PY_WORKER, "chaos", p, String(slot), String(KEYS), problems, stop]);

  const writers = [swiftWriter(1), swiftWriter(2)];
  const reader = start(helper.file, ["reader", p, String(SECONDS + 5), String(KEYS)]);
  const pythons = [pythonWorker(0), pythonWorker(1)];
  const workers = [0, 1, 2, 3].map(nodeWorker);
  let kills = 0;
  let killedWriter = false;
  const end = performance.now() + SECONDS * 1000;
  while (performance.now() < end) {
    await sleep(100 + Math.random() * 200);
    const slot = Math.floor(Math.random() * workers.length);
    const victim = workers[slot];
    victim.kill("SIGKILL");
    const { code, signal, err } = await victim.done;
    assert.equal(signal, "SIGKILL", `Node worker ${slot} had already exited (${code}): ${err}`);
    workers[slot] = nodeWorker(slot);
    kills++;
    if (!killedWriter && performance.now() > end - (SECONDS * 1000) / 2) {
      // One Swift writer killed too, mid-run, and replaced.
      writers[0].kill("SIGKILL");
      await writers[0].done;
      writers[0] = swiftWriter(3);
      killedWriter = true;
    }
  }
  fs.writeFileSync(stop, "");
  const nodes = await Promise.all(workers.map((w) => w.done));
  const pys = await Promise.all(pythons.map((w) => w.done));
  const swift = await Promise.all([...writers, reader].map((w) => w.done));

  const reported = fs.existsSync(problems) ? fs.readFileSync(problems, "utf8") : "";
  assert.equal(reported, "", `workers read corrupt or wrong values; counters: ${JSON.stringify(cache.stats())}`);
  for (const [who, results] of [["Node", nodes], ["Python", pys]]) {
    for (const { code, out, err } of results) {
      assert.equal(code, 0, `a ${who} worker failed: ${err}`);
      const counts = JSON.parse(out.trim().split("\n").pop());
      assert.deepEqual([counts.corrupt, counts.wrong], [0, 0]);
      assert.ok(counts.sets > 0 && counts.hits > 0, `${who} worker did little: ${out}`);
    }
  }
  for (const { code, err } of swift) assert.equal(code, 0, err);
  assert.ok(kills >= SECONDS * 2, `only ${kills} kills`);
  assert.equal(cache.verify(), 0, "the file verifies clean");
  t.diagnostic(`${kills} Node workers killed; counters ${JSON.stringify(cache.stats())}`);
});

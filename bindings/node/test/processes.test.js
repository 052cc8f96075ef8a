"use strict";
const assert = require("node:assert/strict");
const cluster = require("node:cluster");
const fs = require("node:fs");
const path = require("node:path");
const { fork } = require("node:child_process");
const { Worker } = require("node:worker_threads");
const { test } = require("node:test");
const { Cache } = require("..");
const { tempPath } = require("./support");

const SHARE = path.join(__dirname, "workers", "share.js");
const ROUNDS = 300;

function setUp(t) {
  const p = tempPath(t);
  const parent = new Cache(p, { capacity: 8 << 20 });
  parent.set("from-parent", "hello");
  const computeLog = `${p}.computed`;
  return { p, parent, computeLog };
}

function checkReports(parent, reports, computeLog) {
  const n = reports.length;
  assert.equal(parent.get("counter"), n * ROUNDS, "every increment of every worker counted");
  for (const r of reports) {
    assert.equal(r.fromParent, "hello");
    assert.equal(parent.get(`from-${r.name}`).name, r.name);
  }
  const computers = fs.readFileSync(computeLog, "utf8").trim().split("\n");
  assert.equal(computers.length, 1, `computed by ${computers}`);
  assert.deepEqual(new Set(reports.map((r) => r.once)), new Set([`computed by ${computers[0]}`]));
}

test("worker_threads share the cache with the main thread", async (t) => {
  const { p, parent, computeLog } = setUp(t);
  const reports = await Promise.all(
    [1, 2, 3, 4].map(
      (i) =>
        new Promise((resolve, reject) => {
          const w = new Worker(
            `const { workerData, parentPort } = require("node:worker_threads");
             require(workerData.share).work(workerData.args).then((r) => parentPort.postMessage(r));`,
            { eval: true, workerData: { share: SHARE, args: { path: p, name: `thread${i}`, rounds: ROUNDS, computeLog } } },
          );
          w.once("message", resolve);
          w.once("error", reject);
        }),
    ),
  );
  checkReports(parent, reports, computeLog);
  // The main thread's handle is unaffected by the workers' closing theirs.
  assert.equal(parent.get("from-parent"), "hello");
});

test("child_process.fork children share the cache opened in the parent", async (t) => {
  const { p, parent, computeLog } = setUp(t);
  const reports = await Promise.all(
    [1, 2, 3].map(
      (i) =>
        new Promise((resolve, reject) => {
          const args = { path: p, name: `child${i}`, rounds: ROUNDS, computeLog };
          const child = fork(SHARE, [], { env: { ...process.env, MC_SHARE_ARGS: JSON.stringify(args) } });
          child.once("message", resolve);
          child.once("error", reject);
          child.once("exit", (code) => code !== 0 && reject(new Error(`child exited ${code}`)));
        }),
    ),
  );
  checkReports(parent, reports, computeLog);
});

test("cluster workers share the cache", async (t) => {
  const { p, parent, computeLog } = setUp(t);
  cluster.setupPrimary({ exec: SHARE, silent: false });
  const reports = await Promise.all(
    [1, 2, 3].map(
      (i) =>
        new Promise((resolve, reject) => {
          const args = { path: p, name: `worker${i}`, rounds: ROUNDS, computeLog };
          const w = cluster.fork({ MC_SHARE_ARGS: JSON.stringify(args) });
          w.once("message", resolve);
          w.once("error", reject);
          w.once("exit", (code) => code !== 0 && reject(new Error(`worker exited ${code}`)));
        }),
    ),
  );
  checkReports(parent, reports, computeLog);
});

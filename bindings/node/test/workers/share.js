"use strict";
/*
 * One worker of the sharing tests, started as a cluster worker, a worker thread or a
 * child_process.fork child: opens the cache at PATH, checks the value the parent
 * stored under "from-parent", counts ROUNDS increments of "counter", stores its own key,
 * races the others to getOrCompute "once", and reports what it saw.
 */
const fs = require("node:fs");
const { Cache } = require("../..");

async function work({ path, name, rounds, computeLog }) {
  const cache = new Cache(path);
  const fromParent = cache.get("from-parent");
  for (let i = 0; i < rounds; i++) cache.incr("counter");
  cache.set(`from-${name}`, { name, pid: process.pid });
  const once = await cache.getOrCompute("once", async () => {
    fs.appendFileSync(computeLog, `${name}\n`);
    await new Promise((r) => setTimeout(r, 100));
    return `computed by ${name}`;
  });
  cache.close();
  return { name, fromParent, once };
}

module.exports = { work };

if (require.main === module || process.env.MC_SHARE_ARGS) {
  const args = JSON.parse(process.env.MC_SHARE_ARGS);
  work(args).then((report) => {
    if (process.send) process.send(report, () => process.exit(0));
    else process.exit(0);
  });
}

"use strict";
// Shared helpers for the addon's tests: temporary cache paths, and the other tools the
// interop and chaos tests run beside Node (the Swift build's binaries, a Python with the
// mappedcache package). A test that needs a missing tool skips, saying why; with
// MAPPEDCACHE_REQUIRE_ALL=1 (CI) it fails instead.
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { spawnSync } = require("node:child_process");

const REPO = path.resolve(__dirname, "..", "..", "..");
const REQUIRE_ALL = process.env.MAPPEDCACHE_REQUIRE_ALL === "1";

let counter = 0;

/** A fresh cache path under /dev/shm, removed (with files beside it) when the test ends. */
function tempPath(t, name = "cache") {
  const dir = fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir();
  const p = path.join(dir, `mc-node-${process.pid}-${++counter}-${name}.mcache`);
  t.after(() => {
    for (const f of fs.readdirSync(dir)) {
      if (f.startsWith(path.basename(p))) fs.rmSync(path.join(dir, f), { force: true });
    }
  });
  return p;
}

/** Skips the test (or, under MAPPEDCACHE_REQUIRE_ALL, fails it) when `missing` says why. */
function needs(t, missing) {
  if (missing === undefined) return true;
  if (REQUIRE_ALL) throw new Error(`required by MAPPEDCACHE_REQUIRE_ALL: ${missing}`);
  t.skip(missing);
  return false;
}

/** A binary of the package's Swift build ($MAPPEDCACHE_SWIFT_BIN_DIR, else .build/debug),
 * or the reason it is missing. */
function swiftBinary(name) {
  const dir = process.env.MAPPEDCACHE_SWIFT_BIN_DIR || path.join(REPO, ".build", "debug");
  const file = path.join(dir, name);
  return fs.existsSync(file)
    ? { file }
    : { missing: `${name} is not built (run \`swift build\` in ${REPO}, or set MAPPEDCACHE_SWIFT_BIN_DIR)` };
}

let python;
/** A Python that imports mappedcache ($MAPPEDCACHE_PYTHON, else CI's venv, else python3),
 * or the reason there is none. */
function pythonWithPackage() {
  if (python !== undefined) return python;
  const candidates = [process.env.MAPPEDCACHE_PYTHON, path.join(REPO, ".build", "ci-python", "bin", "python"), "python3"];
  for (const exe of candidates.filter(Boolean)) {
    const r = spawnSync(exe, ["-c", "import mappedcache"], { encoding: "utf8" });
    if (r.status === 0) return (python = { file: exe });
  }
  return (python = {
    missing: "no Python with the mappedcache package (pip install ./bindings/python, or set MAPPEDCACHE_PYTHON)",
  });
}

/** A module of Debian's node-* packages, or the reason it is missing. They live in
 * /usr/share/nodejs, which only Debian's own node searches: run the tests with
 * NODE_PATH=/usr/share/nodejs (npm test does). */
function debianModule(name, pkg) {
  try {
    return { module: require(name) };
  } catch {
    return { missing: `${name} is not found (apt-get install ${pkg}; NODE_PATH=/usr/share/nodejs)` };
  }
}

/** Runs a command to completion: its stdout, or an error naming its status and stderr. */
function run(file, args, options = {}) {
  const r = spawnSync(file, args, { encoding: options.encoding ?? "utf8", timeout: 60_000, ...options });
  if (r.error) throw r.error;
  if (r.status !== 0 && !(options.allow ?? []).includes(r.status)) {
    throw new Error(`${path.basename(file)} ${args.join(" ")} exited ${r.status}: ${r.stderr}`);
  }
  return r;
}

module.exports = { REPO, tempPath, needs, swiftBinary, pythonWithPackage, debianModule, run };

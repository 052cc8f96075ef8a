// Where binding.gyp finds libmappedcache: `node paths.js lib` prints the directory of
// libmappedcache.so, `node paths.js include` that of mappedcache.h.
//
// MAPPEDCACHE_LIB_DIR (and MAPPEDCACHE_INCLUDE_DIR) name them, a relative directory
// taken from the MappedCache checkout around this package; otherwise the checkout's own
// Swift build (.build/release, then .build/debug, after
// `swift build --product mappedcache`) and its header.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const repo = path.resolve(__dirname, "..", "..");

function libraryDir() {
  const given = process.env.MAPPEDCACHE_LIB_DIR;
  const candidates = given
    ? [path.resolve(given), path.resolve(repo, given)]
    : [path.join(repo, ".build", "release"), path.join(repo, ".build", "debug")];
  const found = candidates.find((dir) => fs.existsSync(path.join(dir, "libmappedcache.so")));
  if (found === undefined) {
    const where = given ? `MAPPEDCACHE_LIB_DIR=${given} holds` : `${repo}/.build has`;
    throw new Error(
      `mappedcache: ${where} no libmappedcache.so; build it (swift build --product mappedcache) ` +
        "or set MAPPEDCACHE_LIB_DIR to the directory of one",
    );
  }
  return found;
}

function includeDir() {
  const given = process.env.MAPPEDCACHE_INCLUDE_DIR;
  return given ? path.resolve(given) : path.join(repo, "Sources", "CMappedCacheABI", "include");
}

process.stdout.write(process.argv[2] === "include" ? includeDir() : libraryDir());

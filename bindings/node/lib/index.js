"use strict";
/**
 * mappedcache: one cache shared by every process of a host through one memory-mapped
 * file, over libmappedcache's C ABI. Reads take no lock and make no system call.
 *
 *   const { Cache } = require("mappedcache");
 *   const cache = new Cache("/dev/shm/app.mcache", { capacity: 64 << 20 });
 *   cache.set("greeting", "hello", 60);       // expires in 60 s
 *   cache.get("greeting");                    // 'hello', in every process
 *   cache.incr("hits");                       // 1, 2, 3 ... across processes
 *   await cache.getOrCompute("report", build, { ttl: 600 });   // build runs once on the host
 */
const { Cache, versions } = require("./cache");
const { CacheError } = require("./errors");
const { KeyvMappedCache } = require("./keyv");
const { LRUCache } = require("./lru");

module.exports = { Cache, CacheError, KeyvMappedCache, LRUCache, versions };

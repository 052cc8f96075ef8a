"use strict";

const { EventEmitter } = require("node:events");
const { Cache } = require("./cache");

/**
 * A Keyv storage adapter: `new Keyv({ store: new KeyvMappedCache(path) })` shares one
 * Keyv store between every process of the host.
 *
 * The adapter contract (KeyvStoreAdapter): promise-returning get, set, delete, clear,
 * has, getMany, setMany, deleteMany, iterator and disconnect, `ttl` in milliseconds,
 * `opts`, and the `namespace` Keyv sets (Keyv prefixes keys with it; clear() removes
 * only that namespace's keys). Keyv hands the store the values it serialized (strings);
 * used alone, the store keeps what Cache keeps (Buffers, strings, numbers, JSON).
 *
 * `pathOrCache` is a path (opened with `options`, as Cache's) or an open Cache.
 */
class KeyvMappedCache extends EventEmitter {
  constructor(pathOrCache, options = {}) {
    super();
    this.cache = pathOrCache instanceof Cache ? pathOrCache : new Cache(pathOrCache, options);
    this.opts = { ...options, path: this.cache.path, dialect: "mappedcache" };
    this.namespace = undefined;
    this.ttlSupport = true;
  }

  async get(key) {
    return this.cache.get(key);
  }

  async getMany(keys) {
    return this.cache.getMany(keys);
  }

  /** Stores value, expiring after ttl milliseconds (undefined or 0: never). */
  async set(key, value, ttl) {
    this.cache.set(key, value, seconds(ttl));
    return true;
  }

  /** entries: [{ key, value, ttl }] (ttl in milliseconds). */
  async setMany(entries) {
    for (const { key, value, ttl } of entries) this.cache.set(key, value, seconds(ttl));
    return entries.map(() => true);
  }

  async delete(key) {
    return this.cache.delete(key);
  }

  async deleteMany(keys) {
    return this.cache.deleteMany(keys) > 0;
  }

  async has(key) {
    return this.cache.has(key);
  }

  /** Removes the namespace's keys (every key when there is no namespace). */
  async clear() {
    if (this.namespace === undefined || this.namespace === null || this.namespace === "") {
      this.cache.clear();
      return;
    }
    const prefix = `${this.namespace}:`;
    const keys = [...this.cache.keys()].filter((key) => key.startsWith(prefix));
    if (keys.length > 0) this.cache.deleteMany(keys);
  }

  /** [key, value] for the namespace's keys (every key without one). */
  async *iterator(namespace = this.namespace) {
    const prefix = namespace ? `${namespace}:` : "";
    for (const [key, value] of this.cache.entries()) {
      if (key.startsWith(prefix)) yield [key, value];
    }
  }

  async disconnect() {
    this.cache.close();
  }
}

function seconds(ttl) {
  if (ttl === undefined || ttl === null) return 0;
  if (typeof ttl !== "number" || !(ttl >= 0)) throw new RangeError(`ttl must be 0 or more milliseconds, not ${ttl}`);
  return ttl / 1000;
}

module.exports = { KeyvMappedCache };

"use strict";

const { Cache } = require("./cache");

/**
 * lru-cache's synchronous interface over a shared file: `new LRUCache({ path, max })`.
 *
 * What differs from an in-process lru-cache: every process that opens the file shares
 * its entries and its limits (`max` and `maxSize` are stored in the file, as the entry
 * count limit and the key+value byte limit, and every process evicts down to them);
 * eviction is the file's (approximately least recently used), so exactly which entry
 * goes first may differ; values are what Cache stores (Buffers, strings, numbers, JSON),
 * read back as copies. `ttl` is in milliseconds, as in lru-cache. `fetchMethod` makes
 * fetch(key) a get-or-compute across every process of the host.
 */
class LRUCache {
  #cache;
  #ttl;
  #fetchMethod;

  constructor({ path, max, maxSize, ttl = 0, fetchMethod, cache, ...options } = {}) {
    if (cache === undefined && typeof path !== "string") throw new TypeError("LRUCache needs a path (or a cache)");
    if (!(typeof ttl === "number" && ttl >= 0)) throw new RangeError("ttl must be 0 or more milliseconds");
    if (fetchMethod !== undefined && typeof fetchMethod !== "function") {
      throw new TypeError("fetchMethod must be a function");
    }
    this.#cache = cache ?? new Cache(path, options);
    this.#ttl = ttl;
    this.#fetchMethod = fetchMethod;
    if (max !== undefined || maxSize !== undefined) this.#cache.setLimits({ count: max, bytes: maxSize });
  }

  /** The underlying Cache. */
  get cache() {
    return this.#cache;
  }

  get max() {
    return this.#cache.stats().countLimit;
  }

  get maxSize() {
    return this.#cache.stats().costLimit;
  }

  get ttl() {
    return this.#ttl;
  }

  get size() {
    return this.#cache.size;
  }

  get(key) {
    return this.#cache.get(key);
  }

  /** The same as get: reads do not reorder a shared file's entries by much. */
  peek(key) {
    return this.#cache.get(key);
  }

  /** Stores value (undefined deletes key, as in lru-cache); ttl in milliseconds. */
  set(key, value, { ttl = this.#ttl } = {}) {
    if (value === undefined) {
      this.#cache.delete(key);
      return this;
    }
    this.#cache.set(key, value, ttl / 1000);
    return this;
  }

  has(key) {
    return this.#cache.has(key);
  }

  delete(key) {
    return this.#cache.delete(key);
  }

  clear() {
    this.#cache.clear();
  }

  /** Milliseconds key has left: Infinity when it never expires, 0 when missing. */
  getRemainingTTL(key) {
    const seconds = this.#cache.ttl(key);
    return seconds === undefined ? 0 : seconds * 1000;
  }

  /** Removes expired entries now: true when there were some. */
  purgeStale() {
    return this.#cache.sweep() > 0;
  }

  /** The value of key; when missing, fetchMethod(key) computes it once on the host. */
  async fetch(key, { ttl = this.#ttl } = {}) {
    if (this.#fetchMethod === undefined) return this.get(key);
    return this.#cache.getOrCompute(key, () => this.#fetchMethod(key), { ttl: ttl / 1000 });
  }

  keys() {
    return this.#cache.keys();
  }

  values() {
    return this.#cache.values();
  }

  entries() {
    return this.#cache.entries();
  }

  [Symbol.iterator]() {
    return this.#cache.entries();
  }

  forEach(fn, thisArg) {
    for (const [key, value] of this.#cache.entries()) fn.call(thisArg, value, key, this);
  }
}

module.exports = { LRUCache };

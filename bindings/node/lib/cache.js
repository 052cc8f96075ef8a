"use strict";

const { setTimeout: sleep } = require("node:timers/promises");
const { fileURLToPath } = require("node:url");
const util = require("node:util");
const native = require("./native");

const FLAGS = { readOnly: 0x01, noCreate: 0x02, verifyChecksums: 0x04, useFlock: 0x20 };
const TYPES = new Set(["bytes", "string", "int64", "python"]);
const SIZES = ["capacity", "maxKeySize", "maxValueSize", "averageEntrySize", "maxProcesses", "mode", "partitions"];

function checkOptions(options) {
  if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
  for (const name of SIZES) {
    const n = options[name];
    if (n !== undefined && !(Number.isSafeInteger(n) && n > 0)) {
      throw new RangeError(`${name} must be a positive integer, not ${util.inspect(n)}`);
    }
  }
  for (const name of ["valueType", "createValueType"]) {
    const t = options[name];
    if (t !== undefined && t !== null && !TYPES.has(t)) {
      throw new RangeError(`${name} must be one of bytes, string, int64, python, not ${util.inspect(t)}`);
    }
  }
}

/**
 * A cache shared by every process (and worker thread) that opens the same file.
 *
 * `new Cache(path, { capacity })` opens the cache at `path`, creating it with `capacity`
 * bytes when missing (an existing file keeps its own parameters). Use a path under
 * /dev/shm; open one Cache per file in each process or worker.
 *
 * Values by the file's value type (`valueType`: by default the file's own, and
 * `createValueType`, "python", for a file this call creates):
 *  - "python" (the Python package's tagged values): Buffers, strings, numbers and bigints
 *    read back as stored; anything else JSON.stringify accepts reads back as JSON.parse
 *    gives it.
 *  - "bytes": Buffers (TypedArrays, ArrayBuffers) in, and strings and integers as their
 *    text; Buffers out. An untyped file (mapped-cache create) opens as bytes.
 *  - "string": strings (integers as their text).   - "int64": integers (SharedCache<Int>).
 *
 * Keys are strings or Buffers (UTF-8, 1 to maxKeySize bytes, 250 by default). `ttl`
 * is in seconds (0 or undefined: never expires). Failures throw CacheError, with the
 * C ABI's status name as `code`; wrong argument types throw TypeError.
 */
class Cache {
  #h;
  #path;

  constructor(path, options = {}) {
    checkOptions(options);
    if (typeof path !== "string" && !(path instanceof URL)) throw new TypeError("path must be a string or a URL");
    const file = path instanceof URL ? fileURLToPath(path) : path;
    let flags = 0;
    if (options.readOnly) flags |= FLAGS.readOnly;
    if (options.create === false) flags |= FLAGS.noCreate;
    if (options.verifyChecksums) flags |= FLAGS.verifyChecksums;
    if (options.useFlock) flags |= FLAGS.useFlock;
    this.#h = native.open(
      file,
      options.capacity,
      options.maxKeySize,
      options.maxValueSize,
      options.averageEntrySize,
      options.maxProcesses,
      options.mode,
      flags,
      options.valueType,
      options.createValueType ?? "python",
      options.sharedGroup,
      options.partitions,
    );
    this.#path = file;
  }

  get path() {
    return this.#path;
  }

  /** The value type the handle reads and writes: bytes, string, int64 or python. */
  get valueType() {
    return native.info(this.#h).valueType;
  }

  /** The file's size in bytes (it changes when some process grows the file). */
  get capacity() {
    return native.info(this.#h).capacity;
  }

  get maxKeySize() {
    return native.info(this.#h).maxKeySize;
  }

  get maxValueSize() {
    return native.info(this.#h).maxValueSize;
  }

  get partitionCount() {
    return native.info(this.#h).partitionCount;
  }

  get writable() {
    return native.info(this.#h).writable;
  }

  get closed() {
    return native.closed(this.#h);
  }

  /** The value of key, or undefined when it is missing or expired. */
  get(key) {
    return native.get(this.#h, key);
  }

  /** Whether key has a live entry (not counted as a hit or a miss). */
  has(key) {
    return native.has(this.#h, key);
  }

  /** Stores value under key, expiring after ttl seconds (0 or undefined: never). */
  set(key, value, ttl) {
    return native.set(this.#h, key, value, ttl);
  }

  /** Stores only if key is absent: true when stored (of several processes, one stores). */
  add(key, value, ttl) {
    return native.add(this.#h, key, value, ttl);
  }

  /** Stores only if key is present: true when stored. */
  replace(key, value, ttl) {
    return native.replace(this.#h, key, value, ttl);
  }

  /** Removes key: true when it was present. */
  delete(key) {
    return native.delete(this.#h, key);
  }

  /** Sets key to expire ttl seconds from now (0: never), keeping its value: true when
   * it was present. */
  touch(key, ttl) {
    return native.touch(this.#h, key, ttl);
  }

  /** Seconds until key expires (Infinity: never), or undefined when it is missing. */
  ttl(key) {
    return native.ttl(this.#h, key);
  }

  /**
   * Adds delta (1) to the integer under key, atomically across every process, and
   * returns the new value (a bigint past 2^53). A missing key starts from initial (0);
   * ttl > 0 sets the expiry, 0 keeps an existing counter's. Throws MC_E_NOT_AN_INTEGER
   * when the value is not an integer, RangeError on overflow (both leave it as it was).
   */
  incr(key, delta, ttl, initial) {
    return native.incr(this.#h, key, delta, ttl, initial);
  }

  /** { value, version } (version a bigint, for cas), or undefined when missing. */
  gets(key) {
    return native.gets(this.#h, key);
  }

  /** Stores value only if the entry still has `version` (from gets): true when stored. */
  cas(key, value, version, ttl) {
    return native.cas(this.#h, key, value, version, ttl);
  }

  /** The values of keys, in order (undefined where missing), read in one batch. */
  getMany(keys) {
    return native.getMany(this.#h, keys);
  }

  /** Removes keys under one hold of the write lock: how many were present. */
  deleteMany(keys) {
    return native.deleteMany(this.#h, keys);
  }

  /** Removes every entry, in every process's view. */
  clear() {
    native.clear(this.#h);
  }

  /** Removes expired entries now: how many. */
  sweep() {
    return native.sweep(this.#h);
  }

  /** The file's counters, summed over every process that has used it. */
  stats() {
    return native.stats(this.#h);
  }

  /** Grows the file to capacity bytes (rounded down to whole partitions) while every
   * process keeps using it: the capacity after. */
  grow(capacity) {
    return native.grow(this.#h, capacity);
  }

  /** Whether some process or thread is computing key now (getOrCompute). */
  isComputing(key) {
    return native.isComputing(this.#h, key);
  }

  /** Closes the handle (a second close does nothing); later calls throw MC_E_CLOSED. */
  close() {
    native.close(this.#h);
  }

  /** Entries present (some may have expired and not yet been reclaimed). */
  get size() {
    return this.stats().entries;
  }

  /** Subtracts delta (1) from the counter under key; see incr. */
  decr(key, delta = 1, ttl = 0, initial = 0) {
    if (typeof delta !== "number" && typeof delta !== "bigint") {
      throw new TypeError("delta must be an integer (a number or a bigint)");
    }
    return this.incr(key, -delta, ttl, initial);
  }

  /**
   * Stores every entry of `entries` (a Map, an array of [key, value] pairs or a plain
   * object) under one hold of the write lock, expiring after ttl seconds. A bad entry
   * fails the call before anything is stored.
   */
  setMany(entries, ttl = 0) {
    const pairs =
      entries instanceof Map || Array.isArray(entries)
        ? [...entries]
        : entries !== null && typeof entries === "object"
          ? Object.entries(entries)
          : null;
    if (pairs === null) throw new TypeError("entries must be a Map, an array of [key, value] pairs or an object");
    const keys = new Array(pairs.length);
    const values = new Array(pairs.length);
    pairs.forEach((pair, j) => {
      if (!Array.isArray(pair) || pair.length !== 2) throw new TypeError("each entry must be a [key, value] pair");
      keys[j] = pair[0];
      values[j] = pair[1];
    });
    native.setMany(this.#h, keys, values, ttl);
  }

  /** Sets the file's entry count limit and key+value byte limit (0: none; undefined:
   * as it is), evicting down to them at once. Every process honours them. */
  setLimits({ count, bytes } = {}) {
    native.setLimits(this.#h, count, bytes);
  }

  /** Checks every invariant of the file: the number of problems found (0 when sound).
   * With `repair`, drops what cannot be trusted; throws CacheError MC_E_CORRUPTED when
   * problems remain. */
  verify({ repair = false } = {}) {
    return native.verify(this.#h, Boolean(repair));
  }

  /** The keys present now: a snapshot taken when iteration begins. */
  *keys() {
    yield* native.keys(this.#h);
  }

  /** [key, value] for each key present when iteration begins and still present when
   * its turn comes. */
  *entries() {
    for (const key of native.keys(this.#h)) {
      const value = this.get(key);
      if (value !== undefined) yield [key, value];
    }
  }

  *values() {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator]() {
    return this.entries();
  }

  forEach(fn, thisArg) {
    for (const [key, value] of this.entries()) fn.call(thisArg, value, key, this);
  }

  /**
   * The value of key; when it is missing, `compute()` (which may be async) runs in
   * exactly one process or thread of the host, Node, Python or Swift alike, and what it
   * returns is stored (expiring after `ttl` seconds) and returned; the other callers
   * wait for it. Waiting polls with timers (1 ms doubling to 20 ms), so the event loop
   * runs meanwhile. After `wait` seconds (30) a waiter computes the value itself as
   * well. A computer that dies, even by SIGKILL, releases its claim at once; one whose
   * compute throws releases it (a waiter computes next) and the promise rejects. With
   * `serveStale`, an expired value still present is returned at once while another
   * process recomputes it.
   */
  async getOrCompute(key, compute, { ttl = 0, wait = 30, serveStale = false } = {}) {
    if (typeof compute !== "function") throw new TypeError("compute must be a function");
    if (!(typeof wait === "number" && wait >= 0)) throw new RangeError(`wait must be 0 or more seconds, not ${wait}`);
    const deadline = performance.now() + wait * 1000;
    let pause = 1;
    for (;;) {
      const [status, got] = native.claim(this.#h, key, serveStale);
      if (status === native.status.OK || status === native.status.STALE) return got;
      if (status === native.status.CLAIMED) return this.#computeClaimed(got, compute, ttl);
      const left = deadline - performance.now();
      if (left <= 0) {
        const value = await compute();
        this.set(key, value, ttl);
        return value;
      }
      await sleep(Math.min(pause, left));
      pause = Math.min(pause * 2, 20);
    }
  }

  async #computeClaimed(claim, compute, ttl) {
    let value;
    try {
      value = await compute();
      native.publish(this.#h, claim, value, ttl);
    } catch (error) {
      abandonQuietly(claim);
      throw error;
    }
    return value;
  }

  [util.inspect.custom]() {
    return `Cache <${this.#path}${this.closed ? " (closed)" : ` ${this.valueType}`}>`;
  }
}

/* A claim already released (its publish failed after storing nothing) needs nothing. */
function abandonQuietly(claim) {
  try {
    native.abandon(claim);
  } catch {
    /* already released */
  }
}

module.exports = { Cache, versions: native.versions };

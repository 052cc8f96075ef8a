"use strict";

/**
 * The error every failure of the cache throws (wrong argument types throw TypeError).
 * `code` names the C ABI's status ("MC_E_KEY_TOO_LARGE", "MC_E_CLOSED", ...; see
 * mappedcache.h), `status` is its number, and `errno` that of a failed system call
 * (code "MC_E_SYSTEM").
 */
class CacheError extends Error {
  constructor(message) {
    super(message);
    this.name = "CacheError";
  }
}

module.exports = { CacheError };

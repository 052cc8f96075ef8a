/// <reference types="node" />
// Types of the mappedcache package (lib/index.js): see docs/node.md.

export type Key = string | Buffer;
/** What a file of the "python" type stores and reads back (others: see docs/node.md). */
export type Value = Buffer | string | number | bigint | boolean | null | object;

export interface CacheOptions {
  /** File size in bytes of a new file (default 64 MiB). */
  capacity?: number;
  /** bytes, string, int64 or python: insist on the file's type (default: the file's own). */
  valueType?: "bytes" | "string" | "int64" | "python";
  /** The type of a file this call creates (default "python"). */
  createValueType?: "bytes" | "string" | "int64" | "python";
  readOnly?: boolean;
  /** false: a missing file throws (MC_E_SYSTEM, errno ENOENT) instead of being created. */
  create?: boolean;
  maxKeySize?: number;
  maxValueSize?: number;
  averageEntrySize?: number;
  maxProcesses?: number;
  mode?: number;
  sharedGroup?: string;
  verifyChecksums?: boolean;
  useFlock?: boolean;
  partitions?: number;
}

export interface CacheStats {
  entries: number;
  liveBytes: number;
  capacity: number;
  hits: number;
  misses: number;
  busyMisses: number;
  sets: number;
  evictions: number;
  expirations: number;
  recoveries: number;
  removals: number;
  lockTakeovers: number;
  slotCount: number;
  maxEntries: number;
  countLimit: number;
  costLimit: number;
  partitionCount: number;
  indexSplits: number;
  indexMerges: number;
}

export class CacheError extends Error {
  /** The C ABI's status name, e.g. "MC_E_KEY_TOO_LARGE". */
  code: string;
  status: number;
  errno?: number;
}

export class Cache implements Iterable<[string, Value]> {
  constructor(path: string | URL, options?: CacheOptions);
  readonly path: string;
  readonly valueType: "bytes" | "string" | "int64" | "python";
  readonly capacity: number;
  readonly maxKeySize: number;
  readonly maxValueSize: number;
  readonly partitionCount: number;
  readonly writable: boolean;
  readonly closed: boolean;
  readonly size: number;
  get(key: Key): Value | undefined;
  has(key: Key): boolean;
  /** ttl in seconds (0 or undefined: never expires). */
  set(key: Key, value: Value, ttl?: number): boolean;
  add(key: Key, value: Value, ttl?: number): boolean;
  replace(key: Key, value: Value, ttl?: number): boolean;
  delete(key: Key): boolean;
  touch(key: Key, ttl?: number): boolean;
  /** Seconds left (Infinity: never expires), or undefined when missing. */
  ttl(key: Key): number | undefined;
  incr(key: Key, delta?: number | bigint, ttl?: number, initial?: number | bigint): number | bigint;
  decr(key: Key, delta?: number | bigint, ttl?: number, initial?: number | bigint): number | bigint;
  gets(key: Key): { value: Value; version: bigint } | undefined;
  cas(key: Key, value: Value, version: bigint, ttl?: number): boolean;
  getMany(keys: Key[]): (Value | undefined)[];
  setMany(entries: Map<Key, Value> | [Key, Value][] | Record<string, Value>, ttl?: number): void;
  deleteMany(keys: Key[]): number;
  clear(): void;
  sweep(): number;
  keys(): IterableIterator<string>;
  values(): IterableIterator<Value>;
  entries(): IterableIterator<[string, Value]>;
  [Symbol.iterator](): IterableIterator<[string, Value]>;
  forEach(fn: (value: Value, key: string, cache: Cache) => void, thisArg?: unknown): void;
  stats(): CacheStats;
  grow(capacity: number): number;
  setLimits(limits: { count?: number; bytes?: number }): void;
  verify(options?: { repair?: boolean }): number;
  isComputing(key: Key): boolean;
  getOrCompute<T extends Value>(
    key: Key,
    compute: () => T | Promise<T>,
    options?: { ttl?: number; wait?: number; serveStale?: boolean },
  ): Promise<T>;
  close(): void;
}

export class KeyvMappedCache extends EventEmitter {
  constructor(pathOrCache: string | Cache, options?: CacheOptions);
  readonly cache: Cache;
  opts: Record<string, unknown>;
  namespace?: string;
  get(key: string): Promise<Value | undefined>;
  getMany(keys: string[]): Promise<(Value | undefined)[]>;
  /** ttl in milliseconds. */
  set(key: string, value: Value, ttl?: number): Promise<boolean>;
  setMany(entries: { key: string; value: Value; ttl?: number }[]): Promise<boolean[]>;
  delete(key: string): Promise<boolean>;
  deleteMany(keys: string[]): Promise<boolean>;
  has(key: string): Promise<boolean>;
  clear(): Promise<void>;
  iterator(namespace?: string): AsyncGenerator<[string, Value]>;
  disconnect(): Promise<void>;
}

export interface LRUCacheOptions<V> extends CacheOptions {
  path?: string;
  cache?: Cache;
  max?: number;
  maxSize?: number;
  /** Milliseconds (0: never expires). */
  ttl?: number;
  fetchMethod?: (key: string) => V | Promise<V>;
}

export class LRUCache<V extends Value = Value> implements Iterable<[string, V]> {
  constructor(options: LRUCacheOptions<V>);
  readonly cache: Cache;
  readonly max: number;
  readonly maxSize: number;
  readonly ttl: number;
  readonly size: number;
  get(key: Key): V | undefined;
  peek(key: Key): V | undefined;
  set(key: Key, value: V | undefined, options?: { ttl?: number }): this;
  has(key: Key): boolean;
  delete(key: Key): boolean;
  clear(): void;
  getRemainingTTL(key: Key): number;
  purgeStale(): boolean;
  fetch(key: string, options?: { ttl?: number }): Promise<V | undefined>;
  keys(): IterableIterator<string>;
  values(): IterableIterator<V>;
  entries(): IterableIterator<[string, V]>;
  [Symbol.iterator](): IterableIterator<[string, V]>;
  forEach(fn: (value: V, key: string, cache: this) => void, thisArg?: unknown): void;
}

export function versions(): { abi: number; library: string; fileFormat: number };

import { EventEmitter } from "node:events";

<?php

/**
 * The mappedcache extension's API, as declarations (for IDEs and static analysis; the
 * extension's arginfo, mappedcache_arginfo.h, declares the same types).
 */

namespace MappedCache {

    /**
     * One cache file, shared by every process on the host that opens it (PHP, Swift,
     * Python, the mapped-cache CLI...). Reads take no lock and make no system call.
     * Values: strings as they are, ints as decimal counters, anything else through
     * serialize() (or igbinary); see docs/php.md.
     */
    final class Cache implements \IteratorAggregate
    {
        /**
         * Opens the file, creating it (of $capacity bytes, 0: 64 MiB) when missing.
         * $valueType insists on the file's type (bytes, string, int64, python); null
         * takes the file's own, and creates bytes.
         */
        public function __construct(string $path, int $capacity = 0, ?string $valueType = null,
            bool $readOnly = false) {}

        public function close(): void {}

        /** The value, or $default when the key is missing or expired. */
        public function get(string $key, mixed $default = null): mixed {}

        public function has(string $key): bool {}

        /** Seconds left, INF when it never expires, null when missing. */
        public function ttl(string $key): ?float {}

        /** [value, version] for cas(), or null when missing. */
        public function gets(string $key): ?array {}

        /** The values of the keys present, by key. */
        public function getMany(array $keys): array {}

        /** $ttl in seconds; 0 never expires. */
        public function set(string $key, mixed $value, int|float $ttl = 0): void {}

        /** Stores only if the key is missing (of processes adding at once, one wins). */
        public function add(string $key, mixed $value, int|float $ttl = 0): bool {}

        /** Stores only if the key is present. */
        public function replace(string $key, mixed $value, int|float $ttl = 0): bool {}

        /** Stores only if the entry's version is still $version (from gets()). */
        public function cas(string $key, mixed $value, int $version, int|float $ttl = 0): bool {}

        public function delete(string $key): bool {}

        /** A new expiry for a present key ($ttl seconds from now; 0: never). */
        public function touch(string $key, int|float $ttl): bool {}

        /** Adds $by atomically across processes; a missing key starts from $initial. */
        public function incr(string $key, int $by = 1, int $initial = 0, int|float $ttl = 0): int {}

        public function decr(string $key, int $by = 1, int $initial = 0, int|float $ttl = 0): int {}

        /** Stores every entry under one hold of the write lock (all checked first). */
        public function setMany(array $values, int|float $ttl = 0): void {}

        /** The number of keys that were present. */
        public function deleteMany(array $keys): int {}

        public function clear(): void {}

        /** Removes expired entries now; the number removed. */
        public function sweep(): int {}

        /**
         * The key's value; when missing, $compute($key) runs once across every process
         * (the others wait up to $wait seconds for its value, then compute as well) and
         * its result is stored. An exception from $compute stores nothing and propagates.
         */
        public function getOrCompute(string $key, callable $compute, int|float $ttl = 0, float $wait = 30.0,
            bool $serveStale = false): mixed {}

        /** @return list<string> */
        public function keys(): array {}

        /** Every live entry, by key. */
        public function toArray(): array {}

        public function getIterator(): \Iterator {}

        /** The file's counters (hits, misses, sets, evictions, ...), summed over processes. */
        public function stats(): array {}

        /** path, capacity, max_key_size, max_value_size, writable, value_type, partition_count. */
        public function info(): array {}

        /** The number of problems found (0: sound); $repair drops what cannot be trusted. */
        public function verify(bool $repair = false): int {}

        /** Grows the file while other processes use it; the capacity after. */
        public function grow(int $capacity): int {}
    }

    /** An error of the library; getCode() is the C ABI's status (one of the constants). */
    class CacheException extends \RuntimeException
    {
        public const INVALID_ARGUMENT = -1;
        public const CLOSED = -2;
        // ... one constant per MC_E_* code of mappedcache.h, named without MC_E_.
    }

    /** A key that is empty, longer than the file's key limit or not UTF-8. */
    class InvalidKeyException extends CacheException {}
}

namespace {

    function mappedcache_fetch(string|array $key, &$success = null): mixed {}

    function mappedcache_store(string|array $key, mixed $var = null, int $ttl = 0): bool|array {}

    function mappedcache_add(string|array $key, mixed $var = null, int $ttl = 0): bool|array {}

    function mappedcache_delete(string|array $key): bool|array {}

    function mappedcache_exists(string|array $key): bool|array {}

    function mappedcache_inc(string $key, int $step = 1, &$success = null, int $ttl = 0): int|false {}

    function mappedcache_dec(string $key, int $step = 1, &$success = null, int $ttl = 0): int|false {}

    function mappedcache_cas(string $key, int $old, int $new): bool {}

    function mappedcache_entry(string $key, callable $generator, int $ttl = 0): mixed {}

    function mappedcache_cache_info(bool $limited = false): array|false {}

    function mappedcache_clear_cache(): bool {}

    function mappedcache_enabled(): bool {}
}

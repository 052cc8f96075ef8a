<?php

declare(strict_types=1);

namespace MappedCache;

use DateInterval;
use DateTimeImmutable;
use Psr\SimpleCache\CacheInterface;
use MappedCache\SimpleCache\CacheException;
use MappedCache\SimpleCache\InvalidArgumentException;

/**
 * PSR-16 over a MappedCache file: the entries every process on the host shares.
 *
 * Keys follow PSR-16: a non-empty string without the reserved characters {}()/\@: (an
 * int is accepted where PHP turned an array's string key into one). A key longer than the
 * file's key limit is stored under a shorter one, as Rails' MemCacheStore
 * (ActiveSupport's normalize_key) does: the key's first bytes, ":hash:", and the SHA-256
 * hex digest of the whole key. TTLs are null (the default TTL given here, else never), an
 * int of seconds, or a DateInterval; zero or negative removes the entry.
 *
 * clear() removes every entry of the file, including those other APIs stored.
 */
final class SimpleCache implements CacheInterface
{
    private const RESERVED = '{}()/\\@:';
    private const HASH_SEPARATOR = ':hash:';

    private Cache $cache;
    private int $maxKeySize;

    /**
     * @param Cache|string $cache an open cache, or the path of one to open (created with
     *                            the library's default capacity when missing)
     * @param int|null $defaultTtl seconds for a set() whose TTL is null (null: never expire)
     */
    public function __construct(Cache|string $cache, private ?int $defaultTtl = null)
    {
        $this->cache = is_string($cache) ? new Cache($cache) : $cache;
        $this->maxKeySize = $this->cache->info()['max_key_size'];
        if ($defaultTtl !== null && $defaultTtl <= 0) {
            throw new InvalidArgumentException('defaultTtl must be a positive number of seconds, or null');
        }
    }

    /** The MappedCache\Cache underneath (counters, get-or-compute, statistics). */
    public function cache(): Cache
    {
        return $this->cache;
    }

    public function get($key, $default = null): mixed
    {
        $key = $this->key($key);
        return $this->call(fn () => $this->cache->get($key, $default));
    }

    public function set($key, $value, $ttl = null): bool
    {
        $key = $this->key($key);
        $seconds = $this->seconds($ttl);
        if ($seconds <= 0) {
            $this->call(fn () => $this->cache->delete($key));
            return true;
        }
        $this->call(fn () => $this->cache->set($key, $value, $seconds === PHP_INT_MAX ? 0 : $seconds));
        return true;
    }

    public function delete($key): bool
    {
        $key = $this->key($key);
        $this->call(fn () => $this->cache->delete($key));
        return true;
    }

    public function clear(): bool
    {
        $this->call(fn () => $this->cache->clear());
        return true;
    }

    public function getMultiple($keys, $default = null): iterable
    {
        $result = [];
        foreach ($this->keys($keys) as $given => $key) {
            $result[$given] = $this->call(fn () => $this->cache->get($key, $default));
        }
        return $result;
    }

    public function setMultiple($values, $ttl = null): bool
    {
        if (!is_iterable($values)) {
            throw new InvalidArgumentException('setMultiple() takes an array or a Traversable of keys and values, not '
                . get_debug_type($values));
        }
        $seconds = $this->seconds($ttl);
        $entries = [];
        foreach ($values as $key => $value) {
            $entries[$this->key($key, true)] = $value;
        }
        if ($seconds <= 0) {
            $this->call(fn () => $this->cache->deleteMany(array_map('strval', array_keys($entries))));
            return true;
        }
        $this->call(fn () => $this->cache->setMany($entries, $seconds === PHP_INT_MAX ? 0 : $seconds));
        return true;
    }

    public function deleteMultiple($keys): bool
    {
        $list = array_values($this->keys($keys));
        $this->call(fn () => $this->cache->deleteMany($list));
        return true;
    }

    public function has($key): bool
    {
        $key = $this->key($key);
        return $this->call(fn () => $this->cache->has($key));
    }

    /** The keys of an iterable, checked: [the key as given => the key stored]. */
    private function keys(mixed $keys): array
    {
        if (!is_iterable($keys)) {
            throw new InvalidArgumentException('expected an array or a Traversable of keys, not ' . get_debug_type($keys));
        }
        $checked = [];
        foreach ($keys as $key) {
            $checked[$key] = $this->key($key);
        }
        return $checked;
    }

    /** The key stored for a PSR-16 key (throws InvalidArgumentException for a bad one). */
    private function key(mixed $key, bool $arrayKey = false): string
    {
        if (is_int($key) && $arrayKey) {
            $key = (string) $key;
        }
        if (!is_string($key)) {
            throw new InvalidArgumentException('a cache key must be a string, not ' . get_debug_type($key));
        }
        if ($key === '') {
            throw new InvalidArgumentException('a cache key must not be empty');
        }
        if (strpbrk($key, self::RESERVED) !== false) {
            throw new InvalidArgumentException("the cache key \"$key\" holds one of PSR-16's reserved characters "
                . self::RESERVED);
        }
        if (preg_match('//u', $key) !== 1) {
            throw new InvalidArgumentException('a cache key must be UTF-8');
        }
        if (strlen($key) <= $this->maxKeySize) {
            return $key;
        }
        $digest = hash('sha256', $key);
        $keep = $this->maxKeySize - strlen(self::HASH_SEPARATOR) - strlen($digest);
        // Cut on a character's boundary: the stored key must stay UTF-8.
        $prefix = substr($key, 0, max(0, $keep));
        while ($prefix !== '' && preg_match('//u', $prefix) !== 1) {
            $prefix = substr($prefix, 0, -1);
        }
        return $prefix . self::HASH_SEPARATOR . $digest;
    }

    /** A PSR-16 TTL in seconds: PHP_INT_MAX for never, <= 0 to remove. */
    private function seconds(mixed $ttl): int
    {
        if ($ttl === null) {
            return $this->defaultTtl ?? PHP_INT_MAX;
        }
        if (is_int($ttl)) {
            return $ttl;
        }
        if ($ttl instanceof DateInterval) {
            $now = new DateTimeImmutable();
            return $now->add($ttl)->getTimestamp() - $now->getTimestamp();
        }
        throw new InvalidArgumentException('a TTL is null, an int of seconds or a DateInterval, not '
            . get_debug_type($ttl));
    }

    /** Runs a call of the cache, turning its errors into PSR-16's CacheException. */
    private function call(callable $call): mixed
    {
        try {
            return $call();
        } catch (InvalidKeyException $e) {
            throw new InvalidArgumentException($e->getMessage(), $e->getCode(), $e);
        } catch (\MappedCache\CacheException $e) {
            throw new CacheException($e->getMessage(), $e->getCode(), $e);
        }
    }
}

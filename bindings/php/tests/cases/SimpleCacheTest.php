<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use DateInterval;
use MappedCache\Cache;
use MappedCache\SimpleCache;
use Psr\SimpleCache\CacheException;
use Psr\SimpleCache\InvalidArgumentException;

/** MappedCache\SimpleCache's own rules, beside the PSR-16 integration suite (IntegrationTest). */
final class SimpleCacheTest extends CacheTestCase
{
    private SimpleCache $cache;

    protected function setUp(): void
    {
        parent::setUp();
        $this->cache = new SimpleCache(new Cache($this->path, 8 << 20));
    }

    public function testLongKeysAreHashedAsRailsMemCacheStoreDoes(): void
    {
        $key = str_repeat('k', 300);
        $this->assertTrue($this->cache->set($key, 'long'));
        $this->assertSame('long', $this->cache->get($key));
        // ActiveSupport::Cache::MemCacheStore#normalize_key: the key cut to 250 - 6 - 64
        // bytes, ":hash:", the SHA-256 hex digest of the whole key.
        $stored = str_repeat('k', 180) . ':hash:' . hash('sha256', $key);
        $this->assertSame([$stored], $this->cache->cache()->keys());
        $this->assertSame(250, strlen($stored));
        $this->assertTrue($this->cache->has($key));
        $this->assertTrue($this->cache->delete($key));
        $this->assertSame([], $this->cache->cache()->keys());
    }

    public function testALongKeyIsCutOnACharactersBoundary(): void
    {
        $key = 'a' . str_repeat('é', 150);
        $this->cache->set($key, 1);
        [$stored] = $this->cache->cache()->keys();
        $this->assertSame(1, preg_match('//u', $stored));
        $this->assertSame('a' . str_repeat('é', 89) . ':hash:' . hash('sha256', $key), $stored);
        $this->assertSame(1, $this->cache->get($key));
    }

    public function testKeysUpToTheLimitAreStoredAsGiven(): void
    {
        $key = str_repeat('x', 250);
        $this->cache->set($key, 'v');
        $this->assertSame([$key], $this->cache->cache()->keys());
    }

    public function testReservedCharactersAndBadKeysThrow(): void
    {
        foreach (['{', '}', '(', ')', '/', '\\', '@', ':'] as $char) {
            $this->assertInvalid(fn () => $this->cache->set("a{$char}b", 1));
            $this->assertInvalid(fn () => $this->cache->get("a{$char}b"));
            $this->assertInvalid(fn () => $this->cache->setMultiple(["a{$char}b" => 1]));
        }
        $this->assertInvalid(fn () => $this->cache->get(''));
        $this->assertInvalid(fn () => $this->cache->get("\xff"));
        $this->assertInvalid(fn () => $this->cache->get(5));
        $this->assertInvalid(fn () => $this->cache->getMultiple('not iterable'));
        $this->assertSame([], $this->cache->cache()->keys(), 'nothing was stored');
    }

    public function testTtls(): void
    {
        $this->cache->set('int', 'v', 100);
        $this->assertEqualsWithDelta(100.0, $this->cache->cache()->ttl('int'), 2.0);
        $this->cache->set('interval', 'v', new DateInterval('PT1H'));
        $this->assertEqualsWithDelta(3600.0, $this->cache->cache()->ttl('interval'), 2.0);
        $this->cache->set('never', 'v', null);
        $this->assertSame(INF, $this->cache->cache()->ttl('never'));
        foreach ([0, -1, new DateInterval('PT0S')] as $ttl) {
            $this->cache->set('gone', 'v');
            $this->assertTrue($this->cache->set('gone', 'w', $ttl));
            $this->assertFalse($this->cache->has('gone'), 'a zero or negative TTL removes the entry');
        }
        $this->cache->setMultiple(['a' => 1, 'b' => 2]);
        $this->cache->setMultiple(['a' => 3, 'b' => 4], -1);
        $this->assertSame(['a' => null, 'b' => null], $this->cache->getMultiple(['a', 'b']));
        foreach (['1', 1.5, true] as $ttl) {
            $this->assertInvalid(fn () => $this->cache->set('k', 'v', $ttl));
        }
        $withDefault = new SimpleCache($this->cache->cache(), 30);
        $withDefault->set('default', 'v');
        $this->assertEqualsWithDelta(30.0, $this->cache->cache()->ttl('default'), 2.0);
    }

    public function testGeneratorsAndIterables(): void
    {
        $entries = (function () {
            yield 'a' => 1;
            yield 'b' => [2];
        })();
        $this->assertTrue($this->cache->setMultiple($entries));
        $keys = (function () {
            yield 'a';
            yield 'b';
            yield 'c';
        })();
        $this->assertSame(['a' => 1, 'b' => [2], 'c' => 'dflt'], $this->cache->getMultiple($keys, 'dflt'));
        $this->assertTrue($this->cache->deleteMultiple(new \ArrayIterator(['a', 'b'])));
        $this->assertSame([], $this->cache->cache()->keys());
    }

    public function testAValueTooLargeIsACacheException(): void
    {
        $this->expectException(CacheException::class);
        $this->cache->set('big', str_repeat('x', 16 << 20));
    }

    public function testOpensAPath(): void
    {
        $cache = new SimpleCache($this->path);
        $cache->set('k', 'v');
        $this->assertSame('v', $this->cache->get('k'));
    }

    private function assertInvalid(callable $call): void
    {
        try {
            $call();
        } catch (InvalidArgumentException $e) {
            $this->assertNotSame('', $e->getMessage());
            return;
        }
        $this->fail('expected Psr\SimpleCache\InvalidArgumentException');
    }
}

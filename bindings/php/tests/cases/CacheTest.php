<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use MappedCache\Cache;
use MappedCache\CacheException;
use MappedCache\InvalidKeyException;

/** MappedCache\Cache: every method, the values it round-trips, and every bad input. */
final class CacheTest extends CacheTestCase
{
    private Cache $cache;

    protected function setUp(): void
    {
        parent::setUp();
        $this->cache = new Cache($this->path, 8 << 20);
    }

    protected function tearDown(): void
    {
        $this->cache->close();
        parent::tearDown();
    }

    public static function values(): array
    {
        return [
            'string' => ['hello'],
            'empty string' => [''],
            'binary' => [implode('', array_map('chr', range(0, 255)))],
            'leading NUL' => ["\0Zi:1;"],
            'numeric string' => ['42'],
            'negative numeric string' => ['-7'],
            'zero-padded string' => ['007'],
            'int' => [42],
            'zero' => [0],
            'negative int' => [-42],
            'largest int' => [PHP_INT_MAX],
            'smallest int' => [PHP_INT_MIN],
            'float' => [1.5],
            'true' => [true],
            'false' => [false],
            'null' => [null],
            'array' => [['a' => 1, 2 => ['nested' => [null, 1.25]]]],
            'object' => [(object) ['x' => 'y']],
            'UTF-8' => ['héllo wörld 🎉'],
        ];
    }

    /** @dataProvider values */
    public function testValuesReadBackIdentical(mixed $value): void
    {
        $this->cache->set('key', $value);
        $this->assertTrue($this->cache->has('key'));
        if (is_object($value)) {
            $this->assertEquals($value, $this->cache->get('key'));
        } else {
            $this->assertSame($value, $this->cache->get('key'));
        }
        $this->assertSame(['key'], $this->cache->keys());
    }

    public function testStringsAndIntsAreStoredAsOtherLanguagesReadThem(): void
    {
        $cli = Processes::swiftBinary('mapped-cache') ?? $this->unavailable('mapped-cache is not built');
        $this->cache->set('s', 'hello');
        $this->cache->set('n', 42);
        $this->cache->set('numeric', '42');
        $this->cache->set('list', [1]);
        $stored = function (string $key) use ($cli): string {
            [$code, $out, $err] = Processes::run([$cli, 'get', $this->path, '--', $key]);
            $this->assertSame(0, $code, $err);
            return $out;
        };
        // A string as it is, an int in ASCII decimal (a counter), the rest tagged.
        $this->assertSame('hello', $stored('s'));
        $this->assertSame('42', $stored('n'));
        $this->assertSame("\0S42", $stored('numeric'));
        $this->assertStringStartsWith("\0", $stored('list'));
    }

    public function testEitherSerializerReadsWhatTheOtherWrote(): void
    {
        if (!extension_loaded('igbinary')) {
            $this->unavailable('the igbinary extension is not loaded (php-igbinary)');
        }
        $value = ['list' => [1, 2.5, null], 'object' => (object) ['a' => 'b']];
        try {
            ini_set('mappedcache.serializer', 'php');
            $this->cache->set('by php', $value);
            ini_set('mappedcache.serializer', 'igbinary');
            $this->cache->set('by igbinary', $value);
            $this->assertEquals($value, $this->cache->get('by php'));
            ini_set('mappedcache.serializer', 'php');
            $this->assertEquals($value, $this->cache->get('by igbinary'));
        } finally {
            ini_restore('mappedcache.serializer');
        }
        $cli = Processes::swiftBinary('mapped-cache') ?? $this->unavailable('mapped-cache is not built');
        $stored = fn (string $key) => Processes::run([$cli, 'get', $this->path, '--', $key])[1];
        $this->assertStringStartsWith("\0Za:2:{", $stored('by php'));
        $this->assertStringStartsWith("\0G", $stored('by igbinary'));
        $this->assertFalse(@ini_set('mappedcache.serializer', 'json'), 'an unknown serializer is refused');
    }

    public function testTaggedGarbageFromElsewhereIsADecodingError(): void
    {
        $cli = Processes::swiftBinary('mapped-cache') ?? $this->unavailable('mapped-cache is not built');
        $this->cache->set('kept', 'value');
        $garbage = ['php' => "\0Zgarbage", 'truncated' => "\0Za:1:{i:0;O:8:\"stdClass\":0:{}",
            'igbinary header' => "\0Ggarbage", 'empty tag' => "\0Z"];
        foreach ($garbage as $key => $bytes) {
            [$code, , $err] = Processes::run([$cli, 'set', $this->path, $key, '-'], $bytes);
            $this->assertSame(0, $code, $err);
            try {
                $this->cache->get($key);
                $this->fail("$key decodes");
            } catch (CacheException $e) {
                $this->assertSame(CacheException::DECODING_FAILED, $e->getCode(), $e->getMessage());
            }
        }
        $this->assertSame('value', $this->cache->get('kept'));
        $this->assertCount(5, $this->cache->keys());
        $this->expectException(CacheException::class);
        $this->cache->toArray();
    }

    public function testMissingKeysGiveTheDefault(): void
    {
        $this->assertNull($this->cache->get('missing'));
        $this->assertSame('fallback', $this->cache->get('missing', 'fallback'));
        $this->assertFalse($this->cache->has('missing'));
        $this->assertNull($this->cache->ttl('missing'));
        $this->assertNull($this->cache->gets('missing'));
        $this->cache->set('null', null);
        $this->assertNull($this->cache->get('null', 'fallback'), 'a stored null is a hit');
    }

    public function testAddReplaceDeleteTouchAndTtl(): void
    {
        $this->assertTrue($this->cache->add('k', 'first'));
        $this->assertFalse($this->cache->add('k', 'second'));
        $this->assertSame('first', $this->cache->get('k'));
        $this->assertFalse($this->cache->replace('absent', 'x'));
        $this->assertFalse($this->cache->has('absent'));
        $this->assertTrue($this->cache->replace('k', 'third'));
        $this->assertSame('third', $this->cache->get('k'));
        $this->assertSame(INF, $this->cache->ttl('k'));
        $this->assertTrue($this->cache->touch('k', 100));
        $this->assertEqualsWithDelta(100.0, $this->cache->ttl('k'), 2.0);
        $this->assertFalse($this->cache->touch('absent', 100));
        $this->cache->set('short', 'v', 0.2);
        $this->assertSame('v', $this->cache->get('short'));
        usleep(300_000);
        $this->assertNull($this->cache->get('short'), 'expired');
        $this->assertTrue($this->cache->delete('k'));
        $this->assertFalse($this->cache->delete('k'));
    }

    public function testCountersAreAtomicIntegers(): void
    {
        $this->assertSame(1, $this->cache->incr('hits'));
        $this->assertSame(11, $this->cache->incr('hits', 10));
        $this->assertSame(8, $this->cache->decr('hits', 3));
        $this->assertSame(8, $this->cache->get('hits'));
        $this->assertSame(105, $this->cache->incr('fresh', 5, 100));
        $this->assertSame(-1, $this->cache->decr('down'));
        $this->cache->set('stored', 41);
        $this->assertSame(42, $this->cache->incr('stored'));
        $this->cache->incr('expiring', 1, 0, 100);
        $this->assertEqualsWithDelta(100.0, $this->cache->ttl('expiring'), 2.0);
        $this->cache->set('text', 'abc');
        $this->assertThrowsCode(CacheException::NOT_AN_INTEGER, fn () => $this->cache->incr('text'));
        $this->assertSame('abc', $this->cache->get('text'), 'a failed incr leaves the value');
        $this->cache->set('max', PHP_INT_MAX);
        $this->assertThrowsCode(CacheException::INVALID_ARGUMENT, fn () => $this->cache->incr('max'));
        $this->assertSame(PHP_INT_MAX, $this->cache->get('max'), 'an overflow leaves the counter');
        $this->expectException(\ValueError::class);
        $this->cache->decr('max', PHP_INT_MIN);
    }

    public function testCompareAndSwap(): void
    {
        $this->cache->set('config', ['v' => 1]);
        [$value, $version] = $this->cache->gets('config');
        $this->assertSame(['v' => 1], $value);
        $this->assertTrue($this->cache->cas('config', ['v' => 2], $version));
        $this->assertFalse($this->cache->cas('config', ['v' => 3], $version), 'the version moved on');
        $this->assertSame(['v' => 2], $this->cache->get('config'));
        $big = str_repeat('x', 20000);
        $this->cache->set('big', $big);
        $this->assertSame($big, $this->cache->gets('big')[0]);
    }

    public function testManyAtOnce(): void
    {
        $this->cache->setMany(['a' => 1, 'b' => 'two', 7 => [3]], 100);
        $this->assertSame(['a' => 1, 'b' => 'two', 7 => [3]], $this->cache->getMany(['a', 'b', 'missing', 7]));
        $this->assertEqualsWithDelta(100.0, $this->cache->ttl('7'), 2.0);
        $this->assertSame(2, $this->cache->deleteMany(['a', '7', 'missing']));
        $this->assertSame(['b'], $this->cache->keys());
        $this->cache->setMany([]);
        $this->assertSame(0, $this->cache->deleteMany([]));
    }

    public function testABadEntryStoresNothingOfTheBatch(): void
    {
        $this->expectException(InvalidKeyException::class);
        try {
            $this->cache->setMany(['good' => 1, '' => 2]);
        } finally {
            $this->assertFalse($this->cache->has('good'));
        }
    }

    public function testLargeValues(): void
    {
        $value = random_bytes(300_000);
        $this->cache->set('large', $value);
        $this->assertSame($value, $this->cache->get('large'));
        $this->assertSame(['large' => $value], $this->cache->getMany(['large']));
        $this->assertSame(['large' => $value], $this->cache->toArray());
    }

    public function testGetOrComputeComputesOnceAndPublishes(): void
    {
        $calls = 0;
        $compute = function (string $key) use (&$calls): array {
            $calls++;
            return ['computed for' => $key];
        };
        $this->assertSame(['computed for' => 'report'], $this->cache->getOrCompute('report', $compute, 60));
        $this->assertSame(['computed for' => 'report'], $this->cache->getOrCompute('report', $compute, 60));
        $this->assertSame(1, $calls);
        $this->assertEqualsWithDelta(60.0, $this->cache->ttl('report'), 2.0);
    }

    public function testAnExceptionFromTheComputeReleasesTheClaim(): void
    {
        try {
            $this->cache->getOrCompute('k', function (): never {
                throw new \DomainException('compute failed');
            });
            $this->fail('the exception propagates');
        } catch (\DomainException $e) {
            $this->assertSame('compute failed', $e->getMessage());
        }
        $this->assertFalse($this->cache->has('k'));
        $this->assertSame('second', $this->cache->getOrCompute('k', fn () => 'second', 0, 0.5));
    }

    public function testIterationStatsInfoAndGrow(): void
    {
        $this->cache->setMany(['a' => 1, 'b' => 'x', 'c' => [true]]);
        $seen = [];
        foreach ($this->cache as $key => $value) {
            $seen[$key] = $value;
        }
        ksort($seen);
        $this->assertSame(['a' => 1, 'b' => 'x', 'c' => [true]], $seen);
        $keys = $this->cache->keys();
        sort($keys);
        $this->assertSame(['a', 'b', 'c'], $keys);
        $this->cache->get('a');
        $this->cache->get('zz');
        $stats = $this->cache->stats();
        $this->assertSame(3, $stats['entries']);
        $this->assertGreaterThanOrEqual(1, $stats['hits']);
        $this->assertGreaterThanOrEqual(1, $stats['misses']);
        $info = $this->cache->info();
        $this->assertSame(['path' => $this->path, 'capacity' => 8 << 20, 'max_key_size' => 250], array_slice($info, 0, 3));
        $this->assertSame('bytes', $info['value_type']);
        $this->assertTrue($info['writable']);
        $this->assertGreaterThan(8 << 20, $this->cache->grow(16 << 20));
        $this->assertSame(1, $this->cache->get('a'), 'nothing lost in growing');
        $this->assertThrowsCode(CacheException::INVALID_ARGUMENT, fn () => $this->cache->grow(1 << 20));
        $this->assertSame(0, $this->cache->sweep());
        $this->cache->clear();
        $this->assertSame([], $this->cache->keys());
        $this->assertSame(0, $this->cache->verify());
    }

    public function testBadKeysThrowAndLoseNothing(): void
    {
        $this->cache->set('kept', 'value');
        foreach (['', str_repeat('k', 251), "\xff\xfe"] as $key) {
            foreach ([
                fn () => $this->cache->get($key), fn () => $this->cache->set($key, 1), fn () => $this->cache->has($key),
                fn () => $this->cache->delete($key), fn () => $this->cache->incr($key), fn () => $this->cache->ttl($key),
                fn () => $this->cache->getOrCompute($key, fn () => 1),
            ] as $call) {
                try {
                    $call();
                    $this->fail('a bad key is refused: ' . bin2hex($key));
                } catch (InvalidKeyException $e) {
                    $this->assertNotSame('', $e->getMessage());
                    $this->assertLessThan(0, $e->getCode());
                }
            }
        }
        $this->assertSame('value', $this->cache->get('kept'));
        $this->assertSame(['kept'], $this->cache->keys());
        foreach ([fn () => $this->cache->getMany(['kept', []]), fn () => $this->cache->deleteMany(['kept', 1.5])] as $call) {
            try {
                $call();
                $this->fail('a key that is not a string is refused');
            } catch (\TypeError $e) {
                $this->assertStringContainsString('must be a string', $e->getMessage());
            }
        }
        $this->assertSame('value', $this->cache->get('kept'));
    }

    public function testBadValuesAndTtlsThrow(): void
    {
        $this->assertThrowsCode(CacheException::VALUE_TOO_LARGE, fn () => $this->cache->set('k', str_repeat('x', 16 << 20)));
        foreach ([-1, -0.5, NAN] as $ttl) {
            try {
                $this->cache->set('k', 'v', $ttl);
                $this->fail("ttl $ttl is refused");
            } catch (\ValueError $e) {
                $this->assertStringContainsString('ttl', $e->getMessage());
            }
        }
        try {
            $this->cache->set('k', fn () => 1);
            $this->fail('a closure is not serializable');
        } catch (\Exception $e) {
            $this->assertStringContainsString('Closure', $e->getMessage());
        }
        $this->assertFalse($this->cache->has('k'));
    }

    public function testAClosedCacheThrowsAndBadFilesAreRefused(): void
    {
        $other = new Cache($this->path);
        $other->close();
        $other->close();
        $this->assertThrowsCode(CacheException::CLOSED, fn () => $other->get('k'));
        $notACache = $this->removeLater(self::tempPath('notacache') . '.txt');
        file_put_contents($notACache, str_repeat('not a cache ', 100));
        $this->assertThrowsCode(CacheException::NOT_A_CACHE_FILE, fn () => new Cache($notACache));
        $this->assertSame(str_repeat('not a cache ', 100), file_get_contents($notACache), 'left untouched');
        $this->assertThrowsCode(CacheException::TYPE_MISMATCH, fn () => new Cache($this->path, valueType: 'int64'));
        $this->expectException(\ValueError::class);
        new Cache($this->path, -1);
    }

    public function testReadOnlyHandles(): void
    {
        $this->cache->set('k', 'v');
        $reader = new Cache($this->path, readOnly: true);
        $this->assertSame('v', $reader->get('k'));
        $this->assertFalse($reader->info()['writable']);
        $this->assertThrowsCode(CacheException::READ_ONLY, fn () => $reader->set('k', 'other'));
        $this->assertSame('v', $this->cache->get('k'));
        $reader->close();
    }

    public function testOtherValueTypes(): void
    {
        $ints = new Cache($this->removeLater(self::tempPath('int64')), 4 << 20, 'int64');
        $ints->set('n', -5);
        $this->assertSame(-5, $ints->get('n'));
        $this->assertSame(-4, $ints->incr('n'));
        $this->assertThrowsCode(CacheException::INVALID_VALUE, fn () => $ints->set('s', 'text'));
        $this->assertSame(0, $ints->verify());
        $strings = new Cache($this->removeLater(self::tempPath('string')), 4 << 20, 'string');
        $strings->set('s', 'héllo');
        $this->assertSame('héllo', $strings->get('s'));
        $this->assertThrowsCode(CacheException::INVALID_VALUE, fn () => $strings->set('b', "\xff"));
        $python = new Cache($this->removeLater(self::tempPath('python')), 4 << 20, 'python');
        foreach (['s' => 'héllo', 'b' => "\xff\x00", 'i' => -12, 'f' => 2.5] as $k => $v) {
            $python->set($k, $v);
            $this->assertSame($v, $python->get($k));
        }
        $this->assertSame(-11, $python->incr('i'));
        $this->assertThrowsCode(CacheException::INVALID_VALUE, fn () => $python->set('a', ['x' => [1]]));
        $this->assertSame(0, $python->verify());
    }

    private function assertThrowsCode(int $code, callable $call): void
    {
        try {
            $call();
        } catch (CacheException $e) {
            $this->assertSame($code, $e->getCode(), $e->getMessage());
            $this->assertNotSame('', $e->getMessage());
            return;
        }
        $this->fail("expected a CacheException with code $code");
    }
}

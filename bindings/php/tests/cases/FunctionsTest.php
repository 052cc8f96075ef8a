<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use MappedCache\Cache;

/** APCu's functions as mappedcache_*, over the file that mappedcache.path names. */
final class FunctionsTest extends CacheTestCase
{
    protected function setUp(): void
    {
        parent::setUp();
        ini_set('mappedcache.path', $this->path);
        ini_set('mappedcache.capacity', '8M');
    }

    protected function tearDown(): void
    {
        ini_restore('mappedcache.path');
        ini_restore('mappedcache.capacity');
        parent::tearDown();
    }

    public function testFetchAndStoreAsApcuDoes(): void
    {
        $this->assertTrue(mappedcache_enabled());
        $this->assertFalse(mappedcache_fetch('k', $success));
        $this->assertFalse($success);
        $this->assertTrue(mappedcache_store('k', ['a' => 1], 60));
        $this->assertSame(['a' => 1], mappedcache_fetch('k', $success));
        $this->assertTrue($success);
        mappedcache_store('false', false);
        $this->assertFalse(mappedcache_fetch('false', $success));
        $this->assertTrue($success, 'a stored false is told from a miss by $success');
        $this->assertSame([], mappedcache_store(['x' => 1, 'y' => '2', 3 => 'three']));
        $this->assertSame(['x' => 1, 'y' => '2', 3 => 'three'], mappedcache_fetch(['x', 'y', 'missing', 3]));
        $this->assertSame(8 << 20, (new Cache($this->path))->info()['capacity'], 'created with mappedcache.capacity');
    }

    public function testAddDeleteExists(): void
    {
        $this->assertTrue(mappedcache_add('k', 1));
        $this->assertFalse(mappedcache_add('k', 2));
        $this->assertSame(1, mappedcache_fetch('k'));
        $this->assertSame(['k' => -1], mappedcache_add(['k' => 3, 'new' => 4]));
        $this->assertSame(4, mappedcache_fetch('new'));
        $this->assertTrue(mappedcache_exists('k'));
        $this->assertSame(['k' => true, 'new' => true], mappedcache_exists(['k', 'nope', 'new']));
        $this->assertTrue(mappedcache_delete('k'));
        $this->assertFalse(mappedcache_delete('k'));
        $this->assertSame(['nope'], mappedcache_delete(['new', 'nope']));
        $this->assertFalse(mappedcache_exists('new'));
    }

    public function testIncDecAndCas(): void
    {
        $this->assertSame(1, mappedcache_inc('n'));
        $this->assertSame(6, mappedcache_inc('n', 5, $success));
        $this->assertTrue($success);
        $this->assertSame(4, mappedcache_dec('n', 2));
        $this->assertSame(4, mappedcache_fetch('n'));
        $this->assertTrue(mappedcache_cas('n', 4, 10));
        $this->assertFalse(mappedcache_cas('n', 4, 11));
        $this->assertSame(10, mappedcache_fetch('n'));
        $this->assertFalse(mappedcache_cas('missing', 0, 1));
        mappedcache_store('text', 'abc');
        $this->assertFalse(mappedcache_cas('text', 0, 1));
        $this->assertFalse(@mappedcache_inc('text', 1, $success));
        $this->assertFalse($success);
        $this->assertSame('abc', mappedcache_fetch('text'));
    }

    public function testEntryComputesOnce(): void
    {
        $calls = 0;
        $make = function (string $key) use (&$calls): string {
            $calls++;
            return "value of $key";
        };
        $this->assertSame('value of k', mappedcache_entry('k', $make, 60));
        $this->assertSame('value of k', mappedcache_entry('k', $make, 60));
        $this->assertSame(1, $calls);
    }

    public function testCacheInfo(): void
    {
        mappedcache_store('a', 'xyz');
        mappedcache_fetch('a');
        mappedcache_fetch('missing');
        $info = mappedcache_cache_info();
        $this->assertSame(1, $info['num_entries']);
        $this->assertGreaterThanOrEqual(1, $info['num_hits']);
        $this->assertGreaterThanOrEqual(1, $info['num_misses']);
        $this->assertSame($this->path, $info['file']);
        $this->assertSame([['info' => 'a', 'ttl' => 0, 'mem_size' => 4]], $info['cache_list']);
        $this->assertArrayNotHasKey('cache_list', mappedcache_cache_info(true));
        $this->assertTrue(mappedcache_clear_cache());
        $this->assertSame(0, mappedcache_cache_info(true)['num_entries']);
    }

    public function testFailuresWarnAndReturnFalse(): void
    {
        $this->assertWarns('a key must not be empty', fn () => mappedcache_store('', 1));
        $this->assertWarns('exceeds', fn () => mappedcache_fetch(str_repeat('k', 300)));
        $this->assertWarns('exceeds', fn () => mappedcache_store('big', str_repeat('x', 16 << 20)));
        $this->assertFalse(mappedcache_exists('big'));
        ini_set('mappedcache.path', '');
        $this->assertFalse(mappedcache_enabled());
        $this->assertWarns('mappedcache.path', fn () => mappedcache_fetch('k'));
        ini_set('mappedcache.path', '/nonexistent-dir/x.mcache');
        $this->assertWarns('cannot open', fn () => mappedcache_store('k', 1));
        ini_set('mappedcache.path', $this->path);
        mappedcache_store('kept', 1);
        foreach ([fn () => mappedcache_fetch(['kept', new \stdClass()]), fn () => mappedcache_delete(['kept', []]),
            fn () => mappedcache_exists(['kept', null])] as $call) {
            try {
                $call();
                $this->fail('a key that is not a string is refused');
            } catch (\TypeError $e) {
                $this->assertStringContainsString('must be a string', $e->getMessage());
            }
        }
        $this->assertSame(1, mappedcache_fetch('kept'));
        $this->expectException(\ValueError::class);
        mappedcache_store('k', 1, -5);
    }

    public function testChangingThePathOpensTheOtherFile(): void
    {
        mappedcache_store('k', 'first file');
        $other = $this->removeLater(self::tempPath('other'));
        ini_set('mappedcache.path', $other);
        $this->assertFalse(mappedcache_fetch('k'));
        mappedcache_store('k', 'second file');
        ini_set('mappedcache.path', $this->path);
        $this->assertSame('first file', mappedcache_fetch('k'));
        $this->assertSame('second file', (new Cache($other))->get('k'));
    }

    private function assertWarns(string $fragment, callable $call): void
    {
        $warnings = [];
        set_error_handler(function (int $level, string $message) use (&$warnings): bool {
            $warnings[] = $message;
            return true;
        }, E_WARNING);
        try {
            $result = $call();
        } finally {
            restore_error_handler();
        }
        $this->assertFalse($result);
        $this->assertCount(1, $warnings);
        $this->assertStringContainsString($fragment, $warnings[0]);
    }
}

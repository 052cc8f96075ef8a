<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use MappedCache\Cache;
use PHPUnit\Framework\TestCase;

/**
 * A fresh cache file per test (under /dev/shm); it and every other cache file the test
 * names for removal must verify clean when the test ends, and are removed afterwards. With MAPPEDCACHE_REQUIRE_ALL=1 (CI) a test that would skip
 * for want of a program fails instead.
 */
abstract class CacheTestCase extends TestCase
{
    protected string $path;
    /** @var list<string> files removed after the test */
    private array $files = [];

    protected function setUp(): void
    {
        $this->path = self::tempPath($this->getName(false));
        $this->files[] = $this->path;
    }

    protected function tearDown(): void
    {
        foreach ($this->files as $file) {
            if (str_ends_with($file, '.mcache') && is_file($file)) {
                $cache = new Cache($file);
                $this->assertSame(0, $cache->verify(), "$file does not verify clean");
                $cache->close();
            }
        }
        foreach ($this->files as $file) {
            if (is_file($file)) {
                unlink($file);
            }
        }
    }

    /** Removes $file after the test. */
    protected function removeLater(string $file): string
    {
        $this->files[] = $file;
        return $file;
    }

    public static function tempPath(string $tag): string
    {
        $tag = substr(preg_replace('/[^A-Za-z0-9_]/', '_', $tag), 0, 40);
        return sprintf('/dev/shm/mcphptest-%s-%d-%s.mcache', $tag, getmypid(), bin2hex(random_bytes(4)));
    }

    /** Skips, saying why, or fails when every test must run (MAPPEDCACHE_REQUIRE_ALL=1). */
    protected function unavailable(string $reason): never
    {
        if (getenv('MAPPEDCACHE_REQUIRE_ALL') === '1') {
            $this->fail("required but unavailable: $reason");
        }
        $this->markTestSkipped($reason);
    }
}

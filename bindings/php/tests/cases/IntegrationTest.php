<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use Cache\IntegrationTests\SimpleCacheTest;
use MappedCache\Cache;
use MappedCache\SimpleCache;

if (!class_exists(SimpleCacheTest::class)) {
    fwrite(STDERR, "php-cache/integration-tests is missing: install Debian's php-cache-integration-tests\n");
    exit(1);
}

/**
 * The PSR-16 integration suite (php-cache/integration-tests' SimpleCacheTest, Debian's
 * php-cache-integration-tests) against MappedCache\SimpleCache, none of its tests skipped.
 */
final class IntegrationTest extends SimpleCacheTest
{
    private string $path;

    public function createSimpleCache()
    {
        $this->path = CacheTestCase::tempPath('psr16');
        return new SimpleCache(new Cache($this->path, 8 << 20));
    }

    protected function tearDown(): void
    {
        parent::tearDown();
        $this->assertSame(0, (new Cache($this->path))->verify());
        unlink($this->path);
    }
}

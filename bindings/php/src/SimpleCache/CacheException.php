<?php

declare(strict_types=1);

namespace MappedCache\SimpleCache;

/** An error of the cache file (the MappedCache\CacheException is the previous one). */
final class CacheException extends \RuntimeException implements \Psr\SimpleCache\CacheException
{
}

<?php

declare(strict_types=1);

namespace MappedCache\SimpleCache;

/** A key or TTL that PSR-16 does not allow (or the file cannot hold). */
final class InvalidArgumentException extends \InvalidArgumentException implements
    \Psr\SimpleCache\InvalidArgumentException
{
}

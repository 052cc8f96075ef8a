<?php

declare(strict_types=1);

/*
 * The tests live in tests/cases and tests/support, not in tests/ itself: `phpize --clean`
 * deletes tests/*.php (run-tests.php's leftovers).
 *
 * The tests' bootstrap: the package's autoloader, PHPUnit's, the PSR-16 integration suite
 * (Debian's php-cache-integration-tests) and the helpers of tests/support.
 */

if (!extension_loaded('mappedcache')) {
    fwrite(STDERR, "the mappedcache extension is not loaded: run php -d extension=modules/mappedcache.so "
        . "/usr/bin/phpunit from bindings/php\n");
    exit(1);
}

require __DIR__ . '/../../autoload.php';
require __DIR__ . '/CacheTestCase.php';
require __DIR__ . '/Processes.php';

foreach (explode(PATH_SEPARATOR, get_include_path()) as $dir) {
    if (is_file("$dir/Cache/IntegrationTests/autoload.php")) {
        require_once "$dir/Cache/IntegrationTests/autoload.php";
        break;
    }
}

<?php

/*
 * Loads MappedCache\SimpleCache (PSR-16) and its exceptions. The PSR interfaces come from
 * Composer's autoloader when the application has one, else from Debian's
 * php-psr-simple-cache (/usr/share/php/Psr/SimpleCache).
 */

declare(strict_types=1);

if (!interface_exists(\Psr\SimpleCache\CacheInterface::class)) {
    foreach (explode(PATH_SEPARATOR, get_include_path()) as $dir) {
        if (is_file("$dir/Psr/SimpleCache/autoload.php")) {
            require_once "$dir/Psr/SimpleCache/autoload.php";
            break;
        }
    }
}

spl_autoload_register(static function (string $class): void {
    $prefix = 'MappedCache\\';
    if (strncmp($class, $prefix, strlen($prefix)) !== 0) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});

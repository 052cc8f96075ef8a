<?php

declare(strict_types=1);

namespace MappedCache\Tests;

/** Other processes for the tests: PHP with this extension, the Swift binaries, Python. */
final class Processes
{
    public const REPO = __DIR__ . '/../../../..';

    /** The extension this process loaded, for PHP children. */
    public static function extension(): string
    {
        $env = getenv('MAPPEDCACHE_PHP_EXTENSION');
        return $env !== false && $env !== '' ? $env : realpath(__DIR__ . '/../../modules/mappedcache.so');
    }

    /** The command line of a PHP script run with this extension. */
    public static function php(string $script, string ...$args): array
    {
        return [PHP_BINARY, '-d', 'extension=' . self::extension(), $script, ...$args];
    }

    /** A binary of the Swift build ($MAPPEDCACHE_SWIFT_BIN_DIR, else .build/debug or release), or null. */
    public static function swiftBinary(string $name): ?string
    {
        $dirs = [getenv('MAPPEDCACHE_SWIFT_BIN_DIR') ?: '', self::REPO . '/.build/debug', self::REPO . '/.build/release'];
        foreach ($dirs as $dir) {
            if ($dir !== '' && is_executable("$dir/$name")) {
                return "$dir/$name";
            }
        }
        return null;
    }

    /** A Python that imports bindings/python's mappedcache ($MAPPEDCACHE_PYTHON, else the CI venv), or null. */
    public static function python(): ?string
    {
        $candidates = [getenv('MAPPEDCACHE_PYTHON') ?: '', self::REPO . '/.build/ci-python/bin/python', 'python3'];
        foreach ($candidates as $python) {
            if ($python === '') {
                continue;
            }
            [$code] = self::run([$python, '-c', 'import mappedcache']);
            if ($code === 0) {
                return $python;
            }
        }
        return null;
    }

    /**
     * Runs a command to its end: [exit code, stdout, stderr].
     *
     * @param list<string> $command
     */
    public static function run(array $command, ?string $stdin = null, int $timeout = 120): array
    {
        $process = proc_open($command, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        if ($process === false) {
            return [-1, '', 'cannot start ' . $command[0]];
        }
        fwrite($pipes[0], $stdin ?? '');
        fclose($pipes[0]);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        return [proc_close($process), $out, $err];
    }
}

<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use MappedCache\Cache;

/**
 * One file, several languages: what PHP stores reads the same from the mapped-cache CLI,
 * Python (bindings/python) and Swift (mc-test-helper), and what they store reads the same
 * in PHP: strings and bytes, counters, expiry.
 */
final class InteropTest extends CacheTestCase
{
    private const STRINGS = ['plain' => 'hello', 'accents' => 'héllo wörld', 'emoji' => '🎉 party', 'nul' => "a\0b"];

    private function cli(string ...$args): string
    {
        $cli = Processes::swiftBinary('mapped-cache') ?? $this->unavailable('mapped-cache is not built (swift build)');
        [$code, $out, $err] = Processes::run([$cli, ...$args]);
        $this->assertSame(0, $code, "mapped-cache " . implode(' ', $args) . ": $err");
        return $out;
    }

    private function helper(string ...$args): string
    {
        $helper = Processes::swiftBinary('mc-test-helper') ?? $this->unavailable('mc-test-helper is not built');
        [$code, $out, $err] = Processes::run([$helper, ...$args]);
        $this->assertSame(0, $code, "mc-test-helper " . implode(' ', $args) . ": $err");
        return $out;
    }

    /** Runs Python code with `path` set and bindings/python imported; returns its JSON output. */
    private function python(string $code): mixed
    {
        $python = Processes::python() ?? $this->unavailable('no Python with bindings/python\'s mappedcache '
            . '(pip install ./bindings/python, or set MAPPEDCACHE_PYTHON)');
        $script = "import json, sys, mappedcache\npath = sys.argv[1]\n" . $code;
        [$status, $out, $err] = Processes::run([$python, '-c', $script, $this->path]);
        $this->assertSame(0, $status, $err);
        return json_decode($out, true, 512, JSON_THROW_ON_ERROR);
    }

    public function testPhpWritesTheCliReads(): void
    {
        $cache = new Cache($this->path, 8 << 20);
        foreach (self::STRINGS as $key => $value) {
            $cache->set($key, $value);
        }
        $cache->set('count', 41);
        $cache->incr('count');
        $cache->set('expiring', 'soon', 100);
        foreach (self::STRINGS as $key => $value) {
            $this->assertSame($value, $this->cli('get', $this->path, $key));
        }
        $this->assertSame('42', $this->cli('get', $this->path, 'count'));
        $this->assertMatchesRegularExpression('/expiring\s.*\b(99|100|1m40s|1m39s)/', $this->cli('keys', $this->path));
    }

    public function testTheCliWritesPhpReads(): void
    {
        $this->cli('set', $this->path, 'greeting', 'héllo', '--capacity', '8MiB');
        $this->cli('set', $this->path, 'count', '7');
        $this->cli('set', $this->path, 'expiring', 'soon', '--ttl', '100');
        $cache = new Cache($this->path);
        $this->assertSame('héllo', $cache->get('greeting'));
        $this->assertSame(7, $cache->get('count'), 'a decimal integer reads as an int');
        $this->assertSame(8, $cache->incr('count'));
        $this->assertEqualsWithDelta(100.0, $cache->ttl('expiring'), 3.0);
        $this->assertSame('8', $this->cli('get', $this->path, 'count'));
    }

    public function testPhpAndPythonShareStringsBytesCountersAndExpiry(): void
    {
        $cache = new Cache($this->path, 8 << 20);
        foreach (self::STRINGS as $key => $value) {
            $cache->set($key, $value);
        }
        $cache->set('binary', "\x01\x00\xff");
        $cache->set('expiring', 'soon', 100);
        $cache->incr('hits', 5);
        $seen = $this->python(<<<'PY'
c = mappedcache.Cache(path)
out = {"type": c.value_type, "values": {k: c.get(k).hex() for k in ("plain", "accents", "emoji", "nul", "binary")}}
out["hits"] = c.incr("hits", 10)
out["ttl"] = c.ttl("expiring")
c.set("from python", "написано".encode())
c.set("py count", b"100")
c.set("py expiring", b"later", ttl=50)
print(json.dumps(out))
PY);
        $this->assertSame('bytes', $seen['type']);
        $expected = array_map('bin2hex', self::STRINGS + ['binary' => "\x01\x00\xff"]);
        $this->assertSame($expected, $seen['values']);
        $this->assertSame(15, $seen['hits']);
        $this->assertEqualsWithDelta(100.0, $seen['ttl'], 3.0);
        $this->assertSame(15, $cache->get('hits'));
        $this->assertSame('написано', $cache->get('from python'));
        $this->assertSame(101, $cache->incr('py count'));
        $this->assertEqualsWithDelta(50.0, $cache->ttl('py expiring'), 3.0);
    }

    public function testPythonTypedValuesReadInPhp(): void
    {
        $seen = $this->python(<<<'PY'
c = mappedcache.Cache(path, capacity=8 << 20)
c.set("s", "héllo"); c.set("b", b"\x00\xff"); c.set("i", -12); c.set("f", 2.5)
print(json.dumps(c.value_type))
PY);
        $this->assertSame('python', $seen);
        $cache = new Cache($this->path);
        $this->assertSame(['s' => 'héllo', 'b' => "\x00\xff", 'i' => -12, 'f' => 2.5], $cache->getMany(['s', 'b', 'i', 'f']));
        $cache->set('from php', 'ünïcode');
        $cache->incr('i');
        $this->assertSame(['ünïcode', -11], $this->python(
            "c = mappedcache.Cache(path)\nprint(json.dumps([c.get('from php'), c.get('i')]))"
        ));
    }

    public function testSwiftTypedCachesAndPhp(): void
    {
        $this->helper('interop-write', $this->path, 'string');
        $strings = new Cache($this->path);
        $this->assertSame('string', $strings->info()['value_type']);
        $this->assertSame(['plain' => 'hello', 'accents' => 'héllo wörld', 'emoji' => '🎉 party', 'empty' => '',
            'nul' => "a\0b"], $strings->getMany(['plain', 'accents', 'emoji', 'empty', 'nul']));
        $strings->set('from php', 'é🎉');
        $this->assertSame(['"é🎉"', 'MISSING'], explode("\n", trim($this->helper('interop-read', $this->path, 'string',
            'from php', 'missing'))));
        $strings->close();

        $bytesPath = $this->removeLater(self::tempPath('swiftbytes'));
        $this->helper('interop-write', $bytesPath, 'bytes');
        $bytes = new Cache($bytesPath);
        $this->assertSame(['zero' => "\x00\x01\x02\xff", 'empty' => '', 'text' => 'abc'],
            $bytes->getMany(['zero', 'empty', 'text']));
        $bytes->set('from php', "\xfe\x00");
        $this->assertSame("fe00\n", $this->helper('interop-read', $bytesPath, 'bytes', 'from php'));
        $this->assertSame(0, $bytes->verify());

        $intPath = $this->removeLater(self::tempPath('swiftint'));
        $this->helper('interop-write', $intPath, 'int');
        $ints = new Cache($intPath);
        $this->assertSame(['one' => 1, 'negative' => -42, 'max' => PHP_INT_MAX], $ints->getMany(['one', 'negative', 'max']));
        // Swift's increment and PHP's incr on one counter at once: nothing lost.
        $helper = Processes::swiftBinary('mc-test-helper');
        $swift = proc_open([$helper, 'incr', $intPath, 'hits', '3000'], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        for ($i = 0; $i < 3000; $i++) {
            $ints->incr('hits');
        }
        stream_get_contents($pipes[1]);
        $this->assertSame(0, proc_close($swift));
        $this->assertSame(6000, $ints->get('hits'));
        $this->assertSame("6000\n", $this->helper('interop-read', $intPath, 'int', 'hits'));
        $this->assertSame(0, $ints->verify());
    }
}

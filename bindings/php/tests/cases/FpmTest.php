<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use MappedCache\Cache;

/**
 * PHP-FPM: two pools of workers (forked by the master after it loaded the extension)
 * serving requests at once through the APCu-style functions, over the file each pool's
 * mappedcache.path names, which this process reads at the same time.
 */
final class FpmTest extends CacheTestCase
{
    private const WORKERS_PER_POOL = 2;
    private const REQUESTS = 24;

    /** @var resource|null */
    private $fpm = null;
    private string $dir;

    protected function tearDown(): void
    {
        if ($this->fpm !== null) {
            proc_terminate($this->fpm, SIGQUIT);
            proc_close($this->fpm);
        }
        if (isset($this->dir)) {
            array_map('unlink', glob("$this->dir/*"));
            rmdir($this->dir);
        }
        parent::tearDown();
    }

    private static function binary(string ...$candidates): ?string
    {
        foreach ($candidates as $name) {
            foreach (['/usr/sbin', '/usr/bin', '/usr/local/sbin', '/usr/local/bin'] as $dir) {
                if (is_executable("$dir/$name")) {
                    return "$dir/$name";
                }
            }
        }
        return null;
    }

    public function testWorkersOfTwoPoolsShareTheFile(): void
    {
        $version = PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION;
        $fpm = self::binary("php-fpm$version", 'php-fpm')
            ?? $this->unavailable("php-fpm is not installed (Debian's php$version-fpm)");
        $client = self::binary('cgi-fcgi') ?? $this->unavailable("cgi-fcgi is not installed (Debian's libfcgi-bin)");
        $this->dir = sys_get_temp_dir() . '/mcphp-fpm-' . getmypid() . '-' . bin2hex(random_bytes(3));
        mkdir($this->dir);
        $root = posix_getuid() === 0;
        $config = ['[global]', "pid = $this->dir/fpm.pid", "error_log = $this->dir/fpm.log", 'daemonize = no'];
        foreach (['a', 'b'] as $pool) {
            $config = [...$config, "[$pool]", "listen = $this->dir/$pool.sock", 'pm = static',
                'pm.max_children = ' . self::WORKERS_PER_POOL, "env[POOL] = $pool", ...($root ? ['user = root'] : []),
                "php_admin_value[mappedcache.path] = $this->path", 'php_admin_value[mappedcache.capacity] = 8M'];
        }
        file_put_contents("$this->dir/fpm.conf", implode("\n", $config) . "\n");
        $cache = new Cache($this->path, 8 << 20);
        $command = [$fpm, '-y', "$this->dir/fpm.conf", '-d', 'extension=' . Processes::extension(),
            ...($root ? ['-R'] : [])];
        $this->fpm = proc_open($command, [1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
        for ($i = 0; $i < 200 && !(file_exists("$this->dir/a.sock") && file_exists("$this->dir/b.sock")); $i++) {
            usleep(25_000);
        }
        $this->assertFileExists("$this->dir/b.sock", 'php-fpm did not start: ' . @file_get_contents("$this->dir/fpm.log"));

        // Requests at once to both pools, each held 50 ms, so that every worker serves some.
        $requests = [];
        for ($i = 0; $i < self::REQUESTS; $i++) {
            $env = ['SCRIPT_FILENAME' => realpath(__DIR__ . '/../support/fpm_request.php'), 'REQUEST_METHOD' => 'GET',
                'QUERY_STRING' => 'sleep_ms=50', 'PATH' => getenv('PATH')];
            $socket = $this->dir . '/' . ($i % 2 === 0 ? 'a' : 'b') . '.sock';
            $requests[] = proc_open([$client, '-bind', '-connect', $socket],
                [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, $env);
            $outputs[] = $pipes;
        }
        $served = [];
        foreach ($requests as $i => $request) {
            $out = stream_get_contents($outputs[$i][1]);
            $err = stream_get_contents($outputs[$i][2]);
            $this->assertSame(0, proc_close($request), $err);
            [, $body] = explode("\r\n\r\n", $out, 2) + [1 => ''];
            $served[] = json_decode($body, true) ?? $this->fail("request $i: $out");
        }

        $counts = array_column($served, 'n');
        sort($counts);
        $this->assertSame(range(1, self::REQUESTS), $counts, 'each request counted once, none lost');
        $this->assertSame([$this->path], array_values(array_unique(array_column($served, 'path'))));
        $workers = array_unique(array_column($served, 'pid'));
        $this->assertGreaterThan(2, count($workers), 'several workers served');
        $pools = array_count_values(array_column($served, 'pool'));
        ksort($pools);
        $this->assertSame(['a' => self::REQUESTS / 2, 'b' => self::REQUESTS / 2], $pools);
        $this->assertNotContains(getmypid(), $workers);
        $this->assertSame(self::REQUESTS, $cache->get('fpm:requests'));
        foreach ($workers as $pid) {
            $this->assertContains($cache->get("fpm:worker:$pid"), $counts, "worker $pid's last count");
        }
    }
}

<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use MappedCache\Cache;

/**
 * Handles opened before fork() (as PHP-FPM's master opens them before forking workers):
 * each child reopens the file on its first call, and processes share counters and
 * get-or-compute exactly.
 */
final class ForkTest extends CacheTestCase
{
    protected function setUp(): void
    {
        parent::setUp();
        if (!function_exists('pcntl_fork')) {
            $this->unavailable('the pcntl extension is not loaded');
        }
    }

    /**
     * Runs $body in $n forked children at once; returns what each printed to its file.
     *
     * @return list<string>
     */
    private function inChildren(int $n, callable $body): array
    {
        $outputs = [];
        $pids = [];
        for ($i = 0; $i < $n; $i++) {
            $outputs[$i] = $this->removeLater($this->path . ".out$i");
            $pid = pcntl_fork();
            $this->assertNotSame(-1, $pid, 'fork failed');
            if ($pid === 0) {
                $code = 0;
                try {
                    file_put_contents($outputs[$i], (string) $body($i));
                } catch (\Throwable $e) {
                    file_put_contents($outputs[$i], 'error: ' . $e);
                    $code = 1;
                }
                // Leave at once: the child must not run PHPUnit's shutdown.
                posix_kill(posix_getpid(), $code === 0 ? SIGUSR1 : SIGUSR2);
            }
            $pids[] = $pid;
        }
        foreach ($pids as $i => $pid) {
            pcntl_waitpid($pid, $status);
            $this->assertTrue(pcntl_wifsignaled($status));
            $this->assertSame(SIGUSR1, pcntl_wtermsig($status), (string) @file_get_contents($outputs[$i]));
        }
        return array_map('file_get_contents', $outputs);
    }

    public function testAHandleOpenedBeforeForkWorksInTheChild(): void
    {
        $cache = new Cache($this->path, 8 << 20);
        $cache->set('from parent', 'hello');
        ini_set('mappedcache.path', $this->path);
        mappedcache_store('function before fork', 1);
        [$out] = $this->inChildren(1, function () use ($cache): string {
            $cache->set('from child', getmypid());
            mappedcache_store('function in child', 2);
            return $cache->get('from parent') . ' ' . mappedcache_fetch('function before fork');
        });
        $this->assertSame('hello 1', $out);
        $this->assertIsInt($cache->get('from child'));
        $this->assertNotSame(getmypid(), $cache->get('from child'));
        $this->assertSame(2, mappedcache_fetch('function in child'));
        $cache->set('after', 'parent still writes');
        $this->assertSame('parent still writes', $cache->get('after'));
        ini_restore('mappedcache.path');
    }

    public function testFourProcessesIncrementingOneKeyLoseNothing(): void
    {
        $cache = new Cache($this->path, 8 << 20);
        $cache->get('warm');
        $this->inChildren(4, function () use ($cache): string {
            for ($i = 0; $i < 1000; $i++) {
                $cache->incr('hits');
            }
            return 'done';
        });
        $this->assertSame(4000, $cache->get('hits'));
    }

    public function testFourPhpProcessesIncrementingThroughTheFunctions(): void
    {
        $script = 'ini_set("mappedcache.path", $argv[1]); for ($i = 0; $i < 1000; $i++) '
            . '{ if (mappedcache_inc("hits") === false) exit(1); }';
        $processes = [];
        for ($i = 0; $i < 4; $i++) {
            $command = [PHP_BINARY, '-d', 'extension=' . Processes::extension(), '-r', $script, $this->path];
            $processes[] = proc_open($command, [], $pipes);
        }
        foreach ($processes as $process) {
            $this->assertSame(0, proc_close($process));
        }
        $this->assertSame(4000, (new Cache($this->path))->get('hits'));
    }

    public function testGetOrComputeRunsOnceAcrossProcesses(): void
    {
        $cache = new Cache($this->path, 8 << 20);
        $log = $this->removeLater($this->path . '.computes');
        $outputs = $this->inChildren(4, function () use ($cache, $log): string {
            return $cache->getOrCompute('report', function () use ($log): string {
                file_put_contents($log, getmypid() . "\n", FILE_APPEND);
                usleep(300_000);
                return 'report by ' . getmypid();
            }, 60);
        });
        $this->assertCount(1, file($log), 'one process computed');
        $this->assertSame(['report by ' . trim(file_get_contents($log))], array_values(array_unique($outputs)));
    }
}

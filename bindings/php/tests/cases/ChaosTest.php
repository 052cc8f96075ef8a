<?php

declare(strict_types=1);

namespace MappedCache\Tests;

use MappedCache\Cache;

/**
 * The chaos harness with PHP workers (as bindings/python's test_chaos): PHP processes
 * setting and reading self-checking values are SIGKILLed at random, and restarted, while
 * Swift processes (mc-test-helper's writer and reader) set and check the same keys. Nothing
 * read may be corrupt or wrong, and the file must verify clean afterwards.
 */
final class ChaosTest extends CacheTestCase
{
    private const KEYS = 500;

    /** @var array<int, resource> */
    private array $running = [];

    private function start(array $command)
    {
        $process = proc_open($command, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $this->assertIsResource($process);
        $this->running[(int) $process] = [$process, $pipes];
        return $process;
    }

    /** Waits for a process's end: [exit code or -signal, stdout, stderr]. */
    private function finish($process): array
    {
        [, $pipes] = $this->running[(int) $process];
        unset($this->running[(int) $process]);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        do {
            $status = proc_get_status($process);
            if ($status['running']) {
                usleep(10_000);
            }
        } while ($status['running']);
        proc_close($process);
        $code = $status['signaled'] ? -$status['termsig'] : $status['exitcode'];
        return [$code, $out, $err];
    }

    protected function tearDown(): void
    {
        foreach ($this->running as [$process]) {
            proc_terminate($process, SIGKILL);
            proc_close($process);
        }
        parent::tearDown();
    }

    public function testPhpWorkersKilledAtRandomBesideSwiftProcesses(): void
    {
        $helper = Processes::swiftBinary('mc-test-helper') ?? $this->unavailable('mc-test-helper is not built');
        $seconds = (float) (getenv('MAPPEDCACHE_CHAOS_SECONDS') ?: 5);
        $cache = new Cache($this->path, 32 << 20, 'bytes');
        $problems = $this->removeLater($this->path . '.problems');
        $stop = $this->removeLater($this->path . '.stop');
        $worker = __DIR__ . '/../support/chaos_worker.php';
        $swiftWriter = fn (int $id) => $this->start([$helper, 'writer', $this->path, (string) $id,
            (string) ($seconds + 1), (string) self::KEYS, '16', '2000']);
        $phpWorker = fn (int $slot) => $this->start(Processes::php($worker, $this->path, (string) $slot,
            (string) self::KEYS, $problems, $stop));

        mt_srand(31);
        $writers = [$swiftWriter(1), $swiftWriter(2)];
        $reader = $this->start([$helper, 'reader', $this->path, (string) ($seconds + 5), (string) self::KEYS]);
        $workers = array_map($phpWorker, range(0, 3));
        $kills = 0;
        $killedWriter = false;
        $end = microtime(true) + $seconds;
        while (microtime(true) < $end) {
            usleep(mt_rand(100_000, 300_000));
            $slot = mt_rand(0, 3);
            proc_terminate($workers[$slot], SIGKILL);
            [$code, , $err] = $this->finish($workers[$slot]);
            $this->assertSame(-SIGKILL, $code, "worker $slot had already exited: $err");
            $workers[$slot] = $phpWorker($slot);
            $kills++;
            if (!$killedWriter && microtime(true) > $end - $seconds / 2) {
                // One Swift writer killed too, mid-run, and replaced.
                proc_terminate($writers[0], SIGKILL);
                $this->finish($writers[0]);
                $writers[0] = $swiftWriter(3);
                $killedWriter = true;
            }
        }
        touch($stop);
        $outputs = array_map(fn ($p) => $this->finish($p), $workers);
        $swift = array_map(fn ($p) => $this->finish($p), [...$writers, $reader]);

        $reported = is_file($problems) ? file_get_contents($problems) : '';
        $this->assertSame('', $reported, 'workers read corrupt or wrong values; counters: '
            . json_encode($cache->stats()));
        foreach ($outputs as $slot => [$code, $out, $err]) {
            $this->assertSame(0, $code, "worker $slot: $err");
            $counts = json_decode(trim($out), true, 512, JSON_THROW_ON_ERROR);
            $this->assertSame([0, 0], [$counts['corrupt'], $counts['wrong']]);
            $this->assertGreaterThan(0, $counts['sets']);
            $this->assertGreaterThan(0, $counts['hits']);
        }
        foreach ($swift as [$code, $out, $err]) {
            $this->assertSame(0, $code, $err);
            $lines = explode("\n", trim($out));
            $this->assertSame(0, json_decode(end($lines), true, 512, JSON_THROW_ON_ERROR)['corrupt']);
        }
        // A kill every 0.1 to 0.3 s, plus the wait for each victim: on a loaded machine the
        // sleeps overrun, so half of the nominal rate is the bound.
        $this->assertGreaterThanOrEqual((int) ($seconds / 0.6), $kills);

        // Every entry left in the file checks, and the file verifies clean.
        $entries = $cache->toArray();
        $this->assertGreaterThan(self::KEYS / 2, count($entries));
        foreach ($entries as $key => $value) {
            $key = (string) $key;
            $n = strlen($key);
            $this->assertTrue(strncmp($value, $key, $n) === 0 && $value[$n] === "\0"
                && strrev(hash('fnv1a64', substr($value, 0, -8), true)) === substr($value, -8), "entry $key");
        }
        $this->assertSame(0, $cache->verify());
        fwrite(STDERR, sprintf("\nchaos: %d PHP workers SIGKILLed in %.0f s, %d entries checked\n", $kills, $seconds,
            count($entries)));
    }
}

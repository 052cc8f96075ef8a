<?php

/*
 * One run of scripts/php-bench.sh: fills BACKEND with KEYS keys of 64-byte values, forks
 * PROCS readers that each get random keys for SECONDS, and prints the total gets per
 * second as JSON. Forking after the fill is what lets APCu's readers share its memory
 * (APCu's segment belongs to one process tree); every backend runs the same way.
 *
 *   php scripts/php_bench.php BACKEND KEYS PROCS SECONDS [SOCKET|PATH]
 *   php scripts/php_bench.php BACKEND KEYS 0 GETS [SOCKET|PATH]
 *
 * The second form does GETS gets (in batches of 1,024) in this process, without forking or
 * timing: run under
 * callgrind at two counts, the difference over the difference in gets is the instructions
 * a get costs (scripts/php-bench.sh does).
 *
 * BACKEND: mappedcache (MappedCache\Cache::get), mappedcache_fetch (the APCu-style
 * function), apcu (apcu_fetch), redis (phpredis over a unix socket), memcached
 * (php-memcached over a unix socket); baseline (a closure returning a string: the
 * harness's own cost, for the instruction counts).
 */

declare(strict_types=1);

[, $backend, $keys, $procs, $seconds] = $argv;
$target = $argv[5] ?? '';
$keys = (int) $keys;
$procs = (int) $procs;
$seconds = (float) $seconds;

/**
 * The backend's reader, connected in the calling process: it gets each key of a batch and
 * returns how many values were missing or not the 64 bytes stored. Each backend has its
 * loop written out, so that a get costs what it costs in an application (no call through
 * a closure per key).
 *
 * @return callable(list<string>): int
 */
function connect(string $backend, string $target): callable
{
    switch ($backend) {
        case 'mappedcache':
            $cache = new MappedCache\Cache($target);
            return function (array $batch) use ($cache): int {
                $bad = 0;
                foreach ($batch as $key) {
                    $v = $cache->get($key);
                    $bad += (int) (!is_string($v) || strlen($v) !== 64);
                }
                return $bad;
            };
        case 'mappedcache_fetch':
            ini_set('mappedcache.path', $target);
            return function (array $batch): int {
                $bad = 0;
                foreach ($batch as $key) {
                    $v = mappedcache_fetch($key);
                    $bad += (int) (!is_string($v) || strlen($v) !== 64);
                }
                return $bad;
            };
        case 'apcu':
            return function (array $batch): int {
                $bad = 0;
                foreach ($batch as $key) {
                    $v = apcu_fetch($key);
                    $bad += (int) (!is_string($v) || strlen($v) !== 64);
                }
                return $bad;
            };
        case 'baseline':
            $value = str_repeat('v', 64);
            return function (array $batch) use ($value): int {
                $bad = 0;
                foreach ($batch as $key) {
                    $v = $value;
                    $bad += (int) (!is_string($v) || strlen($v) !== 64);
                }
                return $bad;
            };
        case 'redis':
            $redis = new Redis();
            $redis->connect($target);
            return function (array $batch) use ($redis): int {
                $bad = 0;
                foreach ($batch as $key) {
                    $v = $redis->get($key);
                    $bad += (int) (!is_string($v) || strlen($v) !== 64);
                }
                return $bad;
            };
        case 'memcached':
            $memcached = new Memcached();
            $memcached->addServer($target, 0);
            return function (array $batch) use ($memcached): int {
                $bad = 0;
                foreach ($batch as $key) {
                    $v = $memcached->get($key);
                    $bad += (int) (!is_string($v) || strlen($v) !== 64);
                }
                return $bad;
            };
    }
    throw new InvalidArgumentException("unknown backend $backend");
}

function fill(string $backend, string $target, int $keys): void
{
    $value = str_repeat('v', 64);
    for ($start = 0; $start < $keys; $start += 1000) {
        $batch = [];
        for ($i = $start; $i < min($keys, $start + 1000); $i++) {
            $batch["key:$i"] = substr(sprintf('%08d', $i) . $value, 0, 64);
        }
        match ($backend) {
            'mappedcache', 'mappedcache_fetch' => (new MappedCache\Cache($target))->setMany($batch),
            'apcu' => apcu_store($batch),
            'baseline' => null,
            'redis' => (function () use ($target, $batch) {
                $r = new Redis();
                $r->connect($target);
                $r->mset($batch);
            })(),
            'memcached' => (function () use ($target, $batch) {
                $m = new Memcached();
                $m->addServer($target, 0);
                $m->setMulti($batch);
            })(),
        };
    }
}

fill($backend, $target, $keys);
if ($procs === 0) {
    $read = connect($backend, $target);
    $batch = [];
    for ($i = 0; $i < 1024; $i++) {
        $batch[] = 'key:' . (($i * 7919) % $keys);
    }
    $bad = 0;
    for ($done = 0; $done < (int) $seconds; $done += 1024) {
        $bad += $read($batch);
    }
    exit($bad === 0 ? 0 : 1);
}
$results = [];
$children = [];
for ($p = 0; $p < $procs; $p++) {
    $out = tempnam(sys_get_temp_dir(), 'phpbench');
    $pid = pcntl_fork();
    if ($pid === 0) {
        $read = connect($backend, $target);
        mt_srand(getmypid());
        $batches = [];
        for ($b = 0; $b < 64; $b++) {
            for ($i = 0; $i < 1024; $i++) {
                $batches[$b][] = 'key:' . mt_rand(0, $keys - 1);
            }
        }
        $read($batches[0]);
        $n = 0;
        $bad = 0;
        $t0 = hrtime(true);
        $deadline = $t0 + (int) ($seconds * 1e9);
        do {
            $bad += $read($batches[($n >> 10) & 63]);
            $n += 1024;
            $now = hrtime(true);
        } while ($now < $deadline);
        file_put_contents($out, json_encode(['gets' => $n, 'ns' => $now - $t0, 'bad' => $bad]));
        posix_kill(posix_getpid(), SIGKILL);
    }
    $children[$pid] = $out;
}
$total = 0.0;
$bad = 0;
foreach ($children as $pid => $out) {
    pcntl_waitpid($pid, $status);
    $r = json_decode((string) file_get_contents($out), true);
    unlink($out);
    if (!is_array($r)) {
        fwrite(STDERR, "a reader of $backend failed\n");
        exit(1);
    }
    $total += $r['gets'] / ($r['ns'] / 1e9);
    $bad += $r['bad'];
}
if ($bad > 0) {
    fwrite(STDERR, "$backend: $bad gets missed or returned a wrong value\n");
    exit(1);
}
echo json_encode(['backend' => $backend, 'procs' => $procs, 'gets_per_s' => round($total)]), "\n";

<?php

/*
 * A PHP worker of ChaosTest, run as a script:
 *
 *   php chaos_worker.php PATH SLOT KEYS PROBLEMS STOP
 *
 * Until the file STOP exists: sets and reads self-checking values (Tests/CheckedValues'
 * format, the one the Swift helper's writer and reader use: key NUL writer NUL seq NUL
 * payload, then the FNV-1a 64 of it all, little-endian) on the shared keys k0..k{KEYS-1}
 * and on keys of its own (php{SLOT}-k<n>) whose last write it tracks. Every value read
 * must check (else "corrupt"), and a key of its own must hold what it last wrote there
 * (else "wrong"); each problem is appended to PROBLEMS at once (the worker may be
 * SIGKILLed at any moment). Prints its counts as JSON when it stops.
 */

declare(strict_types=1);

[, $path, $slot, $keys, $problems, $stop] = $argv;
$slot = (int) $slot;
$keys = (int) $keys;
$cache = new MappedCache\Cache($path);
$writer = 2000 + $slot;
$seq = (int) (microtime(true) * 1000) % 1_000_000 * 1000;
$mine = [];
$counts = ['sets' => 0, 'reads' => 0, 'hits' => 0, 'corrupt' => 0, 'wrong' => 0];

function checkedValue(string $key, int $writer, int $seq, int $size): string
{
    $body = "$key\0$writer\0$seq\0";
    $padding = $size - strlen($body) - 8;
    $body .= $padding > 0 ? random_bytes($padding) : '';
    return $body . strrev(hash('fnv1a64', $body, true));
}

function checks(string $value, string $key): bool
{
    $n = strlen($key);
    return strlen($value) >= $n + 9 && strncmp($value, $key, $n) === 0 && $value[$n] === "\0"
        && strrev(hash('fnv1a64', substr($value, 0, -8), true)) === substr($value, -8);
}

$problem = function (string $kind, string $text) use (&$counts, $problems, $slot): void {
    $counts[$kind]++;
    file_put_contents($problems, "$kind slot $slot pid " . getmypid() . ": $text\n", FILE_APPEND | LOCK_EX);
};

for ($n = 1; ; $n++) {
    if ($n % 64 === 0 && file_exists($stop)) {
        break;
    }
    $own = mt_rand(0, 1) === 0;
    $key = $own ? "php$slot-k" . mt_rand(0, 63) : 'k' . mt_rand(0, $keys - 1);
    if (mt_rand(0, 9) < 4) {
        $seq++;
        $cache->set($key, checkedValue($key, $writer, $seq, [16, 64, 200, 1500][mt_rand(0, 3)]));
        $counts['sets']++;
        if ($own) {
            $mine[$key] = $seq;
        }
        continue;
    }
    $counts['reads']++;
    $value = $cache->get($key);
    if ($value === null) {
        if ($own && isset($mine[$key])) {
            $problem('wrong', "$key missing after this process stored seq {$mine[$key]}");
        }
        continue;
    }
    $counts['hits']++;
    if (!is_string($value) || !checks($value, $key)) {
        $problem('corrupt', "$key: " . bin2hex(substr((string) json_encode($value), 0, 40)));
    } elseif ($own && isset($mine[$key]) && (int) explode("\0", $value)[2] !== $mine[$key]) {
        $problem('wrong', "$key holds seq " . explode("\0", $value)[2] . ", this process stored {$mine[$key]}");
    }
}
echo json_encode($counts), "\n";

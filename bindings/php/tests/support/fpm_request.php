<?php

// The page FpmTest requests from its PHP-FPM workers: counts the request in the shared
// counter and records which worker served it, through the APCu-style functions.
usleep((int) ($_GET['sleep_ms'] ?? 0) * 1000);
$n = mappedcache_inc('fpm:requests');
mappedcache_store('fpm:worker:' . getmypid(), $n);
header('Content-Type: text/plain');
echo json_encode(['pid' => getmypid(), 'pool' => getenv('POOL'), 'n' => $n, 'path' => ini_get('mappedcache.path')]);

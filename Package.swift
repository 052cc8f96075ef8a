// swift-tools-version:6.0
import PackageDescription

let package = Package(
  name: "MappedCache",
  platforms: [.macOS(.v15)],
  products: [
    .library(name: "MappedCache", targets: ["MappedCache"]),
    .library(name: "MappedCacheRedis", targets: ["MappedCacheRedis"]),
    .executable(name: "mapped-cache", targets: ["mapped-cache"]),
    .executable(name: "cache-stress", targets: ["cache-stress"]),
    // libmappedcache.so: the C ABI (Sources/CMappedCacheABI/include/mappedcache.h), for C
    // and every language that calls C (bindings/python).
    .library(name: "mappedcache", type: .dynamic, targets: ["MappedCacheCExports"]),
  ],
  targets: [
    // Futex and OFD-lock calls only: everything else is Swift.
    .target(name: "CMappedCacheShim", path: "Sources/CMappedCacheShim"),
    // Every system call of the package, wrapped once (`SystemCall`, `Clock`, `SystemError`, `Errno`):
    // every other module calls the C library through it.
    .target(name: "SystemCalls", dependencies: ["CMappedCacheShim"], path: "Sources/SystemCalls"),
    .target(name: "MappedCache", dependencies: ["CMappedCacheShim", "SystemCalls"], path: "Sources/MappedCache"),
    // The C ABI: its header, and the little that must be C (the pthread_atfork handlers,
    // the per-thread last error); the exported functions are Swift (`@_cdecl`).
    .target(name: "CMappedCacheABI", path: "Sources/CMappedCacheABI"),
    .target(
      name: "MappedCacheCExports", dependencies: ["MappedCache", "CMappedCacheABI", "SystemCalls"],
      path: "Sources/MappedCacheCExports"),
    // What both tools share: the size and duration parsers, the --version line, stopping a process.
    .target(name: "CacheTools", dependencies: ["MappedCache", "SystemCalls"], path: "Sources/CacheTools"),
    // The Redis tier (RESP3 client, RedisCache, NearCache): networking stays out of MappedCache.
    .target(
      name: "MappedCacheRedis", dependencies: ["MappedCache", "SystemCalls"], path: "Sources/MappedCacheRedis"),
    // A loopback TCP proxy that makes network faults (black hole, reset, delay) for
    // cache-stress --redis --blackhole-every and the Redis tests.
    .target(name: "RedisFaultProxy", dependencies: ["SystemCalls"], path: "Sources/RedisFaultProxy"),
    // redis-server and Redis Cluster processes of a run's or a test's own (free ports, no
    // persistence, kill and restart, failover): cache-stress --redis-spawn and the tests.
    .target(name: "RedisServers", dependencies: ["MappedCacheRedis", "SystemCalls"], path: "Sources/RedisServers"),
    .executableTarget(
      name: "mapped-cache", dependencies: ["MappedCache", "CacheTools", "MappedCacheRedis", "SystemCalls"],
      path: "Sources/mapped-cache"),
    // The Redis mode (--redis) runs hosts of NearCache, a redis-server or cluster of its own
    // (--redis-spawn, --redis-spawn-cluster) and, for --blackhole-every, a fault proxy per host.
    .executableTarget(
      name: "cache-stress",
      dependencies: [
        "MappedCache", "CacheTools", "MappedCacheRedis", "RedisFaultProxy", "RedisServers", "SystemCalls",
      ],
      path: "Stress"),
    // Everything below is under Tests/ and only the tests use it: no product depends on it.
    // Counts heap allocations in the test helper (tests assert the read paths make none).
    .target(name: "AllocCounter", path: "Tests/AllocCounter"),
    // The self-checking value format shared by helper processes and tests.
    .target(name: "CheckedValues", path: "Tests/CheckedValues"),
    // What both test targets and the helper share: scratch paths, waiting for a condition,
    // the Redis fixtures, and `ChildProcess`, the one way they start processes.
    .target(
      name: "TestSupport",
      dependencies: ["CacheTools", "MappedCache", "MappedCacheRedis", "RedisServers", "SystemCalls"],
      path: "Tests/TestSupport"),
    .executableTarget(
      name: "mc-test-helper",
      dependencies: [
        "MappedCache", "MappedCacheRedis", "AllocCounter", "CheckedValues", "RedisFaultProxy", "SystemCalls",
        "TestSupport",
      ],
      path: "Tests/Helper"),
    .testTarget(
      name: "MappedCacheTests",
      dependencies: [
        "MappedCache", "CacheTools", "CheckedValues", "TestSupport", "mc-test-helper", "cache-stress", "mapped-cache",
      ],
      path: "Tests/MappedCacheTests"),
    .testTarget(
      name: "MappedCacheRedisTests",
      dependencies: [
        "MappedCache", "MappedCacheRedis", "CacheTools", "CheckedValues", "RedisFaultProxy", "TestSupport",
        "mc-test-helper", "mapped-cache",
      ],
      path: "Tests/MappedCacheRedisTests"),
  ]
)

// swift-tools-version:6.0
import PackageDescription

let package = Package(
  name: "MappedCache",
  platforms: [.macOS(.v15)],
  products: [
    .library(name: "MappedCache", targets: ["MappedCache"]),
    .executable(name: "mapped-cache", targets: ["mapped-cache"]),
    .executable(name: "cache-stress", targets: ["cache-stress"]),
  ],
  targets: [
    // Futex and OFD-lock calls only: everything else is Swift.
    .target(name: "CMappedCacheShim", path: "Sources/CMappedCacheShim"),
    .target(name: "MappedCache", dependencies: ["CMappedCacheShim"], path: "Sources/MappedCache"),
    // What both tools share: the size and duration parsers and the --version line.
    .target(name: "CacheTools", dependencies: ["MappedCache"], path: "Sources/CacheTools"),
    .executableTarget(name: "mapped-cache", dependencies: ["MappedCache", "CacheTools"], path: "Sources/mapped-cache"),
    .executableTarget(name: "cache-stress", dependencies: ["MappedCache", "CacheTools"], path: "Stress"),
    // Counts heap allocations in the test helper (tests assert the read paths make none).
    .target(name: "AllocCounter", path: "Tests/AllocCounter"),
    // The self-checking value format shared by helper processes and tests.
    .target(name: "CheckedValues", path: "Tests/CheckedValues"),
    .executableTarget(name: "mc-test-helper", dependencies: ["MappedCache", "AllocCounter", "CheckedValues"],
                      path: "Tests/Helper"),
    .testTarget(
      name: "MappedCacheTests",
      dependencies: ["MappedCache", "CacheTools", "CheckedValues", "mc-test-helper", "cache-stress", "mapped-cache"],
      path: "Tests/MappedCacheTests"),
  ]
)

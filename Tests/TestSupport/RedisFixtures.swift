import Foundation
@_exported import RedisServers
import SystemCalls

/// The tests' name for a redis-server of their own (`RedisServers.RedisServerProcess`).
public typealias RedisServer = RedisServerProcess

extension RedisServerProcess {
  /// Whether the Redis tests run: redis-server is installed (a note says so when it is
  /// not). With `required` (`.ci/run`), a missing server fails the availability tests
  /// instead of leaving the others skipped quietly.
  public static var available: Bool {
    if binary == nil {
      print("note: redis-server not found on PATH: the Redis tests are skipped (apt-get install redis-server)")
      return false
    }
    return true
  }

  /// Whether the tests must find redis-server (and redis-cli): MC_REQUIRE_REDIS=1, as
  /// `.ci/run` sets.
  public static var required: Bool { ProcessInfo.processInfo.environment["MC_REQUIRE_REDIS"] == "1" }

  /// Whether the cluster tests run: redis-server and redis-cli are installed.
  public static var clusterAvailable: Bool {
    guard available else { return false }
    if cli == nil {
      print("note: redis-cli not found: the Redis Cluster tests are skipped (apt-get install redis-tools)")
      return false
    }
    return true
  }

  /// A server of a test's own: a free port, a temporary directory and a unix socket there.
  public static func forTest(arguments: [String] = []) throws -> RedisServerProcess {
    try RedisServerProcess(unixSocket: true, arguments: arguments)
  }
}

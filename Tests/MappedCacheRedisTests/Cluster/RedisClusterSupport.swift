import Foundation
import Glibc
import MappedCache
import SystemCalls
import TestSupport
import Testing

@testable import MappedCacheRedis

/// A Redis Cluster of the test's own (`RedisClusterProcesses`): `primaries` (+ as many
/// replicas with `replicas: 1`) redis-server processes on free loopback ports, each in a
/// temporary folder of its own, with the short timeouts the failover tests need; and the
/// tests' own operations on it (slot owners, migrations done by hand). Killed by `stop()`
/// (and at exit, for the clusters a suite shares).
final class RedisClusterFixture: @unchecked Sendable {
  /// Whether the cluster tests run: redis-server and redis-cli are installed.
  static var available: Bool { RedisServer.clusterAvailable }

  let cluster: RedisClusterProcesses
  var servers: [RedisServer] { cluster.servers }

  /// The `redis-cluster://` URL naming `seeds` of the nodes (default: the first one only).
  func url(seeds: Int = 1) -> String { cluster.url(seeds: seeds) }

  init(primaries: Int = 3, replicas: Int = 0, nodeTimeoutMs: Int = 1000) throws {
    cluster = try RedisClusterProcesses(
      primaries: primaries, replicas: replicas,
      nodeArguments: [
        "--cluster-node-timeout", String(nodeTimeoutMs), "--cluster-require-full-coverage", "no",
        // Replicas sync at once (no 5 s batching delay) and may always be promoted.
        "--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0",
      ], timeout: 20)
    Self.registerForExit(cluster.servers)
  }

  /// Waits until every running node reports `cluster_state:ok` and 16384 slots assigned,
  /// agrees on the owners of all of them, and every replica is in sync.
  func waitUntilHealthy(timeout: Double = 20) throws { try cluster.waitUntilHealthy(timeout: timeout) }

  func stop() { cluster.stop() }

  /// The server listening on `port`.
  func server(_ port: UInt16) -> RedisServer? { cluster.server(port) }

  /// The node id of a server.
  func nodeID(_ s: RedisServer) throws -> String {
    guard let id = try s.client().call("CLUSTER", "MYID").string else {
      throw CacheError.invalidArgument("no node id")
    }
    return id
  }

  /// The current owner of `slot` (asking the first running node).
  func owner(ofSlot slot: Int) throws -> RedisServer {
    for s in servers where s.pid != 0 {
      guard let r = try? s.client().call("CLUSTER", "SHARDS"),
        let m = try? ClusterSlotMap.fromShards(r, from: ClusterNode(host: "127.0.0.1", port: s.port)),
        let n = m.owner(ofSlot: slot), let o = server(n.port)
      else { continue }
      return o
    }
    throw CacheError.invalidArgument("no owner of slot \(slot)")
  }

  /// Starts moving `slot` from its owner to `target`: IMPORTING on the target, MIGRATING
  /// on the source; then MIGRATEs the keys `moving` selects (all by default).
  func beginMigration(slot: Int, to target: RedisServer, moving: (String) -> Bool = { _ in true }) throws {
    let source = try owner(ofSlot: slot)
    precondition(source.port != target.port, "the slot is already there")
    try target.client().call("CLUSTER", "SETSLOT", String(slot), "IMPORTING", try nodeID(source))
    try source.client().call("CLUSTER", "SETSLOT", String(slot), "MIGRATING", try nodeID(target))
    let keys = try source.client().call("CLUSTER", "GETKEYSINSLOT", String(slot), "100000").elements ?? []
    let names = keys.compactMap(\.string).filter(moving)
    if !names.isEmpty {
      try source.client().call(
        ["MIGRATE", "127.0.0.1", String(target.port), "", "0", "5000", "KEYS"].map { Array($0.utf8) }
          + names.map { Array($0.utf8) })
    }
  }

  /// Ends a migration: the keys left moved, then the slot given to `target` on every node.
  func finishMigration(slot: Int, from source: RedisServer, to target: RedisServer) throws {
    let keys = try source.client().call("CLUSTER", "GETKEYSINSLOT", String(slot), "100000").elements ?? []
    let names = keys.compactMap(\.bytes)
    if !names.isEmpty {
      try source.client().call(
        ["MIGRATE", "127.0.0.1", String(target.port), "", "0", "5000", "KEYS"].map { Array($0.utf8) } + names)
    }
    let id = try nodeID(target)
    // The target first, then the source (which then answers MOVED), then the others.
    for s in [target, source] + servers.filter({ $0.port != target.port && $0.port != source.port && $0.pid != 0 }) {
      try s.client().call("CLUSTER", "SETSLOT", String(slot), "NODE", id)
    }
  }

  /// Held by `moveSlot`, and by a test that counts redirects over every slot: suites run
  /// in parallel, and another suite's move would be a MOVED there.
  static let layoutLock = NSRecursiveLock()

  /// Moves `slot` (and its keys) to `target` at once.
  func moveSlot(_ slot: Int, to target: RedisServer) throws {
    try Self.layoutLock.withLock {
      let source = try owner(ofSlot: slot)
      try beginMigration(slot: slot, to: target, moving: { _ in false })
      try finishMigration(slot: slot, from: source, to: target)
    }
  }

  /// One key name per hash slot, `k{tag}` with a tag found for each slot.
  static let keyPerSlot: [String] = {
    var out = [String?](repeating: nil, count: ClusterSlots.count)
    var missing = ClusterSlots.count
    var i = 0
    while missing > 0 {
      let tag = String(i, radix: 36)
      let s = ClusterSlots.slot(Array(tag.utf8))
      if out[s] == nil {
        out[s] = "k{\(tag)}"
        missing -= 1
      }
      i += 1
    }
    return out.map { $0! }
  }()

  private static let atExit = SeenMutex<[RedisServer]>([])
  private static let hook: Void = { atexit { RedisClusterFixture.killAll() } }()

  private static func registerForExit(_ servers: [RedisServer]) {
    _ = hook
    atExit.withLock { $0 += servers }
  }

  private static func killAll() {
    for s in atExit.withLock({ $0 }) { s.stop() }
  }

  /// The 3-primary cluster the suites share (made on first use, killed at exit).
  static let shared: Result<RedisClusterFixture, Error> = Result { try RedisClusterFixture() }
}

import Foundation
import Glibc
import MappedCache
import MappedCacheRedis
import SystemCalls

/// A Redis Cluster of a run's or a test's own: `primaries` cluster nodes
/// (`RedisServerProcess`) and `replicas` replicas of each, joined by `redis-cli --cluster
/// create`, ready when it is healthy (`waitUntilHealthy`). (Sendable for a failover
/// thread: one failover at a time, and its owner waits for it before it stops the nodes.)
public final class RedisClusterProcesses: @unchecked Sendable {
  /// Every node, primaries first as `redis-cli` was given them.
  public let servers: [RedisServerProcess]

  /// Starts and joins the nodes, in `dir` (their node files are named after their
  /// ports; nil: each node in a temporary directory of its own), with `nodeArguments`
  /// (timeouts, ...) added to each; waits up to `timeout` seconds for the cluster to be
  /// healthy.
  public init(
    dir: String? = nil, primaries: Int = 3, replicas: Int = 0, nodeArguments: [String] = [], timeout: Double = 30
  ) throws {
    guard let cli = RedisServerProcess.cli else { throw RedisServerError("redis-cli is not on PATH") }
    var made: [RedisServerProcess] = []
    for _ in 0..<(primaries * (1 + replicas)) {
      made.append(try RedisServerProcess(dir: dir, clusterNode: true, arguments: nodeArguments))
    }
    servers = made
    let p = Process()
    p.executableURL = URL(fileURLWithPath: cli)
    p.arguments =
      ["--cluster", "create"] + made.map { "127.0.0.1:\($0.port)" } + [
        "--cluster-replicas", String(replicas), "--cluster-yes",
      ]
    p.standardInput = FileHandle.nullDevice
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    try p.run()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else {
      stop()
      throw RedisServerError("redis-cli --cluster create failed (status \(p.terminationStatus))")
    }
    try waitUntilHealthy(timeout: timeout, replicasPerPrimary: replicas)
  }

  deinit { stop() }

  /// The `redis-cluster://` URL naming `seeds` of the nodes (nil: all of them).
  public func url(seeds: Int? = nil) -> String {
    "redis-cluster://" + servers.prefix(seeds ?? servers.count).map { "127.0.0.1:\($0.port)" }.joined(separator: ",")
  }

  /// Kills every node.
  public func stop() { for s in servers { s.stop() } }

  /// The node listening on `port`.
  public func server(_ port: UInt16) -> RedisServerProcess? { servers.first { $0.port == port } }

  /// Waits until every running node says `cluster_state:ok` with all 16384 slots
  /// assigned, they agree on the owner of every slot, every replica's link to its
  /// primary is up and (when given) every primary has `replicasPerPrimary` replicas.
  public func waitUntilHealthy(timeout: Double = 20, replicasPerPrimary: Int? = nil) throws {
    let deadline = Clock.seconds() + timeout
    while !isHealthy(replicasPerPrimary: replicasPerPrimary) {
      guard Clock.seconds() < deadline else {
        throw RedisServerError("the cluster was not healthy within \(Int(timeout)) s")
      }
      SystemCall.sleep(microseconds: 20_000)
    }
  }

  private func isHealthy(replicasPerPrimary: Int?) -> Bool {
    var maps: [ClusterSlotMap] = []
    for s in servers where s.pid != 0 {
      let c = s.client(RedisOptions(connectTimeout: 0.5, commandTimeout: 1))
      guard let info = try? c.call("CLUSTER", "INFO").string,
        info.contains("cluster_state:ok"), info.contains("cluster_slots_assigned:16384"),
        let m = try? ClusterSlotMap.fromShards(
          c.call("CLUSTER", "SHARDS"), from: ClusterNode(host: "127.0.0.1", port: s.port)),
        m.isComplete, let repl = try? c.call("INFO", "replication").string
      else { return false }
      // A replica counts once it is in sync with its primary; a primary once its replicas are there.
      if repl.contains("role:slave") && !repl.contains("master_link_status:up") { return false }
      if let n = replicasPerPrimary, repl.contains("role:master"), !repl.contains("connected_slaves:\(n)\r") {
        return false
      }
      maps.append(m)
    }
    return maps.allSatisfy { $0 == maps[0] }
  }

  /// The cluster as the first node that answers sees it.
  public func view() throws -> [ClusterNodeLine] {
    for s in servers where s.pid != 0 {
      if let lines = try? RedisClusterAdmin.nodes(s.client(RedisOptions(connectTimeout: 0.5, commandTimeout: 1))) {
        return lines
      }
    }
    throw RedisServerError("no node of the cluster answered CLUSTER NODES")
  }

  /// Fails over the shard of `slot` the hard way: SIGKILLs its primary, promotes a replica
  /// (`CLUSTER FAILOVER FORCE`: the majority of primaries agrees, the dead one is not
  /// asked), waits until it serves, then restarts the killed node on its port (empty,
  /// with its node file), which rejoins as the new primary's replica and syncs. Returns
  /// the ports of the killed and of the promoted node.
  public func failOver(slot: Int) throws -> (killed: UInt16, promoted: UInt16) {
    let lines = try view()
    guard let primary = lines.first(where: { $0.isPrimary && $0.serves(slot: slot) }),
      let replica = lines.first(where: { !$0.isPrimary && !$0.isFailing && $0.primaryID == primary.id }),
      let primaryPort = primary.address?.port, let replicaPort = replica.address?.port,
      let victim = server(primaryPort), let promoted = server(replicaPort)
    else { throw RedisServerError("slot \(slot): no primary with a live replica") }
    victim.kill()
    let c = promoted.client(RedisOptions(connectTimeout: 0.5, commandTimeout: 1))
    try c.call("CLUSTER", "FAILOVER", "FORCE")
    let deadline = Clock.seconds() + 15
    while !((try? c.call("INFO", "replication").string)?.contains("role:master") ?? false) {
      guard Clock.seconds() < deadline else {
        throw RedisServerError("replica :\(replicaPort) was not promoted within 15 s")
      }
      SystemCall.sleep(microseconds: 10_000)
    }
    try victim.start()
    try waitUntilHealthy(timeout: 30, replicasPerPrimary: 1)
    return (primaryPort, replicaPort)
  }
}

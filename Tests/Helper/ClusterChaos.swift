import Foundation
import MappedCache
import MappedCacheRedis

/// Slot moves for the cluster chaos mode of `near-stale-check` (issue 18): the
/// `CLUSTER SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT NODE` sequence that
/// `redis-cli --cluster reshard` runs, for one slot.
enum ClusterChaos {
  /// Moves `slot` from its owner to the next primary of the cluster's slot map (read
  /// now); returns the new owner's port.
  @discardableResult
  static func moveSlot(_ slot: Int, _ cluster: RedisClient) throws -> UInt16 {
    guard let map = try cluster.refreshClusterSlotMap(), let source = map.owner(ofSlot: slot), map.nodes.count > 1,
      let i = map.nodes.firstIndex(of: source)
    else { throw CacheError.invalidArgument("slot \(slot) has no owner, or the cluster has one primary") }
    let target = map.nodes[(i + 1) % map.nodes.count]
    func client(_ n: ClusterNode) -> RedisClient {
      cluster.client(forPrimary: RedisEndpoint(address: .tcp(host: n.host, port: n.port)))
    }
    let (src, dst) = (client(source), client(target))
    guard let srcID = try src.call("CLUSTER", "MYID").string, let dstID = try dst.call("CLUSTER", "MYID").string
    else { throw CacheError.invalidArgument("no node ids") }
    let s = String(slot)
    do {
      try dst.call("CLUSTER", "SETSLOT", s, "IMPORTING", srcID)
      try src.call("CLUSTER", "SETSLOT", s, "MIGRATING", dstID)
      while true {
        let keys = (try src.call("CLUSTER", "GETKEYSINSLOT", s, "1000").elements ?? []).compactMap(\.bytes)
        if keys.isEmpty { break }
        try src.call(
          ["MIGRATE", target.host, String(target.port), "", "0", "5000", "REPLACE", "KEYS"].map { Array($0.utf8) }
            + keys)
      }
      try dst.call("CLUSTER", "SETSLOT", s, "NODE", dstID)
      try src.call("CLUSTER", "SETSLOT", s, "NODE", dstID)
    } catch {
      // Leave no half-made migration behind.
      _ = try? dst.call("CLUSTER", "SETSLOT", s, "STABLE")
      _ = try? src.call("CLUSTER", "SETSLOT", s, "STABLE")
      throw error
    }
    for n in map.nodes where n != source && n != target {
      _ = try? client(n).call("CLUSTER", "SETSLOT", s, "NODE", dstID)
    }
    return target.port
  }

  /// Promotes a replica of the primary of `slot` (`CLUSTER FAILOVER FORCE` on it: the
  /// failover path without the old primary's agreement); returns the replica's port.
  @discardableResult
  static func failover(_ slot: Int, _ cluster: RedisClient) throws -> UInt16 {
    guard let map = try cluster.refreshClusterSlotMap(), let primary = map.owner(ofSlot: slot) else {
      throw CacheError.invalidArgument("slot \(slot) has no owner")
    }
    let p = cluster.client(forPrimary: RedisEndpoint(address: .tcp(host: primary.host, port: primary.port)))
    guard let id = try p.call("CLUSTER", "MYID").string,
      let line = try p.call("CLUSTER", "REPLICAS", id).elements?.first?.string,
      case let fields = line.split(separator: " "), fields.count > 1,
      let address = fields[1].split(separator: "@").first, let colon = address.lastIndex(of: ":"),
      let port = UInt16(address[address.index(after: colon)...])
    else { throw CacheError.invalidArgument("the primary of slot \(slot) has no replica") }
    let host = String(address[..<colon])
    let replica = cluster.client(forPrimary: RedisEndpoint(address: .tcp(host: host, port: port)))
    try replica.call("CLUSTER", "FAILOVER", "FORCE")
    return port
  }
}

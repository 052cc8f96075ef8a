import Foundation
import MappedCache
import MappedCacheRedis

/// Slot moves for the cluster chaos mode of `near-stale-check` (issue 18): the
/// `CLUSTER SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT NODE` sequence that
/// `redis-cli --cluster reshard` runs, for one slot.
enum ClusterChaos {
  /// Moves `slot` from its owner to the next primary; returns the new owner's port.
  @discardableResult
  static func moveSlot(_ slot: Int, _ cluster: RedisClient) throws -> UInt16 {
    try RedisClusterAdmin.moveSlot(slot, cluster).port
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

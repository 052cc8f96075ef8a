import Foundation
import MappedCache

/// Operations on a cluster's layout that tools and tests need (not the cache's own path):
/// moving a slot between primaries, as `redis-cli --cluster reshard` does one slot at a
/// time.
public enum RedisClusterAdmin {
  /// The cluster as the node `client` talks to sees it: every line of its `CLUSTER
  /// NODES` reply, checked as the near cache's holder checks it (`ClusterNodesReport`).
  /// - Throws: ``CacheError/protocolViolation(endpoint:reason:)`` for a malformed reply,
  ///   or the client's error.
  public static func nodes(_ client: RedisClient) throws -> [ClusterNodeLine] {
    let node: ClusterNode
    switch client.endpoint.address {
    case .tcp(let host, let port): node = ClusterNode(host: host, port: port)
    default: node = ClusterNode(host: "127.0.0.1", port: 0)
    }
    return try ClusterNodesReport.parse(client.call("CLUSTER", "NODES"), from: node).lines
  }

  /// Moves `slot` from its owner to the next primary of the cluster's slot map (read
  /// now): `SETSLOT IMPORTING`/`MIGRATING`, `MIGRATE` of its keys in batches, then
  /// `SETSLOT NODE` on both ends and on the other primaries. A failure part way leaves
  /// both ends `STABLE` (no half-made migration). Returns the new owner.
  @discardableResult
  public static func moveSlot(_ slot: Int, _ cluster: RedisClient) throws -> ClusterNode {
    guard (0..<ClusterSlots.count).contains(slot), let map = try cluster.refreshClusterSlotMap(),
      let source = map.owner(ofSlot: slot), map.nodes.count > 1, let i = map.nodes.firstIndex(of: source)
    else { throw CacheError.invalidArgument("slot \(slot) has no owner, or the cluster has one primary") }
    let target = map.nodes[(i + 1) % map.nodes.count]
    func client(_ n: ClusterNode) -> RedisClient {
      cluster.client(forPrimary: RedisEndpoint(address: .tcp(host: n.host, port: n.port)))
    }
    let (src, dst) = (client(source), client(target))
    guard let srcID = try src.call("CLUSTER", "MYID").string, let dstID = try dst.call("CLUSTER", "MYID").string
    else { throw CacheError.invalidArgument("the cluster's nodes did not name themselves (CLUSTER MYID)") }
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
      _ = try? dst.call("CLUSTER", "SETSLOT", s, "STABLE")
      _ = try? src.call("CLUSTER", "SETSLOT", s, "STABLE")
      throw error
    }
    for n in map.nodes where n != source && n != target {
      _ = try? client(n).call("CLUSTER", "SETSLOT", s, "NODE", dstID)
    }
    return target
  }
}

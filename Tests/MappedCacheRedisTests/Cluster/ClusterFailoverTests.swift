import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import TestSupport
import Testing

@testable import MappedCacheRedis

/// A 3+3 cluster (a replica per primary, node timeout 1 s): a primary SIGKILLed, its
/// replica promoted by the cluster itself.
@Suite(.enabled(if: RedisClusterFixture.available, "redis-server or redis-cli is not installed"), .serialized)
struct ClusterFailoverTests {
  @Test func readsGoOnFromTheFileThenFromTheNewPrimary() throws {
    let cluster = try RedisClusterFixture(primaries: 3, replicas: 1, nodeTimeoutMs: 1000)
    defer { cluster.stop() }
    let prefix = "fo\(getpid()):"
    let host = try makeClusterHost(cluster, prefix: prefix, staleness: .seconds(1))
    defer { dispose(host) }
    #expect(waitReady(host))
    let writer = try RedisCache<String>(
      url: cluster.url(seeds: 6), keyPrefix: prefix, options: RedisOptions(connectTimeout: 0.3, commandTimeout: 0.5))
    let keys = (0..<60).map { "k\($0)" }
    for k in keys { try writer.setObject("v1-\(k)", forKey: k) }
    for k in keys { #expect(try host.object(forKey: k) == "v1-\(k)") }
    // Until the writer's own invalidations are all applied (some may land after a fill
    // and drop it once more), rounds of reads may still fetch; then they are all hits.
    #expect(quiet(host, keys))
    let slot = ClusterSlots.slot(prefix + keys[0])
    let victim = try cluster.owner(ofSlot: slot)
    // The replica has everything before its primary dies (WAIT says how many replicas
    // acknowledged; on a loaded machine one round may not be enough).
    #expect(eventually(10) { (try? victim.client().call("WAIT", "1", "500")) == .integer(1) })
    let fetches = host.statistics.remoteFetches
    victim.kill()
    // At once: the entries are served from the file (the fence is younger than the bound).
    for k in keys { #expect(try host.object(forKey: k) == "v1-\(k)") }
    #expect(host.statistics.remoteFetches == fetches, "served from the file, not from Redis")
    // The cluster promotes the replica; the holder finds it, tracks it, and reads go on.
    #expect(eventually(20) { (try? cluster.owner(ofSlot: slot).port).map { $0 != victim.port } ?? false })
    let promoted = try cluster.owner(ofSlot: slot)
    #expect(eventually(20) { (try? writer.setObject("v2-\(keys[0])", forKey: keys[0])) != nil })
    #expect(eventually(20) { (try? host.object(forKey: keys[0])) == "v2-\(keys[0])" })
    // (That read may have been a fetch: the holder finds the new primary within a few
    // reads of the map, as the nodes learn of the promotion.)
    #expect(
      eventually(20) {
        let nodes = host.statistics.heartbeatNodes
        return nodes.contains("port \(promoted.port)") && !nodes.contains("port \(victim.port)")
      })
    #expect(waitReady(host))
    // The other keys are still right, whichever primary now serves them.
    for k in keys.dropFirst() {
      let got = try host.object(forKey: k)
      #expect(got == "v1-\(k)", "\(k): \(got ?? "nil") (slot \(ClusterSlots.slot(prefix + k)), victim's: \(slot))")
    }
    // And a write on the new primary reaches the file through its tracker.
    try writer.setObject("v3", forKey: keys[0])
    #expect(eventually(10) { (try? host.object(forKey: keys[0])) == "v3" })
  }
}

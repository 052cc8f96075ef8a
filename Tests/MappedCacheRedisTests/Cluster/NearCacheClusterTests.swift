import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import SystemCalls
import TestSupport
import Testing

@testable import MappedCacheRedis

/// A near cache "host" in front of a cluster: its own file, this process its holder.
func makeClusterHost(
  _ cluster: RedisClusterFixture, prefix: String, staleness: Duration = .seconds(3),
  options: NearCacheOptions = NearCacheOptions(capacity: 4 << 20)
) throws -> NearCache<String> {
  let path = TestFiles.tempPath("redis-cl")
  let remote = try RedisCache<String>(
    url: cluster.url(), keyPrefix: prefix, options: RedisOptions(connectTimeout: 0.5, commandTimeout: 2))
  return try NearCache<String>(path: path, remote: remote, maxStaleness: staleness, options: options)
}

/// Reads `keys` in rounds until a round fetches nothing from Redis (invalidations of
/// earlier writes may still drop an entry just filled); false if that never happens.
func quiet(_ host: NearCache<String>, _ keys: [String]) -> Bool {
  eventually(10) {
    let before = host.statistics.remoteFetches
    for k in keys { _ = try? host.object(forKey: k) }
    return host.statistics.remoteFetches == before
  }
}

/// The near cache in front of the suite's 3-primary cluster: tracking per primary, per-node
/// fences, and slot buckets dropped when their slots move.
@Suite(.enabled(if: RedisClusterFixture.available, "redis-server or redis-cli is not installed"), .serialized)
struct NearCacheClusterTests {
  let cluster: RedisClusterFixture

  init() throws { cluster = try RedisClusterFixture.shared.get() }

  @Test func everyPrimaryIsTrackedOncePerHostAndItsWritesReachEveryHost() throws {
    let prefix = "nc\(getpid()):"
    let a = try makeClusterHost(cluster, prefix: prefix)
    let b = try makeClusterHost(cluster, prefix: prefix)
    defer { dispose(a, b) }
    #expect(waitReady(a) && waitReady(b))
    // One tracking connection per host on every primary (two hosts: two each).
    for s in cluster.servers {
      let list = try s.client().call("CLIENT", "LIST").string ?? ""
      let ours = list.split(separator: "\n").filter { $0.contains("name=mc-near-holder-\(getpid())") }
      #expect(ours.count == 2, "primary \(s.port): \(ours.count) tracking connections")
      for line in ours {
        let flags = line.split(separator: " ").first { $0.hasPrefix("flags=") }?.dropFirst(6) ?? ""
        #expect(flags.contains("t"), "a tracking client: \(line)")
      }
    }
    #expect(a.statistics.heartbeatAgeMilliseconds.count == 3)
    let keys = (0..<150).map { "k\($0)" }
    for k in keys { try a.setObject("v1-\(k)", forKey: k) }
    for k in keys { #expect(try b.object(forKey: k) == "v1-\(k)") }
    // Served from b's file once the writes' own invalidations are applied (one that lands
    // after a fill drops it once more).
    #expect(quiet(b, keys), "rounds of reads on b end up served from its file")
    for k in keys { #expect(try b.object(forKey: k) == "v1-\(k)") }
    // Writes through a, spread over the three primaries, reach b's file.
    for k in keys { try a.setObject("v2-\(k)", forKey: k) }
    #expect(eventually(10) { keys.allSatisfy { (try? b.object(forKey: $0)) == "v2-\($0)" } })
    #expect(b.statistics.invalidationsApplied > 0)
  }

  @Test func onlyTheEntriesOfAMovedSlotsBucketAreDropped() throws {
    let prefix = "mv\(getpid()):"
    let host = try makeClusterHost(cluster, prefix: prefix)
    defer { dispose(host) }
    #expect(waitReady(host))
    let keys = (0..<400).map { "k\($0)" }
    let writer = try RedisCache<String>(url: cluster.url(), keyPrefix: prefix)
    for k in keys { try writer.setObject("v-\(k)", forKey: k) }
    for k in keys { #expect(try host.object(forKey: k) == "v-\(k)") }
    #expect(quiet(host, keys))
    let fetched = SeenMutex<[String]>([])
    host.afterFetch = { k in fetched.withLock { $0.append(k) } }
    for k in keys { #expect(try host.object(forKey: k) == "v-\(k)") }
    #expect(fetched.withLock { $0 }.isEmpty, "every entry is a hit before the move")

    let slot = ClusterSlots.slot(prefix + keys[0])
    let word = NearLayout.bucketWord(slot: slot)
    let epochBefore = NearLayout.currentEpoch(host.local, word)
    let source = try cluster.owner(ofSlot: slot)
    let target = try #require(cluster.servers.first { $0.port != source.port })
    try cluster.moveSlot(slot, to: target)
    // The holder reads the map within its topology interval and drops that bucket.
    #expect(eventually(10) { NearLayout.currentEpoch(host.local, word) != epochBefore })
    #expect(waitReady(host))
    for k in keys { #expect(try host.object(forKey: k) == "v-\(k)") }
    let inBucket = Set(keys.filter { NearLayout.bucketWord(slot: ClusterSlots.slot(prefix + $0)) == word })
    #expect(inBucket.contains(keys[0]))
    #expect(Set(fetched.withLock { $0 }) == inBucket, "only the moved slot's bucket is refetched")
    #expect(fetched.withLock { $0 }.count == inBucket.count)
    #expect(((try? host.local.tierWord(NearLayout.Cluster.bucketsDropped)) ?? 0) >= 1)
    // The new owner's writes still reach the file.
    try writer.setObject("w", forKey: keys[0])
    #expect(eventually(10) { (try? host.object(forKey: keys[0])) == "w" })
  }

  @Test func theAgentTracksAClusterAndStatsShowItsNodesAndRedirects() throws {
    let prefix = "ag\(getpid()):"
    let path = TestFiles.tempPath("redis-clag")
    defer { TestFiles.cleanup(path) }
    let agent = try ChildProcess(Helper.tool, ["agent", path, "--redis", cluster.url(), "--prefix", prefix])
    defer {
      agent.kill()
      agent.wait()
    }
    #expect(eventually(10) { NearCacheStatistics.read(path: path)?.fenceFresh == true })
    let remote = try RedisCache<String>(url: cluster.url(), keyPrefix: prefix)
    let worker = try NearCache<String>(
      path: path, remote: remote, maxStaleness: .seconds(3), options: NearCacheOptions(standsForHolder: false))
    defer { worker.close() }
    try worker.setObject("1", forKey: "k")
    #expect(try worker.object(forKey: "k") == "1")
    // The slot moves under the worker's client: its next write is redirected.
    let slot = ClusterSlots.slot(prefix + "k")
    let source = try cluster.owner(ofSlot: slot)
    try cluster.moveSlot(slot, to: try #require(cluster.servers.first { $0.port != source.port }))
    try worker.setObject("2", forKey: "k")
    #expect(eventually(10) { (try? worker.object(forKey: "k")) == "2" })
    #expect(eventually(10) { (NearCacheStatistics.read(path: path)?.slotBucketsDropped ?? 0) >= 1 })

    let data = try ChildProcess.run(Helper.tool, ["stats", path, "--json"]).stdoutData
    let near = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["near_cache"] as? [String: Any]
    #expect((near?["heartbeat_nodes"] as? [String])?.count == 3)
    #expect((near?["heartbeat_age_ms"] as? [Any])?.count == 3)
    #expect((near?["moved_redirects"] as? Int ?? 0) >= 1)
    #expect((near?["slot_map_refreshes"] as? Int ?? 0) >= 1)
    #expect((near?["slot_buckets_dropped"] as? Int ?? 0) >= 1)
    let text = try ChildProcess.run(Helper.tool, ["stats", path, "--prometheus"]).stdout
    for s in cluster.servers {
      #expect(text.contains("mappedcache_near_node_heartbeat_age_ms{path=\"\(path)\",node=\"port \(s.port)\"}"))
    }
    #expect(text.contains("mappedcache_near_moved_redirects_total{path=\"\(path)\"}"))
    #expect(text.contains("mappedcache_near_lease_wins_total{path=\"\(path)\"} 0"))
  }
}

import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import Synchronization
import TestSupport
import Testing

@testable import MappedCacheRedis

/// The fence during a migration: keys already moved are written on the importing node
/// through ASK while the slot map still names the source, so the importer's tracker must
/// fence the slot's bucket. A 3-primary cluster of the suite's own (slots move in it, and
/// its nodes get an ACL user of ours, whose tracking or `CLUSTER NODES` is refused on one
/// node at a time to break just that part of our holder).
@Suite(.enabled(if: RedisClusterFixture.available, "redis-server or redis-cli is not installed"), .serialized)
struct NearCacheAskFenceTests {
  static let fixture = Result { try RedisClusterFixture() }
  let cluster: RedisClusterFixture
  let user = "askfence\(getpid())"
  let password = "pw\(UInt64.random(in: 1...UInt64.max))"
  static let stalenessMs: UInt64 = 500

  init() throws {
    cluster = try Self.fixture.get()
    for s in cluster.servers {
      try s.client().call("ACL", "SETUSER", user, "reset", "on", ">" + password, "~*", "&*", "+@all")
    }
  }

  /// A host whose holder logs in as our user (its connections named after the test).
  func host(_ prefix: String) throws -> NearCache<String> {
    let path = TestFiles.tempPath("redis-askf")
    let url = "redis-cluster://\(user):\(password)@127.0.0.1:\(cluster.servers[0].port)"
    let remote = try RedisCache<String>(
      url: url, keyPrefix: prefix,
      options: RedisOptions(connectTimeout: 0.5, commandTimeout: 2, clientName: "askfence-\(getpid())"))
    return try NearCache<String>(
      path: path, remote: remote, maxStaleness: .milliseconds(Int64(Self.stalenessMs)),
      options: NearCacheOptions(capacity: 4 << 20))
  }

  /// The cluster's primaries as the map names them, and the buckets each owns alone.
  func layout() throws -> (map: ClusterSlotMap, sole: [ClusterNode: [Int]]) {
    let map = try #require(try RedisClient(url: cluster.url()).refreshClusterSlotMap())
    var sole: [ClusterNode: [Int]] = [:]
    for b in 0..<NearLayout.bucketCount {
      let slots = (b * NearLayout.slotsPerBucket)..<((b + 1) * NearLayout.slotsPerBucket)
      let owners = Set(slots.compactMap { map.owner(ofSlot: $0) })
      if owners.count == 1, let o = owners.first { sole[o, default: []].append(b) }
    }
    return (map, sole)
  }

  /// Our user's rules on `server`: `rule` added (e.g. `-client|tracking`), or taken back.
  func acl(_ server: RedisServer, _ rule: String) throws {
    try server.client().call("ACL", "SETUSER", user, rule)
  }

  /// Our holder's tracking connections on `server`.
  func trackers(on server: RedisServer) throws -> [String] {
    let list = try server.client().call("CLIENT", "LIST").string ?? ""
    return list.split(separator: "\n").filter { line in
      let f = line.split(separator: " ")
      return f.contains("user=\(user)")
        && (f.first { $0.hasPrefix("flags=") }?.dropFirst(6).contains("t") ?? false)
    }.compactMap { line in line.split(separator: " ").first { $0.hasPrefix("id=") }.map { String($0.dropFirst(3)) } }
  }

  /// Whether a round of reads of `keys` (all giving `value`) fetches nothing from Redis
  /// within `timeout` seconds (a busy machine may hold the holder back for a moment).
  func hits(_ host: NearCache<String>, _ keys: [String], _ value: String, timeout: Double = 5) -> Bool {
    eventually(timeout) {
      let before = host.statistics.remoteFetches
      let right = keys.allSatisfy { (try? host.object(forKey: $0)) == value }
      return right && host.statistics.remoteFetches == before
    }
  }

  /// Reads `key` until `endNs` (uptime), noting when each read started and what it got.
  func readUntil(_ host: NearCache<String>, _ key: String, _ endNs: UInt64) -> [(startNs: UInt64, value: String?)] {
    var out: [(UInt64, String?)] = []
    while DispatchTime.now().uptimeNanoseconds < endNs {
      let t = DispatchTime.now().uptimeNanoseconds
      out.append((t, try? host.object(forKey: key)))
      usleep(2000)
    }
    return out
  }

  @Test func aBrokenImportersTrackerFencesTheMigratingBucketOnly() throws {
    let prefix = "af\(getpid()):"
    let (map, sole) = try layout()
    // A slot of a bucket A owns alone moves to B; A's other buckets and C's are not touched.
    let a = try #require(map.nodes.first { (sole[$0]?.count ?? 0) >= 2 })
    let b = try #require(map.nodes.first { $0 != a })
    let c = try #require(map.nodes.first { $0 != a && $0 != b && !(sole[$0] ?? []).isEmpty })
    let slot = sole[a]![0] * NearLayout.slotsPerBucket
    let (ka, kc) = (
      RedisClusterFixture.keyPerSlot[sole[a]![1] * NearLayout.slotsPerBucket],
      RedisClusterFixture.keyPerSlot[sole[c]![0] * NearLayout.slotsPerBucket]
    )
    let km = RedisClusterFixture.keyPerSlot[slot]
    #expect(ClusterSlots.slot(prefix + km) == slot)
    let (sa, sb) = (try #require(cluster.server(a.port)), try #require(cluster.server(b.port)))
    defer { _ = try? acl(sb, "+client|tracking") }

    let host = try host(prefix)
    defer { dispose(host) }
    #expect(waitReady(host))
    let writer = try RedisCache<String>(url: cluster.url(), keyPrefix: prefix)
    for k in [km, ka, kc] { try writer.setObject("v1", forKey: k) }
    #expect(quiet(host, [km, ka, kc]), "all three served from the file")
    let word = NearLayout.bucketWord(slot: slot)
    let epoch = NearLayout.currentEpoch(host.local, word)

    // The migration starts and km moves to B; the rest of the slot stays on A.
    try cluster.beginMigration(slot: slot, to: sb, moving: { $0 == prefix + km })
    let sent = try ClusterNodesReport.parse(sa.client().call("CLUSTER", "NODES"), from: a)
    #expect(sent.migrating == [ClusterNodesReport.Marker(slot: slot, peer: try cluster.nodeID(sb))])
    let got = try ClusterNodesReport.parse(sb.client().call("CLUSTER", "NODES"), from: b)
    #expect(got.importing == [ClusterNodesReport.Marker(slot: slot, peer: try cluster.nodeID(sa))])
    // The holder sees B import the slot: the bucket's entries are dropped once.
    #expect(eventually(10) { NearLayout.currentEpoch(host.local, word) != epoch })
    #expect(try host.object(forKey: km) == "v1")  // read from B through ASK
    #expect(quiet(host, [km, ka, kc]), "km is served from the file again, B's tracker fencing it")

    // B's tracker breaks: its connection killed, and tracking refused to the reconnects.
    try acl(sb, "-client|tracking")
    for id in try trackers(on: sb) { try sb.client().call("CLIENT", "KILL", "ID", id) }
    #expect(eventually(10) { (try? trackers(on: sb).isEmpty) == true })
    let asks = writer.client.clusterStatistics?.ask ?? 0
    try writer.setObject("v2", forKey: km)
    let acked = DispatchTime.now().uptimeNanoseconds
    #expect((writer.client.clusterStatistics?.ask ?? 0) > asks, "the write went to B through ASK")

    let fenceMisses = host.statistics.fenceMisses
    let boundNs = Self.stalenessMs * 1_000_000
    let reads = readUntil(host, km, acked + boundNs * 2)
    // Never the old value once the bound has passed since the write (20 ms for rounding).
    let late = reads.filter { $0.startNs > acked + boundNs + 20_000_000 }
    #expect(!late.isEmpty)
    #expect(late.allSatisfy { $0.value == "v2" }, "\(late.filter { $0.value != "v2" }.count) late reads of v1")
    #expect(reads.last?.value == "v2")
    #expect(host.statistics.fenceMisses > fenceMisses, "km's reads went to Redis")
    // The buckets B has no part in are still served from the file (while km's still are
    // not: a round that fetches nothing).
    #expect(hits(host, [ka, kc], "v1"), "A's other bucket and C's are fresh")
    #expect(!hits(host, [km], "v2", timeout: 0.3), "km's bucket is still fenced")

    // B's tracker comes back: km is served from the file again, with the new value.
    try acl(sb, "+client|tracking")
    #expect(eventually(10) { (try? trackers(on: sb).isEmpty) == false })
    #expect(quiet(host, [km]))
    #expect(try host.object(forKey: km) == "v2")
    try cluster.finishMigration(slot: slot, from: sa, to: sb)
    #expect(eventually(10) { (try? host.object(forKey: km)) == "v2" })
  }

  @Test func aPrimaryThatCannotSayWhatItMigratesHasItsBucketsFenced() throws {
    let prefix = "ag\(getpid()):"
    let (map, sole) = try layout()
    let c = try #require(map.nodes.first { !(sole[$0] ?? []).isEmpty })
    let a = try #require(map.nodes.first { $0 != c && !(sole[$0] ?? []).isEmpty })
    let sc = try #require(cluster.server(c.port))
    let kc = RedisClusterFixture.keyPerSlot[sole[c]![0] * NearLayout.slotsPerBucket]
    let ka = RedisClusterFixture.keyPerSlot[sole[a]![0] * NearLayout.slotsPerBucket]
    defer { _ = try? acl(sc, "+cluster|nodes") }
    let host = try host(prefix)
    defer { dispose(host) }
    #expect(waitReady(host))
    let writer = try RedisCache<String>(url: cluster.url(), keyPrefix: prefix)
    for k in [ka, kc] { try writer.setObject("v1", forKey: k) }
    #expect(quiet(host, [ka, kc]))
    // C refuses CLUSTER NODES to our holder (its tracker is fine): C might be migrating
    // slots anywhere, so its buckets go stale; A's do not.
    try acl(sc, "-cluster|nodes")
    let misses = host.statistics.fenceMisses
    var values: Set<String?> = []
    #expect(
      eventually(10) {
        values.insert(try? host.object(forKey: kc))
        return host.statistics.fenceMisses > misses
      }, "kc's reads go to Redis")
    #expect(values == ["v1"])
    #expect(hits(host, [ka], "v1"), "A's bucket is served from the file")
    #expect(!hits(host, [kc], "v1", timeout: 0.3), "C's bucket is still fenced")
    try acl(sc, "+cluster|nodes")
    #expect(quiet(host, [ka, kc]), "C answers again: its buckets are fresh")
  }

  @Test func anImporterThatOwnsNothingYetIsTrackedWhileItImports() throws {
    let prefix = "ae\(getpid()):"
    // A fourth node joins empty: it is in no slot map, only in CLUSTER NODES.
    let d = try RedisServer(
      clusterNode: true, arguments: ["--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"])
    defer { d.stop() }
    try d.client().call("ACL", "SETUSER", user, "reset", "on", ">" + password, "~*", "&*", "+@all")
    try cluster.servers[0].client().call("CLUSTER", "MEET", "127.0.0.1", String(d.port))
    let idD = try cluster.nodeID(d)
    #expect(
      eventually(20) {
        cluster.servers.allSatisfy { s in (try? s.client().call("CLUSTER", "NODES").string)?.contains(idD) == true }
          && ((try? d.client().call("CLUSTER", "INFO").string) ?? "").contains(
            "cluster_state:ok\r\ncluster_slots_assigned:16384")
      })
    let (map, sole) = try layout()
    let a = try #require(map.nodes.first { !(sole[$0] ?? []).isEmpty })
    let sa = try #require(cluster.server(a.port))
    let slot = sole[a]![0] * NearLayout.slotsPerBucket + 1
    let km = RedisClusterFixture.keyPerSlot[slot]
    let host = try host(prefix)
    defer { dispose(host) }
    #expect(waitReady(host))
    let writer = try RedisCache<String>(url: cluster.url(), keyPrefix: prefix)
    try writer.setObject("v1", forKey: km)
    #expect(hits(host, [km], "v1"))
    #expect(try trackers(on: d).isEmpty, "nothing to track on a node without slots")

    try cluster.beginMigration(slot: slot, to: d, moving: { $0 == prefix + km })
    // The holder finds D through A's marker and the address in A's CLUSTER NODES.
    #expect(eventually(10) { (try? trackers(on: d).count) == 1 }, "a tracker on the importer")
    #expect(hits(host, [km], "v1"), "km, read from D through ASK, is served from the file")
    try writer.setObject("v2", forKey: km)
    #expect(eventually(10) { (try? host.object(forKey: km)) == "v2" }, "D's invalidation reached the file")
    #expect(hits(host, [km], "v2"))
    // D's tracker breaks: km's bucket is fenced, and the next write is seen.
    try d.client().call("ACL", "SETUSER", user, "-client|tracking")
    for id in try trackers(on: d) { try d.client().call("CLIENT", "KILL", "ID", id) }
    try writer.setObject("v3", forKey: km)
    #expect(eventually(10) { (try? host.object(forKey: km)) == "v3" })
    #expect(!hits(host, [km], "v3", timeout: 0.3), "km's bucket is fenced while D's tracker is down")
    try d.client().call("ACL", "SETUSER", user, "+client|tracking")
    #expect(hits(host, [km], "v3"))

    // The migration ends: D owns the slot, and its tracker goes on as an owner's.
    try cluster.finishMigration(slot: slot, from: sa, to: d)
    #expect(eventually(10) { (try? host.object(forKey: km)) == "v3" })
    #expect(hits(host, [km], "v3"))
    #expect(try trackers(on: d).count == 1)
    // The slot goes back to A: D owns and imports nothing, and its tracker stops.
    let s = String(slot)
    try sa.client().call("CLUSTER", "SETSLOT", s, "IMPORTING", idD)
    try d.client().call("CLUSTER", "SETSLOT", s, "MIGRATING", try cluster.nodeID(sa))
    try d.client().call(
      ["MIGRATE", "127.0.0.1", String(a.port), "", "0", "5000", "KEYS", prefix + km].map { Array($0.utf8) })
    let idA = try cluster.nodeID(sa)
    try sa.client().call("CLUSTER", "SETSLOT", s, "NODE", idA)
    // D may already have become A's replica (a primary that lost its last slot does).
    for n in [d] + cluster.servers.filter({ $0.port != sa.port }) {
      _ = try? n.client().call("CLUSTER", "SETSLOT", s, "NODE", idA)
    }
    #expect(eventually(10) { (try? trackers(on: d).isEmpty) == true }, "the tracker of a node with no part retired")
    #expect(try host.object(forKey: km) == "v3")
    #expect(hits(host, [km], "v3"))
    d.stop()
    for n in cluster.servers { _ = try? n.client().call("CLUSTER", "FORGET", idD) }
  }
}

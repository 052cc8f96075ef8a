import Foundation
import Glibc
import MappedCache
import SystemCalls
import TestSupport
import Testing

@testable import MappedCacheRedis

/// Slots, hash tags, URLs and the parsing of slot maps and redirects (no server).
@Suite struct ClusterSlotTests {
  @Test func crc16MatchesTheXmodemCheckValue() {
    #expect(ClusterSlots.crc16(Array("123456789".utf8)) == 0x31C3)
    #expect(ClusterSlots.crc16([UInt8]()) == 0)
  }

  @Test func slotsMatchRedisForKnownKeys() {
    // Values from `CLUSTER KEYSLOT` on Redis 7.0.
    #expect(ClusterSlots.slot("foo") == 12182)
    #expect(ClusterSlots.slot("bar") == 5061)
    #expect(ClusterSlots.slot("123456789") == 0x31C3 % 16384)
  }

  @Test func hashTagsSelectTheBytesBetweenTheFirstBraces() {
    let user = ClusterSlots.slot("user1000")
    #expect(ClusterSlots.slot("{user1000}.following") == user)
    #expect(ClusterSlots.slot("{user1000}.followers") == user)
    #expect(ClusterSlots.slot("a{user1000}b{x}") == user)  // the first pair only
    // An empty tag: the whole key is hashed.
    #expect(ClusterSlots.slot("foo{}{bar}") == Int(ClusterSlots.crc16(Array("foo{}{bar}".utf8)) & 0x3fff))
    // `{{bar}}`: the tag runs from the first `{` to the first `}`: "{bar".
    #expect(ClusterSlots.slot("foo{{bar}}zap") == ClusterSlots.slot("{bar"))
    #expect(ClusterSlots.slot("foo{bar}{zap}") == ClusterSlots.slot("bar"))
    // No closing brace: the whole key.
    #expect(ClusterSlots.slot("foo{bar") == Int(ClusterSlots.crc16(Array("foo{bar".utf8)) & 0x3fff))
    #expect(ClusterSlots.slot("}{") == Int(ClusterSlots.crc16(Array("}{".utf8)) & 0x3fff))
  }

  @Test func clusterURLsGiveSeedsAndLogin() throws {
    let u = try ClusterURL("redis-cluster://127.0.0.1:7000,127.0.0.1:7001")
    #expect(u.seeds == [ClusterNode(host: "127.0.0.1", port: 7000), ClusterNode(host: "127.0.0.1", port: 7001)])
    let v = try ClusterURL("redis-cluster://ann:p%40ss@h1,[::1]:7002/")
    #expect(v.username == "ann" && v.password == "p@ss")
    #expect(v.seeds == [ClusterNode(host: "h1", port: 6379), ClusterNode(host: "::1", port: 7002)])
    for bad in ["redis-cluster://", "redis-cluster://h:0", "redis-cluster://h:99999", "redis-cluster://h:1/3"] {
      #expect(throws: CacheError.self) { try ClusterURL(bad) }
    }
    let c = try RedisClient(url: "redis-cluster://127.0.0.1:7000")
    #expect(c.isCluster)
    #expect(c.endpoint.description == "127.0.0.1:7000")
    #expect(try !RedisClient(url: "redis://127.0.0.1:7000").isCluster)
  }

  @Test func redirectsAreParsedAndHostileOnesRefused() throws {
    let from = ClusterNode(host: "10.0.0.1", port: 7000)
    #expect(
      try ClusterRedirect.parse("MOVED 3999 127.0.0.1:6381", from: from)
        == ClusterRedirect(kind: .moved, slot: 3999, node: ClusterNode(host: "127.0.0.1", port: 6381)))
    #expect(
      try ClusterRedirect.parse("ASK 1 :6380", from: from)
        == ClusterRedirect(kind: .ask, slot: 1, node: ClusterNode(host: "10.0.0.1", port: 6380)))
    #expect(try ClusterRedirect.parse("ERR wrong", from: from) == nil)
    for hostile in [
      "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED 1 h:0", "MOVED 1 h:70000", "MOVED 1", "MOVED x h:1",
      "ASK 1 h", "MOVED 1 h:1 extra", "MOVED 1 " + String(repeating: "a", count: 300) + ":1",
    ] {
      #expect(throws: CacheError.self) { try ClusterRedirect.parse(hostile, from: from) }
    }
  }

  @Test func slotMapsAreParsedFromShardsAndSlots() throws {
    let from = ClusterNode(host: "127.0.0.1", port: 7000)
    func node(_ role: String, _ port: Int64, _ ip: String = "127.0.0.1") -> RESPValue {
      .map([
        RESPPair(.bulkString(Array("role".utf8)), .bulkString(Array(role.utf8))),
        RESPPair(.bulkString(Array("port".utf8)), .integer(port)),
        RESPPair(.bulkString(Array("ip".utf8)), .bulkString(Array(ip.utf8))),
        RESPPair(.bulkString(Array("health".utf8)), .bulkString(Array("online".utf8))),
      ])
    }
    func shard(_ ranges: [Int64], _ nodes: [RESPValue]) -> RESPValue {
      .map([
        RESPPair(.bulkString(Array("slots".utf8)), .array(ranges.map { .integer($0) })),
        RESPPair(.bulkString(Array("nodes".utf8)), .array(nodes)),
      ])
    }
    let shards = RESPValue.array([
      shard([0, 8000], [node("replica", 7003), node("master", 7000)]),
      shard([8001, 16000, 16001, 16383], [node("master", 7001)]),
    ])
    let m = try ClusterSlotMap.fromShards(shards, from: from)
    #expect(m.isComplete)
    #expect(m.owner(ofSlot: 0)?.port == 7000 && m.owner(ofSlot: 8000)?.port == 7000)
    #expect(m.owner(ofSlot: 8001)?.port == 7001 && m.owner(ofSlot: 16383)?.port == 7001)
    #expect(m.nodes.count == 2)

    let slots = RESPValue.array([
      .array([.integer(0), .integer(100), .array([.bulkString(Array("".utf8)), .integer(7005)])])
    ])
    let s = try ClusterSlotMap.fromSlots(slots, from: from)
    #expect(s.owner(ofSlot: 50) == ClusterNode(host: "127.0.0.1", port: 7005))
    #expect(s.owner(ofSlot: 101) == nil && !s.isComplete)

    // Garbage: out-of-range slots, odd ranges, bad ports, wrong shapes.
    let garbage: [RESPValue] = [
      .integer(3),
      .array([shard([0, 16384], [node("master", 7000)])]),
      .array([shard([5, 2], [node("master", 7000)])]),
      .array([shard([0], [node("master", 7000)])]),
      .array([shard([0, 1], [node("master", 0)])]),
      .array([shard([0, 1], [node("master", 70000)])]),
      .array([shard([0, 1], [node("master", 7000, "bad host")])]),
      .array([.bulkString([1, 2, 3])]),
      // More ranges than there are slots.
      .array([shard(Array(repeating: [Int64(0), 0], count: 16385).flatMap { $0 }, [node("master", 7000)])]),
    ]
    for g in garbage {
      #expect(throws: CacheError.self) { try ClusterSlotMap.fromShards(g, from: from) }
    }
    for g: RESPValue in [
      .integer(1), .array([.array([.integer(0)])]),
      .array([.array([.integer(0), .integer(99_999), .array([.bulkString([]), .integer(1)])])]),
    ] {
      #expect(throws: CacheError.self) { try ClusterSlotMap.fromSlots(g, from: from) }
    }
  }
}

/// A fake cluster node whose slot map and redirects are hostile: clear errors, no trap.
@Suite struct ClusterHostileReplyTests {
  /// A node that owns every slot itself and answers each key with `answer(key)`.
  static func fake(
    shards: @escaping @Sendable (UInt16) -> RESPValue, answer: @escaping @Sendable (String, UInt16) -> [UInt8]
  )
    throws -> FakeServer
  {
    let port = SeenMutex<UInt16>(0)
    let f = try FakeServer { cmd in
      switch cmd.commandName {
      case "HELLO": return RESPValue.map([]).encoded()
      case "CLUSTER": return shards(port.withLock { $0 }).encoded()
      default: return answer(cmd.elements?.dropFirst().first?.string ?? "", port.withLock { $0 })
      }
    }
    port.withLock { $0 = f.port }
    return f
  }

  static func selfMap(_ port: UInt16) -> RESPValue {
    .array([
      .map([
        RESPPair(.bulkString(Array("slots".utf8)), .array([.integer(0), .integer(16383)])),
        RESPPair(
          .bulkString(Array("nodes".utf8)),
          .array([
            .map([
              RESPPair(.bulkString(Array("role".utf8)), .bulkString(Array("master".utf8))),
              RESPPair(.bulkString(Array("port".utf8)), .integer(Int64(port))),
              RESPPair(.bulkString(Array("ip".utf8)), .bulkString(Array("127.0.0.1".utf8))),
            ])
          ])),
      ])
    ])
  }

  @Test func hostileRedirectsAndMapsAreClearErrors() throws {
    let f = try Self.fake(shards: Self.selfMap) { key, _ in
      switch key {
      case "garbage": return Array("-MOVED 99999 nowhere\r\n".utf8)
      case "badhost": return Array("-MOVED 12 a\u{01}b:7000\r\n".utf8)
      case "portless": return Array("-MOVED \(ClusterSlots.slot("portless")) :0\r\n".utf8)
      default: return Array("+fine\r\n".utf8)
      }
    }
    defer { f.stop() }
    let c = try RedisClient(url: "redis-cluster://127.0.0.1:\(f.port)", options: RedisOptions(commandTimeout: 0.5))
    #expect(try c.call("GET", "ok").string == "fine")
    for key in ["garbage", "badhost", "portless"] {
      #expect(throws: CacheError.self) { try c.call("GET", key) }
    }
    // A redirect that loops back to the same node ends after a bounded number of tries.
    let g = try Self.fake(shards: Self.selfMap) { _, me in Array("-MOVED 1 127.0.0.1:\(me)\r\n".utf8) }
    defer { g.stop() }
    let loop = try RedisClient(url: "redis-cluster://127.0.0.1:\(g.port)")
    do {
      try loop.call("GET", "x")
      Issue.record("a redirect loop must fail")
    } catch CacheError.remoteError(_, let m) {
      #expect(m.contains("redirects"))
    }
    // The client is still usable.
    #expect(try c.call("GET", "ok").string == "fine")
  }

  @Test func aGarbageSlotMapIsAProtocolViolation() throws {
    let f = try Self.fake(
      shards: { _ in .array([.integer(7), .bulkString([0xff])]) }, answer: { _, _ in Array("+x\r\n".utf8) })
    defer { f.stop() }
    let c = try RedisClient(url: "redis-cluster://127.0.0.1:\(f.port)")
    #expect {
      try c.call("GET", "k")
    } throws: { e in
      if case CacheError.protocolViolation = e { return true }
      return false
    }
  }
}

/// Routing against a real 3-primary cluster (shared by the suite's tests).
@Suite(.enabled(if: RedisClusterFixture.available, "redis-server or redis-cli is not installed"), .serialized)
struct ClusterRoutingTests {
  let cluster: RedisClusterFixture

  init() throws { cluster = try RedisClusterFixture.shared.get() }

  @Test func everySlotIsWrittenAndReadOnItsPrimary() throws {
    RedisClusterFixture.layoutLock.lock()
    defer { RedisClusterFixture.layoutLock.unlock() }
    let c = try RedisClient(url: cluster.url())
    let keys = RedisClusterFixture.keyPerSlot
    // Pipelines of 512 commands over every node: split by primary, put back in order.
    for batch in stride(from: 0, to: keys.count, by: 512) {
      let cmds = keys[batch..<min(keys.count, batch + 512)].map {
        [Array("SET".utf8), Array($0.utf8), Array("v-\($0)".utf8)]
      }
      let rs = try c.pipeline(cmds)
      #expect(rs.allSatisfy { $0.string == "OK" })
    }
    for batch in stride(from: 0, to: keys.count, by: 512) {
      let part = Array(keys[batch..<min(keys.count, batch + 512)])
      // One MGET across many slots: split by slot, replies in the order asked.
      let r = try c.call([Array("MGET".utf8)] + part.map { Array($0.utf8) })
      #expect(r.elements?.map(\.string) == part.map { "v-\($0)" })
    }
    // Each key is on the primary that owns its slot (asked directly, no redirect).
    let map = try #require(try c.clusterSlotMap())
    #expect(map.isComplete && map.nodes.count == 3)
    for slot in stride(from: 0, to: ClusterSlots.count, by: 997) {
      let owner = try #require(map.owner(ofSlot: slot))
      let direct = try #require(cluster.server(owner.port)).client()
      #expect(try direct.call("GET", keys[slot]).string == "v-\(keys[slot])")
    }
    #expect(c.clusterStatistics?.moved == 0)
    // A multi-key UNLINK over many slots sums the counts.
    #expect(try c.call([Array("UNLINK".utf8)] + keys.prefix(100).map { Array($0.utf8) }) == .integer(100))
  }

  @Test func anySeedFindsTheWholeCluster() throws {
    let last = cluster.servers[2]
    let c = try RedisClient(
      url: "redis-cluster://127.0.0.1:1,127.0.0.1:\(last.port)", options: RedisOptions(connectTimeout: 0.2))
    try c.call("SET", "seeded", "1")
    #expect(try c.call("GET", "seeded").string == "1")
    #expect(try c.primaryEndpoints().count == 3)
  }

  @Test func movedDuringALiveSlotMigrationIsFollowed() throws {
    let c = try RedisClient(url: cluster.url(seeds: 3))
    let tag = "mv\(getpid())"
    let slot = ClusterSlots.slot(tag)
    let keys = (0..<20).map { "{\(tag)}:\($0)" }
    for k in keys { try c.call("SET", k, "a-\(k)") }
    let source = try cluster.owner(ofSlot: slot)
    let target = try #require(cluster.servers.first { $0.port != source.port })
    // Moved under the client's feet: its map still names the source.
    try cluster.moveSlot(slot, to: target)
    for k in keys { #expect(try c.call("GET", k).string == "a-\(k)") }
    let stats = try #require(c.clusterStatistics)
    #expect(stats.moved >= 1)
    // The map now names the target; the next requests go there directly.
    #expect(try c.clusterSlotMap()?.owner(ofSlot: slot)?.port == target.port)
    let before = try #require(c.clusterStatistics).moved
    for k in keys { try c.call("SET", k, "b-\(k)") }
    #expect(try #require(c.clusterStatistics).moved == before)
    #expect(try target.client().call("GET", keys[0]).string == "b-\(keys[0])")
    // And a RedisCache through the same URL sees it all.
    let rc = try RedisCache<String>(url: cluster.url(), keyPrefix: "{\(tag)}:")
    #expect(try rc.object(forKey: "3") == "b-\(keys[3])")
  }

  @Test func theSlotMapIsReadAgainOnATimerWithoutARedirect() throws {
    let c = try RedisClient(url: cluster.url(), options: RedisOptions(topologyRefreshInterval: 0.05))
    let tag = "tm\(getpid())"
    let slot = ClusterSlots.slot(tag)
    try c.call("SET", "{\(tag)}", "1")
    let source = try cluster.owner(ofSlot: slot)
    let target = try #require(cluster.servers.first { $0.port != source.port })
    try cluster.moveSlot(slot, to: target)
    // Keyless requests only (no redirect can happen): the timer alone brings the move in.
    #expect(
      eventually(10) {
        _ = try? c.call("PING")
        return (try? c.clusterSlotMap()?.owner(ofSlot: slot)?.port) == target.port
      })
    #expect(c.clusterStatistics?.moved == 0)
    #expect((c.clusterStatistics?.slotMapRefreshes ?? 0) >= 2)
  }

  @Test func askIsFollowedWhileASlotIsMigrating() throws {
    let c = try RedisClient(url: cluster.url())
    let tag = "ask\(getpid())"
    let slot = ClusterSlots.slot(tag)
    let moved = "{\(tag)}:moved"
    let stays = "{\(tag)}:stays"
    let fresh = "{\(tag)}:new"
    try c.call("SET", moved, "m")
    try c.call("SET", stays, "s")
    let source = try cluster.owner(ofSlot: slot)
    let target = try #require(cluster.servers.first { $0.port != source.port })
    try cluster.beginMigration(slot: slot, to: target, moving: { $0 == moved })
    // The moved key: the source answers ASK, the target serves it after ASKING.
    #expect(try c.call("GET", moved).string == "m")
    #expect(try #require(c.clusterStatistics).ask >= 1)
    // The key that stayed is still served by the source; a new key is written on the target.
    #expect(try c.call("GET", stays).string == "s")
    try c.call("SET", fresh, "n")
    let onTarget = try target.client().pipeline([[Array("ASKING".utf8)], [Array("GET".utf8), Array(fresh.utf8)]])
    #expect(onTarget[1].string == "n")
    // ASK does not change the map: the slot still belongs to the source.
    #expect(try c.clusterSlotMap()?.owner(ofSlot: slot)?.port == source.port)
    try cluster.finishMigration(slot: slot, from: source, to: target)
    for (k, v) in [(moved, "m"), (stays, "s"), (fresh, "n")] { #expect(try c.call("GET", k).string == v) }
  }

  @Test func removeAllScansEveryPrimary() throws {
    let tag = "ra\(getpid()):"
    let rc = try RedisCache<String>(url: cluster.url(), keyPrefix: tag)
    for i in 0..<60 { try rc.setObject("v\(i)", forKey: "\(i)") }
    let other = try RedisClient(url: cluster.url())
    try other.call("SET", "keep-\(tag)", "1")
    #expect(try rc.removeAllKeys() == 60)
    #expect(try rc.object(forKey: "7") == nil)
    #expect(try other.call("GET", "keep-\(tag)").string == "1")
  }
}

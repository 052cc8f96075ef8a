import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import Synchronization
import TestSupport
import Testing

@testable import MappedCacheRedis

struct User: Codable, Equatable, Sendable {
  var id: Int
  var name: String
}

/// A near cache "host": its own file, with the test process standing for its holder.
///
/// The staleness bound and the command timeout are generous by default, so that a test
/// that counts fetches is not upset by a holder starved of CPU on a loaded machine (the
/// fence would age, or a slow PING end the session); tests of the bound set their own.
func makeHost(
  _ server: RedisServer, prefix: String = "t:", staleness: Duration = .seconds(3),
  commandTimeout: Double = 2,
  options: NearCacheOptions = NearCacheOptions(capacity: 4 << 20)
) throws -> NearCache<String> {
  let path = TestFiles.tempPath("redis")
  let remote = try RedisCache<String>(
    url: server.url, keyPrefix: prefix,
    options: RedisOptions(connectTimeout: 0.3, commandTimeout: commandTimeout))
  return try NearCache<String>(path: path, remote: remote, maxStaleness: staleness, options: options)
}

/// A private Redis server, a host in front of it (`makeHost`'s `staleness` and `options`)
/// whose holder is ready, and a plain client of the server, for `body`; the host disposed
/// and the server stopped after.
func withReadyHost(
  staleness: Duration = .seconds(3), options: NearCacheOptions = NearCacheOptions(capacity: 4 << 20),
  _ body: (RedisServer, NearCache<String>, RedisClient) throws -> Void
) throws {
  let server = try RedisServer.forTest()
  defer { server.stop() }
  let host = try makeHost(server, staleness: staleness, options: options)
  defer { dispose(host) }
  #expect(waitReady(host))
  try body(server, host, server.client())
}

/// Closes each host and removes its file and its holder file.
func dispose(_ caches: NearCache<String>...) {
  for c in caches {
    c.close()
    TestFiles.cleanup(c.local.path)
  }
}

/// Waits until the host's holder runs and its fence is fresh.
func waitReady(_ c: NearCache<String>, _ timeout: Double = 20) -> Bool {
  eventually(timeout) { c.statistics.fenceFresh && c.statistics.holderPID != nil }
}

@Suite(.enabled(if: RedisServer.available, "redis-server is not installed"), .serialized)
struct RedisCacheTests {
  @Test func getSetExpiryRemoveAndRemoveAllOfItsPrefixOnly() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let users = try RedisCache<User>(url: server.url, keyPrefix: "users:")
    let raw = server.client()
    _ = try raw.call("SET", "other:1", "keep")
    try users.setObject(User(id: 1, name: "Ada"), forKey: "1", expires: .seconds(300))
    try users.setObject(User(id: 2, name: "Bob"), forKey: "2")
    #expect(try users.object(forKey: "1") == User(id: 1, name: "Ada"))
    guard case .integer(let pttl) = try raw.call("PTTL", "users:1") else {
      Issue.record("no PTTL")
      return
    }
    #expect(pttl > 290_000 && pttl <= 300_000)
    #expect(try raw.call("PTTL", "users:2") == .integer(-1))
    guard case .date(let d)? = try users.objectAndExpiry(forKey: "1")?.expires else {
      Issue.record("no expiry")
      return
    }
    #expect(abs(d.timeIntervalSinceNow - 300) < 10)
    // An expiry already past removes the key.
    try users.setObject(User(id: 2, name: "Bob"), forKey: "2", expires: .date(Date(timeIntervalSinceNow: -1)))
    #expect(try users.object(forKey: "2") == nil)
    #expect(try users.removeObject(forKey: "1"))
    #expect(try !users.removeObject(forKey: "1"))
    for i in 0..<2500 { try users.setObject(User(id: i, name: "u"), forKey: "\(i)") }
    #expect(try users.removeAllKeys() == 2500)
    #expect(try raw.call("DBSIZE") == .integer(1))
    #expect(try raw.call("GET", "other:1").string == "keep")
    // No prefix: removeAll refuses rather than emptying the database.
    let bare = try RedisCache<String>(url: server.url)
    #expect(throws: CacheError.self) { try bare.removeAllObjects() }
    #expect(throws: CacheError.emptyKey) { try users.object(forKey: "") }
  }

  @Test func valuesAreTheBytesSharedCacheStoresAndBadOnesFailForTheirKeyOnly() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let path = TestFiles.tempPath("redis-codec")
    defer { unlink(path) }
    let file = try SharedCache<User>(path: path, capacity: 1 << 20)
    let ada = User(id: 7, name: "Ada")
    try file.setObject(ada, forKey: "k")
    let fileBytes = try file.withBytes(forKey: "k") { Array($0) }
    let users = try RedisCache<User>(url: server.url, keyPrefix: "u:")
    try users.setObject(ada, forKey: "7")
    let redisBytes = try server.client().call("GET", "u:7").bytes
    #expect(redisBytes == fileBytes)
    // Bytes written by another client in the same format read back as the value.
    _ = try server.client().call([
      Array("SET".utf8), Array("u:8".utf8), try file.encodedBytes(of: User(id: 8, name: "Eve")),
    ])
    #expect(try users.object(forKey: "8") == User(id: 8, name: "Eve"))
    _ = try server.client().call("SET", "u:9", "garbage")
    #expect(
      performing: { try users.object(forKey: "9") },
      throws: { e in
        if case CacheError.decodingFailed(let k, _) = e { return k == "9" }
        return false
      })
    #expect(try users.object(forKey: "7") == ada)
    // Value limits on both sides.
    let small = try RedisCache<[UInt8]>(url: server.url, keyPrefix: "b:", maxValueSize: 100)
    #expect(throws: CacheError.valueTooLarge(size: 101, limit: 100)) {
      try small.setObject([UInt8](repeating: 1, count: 101), forKey: "x")
    }
    _ = try server.client().call([Array("SET".utf8), Array("b:y".utf8), [UInt8](repeating: 2, count: 5000)])
    let tight = try RedisCache<[UInt8]>(
      url: server.url, keyPrefix: "b:", options: RedisOptions(limits: RESPLimits(maxBulkLength: 1000)))
    #expect(
      performing: { try tight.object(forKey: "y") },
      throws: { e in
        if case CacheError.protocolViolation = e { return true }
        return false
      })
  }

  /// One codec for every tier: the bytes `SharedCache<T>` stores are `TierCodec`'s (which
  /// the Redis tier writes and the near cache's hit decodes), and they decode back.
  @Test func everyTierStoresAndDecodesTheSameBytes() throws {
    let path = TestFiles.tempPath("tier-codec")
    defer { TestFiles.cleanup(path) }
    func same<T: Codable & Equatable>(_ v: T) throws {
      defer { TestFiles.cleanup(path) }
      let bytes = try TierCodec<T>().encode(v)
      try SharedCache<T>(path: path, capacity: 1 << 20).setObject(v, forKey: "k")
      #expect(try CacheFile(path: path).get(Array("k".utf8))?.value == bytes, "\(T.self)")
      #expect(try bytes.withUnsafeBytes { try TierCodec<T>().decode($0, forKey: "k") } == v)
    }
    try same("héllo")
    try same([UInt8]([0, 1, 255]))
    try same(-42)
    try same(3.5)
    try same(User(id: 3, name: "Cy"))
    try same(["a": [1, 2]])
    #expect(throws: CacheError.self) {
      try [UInt8]([1, 2, 3]).withUnsafeBytes { try TierCodec<Int>().decode($0, forKey: "k") }
    }
  }
}

import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import RedisFaultProxy
import TestSupport
import Testing

@testable import MappedCacheRedis

// Network faults between a host and Redis, made by a proxy (black hole, reset, delay),
// and CLIENT PAUSE: no value served later than maxStaleness + 50 ms after its overwrite.

@Suite(.enabled(if: RedisServer.available, "redis-server is not installed"), .serialized)
struct NearCacheFaultTests {
  /// Overwrites `key` directly in Redis and reads it on `host` for `watch` seconds; returns
  /// how long after the write was acknowledged `host` still served the old value.
  func staleWindow(
    _ host: NearCache<String>, _ raw: RedisClient, key: String, old: String, new: String,
    watch: Double = 1
  ) throws -> Double {
    _ = try raw.call("SET", "t:" + key, new)
    let ack = Date()
    var lastOld = 0.0
    while Date().timeIntervalSince(ack) < watch {
      let t = Date().timeIntervalSince(ack)  // before the read: when it was served
      let v = try? host.object(forKey: key)  // errors (Redis unreachable) are not stale serves
      if v == old { lastOld = t }
      if v == new { break }
    }
    return lastOld
  }

  @Test func aBlackHoleAResetOrADelayFencesEntriesWithinTheBound() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let proxy = try FaultProxy(to: server.port)
    defer { proxy.stop() }
    let path = TestFiles.tempPath("redis-fault")
    defer { TestFiles.cleanup(path) }
    let remote = try RedisCache<String>(
      url: proxy.url, keyPrefix: "t:",
      options: RedisOptions(connectTimeout: 0.3, commandTimeout: 0.3))
    let host = try NearCache<String>(
      path: path, remote: remote, maxStaleness: .milliseconds(200),
      options: NearCacheOptions(capacity: 4 << 20))
    defer { host.close() }
    let raw = server.client()
    for (i, mode) in [FaultProxy.Mode.blackHole, .reset, .delay(milliseconds: 400)].enumerated() {
      proxy.mode = .pass
      #expect(eventually(20) { host.statistics.fenceFresh }, "\(mode)")
      let key = "k\(i)"
      let before = host.statistics.invalidationsReceived
      _ = try raw.call("SET", "t:" + key, "old")
      #expect(eventually(10) { host.statistics.invalidationsReceived > before })
      #expect(try host.object(forKey: key) == "old")
      let epoch = host.statistics.epoch
      proxy.mode = mode
      let stale = try staleWindow(host, raw, key: key, old: "old", new: "new")
      #expect(stale <= 0.2 + 0.05, "\(mode): the old value was served \(stale) s after the write")
      #expect(host.statistics.fenceMisses > 0)
      // Healed: the holder reconnects (a new epoch: the lost invalidation cannot matter).
      proxy.mode = .pass
      #expect(eventually(20) { host.statistics.fenceFresh }, "\(mode): \(host.statistics)")
      if mode != .delay(milliseconds: 400) {
        // The connection was lost (a PING timed out, or reset): a new session, a new epoch.
        #expect(host.statistics.epoch > epoch, "\(mode): \(host.statistics)")
      }
      #expect(eventually(5) { (try? host.object(forKey: key)) == "new" })
    }
  }

  @Test func clientPauseFencesAndTheSameSessionResumes() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let b = try makeHost(server, staleness: .milliseconds(200), commandTimeout: 1)
    defer { dispose(b) }
    #expect(waitReady(b))
    let raw = server.client()
    _ = try raw.call("SET", "t:p", "v")
    #expect(eventually(10) { b.statistics.invalidationsReceived >= 1 })
    #expect(try b.object(forKey: "p") == "v")
    let epoch = b.statistics.epoch
    // A pause longer than maxStaleness (shorter than the command timeout): the holder's
    // PING waits, the fence ages out.
    _ = try raw.call("CLIENT", "PAUSE", "600", "ALL")
    #expect(eventually(1) { !b.statistics.fenceFresh })
    #expect(try b.local.containsObject(forKey: "p"))
    // After it, the same session goes on: nothing was lost, the entry is served again.
    #expect(eventually(10) { b.statistics.fenceFresh })
    #expect(b.statistics.epoch == epoch)
    let fetches = b.statistics.remoteFetches
    #expect(try b.object(forKey: "p") == "v")
    #expect(b.statistics.remoteFetches == fetches)
  }
}

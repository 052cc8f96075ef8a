import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import Synchronization
import SystemCalls
import TestSupport
import Testing

@testable import MappedCacheRedis

// NearCache with every "host" (cache file) in the test process: reads, writes,
// invalidation across hosts, the read/invalidate race, faults of the connection.

@Suite(.enabled(if: RedisServer.available, "redis-server is not installed"), .serialized)
struct NearCacheInProcessTests {
  @Test func readsWritesAndInvalidationsAcrossTwoHosts() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let a = try makeHost(server)
    let b = try makeHost(server)
    defer { dispose(a, b) }
    #expect(waitReady(a) && waitReady(b))
    #expect(a.statistics.isHolder && b.statistics.isHolder)
    try a.setObject("v1", forKey: "k", expires: .seconds(60))
    // (B's holder hears of that SET too; a fill before it did would be removed by it,
    // conservatively, and fetched once more.)
    #expect(eventually(10) { b.statistics.invalidationsReceived >= 1 })
    #expect(try b.object(forKey: "k") == "v1")  // miss: from Redis, back-filled
    let fetches = b.statistics.remoteFetches
    for _ in 0..<100 { #expect(try b.object(forKey: "k") == "v1") }
    #expect(b.statistics.remoteFetches == fetches)  // every later read was local
    #expect(try b.local.containsObject(forKey: "k"))
    // The local entry expires with Redis's TTL.
    guard case .date(let d)? = try b.local.expiry(forKey: "k") else {
      Issue.record("no local expiry")
      return
    }
    #expect(abs(d.timeIntervalSinceNow - 60) < 5)
    // A write on A reaches B's file through B's holder, not through B reading Redis.
    try a.setObject("v2", forKey: "k")
    #expect(eventually(10) { (try? b.local.containsObject(forKey: "k")) == false })
    #expect(b.statistics.invalidationsApplied >= 1)
    #expect(try b.object(forKey: "k") == "v2")
    #expect(try a.object(forKey: "k") == "v2")  // read-your-writes on the writing host
    #expect(try a.removeObject(forKey: "k"))
    #expect(eventually(10) { (try? b.object(forKey: "k")) == .some(nil) })
    // Many keys invalidated at once arrive in batches.
    for i in 0..<200 { try a.setObject("x\(i)", forKey: "m\(i)") }
    for i in 0..<200 { #expect(try b.object(forKey: "m\(i)") == "x\(i)") }
    let raw = server.client()
    _ = try raw.pipeline((0..<200).map { ["SET", "t:m\($0)", "y\($0)"].map { Array($0.utf8) } })
    #expect(eventually(10) { (0..<200).allSatisfy { (try? b.local.containsObject(forKey: "m\($0)")) == false } })
    for i in 0..<200 { #expect(try b.object(forKey: "m\(i)") == "y\(i)") }
    // removeAll: the prefix's keys in Redis, and every entry of the file by epoch.
    try a.removeAllObjects()
    #expect(try a.object(forKey: "m1") == nil)  // at once on the host that removed
    #expect(eventually(10) { (try? b.object(forKey: "m1")) == .some(nil) })  // through the invalidations elsewhere
    #expect(try raw.call("DBSIZE") == .integer(0))
  }

  /// The race: a fill's GET returns v1, then v2 is written and its invalidation applied,
  /// then the fill stores. With placeholders the late v1 is dropped; without, it stays.
  @Test func aFetchOverlappingAnInvalidationIsNotStored() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let raw = server.client()
    for usePlaceholders in [true, false] {
      let b = try makeHost(server)
      defer { dispose(b) }
      #expect(waitReady(b))
      b.usePlaceholders = usePlaceholders
      let before = b.statistics.invalidationsReceived
      _ = try raw.call("SET", "t:race", "v1")
      #expect(eventually(10) { b.statistics.invalidationsReceived > before })  // that SET's own invalidation
      let applied = b.statistics.invalidationsReceived
      b.afterFetch = { key in
        // Between the GET's reply and the store: another host writes, and this host's
        // holder applies the invalidation before the fill goes on.
        _ = try? raw.call("SET", "t:race", "v2")
        _ = eventually(10) { b.statistics.invalidationsReceived > applied }
      }
      #expect(try b.object(forKey: "race") == "v1")  // what the GET saw, before the write
      b.afterFetch = nil
      #expect(b.statistics.invalidationsReceived > applied)  // the interleaving really happened
      let later = try b.object(forKey: "race")
      if usePlaceholders {
        #expect(later == "v2")  // the late v1 was dropped
      } else {
        #expect(later == "v1")  // the race, shown: stale until its TTL
      }
      _ = try raw.call("DEL", "t:race")
    }
  }

  @Test func killingTheTrackingConnectionBumpsTheEpochAndOnlyOldEntriesRefill() throws {
    try withReadyHost { _, b, raw in
      for i in 0..<10 { _ = try raw.call("SET", "t:k\(i)", "old\(i)") }
      #expect(eventually(5) { b.statistics.invalidationsReceived >= 10 })  // those SETs' own, first
      for i in 0..<10 { #expect(try b.object(forKey: "k\(i)") == "old\(i)") }
      #expect(eventually(5) { (0..<10).allSatisfy { (try? b.local.containsObject(forKey: "k\($0)")) == true } })
      let epoch = b.statistics.epoch
      // Kill the tracking connection and write while it is down: those invalidations are lost.
      guard let pid = b.statistics.holderPID else {
        Issue.record("no holder")
        return
      }
      _ = try raw.call("CLIENT", "KILL", "USER", "default", "SKIPME", "yes")
      _ = try raw.call("SET", "t:k3", "new3")
      #expect(eventually(10) { b.statistics.epoch > epoch && b.statistics.fenceFresh })
      #expect(b.statistics.reconnects >= 1 && b.statistics.holderPID == pid)
      // Every entry of the old session is a miss, refilled once; the lost write is seen.
      #expect(try b.object(forKey: "k3") == "new3")
      let fetches = b.statistics.remoteFetches
      for i in 0..<10 where i != 3 { #expect(try b.object(forKey: "k\(i)") == "old\(i)") }
      #expect(b.statistics.remoteFetches == fetches + 9)
      #expect(b.statistics.epochMisses >= 9)
      for i in 0..<10 where i != 3 { #expect(try b.object(forKey: "k\(i)") == "old\(i)") }
      #expect(b.statistics.remoteFetches == fetches + 9)  // and then local again
    }
  }

  @Test func aDeadServerFencesEntriesWithinTheBoundAndARestartRefills() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let staleness = Duration.milliseconds(200)
    let b = try makeHost(server, staleness: staleness, commandTimeout: 0.5)
    let s = try makeHost(
      server, staleness: staleness, commandTimeout: 0.5,
      options: NearCacheOptions(capacity: 4 << 20, serveStale: true))
    defer { dispose(b, s) }
    #expect(waitReady(b) && waitReady(s))
    _ = try server.client().call("SET", "t:k", "v")
    // That SET's own invalidation first (it would remove a fill made before it).
    #expect(eventually(10) { b.statistics.invalidationsReceived >= 1 && s.statistics.invalidationsReceived >= 1 })
    #expect(try b.object(forKey: "k") == "v")
    #expect(try s.object(forKey: "k") == "v")
    #expect(try b.local.containsObject(forKey: "k") && s.local.containsObject(forKey: "k"))
    let killed = Date()
    server.kill()
    // Local reads go on while the last heartbeat is recent...
    var lastLocal = killed
    while Date().timeIntervalSince(killed) < 1 {
      let t = Date()  // before the read: a read served at t, however late it returns
      if (try? b.object(forKey: "k")) == "v" { lastLocal = t } else { break }
      usleep(1000)
    }
    let served = lastLocal.timeIntervalSince(killed)
    // ...and stop within maxStaleness (+ a heartbeat, a clock tick and scheduling slack).
    #expect(served < 0.2 + 0.05, "served \(served) s after the kill")
    #expect(
      performing: { try b.object(forKey: "k") },
      throws: { e in
        if case CacheError.remoteUnavailable = e { return true }
        return false
      })
    #expect(b.statistics.fenceMisses >= 1 && !b.statistics.fenceFresh)
    // serveStale serves and counts.
    #expect(try s.object(forKey: "k") == "v")
    #expect(s.statistics.staleServes >= 1)
    // A restart with an empty dataset: the holder reconnects, the old entry is gone.
    try server.start()
    #expect(waitReady(b) && waitReady(s))
    #expect(try b.object(forKey: "k") == nil)
    #expect(try s.object(forKey: "k") == nil)
  }

  /// A read that went to Redis past a stale fence stores what it got: once a late
  /// heartbeat, sent before the write, makes the fence fresh again without the write's
  /// invalidation, the file holds the newer value, not the one the reader already saw
  /// replaced (reads on a host never go back a version).
  @Test func aReadPastAStaleFenceReplacesTheFilesOlderCopy() throws {
    try withReadyHost(staleness: .milliseconds(100)) { _, a, raw in
      _ = try raw.call("SET", "t:k", "v1")
      #expect(eventually(10) { a.statistics.invalidationsReceived >= 1 })
      #expect(try a.object(forKey: "k") == "v1")
      #expect(try a.local.containsObject(forKey: "k"))
      // No holder from here on: no heartbeats, no invalidations applied.
      a.close()
      _ = try raw.call("SET", "t:k", "v2")
      #expect(eventually(5) { !a.statistics.fenceFresh })
      let misses = a.statistics.fenceMisses
      #expect(try a.object(forKey: "k") == "v2")
      #expect(a.statistics.fenceMisses == misses + 1)
      // The heartbeat that comes in late, as from a holder that was descheduled.
      NearLayout.storeFence(a.local, Clock.coarseMilliseconds())
      #expect(a.statistics.fenceFresh)
      let fetches = a.statistics.remoteFetches
      #expect(try a.object(forKey: "k") == "v2")
      #expect(a.statistics.remoteFetches == fetches)  // from the file
    }
  }

  @Test func flushallDropsEveryEntryLazily() throws {
    try withReadyHost { _, b, raw in
      _ = try raw.call("SET", "t:a", "1")
      #expect(eventually(10) { b.statistics.invalidationsReceived >= 1 })
      #expect(try b.object(forKey: "a") == "1")
      _ = try raw.call("FLUSHALL")
      #expect(eventually(10) { b.statistics.flushes >= 1 })
      #expect(try b.local.containsObject(forKey: "a"))  // still in the file (no wipe)...
      #expect(try b.object(forKey: "a") == nil)  // ...but never served
    }
  }

  @Test func getOrComputeRunsOnceForConcurrentCallersAndStoresInRedis() async throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let b = try makeHost(server)
    defer { dispose(b) }
    #expect(waitReady(b))
    let computed = Atomic<Int>(0)
    let start = ContinuousClock.now
    let results = try await withThrowingTaskGroup(of: (String, Bool).self) { group in
      for _ in 0..<8 {
        group.addTask { @Sendable in
          let r = try await b.object(forKey: "lazy", expires: .seconds(30)) { @Sendable () async throws -> String in
            computed.add(1, ordering: .relaxed)
            try await Task.sleep(nanoseconds: 200_000_000)
            return "made"
          }
          return (r.value, r.fromCache)
        }
      }
      var out: [(String, Bool)] = []
      for try await r in group { out.append(r) }
      return out
    }
    #expect(computed.load(ordering: .relaxed) == 1)
    #expect(results.allSatisfy { $0.0 == "made" })
    #expect(results.filter { !$0.1 }.count == 1)  // one computed, the others from cache
    #expect(try server.client().call("GET", "t:lazy").string == "made")
    guard case .integer(let ttl) = try server.client().call("PTTL", "t:lazy") else {
      Issue.record("no ttl")
      return
    }
    // Stored for 30 s from a moment after `start`: however slow the run (a sanitizer's),
    // no more than 30 s, and no less than 30 s less the time since `start`.
    let elapsed = start.duration(to: .now).components
    let elapsedMs = Int(elapsed.seconds) * 1000 + Int(elapsed.attoseconds / 1_000_000_000_000_000) + 1
    #expect(ttl <= 30_000 && ttl >= 30_000 - elapsedMs, "PTTL \(ttl) ms, \(elapsedMs) ms after the first call")
    // Redis down: the compute is called and its value returned.
    server.kill()
    let (v, fromCache) = try await b.object(forKey: "other") { "computed-offline" }
    #expect(v == "computed-offline" && !fromCache)
  }

  @Test func badValuesFailForTheirKeyOnlyAndMissesCanBeCached() throws {
    try withReadyHost(options: NearCacheOptions(capacity: 4 << 20, cacheMisses: 30)) { _, b, raw in
      // A String cache stores UTF-8; invalid bytes are a decodingFailed for that key.
      _ = try raw.call([Array("SET".utf8), Array("t:bad".utf8), [0xff, 0xfe]])
      _ = try raw.call("SET", "t:good", "fine")
      #expect(eventually(10) { b.statistics.invalidationsReceived >= 2 })
      for _ in 0..<2 {
        #expect(
          performing: { try b.object(forKey: "bad") },
          throws: { e in
            if case CacheError.decodingFailed(let k, _) = e { return k == "bad" }
            return false
          })
      }
      #expect(try !b.local.containsObject(forKey: "bad"))  // its placeholder was released
      #expect(try b.object(forKey: "good") == "fine")
      // A miss is remembered (one fetch), until a write of the key invalidates it.
      let f0 = b.statistics.remoteFetches
      for _ in 0..<5 { #expect(try b.object(forKey: "nothing") == nil) }
      #expect(b.statistics.remoteFetches == f0 + 1)
      _ = try raw.call("SET", "t:nothing", "now")
      #expect(eventually(10) { (try? b.object(forKey: "nothing")) == .some("now") })
    }
  }

  @Test func aReplyPastTheLimitsIsAProtocolViolationAndLeavesTheFileWhole() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let path = TestFiles.tempPath("redis-limits")
    defer { TestFiles.cleanup(path) }
    let remote = try RedisCache<String>(
      url: server.url, keyPrefix: "t:",
      options: RedisOptions(limits: RESPLimits(maxBulkLength: 1000)))
    let b = try NearCache<String>(
      path: path, remote: remote, maxStaleness: .seconds(3),
      options: NearCacheOptions(capacity: 4 << 20))
    defer { b.close() }
    #expect(eventually(20) { b.statistics.fenceFresh })
    let raw = server.client()
    _ = try raw.call("SET", "t:huge", String(repeating: "x", count: 5000))
    _ = try raw.call("SET", "t:small", "ok")
    #expect(eventually(10) { b.statistics.invalidationsReceived >= 2 })
    #expect(
      performing: { try b.object(forKey: "huge") },
      throws: { e in
        if case CacheError.protocolViolation(_, let why) = e { return why.contains("exceeds the limit") }
        return false
      })
    #expect(try !b.local.containsObject(forKey: "huge"))  // the placeholder is gone
    #expect(try b.object(forKey: "small") == "ok")  // the next request, on a new connection
    #expect(try b.local.verify().ok)
    // A key longer than the file's key limit goes to Redis every time.
    let long = String(repeating: "k", count: b.local.maxKeySize + 1)
    try b.setObject("far", forKey: long)
    #expect(try b.object(forKey: long) == "far")
    #expect(try b.removeObject(forKey: long))
    #expect(try b.object(forKey: long) == nil)
  }

  @Test func aFileOfAnotherTypeOrPrefixIsRefused() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let a = try makeHost(server, prefix: "p1:")
    defer { dispose(a) }
    let other = try RedisCache<String>(url: server.url, keyPrefix: "p2:")
    #expect(throws: CacheError.self) { try NearCache<String>(path: a.local.path, remote: other) }
    let typed = try RedisCache<Int>(url: server.url, keyPrefix: "p1:")
    #expect(throws: CacheError.self) { try NearCache<Int>(path: a.local.path, remote: typed) }
    #expect(throws: CacheError.self) {
      try NearCache<String>(path: a.local.path, remote: other, maxStaleness: .milliseconds(1))
    }
  }
}

import CheckedValues
import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// Expiry: .never / .seconds / .date, expired entries never returned, reclaimed by
/// removeExpiredObjects, by the eviction sweeper (expired first), and ahead of need by
/// the background sweeper. Short TTLs; waits are "eventually, within a generous bound".
@Suite struct CoreExpiryTests {
  /// Polls `cond` until it holds or `timeout` passes.
  private func eventually(_ timeout: TimeInterval = 20, _ cond: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      if try cond() { return true }
      usleep(10_000)
    }
    return try cond()
  }

  @Test func expiryKindsAreStoredAndReported() throws {
    let path = TestFiles.tempPath("exp-kinds")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<String>(path: path, capacity: 1 << 20)
    try c.setObject("n", forKey: "never")
    try c.setObject("n2", forKey: "never2", expires: .never)
    let when = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 3600).rounded(.down))
    try c.setObject("d", forKey: "date", expires: .date(when))
    let before = Date()
    try c.setObject("s", forKey: "secs", expires: .seconds(600))
    #expect(try c.expiry(forKey: "never") == .never)
    #expect(try c.expiry(forKey: "never2") == .never)
    #expect(try c.expiry(forKey: "date") == .date(when))
    guard case .date(let d)? = try c.expiry(forKey: "secs") else {
      Issue.record("seconds expiry should read back as a date")
      return
    }
    #expect(d.timeIntervalSince(before) > 599 && d.timeIntervalSince(before) < 602)
    #expect(try c.expiry(forKey: "missing") == nil)
    for k in ["never", "never2", "date", "secs"] { #expect(try c.object(forKey: k) != nil) }
  }

  @Test func pastAndZeroExpiriesAreNeverReturned() throws {
    let path = TestFiles.tempPath("exp-past")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<String>(path: path, capacity: 1 << 20)
    try c.setObject("a", forKey: "past", expires: .date(Date(timeIntervalSinceNow: -1)))
    try c.setObject("b", forKey: "epoch", expires: .date(Date(timeIntervalSince1970: 0)))
    try c.setObject("c", forKey: "zero", expires: .seconds(0))
    try c.setObject("d", forKey: "negative", expires: .seconds(-5))
    for k in ["past", "epoch", "zero", "negative"] {
      #expect(try c.object(forKey: k) == nil, "\(k)")
      #expect(try c.withBytes(forKey: k) { _ in true } == nil, "\(k)")
      #expect(try c.containsObject(forKey: k) == false, "\(k)")
      // Still present until reclaimed: served only when stale values are asked for.
      #expect(try c.object(forKey: k, allowingExpired: true) != nil, "\(k)")
    }
    // Far-future and extreme values are clamped, never a crash (a Double past UInt64.max
    // must not reach a trapping conversion).
    for (i, e) in [
      CacheExpiry.date(Date(timeIntervalSince1970: 1e18)), .date(.distantFuture),
      .seconds(1e300), .seconds(.greatestFiniteMagnitude),
    ].enumerated() {
      try c.setObject("far", forKey: "far\(i)", expires: e)
      #expect(try c.object(forKey: "far\(i)") == "far")
    }
    try c.setObject("nan", forKey: "nan", expires: .seconds(.nan))
    try c.setObject("nan", forKey: "nan2", expires: .date(Date(timeIntervalSince1970: .nan)))
    try c.setObject("past", forKey: "ancient", expires: .date(Date(timeIntervalSince1970: -1e18)))
    #expect(try c.object(forKey: "ancient") == nil)
    // .seconds(.infinity) means never.
    try c.setObject("inf", forKey: "inf", expires: .seconds(.infinity))
    #expect(try c.expiry(forKey: "inf") == .never)
  }

  @Test func shortTTLExpiresAndIsNeverReturnedAfterwards() throws {
    let path = TestFiles.tempPath("exp-ttl")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    let start = Date()
    for i in 0..<20 { try c.setObject([UInt8(i)], forKey: "t\(i)", expires: .seconds(0.3)) }
    // Every entry was set before this instant, so it expires 0.3 s after it at the latest
    // (on a loaded machine the sets themselves may take a while).
    let setsDone = Date()
    try c.setObject([99], forKey: "keep")
    // Right after the set, with far more than the clock's granularity to spare.
    if Date().timeIntervalSince(start) < 0.2 { #expect(try c.object(forKey: "t0") == [0]) }
    let expiresAt = setsDone.addingTimeInterval(0.3)
    // Poll: a read may succeed only if it started before the deadline (50 ms of slack for
    // the coarse clock). The time is taken before the read: a thread descheduled after a
    // read that was in time must not count as a late one.
    var sawGone = false
    let deadline = Date().addingTimeInterval(20)
    while Date() < deadline && !sawGone {
      for i in 0..<20 {
        let askedAt = Date()
        let got = try c.object(forKey: "t\(i)")
        if got != nil {
          #expect(askedAt < expiresAt.addingTimeInterval(0.05), "t\(i) returned after it expired")
        }
      }
      sawGone = try (0..<20).allSatisfy { try c.object(forKey: "t\($0)") == nil }
      usleep(20_000)
    }
    #expect(sawGone)
    #expect(try c.object(forKey: "keep") == [99])
    // Setting an expired key again makes it live again.
    try c.setObject([5], forKey: "t5", expires: .seconds(600))
    #expect(try c.object(forKey: "t5") == [5])
  }

  @Test func removeExpiredObjectsReclaimsExactlyTheExpired() throws {
    let path = TestFiles.tempPath("exp-remove")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    for i in 0..<300 {
      try c.setObject([UInt8](repeating: UInt8(i & 255), count: 40), forKey: "short\(i)", expires: .seconds(0.2))
      try c.setObject([UInt8](repeating: 1, count: 40), forKey: "long\(i)", expires: .seconds(3600))
      try c.setObject([UInt8](repeating: 2, count: 40), forKey: "never\(i)")
    }
    #expect(c.statistics.entries == 900)
    #expect(try eventually { try c.object(forKey: "short299") == nil })
    usleep(50_000)
    let expBefore = c.statistics.expirations
    let removed = try c.removeExpiredObjects()
    #expect(removed == 300)
    let s = c.statistics
    #expect(s.entries == 600)
    #expect(s.expirations - expBefore == 300)
    #expect(try c.removeExpiredObjects() == 0)
    for i in 0..<300 {
      #expect(try c.object(forKey: "long\(i)") != nil)
      #expect(try c.object(forKey: "never\(i)") != nil)
      #expect(try c.object(forKey: "short\(i)", allowingExpired: true) == nil, "reclaimed, not just hidden")
    }
    #expect(try c.verify().ok)
  }

  @Test func backgroundSweeperReclaimsAheadOfNeed() throws {
    let path = TestFiles.tempPath("exp-sweep")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
    for i in 0..<2000 {
      try c.setObject([UInt8](repeating: 3, count: 100), forKey: "s\(i)", expires: .seconds(0.25))
    }
    for i in 0..<100 { try c.setObject([4], forKey: "keep\(i)") }
    #expect(c.statistics.entries == 2100)
    // Small steps: a few hundred slots per tick, so the whole table takes many ticks.
    c.startSweeping(every: 0.02, slotsPerStep: 512)
    defer { c.stopSweeping() }
    // No reads or writes from here on: only the sweeper can reclaim them.
    #expect(eventually(30) { c.statistics.entries == 100 })
    let s = c.statistics
    #expect(s.expirations >= 2000)
    #expect(s.liveBytes == 100 * ("keepNN".utf8.count + 1) - 10)  // keep0..keep9 are one byte shorter
    c.stopSweeping()
    for i in 0..<100 { #expect(try c.object(forKey: "keep\(i)") == [4]) }
    #expect(try c.verify().ok)
  }

  @Test func sweeperOnAnotherHandleServesEveryProcess() throws {
    let path = TestFiles.tempPath("exp-sweep2")
    defer { TestFiles.cleanup(path) }
    let writer = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    let sweeper = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    for i in 0..<500 { try writer.setObject([1, 2, 3], forKey: "e\(i)", expires: .seconds(0.2)) }
    sweeper.startSweeping(every: 0.02)
    defer { sweeper.stopSweeping() }
    #expect(eventually(30) { writer.statistics.entries == 0 })
    #expect(writer.statistics.expirations == 500)
  }

  /// When a set needs room, expired entries go before live ones: a cache full of expired
  /// entries takes new ones (that are being read) without evicting any live entry.
  @Test func expiredEntriesGoFirstWhenRoomIsNeeded() throws {
    let path = TestFiles.tempPath("exp-first")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    var rng = SplitMix(11)
    var i = 0
    // Fill until the cache starts making room, all with a short TTL.
    while c.statistics.evictions + c.statistics.expirations == 0 {
      try c.setObject([UInt8](repeating: 1, count: rng.inRange(100...1000)), forKey: "old\(i)", expires: .seconds(0.2))
      i += 1
    }
    #expect(try eventually { try c.object(forKey: "old\(i - 1)") == nil })
    usleep(50_000)
    let before = c.statistics
    // Now about half the capacity again of live entries, each read once (so referenced).
    var written: [String] = []
    var bytes = 0
    while bytes < c.capacity / 2 {
      let n = rng.inRange(100...1000)
      let key = "new\(written.count)"
      try c.setObject([UInt8](repeating: 2, count: n), forKey: key)
      #expect(try c.object(forKey: key) != nil)
      written.append(key)
      bytes += n
    }
    let after = c.statistics
    #expect(after.expirations > before.expirations, "expired entries were reclaimed for room")
    #expect(after.evictions == before.evictions, "no live entry evicted while expired ones remained")
    for k in written { #expect(try c.object(forKey: k) != nil, "\(k)") }
  }
}

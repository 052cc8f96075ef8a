import CheckedValues
import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// Eviction: a set never fails for lack of space; sustained inserts far beyond capacity
/// keep the file consistent and probe runs short; memory efficiency once full; referenced
/// entries outlive unreferenced ones.
@Suite struct CoreEvictionTests {
  /// Inserts random-size values until `bytes` of values were written; calls `each` after
  /// every insert with the running count.
  private func churn(
    _ c: SharedCache<[UInt8]>, bytes: Int, sizes: ClosedRange<Int>, keySpace: Int = Int.max,
    seed: UInt64, each: (Int) throws -> Void = { _ in }
  ) throws {
    var rng = SplitMix(seed)
    var written = 0
    var n = 0
    let pattern = [UInt8]((0..<sizes.upperBound).map { UInt8(truncatingIfNeeded: $0 &* 131) })
    while written < bytes {
      let size = rng.inRange(sizes)
      let key = keySpace == Int.max ? "key-\(seed)-\(n)" : "key-\(rng.below(keySpace))"
      try c.setObject(Array(pattern[0..<size]), forKey: key)
      written += size
      n += 1
      try each(n)
    }
  }

  @Test(arguments: [false, true])
  func sustainedInsertsFarBeyondCapacityStayConsistent(partitioned: Bool) throws {
    // 2 MiB by default; MC_CORE_SUSTAINED_MIB=64 measures a larger cache (slow in debug).
    let cap = (Int(ProcessInfo.processInfo.environment["MC_CORE_SUSTAINED_MIB"] ?? "") ?? 2) << 20
    let (c, path) = try coreCache("ev-sustained", partitioned: partitioned, capacity: cap)
    defer { TestFiles.cleanup(path) }
    // Small values in several partitions, 100-1000 B in one.
    let sizes = partitioned ? 1...120 : 100...1000
    // 5x capacity first, then 45x more: the index's shape must not degrade with churn.
    try churn(c, bytes: 5 * cap, sizes: sizes, seed: 1)
    let early = c.check()
    #expect(early.ok, "\(early.problems)")
    try churn(c, bytes: 45 * cap, sizes: sizes, seed: 2)
    let late = c.check()
    #expect(late.ok, "\(late.problems)")
    let s = c.statistics
    #expect(s.evictions > 0)
    #expect(late.entries == s.entries && late.liveBytes == s.liveBytes)
    #expect(s.entries <= s.slotCount)
    // Removals empty their slot, nothing else is marked: the share of entries in their
    // second bucket stays what the index's load makes it.
    #expect(late.meanProbe < 0.7, "second-place share \(late.meanProbe)")
    #expect(late.meanProbe <= early.meanProbe * 1.5 + 0.1, "early \(early.meanProbe), late \(late.meanProbe)")
    // The bytes hold data: the index follows the entries (values of 100-1000 B fill the
    // logs, so the index is small), and live data is most of the file.
    #expect(s.fill > (partitioned ? 0.45 : 0.7), "fill \(s.fill)")
    print(
      "[core] 50x capacity (\(cap >> 20) MiB, \(sizes) B, partitioned \(partitioned)): entries \(s.entries)/\(s.slotCount) slots, second place \(late.meanProbe) (5x: \(early.meanProbe)), index \(s.indexBytes) B, fill \(s.fill)"
    )
  }

  /// Tiny entries: the index grows into the logs' space until the entries fill the bytes
  /// (the file holds entries of up to 8 value bytes at about 30 bytes each), with
  /// overwrites and removals mixed in; the index never limits the entries while the logs
  /// have room.
  @Test(arguments: [false, true])
  func tinyEntriesFillTheFilesBytes(partitioned: Bool) throws {
    let cap = 1 << 20
    let (c, path) = try coreCache("ev-tiny", partitioned: partitioned, capacity: cap)
    defer { TestFiles.cleanup(path) }
    let perEntry = 36  // a ~10-byte key, 4 value bytes on average, 9 of header, ~9 of index
    var rng = SplitMix(5)
    for n in 0..<(10 * cap / perEntry) {
      let key = rng.below(4) == 0 ? "re-\(rng.below(20_000))" : "tiny-\(n)"
      if rng.below(10) == 0 {
        _ = try c.removeObject(forKey: "re-\(rng.below(20_000))")
      } else {
        try c.setObject([UInt8](repeating: 9, count: rng.below(9)), forKey: key)
      }
    }
    let r = c.check()
    let s = c.statistics
    #expect(r.ok, "\(r.problems)")
    #expect(s.indexSplits > 0, "the index grew")
    #expect(s.entries * perEntry > cap * 6 / 10, "entries fill the bytes: \(s.entries)")
    #expect(s.logBytesUsed * 100 >= s.logBytes * 95, "the logs are full: \(s.logBytesUsed) of \(s.logBytes)")
    print(
      "[core] tiny entries (partitioned \(partitioned)): entries \(s.entries) in \(cap) B (\(cap / max(1, s.entries)) B each), index \(s.indexBytes) B of \(s.slotCount) slots, second place \(r.meanProbe)"
    )
  }

  /// Large entries: the index gives back the space it took for small ones, and the file
  /// fills with large entries' bytes.
  @Test func theIndexShrinksWhenEntriesGrow() throws {
    let cap = 2 << 20
    let (c, path) = try coreCache("ev-shrink", capacity: cap)
    defer { TestFiles.cleanup(path) }
    for n in 0..<(3 * cap / 40) { try c.setObject([UInt8](repeating: 1, count: 8), forKey: "small-\(n)") }
    let small = c.statistics
    for n in 0..<(3 * cap / 1000) { try c.setObject([UInt8](repeating: 2, count: 1000), forKey: "large-\(n)") }
    let large = c.statistics
    #expect(large.indexMerges > 0)
    #expect(large.indexBytes < small.indexBytes / 4, "index \(small.indexBytes) → \(large.indexBytes) bytes")
    #expect(large.fill > 0.8, "fill \(large.fill)")
    #expect(c.check().ok)
  }

  /// Values from 0 bytes to the cache's value limit, in a small cache: every set succeeds,
  /// the newest value is always readable, and the file stays consistent.
  @Test func setNeverFailsForLackOfSpaceWithLargeValues() throws {
    let (c, path) = try SharedCache<[UInt8]>.scratch("ev-large", options: CacheOptions(capacity: 1 << 20))
    defer { TestFiles.cleanup(path) }
    let limit = c.maxValueSize
    var rng = SplitMix(17)
    let pattern = [UInt8]((0..<limit).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) })
    for n in 0..<3000 {
      let size: Int
      switch rng.below(4) {
      case 0: size = limit - rng.below(64)
      case 1: size = rng.below(limit + 1)
      case 2: size = rng.below(2000)
      default: size = rng.below(64)
      }
      let key = "big-\(rng.below(n % 3 == 0 ? 20 : 100_000))"
      let v = Array(pattern[0..<size])
      try c.setObject(v, forKey: key)
      #expect(try c.object(forKey: key) == v, "the value just stored is readable (\(size) bytes)")
      if n % 500 == 0 {
        let r = c.check()
        #expect(r.ok, "\(r.problems)")
      }
    }
    let r = c.check()
    #expect(r.ok, "\(r.problems)")
  }

  /// With values of 100 to 1,000 bytes, at least 70 % of the file's bytes hold live keys
  /// and values once the cache is full (checked at every sample after the first eviction).
  @Test(arguments: [4 << 20, 16 << 20])
  func memoryEfficiencyOnceFull(capacity: Int) throws {
    let (c, path) = try SharedCache<[UInt8]>.scratch("ev-fill", options: CacheOptions(capacity: capacity))
    defer { TestFiles.cleanup(path) }
    var lowest = 1.0
    var full = false
    try churn(c, bytes: 3 * capacity, sizes: 100...1000, seed: UInt64(capacity)) { n in
      guard n % 256 == 0 else { return }
      let s = c.statistics
      if !full { full = s.evictions > 0 }
      if full { lowest = min(lowest, s.fill) }
    }
    let s = c.statistics
    #expect(full)
    #expect(lowest >= 0.70, "fill \(lowest) at its lowest once full")
    #expect(s.fill >= 0.70, "fill \(s.fill) at the end")
    print(
      "[core] fill with 100-1000 B values, \(capacity >> 20) MiB: lowest once full \(lowest), final \(s.fill) (\(s.entries) entries, liveBytes \(s.liveBytes))"
    )
  }

  @Test(.enabled(if: ProcessInfo.processInfo.environment["MC_LONG"] == "1", "MC_LONG=1 only"))
  func memoryEfficiency64MiB() throws {
    try memoryEfficiencyOnceFull(capacity: 64 << 20)
  }

  /// The clock: entries read since the hand last passed get a second chance. A hot set
  /// read now and then, and a same-age set never read again, go through a stream of new
  /// entries ten times the capacity (each read twice soon after it is stored, so it
  /// earns main, as S3-FIFO's threshold asks, and main turns over): the hot set
  /// survives, its never-read peers do not.
  @Test func referencedEntriesSurviveEvictionBetter() throws {
    let cap = 4 << 20
    let (c, path) = try SharedCache<[UInt8]>.scratch("ev-ref", options: CacheOptions(capacity: cap))
    defer { TestFiles.cleanup(path) }
    let hot = (0..<400).map { "hot-\($0)" }
    let peers = (0..<400).map { "peer-\($0)" }
    for (h, p) in zip(hot, peers) {
      try c.setObject([UInt8](repeating: 1, count: 500), forKey: h)
      try c.setObject([UInt8](repeating: 1, count: 500), forKey: p)
    }
    var rng = SplitMix(23)
    var next = 0
    var count = 0
    var bytes = 0
    while bytes < 10 * cap {
      let key = "new-\(count)"
      let size = rng.inRange(100...1000)
      try c.setObject([UInt8](repeating: 2, count: size), forKey: key)
      for _ in 0..<2 { _ = try c.object(forKey: key) }
      count += 1
      bytes += size
      // Each hot key is read about once every 400 inserts (~ a tenth of the cache).
      _ = try c.object(forKey: hot[next % hot.count])
      next += 1
    }
    let hotLeft = try hot.filter { try c.object(forKey: $0) != nil }.count
    let peersLeft = try peers.filter { try c.object(forKey: $0) != nil }.count
    #expect(c.statistics.evictions > count / 2)
    #expect(Double(hotLeft) / Double(hot.count) >= 0.95, "hot survivors \(hotLeft)/\(hot.count)")
    #expect(Double(peersLeft) / Double(peers.count) <= 0.05, "never-read survivors \(peersLeft)/\(peers.count)")
    #expect(c.check().ok)
  }

  /// A run of hot entries written together sits together in the main log: when the hand
  /// reaches it, every one of them that was read since its last pass gets its second
  /// chance, however many there are in a row (up to the call's 256 KiB budget). With a
  /// budget of 64 copies alone, the 65th hot entry of the run was evicted although read.
  @Test func aLongRunOfHotEntriesSurvivesTheHand() throws {
    let cap = 2 << 20
    let (c, path) = try coreCache("ev-run", capacity: cap)
    defer { TestFiles.cleanup(path) }
    let hot = (0..<200).map { "hot-\($0)" }
    for h in hot { try c.setObject([UInt8](repeating: 3, count: 200), forKey: h) }
    var n = 0
    let before = c.statistics
    // Warm entries, each read twice (so it is promoted to main and main turns over), four
    // times the cache; the hot ones are all read after every 100 warm inserts, so each
    // is referenced whenever the hand comes by.
    while c.statistics.evictions - before.evictions < 5000 || n < 4 * cap / 1000 {
      for _ in 0..<100 {
        try c.setObject([UInt8](repeating: 4, count: 1000), forKey: "warm-\(n)")
        for _ in 0..<2 { _ = try c.object(forKey: "warm-\(n)") }
        n += 1
      }
      for h in hot { _ = try c.object(forKey: h) }
    }
    let s = c.statistics
    let lost = try hot.filter { try c.object(forKey: $0) == nil }
    #expect(lost.isEmpty, "\(lost.count) hot entries evicted, e.g. \(lost.prefix(3))")
    #expect(
      s.reinsertions - before.reinsertions >= 2 * hot.count,
      "the hand passed the run \(s.reinsertions - before.reinsertions) times' worth")
    #expect(c.check().ok)
  }

  /// Documents a property of the design (S3-FIFO-like, with promotion into main while main
  /// has room): when nothing new is ever read, main never turns over, so entries promoted
  /// during the first fill stay while every newer never-read entry passes through the small
  /// log only. Reported, not asserted as a failure: see the core report.
  /// A cache many times larger than its data loses nothing to churn: 400 keys (a tenth
  /// of the space) overwritten with new sizes until 20 × the capacity went through the
  /// logs, some read once and none twice, are all there, and nothing was evicted.
  @Test func churnInARoomyCacheEvictsNothing() throws {
    let cap = 2 << 20
    let (c, path) = try SharedCache<[UInt8]>.scratch("ev-roomy", options: CacheOptions(capacity: cap))
    defer { TestFiles.cleanup(path) }
    var rng = SplitMix(31)
    var written = 0
    var latest = [Int](repeating: 0, count: 400)
    while written < 20 * cap {
      let k = rng.inRange(0...399)
      let size = rng.inRange(100...900)
      try c.setObject([UInt8](repeating: UInt8(truncatingIfNeeded: size), count: size), forKey: "r-\(k)")
      latest[k] = size
      written += size
      if rng.inRange(0...3) == 0 { _ = try c.object(forKey: "r-\(rng.inRange(0...399))") }
    }
    for (k, size) in latest.enumerated() where size > 0 {
      #expect(try c.object(forKey: "r-\(k)") == [UInt8](repeating: UInt8(truncatingIfNeeded: size), count: size))
    }
    #expect(c.statistics.evictions == 0)
    #expect(c.check().ok)
  }

  /// A stream of writes nobody reads (write now, read later): the cache must hold the
  /// newest entries, not the first fill. (Entries that got into main unread while the
  /// cache filled are displaced by unread newcomers; read entries are not.)
  @Test func unreadStreamKeepsTheNewestEntries() throws {
    let cap = 2 << 20
    let (c, path) = try SharedCache<[UInt8]>.scratch("ev-unread", options: CacheOptions(capacity: cap))
    defer { TestFiles.cleanup(path) }
    var keys: [String] = []
    var rng = SplitMix(29)
    var bytes = 0
    while bytes < 10 * cap {
      let key = "s-\(keys.count)"
      let size = rng.inRange(100...1000)
      try c.setObject([UInt8](repeating: 3, count: size), forKey: key)
      keys.append(key)
      bytes += size
    }
    let entries = c.statistics.entries
    let firstTenth = try keys.prefix(keys.count / 10).filter { try c.object(forKey: $0) != nil }.count
    let newest = try keys.suffix(entries).filter { try c.object(forKey: $0) != nil }.count
    print(
      "[core] unread stream 10x capacity: \(newest) of the newest \(entries) present, \(firstTenth) of the first \(keys.count / 10)"
    )
    #expect(firstTenth == 0, "the first fill should have been displaced")
    #expect(Double(newest) >= 0.9 * Double(entries), "\(newest) of the newest \(entries) entries present")
    #expect(c.check().ok)
  }

  @Test func countLimitIsEnforcedByEviction() throws {
    let (c, path) = try SharedCache<[UInt8]>.scratch("ev-limit", options: CacheOptions(capacity: 2 << 20))
    defer { TestFiles.cleanup(path) }
    for i in 0..<500 { try c.setObject([1, 2, 3], forKey: "k\(i)") }
    try c.setLimits(count: 100)
    #expect(c.statistics.entries <= 100)
    for i in 500..<1500 { try c.setObject([1, 2, 3], forKey: "k\(i)") }
    #expect(c.statistics.entries <= 100)
    #expect(c.statistics.entries >= 90)
    #expect(try c.object(forKey: "k1499") == [1, 2, 3])
    try c.setLimits(count: 0)
    #expect(c.check().ok)
  }
}

import CheckedValues
import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// W3b: an overwrite whose record changes size stays where it is when the record's
/// bytes, with those of dead records right after it in its log, hold the new one. The
/// rest becomes one dead record, so the chain of records a walker follows stays whole.
@Suite struct CoreRewriteTests {
  /// Shrinks, growth back into what a shrink left, and changes of the header's form
  /// (values over and under 256 bytes) keep the record's offset and the log's head;
  /// a value larger than every byte the record had goes to the head.
  @Test func valuesOfChangingSizesStayInPlace() throws {
    let (c, path) = try coreCache("rw-sizes")
    defer { TestFiles.cleanup(path) }
    let k = "resized"
    try c.setObject(coreValue(k, 400), forKey: k)
    for i in 0..<20 { try c.setObject(coreValue("n\(i)", 50), forKey: "n\(i)") }
    let home = try #require(try recordOffset(c, k))
    let heads = c.engine.partition(0).logs.state(.small).head
    for (i, size) in [100, 380, 30, 200, 300, 16, 400, 255, 290].enumerated() {
      let v = coreValue(k, size, i + 2)
      try c.setObject(v, forKey: k)
      #expect(try c.object(forKey: k) == v, "\(size) bytes")
      #expect(try recordOffset(c, k) == home, "\(size) bytes: rewritten in place")
      let r = try c.verify()
      #expect(r.ok, "\(size) bytes: \(r.problems)")
    }
    #expect(c.engine.partition(0).logs.state(.small).head == heads, "no record appended")
    let large = coreValue(k, 900, 99)
    try c.setObject(large, forKey: k)
    #expect(try c.object(forKey: k) == large)
    #expect(try recordOffset(c, k) != home, "larger than its bytes: appended")
    for i in 0..<20 { #expect(try c.object(forKey: "n\(i)") == coreValue("n\(i)", 50)) }
    let r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(c.statistics.liveBytes == r.liveBytes)
  }

  /// W3c: a record that grows past its bytes while a live record of another key follows
  /// it moves that neighbour to the head and takes its bytes: the key keeps its offset,
  /// the neighbour keeps its value, and no dead record of either is left behind.
  @Test func aGrowingRewriteMovesItsLiveNeighbour() throws {
    let (c, path) = try coreCache("rw-move")
    defer { TestFiles.cleanup(path) }
    try c.setObject(coreValue("k", 100), forKey: "k")
    try c.setObject(coreValue("j", 100), forKey: "j")
    try c.setObject(coreValue("z", 50), forKey: "z")
    let home = try #require(try recordOffset(c, "k"))
    let oldJ = try #require(try recordOffset(c, "j"))
    #expect(oldJ == home + (try #require(try c.engine.entry(of: "k")).header.size), "j follows k")
    try c.setObject(coreValue("k", 180, 2), forKey: "k")
    #expect(try recordOffset(c, "k") == home, "k stayed, in its bytes and j's")
    #expect(try recordOffset(c, "j") != oldJ, "j moved")
    #expect(try c.object(forKey: "k") == coreValue("k", 180, 2))
    #expect(try c.object(forKey: "j") == coreValue("j", 100))
    #expect(try c.object(forKey: "z") == coreValue("z", 50))
    let r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    // What is dead is k's leftover after its new record, nothing else.
    let sizes = try ["k", "j", "z"].map { try #require(try c.engine.entry(of: $0)).header.size }
    #expect(r.logBytes - r.deadBytes == sizes.reduce(0, +))
    #expect(r.deadBytes < 100, "only k's leftover: \(r.deadBytes)")
    // A neighbour larger than the new record stays: the rewrite goes to the head.
    try c.setObject(coreValue("m", 100), forKey: "m")
    try c.setObject(coreValue("n", 600), forKey: "n")
    let homeM = try #require(try recordOffset(c, "m"))
    let oldN = try #require(try recordOffset(c, "n"))
    try c.setObject(coreValue("m", 200, 2), forKey: "m")
    #expect(try recordOffset(c, "m") != homeM && (try recordOffset(c, "n")) == oldN)
    #expect(try c.object(forKey: "n") == coreValue("n", 600))
    #expect(try c.verify().ok)
  }

  /// W3c under eviction: growing keys whose neighbours must move, over laps of a full
  /// cache, every value kept or evicted whole.
  @Test func neighbourMovesInAFullCacheKeepEveryValueWhole() throws {
    let (c, path) = try coreCache("rw-move-full")
    defer { TestFiles.cleanup(path) }
    var rng = SplitMix(29)
    var latest: [String: [UInt8]] = [:]
    for i in 0..<20_000 {
      let k = "g\(rng.below(4000))"
      let v = coreValue(k, 16 + rng.below(700), i)
      try c.setObject(v, forKey: k)
      latest[k] = v
    }
    #expect(c.statistics.evictions > 0, "the cache filled")
    #expect(try expectLatestOrEvicted(c, latest) > 100)
    try expectVerifies(c)
  }

  /// `verify` sums the logs' record bytes and the dead ones among them: a shrink's
  /// leftover, an overwrite moved to the head, a removal; the live ones are the rest.
  @Test func verifyCountsTheDeadBytes() throws {
    let (c, path) = try coreCache("rw-dead")
    defer { TestFiles.cleanup(path) }
    func size(_ k: String) throws -> Int { try #require(try c.engine.entry(of: k)).header.size }
    try c.setObject(coreValue("a", 300), forKey: "a")
    try c.setObject(coreValue("b", 100), forKey: "b")
    try c.setObject(coreValue("c", 100), forKey: "c")
    var r = try c.verify()
    let first = try size("a") + size("b") + size("c")
    #expect(r.ok && r.deadBytes == 0 && r.logBytes == first)
    try c.setObject(coreValue("a", 100, 2), forKey: "a")  // shrunk in place: a leftover
    r = try c.verify()
    #expect(r.logBytes == first)
    #expect(r.deadBytes == first - (try size("a") + size("b") + size("c")))
    #expect(r.deadBytes > 0)
    try c.setObject(coreValue("c", 900, 2), forKey: "c")  // past its bytes: to the head
    let oldC = try size("b")  // c's old record was b's size
    r = try c.verify()
    #expect(r.logBytes == first + (try size("c")))
    #expect(r.logBytes - r.deadBytes == (try size("a") + size("b") + size("c")))
    #expect(r.deadBytes >= oldC)
    #expect(try c.removeObject(forKey: "b"))
    r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(r.logBytes - r.deadBytes == (try size("a") + size("c")))
  }

  /// A record grows into the dead record of another key right after it (that key's
  /// value moved to the head), and the log keeps working for laps after.
  @Test func aRewriteTakesTheDeadRecordAfterIt() throws {
    let (c, path) = try coreCache("rw-neighbour")
    defer { TestFiles.cleanup(path) }
    try c.setObject(coreValue("k", 100), forKey: "k")
    try c.setObject(coreValue("j", 100), forKey: "j")
    let home = try #require(try recordOffset(c, "k"))
    let h = try #require(try c.engine.entry(of: "k")).header
    #expect(try recordOffset(c, "j") == home + h.size, "j follows k")
    try c.setObject(coreValue("j", 600, 2), forKey: "j")  // j's old record: dead
    try c.setObject(coreValue("k", 180, 2), forKey: "k")
    #expect(try recordOffset(c, "k") == home, "k took j's dead record")
    #expect(try c.object(forKey: "k") == coreValue("k", 180, 2))
    #expect(try c.object(forKey: "j") == coreValue("j", 600, 2))
    // Laps over the logs: the tail walks the rewritten records and the dead ones.
    for i in 0..<6000 {
      try c.setObject(coreValue("f\(i)", 24 + (i * 37) % 400), forKey: "f\(i)")
      if i % 7 == 0 { try c.setObject(coreValue("k", 16 + (i * 13) % 300, i), forKey: "k") }
    }
    let r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(c.statistics.evictions > 0, "the logs went round")
    for i in 5990..<6000 { #expect(try c.object(forKey: "f\(i)") == coreValue("f\(i)", 24 + (i * 37) % 400)) }
  }

  /// With a cost limit, a value that grows goes through W4 (which evicts to keep the
  /// limit) rather than in place; one that shrinks still stays.
  @Test func aCostLimitSendsGrowthToTheHead() throws {
    let path = TestFiles.tempPath("rw-cost")
    defer { TestFiles.cleanup(path) }
    let o = CoreOptions.make(partitioned: false, capacity: 1 << 20)
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, options: o)
    try c.setLimits(cost: 64 << 10)
    try c.setObject(coreValue("k", 400), forKey: "k")
    let home = try #require(try recordOffset(c, "k"))
    try c.setObject(coreValue("k", 100, 2), forKey: "k")
    #expect(try recordOffset(c, "k") == home)
    try c.setObject(coreValue("k", 300, 3), forKey: "k")
    #expect(try recordOffset(c, "k") != home)
    #expect(try c.object(forKey: "k") == coreValue("k", 300, 3))
  }

  /// In a file of small values, the dead record a growing rewrite leaves can be longer
  /// than the largest value: here a one-byte key takes a dead record of a 200-byte key
  /// after it. Every walker of the chain (the checker, the eviction hand) steps over
  /// it; before they accepted it, the checker found the chain broken.
  @Test func aDeadRecordMayPassTheLargestValue() throws {
    let path = TestFiles.tempPath("rw-long-dead")
    defer { TestFiles.cleanup(path) }
    var options = CoreOptions.make(partitioned: false, capacity: 1 << 20)
    options.maxValueSize = 64
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, options: options)
    let long = String(repeating: "L", count: 200)
    try c.setObject([UInt8](repeating: 1, count: 8), forKey: "a")
    try c.setObject([UInt8](repeating: 2, count: 64), forKey: long)
    let home = try #require(try c.engine.entry(of: "a")?.offset)
    #expect(try c.removeObject(forKey: long))
    let grown = [UInt8](repeating: 3, count: 24)
    try c.setObject(grown, forKey: "a")
    #expect(try c.engine.entry(of: "a")?.offset == home, "rewritten in place, into the dead record")
    var r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(r.deadBytes > 64 + 9, "one dead record longer than the largest value: \(r.deadBytes)")
    // Enough writes for the logs to wrap: eviction walks past the long dead record.
    for i in 0..<40_000 { try c.setObject([UInt8](repeating: UInt8(i & 0xFF), count: 48), forKey: "f\(i)") }
    #expect(c.statistics.evictions > 0)
    r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(c.statistics.liveBytes == r.liveBytes)
  }
}

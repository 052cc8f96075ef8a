import CheckedValues
import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// The main log's free lists (`FreeLists`): a record that dies in the middle of main (a
/// removal, an overwrite that moved, a shrink's leftover) is listed, and the next record
/// bound for main that fits takes its bytes rather than the log's head.
@Suite struct CoreFreeListTests {
  /// Values larger than a quarter of the small log go to main.
  private static let large = 30_000

  /// A removed record is listed; a record that fits takes its offset without moving the
  /// head, and what it leaves is listed in turn; an overwrite that has to move lists
  /// its old record.
  @Test func deadRecordsInMainAreTakenByTheNextThatFit() throws {
    let (c, path) = try coreCache("fl-reuse")
    defer { TestFiles.cleanup(path) }
    for k in ["a", "b", "c"] { try c.setObject(coreValue(k, Self.large), forKey: k) }
    let b = try #require(try recordOffset(c, "b"))
    #expect(c.engine.partition(0).logs.id(containing: b) == .main)
    let bSize = try #require(try c.engine.entry(of: "b")).header.size
    try c.removeObject(forKey: "b")
    var r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(r.freeBytes == bSize, "b's record is listed")

    let head = c.engine.partition(0).logs.state(.main).head
    try c.setObject(coreValue("d", Self.large - 1_000), forKey: "d")
    #expect(try recordOffset(c, "d") == b, "d took b's bytes")
    #expect(c.engine.partition(0).logs.state(.main).head == head, "nothing appended")
    let dSize = try #require(try c.engine.entry(of: "d")).header.size
    r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(r.freeBytes == bSize - dSize, "d's leftover is listed")

    // An overwrite too large for its bytes, with the head right after it, moves to the
    // head and lists its old record.
    try c.setObject(coreValue("e", Self.large + 20_000), forKey: "e")
    let e = try #require(try recordOffset(c, "e"))
    let eSize = try #require(try c.engine.entry(of: "e")).header.size
    try c.setObject(coreValue("e", Self.large + 25_000, 2), forKey: "e")
    #expect(try recordOffset(c, "e") != e)
    r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(r.freeBytes >= eSize, "e's old record is listed")
    try c.setObject(coreValue("f", Self.large + 19_000), forKey: "f")
    #expect(try recordOffset(c, "f") == e, "f took e's old bytes")

    #expect(try c.object(forKey: "e") == coreValue("e", Self.large + 25_000, 2))
    #expect(try c.object(forKey: "b") == nil)
    for (k, size) in [("a", Self.large), ("c", Self.large), ("d", Self.large - 1_000), ("f", Self.large + 19_000)] {
      #expect(try c.object(forKey: k) == coreValue(k, size), "\(k)")
    }
    #expect(try c.verify().ok)
  }

  /// Records of changing sizes, rewritten, removed and read at random in a full cache:
  /// the tail passes listed records, rewrites in place take them, writes bound for main
  /// take them, and every value read is the last one written for its key, whole.
  @Test func changingSizesInAFullCacheKeepEveryValueWhole() throws {
    let (c, path) = try coreCache("fl-churn")
    defer { TestFiles.cleanup(path) }
    var rng = SplitMix(29)
    var last: [String: [UInt8]] = [:]
    var sawFree = false
    for i in 0..<12_000 {
      let k = "k\(rng.below(300))"
      switch rng.below(10) {
      case 0:
        try c.removeObject(forKey: k)
        last[k] = nil
      case 1, 2, 3:
        let got = try c.object(forKey: k)
        #expect(got == nil || got == last[k], "\(k) at step \(i)")
      default:
        let v = coreValue(k, rng.inRange(20...6_019), i)
        try c.setObject(v, forKey: k)
        last[k] = v
      }
      if i % 1_000 == 999 {
        let r = try c.verify()
        #expect(r.ok, "step \(i): \(r.problems)")
        sawFree = sawFree || r.freeBytes > 0
      }
    }
    #expect(sawFree, "records were listed")
    try expectLatestOrEvicted(c, last)
  }

  /// A writer killed with a free record written but not yet linked (its list's head
  /// not set): the next writer repairs, and the rebuilt list holds it.
  @Test func aFreeRecordLeftUnlinkedByAKillIsListedByRepair() throws {
    let (c, path) = try coreCache("fl-kill")
    defer { TestFiles.cleanup(path) }
    for k in ["a", "b", "c"] { try c.setObject(coreValue(k, Self.large), forKey: k) }
    let b = try #require(try c.engine.entry(of: "b"))
    try c.engine._crashDuring(partition: 0) { part in
      part.policy.remove(b, counting: .removals, part.held)
      part.memory.writeFreeRecord(at: b.offset, size: b.header.size, prev: 0, next: 0, part.held)
    }
    // The next write repairs first.
    try c.setObject(coreValue("x", 10), forKey: "x")
    let r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(r.freeBytes == b.header.size)
    try c.setObject(coreValue("d", Self.large), forKey: "d")
    #expect(try recordOffset(c, "d") == b.offset)
    for k in ["a", "c", "d"] { #expect(try c.object(forKey: k) == coreValue(k, Self.large)) }
  }

  /// A writer killed while it writes a record into a free record it took (W5, after
  /// each of `writeRecord(over:)`'s steps, before a slot names it): the chain stays
  /// whole, nothing else is lost, and the key can be written after repair. (The bytes,
  /// off their list and no longer flagged, wait for the tail.)
  @Test(arguments: [0, 1, 2, 3])
  func aWriteIntoAFreeRecordKilledMidwayLosesNothing(steps: Int) throws {
    let (c, path) = try coreCache("fl-kill-write-\(steps)")
    defer { TestFiles.cleanup(path) }
    for k in ["a", "b", "c"] { try c.setObject(coreValue(k, Self.large), forKey: k) }
    try c.removeObject(forKey: "b")
    let newValue = coreValue("d", Self.large - 2_000)
    try c.engine._crashDuring(partition: 0) { part in
      try Array("d".utf8).withUnsafeBytes { kb in
        try newValue.withUnsafeBytes { vb in
          let w = try c.engine.writer.prepare(kb, vb, expiry: 0)
          let f = try #require(try part.freeLists.take(w.size, keyCount: kb.count, part.held))
          part.memory.writeRecord(
            over: f.offset, extent: f.extent,
            RecordFormat.Content(key: kb, value: vb, version: 1, sum: w.sum, expiry: 0), steps: steps, part.held)
        }
      }
    }
    let r = try c.verify(repair: true)
    #expect(try c.verify().ok, "after repair: \(r.problems)")
    #expect(try c.object(forKey: "d") == nil, "never published")
    for k in ["a", "c"] { #expect(try c.object(forKey: k) == coreValue(k, Self.large), "\(k)") }
    try c.setObject(newValue, forKey: "d")
    #expect(try c.object(forKey: "d") == newValue)
    let after = try c.verify()
    #expect(after.ok, "\(after.problems)")
  }

  /// A list head pointing into a live record (damage, or a hostile file) is found before
  /// anything is written there: the writer repairs, every other entry stays, and the
  /// write goes ahead.
  @Test func aDamagedListHeadLosesNothing() throws {
    let (c, path) = try coreCache("fl-damage")
    defer { TestFiles.cleanup(path) }
    for k in ["a", "b", "c"] { try c.setObject(coreValue(k, Self.large), forKey: k) }
    try c.removeObject(forKey: "b")
    let a = try #require(try c.engine.entry(of: "a"))
    let part = c.engine.partition(0)
    for cls in 0..<FreeLists.classCount {
      // Every head names a byte inside a's value.
      let word = part.memory.word(.freeHeads(cls >> 1))
      let at = UInt64(a.offset + a.header.headerBytes + 100)
      word.store(
        word.load(.relaxed) & ~(0xFFFF_FFFF << UInt64(32 * (cls & 1))) | at << UInt64(32 * (cls & 1)), .relaxed)
    }
    #expect(try !c.verify().ok, "the damage is reported")
    try c.setObject(coreValue("d", Self.large - 100), forKey: "d")
    #expect(try c.object(forKey: "d") == coreValue("d", Self.large - 100))
    for k in ["a", "c"] { #expect(try c.object(forKey: k) == coreValue(k, Self.large), "\(k)") }
    try expectVerifies(c)
  }
}

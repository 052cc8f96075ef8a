import Foundation
import Synchronization
import TestSupport
import Testing

@testable import MappedCache

/// Deterministic crash states: the exact words a writer SIGKILLed at a chosen instant
/// leaves in the file (an odd slot, a half-done backward shift, a half-written record,
/// the intent record set), then the next write's repair. Every entry the dead writer was
/// not changing must stay readable, and verify must pass. (The random SIGKILL loop is in
/// CoreConcurrencyTests; these pin down the instants it rarely hits.)
@Suite struct CoreRecoveryTests {
  /// Leaves slot `i` as a writer killed between `seq` odd and `seq` even leaves it, with
  /// the intent record set (the writer held the lock and was mid-change).
  private func crashMidSlotWrite(_ e: CacheEngine, slot i: Int) {
    e.memory.seq(i).add(1, .relaxed)
    e.memory.header(.intent).store(1, .relaxed)
  }

  private func value(_ k: String) -> [UInt8] { CoreValue.make(key: k, writer: 0, seq: 0, size: 40) }

  /// A probe run that wraps from the last slot to slot 0; the writer dies mid-write of
  /// the last slot. The entry in slot 0 (which it was not writing) must stay reachable.
  @Test(arguments: [false, true])
  func oddSlotAtTheTableEndKeepsTheWrappedRunReachable(inline: Bool) throws {
    let path = TestFiles.tempPath("rec-wrap")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(
      path: path, capacity: 1 << 20, options: CoreOptions.make(inline: inline, capacity: 1 << 20))
    let e = c.engine
    let n = e.layout.slotCount
    let ks = e.keys(home: n - 1, count: 3, tag: "wrap")
    for k in ks { try c.setObject(value(k), forKey: k) }
    #expect(try e.slot(of: ks[0]) == n - 1)
    #expect(try e.slot(of: ks[1]) == 0)
    #expect(try e.slot(of: ks[2]) == 1)
    crashMidSlotWrite(e, slot: n - 1)  // dying while rewriting ks[0]
    try c.setObject([1], forKey: "next write")  // repairs first
    #expect(c.statistics.recoveries == 1)
    #expect(try c.object(forKey: ks[1]) == value(ks[1]), "an entry the dead writer never touched was lost")
    #expect(try c.object(forKey: ks[2]) == value(ks[2]), "an entry the dead writer never touched was lost")
    let r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    // Writing a survivor again updates it in place rather than adding a second copy.
    try c.setObject([2], forKey: ks[1])
    #expect(try c.object(forKey: ks[1]) == [2])
    #expect(try c.verify().ok)
  }

  /// A run h: X(h) W(h) Y(h) Z(h+2). The writer dies mid-write of W's slot. Repair drops W;
  /// Y is then behind a hole and is moved up; Z (whose home is Y's old slot) must not be
  /// stranded behind the hole Y leaves.
  @Test(arguments: [false, true])
  func repairOfAStrandedEntryStrandsNoOther(inline: Bool) throws {
    let path = TestFiles.tempPath("rec-cascade")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(
      path: path, capacity: 1 << 20, options: CoreOptions.make(inline: inline, capacity: 1 << 20))
    let e = c.engine
    let h = 100
    let run = e.keys(home: h, count: 3, tag: "run")
    let z = e.keys(home: h + 2, count: 1, tag: "z")[0]
    for k in run + [z] { try c.setObject(value(k), forKey: k) }
    #expect(try run.map { try e.slot(of: $0) } == [h, h + 1, h + 2])
    #expect(try e.slot(of: z) == h + 3)
    crashMidSlotWrite(e, slot: h + 1)  // dying while rewriting run[1]
    try c.setObject([1], forKey: "next write")
    for k in [run[0], run[2], z] {
      #expect(try c.object(forKey: k) == value(k), "\(k) was lost by the repair")
    }
    let r = try c.verify()
    #expect(r.ok, "\(r.problems)")
  }

  /// A backward shift (removing the head of a run that wraps) interrupted after its first
  /// move: the moved entry is in two slots. Repair must keep exactly one reachable copy of
  /// each entry the writer was not removing.
  @Test(arguments: [false, true])
  func interruptedBackwardShiftAcrossTheTableEnd(inline: Bool) throws {
    let path = TestFiles.tempPath("rec-shift")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(
      path: path, capacity: 1 << 20, options: CoreOptions.make(inline: inline, capacity: 1 << 20))
    let e = c.engine
    let n = e.layout.slotCount
    let ks = e.keys(home: n - 2, count: 3, tag: "shift")  // slots n-2, n-1, 0
    for k in ks { try c.setObject(value(k), forKey: k) }
    #expect(try ks.map { try e.slot(of: $0) } == [n - 2, n - 1, 0])
    // SlotIndex.remove(n-2) as far as its first move: n-2 <- (ks[1]), then the writer dies.
    e.memory.header(.shiftSeq).add(1, .relaxed)
    try e.withWriteLock { held in e.index.copy(from: n - 1, to: n - 2, held) }
    e.memory.header(.entries).store(2, .relaxed)
    e.memory.header(.intent).store(1, .relaxed)
    try c.setObject([1], forKey: "next write")
    #expect(try c.object(forKey: ks[0]) == nil, "the entry being removed is gone")
    #expect(try c.object(forKey: ks[1]) == value(ks[1]))
    #expect(try c.object(forKey: ks[2]) == value(ks[2]), "an entry the dead writer never touched was lost")
    let r = try c.verify()
    #expect(r.ok, "\(r.problems)")
    #expect(c.statistics.entries == 3)
  }

  /// The writer died while copying a record past the log's head (before publishing it):
  /// garbage after the head, intent set. Nothing stored is lost.
  @Test func halfWrittenRecordIsIgnored() throws {
    let path = TestFiles.tempPath("rec-record")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    let e = c.engine
    let ks = (0..<50).map { "r\($0)" }
    for k in ks { try c.setObject(value(k), forKey: k) }
    let small = e.logs.state(.small)
    let at = small.offset(small.head)
    let junk = e.memory._byte(at: at)
    for i in 0..<200 { junk.storeBytes(of: UInt8(truncatingIfNeeded: i &* 91), toByteOffset: i, as: UInt8.self) }
    e.memory.header(.intent).store(1, .relaxed)
    try c.setObject(value("new"), forKey: "new")
    for k in ks + ["new"] { #expect(try c.object(forKey: k) == value(k), "\(k)") }
    #expect(try c.verify().ok)
  }

  /// Readers facing a slot left odd by a dead writer answer (a miss) within their retry
  /// bound rather than spinning forever, and never return a wrong value.
  @Test func readersFacingAnOddSlotDoNotHang() throws {
    let path = TestFiles.tempPath("rec-oddread")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    let e = c.engine
    let ks = e.keys(home: 300, count: 2, tag: "odd")
    for k in ks { try c.setObject(value(k), forKey: k) }
    crashMidSlotWrite(e, slot: 300)
    for k in ks {
      let v = try c.object(forKey: k)
      #expect(v == nil || v == value(k))
    }
    try c.setObject([1], forKey: "repair")
    #expect(try c.object(forKey: ks[1]) == value(ks[1]))
    #expect(try c.verify().ok)
  }
}

import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

// The engine's layers tested on their own, each through its own API on a real mapped
// file (a fresh small cache), with the invariants checked after every change: the slot
// index, the record logs, the eviction policy and ghost table, and the write lock.

/// A fresh small cache and its engine, removed when the value goes away.
private final class Scratch {
  let path: String
  let cache: SharedCache<[UInt8]>
  var engine: CacheEngine { cache.engine }

  init(_ tag: String, capacity: Int = 1 << 20, inline: Bool = true) throws {
    path = TestFiles.tempPath(tag)
    var o = CacheOptions(capacity: capacity)
    o.averageEntrySize = inline ? 64 : 400
    cache = try SharedCache<[UInt8]>(path: path, capacity: capacity, options: o)
  }

  deinit { TestFiles.cleanup(path) }

  func keys(home: Int, count: Int, tag: String = "k") -> [String] { engine.keys(home: home, count: count, tag: tag) }
  func slot(of key: String) throws -> Int? { try engine.slot(of: key) }

  func expectConsistent(sourceLocation: SourceLocation = #_sourceLocation) {
    let r = engine.checker.inspect(checksums: true)
    #expect(r.ok, "\(r.problems)", sourceLocation: sourceLocation)
  }
}

@Suite struct SlotIndexTests {
  /// Keys that share a home slot sit in consecutive slots from it; removing the first
  /// shifts the others back (no tombstones), across the end of the table too.
  @Test func removalShiftsTheRunBackAcrossTheTablesEnd() throws {
    let s = try Scratch("idx-shift")
    let n = s.engine.index.slotCount
    let ks = s.keys(home: n - 2, count: 4)
    for k in ks { try s.cache.setObject(Array(k.utf8), forKey: k) }
    #expect(try ks.map { try s.slot(of: $0) } == [n - 2, n - 1, 0, 1])
    #expect(try s.cache.removeObject(forKey: ks[0]))
    #expect(try ks.dropFirst().map { try s.slot(of: $0) } == [n - 2, n - 1, 0])
    #expect(s.engine.index.hash(at: 1) == 0, "the run's last slot is empty again")
    for k in ks.dropFirst() { #expect(try s.cache.object(forKey: k) == Array(k.utf8)) }
    s.expectConsistent()
  }

  /// An entry moves back only as far as its own home: one whose home is past the hole
  /// stays where it is.
  @Test func removalNeverMovesAnEntryBeforeItsHome() throws {
    let s = try Scratch("idx-home")
    let a = s.keys(home: 10, count: 2, tag: "a")
    let b = s.keys(home: 11, count: 1, tag: "b")
    for k in a + b { try s.cache.setObject([1], forKey: k) }
    #expect(try (a + b).map { try s.slot(of: $0) } == [10, 11, 12])
    #expect(try s.cache.removeObject(forKey: a[1]))  // hole at 11: b (home 11) moves into it
    #expect(try s.slot(of: b[0]) == 11)
    #expect(try s.cache.removeObject(forKey: a[0]))  // hole at 10: b (home 11) must not move
    #expect(try s.slot(of: b[0]) == 11)
    #expect(s.engine.index.hash(at: 10) == 0)
    s.expectConsistent()
  }

  /// `entry(at:meta:matching:)`: the one key-match routine refuses a slot whose stored
  /// lengths do not fit its inline area, and a key of another length or other bytes.
  @Test func theKeyMatchRoutineChecksBoundsAndBytes() throws {
    let s = try Scratch("idx-match")
    try s.cache.setObject([1, 2, 3], forKey: "key-one")
    let i = try #require(try s.slot(of: "key-one"))
    let index = s.engine.index
    let meta = index.meta(at: i)
    #expect(meta & Format.inlineBit != 0)
    func match(_ k: String) -> SlotIndex.Entry? {
      Array(k.utf8).withUnsafeBytes { index.entry(at: i, meta: meta, matching: $0) }
    }
    let e = try #require(match("key-one"))
    #expect(e.inline && e.klen == 7 && e.vlen == 3 && e.liveBytes == 10)
    #expect(match("key-two") == nil)
    #expect(match("key-on") == nil)
    // Lengths past the inline area (damage): no entry, whatever the key.
    s.engine.memory._byte(at: s.engine._slotOffset(i) + Format.S.vlen).storeBytes(of: UInt16.max, as: UInt16.self)
    #expect(match("key-one") == nil)
    #expect(index.entry(at: i, meta: meta) == nil)
  }

  /// A slot left odd by a dead writer is emptied with its sequence made even past the
  /// odd value (so a reader that started before the write re-checks), and an even slot
  /// is simply emptied.
  @Test func clearingASlotLeftMidWriteEndsEven() throws {
    let s = try Scratch("idx-odd")
    try s.cache.setObject([9], forKey: "odd")
    try s.cache.setObject([8], forKey: "even")
    let i = try #require(try s.slot(of: "odd"))
    let j = try #require(try s.slot(of: "even"))
    let mem = s.engine.memory
    mem.seq(i).add(1, .relaxed)  // a writer died inside its seqlock write
    let oddSeq = mem.seq(i).load(.relaxed)
    let evenSeq = mem.seq(j).load(.relaxed)
    try s.engine.withWriteLock { held in
      s.engine.index.clearLeftMidWrite(i, held)
      s.engine.index.clearLeftMidWrite(j, held)
    }
    #expect(mem.seq(i).load(.relaxed) == oddSeq + 1 && s.engine.index.hash(at: i) == 0)
    #expect(mem.seq(j).load(.relaxed) == evenSeq + 2 && s.engine.index.hash(at: j) == 0)
  }

  /// The seqlock read reports an odd slot as busy and hands out nothing from it.
  @Test func theSeqlockReadRefusesAnOddSlot() throws {
    let s = try Scratch("idx-seqlock")
    try s.cache.setObject([5], forKey: "k")
    let i = try #require(try s.slot(of: "k"))
    let index = s.engine.index
    guard case .stable(let h) = index.seqlockRead(i, { index.hash(at: i) }) else {
      Issue.record("a quiet slot reads as stable")
      return
    }
    #expect(h != 0)
    s.engine.memory.seq(i).add(1, .relaxed)
    var ran = false
    if case .busy = index.seqlockRead(i, { ran = true }) {} else { Issue.record("an odd slot is busy") }
    #expect(!ran, "nothing is read from an odd slot")
    s.engine.memory.seq(i).add(1, .relaxed)
  }
}

@Suite struct RecordLogsTests {
  @Test func logStateArithmetic() {
    var log = LogState(base: 4096, size: 1024, head: 2048 + 1000, tail: 2048 + 200)
    #expect(log.used == 800 && log.free == 224 && !log.isEmpty && log.isSane)
    #expect(log.offset(log.head) == 4096 + 1000, "positions wrap around the log")
    #expect(log.need(16) == 16, "24 bytes left before the end: no pad")
    #expect(log.need(32) == 24 + 32, "a record that would cross the end needs a pad first")
    #expect(log.holds(4096 + (2248 % 1024)), "the tail's record is live")
    #expect(!log.holds(4096 + (3048 % 1024)), "the head is past the live range")
    log.head = log.tail + 2048
    #expect(!log.isSane, "more live bytes than the log holds")
    log = LogState(base: 0, size: 1024, head: 4, tail: 0)
    #expect(!log.isSane, "positions are multiples of 8")
  }

  /// `reserve` pads the end of the log when a record would cross it, so records never
  /// wrap; `commit` and `advanceTail` move only the head and the tail.
  @Test func reservePadsAtTheEndAndCommitAdvancesTheHead() throws {
    let s = try Scratch("logs-reserve")
    let logs = s.engine.logs
    try s.engine.withWriteLock { held in
      let start = logs.state(.small)
      let room = start.size - Int(start.head % UInt64(start.size))
      // Fill all but 16 bytes before the end, then ask for 64.
      let first = logs.reserve(.small, room - 16, held)
      #expect(first == start.offset(start.head))
      s.engine.memory.writePad(at: first, size: room - 16, held)
      logs.commit(.small, room - 16, held)
      logs.advanceTail(.small, room - 16, held)  // drop it again: the log has room
      let at = logs.reserve(.small, 64, held)
      #expect(at == start.base, "the record starts at the log's beginning")
      let after = logs.state(.small)
      #expect(after.head == start.head + UInt64(room), "the 16-byte pad is part of the log")
      let pad = try #require(s.engine.memory.recordHeader(at: start.base + start.size - 16))
      #expect(pad.kind == Format.kindPad && pad.size == 16)
      s.engine.memory.writePad(at: at, size: 64, held)
      logs.commit(.small, 64, held)
      let tail = logs.state(.small).tail
      #expect(tail == start.tail + UInt64(room - 16), "only advanceTail moves the tail")
      #expect(logs.areSane)
    }
  }
}

@Suite struct EvictionPolicyTests {
  /// The ghost table remembers a hash once and forgets it when recalled, and `clear`
  /// forgets everything.
  @Test func ghostTableRemembersOnce() throws {
    let s = try Scratch("pol-ghost")
    let ghost = s.engine.policy.ghost
    try s.engine.withWriteLock { held in
      let a = 0xDEAD_BEEF_1234_5679 as UInt64
      let b = 0x1111_2222_3333_4445 as UInt64
      let unknown = ghost.recall(a, held)
      ghost.remember(a, held)
      let remembered = ghost.recall(a, held)
      let again = ghost.recall(a, held)
      ghost.remember(b, held)
      ghost.clear(held)
      let cleared = ghost.recall(b, held)
      #expect(!unknown && remembered)
      #expect(!again, "a recall forgets")
      #expect(!cleared)
    }
  }

  /// S3-FIFO's three paths on a cache with a count limit: an unread newcomer is evicted
  /// from the small log into the ghost table; a key the ghost remembers comes back
  /// straight into main; a read newcomer is promoted.
  @Test func smallLogEvictsTheUnreadPromotesTheReadAndTheGhostBringsBack() throws {
    let s = try Scratch("pol-s3fifo", capacity: 2 << 20, inline: false)
    let c = s.cache
    try c.setLimits(count: 100)
    let value = [UInt8](repeating: 7, count: 300)
    // Fill, reading every key once so that the first wave earns main.
    for i in 0..<100 {
      try c.setObject(value, forKey: "hot-\(i)")
      _ = try c.object(forKey: "hot-\(i)")
    }
    // A wave of unread newcomers: each evicts an unread newcomer before it, never a hot key.
    for i in 0..<300 { try c.setObject(value, forKey: "cold-\(i)") }
    let st = c.statistics
    #expect(st.entries == 100)
    var hot = 0
    for i in 0..<100 where try c.object(forKey: "hot-\(i)") != nil { hot += 1 }
    #expect(hot >= 90, "read entries survive a scan of unread ones (\(hot) of 100)")
    #expect(st.evictions >= 200)
    // A cold key evicted from small is remembered: written again, it goes to main. (The
    // latest one evicted: the ghost's places are shared, so an older one may be forgotten.)
    var evicted: String? = nil
    for i in (0..<300).reversed() where try c.object(forKey: "cold-\(i)") == nil {
      evicted = "cold-\(i)"
      break
    }
    let key = try #require(evicted)
    try c.setObject(value, forKey: key)
    let loc = try #require(try Array(key.utf8).withUnsafeBytes { try s.engine._find($0)?.entry.loc })
    #expect(s.engine.logs.id(containing: loc) == .main, "the ghost sent it straight to main")
    s.expectConsistent()
  }

  @Test func theBudgetLastsForCopiesOrBytesWhicheverComesLater() {
    var b = EvictionBudget()
    for _ in 0..<EvictionBudget.copies { b.spend(16) }
    #expect(b.allowsCopy, "64 small copies leave most of the byte budget")
    var big = EvictionBudget()
    for _ in 0..<EvictionBudget.copies { big.spend(EvictionBudget.bytes) }
    #expect(!big.allowsCopy, "64 large copies end it")
    #expect(!EvictionBudget.noSecondChances.allowsCopy)
  }
}

@Suite struct WriteLockTests {
  /// The token names the slot and the generation's low bits; a word naming a slot whose
  /// generation moved on, or a slot outside the table, names a dead holder.
  @Test func tokensAndTheLivenessOfWhatTheyName() throws {
    let s = try Scratch("lock-token")
    let reg = try #require(s.engine.registration)
    let token = WriteLock.token(slot: reg.slot, generation: reg.generation)
    #expect(Int(token & Format.Lock.ownerMask) == reg.slot + 1)
    #expect(
      UInt64(token >> Format.Lock.generationShift) & Format.Lock.generationMask == reg.generation
        & Format.Lock.generationMask)
    let asker = try #require(s.engine.lock).asker
    let liveness = Liveness(memory: s.engine.memory, fd: s.engine.file.fd, asker: asker)
    #expect(!liveness.holderIsDead(token), "this handle's own token: another of its threads")
    #expect(
      liveness.holderIsDead(WriteLock.token(slot: reg.slot, generation: reg.generation + 1)),
      "its slot's previous (or a planted) generation")
    #expect(liveness.holderIsDead(UInt32(s.engine.memory.procCount + 1)), "a slot past the table")
    // Another live handle's token: alive while it is open (its witness byte is locked).
    let other = try SharedCache<[UInt8]>(path: s.path)
    let otherReg = try #require(other.engine.registration)
    #expect(!liveness.holderIsDead(WriteLock.token(slot: otherReg.slot, generation: otherReg.generation)))
  }

  /// The lock excludes threads of one handle and of two handles: a counter bumped under
  /// it by many threads loses no increment.
  @Test func excludesThreadsAndHandles() throws {
    let s = try Scratch("lock-exclude")
    let second = try SharedCache<[UInt8]>(path: s.path, lockMode: .flock)
    let engines = [s.engine, second.engine]
    try s.cache.setObject([0, 0, 0, 0, 0, 0, 0, 0], forKey: "n")
    DispatchQueue.concurrentPerform(iterations: 4) { t in
      let e = engines[t % 2]
      for _ in 0..<500 {
        _ = try? Array("n".utf8).withUnsafeBytes { k in
          try e.update(k) { bytes, _ in
            let v = bytes.map { $0.loadUnaligned(as: UInt64.self) } ?? 0
            return .store(withUnsafeBytes(of: v + 1) { Array($0) }, expiry: 0)
          }
        }
      }
    }
    let bytes = try #require(try s.cache.object(forKey: "n"))
    #expect(bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } == 2000)
    #expect(s.engine.memory.lockWord.load(.acquiring) == 0, "released")
    s.expectConsistent()
  }
}

/// Sequence words that damage left odd (found by coverage-guided fuzzing of the file):
/// writes must not invert their parity, and verify must see and repair them.
@Suite struct SequenceParityTests {
  /// A slot whose `seq` a stray store made odd (no writer died: the intent record is
  /// clear, so nothing repairs first): the next write leaves it even and readable, and a
  /// read during that write would have seen it odd, never even with the value half written.
  @Test func aWriteOverADamagedOddSlotLeavesItEvenAndReadable() throws {
    let s = try Scratch("par-slot")
    try s.cache.setObject([1, 1, 1], forKey: "a")
    let i = try #require(try s.slot(of: "a"))
    s.engine.memory.seq(i).add(1, .relaxed)
    #expect(try s.cache.object(forKey: "a") == nil, "an odd slot reads as a (busy) miss")
    try s.cache.setObject([2, 2, 2], forKey: "a")
    #expect(s.engine.memory.seq(i).load(.relaxed) & 1 == 0)
    #expect(try s.cache.object(forKey: "a") == [2, 2, 2])
    s.expectConsistent()
  }

  /// An odd shift sequence left by damage makes every miss wait; verify reports it, its
  /// repair makes it even, and so does the next removal.
  @Test func aDamagedOddShiftSequenceIsReportedAndRepaired() throws {
    let s = try Scratch("par-shift")
    try s.cache.setObject([1], forKey: "a")
    try s.cache.setObject([2], forKey: "b")
    let shift = s.engine.memory.header(.shiftSeq)
    shift.store(1, .relaxed)
    let report = try s.cache.verify()
    #expect(!report.ok && report.problems.contains { $0.contains("shift sequence") })
    let repaired = try s.cache.verify(repair: true)
    #expect(repaired.repaired >= 1)
    #expect(shift.load(.relaxed) & 1 == 0)
    #expect(try s.cache.verify().ok)
    shift.store(shift.load(.relaxed) | 1, .relaxed)
    #expect(try s.cache.removeObject(forKey: "a"))
    #expect(shift.load(.relaxed) & 1 == 0, "a removal's bracket ends even whatever it started from")
    #expect(try s.cache.object(forKey: "b") == [2])
    #expect(try s.cache.verify().ok)
  }
}

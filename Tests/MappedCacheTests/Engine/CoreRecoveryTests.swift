import Foundation
import Synchronization
import TestSupport
import Testing

@testable import MappedCache

/// Deterministic crash states: the exact words a writer SIGKILLed at a chosen instant
/// leaves in a partition (a bucket left odd, an entry in both its places, a record half
/// rewritten in place, a split or a merge of the index stopped at each of its steps, a
/// log's head half wrapped, garbage past a log's head), with the intent word set, then
/// the next write's repair. Every entry the dead writer was not changing must stay
/// readable, and verify must pass. (The random SIGKILL loops are in CoreConcurrencyTests
/// and ReliabilityLockTests; these pin down the instants they rarely hit.)
@Suite struct CoreRecoveryTests {
  private func value(_ k: String) -> [UInt8] { CoreValue.make(key: k, writer: 0, seq: 0, size: 40) }

  /// Runs `body` as a writer of the one partition that then dies (`_crashDuring`), with
  /// `key`'s entry found and a set of `newValue` prepared (its bytes `kb`, `vb`).
  private func crashDuringSet(
    _ c: SharedCache<[UInt8]>, _ key: String, _ newValue: [UInt8],
    _ body: (
      borrowing LockedPartition, BucketIndex.Entry, Writer.PreparedWrite, UnsafeRawBufferPointer, UnsafeRawBufferPointer
    ) throws -> Void
  ) throws {
    let e = c.engine
    try e._crashDuring(partition: 0) { part in
      try Array(key.utf8).withUnsafeBytes { kb in
        try newValue.withUnsafeBytes { vb in
          let looked = part.index.find(
            kb, placement: Placement(hash: KeyHash.key(kb), groups: part.index.groups), part.held)
          let found = try #require(looked)
          try body(part, found, try e.writer.prepare(kb, vb, expiry: 0), kb, vb)
        }
      }
    }
  }

  /// The keys a test stores first: named, or `count` keys whose first place is `place`.
  private enum Keys {
    case named([String])
    case inBucket(Place, count: Int, tag: String)
  }

  /// A fresh one-partition cache holding `keys`, each with its `value`, for `body`; the
  /// file is removed after.
  private func withFilledCache(
    _ name: String, capacity: Int = 1 << 20, keys: Keys,
    _ body: (SharedCache<[UInt8]>, CacheEngine, [String]) throws -> Void
  ) throws {
    let (c, path) = try coreCache(name, capacity: capacity)
    defer { TestFiles.cleanup(path) }
    let ks: [String]
    switch keys {
    case .named(let names): ks = names
    case .inBucket(let place, let count, let tag): ks = c.engine.keys(first: place, count: count, tag: tag)
    }
    for k in ks { try c.setObject(value(k), forKey: k) }
    try body(c, c.engine, ks)
  }

  /// Laps of sets through the logs after a repair: verify passes, and the last lap's
  /// entry reads back.
  private func expectLapsKeepTheLogsWhole(_ c: SharedCache<[UInt8]>, _ comment: String) throws {
    for i in 0..<3000 { try c.setObject(value("lap\(i)"), forKey: "lap\(i)") }
    let r = try c.verify()
    #expect(r.ok, "\(comment)after laps: \(r.problems)")
    #expect(try c.object(forKey: "lap2999") == value("lap2999"))
  }

  /// Every key of `keys` reads back its `value`, verify passes, and the counts match.
  private func expectAllThere(_ c: SharedCache<[UInt8]>, _ keys: [String], _ comment: Comment? = nil) throws {
    for k in keys { #expect(try c.object(forKey: k) == value(k), "\(k) lost \(comment.map { "\($0)" } ?? "")") }
    let r = try c.verify()
    #expect(r.ok, "\(r.problems) \(comment.map { "\($0)" } ?? "")")
    #expect(c.statistics.entries == r.entries)
  }

  /// The writer died inside a bucket's seqlock write (the bucket odd, the intent word
  /// set): repair checks the bucket's entries one by one and keeps every whole one.
  @Test func anOddBucketKeepsItsEntries() throws {
    let place = Place(group: 0, bucket: 2)
    try withFilledCache("rec-odd", keys: .inBucket(place, count: 6, tag: "odd")) { c, e, ks in
      try e._crashDuring(partition: 0) { part in part.index._toggleSequence(place, part.held) }
      // Readers meanwhile answer (a busy miss) rather than hang, and never a wrong value.
      for k in ks {
        let v = try c.object(forKey: k)
        #expect(v == nil || v == value(k))
      }
      try c.setObject([1], forKey: "next write")  // repairs first
      #expect(c.statistics.recoveries == 1)
      try expectAllThere(c, ks)
    }
  }

  /// A pending limit damaged below the main log's base (a stray store, no writer died):
  /// the next write that grows the index must not lower the main log's limit to it (a
  /// trap, found by `scripts/fuzz-long.sh`, seed 0x6e884283be371d0b), but see the damage
  /// (`RecordLogs.areSane`) and repair first.
  @Test func aDamagedPendingLimitIsRepairedNotFollowed() throws {
    let (c, path) = try coreCache("rec-pending")
    defer { TestFiles.cleanup(path) }
    let before = (0..<200).map { "p\($0)" }
    for k in before { try c.setObject(value(k), forKey: k) }
    c.engine.memory.partition(0).word(.mainPendingLimit).store(319, .relaxed)
    // New keys until the index has grown: each set goes through W4's growth.
    let groups = c.engine.partition(0).index.groups
    var after: [String] = []
    for i in 0..<4000 where c.engine.partition(0).index.groups == groups || i < 10 {
      let k = "q\(i)"
      try c.setObject(value(k), forKey: k)
      after.append(k)
    }
    #expect(c.statistics.recoveries >= 1)
    #expect(c.engine.partition(0).logs.pendingLimit != 319)
    for k in after.suffix(100) { #expect(try c.object(forKey: k) == value(k), "\(k) lost after repair") }
    try expectVerifies(c)
  }

  /// A set killed inside W6, its bucket odd and the slot's word already naming the new
  /// record (written whole at W5): repair keeps the entry, with the new value; the other
  /// entries of the bucket are untouched.
  @Test func aSetKilledMidPublishKeepsAWholeValue() throws {
    let place = Place(group: 0, bucket: 1)
    try withFilledCache("rec-publish", keys: .inBucket(place, count: 4, tag: "pub")) { c, e, ks in
      let newValue = CoreValue.make(key: ks[0], writer: 1, seq: 1, size: 300)
      try e._crashDuring(partition: 0) { part in
        let key = Array(ks[0].utf8)
        let pl = Placement(hash: key.withUnsafeBytes { KeyHash.key($0) }, groups: part.index.groups)
        let found = try #require(key.withUnsafeBytes { part.index.find($0, placement: pl, part.held) })
        // W5.
        let size = RecordFormat.size(keyCount: key.count, valueCount: newValue.count, expiry: false)
        let offset = part.logs.reserve(.small, size, part.held)
        key.withUnsafeBytes { k in
          newValue.withUnsafeBytes { v in
            let c = RecordFormat.Content(
              key: k, value: v, version: part.counters.nextVersion(part.held),
              sum: KeyHash.checksum(v, hash: KeyHash.key(k)), expiry: 0)
            part.memory.writeRecord(at: offset, c, part.held)
          }
        }
        part.logs.commit(.small, size, part.held)
        // W6, killed after the word's store, the bucket still odd.
        part.index._toggleSequence(place, part.held)
        part.memory.entryWord(place, found.at.slot).store(UInt32(offset), .relaxed)
      }
      try c.setObject([1], forKey: "next write")
      #expect(try c.object(forKey: ks[0]) == newValue)
      try expectAllThere(c, Array(ks.dropFirst()))
    }
  }

  /// A counter's in-place rewrite (or a same-size set, W3) killed with the record half
  /// rewritten: the intent word names the slot, and repair drops that entry alone.
  @Test func aRewriteKilledMidwayDropsOnlyItsEntry() throws {
    let place = Place(group: 0, bucket: 3)
    try withFilledCache("rec-rewrite", keys: .inBucket(place, count: 5, tag: "rw")) { c, e, ks in
      try killRewriteMidway(of: ks[2], in: place, e)
      try c.setObject([1], forKey: "next write")
      #expect(try c.object(forKey: ks[2]) == nil, "the entry being rewritten is dropped")
      try expectAllThere(c, ks.filter { $0 != ks[2] })
    }
  }

  /// A writer killed in the middle of rewriting `key`'s value in place (W3): the intent
  /// word names its slot, the bucket `place` is left odd, and the value's first ten bytes
  /// are rewritten, so that its checksum no longer matches (nor would a reader's).
  private func killRewriteMidway(of key: String, in place: Place, _ e: CacheEngine) throws {
    let f = try #require(try e.slot(of: key))
    try e._crashDuring(partition: 0) { part in
      part.memory.word(.intent).store(Format.intentRewriteBase + UInt64(Writer.slotNumber(f.slot)), .relaxed)
      part.index._toggleSequence(place, part.held)
      let entry = try #require(part.index.entry(at: f.slot))
      let v = part.memory._byte(at: entry.offset + entry.header.headerBytes + entry.header.klen)
      for i in 0..<10 { v.storeBytes(of: 0xAB, toByteOffset: i, as: UInt8.self) }
    }
  }

  /// The same, the next write a same-size overwrite of another key of the bucket: the
  /// straight set's way, which takes the free lock at once and whose hint holds. The
  /// intent word is checked by the hinted overwrite itself (`Writer.hintedWord`, before
  /// the set looks at it again), so the set goes the general way and repairs first.
  @Test func anOverwriteAfterARewriteKilledMidwayRepairsFirst() throws {
    let place = Place(group: 0, bucket: 3)
    try withFilledCache("rec-rewrite-hinted", keys: .inBucket(place, count: 5, tag: "rh")) { c, e, ks in
      // Once more, so that the handle remembers the key's slot (`RecentSlots`).
      try c.setObject(value(ks[0]), forKey: ks[0])
      try killRewriteMidway(of: ks[2], in: place, e)
      let recoveries = c.statistics.recoveries
      let newValue = CoreValue.make(key: ks[0], writer: 0, seq: 1, size: 40)
      try c.setObject(newValue, forKey: ks[0])
      #expect(c.statistics.recoveries == recoveries + 1, "the overwrite repaired the partition first")
      #expect(try c.object(forKey: ks[0]) == newValue)
      #expect(try c.object(forKey: ks[2]) == nil, "the entry being rewritten is dropped")
      try expectAllThere(c, ks.filter { $0 != ks[0] && $0 != ks[2] })
    }
  }

  /// A rewrite that changes the record's size in place (W3b) killed after each of
  /// `MappedMemory.rewriteRecord`'s steps, shrinking, growing into the dead record a
  /// shrink left, and changing the header's form: repair drops that entry alone, and the
  /// log's chain stays whole for the laps after (the tail walks through the bytes).
  @Test func aResizingRewriteKilledAtEachStepDropsOnlyItsEntry() throws {
    for (from, to) in [(400, 100), (100, 380), (100, 300), (30, 200)] {
      for steps in 0...3 {
        try withFilledCache("rec-resize", keys: .inBucket(Place(group: 0, bucket: 2), count: 4, tag: "rs")) {
          c, e, ks in
          let k = ks[0]
          // The record's bytes: 400 of value, then (`from` smaller) a dead record after it.
          try c.setObject(CoreValue.make(key: k, writer: 0, seq: 1, size: 400), forKey: k)
          if from != 400 { try c.setObject(CoreValue.make(key: k, writer: 0, seq: 2, size: from), forKey: k) }
          let newValue = CoreValue.make(key: k, writer: 0, seq: 3, size: to)
          try crashDuringSet(c, k, newValue) { part, found, w, kb, vb in
            let room = e.writer.rewriteExtent(found, w, part)
            let extent = try #require(room, "\(from) -> \(to): W3b applies")
            part.memory.word(.intent).store(Format.intentRewriteBase + UInt64(Writer.slotNumber(found.at)), .relaxed)
            part.index._toggleSequence(found.at.place, part.held)
            part.memory.rewriteRecord(
              at: found.offset, found.header, extent: extent,
              RecordFormat.Content(key: kb, value: vb, version: 9, sum: w.sum, expiry: 0), steps: steps, part.held)
          }
          try c.setObject([1], forKey: "next write")
          #expect(try c.object(forKey: k) == nil, "\(from) -> \(to), \(steps) steps: the entry is dropped")
          try expectAllThere(c, Array(ks.dropFirst()), "\(from) -> \(to), \(steps) steps")
          try expectLapsKeepTheLogsWhole(c, "\(from) -> \(to), \(steps) steps, ")
        }
      }
    }
  }

  /// W3c killed before its rewrite: after a neighbour's copy at the head (no slot names
  /// it yet), or after its slot names the copy (the old bytes not yet taken). Nothing is
  /// lost: the growing key keeps its old value, every neighbour its own, and the logs
  /// stay whole through laps.
  @Test(arguments: [false, true])
  func aNeighbourMoveKilledBeforeTheRewriteLosesNothing(slotMoved: Bool) throws {
    try withFilledCache("rec-neighbour", keys: .named((0..<4).map { "nb\($0)" })) { c, e, ks in
      let k = ks[0]
      let newValue = CoreValue.make(key: k, writer: 0, seq: 3, size: 100)
      try crashDuringSet(c, k, newValue) { part, found, w, _, vb in
        let room = e.writer.rewriteRoom(found, w, movingLive: true, part)
        try #require((room?.moved ?? 0) > 0, "W3c applies")
        // Its first neighbour, the record right after the key's.
        let next = found.offset + found.header.size
        let d = try #require(part.memory.record(at: next))
        let named = part.index.slot(naming: next, hash: part.memory.keyHash(record: next, d), part.held)
        let n = try #require(named)
        let id = part.logs.id(containing: n.offset)
        let to = part.logs.reserve(id, n.header.size, part.held)
        part.memory.moveRecord(from: n.offset, to: to, size: n.header.size, unearned: n.header.unearned, part.held)
        part.logs.commit(id, n.header.size, part.held)
        if slotMoved { part.index.move(n.at, toRecord: to, hits: n.word & Format.hitBits, part.held) }
      }
      try c.setObject([1], forKey: "next write")
      try expectAllThere(c, ks, "slot moved: \(slotMoved)")
      #expect(try c.verify().ok)
      // The growing set now runs whole.
      try c.setObject(newValue, forKey: k)
      #expect(try c.object(forKey: k) == newValue)
      try expectAllThere(c, Array(ks.dropFirst()))
      try expectLapsKeepTheLogsWhole(c, "")
    }
  }

  /// A displacement killed between its two steps: the entry stands in both its places,
  /// the move sequence odd. Readers still find it; repair keeps one copy.
  @Test func aDisplacementKilledHalfwayLeavesOneCopy() throws {
    let place = Place(group: 0, bucket: 0)
    try withFilledCache("rec-displace", keys: .inBucket(place, count: 3, tag: "mv")) { c, e, ks in
      let f = try #require(try e.slot(of: ks[1]))
      try e._crashDuring(partition: 0) { part in
        let entry = try #require(part.index.entry(at: f.slot))
        let pl = part.index.placement(of: entry, groups: part.index.groups).placement
        let other = pl.first == f.slot.place ? pl.second : pl.first
        let room = part.index.emptySlots(other)
        #expect(room != 0 && other != f.slot.place)
        part.memory.word(.moves).store(part.memory.word(.moves).load(.relaxed) | 1, .relaxed)
        part.index.publish(
          .init(place: other, slot: room.trailingZeroBitCount), offset: entry.offset, hits: entry.hits, tag: pl.tag,
          part.held)
      }
      // Both copies name one whole record: a read finds it.
      #expect(try c.object(forKey: ks[1]) == value(ks[1]))
      try c.setObject([1], forKey: "next write")
      try expectAllThere(c, ks)
      #expect(c.statistics.entries == 4)
      // An overwrite then changes the one copy left.
      try c.setObject([2], forKey: ks[1])
      #expect(try c.object(forKey: ks[1]) == [2])
      #expect(try c.verify().ok)
    }
  }

  /// A split of the index killed at each of its steps (S1-S5): the next writer's repair
  /// leaves every entry readable once, under whatever group count was published.
  @Test(arguments: [
    IndexResizer.Stop.afterRoom, .afterZeroing, .midCopy, .afterCopy, .afterPublish, .midClear,
  ])
  func aSplitKilledAtEachStepIsRepaired(_ stop: IndexResizer.Stop) throws {
    try withFilledCache("rec-split-\(stop)", capacity: 4 << 20, keys: .named((0..<1500).map { "split-\($0)" })) {
      c, e, ks in
      let groups = e.partition(0).index.groups
      try e._crashDuring(partition: 0) { part in
        let split = part.resizer.split(part.held, stopAt: stop)
        #expect(split)
        if stop == .midClear {
          // Killed inside S5's bracket: the move sequence is left odd.
          part.memory.word(.moves).store(part.memory.word(.moves).load(.relaxed) | 1, .relaxed)
        }
      }
      let published = [.afterPublish, .midClear].contains(stop)
      #expect(e.partition(0).index.groups == groups + (published ? 1 : 0))
      try c.setObject(value("after"), forKey: "after")
      try expectAllThere(c, ks + ["after"], "stopped \(stop)")
      // The index goes on growing and shrinking from there.
      for k in (0..<3000).map({ "more-\($0)" }) { try c.setObject(value(k), forKey: k) }
      #expect(try c.verify().ok)
    }
  }

  /// A merge of the index's last group killed at each of its steps (M2, M3): the next
  /// writer's repair leaves every entry readable once.
  @Test(arguments: [IndexResizer.Stop.midCopy, .afterCopy, .afterPublish])
  func aMergeKilledAtEachStepIsRepaired(_ stop: IndexResizer.Stop) throws {
    try withFilledCache("rec-merge-\(stop)", capacity: 4 << 20, keys: .named((0..<1500).map { "merge-\($0)" })) {
      c, e, ks in
      // A sparse index: most keys removed, then the merge.
      for k in ks.dropFirst(300) { try c.removeObject(forKey: k) }
      let kept = Array(ks.prefix(300))
      let groups = e.partition(0).index.groups
      try e._crashDuring(partition: 0) { part in
        let merged = part.resizer.merge(part.held, stopAt: stop)
        #expect(merged)
      }
      #expect(e.partition(0).index.groups == groups - (stop == .afterPublish ? 1 : 0))
      try c.setObject(value("after"), forKey: "after")
      try expectAllThere(c, kept + ["after"], "stopped \(stop)")
    }
  }

  /// A log's head wrap killed between its stores: the wrap marker written (and, for
  /// main, its place noted) but the head not moved. The log goes on as if nothing
  /// happened: the marker lies past the head.
  @Test func aWrapKilledBeforeTheHeadMovesChangesNothing() throws {
    try withFilledCache("rec-wrap", keys: .named((0..<50).map { "w\($0)" })) { c, e, ks in
      try e._crashDuring(partition: 0) { part in
        let s = part.logs.state(.small)
        part.memory.writeWrapMarker(at: s.head.offset, part.held)
        part.memory.word(.mainLastWrap).store(UInt64(part.logs.state(.main).head.offset), .relaxed)
      }
      try c.setObject(value("new"), forKey: "new")
      try expectAllThere(c, ks + ["new"])
    }
  }

  /// The writer died while writing a record past the log's head (before publishing it):
  /// garbage after the head, intent set. Nothing stored is lost.
  @Test func halfWrittenRecordIsIgnored() throws {
    try withFilledCache("rec-record", keys: .named((0..<50).map { "r\($0)" })) { c, e, ks in
      try e._crashDuring(partition: 0) { part in
        let junk = part.memory._byte(at: part.logs.state(.small).head.offset)
        for i in 0..<200 { junk.storeBytes(of: UInt8(truncatingIfNeeded: i &* 91), toByteOffset: i, as: UInt8.self) }
      }
      try c.setObject(value("new"), forKey: "new")
      try expectAllThere(c, ks + ["new"])
    }
  }

  /// A repair killed midway (the intent word still set) is redone by the next writer.
  @Test func aRepairKilledMidwayIsRepairedAgain() throws {
    let place = Place(group: 0, bucket: 2)
    try withFilledCache("rec-rerepair", keys: .inBucket(place, count: 4, tag: "rr")) { c, e, ks in
      try e._crashDuring(partition: 0) { part in part.index._toggleSequence(place, part.held) }
      // The first repair "dies" having done nothing but set the intent word (it is set).
      try e._crashDuring(partition: 0) { _ in }
      try c.setObject([1], forKey: "next")
      try expectAllThere(c, ks)
      #expect(c.statistics.recoveries == 2)
    }
  }
}

import CheckedValues
import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// `Writer.overwriteHinted`: the common set, an overwrite in place of the slot W0 saw
/// holding the key's tag in its first bucket (else in its second), checked again under
/// the lock. Whatever it cannot prove (another key behind the tag, a slot changed since
/// W0, another length) it leaves to the general path, changing nothing.
@Suite struct CoreHintedOverwriteTests {
  /// W0 of a set of `v` for `key`, its hint made now.
  private func prepared(_ engine: CacheEngine, _ key: [UInt8], _ v: [UInt8]) throws -> Writer.PreparedWrite {
    try key.withUnsafeBytes { kb in try v.withUnsafeBytes { try engine.writer.prepare(kb, $0, expiry: 0) } }
  }

  /// `Writer.overwriteHinted` of `w` (prepared for `key` and `v`) under partition 0's lock.
  private func overwrite(_ engine: CacheEngine, _ key: [UInt8], _ v: [UInt8], _ w: Writer.PreparedWrite) throws
    -> UInt32?
  {
    let lock = try #require(engine.lock)
    return try lock.withLock(0) { part in
      key.withUnsafeBytes { kb in
        v.withUnsafeBytes { engine.writer.overwriteHinted(kb, $0, w, part) }
      }
    }
  }

  /// The slot `RecentSlots` remembers for `key`, its place computed under the index's
  /// group count now (as W0 computes it).
  private func remembered(_ engine: CacheEngine, _ key: String) -> BucketIndex.Slot? {
    let hash = Array(key.utf8).withUnsafeBytes { KeyHash.key($0) }
    guard let r = engine.writer.recent.recall(hash) else { return nil }
    let pl = Placement(hash: hash, groups: engine.partition(0).index.groups)
    return BucketIndex.Slot(place: r.second ? pl.second : pl.first, slot: r.slot)
  }

  /// Two keys of partition 0 with the same first place and the same tag under the
  /// index's group count now.
  private func tagTwins(_ engine: CacheEngine) -> (String, String) {
    let groups = engine.partition(0).index.groups
    var seen: [Int: String] = [:]
    var i = 0
    while true {
      let k = "twin-\(i)"
      i += 1
      let h = Array(k.utf8).withUnsafeBytes { KeyHash.key($0) }
      guard engine.partitionNumber(h) == 0 else { continue }
      let pl = Placement(hash: h, groups: groups)
      let id = (pl.first.number << 16) | Int(pl.tag)
      if let twin = seen[id] { return (twin, k) }
      seen[id] = k
    }
  }

  /// A batch write prepares its entries 16 at a time into two temporary buffers, which
  /// stay on the stack only within 1 KiB each (`aBatchReadAllocatesNothing` counts the
  /// heap allocations): the hint must not grow a prepared write past that.
  @Test func aGroupOfPreparedWritesFitsTheStack() {
    #expect(MemoryLayout<Writer.PreparedWrite>.stride * CacheEngine.batchGroup <= 1024)
  }

  /// An overwrite of the same length keeps the record where it is, takes a new
  /// version and counts as a set.
  @Test func aSameLengthOverwriteStaysInPlaceWithANewVersion() throws {
    let (c, path) = try coreCache("hint-inplace")
    defer { TestFiles.cleanup(path) }
    let k = "steady"
    try c.setObject(coreValue(k, 64, 1), forKey: k)
    let before = try #require(try c.engine.entry(of: k))
    let sets = c.statistics.sets
    for seq in 2...5 {
      let v = coreValue(k, 64, seq)
      try c.setObject(v, forKey: k)
      #expect(try c.object(forKey: k) == v)
    }
    let after = try #require(try c.engine.entry(of: k))
    #expect(after.at == before.at && after.offset == before.offset, "rewritten in place")
    #expect(after.header.version > before.header.version)
    #expect(c.statistics.sets == sets + 4)
    try expectVerifies(c)
  }

  /// The hint names the first slot with the key's tag; when that slot holds another
  /// key (a tag twin), the set goes on to the key's own slot and leaves the twin alone.
  @Test func aKeyBehindItsTagTwinIsOverwrittenNotTheTwin() throws {
    let (c, path) = try coreCache("hint-twins")
    defer { TestFiles.cleanup(path) }
    let (a, b) = tagTwins(c.engine)
    try c.setObject(coreValue(a, 64, 1), forKey: a)
    try c.setObject(coreValue(b, 64, 1), forKey: b)
    let ea = try #require(try c.engine.entry(of: a))
    let eb = try #require(try c.engine.entry(of: b))
    #expect(ea.at.place == eb.at.place && ea.at.slot < eb.at.slot, "the twin first in the bucket")
    for seq in 2...4 {
      try c.setObject(coreValue(b, 64, seq), forKey: b)
      #expect(try c.object(forKey: b) == coreValue(b, 64, seq))
      #expect(try c.object(forKey: a) == coreValue(a, 64, 1), "the twin untouched")
    }
    #expect(try c.engine.entry(of: b)?.offset == eb.offset, "in place")
    try c.setObject(coreValue(a, 64, 9), forKey: a)
    #expect(try c.object(forKey: a) == coreValue(a, 64, 9))
    #expect(try c.object(forKey: b) == coreValue(b, 64, 4))
    try expectVerifies(c)
  }

  /// A key whose first bucket was full when it was added lives in its second. W0 looks
  /// there when the first has no slot with its tag, so the key's sets are hinted
  /// overwrites in place too, and the slot is remembered for the next.
  @Test func aKeyInItsSecondBucketIsOverwrittenFromItsHint() throws {
    let (c, path) = try coreCache("hint-second")
    defer { TestFiles.cleanup(path) }
    let engine = c.engine
    let groups = engine.partition(0).index.groups
    let (k, pl) = try #require(
      (0..<64).lazy.map { "second-\($0)" }.map { k in
        (k, Array(k.utf8).withUnsafeBytes { Placement(hash: KeyHash.key($0), groups: groups) })
      }.first { $0.1.first != $0.1.second })
    let key = Array(k.utf8)
    for f in engine.keys(first: pl.first, count: Format.slotsPerBucket, tag: "filler") {
      try c.setObject(coreValue(f, 64, 1), forKey: f)
    }
    try c.setObject(coreValue(k, 64, 1), forKey: k)
    let before = try #require(try engine.entry(of: k))
    #expect(before.at.place == pl.second, "its first bucket was full")
    let next = coreValue(k, 64, 2)
    let w = try prepared(engine, key, next)
    #expect(!w.hint.isNone && w.hint.place == pl.second && w.hint.slot == before.at.slot)
    let sets = c.statistics.sets
    #expect(try overwrite(engine, key, next, w) != nil, "the hinted overwrite, in the second bucket")
    #expect(try c.object(forKey: k) == next)
    #expect(c.statistics.sets == sets + 1)
    #expect(remembered(engine, k)?.place == pl.second, "remembered")
    try c.setObject(coreValue(k, 64, 3), forKey: k)
    #expect(try c.object(forKey: k) == coreValue(k, 64, 3))
    let after = try #require(try engine.entry(of: k))
    #expect(after.at == before.at && after.offset == before.offset, "rewritten in place")
    try expectVerifies(c)
  }

  /// `RecentSlots`: a set remembers the slot W0 found its key in, the next set of the
  /// key starts from it, and a remembered slot that no longer holds the key (it moved)
  /// is forgotten after the set has stored the value by the general path.
  @Test func aRememberedSlotIsUsedThenForgottenWhenTheKeyMoves() throws {
    let (c, path) = try coreCache("hint-recent")
    defer { TestFiles.cleanup(path) }
    let engine = c.engine
    let k = "recalled"
    try c.setObject(coreValue(k, 64, 1), forKey: k)
    #expect(remembered(engine, k) == nil, "a new key: nothing in its bucket to remember")
    try c.setObject(coreValue(k, 64, 2), forKey: k)
    let at = try #require(try engine.entry(of: k)).at
    #expect(remembered(engine, k) == at)
    try c.setObject(coreValue(k, 64, 3), forKey: k)
    #expect(try c.object(forKey: k) == coreValue(k, 64, 3))
    #expect(try engine.entry(of: k)?.at == at, "in place, from the remembered slot")
    // The key moves: removed, its slot taken by another key of the bucket, then set again.
    _ = try c.removeObject(forKey: k)
    let others = engine.keys(first: at.place, count: at.slot + 1, tag: "other")
    for o in others { try c.setObject(coreValue(o, 64, 1), forKey: o) }
    try c.setObject(coreValue(k, 64, 4), forKey: k)
    #expect(try c.object(forKey: k) == coreValue(k, 64, 4))
    try c.setObject(coreValue(k, 64, 5), forKey: k)
    #expect(try c.object(forKey: k) == coreValue(k, 64, 5), "the stale slot is not trusted")
    for o in others { #expect(try c.object(forKey: o) == coreValue(o, 64, 1), "\(o) untouched") }
    let moved = try #require(try engine.entry(of: k)).at
    #expect(remembered(engine, k).map { $0 == moved } ?? true)
    try expectVerifies(c)
  }

  /// A remembered slot names a slot of one of the key's places as W0 computes them now,
  /// whatever the index did since: after splits, then merges, moved entries, each key's
  /// next set stores its value (in place where the slot still holds the key, else by the
  /// general path), and no other key changes.
  @Test func rememberedSlotsStaySafeWhenTheIndexSplitsAndMerges() throws {
    let (c, path) = try coreCache("hint-split")
    defer { TestFiles.cleanup(path) }
    let engine = c.engine
    let ks = (0..<300).map { "resized-\($0)" }
    for seq in 1...2 { for k in ks { try c.setObject(coreValue(k, 64, seq), forKey: k) } }
    #expect(ks.contains { remembered(engine, $0) != nil })
    let places = try ks.map { try engine.entry(of: $0)?.at }
    let lock = try #require(engine.lock)
    let groups = engine.partition(0).index.groups
    /// Up to `times` of `step` under partition 0's lock; how many did something.
    func resize(_ times: Int, _ step: (IndexResizer, borrowing WriteLock.Held) -> Bool) throws -> Int {
      try lock.withLock(0) { part in
        (0..<times).reduce(0) { n, _ in step(part.resizer, part.held) ? n + 1 : n }
      }
    }
    let split = try resize(8) { $0.split($1) }
    #expect(split > 0 && engine.partition(0).index.groups == groups + split)
    #expect(try zip(ks, places).contains { try engine.entry(of: $0.0)?.at != $0.1 }, "some entries moved")
    for k in ks { try c.setObject(coreValue(k, 64, 3), forKey: k) }
    for k in ks { #expect(try c.object(forKey: k) == coreValue(k, 64, 3), "\(k) after \(split) splits") }
    let merged = try resize(split) { $0.merge($1) }
    #expect(merged > 0 && engine.partition(0).index.groups == groups + split - merged)
    for k in ks { try c.setObject(coreValue(k, 64, 4), forKey: k) }
    for k in ks { #expect(try c.object(forKey: k) == coreValue(k, 64, 4), "\(k) after \(merged) merges") }
    #expect(c.statistics.entries == ks.count)
    try expectVerifies(c)
  }

  /// `RecentSlots` keeps an entry in one word: `recall` gives back what `remember` stored,
  /// for that key's hash only (a key sharing the entry gets nil), `forget` drops only
  /// its own key's entry, and another key's `remember` replaces it.
  @Test func recentSlotsKeepEachEntryWhole() {
    let r = RecentSlots.allocate()
    defer { r.deallocate() }
    let h: UInt64 = 0xDEAD_BEEF_0000_1235
    let twin = h ^ (1 << 50)
    #expect(r.recall(h) == nil)
    r.remember(h, word: 0xFFFF_FFFF, slot: 9, second: true)
    let got = r.recall(h)
    #expect(got?.word == 0xFFFF_FFFF && got?.slot == 9 && got?.second == true)
    #expect(r.recall(twin) == nil, "another key's entry")
    r.forget(twin)
    #expect(r.recall(h)?.slot == 9, "forget drops only its own key's entry")
    r.remember(twin, word: 7, slot: 0, second: false)
    #expect(r.recall(h) == nil && r.recall(twin)?.word == 7 && r.recall(twin)?.second == false)
    r.forget(twin)
    #expect(r.recall(twin) == nil)
  }

  /// Under the lock, a hint the slot no longer matches (the key rewritten elsewhere
  /// since W0), or a value of another length, gives nil and changes nothing.
  @Test func aStaleHintOrAnotherLengthChangesNothing() throws {
    let (c, path) = try coreCache("hint-stale")
    defer { TestFiles.cleanup(path) }
    let engine = c.engine
    let k = "moving"
    let key = Array(k.utf8)
    try c.setObject(coreValue(k, 64, 1), forKey: k)
    let next = coreValue(k, 64, 2)
    let stale = try prepared(engine, key, next)
    #expect(!stale.hint.isNone, "W0 saw the key's tag")
    // The entry moves: removed, then set again with a longer value (a new record).
    _ = try c.removeObject(forKey: k)
    try c.setObject(coreValue(k, 200, 3), forKey: k)
    let sets = c.statistics.sets
    #expect(try overwrite(engine, key, next, stale) == nil, "the slot's word changed")
    // A fresh hint, but a value of another length: W3b's, not this path's.
    let longer = coreValue(k, 100, 4)
    #expect(try overwrite(engine, key, longer, try prepared(engine, key, longer)) == nil, "another length")
    #expect(try c.object(forKey: k) == coreValue(k, 200, 3), "nothing changed")
    #expect(c.statistics.sets == sets)
    #expect(engine.partition(0).memory.word(.intent).load(.relaxed) == 0)
    try c.setObject(longer, forKey: k)
    #expect(try c.object(forKey: k) == longer, "the general path stores it")
    try expectVerifies(c)
  }

  /// `CacheEngine.set`'s straight path takes keys of up to 16 bytes, but only within the
  /// file's key limit: a file made for 8-byte keys refuses a 12-byte one, as the
  /// general path does, however its bytes came (a key of that length written earlier
  /// is never overwritten by it), and keeps storing keys that fit.
  @Test func theStraightPathKeepsTheFilesKeyLimit() throws {
    let (c, path) = try coreCache("hint-keylimit") { $0.maxKeySize = 8 }
    defer { TestFiles.cleanup(path) }
    for seq in 1...3 {
      try c.setObject(coreValue("eight-ch", 64, seq), forKey: "eight-ch")
      #expect(try c.object(forKey: "eight-ch") == coreValue("eight-ch", 64, seq))
    }
    #expect(throws: CacheError.keyTooLarge(size: 12, limit: 8)) {
      try c.setObject(coreValue("twelve-chars", 64, 1), forKey: "twelve-chars")
    }
    #expect(throws: CacheError.emptyKey) { try c.setObject([1], forKey: "") }
    #expect(c.statistics.entries == 1)
    try expectVerifies(c)
  }

  /// What the straight path leaves to the general one is stored all the same, each
  /// overwrite in place where the record's size allows: a key longer than 16 bytes, a
  /// value with an expiry, a set under a condition, a set while another holder has the
  /// partition's lock word (here a live one: this process's own token, released
  /// meanwhile by a thread), and the new key that the path finds no slot for.
  @Test func theGeneralPathTakesWhatTheStraightPathLeaves() throws {
    let (c, path) = try coreCache("hint-general")
    defer { TestFiles.cleanup(path) }
    let long = String(repeating: "l", count: 40)
    for seq in 1...3 {
      try c.setObject(coreValue(long, 64, seq), forKey: long)
      try c.setObject(coreValue("ttl", 64, seq), forKey: "ttl", expires: .seconds(600))
    }
    #expect(try c.object(forKey: long) == coreValue(long, 64, 3))
    #expect(try c.object(forKey: "ttl") == coreValue("ttl", 64, 3))
    let inPlace = try #require(try c.engine.entry(of: long)).offset
    try c.setObject(coreValue(long, 64, 4), forKey: long)
    #expect(try c.engine.entry(of: long)?.offset == inPlace, "a long key's overwrite stays in place")
    #expect(try c.add(coreValue("fresh", 64, 1), forKey: "fresh"))
    #expect(try !c.add(coreValue("fresh", 64, 2), forKey: "fresh"))
    #expect(try c.object(forKey: "fresh") == coreValue("fresh", 64, 1))
    // The lock word held by a thread: the set waits in the general path until it lets go.
    let lock = try #require(c.engine.lock)
    let word = c.engine.partition(0).memory.lockWord
    let taken = DispatchSemaphore(value: 0)
    let released = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
      _ = try? lock.withLock(0) { _ in
        taken.signal()
        Thread.sleep(forTimeInterval: 0.05)
      }
      released.signal()
    }
    taken.wait()
    #expect(word.load(.relaxed) != 0, "held by the thread")
    try c.setObject(coreValue("fresh", 64, 3), forKey: "fresh")
    released.wait()
    #expect(try c.object(forKey: "fresh") == coreValue("fresh", 64, 3))
    #expect(word.load(.relaxed) == 0, "released after the set")
    try expectVerifies(c)
  }
}

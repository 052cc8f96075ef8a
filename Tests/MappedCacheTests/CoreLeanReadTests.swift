import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// What the common read's straight line (`Reader.quickCopy`: the first slot of the first
/// bucket whose tag matches, a short record that fits) leaves to the rest of the read,
/// each case read by `copyBytes` (String and bytes), `object` and a batch: the key in its
/// second place, a colliding tag before the key's own slot, entries with an expiry, and
/// damaged offsets in the key's slot.
@Suite struct CoreLeanReadTests {
  /// A one-partition `[UInt8]` cache.
  static func cache(_ name: String) throws -> (SharedCache<[UInt8]>, String) {
    let path = TestFiles.tempPath(name)
    let o = CoreOptions.make(partitioned: false, capacity: 1 << 20)
    return (try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, options: o), path)
  }

  /// `key`'s placement in partition 0 as it is now.
  static func placement(_ c: SharedCache<[UInt8]>, _ key: String) -> Placement {
    let hash = Array(key.utf8).withUnsafeBytes { KeyHash.key($0) }
    return Placement(hash: hash, groups: BucketIndex(part: c.engine.memory.partition(0)).groups)
  }

  /// `key` read every way a caller can: each answer must be `expected`.
  static func expectReads(
    _ c: SharedCache<[UInt8]>, _ key: String, _ expected: [UInt8]?, sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 256, alignment: 16)
    defer { buf.deallocate() }
    let n = try c.copyBytes(forKey: key, into: buf)
    #expect(n.map { Array(buf[0..<$0]) } == expected, "copyBytes (String)", sourceLocation: sourceLocation)
    let bytes = Array(key.utf8)
    let m = try bytes.withUnsafeBytes { try c.copyBytes(forKey: $0, into: buf) }
    #expect(m.map { Array(buf[0..<$0]) } == expected, "copyBytes (bytes)", sourceLocation: sourceLocation)
    #expect(try c.object(forKey: key) == expected, "object", sourceLocation: sourceLocation)
    var lengths = [0]
    try bytes.withUnsafeBytes { k in
      try [k].withUnsafeBufferPointer { keys in
        try [buf].withUnsafeBufferPointer { buffers in
          _ = try lengths.withUnsafeMutableBufferPointer { try c.copyBytes(forKeys: keys, into: buffers, lengths: $0) }
        }
      }
    }
    let batch = lengths[0] < 0 ? nil : Array(buf[0..<lengths[0]])
    #expect(batch == expected, "a batch of one", sourceLocation: sourceLocation)
  }

  /// A key whose first bucket is full lives in its second: the straight line sees no
  /// tag of its own in the first and reads the second; a key absent from both is a miss
  /// only the rest of the read (both buckets stable, nothing moved) may declare.
  @Test func aKeyInItsSecondPlaceIsFound() throws {
    let (c, path) = try Self.cache("lean-second")
    defer { TestFiles.cleanup(path) }
    let target = try #require(
      (0..<1000).map { "target-\($0)" }.first { k in
        let pl = Self.placement(c, k)
        return pl.first != pl.second
      })
    let first = Self.placement(c, target).first
    // Ten keys whose first place is the target's: they fill its first bucket.
    var fillers: [String] = []
    var i = 0
    while fillers.count < Format.slotsPerBucket {
      let k = "filler-\(i)"
      if Self.placement(c, k).first == first { fillers.append(k) }
      i += 1
    }
    for (j, k) in fillers.enumerated() { try c.setObject([UInt8(j)], forKey: k) }
    try c.setObject([7, 7, 7], forKey: target)
    let pl = Self.placement(c, target)
    let at = try #require(try c.engine.slot(of: target))
    try #require(at.slot.place == pl.second && pl.first != pl.second, "the target lives in its second place")
    try Self.expectReads(c, target, [7, 7, 7])
    for (j, k) in fillers.enumerated() { try Self.expectReads(c, k, [UInt8(j)]) }
    try Self.expectReads(c, "absent", nil)
  }

  /// A slot before the key's own with the key's tag but another key's record: the
  /// straight line's key compare fails there, and the rest of the read goes on to the
  /// key's slot (and sets the hit bit there, not on the decoy).
  @Test func aCollidingTagBeforeTheKeysSlotIsPassed() throws {
    let (c, path) = try Self.cache("lean-collide")
    defer { TestFiles.cleanup(path) }
    let e = c.engine
    try c.setObject([1, 2, 3], forKey: "key")
    try c.setObject([9], forKey: "decoy")
    let own = try #require(try e.entry(of: "key"))
    let decoy = try #require(try e.entry(of: "decoy"))
    let part = e.memory.partition(0)
    let place = own.at.place
    let free = try #require(
      (own.at.slot + 1..<Format.slotsPerBucket).last { part.tag(place, $0) == 0 }, "a free slot after the key's")
    let tag = part.tag(place, own.at.slot)
    let moved = BucketIndex.Slot(place: place, slot: free)
    // The key's entry moves to the free slot; its old slot keeps the tag, names the decoy.
    let to = e._slotOffsets(partition: 0, moved)
    let from = e._slotOffsets(partition: 0, own.at)
    e.memory._byte(at: to.word).storeBytes(of: own.word & Format.offsetMask, as: UInt32.self)
    e.memory._byte(at: to.tag).storeBytes(of: tag, as: UInt16.self)
    e.memory._byte(at: from.word).storeBytes(of: decoy.word & Format.offsetMask, as: UInt32.self)
    try Self.expectReads(c, "key", [1, 2, 3])
    try Self.expectReads(c, "decoy", [9])
    #expect(part.entryWord(place, free).load(.relaxed) & Format.hitBits != 0, "the hit marks the key's slot")
    #expect(part.entryWord(place, own.at.slot).load(.relaxed) & Format.hitBits == 0, "and not the decoy's")
  }

  /// An entry with an expiry is judged by the rest of the read: returned before it
  /// expires, a miss after.
  @Test func entriesWithAnExpiryAreJudged() throws {
    let (c, path) = try Self.cache("lean-expiry")
    defer { TestFiles.cleanup(path) }
    try c.setObject([5, 6], forKey: "later", expires: .date(Date(timeIntervalSinceNow: 3600)))
    try c.setObject([8], forKey: "gone", expires: .date(Date(timeIntervalSinceNow: -1)))
    try c.setObject([4], forKey: "never")
    try Self.expectReads(c, "later", [5, 6])
    try Self.expectReads(c, "gone", nil)
    try Self.expectReads(c, "never", [4])
  }

  /// A slot naming an offset past the partition, across its end, inside its header
  /// lines or inside another record is a miss, never a crash and never another key's
  /// value; the entry reads again once its word is whole, and nothing else is lost.
  @Test func damagedOffsetsInTheKeysSlotAreMisses() throws {
    let (c, path) = try Self.cache("lean-damaged")
    defer { TestFiles.cleanup(path) }
    let e = c.engine
    try c.setObject(Array(repeating: 3, count: 40), forKey: "key")
    try c.setObject(Array(repeating: 4, count: 40), forKey: "other")
    let own = try #require(try e.entry(of: "key"))
    let other = try #require(try e.entry(of: "other"))
    let word = e._slotOffsets(partition: 0, own.at).word
    let bytes = e.memory.partitionBytes
    let damaged: [Int] = [
      Int(Format.offsetMask), bytes - 3, bytes - 1, 7, 0, other.offset + 1, other.offset + 3, bytes - 200,
    ]
    for offset in damaged where offset <= Int(Format.offsetMask) {
      e.memory._byte(at: word).storeBytes(of: UInt32(offset), as: UInt32.self)
      try Self.expectReads(c, "key", nil)
      try Self.expectReads(c, "other", Array(repeating: 4, count: 40))
    }
    e.memory._byte(at: word).storeBytes(of: own.word & Format.offsetMask, as: UInt32.self)
    try Self.expectReads(c, "key", Array(repeating: 3, count: 40))
  }
}

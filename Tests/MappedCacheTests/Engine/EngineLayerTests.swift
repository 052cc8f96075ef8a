import CMappedCacheShim
import CheckedValues
import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

// The engine's layers tested on their own, each through its own API on a real mapped
// file (a fresh small cache), with the invariants checked after every change: the index
// geometry, the record format, the bucket index, the index's growth, the record logs,
// the eviction policy and ghost, and the write locks.

/// A fresh small one-partition cache and its engine, removed when the value goes away.
private final class Scratch {
  let path: String
  let cache: SharedCache<[UInt8]>
  var engine: CacheEngine { cache.engine }
  var part: Partition { engine.partition(0) }

  init(_ tag: String, capacity: Int = 1 << 20, partitions: Int = 1) throws {
    path = TestFiles.tempPath(tag)
    var o = CacheOptions(capacity: capacity)
    o.partitionCount = partitions
    cache = try SharedCache<[UInt8]>(path: path, capacity: capacity, options: o)
  }

  deinit { TestFiles.cleanup(path) }

  func slot(of key: String) throws -> BucketIndex.Slot? { try engine.slot(of: key)?.slot }

  /// Runs `body` under partition 0's lock, as a write does.
  func locked<R>(_ body: (borrowing LockedPartition) throws -> R) throws -> R {
    try engine.withWriteLock(partition: 0, body)
  }

  func expectConsistent(sourceLocation: SourceLocation = #_sourceLocation) {
    let r = cache.check()
    #expect(r.ok, "\(r.problems)", sourceLocation: sourceLocation)
  }
}

@Suite struct IndexGeometryTests {
  /// Linear hashing: every address is below the count; going from n to n + 1 changes the
  /// address only of keys at the split source, and those move to n.
  @Test func addressesChangeOnlyAtTheSplitSource() {
    var rng = SplitMix(7)
    let xs = (0..<2000).map { _ in rng.next() }
    for n in 1...300 {
      let s = IndexGeometry.splitSource(groups: n)
      #expect(s >= 0 && s < n)
      for x in xs {
        let a = IndexGeometry.address(x, count: n)
        let b = IndexGeometry.address(x, count: n + 1)
        #expect(a < n && b < n + 1)
        if a != b { #expect(a == s && b == n, "n \(n): \(a) → \(b)") }
      }
    }
  }

  /// A handle's routing word (`PartitionRoute`: a count and its mask) gives every key
  /// the partition `IndexGeometry.partition` gives it, for counts up to the largest.
  @Test func theRoutingWordRoutesAsLinearHashing() {
    var rng = SplitMix(11)
    let hashes = (0..<1000).map { _ in rng.next() | 1 }
    let larger = [
      127, 128, 129, 511, 512, 513, 1023, 1024, 1025, 65_535, 65_536, 65_537, Format.maxPartitions - 1,
      Format.maxPartitions,
    ]
    for n in Array(1...70) + larger {
      let route = PartitionRoute(count: n)
      #expect(route.count == n)
      let wrong = hashes.filter { route.partition($0) != IndexGeometry.partition($0, count: n) }
      #expect(wrong.isEmpty, "count \(n): \(wrong.count) hashes routed elsewhere")
    }
  }

  /// A key's tag is never 0 (an empty slot's), and its places spread over the groups.
  @Test func tagsAndPlaces() {
    var counts = [Int](repeating: 0, count: 64 * 4)
    for i in 0..<64_000 {
      let h = Array("key-\(i)".utf8).withUnsafeBytes { KeyHash.key($0) }
      let pl = Placement(hash: h, groups: 64)
      #expect(pl.tag != 0)
      counts[pl.first.number] += 1
      counts[pl.second.number] += 1
    }
    #expect(counts.min()! > 300 && counts.max()! < 700, "\(counts.min()!)...\(counts.max()!)")
  }

  /// The geometry word: a group count and a generation that every change advances.
  @Test func geometryWords() {
    let g = Geometry(generation: 7, groups: 1234)
    #expect(g.groups == 1234 && g.generation == 7)
    #expect(g.with(groups: 1235) == Geometry(generation: 8, groups: 1235))
    #expect(g.advanced.groups == 1234 && g.advanced.generation == 8)
    #expect(Geometry(generation: .max, groups: 1).advanced.generation == 0)
  }
}

@Suite struct KeyHashTests {
  /// `fold` as the format defines it (DESIGN.md section 2's checksum and hash): one
  /// multiply per 16 bytes, then the last 16 bytes. Written out here as a loop, so that
  /// `KeyHash.fold`'s unrolled and short forms are checked against the definition.
  private static func reference(_ bytes: [UInt8], seed: UInt64) -> UInt64 {
    let p1: UInt64 = 0xA076_1D64_78BD_642F
    let p2: UInt64 = 0xE703_7ED1_A0B4_28DB
    func mix(_ a: UInt64, _ b: UInt64) -> UInt64 {
      let m = a.multipliedFullWidth(by: b)
      return m.high ^ m.low
    }
    func word(_ at: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(bytes[at + $1]) << (8 * $1) } }
    let n = bytes.count
    var h = seed ^ (UInt64(n) &* p1)
    guard n > 0 else { return mix(h ^ p2, p1) }
    guard n > 16 else {
      // The key's two words, as `shortWords` makes them.
      func tail(_ from: Int, _ r: Int) -> UInt64 {
        if r >= 4 {
          let lo = (0..<4).reduce(UInt64(0)) { $0 | UInt64(bytes[from + $1]) << (8 * $1) }
          let hi = (0..<4).reduce(UInt64(0)) { $0 | UInt64(bytes[from + r - 4 + $1]) << (8 * $1) }
          return lo | hi << 32
        }
        if r > 0 {
          return UInt64(bytes[from]) << 16 | UInt64(bytes[from + r / 2]) << 8 | UInt64(bytes[from + r - 1])
        }
        return 0
      }
      let (a, b) = n >= 8 ? (word(0), tail(8, n - 8)) : (tail(0, n), 0)
      return mix(p1 ^ UInt64(n), mix(a ^ p1, b ^ h ^ p2))
    }
    var i = 0
    while i + 16 < n {
      h = mix(word(i) ^ p1, word(i + 8) ^ h)
      i += 16
    }
    return mix(p1 ^ UInt64(n), mix(word(n - 16) ^ p1, word(n - 8) ^ h ^ p2))
  }

  /// Every length from 0 to 300 bytes (short, unrolled and looped forms), three seeds,
  /// random bytes: `fold` is the definition. A checksum that changed would make every
  /// stored record of that length fail its check.
  @Test func foldIsTheDefinitionAtEveryLength() {
    var rng = SplitMix(29)
    for n in 0...300 {
      let bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
      for seed in [UInt64(0), 0x243F_6A88_85A3_08D3, rng.next()] {
        let got = bytes.withUnsafeBytes { KeyHash.fold($0, seed: seed) }
        #expect(got == Self.reference(bytes, seed: seed), "length \(n), seed \(seed)")
      }
    }
  }
}

@Suite struct RecordFormatTests {
  /// Header sizes by form and expiry; a record's size is its header, key and value.
  @Test func sizesAndForms() {
    #expect(RecordFormat.form(keyCount: 12, valueCount: 64) == 0)
    #expect(RecordFormat.form(keyCount: 256, valueCount: 255) == 0)
    #expect(RecordFormat.form(keyCount: 12, valueCount: 256) == 1)
    #expect(RecordFormat.form(keyCount: 12, valueCount: 65_535) == 1)
    #expect(RecordFormat.form(keyCount: 12, valueCount: 65_536) == 2)
    #expect(RecordFormat.form(keyCount: 257, valueCount: 1) == 2)
    #expect(RecordFormat.size(keyCount: 12, valueCount: 64, expiry: false) == 9 + 76)
    #expect(RecordFormat.size(keyCount: 20, valueCount: 300, expiry: false) == 10 + 320)
    #expect(RecordFormat.size(keyCount: 300, valueCount: 1 << 20, expiry: true) == 19 + 300 + (1 << 20))
    #expect(RecordFormat.maxHeaderBytes == 19)
  }

  /// A dead record of exactly n bytes (W3b's leftover) exists from a header and key up,
  /// in a form whose fields hold its lengths; below that, none.
  @Test func deadRecordsOfEverySize() {
    for keyCount in [1, 12, 256, 257, 4096] {
      let smallest = (keyCount <= 256 ? 9 : 13) + keyCount
      #expect(RecordFormat.filler(size: smallest - 1, keyCount: keyCount) == nil)
      for size in Array(smallest..<(smallest + 600)) + [70_000, 1 << 20] {
        guard let f = RecordFormat.filler(size: size, keyCount: keyCount) else {
          Issue.record("no dead record of \(size) bytes, key \(keyCount)")
          continue
        }
        #expect(RecordFormat.headerBytes(form: f.form, expiry: false) + keyCount + f.valueCount == size)
        #expect(f.form == 2 || (keyCount <= 256 && f.valueCount <= (f.form == 0 ? 0xFF : 0xFFFF)))
      }
    }
  }

  /// An expiry survives the record's 48 bits (milliseconds to the year 2109 and the
  /// horizon), and later ones are held there.
  @Test func expiriesRoundTrip() {
    let now: UInt64 = 1_800_000_000_000
    for ttl: UInt64 in [1, 999, 60_000, 86_400_000, 1 << 40] {
      let word = Expiry.stamp(now + ttl, now: now)
      #expect(RecordFormat.expiryWord(stored: RecordFormat.storedExpiry(word)) == word)
    }
    let far = Expiry.stamp(Format.expiryMask, now: now)
    #expect(
      RecordFormat.expiryWord(stored: RecordFormat.storedExpiry(far)) & Format.expiryMask
        == RecordFormat.expiryMillisecondsMask)
  }

  /// `record(at:)` refuses what is not a whole entry: another kind, unknown flags, a
  /// form 3, a key or value past the limits, a record running off the partition.
  @Test func theRecordCheckRefusesDamage() throws {
    let s = try Scratch("rec-check")
    try s.cache.setObject([1, 2, 3], forKey: "key-one")
    let e = try #require(try s.engine.entry(of: "key-one"))
    let mem = s.part.memory
    #expect(mem.record(at: e.offset) != nil)
    let flags = mem._byte(at: e.offset)
    let good = flags.load(as: UInt8.self)
    for bad: UInt8 in [good | RecordFormat.kindWrap, good | 0x80, good | RecordFormat.formMask] {
      flags.storeBytes(of: bad, as: UInt8.self)
      #expect(mem.record(at: e.offset) == nil, "flags \(bad)")
    }
    flags.storeBytes(of: good, as: UInt8.self)
    // A value length past the limit, then past the partition's end.
    let vlen = mem._byte(at: e.offset + 2)
    vlen.storeBytes(of: 0xFF, as: UInt8.self)
    #expect(mem.record(at: e.offset)?.vlen == 255)
    #expect(mem.record(at: mem.limits.bytes - 20) == nil || true)
    #expect(mem.record(at: mem.limits.bytes - 1) == nil)
    #expect(mem.record(at: 0) == nil && mem.record(at: -8) == nil && mem.record(at: .max) == nil)
    vlen.storeBytes(of: 3, as: UInt8.self)
    #expect(mem.record(at: e.offset)?.vlen == 3)
  }

  /// `record(at:)` decodes a short record (form 0, no expiry) in a branch of its own
  /// wherever the longest one would still end inside the partition, and by the general
  /// decode in the partition's last bytes: both give the same header, and both refuse a
  /// key past `maxKey`, a listed record when asked to, and a record running off the end.
  @Test func theShortRecordBranchAgreesWithTheGeneralDecode() throws {
    let s = try Scratch("rec-short")
    let mem = s.part.memory
    let end = mem.limits.bytes
    let last = end - RecordFormat.maxShortRecord  // the last offset the short branch takes
    let offsets = [Format.PartitionOffset.dataStart, end / 2, last - 1, last, last + 1, end - 300, end - 40, end - 10]
    let lengths = [(1, 0), (12, 64), (mem.limits.maxKey, 255), (mem.limits.maxKey + 1, 3), (256, 0), (7, 200)]
    for offset in offsets {
      for (klen, vlen) in lengths {
        let p = mem._byte(at: offset)
        p.storeBytes(of: RecordFormat.unearnedFlag, as: UInt8.self)  // form 0, no expiry
        p.storeBytes(of: UInt8(klen - 1), toByteOffset: 1, as: UInt8.self)
        p.storeBytes(of: UInt8(vlen), toByteOffset: 2, as: UInt8.self)
        p.storeBytes(of: UInt32(0xABCD_0123), toByteOffset: 3, as: UInt32.self)
        p.storeBytes(of: UInt16(0x4567), toByteOffset: 7, as: UInt16.self)
        let fits = offset + 9 + klen + vlen <= end && klen <= mem.limits.maxKey && vlen <= mem.limits.maxValue
        let h = mem.record(at: offset)
        #expect((h != nil) == fits, "offset \(offset), key \(klen), value \(vlen)")
        if let h {
          #expect(h.klen == klen && h.vlen == vlen && h.headerBytes == 9 && h.expiry == 0, "offset \(offset)")
          #expect(h.version == 0xABCD_0123 && h.sum == 0x4567 && h.unearned && !h.hasExpiry, "offset \(offset)")
        }
        p.storeBytes(of: RecordFormat.listedFlag, as: UInt8.self)
        #expect(mem.record(at: offset, free: false) == nil, "offset \(offset)")
        #expect((mem.record(at: offset, free: true) != nil) == fits, "offset \(offset)")
      }
    }
  }
}

@Suite struct RecordCopyTests {
  /// The read's copy of a value (`mc_copy_record_bytes`) writes exactly `n` bytes, the
  /// source's, at every length through its inline sizes (0-64) and past them (`memcpy`),
  /// from any alignment: the bytes around the destination stay as they were.
  @Test func copiesExactlyTheBytesAsked() {
    let source = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
    for n in 0...140 {
      for shift in [0, 1, 7, 13] {
        var out = [UInt8](repeating: 0xEE, count: n + 32)
        source.withUnsafeBytes { s in
          out.withUnsafeMutableBytes { d in mc_copy_record_bytes(d.baseAddress! + 16, s.baseAddress! + shift, n) }
        }
        #expect(Array(out[16..<16 + n]) == Array(source[shift..<shift + n]), "n \(n), shift \(shift)")
        #expect(out[0..<16].allSatisfy { $0 == 0xEE } && out[(16 + n)...].allSatisfy { $0 == 0xEE }, "n \(n)")
      }
    }
  }
}

@Suite struct BucketIndexTests {
  /// The tag match is exact per two-byte lane: zeros are empty slots, and a lane equal to
  /// the tag is found whatever its neighbours hold.
  @Test func tagMatchingIsExact() {
    var rng = SplitMix(3)
    for _ in 0..<2000 {
      var tags = [UInt16](repeating: 0, count: 10)
      for i in 0..<10 where rng.below(3) != 0 { tags[i] = UInt16(truncatingIfNeeded: rng.next()) }
      let want = rng.below(2) == 0 ? tags[rng.below(10)] : UInt16(truncatingIfNeeded: rng.next())
      let words = (
        UInt32(tags[0]) | UInt32(tags[1]) << 16,
        (0..<4).reduce(UInt64(0)) { $0 | UInt64(tags[2 + $1]) << (16 * UInt64($1)) },
        (0..<4).reduce(UInt64(0)) { $0 | UInt64(tags[6 + $1]) << (16 * UInt64($1)) }
      )
      let expected = (0..<10).reduce(UInt32(0)) { $0 | (tags[$1] == want ? 1 << UInt32($1) : 0) }
      #expect(BucketIndex.matching(words, want) == expected)
      // The vector form the reads use, over the bytes as a bucket holds them: the ten
      // tags, then entry words (which may hold the tag's bytes, and must not match).
      var bytes = [UInt8](repeating: 0, count: 33)
      for i in 0..<10 {
        bytes[1 + 2 * i] = UInt8(truncatingIfNeeded: tags[i])
        bytes[2 + 2 * i] = UInt8(truncatingIfNeeded: tags[i] >> 8)
      }
      // (Byte 1 + 2k is lane k's low byte: each of lanes 10-15 holds the tag itself or not.)
      for lane in 10..<16 where rng.below(2) == 0 {
        bytes[1 + 2 * lane] = UInt8(truncatingIfNeeded: want)
        bytes[2 + 2 * lane] = UInt8(truncatingIfNeeded: want >> 8)
      }
      #if arch(x86_64)
        #expect(bytes.withUnsafeBytes { mc_tag_matches($0.baseAddress! + 1, want) } == expected)
      #endif
    }
    // Every lane at once, and none: the lanes' bits are gathered without carries.
    for t: UInt16 in [1, 0x7FFF, 0x8000, 0xFFFF] {
      let all = UInt64(t) &* 0x0001_0001_0001_0001
      #expect(BucketIndex.matching((UInt32(truncatingIfNeeded: all), all, all), t) == 0x3FF)
      #expect(BucketIndex.matching((UInt32(truncatingIfNeeded: all), all, all), t &+ 1) == 0)
    }
    #expect(BucketIndex.matching((0, 0, 0), 0) == 0x3FF)
  }

  /// Keys with one first place fill its bucket's ten slots in order; the eleventh goes
  /// to its second place; removing one empties its slot and nothing else moves.
  @Test func aFullBucketSendsKeysToTheirSecondPlace() throws {
    let s = try Scratch("idx-fill")
    let place = Place(group: 0, bucket: 0)
    let ks = s.engine.keys(first: place, count: 11, tag: "f")
    for k in ks { try s.cache.setObject(Array(k.utf8), forKey: k) }
    for (i, k) in ks.prefix(10).enumerated() { #expect(try s.slot(of: k) == .init(place: place, slot: i)) }
    let h = Array(ks[10].utf8).withUnsafeBytes { KeyHash.key($0) }
    let pl = Placement(hash: h, groups: s.part.index.groups)
    #expect(try s.slot(of: ks[10])?.place == pl.second)
    #expect(try s.cache.removeObject(forKey: ks[3]))
    #expect(s.part.memory.tag(place, 3) == 0)
    for (i, k) in ks.prefix(10).enumerated() where i != 3 {
      #expect(try s.slot(of: k) == .init(place: place, slot: i))
    }
    for k in ks where k != ks[3] { #expect(try s.cache.object(forKey: k) == Array(k.utf8)) }
    s.expectConsistent()
  }

  /// With both places full, a new key's slot is freed by moving an entry to its other
  /// place; every key stays readable and the index consistent.
  @Test func bothPlacesFullDisplacesAnEntry() throws {
    let s = try Scratch("idx-displace")
    let place = Place(group: 0, bucket: 1)
    let ks = s.engine.keys(first: place, count: 10, tag: "d")
    for k in ks { try s.cache.setObject(Array(k.utf8), forKey: k) }
    // A key whose first place is the full bucket, and whose second is full too.
    let groups = s.part.index.groups
    var fillers: [String] = []
    var i = 0
    let newcomer: String = {
      while true {
        let k = "new-\(i)"
        i += 1
        let pl = Placement(hash: Array(k.utf8).withUnsafeBytes { KeyHash.key($0) }, groups: groups)
        if pl.first == place && pl.second != place { return k }
      }
    }()
    let second = Placement(hash: Array(newcomer.utf8).withUnsafeBytes { KeyHash.key($0) }, groups: groups).second
    fillers = s.engine.keys(first: second, count: 10, tag: "second")
    for k in fillers { try s.cache.setObject(Array(k.utf8), forKey: k) }
    #expect(s.part.index.emptySlots(place) == 0 && s.part.index.emptySlots(second) == 0)
    try s.cache.setObject(Array(newcomer.utf8), forKey: newcomer)
    for k in ks + fillers + [newcomer] { #expect(try s.cache.object(forKey: k) == Array(k.utf8), "\(k)") }
    #expect(s.part.memory.word(.moves).load(.relaxed) >= 2, "a displacement ran, in its bracket")
    #expect(s.part.memory.word(.moves).load(.relaxed) & 1 == 0)
    s.expectConsistent()
  }

  /// A displacement judges each first-level entry as it hashes its key and stops at the
  /// first that can move; with no first-level entry able to move, the search still goes
  /// a level deeper: a shallow search finds nothing, a deep one frees a slot by a chain
  /// of two moves, and every key stays readable.
  @Test func aDisplacementGoesALevelDeeperWhenNoFirstLevelEntryCanMove() throws {
    let s = try Scratch("idx-displace-deep", capacity: 8 << 20)
    let place = Place(group: 0, bucket: 1)
    let groups = s.part.index.groups
    var stored = s.engine.keys(first: place, count: 10, tag: "d")
    for k in stored { try s.cache.setObject(Array(k.utf8), forKey: k) }
    var i = 0
    let newcomer: Placement = {
      while true {
        let pl = Placement(hash: Array("new-\(i)".utf8).withUnsafeBytes { KeyHash.key($0) }, groups: groups)
        i += 1
        if pl.first == place && pl.second != place { return pl }
      }
    }()
    // Fills `target` with keys whose first place it is.
    func fill(_ target: Place, tag: String) throws {
      var candidates = s.engine.keys(first: target, count: 40, tag: tag)[...]
      while s.part.index.emptySlots(target) != 0, let k = candidates.popFirst() {
        try s.cache.setObject(Array(k.utf8), forKey: k)
        stored.append(k)
      }
    }
    try fill(newcomer.second, tag: "second")
    // Every first-level entry's other place, full too.
    let firstLevel = (0..<Format.slotsPerBucket).flatMap { slot in
      [place, newcomer.second].compactMap { s.part.index.entry(at: BucketIndex.Slot(place: $0, slot: slot)) }
    }
    #expect(firstLevel.count == 2 * Format.slotsPerBucket)
    for (n, e) in firstLevel.enumerated() {
      let pl = s.part.index.placement(of: e, groups: groups).placement
      let other = pl.first == e.at.place ? pl.second : pl.first
      try fill(other, tag: "o\(n)")
    }
    try #require(s.part.index.groups == groups, "the index kept its size while filling")
    for e in firstLevel {
      let pl = s.part.index.placement(of: e, groups: groups).placement
      #expect(s.part.index.emptySlots(pl.first == e.at.place ? pl.second : pl.first) == 0)
    }
    let movesBefore = s.part.memory.word(.moves).load(.relaxed)
    let shallow = try s.locked { part in
      part.index.allocate(newcomer, searchLimit: BucketIndex.shallowSearch, part.held)
    }
    #expect(shallow == nil, "no first-level entry can move")
    #expect(s.part.memory.word(.moves).load(.relaxed) == movesBefore, "a failed search moves nothing")
    let deep = try s.locked { part in
      part.index.allocate(newcomer, searchLimit: BucketIndex.deepSearch, part.held)
    }
    let freed = try #require(deep)
    #expect(freed.place == place || freed.place == newcomer.second)
    #expect(s.part.index.entry(at: freed) == nil, "the slot is free")
    #expect(s.part.memory.word(.moves).load(.relaxed) == movesBefore + 2, "the chain moved in one bracket")
    for k in stored { #expect(try s.cache.object(forKey: k) == Array(k.utf8), "\(k)") }
    s.expectConsistent()
  }

  /// The ghost's recall finds a tag in any way of its line in use, forgets it there
  /// alone, and ignores ways past those in use (`GhostTable.ways`).
  @Test func theGhostRecallsAnyWayInUseAndNoneBeyond() throws {
    let s = try Scratch("ghost-ways")
    try s.locked { part in
      let ghost = GhostTable(index: part.index)
      let groups = part.index.groups
      let many = 32 * groups * 2
      // Hashes of one group: remembered newest first, the first ends deepest in the line.
      var hashes: [UInt64] = []
      var h: UInt64 = 1
      while hashes.count < 6 {
        h = h &* 0x9E37_79B9_7F4A_7C15 | 1
        let tag = IndexGeometry.ghostTag(h)
        let unseen = !hashes.contains { IndexGeometry.ghostTag($0) == tag }
        if Placement(hash: h, groups: groups).first.group == 0 && unseen { hashes.append(h) }
      }
      for x in hashes { ghost.remember(x, entries: many, part.held) }
      #expect(part.memory.ghost(0, 5) == IndexGeometry.ghostTag(hashes[0]))
      let r1 = ghost.recall(hashes[0], entries: many, part.held)
      #expect(r1, "way 5 recalled")
      #expect(part.memory.ghost(0, 5) == 0 && part.memory.ghost(0, 4) == IndexGeometry.ghostTag(hashes[1]))
      let r2 = ghost.recall(hashes[0], entries: many, part.held)
      #expect(!r2, "forgotten once recalled")
      // With one way in use, a tag in way 4 is past the line's end.
      #expect(GhostTable.ways(entries: 1, groups: groups) == 1)
      let r3 = ghost.recall(hashes[1], entries: 1, part.held)
      #expect(!r3)
      let r4 = ghost.recall(hashes[1], entries: many, part.held)
      #expect(r4)
      let r5 = ghost.recall(hashes[5], entries: 1, part.held)
      #expect(r5, "way 0 is always in use")
      // The last way of a full line.
      part.memory.storeGhost(0, 31, IndexGeometry.ghostTag(hashes[2]), part.held)
      part.memory.storeGhost(0, 3, 0, part.held)
      let r6 = ghost.recall(hashes[2], entries: many, part.held)
      #expect(r6)
      #expect(part.memory.ghost(0, 31) == 0)
    }
  }

  /// The seqlock read reports an odd bucket as busy and hands out nothing from it.
  @Test func theSeqlockReadRefusesAnOddBucket() throws {
    let s = try Scratch("idx-seqlock")
    try s.cache.setObject([5], forKey: "k")
    let at = try #require(try s.slot(of: "k"))
    let index = s.part.index
    guard case .stable(let tag) = index.seqlockRead(at.place, { s.part.memory.tag(at.place, at.slot) }) else {
      Issue.record("a quiet bucket reads as stable")
      return
    }
    #expect(tag != 0)
    s.part.memory.seq(at.place).add(1, .relaxed)
    var ran = false
    if case .busy = index.seqlockRead(at.place, { ran = true }) {} else { Issue.record("an odd bucket is busy") }
    #expect(!ran, "nothing is read from an odd bucket")
    s.part.memory.seq(at.place).add(1, .relaxed)
  }
}

@Suite struct IndexResizerTests {
  /// The index grows from its start as entries arrive (one group per split), every entry
  /// stays readable through the splits, and it gives groups back once they are sparse.
  @Test func theIndexGrowsAndShrinksWithTheEntries() throws {
    let s = try Scratch("idx-grow", capacity: 4 << 20)
    let start = s.part.index.groups
    let ks = (0..<20_000).map { "g-\($0)" }
    for k in ks { try s.cache.setObject([1], forKey: k) }
    let grown = s.part.index.groups
    #expect(grown > start && s.cache.statistics.indexSplits == grown - start)
    #expect(Double(ks.count) <= 0.95 * Double(grown * 40) + 40)
    for k in ks { #expect(try s.cache.object(forKey: k) == [1]) }
    s.expectConsistent()
    // Merges, directly: each keeps every entry, until one would not fit.
    var merged = 0
    for k in ks.dropFirst(2000) { try s.cache.removeObject(forKey: k) }
    while try s.locked({ part in part.resizer.merge(part.held) }) && merged < 100_000 { merged += 1 }
    #expect(merged > 0 && s.part.index.groups < grown)
    for k in ks.prefix(2000) { #expect(try s.cache.object(forKey: k) == [1], "\(k) after \(merged) merges") }
    s.expectConsistent()
  }

  /// A split needs the bytes below the index free of records: when the main log holds
  /// records there, it sets the pending limit instead and changes nothing else.
  @Test func aSplitWaitsForTheLogsSpace() throws {
    let s = try Scratch("idx-pending", capacity: 1 << 20)
    // Fill the logs (evicting), so that main's records reach the index.
    for i in 0..<20_000 { try s.cache.setObject([UInt8](repeating: 1, count: 200), forKey: "p-\(i)") }
    let (grew, groups, pending) = try s.locked { part -> (Bool, Int, Int) in
      let low = part.resizer.indexLow(groups: part.index.groups + 1)
      let free = part.logs.mainIsFreeFrom(low)
      let g = part.index.groups
      let grew = part.resizer.split(part.held)
      #expect(grew == (free || part.logs.mainLimit <= low))
      return (grew, g, part.logs.pendingLimit)
    }
    if !grew {
      #expect(s.part.index.groups == groups)
      #expect(pending > 0 && pending < s.part.logs.mainLimit)
    }
    s.expectConsistent()
  }
}

@Suite struct RecordLogsTests {
  @Test func logStateArithmetic() {
    let base = 1000
    var log = LogState(
      base: base, limit: 2000, head: LogPosition(lap: 3, offset: 1800), tail: LogPosition(lap: 3, offset: 1200),
      lastWrap: 0)
    #expect(log.used == 600 && !log.isEmpty && log.isSane && !log.wrapped)
    #expect(log.fits(199) && !log.fits(200) || log.fits(200), "room before the limit, else from the base")
    #expect(log.holds(1200) && log.holds(1799) && !log.holds(1800) && !log.holds(1100))
    #expect(log.holds(1700, count: 100) && !log.holds(1700, count: 101) && !log.holds(1100, count: 10))
    // The head one lap ahead: live from the tail to the last wrap, then from the base.
    log = LogState(
      base: base, limit: 2000, head: LogPosition(lap: 4, offset: 1100), tail: LogPosition(lap: 3, offset: 1500),
      lastWrap: 1990)
    #expect(log.wrapped && log.isSane)
    #expect(log.used == (1990 - 1500) + (1100 - 1000))
    #expect(log.fits(400) && !log.fits(401))
    #expect(log.holds(1500) && log.holds(1050) && !log.holds(1200))
    #expect(log.holds(1900, count: 90) && !log.holds(1900, count: 91), "the tail's part ends at the last wrap")
    #expect(log.holds(1000, count: 100) && !log.holds(1050, count: 51), "the head's part ends at the head")
    // Broken states.
    log.head = LogPosition(lap: 5, offset: 1100)
    #expect(!log.isSane, "two laps ahead")
    log.head = LogPosition(lap: 4, offset: 1600)
    #expect(!log.isSane, "the head past the tail")
    log = LogState(
      base: base, limit: 2000, head: LogPosition(lap: 0, offset: 2000), tail: LogPosition(lap: 0, offset: 1000),
      lastWrap: 0)
    #expect(!log.isSane, "the head at the limit")
  }

  /// `reserve` writes a wrap marker and moves the head to the base, one lap on, when a
  /// record would pass the limit; `commit` and `advanceTail` move only the head and the
  /// tail; the tail crosses the marker to the base.
  @Test func reserveWrapsAtTheLimitAndTheTailFollows() throws {
    let s = try Scratch("logs-reserve")
    try s.locked { part in
      let logs = part.logs
      let start = logs.state(.small)
      let room = start.limit - start.head.offset
      // Fill all but 16 bytes before the limit with one record's worth, then ask for 64.
      let first = logs.reserve(.small, room - 16, part.held)
      #expect(first == start.head.offset)
      logs.commit(.small, room - 16, part.held)
      logs.advanceTail(.small, by: room - 16, part.held)
      let at = logs.reserve(.small, 64, part.held)
      #expect(at == start.base, "the record starts at the log's base")
      let after = logs.state(.small)
      #expect(after.head == LogPosition(lap: start.head.lap + 1, offset: start.base), "one lap on")
      #expect(part.memory.isWrapMarker(at: start.limit - 16), "a wrap marker where the head was")
      logs.commit(.small, 64, part.held)
      if case .wrap = logs.tailItem(.small) {} else { Issue.record("the tail meets the marker") }
      logs.advanceTail(.small, by: nil, part.held)
      #expect(logs.state(.small).tail == LogPosition(lap: start.head.lap + 1, offset: start.base))
      #expect(logs.areSane)
      // Drop the 64 bytes again (nothing names them).
      logs.advanceTail(.small, by: 64, part.held)
    }
  }
}

@Suite struct EvictionPolicyTests {
  /// The ghost remembers a hash once and forgets it when recalled, and `clear` forgets
  /// everything.
  @Test func theGhostRemembersOnce() throws {
    let s = try Scratch("pol-ghost")
    try s.locked { part in
      let ghost = part.policy.ghost
      let a = 0xDEAD_BEEF_1234_5679 as UInt64
      let b = 0x1111_2222_3333_4445 as UInt64
      let unknown = ghost.recall(a, entries: 1000, part.held)
      ghost.remember(a, entries: 1000, part.held)
      let remembered = ghost.recall(a, entries: 1000, part.held)
      let again = ghost.recall(a, entries: 1000, part.held)
      ghost.remember(b, entries: 1000, part.held)
      ghost.clear(groups: part.index.groups, part.held)
      let cleared = ghost.recall(b, entries: 1000, part.held)
      #expect(!unknown && remembered)
      #expect(!again, "a recall forgets")
      #expect(!cleared)
    }
  }

  /// S3-FIFO's three paths on a cache with a count limit: an unread newcomer is evicted
  /// from the small log into the ghost; a key the ghost remembers comes back straight
  /// into main; a read newcomer is promoted.
  @Test func smallLogEvictsTheUnreadPromotesTheReadAndTheGhostBringsBack() throws {
    let s = try Scratch("pol-s3fifo", capacity: 2 << 20)
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
    // A cold key evicted from small is remembered: written again, it goes to main.
    var evicted: String? = nil
    for i in (0..<300).reversed() where try c.object(forKey: "cold-\(i)") == nil {
      evicted = "cold-\(i)"
      break
    }
    let key = try #require(evicted)
    try c.setObject(value, forKey: key)
    let offset = try #require(try s.engine.entry(of: key)).offset
    #expect(offset >= s.engine.layout.mainBase, "the ghost sent it straight to main")
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
    let token = WriteLock.token(slot: reg.slot, generation: reg.generation, in: s.engine.memory)
    let bits = s.engine.memory.lockBits
    #expect(Int(token & bits.ownerMask) == reg.slot + 1)
    #expect(UInt64(token >> bits.generationShift) & bits.generationMask == reg.generation & bits.generationMask)
    let asker = try #require(s.engine.lock).asker
    let liveness = Liveness(memory: s.engine.memory, fd: s.engine.file.fd, asker: asker)
    #expect(!liveness.holderIsDead(token), "this handle's own token: another of its threads")
    #expect(
      liveness.holderIsDead(WriteLock.token(slot: reg.slot, generation: reg.generation + 1, in: s.engine.memory)),
      "its slot's previous (or a planted) generation")
    #expect(liveness.holderIsDead(UInt32(s.engine.memory.procCount + 1)), "a slot past the table")
    // Another handle of this process shares the entry, and so the token.
    let other = try SharedCache<[UInt8]>(path: s.path)
    #expect(other.engine.registration?.slot == reg.slot && other.engine.registration?.generation == reg.generation)
    // Another process's registration (made here through a descriptor of its own): its
    // token is alive while its witness byte is locked, dead once the descriptor closes.
    let fd = open(s.path, O_RDWR | O_CLOEXEC)
    let foreign = try ProcessTable.register(memory: s.engine.memory, fd: fd)
    let foreignToken = WriteLock.token(slot: foreign.slot, generation: foreign.generation, in: s.engine.memory)
    #expect(foreign.slot != reg.slot && !liveness.holderIsDead(foreignToken))
    close(fd)
    #expect(liveness.holderIsDead(foreignToken))
  }

  /// Every acquirer hands out the partition whose word it took, holding that word: the
  /// lock's `LockedPartition` names the partition, and its witness names it too.
  @Test func eachAcquirerHandsOutThePartitionItLocked() throws {
    let s = try Scratch("lock-part", capacity: 4 << 20, partitions: 4)
    let lock = try #require(s.engine.lock)
    let memory = s.engine.memory
    let owner = memory.lockBits.ownerMask
    func isHeld(_ p: Int) -> Bool { memory.partition(p).lockWord.load(.relaxed) & owner != 0 }
    for p in 0..<4 {
      try s.engine.withWriteLock(partition: p) { part in
        #expect(part.number == p && part.held.partition == p && part.memory.index == p)
        #expect(isHeld(p) && (0..<4).filter(isHeld) == [p], "only partition \(p)'s word is held")
      }
      let word = lock.acquireWord(p)
      #expect(word.number == p && word.held.partition == p && isHeld(p))
      lock.releaseWord(p)
      guard let tried = lock.tryAcquireWord(p) else {
        Issue.record("partition \(p)'s free word was not taken")
        return
      }
      #expect(tried.number == p && tried.held.partition == p && isHeld(p))
      var retaken = false
      if let again = lock.tryAcquireWord(p) { retaken = again.number == p }
      #expect(!retaken, "a word this handle holds is not free to try")
      lock.releaseWord(p)
      guard let quick = WriteLock.tryAcquireUncontended(memory.partition(p), token: lock.uncontendedToken, file: memory)
      else {
        Issue.record("partition \(p)'s free word was not taken at once")
        return
      }
      #expect(quick.number == p && quick.held.partition == p && isHeld(p))
      WriteLock.releaseUncontended(quick)
      #expect(!isHeld(p))
    }
  }

  /// Each partition's lock excludes threads of one handle and of two handles: counters
  /// bumped under them by many threads lose no increment.
  @Test func excludesThreadsAndHandles() throws {
    let s = try Scratch("lock-exclude", capacity: 4 << 20, partitions: 4)
    let second = try SharedCache<[UInt8]>(path: s.path, lockMode: .flock)
    let engines = [s.engine, second.engine]
    let keys = (0..<8).map { "n\($0)" }
    let parts = Set(keys.map { k in Array(k.utf8).withUnsafeBytes { s.engine.partitionNumber(KeyHash.key($0)) } })
    #expect(parts.count > 1, "the counters live in several partitions")
    DispatchQueue.concurrentPerform(iterations: 4) { t in
      let e = engines[t % 2]
      for i in 0..<400 {
        _ = try? Array(keys[i % keys.count].utf8).withUnsafeBytes { k in
          try e.update(k) { bytes, _ in
            let v = bytes.map { $0.loadUnaligned(as: UInt64.self) } ?? 0
            return .store(withUnsafeBytes(of: v + 1) { Array($0) }, expiry: 0)
          }
        }
      }
    }
    for k in keys {
      let bytes = try #require(try s.cache.object(forKey: k))
      #expect(bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } == 200)
    }
    for p in 0..<4 { #expect(s.engine.memory.partition(p).lockWord.load(.acquiring) == 0, "released") }
    s.expectConsistent()
  }
}

/// Sequence words that damage left odd (found by coverage-guided fuzzing of the file):
/// writes must not invert their parity, and verify must see and repair them.
@Suite struct SequenceParityTests {
  /// A bucket whose `seq` a stray store made odd (no writer died: the intent word is
  /// clear, so nothing repairs first): the next write leaves it even and readable.
  @Test func aWriteOverADamagedOddBucketLeavesItEvenAndReadable() throws {
    let s = try Scratch("par-bucket")
    try s.cache.setObject([1, 1, 1], forKey: "a")
    let at = try #require(try s.slot(of: "a"))
    s.part.memory.seq(at.place).add(1, .relaxed)
    #expect(try s.cache.object(forKey: "a") == nil, "an odd bucket reads as a (busy) miss")
    try s.cache.setObject([2, 2, 2], forKey: "a")
    #expect(s.part.memory.seq(at.place).load(.relaxed) & 1 == 0)
    #expect(try s.cache.object(forKey: "a") == [2, 2, 2])
    s.expectConsistent()
  }

  /// An odd move sequence left by damage makes every miss wait; verify reports it, its
  /// repair makes it even, and a displacement's bracket ends even whatever it started from.
  @Test func aDamagedOddMoveSequenceIsReportedAndRepaired() throws {
    let s = try Scratch("par-moves")
    try s.cache.setObject([1], forKey: "a")
    let moves = s.part.memory.word(.moves)
    moves.store(1, .relaxed)
    let report = try s.cache.verify()
    #expect(!report.ok && report.problems.contains { $0.contains("move sequence") })
    let repaired = try s.cache.verify(repair: true)
    #expect(repaired.repaired >= 1)
    #expect(moves.load(.relaxed) & 1 == 0)
    #expect(try s.cache.verify().ok)
    #expect(try s.cache.object(forKey: "a") == [1])
  }
}

import Foundation
import TestSupport
import Testing

@_spi(Tiers) @testable import MappedCache

/// Entries: key and value limits (bad input is a thrown error that changes nothing
/// stored), values of very different sizes, empty values, add/replace, the subscript,
/// removeAll, and the statistics counters.
@Suite struct CoreEntryTests {
  /// A cache holding a few known entries, and a snapshot to compare against.
  private func seeded(_ tag: String, capacity: Int = 4 << 20) throws -> (
    SharedCache<[UInt8]>, String, [String: [UInt8]]
  ) {
    let path = TestFiles.tempPath(tag)
    let c = try SharedCache<[UInt8]>(path: path, capacity: capacity)
    var known: [String: [UInt8]] = [:]
    for i in 0..<50 {
      let v = (0..<(i * 13)).map { UInt8(truncatingIfNeeded: $0 ^ i) }
      known["key\(i)"] = v
      try c.setObject(v, forKey: "key\(i)")
    }
    return (c, path, known)
  }

  private func expectUnchanged(
    _ c: SharedCache<[UInt8]>, _ known: [String: [UInt8]], sets: Int,
    sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    for (k, v) in known { #expect(try c.object(forKey: k) == v, sourceLocation: sourceLocation) }
    let s = c.statistics
    #expect(s.entries == known.count, sourceLocation: sourceLocation)
    #expect(s.liveBytes == known.reduce(0) { $0 + $1.key.utf8.count + $1.value.count }, sourceLocation: sourceLocation)
    #expect(s.sets == sets, sourceLocation: sourceLocation)
    #expect(try c.verify().ok, sourceLocation: sourceLocation)
  }

  @Test func emptyKeyIsAnErrorEverywhereAndChangesNothing() throws {
    let (c, path, known) = try seeded("ent-emptykey")
    defer { TestFiles.cleanup(path) }
    #expect(throws: CacheError.emptyKey) { try c.setObject([1], forKey: "") }
    #expect(throws: CacheError.emptyKey) { try c.add([1], forKey: "") }
    #expect(throws: CacheError.emptyKey) { try c.replace([1], forKey: "") }
    #expect(throws: CacheError.emptyKey) { try c.object(forKey: "") }
    #expect(throws: CacheError.emptyKey) { try c.removeObject(forKey: "") }
    #expect(throws: CacheError.emptyKey) { try c.withBytes(forKey: "") { _ in 0 } }
    #expect(throws: CacheError.emptyKey) { try c.touch("", expires: .never) }
    c[""] = [1, 2]
    #expect(c[""] == nil)
    try expectUnchanged(c, known, sets: 50)
  }

  @Test func keyLimitCountsUTF8BytesAndOversizedKeysChangeNothing() throws {
    let (c, path, known) = try seeded("ent-bigkey")
    defer { TestFiles.cleanup(path) }
    let longest = String(repeating: "k", count: 250)
    let accented = String(repeating: "é", count: 125)  // 250 UTF-8 bytes
    try c.setObject([1], forKey: longest)
    try c.setObject([2], forKey: accented)
    #expect(try c.object(forKey: longest) == [1])
    #expect(try c.object(forKey: accented) == [2])
    var expected = known
    expected[longest] = [1]
    expected[accented] = [2]
    for bad in [
      String(repeating: "k", count: 251), String(repeating: "é", count: 126), String(repeating: "x", count: 5000),
    ] {
      let n = bad.utf8.count
      #expect(throws: CacheError.keyTooLarge(size: n, limit: 250)) { try c.setObject([3], forKey: bad) }
      #expect(throws: CacheError.keyTooLarge(size: n, limit: 250)) { try c.object(forKey: bad) }
      #expect(throws: CacheError.keyTooLarge(size: n, limit: 250)) { try c.removeObject(forKey: bad) }
      #expect(throws: CacheError.keyTooLarge(size: n, limit: 250)) { try c.add([3], forKey: bad) }
    }
    try expectUnchanged(c, expected, sets: 52)
  }

  @Test func oversizedValueIsAnErrorAndKeepsTheOldValue() throws {
    let (c, path, known) = try seeded("ent-bigvalue", capacity: 16 << 20)
    defer { TestFiles.cleanup(path) }
    let limit = c.maxValueSize
    #expect(limit == 1 << 20)
    let tooBig = [UInt8](repeating: 0xAB, count: limit + 1)
    #expect(throws: CacheError.valueTooLarge(size: limit + 1, limit: limit)) { try c.setObject(tooBig, forKey: "key7") }
    #expect(throws: CacheError.valueTooLarge(size: limit + 1, limit: limit)) { try c.setObject(tooBig, forKey: "new") }
    #expect(throws: CacheError.valueTooLarge(size: limit + 1, limit: limit)) { try c.replace(tooBig, forKey: "key8") }
    c["key9"] = tooBig  // the subscript drops the error, and must not remove the old value
    try expectUnchanged(c, known, sets: 50)
    // Exactly the limit is fine.
    let max = (0..<limit).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
    try c.setObject(max, forKey: "key7")
    #expect(try c.object(forKey: "key7") == max)
  }

  /// A cache whose value limit is 0 (created so, or a file whose header says so: the
  /// cache-file fuzz target's `header-with-value-limit-0`) stores empty values only, and
  /// answers a longer one with `valueTooLarge`, through both APIs, before and after a
  /// repair.
  @Test func aValueLimitOfZeroStoresOnlyEmptyValues() throws {
    let (c, path) = try SharedCache<[UInt8]>.scratch("ent-limit0", options: CacheOptions(capacity: 1 << 20)) {
      $0.maxValueSize = 0
    }
    defer { TestFiles.cleanup(path) }
    #expect(c.maxValueSize == 0)
    try c.setObject([], forKey: "empty")
    #expect(throws: CacheError.valueTooLarge(size: 1, limit: 0)) { try c.setObject([1], forKey: "one") }
    let f = try CacheFile(path: path)
    #expect(f.info.maxValueSize == 0)
    #expect(throws: CacheError.valueTooLarge(size: 100, limit: 0)) {
      try f.set(Array("k".utf8), [UInt8](repeating: 7, count: 100))
    }
    #expect(try f.verify(repair: true).ok)
    #expect(try f.get(Array("empty".utf8))?.value == [])
    #expect(try c.object(forKey: "empty") == [])
    #expect(try c.object(forKey: "one") == nil)
  }

  @Test(arguments: [false, true])
  func valuesOfVeryDifferentSizesShareOneTable(partitioned: Bool) throws {
    let (c, path) = try coreCache("ent-sizes", partitioned: partitioned, capacity: 16 << 20)
    defer { TestFiles.cleanup(path) }
    // Around each record form's limits too (values of 255, 256, 65535 and 65536 bytes).
    let sizes = [
      0, 1, 2, 7, 8, 9, 31, 32, 33, 60, 66, 67, 68, 69, 70, 74, 75, 80, 255, 256, 257, 1000, 4095, 4096,
      65_535, 65_536, 65_537, 300_000, c.maxValueSize,
    ]
    var expected: [String: [UInt8]] = [:]
    for (i, n) in sizes.enumerated() {
      let v = (0..<n).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 7 ^ i) }
      expected["size-\(n)"] = v
      try c.setObject(v, forKey: "size-\(n)")
    }
    for (k, v) in expected {
      let got = try c.object(forKey: k)
      #expect(got == v, "\(k)")
      #expect(try c.withBytes(forKey: k) { $0.count } == v.count)
    }
    let s = c.statistics
    #expect(s.entries == sizes.count)
    #expect(s.liveBytes == expected.reduce(0) { $0 + $1.key.utf8.count + $1.value.count })
    // Overwrite each with a very different size (small <-> large) and read back again.
    for (i, n) in sizes.enumerated() {
      let m = sizes[sizes.count - 1 - i]
      let v = [UInt8](repeating: UInt8(truncatingIfNeeded: n), count: m)
      expected["size-\(n)"] = v
      try c.setObject(v, forKey: "size-\(n)")
    }
    for (k, v) in expected { #expect(try c.object(forKey: k) == v, "\(k)") }
    #expect(c.statistics.entries == sizes.count)
    #expect(c.statistics.liveBytes == expected.reduce(0) { $0 + $1.key.utf8.count + $1.value.count })
    // touch keeps every value, with an expiry field or without; remove half and read the rest back.
    for k in expected.keys { #expect(try c.touch(k, expires: .seconds(3600))) }
    for (k, v) in expected { #expect(try c.object(forKey: k) == v, "\(k) after touch") }
    for k in expected.keys.sorted().enumerated().filter({ $0.offset % 2 == 0 }).map(\.element) {
      #expect(try c.removeObject(forKey: k))
      expected[k] = nil
    }
    for (k, v) in expected { #expect(try c.object(forKey: k) == v, "\(k) after removals") }
    #expect(try c.verify().ok)
  }

  @Test func zeroByteValuesAreStoredNotMissing() throws {
    let path = TestFiles.tempPath("ent-zero")
    defer { TestFiles.cleanup(path) }
    let bytes = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    try bytes.setObject([], forKey: "e")
    #expect(try bytes.object(forKey: "e") == [])
    #expect(try bytes.withBytes(forKey: "e") { $0.count } == 0)
    #expect(try bytes.containsObject(forKey: "e"))
    #expect(bytes.statistics.entries == 1)
    #expect(bytes.statistics.liveBytes == 1)
    #expect(try bytes.add([1], forKey: "e") == false, "an empty value is present")
    let p2 = TestFiles.tempPath("ent-zero-s")
    defer { TestFiles.cleanup(p2) }
    let strings = try SharedCache<String>(path: p2, capacity: 1 << 20)
    try strings.setObject("", forKey: "e")
    #expect(try strings.object(forKey: "e") == "")
    let p3 = TestFiles.tempPath("ent-zero-d")
    defer { TestFiles.cleanup(p3) }
    let data = try SharedCache<Data>(path: p3, capacity: 1 << 20)
    try data.setObject(Data(), forKey: "e")
    #expect(try data.object(forKey: "e") == Data())
  }

  @Test func stringAndDataValues() throws {
    let p1 = TestFiles.tempPath("ent-str")
    defer { TestFiles.cleanup(p1) }
    let s = try SharedCache<String>(path: p1, capacity: 1 << 20)
    let text = "héllo, wörld — ✓ 🚀"
    try s.setObject(text, forKey: "t")
    try s.setObject(String(repeating: "ab", count: 20_000), forKey: "long")
    #expect(try s.object(forKey: "t") == text)
    #expect(try s.object(forKey: "long") == String(repeating: "ab", count: 20_000))
    #expect(try s.withBytes(forKey: "t") { Array($0) } == Array(text.utf8))
    let p2 = TestFiles.tempPath("ent-data")
    defer { TestFiles.cleanup(p2) }
    let d = try SharedCache<Data>(path: p2, capacity: 1 << 20)
    let blob = Data((0..<5000).map { UInt8(truncatingIfNeeded: $0) })
    try d.setObject(blob, forKey: "b")
    #expect(try d.object(forKey: "b") == blob)
  }

  @Test func addAndReplace() throws {
    let path = TestFiles.tempPath("ent-addrep")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<String>(path: path, capacity: 1 << 20)
    #expect(try c.replace("r", forKey: "k") == false)
    #expect(try c.object(forKey: "k") == nil)
    #expect(try c.add("a1", forKey: "k") == true)
    #expect(try c.add("a2", forKey: "k") == false)
    #expect(try c.object(forKey: "k") == "a1")
    #expect(try c.replace("r1", forKey: "k") == true)
    #expect(try c.object(forKey: "k") == "r1")
    // An expired entry counts as absent for both.
    try c.setObject("old", forKey: "x", expires: .date(Date(timeIntervalSinceNow: -10)))
    #expect(try c.replace("r", forKey: "x") == false)
    #expect(try c.add("fresh", forKey: "x") == true)
    #expect(try c.object(forKey: "x") == "fresh")
    #expect(c.statistics.entries == 2)
    #expect(c.statistics.sets == 4, "add a1, replace r1, set old, add fresh")
    #expect(try c.verify().ok)
  }

  @Test func subscriptGetsSetsAndRemoves() throws {
    let path = TestFiles.tempPath("ent-sub")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    #expect(c["k"] == nil)
    c["k"] = [1, 2, 3]
    #expect(c["k"] == [1, 2, 3])
    #expect(try c.object(forKey: "k") == [1, 2, 3])
    c["k"] = [4]
    #expect(c["k"] == [4])
    c["k"] = nil
    #expect(c["k"] == nil)
    #expect(c.statistics.entries == 0)
    c["gone"] = nil  // removing a missing key is not an error
    #expect(c.statistics.entries == 0)
  }

  @Test func removeObjectAndRemoveAll() throws {
    let (c, path, known) = try seeded("ent-removeall")
    defer { TestFiles.cleanup(path) }
    #expect(try c.removeObject(forKey: "key3"))
    #expect(try c.removeObject(forKey: "key3") == false)
    #expect(try c.object(forKey: "key3") == nil)
    #expect(c.statistics.entries == known.count - 1)
    try c.removeAllObjects()
    for k in known.keys { #expect(try c.object(forKey: k) == nil) }
    var s = c.statistics
    #expect(s.entries == 0)
    #expect(s.liveBytes == 0)
    #expect(s.logBytesUsed == 0)
    #expect(try c.verify().ok)
    // Usable at once, and another handle sees the same state.
    try c.setObject([7], forKey: "after")
    let other = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    #expect(try other.object(forKey: "after") == [7])
    #expect(try other.object(forKey: "key1") == nil)
    s = other.statistics
    #expect(s.entries == 1)
  }

  @Test func statisticsCountWhatHappened() throws {
    let path = TestFiles.tempPath("ent-stats")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    let s0 = c.statistics
    #expect(s0.entries == 0 && s0.hits == 0 && s0.misses == 0 && s0.sets == 0)
    #expect(s0.evictions == 0 && s0.expirations == 0 && s0.recoveries == 0 && s0.removals == 0)
    #expect(s0.capacity == 2 << 20)
    #expect(s0.slotCount > 0 && s0.maxEntries < s0.slotCount)
    #expect(s0.logBytes > 0 && s0.logBytes < s0.capacity)
    for i in 0..<10 { try c.setObject([UInt8](repeating: 1, count: 10), forKey: "k\(i)") }  // 10 sets
    try c.setObject([1, 2], forKey: "k0")  // overwrite: 11 sets, still 10 entries
    for i in 0..<10 { _ = try c.object(forKey: "k\(i)") }  // 10 hits
    for i in 0..<4 { _ = try c.object(forKey: "none\(i)") }  // 4 misses
    _ = try c.withBytes(forKey: "k1") { $0.count }  // 1 hit
    _ = try c.removeObject(forKey: "k9")  // 1 removal
    let s = c.statistics
    #expect(s.sets == 11)
    #expect(s.hits == 11)
    #expect(s.misses == 4)
    #expect(s.removals == 1)
    #expect(s.entries == 9)
    #expect(s.liveBytes == 8 * (2 + 10) + (2 + 2))
    #expect(s.evictions == 0 && s.expirations == 0 && s.recoveries == 0)
    #expect(abs(s.hitRatio - 11.0 / 15.0) < 1e-9)
    // Counters are shared: a second handle (another process-table entry) adds to them.
    let other = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    _ = try other.object(forKey: "k1")
    _ = try other.object(forKey: "nope")
    #expect(c.statistics.hits == 12)
    #expect(c.statistics.misses == 5)
  }
}

extension CoreEntryTests {
  /// A batch removal takes what is there, counts only those, and leaves the rest; a bad
  /// key anywhere in the batch throws before anything is removed.
  @Test func removeObjectsRemovesABatchUnderOneLockHold() throws {
    let (c, path, known) = try seeded("ent-removebatch")
    defer { TestFiles.cleanup(path) }
    #expect(throws: CacheError.emptyKey) { try c.removeObjects(forKeys: ["key1", ""]) }
    #expect(try c.object(forKey: "key1") == known["key1"])
    let removed = try c.removeObjects(forKeys: ["key1", "key2", "absent", "key2"])
    #expect(removed == 2)
    #expect(try c.object(forKey: "key1") == nil)
    #expect(try c.object(forKey: "key2") == nil)
    #expect(try c.object(forKey: "key3") == known["key3"])
    #expect(c.statistics.entries == known.count - 2)
    #expect(c.statistics.removals == 2)
    #expect(try c.verify().ok)
  }
}

extension CoreEntryTests {
  /// Tier words start at zero, are shared by every handle of the file, refuse indices
  /// outside their range, and refuse stores on a read-only handle.
  @Test func tierWordsAreSharedAndChecked() throws {
    let path = TestFiles.tempPath("ent-tierwords")
    defer { TestFiles.cleanup(path) }
    let a = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    let b = try SharedCache<[UInt8]>(path: path)
    #expect(try a.tierWord(0) == 0)
    try a.storeTierWord(3, 42)
    #expect(try b.tierWord(3) == 42)
    #expect(try b.compareExchangeTierWord(3, expected: 42, desired: 43))
    #expect(try !a.compareExchangeTierWord(3, expected: 42, desired: 44))
    #expect(try a.tierWord(3) == 43)
    #expect(throws: CacheError.self) { try a.tierWord(SharedCache<[UInt8]>.tierWordCount) }
    #expect(throws: CacheError.self) { try a.storeTierWord(-1, 1) }
    let ro = try SharedCache<[UInt8]>(path: path, policy: OpenPolicy(readOnly: true))
    #expect(try ro.tierWord(3) == 43)
    #expect(throws: CacheError.readOnly(path: path)) { try ro.storeTierWord(3, 1) }
    #expect(try a.verify().ok)
  }
}

import CheckedValues
import Foundation
import TestSupport
import Testing

@_spi(Testing) @testable import MappedCache

/// The raw batch write (`setBytes(_:forKeys:expires:)`, which `setObjects` is built on):
/// it stores exactly what single sets of its entries store, in order (replacing,
/// rewriting inline entries in place, evicting when full: the same file, byte for
/// byte), refuses a bad entry with the single set's error before storing anything, and
/// is checked across processes, with readers and SIGKILLs, by `cache-stress --mset`.
@Suite struct BatchWriteTests {
  static func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

  /// Calls `body` with views of `arrays` (kept in one flat copy): a batch's keys or values.
  static func withViews<R>(
    _ arrays: [[UInt8]], _ body: (UnsafeBufferPointer<UnsafeRawBufferPointer>) throws -> R
  ) rethrows -> R {
    let flat = arrays.flatMap { $0 }
    return try flat.withUnsafeBytes { all in
      var start = 0
      let views = arrays.map { a -> UnsafeRawBufferPointer in
        defer { start += a.count }
        return UnsafeRawBufferPointer(rebasing: all[start..<start + a.count])
      }
      return try views.withUnsafeBufferPointer(body)
    }
  }

  static func setBatch(
    _ c: SharedCache<[UInt8]>, _ keys: [[UInt8]], _ values: [[UInt8]], expires: CacheExpiry? = nil
  ) throws {
    try withViews(keys) { k in try withViews(values) { v in try c.setBytes(v, forKeys: k, expires: expires) } }
  }

  /// The file's partitions (their counters, indexes, ghost lines and logs): everything a
  /// set changes apart from the header and the process table.
  static func tables(_ c: SharedCache<[UInt8]>) throws -> Data {
    try Data(contentsOf: URL(fileURLWithPath: c.path)).subdata(in: c.engine.layout.partitionsOffset..<c.capacity)
  }

  /// Two fresh caches get the same entries, one by single sets, one in batches of 1-40
  /// (keys repeated within and across batches, values empty, inline, in records and
  /// past the stack buffer), with the same reads between batches (reference bits steer
  /// eviction), until each has evicted thousands of entries: the two files end equal,
  /// byte for byte, with the same counters.
  @Test(arguments: [true, false])
  func aBatchStoresWhatSingleSetsStore(partitioned: Bool) throws {
    let (pa, pb) = (TestFiles.tempPath("mset-single"), TestFiles.tempPath("mset-batch"))
    defer { TestFiles.cleanup(pa, pb) }
    let options = CoreOptions.make(partitioned: partitioned, capacity: 1 << 20)
    let a = try SharedCache<[UInt8]>(path: pa, capacity: 1 << 20, options: options)
    let b = try SharedCache<[UInt8]>(path: pb, capacity: 1 << 20, options: options)
    var rng = SplitMix(partitioned ? 19 : 20)
    var writes = [Int](repeating: 0, count: 3000)
    var batchesWithRepeats = 0
    for round in 0..<300 {
      var keys: [[UInt8]] = []
      var values: [[UInt8]] = []
      var indices = Set<Int>()
      for _ in 0..<1 + rng.below(40) {
        let i = rng.below(3000)
        let roll = rng.below(20)
        let size = roll == 0 ? 0 : roll < 14 ? 1 + rng.below(48) : 1000 + rng.below(6000)
        keys.append(Self.bytes("mset:\(i)"))
        values.append((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i &+ round) })
        writes[i] += 1
        if !indices.insert(i).inserted { batchesWithRepeats += 1 }
      }
      for (k, v) in zip(keys, values) {
        try k.withUnsafeBytes { kb in try v.withUnsafeBytes { vb in try a.setBytes(vb, forKey: kb) } }
      }
      try Self.setBatch(b, keys, values)
      for _ in 0..<8 {
        let k = "mset:\(rng.below(3000))"
        #expect(try a.object(forKey: k) == b.object(forKey: k))
      }
    }
    let (sa, sb) = (a.statistics, b.statistics)
    #expect(sa.sets == sb.sets)
    #expect(sa.sets == writes.reduce(0, +), "one set counted per entry")
    #expect(sa.entries == sb.entries && sa.liveBytes == sb.liveBytes)
    #expect(sa.evictions == sb.evictions && sa.promotions == sb.promotions && sa.reinsertions == sb.reinsertions)
    // The run covers what it claims: a full cache evicting, keys replaced, repeats in a batch.
    #expect(sa.evictions > 1000, "evictions: \(sa.evictions)")
    #expect(writes.filter { $0 > 1 }.count > 1000)
    #expect(batchesWithRepeats > 10)
    #expect(try Self.tables(a) == Self.tables(b), "the two files differ past the header")
    for i in 0..<3000 {
      #expect(try a.object(forKey: "mset:\(i)") == b.object(forKey: "mset:\(i)"), "key \(i)")
    }
    #expect(try a.verify().ok && b.verify().ok)
  }

  /// A batch's entries take its expiry: a date in the past stores entries that read as
  /// missing, a TTL entries that expire then; none is left with another.
  @Test func aBatchStoresItsExpiry() throws {
    let path = TestFiles.tempPath("mset-expiry")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    let keys = (0..<20).map { Self.bytes("e\($0)") }
    let values = (0..<20).map { [UInt8](repeating: UInt8($0), count: $0 % 2 == 0 ? 10 : 400) }
    try Self.setBatch(c, keys, values, expires: .date(Date(timeIntervalSinceNow: -5)))
    for i in 0..<20 { #expect(try c.object(forKey: "e\(i)") == nil) }
    try Self.setBatch(c, keys, values, expires: .seconds(600))
    for i in 0..<20 {
      #expect(try c.object(forKey: "e\(i)") == values[i])
      guard case .date(let d)? = try c.expiry(forKey: "e\(i)") else {
        Issue.record("e\(i): no expiry")
        continue
      }
      #expect(abs(d.timeIntervalSinceNow - 600) < 60)
    }
    try Self.setBatch(c, keys, values)
    for i in 0..<20 { #expect(try c.expiry(forKey: "e\(i)") == .never) }
  }

  /// A bad entry anywhere in a batch throws the single set's error before anything is
  /// stored: the file past its header is unchanged, no set is counted, every entry
  /// stored before still reads. So do counts that differ and a read-only handle.
  @Test func badEntriesThrowBeforeAnythingIsStored() throws {
    let path = TestFiles.tempPath("mset-bad")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    let keys = (0..<50).map { Self.bytes("kept:\($0)") }
    let values = (0..<50).map { [UInt8](repeating: UInt8($0), count: 1 + $0 * 7) }
    try Self.setBatch(c, keys, values)
    let before = try Self.tables(c)
    let sets = c.statistics.sets
    let longKey = [UInt8](repeating: 0x6B, count: c.maxKeySize + 1)
    let longValue = [UInt8](repeating: 1, count: c.maxValueSize + 1)
    let fresh = (0..<20).map { Self.bytes("new:\($0)") }
    let small = [[UInt8]](repeating: [9, 9], count: 20)
    func with(_ list: [[UInt8]], _ j: Int, _ item: [UInt8]) -> [[UInt8]] {
      var l = list
      l[j] = item
      return l
    }
    #expect(throws: CacheError.emptyKey) { try Self.setBatch(c, with(fresh, 17, []), small) }
    #expect(throws: CacheError.keyTooLarge(size: longKey.count, limit: c.maxKeySize)) {
      try Self.setBatch(c, with(fresh, 3, longKey), small)
    }
    #expect(throws: CacheError.valueTooLarge(size: longValue.count, limit: c.maxValueSize)) {
      try Self.setBatch(c, fresh, with(small, 19, longValue))
    }
    // The first bad entry's error, as setting the entries one by one would throw it.
    #expect(throws: CacheError.emptyKey) {
      try Self.setBatch(c, with(with(fresh, 2, []), 9, longKey), with(small, 12, longValue))
    }
    #expect(throws: CacheError.self) {
      try Self.withViews(fresh) { k in
        try Self.withViews(Array(small.dropLast())) { v in try c.setBytes(v, forKeys: k) }
      }
    }
    #expect(try Self.tables(c) == before, "a refused batch changed the file")
    #expect(c.statistics.sets == sets)
    for i in 0..<50 { #expect(try c.object(forKey: "kept:\(i)") == values[i]) }
    for i in 0..<20 { #expect(try c.object(forKey: "new:\(i)") == nil) }
    // An empty batch stores nothing; a read-only handle refuses a batch. (The reads
    // above set reference bits: the file is compared with its state after them.)
    let read = try Self.tables(c)
    try Self.setBatch(c, [], [])
    #expect(c.statistics.sets == sets)
    let ro = try SharedCache<[UInt8]>(path: path, policy: OpenPolicy(readOnly: true))
    #expect(throws: CacheError.readOnly(path: path)) { try Self.setBatch(ro, fresh, small) }
    #expect(try Self.tables(c) == read)
    // `setObjects` (built on the batch write) refuses the same entries.
    #expect(throws: CacheError.valueTooLarge(size: longValue.count, limit: c.maxValueSize)) {
      try c.setObjects([(key: "new:1", value: [1]), (key: "new:2", value: longValue)])
    }
    #expect(try c.object(forKey: "new:1") == nil)
  }
}

/// `cache-stress --mset N`: every worker's sets go out N at a time through the batch
/// write, while gets (single or batched) check every value, with SIGKILLs.
@Suite struct BatchWriteStressTests {
  static let stress = TestFiles.binary("cache-stress")

  func run(_ args: [String]) throws -> (status: Int32, json: [String: Any], stderr: String) {
    try Support.runStressJSON(args)
  }

  func int(_ j: [String: Any], _ key: String) -> Int { Support.int(j, key) }

  /// Batched sets (and batched gets) across processes, workers killed mid-run (some
  /// holding the lock mid-batch) and restarted: no get sees a torn, foreign or stale value.
  @Test(arguments: [1, 8])
  func batchedSetsSurviveChaosKills(mget: Int) throws {
    let (status, j, err) = try run([
      "--procs", "3", "--duration", "2.5", "--keys", "3000", "--capacity", "8MiB", "--value-size", "24-300",
      "--read-pct", "30", "--mset", "8", "--mget", "\(mget)", "--chaos-kills", "4", "--seed", "13",
    ])
    #expect(status == 0, "stderr: \(err)")
    #expect(int(j, "corrupt_reads") == 0)
    #expect(int(j, "wrong_values") == 0)
    #expect(int(j, "errors") == 0)
    #expect(j["verify_ok"] as? Bool == true)
    #expect(int(j, "mset") == 8)
    #expect(int(j, "kills") == 4)
    #expect(int(j, "set_ops") > 1000 && int(j, "get_ops") > 1000)
    #expect(int(j, "hits") > 0)
  }
}

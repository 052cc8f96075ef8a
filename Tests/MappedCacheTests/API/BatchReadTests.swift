import Foundation
import TestSupport
import Testing

@_spi(Testing) @testable import MappedCache

/// The batch read (`copyBytes(forKeys:into:lengths:)`, `objects(forKeys:)`) and the batch
/// write (`setObjects`): a batch returns exactly what single reads of its keys return on
/// the same state (hits, misses, expired entries, inline and record values, keys away
/// from their home slot, values too large for their buffer), leaves the same statistics
/// and reference bits, gives a bad key the single read's error, and is checked across
/// processes, with writers and SIGKILLs, by `cache-stress --mget`.
@Suite struct BatchReadTests {
  /// One key's outcome: the length (-1: missing) and, when it fit, the bytes.
  struct Outcome: Equatable {
    var length: Int
    var bytes: [UInt8]?
  }

  /// Reads `keys` in one batch, each into a buffer of `room` bytes.
  static func batch(_ c: SharedCache<[UInt8]>, _ keys: [[UInt8]], room: Int) throws -> [Outcome] {
    let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, keys.count * room), alignment: 16)
    defer { storage.deallocate() }
    let buffers = (0..<keys.count).map {
      UnsafeMutableRawBufferPointer(rebasing: storage[$0 * room..<($0 + 1) * room])
    }
    var lengths = [Int](repeating: -7, count: keys.count)
    let flat = keys.flatMap { $0 }
    let found = try flat.withUnsafeBytes { all -> Int in
      var start = 0
      let views = keys.map { k -> UnsafeRawBufferPointer in
        defer { start += k.count }
        return UnsafeRawBufferPointer(rebasing: all[start..<start + k.count])
      }
      return try views.withUnsafeBufferPointer { v in
        try buffers.withUnsafeBufferPointer { b in
          try lengths.withUnsafeMutableBufferPointer { try c.copyBytes(forKeys: v, into: b, lengths: $0) }
        }
      }
    }
    let outcomes = (0..<keys.count).map { j in
      Outcome(
        length: lengths[j], bytes: lengths[j] >= 0 && lengths[j] <= room ? Array(buffers[j][..<lengths[j]]) : nil)
    }
    #expect(found == outcomes.filter { $0.length >= 0 }.count, "the count of keys found")
    return outcomes
  }

  /// Reads `key` alone, as `copyBytes(forKey:into:)` does.
  static func single(_ c: SharedCache<[UInt8]>, _ key: [UInt8], room: Int) throws -> Outcome {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, room), alignment: 16)
    defer { buffer.deallocate() }
    let n = try key.withUnsafeBytes { try c.copyBytes(forKey: $0, into: buffer) } ?? -1
    return Outcome(length: n, bytes: n >= 0 && n <= room ? Array(buffer[..<n]) : nil)
  }

  static func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

  /// A small, crowded cache: live keys of every kind, some in their second bucket,
  /// expired and removed keys, and keys never stored.
  static func populated(_ path: String, partitioned: Bool) throws -> (cache: SharedCache<[UInt8]>, keys: [[UInt8]]) {
    let c = try SharedCache<[UInt8]>(
      path: path, capacity: 2 << 20, options: CoreOptions.make(partitioned: partitioned, capacity: 2 << 20))
    var keys: [[UInt8]] = []
    for i in 0..<3000 {
      let k = bytes("batch:\(i)")
      // Mostly small, some past the 256-byte stack buffer.
      let size = i % 7 == 0 ? 300 + i % 200 : i % 40
      let value = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
      switch i % 10 {
      case 8: try c.setObject(value, forKey: "batch:\(i)", expires: .date(Date(timeIntervalSinceNow: -5)))  // expired
      case 9: try c.setObject(value, forKey: "batch:\(i)", expires: .seconds(3600))
      default: try c.setObject(value, forKey: "batch:\(i)")
      }
      keys.append(k)
    }
    for i in stride(from: 5, to: 3000, by: 50) { try c.removeObject(forKey: "batch:\(i)") }
    keys += (0..<200).map { bytes("never-stored:\($0)") }
    return (c, keys.shuffled())
  }

  @Test(arguments: [true, false])
  func aBatchReturnsWhatSingleReadsReturn(partitioned: Bool) throws {
    let path = TestFiles.tempPath("batch-eq")
    defer { TestFiles.cleanup(path) }
    let (c, keys) = try Self.populated(path, partitioned: partitioned)
    #expect(try c.verify().ok)
    // The test covers what it claims: keys in their second bucket (a batch prefetches it
    // only when the first holds no equal tag), and, partitioned, in every partition.
    var second = 0
    var partitions = Set<Int>()
    for k in keys {
      guard let found = try k.withUnsafeBytes({ try c.engine._find($0) }) else { continue }
      let groups = c.engine.partition(found.partition).index.groups
      let pl = Placement(hash: k.withUnsafeBytes { KeyHash.key($0) }, groups: groups)
      if pl.first != found.entry.at.place { second += 1 }
      partitions.insert(found.partition)
    }
    #expect(second > 10, "keys in their second bucket: \(second)")
    #expect(partitions.count == c.engine.layout.partitionCount)
    #expect(partitioned ? partitions.count > 1 : partitions.count == 1)

    // Buffers of 64 bytes: some values do not fit (their length comes back, uncopied).
    for room in [64, 1024] {
      let before = c.statistics
      let singles = try keys.map { try Self.single(c, $0, room: room) }
      let middle = c.statistics
      // Batches of every size around the prefetch group (16), and the whole list at once.
      var batched: [Outcome] = []
      var start = 0
      var size = 1
      while start < keys.count {
        let end = min(keys.count, start + size)
        batched += try Self.batch(c, Array(keys[start..<end]), room: room)
        start = end
        size = size % 40 + 7
      }
      let after = c.statistics
      #expect(batched == singles, "room \(room)")
      #expect(try Self.batch(c, keys, room: room) == singles, "room \(room), one batch")
      // The same hits and misses, counted per key.
      #expect(after.hits - middle.hits == middle.hits - before.hits)
      #expect(after.misses - middle.misses == middle.misses - before.misses)
      let hits = singles.filter { $0.length >= 0 }.count
      #expect(hits > 2000 && hits < 3000, "hits \(hits)")
      if room == 64 { #expect(singles.contains { $0.length > room }, "some values longer than the buffer") }
    }
    // Expired, removed and never-stored keys miss in a batch too.
    let misses = try Self.batch(
      c, [Self.bytes("batch:8"), Self.bytes("batch:5"), Self.bytes("never-stored:1")], room: 64)
    #expect(misses.map(\.length) == [-1, -1, -1])
    #expect(SharedCache<[UInt8]>.missingLength == -1)
  }

  /// A bucket holding another key under this key's tag (a 16-bit collision, made here by
  /// rewriting the slot's tag): the batch's step B2, which prefetches the record of the
  /// first equal tag, and the single read both compare the key in the record and find
  /// the key in its own slot; the other key, whose slot no longer carries its tag,
  /// misses in both.
  @Test
  func aKeyBehindAnotherKeyOfTheSameTagIsFound() throws {
    let (c, path) = try coreCache("batch-collide", capacity: 2 << 20)
    defer { TestFiles.cleanup(path) }
    let e = c.engine
    // Two keys with one first place: the first stored takes slot 0, the second slot 1.
    let place = Place(group: 0, bucket: 1)
    let names = e.keys(first: place, count: 2, tag: "collide")
    try c.setObject([1, 1, 1], forKey: names[0])
    try c.setObject([2, 2, 2, 2], forKey: names[1])
    #expect(try names.map { try e.slot(of: $0)?.slot } == [.init(place: place, slot: 0), .init(place: place, slot: 1)])
    let (a, b) = (Self.bytes(names[0]), Self.bytes(names[1]))
    let tag = IndexGeometry.tag(b.withUnsafeBytes { KeyHash.key($0) })
    // The first key's slot now carries the second key's tag.
    let offsets = e._slotOffsets(partition: 0, .init(place: place, slot: 0))
    e.memory._byte(at: offsets.tag).storeBytes(of: tag, as: UInt16.self)
    for room in [2, 64] {
      let singles = try [a, b].map { try Self.single(c, $0, room: room) }
      #expect(singles.map(\.length) == [-1, 4])
      #expect(try Self.batch(c, [a, b], room: room) == singles, "room \(room)")
      #expect(try Self.batch(c, [b], room: room) == [singles[1]], "room \(room)")
    }
    #expect(try Self.single(c, b, room: 64).bytes == [2, 2, 2, 2])
  }

  /// Handles that read by the general path (read-only, or checking checksums on read)
  /// give the same answers in a batch as alone, for every kind of entry.
  @Test func otherHandlesBatchAsTheyReadAlone() throws {
    let path = TestFiles.tempPath("batch-handles")
    defer { TestFiles.cleanup(path) }
    let (c, keys) = try Self.populated(path, partitioned: true)
    let plain = try keys.map { try Self.single(c, $0, room: 512) }
    for policy in [OpenPolicy(readOnly: true), OpenPolicy(verifyChecksumsOnRead: true)] {
      let h = try SharedCache<[UInt8]>(path: path, policy: policy)
      let singles = try keys.map { try Self.single(h, $0, room: 512) }
      #expect(singles == plain, "\(policy)")
      #expect(try Self.batch(h, keys, room: 512) == singles, "\(policy)")
    }
  }

  /// A batch hit sets the entry's reference bit (S3-FIFO's "read since"), exactly as a
  /// single hit does; keys not read keep theirs clear.
  @Test func aBatchSetsReferenceBitsAsSingleReadsDo() throws {
    let (c, path) = try coreCache("batch-ref", partitioned: true)
    defer { TestFiles.cleanup(path) }
    let keys = (0..<200).map { Self.bytes("ref:\($0)") }
    for i in 0..<200 { try c.setObject([UInt8](repeating: 1, count: i % 2 == 0 ? 10 : 400), forKey: "ref:\(i)") }
    func referenced(_ k: [UInt8]) throws -> Bool {
      let found = try #require(try k.withUnsafeBytes { try c.engine._find($0) })
      return found.entry.word & Format.referencedBit != 0
    }
    #expect(try keys.allSatisfy { try !referenced($0) }, "new entries start unreferenced")
    let read = keys.enumerated().filter { $0.offset % 3 == 0 }.map(\.element)
    _ = try Self.batch(c, read, room: 512)
    for (i, k) in keys.enumerated() { #expect(try referenced(k) == (i % 3 == 0), "key \(i)") }
  }

  /// A key whose slot a writer holds mid-write (odd) reads as a busy miss after the
  /// bounded wait, in a batch as alone; the batch's other keys are read normally.
  @Test func aBusySlotInABatchIsABusyMiss() throws {
    let path = TestFiles.tempPath("batch-busy")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    for i in 0..<20 { try c.setObject([UInt8(i)], forKey: "k\(i)") }
    let keys = (0..<20).map { Self.bytes("k\($0)") }
    var outcomes: [Outcome] = []
    var thrown: (any Error)? = nil
    let busyBefore = c.statistics.busyMisses
    try c._holdWriteLock(oddSlotForKey: "k7") {
      do { outcomes = try Self.batch(c, keys, room: 16) } catch { thrown = error }
    }
    #expect(thrown == nil)
    #expect(outcomes.count == 20)
    for (i, o) in outcomes.enumerated() {
      #expect(o == (i == 7 ? Outcome(length: -1, bytes: nil) : Outcome(length: 1, bytes: [UInt8(i)])), "key \(i)")
    }
    #expect(c.statistics.busyMisses == busyBefore + 1)
    // Once the writer is done the key reads again.
    #expect(try Self.batch(c, [keys[7]], room: 16) == [Outcome(length: 1, bytes: [7])])
  }

  /// Bad input gets the single read's error, for the whole call, before anything is read
  /// (no length is written); an empty batch reads nothing.
  @Test func badKeysInABatchThrowTheSingleReadsError() throws {
    let path = TestFiles.tempPath("batch-bad")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    try c.setObject([1], forKey: "a")
    let long = [UInt8](repeating: 0x61, count: c.maxKeySize + 1)
    #expect(throws: CacheError.emptyKey) { try Self.single(c, [], room: 8) }
    #expect(throws: CacheError.emptyKey) { try Self.batch(c, [Self.bytes("a"), []], room: 8) }
    #expect(throws: CacheError.keyTooLarge(size: long.count, limit: c.maxKeySize)) {
      try Self.batch(c, [Self.bytes("a"), long], room: 8)
    }
    #expect(throws: CacheError.keyTooLarge(size: long.count, limit: c.maxKeySize)) { try Self.single(c, long, room: 8) }
    #expect(try Self.batch(c, [], room: 8) == [])
    // Nothing was read by the refused calls: no length written, no hit counted.
    let hits = c.statistics.hits
    var lengths = [-7, -7]
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16, alignment: 16)
    defer { buffer.deallocate() }
    Self.bytes("a").withUnsafeBytes { a in
      let keys = [a, UnsafeRawBufferPointer(start: nil, count: 0)]
      let buffers = [buffer, buffer]
      keys.withUnsafeBufferPointer { k in
        buffers.withUnsafeBufferPointer { b in
          lengths.withUnsafeMutableBufferPointer { l in
            #expect(throws: CacheError.emptyKey) { try c.copyBytes(forKeys: k, into: b, lengths: l) }
            // Counts that differ are refused, not trusted.
            #expect(throws: CacheError.self) {
              try c.copyBytes(forKeys: UnsafeBufferPointer(rebasing: k[..<1]), into: b, lengths: l)
            }
          }
        }
      }
    }
    #expect(lengths == [-7, -7])
    #expect(c.statistics.hits == hits)
    // The typed batch read refuses the same keys.
    let typed = try SharedCache<Int>(path: path + ".int", capacity: 1 << 20)
    defer { TestFiles.cleanup(path + ".int") }
    #expect(throws: CacheError.emptyKey) { try typed.objects(forKeys: ["x", ""]) }
    #expect(throws: CacheError.keyTooLarge(size: long.count, limit: typed.maxKeySize)) {
      try typed.objects(forKeys: ["x", String(decoding: long, as: UTF8.self)])
    }
  }

  /// `objects(forKeys:)` (built on the batch read) equals the dictionary of single typed
  /// reads: values decoded from the batch's buffers and, past them, read again by size.
  @Test func typedObjectsForKeysEqualsSingleReads() throws {
    let path = TestFiles.tempPath("batch-typed")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<String>(path: path, capacity: 2 << 20)
    var keys: [String] = []
    for i in 0..<500 {
      let k = "typed:\(i)"
      let v = String(repeating: "v\(i)-", count: i % 9 == 0 ? 200 : 2)  // some past 256 bytes
      try c.setObject(v, forKey: k, expires: i % 11 == 0 ? .date(Date(timeIntervalSinceNow: -5)) : nil)
      keys.append(k)
    }
    keys += ["absent:1", "typed:3", "absent:2", "typed:3"]  // misses and a duplicate
    var want: [String: String] = [:]
    for k in keys { if let v = try c.object(forKey: k) { want[k] = v } }
    let got = try c.objects(forKeys: keys)
    #expect(got == want)
    #expect(got.count == 500 - 46)  // 46 of the keys 0..<500 are multiples of 11 (expired)
    #expect(got.values.contains { $0.utf8.count > 256 })
    #expect(try c.objects(forKeys: []) == [:])
    // A value that is not a `String` is a decoding failure, as for the single read.
    let raw = try CacheFile(path: path)
    _ = try raw.set(Array("typed:1".utf8), [0xFF, 0xFE, 0x00])
    #expect(throws: CacheError.self) { try c.object(forKey: "typed:1") }
    #expect(throws: CacheError.self) { try c.objects(forKeys: ["typed:2", "typed:1"]) }
  }

  /// `setObjects` stores every pair (inline rewrites in place and records alike) under
  /// one hold of the write lock: two batches writing the same two keys never interleave,
  /// so both keys always end with the same batch's value.
  @Test func setObjectsStoresABatchUnderOneLockHold() throws {
    let path = TestFiles.tempPath("batch-set")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<String>(path: path, capacity: 4 << 20)
    let keys = (0..<2000).map { "set:\($0)" }
    try c.setObjects(keys.map { (key: $0, value: "first") })
    try c.setObjects(
      keys.enumerated().map { (key: $0.element, value: $0.offset % 5 == 0 ? String(repeating: "r", count: 300) : "a") })
    for (i, k) in keys.enumerated() {
      #expect(try c.object(forKey: k) == (i % 5 == 0 ? String(repeating: "r", count: 300) : "a"))
    }
    #expect(try c.verify().ok)

    // A key given twice keeps its last value.
    try c.setObjects([(key: "dup", value: "1"), (key: "dup", value: "2")])
    #expect(try c.object(forKey: "dup") == "2")

    // Batch A writes the first and last keys (and all between) with "A"; batch B writes
    // the two ends with "B", over and over, from another thread. Each batch is one lock
    // hold, so the ends always agree; a batch taking the lock per entry would let B land
    // between A's two ends.
    let first = keys[0]
    let last = keys[keys.count - 1]
    final class Flag: @unchecked Sendable {
      let lock = NSLock()
      var stop = false
      var done = false
    }
    for round in 0..<10 {
      try c.setObjects([(key: first, value: "start"), (key: last, value: "start")])
      let flag = Flag()
      let other = try SharedCache<String>(path: path)
      let t = Thread {
        while !flag.lock.withLock({ flag.stop }) {
          try? other.setObjects([(key: last, value: "B"), (key: first, value: "B")])
        }
        flag.lock.withLock { flag.done = true }
      }
      t.start()
      try c.setObjects(keys.map { (key: $0, value: "A") })
      flag.lock.withLock { flag.stop = true }
      while !flag.lock.withLock({ flag.done }) { usleep(100) }
      let ends = (try c.object(forKey: first), try c.object(forKey: last))
      #expect(ends.0 == ends.1, "round \(round): the batches interleaved: \(ends)")
      #expect(ends.0 == "A" || ends.0 == "B")
      for k in keys.dropFirst().dropLast() { #expect(try c.object(forKey: k) == "A") }
    }
    #expect(try c.verify().ok)
  }

  /// The batch read and the raw batch write allocate nothing (counted in a child whose
  /// malloc is interposed).
  @Test func aBatchReadAllocatesNothing() throws {
    let path = TestFiles.tempPath("batch-allocs")
    defer { TestFiles.cleanup(path) }
    let r = try ChildProcess.run(TestFiles.binary("mc-test-helper"), ["count-batch-allocs", path, "2000"])
    #expect(r.status == 0, "\(r.stderr)")
    if r.stdout.hasPrefix("unavailable") { return }  // a sanitizer's malloc
    #expect(r.stdout.hasPrefix("batch=0 "), "batch reads allocated: \(r.stdout)")
    #expect(r.stdout.contains("hits=24000"), "\(r.stdout)")
    #expect(r.stdout.contains(" mset=0 "), "batch writes allocated: \(r.stdout)")
    #expect(r.stdout.contains("stored=16"), "\(r.stdout)")
    #expect(r.stdout.hasSuffix(" set=0\n") || r.stdout.hasSuffix(" set=0"), "single sets allocated: \(r.stdout)")
  }
}

/// `cache-stress --mget N`: every worker's gets go out N at a time through the batch
/// read, every value still checked (whole, this key's, never older than one the same
/// reader saw), across processes, with writers and SIGKILLs.
@Suite struct BatchStressTests {
  static let stress = TestFiles.binary("cache-stress")

  func run(_ args: [String]) throws -> (status: Int32, json: [String: Any], stderr: String) {
    try Support.runStressJSON(args)
  }

  func int(_ j: [String: Any], _ key: String) -> Int { Support.int(j, key) }

  func expectClean(_ j: [String: Any], _ err: String, status: Int32) {
    #expect(status == 0, "stderr: \(err)")
    #expect(int(j, "corrupt_reads") == 0)
    #expect(int(j, "wrong_values") == 0)
    #expect(int(j, "errors") == 0)
    #expect(j["verify_ok"] as? Bool == true)
    #expect(int(j, "hits") + int(j, "misses") == int(j, "get_ops"))
  }

  /// Writer processes overwrite keys (inline and record values) while every process's
  /// gets go out in batches.
  @Test func batchedGetsUnderConcurrentWritersPassEveryCheck() throws {
    let path = TestFiles.tempPath("mget-writers")
    defer { TestFiles.cleanup(path) }
    let (status, j, err) = try run([
      "--path", path, "--procs", "3", "--threads", "2", "--duration", "2", "--keys", "5000", "--capacity", "16MiB",
      "--value-size", "24-400", "--read-pct", "70", "--dist", "zipf", "--mget", "16", "--seed", "11",
    ])
    expectClean(j, err, status: status)
    #expect(int(j, "mget") == 16)
    #expect(int(j, "get_ops") > 1000)
    #expect(int(j, "set_ops") > 100)
    #expect(int(j, "misses") <= int(j, "busy_misses"), "everything is prefilled: only busy slots may miss")
  }

  /// Workers killed with SIGKILL mid-run (some holding the lock, mid-write) and
  /// restarted: no batch returns a torn, foreign or stale value.
  @Test func batchedGetsSurviveChaosKills() throws {
    let (status, j, err) = try run([
      "--procs", "3", "--duration", "2.5", "--keys", "3000", "--capacity", "8MiB", "--value-size", "24-300",
      "--read-pct", "50", "--mget", "8", "--chaos-kills", "4", "--seed", "12",
    ])
    expectClean(j, err, status: status)
    #expect(int(j, "kills") == 4)
    #expect(int(j, "set_ops") > 0)
    #expect(err.contains("chaos: killed worker"))
  }

  /// The check cannot pass vacuously in batches either: a planted bad value fails the run.
  @Test func aPlantedCorruptionFailsABatchedRun() throws {
    _ = try Support.expectPlantedCorruptionFails([
      "--procs", "2", "--duration", "1", "--keys", "500", "--capacity", "4MiB", "--read-pct", "100",
      "--mget", "16",
    ])
  }

  /// A read-through run misses in batches, fills, and still checks every value.
  @Test func batchedReadThroughFillsItsMisses() throws {
    let (status, j, err) = try run([
      "--procs", "2", "--duration", "1", "--keys", "20000", "--capacity", "1MiB", "--read-through",
      "--read-pct", "100", "--value-size", "300-600", "--mget", "16",
    ])
    expectClean(j, err, status: status)
    #expect(int(j, "misses") > 0)
    #expect(int(j, "set_ops") == int(j, "misses"), "read-through sets exactly the keys it missed")
  }

  /// Batch sizes of both kinds (`--mget`, `--mset`) out of 1...64, or missing, are usage errors.
  @Test(arguments: ["--mget", "--mset"].flatMap { flag in [[flag, "0"], [flag, "65"], [flag, "x"], [flag]] })
  func badBatchSizesExit64(_ args: [String]) throws {
    let r = try ChildProcess.run(Self.stress, args, timeout: 30)
    #expect(r.status == 64)
    #expect(r.stderr.hasPrefix("error: "))
  }

  @Test func helpDescribesMgetAndMset() throws {
    let r = try ChildProcess.run(Self.stress, ["--help"], timeout: 30)
    #expect(r.status == 0)
    #expect(r.stdout.contains("--mget N"))
    #expect(r.stdout.contains("usage: cache-stress") && r.stdout.contains("[--mget N]"))
    #expect(r.stdout.contains("--mset N") && r.stdout.contains("[--mset N]"))
  }
}

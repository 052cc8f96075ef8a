import CheckedValues
import Foundation
import Glibc
import Synchronization
import TestSupport
import Testing

@_spi(Testing) @testable import MappedCache

// The per-process cache of decoded values (`DecodedValueCache`) and the in-place
// counter rewrite (`Writer.rewriteInPlace`). Serialized: `CountedRecord.decodes` counts
// decodes process-wide, and only these tests decode that type.

@Suite(.serialized) struct TypedDecodedTests {
  /// A 4 MiB file in one partition or several (`CoreOptions.make`).
  static func options(partitioned: Bool) -> CacheOptions {
    CoreOptions.make(partitioned: partitioned, capacity: 4 << 20)
  }

  static var decodes: Int { CountedRecord.decodes.load(ordering: .relaxed) }

  @Test func onByDefaultForCodableOffForRawTypes() throws {
    let p = TestFiles.tempPath("dv-defaults")
    defer {
      for s in ["rec", "bytes", "str", "int", "data", "off", "on"] { TestFiles.cleanup(p + s) }
    }
    let r = try SharedCache<CountedRecord>(path: p + "rec", capacity: 1 << 20)
    #expect(r._decodedLimits?.count == 4096 && r._decodedLimits?.bytes == 4 << 20)
    #expect(try SharedCache<[UInt8]>(path: p + "bytes", capacity: 1 << 20)._decodedLimits == nil)
    #expect(try SharedCache<String>(path: p + "str", capacity: 1 << 20)._decodedLimits == nil)
    #expect(try SharedCache<Int>(path: p + "int", capacity: 1 << 20)._decodedLimits == nil)
    #expect(try SharedCache<Data>(path: p + "data", capacity: 1 << 20)._decodedLimits == nil)
    let off = try SharedCache<CountedRecord>(
      path: p + "off", capacity: 1 << 20, policy: OpenPolicy(decodedValues: .off))
    #expect(off._decodedLimits == nil)
    let on = try SharedCache<String>(
      path: p + "on", capacity: 1 << 20, policy: OpenPolicy(decodedValues: .on(countLimit: 10, byteLimit: 1 << 20)))
    #expect(on._decodedLimits?.count == 10 && on._decodedLimits?.bytes == 1 << 20)
  }

  /// One handle reads (keeping decoded values), another writes: each read of a key
  /// nobody wrote since decodes nothing, and every overwrite, removal, re-add (even of
  /// identical bytes) and expiry is seen by the next read. In one partition and several.
  @Test(arguments: [false, true]) func hotReadsDecodeOnceAndSeeEveryWrite(partitioned: Bool) throws {
    let (reader, p) = try SharedCache<CountedRecord>.scratch("dv-hot", options: Self.options(partitioned: partitioned))
    defer { TestFiles.cleanup(p) }
    let writer = try SharedCache<CountedRecord>(path: p, policy: OpenPolicy(decodedValues: .off))
    let r1 = CountedRecord(key: "k", counter: 1)
    let r2 = CountedRecord(key: "k", counter: 2)
    try writer.setObject(r1, forKey: "k")
    #expect(try reader.object(forKey: "k") == r1)
    let d0 = Self.decodes
    for _ in 0..<100 { #expect(try reader.object(forKey: "k") == r1) }
    #expect(Self.decodes == d0, "hot reads of an unchanged entry decode nothing")
    #expect(reader._decodedUsage.count == 1)

    try writer.setObject(r2, forKey: "k")
    #expect(try reader.object(forKey: "k") == r2)
    #expect(Self.decodes == d0 + 1)
    // The same bytes written again are a new write (a new version): decoded afresh.
    try writer.setObject(r2, forKey: "k")
    #expect(try reader.object(forKey: "k") == r2)
    #expect(Self.decodes == d0 + 2)

    #expect(try writer.removeObject(forKey: "k"))
    #expect(try reader.object(forKey: "k") == nil)
    try writer.setObject(r1, forKey: "k")
    #expect(try reader.object(forKey: "k") == r1)

    // Expiry is judged on every read: `touch` changes no version, yet the kept value
    // of an entry that has expired is not returned.
    #expect(try writer.touch("k", expires: .date(Date(timeIntervalSinceNow: -60))))
    #expect(try reader.object(forKey: "k") == nil)
    #expect(try reader.object(forKey: "k", allowingExpired: true) == r1)
    #expect(try !writer.touch("k", expires: .never), "an expired entry is not touched back")
    try writer.setObject(r1, forKey: "k", expires: .seconds(600))
    #expect(try reader.object(forKey: "k") == r1)
    #expect(try writer.touch("k", expires: .never))
    let d1 = Self.decodes
    #expect(try reader.object(forKey: "k") == r1)
    #expect(Self.decodes == d1, "a touch keeps the version: the kept value serves")
    try writer.setObject(r2, forKey: "k", expires: .date(Date(timeIntervalSinceNow: -1)))
    #expect(try reader.object(forKey: "k") == nil)
    #expect(try reader.verify().ok)
  }

  /// The typed batch read (`objects(forKeys:)`) goes through the kept values as the
  /// single read does: a batch of keys nobody wrote since decodes nothing, and every
  /// overwrite, rewrite of identical bytes, removal and expiry by another handle is
  /// seen by the next batch, which decodes exactly the keys rewritten.
  @Test(arguments: [false, true]) func batchReadsUseKeptValuesAndSeeEveryWrite(partitioned: Bool) throws {
    let (reader, p) = try SharedCache<CountedRecord>.scratch(
      "dv-batch", options: Self.options(partitioned: partitioned))
    defer { TestFiles.cleanup(p) }
    let writer = try SharedCache<CountedRecord>(path: p, policy: OpenPolicy(decodedValues: .off))
    let keys = (0..<40).map { "bk\($0)" }
    var want: [String: CountedRecord] = [:]
    for k in keys {
      want[k] = CountedRecord(key: k, counter: 1)
      try writer.setObject(want[k]!, forKey: k)
    }
    #expect(try reader.objects(forKeys: keys) == want)
    let d0 = Self.decodes
    for _ in 0..<10 { #expect(try reader.objects(forKeys: keys + ["absent"]) == want) }
    #expect(Self.decodes == d0, "batches of unchanged entries decode nothing")
    #expect(reader._decodedUsage.count == 40)

    for i in stride(from: 0, to: 40, by: 4) {
      want[keys[i]] = CountedRecord(key: keys[i], counter: 2)
      try writer.setObject(want[keys[i]]!, forKey: keys[i])
    }
    for i in stride(from: 1, to: 40, by: 8) { try writer.setObject(want[keys[i]]!, forKey: keys[i]) }  // same bytes
    for i in stride(from: 2, to: 40, by: 8) {
      #expect(try writer.removeObject(forKey: keys[i]))
      want[keys[i]] = nil
    }
    for i in stride(from: 3, to: 40, by: 8) {
      #expect(try writer.touch(keys[i], expires: .date(Date(timeIntervalSinceNow: -60))))
      want[keys[i]] = nil
    }
    let d1 = Self.decodes
    #expect(try reader.objects(forKeys: keys) == want)
    #expect(Self.decodes - d1 == 15, "the 10 overwritten and 5 rewritten keys are decoded again, no others")
    for k in keys { #expect(try reader.object(forKey: k) == want[k]) }
    #expect(try reader.objects(forKeys: keys) == want)
    #expect(Self.decodes - d1 == 15, "single and batch reads share the kept values")
  }

  /// A counter kept decoded (turned on for `Int`) sees in-place increments: the rewrite
  /// gives the entry a new version.
  @Test func keptCounterSeesInPlaceIncrements() throws {
    let p = TestFiles.tempPath("dv-incr")
    defer { TestFiles.cleanup(p) }
    let reader = try SharedCache<Int>(
      path: p, capacity: 4 << 20, options: Self.options(partitioned: true), policy: OpenPolicy(decodedValues: .on()))
    let writer = try SharedCache<Int>(path: p)
    try writer.setObject(5, forKey: "n")
    #expect(try reader.object(forKey: "n") == 5)
    #expect(try reader.object(forKey: "n") == 5)
    for expected in 6...20 {
      #expect(try writer.increment(forKey: "n") == expected)
      #expect(try reader.object(forKey: "n") == expected)
    }
    #expect(try writer.decrement(forKey: "n", by: 30) == -10)
    #expect(try reader.object(forKey: "n") == -10)
  }

  /// Keys spread over the sets and stripes: a thousand keys fit the default limits, and
  /// reading them again decodes (almost) nothing.
  @Test func manyKeysAreKept() throws {
    let (c, p) = try SharedCache<CountedRecord>.scratch("dv-spread", options: CacheOptions(capacity: 8 << 20))
    defer { TestFiles.cleanup(p) }
    let keys = (0..<1000).map { "spread-key-\($0)" }
    for (i, k) in keys.enumerated() { try c.setObject(CountedRecord(key: k, counter: i), forKey: k) }
    for (i, k) in keys.enumerated() { #expect(try c.object(forKey: k)?.counter == i) }
    let kept = c._decodedUsage.count
    #expect(kept >= 950, "\(kept) of 1000 kept")
    let d0 = Self.decodes
    for (i, k) in keys.enumerated() { #expect(try c.object(forKey: k)?.counter == i) }
    #expect(Self.decodes - d0 <= 1000 - kept, "only keys not kept are decoded again")
  }

  /// The count limit holds however many keys are read; values count their bytes, the
  /// byte limit holds too, and a value too large to keep is still read correctly.
  @Test func staysWithinItsLimits() throws {
    let p = TestFiles.tempPath("dv-limits")
    defer { TestFiles.cleanup(p) }
    let counted = try SharedCache<CountedRecord>(
      path: p, capacity: 8 << 20, policy: OpenPolicy(decodedValues: .on(countLimit: 64, byteLimit: 1 << 20)))
    for i in 0..<500 { try counted.setObject(CountedRecord(key: "k\(i)", counter: i), forKey: "k\(i)") }
    for _ in 0..<2 {
      for i in 0..<500 { #expect(try counted.object(forKey: "k\(i)")?.counter == i) }
    }
    #expect(counted._decodedUsage.count > 0 && counted._decodedUsage.count <= 64)

    let sized = try SharedCache<CountedRecord>(
      path: p, policy: OpenPolicy(decodedValues: .on(countLimit: 4096, byteLimit: 32 << 10)))
    let tags = (0..<20).map { "tag-\($0)-" + String(repeating: "t", count: 10) }  // ~400 bytes a value
    for i in 0..<200 { try sized.setObject(CountedRecord(key: "b\(i)", counter: i, tags: tags), forKey: "b\(i)") }
    for i in 0..<200 { #expect(try sized.object(forKey: "b\(i)")?.counter == i) }
    let usage = sized._decodedUsage
    #expect(usage.count > 0 && usage.bytes <= 32 << 10, "\(usage)")
    // 8 stripes of 4 KiB: a value over a quarter of one (960 bytes) is not kept.
    let big = CountedRecord(
      key: "big", counter: 7, tags: Array(repeating: String(repeating: "x", count: 100), count: 20))
    try sized.setObject(big, forKey: "big")
    let before = sized._decodedUsage.count
    #expect(try sized.object(forKey: "big") == big)
    #expect(try sized.object(forKey: "big") == big)
    #expect(sized._decodedUsage.count <= before)
  }

  /// Many threads share one handle: writers raise each key's counter, readers check that
  /// every value is whole and that no key's counter goes backwards for them; at the end
  /// every key reads its last value.
  @Test func manyThreadsShareOneHandle() throws {
    let (cache, p) = try SharedCache<CountedRecord>.scratch("dv-threads", options: CacheOptions(capacity: 4 << 20))
    defer { TestFiles.cleanup(p) }
    let keys = (0..<16).map { "t\($0)" }
    for k in keys { try cache.setObject(CountedRecord(key: k, counter: 0), forKey: k) }
    let rounds = 300
    let failures = Atomic<Int>(0)
    let writersDone = Atomic<Int>(0)
    let writers = 2
    let readers = 6
    DispatchQueue.concurrentPerform(iterations: writers + readers) { t in
      if t < writers {
        for c in 1...rounds {
          for k in stride(from: t, to: keys.count, by: writers) {
            if (try? cache.setObject(CountedRecord(key: keys[k], counter: c), forKey: keys[k])) == nil {
              failures.add(1, ordering: .relaxed)
            }
          }
        }
        writersDone.add(1, ordering: .releasing)
        return
      }
      var seen = [Int](repeating: 0, count: keys.count)
      var rng = SplitMix(UInt64(t))
      while writersDone.load(ordering: .acquiring) < writers {
        let k = rng.below(keys.count)
        guard let v = try? cache.object(forKey: keys[k]), v.isWhole(for: keys[k]), v.counter >= seen[k] else {
          failures.add(1, ordering: .relaxed)
          continue
        }
        seen[k] = v.counter
      }
    }
    #expect(failures.load(ordering: .relaxed) == 0)
    for k in keys { #expect(try cache.object(forKey: k)?.counter == rounds) }
  }

  /// Another process overwrites, removes and re-adds a hot key while threads here read
  /// it through their decoded cache, one by single reads, one by batch reads
  /// (`objects(forKeys:)` of the ack and the key, read in that order): no read returns a
  /// counter older than one seen before, nor, once the removal after counter `a` is
  /// acknowledged, a counter up to `a`.
  @Test func otherProcessWritesWhileReadersHammer() throws {
    let (cache, p) = try SharedCache<CountedRecord>.scratch("dv-mp", options: CacheOptions(capacity: 4 << 20))
    defer { TestFiles.cleanup(p) }
    let rounds = 6000
    let writer = try ChildProcess(
      TestFiles.binary("mc-test-helper"), ["decoded-writer", p, "hot", "\(rounds)", "97"])
    let running = Atomic<Bool>(true)
    let failures = Atomic<Int>(0)
    let hits = Atomic<Int>(0)
    let batchHits = Atomic<Int>(0)
    let group = DispatchGroup()
    for t in 0..<2 {
      group.enter()
      Thread.detachNewThread {
        defer { group.leave() }
        var last = 0
        var reads = 0
        while running.load(ordering: .acquiring) || reads < 100 {
          reads += 1
          do {
            let acked: Int
            let value: CountedRecord?
            if t == 1 {
              let both = try cache.objects(forKeys: ["ack:hot", "hot"])
              (acked, value) = (both["ack:hot"]?.counter ?? 0, both["hot"])
              if value != nil { batchHits.add(1, ordering: .relaxed) }
            } else {
              acked = try cache.object(forKey: "ack:hot")?.counter ?? 0
              value = try cache.object(forKey: "hot")
            }
            guard let v = value else { continue }
            hits.add(1, ordering: .relaxed)
            if !v.isWhole(for: "hot") || v.counter < last || v.counter <= acked {
              failures.add(1, ordering: .relaxed)
              print("[decoded] reader \(t): counter \(v.counter) after \(last), removal acked at \(acked)")
            }
            last = v.counter
          } catch {
            failures.add(1, ordering: .relaxed)
          }
        }
      }
    }
    let written = writer.wait()
    running.store(false, ordering: .releasing)
    group.wait()
    #expect(written.status == 0)
    #expect(failures.load(ordering: .relaxed) == 0)
    #expect(batchHits.load(ordering: .relaxed) > 0, "the batch reader saw the key")
    #expect(try cache.object(forKey: "hot")?.counter == rounds)
    #expect(try cache.object(forKey: "ack:hot")?.counter == rounds / 97 * 97)
    print(
      "[decoded] readers: \(hits.load(ordering: .relaxed)) hits checked (\(batchHits.load(ordering: .relaxed)) in batches); \(Self.decodes) decodes in this process"
    )
  }

  // MARK: In-place counters

  /// A counter changes where it stands: no record is appended and no slot moves, while
  /// every change takes a new version; overflow and bad bytes change nothing.
  @Test(arguments: [true, false]) func incrementRewritesInPlace(partitioned: Bool) throws {
    let (c, p) = try SharedCache<Int>.scratch("dv-inplace", options: Self.options(partitioned: partitioned))
    defer { TestFiles.cleanup(p) }
    #expect(try c.increment(forKey: "n") == 1)
    let k = Array("n".utf8)
    let first = try #require(try k.withUnsafeBytes { try c.engine._find($0) })
    let logBytes = c.statistics.logBytesUsed
    for i in 2...100 { #expect(try c.increment(forKey: "n") == i) }
    #expect(try c.decrement(forKey: "n", by: 50) == 50)
    let after = try #require(try k.withUnsafeBytes { try c.engine._find($0) })
    #expect(after.entry.at == first.entry.at && after.entry.offset == first.entry.offset)
    #expect(after.entry.header.version == first.entry.header.version + 100, "one new version per change")
    #expect(c.statistics.logBytesUsed == logBytes, "no record appended")

    // Expiry: kept without `expires`, set with it.
    try c.increment(forKey: "n", expires: .seconds(600))
    guard case .date(let d)? = try c.expiry(forKey: "n") else {
      Issue.record("no expiry")
      return
    }
    try c.increment(forKey: "n")
    #expect(try c.expiry(forKey: "n") == .date(d))
    try c.increment(forKey: "n", expires: .never)
    #expect(try c.expiry(forKey: "n") == .never)
    #expect(try c.object(forKey: "n") == 53)

    // Overflow throws with the counter and its version unchanged.
    try c.setObject(Int.max, forKey: "big")
    let big = try #require(try Array("big".utf8).withUnsafeBytes { try c.engine._find($0) })
    #expect(throws: CacheError.self) { try c.increment(forKey: "big") }
    #expect(try c.object(forKey: "big") == Int.max)
    #expect(
      try Array("big".utf8).withUnsafeBytes { try c.engine._find($0) }?.entry.header.version
        == big.entry.header.version)
    // Bytes that are not an Int: `.notAnInteger`, nothing changed.
    let junk: [UInt8] = [1, 2, 3]
    _ = try junk.withUnsafeBytes { v in try Array("j".utf8).withUnsafeBytes { try c.engine.set($0, v, expiry: 0) } }
    #expect(throws: CacheError.notAnInteger(key: "j")) { try c.increment(forKey: "j") }
    #expect(try c.withBytes(forKey: "j") { Array($0) } == junk)
    // An expired counter starts again from `initial`.
    try c.setObject(50, forKey: "old", expires: .date(Date(timeIntervalSinceNow: -1)))
    #expect(try c.increment(forKey: "old", initial: 10) == 11)
    #expect(try c.verify().ok)
  }

  @Test(arguments: [true, false]) func incrementsFromSeveralProcessesSumExactly(partitioned: Bool) throws {
    let (c, p) = try SharedCache<Int>.scratch("dv-incr-mp", options: Self.options(partitioned: partitioned))
    defer { TestFiles.cleanup(p) }
    try c.setObject(0, forKey: "hits")
    let k = Array("hits".utf8)
    let offset = try #require(try k.withUnsafeBytes { try c.engine._find($0) }).entry.offset
    let procs = 3
    let each = 3000
    let children = try (0..<procs).map { _ in
      try ChildProcess(TestFiles.binary("mc-test-helper"), ["incr", p, "hits", "\(each)"])
    }
    for _ in 0..<each { try c.increment(forKey: "hits") }
    for child in children {
      #expect(child.wait().status == 0)
    }
    #expect(try c.object(forKey: "hits") == (procs + 1) * each)
    #expect(try k.withUnsafeBytes { try c.engine._find($0) }?.entry.offset == offset, "rewritten in place throughout")
    #expect(try c.verify().ok)
  }

  /// A process killed inside the in-place rewrite (the new value stored, the slot odd,
  /// the lock held) makes no reader see a torn or half-made counter; the next writer
  /// takes the lock over and repairs the slot as it repairs any half-written one (the
  /// counter being written is lost, as a set's entry is), and other entries are kept.
  @Test(arguments: [true, false]) func killedMidIncrementIsRepaired(partitioned: Bool) throws {
    let (c, p) = try SharedCache<Int>.scratch("dv-incr-kill", options: Self.options(partitioned: partitioned))
    defer { TestFiles.cleanup(p) }
    try c.setObject(41, forKey: "n")
    try c.setObject(7, forKey: "other")
    let before = c.statistics
    let r = try ChildProcess.run(TestFiles.binary("mc-test-helper"), ["incr-die", p, "n"], timeout: 60)
    #expect(r.signaled && r.status == SIGKILL, "killed inside the rewrite: \(r)")
    // Before any repair the slot is odd: a busy miss, never 42 or a torn integer.
    let seen = try c.object(forKey: "n")
    #expect(seen == nil || seen == 41)
    #expect(try c.object(forKey: "other") == 7)
    // The next write takes the dead holder's lock and repairs first.
    #expect(try c.increment(forKey: "other") == 8)
    let s = c.statistics
    #expect(s.lockTakeovers == before.lockTakeovers + 1)
    #expect(s.recoveries == before.recoveries + 1)
    #expect(try c.object(forKey: "n") == nil, "the entry being written is dropped")
    #expect(try c.increment(forKey: "n") == 1)
    #expect(try c.verify().ok)
  }
}

import Foundation
import Glibc
import Synchronization
import TestSupport
import Testing

@testable import MappedCache

// Counters, compare-and-swap, bulk operations and iteration.

@Suite struct TypedAtomicTests {
  /// In one partition and in several.
  @Test(arguments: [false, true]) func incrementAndDecrement(partitioned: Bool) throws {
    let p = TestFiles.tempPath("ta-incr")
    defer { TestFiles.cleanup(p) }
    let o = CoreOptions.make(partitioned: partitioned, capacity: 1 << 20)
    let c = try SharedCache<Int>(path: p, capacity: 1 << 20, options: o)
    #expect(try c.increment(forKey: "n") == 1)
    #expect(try c.increment(forKey: "n", by: 10) == 11)
    #expect(try c.decrement(forKey: "n", by: 20) == -9)
    #expect(try c.object(forKey: "n") == -9)
    #expect(try c.increment(forKey: "fresh", by: 5, initial: 100) == 105)
    // Overflow throws and leaves the counter as it was.
    try c.setObject(Int.max, forKey: "big")
    #expect(throws: CacheError.self) { try c.increment(forKey: "big") }
    #expect(try c.object(forKey: "big") == Int.max)
    // An expired counter starts again from `initial`.
    try c.setObject(50, forKey: "old", expires: .date(Date(timeIntervalSinceNow: -1)))
    #expect(try c.increment(forKey: "old") == 1)
  }

  /// The straight increment (`CacheEngine.changeCounter`) and what it leaves to the
  /// general way: each case is shown to go the way it is said to, and `increment` to
  /// get every one of them right.
  @Test func straightIncrementAndWhatItLeavesToTheGeneralWay() throws {
    let p = TestFiles.tempPath("ta-incr-straight")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<Int>(path: p, capacity: 1 << 20)
    func straight(_ key: String, by delta: Int = 1) -> CacheEngine.CounterChange {
      Array(key.utf8).withUnsafeBytes { c.engine.changeCounter($0, by: delta, subtracting: false) }
    }
    func changed(_ r: CacheEngine.CounterChange) -> Int? { if case .changed(let v) = r { v } else { nil } }
    func refused(_ r: CacheEngine.CounterChange) -> Int? { if case .refused(let v) = r { v } else { nil } }
    func elsewise(_ r: CacheEngine.CounterChange) -> Bool { if case .elsewise = r { true } else { false } }
    // A live counter: changed in place, with a new version, counted as a set, the
    // intent word clear again.
    try c.setObject(41, forKey: "n")
    let before = try #require(try c.objectWithVersion(forKey: "n")).1
    let sets = c.statistics.sets
    #expect(changed(straight("n")) == 42)
    #expect(!(0..<c.engine.layout.partitionCount).contains { c.engine.partition($0).counters.value(.intent) != 0 })
    // Refused (an overflow): nothing changed, and `increment` says why. (Before
    // any read: a read's first hit marks the slot's word, which the hint then no longer
    // matches, and the next change goes the general way once.)
    #expect(refused(straight("n", by: Int.max)) == 42)
    #expect(try c.object(forKey: "n") == 42)
    #expect(try #require(try c.objectWithVersion(forKey: "n")).1 != before)
    #expect(c.statistics.sets == sets + 1)
    try c.setObject(Int.max, forKey: "big")
    #expect(throws: CacheError.self) { try c.increment(forKey: "big") }
    #expect(try c.object(forKey: "big") == Int.max)
    // Absent: the general way creates it.
    #expect(elsewise(straight("absent")))
    #expect(try c.increment(forKey: "absent", initial: 10) == 11)
    // One that may expire: the general way, which reads the clock and keeps the expiry.
    try c.setObject(5, forKey: "e", expires: .seconds(100))
    let expiry = try c.expiry(forKey: "e")
    #expect(elsewise(straight("e")))
    #expect(try c.increment(forKey: "e") == 6)
    #expect(try c.expiry(forKey: "e") == expiry)
    // An expired one starts again from `initial`.
    try c.setObject(50, forKey: "old", expires: .date(Date(timeIntervalSinceNow: -1)))
    #expect(try c.increment(forKey: "old") == 1)
    // A key of more than 16 bytes: the general way.
    let long = String(repeating: "k", count: 40)
    try c.setObject(1, forKey: long)
    #expect(elsewise(straight(long)))
    #expect(try c.increment(forKey: long) == 2)
    // The partition's lock held (by this handle here, as by another writer): not
    // waited for; the general way then waits for it.
    try Array("n".utf8).withUnsafeBytes { k in
      try c.engine._holdWriteLock(oddKey: k) {
        #expect(elsewise(straight("n")))
      }
    }
    #expect(try c.increment(forKey: "n") == 43)
    // A value whose checksum fails (damaged in place): left alone. (The
    // hint made fresh first, so that the checksum alone turns the change away.)
    #expect(changed(straight("n", by: 0)) == 43)
    let e = c.engine
    let f = try #require(try Array("n".utf8).withUnsafeBytes { try e._find($0) })
    let first = f.entry.offset + f.entry.header.headerBytes + f.entry.header.klen
    let byte = e.memory._byte(at: e._fileOffset(partition: f.partition, first))
    byte.storeBytes(of: byte.load(as: UInt8.self) ^ 0x10, as: UInt8.self)
    #expect(elsewise(straight("n")))
    #expect(try c.withBytes(forKey: "n") { $0.loadUnaligned(as: Int.self) } == 43 ^ 0x10)
    #expect(try c.verify().ok == false)
  }

  @Test func incrementKeepsOrSetsExpiry() throws {
    let p = TestFiles.tempPath("ta-incr-exp")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<Int>(path: p, capacity: 1 << 20)
    try c.increment(forKey: "n", expires: .seconds(100))
    guard case .date(let d)? = try c.expiry(forKey: "n") else {
      Issue.record("no expiry")
      return
    }
    try c.increment(forKey: "n")  // keeps its expiry
    #expect(try c.expiry(forKey: "n") == .date(d))
    try c.increment(forKey: "n", expires: .never)
    #expect(try c.expiry(forKey: "n") == .never)
  }

  @Test func notAnIntegerChangesNothing() throws {
    let p = TestFiles.tempPath("ta-nan")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<UInt32>(path: p, capacity: 1 << 20)
    let junk: [UInt8] = [1, 2, 3]  // 3 bytes: not a UInt32
    _ = try junk.withUnsafeBytes { v in try Array("k".utf8).withUnsafeBytes { k in try c.engine.set(k, v, expiry: 0) } }
    #expect(throws: CacheError.notAnInteger(key: "k")) { try c.increment(forKey: "k") }
    #expect(try c.withBytes(forKey: "k") { Array($0) } == junk)
    #expect(try c.decrement(forKey: "u", initial: 5) == 4)
    #expect(throws: CacheError.self) { try c.decrement(forKey: "u", by: 10) }  // below zero
  }

  @Test func incrementFromSeveralProcessesSumsExactly() throws {
    let p = TestFiles.tempPath("ta-incr-mp")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<Int>(path: p, capacity: 4 << 20)
    let procs = 4
    let each = 2000
    let children = try (0..<procs).map { _ in
      try ChildProcess(TestFiles.binary("mc-test-helper"), ["incr", p, "hits", "\(each)"])
    }
    for _ in 0..<each { try c.increment(forKey: "hits") }  // this process joins in
    for child in children {
      #expect(child.wait().status == 0)
    }
    #expect(try c.object(forKey: "hits") == (procs + 1) * each)
    #expect(try c.verify().ok)
  }

  @Test func compareAndSwap() throws {
    let p = TestFiles.tempPath("ta-cas")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    try c.setObject("v1", forKey: "k")
    let (v, version) = try #require(try c.objectWithVersion(forKey: "k"))
    #expect(v == "v1")
    try c.setObject("other writer", forKey: "k")
    #expect(try !c.setObject("lost", forKey: "k", ifVersion: version))
    let (_, now) = try #require(try c.objectWithVersion(forKey: "k"))
    #expect(try c.setObject("v2", forKey: "k", ifVersion: now))
    #expect(try c.object(forKey: "k") == "v2")
    #expect(try !c.setObject("absent", forKey: "missing", ifVersion: now))
  }

  @Test func bulkGetAndSet() throws {
    let p = TestFiles.tempPath("ta-bulk")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<Int>(path: p, capacity: 1 << 20)
    let items = Dictionary(uniqueKeysWithValues: (0..<100).map { ("b\($0)", $0) })
    let setsBefore = c.statistics.sets
    try c.setObjects(items, expires: .seconds(60))
    #expect(c.statistics.sets - setsBefore == 100)
    #expect(try c.objects(forKeys: items.keys) == items)
    #expect(try c.objects(forKeys: ["b1", "nope"]) == ["b1": 1])
    // An invalid key anywhere in a batch throws before anything is stored.
    #expect(throws: CacheError.emptyKey) { try c.setObjects([(key: "new1", value: 1), (key: "", value: 2)]) }
    #expect(try c.object(forKey: "new1") == nil)
    #expect(throws: (any Error).self) {
      try c.setObjects([(key: "new2", value: 1), (key: String(repeating: "x", count: 251), value: 2)])
    }
    #expect(try c.object(forKey: "new2") == nil)
  }

  @Test func allKeysAndIteration() throws {
    let p = TestFiles.tempPath("ta-iter")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    for i in 0..<50 { try c.setObject("v\(i)", forKey: "k\(i)") }
    try c.setObject("gone", forKey: "expired", expires: .date(Date(timeIntervalSinceNow: -1)))
    #expect(Set(c.allKeys) == Set((0..<50).map { "k\($0)" }))
    var seen: [String: String] = [:]
    try c.forEachObject { k, v, e in
      seen[k] = v
      #expect(e == .never)
      return true
    }
    #expect(seen == Dictionary(uniqueKeysWithValues: (0..<50).map { ("k\($0)", "v\($0)") }))
    var withExpired = 0
    try c.forEachObject(includeExpired: true) { _, _, _ in
      withExpired += 1
      return true
    }
    #expect(withExpired == 51)
    var stopped = 0
    try c.forEachObject { _, _, _ in
      stopped += 1
      return stopped < 5
    }
    #expect(stopped == 5)
  }

  @Test func iterationNeverBlocksWritersAndYieldsWholeEntries() throws {
    let p = TestFiles.tempPath("ta-iter-mt")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 2 << 20)
    for i in 0..<200 { try c.setObject("k\(i)=0", forKey: "k\(i)") }
    // A writer in this process rewrites entries (each value names its key) while a walk
    // runs; a writer holding the lock would stall if the walk took it.
    let stop = DispatchSemaphore(value: 0)
    final class Flag: @unchecked Sendable {
      let stop = Atomic<Bool>(false)
      var done: Bool { stop.load(ordering: .acquiring) }
      var writes = 0  // written by the writer before it signals, read after the wait
    }
    let flag = Flag()
    let writer = Thread {
      var n = 0
      while !flag.done {
        n += 1
        try? c.setObject("k\(n % 200)=\(n)", forKey: "k\(n % 200)")
        _ = try? c.removeObject(forKey: "k\((n + 7) % 200)")
      }
      flag.writes = n
      stop.signal()
    }
    writer.start()
    for _ in 0..<30 {
      try c.forEachObject { k, v, _ in
        #expect(v.hasPrefix(k + "="), "torn or foreign value \(v) for \(k)")
        return true
      }
      _ = c.allKeys
    }
    flag.stop.store(true, ordering: .releasing)
    stop.wait()
    #expect(flag.writes > 0)
  }
}

import Foundation
import Glibc
import SystemCalls
import TestSupport
import Testing

@testable import MappedCache

/// Growing a live cache (`SharedCache.grow(toCapacity:)`, DESIGN.md section 8): nothing
/// stored is lost, handles opened before growth follow it, several processes keep
/// reading and writing checked values through it, and a grower killed at every step
/// leaves a cache the next writer completes.
@Suite(.serialized) struct GrowthTests {
  static func options(_ capacity: Int, partitions: Int = 2) -> CacheOptions {
    var o = CacheOptions(capacity: capacity)
    o.partitionCount = partitions
    return o
  }

  static func key(_ i: Int) -> String { "grow-key-\(i)" }
  static func value(_ i: Int, _ round: Int = 0) -> String {
    "value-\(i)-\(round)-" + String(repeating: "v", count: i % 90)
  }

  @Test func growingKeepsEveryEntryAndAddsPartitions() throws {
    let (c, path) = try SharedCache<String>.scratch("grow", options: Self.options(4 << 20))
    defer { TestFiles.cleanup(path) }
    #expect(c.partitionCount == 2)
    #expect(c.maxCapacity == 256 << 20, "the default most capacity is 64 × the capacity")
    let n = 6000
    for i in 0..<n { try c.setObject(Self.value(i), forKey: Self.key(i)) }
    let before = c.statistics.entries
    #expect(before == n)
    var capacity = c.capacity
    for step in 1...4 {
      let want = capacity + step * (2 << 20)
      let got = try c.grow(toCapacity: want)
      #expect(got > capacity && got <= want)
      capacity = got
      #expect(c.capacity == capacity)
      for i in 0..<n { #expect(try c.object(forKey: Self.key(i)) == Self.value(i), "key \(i) after growth \(step)") }
      #expect(c.statistics.entries == n)
      #expect(try c.verify().ok)
    }
    #expect(c.partitionCount > 2)
    // The new space holds new entries.
    for i in n..<(4 * n) { try c.setObject(Self.value(i), forKey: Self.key(i)) }
    #expect(c.statistics.entries == 4 * n, "the grown cache holds four times the entries without evicting")
    for i in 0..<(4 * n) { #expect(try c.object(forKey: Self.key(i)) == Self.value(i)) }
    // A file reopened sees the grown layout.
    let again = try SharedCache<String>(path: path, options: Self.options(1 << 20))
    #expect(again.capacity == capacity && again.partitionCount == c.partitionCount)
    #expect(try again.object(forKey: Self.key(4 * n - 1)) == Self.value(4 * n - 1))
  }

  /// A handle opened before growth reads entries written after it into the new
  /// partitions, and its own writes land where every other handle finds them.
  @Test func aHandleOpenedBeforeGrowthFollowsIt() throws {
    let (old, path) = try SharedCache<String>.scratch("grow-old", options: Self.options(4 << 20))
    defer { TestFiles.cleanup(path) }
    for i in 0..<2000 { try old.setObject(Self.value(i), forKey: Self.key(i)) }
    let grower = try SharedCache<String>(path: path)
    try grower.grow(toCapacity: 16 << 20)
    for i in 0..<4000 { try grower.setObject(Self.value(i, 1), forKey: Self.key(i)) }
    // The old handle has not looked at the header since it opened.
    for i in 0..<4000 { #expect(try old.object(forKey: Self.key(i)) == Self.value(i, 1), "key \(i)") }
    for i in 0..<4000 { try old.setObject(Self.value(i, 2), forKey: Self.key(i)) }
    for i in 0..<4000 { #expect(try grower.object(forKey: Self.key(i)) == Self.value(i, 2), "key \(i)") }
    #expect(old.partitionCount == grower.partitionCount)
    #expect(try grower.verify().ok)
  }

  /// A handle routes keys by one word, the partition count and its linear-hashing mask
  /// (`PartitionRoute`): a handle opened before each growth by one partition (counts
  /// 3 to 7, whose masks are not the count's) finds every key, those growth moved to the
  /// new partition included, and then routes by the new count and its mask together.
  @Test func aHandleRoutesByTheGrownCountAndItsMask() throws {
    let path = TestFiles.tempPath("grow-route")
    defer { TestFiles.cleanup(path) }
    let grower = try SharedCache<String>(path: path, options: Self.options(4 << 20))
    let partitionBytes = grower.capacity / grower.partitionCount
    let n = 3000
    for i in 0..<n { try grower.setObject(Self.value(i), forKey: Self.key(i)) }
    for _ in 0..<5 {
      let reader = try SharedCache<String>(path: path)
      let before = reader.engine.memory.route
      #expect(before == PartitionRoute(count: grower.partitionCount))
      try grower.grow(toCapacity: grower.capacity + partitionBytes)
      // The reader routes by the word it opened with until a miss sends it to the header.
      for i in 0..<n { #expect(try reader.object(forKey: Self.key(i)) == Self.value(i), "key \(i)") }
      let after = reader.engine.memory.route
      #expect(after == PartitionRoute(count: grower.partitionCount))
      #expect(after.count == before.count + 1)
    }
    #expect(try grower.verify().ok)
  }

  /// The routing word never goes back: a thread that adopted a smaller count and raises
  /// the word after another raised it further (`Routing.raiseRoute`) leaves it as is.
  @Test func theRoutingWordIsNeverLowered() throws {
    let path = TestFiles.tempPath("grow-raise")
    defer { TestFiles.cleanup(path) }
    let c = try SharedCache<String>(path: path, options: Self.options(4 << 20))
    #expect(c.engine.memory.route == PartitionRoute(count: 2))
    c.engine.file.routing.raiseRoute(to: 1)
    #expect(c.engine.memory.route == PartitionRoute(count: 2))
    try c.setObject("v", forKey: "k")
    #expect(try c.object(forKey: "k") == "v")
  }

  @Test func growthRefusesWhatItCannotDo() throws {
    let (c, path) = try SharedCache<String>.scratch("grow-bad", options: Self.options(4 << 20)) {
      $0.maxCapacity = 8 << 20
    }
    defer { TestFiles.cleanup(path) }
    try c.setObject("kept", forKey: "k")
    #expect(throws: CacheError.self) { try c.grow(toCapacity: 16 << 20) }
    #expect(throws: CacheError.self) { try c.grow(toCapacity: 2 << 20) }
    #expect(try c.grow(toCapacity: c.capacity + 4096) == c.capacity, "less than a partition adds nothing")
    #expect(try c.grow(toCapacity: c.capacity) == c.capacity)
    #expect(try c.grow(toCapacity: 8 << 20) <= 8 << 20)
    #expect(try c.object(forKey: "k") == "kept")
    let ro = try SharedCache<String>(path: path, policy: OpenPolicy(readOnly: true))
    #expect(throws: CacheError.readOnly(path: path)) { try ro.grow(toCapacity: 8 << 20) }
  }

  /// Eight processes set and read checked values (each also checks that it reads back
  /// exactly the version it last wrote) while this process grows the file four times.
  @Test func processesReadAndWriteThroughFourGrowths() throws {
    let (c, path) = try SharedCache<[UInt8]>.scratch("grow-live", options: Self.options(8 << 20))
    defer { TestFiles.cleanup(path) }
    let workers = 8
    let children = try (0..<workers).map { w in
      try ChildProcess(RelSupport.helper, ["grow-worker", path, "4", "\(w)", "\(workers)"])
    }
    defer { for child in children { child.kill() } }
    usleep(600_000)
    var capacities = [c.capacity]
    for _ in 0..<4 {
      capacities.append(try c.grow(toCapacity: capacities.last! + (8 << 20)))
      usleep(500_000)
    }
    let all = children.map { $0.finish(timeout: 120) }
    for r in all {
      let f = RelSupport.fields(r.stdout)
      #expect(!r.signaled && r.status == 0, "worker: \(r.stdout) \(r.stderr)")
      #expect(f["wrong"] == "0" && f["stale"] == "0" && f["missing"] == "0", "\(r.stdout)")
      #expect(Int(f["sets"] ?? "") ?? 0 > 0)
    }
    #expect(capacities == capacities.sorted() && Set(capacities).count == 5, "\(capacities)")
    #expect(c.statistics.evictions == 0)
    #expect(try c.verify().ok)
    print(
      "growth under load: capacities \(capacities), workers: \(all.map { $0.stdout.trimmingCharacters(in: .newlines) })"
    )
  }

  /// The steps `MC_TEST_GROW_PAUSE` stops at (see `CacheEngine.pauseForTest`).
  static let steps = ["extended", "formatted", "published", "moving"]

  /// Runs `mapped-cache grow PATH --capacity CAPACITY` until it stops at `step`
  /// (`MC_TEST_GROW_PAUSE`), and SIGKILLs it there: the file is left as a grower killed
  /// at that step leaves it.
  static func killGrower(_ path: String, capacity: String, at step: String) throws {
    let p = try ChildProcess(
      TestFiles.binary("mapped-cache"), ["grow", path, "--capacity", capacity],
      environment: ["MC_TEST_GROW_PAUSE": step], stdout: .discarded, stderr: .discarded)
    defer {
      p.kill()
      p.wait()
    }
    guard p.waitUntilStopped(timeout: 30) else { throw GrowerNeverStopped(step: step) }
  }

  /// A cache of two partitions (4 MiB) holding keys 0..<`n`, then a grower towards
  /// four partitions (8 MiB) killed at `step`.
  static func fillAndKillGrower(_ path: String, entries n: Int, at step: String) throws {
    do {
      let c = try SharedCache<String>(path: path, options: options(4 << 20))
      for i in 0..<n { try c.setObject(value(i), forKey: key(i)) }
    }
    try killGrower(path, capacity: "8MiB", at: step)
  }

  struct GrowerNeverStopped: Error, CustomStringConvertible {
    var step: String
    var description: String { "the grower never stopped at \(step)" }
  }

  /// `mapped-cache grow` SIGKILLed at each step: every entry is still there, the next
  /// write finishes an interrupted split, verify is clean, and growing again works.
  @Test(arguments: steps) func aGrowerKilledAtEachStepLosesNothing(step: String) throws {
    let path = TestFiles.tempPath("grow-kill")
    defer { TestFiles.cleanup(path) }
    let n = 3000
    try Self.fillAndKillGrower(path, entries: n, at: step)

    let c = try SharedCache<String>(path: path)
    // Reads first: lock-free, they find every entry wherever the dead grower left it.
    for i in 0..<n { #expect(try c.object(forKey: Self.key(i)) == Self.value(i), "\(step): key \(i) before any write") }
    // Writes take the dead grower's locks over and finish its step.
    for i in 0..<n { try c.setObject(Self.value(i, 1), forKey: Self.key(i)) }
    for i in 0..<n { #expect(try c.object(forKey: Self.key(i)) == Self.value(i, 1), "\(step): key \(i)") }
    let report = try c.verify()
    #expect(report.ok, "\(step): \(report.problems)")
    #expect(c.statistics.entries == n)
    let grown = try c.grow(toCapacity: 12 << 20)
    #expect(grown > 4 << 20 && c.capacity == grown)
    for i in 0..<n { #expect(try c.object(forKey: Self.key(i)) == Self.value(i, 1)) }
    #expect(try c.verify().ok)
  }

  /// A dead grower's split whose source lock word is free but for stray bits (damage
  /// found by the damaged-file fuzz: owner 0, generation bits set): the writers of the
  /// new partition take the source's word as free, finish the split and store, where
  /// they used to let go and retry forever.
  @Test(arguments: [UInt32(0xF_B000), 0x8000_0000]) func aStraySourceLockWordDoesNotStallAnInterruptedSplit(
    word: UInt32
  ) throws {
    let path = TestFiles.tempPath("grow-stray-word")
    defer { TestFiles.cleanup(path) }
    let n = 2000
    // The first split, partition 2 from 0, stopped with one entry moved, both words held
    // by the dead grower.
    try Self.fillAndKillGrower(path, entries: n, at: "moving")
    let c = try SharedCache<String>(path: path)
    #expect(c.partitionCount == 3)
    c.engine.memory.partition(0).lockWord.store(word, .releasing)
    // Only keys of partition 2: nothing else takes partition 0's word first.
    let keys = (0..<n).filter { i in
      Array(Self.key(i).utf8).withUnsafeBytes { IndexGeometry.partition(KeyHash.key($0), count: 3) } == 2
    }
    #expect(!keys.isEmpty)
    let done = DispatchSemaphore(value: 0)
    let writer = Thread {
      for i in keys { try? c.setObject(Self.value(i, 1), forKey: Self.key(i)) }
      done.signal()
    }
    writer.start()
    guard done.wait(timeout: .now() + 20) == .success else {
      Issue.record("the writers of the new partition never finished the split")
      return
    }
    for i in keys { #expect(try c.object(forKey: Self.key(i)) == Self.value(i, 1)) }
    for i in 0..<n where !keys.contains(i) { #expect(try c.object(forKey: Self.key(i)) == Self.value(i)) }
    #expect(c.engine.memory.partition(2).word(.splitSource).load(.relaxed) == 0)
    #expect(try c.verify().ok)
  }

  /// On a tmpfs with no room for growth: `diskFull`, and the cache exactly as it was.
  @Test func aFullFileSystemRefusesGrowthAndChangesNothing() throws {
    guard let mnt = RelSupport.TmpMount(sizeKiB: 6144) else {
      print("grow-full-fs: mounting a tmpfs is not permitted here; the test cannot run")
      return
    }
    let path = mnt.dir + "/grow.mcache"
    let c = try SharedCache<String>(path: path, options: Self.options(4 << 20))
    for i in 0..<1000 { try c.setObject(Self.value(i), forKey: Self.key(i)) }
    let before = (c.capacity, c.partitionCount)
    var st = stat()
    #expect(stat(path, &st) == 0)
    let size = st.st_size
    do {
      try c.grow(toCapacity: 8 << 20)
      Issue.record("growth past the free space did not throw")
    } catch CacheError.diskFull(let p, let bytes) {
      #expect(p == path && bytes > 0)
    }
    #expect(stat(path, &st) == 0 && st.st_size == size, "the file was cut back to its size")
    #expect(c.capacity == before.0 && c.partitionCount == before.1)
    for i in 0..<1000 { #expect(try c.object(forKey: Self.key(i)) == Self.value(i)) }
    try c.setObject("after", forKey: "after")
    #expect(try c.verify().ok)
  }

  /// Growth by policy: reads through a working set three times the cache, drawn at
  /// random, evict keys that come back (ghost hits), and the cache grows, by its
  /// factor, never past its most capacity; the history records the rate that drove
  /// each growth.
  @Test func thePolicyGrowsACacheWhoseEvictedKeysComeBack() throws {
    var o = Self.options(4 << 20)
    o.maxCapacity = 16 << 20
    o.growthPolicy = GrowthPolicy(ghostHitRate: 0.05, factor: 2, minimumInterval: 0.1, minimumInserts: 500)
    let (c, path) = try SharedCache<[UInt8]>.scratch("grow-policy", options: o)
    defer { TestFiles.cleanup(path) }
    #expect(c.growthPolicy == o.growthPolicy)
    let value = [UInt8](repeating: 7, count: 400)
    let keys = 3 * (4 << 20) / 420
    let deadline = Date().addingTimeInterval(20)
    var rounds = 0
    var x: UInt64 = 0x9E37_79B9_7F4A_7C15
    while c.statistics.growths < 2 && Date() < deadline {
      for _ in 0..<keys {
        x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        let i = Int((x >> 33) % UInt64(keys))
        if try c.object(forKey: "p-\(i)") == nil { try c.setObject(value, forKey: "p-\(i)") }
      }
      rounds += 1
      usleep(150_000)  // past the policy's interval
    }
    let st = c.statistics
    #expect(
      c.capacity > 12 << 20 && c.capacity <= 16 << 20,
      "after \(rounds) rounds: \(c.capacity) bytes, \(st.ghostHits) ghost hits, \(st.inserts) inserts, \(st.evictions) evictions, \(st.promotions) promotions, \(st.hits) hits, \(st.entries) entries"
    )
    #expect(st.growths == 2 && st.growthHistory.count == 2)
    #expect(st.growthHistory.allSatisfy { ($0.ghostHitRate ?? 0) >= 0.05 })
    #expect(st.growthHistory.last?.capacity == c.capacity)
    #expect(st.ghostHits > 0 && st.inserts >= keys)
    // At its most capacity it stays there.
    #expect(c.growIfPolicyCalls() == nil)
    #expect(try c.verify().ok)
    try c.setGrowthPolicy(nil)
    #expect(c.growthPolicy == nil)
    #expect(throws: CacheError.self) { try c.setGrowthPolicy(GrowthPolicy(ghostHitRate: 2)) }
  }

  /// A grown partition count past the file's end (damage, or a hostile write: growth
  /// extends the file before it publishes a count) is ignored by reads and writes,
  /// reported by verify, and repaired.
  @Test func aDamagedGrownCountIsIgnoredAndRepaired() throws {
    let (c, path) = try SharedCache<String>.scratch("grow-damaged", options: Self.options(4 << 20))
    defer { TestFiles.cleanup(path) }
    for i in 0..<500 { try c.setObject(Self.value(i), forKey: Self.key(i)) }
    c.engine.memory.header(.grownCount).store(1000, .releasing)
    for i in 0..<500 { #expect(try c.object(forKey: Self.key(i)) == Self.value(i)) }
    #expect(try c.object(forKey: "absent") == nil)
    try c.setObject("after", forKey: "after")
    #expect(try c.object(forKey: "after") == "after")
    #expect(c.partitionCount == 2)
    let found = try c.verify()
    #expect(!found.ok && found.problems.contains { $0.contains("grown partition count 1000") })
    let fixed = try c.verify(repair: true)
    #expect(fixed.repaired >= 1)
    #expect(try c.verify().ok)
    #expect(c.engine.memory.header(.grownCount).load(.relaxed) == 0)
    #expect(try c.grow(toCapacity: 8 << 20) > 4 << 20)
    for i in 0..<500 { #expect(try c.object(forKey: Self.key(i)) == Self.value(i)) }
  }

  /// Policy words out of range (damage, or a hostile file) read as no policy: nothing
  /// converts them (an interval of 2^64 ms, a factor that overflows the capacity), and
  /// the cache goes on working.
  @Test func aDamagedGrowthPolicyReadsAsNone() throws {
    let (c, path) = try SharedCache<String>.scratch("grow-damaged-policy", options: Self.options(4 << 20))
    defer { TestFiles.cleanup(path) }
    for i in 0..<500 { try c.setObject(Self.value(i), forKey: Self.key(i)) }
    let h = c.engine.memory
    for (rate, factor, interval, inserts) in [
      (UInt64(1), UInt64.max, UInt64.max, UInt64(0)), (UInt64.max, 2000, 0, 1), (100_000, 1_000_000_000_000, 1000, 1),
    ] {
      h.header(.policyFactor).store(factor, .relaxed)
      h.header(.policyInterval).store(interval, .relaxed)
      h.header(.policyMinInserts).store(inserts, .relaxed)
      h.header(.lastGrowthMs).store(0, .relaxed)
      h.header(.policyRate).store(rate, .releasing)
      #expect(c.growthPolicy == nil)
      #expect(c.growIfPolicyCalls() == nil)
      #expect(c.statistics.growthPolicy == nil)
      for i in 500..<600 { try c.setObject(Self.value(i), forKey: Self.key(i)) }
    }
    #expect(c.capacity == 4 << 20)
    for i in 0..<600 { #expect(try c.object(forKey: Self.key(i)) == Self.value(i)) }
    // A policy stored at the bottom of its ranges reads back as stored.
    let lowest = GrowthPolicy(ghostHitRate: 0.001, factor: 1.1, minimumInterval: 0.1, minimumInserts: 1)
    try c.setGrowthPolicy(lowest)
    #expect(c.growthPolicy == lowest)
  }
}

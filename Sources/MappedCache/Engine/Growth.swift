import Foundation
import Glibc
import Synchronization
import SystemCalls

/// Growing a live cache (DESIGN.md, section 8): the file gains whole partitions at its
/// end, each filled from the one linear hashing splits (`IndexGeometry.address`: going
/// from `n` to `n + 1` partitions moves keys only from partition `n - 2^L` to `n`), while
/// every other process goes on reading and writing through the mapping it already has
/// (each handle maps the file's most capacity from the start, `MappedFile`).
///
/// The growth protocol, under the growth lock (an OFD lock on one byte: one grower per
/// file):
///  G1. extend the file to the new size, its blocks reserved (a full file system:
///      `diskFull`, the file cut back to its old size, nothing else changed);
///  G2. lay out the new partitions (no count names them yet: nobody else touches them);
///  G3. store the new size in the header (line 6);
///  G4. for each new partition `q`, from its source `s`: take `s`'s lock, then `q`'s;
///      mark `q` as filled from `s` (`splitSource`); publish the partition count `q + 1`
///      (release: a handle that sees it sees `q` laid out); copy each entry of `s` whose
///      key now routes to `q` into `q`, then clear it from `s`; clear the mark; release.
/// Writers of `s` and `q` wait for their step (the bound: one partition's entries moved);
/// writers of other partitions never wait. Readers never wait: a key of `q` that misses
/// there while `q` is marked is looked for in `s`, then in `q` again (`Reader.locate`).
/// A handle whose count is behind routes a key to its old partition; a hit there is
/// current (no writer stores a moved key there again: writers check their routing under
/// the lock), and a miss makes it adopt the new count and route again.
///
/// A grower killed at any step leaves a cache that works: before G4, unused bytes at the
/// end (the next growth reuses them); in G4, a marked partition whose locks a dead
/// process holds, with intent words set: the next writer of either partition takes the
/// lock over and finishes the step (`finishInterruptedSplit`) before its own change.
/// A copy that finished before the crash is found in `q` and not copied twice.
extension CacheEngine {
  /// The byte whose OFD lock is the growth lock (beside the witnesses' bytes).
  static let growthLockByte: Int64 = WriteLock.witnessBase - 1

  /// What one call of `grow` did.
  struct Growth {
    var fromCapacity: Int
    var toCapacity: Int
    var fromPartitions: Int
    var toPartitions: Int
    var movedEntries: Int
    /// The longest step (one partition split, both its locks held): the most any writer
    /// waited for this growth.
    var longestStepSeconds: Double = 0
  }

  /// Grows the file to `capacity` bytes (rounded down to whole partitions): G1-G4.
  /// `drivenBy`: the ghost-hit rate when `GrowthPolicy` asked for it (for the history).
  func grow(toCapacity capacity: Int, drivenBy rate: Double? = nil) throws -> Growth {
    guard lock != nil else { throw CacheError.readOnly(path: path) }
    try takeGrowthLock()
    defer { SystemCall.unlockByte(file.fd, at: Self.growthLockByte) }
    memory.refreshRouting()
    try finishPendingSplit()
    let count = memory.partitionCount
    let bytes = layout.partitionBytes
    let oldSize = memory.fileSize
    guard capacity <= layout.maxCapacity else {
      throw CacheError.invalidArgument(
        "capacity \(capacity) is past the most this file may grow to, \(layout.maxCapacity) bytes "
          + "(CacheOptions.maxCapacity, fixed when the file was created)")
    }
    guard capacity <= file.mapped else {
      throw CacheError.system(
        SystemError(errno: ENOMEM, operation: "grow \(path): this handle maps only \(file.mapped) bytes"))
    }
    guard capacity >= oldSize else {
      throw CacheError.invalidArgument(
        "capacity \(capacity) is smaller than the cache's \(oldSize) bytes: caches only grow")
    }
    let target = min((capacity - layout.partitionsOffset) / bytes, Format.maxPartitions)
    // Rounded down to whole partitions: a capacity that adds none changes nothing.
    guard target > count else {
      return Growth(
        fromCapacity: oldSize, toCapacity: oldSize, fromPartitions: count, toPartitions: count, movedEntries: 0)
    }
    let newSize = max(oldSize, layout.partitionsOffset + target * bytes)
    // G1.
    try extendFile(to: newSize)
    pauseForTest(at: "extended")
    // G2. Each new index starts at half its source's groups: about what it receives.
    for q in count..<target {
      let source = partition(IndexGeometry.splitSource(groups: q)).index.groups
      let groups = max(1, min(source / 2, layout.maxGroups))
      memory.formatGrownPartition(q, layout: layout, groups: groups)
    }
    pauseForTest(at: "formatted")
    // G3.
    memory.header(.grownSize).store(UInt64(newSize), .releasing)
    // G4.
    var moved = 0
    var longest: UInt64 = 0
    for q in count..<target {
      let t0 = SystemCall.monotonicNanoseconds()
      moved += try splitLocked(source: IndexGeometry.splitSource(groups: q), into: q)
      longest = max(longest, SystemCall.monotonicNanoseconds() &- t0)
    }
    recordGrowth(capacity: newSize, rate: rate)
    return Growth(
      fromCapacity: oldSize, toCapacity: newSize, fromPartitions: count, toPartitions: target, movedEntries: moved,
      longestStepSeconds: Double(longest) / 1e9)
  }

  /// Takes the growth lock, waiting up to ten seconds for another grower.
  func takeGrowthLock() throws {
    for _ in 0..<10_000 {
      // A conflict is another grower (wait for it); any other failure is the error.
      do { if try SystemCall.lockByteExclusive(file.fd, at: Self.growthLockByte) { return } } catch {
        throw CacheError.system(error)
      }
      SystemCall.sleep(microseconds: 1000)
    }
    throw CacheError.timedOut(operation: "grow \(path): another process has been growing it for ten seconds")
  }

  /// G1: the file extended to `size` bytes, its blocks reserved; on failure it is cut
  /// back to its size before (no process touches bytes past the partitions it has seen,
  /// and no count names the new ones yet).
  private func extendFile(to size: Int) throws {
    let before: Int
    do { before = Int(try SystemCall.fstat(file.fd).st_size) } catch { throw CacheError.system(error) }
    guard before < size else { return }
    do {
      try SystemCall.fallocate(file.fd, size: size)
      if Int(try SystemCall.fstat(file.fd).st_size) != size { try SystemCall.ftruncate(file.fd, size: size) }
    } catch {
      try? SystemCall.ftruncate(file.fd, size: before)
      throw CacheFileOpener.spaceError(error, path: path, bytes: size - before)
    }
  }

  /// `split` with both locks taken here, the source's first (the lock order).
  private func splitLocked(source s: Int, into q: Int) throws -> Int {
    let ps = lock!.acquireWord(s)
    defer { lock!.releaseWord(s) }
    let pq = lock!.acquireWord(q)
    defer { lock!.releaseWord(q) }
    return try split(source: ps, into: pq)
  }

  /// The partition growth is filling partition `q` from, when `q` is marked (a step of
  /// G4 under way, or left by a dead grower) and the mark is sound: `q` is the file's
  /// last partition and the mark names its linear-hashing source. Nil otherwise.
  func pendingSplitSource(of q: Int) -> Int? {
    let source = partition(q).memory.word(.splitSource).load(.acquiring)
    guard source != 0, let s = Int(exactly: source - 1), q == memory.partitionCount - 1,
      s == IndexGeometry.splitSource(groups: q)
    else { return nil }
    return s
  }

  /// Whether growth is moving entries into or out of partition `p`: it is being filled
  /// (marked), or it is the source of the last partition's pending split. Finishing such
  /// a step needs both partitions' locks (`finishInterruptedSplit`), so a read that took
  /// `p`'s word at R7 leaves it to writers.
  func splitInFlight(of p: Int) -> Bool {
    let last = memory.partitionCount - 1
    return partition(p).memory.word(.splitSource).load(.acquiring) != 0
      || (last > p && pendingSplitSource(of: last) == p)
  }

  /// G4 for one new partition, `pq`, from `ps`, both locked (also how a writer finishes
  /// a step a dead grower left, so every step here may find part of it done). Returns
  /// how many entries it moved.
  func split(source ps: borrowing LockedPartition, into pq: borrowing LockedPartition) throws -> Int {
    // Whatever a dead writer (or grower) left mid-change is repaired first.
    settle(ps)
    settle(pq)
    // Versions of moved keys stay ahead of every version `pq` hands out.
    let version = max(ps.counters.value(.versionCounter), pq.counters.value(.versionCounter))
    pq.counters.set(.versionCounter, version, pq.held)
    if pq.memory.word(.splitSource).load(.relaxed) == 0 {
      pq.memory.word(.splitSource).store(UInt64(ps.number + 1), .releasing)
      memory.header(.grownCount).store(UInt64(pq.number + 1), .releasing)
    }
    memory.refreshRouting()
    pauseForTest(at: "published")
    let moved = try moveEntries(from: ps, to: pq, count: pq.number + 1)
    pq.memory.word(.splitSource).store(0, .releasing)
    ps.memory.word(.intent).store(0, .relaxed)
    pq.memory.word(.intent).store(0, .relaxed)
    return moved
  }

  /// Repairs `part` if a writer died changing it or its words are out of range, then
  /// sets its intent word (as `withWriteLock` does).
  private func settle(_ part: borrowing LockedPartition) {
    let intent = part.memory.word(.intent)
    if part.needsRepair() { repair(part) }
    intent.store(Format.intentChange, .relaxed)
  }

  /// Copies each entry of `from` whose key routes to `to` under `count` partitions into
  /// `to` (`Writer.copyEntry`), then clears it from `from`: in that order, so that a
  /// reader that misses in `from` finds the key in `to`.
  private func moveEntries(
    from: borrowing LockedPartition, to: borrowing LockedPartition, count: Int
  ) throws -> Int {
    var moved = 0
    let groups = from.index.groups
    for g in 0..<groups {
      for b in 0..<Format.bucketsPerGroup {
        for slot in 0..<Format.slotsPerBucket {
          let at = BucketIndex.Slot(place: Place(group: g, bucket: b), slot: slot)
          guard let e = from.index.entry(at: at) else { continue }
          let hash = from.memory.keyHash(record: e.offset, e.header)
          guard IndexGeometry.partition(hash, count: count) == to.number else { continue }
          _ = try writer.copyEntry(e, hash: hash, from: from, to: to)
          from.policy.discard(e, counting: .grownOut, from.held)
          moved += 1
          if moved == 1 { pauseForTest(at: "moving") }
        }
      }
    }
    return moved
  }

  /// Finishes a step of growth that a dead grower left (the last partition still marked),
  /// under the growth lock.
  private func finishPendingSplit() throws {
    let q = memory.partitionCount - 1
    guard q > 0, let s = pendingSplitSource(of: q) else { return }
    _ = try splitLocked(source: s, into: q)
  }

  /// Called by a writer that holds partition `p`'s lock and found its intent word set:
  /// if a dead grower left `p` in a step of growth (as its new partition, or as the
  /// source of the last one), finishes that step. The source's lock comes first, so a
  /// writer holding the new partition only tries it: true means it could not, and the
  /// writer lets go of `p` and tries again.
  func finishInterruptedSplit(_ part: borrowing LockedPartition) throws -> Bool {
    guard let lock else { return false }
    let p = part.number
    memory.refreshRouting()
    let mark = part.memory.word(.splitSource)
    if mark.load(.acquiring) != 0 {
      // Only the last partition can be in a split, from its linear-hashing source.
      guard let s = pendingSplitSource(of: p) else {
        mark.store(0, .relaxed)  // damage: nothing to finish
        return false
      }
      guard let ps = lock.tryAcquireWord(s) else { return true }
      defer { lock.releaseWord(s) }
      _ = try split(source: ps, into: part)
      return false
    }
    let last = memory.partitionCount - 1
    guard last > p, pendingSplitSource(of: last) == p else { return false }
    let pq = lock.acquireWord(last)
    defer { lock.releaseWord(last) }
    _ = try split(source: part, into: pq)
    return false
  }

  /// Test hook: a process whose environment has `MC_TEST_GROW_PAUSE=STEP` stops itself
  /// (SIGSTOP) when its growth reaches STEP, so that a test can SIGKILL it there:
  /// `extended` (G1 done), `formatted` (G2), `published` (G4: the count names the new
  /// partition, nothing moved), `moving` (one entry moved).
  private func pauseForTest(at step: String) {
    guard SystemCall.environment("MC_TEST_GROW_PAUSE") == step else { return }
    SystemCall.stopSelf()
  }
}

// MARK: Growth by policy

/// Called by a writer (under a partition's lock) on each ghost hit: checks, at most
/// every `checkNanoseconds` per handle, whether the file's growth policy calls for
/// growth now (`GrowthDue`: a few loads per partition), and if it does, grows the file
/// on a thread of its own through a handle of its own, so that no write waits for it and
/// no handle's life depends on it (the writer's handle may close meanwhile).
final class GrowthTrigger: @unchecked Sendable {
  private let path: String
  private let device: UInt64
  private let inode: UInt64
  private let limits: GrowthDue.Limits
  private let lastCheck = Atomic<UInt64>(0)
  static let checkNanoseconds: UInt64 = 250_000_000

  init(file: MappedFile, layout: Layout) {
    path = file.path
    device = file.device
    inode = file.inode
    limits = GrowthDue.Limits(layout: layout, mapped: file.mapped)
  }

  @inline(never)
  func ghostHit(_ memory: MappedMemory) {
    guard memory.header(.policyRate).load(.relaxed) != 0 else { return }
    let now = SystemCall.monotonicNanoseconds()
    let last = lastCheck.load(ordering: .relaxed)
    guard now &- last >= Self.checkNanoseconds,
      lastCheck.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged,
      GrowthDue.check(memory, limits) != nil
    else { return }
    let (path, device, inode) = (path, device, inode)
    // A thread of its own, not Dispatch: a process may have forked since it opened the
    // file (a Python worker), and libdispatch refuses use in a child of fork.
    Thread.detachNewThread {
      guard let file = try? CacheFile(path: path, policy: OpenPolicy()),
        file.engine.file.device == device && file.engine.file.inode == inode
      else { return }
      file.engine.considerGrowth()
    }
  }
}

/// Whether a file's growth policy calls for growth now, from its words alone.
enum GrowthDue {
  /// What the check needs of the layout.
  struct Limits {
    var maxCapacity: Int
    var partitionBytes: Int
    var mapped: Int

    init(layout: Layout, mapped: Int) {
      maxCapacity = layout.maxCapacity
      partitionBytes = layout.partitionBytes
      self.mapped = mapped
    }
  }

  /// The policy, the capacity to grow to and the ghost-hit rate driving it, when the
  /// policy is on, its interval has passed, enough new keys were stored since the last
  /// growth, their ghost-hit rate reaches the policy's, and a partition's worth of room
  /// is left below the most capacity; else nil. Racy loads: a hint, checked again by the
  /// grower under its claim.
  static func check(_ memory: MappedMemory, _ l: Limits) -> (target: Int, rate: Double, last: UInt64)? {
    guard let policy = memory.growthPolicy else { return nil }
    let now = SystemCall.wallClockMilliseconds()
    let last = memory.header(.lastGrowthMs).load(.relaxed)
    guard now &- min(now, last) >= UInt64(policy.minimumInterval * 1000) else { return nil }
    let (rate, inserts) = memory.ghostHitRateSinceGrowth()
    guard inserts >= UInt64(policy.minimumInserts), rate >= policy.ghostHitRate else { return nil }
    memory.refreshRouting()
    let capacity = memory.fileSize
    let target = min(l.maxCapacity, l.mapped, Int(Double(capacity) * policy.factor))
    guard target >= capacity + l.partitionBytes else { return nil }
    return (target, rate, last)
  }
}

extension MappedMemory {
  /// The growth policy stored in the file, nil for none. Words out of the policy's
  /// ranges (damage, or a hostile file) read as none: every use of the policy (the
  /// capacity it multiplies, the interval it converts) may then assume its ranges.
  var growthPolicy: GrowthPolicy? {
    let rate = header(.policyRate).load(.acquiring)
    guard rate != 0 else { return nil }
    let policy = GrowthPolicy(
      ghostHitRate: Double(rate) / 1e6, factor: Double(header(.policyFactor).load(.relaxed)) / 1000,
      minimumInterval: Double(header(.policyInterval).load(.relaxed)) / 1000,
      minimumInserts: PartitionCounters.clamp(header(.policyMinInserts).load(.relaxed)))
    return (try? policy.validate()) != nil ? policy : nil
  }

  /// The file's ghost hits and inserts, summed over the partitions this handle routes
  /// by (relaxed).
  func ghostHitsAndInserts() -> (ghostHits: UInt64, inserts: UInt64) {
    var g: UInt64 = 0
    var n: UInt64 = 0
    for p in 0..<partitionCount {
      let part = partition(p)
      g &+= part.word(.ghostHits).load(.relaxed)
      n &+= part.word(.inserts).load(.relaxed)
    }
    return (g, n)
  }

  /// The ghost-hit rate since the last growth, and the inserts it is over.
  func ghostHitRateSinceGrowth() -> (rate: Double, inserts: UInt64) {
    let (g, n) = ghostHitsAndInserts()
    let dg = g &- min(g, header(.ghostHitsAtGrowth).load(.relaxed))
    let dn = n &- min(n, header(.insertsAtGrowth).load(.relaxed))
    return (dn == 0 ? 0 : Double(dg) / Double(dn), dn)
  }
}

extension CacheEngine {
  /// The growth policy stored in the file, nil for none.
  var growthPolicy: GrowthPolicy? { memory.growthPolicy }

  /// Stores `policy` in the file (nil: none). The rate is stored last: a reader that
  /// sees it nonzero sees the rest.
  func setGrowthPolicy(_ policy: GrowthPolicy?) throws {
    guard lock != nil else { throw CacheError.readOnly(path: path) }
    guard let p = policy else {
      memory.header(.policyRate).store(0, .releasing)
      return
    }
    try p.validate()
    // Rounded, not truncated: a policy at the bottom of a range reads back inside it.
    memory.header(.policyFactor).store(UInt64((p.factor * 1000).rounded()), .relaxed)
    memory.header(.policyInterval).store(UInt64((p.minimumInterval * 1000).rounded()), .relaxed)
    memory.header(.policyMinInserts).store(UInt64(p.minimumInserts), .relaxed)
    memory.header(.policyRate).store(UInt64((p.ghostHitRate * 1e6).rounded()), .releasing)
  }

  /// Grows the file if its policy calls for it now (see `GrowthPolicy`): on a thread
  /// of its own, never under a lock. Returns the growth, or nil.
  @discardableResult
  func considerGrowth() -> Growth? {
    guard lock != nil else { return nil }
    memory.refreshRouting()
    guard let due = GrowthDue.check(memory, GrowthDue.Limits(layout: layout, mapped: file.mapped)) else { return nil }
    // Never past the file system's free space.
    guard let free = SystemCall.freeBytes(file.fd), free >= due.target - currentFileSize else { return nil }
    // One process claims this growth.
    guard
      memory.header(.lastGrowthMs).compareExchange(
        expected: due.last, desired: SystemCall.wallClockMilliseconds(), .relaxed)
    else { return nil }
    return try? grow(toCapacity: due.target, drivenBy: due.rate)
  }

  /// Records a finished growth (under the growth lock): the count, the history, and the
  /// ghost hits and inserts the policy's next rate starts from.
  func recordGrowth(capacity: Int, rate: Double?) {
    let (g, n) = memory.ghostHitsAndInserts()
    memory.header(.ghostHitsAtGrowth).store(g, .relaxed)
    memory.header(.insertsAtGrowth).store(n, .relaxed)
    memory.header(.lastGrowthMs).store(SystemCall.wallClockMilliseconds(), .relaxed)
    let count = memory.header(.growths).load(.relaxed)
    let slots = Format.HeaderOffset.growthHistoryCount
    // Oldest first: shift once the history is full.
    let i: Int
    if count >= UInt64(slots) {
      for j in 1..<slots {
        for f in 0..<3 {
          memory.header(.growthHistory(j - 1, f)).store(memory.header(.growthHistory(j, f)).load(.relaxed), .relaxed)
        }
      }
      i = slots - 1
    } else {
      i = Int(count)
    }
    memory.header(.growthHistory(i, 0)).store(SystemCall.wallClockMilliseconds(), .relaxed)
    memory.header(.growthHistory(i, 1)).store(UInt64(capacity), .relaxed)
    memory.header(.growthHistory(i, 2)).store(rate.map { max(1, UInt64($0 * 1e6)) } ?? 0, .relaxed)
    memory.header(.growths).store(count &+ 1, .relaxed)
  }

  /// The growth history stored in the file (racy reads: for statistics).
  func growthHistory() -> (count: Int, records: [GrowthRecord]) {
    let count = PartitionCounters.clamp(memory.header(.growths).load(.relaxed))
    let n = min(count, Format.HeaderOffset.growthHistoryCount)
    let records = (0..<n).map { i -> GrowthRecord in
      let rate = memory.header(.growthHistory(i, 2)).load(.relaxed)
      return GrowthRecord(
        date: Date(timeIntervalSince1970: Double(memory.header(.growthHistory(i, 0)).load(.relaxed)) / 1000),
        capacity: PartitionCounters.clamp(memory.header(.growthHistory(i, 1)).load(.relaxed)),
        ghostHitRate: rate == 0 ? nil : Double(rate) / 1e6)
    }
    return (count, records)
  }
}

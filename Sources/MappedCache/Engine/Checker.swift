/// Checking and repair of one partition. `inspect` checks every invariant without
/// changing anything (lock-free, or under the lock for an exact answer); `repair` does
/// the same checks under the lock and fixes what they find by dropping what cannot be
/// trusted (entries are a cache's to lose; the file must stay usable). Both run the same
/// steps, in this order, each named for what it checks:
///
///  0. `checkMoves`: the move sequence even (readers' misses wait while it is odd);
///     `checkGeometry`: the group count in range, the main log's limit between its base
///     and the index (repair resets an index or a log it cannot trust);
///  1. `checkLogs`: each log's positions, and its chain of records and wrap markers from
///     tail to head (repair forgets a broken log: its slots then fail step 2);
///  2. `checkBuckets`: each bucket's sequence (an odd one, left by a dead writer, has its
///     entries checked and is made even), each slot's entry (its record a link of its
///     log's chain, its key hashing to the slot's tag with this bucket among its
///     places and this partition its route (or, while growth fills the last partition
///     from this one, that partition's), its value matching its checksum with
///     `checksums`, no other slot naming the record or the key, not the slot a dead
///     writer was rewriting), dropping those that fail;
///     `checkFreeLists`: the main log's free lists against its chain (`FreeLists`;
///     repair rebuilds them from the free records' flags whatever it found);
///  3. `checkCounts`: the partition's entry and byte counts against the slots (repair
///     stores the true ones).
/// A repair then advances the geometry's generation: readers of the partition read again.
struct Checker {
  let part: Partition
  let layout: Layout
  /// Where this partition's keys may route (`CacheEngine.routing(of:)`).
  let routing: Routing

  /// The partitions an entry of this one may route to: itself, and during a step of
  /// growth from it, the new partition (`alsoTo`, else -1), under `count` partitions.
  struct Routing {
    var count: Int
    var alsoTo: Int
  }

  /// Problems kept in a report: a damaged file could otherwise list millions.
  static let maxProblems = 100

  var memory: PartitionMemory { part.memory }
  var index: BucketIndex { part.index }
  var logs: RecordLogs { part.logs }
  var counters: PartitionCounters { part.counters }

  /// Checks without changing anything.
  func inspect(checksums: Bool) -> VerifyReport {
    var r = VerifyReport()
    checkMoves(&r)
    guard checkGeometry(&r) else { return r }
    let chains = checkLogs(&r)
    _ = checkBuckets(&r, chains: chains.starts, checksums: checksums)
    checkFreeLists(&r, chain: chains.starts[.main])
    checkCounts(&r)
    return r
  }

  /// Checks and repairs. The intent word is left as it is: the caller resets it after
  /// the repair, so a repair killed midway leaves it to the next one.
  func repair(checksums: Bool, _ held: borrowing WriteLock.Held) -> VerifyReport {
    var r = VerifyReport()
    // 0.
    if !checkGeometry(&r) {
      resetIndex(held)
      r.repaired += 1
    }
    // 1.
    var chains = checkLogs(&r)
    for id in chains.broken {
      logs.reset(id, held)
      chains.starts[id] = [:]
      r.repaired += 1
    }
    // 2.
    let buckets = checkBuckets(&r, chains: chains.starts, checksums: checksums)
    for at in buckets.drop {
      if index.isMidWrite(at.place) { index.clearInOddBucket(at, held) } else { index.clear(at, held) }
      r.repaired += 1
    }
    for place in buckets.odd {
      index.finishSequence(place, held)
      r.repaired += 1
    }
    // The free lists, from the flags of main's chain (a dead writer may have left a
    // list half linked: they are rebuilt whatever was found).
    if checkFreeLists(&r, chain: chains.starts[.main]) { r.repaired += 1 }
    part.freeLists.rebuild(from: chains.starts[.main] ?? [:], held)
    // A move sequence left odd (a dead writer's displacement, now repaired) turns even.
    if checkMoves(&r) {
      memory.word(.moves).add(1, .releasing)
      r.repaired += 1
    }
    // 3.
    if checkCounts(&r) {
      counters.set(.entries, UInt64(r.entries), held)
      counters.set(.liveBytes, UInt64(r.liveBytes), held)
      r.repaired += 1
    }
    part.resizer.publish(index.geometryRelaxed().advanced, held)
    return r
  }

  private func problem(_ r: inout VerifyReport, _ s: String) {
    if r.problems.count < Self.maxProblems {
      r.problems.append(s)
    } else if r.problems.count == Self.maxProblems {
      r.problems.append("…")
    }
  }

  /// Whether the move sequence is odd. Under the lock nobody is moving entries, so odd
  /// means a dead writer's displacement (or damage): every reader's miss would wait on it.
  /// Without the lock a displacement may be under way; `verify` then checks again under it.
  @discardableResult
  private func checkMoves(_ r: inout VerifyReport) -> Bool {
    guard memory.word(.moves).load(.relaxed) & 1 != 0 else { return false }
    problem(&r, "the move sequence is odd (a displacement left unfinished)")
    return true
  }

  // MARK: 0. Geometry

  /// Whether the group count and the main log's limits can be trusted.
  private func checkGeometry(_ r: inout VerifyReport) -> Bool {
    let groups = index.geometryRelaxed().groups
    guard memory.isValidGroupCount(groups) else {
      problem(&r, "group count \(groups) out of range")
      return false
    }
    let low = layout.indexLow(groups: groups)
    let limit = logs.mainLimit
    guard limit > layout.mainBase + layout.maxRecord, limit <= low else {
      problem(&r, "main log limit \(limit) outside \(layout.mainBase) ..< \(low)")
      return false
    }
    let pending = logs.pendingLimit
    if pending != 0 && (pending <= layout.mainBase || pending >= limit) {
      problem(&r, "pending limit \(pending) outside the main log")
      return false
    }
    return true
  }

  /// Repair of a geometry that cannot be trusted: the index as big as the space above
  /// the main log allows (or its size at creation), every group zeroed, both logs
  /// forgotten. Everything in the partition is lost; the partition is usable again.
  private func resetIndex(_ held: borrowing WriteLock.Held) {
    let limit = logs.mainLimit
    let plausible = limit > layout.mainBase && limit < layout.partitionBytes
    let fromLimit = plausible ? (layout.partitionBytes - limit) / Format.groupBytes : 0
    let groups = max(1, min(layout.maxGroups, fromLimit > 0 ? fromLimit : max(1, layout.maxGroups / 8)))
    for g in 0..<groups { memory.zeroGroup(g, held) }
    part.resizer.publish(Geometry(generation: index.geometryRelaxed().generation &+ 1, groups: groups), held)
    logs.clearPendingLimit(held)
    logs.resetMainLimit(to: layout.indexLow(groups: groups), held)
    logs.reset(.small, held)
    logs.reset(.main, held)
    counters.set(.entries, 0, held)
    counters.set(.liveBytes, 0, held)
  }

  // MARK: 1. Logs

  /// Each log's record starts, walking from its tail to its head, and the logs whose
  /// positions or chain are broken.
  private func checkLogs(_ r: inout VerifyReport) -> (starts: [LogID: [Int: Int]], broken: [LogID]) {
    var starts: [LogID: [Int: Int]] = [:]
    var broken: [LogID] = []
    for id in LogID.allCases {
      let s = logs.state(id)
      guard s.isSane else {
        problem(
          &r,
          "\(id) log: head \(s.head.offset) (lap \(s.head.lap)) / tail \(s.tail.offset) (lap \(s.tail.lap)) out of range"
        )
        broken.append(id)
        continue
      }
      if let chain = walk(id, s) {
        starts[id] = chain
        r.recordsChecked += chain.count
        r.logBytes += chain.values.reduce(0, +)
      } else {
        problem(&r, "\(id) log: its chain of records is broken")
        broken.append(id)
      }
    }
    return (starts, broken)
  }

  /// The records of log `id` from tail to head (each one's start and size), or nil when
  /// a byte in between is neither a record nor (at the end of the tail's lap) a wrap
  /// marker.
  private func walk(_ id: LogID, _ s: LogState) -> [Int: Int]? {
    var starts: [Int: Int] = [:]
    var at = s.tail.offset
    var inTailLap = s.wrapped
    let maxSteps = layout.partitionBytes
    for _ in 0..<maxSteps {
      let end = inTailLap ? (id == .main ? s.lastWrap : s.limit) : s.head.offset
      if at == end && !inTailLap { return starts }
      if inTailLap && (at == end || memory.isWrapMarker(at: at)) {
        if id == .main && at != s.lastWrap { return nil }
        inTailLap = false
        at = s.base
        continue
      }
      guard at < end, let h = memory.record(at: at), h.size <= end - at else { return nil }
      starts[at] = h.size
      at += h.size
    }
    return nil
  }

  // MARK: 2. Buckets

  /// Every slot. Counts the entries that pass into `r`; returns the slots to drop and
  /// the odd buckets to make even.
  private func checkBuckets(
    _ r: inout VerifyReport, chains: [LogID: [Int: Int]], checksums: Bool
  ) -> (drop: [BucketIndex.Slot], odd: [Place]) {
    var drop: [BucketIndex.Slot] = []
    var odd: [Place] = []
    var seenOffsets = Set<Int>()
    var seenKeys: [UInt64: Int] = [:]
    var second = 0
    let groups = index.groups
    let intent = counters.value(.intent)
    let rewriting =
      intent >= Format.intentRewriteBase ? Int(truncatingIfNeeded: intent &- Format.intentRewriteBase) : -1
    for g in 0..<groups {
      for b in 0..<Format.bucketsPerGroup {
        let place = Place(group: g, bucket: b)
        if index.isMidWrite(place) {
          problem(&r, "bucket \(place.number): left mid-write (odd sequence)")
          odd.append(place)
        }
        for slot in 0..<Format.slotsPerBucket {
          let at = BucketIndex.Slot(place: place, slot: slot)
          r.slotsChecked += 1
          guard memory.tag(place, slot) != 0 else { continue }
          switch check(
            at, Pass(groups: groups, chains: chains, rewriting: rewriting, checksums: checksums),
            seenOffsets: seenOffsets, seenKeys: seenKeys)
          {
          case .success(let (e, hash, inSecond)):
            seenOffsets.insert(e.offset)
            seenKeys[hash] = e.offset
            r.entries += 1
            r.liveBytes += e.header.liveBytes
            if inSecond { second += 1 }
          case .failure(let why):
            problem(&r, "bucket \(place.number) slot \(slot): \(why.reason)")
            drop.append(at)
          }
        }
      }
    }
    for chain in chains.values {
      for (start, size) in chain where !seenOffsets.contains(start) { r.deadBytes += size }
    }
    r.maxProbe = second > 0 ? 1 : 0
    r.meanProbe = r.entries == 0 ? 0 : Double(second) / Double(r.entries)
    return (drop, odd)
  }

  /// What `checkBuckets` checks every slot against: the group count, the logs' record
  /// chains, the slot a dead writer was rewriting (-1: none), and whether values'
  /// checksums are checked.
  private struct Pass {
    let groups: Int
    let chains: [LogID: [Int: Int]]
    let rewriting: Int
    let checksums: Bool
  }

  /// Whether slot `at`'s entry is whole and its own: the entry, its key's hash and
  /// whether it sits in its second place, or why not.
  private func check(
    _ at: BucketIndex.Slot, _ pass: Pass, seenOffsets: Set<Int>, seenKeys: [UInt64: Int]
  ) -> Result<(BucketIndex.Entry, UInt64, Bool), LayoutProblem> {
    let (groups, chains, rewriting, checksums) = (pass.groups, pass.chains, pass.rewriting, pass.checksums)
    if Writer.slotNumber(at) == rewriting { return .failure(LayoutProblem("left mid-rewrite by a dead writer")) }
    let word = memory.entryWord(at.place, at.slot).load(.relaxed)
    let offset = Int(truncatingIfNeeded: word & Format.offsetMask)
    guard let h = memory.record(at: offset, free: false) else {
      return .failure(LayoutProblem("record offset \(offset) is not a valid entry"))
    }
    guard chains[logs.id(containing: offset)]?[offset] != nil else {
      return .failure(LayoutProblem("record at \(offset) is not in its log's live chain"))
    }
    let e = BucketIndex.Entry(at: at, word: word, header: h)
    let hash = memory.keyHash(record: offset, h)
    let pl = Placement(hash: hash, groups: groups)
    guard memory.tag(at.place, at.slot) == pl.tag, pl.contains(at.place) else {
      return .failure(LayoutProblem("key does not belong in this slot"))
    }
    let route = IndexGeometry.partition(hash, count: routing.count)
    guard route == part.number || route == routing.alsoTo else {
      return .failure(LayoutProblem("key routes to partition \(route), not here"))
    }
    if seenOffsets.contains(offset) { return .failure(LayoutProblem("record shared with an earlier slot")) }
    if let other = seenKeys[hash], let oh = memory.record(at: other), memory.sameKey(offset, h, other, oh) {
      return .failure(LayoutProblem("key stored in an earlier slot too"))
    }
    if checksums && memory.valueChecksum(record: offset, h, hash: hash) != h.sum {
      return .failure(LayoutProblem("value checksum mismatch"))
    }
    return .success((e, hash, pl.first != at.place))
  }

  /// Whether the free lists break their invariants (`FreeLists`) against main's chain
  /// (nil: broken, forgotten). Reported as problems only when no writer died mid-change
  /// (its lists are repaired, not damaged). Adds the bytes they hold to `r`.
  @discardableResult
  private func checkFreeLists(_ r: inout VerifyReport, chain: [Int: Int]?) -> Bool {
    let found = part.freeLists.inspect(chain: chain ?? [:])
    r.freeBytes += found.bytes
    if counters.value(.intent) == 0 { for p in found.problems { problem(&r, p) } }
    return !found.problems.isEmpty
  }

  // MARK: 3. Counts

  /// Whether the partition's counts disagree with what step 2 counted. Counts lag the
  /// slots by one write when a writer died between the two (the intent word is then
  /// set), which is not reported as a problem.
  @discardableResult
  private func checkCounts(_ r: inout VerifyReport) -> Bool {
    let entries = counters.value(.entries)
    let live = counters.value(.liveBytes)
    guard counters.count(.entries) != r.entries || counters.count(.liveBytes) != r.liveBytes else { return false }
    if counters.value(.intent) == 0 {
      problem(&r, "counts say \(entries) entries / \(live) bytes, slots hold \(r.entries) / \(r.liveBytes)")
    }
    return true
  }
}

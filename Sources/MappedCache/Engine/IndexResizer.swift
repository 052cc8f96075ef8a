import Synchronization

/// Grows and shrinks a partition's index inside the partition, one group (320 bytes) at a
/// time, trading space with the main log, so that the index follows the entries whatever
/// their sizes (DESIGN.md, section 2). Groups are counted by linear hashing
/// (`IndexGeometry.address`): going from `n` to `n + 1` groups splits group `n − 2^L`
/// alone, and going back merges group `n − 1` into the places its entries have under
/// `n − 1` groups.
///
/// Split (`split`), each step named as in DESIGN.md:
///  S1. the 320 bytes below the index must hold no live record: lower the main log's
///      limit to them when they are free, else ask the log's head to wrap below them
///      (the pending limit; the tail frees them within a lap) and stop;
///  S2. zero group `n`, which no reader reaches yet;
///  S3. copy into group `n` every entry of group `s` whose places under `n + 1` groups
///      no longer include its bucket;
///  S4. publish the geometry `(generation + 1, n + 1)` (release store, release fence);
///  S5. clear the copied entries from group `s`; place anew (`BucketIndex.allocate`,
///      inside the move sequence's bracket) any that found no room in group `n`.
/// Merge (`merge`): M1 plan a place under `n − 1` groups for every entry of group
/// `n − 1` (nothing changes if one has none); M2 copy them there; M3 publish
/// `(generation + 1, n − 1)` (release store, release fence); M4 give the group's bytes
/// back to the main log.
///
/// Readers compare the geometry word before and after each read (R1, R5), so an entry
/// found in a group while it was split or merged is read again; the release fence after
/// each publication orders every later store into index bytes a reader of the old word
/// may read (a merged group given to the log, a group zeroed for a split) after it.
/// A writer killed at any step leaves duplicates (S3, M2: entries whose places include
/// both copies, or a copy no reader reaches), or entries in places no longer theirs
/// (S5), which repair clears (`Checker.checkBuckets`), or free space beside the index
/// (S1), which the next split takes.
struct IndexResizer {
  let logs: RecordLogs
  /// The file, for the counters.
  private let file: MappedMemory
  /// The index and the counters of the logs' partition, made on use from their view.
  /// Each stored copy of the view lengthened every write that makes a resizer or a
  /// policy, and a value past 128 bytes is copied by a call to `memcpy`.
  @inline(__always) var index: BucketIndex { BucketIndex(part: logs.part) }
  @inline(__always) var counters: PartitionCounters { PartitionCounters(part: logs.part, memory: file) }
  // Read from the limits when used, not stored: a write makes a resizer (and the eviction
  // policy holding one) several times, and almost never splits or merges.
  var maxGroups: Int { index.part.limits.maxGroups }
  var partitionBytes: Int { index.part.limits.bytes }
  var mainFloorEnd: Int { index.part.limits.mainFloorEnd }

  @inline(__always)
  init(logs: RecordLogs, file: MappedMemory) {
    self.logs = logs
    self.file = file
  }

  /// The index grows when a new entry would pass this share of its slots.
  static let growAt = 0.95
  /// It gives a group back when, without it, it would still be under this share (a band
  /// from here to `growAt` keeps it from splitting and merging back and forth).
  static let shrinkBelow = 0.75
  /// Groups the main log's head is asked to free at once when the space below the index
  /// holds records: the larger of this and a sixteenth of the index.
  static let pendingGroups = 8

  var part: PartitionMemory { index.part }

  /// The first byte of an index of `groups` groups.
  @inline(__always) func indexLow(groups: Int) -> Int { partitionBytes - groups * Format.groupBytes }

  /// Grows the index by one group when one more entry would pass `growAt` of its slots
  /// and the space is free. Returns whether it grew.
  @discardableResult
  func growIfFull(entries: Int, _ held: borrowing WriteLock.Held) -> Bool {
    let n = index.groups
    guard Double(entries &+ 1) > Self.growAt * Double(n * Format.slotsPerGroup) else { return false }
    return split(held)
  }

  /// Gives one group back when the index would still be under `shrinkBelow` without it.
  /// Returns whether it shrank.
  @discardableResult
  func shrinkIfSparse(entries: Int, _ held: borrowing WriteLock.Held) -> Bool {
    let n = index.groups
    guard n > 1, Double(entries) < Self.shrinkBelow * Double((n - 1) * Format.slotsPerGroup) else { return false }
    return merge(held)
  }

  // MARK: Split

  /// Where a test stops a split or a merge, as a writer killed there would (a test hook:
  /// nil in every real call).
  enum Stop {
    /// S1 done: the space below the index freed.
    case afterRoom
    /// S2 done: the new group zeroed.
    case afterZeroing
    /// S3 or M2 begun: one entry copied.
    case midCopy
    /// S3 or M2 done.
    case afterCopy
    /// S4 or M3 done: the geometry published.
    case afterPublish
    /// S5 begun: one copied entry cleared from its old group.
    case midClear
  }

  /// S1-S5: one more group. False when the index is at its largest, or its space is not
  /// yet free of records (the log's head is then asked to free it).
  func split(_ held: borrowing WriteLock.Held, stopAt stop: Stop? = nil) -> Bool {
    let geometry = index.geometryRelaxed()
    let n = geometry.groups
    // S1.
    guard n < maxGroups, makeRoomBelowIndex(groups: n + 1, held) else { return false }
    if stop == .afterRoom { return true }
    // S2.
    part.zeroGroup(n, held)
    if stop == .afterZeroing { return true }
    // S3.
    let s = IndexGeometry.splitSource(groups: n)
    let (moved, homeless) = copyMovers(from: s, to: n, held, stopAt: stop)
    if stop == .midCopy || stop == .afterCopy { return true }
    // S4.
    publish(geometry.with(groups: n + 1), held)
    if stop == .afterPublish { return true }
    // S5.
    clearMovers(from: s, groups: n + 1, moved: moved, homeless: homeless, held, stopAt: stop)
    counters.bump(.splits, held)
    return true
  }

  /// S3: copies into group `n` every entry of group `s` whose places under `n + 1`
  /// groups no longer include its bucket. Bucket `b` of `s` sends its movers to bucket `b`
  /// of `n` (or, for an entry whose two places were both in `s`, to its other place
  /// there). Returns the slots of `s` (bits 0..39) copied, and those that found no room
  /// in `n` (placed anew at S5).
  private func copyMovers(
    from s: Int, to n: Int, _ held: borrowing WriteLock.Held, stopAt stop: Stop?
  ) -> (moved: UInt64, homeless: UInt64) {
    var moved: UInt64 = 0
    var homeless: UInt64 = 0
    for b in 0..<Format.bucketsPerGroup {
      for slot in 0..<Format.slotsPerBucket {
        let at = BucketIndex.Slot(place: Place(group: s, bucket: b), slot: slot)
        guard let e = index.entry(at: at) else { continue }
        let pl = index.placement(of: e, groups: n + 1).placement
        if pl.contains(at.place) { continue }
        let bit: UInt64 = 1 << UInt64(b * Format.slotsPerBucket + slot)
        guard let target = roomInNewGroup(pl, group: n) else {
          homeless |= bit
          continue
        }
        index.publish(target, offset: e.offset, hits: e.hits, tag: pl.tag, held)
        moved |= bit
        if stop == .midCopy { return (moved, homeless) }
      }
    }
    return (moved, homeless)
  }

  /// S5: clears the copied entries from group `s`, and places anew under `groups` groups
  /// any that found no room in the new group (a displacement may free a slot), inside the
  /// move sequence's bracket: a reader that misses one meanwhile probes again. One that
  /// finds no room anywhere is dropped (an eviction).
  private func clearMovers(
    from s: Int, groups: Int, moved: UInt64, homeless: UInt64, _ held: borrowing WriteLock.Held, stopAt stop: Stop?
  ) {
    index.moving(held) {
      for b in 0..<Format.bucketsPerGroup {
        for slot in 0..<Format.slotsPerBucket {
          let bit: UInt64 = 1 << UInt64(b * Format.slotsPerBucket + slot)
          guard (moved | homeless) & bit != 0 else { continue }
          let at = BucketIndex.Slot(place: Place(group: s, bucket: b), slot: slot)
          let e = homeless & bit != 0 ? index.entry(at: at) : nil
          index.clear(at, held)
          if stop == .midClear { return }
          guard let e else { continue }
          let pl = index.placement(of: e, groups: groups).placement
          if let target = index.allocate(pl, held) {
            index.publish(target, offset: e.offset, hits: e.hits, tag: pl.tag, held)
          } else {
            counters.removeEntry(liveBytes: e.header.liveBytes, held)
            counters.bump(.evictions, held)
          }
        }
      }
    }
  }

  /// A free slot in whichever of `pl`'s places is in group `g`.
  private func roomInNewGroup(_ pl: Placement, group g: Int) -> BucketIndex.Slot? {
    if let s = room(in: pl.first, group: g) { return s }
    return pl.second == pl.first ? nil : room(in: pl.second, group: g)
  }

  private func room(in place: Place, group g: Int) -> BucketIndex.Slot? {
    guard place.group == g else { return nil }
    let free = index.emptySlots(place)
    return free == 0 ? nil : BucketIndex.Slot(place: place, slot: free.trailingZeroBitCount)
  }

  /// S1: makes the bytes of an index of `groups` groups free of the main log, lowering
  /// its limit when no live record lies there; else sets the pending limit a few groups
  /// lower (the head wraps there from now on) and answers false.
  private func makeRoomBelowIndex(groups: Int, _ held: borrowing WriteLock.Held) -> Bool {
    let low = indexLow(groups: groups)
    guard low >= mainFloorEnd else { return false }
    if logs.mainLimit <= low { return true }
    let pending = logs.pendingLimit
    // A pending limit is one this code set (at or above the floor's end); repair clears
    // any other before a writer gets here, and this check keeps a damaged word from
    // lowering the limit into the floor all the same.
    if pending >= mainFloorEnd && pending <= low && logs.mainIsFreeFrom(pending) {
      logs.lowerMainLimit(to: pending, held)
      return true
    }
    if logs.mainIsFreeFrom(low) {
      logs.lowerMainLimit(to: low, held)
      return true
    }
    if pending == 0 || pending > low {
      let ahead = max(Self.pendingGroups, index.groups / 16)
      logs.setPendingLimit(max(mainFloorEnd, indexLow(groups: groups + ahead)), held)
    }
    return false
  }

  // MARK: Merge

  /// M1-M4: one group fewer. False (nothing changed) when an entry of the last group has
  /// no room in its places under one group fewer.
  func merge(_ held: borrowing WriteLock.Held, stopAt stop: Stop? = nil) -> Bool {
    let geometry = index.geometryRelaxed()
    let n = geometry.groups
    guard n > 1 else { return false }
    return withUnsafeTemporaryAllocation(of: MergeMove.self, capacity: Format.slotsPerGroup) { plan in
      // M1.
      guard let planned = planMerge(of: n - 1, into: plan) else { return false }
      // M2.
      for i in 0..<planned {
        let m = plan[i]
        index.publish(m.to, offset: m.offset, hits: m.hits, tag: m.tag, held)
        if stop == .midCopy { return true }
      }
      if stop == .afterCopy { return true }
      // M3.
      publish(geometry.with(groups: n - 1), held)
      if stop == .afterPublish { return true }
      // M4: the main log may use everything up to the index again (raising the limit
      // only moves where the head wraps next; a shrinking index needs nothing freed).
      logs.clearPendingLimit(held)
      logs.raiseMainLimit(to: indexLow(groups: n - 1), held)
      counters.bump(.merges, held)
      return true
    }
  }

  /// One entry of a merged group and its slot under one group fewer.
  struct MergeMove {
    var to: BucketIndex.Slot
    var offset: Int
    var hits: UInt32
    var tag: UInt16
  }

  /// M1: a slot for each entry of group `t` (the last) among its places under `t` groups,
  /// counting the room each bucket has left, into `plan`; the entries planned, or nil
  /// when one has no room.
  private func planMerge(of t: Int, into plan: UnsafeMutableBufferPointer<MergeMove>) -> Int? {
    var planned = 0
    // Slots taken by the plan so far, by bucket number (at most 40 buckets receive).
    var taken: [(bucket: Int, slots: UInt32)] = []
    func room(_ place: Place) -> BucketIndex.Slot? {
      let i = taken.firstIndex { $0.bucket == place.number }
      let free = index.emptySlots(place) & ~(i.map { taken[$0].slots } ?? 0)
      guard free != 0 else { return nil }
      let s = free.trailingZeroBitCount
      if let i { taken[i].slots |= 1 << UInt32(s) } else { taken.append((place.number, 1 << UInt32(s))) }
      return BucketIndex.Slot(place: place, slot: s)
    }
    for b in 0..<Format.bucketsPerGroup {
      for slot in 0..<Format.slotsPerBucket {
        guard let e = index.entry(at: BucketIndex.Slot(place: Place(group: t, bucket: b), slot: slot)) else { continue }
        let pl = index.placement(of: e, groups: t).placement
        guard let to = room(pl.first) ?? room(pl.second) else { return nil }
        plan[planned] = MergeMove(to: to, offset: e.offset, hits: e.hits, tag: pl.tag)
        planned += 1
      }
    }
    return planned
  }

  // MARK: Publication

  /// S4, M3: a new geometry word, with release ordering, then a release fence: every
  /// later store (into a group zeroed for a split, or a merged group's bytes given to the
  /// log) is ordered after it, so a reader that sees such a store sees the new word at R5.
  func publish(_ geometry: Geometry, _ held: borrowing WriteLock.Held) {
    part.word(.geometry).store(geometry.raw, .releasing)
    atomicMemoryFence(ordering: .releasing)
  }
}

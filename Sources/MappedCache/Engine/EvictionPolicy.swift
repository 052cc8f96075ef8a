/// Eviction in one partition: two logs in the spirit of S3-FIFO (Yang et al., SOSP 2023),
/// with CLOCK's hit count. New entries go to the small log (a tenth of the data space);
/// the main log keeps survivors; the main log's tail is the clock hand. Every step runs
/// under the partition's lock (each function takes its witness).
///
/// To make room for `n` bytes in log L (`makeRoom`):
///  0. for a new entry in small, while the cache fills (limits slack, main has room):
///     while small holds more than a twelfth of the log space, promote its tail as in
///     step 4 (`keepSmallShareWhileFilling`; libCacheSim's fill rule);
///  1. While L lacks `n` bytes (plus, for main, its reserve: room for second chances),
///     or the file's count or cost limit would be passed, take the record at the tail
///     of L (for the limits, of small while it holds at least a tenth of the live log
///     bytes, else of main):
///  2. a wrap marker, or a record no slot names (overwritten or removed): skip it;
///  3. an expired entry: remove it (an expiration);
///  4. small-log entry read twice since insertion (S3-FIFO's threshold), or any while
///     the cache is still filling or `roomy`, or an unread one (or read once) that
///     displaces an unread entry at main's tail which is unearned or, when nothing was
///     ever read or nothing for ten cache's worths of evictions (`noRecentReuse`), any:
///     copy it to main's head or a free record of main (`moveToMain`), point its slot
///     there (a promotion). While filling its hits go along and, unread, it is marked
///     unearned; otherwise its count starts again;
///  5. any other small-log entry: remember its tag in the ghost (`GhostTable`), remove
///     it (an eviction); a later insert of a remembered key goes straight to main;
///  6. main-log entry read since the hand last passed: copy it on (`moveToMain`) with its
///     hit count (1 to 3) less one (a second chance, while the call's budget lasts: see
///     `EvictionBudget`); an unread one in a `roomy` cache: copy it on as it is (within
///     the budget); otherwise remove it (an eviction);
///  7. advance the tail past the record.
/// A read entry seen at a tail, or a ghost recalled, is reuse (`noteReuse`).
/// A crash between any two steps leaves a dead record (skipped later), or a bucket left
/// odd inside a move, whose slot names a whole copy either way (`BucketIndex.move`).
///
/// The calls only go down: `makeRoom` → `keepSmallShareWhileFilling` | `evictSmallTail`
/// | `evictMainTail`; `keepSmallShareWhileFilling` → `evictSmallTail`; `evictSmallTail`
/// → `evictMainTail` (displacing) and `ensureMainRoom` → `evictMainTail`. The main log's
/// steps never reach back into the small log's.
struct EvictionPolicy {
  /// The layers eviction works through, stored once: the resizer holds the index's,
  /// the logs' and the counters' words, and the rest is derived from them on use. A
  /// write makes a policy on its way to `makeRoom`, and each stored copy of a layer
  /// lengthened every insert (`scripts/callgrind.sh`).
  let resizer: IndexResizer

  @inline(__always) init(resizer: IndexResizer) { self.resizer = resizer }

  @inline(__always) var index: BucketIndex { resizer.index }
  @inline(__always) var logs: RecordLogs { resizer.logs }
  @inline(__always) var counters: PartitionCounters { resizer.counters }
  @inline(__always) var ghost: GhostTable { GhostTable(index: index) }
  /// Bytes of the small log.
  @inline(__always) var smallBytes: Int { logs.smallEnd - logs.smallBase }
  @inline(__always) var maxRecord: Int { logs.maxRecord }
  @inline(__always) var partitionCount: Int { counters.memory.partitionCount }

  var part: PartitionMemory { index.part }

  /// Rounds of eviction one call may make before it calls the partition damaged: more
  /// than every record could need, so only a broken chain of records gets there.
  private var roundLimit: Int { 4 * (index.slotCount + part.limits.bytes / 64) + 1024 }

  /// Bytes kept free in the main log so that a referenced tail record can usually be
  /// copied to the head (a second chance); one that does not fit is evicted instead.
  var mainReserve: Int {
    let main = logs.mainLimit - logs.mainBase
    return min(2 * maxRecord, max(main / 256, 4096))
  }

  /// The file's limits and what counts against them: the sums over every partition
  /// (read once per call, lock-free), this partition's counts moving as it evicts.
  struct Limits {
    var count: Int
    var cost: Int
    /// Entries and live bytes of the other partitions.
    var otherEntries = 0
    var otherBytes = 0
    var isSet: Bool { count > 0 || cost > 0 }
  }

  func limits() -> Limits {
    var l = Limits(count: counters.countLimit, cost: counters.costLimit)
    if l.isSet {
      let totals = counters.fileTotals()
      l.otherEntries = max(0, totals.entries - counters.count(.entries))
      l.otherBytes = max(0, totals.liveBytes - counters.count(.liveBytes))
    }
    return l
  }

  /// Frees room for a record of `size` bytes in log `id`, and (for a new entry of
  /// `liveDelta` key+value bytes) under the file's count and cost limits (step 1).
  /// Returns whether anything moved (slots may have changed: look the key up again).
  func makeRoom(
    _ id: LogID, size: Int, newEntry: Bool, liveDelta: Int, now: UInt64,
    _ held: borrowing WriteLock.Held
  ) throws -> Bool {
    var budget = EvictionBudget()
    let limits = limits()
    // Step 0: while the cache fills, a new entry's arrival moves small's tail on to main
    // whenever small holds more than its share of the log space.
    var changed =
      id == .small && newEntry ? try keepSmallShareWhileFilling(limits, now: now, budget: &budget, held) : false
    let reserve = id == .main ? mainReserve : 0
    var rounds = 0
    var shrinkTried = false
    while true {
      let needLog = !logs.fits(id, size &+ reserve)
      let entries = limits.otherEntries &+ counters.count(.entries)
      let needSlot = newEntry && limits.count > 0 && entries >= limits.count
      let needCost = limits.cost > 0 && limits.otherBytes &+ counters.count(.liveBytes) &+ liveDelta > limits.cost
      if !needLog && !needSlot && !needCost { return changed }
      // An index sparser than the entries need gives a group back to main first.
      if needLog && !shrinkTried {
        shrinkTried = true
        if resizer.shrinkIfSparse(entries: counters.count(.entries), held) {
          changed = true
          continue
        }
      }
      rounds += 1
      if rounds > roundLimit { throw PartitionDamage("eviction made no progress") }
      let victim = needLog ? id : victimForLimits()
      if logs.state(victim).isEmpty {
        // Limits that evicting this partition cannot meet (a cost limit below one entry,
        // or entries that live in other partitions): the write goes ahead.
        if !needLog { return changed }
        throw PartitionDamage("empty \(id) log has no room for \(size) bytes")
      }
      try evictTail(of: victim, limits, now: now, budget: &budget, held)
      changed = true
    }
  }

  /// Evicts until this partition's counts are at most `count` entries and `cost` bytes
  /// (0: no bound), with no second chances (new limits).
  func evictDown(toCount count: Int, cost: Int, now: UInt64, _ held: borrowing WriteLock.Held) throws {
    var budget = EvictionBudget.noSecondChances
    let none = Limits(count: 0, cost: 0)
    var rounds = 0
    while rounds < roundLimit {
      let overCount = count > 0 && counters.count(.entries) > count
      let overCost = cost > 0 && counters.count(.liveBytes) > cost
      guard overCount || overCost else { return }
      let victim: LogID = logs.state(.small).isEmpty ? .main : .small
      if logs.state(victim).isEmpty { return }
      try evictTail(of: victim, none, now: now, budget: &budget, held)
      rounds += 1
    }
  }

  /// Small's share of the log space while the cache fills: a twelfth. libCacheSim's
  /// S3-FIFO sends new keys to main once small holds its tenth and the cache is not yet
  /// full, so the first fill stays cached longer than newer keys that have not been read
  /// twice; moving small's tail on (with its hits) does the same and keeps small a FIFO.
  /// A twelfth did best of the shares from a tenth to a twenty-fifth on the traces
  /// (docs/history/bench-history.md).
  static let smallShareWhileFilling = 12

  /// Whether the file is under its limits (no limit: always).
  @inline(__always)
  private func underLimits(_ l: Limits) -> Bool {
    guard l.isSet else { return true }
    let entries = l.otherEntries &+ counters.count(.entries)
    let bytes = l.otherBytes &+ counters.count(.liveBytes)
    return (l.count == 0 || entries < l.count) && (l.cost == 0 || bytes < l.cost)
  }

  /// Under the limits and with live records under a third of main's space: a log that
  /// lacks room is full of dead records (overwritten or removed), not of entries, so
  /// nothing live is evicted to make room: small's tail moves on to main as while
  /// filling, and main's live tail is copied forward (within the call's budget) instead
  /// of evicted. A cache many times larger than its data never loses an entry to churn.
  @inline(__always)
  private func roomy(_ l: Limits) -> Bool { underLimits(l) && liveRecordsUnderAThirdOfMain }

  /// `roomy`'s second half: this partition's live records' bytes (at most: key and value
  /// bytes plus a largest header per entry) under a third of main's space.
  @inline(__always)
  private var liveRecordsUnderAThirdOfMain: Bool {
    let records = counters.count(.liveBytes) &+ counters.count(.entries) &* RecordFormat.maxHeaderBytes
    return records &* 3 < logs.mainLimit &- logs.mainBase
  }

  /// Step 0: while the cache fills and small holds more than a twelfth of the log space
  /// (or of this partition's share of the count or cost limit), moves small's tail on to
  /// main. Returns whether anything moved.
  private func keepSmallShareWhileFilling(
    _ l: Limits, now: UInt64, budget: inout EvictionBudget, _ held: borrowing WriteLock.Held
  ) throws -> Bool {
    var moved = false
    var rounds = 0
    while rounds < roundLimit {
      rounds += 1
      let small = logs.state(.small)
      let main = logs.effectiveState(.main)
      // Cheap tests first: a full main log or a file at its limits ends the fill.
      guard !small.isEmpty, main.free >= mainReserve + smallBytes / 4 + 64, underLimits(l) else { break }
      let used = Double(small.used + main.used)
      let share = Double(small.used * Self.smallShareWhileFilling)
      let countShare = Double(l.count) / Double(partitionCount)
      let costShare = Double(l.cost) / Double(partitionCount)
      let over =
        share > Double(smallBytes + (main.limit - main.base))
        || (l.count > 0 && share * Double(counters.count(.entries)) > countShare * used)
        || (l.cost > 0 && share * Double(counters.count(.liveBytes)) > costShare * used)
      guard over, try evictSmallTail(l, now: now, budget: &budget, onlyPromote: true, held) else { break }
      moved = true
    }
    return moved
  }

  /// Records that eviction saw reuse (a read entry at a tail, a key the ghost recalled):
  /// the evictions count now, plus one (0 stays "never"), for `noRecentReuse`.
  @inline(__always)
  func noteReuse(_ held: borrowing WriteLock.Held) {
    counters.set(.lastReuse, counters.value(.evictions) &+ 1, held)
  }

  /// Evictions without reuse, as multiples of the entries, after which recency is all
  /// that is left to go by.
  static let reuseHorizon: UInt64 = 10

  /// No reuse ever seen, or none for `reuseHorizon` cache's worths of evictions: nothing
  /// here is read, so an unread entry at main's tail may be displaced (with no reads the
  /// cache keeps the newest entries, not an old generation for ever).
  private var noRecentReuse: Bool {
    let last = counters.value(.lastReuse)
    return last == 0
      || counters.value(.evictions) &+ 1 &- last >= Self.reuseHorizon &* UInt64(counters.count(.entries))
  }

  /// For entry and cost limits: keep small's share near its tenth (S3-FIFO), or main is
  /// never swept.
  private func victimForLimits() -> LogID {
    let small = logs.state(.small)
    let main = logs.state(.main)
    if small.isEmpty { return .main }
    return main.isEmpty || small.used * 10 >= small.used + main.used ? .small : .main
  }

  @inline(__always)
  private func evictTail(
    of id: LogID, _ l: Limits, now: UInt64, budget: inout EvictionBudget, _ held: borrowing WriteLock.Held
  ) throws {
    if id == .small {
      _ = try evictSmallTail(l, now: now, budget: &budget, onlyPromote: false, held)
    } else {
      try evictMainTail(l, now: now, budget: &budget, held)
    }
  }

  /// The record at log `id`'s tail and the slot that names it, or nil for a wrap marker
  /// or a dead record, which it skips (steps 2 and 7). Throws for bytes that break the
  /// log's chain.
  private func liveTail(_ id: LogID, _ held: borrowing WriteLock.Held) throws -> LiveTail? {
    switch logs.tailItem(id) {
    case .empty:
      return nil
    case .wrap:
      logs.advanceTail(id, by: nil, held)
      return nil
    case .broken:
      throw PartitionDamage("bad record at the tail of the \(id) log")
    case .record(let offset, let h):
      // A free record leaves its list before the tail passes it (only main's are listed).
      if h.isListed && id == .main {
        try FreeLists(part: part, logs: logs).unlink(offset, held)
        logs.advanceTail(id, by: h.size, held)
        return nil
      }
      let hash = part.keyHash(record: offset, h)
      guard let e = index.slot(naming: offset, hash: hash, held) else {
        logs.advanceTail(id, by: h.size, held)
        return nil
      }
      return (e, hash)
    }
  }

  /// A live record at a log's tail: the slot that names it (with the record's offset
  /// and header, as read again through the slot: the same bytes under the lock) and its
  /// key's hash. Not its offset and header apart too: a value past 128 bytes is copied
  /// by a call to `memcpy`, several times an insert.
  private typealias LiveTail = (entry: BucketIndex.Entry, hash: UInt64)

  /// Removes a live entry (an eviction or an expiration: `counter`) whose record the
  /// caller's tail is about to pass.
  @inline(__always)
  func remove(_ e: BucketIndex.Entry, counting counter: PartitionWord, _ held: borrowing WriteLock.Held) {
    index.clear(e.at, held)
    counters.removeEntry(liveBytes: e.header.liveBytes, held)
    counters.bump(counter, held)
  }

  /// Removes a live entry wherever its record lies (a removal, an expiry, an eviction
  /// from its bucket, growth's move), and lists its record as free (`FreeLists.release`).
  func discard(_ e: BucketIndex.Entry, counting counter: PartitionWord, _ held: borrowing WriteLock.Held) {
    remove(e, counting: counter, held)
    FreeLists(part: part, logs: logs).release(e.offset, e.header, held)
  }

  /// Steps 2–5 and 7 for the record at the small log's tail. With `onlyPromote` (step 0)
  /// it only promotes while the cache fills, and returns false, changing nothing, for a
  /// record it would not promote. Returns whether it dealt with the tail.
  private func evictSmallTail(
    _ l: Limits, now: UInt64, budget: inout EvictionBudget, onlyPromote: Bool, _ held: borrowing WriteLock.Held
  ) throws -> Bool {
    guard let (e, hash) = try liveTail(.small, held) else { return true }
    let (offset, h) = (e.offset, e.header)
    if Expiry.isExpired(h.expiry, now: now) {
      remove(e, counting: .expirations, held)
      logs.advanceTail(.small, by: h.size, held)
      return true
    }
    let main = logs.effectiveState(.main)
    let mainHasRoom = main.fits(h.size &+ mainReserve)
    // While the cache is filling (log space and limits slack), entries flow into main
    // with their hits; once full, only those read twice (S3-FIFO's threshold) do.
    let filling = underLimits(l) && (mainHasRoom || liveRecordsUnderAThirdOfMain)
    if onlyPromote && !filling { return false }
    let read = e.word & Format.referencedBit != 0
    if read { noteReuse(held) }
    let earned = e.word & Format.frequentBit != 0
    // An unread newcomer may still displace an unread entry at main's tail that only got
    // there while the cache was filling (or any, once nothing is read: `noRecentReuse`).
    let displaced = !filling && !earned ? mainTailIfDisplaceable(held) : nil
    if let tail = displaced { try evictMainTail(l, now: now, budget: &budget, tail: tail, held) }
    if filling || earned || displaced != nil {
      if !mainHasRoom { try ensureMainRoom(for: h.size, l, now: now, budget: &budget, held) }
      // Main's eviction may have changed the slot (a merge of groups): find this entry
      // again if anything ran since `liveTail` found it.
      let evicted = displaced != nil || !mainHasRoom
      if let e2 = evicted ? index.slot(naming: offset, hash: hash, held) : e {
        // Filling: the hits go along, and an unread entry is marked unearned. Otherwise
        // the count starts again (S3-FIFO), and a displacing newcomer is not unearned:
        // it cannot be displaced in turn while the cache is read.
        let hits = filling ? e2.hits : 0
        let unearned = filling && e2.word & Format.referencedBit == 0
        moveToMain(e2, hits: hits, unearned: unearned, held)
        counters.bump(.promotions, held)
      }
    } else {
      ghost.remember(hash, entries: counters.count(.entries), held)
      remove(e, counting: .evictions, held)
    }
    logs.advanceTail(.small, by: h.size, held)
    return true
  }

  /// Steps 2, 3, 6 and 7 for the record at the main log's tail (the clock hand).
  /// `tail`: main's live tail when the caller found it already (`mainTailIfDisplaceable`).
  private func evictMainTail(
    _ l: Limits, now: UInt64, budget: inout EvictionBudget, tail: LiveTail? = nil, _ held: borrowing WriteLock.Held
  ) throws {
    guard let (e, _) = try tail ?? liveTail(.main, held) else { return }
    let h = e.header
    let main = logs.effectiveState(.main)
    if Expiry.isExpired(h.expiry, now: now) {
      remove(e, counting: .expirations, held)
    } else if e.word & Format.referencedBit == 0 && budget.copiesLeft > 0 && roomy(l) && main.fits(h.size) {
      // Room is short only for dead records: the entry moves on as it is (`roomy`).
      budget.spend(h.size)
      moveToMainHead(e, hits: e.hits, unearned: h.unearned, held)
      counters.bump(.reinsertions, held)
    } else if e.word & Format.referencedBit != 0
      && budget.allowsCopy(ofHot: e.word & (Format.frequentBit | Format.hotBit) != 0)
      && main.fits(h.size)
    {
      budget.spend(h.size)
      noteReuse(held)
      // One pass per hit, up to 3 (S3-FIFO's counter): the count goes down by one.
      let left =
        e.word & Format.hotBit != 0
        ? Format.referencedBit | Format.frequentBit : e.word & Format.frequentBit != 0 ? Format.referencedBit : 0
      moveToMain(e, hits: left, unearned: false, held)
      counters.bump(.reinsertions, held)
    } else {
      remove(e, counting: .evictions, held)
    }
    logs.advanceTail(.main, by: h.size, held)
  }

  /// Evicts from main's tail until a record of `size` bytes fits with the reserve to spare.
  private func ensureMainRoom(
    for size: Int, _ l: Limits, now: UInt64, budget: inout EvictionBudget, _ held: borrowing WriteLock.Held
  ) throws {
    var rounds = 0
    var shrinkTried = false
    while !logs.fits(.main, size &+ mainReserve) {
      if !shrinkTried {
        shrinkTried = true
        if resizer.shrinkIfSparse(entries: counters.count(.entries), held) { continue }
      }
      rounds += 1
      if rounds > roundLimit { throw PartitionDamage("eviction made no progress") }
      if logs.state(.main).isEmpty {
        throw PartitionDamage("empty log has no room for \(size) bytes")
      }
      try evictMainTail(l, now: now, budget: &budget, held)
    }
  }

  /// Dead records and markers `mainTailIfDisplaceable` skips at main's tail before it
  /// answers "no".
  static let garbageSkipLimit = 64

  /// The live entry at main's tail if it is unread since it got there and either got
  /// there unread while the cache filled (unearned) or nothing has been read for a
  /// while; else nil. Markers and dead records at the tail are garbage: they are skipped
  /// (the tail moves).
  private func mainTailIfDisplaceable(_ held: borrowing WriteLock.Held) -> LiveTail? {
    for _ in 0..<Self.garbageSkipLimit {
      switch logs.tailItem(.main) {
      case .empty, .broken:
        return nil
      case .wrap:
        logs.advanceTail(.main, by: nil, held)
      case .record(let offset, let h):
        if h.isListed {
          guard (try? FreeLists(part: part, logs: logs).unlink(offset, held)) != nil else { return nil }
          logs.advanceTail(.main, by: h.size, held)
          continue
        }
        let hash = part.keyHash(record: offset, h)
        guard let e = index.slot(naming: offset, hash: hash, held) else {
          logs.advanceTail(.main, by: h.size, held)
          continue
        }
        return e.word & Format.referencedBit == 0 && (h.unearned || noRecentReuse) ? (e, hash) : nil
      }
    }
    return nil
  }

  /// Copies `e`'s record to the main log's head and points its slot there with `hits`
  /// (`BucketIndex.move`): a promotion or a second chance. The old copy becomes dead once
  /// the caller advances its log's tail. Precondition: main has room for the record.
  /// `midway` runs inside the slot's write (a test hook).
  @inline(__always)
  func moveToMainHead(
    _ e: BucketIndex.Entry, hits: UInt32, unearned: Bool, midway: () -> Void = {}, _ held: borrowing WriteLock.Held
  ) {
    let size = e.header.size
    let to = logs.reserve(.main, size, held)
    part.moveRecord(from: e.offset, to: to, size: size, unearned: unearned, held)
    logs.commit(.main, size, held)
    index.move(e.at, toRecord: to, hits: hits, midway: midway, held)
  }

  /// Moves a tail's entry `e` on into main (a promotion, step 4, or a second chance,
  /// step 6): into a free record of main that fits at least half main's used bytes
  /// ahead of its tail (`moveToFreeRecord`), else to main's head. So promotions and
  /// second chances fill the bytes main's deaths left, as writes bound for main do,
  /// while the hand does not judge a moved entry again sooner than half a lap on.
  private func moveToMain(
    _ e: BucketIndex.Entry, hits: UInt32, unearned: Bool, _ held: borrowing WriteLock.Held
  ) {
    let distance = logs.state(.main).used / 2
    if !moveToFreeRecord(e, hits: hits, unearned: unearned, distance: distance, held) {
      moveToMainHead(e, hits: hits, unearned: unearned, held)
    }
  }

  /// Moves `e`'s record into a free record of main that fits (outside `avoiding`, at
  /// least `distance` bytes ahead of main's tail) and points its slot there with `hits`,
  /// listing what the copy leaves. False, changing nothing, when none does (or a list
  /// is damaged: the next eviction at the tail reports it).
  func moveToFreeRecord(
    _ e: BucketIndex.Entry, hits: UInt32, unearned: Bool, avoiding: Range<Int> = 0..<0, distance: Int = 0,
    _ held: borrowing WriteLock.Held
  ) -> Bool {
    let free = FreeLists(part: part, logs: logs)
    let size = e.header.size
    guard free.mayHold(size),
      let f = (try? free.take(size, keyCount: e.header.klen, avoiding: avoiding, distance: distance, held)) ?? nil
    else { return false }
    part.moveRecord(from: e.offset, e.header, over: f.offset, extent: f.extent, unearned: unearned, held)
    index.move(e.at, toRecord: f.offset, hits: hits, held)
    free.releaseRest(of: f.offset, extent: f.extent, size: size, held)
    return true
  }

  /// A new key's two buckets are full and no displacement frees a slot (the index is
  /// waiting for its space): removes the entry of the two that eviction would reach
  /// first: expired, then unread, in small before main, fewest hits.
  func evictForSlot(_ pl: Placement, now: UInt64, _ held: borrowing WriteLock.Held) {
    var best: BucketIndex.Entry? = nil
    var bestScore = Int.max
    for place in [pl.first, pl.second] {
      for slot in 0..<Format.slotsPerBucket {
        guard let e = index.entry(at: BucketIndex.Slot(place: place, slot: slot)) else { continue }
        let expired = Expiry.isExpired(e.header.expiry, now: now)
        let hits = (e.word >> Format.offsetBits).nonzeroBitCount
        let score = expired ? -1 : hits * 2 + (logs.id(containing: e.offset) == .main ? 1 : 0)
        if score < bestScore {
          best = e
          bestScore = score
        }
      }
    }
    guard let victim = best else { return }
    if bestScore < 0 {
      discard(victim, counting: .expirations, held)
    } else {
      if logs.id(containing: victim.offset) == .small {
        ghost.remember(part.keyHash(record: victim.offset, victim.header), entries: counters.count(.entries), held)
      }
      discard(victim, counting: .evictions, held)
    }
  }
}

/// How many second chances one `makeRoom` call may give: the copies are made under the
/// write lock, so they bound how long one write can hold it when much of the main log
/// is referenced. A pass clears the bits it passes, so even a fully referenced log
/// would yield after one round; the budget only caps one call's share of that round.
/// It lasts for 64 copies or 256 KiB copied, whichever comes later: a run of hot
/// small entries at the tail (entries written together, read together) is kept whole
/// up to 256 KiB of them (about 1,000 entries of 250 bytes; a count of 64 alone
/// evicted the 65th hot entry of such a run), while large records still stop after 64.
struct EvictionBudget {
  static let copies = 64
  static let bytes = 256 << 10
  /// What entries read twice or more since the hand last passed may still be copied
  /// with once the rest is spent. The first time a full cache evicts, every
  /// entry in main may still carry the hits it had while the cache filled, and the hand
  /// may lap main more than once in one call: without this reserve, an entry read on
  /// every lap could be evicted only because the budget ran out just before it. Each
  /// such copy takes one hit off, so an entry draws on it at most once per call.
  static let hotBytes = 1 << 20
  var copiesLeft = Self.copies
  var bytesLeft = Self.bytes
  var hotBytesLeft = Self.hotBytes

  /// No second chances at all (evicting down to new limits).
  static let noSecondChances = EvictionBudget(copiesLeft: 0, bytesLeft: 0, hotBytesLeft: 0)

  var allowsCopy: Bool { copiesLeft > 0 || bytesLeft > 0 }

  /// Whether a referenced entry may be copied (`hot`: it has two hits or more).
  @inline(__always)
  func allowsCopy(ofHot hot: Bool) -> Bool { allowsCopy || (hot && hotBytesLeft > 0) }

  mutating func spend(_ size: Int) {
    if !allowsCopy { hotBytesLeft -= size }
    copiesLeft -= 1
    bytesLeft -= size
  }
}

/// Keys recently evicted from the small log (S3-FIFO's ghost queue): a later insert of a
/// remembered key goes straight to main. Written and read only under the partition's
/// lock.
///
/// S3-FIFO's ghost is a FIFO of the hashes of the last 0.9 × C keys evicted from small,
/// C being the cache's size in entries. Here each group of the index has a ghost line of
/// 32 16-bit tags (0 marks a free way), a FIFO of its own, newest at way 0; a key's
/// ghost line is its first place's group. `remember` inserts at way 0, shifting older
/// tags along until a free way or the same tag absorbs the shift (the oldest falls off
/// the end); `recall` frees the tag's way. Only `ghostFraction × entries / groups` ways
/// of each line are used (at most 32): a partition remembers about 0.85 × its entries,
/// as in S3-FIFO; a ghost that remembered far longer would send every key seen twice,
/// however long ago, to main. A split or merge of groups leaves ghost lines as they are
/// (a hint: a ghost in the wrong line is only forgotten).
struct GhostTable {
  let index: BucketIndex

  /// The ghost's length as a share of the partition's entries, chosen against S3-FIFO's
  /// own and a shorter one on CloudPhysics, Zipf and scan traces
  /// (docs/history/bench-history.md).
  static let ghostFraction = 0.85

  /// Ways of each line in use for a partition of `entries` entries in `groups` groups.
  @inline(__always)
  static func ways(entries: Int, groups: Int) -> Int {
    let wanted = Int((Double(max(entries, 1)) * ghostFraction / Double(max(groups, 1))).rounded(.up))
    return max(1, min(Format.ghostWays, wanted))
  }

  /// Remembers `hash` as the newest ghost of its line (its older copy, if any, is
  /// dropped; the line's oldest ghost falls off when the line is full).
  func remember(_ hash: UInt64, entries: Int, _ held: borrowing WriteLock.Held) {
    let groups = index.groups
    let g = Placement(hash: hash, groups: groups).first.group
    let tag = IndexGeometry.ghostTag(hash)
    var carry = tag
    for way in 0..<Self.ways(entries: entries, groups: groups) {
      let old = index.part.ghost(g, way)
      index.part.storeGhost(g, way, carry, held)
      if old == 0 || old == tag { return }
      carry = old
    }
  }

  /// Whether `hash` was recently evicted from the small log (and forgets it).
  func recall(_ hash: UInt64, entries: Int, _ held: borrowing WriteLock.Held) -> Bool {
    let groups = index.groups
    let g = Placement(hash: hash, groups: groups).first.group
    let tag = IndexGeometry.ghostTag(hash)
    let ways = Self.ways(entries: entries, groups: groups)
    let inUse: UInt32 = ways >= 32 ? ~0 : (1 &<< UInt32(ways)) &- 1
    let m = index.part.ghostMatches(g, tag) & inUse
    guard m != 0 else { return false }
    index.part.storeGhost(g, m.trailingZeroBitCount, 0, held)
    return true
  }

  /// Forgets every ghost of groups `0 ..< groups`.
  func clear(groups: Int, _ held: borrowing WriteLock.Held) {
    for g in 0..<groups {
      for way in 0..<Format.ghostWays { index.part.storeGhost(g, way, 0, held) }
    }
  }
}

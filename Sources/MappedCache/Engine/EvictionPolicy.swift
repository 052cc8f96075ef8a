/// Eviction: two logs in the spirit of S3-FIFO (Yang et al., SOSP 2023), with CLOCK's
/// hit count. New entries go to the small log (≈10 % of the space); the main log keeps
/// survivors; the main log's tail is the clock hand. Every step runs under the write
/// lock (each function takes its witness).
///
/// To make room for `n` bytes in log L (`makeRoom`):
///  0. for a new entry in small, while the cache fills (entry and cost limits slack, main
///     has room): while small holds more than a twelfth of the capacity, promote its
///     tail as in step 4 (`keepSmallShareWhileFilling`; libCacheSim's fill rule);
///  1. While L lacks `n` bytes (plus, for main, its reserve: `Layout.mainReserve`, room
///     for second chances), or the table is at its entry limit, or the cost limit would
///     be passed, take the record at the tail of L (for the entry and cost limits, of
///     small while it holds at least a tenth of the live log bytes, else of main):
///  2. a pad, or a record no slot points to (overwritten or removed): skip it;
///  3. an expired entry: remove it (an expiration);
///  4. small-log entry read twice since insertion (S3-FIFO's threshold), or any while
///     the cache is still filling or `roomy`, or an unread one (or read once) that displaces an
///     unread entry at main's tail which is unearned or, when nothing was ever read or
///     nothing for ten cache's worths of evictions (`noRecentReuse`), any: copy it to
///     main's head, point its slot there (a promotion). While filling its hits go along
///     and, unread, it is marked unearned; otherwise its count starts again;
///  5. any other small-log entry: remember its hash in the ghost table (`GhostTable`:
///     the last 0.85 × the entry limit such keys), remove it (an eviction); a later
///     insert of a remembered key goes straight to main;
///  6. main-log entry read since the hand last passed: copy it to main's head with its
///     hit count (1 to 3, `Format.hitBits`) less one (a second chance, while the call's
///     budget lasts: see `EvictionBudget`); an unread one in a `roomy` cache: copy it on
///     as it is (within the budget); otherwise remove it (an eviction);
///  7. advance the tail past the record.
/// A read entry seen at a tail, or a ghost recalled, is reuse (`noteReuse`).
/// A crash between any two steps leaves a dead record (skipped later), or a slot left
/// odd inside a move, whose entry repair keeps (`SlotIndex.move`).
///
/// The calls only go down: `makeRoom` → `keepSmallShareWhileFilling` | `evictSmallTail`
/// | `evictMainTail`; `keepSmallShareWhileFilling` → `evictSmallTail`; `evictSmallTail`
/// → `evictMainTail` (displacing) and `ensureMainRoom` → `evictMainTail`. The main log's
/// steps never reach back into the small log's.
struct EvictionPolicy {
  let index: SlotIndex
  let logs: RecordLogs
  let counters: TableCounters
  let ghost: GhostTable
  /// The table's load limit (`Layout.maxEntries`).
  let maxEntries: Int
  let path: String

  /// Entries allowed: the table's load limit, or the count limit when lower.
  var entryLimit: Int {
    let limit = counters.countLimit
    return limit > 0 ? min(maxEntries, limit) : maxEntries
  }

  /// Rounds of eviction one call may make before it calls the file damaged: more than
  /// every slot could need, so only a broken chain of records gets there.
  private var roundLimit: Int { 4 * index.slotCount + 1024 }

  /// Frees room for a record of `size` bytes in log `id`, and (with `enforceLimits`) for
  /// a new entry of `liveDelta` key+value bytes under the count and cost limits (step 1).
  /// Returns whether anything moved (slots may have shifted: look the key up again).
  func makeRoom(
    _ id: LogID, size: Int, newEntry: Bool, liveDelta: Int, now: UInt64,
    _ held: borrowing WriteLock.Held
  ) throws -> Bool {
    var budget = EvictionBudget()
    // Step 0: while the cache fills, a new entry's arrival moves small's tail on to main
    // whenever small holds more than its share of the capacity (`smallShareWhileFilling`).
    var changed = id == .small && newEntry ? try keepSmallShareWhileFilling(now: now, budget: &budget, held) : false
    let reserve = id == .main ? logs.mainReserve : 0
    var rounds = 0
    while true {
      let log = logs.state(id)
      let needLog = log.need(size) + reserve > log.free
      let needSlot = newEntry && counters.count(.entries) >= entryLimit
      let costLimit = counters.costLimit
      let needCost = costLimit > 0 && counters.count(.liveBytes) + liveDelta > costLimit
      if !needLog && !needSlot && !needCost { return changed }
      rounds += 1
      if rounds > roundLimit { throw CacheError.corrupted(path: path, reason: "eviction made no progress") }
      let victim = needLog ? id : victimForLimits()
      if logs.state(victim).isEmpty {
        if needLog && id == .small && size <= logs.smallSize {
          throw CacheError.corrupted(path: path, reason: "empty small log has no room")
        }
        // Limits that evicting cannot meet (e.g. a cost limit below one entry).
        if !needLog && logs.state(.main).isEmpty { return changed }
        throw CacheError.corrupted(path: path, reason: "empty log has no room for \(size) bytes")
      }
      try evictTail(of: victim, now: now, budget: &budget, held)
      changed = true
    }
  }

  /// Evicts until the count and cost limits hold, with no second chances (new limits).
  func evictToLimits(now: UInt64, _ held: borrowing WriteLock.Held) throws {
    var budget = EvictionBudget.noSecondChances
    var rounds = 0
    while rounds < 4 * index.slotCount {
      let countLimit = counters.countLimit
      let costLimit = counters.costLimit
      let overCount = countLimit > 0 && counters.count(.entries) > countLimit
      let overCost = costLimit > 0 && counters.count(.liveBytes) > costLimit
      guard overCount || overCost else { return }
      let victim: LogID = logs.state(.small).isEmpty ? .main : .small
      if logs.state(victim).isEmpty { return }
      try evictTail(of: victim, now: now, budget: &budget, held)
      rounds += 1
    }
  }

  /// Small's share of the capacity while the cache fills: a twelfth. libCacheSim's
  /// S3-FIFO sends new keys to main once small holds its tenth and the cache is not yet
  /// full, so the first fill stays cached longer than newer keys that have not been read
  /// twice; moving small's tail on (with its hits) does the same and keeps small a FIFO.
  /// A twelfth measured best of 1/10 to 1/25 (docs/bench-history.md, 2026-12-01).
  static let smallShareWhileFilling = 12

  /// Whether the cache is still filling: under the entry and cost limits.
  @inline(__always)
  private var underLimits: Bool {
    let costLimit = counters.costLimit
    return counters.count(.entries) < entryLimit && (costLimit == 0 || counters.count(.liveBytes) < costLimit)
  }

  /// Under the limits and with live records under a third of main's space: a log that
  /// lacks room is full of dead records (overwritten or removed), not of entries, so
  /// nothing live is evicted to make room: small's tail moves on to main as while filling,
  /// and main's live tail is copied forward (within the call's budget) instead of evicted.
  /// A cache many times larger than its data never loses an entry to churn.
  /// (The live records' bytes at most: key and value bytes plus a record's header and
  /// padding per entry, against main's size alone; then live entries cannot fill main,
  /// so copying main's tail on soon reaches dead records. `EvictionBudget.copiesLeft`
  /// bounds the copies of one call.)
  @inline(__always)
  private var roomy: Bool { underLimits && liveRecordsUnderAThirdOfMain }

  /// `roomy`'s second half: the live records' bytes (at most) under a third of main's.
  @inline(__always)
  private var liveRecordsUnderAThirdOfMain: Bool {
    let records = counters.count(.liveBytes) &+ counters.count(.entries) &* (Format.recordHeaderBytes &+ 8)
    return records &* 3 < logs.mainSize
  }

  /// Step 0: while the cache fills and small holds more than a twelfth of its capacity
  /// (of the log space, the entry limit or the cost limit, whichever small fills first),
  /// moves small's tail on to main. Returns whether anything moved.
  private func keepSmallShareWhileFilling(
    now: UInt64, budget: inout EvictionBudget, _ held: borrowing WriteLock.Held
  ) throws -> Bool {
    var moved = false
    var rounds = 0
    while rounds < roundLimit {
      rounds += 1
      let small = logs.state(.small)
      let main = logs.state(.main)
      // Cheap tests first: a full main log or a cache at its limits ends the fill.
      guard !small.isEmpty, main.free >= logs.mainReserve + logs.smallSize / 4 + 64, underLimits else { break }
      let used = Double(small.used + main.used)
      let share = Double(small.used * Self.smallShareWhileFilling)
      let costLimit = counters.costLimit
      let over =
        share > Double(logs.smallSize + main.size)
        || share * Double(counters.count(.entries)) > Double(entryLimit) * used
        || (costLimit > 0 && share * Double(counters.count(.liveBytes)) > Double(costLimit) * used)
      guard over, try evictSmallTail(now: now, budget: &budget, onlyPromote: true, held) else { break }
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
  /// cache keeps the newest entries, not an old generation for ever). A scan shorter than
  /// that leaves entries read before it alone, as S3-FIFO does.
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
    of id: LogID, now: UInt64, budget: inout EvictionBudget,
    _ held: borrowing WriteLock.Held
  ) throws {
    if id == .small {
      _ = try evictSmallTail(now: now, budget: &budget, onlyPromote: false, held)
    } else {
      try evictMainTail(now: now, budget: &budget, held)
    }
  }

  /// The record at log `id`'s tail and the slot that points to it, or nil for a pad or a
  /// dead record, which it skips (steps 2 and 7). Throws for a record that breaks the
  /// log's invariants.
  private func liveTail(_ id: LogID, _ held: borrowing WriteLock.Held)
    throws -> (loc: Int, record: MappedMemory.RecordHeader, slot: Int)?
  {
    let log = logs.state(id)
    let loc = log.offset(log.tail)
    guard let rh = index.memory.recordHeader(at: loc), rh.size <= log.used, loc + rh.size <= log.base + log.size else {
      throw CacheError.corrupted(path: path, reason: "bad record at the tail of the \(id) log")
    }
    guard rh.kind != Format.kindPad, let i = index.slot(hash: rh.hash, loc: loc, held) else {
      logs.advanceTail(id, rh.size, held)
      return nil
    }
    return (loc, rh, i)
  }

  /// Steps 2–5 and 7 for the record at the small log's tail. With `onlyPromote` (step 0)
  /// it only promotes while the cache fills, and returns false, changing nothing, for a
  /// record it would not promote. Returns whether it dealt with the tail.
  private func evictSmallTail(
    now: UInt64, budget: inout EvictionBudget, onlyPromote: Bool, _ held: borrowing WriteLock.Held
  ) throws -> Bool {
    guard let (loc, rh, i) = try liveTail(.small, held) else { return true }
    let meta = index.meta(at: i)
    if Expiry.isExpired(meta, now: now) {
      index.remove(i, counters: counters, held)
      counters.bump(.expirations, held)
      logs.advanceTail(.small, rh.size, held)
      return true
    }
    let main = logs.state(.main)
    let mainHasRoom = main.need(rh.size) + logs.mainReserve <= main.free
    // While the cache is filling (log space, entry and cost limits all slack), entries
    // flow into main with their hits; once full, only those read twice (S3-FIFO's
    // threshold) do.
    let filling = underLimits && (mainHasRoom || liveRecordsUnderAThirdOfMain)  // = (room and under limits) or roomy
    if onlyPromote && !filling { return false }
    let read = meta & Format.referencedBit != 0
    if read { noteReuse(held) }
    let earned = meta & Format.frequentBit != 0
    // An unread newcomer may still displace an unread entry at main's tail that only got
    // there while the cache was filling (or any, once nothing is read: `noRecentReuse`).
    let displaces = !filling && !earned && mainTailIsDisplaceable(held)
    if displaces { try evictMainTail(now: now, budget: &budget, held) }
    if filling || earned || displaces {
      if !mainHasRoom { try ensureMainRoom(for: rh.size, now: now, budget: &budget, held) }
      // Main's eviction may have shifted slots: find this entry again.
      if let j = index.slot(hash: rh.hash, loc: loc, held) {
        // Filling: the hits go along, and an unread entry is marked unearned. Otherwise
        // the count starts again (S3-FIFO), and a displacing newcomer is not unearned:
        // it cannot be displaced in turn while the cache is read.
        let m = index.meta(at: j)
        let kept =
          filling
          ? (m & Format.hitBits) | (m & Format.referencedBit == 0 ? Format.unearnedBit : 0) : 0
        moveToMainHead(
          slot: j, record: loc, size: rh.size, meta: (m & ~(Format.hitBits | Format.unearnedBit)) | kept, held)
        counters.bump(.promotions, held)
      }
    } else {
      ghost.remember(rh.hash, held)
      index.remove(i, counters: counters, held)
      counters.bump(.evictions, held)
    }
    logs.advanceTail(.small, rh.size, held)
    return true
  }

  /// Steps 2, 3, 6 and 7 for the record at the main log's tail (the clock hand).
  private func evictMainTail(now: UInt64, budget: inout EvictionBudget, _ held: borrowing WriteLock.Held) throws {
    guard let (loc, rh, i) = try liveTail(.main, held) else { return }
    let meta = index.meta(at: i)
    let log = logs.state(.main)
    if Expiry.isExpired(meta, now: now) {
      index.remove(i, counters: counters, held)
      counters.bump(.expirations, held)
    } else if meta & Format.referencedBit == 0 && budget.copiesLeft > 0 && roomy && log.need(rh.size) <= log.free {
      // Room is short only for dead records: the entry moves on as it is (`roomy`).
      budget.spend(rh.size)
      moveToMainHead(slot: i, record: loc, size: rh.size, meta: meta, held)
      counters.bump(.reinsertions, held)
    } else if meta & Format.referencedBit != 0 && budget.allowsCopy && log.need(rh.size) <= log.free {
      budget.spend(rh.size)
      noteReuse(held)
      // One pass per hit, up to 3 (S3-FIFO's counter): the count goes down by one.
      let left =
        meta & Format.hotBit != 0
        ? Format.referencedBit | Format.frequentBit : meta & Format.frequentBit != 0 ? Format.referencedBit : 0
      moveToMainHead(
        slot: i, record: loc, size: rh.size, meta: (meta & ~(Format.hitBits | Format.unearnedBit)) | left, held)
      counters.bump(.reinsertions, held)
    } else {
      index.remove(i, counters: counters, held)
      counters.bump(.evictions, held)
    }
    logs.advanceTail(.main, rh.size, held)
  }

  /// Evicts from main's tail until a record of `size` bytes fits with the reserve to spare.
  private func ensureMainRoom(
    for size: Int, now: UInt64, budget: inout EvictionBudget,
    _ held: borrowing WriteLock.Held
  ) throws {
    var rounds = 0
    while true {
      let main = logs.state(.main)
      if main.need(size) + logs.mainReserve <= main.free { return }
      rounds += 1
      if rounds > roundLimit { throw CacheError.corrupted(path: path, reason: "eviction made no progress") }
      if main.isEmpty { throw CacheError.corrupted(path: path, reason: "empty log has no room for \(size) bytes") }
      try evictMainTail(now: now, budget: &budget, held)
    }
  }

  /// Dead records `mainTailIsDisplaceable` skips at main's tail before it answers "no".
  static let garbageSkipLimit = 64

  /// Whether the entry at main's tail is unread since it got there and either got there
  /// unread while the cache filled (unearned) or nothing has been read for a while.
  /// Pads and dead records at the tail are garbage: they are skipped (the tail moves).
  private func mainTailIsDisplaceable(_ held: borrowing WriteLock.Held) -> Bool {
    for _ in 0..<Self.garbageSkipLimit {
      let main = logs.state(.main)
      guard !main.isEmpty else { return false }
      let loc = main.offset(main.tail)
      guard let rh = index.memory.recordHeader(at: loc), rh.size <= main.used else { return false }
      guard rh.kind != Format.kindPad, let i = index.slot(hash: rh.hash, loc: loc, held) else {
        logs.advanceTail(.main, rh.size, held)
        continue
      }
      let m = index.meta(at: i)
      return m & Format.referencedBit == 0 && (m & Format.unearnedBit != 0 || noRecentReuse)
    }
    return false
  }

  /// Copies slot `i`'s record (`size` bytes at `loc`) to the main log's head and points
  /// the slot there with `meta` (`SlotIndex.move`): a promotion or a second chance. The
  /// old copy becomes dead once the caller advances its log's tail. Precondition: main
  /// has room for `size` bytes.
  @inline(__always)
  func moveToMainHead(
    slot i: Int, record loc: Int, size: Int, meta: UInt64, midway: () -> Void = {},
    _ held: borrowing WriteLock.Held
  ) {
    let to = logs.reserve(.main, size, held)
    index.memory.moveRecord(from: loc, to: to, size: size, held)
    logs.commit(.main, size, held)
    index.move(i, toRecord: to, meta: meta, midway: midway, held)
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
  var copiesLeft = Self.copies
  var bytesLeft = Self.bytes

  /// No second chances at all (evicting down to new limits).
  static let noSecondChances = EvictionBudget(copiesLeft: 0, bytesLeft: 0)

  var allowsCopy: Bool { copiesLeft > 0 || bytesLeft > 0 }
  mutating func spend(_ size: Int) {
    copiesLeft -= 1
    bytesLeft -= size
  }
}

/// Keys recently evicted from the small log (S3-FIFO's ghost queue): a later insert of a
/// remembered key goes straight to main. Written and read only under the lock (relaxed).
///
/// S3-FIFO's ghost is a FIFO of the hashes of the last 0.9 × C keys evicted from small,
/// C being the cache's size in entries. Here it is a set-associative table: buckets of
/// `ways` 32-bit tags (0 marks a free way), each bucket a FIFO of its own, newest at way
/// 0. A key's bucket comes from bits 20..51 of its hash, range-reduced over the buckets
/// in use, its tag from bits 1..32. `remember` inserts at way 0, shifting older tags
/// along until a free way or the same tag absorbs the shift (the oldest falls off the
/// end); `recall` frees the tag's way. Only `usedBuckets` buckets are used: enough for
/// `ghostFraction` × the entry limit (the count limit, or the table's load limit) tags,
/// at most the whole area. A key's ghost thus lasts for about 0.85 × C later evictions
/// into its bucket's share (the FIFO's depth, ± a quarter: a bucket sees a Poisson share
/// of them), as in S3-FIFO; a ghost that remembered far longer would send every key
/// seen twice, however long ago, to main, and main would fill with keys never read again.
///
/// The bucket count depends on the count limit only (not on the live count), so it is
/// stable: a new count limit re-places the ghosts, which forgets them (no harm: the
/// table is a hint). New files have a ghost area of 3/4 of the slots, room for 0.9 ×
/// the load limit; files made before (a quarter of the slots) keep a shorter ghost.
struct GhostTable {
  let memory: MappedMemory

  /// Tags per bucket: one cache line of them.
  static let ways = 16
  /// The ghost's length as a share of the cache's size in entries: 0.85, measured
  /// against S3-FIFO's 0.9 and 0.8 on CloudPhysics, Zipf and scan traces (with a FIFO
  /// per bucket a ghost lasts ± a quarter of the length; docs/bench-history.md).
  static let ghostFraction = 0.85

  /// The bucket count for a cache of `entryLimit` entries and `ghostCount` tags.
  static func usedBuckets(entryLimit: Int, ghostCount: Int) -> Int {
    let wanted = Int((Double(max(entryLimit, 1)) * ghostFraction / Double(ways)).rounded(.up))
    return max(1, min(wanted, ghostCount / ways))
  }

  /// The entry limit eviction works to (`EvictionPolicy.entryLimit`): the count limit,
  /// or the load limit (`Layout.maxEntries`, 3/4 of the slots) when lower or unset.
  private var entryLimit: Int {
    let maxEntries = memory.slotCount * 3 / 4
    let limit = TableCounters(memory: memory).countLimit
    return limit > 0 ? min(maxEntries, limit) : maxEntries
  }

  /// The first tag of `hash`'s bucket, and its tag (never 0, which marks a free way).
  @inline(__always)
  private func place(_ hash: UInt64) -> (first: Int, tag: UInt32) {
    let buckets = UInt64(Self.usedBuckets(entryLimit: entryLimit, ghostCount: memory.ghostCount))
    // The parentheses matter: Swift's `>>` binds tighter than `&*` (written without
    // them, `x &* n >> 32` was `x &* 0`, and every key shared one place).
    let bucket = Int(truncatingIfNeeded: (((hash >> 20) & 0xFFFF_FFFF) &* buckets) >> 32)
    return (bucket &* Self.ways, UInt32(truncatingIfNeeded: hash >> 1) | 1)
  }

  /// Remembers `hash` as the newest ghost of its bucket (its older copy, if any, is
  /// dropped; the bucket's oldest ghost falls off when the bucket is full).
  func remember(_ hash: UInt64, _ held: borrowing WriteLock.Held) {
    let g = place(hash)
    var carry = g.tag
    for k in 0..<Self.ways {
      let w = memory.ghost(g.first &+ k)
      let old = w.load(.relaxed)
      w.store(carry, .relaxed)
      if old == 0 || old == g.tag { return }
      carry = old
    }
  }

  /// Whether `hash` was recently evicted from the small log (and forgets it).
  func recall(_ hash: UInt64, _ held: borrowing WriteLock.Held) -> Bool {
    let g = place(hash)
    for k in 0..<Self.ways {
      let w = memory.ghost(g.first &+ k)
      if w.load(.relaxed) == g.tag {
        w.store(0, .relaxed)
        return true
      }
    }
    return false
  }

  func clear(_ held: borrowing WriteLock.Held) {
    for i in 0..<memory.ghostCount { memory.ghost(i).store(0, .relaxed) }
  }
}

/// Expiry as stored in a slot's `meta`: absolute wall-clock milliseconds in bits 0..47
/// (0 = never) and, in bits 48..53, the entry's *horizon*: the bit length `k` of the
/// time it had left when written (so it had less than `2^k` ms; 0 = unknown, in files
/// of earlier builds).
///
/// The rule for clocks that disagree (a process whose clock is far ahead or behind, or
/// a host clock stepped back after entries were written): an entry is expired for a
/// reader when its expiry is past by the reader's clock, *or* when it lies further
/// ahead of the reader's clock than its horizon plus `aheadTolerance`, which no honest
/// write could have made: it was stamped by a clock ahead of the reader's. Such an entry
/// reads as a miss (a miss is always safe in a cache; a stale hit is not), is reported
/// expired to `allowingExpired` reads, and is reclaimed by the sweeper and eviction like
/// any expired one. So no entry with an expiry outlives, in any process's view, twice
/// its time to live plus 2 s, whatever clock wrote it; one written by a clock behind is
/// simply past. Skews within 2 s change nothing.
enum Expiry {
  /// Clock skew between processes (or a step back) that is believed without question.
  static let aheadToleranceMilliseconds: UInt64 = 2_000
  static let horizonShift: UInt64 = 48
  static let horizonMask: UInt64 = 0x3F << horizonShift

  /// The expiry word a write stores for `expiry` (absolute ms; 0 = never), by the
  /// writer's clock `now`.
  @inline(__always)
  static func stamp(_ expiry: UInt64, now: UInt64) -> UInt64 {
    let e = expiry & Format.expiryMask
    guard e != 0 else { return 0 }
    let left = e > now ? e &- now : 0
    // Safe: `left` < 2^48, so the bit length is at most 48.
    let k = max(1, UInt64(64 &- left.leadingZeroBitCount))
    return e | k << horizonShift
  }

  @inline(__always)
  static func isExpired(_ meta: UInt64, now: UInt64) -> Bool {
    let e = meta & Format.expiryMask
    guard e != 0 else { return false }
    if e <= now { return true }
    let k = (meta & horizonMask) >> horizonShift
    // Safe: k ≤ 63, so the sum stays below 2^64.
    return k != 0 && e &- now > (1 << k) &+ aheadToleranceMilliseconds
  }
}

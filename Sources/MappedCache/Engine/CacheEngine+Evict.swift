/// Eviction: two logs in the spirit of S3-FIFO (Yang et al., SOSP 2023), with CLOCK's
/// reference bit. New entries go to the small log (≈10 % of the space); the main log
/// keeps survivors; the main log's tail is the clock hand. All steps under the write lock.
///
/// To make room for `n` bytes in log L (`makeRoom`):
///  1. While L lacks `n` bytes (plus, for main, a reserve of two largest records), or
///     the table is at its entry limit, or the cost limit would be passed, take the
///     record at the tail of L (of small first, for entry and cost limits):
///  2. a pad, or a record no slot points to (overwritten or removed): skip it;
///  3. an expired entry: remove it (an expiration);
///  4. small-log entry referenced since insertion, or while main still has free room:
///     copy it to main's head, point its slot there, clear its bit (a promotion);
///  5. small-log entry not referenced: remember its hash in the ghost table, remove it
///     (an eviction); a later insert of a remembered key goes straight to main;
///  6. main-log entry referenced since the hand last passed: copy it to main's head and
///     clear its bit (a second chance, while the call's budget lasts: see
///     `EvictionBudget`); otherwise remove it (an eviction);
///  7. advance the tail past the record.
/// A crash between any two steps leaves a dead record (skipped later), or a slot left
/// odd inside a move, whose entry repair keeps (`moveSlot`); see DESIGN.md.
extension CacheEngine {
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

  /// Entries allowed: the table's load limit, or the count limit when lower.
  var entryLimit: Int { countLimit > 0 ? min(layout.maxEntries, countLimit) : layout.maxEntries }

  /// Frees room for a record of `size` bytes in log `id`, and for a new entry of
  /// `liveDelta` key+value bytes. Returns whether anything moved (slots may have shifted).
  func makeRoom(_ id: LogID, size: Int, newEntry: Bool, liveDelta: Int, now: UInt64,
                enforceLimits: Bool = true) throws -> Bool {
    var changed = false
    var budget = EvictionBudget()
    let reserve = id == .main ? layout.mainReserve : 0
    var rounds = 0
    while true {
      let log = logState(id)
      let needLog = log.need(size) + reserve > log.free
      let needSlot = enforceLimits && newEntry && loadCount(Format.H.entries) >= entryLimit
      let needCost = enforceLimits && costLimit > 0 && loadCount(Format.H.liveBytes) + liveDelta > costLimit
      if !needLog && !needSlot && !needCost { return changed }
      rounds += 1
      if rounds > 4 * layout.slotCount + 1024 {
        throw CacheError.corrupted(path: path, reason: "eviction made no progress")
      }
      let victim: LogID
      if needLog {
        victim = id
      } else {
        // Limits: keep small's share near its tenth (S3-FIFO), or main is never swept.
        let small = logState(.small), main = logState(.main)
        victim = small.isEmpty ? .main : main.isEmpty || small.used * 10 >= small.used + main.used ? .small : .main
      }
      if logState(victim).isEmpty {
        if needLog && id == .small && size <= layout.smallSize {
          throw CacheError.corrupted(path: path, reason: "empty small log has no room")
        }
        if !needLog && logState(.main).isEmpty {
          // Limits cannot be met by evicting (e.g. a cost limit below one entry).
          return changed
        }
        throw CacheError.corrupted(path: path, reason: "empty log has no room for \(size) bytes")
      }
      try evictOne(victim, now: now, budget: &budget)
      changed = true
    }
  }

  /// Whether the entry at main's tail got into main unread and has not been read since.
  /// Pads and dead records at the tail are garbage: they are skipped (the tail moves).
  func mainTailIsUnearned(now: UInt64) -> Bool {
    for _ in 0..<64 {
      let main = logState(.main)
      guard !main.isEmpty else { return false }
      let loc = main.offset(main.tail)
      guard let rh = memory.recordHeader(at: loc), rh.size <= main.used else { return false }
      guard rh.kind != Format.kindPad, let i = findSlot(hash: rh.hash, loc: loc) else {
        advanceTail(.main, rh.size)
        continue
      }
      let m = slotMeta(i)
      return m & Format.unearnedBit != 0 && m & Format.referencedBit == 0
    }
    return false
  }

  /// Steps 2–7 for the record at the tail of log `id`.
  func evictOne(_ id: LogID, now: UInt64, budget: inout EvictionBudget) throws {
    let log = logState(id)
    let loc = log.offset(log.tail)
    guard let rh = memory.recordHeader(at: loc), rh.size <= log.used,
          loc + rh.size <= log.base + log.size else {
      throw CacheError.corrupted(path: path, reason: "bad record at the tail of the \(id) log")
    }
    guard rh.kind != Format.kindPad, let i = findSlot(hash: rh.hash, loc: loc) else {
      advanceTail(id, rh.size)  // a pad or a dead record
      return
    }
    let meta = slotMeta(i)
    if isExpired(meta, now: now) {
      removeSlot(i)
      bump(Format.H.expirations)
    } else if id == .small {
      let main = logState(.main)
      let mainHasRoom = main.need(rh.size) + layout.mainReserve <= main.free
      // While the cache is filling (log space, entry and cost limits all slack), new
      // entries flow into main unreferenced; once full, only referenced ones do.
      let underLimits = loadCount(Format.H.entries) < entryLimit
        && (costLimit == 0 || loadCount(Format.H.liveBytes) < costLimit)
      let referenced = meta & Format.referencedBit != 0
      // An unread newcomer may still displace an unread entry that only got into main
      // while the cache was filling: otherwise, with no reads at all, main would keep the
      // first fill for ever while every later entry cycles through the small log.
      let displaces = !referenced && !(mainHasRoom && underLimits) && mainTailIsUnearned(now: now)
      if displaces {
        try evictOne(.main, now: now, budget: &budget)
      }
      if referenced || (mainHasRoom && underLimits) || displaces {
        if !mainHasRoom {
          _ = try makeRoom(.main, size: rh.size, newEntry: false, liveDelta: 0, now: now, enforceLimits: false)
        }
        // Main's eviction may have shifted slots: find this entry again.
        if let j = findSlot(hash: rh.hash, loc: loc) {
          // Promoted unread (while filling, or displacing): mark it unearned.
          let m = slotMeta(j)
          let unearned = m & Format.referencedBit == 0 ? Format.unearnedBit : 0
          moveToMainHead(slot: j, record: loc, size: rh.size,
                         meta: (m & ~(Format.referencedBit | Format.unearnedBit)) | unearned)
          bump(Format.H.promotions)
        }
      } else {
        ghostRemember(rh.hash)
        removeSlot(i)
        bump(Format.H.evictions)
      }
    } else {
      let canMove = log.need(rh.size) <= log.free
      if meta & Format.referencedBit != 0 && budget.allowsCopy && canMove {
        budget.spend(rh.size)
        moveToMainHead(slot: i, record: loc, size: rh.size, meta: meta & ~(Format.referencedBit | Format.unearnedBit))
        bump(Format.H.reinsertions)
      } else {
        removeSlot(i)
        bump(Format.H.evictions)
      }
    }
    advanceTail(id, rh.size)
  }

  /// Copies slot `i`'s record (`size` bytes at `loc`) to the main log's head and points
  /// the slot there with `meta` (`moveSlot`): a promotion or a second chance. The old
  /// copy becomes dead once the caller advances its log's tail. Precondition: main has
  /// room for `size` bytes.
  @inline(__always)
  func moveToMainHead(slot i: Int, record loc: Int, size: Int, meta: UInt64, midway: () -> Void = {}) {
    let to = reserveAppend(.main, size)
    memory.moveRecord(from: loc, to: to, size: size)
    commitAppend(.main, size)
    moveSlot(i, loc: to, meta: meta, midway: midway)
  }
}

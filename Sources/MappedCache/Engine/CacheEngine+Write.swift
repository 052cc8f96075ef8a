/// The write protocol. Encoding, hashing and checksumming happen before the lock; under
/// it (`withWriteLock`, which first repairs after a dead writer):
///  1. mark the intent record (header `intent` = 1);
///  2. find the key's slot, or the empty slot that ends its probe run;
///  3. make room in the destination log (`makeRoom`: eviction steps);
///  4. write the record at the log's head (a pad first if it would wrap), then advance
///     the head: the record is complete before anything points to it;
///  5. publish: one seqlock write of the slot (`seq` odd, hash/loc/meta, `seq` even);
///  6. update counts; clear the intent record; release the lock.
/// A writer killed at any point leaves: before 5, an unreferenced record (garbage the
/// tail skips); during 5, an odd slot (cleared by the next writer's repair, which
/// finds `intent` = 1); after 5, a stored entry with stale counts (recounted by repair).
extension CacheEngine {
  @usableFromInline
  enum SetCondition: Equatable {
    case always
    case ifAbsent
    case ifPresent
    case ifVersion(UInt64)
  }

  @usableFromInline
  enum SetOutcome: Equatable {
    case stored(version: UInt64)
    case exists
    case notFound
    case conflict
  }

  /// An encoded entry, checked and hashed, ready to be stored under the lock.
  struct PreparedWrite {
    var hash: UInt64
    var sum: UInt32
    var recordSize: Int
    var expiry: UInt64
    /// Key and value go in the slot's inline area; the record is the header alone.
    var inline: Bool
  }

  @usableFromInline @inline(__always)
  func checkKey(_ key: UnsafeRawBufferPointer) throws(CacheError) {
    if key.count == 0 { throw .emptyKey }
    if key.count > layout.maxKey { throw .keyTooLarge(size: key.count, limit: layout.maxKey) }
  }

  /// Inlined: returned through memory from a call, the struct was copied with loads that
  /// overlapped the callee's stores, and each stalled until those reached the cache
  /// (28 % of `set`'s own time in a profile of write-only Zipf runs).
  @inline(__always)
  func prepare(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expiry: UInt64) throws(CacheError) -> PreparedWrite {
    try checkKey(key)
    if value.count > layout.maxValue { throw .valueTooLarge(size: value.count, limit: layout.maxValue) }
    let hash = KeyHash.key(key)
    // The key's home slot is where the locked part starts: fetch it now, so that its
    // cache miss overlaps the checksum and the lock rather than stalling under it.
    memory.prefetchSlot(memory.home(hash))
    let inline = key.count &+ value.count <= memory.inlineCapacity
    return PreparedWrite(hash: hash, sum: KeyHash.checksum(value, hash: hash),
                         recordSize: inline ? Format.headerOnlyRecordBytes : Format.recordSize(keyCount: key.count, valueCount: value.count),
                         expiry: expiry & Format.expiryMask, inline: inline)
  }

  /// Stores one entry. Precondition: the caller holds the write lock (`withWriteLock`).
  /// `now` is the expiry clock, or 0 to read it only if needed (an entry with an
  /// expiry to judge, or eviction): an overwrite in place reads no clock.
  func storeLocked(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite,
                   condition: SetCondition, now: UInt64 = 0) throws -> SetOutcome {
    var clock = now
    func currentTime() -> UInt64 {
      if clock == 0 { clock = Sys.expiryClockMilliseconds() }
      return clock
    }
    var found = find(key, hash: w.hash)
    var live = false
    switch found {
    case .found(let i, _, let rh):
      let meta = slotMeta(i)
      live = meta & Format.expiryMask == 0 || !isExpired(meta, now: currentTime())
      if case .ifVersion(let v) = condition, !live || rh.cas != v { return .conflict }
    case .empty:
      if case .ifVersion = condition { return .conflict }
    case .full:
      throw CacheError.corrupted(path: path, reason: "the index has no empty slot")
    }
    if condition == .ifAbsent && live { return .exists }
    if condition == .ifPresent && !live { return .notFound }

    // An inline entry overwritten by a value that also fits inline keeps its record
    // (which holds only the key) and its place in the eviction order: the whole write is
    // one seqlock write of the slot, with no log append and so no eviction work.
    if w.inline, case .found(let i, _, let rh) = found, rh.kind == Format.kindHeaderOnly,
       let outcome = rewriteInline(i, oldBytes: rh.klen + rh.vlen, key, value, w) {
      return outcome
    }

    var dest = LogID.small
    var oldLive = 0
    if case .found(_, let loc, let rh) = found {
      oldLive = rh.klen + rh.vlen
      if logID(of: loc) == .main { dest = .main }
    }
    if w.recordSize > layout.smallSize / 4 {
      dest = .main
    } else if case .empty = found, ghostRecall(w.hash) {
      dest = .main
    }
    let isNew: Bool
    if case .empty = found { isNew = true } else { isNew = false }
    if try makeRoom(dest, size: w.recordSize, newEntry: isNew, liveDelta: key.count + value.count - oldLive, now: currentTime()) {
      found = find(key, hash: w.hash)
    }
    let loc = reserveAppend(dest, w.recordSize)
    let cas = load(Format.H.casCounter) &+ 1
    store(Format.H.casCounter, cas)
    memory.writeRecord(at: loc, size: w.recordSize, key: key, value: value, headerOnly: w.inline,
                       sum: w.sum, hash: w.hash, cas: cas)
    commitAppend(dest, w.recordSize)
    func publish(_ i: Int, meta: UInt64) {
      if w.inline {
        writeSlotInline(i, hash: w.hash, loc: loc, meta: meta, key: key, value: value, sum: w.sum, cas: cas)
      } else {
        writeSlot(i, hash: w.hash, loc: loc, meta: meta)
      }
    }
    switch found {
    case .found(let i, _, let rh):
      publish(i, meta: w.expiry | (slotMeta(i) & Format.referencedBit))
      store(Format.H.liveBytes, load(Format.H.liveBytes) &- UInt64(rh.klen + rh.vlen) &+ UInt64(key.count + value.count))
    case .empty(let i):
      publish(i, meta: w.expiry)
      store(Format.H.liveBytes, load(Format.H.liveBytes) &+ UInt64(key.count + value.count))
      bump(Format.H.entries)
    case .full:
      throw CacheError.corrupted(path: path, reason: "the index has no empty slot")
    }
    bump(Format.H.sets)
    return .stored(version: cas)
  }

  @usableFromInline
  func set(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expiry: UInt64,
           condition: SetCondition = .always) throws -> SetOutcome {
    let w = try prepare(key, value, expiry: expiry)
    return try withWriteLock(checkingLogs: false) {
      if condition == .always, w.inline, let outcome = overwriteInPlace(key, value, w) { return outcome }
      repairIfLogsDamaged()
      return try storeLocked(key, value, w, condition: condition)
    }
  }

  /// The most common set on a short path of its own: `key` has an inline entry within a
  /// few slots of home and the new value fits inline too. The write is then
  /// `rewriteInline`, as in `storeLocked`, without the general lookup and case analysis
  /// around it. Returns nil, having changed
  /// nothing, for every other case. Precondition: the write lock is held, `w.inline`.
  @inline(__always)
  func overwriteInPlace(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
                        _ w: PreparedWrite) -> SetOutcome? {
    var i = memory.home(w.hash)
    for _ in 0..<8 {
      let h = slotHash(i)
      if h == 0 { return nil }
      if h == w.hash {
        guard slotMeta(i) & Format.inlineBit != 0, let l = memory.inlineLengths(i), l.klen == key.count,
              memory.inlineKeyEquals(i, key) else { return nil }
        return rewriteInline(i, oldBytes: l.klen + l.vlen, key, value, w)
      }
      i = memory.next(i)
    }
    return nil
  }

  /// Rewrites slot `i`'s inline entry (`oldBytes` of key and value) with `key` and
  /// `value` in place: one seqlock write of the slot, no log append. The entry keeps its
  /// record (which holds only the key) and so its place in the eviction order,
  /// and its reference bit. Returns nil, having changed nothing, when the new size
  /// would pass the cost limit (the general path then makes room). Preconditions: the
  /// write lock is held, slot `i` holds `key` inline, `w.inline`.
  @inline(__always)
  func rewriteInline(_ i: Int, oldBytes: Int, _ key: UnsafeRawBufferPointer,
                     _ value: UnsafeRawBufferPointer, _ w: PreparedWrite) -> SetOutcome? {
    let live = loadCount(Format.H.liveBytes) - oldBytes + key.count + value.count
    guard costLimit == 0 || live <= costLimit else { return nil }
    let cas = load(Format.H.casCounter) &+ 1
    store(Format.H.casCounter, cas)
    // Hash, loc and key stay as they are: only meta and the value change.
    rewriteSlotValue(i, klen: key.count, meta: w.expiry | (slotMeta(i) & Format.referencedBit), value: value,
                     sum: w.sum, cas: cas)
    store(Format.H.liveBytes, UInt64(max(0, live)))
    bump(Format.H.sets)
    return .stored(version: cas)
  }

  /// Removes `key`; false when it was not present.
  func remove(_ key: UnsafeRawBufferPointer) throws -> Bool {
    try checkKey(key)
    let hash = KeyHash.key(key)
    return try withWriteLock {
      guard case .found(let i, _, _) = find(key, hash: hash) else { return false }
      removeSlot(i)
      bump(Format.H.removes)
      return true
    }
  }

  /// Removes each of `keys` under one hold of the write lock (an invalidation batch);
  /// returns how many were present. Every key is checked before anything is removed.
  func remove(keys: [[UInt8]]) throws -> Int {
    for k in keys { try k.withUnsafeBytes { try checkKey($0) } }
    return try withWriteLock {
      var removed = 0
      for k in keys {
        k.withUnsafeBytes { key in
          guard case .found(let i, _, _) = find(key, hash: KeyHash.key(key)) else { return }
          removeSlot(i)
          bump(Format.H.removes)
          removed += 1
        }
      }
      return removed
    }
  }

  /// Changes the expiry of a live entry, keeping its value; false when absent.
  func touch(_ key: UnsafeRawBufferPointer, expiry: UInt64) throws -> Bool {
    try checkKey(key)
    let hash = KeyHash.key(key)
    return try withWriteLock {
      let now = Sys.expiryClockMilliseconds()
      guard case .found(let i, let loc, _) = find(key, hash: hash), !isExpired(slotMeta(i), now: now) else { return false }
      let keep = slotMeta(i) & (Format.referencedBit | Format.inlineBit)
      writeSlot(i, hash: hash, loc: loc, meta: (expiry & Format.expiryMask) | keep)
      return true
    }
  }

  /// Removes every entry.
  func removeAll() throws {
    try withWriteLock { removeAllLocked() }
  }

  func removeAllLocked() {
    let shift = memory.word(Format.H.shiftSeq)
    shift.pointee.wrappingAdd(1, ordering: .relaxed)
    for i in 0..<layout.slotCount where slotHash(i) != 0 || memory.slot(i, Format.S.seq).pointee.load(ordering: .relaxed) & 1 != 0 {
      let seq = memory.slot(i, Format.S.seq)
      if seq.pointee.load(ordering: .relaxed) & 1 != 0 { seq.pointee.wrappingAdd(1, ordering: .relaxed) }
      writeSlot(i, hash: 0, loc: 0, meta: 0)
    }
    store(Format.H.smallTail, load(Format.H.smallHead))
    store(Format.H.mainTail, load(Format.H.mainHead))
    store(Format.H.entries, 0)
    store(Format.H.liveBytes, 0)
    ghostClear()
    shift.pointee.wrappingAdd(1, ordering: .releasing)
  }

  /// Removes the expired entries of slots `start ..< start+count` (wrapping). Removal
  /// pulls a later entry into the slot, so each slot is looked at until it stays.
  /// Precondition: the caller holds the write lock. Returns how many it removed and the
  /// slot after the range.
  private func expireSlots(from start: Int, count: Int, now: UInt64) -> (removed: Int, next: Int) {
    let n = layout.slotCount
    var i = start, removed = 0
    for _ in 0..<count {
      var guardCount = 0
      while slotHash(i) != 0, isExpired(slotMeta(i), now: now), guardCount < n {
        removeSlot(i)
        bump(Format.H.expirations)
        removed += 1
        guardCount += 1
      }
      i = memory.next(i)
    }
    return (removed, i)
  }

  /// Slots examined per hold of the write lock by the sweeps below: other writers wait
  /// at most one step.
  static let sweepStep = 4096

  /// One step of the background sweeper: `maxSlots` slots from the shared sweep hand,
  /// which it advances. Returns how many entries it removed.
  func removeExpired(maxSlots: Int) throws -> Int {
    try withWriteLock {
      let n = layout.slotCount
      let r = expireSlots(from: Int(load(Format.H.sweepHand) % UInt64(n)), count: min(max(1, maxSlots), n),
                          now: Sys.expiryClockMilliseconds())
      store(Format.H.sweepHand, UInt64(r.next))
      return r.removed
    }
  }

  /// Removes every expired entry, `sweepStep` slots per hold of the write lock (leaving
  /// the background sweeper's hand alone). An entry that expires, or that other writers
  /// move, while it runs may be left for the next sweep. Returns how many it removed.
  func removeExpired() throws -> Int {
    let n = layout.slotCount
    var removed = 0
    var start = 0
    while start < n {
      let count = min(Self.sweepStep, n - start)
      removed += try withWriteLock { expireSlots(from: start, count: count, now: Sys.expiryClockMilliseconds()).removed }
      start += count
    }
    return removed
  }

  /// Sets the count and cost limits stored in the file (0 = none) and evicts down to them.
  func setLimits(count: Int?, cost: Int?) throws {
    try withWriteLock {
      if let count { store(Format.H.countLimit, UInt64(max(0, count))) }
      if let cost { store(Format.H.costLimit, UInt64(max(0, cost))) }
      let now = Sys.expiryClockMilliseconds()
      var budget = EvictionBudget.noSecondChances
      var guardCount = 0
      while guardCount < 4 * layout.slotCount {
        let overCount = countLimit > 0 && loadCount(Format.H.entries) > countLimit
        let overCost = costLimit > 0 && loadCount(Format.H.liveBytes) > costLimit
        guard overCount || overCost else { break }
        let victim: LogID = logState(.small).isEmpty ? .main : .small
        if logState(victim).isEmpty { break }
        try evictOne(victim, now: now, budget: &budget)
        guardCount += 1
      }
    }
  }
}

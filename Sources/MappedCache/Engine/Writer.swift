import SystemCalls

/// The write side: every change to the table, each under the write lock (each function
/// takes its witness). The write protocol, as `store` numbers it (encoding, hashing and
/// checksumming happen before the lock, in `prepare`; `CacheEngine.withWriteLock`
/// repairs first if the last holder died mid-change):
///  1. mark the intent record (header `intent` = 1; `withWriteLock` does it);
///  2. find the key's slot, or the empty slot that ends its probe run;
///  3. make room in the destination log (`EvictionPolicy.makeRoom`: eviction steps);
///  4. write the record at the log's head (a pad first if it would wrap), then advance
///     the head: the record is complete before anything points to it;
///  5. publish: one seqlock write of the slot (`seq` odd, hash/loc/meta, `seq` even);
///  6. update counts; clear the intent record; release the lock (`withWriteLock`).
/// A writer killed at any point leaves: before 5, an unreferenced record (garbage the
/// tail skips); during 5, an odd slot (cleared by the next writer's repair, which
/// finds `intent` = 1); after 5, a stored entry with stale counts (recounted by repair).
/// An inline entry overwritten by an inline value skips steps 3 and 4: its whole write
/// is step 5 (`rewriteInline`).
struct Writer {
  let index: SlotIndex
  let logs: RecordLogs
  let policy: EvictionPolicy
  let counters: TableCounters
  let maxKey: Int
  let maxValue: Int
  let path: String

  typealias SetCondition = CacheEngine.SetCondition
  typealias SetOutcome = CacheEngine.SetOutcome

  /// An encoded entry, checked and hashed, ready to be stored under the lock.
  struct PreparedWrite {
    var hash: UInt64
    var sum: UInt32
    var recordSize: Int
    var expiry: UInt64
    /// Key and value go in the slot's inline area; the record is the header alone.
    var inline: Bool
  }

  @inline(__always)
  func checkKey(_ key: UnsafeRawBufferPointer) throws(CacheError) {
    if key.count == 0 { throw .emptyKey }
    if key.count > maxKey { throw .keyTooLarge(size: key.count, limit: maxKey) }
  }

  /// Checks, hashes and checksums an entry, before the lock. Inlined: returned through
  /// memory from a call, the struct was copied with loads that overlapped the callee's
  /// stores, and each stalled until those reached the cache (28 % of `set`'s own time
  /// in a profile of write-only Zipf runs).
  /// With `prefetch` false the caller prefetches the home slot itself (the batch write
  /// prefetches a whole group's in a loop of their own, as the batch read does).
  @inline(__always)
  func prepare(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
    expiry: UInt64, prefetch: Bool = true
  ) throws(CacheError) -> PreparedWrite {
    try checkKey(key)
    if value.count > maxValue { throw .valueTooLarge(size: value.count, limit: maxValue) }
    let hash = KeyHash.key(key)
    // The key's home slot is where the locked part starts: fetch it now, so that its
    // cache miss overlaps the checksum and the lock rather than stalling under it.
    if prefetch { index.memory.prefetchSlot(index.home(hash)) }
    let inline = key.count &+ value.count <= index.memory.inlineCapacity
    let size = inline ? Format.headerOnlyRecordBytes : Format.recordSize(keyCount: key.count, valueCount: value.count)
    return PreparedWrite(
      hash: hash, sum: KeyHash.checksum(value, hash: hash), recordSize: size,
      expiry: expiry == 0 ? 0 : Expiry.stamp(expiry, now: Sys.wallClockMilliseconds()), inline: inline)
  }

  /// Stores one entry: the write protocol, steps 2–6 (see the type's comment). `now` is
  /// the expiry clock, or 0 to read it when first needed: for an old entry with an
  /// expiry, and for step 3 (eviction judges expiry), which every store that reaches it
  /// runs; only the in-place rewrite of an inline entry reads no clock.
  @inline(__always)
  func store(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite,
    condition: SetCondition, now: UInt64 = 0, _ held: borrowing WriteLock.Held
  ) throws -> SetOutcome {
    // Read when first needed. (Plain code, not a nested function capturing `clock`:
    // that capture is a heap box in unoptimised builds, an allocation per store.)
    var clock = now
    // 2. Find the key's slot (and judge the condition against what is there).
    var found = index.find(key, hash: w.hash, held)
    let old: SlotIndex.Entry?
    switch found {
    case .found(let i, let e):
      // The clock is read only for an entry that can expire.
      let meta = index.meta(at: i)
      if meta & Format.expiryMask != 0 && clock == 0 { clock = Sys.expiryClockMilliseconds() }
      old = meta & Format.expiryMask != 0 && Expiry.isExpired(meta, now: clock) ? nil : e
      if let refusal = refusal(condition, live: old) { return refusal }
      // An inline entry overwritten by a value that also fits inline keeps its record
      // (which holds only the key) and its place in the eviction order: the whole write
      // is one seqlock write of the slot (step 5 alone).
      if w.inline, e.inline, let outcome = rewriteInline(i, oldBytes: e.liveBytes, key, value, w, held) {
        return outcome
      }
    case .empty:
      old = nil
      if let refusal = refusal(condition, live: nil) { return refusal }
    case .full:
      throw CacheError.corrupted(path: path, reason: "the index has no empty slot")
    }

    // 3. Make room in the destination log.
    let isNew: Bool
    let oldBytes: Int
    if case .found(_, let e) = found { (isNew, oldBytes) = (false, e.liveBytes) } else { (isNew, oldBytes) = (true, 0) }
    let dest = destination(of: found, w, held)
    let liveDelta = key.count + value.count - oldBytes
    if clock == 0 { clock = Sys.expiryClockMilliseconds() }
    if try policy.makeRoom(dest, size: w.recordSize, newEntry: isNew, liveDelta: liveDelta, now: clock, held) {
      found = index.find(key, hash: w.hash, held)  // eviction may have shifted slots
    }

    // 4. Write the record at the log's head, then advance the head.
    let loc = logs.reserve(dest, w.recordSize, held)
    let cas = counters.nextVersion(held)
    index.memory.writeRecord(
      at: loc, size: w.recordSize, key: key, value: value, headerOnly: w.inline,
      sum: w.sum, hash: w.hash, cas: cas, held)
    logs.commit(dest, w.recordSize, held)

    // 5. Publish: one seqlock write of the slot.
    let slot: Int
    let oldBytesHere: Int
    switch found {
    case .found(let i, let e): (slot, oldBytesHere) = (i, e.liveBytes)
    case .empty(let i): (slot, oldBytesHere) = (i, -1)
    case .full: throw CacheError.corrupted(path: path, reason: "the index has no empty slot")
    }
    publish(slot, key, value, w, loc: loc, cas: cas, held)

    // 6. Counts (a writer killed before them leaves counts that repair recounts).
    counters.changeLiveBytes(adding: key.count + value.count, removing: max(0, oldBytesHere), held)
    if oldBytesHere < 0 { counters.bump(.entries, held) }
    counters.bump(.sets, held)
    return .stored(version: cas)
  }

  /// Step 3's choice of log: main for an entry already there, a record too large for the
  /// small log, or a new key the ghost table remembers (and forgets); small otherwise.
  private func destination(of found: SlotIndex.Find, _ w: PreparedWrite, _ held: borrowing WriteLock.Held) -> LogID {
    if case .found(_, let e) = found, logs.id(containing: e.loc) == .main { return .main }
    if w.recordSize > logs.smallSize / 4 { return .main }
    if case .empty = found, policy.ghost.recall(w.hash, held) {
      policy.noteReuse(held)
      return .main
    }
    return .small
  }

  /// Step 5: points slot `slot` at the record just written at `loc` (inline entries also
  /// carry their key and value in the slot), keeping an old entry's reference bit.
  @inline(__always)
  private func publish(
    _ slot: Int, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
    _ w: PreparedWrite, loc: Int, cas: UInt64, _ held: borrowing WriteLock.Held
  ) {
    let meta = w.expiry | (index.meta(at: slot) & Format.referencedBit)
    if w.inline {
      index.publishInline(slot, hash: w.hash, loc: loc, meta: meta, key: key, value: value, sum: w.sum, cas: cas, held)
    } else {
      index.publish(slot, hash: w.hash, loc: loc, meta: meta, held)
    }
  }

  /// The outcome that refuses a conditional store, given the live entry (nil: absent or
  /// expired), or nil when the store goes ahead.
  @inline(__always)
  private func refusal(_ condition: SetCondition, live: SlotIndex.Entry?) -> SetOutcome? {
    switch condition {
    case .always: return nil
    case .ifAbsent: return live == nil ? nil : .exists
    case .ifPresent: return live == nil ? .notFound : nil
    case .ifVersion(let v): return live?.cas == v ? nil : .conflict
    }
  }

  /// The most common set on a short path of its own: `key` has an inline entry within
  /// `SlotIndex.shortProbe` slots of home and the new value fits inline too. The write
  /// is then `rewriteInline`, as in `store`, without the general lookup and case
  /// analysis around it. Returns nil, having changed nothing, for every other case.
  /// Precondition: `w.inline`.
  @inline(__always)
  func overwriteInPlace(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite,
    _ held: borrowing WriteLock.Held
  ) -> SetOutcome? {
    var i = index.home(w.hash)
    for _ in 0..<SlotIndex.shortProbe {
      let h = index.hash(at: i)
      if h == 0 { return nil }
      if h == w.hash {
        let meta = index.meta(at: i)
        guard meta & Format.inlineBit != 0, let e = index.entry(at: i, meta: meta, matching: key) else { return nil }
        return rewriteInline(i, oldBytes: e.liveBytes, key, value, w, held)
      }
      i = index.next(i)
    }
    return nil
  }

  /// Rewrites slot `i`'s inline entry (`oldBytes` of key and value) with `key` and
  /// `value` in place: one seqlock write of the slot, no log append. The entry keeps its
  /// record (which holds only the key) and so its place in the eviction order,
  /// and its reference bit. Returns nil, having changed nothing, when the new size
  /// would pass the cost limit (the general path then makes room). Preconditions: slot
  /// `i` holds `key` inline, `w.inline`.
  @inline(__always)
  func rewriteInline(
    _ i: Int, oldBytes: Int, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
    _ w: PreparedWrite, _ held: borrowing WriteLock.Held
  ) -> SetOutcome? {
    let live = counters.count(.liveBytes) - oldBytes + key.count + value.count
    let costLimit = counters.costLimit
    guard costLimit == 0 || live <= costLimit else { return nil }
    let cas = counters.nextVersion(held)
    // Hash, loc and key stay as they are: only meta and the value change.
    index.rewriteInlineValue(
      i, klen: key.count, meta: w.expiry | (index.meta(at: i) & Format.referencedBit),
      value: value, sum: w.sum, cas: cas, held)
    counters.set(.liveBytes, UInt64(max(0, live)), held)
    counters.bump(.sets, held)
    return .stored(version: cas)
  }

  /// Removes `key`; false when it was not present.
  func remove(_ key: UnsafeRawBufferPointer, hash: UInt64, _ held: borrowing WriteLock.Held) -> Bool {
    guard case .found(let i, _) = index.find(key, hash: hash, held) else { return false }
    index.remove(i, counters: counters, held)
    counters.bump(.removes, held)
    return true
  }

  /// Changes the expiry of a live entry, keeping its value; false when absent or expired.
  func touch(
    _ key: UnsafeRawBufferPointer, hash: UInt64, expiry: UInt64, now: UInt64,
    _ held: borrowing WriteLock.Held
  ) -> Bool {
    guard case .found(let i, _) = index.find(key, hash: hash, held) else { return false }
    let meta = index.meta(at: i)
    guard !Expiry.isExpired(meta, now: now) else { return false }
    index.setMeta(i, Expiry.stamp(expiry, now: now) | (meta & (Format.referencedBit | Format.inlineBit)), held)
    return true
  }

  /// Removes every entry: every slot emptied, both logs discarded, the ghost forgotten.
  func removeAll(_ held: borrowing WriteLock.Held) {
    index.shifting(held) {
      for i in 0..<index.slotCount where index.hash(at: i) != 0 || index.isMidWrite(i) {
        index.clearLeftMidWrite(i, held)
      }
      logs.discardAll(.small, held)
      logs.discardAll(.main, held)
      counters.set(.entries, 0, held)
      counters.set(.liveBytes, 0, held)
      policy.ghost.clear(held)
    }
  }

  /// Removes the expired entries of slots `start ..< start+count` (wrapping). Removal
  /// pulls a later entry into the slot, so each slot is looked at until it stays.
  /// Returns how many it removed and the slot after the range.
  func expireSlots(
    from start: Int, count: Int, now: UInt64,
    _ held: borrowing WriteLock.Held
  ) -> (removed: Int, next: Int) {
    var i = start
    var removed = 0
    for _ in 0..<count {
      var pulled = 0
      while index.hash(at: i) != 0, Expiry.isExpired(index.meta(at: i), now: now), pulled < index.slotCount {
        index.remove(i, counters: counters, held)
        counters.bump(.expirations, held)
        removed += 1
        pulled += 1
      }
      i = index.next(i)
    }
    return (removed, i)
  }

  /// What an update's closure decides.
  enum UpdateAction {
    /// Leave the entry as it is.
    case keep
    /// Remove the entry (nothing happens when it is absent).
    case remove
    /// Store these bytes with this expiry (absolute ms, 0 = never).
    case store([UInt8], expiry: UInt64)
  }

  enum UpdateOutcome: Equatable {
    case kept
    case removed
    case stored(version: UInt64)
  }

  /// Read-modify-write of one entry: the building block of `increment`/`decrement` and
  /// other updates that must be atomic across processes.
  ///  1. find the key's slot; an expired entry, or one whose checksum fails, counts as absent;
  ///  2. hand the current value bytes (a view into the mapping, valid only during the
  ///     closure: the lock keeps them from changing) and its info to the closure;
  ///  3. apply the closure's answer: keep, remove, or store new bytes through the write
  ///     protocol (`store`), so crash safety is the same as for a set.
  /// The closure runs while the lock is held: it must be short and must not touch the cache.
  func update(
    _ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt64, _ held: borrowing WriteLock.Held,
    _ body: (_ current: UnsafeRawBufferPointer?, _ info: EntryInfo?) throws -> UpdateAction
  )
    throws -> UpdateOutcome
  {
    var slot: Int? = nil
    var action: UpdateAction
    if case .found(let i, let e) = index.find(key, hash: hash, held), !Expiry.isExpired(index.meta(at: i), now: now),
      case let bytes = index.bytes(of: e, slot: i).value, KeyHash.checksum(bytes, hash: hash) == e.sum
    {
      slot = i
      let expiry = index.meta(at: i) & Format.expiryMask
      let info = EntryInfo(
        valueCount: e.vlen, expiryMilliseconds: expiry == 0 ? nil : expiry, version: e.cas,
        isExpired: false)
      action = try body(bytes, info)
    } else {
      action = try body(nil, nil)
    }
    switch action {
    case .keep:
      return .kept
    case .remove:
      if let i = slot {
        index.remove(i, counters: counters, held)
        counters.bump(.removes, held)
      }
      return .removed
    case .store(let value, let expiry):
      let outcome = try value.withUnsafeBytes { v in
        let w = try prepare(key, v, expiry: expiry)
        return try store(key, v, w, condition: .always, now: now, held)
      }
      guard case .stored(let version) = outcome else {
        throw CacheError.corrupted(path: path, reason: "an unconditional store under the lock did not store")
      }
      return .stored(version: version)
    }
  }
}

import SystemCalls

/// The batch write (multi-set): many entries, given as the caller's key and value
/// buffers, stored under one hold of the write lock, allocating nothing.
///
/// 0. Check every entry's key and value size: a bad one throws before anything is
///    stored (and before the lock).
/// 1. Prepare a group of `batchGroup` entries (`Writer.prepare`: hash, checksum,
///    expiry), into a stack buffer; then prefetch every entry's home slot for writing.
/// 2. For each entry of the group whose home slot holds its hash in a record (a hint,
///    loaded outside any seqlock), prefetch the record: `SlotIndex.find` compares the
///    key there. The group's misses are then in flight together.
/// 3. Under the lock, store each entry of the group as a single `set` stores it (the
///    in-place rewrite of an inline entry when it applies, else `Writer.store`), having
///    first prepared the next group into a second buffer (steps 1-2), so that its
///    misses overlap these stores.
///
/// The first group is prepared before the lock is taken, so a batch of up to
/// `batchGroup` entries has all its misses, hashing and checksums outside the hold.
/// Steps 1-2 trust nothing they load; step 3 is the single set, so a batch stores what
/// setting its entries one by one, in order, would store (a key given twice keeps its
/// last value), with the same evictions.
extension CacheEngine {
  /// Stores `values[j]` under `keys[j]` for every `j`, in order, under one hold of the
  /// lock (`SharedCache.setBytes(_:forKeys:expires:)`, `setObjects`), every entry with
  /// `expiry` (absolute ms, 0 = never). Other processes see a prefix of the batch while
  /// it runs, and all of it after. Allocates nothing.
  /// - Throws: `emptyKey`, `keyTooLarge` or `valueTooLarge` for the first bad entry,
  ///   before anything is stored; `readOnly`; whatever a single store throws.
  /// Precondition: `keys.count == values.count`.
  @usableFromInline
  func set(
    keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    expiry: UInt64
  ) throws {
    precondition(keys.count == values.count, "batch buffers of different counts")
    // 0. Check every entry first.
    for j in 0..<keys.count {
      try checkEntry(keys[j], values[j])
    }
    let n = keys.count
    guard n > 0 else { return }
    guard lock != nil else { throw CacheError.readOnly(path: path) }
    let group = Self.batchGroup
    try withUnsafeTemporaryAllocation(of: PreparedWrite.self, capacity: group) { first in
      try withUnsafeTemporaryAllocation(of: PreparedWrite.self, capacity: group) { second in
        try prepareGroup(keys, values, from: 0, expiry: expiry, into: first)
        var retried = false
        try withWriteLock { held in
          // A body run again after a repair (`withWriteLock`) starts from the first group.
          if retried { try prepareGroup(keys, values, from: 0, expiry: expiry, into: first) }
          retried = true
          let now = Sys.expiryClockMilliseconds()
          var current = first
          var next = second
          var start = 0
          while start < n {
            let count = min(group, n &- start)
            let after = start &+ count
            if after < n { try prepareGroup(keys, values, from: after, expiry: expiry, into: next) }
            for j in 0..<count {
              let k = keys[start &+ j]
              let v = values[start &+ j]
              let w = current[j]
              if w.inline, writer.overwriteInPlace(k, v, w, held) != nil { continue }
              _ = try store(k, v, w, condition: .always, now: now, held)
            }
            swap(&current, &next)
            start = after
          }
        }
      }
    }
  }

  /// Step 0 for one entry: the key's and the value's sizes, as `prepare` checks them.
  @inline(__always)
  func checkEntry(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws(CacheError) {
    try writer.checkKey(key)
    if value.count > layout.maxValue { throw .valueTooLarge(size: value.count, limit: layout.maxValue) }
  }

  /// Steps 1-2 for the group of entries starting at `start`, into `out`.
  @inline(__always)
  private func prepareGroup(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    from start: Int, expiry: UInt64, into out: UnsafeMutableBufferPointer<PreparedWrite>
  ) throws(CacheError) {
    let count = min(Self.batchGroup, keys.count &- start)
    for j in 0..<count {
      out.initializeElement(
        at: j, to: try writer.prepare(keys[start &+ j], values[start &+ j], expiry: expiry, prefetch: false))
    }
    // The home slots after all the hashing and checksums, in a loop of their own, so
    // that the whole group's misses start together (see `prefetchGroup`).
    for j in 0..<count { memory.prefetchSlot(index.home(out[j].hash)) }
    // (A table whose entries all fit inline skips the loads: no record holds a key.)
    guard memory.inlineCapacity < maxKey &+ layout.maxValue else { return }
    for j in 0..<count {
      let h = out[j].hash
      let i = index.home(h)
      if index.hash(at: i) == h && index.meta(at: i) & Format.inlineBit == 0 {
        memory.prefetchRecord(at: index.loc(at: i))
      }
    }
  }
}

import SystemCalls

/// The batch write (multi-set): many entries, given as the caller's key and value
/// buffers, stored with one hold of each partition's lock, allocating nothing for
/// batches of up to a few hundred entries.
///
/// 0. Check every entry's key and value size: a bad one throws before anything is
///    stored (and before any lock).
/// 1. Hash every key, and order the entries by partition (a counting sort, stable: a
///    partition's entries keep their order).
/// 2. For each partition with entries: prepare its first `batchGroup` entries
///    (`Writer.prepare`: hash, checksum, expiry) into a stack buffer, then prefetch their
///    first buckets for writing, before its lock; under the lock, store each entry of
///    the group as a single set stores it (`Writer.store`), having first prepared the
///    next group into a second buffer, so that its misses overlap these stores.
///
/// Steps 1-2 trust nothing they load; each store is the single set, so a batch stores
/// what setting its entries one by one would store (a key given twice keeps its last
/// value: both are in its partition, in order), with the same evictions.
extension CacheEngine {
  /// Stores `values[j]` under `keys[j]` for every `j`, each partition's entries in order
  /// under one hold of its lock (`SharedCache.setBytes(_:forKeys:expires:)`,
  /// `setObjects`), every entry with `expiry` (absolute ms, 0 = never). Other processes
  /// see some partitions' entries before others' while it runs, and all of them after.
  /// - Throws: `emptyKey`, `keyTooLarge` or `valueTooLarge` for the first bad entry,
  ///   before anything is stored; `readOnly`; whatever a single store throws.
  /// Precondition: `keys.count == values.count`.
  @usableFromInline
  func set(
    keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    expiry: UInt64
  ) throws {
    precondition(keys.count == values.count, "batch buffers of different counts")
    // 0.
    for j in 0..<keys.count { try checkEntry(keys[j], values[j]) }
    let n = keys.count
    guard n > 0 else { return }
    guard lock != nil else { throw CacheError.readOnly(path: path) }
    // Routed again from the start when the file grows meanwhile: the partitions stored
    // already are stored again, to the same values.
    while true {
      let parts = currentPartitionCount
      do {
        try set(keys, values, partitions: parts, expiry: expiry)
        return
      } catch is Rerouted {
        continue
      }
    }
  }

  /// Steps 1-2, keys routed by `parts` partitions.
  private func set(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    partitions parts: Int, expiry: UInt64
  ) throws {
    let n = keys.count
    // 1.
    try withUnsafeTemporaryAllocation(of: Int.self, capacity: n) { order in
      try withUnsafeTemporaryAllocation(of: Int.self, capacity: parts + 1) { starts in
        starts.initialize(repeating: 0)
        for j in 0..<n { starts[IndexGeometry.partition(KeyHash.key(keys[j]), count: parts) &+ 1] &+= 1 }
        for p in 0..<parts { starts[p &+ 1] &+= starts[p] }
        withUnsafeTemporaryAllocation(of: Int.self, capacity: parts) { next in
          for p in 0..<parts { next[p] = starts[p] }
          for j in 0..<n {
            let p = IndexGeometry.partition(KeyHash.key(keys[j]), count: parts)
            order[next[p]] = j
            next[p] &+= 1
          }
        }
        // 2.
        for p in 0..<parts where starts[p &+ 1] > starts[p] {
          let slice = UnsafeBufferPointer(rebasing: order[starts[p]..<starts[p &+ 1]])
          try set(keys, values, order: slice, partition: p, routedWith: parts, expiry: expiry)
        }
      }
    }
  }

  /// Step 2 for partition `p`: the entries `order` names, in order, under one hold of its lock.
  private func set(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    order: UnsafeBufferPointer<Int>, partition p: Int, routedWith parts: Int, expiry: UInt64
  ) throws {
    let group = Self.batchGroup
    let n = order.count
    try withUnsafeTemporaryAllocation(of: PreparedWrite.self, capacity: group) { first in
      try withUnsafeTemporaryAllocation(of: PreparedWrite.self, capacity: group) { second in
        try prepareGroup(keys, values, order, from: 0, expiry: expiry, into: first)
        var retried = false
        try withWriteLock(partition: p, routedWith: parts) { part in
          // A body run again after a repair (`withWriteLock`) starts from the first group.
          if retried { try prepareGroup(keys, values, order, from: 0, expiry: expiry, into: first) }
          retried = true
          let now = SystemCall.expiryClockMilliseconds()
          var current = first
          var next = second
          var start = 0
          while start < n {
            let count = min(group, n &- start)
            let after = start &+ count
            if after < n { try prepareGroup(keys, values, order, from: after, expiry: expiry, into: next) }
            for j in 0..<count {
              let k = order[start &+ j]
              _ = try store(keys[k], values[k], current[j].routed(to: p), condition: .always, now: now, part)
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

  /// Prepares the group of entries `order[start...]` names into `out`, then prefetches
  /// their first buckets in a loop of their own, so that the whole group's misses start
  /// together (see `prefetchGroup`).
  @inline(__always)
  private func prepareGroup(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    _ order: UnsafeBufferPointer<Int>, from start: Int, expiry: UInt64,
    into out: UnsafeMutableBufferPointer<PreparedWrite>
  ) throws(CacheError) {
    let count = min(Self.batchGroup, order.count &- start)
    for j in 0..<count {
      let k = order[start &+ j]
      out.initializeElement(at: j, to: try writer.prepare(keys[k], values[k], expiry: expiry, prefetch: false))
    }
    for j in 0..<count { writer.prefetchFirstBucket(out[j].hash, partition: out[j].partition) }
  }
}

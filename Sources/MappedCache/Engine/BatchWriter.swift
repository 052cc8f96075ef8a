/// The batch write (multi-set): many entries stored under one hold of the write lock.
///
/// Every entry is checked, hashed and checksummed before the lock (`Writer.prepare`,
/// which also prefetches its home slot for writing, so the first entries' misses overlap
/// the rest of the preparation and the lock's acquisition). Under the lock, each entry
/// is stored as a single `set` stores it (the in-place rewrite of an inline entry when it
/// applies, else the write protocol, `Writer.store`), while the home slot of the entry
/// `batchWriteAhead` places further on is prefetched again: in a long batch the slots
/// prefetched before the lock have left the cache by the time their turn comes.
extension CacheEngine {
  /// How far ahead of the entry being stored the batch write prefetches a home slot.
  static let batchWriteAhead = 8

  /// One entry of a batch write: its bytes and what `prepare` made of them.
  typealias BatchEntry = (key: [UInt8], value: [UInt8], write: PreparedWrite)

  /// Stores prepared entries under one hold of the lock (`SharedCache.setObjects`), in
  /// order (a key given twice keeps its last value). Other processes see a prefix of the
  /// batch while it runs, and all of it after.
  func set(batch: [BatchEntry]) throws {
    try withWriteLock { held in
      let now = Sys.expiryClockMilliseconds()
      for (j, item) in batch.enumerated() {
        if j &+ Self.batchWriteAhead < batch.count {
          memory.prefetchSlot(index.home(batch[j &+ Self.batchWriteAhead].write.hash))
        }
        _ = try item.key.withUnsafeBytes { k in
          try item.value.withUnsafeBytes { v in
            if item.write.inline, let outcome = writer.overwriteInPlace(k, v, item.write, held) { return outcome }
            return try store(k, v, item.write, condition: .always, now: now, held)
          }
        }
      }
    }
  }
}

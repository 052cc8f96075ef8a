/// `increment`'s locked step (`Writer.rewriteInPlace`).
extension CacheEngine {
  /// Changes `key`'s inline value in its slot under the write lock (`Writer.rewriteInPlace`):
  /// false, having changed nothing, when that does not apply (the caller then updates
  /// through `update`). `expiry`: absolute milliseconds (0 = never), nil to keep the
  /// entry's. Errors `body` throws are rethrown with nothing changed.
  @usableFromInline
  func rewriteInPlace(
    _ key: UnsafeRawBufferPointer, expiry: UInt64?,
    _ body: (_ current: UnsafeRawBufferPointer, _ out: UnsafeMutableRawBufferPointer) throws -> Int
  ) throws -> Bool {
    try rewriteInPlace(key, expiry: expiry, midway: {}, body)
  }

  /// `rewriteInPlace`, running `midway` inside the slot's seqlock write (a test hook).
  @inline(__always)
  func rewriteInPlace(
    _ key: UnsafeRawBufferPointer, expiry: UInt64?, midway: () -> Void,
    _ body: (_ current: UnsafeRawBufferPointer, _ out: UnsafeMutableRawBufferPointer) throws -> Int
  ) throws -> Bool {
    try checkKey(key)
    let hash = KeyHash.key(key)
    // As a set does: the slot's cache miss overlaps the lock's acquisition.
    memory.prefetchSlot(index.home(hash))
    // The rewrite touches only the slot, never a log: the log bounds need no check.
    return try withWriteLock(checkingLogs: false) { held in
      try writer.rewriteInPlace(key, hash: hash, expiry: expiry, midway: midway, held, body)
    }
  }
}

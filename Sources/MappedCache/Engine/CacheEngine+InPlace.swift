/// `increment`'s locked step (`Writer.rewriteInPlace`).
extension CacheEngine {
  /// Changes `key`'s value where it stands under the write lock (`Writer.rewriteInPlace`):
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

  /// `rewriteInPlace`, running `midway` inside the bucket's seqlock write (a test hook).
  @inline(__always)
  func rewriteInPlace(
    _ key: UnsafeRawBufferPointer, expiry: UInt64?, midway: () -> Void,
    _ body: (_ current: UnsafeRawBufferPointer, _ out: UnsafeMutableRawBufferPointer) throws -> Int
  ) throws -> Bool {
    try checkKey(key)
    let hash = KeyHash.key(key)
    let p = partitionNumber(hash)
    // As a set does: the bucket's cache miss overlaps the lock's acquisition.
    writer.prefetchFirstBucket(hash, partition: p)
    // The rewrite touches only the record in place, never a log's positions.
    let engine = unretained
    return try withKeyLock(hash: hash, checkingLogs: false) { part in
      try engine { try $0.writer.rewriteInPlace(key, hash: hash, expiry: expiry, midway: midway, part, body) }
    }
  }
}

extension SharedCache where Value: FixedWidthInteger {
  /// Test hook: adds `delta` to `key`'s counter in place as `increment` does,
  /// running `midway` inside the bucket's seqlock write (the bucket odd, the new value
  /// stored), where a reliability test kills the process. False when the in-place
  /// path does not apply (nothing changed, `midway` not run).
  @_spi(Testing)
  public func _rewriteInPlace(forKey key: String, by delta: Value, midway: () -> Void) throws -> Bool {
    try withKey(key) { k in
      try engine.rewriteInPlace(k, expiry: nil, midway: midway) { current, out in
        let new = try codec.decodeValue(current) &+ delta
        var n = -1
        try codec.withValueBytes(new) { b in
          if b.count <= out.count, let dst = out.baseAddress, let src = b.baseAddress {
            dst.copyMemory(from: src, byteCount: b.count)
            n = b.count
          }
        }
        return n
      }
    }
  }
}

/// `increment`'s straight way: an `Int` counter changed where it stands with no closure
/// between the parts of the write, as the straight set runs (`set`).
extension CacheEngine {
  /// What `changeCounter` did.
  @usableFromInline
  enum CounterChange {
    /// Changed: the counter's new value.
    case changed(Int)
    /// Refused (the result would overflow): the counter's value, unchanged.
    case refused(Int)
    /// Not the straight way's: nothing changed (the caller goes the general way).
    case elsewise
  }

  /// Adds `delta` to the `Int` counter under `key` (or, `subtracting`, takes it away) in
  /// place: W0 as `set` makes it
  /// (the key's hash and words, its place, `Writer.lookAhead`'s hint), the lock's one
  /// compare-and-swap, then `Writer.changeCounter` (W1's checks and W2 by the hint, the
  /// value's checksum, the rewrite, W3); `.refused` (nothing changed) when the result
  /// would overflow. `.elsewise` (nothing changed) for a
  /// key of more than 16 bytes or over the file's limit, the `.flock` mode, a held lock,
  /// a hint that does not hold, a record that is not a live counter of 8 bytes without
  /// an expiry, or a value whose checksum fails: the general way (`rewriteInPlace`,
  /// `update`) decides those.
  @usableFromInline
  func changeCounter(_ key: UnsafeRawBufferPointer, by delta: Int, subtracting: Bool) -> CounterChange {
    let n = key.count
    let token = quickToken
    guard token != 0, let kp = key.baseAddress, UInt(bitPattern: n &- 1) < 16, n <= maxKey, writer.maxValue >= 8 else {
      return .elsewise
    }
    // W0.
    let (hash, words) = KeyHash.shortKey(kp, n)
    let count = memory.partitionCount
    let p = IndexGeometry.partition(hash, count: count)
    guard let first = writer.prefetchFirstBucket(hash, partition: p) else { return .elsewise }
    let part = memory.partition(p)
    let hint = writer.lookAhead(hash: hash, first: first.place, groups: first.groups, part)
    guard let locked = WriteLock.tryAcquireUncontended(part, token: token, file: memory) else { return .elsewise }
    let seen = Writer.Sighting(hint: hint, tag: IndexGeometry.tag(hash), routedWith: count)
    let change = Writer.changeCounter(
      key, words: words, hash: hash, seen, locked, Writer.CounterStep(delta: delta, subtracting: subtracting))
    WriteLock.releaseUncontended(locked)
    if case .elsewise = change, hint.isRecalled { writer.recent.forget(hash) }
    return change
  }
}

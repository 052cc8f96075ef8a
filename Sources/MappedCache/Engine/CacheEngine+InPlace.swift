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
    return try withKeyLock(hash: hash, checkingLogs: false) { part, held in
      try engine { try $0.writer.rewriteInPlace(key, hash: hash, expiry: expiry, midway: midway, part, held, body) }
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

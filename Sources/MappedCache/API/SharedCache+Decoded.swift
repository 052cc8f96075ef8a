// The typed read through the per-process cache of decoded values (`DecodedValueCache`).

extension SharedCache {
  /// `object(forKey:)` with decoded values kept: one probe of the file reads the key's
  /// live entry's stamp (inside the slot's seqlock read, expiry judged as on every
  /// read, nothing copied); when this handle keeps a value decoded from that very
  /// write, it is returned. Otherwise the entry is read again, copied, decoded and kept.
  @inlinable
  func decodedObject(forKey key: String, _ decoded: DecodedValueCache<Value>) throws -> Value? {
    try withKey(key) { k -> Value? in
      try checkKeySize(k)
      return try decodedObject(k, key: key, hash: engine.keyHash(k), decoded)
    }
  }

  /// `decodedObject(forKey:_:)` for the key's bytes `k` (checked) and its hash: the
  /// typed batch read (`objects(forKeys:)`) reads each key of a prefetched group by it.
  @inlinable @inline(__always)
  func decodedObject(
    _ k: UnsafeRawBufferPointer, key: String, hash: UInt64, _ decoded: DecodedValueCache<Value>
  ) throws -> Value? {
    var stamp = EntryStamp.none
    let size = engine.entryStamp(k, hash: hash, stamp: &stamp)
    if size == -1 { return nil }
    if size >= 0, let v = decoded.value(hash, stamp: stamp) {
      engine.countHit()
      return v
    }
    let (n, result) = try withUnsafeTemporaryAllocation(byteCount: CacheEngine.stackBufferBytes, alignment: 16) {
      try copyDecodingAndKeeping(k, key: key, hash: hash, into: $0, decoded)
    }
    if n < 0 { return nil }
    if n <= CacheEngine.stackBufferBytes { return result }
    return try largerDecodedObject(k, key: key, hash: hash, size: n, decoded)
  }

  /// The entry of `k` copied into `buffer` with its stamp; when it fits, decoded and kept
  /// under that stamp. Its length (-1: a miss) and, when it fitted, the value.
  @inlinable @inline(__always)
  func copyDecodingAndKeeping(
    _ k: UnsafeRawBufferPointer, key: String, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
    _ decoded: DecodedValueCache<Value>
  ) throws -> (size: Int, value: Value?) {
    var stamp = EntryStamp.none
    let n = engine.copyStampedValue(k, hash: hash, into: buffer, stamp: &stamp)
    guard n >= 0 && n <= buffer.count else { return (n, nil) }
    let v = try decode(UnsafeRawBufferPointer(start: buffer.baseAddress, count: n), key: key)
    decoded.insert(hash, stamp: stamp, value: v)
    return (n, v)
  }

  /// `decodedObject` for a value larger than the stack buffer: a buffer of its size,
  /// which it may outgrow meanwhile (a few tries).
  @usableFromInline
  func largerDecodedObject(
    _ k: UnsafeRawBufferPointer, key: String, hash: UInt64, size: Int, _ decoded: DecodedValueCache<Value>
  ) throws -> Value? {
    var want = size
    for _ in 0..<8 {
      let (n, result) = try withUnsafeTemporaryAllocation(byteCount: want, alignment: 16) {
        try copyDecodingAndKeeping(k, key: key, hash: hash, into: $0, decoded)
      }
      if n < 0 { return nil }
      if n <= want { return result }
      want = n
    }
    return nil
  }

  /// Values this handle keeps decoded and the bytes they count (0, 0 when it keeps none).
  @_spi(Testing)
  public var _decodedUsage: (count: Int, bytes: Int) { decoded?.usage ?? (0, 0) }

  /// The decoded-value limits as this handle applies them (nil when it keeps none).
  @_spi(Testing)
  public var _decodedLimits: (count: Int, bytes: Int)? { decoded?.limits }
}

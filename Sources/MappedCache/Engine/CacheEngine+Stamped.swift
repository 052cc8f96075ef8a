import SystemCalls

/// The read behind the decoded-value cache (`DecodedValueCache`, `SharedCache.object(forKey:)`).
extension CacheEngine {
  /// The key's hash (the file's fixed hash), for callers that look it up elsewhere first.
  @usableFromInline
  func keyHash(_ key: UnsafeRawBufferPointer) -> UInt64 { KeyHash.key(key) }

  /// The stamp of `key`'s live entry, copying nothing: its length (with `stamp` set), or
  /// -1 on a miss (counted, expired entries included). A hit is not counted: the caller
  /// counts it (`countHit`) or reads again. Precondition: `checkKey(key)` passed, `hash`
  /// is `keyHash(key)`.
  @usableFromInline
  func entryStamp(_ key: UnsafeRawBufferPointer, hash: UInt64, stamp: inout EntryStamp) -> Int {
    let none = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    guard case .found(let e, let p) = locateCountingMisses(key, hash: hash, into: none) else { return -1 }
    // Judge it as a read would (R6), but for the copy: the caller copies when it must.
    if e.header.expiry != 0 && Expiry.isExpired(e.header.expiry, now: SystemCall.expiryClockMilliseconds()) {
      reader.countMiss()
      return -1
    }
    if e.word & Format.hotBit == 0 && reader.writable {
      BucketIndex(part: memory.partition(p)).markHit(e.at, word: e.word)
    }
    stamp = EntryStamp(e.header)
    return e.header.vlen
  }

  /// Counts a hit served without `copyStampedValue` (a kept decoded value).
  @usableFromInline
  func countHit() { reader.countHit() }

  /// `copyValue` that also hands back the entry's stamp: the value's length (copied when
  /// it fits `buffer`, like `copyValue`) with its stamp in `stamp`, or -1 on a miss.
  /// Expired entries are misses. Counted as a hit or a miss. Precondition:
  /// `checkKey(key)` passed, `hash` is `keyHash(key)`.
  @usableFromInline
  func copyStampedValue(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
    stamp: inout EntryStamp
  ) -> Int {
    guard case .found(let e, let p) = locateCountingMisses(key, hash: hash, into: buffer) else { return -1 }
    let outcome = reader.judge(e, partition: p, hash: hash, now: 0, allowExpired: false, buffer: buffer)
    return answer(outcome) { _ in
      stamp = EntryStamp(e.header)
      return e.header.vlen
    }
  }
}

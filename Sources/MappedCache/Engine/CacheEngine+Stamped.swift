/// The read behind the decoded-value cache (`DecodedValueCache`, `SharedCache.object(forKey:)`).
extension CacheEngine {
  /// The key's hash (the file's fixed hash), for callers that look it up elsewhere first.
  @usableFromInline
  func keyHash(_ key: UnsafeRawBufferPointer) -> UInt64 { KeyHash.key(key) }

  /// The stamp of `key`'s live entry, copying nothing: its length (with `stamp` set) when
  /// the short path found it (`Reader.probeStamped`), -1 on a miss (counted), -2 when
  /// only a full read can tell (a writer in the slot, a long run, an expired entry: call
  /// `copyStampedValue`). A hit is not counted: the caller counts it (`countHit`) or
  /// reads again. Precondition: `checkKey(key)` passed, `hash` is `keyHash(key)`.
  @usableFromInline
  func entryStamp(_ key: UnsafeRawBufferPointer, hash: UInt64, stamp: inout EntryStamp) -> Int {
    let none = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    let fast = reader.probeStamped(key, hash: hash, into: none, stamp: &stamp)
    if fast >= 0 { return fast }
    guard fast == Reader.fastMiss else { return -2 }
    switch reader.confirmMiss(key, hash: hash, now: 0, allowExpired: false, into: none) {
    case .miss, .corrupt:
      reader.countMiss()
      return -1
    case .busy:
      reader.countBusyMiss()
      return -1
    case .hit, .needs:
      return -2
    }
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
    let fast = reader.probeStamped(key, hash: hash, into: buffer, stamp: &stamp)
    if fast >= 0 {
      reader.countHit()
      return fast
    }
    return copyStampedValueSlowly(key, hash: hash, fast: fast, into: buffer, stamp: &stamp)
  }

  /// `copyStampedValue` past its short path: the general lookup, which always copies. The
  /// stamp's checksum is then computed from the copy (the lookup does not hand it out).
  @inline(never)
  func copyStampedValueSlowly(
    _ key: UnsafeRawBufferPointer, hash: UInt64, fast: Int,
    into buffer: UnsafeMutableRawBufferPointer, stamp: inout EntryStamp
  ) -> Int {
    copyValueSlowly(key, hash: hash, fast: fast, into: buffer) { info in
      let sum = KeyHash.checksum(UnsafeRawBufferPointer(start: buffer.baseAddress, count: info.valueCount), hash: hash)
      stamp = EntryStamp(version: info.version, count: UInt32(truncatingIfNeeded: info.valueCount), sum: sum)
    }
  }
}

/// The read behind the decoded-value cache (`DecodedValueCache`, `SharedCache.object(forKey:)`).
extension CacheEngine {
  /// `copyStampedValue` found the entry `known` names and copied nothing.
  @inlinable static var sameStamp: Int { -3 }

  /// The key's hash (the file's fixed hash), for callers that look it up elsewhere first.
  @usableFromInline
  func keyHash(_ key: UnsafeRawBufferPointer) -> UInt64 { KeyHash.key(key) }

  /// `copyValue` for a caller that holds a decoded copy of some write of `key` (named by
  /// `known`; `.none` for none): returns `sameStamp`, copying nothing, when the live
  /// entry is that write; else the value's length (copied when it fits `buffer`, like
  /// `copyValue`) with its stamp in `stamp`, or -1 on a miss. Expired entries are misses.
  /// A read, counted as a hit or a miss. Precondition: `checkKey(key)` passed, `hash` is
  /// `keyHash(key)`.
  @usableFromInline
  func copyStampedValue(
    _ key: UnsafeRawBufferPointer, hash: UInt64, known: EntryStamp,
    into buffer: UnsafeMutableRawBufferPointer, stamp: inout EntryStamp
  ) -> Int {
    let fast = reader.probeStamped(key, hash: hash, known: known, into: buffer, stamp: &stamp)
    if fast >= 0 || fast == Reader.fastSame {
      reader.countHit()
      return fast
    }
    return copyStampedValueSlowly(key, hash: hash, fast: fast, known: known, into: buffer, stamp: &stamp)
  }

  /// `copyStampedValue` past its short path: the general lookup, which always copies. The
  /// stamp's checksum is then computed from the copy (the lookup does not hand it out).
  @inline(never)
  func copyStampedValueSlowly(
    _ key: UnsafeRawBufferPointer, hash: UInt64, fast: Int, known: EntryStamp,
    into buffer: UnsafeMutableRawBufferPointer, stamp: inout EntryStamp
  ) -> Int {
    let outcome =
      fast == Reader.fastMiss
      ? reader.confirmMiss(key, hash: hash, now: 0, allowExpired: false, into: buffer)
      : reader.lookup(key, hash: hash, now: 0, allowExpired: false, into: buffer)
    switch outcome {
    case .hit(let info):
      reader.countHit()
      let sum = KeyHash.checksum(UnsafeRawBufferPointer(start: buffer.baseAddress, count: info.valueCount), hash: hash)
      stamp = EntryStamp(version: info.version, count: UInt32(truncatingIfNeeded: info.valueCount), sum: sum)
      if known.version != 0 && stamp == known { return Self.sameStamp }
      return info.valueCount
    case .needs(let n):
      return n
    case .miss, .corrupt:
      reader.countMiss()
      return -1
    case .busy:
      reader.countBusyMiss()
      return -1
    }
  }
}

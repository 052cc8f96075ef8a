/// The fixed hash stored in the file. Swift's `Hasher` is seeded per process, so it
/// cannot be used for anything another process reads. This is a word-at-a-time
/// multiply-fold (the same family as wyhash), stable across processes and versions.
enum KeyHash {
  @inline(__always)
  static func mix(_ a: UInt64, _ b: UInt64) -> UInt64 {
    let m = a.multipliedFullWidth(by: b)
    return m.high ^ m.low
  }

  /// Hash of a key: never 0, its low bit always set (bits are taken from it for the
  /// partition, the first place and the tag: `Placement`).
  @inline(__always)
  static func key(_ k: UnsafeRawBufferPointer) -> UInt64 {
    fold(k, seed: keySeed) | 1
  }

  private static let keySeed: UInt64 = 0x243F_6A88_85A3_08D3

  /// A key of 1 to 16 bytes at `p` as `shortWords` has it, with its hash (`key`'s): a
  /// read makes both from one pair of loads, then compares records' keys by the words
  /// (`PartitionMemory.keyEquals(record:_:_:words:)`).
  @inline(__always)
  static func shortKey(_ p: UnsafeRawPointer, _ n: Int) -> (hash: UInt64, words: (UInt64, UInt64)) {
    assert(n >= 1 && n <= 16)
    let w = shortWords(p, n)
    return (foldShort(w.0, w.1, n, seed: keySeed) | 1, w)
  }

  /// A second hash of a key, from its first: the key's second place in the index.
  @inline(__always)
  static func second(_ hash: UInt64) -> UInt64 {
    mix(hash ^ 0x9E37_79B9_7F4A_7C15, 0xD6E8_FEB8_6659_FD93)
  }

  /// Checksum of a value, bound to its key's hash and length: the 16 bits a record
  /// stores (`RecordFormat`), folded from `checksum32`.
  @inline(__always)
  static func checksum(_ v: UnsafeRawBufferPointer, hash: UInt64) -> UInt16 {
    let w = checksum32(v, hash: hash)
    return UInt16(truncatingIfNeeded: w ^ (w >> 16))
  }

  /// The 32-bit checksum format 4 stored (`FormatFourReader` checks old entries by it).
  @inline(__always)
  static func checksum32(_ v: UnsafeRawBufferPointer, hash: UInt64) -> UInt32 {
    let h = fold(v, seed: hash ^ (UInt64(v.count) &* 0x9E37_79B9_7F4A_7C15))
    return UInt32(truncatingIfNeeded: h ^ (h >> 32))
  }

  static func bytes<C: Collection>(_ c: C) -> UInt64 where C.Element == UInt8 {
    Array(c).withUnsafeBytes { fold($0, seed: 0x1357_9BDF_2468_ACE0) }
  }

  /// The bytes of a key of at most 16 bytes as two words, such that two keys of the same
  /// length are equal exactly when their words are.
  ///
  /// No load crosses byte 8 of the key. A caller that has just put its key together in
  /// two 8-byte stores (a small `String`'s two words, a key formatted in registers)
  /// then has each load served from one store: a load spanning two stores cannot be
  /// forwarded, waits until both reach the cache, and those wait for every older
  /// instruction, the previous read's cache miss among them. That serialised one read
  /// behind the other, and uniform reads lost much of their throughput.
  @inline(__always)
  static func shortWords(_ p: UnsafeRawPointer, _ n: Int) -> (UInt64, UInt64) {
    if n >= 8 {
      let a = p.loadUnaligned(as: UInt64.self)
      return (a, tailWord(p + 8, n &- 8))
    }
    return (tailWord(p, n), 0)
  }

  /// `shortWords` of a key of at most 16 bytes; (0, 0) for a longer or empty one (which
  /// is compared byte for byte).
  @inline(__always)
  static func shortWords(of k: UnsafeRawBufferPointer) -> (UInt64, UInt64) {
    guard k.count <= 16, let p = k.baseAddress else { return (0, 0) }
    return shortWords(p, k.count)
  }

  /// Bytes `[0, r)` of `p` (0 ≤ r ≤ 8) as a word, from loads that stay inside them:
  /// two overlapping 4-byte loads, or the first, middle and last byte.
  @inline(__always)
  static func tailWord(_ p: UnsafeRawPointer, _ r: Int) -> UInt64 {
    if r >= 4 {
      return UInt64(p.loadUnaligned(as: UInt32.self))
        | UInt64(p.loadUnaligned(fromByteOffset: r &- 4, as: UInt32.self)) << 32
    }
    if r > 0 {
      return UInt64(p.load(as: UInt8.self)) << 16 | UInt64(p.load(fromByteOffset: r >> 1, as: UInt8.self)) << 8
        | UInt64(p.load(fromByteOffset: r &- 1, as: UInt8.self))
    }
    return 0
  }

  private static let p1: UInt64 = 0xA076_1D64_78BD_642F
  private static let p2: UInt64 = 0xE703_7ED1_A0B4_28DB

  /// wyhash's shape: 16 bytes per multiply; a key of up to 16 bytes is read as the two
  /// words of `shortWords`, so short keys cost two to four loads and two multiplies.
  @inline(__always)
  static func fold(_ k: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
    let n = k.count
    var h = seed ^ (UInt64(truncatingIfNeeded: n) &* p1)
    guard let p = k.baseAddress, n > 0 else { return mix(h ^ p2, p1) }
    if n <= 16 {
      let (a, b) = shortWords(p, n)
      return foldShort(a, b, n, seed: seed)
    }
    if n <= 64 { return foldMedium(p, n, h) }
    var i = 0
    while i &+ 16 < n {
      h = mix(
        p.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ p1,
        p.loadUnaligned(fromByteOffset: i &+ 8, as: UInt64.self) ^ h)
      i &+= 16
    }
    return finish(p, n, h)
  }

  /// `fold`'s loop for 17 to 64 bytes (the common value; a set checksums its value
  /// before the lock), unrolled: the same multiplies of the same words, without the
  /// loop's counter, which the set kept on the stack. `h` is `fold`'s first value.
  @inline(__always)
  static func foldMedium(_ p: UnsafeRawPointer, _ n: Int, _ h0: UInt64) -> UInt64 {
    assert(n > 16 && n <= 64)
    var h = mix(p.loadUnaligned(as: UInt64.self) ^ p1, p.loadUnaligned(fromByteOffset: 8, as: UInt64.self) ^ h0)
    if n > 32 {
      h = mix(
        p.loadUnaligned(fromByteOffset: 16, as: UInt64.self) ^ p1,
        p.loadUnaligned(fromByteOffset: 24, as: UInt64.self) ^ h)
    }
    if n > 48 {
      h = mix(
        p.loadUnaligned(fromByteOffset: 32, as: UInt64.self) ^ p1,
        p.loadUnaligned(fromByteOffset: 40, as: UInt64.self) ^ h)
    }
    return finish(p, n, h)
  }

  /// How every `fold` ends: the last 16 bytes (`a`, `b`; a short key's `shortWords`)
  /// mixed into `h`, then the length.
  @inline(__always)
  private static func finish(_ a: UInt64, _ b: UInt64, _ h: UInt64, _ n: Int) -> UInt64 {
    mix(p1 ^ UInt64(truncatingIfNeeded: n), mix(a ^ p1, b ^ h ^ p2))
  }

  /// `finish` of the last 16 of `n` (more than 16) bytes at `p`.
  @inline(__always)
  private static func finish(_ p: UnsafeRawPointer, _ n: Int, _ h: UInt64) -> UInt64 {
    let a = p.loadUnaligned(fromByteOffset: n &- 16, as: UInt64.self)
    return finish(a, p.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self), h, n)
  }

  /// `fold` of a key of 1 to 16 bytes whose `shortWords` are `a` and `b`.
  @inline(__always)
  static func foldShort(_ a: UInt64, _ b: UInt64, _ n: Int, seed: UInt64) -> UInt64 {
    finish(a, b, seed ^ (UInt64(truncatingIfNeeded: n) &* p1), n)
  }
}

/// The fixed hash stored in the file. Swift's `Hasher` is seeded per process, so it
/// cannot be used for anything another process reads. This is a word-at-a-time
/// multiply-fold (the same family as wyhash), stable across processes and versions.
enum KeyHash {
  @inline(__always)
  static func mix(_ a: UInt64, _ b: UInt64) -> UInt64 {
    let m = a.multipliedFullWidth(by: b)
    return m.high ^ m.low
  }

  /// Hash of a key: never 0 (0 marks an empty slot).
  @inline(__always)
  static func key(_ k: UnsafeRawBufferPointer) -> UInt64 {
    fold(k, seed: 0x243F_6A88_85A3_08D3) | 1
  }

  /// Checksum of a value, bound to its key's hash and length.
  @inline(__always)
  static func checksum(_ v: UnsafeRawBufferPointer, hash: UInt64) -> UInt32 {
    let h = fold(v, seed: hash ^ (UInt64(v.count) &* 0x9E37_79B9_7F4A_7C15))
    return UInt32(truncatingIfNeeded: h ^ (h >> 32))
  }

  static func bytes<C: Collection>(_ c: C) -> UInt64 where C.Element == UInt8 {
    Array(c).withUnsafeBytes { fold($0, seed: 0x1357_9BDF_2468_ACE0) }
  }

  /// wyhash's shape: 16 bytes per multiply, and the last (up to) 16 bytes read as two
  /// overlapping words, so short keys cost two loads and two multiplies.
  @inline(__always)
  static func fold(_ k: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
    let p1: UInt64 = 0xA076_1D64_78BD_642F, p2: UInt64 = 0xE703_7ED1_A0B4_28DB
    let n = k.count
    var h = seed ^ (UInt64(truncatingIfNeeded: n) &* p1)
    guard let p = k.baseAddress, n > 0 else { return mix(h ^ p2, p1) }
    var a: UInt64, b: UInt64
    if n <= 16 {
      if n >= 8 {
        a = p.loadUnaligned(as: UInt64.self)
        b = p.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self)
      } else if n >= 4 {
        a = UInt64(p.loadUnaligned(as: UInt32.self))
        b = UInt64(p.loadUnaligned(fromByteOffset: n &- 4, as: UInt32.self))
      } else {
        a = UInt64(p.load(as: UInt8.self)) << 16 | UInt64(p.load(fromByteOffset: n >> 1, as: UInt8.self)) << 8
          | UInt64(p.load(fromByteOffset: n &- 1, as: UInt8.self))
        b = 0
      }
    } else {
      var i = 0
      while i &+ 16 < n {
        h = mix(p.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ p1,
                p.loadUnaligned(fromByteOffset: i &+ 8, as: UInt64.self) ^ h)
        i &+= 16
      }
      a = p.loadUnaligned(fromByteOffset: n &- 16, as: UInt64.self)
      b = p.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self)
    }
    return mix(p1 ^ UInt64(truncatingIfNeeded: n), mix(a ^ p1, b ^ h ^ p2))
  }
}

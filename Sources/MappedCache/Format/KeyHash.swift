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

  @inline(__always)
  static func fold(_ k: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
    let p1: UInt64 = 0xA076_1D64_78BD_642F, p2: UInt64 = 0xE703_7ED1_A0B4_28DB
    var h = seed ^ (UInt64(k.count) &* p1)
    var i = 0
    let n = k.count
    guard let base = k.baseAddress else { return mix(h ^ p2, p1) }
    while i + 16 <= n {
      let a = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
      let b = base.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self)
      h = mix(a ^ p1 ^ h, b ^ p2)
      i += 16
    }
    if i + 8 <= n {
      h = mix(base.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ p1, h ^ p2)
      i += 8
    }
    var tail: UInt64 = 0
    var shift: UInt64 = 0
    while i < n {
      tail |= UInt64(base.load(fromByteOffset: i, as: UInt8.self)) << shift
      shift += 8
      i += 1
    }
    return mix(h ^ tail ^ p2, UInt64(n) ^ p1)
  }
}

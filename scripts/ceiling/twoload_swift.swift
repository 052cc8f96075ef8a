// twoload_swift - twoload_c.c's set (format 5's overwrite in place, one partition, no
// hints) written in Swift, linked into twoload_c.c's harness (built with -DSWIFT_SET):
// what the same work costs in Swift. A measuring tool, not a cache; see twoload_c.c for
// what it keeps of format 5 and what it leaves out. The value's checksum is the engine's
// own (`KeyHash.checksum`, its source file compiled in; twoload_c.c's `checksum` is the
// same function, written as `fold`'s loop). scripts/ceiling/run.sh builds it:
//
//   gcc -O2 -DSWIFT_SET -I ../shared/peers -c scripts/ceiling/twoload_c.c -o /tmp/tl.o
//   swiftc -O -wmo -parse-as-library -import-objc-header scripts/ceiling/twoload_swift.h \
//     scripts/ceiling/twoload_swift.swift Sources/MappedCache/Format/KeyHash.swift \
//     /tmp/tl.o -o /tmp/twoload_swift
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The mapping as twoload_c.c lays it out, and its set, as the engine is written: a class
/// whose method is the set, its pointers formed from stored fields.
final class TwoLoad {
  let base: UnsafeMutableRawPointer
  let mapLength: Int
  let buckets: UInt64
  let logBase: Int

  init(base: UnsafeMutableRawPointer, mapLength: Int, buckets: UInt64, logBase: Int) {
    self.base = base
    self.mapLength = mapLength
    self.buckets = buckets
    self.logBase = logBase
  }

  static let keyLength = 12
  static let headerBytes = 9

  @inline(__always) static func mix2(_ a: UInt64, _ b: UInt64) -> UInt64 {
    let m = a.multipliedFullWidth(by: b)
    return m.high ^ m.low
  }

  /// twoload_c.c's `hash_key` (limit_c's).
  @inline(__always) static func hash(_ k: UnsafeRawPointer, _ n: Int) -> UInt64 {
    var h = 0x243F_6A88_85A3_08D3 ^ UInt64(n)
    var p = k
    var r = n
    while r >= 8 {
      h = mix2(h ^ p.loadUnaligned(as: UInt64.self), 0x9E37_79B9_7F4A_7C15)
      p += 8
      r &-= 8
    }
    var x: UInt64 = 0
    for i in 0..<r { x |= UInt64(p.load(fromByteOffset: i, as: UInt8.self)) << (8 &* UInt64(i)) }
    return mix2(h ^ x ^ 0x5851_F42D_4C95_7F2D, 0x9E37_79B9_7F4A_7C15) | 1
  }

  @inline(__always) func bucket(_ b: UInt64) -> UnsafeMutableRawPointer {
    base + (4096 &+ Int(truncatingIfNeeded: b >> 2) &* 320 &+ Int(truncatingIfNeeded: b & 3) &* 64)
  }

  /// The record that slot `slot` of bucket `b` names, when it is an entry of `key`: its
  /// offset checked against the log, its header checked, its key compared.
  @inline(__always)
  func record(_ b: UnsafeMutableRawPointer, _ slot: Int, _ key: UnsafeRawPointer) -> UnsafeMutableRawPointer? {
    let word = (b + (24 &+ 4 &* slot)).assumingMemoryBound(to: Atomic<UInt32>.self).pointee.load(ordering: .relaxed)
    let offset = Int(word & (1 << 29 - 1)) << 3
    guard offset >= logBase, offset <= mapLength &- 192 else { return nil }
    let r = base + offset
    guard r.load(as: UInt8.self) == 0 else { return nil }
    let klen = Int(r.load(fromByteOffset: 1, as: UInt8.self)) &+ 1
    let vlen = Int(r.load(fromByteOffset: 2, as: UInt8.self))
    guard klen == Self.keyLength, klen &+ vlen <= mapLength &- offset &- Self.headerBytes else { return nil }
    let k = r + Self.headerBytes
    guard k.loadUnaligned(as: UInt64.self) == key.loadUnaligned(as: UInt64.self),
      k.loadUnaligned(fromByteOffset: 8, as: UInt32.self) == key.loadUnaligned(fromByteOffset: 8, as: UInt32.self)
    else { return nil }
    return r
  }

  /// W2 for one bucket, under the lock.
  @inline(__always)
  func find(_ b: UnsafeMutableRawPointer, _ tag: UInt16, _ key: UnsafeRawPointer) -> UnsafeMutableRawPointer? {
    var m = tls_tag_matches(b, tag)
    while m != 0 {
      if let r = record(b, Int(m.trailingZeroBitCount), key) { return r }
      m &= m &- 1
    }
    return nil
  }

  /// twoload_c.c's `tl_set`, step for step.
  func set(_ key: UnsafeRawPointer, _ value: UnsafeRawPointer, _ count: Int) -> Bool {
    let h = Self.hash(key, Self.keyLength)  // W0
    let first = (h << 18 | h >> 46).multipliedFullWidth(by: buckets).high
    let second = Self.mix2(h ^ 0x9E37_79B9_7F4A_7C15, 0xD6E8_FEB8_6659_FD93).multipliedFullWidth(by: buckets).high
    var b = bucket(first)
    tls_prefetch_for_write(b)
    tls_prefetch_for_write(base + 64)
    let sum = KeyHash.checksum(UnsafeRawBufferPointer(start: value, count: count), hash: h)
    let tag = UInt16(truncatingIfNeeded: h >> 46) | (h >> 46 & 0xFFFF == 0 ? 1 : 0)
    let lock = (base + 64).assumingMemoryBound(to: Atomic<UInt32>.self)
    while !lock.pointee.compareExchange(expected: 0, desired: 0x401, ordering: .acquiring).exchanged { tls_pause() }
    let intent = (base + 72).assumingMemoryBound(to: UInt64.self)
    var stored = false
    let geometry = base.assumingMemoryBound(to: Atomic<UInt64>.self)
    if intent.pointee == 0, geometry.pointee.load(ordering: .relaxed) == buckets {  // W1
      var r = find(b, tag, key)  // W2
      if r == nil && second != first {
        b = bucket(second)
        r = find(b, tag, key)
      }
      if let r, Int(r.load(fromByteOffset: 2, as: UInt8.self)) == count {  // W3
        intent.pointee = 1
        let counter = (base + 80).assumingMemoryBound(to: UInt64.self)
        counter.pointee &+= 1
        let seq = b.assumingMemoryBound(to: Atomic<UInt32>.self)
        let s0 = seq.pointee.load(ordering: .relaxed)
        seq.pointee.store(s0 &+ 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)
        r.storeBytes(of: UInt32(truncatingIfNeeded: counter.pointee), toByteOffset: 3, as: UInt32.self)
        r.storeBytes(of: sum, toByteOffset: 7, as: UInt16.self)
        (r + Self.headerBytes + Self.keyLength).copyMemory(from: value, byteCount: count)
        seq.pointee.store(s0 &+ 2, ordering: .releasing)
        (base + 88).assumingMemoryBound(to: UInt64.self).pointee &+= 1
        intent.pointee = 0
        stored = true
      }
    }
    if lock.pointee.exchange(0, ordering: .releasing) & 0x8000_0000 != 0 { _exit(3) }  // no waiters here
    return stored
  }
}

/// The worker's mapping (one process, one thread: set once before the timed loop), held
/// unretained so that a set takes no reference count: the engine's callers hold theirs
/// across their loops.
@exclusivity(unchecked) nonisolated(unsafe) var twoLoad: Unmanaged<TwoLoad>? = nil

@_cdecl("tl_swift_init")
public func twoLoadInit(_ base: UnsafeMutableRawPointer, _ mapLength: Int, _ buckets: UInt64, _ logBase: Int) {
  twoLoad = Unmanaged.passRetained(TwoLoad(base: base, mapLength: mapLength, buckets: buckets, logBase: logBase))
}

@_cdecl("tl_set_swift")
public func twoLoadSet(_ key: UnsafeRawPointer, _ value: UnsafeRawPointer, _ count: Int) -> Int32 {
  twoLoad.unsafelyUnwrapped._withUnsafeGuaranteedRef { $0.set(key, value, count) } ? 1 : 0
}

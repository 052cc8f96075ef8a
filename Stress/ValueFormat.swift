/// The bytes of every value `cache-stress` writes, so that every read can be judged.
/// All integers little-endian:
///
///     0  sum     u32  checksum of bytes 8..<length, seeded with the length and the key
///     4  key     u32  index of the key the value was written for
///     8  writer  u32  global writer id (worker · threads + thread); prefillWriter for prefill
///    12  length  u32  the whole value's length
///    16  seq     u64  the writer's sequence number: incarnation << 40 | counter (counter ≥ 1)
///    24  filler       a Weyl sequence seeded from (key, writer, seq), up to `length`
///
/// A read is *corrupt* if its length, key, writer or checksum is wrong: not written whole,
/// or for another key. A whole value is *wrong* if its sequence number is lower than one
/// the same reader already saw from the same writer for the same key (`SequenceTracker`).
/// This file holds all of the stress tool's raw-pointer work.
enum ValueFormat {
  static let headerSize = 24
  static let prefillWriter = UInt32.max

  enum Verdict: Equatable {
    case whole(writer: UInt32, seq: UInt64)
    case corrupt
  }

  /// Fills `buffer` (its whole length) with the value for (key, writer, seq).
  ///
  /// Written in whole 8-byte words wherever it can be, the checksum last together with
  /// the key: the cache's 8- and 16-byte loads of a value just written (its checksum in
  /// `setObject`) are then served from single stores, where loads that span two smaller
  /// stores would stall the CPU and be charged to the set being measured.
  static func write(into buffer: UnsafeMutableRawBufferPointer, key: UInt32, writer: UInt32, seq: UInt64) {
    let n = buffer.count
    precondition(n >= headerSize, "value shorter than its header")
    buffer.storeBytes(of: (UInt64(writer) | UInt64(truncatingIfNeeded: n) << 32).littleEndian, toByteOffset: 8, as: UInt64.self)
    buffer.storeBytes(of: seq.littleEndian, toByteOffset: 16, as: UInt64.self)
    // Filler: a Weyl sequence from a mixed seed, so two versions differ in every word
    // (cheap: one add per word; the checksum does the mixing).
    var g = SplitMix64(seed: UInt64(key) &* 0x9E37_79B9 ^ UInt64(writer) << 32 ^ seq)
    var w = g.next()
    var o = headerSize
    while o &+ 8 <= n {
      buffer.storeBytes(of: w, toByteOffset: o, as: UInt64.self)
      w &+= 0x9E37_79B9_7F4A_7C15
      o &+= 8
    }
    if o < n {
      for i in 0..<(n - o) { buffer[o + i] = UInt8(truncatingIfNeeded: w >> UInt64(8 * i)) }
    }
    let sum = checksum(UnsafeRawBufferPointer(buffer), key: key)
    buffer.storeBytes(of: (UInt64(sum) | UInt64(key) << 32).littleEndian, toByteOffset: 0, as: UInt64.self)
  }

  /// Judges a value read for `key`; `writers` is the number of worker writers. With
  /// `whole` false, only the header is checked (key, length, writer: what the peers
  /// check on every read, their length and key digits), not the checksum over every
  /// byte.
  @inline(__always)
  static func check(_ b: UnsafeRawBufferPointer, key: UInt32, writers: UInt32, whole: Bool = true) -> Verdict {
    let n = b.count
    guard n >= headerSize else { return .corrupt }
    let k = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
    let w = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
    let len = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
    let sum = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
    guard k == key, Int(len) == n, w < writers || w == prefillWriter, !whole || sum == checksum(b, key: k) else { return .corrupt }
    return .whole(writer: w, seq: UInt64(littleEndian: b.loadUnaligned(fromByteOffset: 16, as: UInt64.self)))
  }

  /// Breaks the checksum of a value already written by `write` (for `--plant-corruption`).
  static func spoil(_ buffer: UnsafeMutableRawBufferPointer) {
    buffer[buffer.count - 1] ^= 0x5A
  }

  /// A 32-bit checksum of bytes 8..<count (at least 16 of them), seeded with the count
  /// and the key: 16 bytes per 64×64→128-bit multiply (wyhash's round), in two lanes
  /// that alternate so that their multiplies overlap, the last 16 bytes read
  /// overlapping; a torn copy of two versions differs in the filler, so every byte
  /// counts.
  @inline(__always)
  static func checksum(_ b: UnsafeRawBufferPointer, key: UInt32) -> UInt32 {
    let p1: UInt64 = 0xA076_1D64_78BD_642F, p2: UInt64 = 0xE703_7ED1_A0B4_28DB
    let n = b.count
    var h: UInt64 = 0xCBF2_9CE4_8422_2325 ^ UInt64(n) ^ UInt64(key) << 32
    var g: UInt64 = 0x8422_2325_CBF2_9CE4 ^ UInt64(n)
    var o = 8
    while o &+ 32 <= n {
      h = mix(b.loadUnaligned(fromByteOffset: o, as: UInt64.self) ^ p1 ^ h,
              b.loadUnaligned(fromByteOffset: o &+ 8, as: UInt64.self) ^ p2)
      g = mix(b.loadUnaligned(fromByteOffset: o &+ 16, as: UInt64.self) ^ p2 ^ g,
              b.loadUnaligned(fromByteOffset: o &+ 24, as: UInt64.self) ^ p1)
      o &+= 32
    }
    if o &+ 16 <= n {
      h = mix(b.loadUnaligned(fromByteOffset: o, as: UInt64.self) ^ p1 ^ h,
              b.loadUnaligned(fromByteOffset: o &+ 8, as: UInt64.self) ^ p2)
      o &+= 16
    }
    if o < n {
      g = mix(b.loadUnaligned(fromByteOffset: n &- 16, as: UInt64.self) ^ p2 ^ g,
              b.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self) ^ p1)
    }
    h = mix(h ^ p1, g ^ UInt64(n) ^ p2)
    return UInt32(truncatingIfNeeded: h ^ (h >> 32))
  }

  @inline(__always)
  private static func mix(_ a: UInt64, _ b: UInt64) -> UInt64 {
    let m = a.multipliedFullWidth(by: b)
    return m.high ^ m.low
  }
}

/// What one reader thread has seen: per (writer, key), the highest sequence number.
/// Exact (one word per pair) when the pairs fit the thread's budget; otherwise a
/// direct-mapped table that forgets on collision (it can miss a regression but never
/// invents one).
struct SequenceTracker {
  private let keys: Int
  private let exact: Bool
  private let mask: Int
  /// Raw storage, not arrays: an array mutated in the read loop costs a uniqueness
  /// check (a call) per store. Owned by the tracker's thread; freed by `release`.
  private let seqs: UnsafeMutablePointer<UInt64>
  private let tags: UnsafeMutablePointer<UInt64>

  init(keys: Int, writers: Int, budgetEntries: Int) {
    self.keys = keys
    let pairs = keys * writers
    let size: Int
    if pairs <= budgetEntries * 2 {
      exact = true
      mask = 0
      size = max(pairs, 1)
    } else {
      exact = false
      var s = 1
      while s < budgetEntries { s <<= 1 }
      mask = s - 1
      size = s
    }
    seqs = .allocate(capacity: size)
    seqs.initialize(repeating: 0, count: size)
    tags = .allocate(capacity: exact ? 1 : size)
    tags.initialize(repeating: 0, count: exact ? 1 : size)
  }

  func release() {
    seqs.deallocate()
    tags.deallocate()
  }

  /// Records (writer, key, seq); false if `seq` is lower than one seen before.
  /// Precondition: `key < keys`, `writer <` the writers given at init.
  @inline(__always)
  func observe(key: Int, writer: Int, seq: UInt64) -> Bool {
    if exact {
      let i = writer &* keys &+ key
      let last = seqs[i]
      if seq < last { return false }
      seqs[i] = seq
      return true
    }
    let tag = (UInt64(key) << 20 | UInt64(writer)) &+ 1
    var h = tag &* 0x9E37_79B9_7F4A_7C15
    h ^= h >> 32
    let i = Int(truncatingIfNeeded: h) & mask
    if tags[i] == tag {
      let last = seqs[i]
      if seq < last { return false }
    } else {
      tags[i] = tag
    }
    seqs[i] = seq
    return true
  }
}

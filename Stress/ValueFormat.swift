/// The bytes of every value `cache-stress` writes, so that every read can be judged.
/// All integers little-endian:
///
///     0  tag     u32  a digest of (key, writer, length, seq): the header's own check
///     4  key     u32  index of the key the value was written for
///     8  writer  u32  global writer id (worker · threads + thread); prefillWriter for prefill
///    12  length  u32  the whole value's length
///    16  seq     u64  the writer's sequence number: incarnation << 40 | counter (counter ≥ 1)
///    24  filler       a Weyl sequence (one add per word) from a seed mixed from the
///                     header, up to `length`
///
/// A read is *corrupt* if its length, key or writer is wrong, or (on a whole check) its
/// tag or any byte of its filler differs from what the header regenerates: not written
/// whole, or for another key. Two versions differ in their seed, so in every filler word
/// and in the tag: a copy torn between them fails the check wherever the tear falls (a
/// tear inside the header breaks the tag; one between header and filler, or inside the
/// filler, breaks a filler word). The peers check the same way (their value regenerated
/// from key and version), and like theirs, writing a value costs no checksum.
/// A whole value is *wrong* if its sequence number is lower than one the same reader
/// already saw from the same writer for the same key (`SequenceTracker`).
///
/// Values shorter than the header (8 to 23 bytes: counters and flags are the most common
/// small values) use a compact form with the same checks packed tighter. The key is not
/// stored: it is part of the tag, so a value of another key fails the tag.
///
///     16 to 23 bytes                         8 to 15 bytes
///      0  seq     u64  as above              0  writer  u16  0xFFFF for prefill
///      8  writer  u16  0xFFFF for prefill    2  serial  u16  the seq's low bits, mixed
///     10  tag     u48  of (key, writer,      4  tag     u32  of (key, writer, length,
///                      length, seq)                          serial)
///     16  filler  from the tag's seed        8  filler  from the tag's seed
///
/// A torn or foreign compact value passes its tag with odds of 2^-48 (16 bytes and more)
/// or 2^-32 (under 16). Values of 8 to 15 bytes have no room for a sequence number, so
/// their freshness is not tracked (`Verdict.untracked`); they are still checked whole on
/// every read.
/// This file holds all of the stress tool's raw-pointer work.
enum ValueFormat {
  static let headerSize = 24
  /// The shortest value the format can check (and `--value-size` accepts).
  static let minimumSize = 8
  /// The shortest value whose compact form carries the whole sequence number.
  static let trackedMinimumSize = 16
  static let prefillWriter = UInt32.max
  /// `prefillWriter` in the compact forms' 16-bit writer field (writer ids stay below
  /// 128 processes · 256 threads = 32,768).
  private static let compactPrefill: UInt16 = 0xFFFF
  private static let weyl: UInt64 = 0x9E37_79B9_7F4A_7C15
  private static let weyl2 = weyl &* 2, weyl3 = weyl &* 3, weyl4 = weyl &* 4

  enum Verdict: Equatable {
    case whole(writer: UInt32, seq: UInt64)
    /// Whole, from `writer`, in a form too short to carry its sequence number.
    case untracked(writer: UInt32)
    case corrupt
  }

  /// The first filler word of the value (key, writer, length, seq); its high half is
  /// the tag.
  @inline(__always)
  private static func seedWord(key: UInt32, writer: UInt32, length: Int, seq: UInt64) -> UInt64 {
    var g = SplitMix64(
      seed: UInt64(key) &* 0x9E37_79B9 ^ UInt64(writer) << 32 ^ seq ^ UInt64(truncatingIfNeeded: length) << 48)
    return g.next()
  }

  /// Fills `buffer` (its whole length) with the value for (key, writer, seq).
  ///
  /// Written in whole 8-byte words wherever it can be: the cache's 8- and 16-byte loads
  /// of a value just written are then served from single stores, where loads that span
  /// two smaller stores would stall the CPU and be charged to the set being measured.
  static func write(into buffer: UnsafeMutableRawBufferPointer, key: UInt32, writer: UInt32, seq: UInt64) {
    let n = buffer.count
    if n < headerSize {
      writeCompact(into: buffer, key: key, writer: writer, seq: seq)
      return
    }
    var w = seedWord(key: key, writer: writer, length: n, seq: seq)
    buffer.storeBytes(of: (w >> 32 | UInt64(key) << 32).littleEndian, toByteOffset: 0, as: UInt64.self)
    buffer.storeBytes(
      of: (UInt64(writer) | UInt64(truncatingIfNeeded: n) << 32).littleEndian, toByteOffset: 8, as: UInt64.self)
    buffer.storeBytes(of: seq.littleEndian, toByteOffset: 16, as: UInt64.self)
    // Four words a round, then up to three one by one: as one word-at-a-time loop, the
    // loop was vectorised, and its setup took much of what a small value cost every
    // measured set (callgrind of a cache-stress worker).
    var o = headerSize
    while o &+ 32 <= n {
      buffer.storeBytes(of: w.littleEndian, toByteOffset: o, as: UInt64.self)
      buffer.storeBytes(of: (w &+ weyl).littleEndian, toByteOffset: o &+ 8, as: UInt64.self)
      buffer.storeBytes(of: (w &+ weyl2).littleEndian, toByteOffset: o &+ 16, as: UInt64.self)
      buffer.storeBytes(of: (w &+ weyl3).littleEndian, toByteOffset: o &+ 24, as: UInt64.self)
      w &+= weyl4
      o &+= 32
    }
    for _ in 0..<3 where o &+ 8 <= n {
      buffer.storeBytes(of: w.littleEndian, toByteOffset: o, as: UInt64.self)
      w &+= weyl
      o &+= 8
    }
    if o < n {
      for i in 0..<(n - o) { buffer[o + i] = UInt8(truncatingIfNeeded: w >> UInt64(8 * i)) }
    }
  }

  /// Judges a value read for `key`; `writers` is the number of worker writers. With
  /// `whole` false, only the header is checked (key, length, writer: what the peers
  /// check on every read, their length and key digits), not the tag and every byte.
  @inline(__always)
  static func check(_ b: UnsafeRawBufferPointer, key: UInt32, writers: UInt32, whole: Bool = true) -> Verdict {
    let n = b.count
    if n < headerSize { return checkCompact(b, key: key, writers: writers) }
    let k = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
    let w = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
    let len = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
    let seq = UInt64(littleEndian: b.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
    guard k == key, Int(len) == n, w < writers || w == prefillWriter else { return .corrupt }
    if whole && !regenerates(b, key: k, writer: w, seq: seq) { return .corrupt }
    return .whole(writer: w, seq: seq)
  }

  /// Whether the tag and the filler are exactly what (key, writer, length, seq) give.
  @inline(never)
  private static func regenerates(_ b: UnsafeRawBufferPointer, key: UInt32, writer: UInt32, seq: UInt64) -> Bool {
    let n = b.count
    var w = seedWord(key: key, writer: writer, length: n, seq: seq)
    guard
      UInt32(littleEndian: b.loadUnaligned(fromByteOffset: 0, as: UInt32.self)) == UInt32(truncatingIfNeeded: w >> 32)
    else {
      return false
    }
    var o = headerSize
    var diff: UInt64 = 0
    while o &+ 8 <= n {
      diff |= UInt64(littleEndian: b.loadUnaligned(fromByteOffset: o, as: UInt64.self)) ^ w
      w &+= weyl
      o &+= 8
    }
    for i in 0..<(n - o) where b[o + i] != UInt8(truncatingIfNeeded: w >> UInt64(8 * i)) { return false }
    return diff == 0
  }

  // MARK: The compact forms (8 to 23 bytes)

  /// The compact writer field of `writer`.
  @inline(__always)
  private static func compactWriter(_ writer: UInt32) -> UInt16 {
    writer == prefillWriter ? compactPrefill : UInt16(truncatingIfNeeded: writer)
  }

  /// The 8-to-15-byte form's serial: the sequence number's counter and incarnation mixed
  /// into 16 bits, so that a writer's successive versions of a key differ in it (and in
  /// their tags).
  @inline(__always)
  private static func serial(_ seq: UInt64) -> UInt16 {
    UInt16(truncatingIfNeeded: seq ^ (seq >> 40) &* 0x9E37)
  }

  @inline(never)
  private static func writeCompact(into buffer: UnsafeMutableRawBufferPointer, key: UInt32, writer: UInt32, seq: UInt64)
  {
    let n = buffer.count
    precondition(n >= minimumSize, "a value shorter than \(minimumSize) bytes cannot be checked")
    let cw = compactWriter(writer)
    var w: UInt64
    if n >= trackedMinimumSize {
      w = seedWord(key: key, writer: UInt32(cw), length: n, seq: seq)
      buffer.storeBytes(of: seq.littleEndian, toByteOffset: 0, as: UInt64.self)
      buffer.storeBytes(of: (UInt64(cw) | w & ~0xFFFF).littleEndian, toByteOffset: 8, as: UInt64.self)
      fillTail(buffer, from: 16, w &+ weyl)
    } else {
      let s = serial(seq)
      w = seedWord(key: key, writer: UInt32(cw), length: n, seq: UInt64(s))
      buffer.storeBytes(
        of: (UInt64(cw) | UInt64(s) << 16 | w & ~0xFFFF_FFFF).littleEndian, toByteOffset: 0, as: UInt64.self)
      fillTail(buffer, from: 8, w &+ weyl)
    }
  }

  /// The last `n - from` (< 8) bytes: the low bytes of `w`.
  @inline(__always)
  private static func fillTail(_ buffer: UnsafeMutableRawBufferPointer, from: Int, _ w: UInt64) {
    for i in 0..<(buffer.count - from) { buffer[from + i] = UInt8(truncatingIfNeeded: w >> UInt64(8 * i)) }
  }

  @inline(never)
  private static func checkCompact(_ b: UnsafeRawBufferPointer, key: UInt32, writers: UInt32) -> Verdict {
    let n = b.count
    guard n >= minimumSize else { return .corrupt }
    let head = UInt64(littleEndian: b.loadUnaligned(fromByteOffset: n >= trackedMinimumSize ? 8 : 0, as: UInt64.self))
    let cw = UInt16(truncatingIfNeeded: head)
    guard cw == compactPrefill || UInt32(cw) < writers else { return .corrupt }
    let writer = cw == compactPrefill ? prefillWriter : UInt32(cw)
    let w: UInt64
    let tail: Int
    let seq: UInt64
    if n >= trackedMinimumSize {
      seq = UInt64(littleEndian: b.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
      w = seedWord(key: key, writer: UInt32(cw), length: n, seq: seq)
      guard head & ~0xFFFF == w & ~0xFFFF else { return .corrupt }
      tail = 16
    } else {
      seq = 0
      w = seedWord(key: key, writer: UInt32(cw), length: n, seq: head >> 16 & 0xFFFF)
      guard head & ~0xFFFF_FFFF == w & ~0xFFFF_FFFF else { return .corrupt }
      tail = 8
    }
    let filler = w &+ weyl
    for i in 0..<(n - tail) where b[tail + i] != UInt8(truncatingIfNeeded: filler >> UInt64(8 * i)) { return .corrupt }
    return n >= trackedMinimumSize ? .whole(writer: writer, seq: seq) : .untracked(writer: writer)
  }

  /// Breaks a value already written by `write` (for `--plant-corruption`): its last
  /// byte no longer matches what its header regenerates.
  static func spoil(_ buffer: UnsafeMutableRawBufferPointer) {
    buffer[buffer.count - 1] ^= 0x5A
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

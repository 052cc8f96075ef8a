import CMappedCacheShim
import Glibc
import Synchronization

/// Every access to the shared mapping goes through this type. It holds the mapping's
/// base address and the validated `Layout`, and it offers:
/// - atomic views of header words, slot words and process-table words at offsets that
///   are constants of the format or derived from the validated layout;
/// - bounds-checked reads of records whose offsets come from the file
///   (`recordHeader(at:)` returns nil for anything out of bounds);
/// - raw copies into and out of log ranges that a bounds check already accepted.
///
/// Invariant: `base` maps at least `layout.fileSize` bytes for the life of the value
/// (the owning `MappedFile` outlives every `MappedMemory` made from it).
struct MappedMemory {
  let base: UnsafeMutableRawPointer
  let slotsBase: UnsafeMutableRawPointer
  let slotCount: Int
  let slotBytes: Int
  /// Most key+value bytes in a slot's inline area (0 when slots have none).
  let inlineCapacity: Int
  let smallBase: Int, smallEnd: Int, mainBase: Int, mainEnd: Int
  let maxKey: Int, maxValue: Int

  init(base: UnsafeMutableRawPointer, layout: Layout) {
    self.base = base
    slotsBase = base + layout.slotsOffset
    slotCount = layout.slotCount
    slotBytes = layout.slotBytes
    inlineCapacity = layout.inlineCapacity
    smallBase = layout.smallBase
    smallEnd = layout.smallBase + layout.smallSize
    mainBase = layout.mainBase
    mainEnd = layout.mainBase + layout.mainSize
    maxKey = layout.maxKey
    maxValue = layout.maxValue
  }

  // MARK: Header

  /// An atomic header word. `offset` is a `Format.H` constant (8-byte aligned, < 4096).
  @inline(__always)
  func word(_ offset: Int) -> UnsafeMutablePointer<Atomic<UInt64>> {
    (base + offset).assumingMemoryBound(to: Atomic<UInt64>.self)
  }

  /// The write-lock word (32 bits: futexes are 32-bit).
  @inline(__always)
  var lockWord: UnsafeMutablePointer<Atomic<UInt32>> {
    (base + Format.H.lockWord).assumingMemoryBound(to: Atomic<UInt32>.self)
  }

  /// The lock word's raw address, for `futex`.
  var lockWordAddress: UnsafeMutablePointer<UInt32> {
    (base + Format.H.lockWord).assumingMemoryBound(to: UInt32.self)
  }

  /// Writes the final magic number last, with release ordering, so that a process that
  /// reads it also sees every header byte written before it.
  static func publishMagic(_ base: UnsafeMutableRawPointer, _ magic: UInt64) {
    base.assumingMemoryBound(to: Atomic<UInt64>.self).pointee.store(magic, ordering: .releasing)
  }

  // MARK: Process table

  /// A word of process-table entry `i` (`0 ..< procCount`, checked by the caller).
  @inline(__always)
  func procWord(_ i: Int, _ field: Int) -> UnsafeMutablePointer<Atomic<UInt64>> {
    (base + Format.headerPage + i * Format.procEntryBytes + field).assumingMemoryBound(to: Atomic<UInt64>.self)
  }

  // MARK: Slots

  /// Words of slot `i`. Precondition: `0 <= i < slotCount` (indices come from `home`
  /// and `next`, never from the file).
  @inline(__always)
  func slot(_ i: Int, _ field: Int) -> UnsafeMutablePointer<Atomic<UInt64>> {
    (slotsBase + (i &* slotBytes &+ field)).assumingMemoryBound(to: Atomic<UInt64>.self)
  }

  // MARK: Inline entries (in the slot; bounds from `inlineCapacity`, never the file)

  /// The inline key and value lengths of slot `i`, or nil when they do not fit its area.
  /// Racy under readers (validated by the seqlock afterwards), so only bounds are trusted.
  @inline(__always)
  func inlineLengths(_ i: Int) -> (klen: Int, vlen: Int)? {
    let p = slotsBase + i &* slotBytes
    let klen = Int(p.load(fromByteOffset: Format.S.klen, as: UInt16.self))
    let vlen = Int(p.load(fromByteOffset: Format.S.vlen, as: UInt16.self))
    guard klen &+ vlen <= inlineCapacity else { return nil }
    return (klen, vlen)
  }

  @inline(__always)
  func inlineSum(_ i: Int) -> UInt32 {
    (slotsBase + i &* slotBytes).load(fromByteOffset: Format.S.sum, as: UInt32.self)
  }

  @inline(__always)
  func inlineVersion(_ i: Int) -> UInt64 {
    (slotsBase + i &* slotBytes).load(fromByteOffset: Format.S.cas, as: UInt64.self)
  }

  /// Whether slot `i`'s inline key (lengths checked by `inlineLengths`) equals `key`.
  @inline(__always)
  func inlineKeyEquals(_ i: Int, _ key: UnsafeRawBufferPointer) -> Bool {
    MappedMemory.bytesEqual(slotsBase + i &* slotBytes + Format.S.bytes, key.baseAddress!, key.count)
  }

  /// Copies slot `i`'s inline value (lengths checked by `inlineLengths`) to `out`.
  @inline(__always)
  func copyInlineValue(_ i: Int, klen: Int, vlen: Int, to out: UnsafeMutableRawPointer) {
    // memcpy, not inline loads: the copy races with writers by design (the seqlock
    // discards a torn one), and a plain copy would make ThreadSanitizer report that race.
    if vlen > 0 { out.copyMemory(from: slotsBase + i &* slotBytes + Format.S.bytes + klen, byteCount: vlen) }
  }

  /// The inline key and value bytes of slot `i` (lengths checked), for writers and the verifier.
  func inlineBytes(_ i: Int, klen: Int, vlen: Int) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
    let p = slotsBase + i &* slotBytes + Format.S.bytes
    return (UnsafeRawBufferPointer(start: p, count: klen), UnsafeRawBufferPointer(start: p + klen, count: vlen))
  }

  /// Writes slot `i`'s inline area. Precondition: `key.count + value.count <= inlineCapacity`,
  /// and the caller is inside the slot's seqlock write.
  func writeInline(_ i: Int, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, sum: UInt32, cas: UInt64) {
    precondition(key.count + value.count <= inlineCapacity, "inline entry too large")
    let p = slotsBase + i &* slotBytes
    p.storeBytes(of: UInt16(key.count), toByteOffset: Format.S.klen, as: UInt16.self)
    (p + Format.S.bytes).copyMemory(from: key.baseAddress!, byteCount: key.count)
    writeInlineValue(i, klen: key.count, value: value, sum: sum, cas: cas)
  }

  /// Rewrites slot `i`'s inline value, keeping its key (`klen` bytes, already there).
  /// Precondition: `klen + value.count <= inlineCapacity`, and the caller is inside the
  /// slot's seqlock write.
  @inline(__always)
  func writeInlineValue(_ i: Int, klen: Int, value: UnsafeRawBufferPointer, sum: UInt32, cas: UInt64) {
    precondition(klen + value.count <= inlineCapacity, "inline entry too large")
    let p = slotsBase + i &* slotBytes
    p.storeBytes(of: UInt16(value.count), toByteOffset: Format.S.vlen, as: UInt16.self)
    p.storeBytes(of: sum, toByteOffset: Format.S.sum, as: UInt32.self)
    p.storeBytes(of: cas, toByteOffset: Format.S.cas, as: UInt64.self)
    if value.count > 0 { (p + Format.S.bytes + klen).copyMemory(from: value.baseAddress!, byteCount: value.count) }
  }

  /// Copies slot `from`'s inline area to slot `to` (inside `to`'s seqlock write).
  func copyInlineArea(from: Int, to: Int) {
    guard slotBytes > Format.slotHeaderBytes else { return }
    (slotsBase + to &* slotBytes + Format.slotHeaderBytes)
      .copyMemory(from: slotsBase + from &* slotBytes + Format.slotHeaderBytes, byteCount: slotBytes - Format.slotHeaderBytes)
  }

  /// Starts fetching slot `i`'s cache lines for writing, without waiting for them (a
  /// hint: it never faults). A writer calls it before taking the lock, so that the
  /// slot's cache miss overlaps the lock's acquisition instead of following it.
  /// Precondition: `0 <= i < slotCount`.
  @inline(__always)
  func prefetchSlot(_ i: Int) {
    let p = slotsBase + i &* slotBytes
    mc_prefetch_for_write(p)
    if slotBytes > 64 { mc_prefetch_for_write(p + 64) }
  }

  @inline(__always)
  func home(_ hash: UInt64) -> Int {
    // Lemire's multiply-shift range reduction: uniform over any slot count.
    Int(truncatingIfNeeded: hash.multipliedFullWidth(by: UInt64(slotCount)).high)
  }

  @inline(__always)
  func next(_ i: Int) -> Int { i &+ 1 == slotCount ? 0 : i &+ 1 }

  // MARK: Ghost

  @inline(__always)
  func ghost(_ index: Int, ghostOffset: Int) -> UnsafeMutablePointer<Atomic<UInt32>> {
    (base + ghostOffset + index * 4).assumingMemoryBound(to: Atomic<UInt32>.self)
  }

  // MARK: Records (offsets come from the file: always checked)

  struct RecordHeader {
    var size: Int
    var klen: Int
    var kind: UInt16
    var vlen: Int
    var sum: UInt32
    var hash: UInt64
    var cas: UInt64
  }

  /// The end of the log holding `loc`, or nil when `loc` is not an aligned offset
  /// inside a log with room for a pad header.
  @inline(__always)
  func logEnd(containing loc: Int) -> Int? {
    guard loc & 7 == 0 else { return nil }
    // `loc <= end - 8`, not `loc + 8 <= end`: a hostile `loc` near Int.max must not wrap past the check.
    if loc >= mainBase && loc <= mainEnd &- 8 { return mainEnd }
    if loc >= smallBase && loc <= smallEnd &- 8 { return smallEnd }
    return nil
  }

  /// Reads the record header at `loc`, checking that the whole record lies inside
  /// the log that holds `loc` and that its lengths fit the cache's limits.
  /// Returns nil for anything else. Pads come back with only `size` and `kind`.
  @inline(__always)
  func recordHeader(at loc: Int) -> RecordHeader? {
    guard let end = logEnd(containing: loc) else { return nil }
    let p = base + loc
    let size = Int(p.load(fromByteOffset: Format.R.size, as: UInt32.self))
    let kind = p.load(fromByteOffset: Format.R.kind, as: UInt16.self)
    guard size >= 8, size & 7 == 0, size <= end &- loc else { return nil }
    if kind == Format.kindPad { return RecordHeader(size: size, klen: 0, kind: kind, vlen: 0, sum: 0, hash: 0, cas: 0) }
    let klen = Int(p.load(fromByteOffset: Format.R.klen, as: UInt16.self))
    let vlen = Int(p.load(fromByteOffset: Format.R.vlen, as: UInt32.self))
    guard klen >= 1, klen <= maxKey, vlen <= maxValue else { return nil }
    switch kind {
    case Format.kindEntry: guard size >= Format.recordHeaderBytes &+ klen &+ vlen else { return nil }
    case Format.kindHeaderOnly: guard size == Format.headerOnlyRecordBytes else { return nil }
    default: return nil
    }
    return RecordHeader(size: size, klen: klen, kind: kind, vlen: vlen,
                        sum: p.load(fromByteOffset: Format.R.sum, as: UInt32.self),
                        hash: p.load(fromByteOffset: Format.R.hash, as: UInt64.self),
                        cas: p.load(fromByteOffset: Format.R.cas, as: UInt64.self))
  }

  /// Whether the key stored in the record at `loc` (header already checked) equals `key`.
  @inline(__always)
  func keyEquals(record loc: Int, _ key: UnsafeRawBufferPointer) -> Bool {
    MappedMemory.bytesEqual(base + loc + Format.recordHeaderBytes, key.baseAddress!, key.count)
  }

  /// `memcmp(a, b, n) == 0`, without the call for keys of up to 16 bytes (two word
  /// compares). Precondition: both ranges readable.
  @inline(__always)
  static func bytesEqual(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, _ n: Int) -> Bool {
    if n <= 16 {
      // `b` is the caller's key: read it as the hash does (no load crossing its byte 8).
      let x = KeyHash.shortWords(a, n), y = KeyHash.shortWords(b, n)
      return x.0 == y.0 && x.1 == y.1
    }
    return memcmp(a, b, n) == 0
  }

  /// Copies the value of a checked record into `out` (room for `h.vlen` bytes).
  @inline(__always)
  func copyValue(record loc: Int, _ h: RecordHeader, to out: UnsafeMutableRawPointer) {
    if h.vlen > 0 { out.copyMemory(from: base + loc + Format.recordHeaderBytes + h.klen, byteCount: h.vlen) }
  }

  /// The key and value bytes of a checked entry record (kind 1), for writers (who hold
  /// the lock, so the bytes cannot change underneath them) and for the verifier.
  func recordBytes(_ loc: Int, _ h: RecordHeader) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
    precondition(h.kind == Format.kindEntry, "a header-only record holds no bytes")
    let k = UnsafeRawBufferPointer(start: base + loc + Format.recordHeaderBytes, count: h.klen)
    let v = UnsafeRawBufferPointer(start: base + loc + Format.recordHeaderBytes + h.klen, count: h.vlen)
    return (k, v)
  }

  // MARK: Writing records (writers only, under the lock, at offsets they computed)

  /// Writes an entry record at `loc` (with `headerOnly`, the header alone: key and value go
  /// inline in the slot). Precondition: `loc ..< loc+size` lies in one log and no slot
  /// refers to it; `size` is the record's size for these lengths.
  func writeRecord(at loc: Int, size: Int, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer,
                   headerOnly: Bool, sum: UInt32, hash: UInt64, cas: UInt64) {
    precondition(logEnd(containing: loc).map { loc + size <= $0 } ?? false, "record outside the log")
    let p = base + loc
    p.storeBytes(of: UInt32(size), toByteOffset: Format.R.size, as: UInt32.self)
    p.storeBytes(of: UInt16(key.count), toByteOffset: Format.R.klen, as: UInt16.self)
    p.storeBytes(of: headerOnly ? Format.kindHeaderOnly : Format.kindEntry, toByteOffset: Format.R.kind, as: UInt16.self)
    p.storeBytes(of: UInt32(value.count), toByteOffset: Format.R.vlen, as: UInt32.self)
    p.storeBytes(of: sum, toByteOffset: Format.R.sum, as: UInt32.self)
    p.storeBytes(of: hash, toByteOffset: Format.R.hash, as: UInt64.self)
    p.storeBytes(of: cas, toByteOffset: Format.R.cas, as: UInt64.self)
    if headerOnly { return }
    (p + Format.recordHeaderBytes).copyMemory(from: key.baseAddress!, byteCount: key.count)
    if value.count > 0 { (p + Format.recordHeaderBytes + key.count).copyMemory(from: value.baseAddress!, byteCount: value.count) }
    let used = Format.recordHeaderBytes + key.count + value.count
    if used < size { (p + used).initializeMemory(as: UInt8.self, repeating: 0, count: size - used) }
  }

  /// Copies a checked record to `to` (which has room, in a log, unreferenced).
  func moveRecord(from: Int, to: Int, size: Int) {
    precondition(logEnd(containing: to).map { to + size <= $0 } ?? false, "record outside the log")
    (base + to).copyMemory(from: base + from, byteCount: size)
  }

  /// Writes a pad record covering `loc ..< loc+size` (size ≥ 8, multiple of 8).
  func writePad(at loc: Int, size: Int) {
    precondition(logEnd(containing: loc).map { loc + size <= $0 } ?? false, "pad outside the log")
    (base + loc).storeBytes(of: UInt32(size), toByteOffset: Format.R.size, as: UInt32.self)
    (base + loc).storeBytes(of: Format.kindPad, toByteOffset: Format.R.kind, as: UInt16.self)
  }
}

import CMappedCacheShim
import Glibc
import Synchronization
import SystemCalls

// The mapping's one room: this file is the only one in the engine that forms pointers
// into the shared mapping or dereferences them. Everything else names what it wants
// (a header word, a slot's `seq`, a record at an offset) and gets a bounds-checked view.
// Two kinds of bounds guard it:
// - indices and offsets the engine computed itself (slot indices from `home`/`next`,
//   header and process-table words from `Format`): checked by `assert` in debug builds,
//   the way swift-collections' `_HashTable.UnsafeHandle` checks its buckets;
// - offsets and lengths read from the file (a slot's `loc`, a record's lengths, an
//   inline entry's lengths): always checked, in release builds too, before any byte
//   they name is touched (`recordHeader(at:)`, `inlineLengths(_:)`).

/// A 64-bit word of the shared mapping (or of a handle's private counter block), viewed
/// atomically. Only `MappedMemory` makes one; the ordering is written at each use.
struct SharedWord {
  fileprivate let address: UnsafeMutablePointer<Atomic<UInt64>>

  @_semantics("atomics.requires_constant_orderings") @_transparent func load(_ ordering: AtomicLoadOrdering) -> UInt64 {
    address.pointee.load(ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent func store(
    _ value: UInt64, _ ordering: AtomicStoreOrdering
  ) {
    address.pointee.store(value, ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent func add(
    _ value: UInt64, _ ordering: AtomicUpdateOrdering
  ) {
    address.pointee.wrappingAdd(value, ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent func exchange(
    _ value: UInt64, _ ordering: AtomicUpdateOrdering
  ) -> UInt64 {
    address.pointee.exchange(value, ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent func bitwiseOr(
    _ bits: UInt64, _ ordering: AtomicUpdateOrdering
  ) {
    address.pointee.bitwiseOr(bits, ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent
  func compareExchange(expected: UInt64, desired: UInt64, _ ordering: AtomicUpdateOrdering) -> Bool {
    address.pointee.compareExchange(expected: expected, desired: desired, ordering: ordering).exchanged
  }
  /// Adds one with a plain load and store: for statistics counters whose increments
  /// may be lost between threads of one handle (see `Reader.countHit`).
  @inline(__always) func increment() { store(load(.relaxed) &+ 1, .relaxed) }
}

/// A 32-bit word of the shared mapping (the lock word, ghost tags), viewed atomically.
struct SharedWord32 {
  fileprivate let address: UnsafeMutablePointer<Atomic<UInt32>>

  @_semantics("atomics.requires_constant_orderings") @_transparent func load(_ ordering: AtomicLoadOrdering) -> UInt32 {
    address.pointee.load(ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent func store(
    _ value: UInt32, _ ordering: AtomicStoreOrdering
  ) {
    address.pointee.store(value, ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent func exchange(
    _ value: UInt32, _ ordering: AtomicUpdateOrdering
  ) -> UInt32 {
    address.pointee.exchange(value, ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent
  func compareExchange(expected: UInt32, desired: UInt32, _ ordering: AtomicUpdateOrdering) -> Bool {
    address.pointee.compareExchange(expected: expected, desired: desired, ordering: ordering).exchanged
  }
  /// Sleeps while the word holds `expected`, at most `nanoseconds` (a shared futex: works
  /// across processes on a `MAP_SHARED` mapping).
  func futexWait(expected: UInt32, nanoseconds: Int64) {
    Sys.futexWait(UnsafeMutableRawPointer(address).assumingMemoryBound(to: UInt32.self), expected, nanoseconds)
  }
  /// Wakes at most `count` sleepers of `futexWait`.
  func futexWake(_ count: Int32) {
    Sys.futexWake(UnsafeMutableRawPointer(address).assumingMemoryBound(to: UInt32.self), count)
  }
}

/// A handle's three statistics counters: words of its process-table entry, or, for a
/// read-only handle (which has no entry), a private heap block it owns.
struct HandleCounters {
  let hits: SharedWord
  let misses: SharedWord
  let busy: SharedWord

  /// A private block of three zeroed words. Freed by `deallocatePrivate()`.
  static func allocatePrivate() -> HandleCounters {
    let p = UnsafeMutablePointer<Atomic<UInt64>>.allocate(capacity: 3)
    for i in 0..<3 { (p + i).initialize(to: Atomic(0)) }
    return HandleCounters(
      hits: SharedWord(address: p), misses: SharedWord(address: p + 1),
      busy: SharedWord(address: p + 2))
  }

  /// Frees a block made by `allocatePrivate()`. Precondition: nothing uses it any more.
  func deallocatePrivate() {
    hits.address.deinitialize(count: 3)
    hits.address.deallocate()
  }
}

/// The shared mapping: its base address and the validated `Layout`, with named views of
/// every region (see the file comment for how each is bounds-checked).
///
/// Invariant: `base` maps at least `layout.fileSize` bytes for the life of the value
/// (the owning `MappedFile` outlives every `MappedMemory` made from it).
struct MappedMemory {
  private let base: UnsafeMutableRawPointer
  private let slotsBase: UnsafeMutableRawPointer
  let slotCount: Int
  let slotBytes: Int
  /// Most key+value bytes in a slot's inline area (0 when slots have none).
  let inlineCapacity: Int
  let procCount: Int
  let smallBase: Int, smallEnd: Int, mainBase: Int, mainEnd: Int
  let maxKey: Int, maxValue: Int
  private let ghostOffset: Int
  let ghostCount: Int
  private let fileSize: Int

  init(base: UnsafeMutableRawPointer, layout: Layout) {
    self.base = base
    slotsBase = base + layout.slotsOffset
    slotCount = layout.slotCount
    slotBytes = layout.slotBytes
    inlineCapacity = layout.inlineCapacity
    procCount = layout.procCount
    smallBase = layout.smallBase
    smallEnd = layout.smallBase + layout.smallSize
    mainBase = layout.mainBase
    mainEnd = layout.mainBase + layout.mainSize
    maxKey = layout.maxKey
    maxValue = layout.maxValue
    ghostOffset = layout.ghostOffset
    ghostCount = layout.ghostCount
    fileSize = layout.fileSize
  }

  // MARK: Header

  /// A live header word (its offset is a `Format.H` constant: 8-byte aligned, < 4096).
  @inline(__always)
  func header(_ word: HeaderWord) -> SharedWord {
    SharedWord(address: (base + word.offset).assumingMemoryBound(to: Atomic<UInt64>.self))
  }

  /// The write-lock word (32 bits: futexes are 32-bit).
  @inline(__always)
  var lockWord: SharedWord32 {
    SharedWord32(address: (base + Format.H.lockWord).assumingMemoryBound(to: Atomic<UInt32>.self))
  }

  /// Writes a new file's header after its first word, which holds the creation marker
  /// until `publishMagic` replaces it: zeroes bytes 8 ..< `zeroing` first (everything but
  /// the logs, when an interrupted creation is redone), then copies `image` from byte 8
  /// on, in two halves with `midway` between them (a test hook).
  /// Precondition: `base` maps at least `max(zeroing, image.count)` writable bytes.
  static func writeHeader(_ base: UnsafeMutableRawPointer, image: [UInt8], zeroing: Int, midway: () -> Void) {
    if zeroing > 8 { memset(base + 8, 0, zeroing - 8) }
    let half = image.count / 2
    image.withUnsafeBytes { img in
      guard img.count > 8 else { return }
      (base + 8).copyMemory(from: img.baseAddress! + 8, byteCount: max(0, half - 8))
      midway()
      (base + max(8, half)).copyMemory(from: img.baseAddress! + max(8, half), byteCount: img.count - max(8, half))
    }
  }

  /// Writes the final magic number in a new file's first word last, with release
  /// ordering, so that a process that reads it also sees every header byte written before.
  static func publishMagic(_ base: UnsafeMutableRawPointer, _ magic: UInt64) {
    base.assumingMemoryBound(to: Atomic<UInt64>.self).pointee.store(magic, ordering: .releasing)
  }

  // MARK: Process table

  /// Word `field` (a `Format.P` constant) of process-table entry `i`.
  @inline(__always)
  func procWord(_ i: Int, _ field: Int) -> SharedWord {
    assert(i >= 0 && i < procCount, "process-table entry out of range")
    return SharedWord(
      address: (base + Format.headerPage + i &* Format.procEntryBytes + field)
        .assumingMemoryBound(to: Atomic<UInt64>.self))
  }

  // MARK: Slot words

  @inline(__always)
  private func slotWord(_ i: Int, _ field: Int) -> SharedWord {
    assert(i >= 0 && i < slotCount, "slot index out of range")
    return SharedWord(address: (slotsBase + (i &* slotBytes &+ field)).assumingMemoryBound(to: Atomic<UInt64>.self))
  }

  /// Slot `i`'s sequence word: odd while a writer changes the slot.
  /// Precondition: `0 <= i < slotCount` (indices come from `home` and `next`, never the file).
  @inline(__always) func seq(_ i: Int) -> SharedWord { slotWord(i, Format.S.seq) }
  /// Slot `i`'s key hash (0: empty).
  @inline(__always) func hash(_ i: Int) -> SharedWord { slotWord(i, Format.S.hash) }
  /// Slot `i`'s record offset (read from the file: checked by `recordHeader(at:)` before use).
  @inline(__always) func loc(_ i: Int) -> SharedWord { slotWord(i, Format.S.loc) }
  /// Slot `i`'s expiry and flag bits.
  @inline(__always) func meta(_ i: Int) -> SharedWord { slotWord(i, Format.S.meta) }

  /// Starts fetching slot `i`'s cache lines for writing, without waiting for them (a
  /// hint: it never faults). A writer calls it before taking the lock, so that the
  /// slot's cache miss overlaps the lock's acquisition instead of following it.
  @inline(__always)
  func prefetchSlot(_ i: Int) {
    assert(i >= 0 && i < slotCount, "slot index out of range")
    let p = slotsBase + i &* slotBytes
    mc_prefetch_for_write(p)
    if slotBytes > 64 { mc_prefetch_for_write(p + 64) }
  }

  /// Where a prefetched line goes: the first-level cache, or only the second, which
  /// takes none of the core's few first-level fill buffers (16 on recent Intel cores)
  /// while the miss is in flight.
  enum PrefetchLevel {
    case firstLevel, secondLevel
  }

  /// Starts fetching slot `i`'s cache lines for reading (up to 256 bytes: the words and
  /// the whole inline area), without waiting for them: the first line (the slot's words)
  /// to `head`, the others to `rest`. A hint that never faults: a batch read
  /// (`CacheEngine.copyValues`) issues them before it probes any slot, so the keys'
  /// memory misses (and TLB walks) overlap instead of following one another.
  @inline(__always)
  func prefetchSlotForReading(_ i: Int, head: PrefetchLevel, rest: PrefetchLevel) {
    assert(i >= 0 && i < slotCount, "slot index out of range")
    let p = slotsBase + i &* slotBytes
    @inline(__always) func fetch(_ line: UnsafeMutableRawPointer, _ level: PrefetchLevel) {
      if level == .firstLevel { mc_prefetch_for_read(line) } else { mc_prefetch_to_l2(line) }
    }
    fetch(p, head)
    if slotBytes > 64 { fetch(p + 64, rest) }
    if slotBytes > 128 {
      fetch(p + 128, rest)
      fetch(p + 192, rest)
    }
  }

  /// Starts fetching the first two cache lines of the record at `loc` (its header, key
  /// and the start of its value) for reading. `loc` is read from the file, racily: it is
  /// checked like any record offset (an aligned offset inside a log), and nothing is
  /// fetched otherwise. A hint that never faults.
  @inline(__always)
  func prefetchRecord(at loc: Int) {
    guard let end = logEnd(containing: loc) else { return }
    let p = base + loc
    mc_prefetch_for_read(p)
    if loc <= end &- 128 { mc_prefetch_for_read(p + 64) }
  }

  // MARK: Inline entries (in the slot; bounds from `inlineCapacity`, never the file)

  /// The inline key and value lengths of slot `i`, or nil when they do not fit its area.
  /// Racy under readers (validated by the seqlock afterwards), so only bounds are trusted.
  @inline(__always)
  func inlineLengths(_ i: Int) -> (klen: Int, vlen: Int)? {
    assert(i >= 0 && i < slotCount, "slot index out of range")
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

  /// The inline key and value bytes of slot `i` (lengths checked), for writers and the
  /// verifier, and for scans that copy them under the slot's seqlock.
  func inlineBytes(_ i: Int, klen: Int, vlen: Int) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
    let p = slotsBase + i &* slotBytes + Format.S.bytes
    return (UnsafeRawBufferPointer(start: p, count: klen), UnsafeRawBufferPointer(start: p + klen, count: vlen))
  }

  /// Writes slot `i`'s inline area. Precondition: `key.count + value.count <= inlineCapacity`,
  /// and the caller is inside the slot's seqlock write.
  func writeInline(
    _ i: Int, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, sum: UInt32, cas: UInt64,
    _ held: borrowing WriteLock.Held
  ) {
    precondition(key.count + value.count <= inlineCapacity, "inline entry too large")
    let p = slotsBase + i &* slotBytes
    p.storeBytes(of: UInt16(key.count), toByteOffset: Format.S.klen, as: UInt16.self)
    (p + Format.S.bytes).copyMemory(from: key.baseAddress!, byteCount: key.count)
    writeInlineValue(i, klen: key.count, value: value, sum: sum, cas: cas, held)
  }

  /// Rewrites slot `i`'s inline value, keeping its key (`klen` bytes, already there).
  /// Precondition: `klen + value.count <= inlineCapacity`, and the caller is inside the
  /// slot's seqlock write.
  @inline(__always)
  func writeInlineValue(
    _ i: Int, klen: Int, value: UnsafeRawBufferPointer, sum: UInt32, cas: UInt64,
    _ held: borrowing WriteLock.Held
  ) {
    precondition(klen + value.count <= inlineCapacity, "inline entry too large")
    let p = slotsBase + i &* slotBytes
    p.storeBytes(of: UInt16(value.count), toByteOffset: Format.S.vlen, as: UInt16.self)
    p.storeBytes(of: sum, toByteOffset: Format.S.sum, as: UInt32.self)
    p.storeBytes(of: cas, toByteOffset: Format.S.cas, as: UInt64.self)
    if value.count > 0 { (p + Format.S.bytes + klen).copyMemory(from: value.baseAddress!, byteCount: value.count) }
  }

  /// Copies slot `from`'s inline area to slot `to` (inside `to`'s seqlock write).
  func copyInlineArea(from: Int, to: Int, _ held: borrowing WriteLock.Held) {
    guard slotBytes > Format.slotHeaderBytes else { return }
    (slotsBase + to &* slotBytes + Format.slotHeaderBytes)
      .copyMemory(
        from: slotsBase + from &* slotBytes + Format.slotHeaderBytes,
        byteCount: slotBytes - Format.slotHeaderBytes)
  }

  // MARK: Ghost tags

  /// Ghost tag `index` (`0 ..< ghostCount`, computed by `GhostTable`).
  @inline(__always)
  func ghost(_ index: Int) -> SharedWord32 {
    assert(index >= 0 && index < ghostCount, "ghost index out of range")
    return SharedWord32(address: (base + ghostOffset + index &* 4).assumingMemoryBound(to: Atomic<UInt32>.self))
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
    return RecordHeader(
      size: size, klen: klen, kind: kind, vlen: vlen,
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
      let x = KeyHash.shortWords(a, n)
      let y = KeyHash.shortWords(b, n)
      return x.0 == y.0 && x.1 == y.1
    }
    return memcmp(a, b, n) == 0
  }

  /// Copies the value of a checked record into `out` (room for `vlen` bytes).
  @inline(__always)
  func copyValue(record loc: Int, klen: Int, vlen: Int, to out: UnsafeMutableRawPointer) {
    if vlen > 0 { out.copyMemory(from: base + loc + Format.recordHeaderBytes + klen, byteCount: vlen) }
  }

  /// The key and value bytes of a checked entry record (kind 1), for writers (who hold
  /// the lock, so the bytes cannot change underneath them), the verifier, and scans that
  /// copy them under the slot's seqlock.
  func recordBytes(_ loc: Int, _ h: RecordHeader) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
    precondition(h.kind == Format.kindEntry, "a header-only record holds no bytes")
    let k = UnsafeRawBufferPointer(start: base + loc + Format.recordHeaderBytes, count: h.klen)
    let v = UnsafeRawBufferPointer(start: base + loc + Format.recordHeaderBytes + h.klen, count: h.vlen)
    return (k, v)
  }

  // MARK: Writing records (writers only, under the lock, at offsets they computed)
  // Every store into the mapping but the atomic words' takes the lock's witness.

  /// Writes an entry record at `loc` (with `headerOnly`, the header alone: key and value go
  /// inline in the slot). Precondition: `loc ..< loc+size` lies in one log and no slot
  /// refers to it; `size` is the record's size for these lengths.
  func writeRecord(
    at loc: Int, size: Int, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer,
    headerOnly: Bool, sum: UInt32, hash: UInt64, cas: UInt64, _ held: borrowing WriteLock.Held
  ) {
    precondition(logEnd(containing: loc).map { loc + size <= $0 } ?? false, "record outside the log")
    let p = base + loc
    p.storeBytes(of: UInt32(size), toByteOffset: Format.R.size, as: UInt32.self)
    p.storeBytes(of: UInt16(key.count), toByteOffset: Format.R.klen, as: UInt16.self)
    p.storeBytes(
      of: headerOnly ? Format.kindHeaderOnly : Format.kindEntry, toByteOffset: Format.R.kind,
      as: UInt16.self)
    p.storeBytes(of: UInt32(value.count), toByteOffset: Format.R.vlen, as: UInt32.self)
    p.storeBytes(of: sum, toByteOffset: Format.R.sum, as: UInt32.self)
    p.storeBytes(of: hash, toByteOffset: Format.R.hash, as: UInt64.self)
    p.storeBytes(of: cas, toByteOffset: Format.R.cas, as: UInt64.self)
    if headerOnly { return }
    (p + Format.recordHeaderBytes).copyMemory(from: key.baseAddress!, byteCount: key.count)
    if value.count > 0 {
      (p + Format.recordHeaderBytes + key.count).copyMemory(from: value.baseAddress!, byteCount: value.count)
    }
    let used = Format.recordHeaderBytes + key.count + value.count
    if used < size { (p + used).initializeMemory(as: UInt8.self, repeating: 0, count: size - used) }
  }

  /// Rewrites the value of the entry record at `loc` in place, with the same length, and
  /// its checksum and version (an in-place counter change). Preconditions: the header
  /// was checked (`recordHeader(at:)`: an entry of `klen` key bytes and `value.count`
  /// value bytes), and the caller is inside the seqlock write of the slot naming it.
  func rewriteRecordValue(
    at loc: Int, klen: Int, value: UnsafeRawBufferPointer, sum: UInt32, cas: UInt64,
    _ held: borrowing WriteLock.Held
  ) {
    precondition(
      logEnd(containing: loc).map { loc + Format.recordHeaderBytes + klen + value.count <= $0 } ?? false,
      "record outside the log")
    let p = base + loc
    p.storeBytes(of: sum, toByteOffset: Format.R.sum, as: UInt32.self)
    p.storeBytes(of: cas, toByteOffset: Format.R.cas, as: UInt64.self)
    if value.count > 0 {
      (p + Format.recordHeaderBytes + klen).copyMemory(from: value.baseAddress!, byteCount: value.count)
    }
  }

  /// Copies a checked record to `to` (which has room, in a log, unreferenced).
  func moveRecord(from: Int, to: Int, size: Int, _ held: borrowing WriteLock.Held) {
    precondition(logEnd(containing: to).map { to + size <= $0 } ?? false, "record outside the log")
    (base + to).copyMemory(from: base + from, byteCount: size)
  }

  /// Writes a pad record covering `loc ..< loc+size` (size ≥ 8, multiple of 8).
  func writePad(at loc: Int, size: Int, _ held: borrowing WriteLock.Held) {
    precondition(logEnd(containing: loc).map { loc + size <= $0 } ?? false, "pad outside the log")
    (base + loc).storeBytes(of: UInt32(size), toByteOffset: Format.R.size, as: UInt32.self)
    (base + loc).storeBytes(of: Format.kindPad, toByteOffset: Format.R.kind, as: UInt16.self)
  }

  // MARK: Test hooks

  /// The mapping's byte at file offset `offset`, for tests that damage the file in place
  /// (a stray store, a torn write) to check what readers, writers and repair then do.
  func _byte(at offset: Int) -> UnsafeMutableRawPointer {
    precondition(offset >= 0 && offset < fileSize, "offset outside the file")
    return base + offset
  }
}

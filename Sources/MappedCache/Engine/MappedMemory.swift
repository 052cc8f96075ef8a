import CMappedCacheShim
import Glibc
import Synchronization
import SystemCalls

// The mapping's one room: this file is the only one in the engine that forms pointers
// into the shared mapping or dereferences them. Everything else names what it wants
// (a header word, a partition's word, a bucket's tag, a record at an offset) and gets
// an atomic view, a value, a copy or a comparison; no raw view of the mapping leaves this
// file, except to a closure that must not let it escape (`PartitionMemory.withValue`).
// Two kinds of bounds guard it:
// - indices and offsets the engine computed itself (partitions from the routing, groups
//   and buckets from `Placement`, header and partition words from `Format`): checked by
//   `assert` in debug builds, the way swift-collections' `_HashTable.UnsafeHandle` checks
//   its buckets;
// - offsets and lengths read from the file (a slot's record offset, a record's flags and
//   lengths, a geometry word's group count): always checked, in release builds too,
//   before any byte they name is touched (`PartitionMemory.record(at:)`,
//   `PartitionMemory.isValidGroupCount`).

/// A 64-bit word of the shared mapping (or of a handle's private counter block), viewed
/// atomically. Only this file makes one; the ordering is written at each use.
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
  @_semantics("atomics.requires_constant_orderings") @_transparent
  func compareExchange(expected: UInt64, desired: UInt64, _ ordering: AtomicUpdateOrdering) -> Bool {
    address.pointee.compareExchange(expected: expected, desired: desired, ordering: ordering).exchanged
  }
  /// Adds one with a plain load and store: for statistics counters whose increments
  /// may be lost between threads of one handle (see `Reader.countHit`).
  @inline(__always) func increment() { store(load(.relaxed) &+ 1, .relaxed) }
}

/// A 32-bit word of the shared mapping (a lock word, a bucket's sequence or entry
/// word), viewed atomically.
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
  @_semantics("atomics.requires_constant_orderings") @_transparent func bitwiseOr(
    _ bits: UInt32, _ ordering: AtomicUpdateOrdering
  ) {
    address.pointee.bitwiseOr(bits, ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent func add(
    _ value: UInt32, _ ordering: AtomicUpdateOrdering
  ) {
    address.pointee.wrappingAdd(value, ordering: ordering)
  }
  @_semantics("atomics.requires_constant_orderings") @_transparent
  func compareExchange(expected: UInt32, desired: UInt32, _ ordering: AtomicUpdateOrdering) -> Bool {
    address.pointee.compareExchange(expected: expected, desired: desired, ordering: ordering).exchanged
  }
  /// Sleeps while the word holds `expected`, at most `nanoseconds` (a shared futex: works
  /// across processes on a `MAP_SHARED` mapping).
  func futexWait(expected: UInt32, nanoseconds: Int64) {
    SystemCall.futexWait(UnsafeMutableRawPointer(address).assumingMemoryBound(to: UInt32.self), expected, nanoseconds)
  }
  /// Wakes at most `count` sleepers of `futexWait`.
  func futexWake(_ count: Int32) {
    SystemCall.futexWake(UnsafeMutableRawPointer(address).assumingMemoryBound(to: UInt32.self), count)
  }
}

/// A private heap block of zeroed atomic words a handle owns (not the mapping), viewed
/// as `SharedWord`s: for what a handle's threads share among themselves.
struct PrivateWords {
  private let base: UnsafeMutablePointer<Atomic<UInt64>>
  let count: Int

  /// `count` zeroed words. Freed by `deallocate()`.
  static func allocate(count: Int) -> PrivateWords {
    let p = UnsafeMutablePointer<Atomic<UInt64>>.allocate(capacity: count)
    for i in 0..<count { (p + i).initialize(to: Atomic(0)) }
    return PrivateWords(base: p, count: count)
  }

  /// Word `i`. Precondition: `0 <= i < count` (computed by the owner, never read from
  /// anywhere).
  @inline(__always)
  subscript(_ i: Int) -> SharedWord {
    assert(i >= 0 && i < count)
    return SharedWord(address: base + i)
  }

  /// Precondition: nothing uses the block any more.
  func deallocate() {
    base.deinitialize(count: count)
    base.deallocate()
  }
}

/// A handle's three statistics counters: words of its process-table entry, or, for a
/// read-only handle (which has no entry), a private heap block it owns.
struct HandleCounters {
  let hits: SharedWord
  let misses: SharedWord
  let busy: SharedWord
  /// The private block, when the counters are one.
  private let block: PrivateWords?

  init(hits: SharedWord, misses: SharedWord, busy: SharedWord) {
    self.hits = hits
    self.misses = misses
    self.busy = busy
    block = nil
  }

  private init(block: PrivateWords) {
    hits = block[0]
    misses = block[1]
    busy = block[2]
    self.block = block
  }

  /// A private block of three zeroed words. Freed by `deallocatePrivate()`.
  static func allocatePrivate() -> HandleCounters { HandleCounters(block: .allocate(count: 3)) }

  /// Frees a block made by `allocatePrivate()`. Precondition: nothing uses it any more.
  func deallocatePrivate() { block?.deallocate() }
}

/// The shared mapping: its base address and the validated `Layout`, with named views of
/// the header, the process table and each partition (see the file comment for how each
/// is bounds-checked).
///
/// Invariant: `base` maps at least `mapped` bytes for the life of the value (the owning
/// `MappedFile` outlives every `MappedMemory` made from it), and no byte at or past the
/// end of partition `partitionCount - 1` is ever touched: the file may end there.
struct MappedMemory {
  private let base: UnsafeMutableRawPointer
  private let partitionsBase: UnsafeMutableRawPointer
  let partitionBytes: Int
  let procCount: Int
  /// The file's partition limits (`MappedFile.limits`, which outlives this value).
  private unowned(unsafe) let shared: PartitionMemory.SharedLimits
  /// The handle's routing (`MappedFile.routing`, which outlives this value): one word
  /// here, so that the many copies of this value stay small.
  private unowned(unsafe) let routing: Routing

  init(file: MappedFile, layout: Layout) {
    base = file.base
    partitionsBase = file.base + layout.partitionsOffset
    partitionBytes = layout.partitionBytes
    procCount = layout.procCount
    shared = file.limits
    routing = file.routing
  }

  /// The file's partition limits.
  @inline(__always) var limits: PartitionMemory.Limits { shared.value }

  /// The partitions this handle routes keys by: the file's count when the handle opened
  /// or last saw it grow (`refreshRouting`). Acquire: a count adopted by another thread
  /// of the handle comes with its view of the new partitions.
  @inline(__always)
  var partitionCount: Int { routing.count.load(ordering: .acquiring) }

  /// A partition count with its routing mask (`PartitionRoute`), from the one word that
  /// holds both: `partitionCount`, or a count this handle routed by before it (the
  /// word follows the count, never passing it). Acquire, as `partitionCount`.
  @inline(__always)
  var route: PartitionRoute { PartitionRoute(raw: routing.route.load(ordering: .acquiring)) }

  /// The file's bytes as far as this handle has seen them.
  var fileSize: Int { max(routing.createdSize, routing.partitionsOffset + partitionCount * partitionBytes) }

  /// The file's partition count as its header says now (0 in line 6: as created).
  /// Acquire: pairs with the grower's release store, so a handle that sees a count sees
  /// the partitions it names laid out.
  @inline(__always)
  func liveRouting() -> Int {
    let n = Int(truncatingIfNeeded: header(.grownCount).load(.acquiring))
    return n == 0 ? routing.createdCount : n
  }

  /// What a handle behind the header's partition count finds (`adoptGrowth`).
  enum Adoption {
    /// The handle now routes by the header's count.
    case adopted
    /// The handle's count is the header's (another thread adopted it), or ahead of it.
    case current
    /// The header names partitions past the end of the file: damage or a hostile
    /// write, since growth extends the file before it publishes a count. Ignored (the
    /// handle keeps its count), and remembered, so that it costs no system call again.
    case damaged
    /// A growth this handle cannot follow: the partitions lie inside the file but past
    /// its mapping (address space was short at open). Remembered too.
    case pastMapping
  }

  /// Adopts the header's partition count when the file has grown past this handle's
  /// (read from the shared, possibly hostile, file: adopted only when the partitions it
  /// names lie inside both the mapping and the file as `fstat` sees it, so that no
  /// byte past the end is ever touched). A system call, but only when the count did
  /// change: once per growth per handle (and once per damaged count).
  func adoptGrowth() -> Adoption {
    let mine = partitionCount
    let live = liveRouting()
    guard live > mine else { return .current }
    // A count judged before costs no system call again (a read's miss asks each time).
    guard live != routing.rejected.load(ordering: .relaxed) else { return .damaged }
    guard live != routing.unreachable.load(ordering: .relaxed) else { return .pastMapping }
    let end = live <= Format.maxPartitions ? routing.partitionsOffset + live * partitionBytes : Int.max
    guard let st = try? SystemCall.fstat(routing.fd), end <= Int(st.st_size) else {
      routing.rejected.store(live, ordering: .relaxed)
      return .damaged
    }
    guard end <= routing.mapped else {
      routing.unreachable.store(live, ordering: .relaxed)
      return .pastMapping
    }
    var cur = mine
    while cur < live {
      let (done, seen) = routing.count.compareExchange(
        expected: cur, desired: live, successOrdering: .releasing, failureOrdering: .acquiring)
      if done {
        routing.raiseRoute(to: live)
        return .adopted
      }
      cur = seen
    }
    return .current
  }

  /// `adoptGrowth`, for callers that only need to know whether the count changed.
  @discardableResult
  func refreshRouting() -> Bool { adoptGrowth() == .adopted }

  /// The header's grown count when it is damaged (`Adoption.damaged`), else nil: for
  /// `verify`.
  func damagedGrowth() -> Int? {
    adoptGrowth() == .damaged ? liveRouting() : nil
  }

  /// Stores this handle's count and size as the file's grown ones (the repair of a
  /// damaged count). Precondition: the caller holds the growth lock.
  func resetGrowth() {
    let count = partitionCount
    header(.grownSize).store(count == routing.createdCount ? 0 : UInt64(fileSize), .relaxed)
    header(.grownCount).store(count == routing.createdCount ? 0 : UInt64(count), .releasing)
  }

  // MARK: Header

  /// A live header word (its offset is a `Format.H` constant: 8-byte aligned, < 4096).
  @inline(__always)
  func header(_ word: HeaderWord) -> SharedWord {
    SharedWord(address: (base + word.offset).assumingMemoryBound(to: Atomic<UInt64>.self))
  }

  /// Writes a new file's header after its first word, which holds the creation marker
  /// until `publishMagic` replaces it: zeroes bytes 8 ..< `zeroing` first (the header
  /// page and process table, when an interrupted creation is redone), then copies `image`
  /// from byte 8 on, in two halves with `midway` between them (a test hook).
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

  /// Lays out partition `p` of a file being created (through the creator's own
  /// mapping, before the magic is published): its header lines zeroed, then its
  /// geometry, log positions and limit; its index zeroed. The logs' bytes are left as
  /// they are: they are reached only through index slots and log positions.
  static func formatPartition(
    _ base: UnsafeMutableRawPointer, layout l: Layout, partition p: Int, groups: Int? = nil
  ) {
    let groups = groups ?? l.initialGroups
    let part = base + l.partitionsOffset + p * l.partitionBytes
    memset(part, 0, Format.PartitionOffset.dataStart)
    let low = l.indexLow(groups: groups)
    memset(part + low, 0, l.partitionBytes - low)
    func put(_ offset: Int, _ v: UInt64) { part.storeBytes(of: v, toByteOffset: offset, as: UInt64.self) }
    put(Format.PartitionOffset.geometry, Geometry(generation: 0, groups: groups).raw)
    put(Format.PartitionOffset.smallHead, LogPosition(lap: 0, offset: l.smallBase).raw)
    put(Format.PartitionOffset.smallTail, LogPosition(lap: 0, offset: l.smallBase).raw)
    put(Format.PartitionOffset.mainHead, LogPosition(lap: 0, offset: l.mainBase).raw)
    put(Format.PartitionOffset.mainTail, LogPosition(lap: 0, offset: l.mainBase).raw)
    put(Format.PartitionOffset.mainLimit, UInt64(low))
  }

  /// Lays out partition `p`, which growth adds past this handle's partitions (under the
  /// growth lock, before any count names it), with an index of `groups` groups.
  /// Precondition: the file extends past the partition's end.
  func formatGrownPartition(_ p: Int, layout l: Layout, groups: Int) {
    precondition(l.partitionsOffset + (p + 1) * l.partitionBytes <= routing.mapped, "partition past the mapping")
    Self.formatPartition(base, layout: l, partition: p, groups: groups)
  }

  /// Writes the final magic number in a new file's first word last, with release
  /// ordering, so that a process that reads it also sees every byte written before.
  static func publishMagic(_ base: UnsafeMutableRawPointer, _ magic: UInt64) {
    base.assumingMemoryBound(to: Atomic<UInt64>.self).pointee.store(magic, ordering: .releasing)
  }

  // MARK: Process table

  /// The lock word's bits in this file (their widths follow the process table's size).
  @inline(__always) var lockBits: Format.Lock { Format.Lock(procCount: procCount) }

  /// Word `field` (a `Format.P` constant) of process-table entry `i`.
  @inline(__always)
  func procWord(_ i: Int, _ field: Int) -> SharedWord {
    assert(i >= 0 && i < procCount, "process-table entry out of range")
    return SharedWord(
      address: (base + Format.headerPage + i &* Format.procEntryBytes + field)
        .assumingMemoryBound(to: Atomic<UInt64>.self))
  }

  // MARK: Partitions

  /// Partition `p`. Precondition: `0 <= p < partitionCount` (from the routing, never the
  /// file), or a partition the caller (growth, under the growth lock) has laid out
  /// inside the file and the mapping.
  @inline(__always)
  func partition(_ p: Int) -> PartitionMemory {
    assert(p >= 0 && routing.partitionsOffset + (p + 1) * partitionBytes <= routing.mapped, "partition out of range")
    return PartitionMemory(base: partitionsBase + p &* partitionBytes, index: p, shared: shared)
  }

  // MARK: Test hooks

  /// The mapping's byte at file offset `offset`, for tests that damage the file in place
  /// (a stray store, a torn write) to check what readers, writers and repair then do.
  func _byte(at offset: Int) -> UnsafeMutableRawPointer {
    precondition(offset >= 0 && offset < fileSize, "offset outside the file")
    return base + offset
  }

  /// The file offset of partition `p`'s first byte (tests and tools).
  func _partitionOffset(_ p: Int) -> Int { partitionsBase - base + p * partitionBytes }
}

/// A handle's routing: the partition count it routes keys by (the file's when the handle
/// opened or last saw it grow), shared by its threads, and what adopting a grown count
/// checks. Owned by `MappedFile`.
final class Routing: @unchecked Sendable {
  let count: Atomic<Int>
  /// A count with its routing mask (`PartitionRoute.raw`), so that a read routes by one
  /// load: raised to each count adopted, right after it (`raiseRoute`).
  let route: Atomic<UInt64>
  /// A header count found damaged (`MappedMemory.Adoption.damaged`), 0 for none.
  let rejected = Atomic<Int>(0)
  /// A header count whose partitions lie past the mapping (`Adoption.pastMapping`), 0
  /// for none.
  let unreachable = Atomic<Int>(0)
  let partitionsOffset: Int
  let createdSize: Int
  /// The partition count the file was created with (line 6 holds 0 until it grows).
  let createdCount: Int
  /// Bytes mapped (`MappedFile.mapped`): no count whose partitions end past them is adopted.
  let mapped: Int
  let fd: Int32

  init(count: Int, layout: Layout, mapped: Int, fd: Int32) {
    self.count = Atomic(count)
    route = Atomic(PartitionRoute(count: count).raw)
    partitionsOffset = layout.partitionsOffset
    createdSize = layout.createdSize
    createdCount = layout.createdCount
    self.mapped = mapped
    self.fd = fd
  }

  /// Raises `route` to `count` (adopted by this thread a moment ago), unless another
  /// thread raised it as far or further: adoptions may finish in any order, and the word
  /// never goes back to a smaller count. Release, as the count's store.
  func raiseRoute(to count: Int) {
    var cur = route.load(ordering: .relaxed)
    let desired = PartitionRoute(count: count).raw
    while PartitionRoute(raw: cur).count < count {
      let (done, seen) = route.compareExchange(
        expected: cur, desired: desired, successOrdering: .releasing, failureOrdering: .relaxed)
      if done { return }
      cur = seen
    }
  }
}

/// One partition's bytes: its header words, its index, its ghost lines and its records.
/// Every pointer into a partition is formed here, from its base and an offset that is
/// either computed by the engine (asserted) or read from the file (checked).
///
/// Stores that change the partition take its lock's witness, which names the partition
/// (asserted: the engine hands each layer the partition its witness names).
struct PartitionMemory {
  /// What every partition shares: its size and the file's limits.
  struct Limits: Equatable {
    var bytes: Int
    var maxKey: Int
    var maxValue: Int
    var maxGroups: Int
    var smallBase: Int
    var mainBase: Int
    /// The largest record (key and value at their limits, with an expiry).
    var maxRecord: Int
    /// Where the main log's floor ends: the index never grows below it.
    var mainFloorEnd: Int

    /// Derived from the layout once per handle: a write wires a `Partition` per call, and
    /// deriving these from `Layout` each time lengthened every write.
    init(layout l: Layout) {
      assert(l.partitionBytes >= 256 << 10, "record(at:) counts on partitions of 256 KiB or more")
      bytes = l.partitionBytes
      maxKey = l.maxKey
      maxValue = l.maxValue
      maxGroups = l.maxGroups
      smallBase = l.smallBase
      mainBase = l.mainBase
      maxRecord = l.maxRecord
      mainFloorEnd = l.mainBase + l.mainFloor
    }
  }

  /// `Limits`, made once per handle (`MappedFile.limits`) and named by every view of
  /// the file. A view holds this reference and the two limits every read checks, not
  /// all eight words: a set makes a `Partition` (two views) for its out-of-line store on
  /// the stack, and the copy of the other twelve words cost it instructions and, more,
  /// loads stalled on those stores (`scripts/callgrind.sh` and `perf`;
  /// docs/history/hot-path.md).
  final class SharedLimits: Sendable {
    let value: Limits
    init(_ value: Limits) { self.value = value }
  }

  private let base: UnsafeMutableRawPointer
  /// The partition's number.
  let index: Int
  private unowned(unsafe) let shared: SharedLimits
  /// The limits a read checks, copied into the view: read through `shared` after a
  /// read's fences, each would cost a load more.
  private let bytes: Int
  private let maxGroups: Int
  @inline(__always) private var maxKey: Int { shared.value.maxKey }
  @inline(__always) private var maxValue: Int { shared.value.maxValue }

  fileprivate init(base: UnsafeMutableRawPointer, index: Int, shared: SharedLimits) {
    self.base = base
    self.index = index
    self.shared = shared
    bytes = shared.value.bytes
    maxGroups = shared.value.maxGroups
  }

  /// The file's partition limits.
  @inline(__always) var limits: Limits { shared.value }

  // MARK: Header words

  /// A word of the partition's header lines.
  @inline(__always)
  func word(_ w: PartitionWord) -> SharedWord {
    SharedWord(address: (base + w.offset).assumingMemoryBound(to: Atomic<UInt64>.self))
  }

  /// The partition's write-lock word (32 bits: futexes are 32-bit).
  @inline(__always)
  var lockWord: SharedWord32 {
    SharedWord32(address: (base + Format.PartitionOffset.lockWord).assumingMemoryBound(to: Atomic<UInt32>.self))
  }

  /// Whether a group count read from the file can be used: 1 to `maxGroups`.
  @inline(__always)
  func isValidGroupCount(_ n: Int) -> Bool { n >= 1 && n <= maxGroups }

  /// Where group `g`'s first byte is. Precondition: `g < maxGroups`.
  @inline(__always)
  func groupOffset(_ g: Int) -> Int { bytes &- (g &+ 1) &* Format.groupBytes }

  // MARK: Buckets

  @inline(__always)
  private func bucket(_ place: Place) -> UnsafeMutableRawPointer {
    assert(place.group >= 0 && place.group < maxGroups && place.bucket >= 0 && place.bucket < 4)
    return base + (groupOffset(place.group) &+ place.bucket &* Format.bucketBytes)
  }

  /// The bucket's sequence word.
  @inline(__always)
  func seq(_ place: Place) -> SharedWord32 { bucketView(place).seq }

  /// Slot `slot`'s entry word: the record offset and the hit bits.
  @inline(__always)
  func entryWord(_ place: Place, _ slot: Int) -> SharedWord32 { bucketView(place).entryWord(slot) }

  /// A bucket by its address (`Bucket`), for a read that uses several of its words.
  @inline(__always)
  func bucketView(_ place: Place) -> Bucket { Bucket(address: bucket(place)) }

  /// A bucket's words from one pointer: the straight-line read (`Reader.quickCopy`) loads
  /// its sequence word, compares its tags and loads and marks a slot's word, and keeps
  /// this one value for them all, not a place (group and bucket) whose address it would
  /// compute again for each, and keep alive until the hit bit.
  struct Bucket: Equatable {
    fileprivate let address: UnsafeMutableRawPointer

    /// The sequence word (`PartitionMemory.seq`).
    @inline(__always)
    var seq: SharedWord32 {
      SharedWord32(address: (address + Format.BucketOffset.seq).assumingMemoryBound(to: Atomic<UInt32>.self))
    }

    /// Slot `slot`'s entry word (`PartitionMemory.entryWord`).
    @inline(__always)
    func entryWord(_ slot: Int) -> SharedWord32 {
      assert(slot >= 0 && slot < Format.slotsPerBucket)
      return SharedWord32(
        address: (address + (Format.BucketOffset.words &+ slot &* 4)).assumingMemoryBound(to: Atomic<UInt32>.self))
    }

    /// `PartitionMemory.tagMatches` of this bucket.
    @inline(__always)
    func tagMatches(_ tag: UInt16) -> UInt32 {
      #if arch(x86_64)
        mc_tag_matches(UnsafeRawPointer(address + Format.BucketOffset.tags), tag)
      #else
        BucketIndex.matching(tagWords, tag)
      #endif
    }

    /// `PartitionMemory.tagWords` of this bucket.
    @inline(__always)
    var tagWords: (UInt32, UInt64, UInt64) {
      let t = address + Format.BucketOffset.tags
      return (
        t.assumingMemoryBound(to: Atomic<UInt32>.self).pointee.load(ordering: .relaxed),
        (t + 4).assumingMemoryBound(to: Atomic<UInt64>.self).pointee.load(ordering: .relaxed),
        (t + 12).assumingMemoryBound(to: Atomic<UInt64>.self).pointee.load(ordering: .relaxed)
      )
    }
  }

  /// The slots whose tag equals `tag`, as a mask of bits 0-9: on x86-64 the ten lanes
  /// compared at once (`mc_tag_matches`), elsewhere `BucketIndex.matching` over
  /// `tagWords`, the same answer. Racy under readers, who validate with the sequence
  /// afterwards.
  @inline(__always)
  func tagMatches(_ place: Place, _ tag: UInt16) -> UInt32 { bucketView(place).tagMatches(tag) }

  /// The bucket's ten tags as three words (relaxed loads: racy under readers, who
  /// validate with the sequence afterwards): tags 0-1, 2-5 and 6-9, two bytes each.
  @inline(__always)
  func tagWords(_ place: Place) -> (UInt32, UInt64, UInt64) { bucketView(place).tagWords }

  /// Slot `slot`'s tag (0: empty).
  @inline(__always)
  func tag(_ place: Place, _ slot: Int) -> UInt16 {
    assert(slot >= 0 && slot < Format.slotsPerBucket)
    return (bucket(place) + (Format.BucketOffset.tags &+ slot &* 2)).assumingMemoryBound(to: Atomic<UInt16>.self)
      .pointee.load(
        ordering: .relaxed)
  }

  /// Stores slot `slot`'s tag (inside the bucket's seqlock write).
  @inline(__always)
  func storeTag(_ place: Place, _ slot: Int, _ tag: UInt16, _ held: borrowing WriteLock.Held) {
    assert(held.partition == index && slot >= 0 && slot < Format.slotsPerBucket)
    (bucket(place) + (Format.BucketOffset.tags &+ slot &* 2)).assumingMemoryBound(to: Atomic<UInt16>.self).pointee
      .store(
        tag, ordering: .relaxed)
  }

  /// Starts fetching a bucket's line, for writing (`write`) or reading, without waiting
  /// for it: a hint that never faults.
  @inline(__always)
  func prefetchBucket(_ place: Place, write: Bool) {
    prefetchLine(bucket(place), write: write)
  }

  /// `prefetchBucket` of a bucket by its address, for reading.
  @inline(__always)
  func prefetchBucket(_ bucket: Bucket) { prefetchLine(bucket.address, write: false) }

  /// R2's prefetch: the key's buckets (the first, and the second where it differs), as
  /// soon as their places are known, well before R3 reads the first. On a table larger
  /// than the CPU's caches that lets the next read's misses start before this one's
  /// record arrives (within the CPU's window of instructions in flight): many more gets
  /// at millions of keys, a few off reads whose lines are all cached (DESIGN.md section
  /// 12).
  @inline(__always)
  func prefetchBuckets(of pl: Placement) {
    prefetchBucket(pl.first, write: false)
    if pl.second != pl.first { prefetchBucket(pl.second, write: false) }
  }

  /// Zeroes group `g` (its four buckets and its ghost line). Only for a group no reader
  /// reaches yet (a split's new group) or one being reset by repair under the lock.
  func zeroGroup(_ g: Int, _ held: borrowing WriteLock.Held) {
    assert(held.partition == index && g >= 0 && g < maxGroups)
    memset(base + groupOffset(g), 0, Format.groupBytes)
  }

  // MARK: Ghost lines (written and read under the lock only)

  /// Way `way` of group `g`'s ghost line.
  @inline(__always)
  func ghost(_ g: Int, _ way: Int) -> UInt16 {
    assert(g >= 0 && g < maxGroups && way >= 0 && way < Format.ghostWays)
    return (base + (groupOffset(g) &+ Format.bucketsPerGroup &* Format.bucketBytes &+ way &* 2)).load(as: UInt16.self)
  }

  /// The ways of group `g`'s ghost line whose tag is `tag`, as a mask of bits 0-31: four
  /// ways to a word, compared as `BucketIndex.zeroLanes` does (a way-by-way loop of 32
  /// loads was most of a new key's ghost recall).
  @inline(__always)
  func ghostMatches(_ g: Int, _ tag: UInt16) -> UInt32 {
    assert(g >= 0 && g < maxGroups && Format.ghostWays == 32)
    let line = base + (groupOffset(g) &+ Format.bucketsPerGroup &* Format.bucketBytes)
    let pattern = UInt64(tag) &* 0x0001_0001_0001_0001
    var mask: UInt32 = 0
    for w in 0..<8 {
      let word = line.loadUnaligned(fromByteOffset: w &* 8, as: UInt64.self)
      mask |= BucketIndex.zeroLanes(word ^ pattern) &<< (w &* 4)
    }
    return mask
  }

  @inline(__always)
  func storeGhost(_ g: Int, _ way: Int, _ tag: UInt16, _ held: borrowing WriteLock.Held) {
    assert(held.partition == index && g >= 0 && g < maxGroups && way >= 0 && way < Format.ghostWays)
    (base + (groupOffset(g) &+ Format.bucketsPerGroup &* Format.bucketBytes &+ way &* 2)).storeBytes(
      of: tag, as: UInt16.self)
  }

  // MARK: Records (offsets and lengths come from the file: always checked)

  /// `record(at:)` for the common record, in one range check and three byte loads: form
  /// 0 (a key of at most 256 bytes, a value of at most 255), no expiry, starting where
  /// even the longest such record ends inside the partition (all but its last 520
  /// bytes), so that its lengths need no check against the partition's end. The
  /// unsigned compare also rejects an offset below `dataStart`; the span is positive, as
  /// a partition has at least 256 KiB (`Layout`). Nil for anything else, which the
  /// general decode then judges (and refuses, for lengths past the limits). A read is
  /// mostly this check's cost, so it pays to skip the general decode's branches.
  @inline(__always)
  private func shortRecord(at offset: Int, free: Bool) -> RecordFormat.Header? {
    shortRecord(at: offset, free: free) { klen, vlen in klen <= maxKey && (free || vlen <= maxValue) }
  }

  /// `record(at:free: false)` for the common entry alone (`shortRecord`'s form), of a key
  /// of `keyCount` bytes and a value of `valueCount` (both within the limits): nil for any
  /// other record. Never a call, so a caller's values stay in registers around it.
  @inline(__always)
  func shortEntry(at offset: Int, keyCount: Int, valueCount: Int) -> RecordFormat.Header? {
    assert(keyCount >= 1 && keyCount <= maxKey && valueCount <= maxValue)
    return shortRecord(at: offset, free: false) { klen, vlen in klen == keyCount && vlen == valueCount }
  }

  /// `record(at:free: false)` for the common entry alone (`shortRecord`'s form), of a key
  /// of `keyCount` bytes (within the limits) and a value of at most `room` bytes: nil for
  /// any other record, and for a longer value (within the limit or not).
  @inline(__always)
  func shortEntry(at offset: Int, keyCount: Int, room: Int) -> RecordFormat.Header? {
    assert(keyCount >= 1 && keyCount <= maxKey)
    return shortRecord(at: offset, free: false) { klen, vlen in klen == keyCount && vlen <= room && vlen <= maxValue }
  }

  /// The common record's range check, flags check and decode, its lengths judged by
  /// `lengthsFit(klen, vlen)`.
  @inline(__always)
  private func shortRecord(
    at offset: Int, free: Bool, lengthsFit: (_ klen: Int, _ vlen: Int) -> Bool
  ) -> RecordFormat.Header? {
    let span = bytes &- (RecordFormat.maxShortRecord &+ Format.PartitionOffset.dataStart &- 1)
    guard UInt(bitPattern: offset &- Format.PartitionOffset.dataStart) < UInt(bitPattern: span) else { return nil }
    let p = base + offset
    let flags = p.load(as: UInt8.self)
    let mask =
      RecordFormat.kindMask | RecordFormat.invalidFlags | RecordFormat.formMask | RecordFormat.expiryFlag
      | (free ? 0 : RecordFormat.listedFlag)
    guard flags & mask == RecordFormat.kindEntry else { return nil }
    let klen = Int(p.load(fromByteOffset: 1, as: UInt8.self)) &+ 1
    let vlen = Int(p.load(fromByteOffset: 2, as: UInt8.self))
    guard lengthsFit(klen, vlen) else { return nil }
    return RecordFormat.Header(
      flags: flags, klen: klen, vlen: vlen, version: p.loadUnaligned(fromByteOffset: 3, as: UInt32.self),
      sum: p.loadUnaligned(fromByteOffset: 3 &+ RecordFormat.versionBytes, as: UInt16.self), expiry: 0,
      headerBytes: RecordFormat.shortHeaderBytes)
  }

  /// The header of the entry record at `offset`, when its bytes check out: an entry's
  /// flags (no other kind, no unknown bit), its whole record inside the partition past
  /// its header lines, its key 1 to `maxKey` bytes. With `free` false (a record a slot
  /// names: an entry), its value at most `maxValue`, and not a free record (`FreeLists`:
  /// no slot names one). With `free` true (a walk of a log's chain, where dead and free
  /// records lie too), a value of any length inside the partition: the dead record a
  /// rewrite in place leaves (`RecordFormat.filler`) is as long as the bytes it was left,
  /// which in a file of small values can pass `maxValue`. Nil for anything else. Racy
  /// under readers (validated by the bucket's sequence afterwards); exact for writers.
  @inline(__always)
  func record(at offset: Int, free: Bool = true) -> RecordFormat.Header? {
    if let h = shortRecord(at: offset, free: free) { return h }
    return decodeRecord(at: offset, free: free)
  }

  /// `record(at:free:)` past the common record's check: every form, with or without an
  /// expiry, anywhere in the partition. Out of line, so that the short check inlines
  /// into every read (whole, the decode stayed a call on every read).
  @inline(never)
  private func decodeRecord(at offset: Int, free: Bool) -> RecordFormat.Header? {
    // `offset <= bytes - n`, never `offset + n <= bytes`: a hostile offset near Int.max
    // must not wrap past the check.
    guard offset >= Format.PartitionOffset.dataStart, offset <= bytes &- 1 else { return nil }
    let p = base + offset
    let flags = p.load(as: UInt8.self)
    let mask = RecordFormat.kindMask | RecordFormat.invalidFlags | (free ? 0 : RecordFormat.listedFlag)
    guard flags & mask == RecordFormat.kindEntry else { return nil }
    let form = RecordFormat.form(ofFlags: flags)
    let hasExpiry = flags & RecordFormat.expiryFlag != 0
    let headerBytes = RecordFormat.headerBytes(form: form, expiry: hasExpiry)
    guard form != 3, offset <= bytes &- headerBytes else { return nil }
    let klen: Int
    let vlen: Int
    switch form {
    case 0:
      klen = Int(p.load(fromByteOffset: 1, as: UInt8.self)) &+ 1
      vlen = Int(p.load(fromByteOffset: 2, as: UInt8.self))
    case 1:
      klen = Int(p.load(fromByteOffset: 1, as: UInt8.self)) &+ 1
      vlen = Int(p.loadUnaligned(fromByteOffset: 2, as: UInt16.self))
    default:
      klen = Int(p.loadUnaligned(fromByteOffset: 1, as: UInt16.self)) &+ 1
      vlen = Int(p.loadUnaligned(fromByteOffset: 3, as: UInt32.self))
    }
    guard klen <= maxKey, free || vlen <= maxValue, klen &+ vlen <= bytes &- offset &- headerBytes
    else { return nil }
    let v = 1 &+ RecordFormat.lengthBytes(form: form)
    var expiry: UInt64 = 0
    if hasExpiry {
      let e = v &+ RecordFormat.versionBytes &+ RecordFormat.sumBytes
      let low = UInt64(p.loadUnaligned(fromByteOffset: e, as: UInt32.self))
      let high = UInt64(p.loadUnaligned(fromByteOffset: e &+ 4, as: UInt16.self))
      expiry = RecordFormat.expiryWord(stored: low | high << 32)
    }
    return RecordFormat.Header(
      flags: flags, klen: klen, vlen: vlen, version: p.loadUnaligned(fromByteOffset: v, as: UInt32.self),
      sum: p.loadUnaligned(fromByteOffset: v &+ RecordFormat.versionBytes, as: UInt16.self), expiry: expiry,
      headerBytes: headerBytes)
  }

  /// Whether the byte at `offset` (inside the partition's data) is a wrap marker.
  @inline(__always)
  func isWrapMarker(at offset: Int) -> Bool {
    guard offset >= Format.PartitionOffset.dataStart, offset < bytes else { return false }
    return (base + offset).load(as: UInt8.self) == RecordFormat.wrapMarker
  }

  /// Whether the key of a checked record at `offset` (of `h.klen` bytes) equals `key`,
  /// of as many bytes: one of at most 16 bytes by `words`, its `KeyHash.shortWords` (the
  /// reader's, made with its hash), a longer one byte for byte.
  @inline(__always)
  func keyEquals(
    record offset: Int, _ h: RecordFormat.Header, _ key: UnsafeRawBufferPointer, words: (UInt64, UInt64)
  ) -> Bool {
    assert(h.klen == key.count && h.klen >= 1)
    let k = base + (offset &+ h.headerBytes)
    guard key.count > 16 else {
      let w = KeyHash.shortWords(k, key.count)
      return w.0 == words.0 && w.1 == words.1
    }
    return PartitionMemory.bytesEqual(k, key.baseAddress!, key.count)
  }

  /// `keyEquals` for the common read (`Reader.quickCopy`): a key of 8 to 16 bytes by two
  /// overlapping 8-byte loads from each side, one of 4 to 7 by two 4-byte loads, shorter
  /// by its first, middle and last byte, a longer one byte for byte. No shifts to build
  /// `KeyHash.shortWords`, and no words kept alive through the read to compare with
  /// (they spilled). The caller's key was read by its hash just before, so its stores
  /// are long retired.
  @inline(__always)
  func keyEquals(record offset: Int, _ h: RecordFormat.Header, _ key: UnsafeRawBufferPointer) -> Bool {
    assert(h.klen == key.count && h.klen >= 1)
    return Self.overlappingEqual(
      UnsafeRawPointer(base + (offset &+ h.headerBytes)), key.baseAddress.unsafelyUnwrapped, key.count)
  }

  /// `memcmp(a, b, n) == 0` for `keyEquals(record:_:_:)`: up to 16 bytes by overlapping
  /// loads (two of 8 bytes, two of 4, or the first, middle and last byte), longer by
  /// `memcmp`. Precondition: `n >= 1`, both ranges readable.
  @inline(__always)
  static func overlappingEqual(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, _ n: Int) -> Bool {
    if n >= 8 {
      guard n <= 16 else { return memcmp(a, b, n) == 0 }
      let t = n &- 8
      return a.loadUnaligned(as: UInt64.self) == b.loadUnaligned(as: UInt64.self)
        && a.loadUnaligned(fromByteOffset: t, as: UInt64.self) == b.loadUnaligned(fromByteOffset: t, as: UInt64.self)
    }
    if n >= 4 {
      let t = n &- 4
      return a.loadUnaligned(as: UInt32.self) == b.loadUnaligned(as: UInt32.self)
        && a.loadUnaligned(fromByteOffset: t, as: UInt32.self) == b.loadUnaligned(fromByteOffset: t, as: UInt32.self)
    }
    let m = n >> 1
    return a.load(as: UInt8.self) == b.load(as: UInt8.self)
      && a.load(fromByteOffset: m, as: UInt8.self) == b.load(fromByteOffset: m, as: UInt8.self)
      && a.load(fromByteOffset: n &- 1, as: UInt8.self) == b.load(fromByteOffset: n &- 1, as: UInt8.self)
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

  /// Whether the keys of two checked records are equal.
  func sameKey(_ a: Int, _ ha: RecordFormat.Header, _ b: Int, _ hb: RecordFormat.Header) -> Bool {
    ha.klen == hb.klen && memcmp(base + (a &+ ha.headerBytes), base + (b &+ hb.headerBytes), ha.klen) == 0
  }

  /// Copies the value of a checked record into `out` (room for `h.vlen` bytes).
  @inline(__always)
  func copyValue(record offset: Int, _ h: RecordFormat.Header, to out: UnsafeMutableRawPointer) {
    // The copy races with writers by design (the seqlock discards a torn one): see
    // `mc_copy_record_bytes` for how ThreadSanitizer is kept from reporting it.
    mc_copy_record_bytes(out, base + (offset &+ h.headerBytes &+ h.klen), h.vlen)
  }

  /// The fixed hash of a checked record's key (eviction and repair find its slot by it).
  func keyHash(record offset: Int, _ h: RecordFormat.Header) -> UInt64 {
    KeyHash.key(UnsafeRawBufferPointer(start: base + (offset &+ h.headerBytes), count: h.klen))
  }

  /// The checksum of a checked record's value, as a set computes it.
  func valueChecksum(record offset: Int, _ h: RecordFormat.Header, hash: UInt64) -> UInt16 {
    KeyHash.checksum(
      UnsafeRawBufferPointer(start: base + (offset &+ h.headerBytes &+ h.klen), count: h.vlen), hash: hash)
  }

  /// Copies of a checked record's key and (with `value`) value bytes: for scans, which
  /// validate them with the bucket's sequence afterwards.
  func copyBytes(record offset: Int, _ h: RecordFormat.Header, value: Bool) -> (key: [UInt8], value: [UInt8]?) {
    let k = base + (offset &+ h.headerBytes)
    let key = [UInt8](UnsafeRawBufferPointer(start: k, count: h.klen))
    return (key, value ? [UInt8](UnsafeRawBufferPointer(start: k + h.klen, count: h.vlen)) : nil)
  }

  /// Calls `body` with a view of a checked record's value. For writers (who hold the
  /// lock, so the bytes cannot change under them): the view must not escape `body`.
  func withValue<R>(
    record offset: Int, _ h: RecordFormat.Header, _ held: borrowing WriteLock.Held,
    _ body: (UnsafeRawBufferPointer) throws -> R
  ) rethrows -> R {
    try withKeyAndValue(record: offset, h, held) { _, value in try body(value) }
  }

  /// Calls `body` with views of a checked record's key and value, for a writer holding
  /// this partition's lock (growth's move writes them into another partition: nothing it
  /// does can change these bytes). The views must not escape `body`.
  func withKeyAndValue<R>(
    record offset: Int, _ h: RecordFormat.Header, _ held: borrowing WriteLock.Held,
    _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> R
  ) rethrows -> R {
    assert(held.partition == index)
    let key = base + (offset &+ h.headerBytes)
    return try body(
      UnsafeRawBufferPointer(start: key, count: h.klen), UnsafeRawBufferPointer(start: key + h.klen, count: h.vlen))
  }

  /// Starts fetching the first 128 bytes of the record at `offset` (its header, key and
  /// value for a small entry: two lines, or three when it starts mid-line), for reading
  /// or, with `write`, owned: a writer that will rewrite it. A line fetched for reading
  /// from another core's cache arrives shared, and the store then waits for a second
  /// transfer, at the latest when the lock's release drains the stores. `offset` is read
  /// from the file, racily: nothing is fetched unless it lies in the partition's data. A
  /// hint that never faults.
  @inline(__always)
  func prefetchRecord(at offset: Int, write: Bool = false) {
    guard offset >= Format.PartitionOffset.dataStart, offset <= bytes &- 192 else { return }
    prefetchLine(base + offset, write: write)
    prefetchRecordTail(at: offset, write: write)
  }

  /// `prefetchRecord` of the record that `place` names in its first slot whose tag is
  /// `tag`, if any (tags and the slot's word loaded racily: a hint, checked like any
  /// offset read from the file). Returns that slot and the word seen (`slot` -1: no
  /// slot had the tag; `groups` left 0 for the caller).
  @inline(__always) @discardableResult
  func prefetchRecord(named tag: UInt16, in place: Place, write: Bool = false) -> Writer.SlotHint {
    let m = tagMatches(place, tag)
    guard m != 0 else { return .none }
    let slot = m.trailingZeroBitCount
    let word = entryWord(place, slot).load(.relaxed)
    prefetchRecord(at: Int(truncatingIfNeeded: word & Format.offsetMask), write: write)
    return Writer.SlotHint(place: place, slot: slot, word: word, groups: 0)
  }

  /// `prefetchRecord(named:in:)` of a bucket by its address (a batch's B2): whether
  /// a slot has the tag.
  @inline(__always)
  func prefetchRecord(named tag: UInt16, in bucket: Bucket) -> Bool {
    let m = bucket.tagMatches(tag)
    guard m != 0 else { return false }
    let word = bucket.entryWord(m.trailingZeroBitCount).load(.relaxed)
    prefetchRecord(at: Int(truncatingIfNeeded: word & Format.offsetMask))
    return true
  }

  /// Starts fetching, owned, the header line every write changes (line 1: the lock
  /// word, the intent word and the write counters), so that its transfer from another
  /// core overlaps the bucket's rather than starting at the lock's compare-and-swap.
  @inline(__always)
  func prefetchWriteLine() {
    mc_prefetch_for_write(base + Format.PartitionOffset.lockWord)
  }

  /// Starts fetching the lines after the first of the record's first 128 bytes, the
  /// moment its offset is known (the reader's load of the header fetches the first).
  /// Without it, their misses start only once the first line has come: the value's
  /// place is decoded from the header there. (A record at any 8-byte offset crosses a
  /// line more often than not.) Unchecked, unlike `prefetchRecord`: `offset` is a
  /// slot's 29 bits, so both addresses lie within 512 MiB past the partition's base, and
  /// a prefetch of any address never faults (x86 drops one it cannot translate). Every
  /// read makes it, and a check would lengthen every read.
  @inline(__always)
  func prefetchRecordTail(at offset: Int, write: Bool = false) {
    assert(offset >= 0 && offset <= Int(Format.offsetMask))
    prefetchLine(base + (offset &+ 64), write: write)
    prefetchLine(base + (offset &+ 127), write: write)
  }

  /// One line's prefetch, owned (`write`) or shared.
  @inline(__always)
  private func prefetchLine(_ address: UnsafeMutableRawPointer, write: Bool) {
    if write { mc_prefetch_for_write(address) } else { mc_prefetch_for_read(address) }
  }

  // MARK: Writing records (writers only, under the lock, at offsets they computed)

  /// Writes an entry record of `c` at `offset`. Precondition: `offset ..< offset + size`
  /// lies in a log, and no slot names it (or the caller is inside the seqlock write of
  /// the one bucket whose slot does).
  func writeRecord(
    at offset: Int, _ c: RecordFormat.Content, unearned: Bool = false, _ held: borrowing WriteLock.Held
  ) {
    assert(held.partition == index)
    let (key, value) = (c.key, c.value)
    let hasExpiry = c.expiry != 0
    let flags = RecordFormat.flags(
      keyCount: key.count, valueCount: value.count, expiry: hasExpiry, unearned: unearned)
    let headerBytes = RecordFormat.headerBytes(
      form: RecordFormat.form(ofFlags: flags), expiry: hasExpiry)
    precondition(
      offset >= Format.PartitionOffset.dataStart && offset <= bytes - headerBytes - key.count - value.count,
      "record outside the partition")
    let p = base + offset
    Self.storeHeader(
      p, flags: flags, keyCount: key.count, valueCount: value.count,
      (c.version, c.sum, hasExpiry ? c.expiry : nil))
    (p + headerBytes).copyMemory(from: key.baseAddress!, byteCount: key.count)
    if value.count > 0 { (p + headerBytes + key.count).copyMemory(from: value.baseAddress!, byteCount: value.count) }
  }

  /// Writes a record's header (`flags` names its form) at `p`: in the mapping, or in a
  /// buffer of `RecordFormat.maxHeaderBytes`.
  @inline(__always)
  private static func storeHeader(
    _ p: UnsafeMutableRawPointer, flags: UInt8, keyCount: Int, valueCount: Int, _ trailer: RecordFormat.Trailer
  ) {
    p.storeBytes(of: flags, as: UInt8.self)
    let form = RecordFormat.form(ofFlags: flags)
    switch form {
    case 0:
      p.storeBytes(of: UInt8(keyCount - 1), toByteOffset: 1, as: UInt8.self)
      p.storeBytes(of: UInt8(valueCount), toByteOffset: 2, as: UInt8.self)
    case 1:
      p.storeBytes(of: UInt8(keyCount - 1), toByteOffset: 1, as: UInt8.self)
      p.storeBytes(of: UInt16(valueCount), toByteOffset: 2, as: UInt16.self)
    default:
      p.storeBytes(of: UInt16(keyCount - 1), toByteOffset: 1, as: UInt16.self)
      p.storeBytes(of: UInt32(valueCount), toByteOffset: 3, as: UInt32.self)
    }
    storeTrailer(p, at: 1 + RecordFormat.lengthBytes(form: form), trailer)
  }

  /// The version, checksum and (when given) expiry of a header whose lengths end at `v`.
  @inline(__always)
  private static func storeTrailer(_ p: UnsafeMutableRawPointer, at v: Int, _ trailer: RecordFormat.Trailer) {
    p.storeBytes(of: trailer.version, toByteOffset: v, as: UInt32.self)
    p.storeBytes(of: trailer.sum, toByteOffset: v + RecordFormat.versionBytes, as: UInt16.self)
    if let expiry = trailer.expiry {
      let stored = RecordFormat.storedExpiry(expiry)
      let e = v + RecordFormat.versionBytes + RecordFormat.sumBytes
      p.storeBytes(of: UInt32(truncatingIfNeeded: stored), toByteOffset: e, as: UInt32.self)
      p.storeBytes(of: UInt16(truncatingIfNeeded: stored >> 32), toByteOffset: e + 4, as: UInt16.self)
    }
  }

  /// Rewrites the value of the checked entry record at `offset` in place with `c`'s (the
  /// record's key stays), with its version, checksum and (when the record has one) expiry.
  /// Preconditions: `c.value.count == h.vlen`; the caller is inside the seqlock write of
  /// the bucket whose slot names the record.
  func rewriteValue(
    at offset: Int, _ h: RecordFormat.Header, _ c: RecordFormat.Content, _ held: borrowing WriteLock.Held
  ) {
    assert(held.partition == index)
    let value = c.value
    precondition(value.count == h.vlen && offset <= bytes - h.size, "rewrite of another length")
    let p = base + offset
    let form = h.form
    Self.storeTrailer(p, at: 1 + RecordFormat.lengthBytes(form: form), (c.version, c.sum, h.hasExpiry ? c.expiry : nil))
    if let v = value.baseAddress { mc_copy_record_bytes(p + h.headerBytes + h.klen, v, value.count) }
  }

  /// Rewrites the checked entry record at `offset` as a record of its key with another
  /// value, in place (W3b): the record grows or shrinks within `extent` bytes from
  /// `offset` (its own, and those of dead records right after it in its log), and the
  /// bytes it leaves become one dead record of its key. The log's chain is whole after
  /// every store, because a walker reads only a record's flags and lengths (and a dead
  /// record's key, which may be anything):
  ///  1. the dead record is written first, where no walker reads: past the old flags and
  ///     lengths, and past those of the last dead record taken (`Writer.rewriteExtent`);
  ///  2. the switch: one 8-byte store of the new header's first bytes (flags and lengths,
  ///     in every form) moves the record's end;
  ///  3. the rest of the header, the key (which moves when the form changes), the value.
  /// A writer killed before 2 leaves the old record; after it, the new one (its key and
  /// value maybe half written) with the dead record after it. Either way its slot is
  /// dropped by repair (the intent word names it). The unearned flag is kept.
  /// Preconditions: `key` is the record's; `extent` leaves nothing or room for a dead
  /// record (`RecordFormat.filler`); inside the seqlock write of the bucket whose slot
  /// names the record. `steps` below 3 stops after that many (a test hook: a writer
  /// killed there).
  func rewriteRecord(
    at offset: Int, _ h: RecordFormat.Header, extent: Int, _ c: RecordFormat.Content, steps: Int = 3,
    _ held: borrowing WriteLock.Held
  ) {
    precondition(c.key.count == h.klen, "rewrite of another key")
    writeRecord(over: offset, extent: extent, c, unearned: h.unearned, steps: steps, held)
  }

  /// Writes an entry record at `offset` over `extent` bytes that are one record or
  /// several of its log's chain (W3b's rewrite, or a free record `FreeLists.take` gave
  /// out), the bytes it leaves becoming one dead record of its key, in the three steps
  /// `rewriteRecord` names, so that the chain is whole after every store. Preconditions:
  /// `extent` leaves nothing or room for a dead record (`RecordFormat.filler`), clear of
  /// the flags and lengths of the last record it covers; no slot names the bytes, or the
  /// caller is inside the seqlock write of the bucket whose slot names the first record.
  func writeRecord(
    over offset: Int, extent: Int, _ c: RecordFormat.Content, unearned: Bool = false, steps: Int = 3,
    _ held: borrowing WriteLock.Held
  ) {
    assert(held.partition == index)
    let (key, value) = (c.key, c.value)
    let hasExpiry = c.expiry != 0
    let flags = RecordFormat.flags(
      keyCount: key.count, valueCount: value.count, expiry: hasExpiry, unearned: unearned)
    let headerBytes = RecordFormat.headerBytes(
      form: RecordFormat.form(ofFlags: flags), expiry: hasExpiry)
    let size = headerBytes &+ key.count &+ value.count
    precondition(
      offset >= Format.PartitionOffset.dataStart && extent <= bytes &- offset && size <= extent,
      "rewrite outside the record")
    let p = base + offset
    // 1.
    guard steps > 0 else { return }
    if size < extent { writeFiller(at: offset &+ size, size: extent &- size, key: key) }
    atomicMemoryFence(ordering: .releasing)
    guard steps > 1 else { return }
    // The new header, staged off the mapping (its first 8 bytes go in one store).
    withUnsafeTemporaryAllocation(byteCount: RecordFormat.maxHeaderBytes + 8, alignment: 8) { buffer in
      let staged = buffer.baseAddress!
      Self.storeHeader(
        staged, flags: flags, keyCount: key.count, valueCount: value.count,
        (c.version, c.sum, hasExpiry ? c.expiry : nil))
      // 2. (Every record, old and new, has at least 10 bytes.)
      p.storeBytes(of: staged.load(as: UInt64.self), as: UInt64.self)
      atomicMemoryFence(ordering: .releasing)
      // 3.
      if steps > 2 { (p + 8).copyMemory(from: staged + 8, byteCount: headerBytes &- 8) }
    }
    guard steps > 2 else { return }
    (p + headerBytes).copyMemory(from: key.baseAddress!, byteCount: key.count)
    if value.count > 0 { (p + headerBytes + key.count).copyMemory(from: value.baseAddress!, byteCount: value.count) }
  }

  // MARK: Free records (`FreeLists`: dead records of a main log, linked by size)

  /// The form and value length of a free record of `size` bytes (a one-byte key, a
  /// value holding the two links and, apart from them, the footer), or nil when no record
  /// of that size can be one here (too small, or a value longer than the file allows).
  func freeRecordShape(size: Int) -> (form: UInt8, valueCount: Int)? {
    guard let shape = RecordFormat.filler(size: size, keyCount: 1), shape.valueCount >= 12,
      shape.valueCount <= maxValue
    else { return nil }
    return shape
  }

  /// Turns the `size` bytes at `offset` (a dead record, or several) into one free record
  /// linked to `prev` and `next` (partition offsets, 0: none), its last 4 bytes its own
  /// offset (a footer: the record after it finds it by them, `FreeLists.release`). The
  /// links, key and footer go first, past the flags and lengths of every record the bytes
  /// hold, then one 8-byte store switches the header, so a walker sees the old records or
  /// the new one. Preconditions: `freeRecordShape(size:)` is not nil; the bytes are dead
  /// records of a log's chain (no slot names them), the first of at least
  /// `FreeLists.minBytes`, the last of at least 10.
  func writeFreeRecord(at offset: Int, size: Int, prev: Int, next: Int, _ held: borrowing WriteLock.Held) {
    assert(held.partition == index)
    guard let (form, valueCount) = freeRecordShape(size: size) else {
      preconditionFailure("no free record is \(size) bytes")
    }
    precondition(offset >= Format.PartitionOffset.dataStart && size <= bytes &- offset, "record outside the partition")
    let p = base + offset
    let headerBytes = RecordFormat.headerBytes(form: form, expiry: false)
    p.storeBytes(of: UInt8(0), toByteOffset: headerBytes, as: UInt8.self)
    p.storeBytes(of: UInt32(truncatingIfNeeded: prev), toByteOffset: headerBytes + 1, as: UInt32.self)
    p.storeBytes(of: UInt32(truncatingIfNeeded: next), toByteOffset: headerBytes + 5, as: UInt32.self)
    p.storeBytes(of: UInt32(truncatingIfNeeded: offset), toByteOffset: size - 4, as: UInt32.self)
    withUnsafeTemporaryAllocation(byteCount: RecordFormat.maxHeaderBytes + 8, alignment: 8) { buffer in
      let staged = buffer.baseAddress!
      Self.storeHeader(
        staged, flags: RecordFormat.listedFlag | form << RecordFormat.formShift, keyCount: 1,
        valueCount: valueCount, (0, 0, nil))
      p.storeBytes(of: staged.load(as: UInt64.self), as: UInt64.self)
      (p + 8).copyMemory(from: staged + 8, byteCount: headerBytes &- 8)
    }
  }

  /// The offset a free record ending at `end` names in its footer (any 4 bytes, unless
  /// `FreeLists.release` checks them), or nil when `end` is not past 4 data bytes.
  func freeFooter(endingAt end: Int) -> Int? {
    guard end >= Format.PartitionOffset.dataStart &+ 4, end <= bytes else { return nil }
    return Int((base + (end &- 4)).loadUnaligned(as: UInt32.self))
  }

  /// The links of the free record at `offset` (its checked header `h`, listed, with a
  /// one-byte key and a value of at least 8 bytes: `FreeLists.node` checks).
  func freeLinks(record offset: Int, _ h: RecordFormat.Header) -> (prev: Int, next: Int) {
    precondition(h.isListed && h.klen == 1 && h.vlen >= 8 && offset <= bytes &- h.size, "not a free record")
    let p = base + (offset &+ h.headerBytes &+ 1)
    return (Int(p.loadUnaligned(as: UInt32.self)), Int(p.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
  }

  /// Sets one or both links of the free record at `offset` (as `freeLinks` reads them).
  func storeFreeLinks(
    record offset: Int, _ h: RecordFormat.Header, prev: Int? = nil, next: Int? = nil, _ held: borrowing WriteLock.Held
  ) {
    assert(held.partition == index)
    precondition(h.isListed && h.klen == 1 && h.vlen >= 8 && offset <= bytes &- h.size, "not a free record")
    let p = base + (offset &+ h.headerBytes &+ 1)
    if let prev { p.storeBytes(of: UInt32(truncatingIfNeeded: prev), as: UInt32.self) }
    if let next { p.storeBytes(of: UInt32(truncatingIfNeeded: next), toByteOffset: 4, as: UInt32.self) }
  }

  /// Clears the free-listed flag of the record at `offset` (its checked header `h`): off
  /// its list, it is an ordinary dead record of the same size.
  func unlistRecord(at offset: Int, _ h: RecordFormat.Header, _ held: borrowing WriteLock.Held) {
    assert(held.partition == index)
    precondition(
      offset >= Format.PartitionOffset.dataStart && offset <= bytes &- h.size, "record outside the partition")
    (base + offset).storeBytes(of: h.flags & ~RecordFormat.listedFlag, as: UInt8.self)
  }

  /// Writes the header and key of a dead record of `size` bytes at `offset` (its value
  /// is whatever bytes are there).
  private func writeFiller(at offset: Int, size: Int, key: UnsafeRawBufferPointer) {
    guard let (form, valueCount) = RecordFormat.filler(size: size, keyCount: key.count) else {
      preconditionFailure("no record is \(size) bytes")
    }
    precondition(offset >= Format.PartitionOffset.dataStart && size <= bytes &- offset, "record outside the partition")
    let p = base + offset
    Self.storeHeader(
      p, flags: form << RecordFormat.formShift, keyCount: key.count, valueCount: valueCount, (0, 0, nil))
    (p + RecordFormat.headerBytes(form: form, expiry: false)).copyMemory(from: key.baseAddress!, byteCount: key.count)
  }

  /// Rewrites the expiry of a checked entry record that has one (a touch). Precondition:
  /// `h.hasExpiry`; inside the seqlock write of the bucket whose slot names the record.
  func rewriteExpiry(at offset: Int, _ h: RecordFormat.Header, expiry: UInt64, _ held: borrowing WriteLock.Held) {
    assert(held.partition == index)
    precondition(h.hasExpiry && offset <= bytes - h.size, "no expiry field")
    let form = h.form
    Self.storeTrailer(base + offset, at: 1 + RecordFormat.lengthBytes(form: form), (h.version, h.sum, expiry))
  }

  /// Copies a checked record of `size` bytes to `to` (room in a log, unreferenced), with
  /// its unearned flag set or cleared.
  func moveRecord(from: Int, to: Int, size: Int, unearned: Bool, _ held: borrowing WriteLock.Held) {
    assert(held.partition == index)
    precondition(
      to >= Format.PartitionOffset.dataStart && to <= bytes - size && from >= Format.PartitionOffset.dataStart
        && from <= bytes - size, "record outside the partition")
    (base + to).copyMemory(from: base + from, byteCount: size)
    let flags = (base + to).load(as: UInt8.self)
    (base + to).storeBytes(
      of: unearned ? flags | RecordFormat.unearnedFlag : flags & ~RecordFormat.unearnedFlag, as: UInt8.self)
  }

  /// Copies the checked record at `from` (header `h`) over the `extent` bytes at `to` (a
  /// free record `FreeLists.take` gave out, which no slot names), with its unearned flag
  /// set or cleared, so that the chain stays whole after every store: the dead record
  /// for the rest first, then everything past the record's first 8 bytes, then those
  /// (its flags and lengths) in one store. Precondition: `extent` leaves nothing or room
  /// for a dead record of the key (`RecordFormat.filler`).
  func moveRecord(
    from: Int, _ h: RecordFormat.Header, over to: Int, extent: Int, unearned: Bool, _ held: borrowing WriteLock.Held
  ) {
    assert(held.partition == index)
    let size = h.size
    precondition(
      to >= Format.PartitionOffset.dataStart && extent <= bytes &- to && size <= extent
        && from >= Format.PartitionOffset.dataStart
        && from <= bytes &- size, "record outside the partition")
    if size < extent {
      writeFiller(
        at: to &+ size, size: extent &- size,
        key: UnsafeRawBufferPointer(start: base + (from &+ h.headerBytes), count: h.klen))
    }
    (base + (to &+ 8)).copyMemory(from: base + (from &+ 8), byteCount: size &- 8)
    atomicMemoryFence(ordering: .releasing)
    var first = (base + from).loadUnaligned(as: UInt64.self)
    let flags = UInt8(truncatingIfNeeded: first)
    let newFlags = unearned ? flags | RecordFormat.unearnedFlag : flags & ~RecordFormat.unearnedFlag
    first = first & ~0xFF | UInt64(newFlags)
    (base + to).storeBytes(of: first, as: UInt64.self)
  }

  /// Writes a wrap marker (one byte) at `offset`.
  func writeWrapMarker(at offset: Int, _ held: borrowing WriteLock.Held) {
    assert(held.partition == index)
    precondition(offset >= Format.PartitionOffset.dataStart && offset < bytes, "marker outside the partition")
    (base + offset).storeBytes(of: RecordFormat.wrapMarker, as: UInt8.self)
  }

  // MARK: Test hooks

  /// The partition's byte at `offset`, for tests that damage a partition in place.
  func _byte(at offset: Int) -> UnsafeMutableRawPointer {
    precondition(offset >= 0 && offset < bytes, "offset outside the partition")
    return base + offset
  }
}

import Glibc
import Synchronization

/// The untyped engine behind `SharedCache` and `CacheFile`: one mapped file, the
/// lock-free read path (`CacheEngine+Read`), the locked write path
/// (`CacheEngine+Write`, `+Evict`), and checking and repair (`+Verify`).
@usableFromInline
final class CacheEngine: @unchecked Sendable {
  let file: MappedFile
  let layout: Layout
  /// `layout.maxKey`, visible to inlined callers so they check key sizes without a call.
  @usableFromInline let maxKey: Int
  let memory: MappedMemory
  let header: HeaderFields
  let created: Bool
  /// nil for a read-only handle.
  let lock: WriteLock?
  let registration: ProcessTable.Registration?
  /// Where this handle counts its hits and misses: its process-table entry, or a private
  /// block for read-only handles.
  let hitsWord: UnsafeMutablePointer<Atomic<UInt64>>
  let missesWord: UnsafeMutablePointer<Atomic<UInt64>>
  let busyWord: UnsafeMutablePointer<Atomic<UInt64>>
  private let privateCounters: UnsafeMutablePointer<Atomic<UInt64>>?
  /// Check each value's checksum on read (`OpenPolicy.verifyChecksumsOnRead`).
  let checksumOnRead: Bool

  var path: String { file.path }
  /// Copied from `file` so the read path touches no reference (and no reference count).
  let writable: Bool

  init(path: String, options: CacheOptions, policy: OpenPolicy, lockMode: LockMode,
       typeFingerprint: UInt64, typeName: String) throws(CacheError) {
    let opened = try CacheFileOpener.open(path: path, options: options, policy: policy,
                                          typeFingerprint: typeFingerprint, typeName: typeName)
    file = opened.file
    layout = opened.layout
    maxKey = opened.layout.maxKey
    checksumOnRead = policy.verifyChecksumsOnRead
    header = opened.header
    created = opened.created
    memory = MappedMemory(base: opened.file.base, layout: opened.layout)
    writable = opened.file.writable
    if file.writable {
      let reg = try ProcessTable.register(memory: memory, fd: file.fd, procCount: layout.procCount)
      registration = reg
      lock = WriteLock(mode: lockMode, memory: memory, fd: file.fd, procCount: layout.procCount,
                       slot: reg.slot, generation: reg.generation)
      hitsWord = memory.procWord(reg.slot, Format.P.hits)
      missesWord = memory.procWord(reg.slot, Format.P.misses)
      busyWord = memory.procWord(reg.slot, Format.P.busy)
      privateCounters = nil
    } else {
      registration = nil
      lock = nil
      let p = UnsafeMutablePointer<Atomic<UInt64>>.allocate(capacity: 3)
      for i in 0..<3 { (p + i).initialize(to: Atomic(0)) }
      privateCounters = p
      hitsWord = p
      missesWord = p + 1
      busyWord = p + 2
    }
  }

  deinit {
    lock?.destroy()
    if let p = privateCounters {
      p.deinitialize(count: 3)
      p.deallocate()
    }
  }

  // MARK: Header words

  @inline(__always) func load(_ field: Int) -> UInt64 { memory.word(field).pointee.load(ordering: .relaxed) }
  /// A header counter as an Int. The file may hold any bits there (damaged or hostile):
  /// clamped to 0 ... 2^56, so that converting or adding to it can neither trap nor overflow.
  @inline(__always) func loadCount(_ field: Int) -> Int { Self.clampCount(load(field)) }
  @inline(__always) static func clampCount(_ v: UInt64) -> Int { Int(truncatingIfNeeded: min(v, 1 << 56)) }
  @inline(__always) func store(_ field: Int, _ v: UInt64) { memory.word(field).pointee.store(v, ordering: .relaxed) }
  /// Adds to a header counter. Precondition: the write lock is held (every header
  /// counter changes only under it), so a load and a store suffice: an atomic add would
  /// be one more locked instruction per write.
  @inline(__always) func bump(_ field: Int, _ by: UInt64 = 1) {
    store(field, load(field) &+ by)
  }

  var countLimit: Int {
    get { Int(truncatingIfNeeded: min(load(Format.H.countLimit), UInt64(Int.max))) }
  }
  var costLimit: Int {
    get { Int(truncatingIfNeeded: min(load(Format.H.costLimit), UInt64(Int.max))) }
  }

  /// Runs `body` under the write lock, repairing first if a previous writer died
  /// mid-change or the log bounds are damaged, and marking the intent record for the
  /// duration of `body`. With `checkingLogs` false the log bounds are not checked
  /// first: `body` must then call `repairIfLogsDamaged()` before it reads or writes a
  /// log (`set`, whose in-place overwrite touches only the slot, does).
  @inline(__always)
  func withWriteLock<R>(checkingLogs: Bool = true, _ body: () throws -> R) throws -> R {
    guard let lock = lock else { throw CacheError.readOnly(path: path) }
    _ = try lock.lock()
    defer { lock.unlock() }
    if load(Format.H.intent) != 0 || (checkingLogs && !logsAreSane()) { repair() }
    store(Format.H.intent, Format.intentChange)
    defer { store(Format.H.intent, 0) }
    do {
      return try body()
    } catch CacheError.corrupted {
      // The file broke an invariant under us (damage, or a foreign writer): repair by
      // dropping what cannot be trusted, then try the change once more.
      repair()
      return try body()
    }
  }

  /// Repairs under the write lock (see `check(repair:)`) and counts it.
  @inline(never)
  func repair() {
    _ = check(repair: true, checksums: false)
    bump(Format.H.recoveries)
  }

  /// For a `withWriteLock(checkingLogs: false)` body, before it touches a log.
  @inline(__always)
  func repairIfLogsDamaged() {
    if !logsAreSane() { repair() }
  }

  /// Values of the process-wide counters, summed over the process table.
  func statistics() -> CacheStatistics {
    var hits = load(Format.H.retiredHits), misses = load(Format.H.retiredMisses), busy = load(Format.H.retiredBusy)
    for i in 0..<layout.procCount {
      hits &+= memory.procWord(i, Format.P.hits).pointee.load(ordering: .relaxed)
      misses &+= memory.procWord(i, Format.P.misses).pointee.load(ordering: .relaxed)
      busy &+= memory.procWord(i, Format.P.busy).pointee.load(ordering: .relaxed)
    }
    if registration == nil {
      hits &+= hitsWord.pointee.load(ordering: .relaxed)
      misses &+= missesWord.pointee.load(ordering: .relaxed)
      busy &+= busyWord.pointee.load(ordering: .relaxed)
    }
    let small = logState(.small), main = logState(.main)
    return CacheStatistics(
      entries: loadCount(Format.H.entries), liveBytes: loadCount(Format.H.liveBytes),
      capacity: layout.fileSize, hits: Self.clampCount(hits), misses: Self.clampCount(misses),
      busyMisses: Self.clampCount(busy), sets: loadCount(Format.H.sets),
      evictions: loadCount(Format.H.evictions), expirations: loadCount(Format.H.expirations),
      recoveries: loadCount(Format.H.recoveries), removals: loadCount(Format.H.removes),
      promotions: loadCount(Format.H.promotions), reinsertions: loadCount(Format.H.reinsertions),
      lockTakeovers: loadCount(Format.H.lockTakeovers),
      slotCount: layout.slotCount, maxEntries: layout.maxEntries,
      logBytes: layout.smallSize + layout.mainSize,
      logBytesUsed: Int(truncatingIfNeeded: (small.head &- small.tail) &+ (main.head &- main.tail)),
      sweepHand: Int(truncatingIfNeeded: main.tail), countLimit: countLimit, costLimit: costLimit)
  }
}


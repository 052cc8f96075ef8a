import Glibc
import Synchronization
import SystemCalls

/// The untyped engine behind `SharedCache` and `CacheFile`: the facade that owns one
/// mapped file, its write lock and this handle's process registration, and wires the
/// layers together. Each layer has one job and a narrow view of the mapping:
///
///     MappedMemory    the only place that forms or dereferences pointers into the mapping
///     WriteLock       the cross-process write lock; hands out `WriteLock.Held`
///     ProcessTable    this handle's entry: its lock witness and statistics counters
///     SlotIndex       slots: probing, "does this slot hold this key", seqlock writes,
///                     backward-shift removal
///     RecordLogs      the two circular logs: reserve, commit, tail
///     EvictionPolicy  S3-FIFO over the two logs, the ghost table, the second-chance budget
///     Reader          the lock-free read protocol and its bounded wait
///     Writer          the write protocol, top-down: set, conditional sets, remove, touch,
///                     update, sweeps
///     Checker         verify and repair, in named steps
///
/// Everything that changes the table takes a `WriteLock.Held`, which only
/// `withWriteLock` hands out: a change made without the lock does not compile.
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
  /// The lock's slow-path state, kept alive here for the lock's whole life.
  private let lockContext: WriteLock.Context?
  let registration: ProcessTable.Registration?
  /// Where this handle counts its hits and misses: its process-table entry, or a private
  /// block for read-only handles.
  private let handleCounters: HandleCounters

  let index: SlotIndex
  let logs: RecordLogs
  let counters: TableCounters
  let policy: EvictionPolicy
  let reader: Reader
  let writer: Writer
  let checker: Checker

  var path: String { file.path }
  /// Copied from `file` so the read path touches no reference (and no reference count).
  let writable: Bool

  init(
    path: String, options: CacheOptions, policy openPolicy: OpenPolicy, lockMode: LockMode,
    typeFingerprint: UInt64, typeName: String
  ) throws(CacheError) {
    let opened = try CacheFileOpener.open(
      path: path, options: options, policy: openPolicy,
      typeFingerprint: typeFingerprint, typeName: typeName)
    file = opened.file
    layout = opened.layout
    maxKey = opened.layout.maxKey
    header = opened.header
    created = opened.created
    let memory = MappedMemory(base: opened.file.base, layout: opened.layout)
    self.memory = memory
    writable = opened.file.writable
    var asker = WriteLock.Asker.none
    if opened.file.writable {
      let reg = try ProcessTable.register(memory: memory, fd: opened.file.fd)
      registration = reg
      let context = WriteLock.Context(memory: memory, fd: opened.file.fd, slot: reg.slot)
      lockContext = context
      let lock = WriteLock(mode: lockMode, context: context, generation: reg.generation)
      self.lock = lock
      asker = lock.asker
      handleCounters = ProcessTable.counters(of: reg, memory: memory)
    } else {
      registration = nil
      lock = nil
      lockContext = nil
      handleCounters = HandleCounters.allocatePrivate()
    }
    index = SlotIndex(memory: memory)
    logs = RecordLogs(memory: memory, layout: opened.layout)
    counters = TableCounters(memory: memory)
    self.policy = EvictionPolicy(
      index: index, logs: logs, counters: counters, ghost: GhostTable(memory: memory),
      maxEntries: opened.layout.maxEntries, path: path)
    reader = Reader(
      index: index, counters: handleCounters, checksumOnRead: openPolicy.verifyChecksumsOnRead,
      writable: opened.file.writable,
      liveness: Liveness(memory: memory, fd: opened.file.fd, asker: asker))
    writer = Writer(
      index: index, logs: logs, policy: self.policy, counters: counters, maxKey: opened.layout.maxKey,
      maxValue: opened.layout.maxValue, path: path)
    checker = Checker(index: index, logs: logs, counters: counters)
  }

  deinit {
    if registration == nil { handleCounters.deallocatePrivate() }
  }

  // MARK: The write lock

  /// Runs `body` under the write lock, repairing first if a previous writer died
  /// mid-change or the log bounds are damaged, and marking the intent record for the
  /// duration of `body` (the write protocol's steps 1 and 6). With `checkingLogs` false
  /// the log bounds are not checked first: `body` must then call `repairIfLogsDamaged`
  /// before it reads or writes a log (`set`, whose in-place overwrite touches only the
  /// slot, does).
  @inline(__always)
  func withWriteLock<R>(checkingLogs: Bool = true, _ body: (borrowing WriteLock.Held) throws -> R) throws -> R {
    guard let lock else { throw CacheError.readOnly(path: path) }
    let held = try lock.acquire()
    defer { lock.release() }
    let intent = memory.header(.intent)
    if intent.load(.relaxed) != 0 || (checkingLogs && !logs.areSane) { repair(held) }
    intent.store(Format.intentChange, .relaxed)
    defer { intent.store(0, .relaxed) }
    do {
      return try body(held)
    } catch CacheError.corrupted {
      // The file broke an invariant under us (damage, or a foreign writer): repair by
      // dropping what cannot be trusted, then try the change once more.
      repair(held)
      return try body(held)
    }
  }

  /// Repairs under the write lock (`Checker.repair`) and counts it. The intent record is
  /// set for the repair's whole time (it already is after a dead writer, whose record
  /// names any slot it was moving): a repairer killed midway leaves it set, so the next
  /// holder repairs again rather than trust a half-repaired file.
  @inline(never)
  func repair(_ held: borrowing WriteLock.Held) {
    markIntent(held)
    _ = checker.repair(checksums: false, held)
    counters.bump(.recoveries, held)
  }

  /// Sets the intent record if it is clear (a repair of damage, not of a dead writer).
  private func markIntent(_ held: borrowing WriteLock.Held) {
    let intent = memory.header(.intent)
    if intent.load(.relaxed) == 0 { intent.store(Format.intentChange, .relaxed) }
  }

  /// For a `withWriteLock(checkingLogs: false)` body, before it touches a log.
  @inline(__always)
  func repairIfLogsDamaged(_ held: borrowing WriteLock.Held) {
    if !logs.areSane { repair(held) }
  }

  // MARK: Writes

  /// When a set stores (`add`, `replace` and compare-and-swap are conditional sets).
  @usableFromInline
  enum SetCondition: Equatable {
    case always
    case ifAbsent
    case ifPresent
    case ifVersion(UInt64)
  }

  @usableFromInline
  enum SetOutcome: Equatable {
    case stored(version: UInt64)
    case exists
    case notFound
    case conflict
  }

  typealias PreparedWrite = Writer.PreparedWrite

  @usableFromInline @inline(__always)
  func checkKey(_ key: UnsafeRawBufferPointer) throws(CacheError) { try writer.checkKey(key) }

  @inline(__always)
  func prepare(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
    expiry: UInt64
  ) throws(CacheError) -> PreparedWrite {
    try writer.prepare(key, value, expiry: expiry)
  }

  /// Stores one entry: prepared before the lock, then the in-place overwrite when it
  /// applies, else the write protocol (`Writer.store`).
  @usableFromInline
  func set(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expiry: UInt64,
    condition: SetCondition = .always
  ) throws -> SetOutcome {
    let w = try writer.prepare(key, value, expiry: expiry)
    return try withWriteLock(checkingLogs: false) { held in
      if condition == .always, w.inline, let outcome = writer.overwriteInPlace(key, value, w, held) { return outcome }
      repairIfLogsDamaged(held)
      return try store(key, value, w, condition: condition, held)
    }
  }

  /// The write protocol (`Writer.store`), out of line: `set`'s in-place path stays short,
  /// and the layers are reached through this object rather than copied to the stack.
  @inline(never)
  func store(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite,
    condition: SetCondition, now: UInt64 = 0, _ held: borrowing WriteLock.Held
  ) throws -> SetOutcome {
    try writer.store(key, value, w, condition: condition, now: now, held)
  }

  /// Removes `key`; false when it was not present.
  func remove(_ key: UnsafeRawBufferPointer) throws -> Bool {
    try checkKey(key)
    let hash = KeyHash.key(key)
    return try withWriteLock { held in writer.remove(key, hash: hash, held) }
  }

  /// Removes each of `keys` under one hold of the write lock (an invalidation batch);
  /// returns how many were present. Every key is checked before anything is removed.
  func remove(keys: [[UInt8]]) throws -> Int {
    for k in keys { try k.withUnsafeBytes { try checkKey($0) } }
    return try withWriteLock { held in
      var removed = 0
      for k in keys where k.withUnsafeBytes({ writer.remove($0, hash: KeyHash.key($0), held) }) { removed += 1 }
      return removed
    }
  }

  /// Changes the expiry of a live entry, keeping its value; false when absent.
  func touch(_ key: UnsafeRawBufferPointer, expiry: UInt64) throws -> Bool {
    try checkKey(key)
    let hash = KeyHash.key(key)
    return try withWriteLock { held in
      writer.touch(key, hash: hash, expiry: expiry, now: Sys.expiryClockMilliseconds(), held)
    }
  }

  /// Read-modify-write of one entry under the lock (`Writer.update`).
  func update(
    _ key: UnsafeRawBufferPointer,
    _ body: (_ current: UnsafeRawBufferPointer?, _ info: EntryInfo?) throws -> Writer.UpdateAction
  )
    throws -> Writer.UpdateOutcome
  {
    try checkKey(key)
    let hash = KeyHash.key(key)
    return try withWriteLock { held in
      try writer.update(key, hash: hash, now: Sys.expiryClockMilliseconds(), held, body)
    }
  }

  /// Removes every entry.
  func removeAll() throws {
    try withWriteLock { held in writer.removeAll(held) }
  }

  /// Slots examined per hold of the write lock by the sweeps below: other writers wait
  /// at most one step.
  static let sweepStep = 4096

  /// One step of the background sweeper: `maxSlots` slots from the shared sweep hand,
  /// which it advances. Returns how many entries it removed.
  func removeExpired(maxSlots: Int) throws -> Int {
    try withWriteLock { held in
      let n = layout.slotCount
      let r = writer.expireSlots(
        from: Int(counters.value(.sweepHand) % UInt64(n)), count: min(max(1, maxSlots), n),
        now: Sys.expiryClockMilliseconds(), held)
      counters.set(.sweepHand, UInt64(r.next), held)
      return r.removed
    }
  }

  /// Removes every expired entry, `sweepStep` slots per hold of the write lock (leaving
  /// the background sweeper's hand alone). An entry that expires, or that other writers
  /// move, while it runs may be left for the next sweep. Returns how many it removed.
  func removeExpired() throws -> Int {
    let n = layout.slotCount
    var removed = 0
    var start = 0
    while start < n {
      let count = min(Self.sweepStep, n - start)
      removed += try withWriteLock { held in
        writer.expireSlots(from: start, count: count, now: Sys.expiryClockMilliseconds(), held).removed
      }
      start += count
    }
    return removed
  }

  var countLimit: Int { counters.countLimit }
  var costLimit: Int { counters.costLimit }

  /// Sets the count and cost limits stored in the file (0 = none) and evicts down to them.
  func setLimits(count: Int?, cost: Int?) throws {
    try withWriteLock { held in
      if let count { counters.set(.countLimit, UInt64(max(0, count)), held) }
      if let cost { counters.set(.costLimit, UInt64(max(0, cost)), held) }
      try policy.evictToLimits(now: Sys.expiryClockMilliseconds(), held)
    }
  }

  // MARK: Reads

  /// The non-generic read used by the public API: copies the value of `key` into a
  /// temporary buffer (stack for values up to 256 bytes, and for larger ones while the
  /// stack has room) and calls `body` with it. Returns false on a miss. Being
  /// non-generic, it costs no generic-metadata lookups per call.
  /// Precondition: `checkKey(key)` passed (every public entry point checks it first).
  @usableFromInline
  func read(
    _ key: UnsafeRawBufferPointer, allowExpired: Bool, countStats: Bool,
    _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> Void
  ) rethrows -> Bool {
    let hash = KeyHash.key(key)
    // Most values fit 256 bytes: a constant size lets the compiler place the buffer on
    // the stack with no size check.
    var found = false
    var want = try withUnsafeTemporaryAllocation(byteCount: Self.stackBufferBytes, alignment: 16) { buffer in
      try attempt(key, hash, allowExpired, countStats, buffer, &found, body)
    }
    // A larger value: size the buffer from the entry (it may grow again meanwhile).
    for _ in 0..<Self.resizeTries where want > 0 {
      want = try withUnsafeTemporaryAllocation(byteCount: want, alignment: 16) { buffer in
        try attempt(key, hash, allowExpired, countStats, buffer, &found, body)
      }
    }
    return found
  }

  /// The stack buffer a read copies into first: most values are smaller. A computed
  /// constant, so that inlined callers (`SharedCache.object(forKey:)`) see the number and
  /// the compiler places the buffer on the stack with no size check.
  @inlinable static var stackBufferBytes: Int { 256 }
  /// Times a read sizes its buffer again for a value that keeps growing.
  static let resizeTries = 8

  /// One lookup into `buffer`, calling `body` on a hit (and setting `found`). Returns the
  /// size to try again with when the value is larger than the buffer, else 0.
  @inline(__always)
  private func attempt(
    _ key: UnsafeRawBufferPointer, _ hash: UInt64, _ allowExpired: Bool, _ countStats: Bool,
    _ buffer: UnsafeMutableRawBufferPointer, _ found: inout Bool,
    _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> Void
  ) rethrows -> Int {
    // The common case first: an inline entry, by the straight-line path. (`now` is 0:
    // the clock is read lazily, only for an entry with an expiry.)
    if !allowExpired {
      var expiry: UInt64 = 0
      var version: UInt64 = 0
      let n = reader.probeInline(key, hash: hash, into: buffer, expiry: &expiry, version: &version)
      if n >= 0 {
        let info = EntryInfo(
          valueCount: n, expiryMilliseconds: expiry == 0 ? nil : expiry, version: version,
          isExpired: false)
        return try finish(.hit(info), countStats, buffer, &found, body)
      }
      if n == Reader.fastMiss {
        // An empty slot before the key: only the miss's confirmation is left to do.
        return try finish(
          reader.confirmMiss(key, hash: hash, now: 0, allowExpired: false, into: buffer),
          countStats, buffer, &found, body)
      }
    }
    return try finish(
      reader.lookup(key, hash: hash, now: 0, allowExpired: allowExpired, into: buffer),
      countStats, buffer, &found, body)
  }

  @inline(__always)
  private func finish(
    _ outcome: Reader.Probe, _ countStats: Bool, _ buffer: UnsafeMutableRawBufferPointer,
    _ found: inout Bool, _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> Void
  ) rethrows -> Int {
    switch outcome {
    case .hit(let info):
      if countStats { reader.countHit() }
      try body(UnsafeRawBufferPointer(start: buffer.baseAddress, count: info.valueCount), info)
      found = true
      return 0
    case .miss, .corrupt:
      if countStats { reader.countMiss() }
      return 0
    case .busy:
      if countStats { reader.countBusyMiss() }
      return 0
    case .needs(let n):
      return n
    }
  }

  /// The copy-out read, the shortest path from the file to the caller: `key`'s value
  /// is copied straight from its slot (or record) into `buffer`, with no temporary
  /// buffer and no closure. Returns the value's length, or -1 on a miss; the bytes were
  /// copied only when the length is at most `buffer.count` (call again with a buffer
  /// that large otherwise, like `snprintf`).
  /// Precondition: `checkKey(key)` passed.
  @usableFromInline
  func copyValue(_ key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    copyValue(key, hash: KeyHash.key(key), into: buffer)
  }

  /// `copyValue(_:into:)` for a key whose hash (`KeyHash.key`) the caller has computed:
  /// the batch read's step 3 (`copyValues`) is this single read (after, for a key whose
  /// hash its step 2 saw at home, the same fast path's read of that slot).
  @inline(__always)
  func copyValue(_ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    guard reader.isPlain else { return copyValueSlowly(key, hash: hash, fast: Reader.fastUnsure, into: buffer) }
    var expiry: UInt64 = 0
    var version: UInt64 = 0
    let fast = reader.probeInline(key, hash: hash, into: buffer, expiry: &expiry, version: &version, plain: true)
    if fast >= 0 {
      reader.countHit()
      return fast
    }
    return copyValueSlowly(key, hash: hash, fast: fast, into: buffer)
  }

  /// `copyValue` past its fast path: kept out of line so that the fast path stays small.
  @inline(never)
  func copyValueSlowly(
    _ key: UnsafeRawBufferPointer, hash: UInt64, fast: Int,
    into buffer: UnsafeMutableRawBufferPointer, onHit: (EntryInfo) -> Void = { _ in }
  ) -> Int {
    let outcome =
      fast == Reader.fastMiss
      ? reader.confirmMiss(key, hash: hash, now: 0, allowExpired: false, into: buffer)
      : reader.lookup(key, hash: hash, now: 0, allowExpired: false, into: buffer)
    switch outcome {
    case .hit(let info):
      reader.countHit()
      onHit(info)
      return info.valueCount
    case .needs(let n):
      return n
    case .miss, .corrupt:
      reader.countMiss()
      return -1
    case .busy:
      reader.countBusyMiss()
      return -1
    }
  }

  /// `read` returning what `body` returns (nil on a miss). Same costs as `read`.
  @inline(__always)
  func withValue<R>(
    forKey key: UnsafeRawBufferPointer, allowExpired: Bool = false, countStats: Bool = true,
    _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> R
  ) rethrows -> R? {
    var result: R? = nil
    _ = try read(key, allowExpired: allowExpired, countStats: countStats) { bytes, info in
      result = try body(bytes, info)
    }
    return result
  }

  /// Visits live entries without the write lock (`Reader.forEachEntry`).
  func forEachEntry(
    values: Bool, includeExpired: Bool = false,
    _ body: (Reader.ScannedEntry) throws -> Bool
  ) rethrows {
    try reader.forEachEntry(values: values, includeExpired: includeExpired, body)
  }

  // MARK: Checking

  /// Checks every invariant, and with `repair` fixes what it finds. It first checks
  /// without the lock (writers go on; a whole check of a 64 MiB cache takes about 0.1 s),
  /// and takes the lock for a second, exact pass (and the repair) only if that found
  /// something: a write landing mid-scan can look like damage, so only a problem seen
  /// under the lock is reported.
  func verify(repair: Bool) throws -> VerifyReport {
    guard let lock else {
      // A repair is a write: a read-only handle refuses it rather than skip it silently.
      if repair { throw CacheError.readOnly(path: path) }
      return checker.inspect(checksums: true)
    }
    // A healthy cache is confirmed without blocking anyone, even when asked to repair:
    // the lock (held for a whole pass) is taken only for a file that needs it.
    let unlocked = checker.inspect(checksums: true)
    if unlocked.ok { return unlocked }
    return try lock.withLock { held in
      guard repair else { return checker.inspect(checksums: true) }
      markIntent(held)
      let r = checker.repair(checksums: true, held)
      memory.header(.intent).store(0, .relaxed)
      return r
    }
  }

  // MARK: Statistics

  /// Values of the process-wide counters, summed over the process table.
  func statistics() -> CacheStatistics {
    var hits = counters.value(.retiredHits)
    var misses = counters.value(.retiredMisses)
    var busy = counters.value(.retiredBusy)
    for i in 0..<layout.procCount {
      hits &+= memory.procWord(i, Format.P.hits).load(.relaxed)
      misses &+= memory.procWord(i, Format.P.misses).load(.relaxed)
      busy &+= memory.procWord(i, Format.P.busy).load(.relaxed)
    }
    if registration == nil {
      hits &+= handleCounters.hits.load(.relaxed)
      misses &+= handleCounters.misses.load(.relaxed)
      busy &+= handleCounters.busy.load(.relaxed)
    }
    let small = logs.state(.small)
    let main = logs.state(.main)
    return CacheStatistics(
      entries: counters.count(.entries), liveBytes: counters.count(.liveBytes),
      capacity: layout.fileSize, hits: TableCounters.clamp(hits), misses: TableCounters.clamp(misses),
      busyMisses: TableCounters.clamp(busy), sets: counters.count(.sets),
      evictions: counters.count(.evictions), expirations: counters.count(.expirations),
      recoveries: counters.count(.recoveries), removals: counters.count(.removes),
      promotions: counters.count(.promotions), reinsertions: counters.count(.reinsertions),
      lockTakeovers: counters.count(.lockTakeovers),
      slotCount: layout.slotCount, maxEntries: layout.maxEntries,
      logBytes: layout.smallSize + layout.mainSize,
      logBytesUsed: Int(truncatingIfNeeded: (small.head &- small.tail) &+ (main.head &- main.tail)),
      sweepHand: Int(truncatingIfNeeded: main.tail), countLimit: countLimit, costLimit: costLimit)
  }
}

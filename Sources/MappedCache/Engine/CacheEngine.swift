import Glibc
import Synchronization
import SystemCalls

/// The untyped engine behind `SharedCache` and `CacheFile`: the facade that owns one
/// mapped file, its partitions' write locks and this handle's process registration, and
/// wires the layers together. Each layer has one job and a narrow view of the mapping:
///
///     MappedMemory    the only place that forms or dereferences pointers into the mapping
///     WriteLock       the partitions' cross-process write locks; hands out `WriteLock.Held`
///     ProcessTable    the process's entry (its handles on the file share it): its lock
///                     witness and statistics counters
///     BucketIndex     a partition's buckets: placement, seqlock reads and writes, lookups,
///                     free slots and displacements
///     IndexResizer    the index growing into the logs' space and giving it back
///     RecordLogs      a partition's two circular logs: reserve, commit, tail, limit
///     EvictionPolicy  S3-FIFO over a partition's two logs, the ghost, the budget
///     Reader          the lock-free read protocol and its bounded wait
///     Writer          the write protocol, top-down: set, conditional sets, remove, touch,
///                     update, sweeps
///     Checker         verify and repair of a partition, in named steps
///
/// Everything that changes a partition takes a `WriteLock.Held` for it, which only
/// `withWriteLock(partition:)` hands out: a change made without the lock does not compile.
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
  /// `lock`'s token for the common set's one compare-and-swap
  /// (`WriteLock.uncontendedToken`): 0 for a read-only handle or one in `.flock` mode.
  let quickToken: UInt32
  /// The lock's slow-path state, kept alive here for the lock's whole life.
  private let lockContext: WriteLock.Context?
  let registration: ProcessTable.Registration?
  /// The process's registration in the file, which this handle shares with the
  /// process's other handles on it and keeps alive (nil for a read-only handle).
  private let sharedRegistration: ProcessRegistrations.Shared?
  /// Where this handle counts its hits and misses: its process-table entry, or a private
  /// block for read-only handles.
  private let handleCounters: HandleCounters

  let reader: Reader
  let writer: Writer
  /// Owned here for `writer`, which holds it unowned.
  let growthTrigger: GrowthTrigger

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
    let memory = MappedMemory(file: opened.file, layout: opened.layout)
    self.memory = memory
    writable = opened.file.writable
    var asker = WriteLock.Asker.none
    if opened.file.writable {
      let shared = try ProcessRegistrations.register(file: opened.file, memory: memory)
      sharedRegistration = shared
      let reg = shared.registration
      registration = reg
      let context = WriteLock.Context(memory: memory, fd: opened.file.fd, slot: reg.slot)
      lockContext = context
      let lock = WriteLock(mode: lockMode, context: context, generation: reg.generation)
      self.lock = lock
      quickToken = lock.uncontendedToken
      asker = lock.asker
      handleCounters = ProcessTable.counters(of: reg, memory: memory)
    } else {
      registration = nil
      sharedRegistration = nil
      lock = nil
      quickToken = 0
      lockContext = nil
      handleCounters = HandleCounters.allocatePrivate()
    }
    reader = Reader(
      memory: memory, counters: handleCounters, checksumOnRead: openPolicy.verifyChecksumsOnRead,
      writable: opened.file.writable,
      liveness: Liveness(memory: memory, fd: opened.file.fd, asker: asker))
    let trigger = GrowthTrigger(file: opened.file, layout: opened.layout)
    growthTrigger = trigger
    writer = Writer(
      memory: memory, maxKey: opened.layout.maxKey, maxValue: opened.layout.maxValue, path: path,
      growthTrigger: trigger, recent: .allocate())
    if opened.created, let policy = options.growthPolicy { try? setGrowthPolicy(policy) }
  }

  deinit {
    writer.recent.deallocate()
    if registration == nil { handleCounters.deallocatePrivate() }
  }

  /// Partition `p`'s layers (a value of a few words, made per operation).
  @inline(__always)
  func partition(_ p: Int) -> Partition { Partition(p, file: memory) }

  /// The file's partitions now: the handle's routing count, after adopting any growth
  /// the header shows (for loops over every partition; the read and write paths route
  /// by `memory.partitionCount` and catch up on a miss or under the lock).
  var currentPartitionCount: Int {
    memory.refreshRouting()
    return memory.partitionCount
  }

  /// The file's size now (as `currentPartitionCount` sees it).
  var currentFileSize: Int {
    memory.refreshRouting()
    return memory.fileSize
  }

  /// The partition of a key's hash.
  @inline(__always)
  func partitionNumber(_ hash: UInt64) -> Int { IndexGeometry.partition(hash, count: memory.partitionCount) }

  // MARK: The write locks

  /// Runs `body` under partition `p`'s lock (write step W1): repairs the partition first
  /// if a previous writer died mid-change (its intent word is set) or its log positions
  /// are damaged, and sets the intent word for the duration of `body` (cleared at W7).
  /// With `checkingLogs` false the log positions are not checked first: `body` must not
  /// touch a log before `Writer.store` checks them (a set's in-place rewrite, W3, touches
  /// none). A change that finds the partition breaking an invariant (`PartitionDamage`)
  /// is repaired and run once more; a second failure is `CacheError.corrupted`.
  ///
  /// `routedWith`: the partition count `p` was routed by, for a change to keys routed
  /// there. Under the lock the routing is checked against the file's count (growth
  /// changes it for `p`'s keys only while it holds `p`'s lock): a handle behind the file
  /// adopts the new count and `Rerouted` is thrown, for the caller to route again
  /// (`withKeyLock`).
  @inline(__always)
  func withWriteLock<R>(
    partition p: Int, routedWith count: Int? = nil, checkingLogs: Bool = true,
    _ body: (borrowing LockedPartition) throws -> R
  ) throws -> R {
    guard let lock else { throw CacheError.readOnly(path: path) }
    let part = try acquireSettled(p, lock)
    defer { lock.release(p) }
    return try whileHolding(routedWith: count, checkingLogs: checkingLogs, part, body)
  }

  /// `withWriteLock`'s steps once the lock is held (`part`, taken by `acquireSettled`):
  /// the routing and repair checks of W1, the intent word around `body`, and repair and
  /// one retry when `body` finds the partition damaged.
  @inline(__always)
  func whileHolding<R>(
    routedWith count: Int?, checkingLogs: Bool, _ part: borrowing LockedPartition,
    _ body: (borrowing LockedPartition) throws -> R
  ) throws -> R {
    if let count, memory.liveRouting() > count, try mustReroute() { throw Rerouted() }
    let intent = part.memory.word(.intent)
    if part.needsRepair(checkingLogs: checkingLogs) { repair(part) }
    intent.store(Format.intentChange, .relaxed)
    defer { intent.store(0, .relaxed) }
    do {
      return try body(part)
    } catch is PartitionDamage {
      // The partition broke an invariant under us (damage, or a foreign writer): repair
      // by dropping what cannot be trusted, then try the change once more.
      repair(part)
      do {
        return try body(part)
      } catch let damage as PartitionDamage {
        throw CacheError.corrupted(path: path, reason: damage.reason)
      }
    }
  }

  /// This engine, for a locked body to call without capturing `self` (the single-key
  /// writes: `set`, `remove`, `touch`, `update`, `rewriteInPlace`): a body handed to
  /// `withWriteLock` that captures `self` has it retained and released around the lock,
  /// two atomic read-modify-writes a write. Handing the body `self` as an argument
  /// instead stopped `withWriteLock` being inlined into `set`, which then cost more
  /// (`scripts/callgrind.sh`, DESIGN.md section 12). Make it in one of the engine's methods and use it only
  /// there: sound because that method's caller holds the engine until it returns.
  @inline(__always) var unretained: Unretained { Unretained(engine: .passUnretained(self)) }

  struct Unretained {
    let engine: Unmanaged<CacheEngine>
    @inline(__always)
    func callAsFunction<R>(_ body: (CacheEngine) throws -> R) rethrows -> R {
      try engine._withUnsafeGuaranteedRef(body)
    }
  }

  /// Takes partition `p`'s lock; when the last holder left its intent word set, first
  /// finishes any step of growth it was in (`finishInterruptedSplit`), letting go and
  /// trying again while that needs a lock someone else holds.
  @inline(__always)
  func acquireSettled(_ p: Int, _ lock: WriteLock) throws -> LockedPartition {
    while true {
      let part = try lock.acquire(p)
      if part.memory.word(.intent).load(.relaxed) == 0 { return part }
      let retry: Bool
      do { retry = try finishInterruptedSplit(part) } catch {
        lock.release(p)
        throw error
      }
      if !retry { return part }
      lock.release(p)
      SystemCall.yield()
    }
  }

  /// Runs `body` under the lock of the partition `hash` routes to (`withWriteLock`),
  /// routing again when the file grew meanwhile.
  @inline(__always)
  func withKeyLock<R>(
    hash: UInt64, checkingLogs: Bool = true, _ body: (borrowing LockedPartition) throws -> R
  ) throws -> R {
    while true {
      let count = memory.partitionCount
      do {
        return try withWriteLock(
          partition: IndexGeometry.partition(hash, count: count), routedWith: count, checkingLogs: checkingLogs, body)
      } catch is Rerouted {
        continue
      }
    }
  }

  /// Thrown under a partition's lock (and caught by whoever routed the keys) when the
  /// keys must be routed again: the handle has adopted the file's grown partition count.
  struct Rerouted: Error {}

  /// The file's count is ahead of the count a write was routed by: whether the write must
  /// route again (the handle has adopted the count, or another thread had). A damaged
  /// count is ignored (the write goes on as routed); a growth past this handle's mapping
  /// throws.
  @inline(never)
  func mustReroute() throws -> Bool {
    switch memory.adoptGrowth() {
    case .adopted, .current: return true
    case .damaged: return false
    case .pastMapping:
      throw CacheError.system(
        SystemError(
          errno: ENOMEM,
          operation: "follow the growth of \(path) past this handle's mapping of \(file.mapped) bytes; open it again"))
    }
  }

  /// Repairs a partition under its lock (`Checker.repair`) and counts it. The intent word
  /// is set for the repair's whole time (it already is after a dead writer, naming any
  /// slot it was rewriting): a repairer killed midway leaves it set, so the next holder
  /// repairs again rather than trust a half-repaired partition.
  @inline(never)
  func repair(_ part: borrowing LockedPartition) {
    markIntent(part)
    _ = Checker(part: part.partition, layout: layout, routing: routing(of: part.number)).repair(
      checksums: false, part.held)
    part.counters.bump(.recoveries, part.held)
  }

  /// Where partition `p`'s keys may route, for `Checker`: the file's partition count as
  /// this handle can follow it, and the last partition while growth fills it from `p`.
  func routing(of p: Int) -> Checker.Routing {
    let count = currentPartitionCount
    let last = count - 1
    return Checker.Routing(count: count, alsoTo: last > p && pendingSplitSource(of: last) == p ? last : -1)
  }

  /// Sets the intent word if it is clear (a repair of damage, not of a dead writer).
  private func markIntent(_ part: borrowing LockedPartition) {
    let intent = part.memory.word(.intent)
    if intent.load(.relaxed) == 0 { intent.store(Format.intentChange, .relaxed) }
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

  /// Stores one entry. An unconditional set without expiry, of a key of 1 to 16 bytes
  /// within the file's key limit, in `.sharedWord` mode, runs straight through here
  /// (DESIGN.md section 4, the straight set), the parts of its write kept apart in
  /// registers rather than in a `PreparedWrite` on the stack: W0 (the key's hash and
  /// place, the checksum, `Writer.lookAhead`), the lock's one compare-and-swap, and the
  /// common case, an overwrite in place of the slot W0 saw (`Writer.overwriteHinted`,
  /// W1-W3), then the release. A new key or a change of size goes on under the same hold
  /// of the lock (`setHolding`); anything else (a condition, an expiry, a longer key, the
  /// `.flock` mode, a held lock, a partition to settle first) goes the general way,
  /// `setPrepared`, which costs a set a good part more (`scripts/callgrind.sh`; the
  /// counts: DESIGN.md section 12).
  @usableFromInline
  func set(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expiry: UInt64,
    condition: SetCondition = .always
  ) throws -> SetOutcome {
    let n = key.count
    let token = quickToken
    guard condition == .always, token != 0, expiry == 0, let kp = key.baseAddress, UInt(bitPattern: n &- 1) < 16,
      n <= maxKey, value.count <= writer.maxValue
    else { return try setPrepared(key, value, expiry: expiry, condition: condition) }
    // W0: `Writer.prepare`'s steps, the key hashed from its words (which W2 compares).
    let (hash, words) = KeyHash.shortKey(kp, n)
    let count = memory.partitionCount
    let p = IndexGeometry.partition(hash, count: count)
    guard let first = writer.prefetchFirstBucket(hash, partition: p) else {
      return try setPrepared(key, value, expiry: expiry, condition: condition)
    }
    let sum = KeyHash.checksum(value, hash: hash)
    let part = memory.partition(p)
    let hint = writer.lookAhead(hash: hash, first: first.place, groups: first.groups, part)
    // The lock, when it is free. The hinted overwrite changes nothing unless the
    // partition is settled (its intent word clear, `hintedWord`).
    guard let locked = WriteLock.tryAcquireUncontended(part, token: token, file: memory) else {
      return try setPrepared(key, value, expiry: expiry, condition: condition)
    }
    if let version = writer.overwriteHinted(
      RecordFormat.Content(key: key, value: value, sum: sum, expiry: 0), words: words,
      Writer.Sighting(hint: hint, tag: IndexGeometry.tag(hash), routedWith: count), shortOnly: true, locked)
    {
      WriteLock.releaseUncontended(locked)
      return .stored(version: UInt64(version))
    }
    // Anything else under this hold only once the partition is settled
    // (`acquireSettled`'s check).
    guard part.word(.intent).load(.relaxed) == 0 else {
      WriteLock.releaseUncontended(locked)
      return try setPrepared(key, value, expiry: expiry, condition: condition)
    }
    var w = PreparedWrite(hash: hash, sum: sum, keyCount: n, valueCount: value.count, expiry: 0, partition: p)
    w.routedWith = count
    w.hint = hint
    return try setHolding(key, value, w, condition, locked.handedOn())
  }

  /// `set` the general way: prepared before the lock (W0), then the write protocol under
  /// the key's partition's lock, the hinted overwrite first when unconditional.
  @inline(never)
  private func setPrepared(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expiry: UInt64, condition: SetCondition
  ) throws -> SetOutcome {
    let w = try writer.prepare(key, value, expiry: expiry)
    guard let lock else { throw CacheError.readOnly(path: path) }
    let part: LockedPartition
    do { part = try acquireSettled(w.partition, lock) } catch is Rerouted {
      return try setRerouted(key, value, w, condition)
    }
    if condition == .always, let version = writer.overwriteHinted(key, value, w, part) {
      lock.release(w.partition)
      return .stored(version: UInt64(version))
    }
    return try setHolding(key, value, w, condition, part)
  }

  /// `set`'s general path, under the lock `set` took (`part`), which it releases.
  @inline(never)
  private func setHolding(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite, _ condition: SetCondition,
    _ part: borrowing LockedPartition
  ) throws -> SetOutcome {
    guard let lock else { throw CacheError.readOnly(path: path) }
    let engine = unretained
    do {
      defer { lock.release(w.partition) }
      if w.hint.isRecalled { writer.recent.forget(w.hash) }
      return try whileHolding(routedWith: w.routedWith, checkingLogs: false, part) { part in
        try engine { try $0.writer.store(key, value, w, condition: condition, part) }
      }
    } catch is Rerouted {
      return try setRerouted(key, value, w, condition)
    }
  }

  /// `set` once the file has grown under it: routed again, through `withKeyLock`.
  @inline(never)
  private func setRerouted(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite, _ condition: SetCondition
  ) throws -> SetOutcome {
    let engine = unretained
    return try withKeyLock(hash: w.hash, checkingLogs: false) { part in
      try engine { try $0.store(key, value, w.routed(to: part.number), condition: condition, part) }
    }
  }

  /// The write protocol (`Writer.store`), out of line: callers stay short.
  @inline(never)
  func store(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite,
    condition: SetCondition, now: UInt64 = 0, _ part: borrowing LockedPartition
  ) throws -> SetOutcome {
    try writer.store(key, value, w, condition: condition, now: now, part)
  }

  /// Removes `key`; false when it was not present.
  func remove(_ key: UnsafeRawBufferPointer) throws -> Bool {
    try checkKey(key)
    let hash = KeyHash.key(key)
    let engine = unretained
    return try withKeyLock(hash: hash) { part in
      engine { $0.writer.remove(key, hash: hash, part) }
    }
  }

  /// Removes each of `keys` (an invalidation batch), each partition's under one hold of
  /// its lock; returns how many were present. Every key is checked before anything is
  /// removed.
  func remove(keys: [[UInt8]]) throws -> Int {
    for k in keys { try k.withUnsafeBytes { try checkKey($0) } }
    let hashes = keys.map { $0.withUnsafeBytes { KeyHash.key($0) } }
    var removed = 0
    // Routed again from the start when the file grows meanwhile (keys removed already
    // are simply not found again).
    route: while true {
      let count = memory.partitionCount
      var byPartition: [Int: [Int]] = [:]
      for (i, h) in hashes.enumerated() { byPartition[IndexGeometry.partition(h, count: count), default: []].append(i) }
      for p in byPartition.keys.sorted() {
        do {
          removed += try withWriteLock(partition: p, routedWith: count) { part in
            var n = 0
            for i in byPartition[p]! where keys[i].withUnsafeBytes({ writer.remove($0, hash: hashes[i], part) }) {
              n += 1
            }
            return n
          }
        } catch is Rerouted {
          continue route
        }
      }
      return removed
    }
  }

  /// Changes the expiry of a live entry, keeping its value; false when absent.
  func touch(_ key: UnsafeRawBufferPointer, expiry: UInt64) throws -> Bool {
    try checkKey(key)
    let hash = KeyHash.key(key)
    let engine = unretained
    return try withKeyLock(hash: hash) { part in
      let now = SystemCall.expiryClockMilliseconds()
      return try engine { try $0.writer.touch(key, hash: hash, expiry: expiry, now: now, part) }
    }
  }

  /// Read-modify-write of one entry under its partition's lock (`Writer.update`).
  func update(
    _ key: UnsafeRawBufferPointer,
    _ body: (_ current: UnsafeRawBufferPointer?, _ info: EntryInfo?) throws -> Writer.UpdateAction
  ) throws -> Writer.UpdateOutcome {
    try checkKey(key)
    let hash = KeyHash.key(key)
    let engine = unretained
    return try withKeyLock(hash: hash) { part in
      try engine { try $0.writer.update(key, hash: hash, now: SystemCall.expiryClockMilliseconds(), part, body) }
    }
  }

  /// Removes every entry, partition by partition (each under its own lock).
  func removeAll() throws {
    for p in 0..<currentPartitionCount {
      try withWriteLock(partition: p) { part in writer.removeAll(part) }
    }
  }

  /// Slots examined per hold of a partition's lock by the sweeps below: its other writers
  /// wait at most one step.
  static let sweepStep = 4096

  /// One step of the background sweeper: about `maxSlots` slots in all, split between
  /// the partitions, each from its own sweep hand, which it advances. Returns how many
  /// entries it removed.
  func removeExpired(maxSlots: Int) throws -> Int {
    let count = currentPartitionCount
    let share = max(64, max(1, maxSlots) / count)
    var removed = 0
    for p in 0..<count {
      removed += try withWriteLock(partition: p) { part in
        let r = writer.expireSlots(
          part, from: Int(truncatingIfNeeded: part.counters.value(.sweepHand) & 0xFFFF_FFFF), count: share,
          now: SystemCall.expiryClockMilliseconds())
        part.counters.set(.sweepHand, UInt64(r.next), part.held)
        return r.removed
      }
    }
    return removed
  }

  /// Removes every expired entry, `sweepStep` slots per hold of a partition's lock
  /// (leaving the background sweeper's hands alone). An entry that expires, or that
  /// other writers move, while it runs may be left for the next sweep. Returns how many
  /// it removed.
  func removeExpired() throws -> Int {
    var removed = 0
    for p in 0..<currentPartitionCount {
      var start = 0
      while true {
        let (n, done) = try withWriteLock(partition: p) { part -> (Int, Bool) in
          let slots = part.index.slotCount
          let count = min(Self.sweepStep, max(0, slots - start))
          let r = writer.expireSlots(part, from: start, count: count, now: SystemCall.expiryClockMilliseconds())
          return (r.removed, start + count >= slots)
        }
        removed += n
        start += Self.sweepStep
        if done { break }
      }
    }
    return removed
  }

  var countLimit: Int { Int(truncatingIfNeeded: min(memory.header(.countLimit).load(.relaxed), UInt64(Int.max))) }
  var costLimit: Int { Int(truncatingIfNeeded: min(memory.header(.costLimit).load(.relaxed), UInt64(Int.max))) }

  /// Sets the count and cost limits stored in the file (0 = none) and evicts down to them:
  /// each partition to its share of the new limits, in proportion to what it holds,
  /// partition by partition (no second chances).
  func setLimits(count: Int?, cost: Int?) throws {
    guard lock != nil else { throw CacheError.readOnly(path: path) }
    if let count { memory.header(.countLimit).store(UInt64(max(0, count)), .relaxed) }
    if let cost { memory.header(.costLimit).store(UInt64(max(0, cost)), .relaxed) }
    let (countLimit, costLimit) = (self.countLimit, self.costLimit)
    guard countLimit > 0 || costLimit > 0 else { return }
    let totals = partition(0).counters.fileTotals()
    for p in 0..<currentPartitionCount {
      try withWriteLock(partition: p) { part in
        let countShare = Self.share(countLimit, of: totals.entries, held: part.counters.count(.entries))
        let costShare = Self.share(costLimit, of: totals.liveBytes, held: part.counters.count(.liveBytes))
        try part.policy.evictDown(
          toCount: countShare, cost: costShare, now: SystemCall.expiryClockMilliseconds(), part.held)
      }
    }
  }

  /// A partition's share of a file-wide limit: `limit × held / total` (at least 1), or 0
  /// (no limit) when the file is within it. Computed in floating point: the counters come
  /// from the file and may be damaged, so the product must not trap.
  private static func share(_ limit: Int, of total: Int, held: Int) -> Int {
    guard limit > 0, total > limit else { return 0 }
    let fraction = Double(max(0, held)) / Double(total)
    return max(1, Int(min(Double(limit) * fraction, Double(limit))))
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
    var (found, want) = try withUnsafeTemporaryAllocation(byteCount: Self.stackBufferBytes, alignment: 16) { buffer in
      try attempt(key, hash, allowExpired, countStats, buffer, body)
    }
    // A larger value: size the buffer from the entry (it may grow again meanwhile).
    for _ in 0..<Self.resizeTries where want > 0 {
      (found, want) = try withUnsafeTemporaryAllocation(byteCount: want, alignment: 16) { buffer in
        try attempt(key, hash, allowExpired, countStats, buffer, body)
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

  /// One lookup into `buffer`, calling `body` on a hit. Returns whether it hit, and the
  /// size to try again with when the value is larger than the buffer, else 0.
  @inline(__always)
  private func attempt(
    _ key: UnsafeRawBufferPointer, _ hash: UInt64, _ allowExpired: Bool, _ countStats: Bool,
    _ buffer: UnsafeMutableRawBufferPointer, _ body: (UnsafeRawBufferPointer, EntryInfo) throws -> Void
  ) rethrows -> (found: Bool, want: Int) {
    switch probe(key, hash: hash, allowExpired: allowExpired, into: buffer) {
    case .hit(let info):
      if countStats { reader.countHit() }
      try body(UnsafeRawBufferPointer(start: buffer.baseAddress, count: info.valueCount), info)
      return (true, 0)
    case .miss, .corrupt:
      if countStats { reader.countMiss() }
      return (false, 0)
    case .busy:
      if countStats { reader.countBusyMiss() }
      return (false, 0)
    case .needs(let n):
      return (false, n)
    }
  }

  /// The copy-out read, the shortest path from the file to the caller: `key`'s value
  /// is copied straight from its record into `buffer`, with no temporary buffer and no
  /// closure. Returns the value's length, or -1 on a miss; the bytes were copied only
  /// when the length is at most `buffer.count` (call again with a buffer that large
  /// otherwise, like `snprintf`).
  /// Precondition: `checkKey(key)` passed.
  @usableFromInline
  func copyValue(_ key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    // A short key's hash from one pair of loads (`KeyHash.shortKey`: `KeyHash.key`'s).
    let hash: UInt64
    if key.count <= 16, let p = key.baseAddress {
      hash = KeyHash.shortKey(p, key.count).hash
    } else {
      hash = KeyHash.key(key)
    }
    return copyValue(key, hash: hash, into: buffer)
  }

  /// `copyValue(_:into:)` for a key whose hash (`KeyHash.key`) the caller has computed:
  /// the batch read's step B3 (`copyValues`) is this single read.
  @inline(__always)
  func copyValue(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
    route: Reader.Route? = nil
  ) -> Int {
    switch reader.quickCopy(key, hash: hash, into: buffer, route: route) {
    case .hit(let n):
      reader.countHit()
      return n
    case .miss:
      reader.countMiss()
      return -1
    case .slow:
      return copyValueSlowly(key, hash: hash, into: buffer)
    }
  }

  /// `copyValue` by the general read (`probe`), for what `quickCopy` left to it. Out of
  /// line: inlined, its loops and waits shared the common read's registers, which then
  /// spilled more of its state to the stack.
  @inline(never)
  func copyValueSlowly(_ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    answer(probe(key, hash: hash, into: buffer)) { $0.valueCount }
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

  /// Visits live entries without any lock (`Reader.forEachEntry`).
  func forEachEntry(
    values: Bool, includeExpired: Bool = false,
    _ body: (Reader.ScannedEntry) throws -> Bool
  ) rethrows {
    try reader.forEachEntry(values: values, includeExpired: includeExpired, body)
  }

  // MARK: Checking

  /// Checks every invariant, and with `repair` fixes what it finds, partition by
  /// partition. Each is checked first without its lock (writers go on), and under it for
  /// a second, exact pass (and the repair) only if that found something: a write landing
  /// mid-scan can look like damage, so only a problem seen under the lock is reported.
  func verify(repair: Bool) throws -> VerifyReport {
    // A repair is a write: a read-only handle refuses it rather than skip it silently.
    if repair && lock == nil { throw CacheError.readOnly(path: path) }
    var total = VerifyReport()
    // The header's grown count: partitions past the file's end are damage.
    if let bad = memory.damagedGrowth() {
      total.problems.append("the header's grown partition count \(bad) names partitions past the file's end")
      if repair {
        try takeGrowthLock()
        defer { SystemCall.unlockByte(file.fd, at: Self.growthLockByte) }
        memory.resetGrowth()
        total.repaired += 1
      }
    }
    let count = currentPartitionCount
    for p in 0..<count {
      let part = partition(p)
      var r = Checker(part: part, layout: layout, routing: routing(of: p)).inspect(checksums: true)
      if !r.ok, let lock {
        r = try lock.withLock(p) { part in
          // Under the lock, the routing as it is now (a split may have ended meanwhile).
          let checker = Checker(part: part.partition, layout: layout, routing: routing(of: p))
          guard repair else { return checker.inspect(checksums: true) }
          markIntent(part)
          let r = checker.repair(checksums: true, part.held)
          part.memory.word(.intent).store(0, .relaxed)
          return r
        }
      }
      total.merge(r, partition: p, of: count)
    }
    return total
  }

  // MARK: Statistics

  /// Values of the process-wide counters, summed over the process table and the partitions.
  func statistics() -> CacheStatistics {
    var hits = memory.header(.retiredHits).load(.relaxed)
    var misses = memory.header(.retiredMisses).load(.relaxed)
    var busy = memory.header(.retiredBusy).load(.relaxed)
    for i in 0..<layout.procCount {
      hits &+= memory.procWord(i, Format.ProcessEntryOffset.hits).load(.relaxed)
      misses &+= memory.procWord(i, Format.ProcessEntryOffset.misses).load(.relaxed)
      busy &+= memory.procWord(i, Format.ProcessEntryOffset.busy).load(.relaxed)
    }
    if registration == nil {
      hits &+= handleCounters.hits.load(.relaxed)
      misses &+= handleCounters.misses.load(.relaxed)
      busy &+= handleCounters.busy.load(.relaxed)
    }
    let count = currentPartitionCount
    let parts = (0..<count).map { partitionStatistics($0) }
    let history = growthHistory()
    func sum(_ f: (PartitionStatistics) -> Int) -> Int { parts.reduce(0) { $0 &+ f($1) } }
    return CacheStatistics(
      entries: sum(\.entries), liveBytes: sum(\.liveBytes),
      capacity: currentFileSize, hits: PartitionCounters.clamp(hits), misses: PartitionCounters.clamp(misses),
      busyMisses: PartitionCounters.clamp(busy), sets: sum(\.sets),
      evictions: sum(\.evictions), expirations: sum(\.expirations),
      recoveries: sum(\.recoveries), removals: sum(\.removals),
      promotions: sum(\.promotions), reinsertions: sum(\.reinsertions),
      lockTakeovers: PartitionCounters.clamp(memory.header(.lockTakeovers).load(.relaxed)),
      slotCount: sum(\.slots), maxEntries: sum(\.slots) * 95 / 100,
      logBytes: sum(\.logBytes), logBytesUsed: sum(\.logBytesUsed),
      sweepHand: parts.first?.clockHand ?? 0, countLimit: countLimit, costLimit: costLimit,
      partitionCount: count, indexBytes: sum(\.indexBytes),
      indexSplits: sum(\.splits), indexMerges: sum(\.merges),
      inserts: sum(\.inserts), ghostHits: sum(\.ghostHits), growths: history.count,
      growthHistory: history.records, growthPolicy: growthPolicy)
  }

  /// One partition's figures, read without its lock (a consistent-enough snapshot).
  func partitionStatistics(_ p: Int) -> PartitionStatistics {
    let part = partition(p)
    let c = part.counters
    let geometry = part.index.geometryRelaxed()
    let groups = part.memory.isValidGroupCount(geometry.groups) ? geometry.groups : 0
    let small = part.logs.state(.small)
    let main = part.logs.state(.main)
    return PartitionStatistics(
      partition: p, entries: c.count(.entries), liveBytes: c.count(.liveBytes), sets: c.count(.sets),
      evictions: c.count(.evictions), expirations: c.count(.expirations), recoveries: c.count(.recoveries),
      removals: c.count(.removals), promotions: c.count(.promotions), reinsertions: c.count(.reinsertions),
      splits: c.count(.splits), merges: c.count(.merges), inserts: c.count(.inserts), ghostHits: c.count(.ghostHits),
      slots: groups * Format.slotsPerGroup,
      indexBytes: groups * Format.groupBytes, logBytes: (small.limit - small.base) + (main.limit - main.base),
      logBytesUsed: (small.isSane ? small.used : 0) + (main.isSane ? main.used : 0),
      clockHand: main.tail.offset, writeLockHolderPid: nil)
  }
}

/// A partition broke an invariant (damage, a foreign writer): thrown by the layers,
/// caught by `CacheEngine.withWriteLock`, which repairs the partition and runs the change
/// once more, then reports `CacheError.corrupted` with the file's path.
struct PartitionDamage: Error {
  var reason: String
  init(_ reason: String) { self.reason = reason }
}

import Foundation
import SystemCalls

/// Raw-bytes access to any MappedCache file, whatever value type its writers use: for
/// tools (`mapped-cache`) that inspect, edit, verify and repair caches. Keys and values
/// are plain bytes; nothing is decoded. A thin layer over the engine: reads take no
/// lock, each write holds the write lock for one operation, as `SharedCache` does.
///
/// ```swift
/// let file = try CacheFile(path: "/dev/shm/demo.mcache", readOnly: true)
/// print(file.info.capacity, file.statistics.entries)
/// try file.forEachEntry(prefix: Array("user:".utf8)) { e in print(e.valueCount); return true }
/// ```
public final class CacheFile: @unchecked Sendable {
  let engine: CacheEngine

  /// Whether `create` made a new file (false: the path already held a cache, now open).
  public let wasCreated: Bool

  /// Opens an existing cache file, never creating one. With `readOnly`, the file is
  /// mapped read-only: nothing in it changes, not even reference bits or the process
  /// table, and `set`, `delete`, `sweep`, `clear` and `verify(repair: true)` throw
  /// `CacheError.readOnly`. A file the caller cannot write opens read-only too.
  public init(
    path: String, readOnly: Bool = false, policy: OpenPolicy = OpenPolicy(verifyChecksumsOnRead: true),
    lockMode: LockMode = .sharedWord
  ) throws(CacheError) {
    var p = policy
    p.create = false
    p.readOnly = p.readOnly || readOnly
    engine = try CacheEngine(
      path: path, options: CacheOptions(), policy: p, lockMode: lockMode,
      typeFingerprint: 0, typeName: "")
    wasCreated = false
  }

  /// Creates a cache file with `options` (or opens the cache already at `path`, with its
  /// own parameters: check `wasCreated`). `typeName` records the value type for `info`
  /// and for `SharedCache`'s type check ("bytes", "string", "int64", ...); empty (the
  /// default) makes an untyped cache that any `SharedCache<Value>` may open.
  public init(
    creating path: String, options: CacheOptions = CacheOptions(), typeName: String = "",
    policy: OpenPolicy = OpenPolicy(verifyChecksumsOnRead: true), lockMode: LockMode = .sharedWord
  ) throws(CacheError) {
    var p = policy
    p.create = true
    p.readOnly = false
    _ = try Layout(options: options)  // refuse bad options before a file exists
    let fingerprint: UInt64 = typeName.isEmpty ? 0 : KeyHash.bytes(Array(typeName.utf8)) | 1
    engine = try CacheEngine(
      path: path, options: options, policy: p, lockMode: lockMode,
      typeFingerprint: fingerprint, typeName: typeName)
    wasCreated = engine.created
  }

  // MARK: Layout

  /// The file's fixed parameters, from its validated header.
  public struct Info: Sendable, Equatable, Codable {
    /// The path the file was opened at.
    public var path: String
    /// The file format version of its header (this library reads and writes one).
    public var formatVersion: Int
    /// The file's size in bytes.
    public var capacity: Int
    /// The most the file may grow to (`CacheOptions.maxCapacity`).
    public var maxCapacity: Int
    /// Header page plus process table.
    public var headerBytes: Int
    /// Entries of the process table: the most handles that can have the file open for
    /// writing at once.
    public var processSlots: Int
    /// Partitions: each has its own write lock, index, logs and eviction.
    public var partitionCount: Int
    /// Bytes of each partition.
    public var partitionBytes: Int
    /// Bytes of the small log, where new entries go, in every partition together.
    public var smallLogBytes: Int
    /// Slots of the index when the file was opened, in every partition (each index grows
    /// and shrinks with the entries: `CacheStatistics.slotCount` has it now).
    public var slotCount: Int
    /// Bytes of the main log when the file was opened, in every partition together (the
    /// space the indexes do not take).
    public var mainLogBytes: Int
    /// The longest key, in bytes.
    public var maxKeySize: Int
    /// The largest value, in bytes.
    public var maxValueSize: Int
    /// The value type recorded at creation; empty for an untyped cache.
    public var valueTypeName: String
    /// When the file was created.
    public var created: Date
    /// Whether this handle can write the file.
    public var writable: Bool
  }

  /// The file's fixed parameters. Costs no system call: read from the header
  /// validated at open.
  public var info: Info {
    let l = engine.layout
    let h = engine.header
    let st = engine.statistics()
    let count = engine.currentPartitionCount
    return Info(
      path: engine.path, formatVersion: Int(h.version), capacity: engine.currentFileSize,
      maxCapacity: l.maxCapacity, headerBytes: l.headerBytes, processSlots: l.procCount, partitionCount: count,
      partitionBytes: l.partitionBytes, smallLogBytes: l.smallBytes * count, slotCount: st.slotCount,
      mainLogBytes: st.logBytes - l.smallBytes * count, maxKeySize: l.maxKey,
      maxValueSize: l.maxValue, valueTypeName: h.typeName,
      created: Date(timeIntervalSince1970: Double(h.createdMs) / 1000),
      writable: engine.writable)
  }

  /// The path the file was opened at.
  public var path: String { engine.path }

  /// The name of the file's value type (`""` for an untyped file), read from the header
  /// alone: unlike `info`, which sums every partition's and process's counters, it touches
  /// no page past the header (a file whose other blocks are holes on a full file system
  /// stays readable).
  public var valueTypeName: String { engine.header.typeName }

  /// Whether this handle can write: false when opened `readOnly`, or when this user may
  /// only read the file.
  public var isWritable: Bool { engine.writable }

  // MARK: Figures

  /// The cache's counters, summed over every process.
  public var statistics: CacheStatistics { engine.statistics() }

  /// Shape of the index, read without the locks.
  public struct TableFigures: Sendable, Equatable, Codable {
    /// Slots of the index, in every partition.
    public var slotCount: Int
    /// Slots holding an entry (live or expired, not yet reclaimed).
    public var occupiedSlots: Int
    /// Share of the entries that sit in their key's second place (a lookup of such a key
    /// reads two buckets; a miss always reads both).
    public var meanProbe: Double
    /// 1 when some entry sits in its second place, else 0.
    public var maxProbe: Int
    /// Groups of the index (four buckets of ten slots and a ghost line each).
    public var groups: Int
    /// Always 0: a removal empties its slot, and nothing else needs marking.
    public var tombstones: Int
    /// Occupied slots / slots.
    public var load: Double { slotCount == 0 ? 0 : Double(occupiedSlots) / Double(slotCount) }
  }

  /// The index's shape now, from one lock-free pass over every slot (its cost grows with
  /// the entries: each entry's record is read to place its key).
  public var tableFigures: TableFigures {
    let t = engine.tableShape()
    return TableFigures(
      slotCount: t.slots, occupiedSlots: t.occupied,
      meanProbe: t.occupied == 0 ? 0 : Double(t.inSecondPlace) / Double(t.occupied),
      maxProbe: t.inSecondPlace > 0 ? 1 : 0, groups: t.groups, tombstones: 0)
  }

  /// Each partition's counters now (read without the locks), with the process holding
  /// its write lock when another live one does.
  public var partitionStatistics: [PartitionStatistics] {
    (0..<engine.currentPartitionCount).map { p in
      var s = engine.partitionStatistics(p)
      s.writeLockHolderPid = engine.writeLockHolder(partition: p)?.pid
      return s
    }
  }

  /// The background sweeper's next slot (see `SharedCache.startSweeping`).
  public var sweeperSlot: Int { engine.sweeperSlot }

  /// A process with the file open for writing.
  public struct AttachedProcess: Sendable, Equatable, Codable {
    /// Its process ID.
    public var pid: Int
    /// When it opened the file.
    public var opened: Date

    init(_ p: CacheEngine.AttachedProcess) {
      pid = p.pid
      opened = Date(timeIntervalSince1970: Double(p.openedMs) / 1000)
    }
  }

  /// Processes that have the file open for writing (this handle excluded).
  public var attachedProcesses: [AttachedProcess] {
    engine.attachedProcesses().map(AttachedProcess.init)
  }

  /// The process holding the write lock at this moment, if another live one does. A
  /// holder that is stopped (SIGSTOP, a debugger) keeps every writer waiting and is never
  /// taken over while it lives: this names it. Nil when the lock is free or its holder is
  /// gone (the next writer takes it over).
  public var writeLockHolder: AttachedProcess? {
    engine.writeLockHolder().map(AttachedProcess.init)
  }

  // MARK: Entries

  /// The value stored under `key` and what the read learned about it; nil when missing
  /// or expired (or, with `allowingExpired`, only when missing). Reads count towards
  /// the hit and miss statistics only with `countingStatistics`. Lock-free.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key.
  public func get(
    _ key: [UInt8], allowingExpired: Bool = false,
    countingStatistics: Bool = false
  ) throws(CacheError) -> (value: [UInt8], info: EntryInfo)? {
    if key.isEmpty { throw .emptyKey }
    if key.count > engine.layout.maxKey { throw .keyTooLarge(size: key.count, limit: engine.layout.maxKey) }
    return key.withUnsafeBytes { k in
      engine.withValue(forKey: k, allowExpired: allowingExpired, countStats: countingStatistics) {
        (Array($0), $1)
      }
    }
  }

  /// Stores `value` under `key`, expiring `ttl` seconds from now (nil: never).
  /// Returns the entry's new version. Holds the write lock for this one entry.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key; ``CacheError/valueTooLarge(size:limit:)``;
  ///   ``CacheError/readOnly(path:)`` on a read-only handle.
  @discardableResult
  public func set(_ key: [UInt8], _ value: [UInt8], ttl: TimeInterval? = nil) throws -> UInt64 {
    let expiry = (ttl.map { CacheExpiry.seconds($0) } ?? .never).milliseconds(now: SystemCall.wallClockMilliseconds())
    let outcome = try key.withUnsafeBytes { k in
      try value.withUnsafeBytes { v in try engine.set(k, v, expiry: expiry) }
    }
    guard case .stored(let version) = outcome else {
      throw CacheError.corrupted(path: path, reason: "an unconditional set was not stored")
    }
    return version
  }

  /// Removes `key`; false when it was not present.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` for a bad key; ``CacheError/readOnly(path:)`` on a read-only handle.
  @discardableResult
  public func delete(_ key: [UInt8]) throws -> Bool {
    try key.withUnsafeBytes { try engine.remove($0) }
  }

  /// One entry seen by `forEachEntry`.
  public struct Entry: Sendable, Equatable {
    /// The key's bytes.
    public var key: [UInt8]
    /// The value's bytes, when asked for.
    public var value: [UInt8]?
    /// The value's length in bytes (also when the value itself was not asked for).
    public var valueCount: Int
    /// Absolute expiry in milliseconds since 1970, or nil for never.
    public var expiryMilliseconds: UInt64?
    /// The entry's version, changed by every write (see `SharedCache.objectWithVersion(forKey:)`).
    public var version: UInt64
    /// Whether it had expired when it was read (seen only with `includeExpired`).
    public var isExpired: Bool
    /// Whether the entry lives in the main log (a survivor) rather than the small one.
    public var inMainLog: Bool

    /// When it expires, or nil for never.
    public var expiry: Date? { expiryMilliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) } }

    /// Seconds until the entry expires (≤ 0 once expired), or nil for never.
    public func timeToLive(now: Date = Date()) -> TimeInterval? {
      expiryMilliseconds.map { Double($0) / 1000 - now.timeIntervalSince1970 }
    }
  }

  /// Visits live entries (with `includeExpired`, expired ones not yet reclaimed too)
  /// whose key starts with `prefix`, without taking the write lock: each entry is
  /// copied whole under its slot's seqlock, in index order. Like Redis's SCAN, entries
  /// written, removed or moved while the scan runs may be missed or seen twice.
  /// Return false from `body` to stop.
  public func forEachEntry(
    prefix: [UInt8] = [], values: Bool = false, includeExpired: Bool = false,
    _ body: (Entry) throws -> Bool
  ) rethrows {
    try engine.forEachEntry(values: values, includeExpired: includeExpired) { e in
      guard e.key.starts(with: prefix) else { return true }
      return try body(
        Entry(
          key: e.key, value: e.value, valueCount: e.info.valueCount,
          expiryMilliseconds: e.info.expiryMilliseconds, version: e.info.version,
          isExpired: e.info.isExpired, inMainLog: e.inMainLog))
    }
  }

  // MARK: Maintenance

  /// Checks every invariant of the file under the write lock (without it on a
  /// read-only handle); with `repair`, fixes what it finds by dropping what cannot be
  /// trusted. The lock is held for the whole check.
  public func verify(repair: Bool = false) throws -> VerifyReport {
    if repair && !engine.writable { throw CacheError.readOnly(path: path) }
    return try engine.verify(repair: repair)
  }

  /// Removes every expired entry now, a few thousand slots per hold of the write lock.
  /// Returns how many it removed.
  @discardableResult
  public func sweep() throws -> Int { try engine.removeExpired() }

  /// Stores a growth policy in the file, nil for none (`SharedCache.setGrowthPolicy`).
  public func setGrowthPolicy(_ policy: GrowthPolicy?) throws { try engine.setGrowthPolicy(policy) }

  /// Grows the file to `capacity` bytes while other processes keep using it
  /// (`SharedCache.grow(toCapacity:)`). Returns the capacity after growth, the entries
  /// moved into the new partitions, and the longest step (one partition's split: the
  /// most any writer waited for it).
  @discardableResult
  public func grow(toCapacity capacity: Int) throws -> (
    capacity: Int, partitions: Int, movedEntries: Int, longestStepSeconds: Double
  ) {
    let g = try engine.grow(toCapacity: capacity)
    return (g.toCapacity, g.toPartitions, g.movedEntries, g.longestStepSeconds)
  }

  /// Removes every entry.
  public func clear() throws { try engine.removeAll() }
}

import SystemCalls

/// The file format, version 5. All integers little-endian (the only byte order this
/// package runs on); header offsets are from the start of the file, partition offsets
/// from the start of their partition (DESIGN.md, sections 1-2).
///
///     0 ┌──────────────────────────────────────────────────────────────┐
///       │ header line 0: identity and layout (written once, at create) │
///       │   magic, version, sizes, partition count and size, limits,   │
///       │   most capacity (growth's ceiling), type fingerprint,        │
///       │   layout fingerprint = hash of the bytes                     │
///   256 │ line 4: lock takeovers, retired hits, misses, busy misses    │
///   320 │ line 5: limits (count, cost)                                 │
///   384 │ line 6: grown size and partition count (0: as created)       │
///   768 │ tier words                                                   │
///  4096 ├──────────────────────────────────────────────────────────────┤
///       │ process table: procCount × 64 B (generation, pid, hits, ...) │
///   H   ├──────────────────────────────────────────────────────────────┤
///       │ partitionCount × partitionBytes                              │
///  size ├──────────────────────────────────────────────────────────────┤
///       │ room to grow: not in the file, but mapped by every handle    │
///   max └──────────────────────────────────────────────────────────────┘
///
/// A partition (`PartitionWord` names its words):
///
///     0 line 0 (read-mostly): geometry = generation << 32 | group count
///    64 line 1 (writers): lock word, intent, entries, live bytes, version counter,
///       sets, last reuse
///   128 line 2: log positions, main log's last wrap, limit, pending limit, sweep hand
///   192 line 3: event counters
///   256 line 4: move sequence (odd while a displacement moves entries; misses check it),
///       split source (nonzero while the partition is filled from another by growth)
///   320 small log | main log ... limit | (free) | index groups, group 0 last
///
/// Bucket (64 B, four to a group, then the group's ghost line):
///
///     0 seq   u32       seqlock: odd while a writer changes the bucket
///     4 tags  10 × u16  16 bits of the key's hash; 0 = empty
///    24 words 10 × u32  bits 0..28 record offset in the partition; 29, 30, 31:
///                       referenced, frequent, hot
///
/// Records: `RecordFormat`.
enum Format {
  static let magic: UInt64 = 0x3130_4548_4341_434D  // "MCACHE01"
  static let initialisingMagic: UInt64 = 0x3054_494E_4943_434D  // "MCCINIT0": creation crashed
  /// The format's version: changed whenever the meaning of any byte changes, and only a
  /// file of exactly this version is opened (CHANGELOG.md says what each one changed).
  static let version: UInt32 = 5
  /// The last version with one index and one pair of logs for the whole file, which
  /// `mapped-cache migrate` (through `FormatFourReader`) copies from.
  static let previousVersion: UInt32 = 4
  static let headerPage = 4096
  static let procEntryBytes = 64
  static let minCapacity = 1 << 20
  static let maxCapacity = 1 << 46

  // Header field offsets.
  enum HeaderOffset {
    static let magic = 0, version = 8, headerBytes = 12, fileSize = 16, partitionCount = 24
    static let partitionBytes = 32, partitionsOffset = 40, smallBytes = 48, maxCapacity = 56
    static let maxKey = 80, maxValue = 84
    static let typeFingerprint = 88, createdMs = 96, procOffset = 104, procCount = 112
    static let layoutFingerprint = 120
    static let typeName = 128  // up to 112 bytes of UTF-8, NUL padded (for `info`)
    static let typeNameBytes = 112
    static let fingerprinted = 120  // bytes [0, 120) feed the layout fingerprint

    // Line 4: counters every process may bump (atomic adds, rare).
    static let lockTakeovers = 256, retiredHits = 264, retiredMisses = 272, retiredBusy = 280
    // Line 5: the file's limits (read by writers of every partition, rarely written).
    static let countLimit = 320, costLimit = 328
    /// Line 6: the file as grown (`CacheEngine.grow`), 0 until it first grows: its size
    /// and partition count, each stored once per step of growth, with release ordering,
    /// and read by a handle's misses and writes (`MappedMemory.liveRouting`).
    static let grownSize = 384, grownCount = 392
    /// Line 7: the growth policy (`GrowthPolicy`; rate 0 = off) and its state: the last
    /// growth's time and the file's ghost hits and inserts then, the growths so far.
    static let policyRate = 448, policyFactor = 456, policyInterval = 464, policyMinInserts = 472
    static let lastGrowthMs = 480, ghostHitsAtGrowth = 488, insertsAtGrowth = 496, growths = 504
    /// Lines 8-9: the last `growthHistoryCount` growths, oldest first, 3 words each: when
    /// (ms), the capacity after, the ghost-hit rate (per million) that drove it (0: by
    /// hand).
    static let growthHistory = 512, growthHistoryCount = 4

    /// Words reserved for tiers layered on the cache (the near cache's heartbeats,
    /// fences and per-slot epochs): `tierWordCount` words from here to 3968, inside the
    /// header page, zero in a new file, never read or written by the engine itself.
    static let tierWords = 768
    static let tierWordCount = 400
  }

  // Process-table entry field offsets.
  /// `busy`: reads that answered "miss" because a bucket stayed mid-write past the
  /// readers' bounded wait.
  enum ProcessEntryOffset { static let generation = 0, pid = 8, hits = 16, misses = 24, openedMs = 32, busy = 40 }

  // Partition word offsets (from the partition's start).
  enum PartitionOffset {
    /// Line 0, read by every read: `generation << 32 | group count`.
    static let geometry = 0
    // Line 1: what every write changes.
    static let lockWord = 64
    /// `intent`: 0 while no change is under way, `Format.intentChange` while the lock's
    /// holder changes the partition, `intentRewriteBase + slot` while it rewrites that
    /// slot's record in place (`BucketIndex.rewriteValue`). Found nonzero by the next
    /// holder: the last one died mid-change, and the next one repairs (dropping that slot).
    static let intent = 72, entries = 80, liveBytes = 88, versionCounter = 96, sets = 104, lastReuse = 112
    // Line 2: the logs (appends, eviction, the index's growth) and the sweeper.
    static let smallHead = 128, smallTail = 136, mainHead = 144, mainTail = 152
    static let mainLastWrap = 160, mainLimit = 168, mainPendingLimit = 176, sweepHand = 184
    // Line 3: event counters.
    static let evictions = 192, expirations = 200, recoveries = 208, removals = 216
    static let promotions = 224, reinsertions = 232, splits = 240, merges = 248
    /// Line 4, read by misses only: the move sequence, odd while entries move between
    /// buckets (a displacement), so that a reader that missed probes again.
    static let moves = 256
    /// Line 4: `source + 1` while growth fills this partition from `source` (its keys
    /// whose address moved here, `CacheEngine.grow`), else 0. Read by misses.
    static let splitSource = 264
    /// Line 4: entries growth moved out of this partition into a new one; new keys whose
    /// ghost the partition remembered (a miss a larger cache would have served).
    static let grownOut = 272, ghostHits = 280
    /// Line 4: the heads of the main log's free lists (`FreeLists`), two 32-bit offsets
    /// a word (class `c` in word `freeHeads + 8 × (c / 2)`, bits `32 × (c % 2)`; 0: empty).
    /// Written under the lock, read only by writers.
    static let freeHeads = 288
    /// Line 1: new keys stored (the growth policy's denominator).
    static let inserts = 120
    /// Where the small log starts.
    static let dataStart = 320
  }

  /// Values of a partition's `intent` word (see `PartitionOffset.intent`).
  static let intentChange: UInt64 = 1
  static let intentRewriteBase: UInt64 = 2

  /// The lock word's bits (see `WriteLock`): owner slot + 1 in the low bits, the owner's
  /// generation (its low bits) above them up to bit 29, waiters in bit 31.
  ///
  /// The owner field is as wide as the file's process table needs: 10 bits (a 20-bit
  /// generation) for a table of at most `narrowTable` entries, 14 bits (a 16-bit
  /// generation) for a larger one. A table of up to `narrowTable` entries is all that
  /// libraries before the wide form create or open (they refuse a larger one at open, as
  /// a process table size out of range), so every word of a file is read one way only.
  struct Lock {
    static let waitersBit: UInt32 = 1 << 31
    /// The largest table whose words have the 10-bit owner field.
    static let narrowTable = 1000
    /// The largest table at all: the 14-bit owner field's last slot + 1.
    static let largestTable = (1 << 14) - 1

    let ownerMask: UInt32
    let generationShift: UInt32
    let generationMask: UInt64

    /// The bits of a file whose process table has `procCount` entries.
    @inline(__always)
    init(procCount: Int) {
      let bits: UInt32 = procCount <= Self.narrowTable ? 10 : 14
      ownerMask = (1 << bits) - 1
      generationShift = bits
      generationMask = (1 << (30 - UInt64(bits))) - 1
    }

    /// The word naming process-table slot `slot` at `generation`.
    @inline(__always)
    func token(slot: Int, generation: UInt64) -> UInt32 {
      UInt32(slot + 1) | (UInt32(truncatingIfNeeded: generation & generationMask) << generationShift)
    }
  }

  // The index (`BucketIndex`, `IndexGeometry`).
  static let bucketBytes = 64
  static let bucketsPerGroup = 4
  static let slotsPerBucket = 10
  static let ghostWays = 32
  /// Four buckets and a ghost line.
  static let groupBytes = bucketBytes * (bucketsPerGroup + 1)
  static let slotsPerGroup = bucketsPerGroup * slotsPerBucket
  /// Offsets within a bucket: the sequence word, the first entry word, the first tag.
  enum BucketOffset { static let seq = 0, tags = 4, words = 24 }

  /// An entry word: the record's offset in the partition (bits 0..28, so a partition
  /// holds at most 512 MiB) and the hit bits.
  static let offsetBits: UInt32 = 29
  static let offsetMask: UInt32 = (1 << offsetBits) - 1
  static let maxPartitionBytes = 1 << 29
  static let referencedBit: UInt32 = 1 << 29
  /// With `referencedBit` and `hotBit`, a hit count since insertion or since the clock
  /// hand last passed, saturating at 3 (S3-FIFO's frequency counter): 1 sets
  /// `referencedBit`, 2 this, 3 `hotBit`. Each pass of the hand takes one off.
  static let frequentBit: UInt32 = 1 << 30
  static let hotBit: UInt32 = 1 << 31
  /// The three hit bits (a hit that finds `hotBit` set stores nothing).
  static let hitBits: UInt32 = referencedBit | frequentBit | hotBit

  /// Expiry as the engine passes it around (`Expiry`): ms since 1970 in bits 0..47, the
  /// horizon in bits 48..53 (a record stores it in 48 bits: `RecordFormat`).
  static let expiryMask: UInt64 = (1 << 48) - 1

  /// The most bytes a key may have (the format's length fields allow more).
  static let maxKeyLimit = 4096

  /// A partition holds at least this much (a smaller one's overhead would be out of
  /// proportion), and at least `minRecordsPerPartition` of the largest records.
  static let minPartitionBytes = 4 << 20
  static let minRecordsPerPartition = 12
  /// Partitions the automatic choice makes per core, where the capacity allows: with `w`
  /// writers busy at once, a set waits for another on about `(w − 1) / partitions` of
  /// sets (`scripts/set-scaling.sh` measures what the count does).
  static let partitionsPerCore = 32
  /// Most partitions the automatic choice makes (more for files past 512 GiB, whose
  /// partitions would pass `maxPartitionBytes`): files of 4 GiB and up on 32 cores.
  static let maxAutomaticPartitions = 1024
  /// Most partitions a file may have.
  static let maxPartitions = 1 << 20
}

/// A live header word: one that processes change while the file is in use (the
/// identity fields before them are written once, at creation, and read with `pread`).
/// `MappedMemory.header(_:)` turns one into an atomic view; the names say which.
struct HeaderWord {
  let offset: Int

  static let lockTakeovers = HeaderWord(offset: Format.HeaderOffset.lockTakeovers)
  static let retiredHits = HeaderWord(offset: Format.HeaderOffset.retiredHits)
  static let retiredMisses = HeaderWord(offset: Format.HeaderOffset.retiredMisses)
  static let retiredBusy = HeaderWord(offset: Format.HeaderOffset.retiredBusy)
  static let countLimit = HeaderWord(offset: Format.HeaderOffset.countLimit)
  static let costLimit = HeaderWord(offset: Format.HeaderOffset.costLimit)
  static let grownSize = HeaderWord(offset: Format.HeaderOffset.grownSize)
  static let grownCount = HeaderWord(offset: Format.HeaderOffset.grownCount)
  static let policyRate = HeaderWord(offset: Format.HeaderOffset.policyRate)
  static let policyFactor = HeaderWord(offset: Format.HeaderOffset.policyFactor)
  static let policyInterval = HeaderWord(offset: Format.HeaderOffset.policyInterval)
  static let policyMinInserts = HeaderWord(offset: Format.HeaderOffset.policyMinInserts)
  static let lastGrowthMs = HeaderWord(offset: Format.HeaderOffset.lastGrowthMs)
  static let ghostHitsAtGrowth = HeaderWord(offset: Format.HeaderOffset.ghostHitsAtGrowth)
  static let insertsAtGrowth = HeaderWord(offset: Format.HeaderOffset.insertsAtGrowth)
  static let growths = HeaderWord(offset: Format.HeaderOffset.growths)
  /// Word `field` (0-2) of growth-history entry `i`.
  static func growthHistory(_ i: Int, _ field: Int) -> HeaderWord {
    precondition(
      i >= 0 && i < Format.HeaderOffset.growthHistoryCount && field >= 0 && field < 3, "history word out of range")
    return HeaderWord(offset: Format.HeaderOffset.growthHistory + 24 * i + 8 * field)
  }

  /// Tier word `i`. Precondition: `0 <= i < Format.HeaderOffset.tierWordCount` (checked by the API).
  static func tier(_ i: Int) -> HeaderWord {
    precondition(i >= 0 && i < Format.HeaderOffset.tierWordCount, "tier word out of range")
    return HeaderWord(offset: Format.HeaderOffset.tierWords + 8 * i)
  }
}

/// A word of a partition's header lines (offsets `Format.PartitionOffset`). `Partition.word(_:)`
/// turns one into an atomic view.
struct PartitionWord: Hashable {
  let offset: Int

  static let geometry = PartitionWord(offset: Format.PartitionOffset.geometry)
  static let intent = PartitionWord(offset: Format.PartitionOffset.intent)
  static let entries = PartitionWord(offset: Format.PartitionOffset.entries)
  static let liveBytes = PartitionWord(offset: Format.PartitionOffset.liveBytes)
  static let versionCounter = PartitionWord(offset: Format.PartitionOffset.versionCounter)
  static let sets = PartitionWord(offset: Format.PartitionOffset.sets)
  static let lastReuse = PartitionWord(offset: Format.PartitionOffset.lastReuse)
  static let smallHead = PartitionWord(offset: Format.PartitionOffset.smallHead)
  static let smallTail = PartitionWord(offset: Format.PartitionOffset.smallTail)
  static let mainHead = PartitionWord(offset: Format.PartitionOffset.mainHead)
  static let mainTail = PartitionWord(offset: Format.PartitionOffset.mainTail)
  static let mainLastWrap = PartitionWord(offset: Format.PartitionOffset.mainLastWrap)
  static let mainLimit = PartitionWord(offset: Format.PartitionOffset.mainLimit)
  static let mainPendingLimit = PartitionWord(offset: Format.PartitionOffset.mainPendingLimit)
  static let sweepHand = PartitionWord(offset: Format.PartitionOffset.sweepHand)
  static let evictions = PartitionWord(offset: Format.PartitionOffset.evictions)
  static let expirations = PartitionWord(offset: Format.PartitionOffset.expirations)
  static let recoveries = PartitionWord(offset: Format.PartitionOffset.recoveries)
  static let removals = PartitionWord(offset: Format.PartitionOffset.removals)
  static let promotions = PartitionWord(offset: Format.PartitionOffset.promotions)
  static let reinsertions = PartitionWord(offset: Format.PartitionOffset.reinsertions)
  static let splits = PartitionWord(offset: Format.PartitionOffset.splits)
  static let merges = PartitionWord(offset: Format.PartitionOffset.merges)
  static let moves = PartitionWord(offset: Format.PartitionOffset.moves)
  static let splitSource = PartitionWord(offset: Format.PartitionOffset.splitSource)
  static let grownOut = PartitionWord(offset: Format.PartitionOffset.grownOut)
  static let ghostHits = PartitionWord(offset: Format.PartitionOffset.ghostHits)
  static let inserts = PartitionWord(offset: Format.PartitionOffset.inserts)
  /// The word holding free-list heads `2 × pair` and `2 × pair + 1`.
  static func freeHeads(_ pair: Int) -> PartitionWord {
    PartitionWord(offset: Format.PartitionOffset.freeHeads + 8 * pair)
  }
}

/// Creation parameters. Sizes in bytes.
public struct CacheOptions: Sendable, Equatable {
  /// Total file size, 1 MiB to 64 TiB. Default 64 MiB.
  public var capacity: Int = 64 << 20
  /// Longest key, 1 to 4096. Default 250 (memcached's limit).
  public var maxKeySize: Int = 250
  /// Largest value. Default 1 MiB, lowered when a partition is too small to hold it
  /// (a tenth of a partition's main log: see `partitionCount`).
  public var maxValueSize: Int = 1 << 20
  /// The expected average key+value size: a hint that sizes each partition's index at
  /// creation (default 320). The index then follows the entries, growing into the logs'
  /// space or giving it back, so a wrong guess costs nothing lasting.
  public var averageEntrySize: Int = 320
  /// Permission bits of a new file. Default 0600.
  public var mode: UInt32 = 0o600
  /// Most processes that can write the file at once (its process table), 1 to 16,383,
  /// or nil (the default) to choose from the capacity: 8,192 for 32 MiB or more, enough
  /// for a pre-fork fleet of 4,096 workers and its parents (the table, 64 bytes an entry,
  /// then takes at most 1/64 of the file), and 256 below. Every handle one process opens
  /// on one file shares that process's entry, so this counts processes, not handles. A
  /// table over 1,000 entries opens only with this version or later (earlier ones refuse
  /// it at open): give 1,000 or fewer for a file that older versions must open too.
  public var maxProcesses: Int? = nil
  /// Ignored since format 5, which stores every entry in a record (kept so that code
  /// written for earlier versions still compiles). Must be nil or 0 to 208.
  public var inlineEntrySize: Int? = nil
  /// Growth by policy (`GrowthPolicy`), nil (the default) for none: stored in the file,
  /// so every process's writes apply it; `SharedCache.setGrowthPolicy` changes it.
  public var growthPolicy: GrowthPolicy? = nil
  /// Partitions (each with its own write lock, index, logs and eviction), 1 to 2^20, or
  /// nil (the default) to choose from the capacity, the largest value and the machine:
  /// `min(nextPow2(32 × cores), prevPow2(capacity / minPartition), 1024)`, where a
  /// partition holds at least 4 MiB and twelve of the largest records (about 12 MiB with
  /// the default `maxValueSize`). More partitions let more writers run at once (two busy
  /// writers wait for each other on about one set in `partitions`); a larger one holds
  /// larger values, and evicts more like one cache of the whole file.
  public var partitionCount: Int? = nil
  /// The most this file may grow to (`SharedCache.grow(toCapacity:)`), at least
  /// `capacity` and at most 64 TiB, or nil (the default) for 64 × `capacity`, at most 1 TiB
  /// (and never less than `capacity`). Every handle reserves this much address space
  /// (not memory) at open, so that growth never moves a mapping.
  public var maxCapacity: Int? = nil

  /// The defaults: 64 MiB, keys up to 250 bytes, values up to 1 MiB, an average entry of
  /// 320 bytes, mode 0600, 8,192 processes (fewer below 32 MiB), partitions chosen from
  /// the machine.
  public init() {}

  /// The defaults with a capacity of `capacity` bytes (1 MiB to 64 TiB; checked when the
  /// file is created).
  public init(capacity: Int) { self.capacity = capacity }
}

/// The validated geometry of one cache file. Built from options at creation or read
/// from a header at open; every offset a reader will ever use derives from these
/// numbers, which are checked once against the real file size and then never
/// re-read from the (shared, possibly hostile) file.
struct Layout: Equatable {
  var fileSize: Int
  var headerBytes: Int
  var procCount: Int
  var partitionCount: Int
  var partitionBytes: Int
  var partitionsOffset: Int
  /// The small log's bytes, in every partition.
  var smallBytes: Int
  var maxKey: Int
  var maxValue: Int
  /// The most the file may grow to: the address space each handle maps.
  var maxCapacity: Int
  /// The partition count and size the file was created with (fingerprinted in the
  /// header; `partitionCount` and `fileSize` are these until the file grows).
  var createdCount: Int
  var createdSize: Int
  /// Groups each partition's index starts with (creation only; 0 when read from a header).
  var initialGroups = 0

  /// Where the small log starts and ends, and the main log starts, in a partition.
  var smallBase: Int { Format.PartitionOffset.dataStart }
  var mainBase: Int { Format.PartitionOffset.dataStart + smallBytes }
  /// The largest record (header with expiry, key, value).
  var maxRecord: Int { RecordFormat.size(keyCount: maxKey, valueCount: maxValue, expiry: true) }
  /// The least the main log keeps when the index grows: four of the largest records,
  /// and at least a quarter of what it had with no index.
  var mainFloor: Int { max(4 * maxRecord, (partitionBytes - mainBase) / 4, 4096) }
  /// Most groups a partition's index may grow to: what leaves the main log its floor.
  var maxGroups: Int { max(1, (partitionBytes - mainBase - mainFloor) / Format.groupBytes) }
  /// The first byte of a partition's index with `groups` groups.
  @inline(__always) func indexLow(groups: Int) -> Int { partitionBytes - groups * Format.groupBytes }

  /// Geometry for a new file.
  init(options o: CacheOptions, cores: Int = SystemCall.cpuCount()) throws(CacheError) {
    try Self.validate(o)
    let size = o.capacity & ~4095
    procCount = Self.processTableSize(o)
    headerBytes = Format.align(Format.headerPage + procCount * Format.procEntryBytes, 4096)
    let usable = size - headerBytes
    let count = try Self.partitionCount(size: size, usable: usable, options: o, cores: cores)
    partitionCount = count
    partitionBytes = (usable / count) & ~4095
    guard partitionBytes >= 256 << 10 else {
      throw .invalidArgument("partitionCount \(count) leaves partitions under 256 KiB in \(o.capacity) bytes")
    }
    guard partitionBytes <= Format.maxPartitionBytes else {
      throw .invalidArgument("partitionCount \(count) makes partitions over 512 MiB in \(o.capacity) bytes")
    }
    partitionsOffset = headerBytes
    fileSize = size
    createdCount = count
    createdSize = size
    let most = o.maxCapacity ?? max(size, min(size.multipliedReportingOverflow(by: 64).partialValue, 1 << 40))
    guard most >= o.capacity, most <= Format.maxCapacity else {
      throw .invalidArgument("maxCapacity \(most) must be between capacity (\(o.capacity)) and 64 TiB")
    }
    maxCapacity = most & ~4095
    maxKey = o.maxKeySize
    // Small: a tenth of the data space (S3-FIFO's small queue).
    smallBytes = (partitionBytes - Format.PartitionOffset.dataStart) / 10
    // A value's record must fit a tenth of the main log as it starts (the index may take
    // up to three quarters of the rest; see `mainFloor`).
    let main = partitionBytes - Format.PartitionOffset.dataStart - smallBytes
    let room = main / 10 - RecordFormat.maxHeaderBytes - o.maxKeySize
    maxValue = max(0, min(o.maxValueSize, room))
    // The index starts small (a group splits in a few microseconds while the logs have
    // free space): at most what entries of the average size would need at 85 % load, and
    // at most `initialGroupsLimit`, so that an index sized for a guess does not spread
    // the first entries over more memory (and cache) than they need.
    let perEntry =
      Double(RecordFormat.size(keyCount: 0, valueCount: o.averageEntrySize, expiry: false))
      + Double(Format.groupBytes) / (0.85 * Double(Format.slotsPerGroup))
    let entries = Double(main) / perEntry
    let guess = Int((entries / (0.85 * Double(Format.slotsPerGroup))).rounded(.up))
    initialGroups = min(maxGroups, max(1, min(guess, Self.initialGroupsLimit)))
  }

  /// The options' own ranges, before any geometry is worked out from them.
  static func validate(_ o: CacheOptions) throws(CacheError) {
    guard o.capacity >= Format.minCapacity, o.capacity <= Format.maxCapacity else {
      throw .invalidArgument("capacity \(o.capacity) must be between 1 MiB and 64 TiB")
    }
    guard (1...Format.maxKeyLimit).contains(o.maxKeySize) else {
      throw .invalidArgument("maxKeySize \(o.maxKeySize) must be between 1 and 4096")
    }
    guard o.maxValueSize >= 0, o.maxValueSize <= Int(UInt32.max) / 2 else {
      throw .invalidArgument("maxValueSize \(o.maxValueSize) must be between 0 and 2 GiB")
    }
    guard (8...(1 << 24)).contains(o.averageEntrySize) else {
      throw .invalidArgument("averageEntrySize \(o.averageEntrySize) must be between 8 and 16 MiB")
    }
    if let n = o.maxProcesses, !(1...Format.Lock.largestTable).contains(n) {
      throw .invalidArgument("maxProcesses \(n) must be between 1 and \(Format.Lock.largestTable)")
    }
    if let policy = o.growthPolicy { try policy.validate() }
    if let inline = o.inlineEntrySize, !(0...208).contains(inline) {
      throw .invalidArgument("inlineEntrySize \(inline) must be between 0 and 208")
    }
  }

  /// The process table's entries for `options` (see `CacheOptions.maxProcesses`).
  static func processTableSize(_ o: CacheOptions) -> Int {
    o.maxProcesses ?? (o.capacity >= 32 << 20 ? largeProcessTable : smallProcessTable)
  }

  /// The automatic process table's sizes.
  static let largeProcessTable = 8192
  static let smallProcessTable = 256

  /// Most groups a partition's index starts with (2,560 slots).
  static let initialGroupsLimit = 64

  /// The partition count for a file of `size` bytes, `usable` of them after the header:
  /// `options.partitionCount`, or the automatic choice (see `CacheOptions.partitionCount`).
  static func partitionCount(size: Int, usable: Int, options o: CacheOptions, cores: Int) throws(CacheError) -> Int {
    if let p = o.partitionCount {
      guard (1...Format.maxPartitions).contains(p) else {
        throw .invalidArgument("partitionCount \(p) must be between 1 and \(Format.maxPartitions)")
      }
      return p
    }
    let largest = RecordFormat.size(keyCount: o.maxKeySize, valueCount: o.maxValueSize, expiry: true)
    // A partition's main log is about 0.9 of it, and a value may take a tenth of that.
    let minPartition = max(Format.minPartitionBytes, Format.minRecordsPerPartition * largest)
    // By the file's size, not `usable`: the header's few pages (the partitions share
    // them) must not halve the count of a file of 2^k × `minPartition`.
    let byCapacity = prevPowerOfTwo(max(1, size / minPartition))
    let byCores = nextPowerOfTwo(max(1, Format.partitionsPerCore * cores))
    var count = min(byCapacity, byCores, Format.maxAutomaticPartitions)
    // Partitions past 512 MiB cannot be addressed by a slot's 29-bit offset.
    let needed = (usable + Format.maxPartitionBytes - 1) / Format.maxPartitionBytes
    if count < needed { count = nextPowerOfTwo(needed) }
    return max(1, min(count, Format.maxPartitions))
  }

  /// Geometry read from a header, checked against the file's real size.
  init(header h: HeaderFields, actualFileSize: Int) throws(LayoutProblem) {
    func need(_ ok: Bool, _ why: String) throws(LayoutProblem) { if !ok { throw LayoutProblem(why) } }
    try need(h.fileSize >= Format.minCapacity && h.fileSize <= Format.maxCapacity, "file size out of range")
    try need(
      h.maxCapacity >= h.fileSize && h.maxCapacity <= Format.maxCapacity && h.maxCapacity % 4096 == 0,
      "most capacity \(h.maxCapacity)")
    // Grown (0: as created). A file larger than its size is one whose growth stopped
    // before it published the new size: the extra bytes are unused.
    let size = h.grownSize == 0 ? h.fileSize : h.grownSize
    let count = h.grownCount == 0 ? h.partitionCount : h.grownCount
    try need(size >= h.fileSize && size <= h.maxCapacity, "grown size \(size)")
    try need(count >= h.partitionCount && count <= Format.maxPartitions, "grown partition count \(count)")
    try need(actualFileSize >= size, "header says \(size) bytes, file has \(actualFileSize)")
    try need((1...Format.Lock.largestTable).contains(h.procCount), "process table size \(h.procCount)")
    try need(
      h.headerBytes == Format.align(Format.headerPage + h.procCount * Format.procEntryBytes, 4096),
      "header size \(h.headerBytes)")
    try need(h.procOffset == Format.headerPage, "process table offset \(h.procOffset)")
    try need((1...Format.maxPartitions).contains(h.partitionCount), "partition count \(h.partitionCount)")
    try need(
      h.partitionBytes >= 256 << 10 && h.partitionBytes <= Format.maxPartitionBytes && h.partitionBytes % 4096 == 0,
      "partition size \(h.partitionBytes)")
    try need(h.partitionsOffset == h.headerBytes, "partitions offset \(h.partitionsOffset)")
    try need(
      h.partitionsOffset + h.partitionCount * h.partitionBytes <= h.fileSize, "partitions end past the file")
    try need(h.partitionsOffset + count * h.partitionBytes <= size, "grown partitions end past the file")
    let data = h.partitionBytes - Format.PartitionOffset.dataStart
    try need(h.smallBytes >= 1024 && h.smallBytes <= data / 4, "small log size \(h.smallBytes)")
    try need((1...Format.maxKeyLimit).contains(h.maxKey), "key limit \(h.maxKey)")
    let main = data - h.smallBytes
    try need(
      h.maxValue >= 0 && RecordFormat.size(keyCount: h.maxKey, valueCount: h.maxValue, expiry: true) * 10 <= main,
      "value limit \(h.maxValue)")
    fileSize = size
    createdSize = h.fileSize
    createdCount = h.partitionCount
    maxCapacity = h.maxCapacity
    headerBytes = h.headerBytes
    procCount = h.procCount
    partitionCount = count
    partitionBytes = h.partitionBytes
    partitionsOffset = h.partitionsOffset
    smallBytes = h.smallBytes
    maxKey = h.maxKey
    maxValue = h.maxValue
  }
}

@inline(__always) func nextPowerOfTwo(_ n: Int) -> Int {
  n <= 1 ? 1 : 1 << (Int.bitWidth - (n - 1).leadingZeroBitCount)
}
@inline(__always) func prevPowerOfTwo(_ n: Int) -> Int { n <= 1 ? 1 : 1 << (Int.bitWidth - 1 - n.leadingZeroBitCount) }

extension Format {
  @inline(__always) static func align(_ n: Int, _ a: Int) -> Int { (n + a - 1) / a * a }
}

struct LayoutProblem: Error {
  var reason: String
  init(_ r: String) { reason = r }
}

/// The identity fields of a header, as plain integers (read with `pread` or from the mapping).
struct HeaderFields {
  var magic: UInt64 = 0
  var version: UInt32 = 0
  var headerBytes = 0
  var fileSize = 0
  var partitionCount = 0
  var partitionBytes = 0
  var partitionsOffset = 0
  var smallBytes = 0
  var maxCapacity = 0
  var maxKey = 0
  var maxValue = 0
  var typeFingerprint: UInt64 = 0
  var createdMs: UInt64 = 0
  var procOffset = 0
  var procCount = 0
  var layoutFingerprint: UInt64 = 0
  var typeName = ""
  /// Line 6 (not fingerprinted: growth changes them): 0 until the file grows.
  var grownSize = 0
  var grownCount = 0

  init() {}

  init(layout l: Layout, typeFingerprint: UInt64, typeName: String, createdMs: UInt64) {
    magic = Format.magic
    version = Format.version
    headerBytes = l.headerBytes
    fileSize = l.fileSize
    partitionCount = l.partitionCount
    partitionBytes = l.partitionBytes
    partitionsOffset = l.partitionsOffset
    smallBytes = l.smallBytes
    maxCapacity = l.maxCapacity
    maxKey = l.maxKey
    maxValue = l.maxValue
    self.typeFingerprint = typeFingerprint
    self.createdMs = createdMs
    procOffset = Format.headerPage
    procCount = l.procCount
    self.typeName = typeName
  }

  /// Parses the first 256 bytes of a file (and line 6, when `b` holds 400 or more).
  /// Never traps, whatever the bytes.
  init(bytes b: [UInt8]) {
    func u64(_ o: Int) -> UInt64 {
      guard o + 8 <= b.count else { return 0 }
      var v: UInt64 = 0
      for i in 0..<8 { v |= UInt64(b[o + i]) << (8 * UInt64(i)) }
      return v
    }
    func u32(_ o: Int) -> UInt32 { UInt32(truncatingIfNeeded: u64(o) & 0xFFFF_FFFF) }
    // Sizes beyond Int's comfortable range are clamped so arithmetic cannot overflow.
    func int(_ v: UInt64) -> Int { Int(min(v, 1 << 56)) }
    magic = u64(Format.HeaderOffset.magic)
    version = u32(Format.HeaderOffset.version)
    headerBytes = int(UInt64(u32(Format.HeaderOffset.headerBytes)))
    fileSize = int(u64(Format.HeaderOffset.fileSize))
    partitionCount = int(u64(Format.HeaderOffset.partitionCount))
    partitionBytes = int(u64(Format.HeaderOffset.partitionBytes))
    partitionsOffset = int(u64(Format.HeaderOffset.partitionsOffset))
    smallBytes = int(u64(Format.HeaderOffset.smallBytes))
    maxCapacity = int(u64(Format.HeaderOffset.maxCapacity))
    maxKey = int(UInt64(u32(Format.HeaderOffset.maxKey)))
    maxValue = int(UInt64(u32(Format.HeaderOffset.maxValue)))
    typeFingerprint = u64(Format.HeaderOffset.typeFingerprint)
    createdMs = u64(Format.HeaderOffset.createdMs)
    procOffset = int(u64(Format.HeaderOffset.procOffset))
    procCount = int(UInt64(u32(Format.HeaderOffset.procCount)))
    layoutFingerprint = u64(Format.HeaderOffset.layoutFingerprint)
    if b.count >= Format.HeaderOffset.typeName + Format.HeaderOffset.typeNameBytes {
      let raw = b[Format.HeaderOffset.typeName..<(Format.HeaderOffset.typeName + Format.HeaderOffset.typeNameBytes)]
        .prefix { $0 != 0 }
      typeName = String(decoding: raw, as: UTF8.self)
    }
    grownSize = int(u64(Format.HeaderOffset.grownSize))
    grownCount = int(u64(Format.HeaderOffset.grownCount))
  }

  /// The 256-byte image of these fields, with the layout fingerprint filled in.
  func encoded() -> [UInt8] {
    var b = [UInt8](repeating: 0, count: 256)
    func put64(_ o: Int, _ v: UInt64) { for i in 0..<8 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt64(i))) } }
    func put32(_ o: Int, _ v: UInt32) { for i in 0..<4 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt32(i))) } }
    put64(Format.HeaderOffset.magic, magic)
    put32(Format.HeaderOffset.version, version)
    put32(Format.HeaderOffset.headerBytes, UInt32(headerBytes))
    put64(Format.HeaderOffset.fileSize, UInt64(fileSize))
    put64(Format.HeaderOffset.partitionCount, UInt64(partitionCount))
    put64(Format.HeaderOffset.partitionBytes, UInt64(partitionBytes))
    put64(Format.HeaderOffset.partitionsOffset, UInt64(partitionsOffset))
    put64(Format.HeaderOffset.smallBytes, UInt64(smallBytes))
    put64(Format.HeaderOffset.maxCapacity, UInt64(maxCapacity))
    put32(Format.HeaderOffset.maxKey, UInt32(maxKey))
    put32(Format.HeaderOffset.maxValue, UInt32(maxValue))
    put64(Format.HeaderOffset.typeFingerprint, typeFingerprint)
    put64(Format.HeaderOffset.createdMs, createdMs)
    put64(Format.HeaderOffset.procOffset, UInt64(procOffset))
    put32(Format.HeaderOffset.procCount, UInt32(procCount))
    put64(Format.HeaderOffset.layoutFingerprint, KeyHash.bytes(b[0..<Format.HeaderOffset.fingerprinted]))
    let name = Array(typeName.utf8.prefix(Format.HeaderOffset.typeNameBytes - 1))
    for (i, c) in name.enumerated() { b[Format.HeaderOffset.typeName + i] = c }
    return b
  }

  /// Whether the stored layout fingerprint matches the identity bytes.
  static func fingerprintMatches(_ b: [UInt8]) -> Bool {
    guard b.count >= 128 else { return false }
    return HeaderFields(bytes: b).layoutFingerprint == KeyHash.bytes(b[0..<Format.HeaderOffset.fingerprinted])
  }
}

/// The file format, version 4. All integers little-endian (the only byte order this
/// package runs on), every offset below is from the start of the file.
///
///     0 ┌──────────────────────────────────────────────────────────────┐
///       │ header line 0: identity and layout (written once, at create) │
///       │   magic, version, sizes, offsets, limits, type fingerprint,  │
///       │   layout fingerprint = hash of the bytes before it           │
///   256 │ line 4: write-lock word (u32, futex), and under the lock:    │
///       │   intent, entries, live bytes, cas counter, sets             │
///   320 │ line 5: small head/tail, main head/tail, sweep hand, last    │
///       │   reuse (under the write lock)                               │
///   448 │ line 7: shift sequence (odd while slots move; readers check) │
///   512 │ line 8: writer counters (evictions, expirations, ...)        │
///   640 │ line 10: limits (count, cost)                                │
///  4096 ├──────────────────────────────────────────────────────────────┤
///       │ process table: procCount × 64 B (generation, pid, hits, ...) │
///   H   ├──────────────────────────────────────────────────────────────┤
///       │ index: slotCount × 32 B slots (open addressing, linear probe)│
///       ├──────────────────────────────────────────────────────────────┤
///       │ ghost: ghostCount × u32 tags of keys evicted from `small`    │
///   L   ├──────────────────────────────────────────────────────────────┤
///       │ small log (≈10 %): circular, new entries                     │
///       ├──────────────────────────────────────────────────────────────┤
///       │ main log (≈90 %): circular, survivors; its tail is the hand  │
///  size └──────────────────────────────────────────────────────────────┘
///
/// Slot (`slotBytes`: 32, or 64/128/256 with an inline area, fixed at creation):
///
///     0 seq  u64  seqlock: odd while a writer changes the slot
///     8 hash u64  key hash | 1; 0 = empty
///    16 loc  u64  file offset of the entry's record in a log
///    24 meta u64  bits 0..47 expiry (ms since 1970, 0 = never); bits 48..53 its
///                 horizon (`Expiry`); bits 59, 60 hot, frequent (read 3, 2 times);
///                 bit 61 unearned (promoted unread); bit 62 inline; bit 63
///                 referenced (read)
///    32 inline area (slots larger than 32 bytes), used when bit 62 is set:
///       32 klen u16, 34 vlen u16, 36 sum u32, 40 cas u64, 48 key bytes then value bytes
///
/// An inline entry's key and value live in its slot, so a read touches one place in
/// memory (one cache miss where the value lives elsewhere costs two); its log record
/// (kind 3) is then the 32-byte header alone, the entry's place in the eviction order
/// (the sweeper finds its slot by hash and offset, and the key is in the slot).
///
/// Record (8-byte aligned, never wraps; a pad record fills the end of a log):
///
///     0 size u32  whole record incl. header, multiple of 8
///     4 klen u16
///     6 kind u16  1 = entry, 2 = pad (a pad has only `size` and `kind`),
///                 3 = header only (key and value inline in the slot; size 32)
///     8 vlen u32
///    12 sum  u32  checksum of the value, seeded with hash and vlen
///    16 hash u64  the key's hash (as in the slot)
///    24 cas  u64  version for compare-and-swap, unique per write
///    32 key bytes, then value bytes, then zero padding
enum Format {
  static let magic: UInt64 = 0x3130_4548_4341_434D  // "MCACHE01"
  static let initialisingMagic: UInt64 = 0x3054_494E_4943_434D  // "MCCINIT0": creation crashed
  /// The format's version: changed whenever the meaning of any byte changes, and only a
  /// file of exactly this version is opened (CHANGELOG.md says what each one changed).
  static let version: UInt32 = 4
  static let headerPage = 4096
  static let procEntryBytes = 64
  static let slotHeaderBytes = 32
  static let inlineHeaderBytes = 8
  static let slotSizes = [32, 64, 128, 256]
  static let recordHeaderBytes = 32
  static let minCapacity = 1 << 20
  static let maxCapacity = 1 << 46

  // Header field offsets.
  enum H {
    static let magic = 0, version = 8, headerBytes = 12, fileSize = 16, slotCount = 24
    static let slotsOffset = 32, logOffset = 40, smallSize = 48, mainSize = 56
    static let ghostOffset = 64, ghostCount = 72, maxKey = 80, maxValue = 84
    static let typeFingerprint = 88, createdMs = 96, procOffset = 104, procCount = 112
    static let slotBytes = 116, layoutFingerprint = 120
    static let typeName = 128  // up to 112 bytes of UTF-8, NUL padded (for `info`)
    static let typeNameBytes = 112
    static let fingerprinted = 120  // bytes [0, 120) feed the layout fingerprint

    // Line 4: the lock word and what every set changes, so that a set moves one header
    // line between the cores of two writing processes, not three.
    static let lockWord = 256
    /// `intent`: 0 while no change is under way, `Format.intentChange` while the lock's
    /// holder changes the file, `intentMoveBase + i` while that change points slot `i`
    /// at a moved copy of its record (`SlotIndex.move`). Found nonzero by the next holder: the
    /// last one died mid-change, and the next one repairs (keeping slot `i`'s entry).
    static let intent = 264, entries = 272, liveBytes = 280, casCounter = 288, sets = 296

    // Line 5: the logs (changed by appends and eviction) and the sweeper.
    static let smallHead = 320, smallTail = 328, mainHead = 336, mainTail = 344
    static let sweepHand = 352
    /// `lastReuse`: the evictions count when eviction last saw a read entry or the ghost
    /// recalled a key (`EvictionPolicy.noteReuse`); 0 in files of earlier builds.
    static let lastReuse = 360

    static let shiftSeq = 448

    static let evictions = 520, expirations = 528, recoveries = 536
    static let removes = 544, retiredHits = 552, retiredMisses = 560, promotions = 568
    static let reinsertions = 576, lockTakeovers = 584, retiredBusy = 592

    static let countLimit = 640, costLimit = 648

    /// Words reserved for tiers layered on the cache (the near cache's heartbeats,
    /// fences and per-slot epochs): `tierWordCount` words from here to 3968, inside the
    /// header page, zero in a new file and in files of builds that predate them (the page
    /// past the fields above was always zero), never read or written by the engine itself.
    static let tierWords = 768
    static let tierWordCount = 400
  }

  // Process-table entry field offsets.
  /// `busy`: reads that answered "miss" because a slot (or the shift sequence) stayed
  /// mid-write past the readers' bounded wait (0 in files of earlier builds).
  enum P { static let generation = 0, pid = 8, hits = 16, misses = 24, openedMs = 32, busy = 40 }

  // Slot field offsets.
  enum S { static let seq = 0, hash = 8, loc = 16, meta = 24, klen = 32, vlen = 34, sum = 36, cas = 40, bytes = 48 }
  static let expiryMask: UInt64 = (1 << 48) - 1
  /// Values of the header's `intent` word (see `H.intent`).
  static let intentChange: UInt64 = 1
  static let intentMoveBase: UInt64 = 2

  /// The write-lock word's bits (see `WriteLock`): owner slot + 1 in bits 0..9, the
  /// owner's generation (its low 20 bits) in bits 10..29, waiters in bit 31.
  enum Lock {
    static let ownerBits: UInt32 = 10
    static let ownerMask: UInt32 = (1 << ownerBits) - 1
    static let generationShift: UInt32 = ownerBits
    static let generationMask: UInt64 = (1 << 20) - 1
    static let waitersBit: UInt32 = 1 << 31
  }

  static let referencedBit: UInt64 = 1 << 63
  static let inlineBit: UInt64 = 1 << 62
  /// Set on an entry promoted to main without having been read (while the cache filled).
  static let unearnedBit: UInt64 = 1 << 61
  /// With `referencedBit` and `hotBit`, a hit count since insertion or since the clock
  /// hand last passed, saturating at 3 (S3-FIFO's frequency counter): 1 sets
  /// `referencedBit`, 2 this, 3 `hotBit`. Each pass of the hand takes one off. Files of
  /// builds before them have both clear, and those builds leave them alone (an
  /// overwrite by one keeps only `referencedBit`).
  static let frequentBit: UInt64 = 1 << 60
  static let hotBit: UInt64 = 1 << 59
  /// The three hit bits (a hit that finds `hotBit` set stores nothing).
  static let hitBits: UInt64 = referencedBit | frequentBit | hotBit

  // Record field offsets and kinds.
  enum R { static let size = 0, klen = 4, kind = 6, vlen = 8, sum = 12, hash = 16, cas = 24 }
  static let kindEntry: UInt16 = 1
  static let kindPad: UInt16 = 2
  static let kindHeaderOnly: UInt16 = 3
  /// An inline entry's record: the header alone.
  static let headerOnlyRecordBytes = recordHeaderBytes

  @inline(__always) static func align8(_ n: Int) -> Int { (n + 7) & ~7 }
  @inline(__always) static func align(_ n: Int, _ a: Int) -> Int { (n + a - 1) / a * a }
  /// Precondition: both counts are at most 2^56 (every caller's are: lengths checked
  /// against the limits, u16 and u32 fields, header limits clamped to 2^56 when read),
  /// so the sum cannot overflow and needs no check.
  @inline(__always) static func recordSize(keyCount: Int, valueCount: Int) -> Int {
    (recordHeaderBytes &+ keyCount &+ valueCount &+ 7) & ~7
  }
}

/// A live header word: one that processes change while the file is in use (the
/// identity fields before it are written once, at creation, and read with `pread`).
/// `MappedMemory.header(_:)` turns one into an atomic view; the names say which.
struct HeaderWord {
  let offset: Int

  static let intent = HeaderWord(offset: Format.H.intent)
  static let entries = HeaderWord(offset: Format.H.entries)
  static let liveBytes = HeaderWord(offset: Format.H.liveBytes)
  static let casCounter = HeaderWord(offset: Format.H.casCounter)
  static let sets = HeaderWord(offset: Format.H.sets)
  static let smallHead = HeaderWord(offset: Format.H.smallHead)
  static let smallTail = HeaderWord(offset: Format.H.smallTail)
  static let mainHead = HeaderWord(offset: Format.H.mainHead)
  static let mainTail = HeaderWord(offset: Format.H.mainTail)
  static let sweepHand = HeaderWord(offset: Format.H.sweepHand)
  static let lastReuse = HeaderWord(offset: Format.H.lastReuse)
  static let shiftSeq = HeaderWord(offset: Format.H.shiftSeq)
  static let evictions = HeaderWord(offset: Format.H.evictions)
  static let expirations = HeaderWord(offset: Format.H.expirations)
  static let recoveries = HeaderWord(offset: Format.H.recoveries)
  static let removes = HeaderWord(offset: Format.H.removes)
  static let retiredHits = HeaderWord(offset: Format.H.retiredHits)
  static let retiredMisses = HeaderWord(offset: Format.H.retiredMisses)
  static let retiredBusy = HeaderWord(offset: Format.H.retiredBusy)
  static let promotions = HeaderWord(offset: Format.H.promotions)
  static let reinsertions = HeaderWord(offset: Format.H.reinsertions)
  static let lockTakeovers = HeaderWord(offset: Format.H.lockTakeovers)
  static let countLimit = HeaderWord(offset: Format.H.countLimit)
  static let costLimit = HeaderWord(offset: Format.H.costLimit)

  /// Tier word `i`. Precondition: `0 <= i < Format.H.tierWordCount` (checked by the API).
  static func tier(_ i: Int) -> HeaderWord {
    precondition(i >= 0 && i < Format.H.tierWordCount, "tier word out of range")
    return HeaderWord(offset: Format.H.tierWords + 8 * i)
  }
}

/// Creation parameters. Sizes in bytes.
public struct CacheOptions: Sendable, Equatable {
  /// Total file size, 1 MiB to 64 TiB. Default 64 MiB.
  public var capacity: Int = 64 << 20
  /// Longest key, 1 to 4096. Default 250 (memcached's limit).
  public var maxKeySize: Int = 250
  /// Largest value. Default 1 MiB, lowered when the cache is too small to hold it.
  public var maxValueSize: Int = 1 << 20
  /// The expected average key+value size, used to size the index. Default 320;
  /// set it near your real average when entries are much smaller, or the index fills first.
  public var averageEntrySize: Int = 320
  /// Permission bits of a new file. Default 0600.
  public var mode: UInt32 = 0o600
  /// Most processes (handles) that can use the file at once. Default 256.
  public var maxProcesses: Int = 256
  /// Largest key+value stored inline in its index slot (read with one memory access
  /// instead of two). nil chooses from `averageEntrySize`: inline slots when the
  /// average is at most 208 bytes, none otherwise. 0 turns inlining off.
  public var inlineEntrySize: Int? = nil

  /// The defaults: 64 MiB, keys up to 250 bytes, values up to 1 MiB, an average entry of
  /// 320 bytes, mode 0600, 256 processes, inline slots chosen from the average.
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
  var slotCount: Int
  var slotBytes: Int
  var slotsOffset: Int
  var ghostOffset: Int
  var ghostCount: Int
  var logOffset: Int
  var smallSize: Int
  var mainSize: Int
  var maxKey: Int
  var maxValue: Int

  var smallBase: Int { logOffset }
  var mainBase: Int { logOffset + smallSize }
  var logEnd: Int { logOffset + smallSize + mainSize }
  /// Most records one entry can need (header + key + value, aligned).
  var maxRecord: Int { Format.recordSize(keyCount: maxKey, valueCount: maxValue) }
  /// Most key+value bytes an inline slot holds (0: no inline area).
  var inlineCapacity: Int { slotBytes > Format.slotHeaderBytes ? slotBytes - Format.S.bytes : 0 }
  /// Entries allowed before inserts evict: 75 % load keeps linear-probe runs short.
  var maxEntries: Int { slotCount * 3 / 4 }
  /// Bytes kept free in the main log so that a referenced tail record can usually be
  /// copied to the head (a second chance); one that does not fit is evicted instead.
  /// 1/64 of the log, so the reserve costs under 2 % of the space.
  var mainReserve: Int { min(2 * maxRecord, max(mainSize / 64, 4096)) }

  /// Geometry for a new file.
  init(options o: CacheOptions) throws(CacheError) {
    guard o.capacity >= Format.minCapacity, o.capacity <= Format.maxCapacity else {
      throw .invalidArgument("capacity \(o.capacity) must be between 1 MiB and 64 TiB")
    }
    guard (1...4096).contains(o.maxKeySize) else {
      throw .invalidArgument("maxKeySize \(o.maxKeySize) must be between 1 and 4096")
    }
    guard o.maxValueSize >= 0, o.maxValueSize <= Int(UInt32.max) / 2 else {
      throw .invalidArgument("maxValueSize \(o.maxValueSize) must be between 0 and 2 GiB")
    }
    guard (16...(1 << 24)).contains(o.averageEntrySize) else {
      throw .invalidArgument("averageEntrySize \(o.averageEntrySize) must be between 16 and 16 MiB")
    }
    guard (1...1000).contains(o.maxProcesses) else {
      throw .invalidArgument("maxProcesses \(o.maxProcesses) must be between 1 and 1000")
    }
    let size = o.capacity & ~4095
    procCount = o.maxProcesses
    headerBytes = Format.align(Format.headerPage + procCount * Format.procEntryBytes, 4096)
    // Slot size: the smallest whose inline area holds the requested inline size.
    let inlineWanted = o.inlineEntrySize ?? (o.averageEntrySize <= 208 ? o.averageEntrySize : 0)
    guard (0...208).contains(inlineWanted) else {
      throw .invalidArgument("inlineEntrySize \(inlineWanted) must be between 0 and 208")
    }
    slotBytes = inlineWanted == 0 ? 32 : Format.slotSizes.first { $0 - Format.S.bytes >= inlineWanted }!
    // Size the index so that, at 75 % load, records of the average size fill about
    // 80 % of the log (the rest absorbs the small log's turnover, main's reserve and
    // pads): 0.75·N·avgRecord = 0.8·(size − (slot + 3)·N), 3 = ghost bytes per slot.
    let inlined = inlineWanted > 0 && o.averageEntrySize <= inlineWanted
    let avgRecord = Double(
      inlined
        ? Format.headerOnlyRecordBytes
        : Format.recordSize(keyCount: 0, valueCount: o.averageEntrySize))
    let fill = 0.8
    slotCount = max(1024, Int(fill * Double(size - headerBytes) / (0.75 * avgRecord + fill * Double(slotBytes + 3))))
    slotsOffset = headerBytes
    ghostOffset = slotsOffset + slotCount * slotBytes
    // Room for S3-FIFO's ghost of 0.9 × the load limit (3/4 of the slots), in whole
    // buckets (`GhostTable`); files made with a quarter of the slots still open.
    ghostCount = (slotCount * 3 / 4 + GhostTable.ways - 1) / GhostTable.ways * GhostTable.ways
    logOffset = Format.align(ghostOffset + ghostCount * 4, 64)
    let logSize = size - logOffset
    // The sizing above leaves the logs at least a tenth of the file (header-only records
    // beside 256-byte slots); less means the 1,024-slot minimum took the file.
    guard logSize >= size / 16 else {
      throw .invalidArgument("averageEntrySize \(o.averageEntrySize) is too small for capacity \(o.capacity)")
    }
    smallSize = Format.align(logSize / 10, 8)
    mainSize = (logSize - smallSize) & ~7
    fileSize = size
    maxKey = o.maxKeySize
    // A value must fit in a quarter of the main log (room for the reserve and pads).
    let room = mainSize / 8 - Format.recordHeaderBytes - maxKey - 8
    maxValue = max(0, min(o.maxValueSize, room))
  }

  /// Geometry read from a header, checked against the file's real size.
  init(header h: HeaderFields, actualFileSize: Int) throws(LayoutProblem) {
    func need(_ ok: Bool, _ why: String) throws(LayoutProblem) { if !ok { throw LayoutProblem(why) } }
    try need(h.fileSize == actualFileSize, "header says \(h.fileSize) bytes, file has \(actualFileSize)")
    try need(h.fileSize >= Format.minCapacity && h.fileSize <= Format.maxCapacity, "file size out of range")
    try need((1...1000).contains(h.procCount), "process table size \(h.procCount)")
    try need(
      h.headerBytes == Format.align(Format.headerPage + h.procCount * Format.procEntryBytes, 4096),
      "header size \(h.headerBytes)")
    try need(Format.slotSizes.contains(h.slotBytes), "slot size \(h.slotBytes)")
    try need(h.slotCount >= 1024 && h.slotCount <= h.fileSize / h.slotBytes, "slot count \(h.slotCount)")
    try need(h.slotsOffset == h.headerBytes, "slot offset")
    try need(h.ghostOffset == h.slotsOffset + h.slotCount * h.slotBytes, "ghost offset")
    try need(h.ghostCount >= 256 && h.ghostCount <= h.slotCount, "ghost count")
    try need(h.logOffset == Format.align(h.ghostOffset + h.ghostCount * 4, 64), "log offset")
    try need(h.smallSize > 0 && h.mainSize > 0 && h.smallSize % 8 == 0 && h.mainSize % 8 == 0, "log sizes")
    try need(h.logOffset + h.smallSize + h.mainSize <= h.fileSize, "logs end past the file")
    try need((1...4096).contains(h.maxKey), "key limit \(h.maxKey)")
    try need(
      h.maxValue >= 0 && Format.recordSize(keyCount: h.maxKey, valueCount: h.maxValue) * 8 <= h.mainSize + 64,
      "value limit \(h.maxValue)")
    fileSize = h.fileSize
    headerBytes = h.headerBytes
    procCount = h.procCount
    slotCount = h.slotCount
    slotBytes = h.slotBytes
    slotsOffset = h.slotsOffset
    ghostOffset = h.ghostOffset
    ghostCount = h.ghostCount
    logOffset = h.logOffset
    smallSize = h.smallSize
    mainSize = h.mainSize
    maxKey = h.maxKey
    maxValue = h.maxValue
  }
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
  var slotCount = 0
  var slotBytes = 0
  var slotsOffset = 0
  var logOffset = 0
  var smallSize = 0
  var mainSize = 0
  var ghostOffset = 0
  var ghostCount = 0
  var maxKey = 0
  var maxValue = 0
  var typeFingerprint: UInt64 = 0
  var createdMs: UInt64 = 0
  var procOffset = 0
  var procCount = 0
  var layoutFingerprint: UInt64 = 0
  var typeName = ""

  init() {}

  init(layout l: Layout, typeFingerprint: UInt64, typeName: String, createdMs: UInt64) {
    magic = Format.magic
    version = Format.version
    headerBytes = l.headerBytes
    fileSize = l.fileSize
    slotCount = l.slotCount
    slotBytes = l.slotBytes
    slotsOffset = l.slotsOffset
    logOffset = l.logOffset
    smallSize = l.smallSize
    mainSize = l.mainSize
    ghostOffset = l.ghostOffset
    ghostCount = l.ghostCount
    maxKey = l.maxKey
    maxValue = l.maxValue
    self.typeFingerprint = typeFingerprint
    self.createdMs = createdMs
    procOffset = Format.headerPage
    procCount = l.procCount
    self.typeName = typeName
  }

  /// Parses the first 256 bytes of a file. Never traps, whatever the bytes.
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
    magic = u64(Format.H.magic)
    version = u32(Format.H.version)
    headerBytes = int(UInt64(u32(Format.H.headerBytes)))
    fileSize = int(u64(Format.H.fileSize))
    slotCount = int(u64(Format.H.slotCount))
    slotsOffset = int(u64(Format.H.slotsOffset))
    logOffset = int(u64(Format.H.logOffset))
    smallSize = int(u64(Format.H.smallSize))
    mainSize = int(u64(Format.H.mainSize))
    ghostOffset = int(u64(Format.H.ghostOffset))
    ghostCount = int(u64(Format.H.ghostCount))
    maxKey = int(UInt64(u32(Format.H.maxKey)))
    maxValue = int(UInt64(u32(Format.H.maxValue)))
    typeFingerprint = u64(Format.H.typeFingerprint)
    createdMs = u64(Format.H.createdMs)
    procOffset = int(u64(Format.H.procOffset))
    procCount = int(UInt64(u32(Format.H.procCount)))
    slotBytes = int(UInt64(u32(Format.H.slotBytes)))
    layoutFingerprint = u64(Format.H.layoutFingerprint)
    if b.count >= Format.H.typeName + Format.H.typeNameBytes {
      let raw = b[Format.H.typeName..<(Format.H.typeName + Format.H.typeNameBytes)].prefix { $0 != 0 }
      typeName = String(decoding: raw, as: UTF8.self)
    }
  }

  /// The 256-byte image of these fields, with the layout fingerprint filled in.
  func encoded() -> [UInt8] {
    var b = [UInt8](repeating: 0, count: 256)
    func put64(_ o: Int, _ v: UInt64) { for i in 0..<8 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt64(i))) } }
    func put32(_ o: Int, _ v: UInt32) { for i in 0..<4 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt32(i))) } }
    put64(Format.H.magic, magic)
    put32(Format.H.version, version)
    put32(Format.H.headerBytes, UInt32(headerBytes))
    put64(Format.H.fileSize, UInt64(fileSize))
    put64(Format.H.slotCount, UInt64(slotCount))
    put64(Format.H.slotsOffset, UInt64(slotsOffset))
    put64(Format.H.logOffset, UInt64(logOffset))
    put64(Format.H.smallSize, UInt64(smallSize))
    put64(Format.H.mainSize, UInt64(mainSize))
    put64(Format.H.ghostOffset, UInt64(ghostOffset))
    put64(Format.H.ghostCount, UInt64(ghostCount))
    put32(Format.H.maxKey, UInt32(maxKey))
    put32(Format.H.maxValue, UInt32(maxValue))
    put64(Format.H.typeFingerprint, typeFingerprint)
    put64(Format.H.createdMs, createdMs)
    put64(Format.H.procOffset, UInt64(procOffset))
    put32(Format.H.procCount, UInt32(procCount))
    put32(Format.H.slotBytes, UInt32(slotBytes))
    put64(Format.H.layoutFingerprint, KeyHash.bytes(b[0..<Format.H.fingerprinted]))
    let name = Array(typeName.utf8.prefix(Format.H.typeNameBytes - 1))
    for (i, c) in name.enumerated() { b[Format.H.typeName + i] = c }
    return b
  }

  /// Whether the stored layout fingerprint matches the identity bytes.
  static func fingerprintMatches(_ b: [UInt8]) -> Bool {
    guard b.count >= 128 else { return false }
    return HeaderFields(bytes: b).layoutFingerprint == KeyHash.bytes(b[0..<Format.H.fingerprinted])
  }
}

import Foundation
import MappedCache
import MappedCacheRedis
import SystemCalls

/// What the coordinator and every process of a Redis-mode run agree on: where the files
/// are, which Redis keys, who writes which key, and the write log.
///
/// Every key has exactly one writer thread in the whole run (keys are dealt to the
/// writers of all hosts in turn: key k belongs to writer k mod W), so that the key's
/// versions 1, 2, 3, … are written in that order, each acknowledged before the next is
/// sent, and Redis's order of the key's values is the order of their versions.
struct RedisRunLayout {
  let controlDir: String
  let hosts: Int
  let procs: Int
  let threads: Int
  let keys: KeySet

  init(_ o: StressOptions, controlDir: String) {
    self.controlDir = controlDir
    hosts = o.hosts
    procs = o.procs
    threads = o.threads
    keys = KeySet(count: o.keys, size: o.keySize)
  }

  var writers: Int { hosts * procs * threads }
  /// The cache file of host `h`.
  func hostPath(_ h: Int) -> String { "\(controlDir)/host-\(h).mcache" }
  /// The write log, one plain cache file shared by every process of every host.
  var logPath: String { "\(controlDir)/write-log.mcache" }
  /// The Redis keys of the run: under a prefix of its own (the coordinator's directory
  /// name is unique on the machine), removed at the end.
  var keyPrefix: String { "cache-stress:\((controlDir as NSString).lastPathComponent):" }
  func host(ofWorker w: Int) -> Int { w / procs }
  func owner(ofKey k: Int) -> Int { k % writers }
  /// The keys writer `w` writes.
  func ownedKeys(_ w: Int) -> [Int] { Array(stride(from: w, to: keys.count, by: writers)) }

  /// The size of version `version` of key `k`: the same in every process and every
  /// incarnation, so that a write resent after a failure (which Redis may have applied
  /// already) is the same bytes.
  static func valueSize(_ o: StressOptions, key k: Int, version: UInt64) -> Int {
    guard o.valueMax > o.valueMin else { return o.valueMin }
    var g = SplitMix64(seed: SplitMix64.derive(UInt64(k), version))
    return o.valueMin + g.next(below: o.valueMax - o.valueMin + 1)
  }

  /// Version `version` of key `k`, as its owner writes it.
  func value(_ o: StressOptions, key k: Int, version: UInt64) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: Self.valueSize(o, key: k, version: version))
    bytes.withUnsafeMutableBytes {
      ValueFormat.write(into: $0, key: UInt32(k), writer: UInt32(owner(ofKey: k)), seq: version)
    }
    return bytes
  }
}

/// The run's write log: for every key, its latest acknowledged version and when it was
/// acknowledged, and a ring of the last `ringSize` (version, time) pairs, so that a
/// reader that got version v can find when v + 1, the write that replaced it, was
/// acknowledged. Times are CLOCK_MONOTONIC nanoseconds (one clock for every process of
/// the machine), read by the writer after Redis's reply: a reader compares them with
/// the moment its own read began.
///
///     "v" + key           16 bytes: latest version u64, its acknowledgement u64
///     "r" + key           ringSize × 16 bytes: (version, acknowledgement) at version mod ringSize
///     "f" + key + ":" + v  present when a SET of v went unanswered (timed out, or its
///                         connection broke) before it was acknowledged on a retry
///     "m" + key + ":" + v  8 bytes: the latest any read began after v's acknowledgement
///                         and still returned an older version (ns after it; written
///                         by compare-and-swap, only for writes some read saw stale)
///
/// The owner writes the ring before the latest pair, so a reader that sees version L
/// as the latest finds L, and the versions before it, in the ring. The "m" entries give
/// each write's staleness: how long after its acknowledgement some host still returned
/// the value it replaced (the coordinator collects them after the run).
struct WriteLog {
  static let ringSize = 32
  static let ringBytes = ringSize * 16
  let cache: SharedCache<[UInt8]>
  private let latestKeys: [String]
  private let ringKeys: [String]
  private let keys: [String]

  /// Opens (or creates) the log at `path` for `keys`.
  init(path: String, keys: KeySet) throws {
    // The "m" entries have room for some 300,000 writes read stale besides.
    let capacity = max(8 << 20, keys.count * (Self.ringBytes + 2 * keys.size + 192) * 2) + (32 << 20)
    var options = CacheOptions(capacity: capacity)
    options.averageEntrySize = (Self.ringBytes + 16) / 2 + keys.size
    cache = try SharedCache<[UInt8]>(path: path, capacity: capacity, options: options)
    latestKeys = (0..<keys.count).map { "v" + keys[$0] }
    ringKeys = (0..<keys.count).map { "r" + keys[$0] }
    self.keys = (0..<keys.count).map { keys[$0] }
  }

  /// Key `k`'s latest logged version and its acknowledgement (nil: none logged).
  func latest(_ k: Int) throws -> (version: UInt64, ack: UInt64)? {
    try withUnsafeTemporaryAllocation(byteCount: 16, alignment: 8) { b in
      guard try cache.copyBytes(forKey: latestKeys[k], into: b) == 16 else { return nil }
      return (b.load(fromByteOffset: 0, as: UInt64.self), b.load(fromByteOffset: 8, as: UInt64.self))
    }
  }

  /// When version `version` of key `k` was acknowledged: nil when the ring holds
  /// another version in its place (overwritten by a later one, or never logged).
  func acknowledgement(_ k: Int, version: UInt64) throws -> UInt64? {
    try withUnsafeTemporaryAllocation(byteCount: Self.ringBytes, alignment: 8) { b in
      guard try cache.copyBytes(forKey: ringKeys[k], into: b) == Self.ringBytes else { return nil }
      let slot = Int(version % UInt64(Self.ringSize)) * 16
      guard b.load(fromByteOffset: slot, as: UInt64.self) == version else { return nil }
      return b.load(fromByteOffset: slot + 8, as: UInt64.self)
    }
  }

  /// Notes that a read began `late` ns after version `version` of key `k` was
  /// acknowledged and still returned an older version.
  func noteStale(_ k: Int, version: UInt64, late: UInt64) throws {
    let key = "m\(keys[k]):\(version)"
    let mine = withUnsafeBytes(of: late) { [UInt8]($0) }
    for _ in 0..<100 {
      guard let (bytes, v) = try cache.objectWithVersion(forKey: key) else {
        if try cache.add(mine, forKey: key) { return }
        continue
      }
      guard bytes.count == 8, bytes.withUnsafeBytes({ $0.loadUnaligned(as: UInt64.self) }) < late else { return }
      if try cache.setObject(mine, forKey: key, ifVersion: v) { return }
    }
  }

  /// Notes that a SET of version `version` of key `k` went unanswered. Redis may still
  /// apply it late, after the versions that follow: TCP delivers what was sent before a
  /// close once a partition heals (so does the fault proxy, when its thread runs late).
  /// Then Redis itself holds the older version for a while, and reads of it say nothing
  /// about the near cache.
  func markUnanswered(_ k: Int, version: UInt64) throws {
    try cache.setObject([1], forKey: "f\(keys[k]):\(version)")
  }

  /// Whether a SET of version `version` of key `k` went unanswered.
  func wasUnanswered(_ k: Int, version: UInt64) throws -> Bool {
    try cache.object(forKey: "f\(keys[k]):\(version)") != nil
  }

  /// Version `version` of key `k`'s staleness as noted (nil: no read saw it stale).
  func staleness(_ k: Int, version: UInt64) throws -> UInt64? {
    guard let bytes = try cache.object(forKey: "m\(keys[k]):\(version)"), bytes.count == 8 else { return nil }
    return bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
  }

  /// Key `k`'s ring as logged (zeros when none), for its owner to go on from.
  func ring(_ k: Int) throws -> [UInt64] {
    var words = [UInt64](repeating: 0, count: Self.ringSize * 2)
    _ = try words.withUnsafeMutableBytes { try cache.copyBytes(forKey: ringKeys[k], into: $0) }
    return words
  }

  /// Logs version `version` of key `k`, acknowledged at `ack`; `ring` is the owner's copy.
  func record(_ k: Int, version: UInt64, ack: UInt64, ring: inout [UInt64]) throws {
    let slot = Int(version % UInt64(Self.ringSize)) * 2
    ring[slot] = version
    ring[slot + 1] = ack
    try ring.withUnsafeBytes { try cache.setBytes($0, forKey: ringKeys[k]) }
    let pair = [version, ack]
    try pair.withUnsafeBytes { try cache.setBytes($0, forKey: latestKeys[k]) }
  }
}

/// The counters of one Redis-mode thread (summed: one worker, or the whole run).
struct RedisCounters: Codable {
  var reads: UInt64 = 0
  var writes: UInt64 = 0
  /// Reads that found no value in Redis (after a restart of an empty server).
  var absent: UInt64 = 0
  var errors: UInt64 = 0
  var writeErrors: UInt64 = 0
  var corruptReads: UInt64 = 0
  /// Versions older than one the same reader thread saw before.
  var wrongValues: UInt64 = 0
  /// Reads that began after the write replacing their value had been acknowledged.
  var staleReads: UInt64 = 0
  /// Stale reads later than maxStaleness + 50 ms.
  var violations: UInt64 = 0
  /// Stale reads whose replacing write had left the log's ring (lateness unknown).
  var unknownLateness: UInt64 = 0
  var maxLatenessNs: UInt64 = 0
  /// Reads of a version whose SET went unanswered before a retry was acknowledged (Redis
  /// may have applied it late, after later versions): not judged.
  var lateWriteReads: UInt64 = 0

  /// The fields a sum adds (`maxLatenessNs` is a maximum).
  private static let summed: [WritableKeyPath<RedisCounters, UInt64> & Sendable] = [
    \.reads, \.writes, \.absent, \.errors, \.writeErrors, \.corruptReads, \.wrongValues, \.staleReads,
    \.violations, \.unknownLateness, \.lateWriteReads,
  ]

  mutating func add(_ o: RedisCounters) {
    for f in Self.summed { self[keyPath: f] += o[keyPath: f] }
    maxLatenessNs = max(maxLatenessNs, o.maxLatenessNs)
  }
}

/// One Redis-mode worker incarnation's results (its result file).
struct RedisWorkerResult: Codable {
  var worker = 0
  var incarnation = 0
  var final = false
  var counters = RedisCounters()
  var messages: [String] = []
  var getHist: [[UInt64]] = []
  var setHist: [[UInt64]] = []
  /// Lateness of each stale read, nanoseconds.
  var staleHist: [[UInt64]] = []

  static func path(_ dir: String, _ w: Int, _ inc: Int) -> String { "\(dir)/redis-result-\(w).\(inc).json" }

  func write(to dir: String) throws {
    try ControlDirectory(path: dir).writeJSON(self, to: Self.path(dir, worker, incarnation))
  }

  static func read(_ dir: String, _ w: Int, _ inc: Int) -> RedisWorkerResult? {
    ControlDirectory(path: dir).readJSON(RedisWorkerResult.self, from: path(dir, w, inc))
  }
}

/// A Redis-mode thread's figures, handed to the flusher under a lock.
final class RedisBoard: @unchecked Sendable {
  private let lock = NSLock()
  /// Signalled after a failed check is published (`RedisThreadLoop.note`), as
  /// `StatsBoard.urgent` is.
  let urgent = DispatchSemaphore(value: 0)
  private var counters: [RedisCounters]
  private var hists: [[LatencyHistogram]]
  private var messages: [String] = []

  init(threads: Int) {
    counters = Array(repeating: RedisCounters(), count: threads)
    hists = Array(repeating: Array(repeating: LatencyHistogram(), count: 3), count: threads)
  }

  func publish(
    _ t: Int, _ c: RedisCounters, _ get: LatencyHistogram, _ set: LatencyHistogram, _ stale: LatencyHistogram
  ) {
    lock.lock()
    defer { lock.unlock() }
    counters[t] = c
    hists[t] = [get, set, stale]
  }

  func note(_ s: String) {
    lock.lock()
    defer { lock.unlock() }
    if messages.count < 10 && !messages.contains(s) { messages.append(s) }
  }

  func snapshot(worker: Int, incarnation: Int, final: Bool) -> RedisWorkerResult {
    lock.lock()
    defer { lock.unlock() }
    var r = RedisWorkerResult(worker: worker, incarnation: incarnation, final: final)
    var merged = Array(repeating: LatencyHistogram(), count: 3)
    for (c, h) in zip(counters, hists) {
      r.counters.add(c)
      for i in 0..<3 { merged[i].merge(h[i]) }
    }
    r.getHist = merged[0].sparse
    r.setHist = merged[1].sparse
    r.staleHist = merged[2].sparse
    r.messages = messages
    return r
  }
}

/// One thread of a Redis-mode worker: reads (any key, by the op stream) and writes (its
/// own keys, evenly), every read checked for wholeness, order and staleness.
struct RedisThreadLoop {
  let o: StressOptions
  let layout: RedisRunLayout
  let near: NearCache<[UInt8]>
  let log: WriteLog
  let board: RedisBoard
  let thread: Int
  let writerID: Int
  let ops: [UInt32]
  let nearKeys: [String]
  let boundNs: UInt64
  var owned: [Int]
  /// Per owned key (by its index in `owned`): the last version written, and its ring.
  var versions: [UInt64]
  var rings: [[UInt64]]
  /// The highest version this thread has read of each key.
  var seen: [UInt64]
  var counters = RedisCounters()
  var getHist = LatencyHistogram()
  var setHist = LatencyHistogram()
  var staleHist = LatencyHistogram()
  var rng: SplitMix64
  var notes = 0
  var checkNotes = 0

  init(
    o: StressOptions, layout: RedisRunLayout, near: NearCache<[UInt8]>, log: WriteLog, board: RedisBoard,
    worker: Int, thread: Int, ops: [UInt32], nearKeys: [String], seed: UInt64
  ) throws {
    self.o = o
    self.layout = layout
    self.near = near
    self.log = log
    self.board = board
    self.thread = thread
    writerID = worker * o.threads + thread
    self.ops = ops
    self.nearKeys = nearKeys
    boundNs = RedisWorker.boundNs(o)
    owned = layout.ownedKeys(writerID)
    // A restarted incarnation goes on from the versions its predecessor logged.
    versions = try owned.map { try log.latest($0)?.version ?? 0 }
    rings = try owned.map { try log.ring($0) }
    seen = Array(repeating: 0, count: o.keys)
    rng = SplitMix64(seed: seed)
  }

  /// Passes a message on: the first few errors, and apart from them the first few failed
  /// checks (so that errors during a fault do not hide them). A failed check, already
  /// counted, is also published and flushed at once when it is the thread's 1st, 2nd,
  /// 4th, 8th... (`FleetMember.flushesFinding`), so that a SIGKILL soon after cannot
  /// lose it.
  mutating func note(_ s: String, check: Bool = false) {
    if check {
      checkNotes += 1
      if checkNotes <= 10 { board.note(s) }
      if FleetMember.flushesFinding(checkNotes) {
        publish()
        board.urgent.signal()
      }
    } else {
      notes += 1
      if notes <= 5 { board.note(s) }
    }
  }

  func publish() { board.publish(thread, counters, getHist, setHist, staleHist) }

  mutating func run(end: UInt64) {
    let mask = ops.count - 1
    var pos = (thread &* 7919 &+ writerID &* 104_729) & mask
    var lastPublish = Clock.nanoseconds()
    let think = UInt32(o.thinkTime * 1e6)
    while true {
      if think > 0 { SystemCall.sleep(microseconds: think) }
      let op = ops[pos & mask]
      pos &+= 1
      let t0 = Clock.nanoseconds()
      if t0 >= end { break }
      if t0 &- lastPublish >= WorkerTiming.publishNs {
        publish()
        lastPublish = t0
      }
      if op & OpStream.writeBit != 0 && !owned.isEmpty {
        write(owned: rng.next(below: owned.count), end: end)
      } else {
        read(Int(op & ~OpStream.writeBit), start: t0)
      }
    }
    publish()
  }

  /// Writes the next version of an owned key, resending the same bytes after a failure
  /// (Redis may have applied a SET whose reply was lost) until it is acknowledged.
  mutating func write(owned i: Int, end: UInt64) {
    let k = owned[i]
    let version = versions[i] + 1
    let value = layout.value(o, key: k, version: version)
    let expiry: CacheExpiry? = o.ttl.map { .seconds($0) }
    while true {
      let t0 = Clock.nanoseconds()
      do {
        try near.setObject(value, forKey: nearKeys[k], expires: expiry)
      } catch {
        counters.writeErrors += 1
        note("set \(nearKeys[k]) version \(version): \(error)")
        do { try log.markUnanswered(k, version: version) } catch { note("write log of \(nearKeys[k]): \(error)") }
        if Clock.nanoseconds() >= end { return }
        SystemCall.sleep(microseconds: 1000)
        continue
      }
      let ack = Clock.nanoseconds()
      setHist.record(ack - t0)
      do {
        try log.record(k, version: version, ack: ack, ring: &rings[i])
      } catch {
        counters.errors += 1
        note("write log of \(nearKeys[k]): \(error)")
      }
      versions[i] = version
      counters.writes += 1
      return
    }
  }

  /// One read, judged: whole and of this key, not older than this thread saw, and not
  /// stale past the bound.
  mutating func read(_ k: Int, start t0: UInt64) {
    counters.reads += 1
    let got: [UInt8]?
    do {
      got = try near.object(forKey: nearKeys[k])
    } catch {
      counters.errors += 1
      note("get \(nearKeys[k]): \(error)")
      return
    }
    getHist.record(Clock.nanoseconds() &- t0)
    guard let bytes = got else {
      counters.absent += 1
      return
    }
    let verdict = bytes.withUnsafeBytes {
      ValueFormat.check($0, key: UInt32(k), writers: UInt32(layout.writers), whole: true)
    }
    guard case .whole(let writer, let version) = verdict, Int(writer) == layout.owner(ofKey: k) else {
      counters.corruptReads += 1
      note(
        "corrupt read of \(nearKeys[k]): \(bytes.count) bytes that are not a whole value of its writer (\(Self.header(bytes)))",
        check: true)
      return
    }
    let latest: (version: UInt64, ack: UInt64)?
    do { latest = try log.latest(k) } catch {
      counters.errors += 1
      note("write log of \(nearKeys[k]): \(error)")
      return
    }
    if version < seen[k] || version < latest?.version ?? 0 {
      // Older than seen, or than logged: was it a SET that went unanswered, and may have
      // landed late, so that Redis itself held it? Such reads are counted, not judged.
      if (try? log.wasUnanswered(k, version: version)) == true {
        counters.lateWriteReads += 1
        return
      }
    }
    if version < seen[k] {
      counters.wrongValues += 1
      note("\(nearKeys[k]): version \(version) read after version \(seen[k])", check: true)
    } else {
      seen[k] = version
    }
    if let latest { judgeStaleness(k, version: version, start: t0, latest: latest) }
  }

  /// What a value's header says (for a message about a corrupt read).
  static func header(_ b: [UInt8]) -> String {
    guard b.count >= ValueFormat.headerSize else { return "a short value" }
    return b.withUnsafeBytes { p in
      "its header: key \(p.loadUnaligned(fromByteOffset: 4, as: UInt32.self)), writer \(p.loadUnaligned(fromByteOffset: 8, as: UInt32.self)), length \(p.loadUnaligned(fromByteOffset: 12, as: UInt32.self)), version \(p.loadUnaligned(fromByteOffset: 16, as: UInt64.self))"
    }
  }

  /// Whether the write that replaced `version` (version + 1) had been acknowledged
  /// before this read began, and by how much.
  mutating func judgeStaleness(
    _ k: Int, version: UInt64, start t0: UInt64, latest: (version: UInt64, ack: UInt64)
  ) {
    do {
      guard version < latest.version else { return }
      guard let ack = try log.acknowledgement(k, version: version + 1) else {
        counters.unknownLateness += 1
        note(
          "\(nearKeys[k]): version \(version) read when \(latest.version) was the latest, past the log's ring",
          check: true)
        return
      }
      guard t0 > ack else { return }  // the read overlapped the write
      let late = t0 - ack
      counters.staleReads += 1
      staleHist.record(late)
      counters.maxLatenessNs = max(counters.maxLatenessNs, late)
      try log.noteStale(k, version: version + 1, late: late)
      if late > boundNs {
        counters.violations += 1
        note(
          "\(nearKeys[k]): version \(version) served \(String(format: "%.1f", Double(late) / 1e6)) ms after version \(version + 1) was acknowledged",
          check: true)
      }
    } catch {
      counters.errors += 1
      note("write log of \(nearKeys[k]): \(error)")
    }
  }
}

/// A Redis-mode worker process: one host's process, with its near cache (standing for
/// the host's invalidation role), its threads, and its result file (`FleetMember`).
enum RedisWorker {
  /// The staleness a read may show and still pass: `maxStaleness` and 50 ms of slack
  /// (scheduling on a loaded machine), in nanoseconds.
  static func boundNs(_ o: StressOptions) -> UInt64 { UInt64((o.maxStaleness + 0.05) * 1e9) }

  static func run(_ o: StressOptions) -> Int32 {
    guard let id = o.workerID, let dirPath = o.controlDir, o.redisURL != nil, o.seed != nil else {
      FileHandle.standardError.write(Data("cache-stress worker: missing internal arguments\n".utf8))
      return 64
    }
    let inc = o.incarnation
    let layout = RedisRunLayout(o, controlDir: dirPath)
    do {
      let near = try openNearCache(o, layout, worker: id)
      defer { near.close() }
      let board = RedisBoard(threads: o.threads)
      let loops = try threadLoops(o, layout, near: near, board: board, worker: id)
      let dir = ControlDirectory(path: dirPath)
      try dir.markReady(id, inc)
      guard let (start, end) = FleetMember.awaitGo(dir, coordinator: o.coordinatorPID) else { return 2 }
      final class Box: @unchecked Sendable {
        var loops: [RedisThreadLoop]
        init(_ l: [RedisThreadLoop]) { loops = l }
      }
      let box = Box(loops)
      let group = FleetMember.startThreads(o.threads, at: start, precise: false) { t in { box.loops[t].run(end: end) } }
      let done = FleetMember.flushUntilDone(group, coordinator: o.coordinatorPID, wake: board.urgent) {
        try? board.snapshot(worker: id, incarnation: inc, final: false).write(to: dirPath)
      }
      guard done else { return 2 }
      try board.snapshot(worker: id, incarnation: inc, final: true).write(to: dirPath)
      return 0
    } catch {
      FileHandle.standardError.write(Data("cache-stress worker \(id).\(inc): \(error)\n".utf8))
      return 1
    }
  }

  /// This process's near cache of its host's file, standing for the host's role.
  static func openNearCache(_ o: StressOptions, _ layout: RedisRunLayout, worker id: Int) throws -> NearCache<[UInt8]> {
    let timeout = min(1, max(0.2, o.maxStaleness))
    let remote = try RedisCache<[UInt8]>(
      url: o.redisURL!, keyPrefix: layout.keyPrefix,
      options: RedisOptions(connectTimeout: timeout, commandTimeout: timeout))
    // The planted fault stops host 0's holder process, whose fills' placeholders
    // then hold up that host's other readers for a fill timeout: kept short there, so
    // that the run measures the stale serves the plant is for.
    let planted = o.plantStale && layout.host(ofWorker: id) == 0
    var options = NearCacheOptions(capacity: o.hostCapacity, serveStale: planted)
    if planted { options.fillTimeout = 0.1 }
    return try NearCache<[UInt8]>(
      path: layout.hostPath(layout.host(ofWorker: id)), remote: remote,
      maxStaleness: .nanoseconds(Int64(o.maxStaleness * 1e9)), options: options)
  }

  /// One loop per thread, each with its op stream and the keys it writes.
  static func threadLoops(
    _ o: StressOptions, _ layout: RedisRunLayout, near: NearCache<[UInt8]>, board: RedisBoard, worker id: Int
  ) throws -> [RedisThreadLoop] {
    let log = try WriteLog(path: layout.logPath, keys: layout.keys)
    let nearKeys = (0..<o.keys).map { layout.keys[$0] }
    let scrambler = RankScrambler(n: o.keys)
    let zipf = o.dist == .zipf ? ZipfGenerator(n: o.keys, theta: o.zipfTheta) : nil
    let (seed, inc) = (o.seed!, o.incarnation)
    return try (0..<o.threads).map { t in
      let ops = OpStream(
        keys: o.keys, zipf: zipf, scrambler: scrambler, readPct: o.readPct,
        seed: SplitMix64.derive(seed, UInt64(id), UInt64(inc), UInt64(t))
      ).ops
      return try RedisThreadLoop(
        o: o, layout: layout, near: near, log: log, board: board, worker: id, thread: t, ops: ops,
        nearKeys: nearKeys, seed: SplitMix64.derive(seed, UInt64(id), UInt64(inc), UInt64(t), 1))
    }
  }
}

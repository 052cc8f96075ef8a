import CacheTools
import Foundation
import Glibc
import MappedCache
import SystemCalls

/// The coordinating process: creates (and prefills) the cache, starts the workers
/// (`WorkerFleet`) together, kills and restarts some of them under `--chaos-kills`, shows
/// progress, merges their results, verifies the file, reports.
final class Coordinator: @unchecked Sendable {
  private var o: StressOptions
  private let ownsFile: Bool
  private var rng: SplitMix64
  private var fleet: WorkerFleet?
  private var kills = 0
  /// Each chaos kill: when (seconds after the start), which worker, and its pid.
  private var killEvents: [KillEvent] = []
  /// CLOCK_MONOTONIC nanoseconds at the measured run's start.
  private var runStart: UInt64 = 0
  /// `--grow-every`: the thread that grows the cache.
  private var grower: GrowthRunner?

  init(options: StressOptions) throws {
    o = options
    if o.seed == nil { o.seed = UInt64.random(in: 0...UInt64(Int64.max)) }
    rng = SplitMix64(seed: SplitMix64.derive(o.seed!, 0xC4A05))
    ownsFile = o.path == nil
    if o.path == nil { o.path = ScratchFiles.path("cache-stress") }
  }

  func run() -> Int32 {
    let fleet: WorkerFleet
    do {
      let dir = try ControlDirectory.create()
      fleet = WorkerFleet(count: o.procs, dir: dir) { [o] w, inc in
        OptionTable.workerArguments(
          o, worker: w, incarnation: inc, controlDir: dir.path, coordinator: SystemCall.processID())
      }
    } catch {
      return Self.fail("error: \(error)", status: 1)
    }
    self.fleet = fleet
    defer { cleanUp() }
    // A report that cannot be written is found out before the run, not after it.
    if let file = o.reportPath, !FileManager.default.createFile(atPath: file, contents: nil) {
      return Self.fail("error: --report: cannot write \(file): \(Errno.current.message)", status: 1)
    }
    do {
      let report = try runMeasured(fleet)
      print(o.json ? report.json() : report.table(), terminator: o.json ? "\n" : "")
      if let file = o.reportPath {
        do { try HTMLReport(report).write(to: file) } catch {
          return Self.fail("error: --report: cannot write \(file): \(error)", status: 1)
        }
      }
      let reasons = report.failureReasons
      return reasons.isEmpty ? 0 : Self.fail("cache-stress: FAILED: \(reasons.joined(separator: "; "))", status: 1)
    } catch let e as InterruptedRun {
      return Self.fail("cache-stress: \(e.description)", status: 130)
    } catch {
      return Self.fail("error: \(error)", status: 1)
    }
  }

  /// Prints `message` on stderr; returns `status`.
  static func fail(_ message: String, status: Int32) -> Int32 {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    return status
  }

  private func runMeasured(_ fleet: WorkerFleet) throws -> RunReport {
    let cache = try openCache()
    let keys = KeySet(count: o.keys, size: o.keySize)
    var prefillSeconds = 0.0
    if o.prefill {
      let t0 = Clock.nanoseconds()
      try prefill(cache, keys)
      prefillSeconds = Double(Clock.nanoseconds() - t0) / 1e9
      progress(String(format: "prefilled %d keys in %.2f s", o.keys, prefillSeconds))
    }
    try fleet.startAll()
    try fleet.waitUntilReady()
    let before = cache.statistics
    let start = Clock.nanoseconds() + 20_000_000
    runStart = start
    let end = start + UInt64(o.duration * 1e9)
    if let to = o.growTo {
      grower = try GrowthRunner(
        path: o.path!, target: to, runStart: start,
        killing: o.killGrowers ? SplitMix64(seed: SplitMix64.derive(o.seed!, 0x6E0)) : nil)
    }
    try fleet.dir.writeGo(start: start, end: end)
    try watch(fleet, start: start, end: end)
    try fleet.waitForAll(deadline: end + 30_000_000_000)
    let growths = grower?.finish() ?? []
    var merged = merge(fleet)
    fleet.noteMissingResults { fleet.dir.readResult($0, $1)?.final == true }
    if kills > 0 { settle(cache, fleet) }
    let after = cache.statistics
    let (verifyOK, problems) = Self.verify(cache)
    merged.messages += fleet.failures
    return RunReport(
      options: o, merged: merged, toolErrors: UInt64(fleet.failures.count), kills: kills,
      killedWorkers: Set((0..<o.procs).filter { fleet.incarnations[$0] > 0 }),
      before: before, after: after, verifyOK: verifyOK, verifyProblems: problems,
      prefillSeconds: prefillSeconds, path: ownsFile ? nil : o.path, killEvents: killEvents,
      incarnations: fleet.incarnations, growthEvents: growths)
  }

  // MARK: Steps

  /// The cache, created with the run's options (or an existing one that fits the run).
  private func openCache() throws -> SharedCache<[UInt8]> {
    let path = o.path!
    let cache: SharedCache<[UInt8]>
    do {
      cache = try SharedCache<[UInt8]>(path: path, capacity: o.capacity, options: o.cacheOptions, lockMode: o.lockMode)
    } catch {
      throw StressFailure("cannot open the cache at \(path): \(error)")
    }
    if let n = o.countLimit { try cache.setLimits(count: n) }
    if o.keySize > cache.maxKeySize || o.valueMax > cache.maxValueSize {
      throw StressFailure(
        "\(path) takes keys up to \(cache.maxKeySize) bytes and values up to \(cache.maxValueSize); this run needs \(o.keySize) and \(o.valueMax)"
      )
    }
    return cache
  }

  /// The measured run: chaos kills at their moments, unexpected exits noted, progress
  /// once a second, until `end`.
  private func watch(_ fleet: WorkerFleet, start: UInt64, end: UInt64) throws {
    let durationNs = end - start
    // Kill moments: uniform over the middle 80 % of the run, so restarted workers still
    // run (and the next writer after a kill repairs what the victim left).
    var killTimes = (0..<o.chaosKills).map { _ in
      start + durationNs / 10 + UInt64(rng.nextDouble() * Double(durationNs) * 0.8)
    }.sorted()
    let growEveryNs = o.growEvery.map { UInt64($0 * 1e9) }
    var nextGrowth = growEveryNs.map { start + $0 } ?? UInt64.max
    var nextProgress = start + 1_000_000_000
    var lastOps: UInt64 = 0
    var lastProgressAt = start
    while true {
      let now = Clock.nanoseconds()
      try fleet.checkInterrupted()
      if now >= end { break }
      while let t = killTimes.first, t <= now {
        killTimes.removeFirst()
        try killAndRestart(fleet)
      }
      fleet.noteUnexpectedExits(end: end)
      if now >= nextGrowth, let every = growEveryNs {
        grower?.startNext()
        nextGrowth += every
      }
      if now >= nextProgress {
        let merged = merge(fleet)
        let ops = merged.getOps + merged.setOps
        let rate = Double(ops &- lastOps) / (Double(now - lastProgressAt) / 1e9)
        lastOps = ops
        lastProgressAt = now
        let hitRatio = merged.getOps == 0 ? 0 : Double(merged.hits) / Double(merged.getOps)
        progress(
          String(
            format: "[%5.1fs] %@ ops/s  hit %.1f%%  get p99 %@  kills %d/%d",
            Double(now - start) / 1e9, Fmt.count(rate), hitRatio * 100,
            Fmt.ns(merged.getHist.percentile(0.99)), kills, o.chaosKills))
        nextProgress += 1_000_000_000
      }
      let wake = min(end, nextProgress, killTimes.first ?? end, nextGrowth)
      let nap = wake > now ? min(wake - now, 50_000_000) : 0
      if nap > 0 { SystemCall.sleep(microseconds: UInt32(max(nap / 1000, 1))) }
    }
  }

  /// Sets every key, 64 to a batch write (`setBytes(_:forKeys:expires:)`: a group's
  /// misses overlap, and the lock is taken once a batch), each value as a single set
  /// would store it: at 10 M keys the prefill is most of a benchmark cell's time.
  private func prefill(_ cache: SharedCache<[UInt8]>, _ keys: KeySet) throws {
    let batch = BatchEntries(capacity: 64, keySize: keys.size, valueMax: o.valueMax)
    defer { batch.release() }
    let expires: CacheExpiry = o.ttl.map { .seconds($0) } ?? .never
    var g = SplitMix64(seed: SplitMix64.derive(o.seed!, 0x9F11))
    var first = 0
    while first < keys.count {
      if first % 65_536 == 0 { try fleet?.checkInterrupted() }
      let count = min(batch.capacity, keys.count - first)
      for j in 0..<count {
        let k = first + j
        let size = o.valueMin == o.valueMax ? o.valueMin : o.valueMin + g.next(below: o.valueMax - o.valueMin + 1)
        batch.setKey(j, k, of: keys)
        ValueFormat.write(into: batch.value(j, size: size), key: UInt32(k), writer: ValueFormat.prefillWriter, seq: 0)
      }
      try cache.setBytes(batch.values(count), forKeys: batch.keys(count), expires: expires)
      first += count
    }
  }

  /// SIGKILLs a random running worker and starts its next incarnation, which joins the
  /// run at once (the go file exists) and runs to the common end.
  private func killAndRestart(_ fleet: WorkerFleet) throws {
    let running = fleet.running
    guard !running.isEmpty else { return }
    let w = running[rng.next(below: running.count)]
    let at = Double(Int64(bitPattern: Clock.nanoseconds() &- runStart)) / 1e9
    let pid = try fleet.restart(w)
    kills += 1
    killEvents.append(KillEvent(seconds: at, worker: w, pid: pid))
    progress("chaos: killed worker \(w) (pid \(pid)), started incarnation \(fleet.incarnations[w])")
  }

  /// After kills, the victim of the last one may have died mid-write with nobody
  /// writing since: one write (then its removal) repairs that, as any next writer would.
  private func settle(_ cache: SharedCache<[UInt8]>, _ fleet: WorkerFleet) {
    do {
      try cache.setObject([0], forKey: "cache-stress:settle")
      try cache.removeObject(forKey: "cache-stress:settle")
    } catch {
      fleet.failures.append("settling write after the chaos kills failed: \(error)")
    }
  }

  /// Whether the file verifies, and its problems.
  private static func verify(_ cache: SharedCache<[UInt8]>) -> (ok: Bool, problems: [String]) {
    do {
      let v = try cache.verify(repair: false)
      return (v.ok, v.problems)
    } catch {
      return (false, ["verify failed to run: \(error)"])
    }
  }

  /// Sums every incarnation's latest result: survivors' final counts, and for killed
  /// incarnations what they had flushed before the kill (at most one flush interval lost;
  /// a failed check is flushed when found, `FleetMember.flushesFinding`).
  private func merge(_ fleet: WorkerFleet) -> MergedResults {
    var m = MergedResults(duration: o.duration, workers: o.procs)
    fleet.forEachIncarnation { w, inc in
      if let r = fleet.dir.readResult(w, inc) { m.add(r) }
    }
    return m
  }

  // MARK: Housekeeping

  private func progress(_ s: String) {
    FileHandle.standardError.write(Data((s + "\n").utf8))
  }

  private func cleanUp() {
    fleet?.stopAll()
    fleet?.dir.remove()
    if ownsFile, let path = o.path { try? SystemCall.unlink(path) }
  }
}

/// A chaos kill, for the report's timeline.
struct KillEvent {
  var seconds: Double
  var worker: Int
  var pid: Int32
}

/// Every worker's counters and histograms, summed; the run's timeline; each worker's
/// counters (all its incarnations).
@dynamicMemberLookup
struct MergedResults {
  var counters = Counters()
  subscript(dynamicMember field: KeyPath<Counters, UInt64>) -> UInt64 { counters[keyPath: field] }
  var messages: [String] = []
  var getHist = LatencyHistogram()
  var setHist = LatencyHistogram()
  var timeline: Timeline
  var perWorker: [Counters]
  /// Operations of each (worker, thread), summed over the worker's incarnations.
  var threadOps: [Int: [UInt64]] = [:]

  init(duration: Double, workers: Int) {
    timeline = Timeline(duration: duration)
    perWorker = Array(repeating: Counters(), count: workers)
  }

  mutating func add(_ r: WorkerResult) {
    counters.add(r.counters)
    if let t = r.timeline { timeline.merge(t) }
    if perWorker.indices.contains(r.worker) { perWorker[r.worker].add(r.counters) }
    var t = threadOps[r.worker] ?? []
    for (i, n) in r.threadOps.enumerated() {
      if i >= t.count { t.append(0) }
      t[i] &+= n
    }
    threadOps[r.worker] = t
    for m in r.messages where messages.count < 20 { messages.append("worker \(r.worker).\(r.incarnation): \(m)") }
    getHist.merge(LatencyHistogram(sparse: r.getHist))
    setHist.merge(LatencyHistogram(sparse: r.setHist))
  }
}

import Foundation
import Glibc
import MappedCache
import Synchronization

/// The coordinating process: creates (and prefills) the cache, re-executes its own
/// binary as the workers, starts them together, kills and restarts some of them under
/// `--chaos-kills`, shows progress, merges their results, verifies the file, reports.
final class Coordinator: @unchecked Sendable {
  private var o: StressOptions
  private let ownsFile: Bool
  private let executable: String
  private var rng: SplitMix64
  private var dir: ControlDirectory?
  /// Per worker: its running process (nil once it has exited) and its current incarnation.
  private var processes: [Process?] = []
  private var incarnations: [Int] = []
  private var kills = 0
  /// Each chaos kill: when (seconds after the start), which worker, and its pid.
  private var killEvents: [KillEvent] = []
  /// CLOCK_MONOTONIC nanoseconds at the measured run's start.
  private var runStart: UInt64 = 0
  private var failures: [String] = []
  private let interruptFlag = Atomic<Bool>(false)
  private var interrupted: Bool { interruptFlag.load(ordering: .relaxed) }
  private var signalSources: [DispatchSourceSignal] = []

  init(options: StressOptions) throws {
    o = options
    if o.seed == nil { o.seed = UInt64.random(in: 0...UInt64(Int64.max)) }
    rng = SplitMix64(seed: SplitMix64.derive(o.seed!, 0xC4A05))
    if o.path == nil {
      var isDir: ObjCBool = false
      let base =
        FileManager.default.fileExists(atPath: "/dev/shm", isDirectory: &isDir) && isDir.boolValue
        ? "/dev/shm" : NSTemporaryDirectory()
      o.path = "\(base)/cache-stress-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).mcache"
      ownsFile = true
    } else {
      ownsFile = false
    }
    executable =
      (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
  }

  func run() -> Int32 {
    installSignalHandlers()
    defer { cleanUp() }
    // A report that cannot be written is found out before the run, not after it.
    if let file = o.reportPath, !FileManager.default.createFile(atPath: file, contents: nil) {
      FileHandle.standardError.write(
        Data("error: --report: cannot write \(file): \(String(cString: strerror(errno)))\n".utf8))
      return 1
    }
    do {
      let report = try runMeasured()
      if o.json {
        print(report.json())
      } else {
        print(report.table(), terminator: "")
      }
      if let file = o.reportPath {
        do {
          try HTMLReport(report).write(to: file)
        } catch {
          FileHandle.standardError.write(Data("error: --report: cannot write \(file): \(error)\n".utf8))
          return 1
        }
      }
      let reasons = report.failureReasons
      if reasons.isEmpty { return 0 }
      FileHandle.standardError.write(Data("cache-stress: FAILED: \(reasons.joined(separator: "; "))\n".utf8))
      return 1
    } catch let e as InterruptedRun {
      FileHandle.standardError.write(Data("cache-stress: \(e.description)\n".utf8))
      return 130
    } catch {
      FileHandle.standardError.write(Data("error: \(error)\n".utf8))
      return 1
    }
  }

  struct InterruptedRun: Error, CustomStringConvertible {
    var description = "interrupted; workers stopped, files removed"
  }

  private func runMeasured() throws -> RunReport {
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
    let keys = KeySet(count: o.keys, size: o.keySize)
    var prefillSeconds = 0.0
    if o.prefill {
      let t0 = monotonicNanoseconds()
      try prefill(cache, keys)
      prefillSeconds = Double(monotonicNanoseconds() - t0) / 1e9
      progress(String(format: "prefilled %d keys in %.2f s", o.keys, prefillSeconds))
    }

    let dir = try ControlDirectory.create()
    self.dir = dir
    processes = Array(repeating: nil, count: o.procs)
    incarnations = Array(repeating: 0, count: o.procs)
    for w in 0..<o.procs { processes[w] = try spawn(w, 0) }
    try waitUntilReady(dir)

    let before = cache.statistics
    let start = monotonicNanoseconds() + 20_000_000
    runStart = start
    let durationNs = UInt64(o.duration * 1e9)
    let end = start + durationNs
    try dir.writeGo(start: start, end: end)

    // Kill moments: uniform over the middle 80 % of the run, so restarted workers still
    // run (and the next writer after a kill repairs what the victim left).
    var killTimes = (0..<o.chaosKills).map { _ in
      start + durationNs / 10 + UInt64(rng.nextDouble() * Double(durationNs) * 0.8)
    }.sorted()
    var nextProgress = start + 1_000_000_000
    var lastOps: UInt64 = 0
    var lastProgressAt = start
    while true {
      let now = monotonicNanoseconds()
      if interrupted { throw InterruptedRun() }
      if now >= end { break }
      while let t = killTimes.first, t <= now {
        killTimes.removeFirst()
        try killAndRestart()
      }
      noteUnexpectedExits(end: end)
      if now >= nextProgress {
        let merged = merge(dir)
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
      let wake = min(end, nextProgress, killTimes.first ?? end)
      let nap = wake > now ? min(wake - now, 50_000_000) : 0
      if nap > 0 { usleep(UInt32(max(nap / 1000, 1))) }
    }
    try waitForWorkers(deadline: end + 30_000_000_000)
    var merged = merge(dir)
    for w in 0..<o.procs where dir.readResult(w, incarnations[w])?.final != true {
      failures.append("worker \(w).\(incarnations[w]) left no final result")
    }

    // After kills, the victim of the last one may have died mid-write with nobody
    // writing since: one write (then its removal) repairs that, as any next writer would.
    if kills > 0 {
      do {
        try cache.setObject([0], forKey: "cache-stress:settle")
        try cache.removeObject(forKey: "cache-stress:settle")
      } catch {
        failures.append("settling write after the chaos kills failed: \(error)")
      }
    }
    let after = cache.statistics
    var verifyOK = false
    var problems: [String] = []
    do {
      let v = try cache.verify(repair: false)
      verifyOK = v.ok
      problems = v.problems
    } catch {
      problems = ["verify failed to run: \(error)"]
    }
    merged.messages += failures
    return RunReport(
      options: o, merged: merged, toolErrors: UInt64(failures.count), kills: kills,
      killedWorkers: Set((0..<o.procs).filter { incarnations[$0] > 0 }),
      before: before, after: after, verifyOK: verifyOK, verifyProblems: problems,
      prefillSeconds: prefillSeconds, path: ownsFile ? nil : path, killEvents: killEvents,
      incarnations: incarnations)
  }

  // MARK: Steps

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
      if first % 65_536 == 0 && interrupted { throw InterruptedRun() }
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

  private func spawn(_ w: Int, _ inc: Int) throws -> Process {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = OptionTable.workerArguments(
      o, worker: w, incarnation: inc, controlDir: dir!.path, coordinator: getpid())
    p.standardInput = FileHandle.nullDevice
    p.standardOutput = FileHandle.nullDevice
    do { try p.run() } catch { throw StressFailure("cannot start worker \(w) (\(executable)): \(error)") }
    return p
  }

  private func waitUntilReady(_ dir: ControlDirectory) throws {
    let deadline = Date().addingTimeInterval(120)
    for w in 0..<o.procs {
      while !dir.isReady(w, 0) {
        if interrupted { throw InterruptedRun() }
        if let p = processes[w], !p.isRunning {
          throw StressFailure("worker \(w) exited with status \(p.terminationStatus) before it was ready")
        }
        if Date() > deadline { throw StressFailure("worker \(w) was not ready within 120 s") }
        usleep(2000)
      }
    }
  }

  /// SIGKILLs a random running worker and starts its next incarnation, which joins the
  /// run at once (the go file exists) and runs to the common end.
  private func killAndRestart() throws {
    let running = (0..<o.procs).filter { processes[$0]?.isRunning == true }
    guard !running.isEmpty else { return }
    let w = running[rng.next(below: running.count)]
    guard let p = processes[w] else { return }
    let at = Double(Int64(bitPattern: monotonicNanoseconds() &- runStart)) / 1e9
    kill(p.processIdentifier, SIGKILL)
    p.waitUntilExit()
    kills += 1
    killEvents.append(KillEvent(seconds: at, worker: w, pid: p.processIdentifier))
    incarnations[w] += 1
    processes[w] = try spawn(w, incarnations[w])
    progress("chaos: killed worker \(w) (pid \(p.processIdentifier)), started incarnation \(incarnations[w])")
  }

  /// A worker that exits before the end on its own is a failure (not restarted).
  /// Workers stop at `end`: one found stopped once the end has passed (a coordinator
  /// starved of CPU, or busy restarting a victim, can look that late) may have finished
  /// normally, and `waitForWorkers` judges its exit status instead.
  private func noteUnexpectedExits(end: UInt64) {
    for w in 0..<o.procs {
      guard let p = processes[w], !p.isRunning else { continue }
      if monotonicNanoseconds() >= end { return }
      let how =
        p.terminationReason == .uncaughtSignal ? "signal \(p.terminationStatus)" : "status \(p.terminationStatus)"
      failures.append("worker \(w).\(incarnations[w]) exited early (\(how))")
      processes[w] = nil
    }
  }

  private func waitForWorkers(deadline: UInt64) throws {
    for w in 0..<o.procs {
      guard let p = processes[w] else { continue }
      while p.isRunning {
        if interrupted { throw InterruptedRun() }
        if monotonicNanoseconds() > deadline {
          kill(p.processIdentifier, SIGKILL)
          p.waitUntilExit()
          failures.append("worker \(w).\(incarnations[w]) did not stop; killed")
          break
        }
        usleep(5000)
      }
      p.waitUntilExit()
      if p.terminationReason == .uncaughtSignal || p.terminationStatus != 0 {
        let how =
          p.terminationReason == .uncaughtSignal ? "signal \(p.terminationStatus)" : "status \(p.terminationStatus)"
        if !failures.contains(where: { $0.hasPrefix("worker \(w).\(incarnations[w])") }) {
          failures.append("worker \(w).\(incarnations[w]) exited with \(how)")
        }
      }
      processes[w] = nil
    }
  }

  /// Sums every incarnation's latest result: survivors' final counts, and for killed
  /// incarnations what they had flushed before the kill (at most one flush interval lost).
  private func merge(_ dir: ControlDirectory) -> MergedResults {
    var m = MergedResults(duration: o.duration, workers: o.procs)
    for w in 0..<incarnations.count {
      for inc in 0...incarnations[w] {
        guard let r = dir.readResult(w, inc) else { continue }
        m.add(r)
      }
    }
    return m
  }

  // MARK: Housekeeping

  private func progress(_ s: String) {
    FileHandle.standardError.write(Data((s + "\n").utf8))
  }

  private func installSignalHandlers() {
    for sig in [SIGINT, SIGTERM] {
      signal(sig, SIG_IGN)
      let src = DispatchSource.makeSignalSource(signal: sig, queue: .global())
      src.setEventHandler { [weak self] in self?.interruptFlag.store(true, ordering: .relaxed) }
      src.resume()
      signalSources.append(src)
    }
  }

  private func cleanUp() {
    for case let p? in processes where p.isRunning {
      kill(p.processIdentifier, SIGKILL)
      p.waitUntilExit()
    }
    dir?.remove()
    if ownsFile, let path = o.path { unlink(path) }
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

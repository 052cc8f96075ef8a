import CacheTools
import Foundation
import Glibc
import MappedCache
import MappedCacheRedis
import RedisFaultProxy
import Synchronization

/// The Redis mode's coordinator (`--redis URL` or `--redis-spawn`): starts a private
/// redis-server when asked, puts a fault proxy in front of each host when black holes
/// are asked for, writes version 1 of every key, starts `--procs` workers per host (each
/// host's processes share one file and elect its invalidation holder), makes the faults,
/// samples Redis's tracking connections, merges the workers' results and reports.
final class RedisCoordinator: @unchecked Sendable {
  private var o: StressOptions
  private let executable: String
  private let dir: ControlDirectory
  private let layout: RedisRunLayout
  private var server: SpawnedRedis?
  private var cluster: SpawnedCluster?
  private var url = ""
  private var proxies: [FaultProxy] = []
  private var processes: [Process?] = []
  private var incarnations: [Int] = []
  private var failures: [String] = []
  private var faults = RedisFaults()
  private var tracking: [Int] = []
  private let interruptFlag = Atomic<Bool>(false)
  private var signalSources: [DispatchSourceSignal] = []

  init(options: StressOptions) throws {
    o = options
    if o.seed == nil { o.seed = UInt64.random(in: 0...UInt64(Int64.max)) }
    dir = try ControlDirectory.create()
    layout = RedisRunLayout(o, controlDir: dir.path)
    executable =
      (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
  }

  func run() -> Int32 {
    for sig in [SIGINT, SIGTERM] {
      signal(sig, SIG_IGN)
      let src = DispatchSource.makeSignalSource(signal: sig, queue: .global())
      src.setEventHandler { [weak self] in self?.interruptFlag.store(true, ordering: .relaxed) }
      src.resume()
      signalSources.append(src)
    }
    defer { cleanUp() }
    do {
      let report = try runMeasured()
      print(o.json ? report.json() : report.text(), terminator: o.json ? "\n" : "")
      let reasons = report.failureReasons
      if reasons.isEmpty { return 0 }
      FileHandle.standardError.write(Data("cache-stress: FAILED: \(reasons.joined(separator: "; "))\n".utf8))
      return 1
    } catch is Coordinator.InterruptedRun {
      FileHandle.standardError.write(Data("cache-stress: interrupted; workers stopped, files removed\n".utf8))
      return 130
    } catch {
      FileHandle.standardError.write(Data("error: \(error)\n".utf8))
      return 1
    }
  }

  private var interrupted: Bool { interruptFlag.load(ordering: .relaxed) }

  private func progress(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }

  private func runMeasured() throws -> RedisRunReport {
    if o.redisSpawn {
      let s = try SpawnedRedis(dir: dir.path)
      server = s
      url = s.url
      progress("started redis-server (pid \(s.pid)) on \(s.url)")
    } else if o.redisSpawnCluster {
      let replicas = o.failoverEvery == nil ? 0 : 1
      let c = try SpawnedCluster(dir: dir.path, primaries: 3, replicas: replicas)
      cluster = c
      url = c.url
      progress(
        "started a Redis Cluster of 3 primaries\(replicas == 0 ? "" : " with a replica each") on \(c.url)")
    } else {
      url = o.redisURL!
    }
    let direct = try RedisClient(url: url, options: RedisOptions(connectTimeout: 2, commandTimeout: 2))
    do { _ = try direct.call("PING") } catch { throw StressFailure("cannot reach Redis at \(url): \(error)") }
    if o.blackholeEvery != nil {
      guard case .tcp(let host, let port) = try RedisEndpoint(url: url).address,
        host == "127.0.0.1" || host == "localhost"
      else {
        throw StressFailure("--blackhole-every needs Redis on 127.0.0.1 (the fault proxy is loopback TCP), not \(url)")
      }
      proxies = try (0..<o.hosts).map { _ in try FaultProxy(to: port) }
    }

    // Version 1 of every key, each logged as acknowledged when its pipeline's reply came.
    let log = try WriteLog(path: layout.logPath, keys: layout.keys)
    let t0 = monotonicNanoseconds()
    try prefill(direct, log)
    progress(String(format: "wrote version 1 of %d keys in %.2f s", o.keys, Double(monotonicNanoseconds() - t0) / 1e9))
    if o.redisCluster {
      let slots = Set((0..<o.keys).map { ClusterSlots.slot(layout.keyPrefix + layout.keys[$0]) })
      progress("the run's keys fall in \(slots.count) of the cluster's \(ClusterSlots.count) slots")
    }

    let workers = o.hosts * o.procs
    processes = Array(repeating: nil, count: workers)
    incarnations = Array(repeating: 0, count: workers)
    for w in 0..<workers { processes[w] = try spawn(w, 0) }
    try waitUntilReady()
    // Observers of each host's file (they do not stand for the role): figures, holder pids.
    let observers = try (0..<o.hosts).map { h in
      try NearCache<[UInt8]>(
        path: layout.hostPath(h),
        remote: RedisCache<[UInt8]>(client: direct, keyPrefix: layout.keyPrefix),
        maxStaleness: .nanoseconds(Int64(o.maxStaleness * 1e9)),
        options: NearCacheOptions(capacity: o.hostCapacity, standsForHolder: false))
    }
    defer { for obs in observers { obs.close() } }
    let ready = monotonicNanoseconds() + 20_000_000_000
    while observers.contains(where: { !$0.statistics.fenceFresh }) {
      if interrupted { throw Coordinator.InterruptedRun() }
      if monotonicNanoseconds() > ready {
        throw StressFailure("a host's invalidation holder did not confirm a heartbeat within 20 s")
      }
      usleep(2000)
    }
    let before = observers.map(\.statistics)
    // Every host's holder has confirmed a heartbeat: Redis sees one tracking connection each.
    if let n = trackingConnections(direct) { tracking.append(n) }

    let start = monotonicNanoseconds() + 20_000_000
    let durationNs = UInt64(o.duration * 1e9)
    let end = start + durationNs
    try dir.writeGo(start: start, end: end)
    func every(_ s: Double?) -> UInt64? { s.map { UInt64($0 * 1e9) } }
    var nextKill = every(o.killHolderEvery).map { start + $0 }
    var nextHole = every(o.blackholeEvery).map { start + $0 }
    var nextRedisKill = every(o.killRedisEvery).map { start + $0 }
    var nextReshard = every(o.reshardEvery).map { start + $0 }
    var nextFailover = every(o.failoverEvery).map { start + $0 }
    var failover: FailoverJob? = nil
    var reshardRNG = SplitMix64(seed: (o.seed ?? 1) &+ 0x5107)
    var holeEnds: [Int: UInt64] = [:]
    var maxHeartbeatAge = [UInt64](repeating: 0, count: o.hosts)
    var plantAt = o.plantStale ? start + durationNs / 3 : nil
    var stopped: Int32? = nil
    let plantFile = o.plantStale ? try CacheFile(path: layout.hostPath(0), readOnly: true) : nil
    defer { if let pid = stopped { kill(pid, SIGCONT) } }
    var nextProgress = start + 1_000_000_000
    while true {
      let now = monotonicNanoseconds()
      if interrupted { throw Coordinator.InterruptedRun() }
      if now >= end { break }
      for (h, t) in holeEnds where now >= t {
        proxies[h].mode = .pass
        holeEnds[h] = nil
      }
      if let t = plantAt, now >= t, let pid = observers[0].statistics.holderPID, let file = plantFile {
        // Stopped inside the write lock, the holder would hold up every writer and fill of
        // host 0, not make it serve stale entries: stopped outside it.
        plantAt = nil
        if let retries = ProcessControl.stopOutsideWriteLock(pid, of: file) {
          stopped = pid
          let retried =
            retries == 0 ? "" : " (after \(retries) tries that found it in the write lock or not yet stopped)"
          progress("plant: host 0's holder (pid \(pid)) stopped\(retried); host 0 serves stale entries")
        } else {
          failures.append("plant: host 0's holder (pid \(pid)) was in the write lock at every try, or is gone")
        }
      }
      if let t = nextKill, now >= t {
        killHolder(observers)
        nextKill = t + every(o.killHolderEvery)!
      }
      if let t = nextHole, now >= t {
        let h = faults.blackholes % o.hosts
        if holeEnds[h] == nil {
          proxies[h].mode = .blackHole
          holeEnds[h] = now + UInt64(o.blackholeFor * 1e9)
          faults.blackholes += 1
        }
        nextHole = t + every(o.blackholeEvery)!
      }
      if let t = nextRedisKill, now >= t, let s = server {
        do {
          try s.restart()
          faults.redisKills += 1
          progress("fault: redis-server SIGKILLed and restarted empty (pid \(s.pid))")
        } catch {
          failures.append("redis-server did not restart: \(error)")
        }
        nextRedisKill = t + every(o.killRedisEvery)!
      }
      if let t = nextReshard, now >= t {
        // The slot of a random key of the run, so that the move migrates keys readers use.
        let key = layout.keyPrefix + layout.keys[Int(reshardRNG.next() % UInt64(layout.keys.count))]
        let slot = ClusterSlots.slot(key)
        do {
          let to = try RedisClusterAdmin.moveSlot(slot, direct)
          faults.reshards += 1
          if faults.reshards <= 3 || faults.reshards % 20 == 0 {
            progress("fault: slot \(slot) moved to \(to) (\(faults.reshards) moves)")
          }
        } catch {
          faults.reshardsFailed += 1
          progress("fault: moving slot \(slot) failed: \(error)")
        }
        nextReshard = t + every(o.reshardEvery)!
      }
      // A failover takes seconds (promotion, restart, resync): it runs on a thread of its
      // own while this loop goes on sampling, and the next one counts from its end, as the
      // killed node must be a synced replica again before its shard loses another primary.
      if let job = failover, let outcome = job.outcome {
        switch outcome {
        case .success(let (killed, promoted)):
          faults.failovers += 1
          progress(
            "fault: primary :\(killed) of slot \(job.slot) SIGKILLed, replica :\(promoted) promoted, :\(killed) back as its replica (\(faults.failovers) failovers)"
          )
        case .failure(let error):
          faults.failoversFailed += 1
          progress("fault: failover of slot \(job.slot) failed: \(error)")
        }
        failover = nil
        nextFailover = now + every(o.failoverEvery)!
      }
      if failover == nil, let t = nextFailover, now >= t, let c = cluster {
        let key = layout.keyPrefix + layout.keys[Int(reshardRNG.next() % UInt64(layout.keys.count))]
        failover = FailoverJob(c, slot: ClusterSlots.slot(key))
      }
      noteUnexpectedExits(end: end)
      // How stale each host's fence got: a holder descheduled, stopped, killed or cut off
      // leaves it aging, and until it is maxStaleness old reads still trust the file.
      for (h, obs) in observers.enumerated() {
        if let age = obs.statistics.heartbeatAgeMilliseconds.first ?? nil {
          maxHeartbeatAge[h] = max(maxHeartbeatAge[h], age)
        }
      }
      if now >= nextProgress {
        if let n = trackingConnections(direct) { tracking.append(n) }
        let m = merge()
        progress(
          String(
            format: "[%5.1fs] %@ reads/s  %@ writes/s  stale %llu (max %.2f ms)  violations %llu  tracking %@",
            Double(now - start) / 1e9, Fmt.count(Double(m.counters.reads) / (Double(now - start) / 1e9)),
            Fmt.count(Double(m.counters.writes) / (Double(now - start) / 1e9)), m.counters.staleReads,
            Double(m.counters.maxLatenessNs) / 1e6, m.counters.violations, tracking.last.map { "\($0)" } ?? "?"))
        while nextProgress <= now { nextProgress += 1_000_000_000 }
      }
      usleep(2000)
    }
    if let job = failover {
      // One still under way ends before the nodes are stopped.
      job.wait()
      if case .success = job.outcome { faults.failovers += 1 } else { faults.failoversFailed += 1 }
    }
    // The hosts' figures as the run ends: when the workers close, each host's role passes
    // from one closing process to the next, which is not part of the run.
    let after = observers.map(\.statistics)
    for p in proxies { p.mode = .pass }
    if let pid = stopped {
      kill(pid, SIGCONT)
      stopped = nil
    }
    try waitForWorkers(deadline: end + 30_000_000_000)
    var merged = merge()
    for w in 0..<workers where RedisWorkerResult.read(dir.path, w, incarnations[w])?.final != true {
      failures.append("worker \(w).\(incarnations[w]) left no final result")
    }
    merged.messages += failures
    // Each write's staleness, over the writes some read saw stale (the versions after 1).
    for k in 0..<o.keys {
      guard let last = try log.latest(k)?.version, last >= 2 else { continue }
      for v in 2...last {
        merged.writesLogged += 1
        if let late = try log.staleness(k, version: v) { merged.writeStaleHist.record(late) }
      }
    }
    return RedisRunReport(
      options: o, url: server == nil ? url : "\(url) (spawned)", merged: merged, before: before, after: after,
      faults: faults, tracking: tracking, maxHeartbeatAgeMs: maxHeartbeatAge, toolErrors: failures.count,
      seconds: o.duration)
  }

  private func prefill(_ client: RedisClient, _ log: WriteLog) throws {
    let px = o.ttl.map { ["PX", "\(Int(($0 * 1000).rounded(.up)))"] } ?? []
    var k = 0
    while k < o.keys {
      if interrupted { throw Coordinator.InterruptedRun() }
      let chunk = k..<min(o.keys, k + 1000)
      let commands = chunk.map { i in
        [Array("SET".utf8), Array((layout.keyPrefix + layout.keys[i]).utf8), layout.value(o, key: i, version: 1)]
          + px.map { Array($0.utf8) }
      }
      for reply in try client.pipeline(commands) where reply.string != "OK" {
        throw StressFailure("Redis refused a SET of the prefill: \(reply)")
      }
      let ack = monotonicNanoseconds()
      for i in chunk {
        var ring = [UInt64](repeating: 0, count: WriteLog.ringSize * 2)
        try log.record(i, version: 1, ack: ack, ring: &ring)
      }
      k = chunk.upperBound
    }
  }

  /// The URL host `h`'s processes use: its proxy's, or Redis's own.
  private func hostURL(_ h: Int) -> String {
    guard h < proxies.count else { return url }
    // The proxy stands in for host:port; credentials, database and options stay.
    guard let at = url.range(of: "://") else { return url }
    let rest = url[at.upperBound...]
    let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
    let authority = rest[..<authorityEnd]
    let userinfo = authority.lastIndex(of: "@").map { String(authority[...$0]) } ?? ""
    return "redis://\(userinfo)127.0.0.1:\(proxies[h].port)\(rest[authorityEnd...])"
  }

  private func spawn(_ w: Int, _ inc: Int) throws -> Process {
    var wo = o
    wo.redisURL = hostURL(layout.host(ofWorker: w))
    wo.redisSpawn = false
    wo.redisSpawnCluster = false
    wo.reshardEvery = nil
    wo.failoverEvery = nil
    wo.killRedisEvery = nil
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = OptionTable.workerArguments(
      wo, worker: w, incarnation: inc, controlDir: dir.path, coordinator: getpid())
    p.standardInput = FileHandle.nullDevice
    p.standardOutput = FileHandle.nullDevice
    do { try p.run() } catch { throw StressFailure("cannot start worker \(w) (\(executable)): \(error)") }
    return p
  }

  private func waitUntilReady() throws {
    let deadline = Date().addingTimeInterval(120)
    for w in 0..<processes.count {
      while !dir.isReady(w, 0) {
        if interrupted { throw Coordinator.InterruptedRun() }
        if let p = processes[w], !p.isRunning {
          throw StressFailure("worker \(w) exited with status \(p.terminationStatus) before it was ready")
        }
        if Date() > deadline { throw StressFailure("worker \(w) was not ready within 120 s") }
        usleep(2000)
      }
    }
  }

  /// SIGKILLs the invalidation holder of the next host in turn (one of its worker
  /// processes) and starts that worker's next incarnation.
  private func killHolder(_ observers: [NearCache<[UInt8]>]) {
    let h = faults.holderKillAttempts % o.hosts
    faults.holderKillAttempts += 1
    guard let pid = observers[h].statistics.holderPID,
      let w = processes.indices.first(where: { processes[$0]?.processIdentifier == pid && processes[$0]!.isRunning })
    else {
      faults.holderKillsSkipped += 1
      return
    }
    kill(pid, SIGKILL)
    processes[w]!.waitUntilExit()
    faults.holderKills += 1
    incarnations[w] += 1
    do {
      processes[w] = try spawn(w, incarnations[w])
    } catch {
      failures.append("cannot restart worker \(w): \(error)")
      processes[w] = nil
    }
  }

  /// Clients with tracking on (flag `t` in CLIENT LIST).
  private func trackingConnections(_ c: RedisClient) -> Int? {
    guard let list = try? c.call("CLIENT", "LIST").string else { return nil }
    return list.split(separator: "\n").filter { line in
      line.split(separator: " ").contains { $0.hasPrefix("flags=") && $0.dropFirst(6).contains("t") }
    }.count
  }

  private func noteUnexpectedExits(end: UInt64) {
    for w in processes.indices {
      guard let p = processes[w], !p.isRunning else { continue }
      if monotonicNanoseconds() >= end { return }
      failures.append("worker \(w).\(incarnations[w]) exited early (status \(p.terminationStatus))")
      processes[w] = nil
    }
  }

  private func waitForWorkers(deadline: UInt64) throws {
    for w in processes.indices {
      guard let p = processes[w] else { continue }
      while p.isRunning {
        if interrupted { throw Coordinator.InterruptedRun() }
        if monotonicNanoseconds() > deadline {
          kill(p.processIdentifier, SIGKILL)
          failures.append("worker \(w).\(incarnations[w]) did not stop; killed")
          break
        }
        usleep(5000)
      }
      p.waitUntilExit()
      if p.terminationReason == .uncaughtSignal || p.terminationStatus != 0,
        !failures.contains(where: { $0.hasPrefix("worker \(w).\(incarnations[w])") })
      {
        failures.append("worker \(w).\(incarnations[w]) exited with status \(p.terminationStatus)")
      }
      processes[w] = nil
    }
  }

  private func merge() -> RedisMerged {
    var m = RedisMerged()
    for w in incarnations.indices {
      for inc in 0...incarnations[w] {
        guard let r = RedisWorkerResult.read(dir.path, w, inc) else { continue }
        m.counters.add(r.counters)
        m.getHist.merge(LatencyHistogram(sparse: r.getHist))
        m.setHist.merge(LatencyHistogram(sparse: r.setHist))
        m.staleHist.merge(LatencyHistogram(sparse: r.staleHist))
        for msg in r.messages where m.messages.count < 40 { m.messages.append("worker \(w).\(inc): \(msg)") }
      }
    }
    return m
  }

  private func cleanUp() {
    for case let p? in processes where p.isRunning {
      kill(p.processIdentifier, SIGKILL)
      p.waitUntilExit()
    }
    for p in proxies { p.stop() }
    if let s = server {
      s.stop()
    } else if let c = cluster {
      c.stop()
    } else if !url.isEmpty {
      // The run's keys only (SCAN MATCH prefix* + UNLINK).
      if let c = try? RedisClient(url: url, options: RedisOptions(connectTimeout: 2, commandTimeout: 5)) {
        _ = try? RedisCache<[UInt8]>(client: c, keyPrefix: layout.keyPrefix).removeAllKeys()
      }
    }
    dir.remove()
  }
}

/// The faults made during a run.
struct RedisFaults {
  var holderKills = 0
  var holderKillAttempts = 0
  /// Kill moments when the host had no live holder that was one of the run's workers.
  var holderKillsSkipped = 0
  var blackholes = 0
  var redisKills = 0
  /// Slots moved between primaries (`--reshard-every`), and moves that failed (a move
  /// fails when the cluster is busy; the run goes on).
  var reshards = 0
  var reshardsFailed = 0
  /// Primaries SIGKILLed and replaced by their replica (`--failover-every`), and attempts
  /// that failed.
  var failovers = 0
  var failoversFailed = 0
  var any: Bool {
    holderKills + holderKillsSkipped + blackholes + redisKills + reshards + reshardsFailed + failovers
      + failoversFailed > 0
  }
}

/// Every worker's counters and histograms, summed.
struct RedisMerged {
  var counters = RedisCounters()
  var getHist = LatencyHistogram()
  var setHist = LatencyHistogram()
  var staleHist = LatencyHistogram()
  /// Staleness of each write that some read saw stale: the latest such read's lateness.
  var writeStaleHist = LatencyHistogram()
  var writesLogged: UInt64 = 0
  var messages: [String] = []
}

/// A redis-server of the run's own: a free loopback port, no persistence, its files in
/// the run's directory.
final class SpawnedRedis {
  let port: UInt16
  private let dir: String
  private var process: Process?
  var url: String { "redis://127.0.0.1:\(port)/0" }
  var pid: Int32 { process?.processIdentifier ?? 0 }

  static var binary: String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    for d in path.split(separator: ":") + ["/usr/bin", "/usr/sbin"] where access("\(d)/redis-server", X_OK) == 0 {
      return "\(d)/redis-server"
    }
    return nil
  }

  /// A cluster node (`--cluster-enabled`, its nodes file in `dir`) rather than a server.
  private let clusterNode: Bool

  init(dir: String, clusterNode: Bool = false) throws {
    self.dir = dir
    self.clusterNode = clusterNode
    var lastError: (any Error)? = nil
    // A port found free can be taken before redis-server binds it: then another one.
    for _ in 0..<8 {
      let p = try Self.freePort()
      do {
        try Self.start(port: p, dir: dir, clusterNode: clusterNode, into: &process)
        port = p
        return
      } catch {
        lastError = error
      }
    }
    throw lastError ?? StressFailure("cannot start redis-server")
  }

  private static func start(port: UInt16, dir: String, clusterNode: Bool, into process: inout Process?) throws {
    guard let binary else { throw StressFailure("--redis-spawn: redis-server is not on PATH") }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: binary)
    p.arguments = [
      "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
      "--daemonize", "no", "--loglevel", "warning",
    ]
    if clusterNode {
      p.arguments! += [
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes-\(port).conf", "--cluster-node-timeout", "5000",
      ]
    }
    p.standardInput = FileHandle.nullDevice
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    try p.run()
    let c = RedisClient(
      endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: port)),
      options: RedisOptions(connectTimeout: 0.2, commandTimeout: 1))
    for _ in 0..<500 {
      // The server that answers must be this one: another may own the port.
      if let info = try? c.call("INFO", "server").string {
        if info.contains("process_id:\(p.processIdentifier)\r") {
          process = p
          return
        }
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        throw StressFailure("port \(port) is another server's")
      }
      if !p.isRunning { throw StressFailure("redis-server could not listen on port \(port)") }
      usleep(10_000)
    }
    kill(p.processIdentifier, SIGKILL)
    p.waitUntilExit()
    throw StressFailure("redis-server on port \(port) did not answer within 5 s")
  }

  /// SIGKILLs the server and starts it again, empty, on the same port.
  func restart() throws {
    stop()
    try Self.start(port: port, dir: dir, clusterNode: clusterNode, into: &process)
  }

  func stop() {
    guard let p = process else { return }
    kill(p.processIdentifier, SIGKILL)
    p.waitUntilExit()
    process = nil
  }

  deinit { stop() }

  /// A loopback port nobody listens on now (bound to port 0, then closed).
  static func freePort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw StressFailure("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { a in bind(fd, a, len) == 0 && getsockname(fd, a, &len) == 0
      }
    }
    guard ok else { throw StressFailure("bind: \(String(cString: strerror(errno)))") }
    return UInt16(bigEndian: addr.sin_port)
  }
}

/// A failover (`SpawnedCluster.failOver`) running on a thread of its own.
final class FailoverJob: @unchecked Sendable {
  let slot: Int
  private let lock = NSCondition()
  private var result: Result<(UInt16, UInt16), any Error>?

  init(_ cluster: SpawnedCluster, slot: Int) {
    self.slot = slot
    let t = Thread { [self] in
      let r = Result { try cluster.failOver(slot: slot) }
      lock.lock()
      result = r.map { ($0.killed, $0.promoted) }
      lock.broadcast()
      lock.unlock()
    }
    t.start()
  }

  /// The ports of the killed and the promoted node, or why it failed; nil while it runs.
  var outcome: Result<(UInt16, UInt16), any Error>? {
    lock.lock()
    defer { lock.unlock() }
    return result
  }

  func wait() {
    lock.lock()
    while result == nil { lock.wait() }
    lock.unlock()
  }
}

/// A Redis Cluster of the run's own: `primaries` cluster nodes (`SpawnedRedis`) and
/// `replicas` replicas of each, joined by `redis-cli --cluster create`, ready when every
/// node says `cluster_state:ok` and maps every slot, and every replica's link is up.
/// (Sendable for the failover thread: one failover at a time, and the run waits for it
/// before it stops the nodes.)
final class SpawnedCluster: @unchecked Sendable {
  let nodes: [SpawnedRedis]
  var url: String { "redis-cluster://" + nodes.map { "127.0.0.1:\($0.port)" }.joined(separator: ",") }

  init(dir: String, primaries: Int, replicas: Int = 0) throws {
    guard let cli = Self.redisCLI else { throw StressFailure("--redis-spawn-cluster: redis-cli is not on PATH") }
    nodes = try (0..<primaries * (1 + replicas)).map { _ in try SpawnedRedis(dir: dir, clusterNode: true) }
    let create = Process()
    create.executableURL = URL(fileURLWithPath: cli)
    create.arguments =
      ["--cluster", "create"] + nodes.map { "127.0.0.1:\($0.port)" } + [
        "--cluster-replicas", "\(replicas)", "--cluster-yes",
      ]
    create.standardInput = FileHandle.nullDevice
    create.standardOutput = FileHandle.nullDevice
    create.standardError = FileHandle.nullDevice
    try create.run()
    create.waitUntilExit()
    guard create.terminationStatus == 0 else {
      throw StressFailure("redis-cli --cluster create failed (status \(create.terminationStatus))")
    }
    try waitUntilSettled(seconds: 30, replicasPerPrimary: replicas)
  }

  private func client(_ port: UInt16) -> RedisClient {
    RedisClient(
      endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: port)),
      options: RedisOptions(connectTimeout: 0.5, commandTimeout: 1))
  }

  /// Waits until every node says the cluster is whole and each primary has
  /// `replicasPerPrimary` replicas whose links are up.
  private func waitUntilSettled(seconds: Double, replicasPerPrimary: Int) throws {
    let deadline = Date().addingTimeInterval(seconds)
    for n in nodes {
      let c = client(n.port)
      while true {
        let info = (try? c.call("CLUSTER", "INFO").string) ?? ""
        if info.contains("cluster_state:ok") && info.contains("cluster_slots_assigned:16384") {
          let repl = (try? c.call("INFO", "replication").string) ?? ""
          if repl.contains("role:master") && repl.contains("connected_slaves:\(replicasPerPrimary)\r") { break }
          if repl.contains("role:slave") && repl.contains("master_link_status:up") { break }
        }
        if Date() > deadline { throw StressFailure("the spawned cluster was not settled within \(Int(seconds)) s") }
        usleep(20_000)
      }
    }
  }

  /// The cluster as the first node that answers sees it.
  private func view() throws -> [ClusterNodeLine] {
    for n in nodes {
      if let lines = try? RedisClusterAdmin.nodes(client(n.port)) { return lines }
    }
    throw StressFailure("no node of the cluster answered CLUSTER NODES")
  }

  /// Fails over the shard of `slot` the hard way: SIGKILLs its primary, promotes a replica
  /// (`CLUSTER FAILOVER FORCE`: the majority of primaries agrees, the dead one is not
  /// asked), waits until it serves, then restarts the killed node on its port (empty,
  /// with its nodes file), which rejoins as the new primary's replica and syncs. Returns
  /// the ports of the killed and of the promoted node.
  func failOver(slot: Int) throws -> (killed: UInt16, promoted: UInt16) {
    let lines = try view()
    guard let primary = lines.first(where: { $0.isPrimary && $0.serves(slot: slot) }),
      let replica = lines.first(where: { !$0.isPrimary && !$0.isFailing && $0.primaryID == primary.id }),
      let primaryPort = primary.address?.port, let replicaPort = replica.address?.port,
      let victim = nodes.first(where: { $0.port == primaryPort })
    else { throw StressFailure("slot \(slot): no primary with a live replica") }
    victim.stop()
    let promoted = client(replicaPort)
    try promoted.call("CLUSTER", "FAILOVER", "FORCE")
    let deadline = Date().addingTimeInterval(15)
    while !((try? promoted.call("INFO", "replication").string)?.contains("role:master") ?? false) {
      if Date() > deadline { throw StressFailure("replica :\(replicaPort) was not promoted within 15 s") }
      usleep(10_000)
    }
    try victim.restart()
    try waitUntilSettled(seconds: 30, replicasPerPrimary: 1)
    return (primaryPort, replicaPort)
  }

  static var redisCLI: String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    return (path.split(separator: ":") + ["/usr/bin"]).map { "\($0)/redis-cli" }.first { access($0, X_OK) == 0 }
  }

  func stop() { for n in nodes { n.stop() } }
}

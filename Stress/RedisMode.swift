import CacheTools
import Foundation
import Glibc
import MappedCache
import MappedCacheRedis
import RedisFaultProxy
import RedisServers
import SystemCalls

/// The Redis mode's coordinator (`--redis URL` or `--redis-spawn`): starts a private
/// redis-server (or cluster) when asked, puts a fault proxy in front of each host when
/// black holes are asked for, writes version 1 of every key, starts `--procs` workers
/// per host (`WorkerFleet`; each host's processes share one file and elect its
/// invalidation holder), makes the faults (`RedisFaultSchedule`), samples Redis's
/// tracking connections, merges the workers' results and reports.
final class RedisCoordinator: @unchecked Sendable {
  private var o: StressOptions
  private let dir: ControlDirectory
  private let layout: RedisRunLayout
  private let fleet: WorkerFleet
  private var server: RedisServerProcess?
  private var cluster: RedisClusterProcesses?
  private var url = ""
  private var proxies: [FaultProxy] = []
  private var tracking: [Int] = []

  init(options: StressOptions) throws {
    o = options
    if o.seed == nil { o.seed = UInt64.random(in: 0...UInt64(Int64.max)) }
    let dir = try ControlDirectory.create()
    self.dir = dir
    let layout = RedisRunLayout(o, controlDir: dir.path)
    self.layout = layout
    fleet = WorkerFleet(count: o.hosts * o.procs, dir: dir) { _, _ in [] }
    fleet.arguments = { [unowned self] w, inc in self.workerArguments(w, inc) }
  }

  func run() -> Int32 {
    defer { cleanUp() }
    do {
      let report = try runMeasured()
      print(o.json ? report.json() : report.text(), terminator: o.json ? "\n" : "")
      let reasons = report.failureReasons
      return reasons.isEmpty
        ? 0 : Coordinator.fail("cache-stress: FAILED: \(reasons.joined(separator: "; "))", status: 1)
    } catch let e as InterruptedRun {
      return Coordinator.fail("cache-stress: \(e.description)", status: 130)
    } catch {
      return Coordinator.fail("error: \(error)", status: 1)
    }
  }

  private func progress(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }

  private func runMeasured() throws -> RedisRunReport {
    let direct = try startRedis()
    // Version 1 of every key, each logged as acknowledged when its pipeline's reply came.
    let log = try WriteLog(path: layout.logPath, keys: layout.keys)
    let t0 = Clock.nanoseconds()
    try prefill(direct, log)
    progress(String(format: "wrote version 1 of %d keys in %.2f s", o.keys, Double(Clock.nanoseconds() - t0) / 1e9))
    if o.redisCluster {
      let slots = Set((0..<o.keys).map { ClusterSlots.slot(layout.keyPrefix + layout.keys[$0]) })
      progress("the run's keys fall in \(slots.count) of the cluster's \(ClusterSlots.count) slots")
    }
    try fleet.startAll()
    try fleet.waitUntilReady()
    let observers = try observe(direct)
    defer { for obs in observers { obs.close() } }
    let before = observers.map(\.statistics)
    // Every host's holder has confirmed a heartbeat: Redis sees one tracking connection each.
    if let n = trackingConnections(direct) { tracking.append(n) }
    let start = Clock.nanoseconds() + 20_000_000
    let end = start + UInt64(o.duration * 1e9)
    try dir.writeGo(start: start, end: end)
    let targets = RedisFaultTargets(
      layout: layout, fleet: fleet, observers: observers, proxies: proxies, server: server, cluster: cluster,
      direct: direct)
    let schedule = try RedisFaultSchedule(o, targets, start: start, progress: { [unowned self] in progress($0) })
    let maxHeartbeatAge = try watch(schedule, observers, direct, start: start, end: end)
    schedule.waitForFailover()
    // The hosts' figures as the run ends: when the workers close, each host's role passes
    // from one closing process to the next, which is not part of the run.
    let after = observers.map(\.statistics)
    schedule.lift()
    try fleet.waitForAll(deadline: end + 30_000_000_000)
    var merged = merge()
    fleet.noteMissingResults { RedisWorkerResult.read(dir.path, $0, $1)?.final == true }
    merged.messages += fleet.failures
    try collectWriteStaleness(log, into: &merged)
    return RedisRunReport(
      options: o, url: server == nil ? url : "\(url) (spawned)", merged: merged, before: before, after: after,
      faults: schedule.faults, tracking: tracking, maxHeartbeatAgeMs: maxHeartbeatAge,
      toolErrors: fleet.failures.count, seconds: o.duration)
  }

  /// Starts the run's redis-server or cluster when asked, checks that Redis answers and
  /// puts the fault proxies in place; a client of Redis for the coordinator's own commands.
  private func startRedis() throws -> RedisClient {
    if o.redisSpawn {
      let s = try RedisServerProcess(dir: dir.path)
      server = s
      url = s.url
      progress("started redis-server (pid \(s.pid)) on \(s.url)")
    } else if o.redisSpawnCluster {
      let replicas = o.failoverEvery == nil ? 0 : 1
      let c = try RedisClusterProcesses(
        dir: dir.path, primaries: 3, replicas: replicas, nodeArguments: ["--cluster-node-timeout", "5000"])
      cluster = c
      url = c.url()
      progress("started a Redis Cluster of 3 primaries\(replicas == 0 ? "" : " with a replica each") on \(url)")
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
    return direct
  }

  /// Observers of each host's file (they do not stand for the role), once every host's
  /// holder has confirmed a heartbeat (waiting up to 20 s).
  private func observe(_ direct: RedisClient) throws -> [NearCache<[UInt8]>] {
    let observers = try (0..<o.hosts).map { h in
      try NearCache<[UInt8]>(
        path: layout.hostPath(h),
        remote: RedisCache<[UInt8]>(client: direct, keyPrefix: layout.keyPrefix),
        maxStaleness: .nanoseconds(Int64(o.maxStaleness * 1e9)),
        options: NearCacheOptions(capacity: o.hostCapacity, standsForHolder: false))
    }
    let ready = Clock.nanoseconds() + 20_000_000_000
    while observers.contains(where: { !$0.statistics.fenceFresh }) {
      try fleet.checkInterrupted()
      if Clock.nanoseconds() > ready {
        throw StressFailure("a host's invalidation holder did not confirm a heartbeat within 20 s")
      }
      SystemCall.sleep(microseconds: 2000)
    }
    return observers
  }

  /// The measured run: faults at their moments, unexpected exits noted, each host's
  /// fence age sampled, progress once a second, until `end`. Returns the oldest each
  /// host's fence got.
  private func watch(
    _ schedule: RedisFaultSchedule, _ observers: [NearCache<[UInt8]>], _ direct: RedisClient, start: UInt64,
    end: UInt64
  ) throws -> [UInt64] {
    var maxHeartbeatAge = [UInt64](repeating: 0, count: o.hosts)
    var nextProgress = start + 1_000_000_000
    while true {
      let now = Clock.nanoseconds()
      try fleet.checkInterrupted()
      if now >= end { break }
      schedule.tick(now: now)
      fleet.noteUnexpectedExits(end: end)
      // How stale each host's fence got: a holder descheduled, stopped, killed or cut off
      // leaves it aging, and until it is maxStaleness old reads still trust the file.
      for (h, obs) in observers.enumerated() {
        if let age = obs.statistics.heartbeatAgeMilliseconds.first ?? nil {
          maxHeartbeatAge[h] = max(maxHeartbeatAge[h], age)
        }
      }
      if now >= nextProgress {
        if let n = trackingConnections(direct) { tracking.append(n) }
        showProgress(seconds: Double(now - start) / 1e9)
        while nextProgress <= now { nextProgress += 1_000_000_000 }
      }
      SystemCall.sleep(microseconds: 2000)
    }
    return maxHeartbeatAge
  }

  private func showProgress(seconds: Double) {
    let c = merge().counters
    progress(
      String(
        format: "[%5.1fs] %@ reads/s  %@ writes/s  stale %llu (max %.2f ms)  violations %llu  tracking %@",
        seconds, Fmt.count(Double(c.reads) / seconds), Fmt.count(Double(c.writes) / seconds), c.staleReads,
        Double(c.maxLatenessNs) / 1e6, c.violations, tracking.last.map { "\($0)" } ?? "?"))
  }

  private func prefill(_ client: RedisClient, _ log: WriteLog) throws {
    let px = o.ttl.map { ["PX", "\(Int(($0 * 1000).rounded(.up)))"] } ?? []
    var k = 0
    while k < o.keys {
      try fleet.checkInterrupted()
      let chunk = k..<min(o.keys, k + 1000)
      let commands = chunk.map { i in
        [Array("SET".utf8), Array((layout.keyPrefix + layout.keys[i]).utf8), layout.value(o, key: i, version: 1)]
          + px.map { Array($0.utf8) }
      }
      for reply in try client.pipeline(commands) where reply.string != "OK" {
        throw StressFailure("Redis refused a SET of the prefill: \(reply)")
      }
      let ack = Clock.nanoseconds()
      for i in chunk {
        var ring = [UInt64](repeating: 0, count: WriteLog.ringSize * 2)
        try log.record(i, version: 1, ack: ack, ring: &ring)
      }
      k = chunk.upperBound
    }
  }

  /// Each write's staleness, over the writes some read saw stale (the versions after 1).
  private func collectWriteStaleness(_ log: WriteLog, into merged: inout RedisMerged) throws {
    let bound = RedisWorker.boundNs(o)
    for k in 0..<o.keys {
      guard let last = try log.latest(k)?.version, last >= 2 else { continue }
      for v in 2...last {
        merged.writesLogged += 1
        guard let late = try log.staleness(k, version: v) else { continue }
        merged.writeStaleHist.record(late)
        merged.writeStaleMaxNs = max(merged.writeStaleMaxNs, late)
        if late > bound { merged.writesPastBound += 1 }
      }
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

  /// Worker `w`'s arguments: its host's Redis URL, and none of the coordinator's own jobs.
  private func workerArguments(_ w: Int, _ inc: Int) -> [String] {
    var wo = o
    wo.redisURL = hostURL(layout.host(ofWorker: w))
    wo.redisSpawn = false
    wo.redisSpawnCluster = false
    wo.reshardEvery = nil
    wo.failoverEvery = nil
    wo.killRedisEvery = nil
    return OptionTable.workerArguments(
      wo, worker: w, incarnation: inc, controlDir: dir.path, coordinator: SystemCall.processID())
  }

  /// Clients with tracking on (flag `t` in CLIENT LIST).
  private func trackingConnections(_ c: RedisClient) -> Int? {
    guard let list = try? c.call("CLIENT", "LIST").string else { return nil }
    return list.split(separator: "\n").filter { line in
      line.split(separator: " ").contains { $0.hasPrefix("flags=") && $0.dropFirst(6).contains("t") }
    }.count
  }

  private func merge() -> RedisMerged {
    var m = RedisMerged()
    fleet.forEachIncarnation { w, inc in
      guard let r = RedisWorkerResult.read(dir.path, w, inc) else { return }
      m.counters.add(r.counters)
      m.getHist.merge(LatencyHistogram(sparse: r.getHist))
      m.setHist.merge(LatencyHistogram(sparse: r.setHist))
      m.staleHist.merge(LatencyHistogram(sparse: r.staleHist))
      for msg in r.messages where m.messages.count < 40 { m.messages.append("worker \(w).\(inc): \(msg)") }
    }
    return m
  }

  private func cleanUp() {
    fleet.stopAll()
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

/// Every worker's counters and histograms, summed.
struct RedisMerged {
  var counters = RedisCounters()
  var getHist = LatencyHistogram()
  var setHist = LatencyHistogram()
  var staleHist = LatencyHistogram()
  /// Staleness of each write that some read saw stale: the latest such read's lateness.
  var writeStaleHist = LatencyHistogram()
  /// The largest of those, and how many passed the bound (`RedisWorker.boundNs`). From
  /// the shared write log, so a worker SIGKILLed before it published its counters still
  /// counts: its reads' lateness reached the log when they were judged.
  var writeStaleMaxNs: UInt64 = 0
  var writesPastBound: UInt64 = 0
  var writesLogged: UInt64 = 0
  var messages: [String] = []
}

import Foundation
import Glibc
import MappedCache
import MappedCacheRedis
import RedisFaultProxy
import Synchronization
import TestSupport

/// `mc-test-helper near-bench URL [READS] [WRITES]` (release build): near-cache hit reads
/// against plain `SharedCache` reads of the same keys and values (interleaved rounds), a
/// direct Redis GET against a 90 % hit-ratio mix (interleaved rounds), and the staleness
/// of writes through one host read on three others.
enum NearBench {
  static func now() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
  }

  static func percentile(_ xs: [Double], _ p: Double) -> Double {
    guard !xs.isEmpty else { return .nan }
    let s = xs.sorted()
    return s[min(s.count - 1, Int(Double(s.count - 1) * p))]
  }

  static func run(_ args: [String]) throws -> Int32 {
    guard let url = args.first else { return 64 }
    let reads = args.count > 1 ? Int(args[1]) ?? 2_000_000 : 2_000_000
    let writes = args.count > 2 ? Int(args[2]) ?? 500 : 500
    let heartbeat = args.count > 3 ? (Double(args[3]) ?? 20) / 1000 : 0.02
    let bench = try Bench(url: url)
    defer { bench.removeFiles() }
    let nearNs = try bench.hitReads(reads)
    try bench.directAndMix(nearNs: nearNs)
    try bench.staleness(writes: writes, heartbeat: heartbeat)
    bench.near?.close()
    _ = try? bench.remote.removeAllKeys()
    return 0
  }

  /// `near-bench`'s run: its files, keys and clients.
  final class Bench {
    let url: String
    let tag = "\(getpid())"
    var paths: [String] = []
    let prefix: String
    let keys = (0..<1000).map { "user:\($0)" }
    let value = String(repeating: "v", count: 40)
    let raw: RedisClient
    let remote: RedisCache<String>
    var near: NearCache<String>?

    init(url: String) throws {
      self.url = url
      prefix = "nb\(tag):"
      raw = try RedisClient(url: url)
      remote = try RedisCache<String>(url: url, keyPrefix: prefix)
    }

    func path(_ name: String) -> String {
      let p = "/dev/shm/mc-nearbench-\(tag)-\(name).mcache"
      paths.append(p)
      return p
    }

    func removeFiles() {
      for p in paths {
        unlink(p)
        unlink(p + ".holder")
      }
    }

    /// 1. Hit reads: plain SharedCache against NearCache, same keys, same values; the
    /// near cache's time per read.
    func hitReads(_ reads: Int) throws -> Double {
      let plain = try SharedCache<String>(path: path("plain"), capacity: 16 << 20)
      for k in keys { try plain.setObject(value, forKey: k) }
      let near = try NearCache<String>(
        path: path("near"), remote: remote, maxStaleness: .milliseconds(500),
        options: NearCacheOptions(capacity: 16 << 20))
      self.near = near
      _ = try raw.pipeline(keys.map { [Array("SET".utf8), Array((prefix + $0).utf8), Array(value.utf8)] })
      while !near.statistics.fenceFresh { usleep(1000) }
      usleep(50_000)  // the SETs' own invalidations arrive before the warm-up fills
      for k in keys { _ = try near.object(forKey: k) }
      let keys = self.keys
      func timeReads(_ body: (String) throws -> String?) rethrows -> Double {
        var sink = 0
        let t0 = now()
        for i in 0..<reads { sink &+= try body(keys[i % keys.count])?.utf8.count ?? 0 }
        let dt = Double(now() - t0) / Double(reads)
        if sink == 42 { print("") }
        return dt
      }
      // Interleaved rounds, best of seven each, so that neither side gets the quiet moments.
      let fetchesBefore = near.statistics.remoteFetches
      var plainNs = Double.infinity
      var nearNs = Double.infinity
      for _ in 0..<7 {
        plainNs = min(plainNs, try timeReads { try plain.object(forKey: $0) })
        nearNs = min(nearNs, try timeReads { try near.object(forKey: $0) })
      }
      let fetchesAfter = near.statistics.remoteFetches
      print(
        String(
          format:
            "hit reads: SharedCache %.1f ns, NearCache %.1f ns (%.2fx of plain; %d remote fetches during the timed reads)",
          plainNs, nearNs, plainNs / nearNs, Int(fetchesAfter - fetchesBefore)))
      return nearNs
    }

    /// 2 and 3. A direct GET per read from one client, and a 90 % hit ratio (one read in
    /// ten a key this host has never read: a fill), in interleaved rounds, best of each.
    func directAndMix(nearNs: Double) throws {
      guard let near else { return }
      let rounds = 5
      let getCount = 4000
      let mixReads = 20_000
      let cold = (0..<(rounds * mixReads / 10)).map { "cold:\($0)" }
      for chunk in stride(from: 0, to: cold.count, by: 1000) {
        _ = try raw.pipeline(
          cold[chunk..<min(cold.count, chunk + 1000)].map {
            [Array("SET".utf8), Array((prefix + $0).utf8), Array(value.utf8)]
          })
      }
      usleep(100_000)
      var getNs = Double.infinity
      var mixNs = Double.infinity
      var c = 0
      for _ in 0..<rounds {
        var t0 = now()
        for i in 0..<getCount { _ = try remote.object(forKey: keys[i % keys.count]) }
        getNs = min(getNs, Double(now() - t0) / Double(getCount))
        t0 = now()
        for i in 0..<mixReads {
          if i % 10 == 9 {
            _ = try near.object(forKey: cold[c])
            c += 1
          } else {
            _ = try near.object(forKey: keys[i % keys.count])
          }
        }
        mixNs = min(mixNs, Double(now() - t0) / Double(mixReads))
      }
      print(
        String(
          format: "direct Redis GET: %.1f µs (%.0f reads/s per client); NearCache hit: %.0fx faster",
          getNs / 1000, 1e9 / getNs, getNs / nearNs))
      print(String(format: "90%% hit mix: %.2f µs per read (%.1fx a direct GET)", mixNs / 1000, getNs / mixNs))
    }

    /// 4. Staleness: writes through host 0, reads on hosts 1-3 (separate files, each with
    /// its holder).
    func staleness(writes: Int, heartbeat: Double) throws {
      let hosts = try (0..<4).map { i in
        try NearCache<String>(
          path: path("host\(i)"), remote: RedisCache<String>(url: url, keyPrefix: prefix),
          maxStaleness: .milliseconds(500),
          options: NearCacheOptions(capacity: 4 << 20, heartbeatInterval: heartbeat))
      }
      for h in hosts { while !h.statistics.fenceFresh { usleep(1000) } }
      // 100 keys written in turn: in front of a cluster the writes spread over its primaries.
      let probes = (0..<100).map { "stale-probe-\($0)" }
      for key in probes { try hosts[0].setObject("0", forKey: key) }
      usleep(50_000)
      var staleness: [Double] = []
      var checked = 0
      for w in 1...writes {
        let v = String(w)
        let key = probes[w % probes.count]
        try hosts[0].setObject(v, forKey: key)
        let ack = now()
        var pending = Set(1..<hosts.count)
        while !pending.isEmpty {
          for h in pending {
            checked += 1
            if try hosts[h].object(forKey: key) == v { pending.remove(h) }
          }
          if now() - ack > 2_000_000_000 { break }
          sched_yield()  // two cores: leave the holders room to run
        }
        staleness.append(Double(now() - ack) / 1000)
        usleep(2000)
      }
      print(
        String(
          format:
            "staleness over %d writes (host 0 writes, hosts 1-3 read; %d reads checked): p50 %.0f µs, p99 %.0f µs, max %.0f µs",
          writes, checked, percentile(staleness, 0.5), percentile(staleness, 0.99), staleness.max() ?? .nan))
      for h in hosts { h.close() }
    }
  }

  /// `mc-test-helper near-stale-check URL [SECONDS] [FAULT_EVERY_MS] [kill|partition|reshard|failover]`:
  /// writes through host 0 every millisecond, reads on hosts 1-3 (whose holders are
  /// `mapped-cache agent` processes), and every FAULT_EVERY_MS makes a fault on one host:
  /// `kill` SIGKILLs its agent (restarting it) or CLIENT KILLs its tracking connection;
  /// `partition` puts the host behind a proxy that black-holes, or resets, every
  /// connection between it and Redis for 400 ms (twice maxStaleness); `reshard` (a
  /// `redis-cluster://` URL) moves the probe key's slot to the next primary; `failover` (a
  /// cluster with replicas) promotes a replica of the probe's primary. Every read is
  /// checked: a value whose successor was acknowledged more than maxStaleness (200 ms) +
  /// 50 ms before the read began is a violation.
  static func staleCheck(_ args: [String]) throws -> Int32 {
    guard let url = args.first else { return 64 }
    let seconds = args.count > 1 ? Double(args[1]) ?? 10 : 10
    let faultEveryMs = args.count > 2 ? Int(args[2]) ?? 300 : 300
    let kind = args.count > 3 ? StaleCheck.Fault(rawValue: args[3]) ?? .kill : .kill
    guard let check = try StaleCheck(url: url, fault: kind) else { return 64 }
    defer { check.stop() }
    try check.startAgents()
    let violations = try check.run(seconds: seconds, faultEveryMs: faultEveryMs)
    return violations == 0 ? 0 : 1
  }

  /// `near-stale-check`'s run: the hosts, their agents and proxies, and the figures.
  final class StaleCheck {
    enum Fault: String {
      case kill, partition, reshard, failover
    }

    let url: String
    let fault: Fault
    let boundNs: UInt64 = 250_000_000
    let prefix = "sc\(getpid()):"
    let paths = (0..<4).map { "/dev/shm/mc-stalecheck-\(getpid())-\($0).mcache" }
    let tool = ((CommandLine.arguments[0] as NSString).deletingLastPathComponent as NSString).appendingPathComponent(
      "mapped-cache")
    /// In partition mode each reader host reaches Redis through its own proxy.
    var proxies: [Int: FaultProxy] = [:]
    var faultEnds: [Int: UInt64] = [:]
    var agents: [Int: ChildProcess] = [:]
    var hosts: [NearCache<String>] = []
    var checked = 0
    var violations = 0
    var errors = 0
    var faults = 0
    var worstNs: UInt64 = 0

    init?(url: String, fault: Fault) throws {
      self.url = url
      self.fault = fault
      if fault == .partition {
        guard case .tcp(_, let redisPort) = try RedisEndpoint(url: url).address else { return nil }
        proxies = Dictionary(uniqueKeysWithValues: try (1...3).map { ($0, try FaultProxy(to: redisPort)) })
      }
    }

    func hostURL(_ h: Int) -> String { proxies[h]?.url ?? url }

    func spawnAgent(_ h: Int) throws {
      agents[h] = try ChildProcess(
        tool,
        [
          "agent", paths[h], "--redis", hostURL(h), "--prefix", prefix, "--max-staleness", "0.2",
          "--capacity", "4MiB",
        ], stdout: .discarded, stderr: .discarded)
    }

    /// The agents of hosts 1-3, then the four hosts' caches (host 0 writes).
    func startAgents() throws {
      for h in 1...3 { try spawnAgent(h) }
      usleep(300_000)
      let options = NearCacheOptions(capacity: 4 << 20, standsForHolder: false)
      hosts = try paths.enumerated().map { h, path in
        try NearCache<String>(
          path: path,
          remote: RedisCache<String>(
            url: hostURL(h), keyPrefix: prefix,
            options: RedisOptions(connectTimeout: 0.3, commandTimeout: 0.3)),
          maxStaleness: .milliseconds(200), options: options)
      }
      for h in hosts[1...] { while !h.statistics.fenceFresh { usleep(1000) } }
    }

    func stop() {
      for (_, p) in agents {
        p.kill()
        p.wait()
      }
      for p in paths {
        unlink(p)
        unlink(p + ".holder")
      }
      for p in proxies.values { p.stop() }
    }

    /// Writes every millisecond for `seconds`, checking every read of hosts 1-3 against
    /// the acknowledgements; the violations.
    func run(seconds: Double, faultEveryMs: Int) throws -> Int {
      let capacity = Int(seconds * 2000) + 10_000
      let acks = UnsafeMutablePointer<Atomic<UInt64>>.allocate(capacity: capacity)
      for i in 0..<capacity { (acks + i).initialize(to: Atomic<UInt64>(0)) }
      defer { acks.deallocate() }
      let end = now() + UInt64(seconds * 1e9)
      let writerDone = try startWriter(acks, capacity: capacity, until: end)
      var nextFault = now() + UInt64(faultEveryMs) * 1_000_000
      let raw = try RedisClient(url: url)
      while now() < end {
        checkReads(acks, capacity: capacity)
        for (h, end) in faultEnds where now() >= end {
          proxies[h]?.mode = .pass
          faultEnds[h] = nil
        }
        if now() >= nextFault {
          try makeFault(raw)
          faults += 1
          nextFault = now() + UInt64(faultEveryMs) * 1_000_000
        }
      }
      writerDone.wait()
      report()
      for h in hosts { h.close() }
      _ = try? hosts[0].remote.removeAllKeys()
      return violations
    }

    /// Host 0's writer thread: a new value of "probe" every millisecond, each one's
    /// acknowledgement time stored at its number.
    func startWriter(_ acks: UnsafeMutablePointer<Atomic<UInt64>>, capacity: Int, until end: UInt64) throws
      -> DispatchSemaphore
    {
      let writer = hosts[0]
      try writer.setObject("0", forKey: "probe")
      acks.pointee.store(now(), ordering: .releasing)
      let writerDone = DispatchSemaphore(value: 0)
      nonisolated(unsafe) let acksShared = acks
      Thread.detachNewThread {
        var seq = 1
        while now() < end && seq < capacity - 1 {
          if (try? writer.setObject(String(seq), forKey: "probe")) != nil {
            (acksShared + seq).pointee.store(now(), ordering: .releasing)
            seq += 1
          }
          usleep(1000)
        }
        writerDone.signal()
      }
      return writerDone
    }

    /// One read on each of hosts 1-3, judged against the acknowledgement of the value's
    /// successor.
    func checkReads(_ acks: UnsafeMutablePointer<Atomic<UInt64>>, capacity: Int) {
      for h in 1...3 {
        let t = now()
        guard let s = try? hosts[h].object(forKey: "probe"), let v = Int(s) else {
          errors += 1
          continue
        }
        checked += 1
        let successor = v + 1 < capacity ? (acks + v + 1).pointee.load(ordering: .acquiring) : 0
        if successor != 0 && t > successor {
          worstNs = max(worstNs, t - successor)
          if t - successor > boundNs { violations += 1 }
        }
      }
    }

    /// The next fault, on host 1 + faults % 3.
    func makeFault(_ raw: RedisClient) throws {
      let h = 1 + faults % 3
      switch fault {
      case .failover:
        do { try ClusterChaos.failover(ClusterSlots.slot(prefix + "probe"), raw) } catch {
          print("failover failed: \(error)")
        }
      case .reshard:
        do { try ClusterChaos.moveSlot(ClusterSlots.slot(prefix + "probe"), raw) } catch {
          print("reshard failed: \(error)")
        }
      case .partition:
        if faultEnds[h] == nil {
          proxies[h]?.mode = faults % 2 == 0 ? .blackHole : .reset
          faultEnds[h] = now() + 400_000_000
        }
      case .kill:
        if faults % 2 == 0, let p = agents[h] {
          p.kill()
          p.wait()
          try spawnAgent(h)
        } else if let pid = hosts[h].statistics.holderPID {
          _ = try? raw.call(
            "CLIENT", "KILL", "USER", "default", "SKIPME", "yes", "ID",
            String(NearBench.clientID(raw, name: "mc-near-holder-\(pid)") ?? 0))
        }
      }
    }

    func report() {
      let st = hosts[1].statistics
      let kinds: String
      switch fault {
      case .failover: kinds = "the probe's primary failed over"
      case .reshard: kinds = "the probe's slot moved"
      case .partition: kinds = "400 ms black hole / reset"
      case .kill: kinds = "agent SIGKILL / CLIENT KILL"
      }
      let cluster = fault == .reshard || fault == .failover
      print(
        "stale check: \(checked) reads checked on 3 hosts, \(violations) violations of maxStaleness 200 ms + 50 ms, "
          + "worst lateness \(String(format: "%.1f", Double(worstNs) / 1e6)) ms; \(faults) faults (\(kinds)); "
          + "\(errors) reads failed; host 1: \(st.holderChanges) holder changes, \(st.reconnects) reconnects, "
          + "\(st.fenceMisses) fence misses"
          + (cluster
            ? "; MOVED \(st.movedRedirects), ASK \(st.askRedirects), slot buckets dropped \(st.slotBucketsDropped)"
            : ""))
    }
  }

  /// The id of the client called `name` in CLIENT LIST.
  static func clientID(_ c: RedisClient, name: String) -> Int? {
    guard let list = try? c.call("CLIENT", "LIST").string else { return nil }
    for line in list.split(separator: "\n") where line.contains("name=\(name) ") {
      for f in line.split(separator: " ") where f.hasPrefix("id=") { return Int(f.dropFirst(3)) }
    }
    return nil
  }
}

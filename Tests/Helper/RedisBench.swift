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
    let tag = "\(getpid())"
    let dir = "/dev/shm"
    var paths: [String] = []
    defer {
      for p in paths {
        unlink(p)
        unlink(p + ".holder")
      }
    }
    func path(_ name: String) -> String {
      let p = "\(dir)/mc-nearbench-\(tag)-\(name).mcache"
      paths.append(p)
      return p
    }
    let prefix = "nb\(tag):"
    let keys = (0..<1000).map { "user:\($0)" }
    let value = String(repeating: "v", count: 40)
    let raw = try RedisClient(url: url)

    // 1. Hit reads: plain SharedCache against NearCache, same keys, same values.
    let plain = try SharedCache<String>(path: path("plain"), capacity: 16 << 20)
    for k in keys { try plain.setObject(value, forKey: k) }
    let remote = try RedisCache<String>(url: url, keyPrefix: prefix)
    let near = try NearCache<String>(
      path: path("near"), remote: remote, maxStaleness: .milliseconds(500),
      options: NearCacheOptions(capacity: 16 << 20))
    _ = try raw.pipeline(keys.map { [Array("SET".utf8), Array((prefix + $0).utf8), Array(value.utf8)] })
    while !near.statistics.fenceFresh { usleep(1000) }
    usleep(50_000)  // the SETs' own invalidations arrive before the warm-up fills
    for k in keys { _ = try near.object(forKey: k) }
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

    // 2 and 3. A direct GET per read from one client, and a 90 % hit ratio (one read in
    // ten a key this host has never read: a fill), in interleaved rounds, best of each.
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

    // 4. Staleness: writes through host 0, reads on hosts 1-3 (separate files, each with its holder).
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
    near.close()
    _ = try? remote.removeAllKeys()
    return 0
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
    let partition = args.count > 3 && args[3] == "partition"
    let reshard = args.count > 3 && args[3] == "reshard"
    let failover = args.count > 3 && args[3] == "failover"
    // In partition mode each reader host reaches Redis through its own proxy.
    var proxies: [Int: FaultProxy] = [:]
    if partition {
      guard case .tcp(_, let redisPort) = try RedisEndpoint(url: url).address else { return 64 }
      proxies = Dictionary(uniqueKeysWithValues: try (1...3).map { ($0, try FaultProxy(to: redisPort)) })
    }
    defer { for p in proxies.values { p.stop() } }
    func hostURL(_ h: Int) -> String { proxies[h]?.url ?? url }
    var faultEnds: [Int: UInt64] = [:]
    let boundNs: UInt64 = 250_000_000
    let tag = "\(getpid())"
    let prefix = "sc\(tag):"
    let paths = (0..<4).map { "/dev/shm/mc-stalecheck-\(tag)-\($0).mcache" }
    let tool = ((CommandLine.arguments[0] as NSString).deletingLastPathComponent as NSString).appendingPathComponent(
      "mapped-cache")
    var agents: [Int: ChildProcess] = [:]
    func spawnAgent(_ h: Int) throws {
      agents[h] = try ChildProcess(
        tool,
        [
          "agent", paths[h], "--redis", hostURL(h), "--prefix", prefix, "--max-staleness", "0.2",
          "--capacity", "4MiB",
        ], stdout: .discarded, stderr: .discarded)
    }
    defer {
      for (_, p) in agents {
        p.kill()
        p.wait()
      }
      for p in paths {
        unlink(p)
        unlink(p + ".holder")
      }
    }
    for h in 1...3 { try spawnAgent(h) }
    usleep(300_000)
    let options = NearCacheOptions(capacity: 4 << 20, standsForHolder: false)
    let hosts = try paths.enumerated().map { h, path in
      try NearCache<String>(
        path: path,
        remote: RedisCache<String>(
          url: hostURL(h), keyPrefix: prefix,
          options: RedisOptions(connectTimeout: 0.3, commandTimeout: 0.3)),
        maxStaleness: .milliseconds(200), options: options)
    }
    for h in hosts[1...] { while !h.statistics.fenceFresh { usleep(1000) } }
    let capacity = Int(seconds * 2000) + 10_000
    let acks = UnsafeMutablePointer<Atomic<UInt64>>.allocate(capacity: capacity)
    for i in 0..<capacity { (acks + i).initialize(to: Atomic<UInt64>(0)) }
    defer { acks.deallocate() }
    func ack(_ i: Int) -> UInt64 { (acks + i).pointee.load(ordering: .acquiring) }
    let end = now() + UInt64(seconds * 1e9)
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
    var checked = 0
    var violations = 0
    var errors = 0
    var faults = 0
    var worstNs: UInt64 = 0
    var nextFault = now() + UInt64(faultEveryMs) * 1_000_000
    let raw = try RedisClient(url: url)
    while now() < end {
      for h in 1...3 {
        let t = now()
        guard let s = try? hosts[h].object(forKey: "probe"), let v = Int(s) else {
          errors += 1
          continue
        }
        checked += 1
        let successor = v + 1 < capacity ? ack(v + 1) : 0
        if successor != 0 && t > successor {
          worstNs = max(worstNs, t - successor)
          if t - successor > boundNs { violations += 1 }
        }
      }
      for (h, end) in faultEnds where now() >= end {
        proxies[h]?.mode = .pass
        faultEnds[h] = nil
      }
      if now() >= nextFault {
        let h = 1 + faults % 3
        if failover {
          do { try ClusterChaos.failover(ClusterSlots.slot(prefix + "probe"), raw) } catch {
            print("failover failed: \(error)")
          }
        } else if reshard {
          do { try ClusterChaos.moveSlot(ClusterSlots.slot(prefix + "probe"), raw) } catch {
            print("reshard failed: \(error)")
          }
        } else if partition {
          if faultEnds[h] == nil {
            proxies[h]?.mode = faults % 2 == 0 ? .blackHole : .reset
            faultEnds[h] = now() + 400_000_000
          }
        } else if faults % 2 == 0, let p = agents[h] {
          p.kill()
          p.wait()
          try spawnAgent(h)
        } else if let pid = hosts[h].statistics.holderPID {
          _ = try? raw.call(
            "CLIENT", "KILL", "USER", "default", "SKIPME", "yes", "ID",
            String(clientID(raw, name: "mc-near-holder-\(pid)") ?? 0))
        }
        faults += 1
        nextFault = now() + UInt64(faultEveryMs) * 1_000_000
      }
    }
    writerDone.wait()
    let st = hosts[1].statistics
    let kinds =
      failover
      ? "the probe's primary failed over"
      : reshard ? "the probe's slot moved" : partition ? "400 ms black hole / reset" : "agent SIGKILL / CLIENT KILL"
    print(
      "stale check: \(checked) reads checked on 3 hosts, \(violations) violations of maxStaleness 200 ms + 50 ms, "
        + "worst lateness \(String(format: "%.1f", Double(worstNs) / 1e6)) ms; \(faults) faults (\(kinds)); "
        + "\(errors) reads failed; host 1: \(st.holderChanges) holder changes, \(st.reconnects) reconnects, "
        + "\(st.fenceMisses) fence misses"
        + (reshard || failover
          ? "; MOVED \(st.movedRedirects), ASK \(st.askRedirects), slot buckets dropped \(st.slotBucketsDropped)" : ""))
    for h in hosts { h.close() }
    _ = try? hosts[0].remote.removeAllKeys()
    return violations == 0 ? 0 : 1
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

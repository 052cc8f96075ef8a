import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import TestSupport
import Testing

@testable import MappedCacheRedis

/// Fleet-wide single flight: 2 hosts (files) × 4 processes (mc-test-helper near-fleet)
/// in front of the suite's cluster compute a missing key once; computations are counted
/// with INCR in Redis.
@Suite(.enabled(if: RedisClusterFixture.available, "redis-server or redis-cli is not installed"), .serialized)
struct FleetLeaseTests {
  let cluster: RedisClusterFixture

  init() throws { cluster = try RedisClusterFixture.shared.get() }

  @Test func leaseKeysShareTheDataKeysSlot() {
    for key in ["users:1", "a{tag}b", "{x}", "a{b", "x{y}{}z"] {
      let k = Array(key.utf8)
      let lease = FleetLease.leaseKey(for: k)
      #expect(lease.map { ClusterSlots.slot($0) } == ClusterSlots.slot(k), "\(key)")
      #expect(FleetLease.staleKey(for: k).map { ClusterSlots.slot($0) } == ClusterSlots.slot(k), "\(key)")
    }
    // A `}` in a key without a tag: no lease key shares its slot, so no fleet lease.
    for key in ["a}b", "{}q"] { #expect(FleetLease.leaseKey(for: Array(key.utf8)) == nil, "\(key)") }
  }

  @Test func aComputerWhoseLeaseWasLostDoesNotOverwrite() throws {
    let c = try RedisClient(url: cluster.url())
    let key = Array("fllost\(getpid()):k".utf8)
    let lease = try #require(FleetLease.leaseKey(for: key))
    let a = FleetLease.ownerToken()
    let b = FleetLease.ownerToken()
    #expect(a != b)
    #expect(try FleetLease.acquire(c, lease, a, milliseconds: 60_000))
    #expect(try !FleetLease.acquire(c, lease, b, milliseconds: 60_000), "held by a")
    // a's lease runs out (deleted here, as its expiry would); b takes over and stores.
    try c.call([Array("DEL".utf8), lease])
    #expect(try FleetLease.acquire(c, lease, b, milliseconds: 60_000))
    #expect(try FleetLease.store(c, key: key, lease: lease, owner: b, bytes: Array("B".utf8), px: 60_000))
    // a finishes late: its store is refused, b's value stays; so does a later plain write.
    #expect(try !FleetLease.store(c, key: key, lease: lease, owner: a, bytes: Array("A".utf8), px: 0))
    #expect(try c.call([Array("GET".utf8), key]).string == "B")
    try c.call([Array("SET".utf8), key, Array("C".utf8)])
    #expect(try !FleetLease.store(c, key: key, lease: lease, owner: b, bytes: Array("B2".utf8), px: 0))
    #expect(try c.call([Array("GET".utf8), key]).string == "C")
    #expect(try c.call([Array("EXISTS".utf8), lease]) == .integer(0), "the winner's store removed the lease")
  }

  /// Two hosts in front of the cluster under one key prefix (`name` and this process's
  /// id), a client of the cluster, and a counter there that computations INCR.
  struct Contenders {
    let prefix: String
    let a: NearCache<String>
    let b: NearCache<String>
    let raw: RedisClient
    let counter: String

    init(_ name: String, _ cluster: RedisClusterFixture) throws {
      prefix = "\(name)\(getpid()):"
      a = try makeClusterHost(cluster, prefix: prefix)
      b = try makeClusterHost(cluster, prefix: prefix)
      raw = try RedisClient(url: cluster.url())
      counter = "\(name)count\(getpid())"
    }

    /// A computation that counts itself, then takes `nanoseconds`, and gives `value`.
    func counted(_ value: String, taking nanoseconds: UInt64 = 0) -> @Sendable () async throws -> String {
      { [raw, counter] in
        try raw.call("INCR", counter)
        if nanoseconds > 0 { try await Task.sleep(nanoseconds: nanoseconds) }
        return value
      }
    }

    /// Whether a computation has started (so its host holds the lease), within 20 s.
    func computing() async throws -> Bool {
      try await eventuallyAsync(20) { (try? raw.call("GET", counter).string) == "1" }
    }
  }

  @Test func aSlowComputerKeepsItsLeaseByRenewingIt() async throws {
    let hosts = try Contenders("flslow", cluster)
    defer { dispose(hosts.a, hosts.b) }
    // A lease of 500 ms and a computation of 4 of them: renewals keep it.
    let opts = ComputeOptions(waitTimeout: 20, maxPollInterval: 0.01, fleetWide: true, leaseDuration: 0.5)
    async let first = hosts.a.object(
      forKey: "k", expires: .seconds(60), options: opts, orCompute: hosts.counted("slow", taking: 2_000_000_000))
    // b asks once a's lease is taken (the counter moved).
    #expect(try await hosts.computing())
    let second = try await hosts.b.object(
      forKey: "k", expires: .seconds(60), options: opts, orCompute: hosts.counted("fast"))
    let f = try await first
    #expect(f.value == "slow" && !f.fromCache)
    #expect(second.value == "slow" && second.fromCache)
    #expect(try hosts.raw.call("GET", hosts.counter).string == "1", "computed once")
  }

  /// With `serveStale`, a caller that finds another owner's lease gets the stale copy of
  /// the last value computed under a lease at once, without computing; without it, the
  /// caller waits for the owner's new value.
  @Test func aWaiterServesTheStaleCopyWhileAnotherOwnerRecomputes() async throws {
    let hosts = try Contenders("flstale", cluster)
    let (prefix, a, b, raw, counter) = (hosts.prefix, hosts.a, hosts.b, hosts.raw, hosts.counter)
    defer { dispose(a, b) }
    let opts = ComputeOptions(
      waitTimeout: 20, serveStale: true, maxPollInterval: 0.01, fleetWide: true, leaseDuration: 5, staleFor: 30)
    let first = try await a.object(forKey: "k", expires: .seconds(0.3), options: opts) { "v1" }
    #expect(first.value == "v1" && !first.fromCache)
    let staleKey = try #require(FleetLease.staleKey(for: Array((prefix + "k").utf8)))
    #expect(try raw.call([Array("GET".utf8), staleKey]).string == "v1")
    // v1 expires in Redis (its stale copy lives 30 s more).
    #expect(try await eventuallyAsync(10) { (try? raw.call("EXISTS", prefix + "k")) == .integer(0) })
    async let second = a.object(
      forKey: "k", expires: .seconds(60), options: opts, orCompute: hosts.counted("v2", taking: 1_500_000_000))
    // Once a holds the lease (its computation started):
    #expect(try await hosts.computing())
    let stale = try await b.object(forKey: "k", expires: .seconds(60), options: opts) {
      Issue.record("b computed while a held the lease")
      return "b"
    }
    #expect(stale.value == "v1" && stale.fromCache)
    #expect(b.statistics.leaseStaleServes == 1)
    var waiting = opts
    waiting.serveStale = false
    let fresh = try await b.object(forKey: "k", expires: .seconds(60), options: waiting) {
      Issue.record("b computed while a held the lease")
      return "b"
    }
    #expect(fresh.value == "v2" && fresh.fromCache)
    let s = try await second
    #expect(s.value == "v2" && !s.fromCache)
    #expect(try raw.call("GET", counter).string == "1", "computed once")
    #expect(try raw.call([Array("GET".utf8), staleKey]).string == "v2", "the stale copy follows the computes")
  }

  struct Run {
    var outputs: [String]
    var killed: Int32?
    var counters: (wins: UInt64, waits: UInt64, takeovers: UInt64)
  }

  /// Starts 2 hosts × 4 processes computing `key`; with `slow`, SIGKILLs the first computer.
  func run(_ tag: String, slow: Bool, leaseMs: Int) throws -> Run {
    let prefix = "fl\(tag):"
    let counter = "flcount\(tag)"
    let base = TestFiles.tempPath("fleet-\(tag)", suffix: "")
    let files = [base + "-a.mcache", base + "-b.mcache"]
    let go = base + ".go"
    let procs = try (0..<8).map { i in
      try ChildProcess(
        Helper.binary,
        ["near-fleet", files[i % 2], cluster.url(), prefix, "k", counter, String(leaseMs), slow ? "1" : "0", go],
        stderr: .discarded)
    }
    // Opened and waiting (or not yet: either way they start together once GO exists).
    usleep(300_000)
    _ = FileManager.default.createFile(atPath: go, contents: nil)
    defer {
      unlink(go)
      for f in files { TestFiles.cleanup(f) }
    }
    var killed: Int32? = nil
    if slow {
      let raw = try RedisClient(url: cluster.url())
      #expect(eventually(20) { (try? raw.call("GET", counter + ":pid").string) != nil })
      if let s = try raw.call("GET", counter + ":pid").string, let pid = Int32(s) {
        kill(pid, SIGKILL)
        killed = pid
      }
    }
    var outputs: [String] = []
    for p in procs {
      let r = p.wait()
      if p.pid == killed {
        #expect(r.signaled)
        continue
      }
      #expect(r.status == 0 && !r.signaled)
      outputs.append(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }
    return Run(outputs: outputs, killed: killed, counters: counters(files))
  }

  func counters(_ files: [String]) -> (wins: UInt64, waits: UInt64, takeovers: UInt64) {
    var t: (UInt64, UInt64, UInt64) = (0, 0, 0)
    for f in files {
      guard let c = try? SharedCache<[UInt8]>(path: f, policy: OpenPolicy(readOnly: true, create: false)) else {
        continue
      }
      t.0 += (try? c.tierWord(NearLayout.Cluster.leaseWins)) ?? 0
      t.1 += (try? c.tierWord(NearLayout.Cluster.leaseWaits)) ?? 0
      t.2 += (try? c.tierWord(NearLayout.Cluster.leaseTakeovers)) ?? 0
    }
    return t
  }

  @Test func twoHostsOfFourProcessesComputeAMissingKeyOnce() throws {
    let tag = "\(getpid())o"
    let r = try run(tag, slow: false, leaseMs: 5000)
    let raw = try RedisClient(url: cluster.url())
    #expect(try raw.call("GET", "flcount\(tag)") == .bulkString(Array("1".utf8)), "computed exactly once")
    #expect(r.outputs.count == 8)
    let values = Set(r.outputs.map { $0.split(separator: " ").first.map(String.init) ?? "" })
    #expect(values.count == 1, "one value for all: \(r.outputs)")
    #expect(r.outputs.filter { $0.hasSuffix(" false") }.count == 1, "one computer: \(r.outputs)")
    let stored = try RedisCache<String>(url: cluster.url(), keyPrefix: "fl\(tag):").object(forKey: "k")
    #expect(stored == values.first)
    #expect(try raw.call("EXISTS", "lease:fl\(tag):k") == .integer(0), "the lease is gone with the store")
  }

  @Test func aKilledComputersLeaseExpiresAndAnotherOneTakesOver() throws {
    let tag = "\(getpid())k"
    let r = try run(tag, slow: true, leaseMs: 1000)
    let raw = try RedisClient(url: cluster.url())
    #expect(r.killed != nil)
    // The killed one computed first (and never stored); one other took over.
    #expect(try raw.call("GET", "flcount\(tag)") == .bulkString(Array("2".utf8)), "\(r.outputs)")
    #expect(r.outputs.count == 7)
    let values = Set(r.outputs.map { $0.split(separator: " ").first.map(String.init) ?? "" })
    #expect(values.count == 1, "one value won: \(r.outputs)")
    #expect(values.first?.hasSuffix("-2") == true)
    let stored = try RedisCache<String>(url: cluster.url(), keyPrefix: "fl\(tag):").object(forKey: "k")
    #expect(stored == values.first)
    // Two leases taken (the killed one's and its successor's), and others waited.
    #expect(r.counters.wins + r.counters.takeovers >= 2)
    #expect(r.counters.waits >= 1)
  }
}

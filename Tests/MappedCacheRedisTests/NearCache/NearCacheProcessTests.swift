import CacheTools
import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import TestSupport
import Testing

@testable import MappedCacheRedis

// NearCache across processes: worker processes (mc-test-helper near-worker) on two
// "hosts" (cache files); the role elected per file, taken over after SIGKILL.

enum Helper {
  static let binary = TestFiles.binary("mc-test-helper")
  static let tool = TestFiles.binary("mapped-cache")

}

/// Stops `workers` (SIGKILL, then reaped) and removes the host files and their holder
/// files.
func stopWorkers(_ workers: [ChildProcess], removing hostPaths: [String]) {
  for w in workers {
    w.kill()
    w.wait()
  }
  for p in hostPaths { TestFiles.cleanup(p) }
}

/// Clients of `server` with client tracking on, from `CLIENT LIST` (flag `t`).
func trackingClients(_ server: RedisServer) throws -> [String] {
  let list = try server.client().call("CLIENT", "LIST").string ?? ""
  return list.split(separator: "\n").map(String.init).filter { line in
    line.split(separator: " ").contains { $0.hasPrefix("flags=") && $0.dropFirst(6).contains("t") }
  }
}

@Suite(.enabled(if: RedisServer.available, "redis-server is not installed"), .serialized)
struct NearCacheProcessTests {
  @Test func manyWorkersPerHostOneTrackingConnectionPerHostAndTakeoverAfterSIGKILL() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    _ = try server.client().call("SET", "w:probe", "p0")
    let hostPaths = (0..<2).map { TestFiles.tempPath("redis-proc\($0)") }
    // Observers in the test process: they read the files' figures, never stand for the role.
    let remote = try RedisCache<String>(url: server.url, keyPrefix: "w:")
    var workers: [ChildProcess] = []
    defer { stopWorkers(workers, removing: hostPaths) }
    for p in hostPaths {
      for _ in 0..<4 {
        workers.append(try ChildProcess(Helper.binary, ["near-worker", p, server.url, "w:", "30", "probe"]))
      }
    }
    #expect(eventually(10) { hostPaths.allSatisfy { FileManager.default.fileExists(atPath: $0) } })
    usleep(200_000)
    let observers = try hostPaths.map {
      try NearCache<String>(
        path: $0, remote: remote, maxStaleness: .milliseconds(300),
        options: NearCacheOptions(capacity: 4 << 20, standsForHolder: false))
    }
    #expect(eventually(10) { observers.allSatisfy { $0.statistics.fenceFresh && $0.statistics.holderAlive } })
    // Eight workers, two hosts: Redis sees exactly two tracking connections, one per host,
    // each of a worker of that host.
    #expect(eventually(5) { (try? trackingClients(server).count) == 2 })
    let holders = observers.map { $0.statistics.holderPID }
    let workerPIDs = Set(workers.map(\.pid))
    #expect(holders.allSatisfy { $0.map(workerPIDs.contains) == true })
    #expect(holders[0] != holders[1])
    let names = try trackingClients(server).joined(separator: "\n")
    for h in holders { #expect(names.contains("name=mc-near-holder-\(h!)")) }

    // Invalidations reach each host through its one holder.
    #expect(try observers[0].object(forKey: "probe") == "p0")
    #expect(try observers[1].object(forKey: "probe") == "p0")
    let before = observers[1].statistics.invalidationsReceived
    try observers[0].setObject("p1", forKey: "probe")
    #expect(eventually(10) { observers[1].statistics.invalidationsReceived > before })
    #expect(try observers[1].object(forKey: "probe") == "p1")

    // SIGKILL host 0's holder: another worker of host 0 takes the role within milliseconds.
    guard let victim = holders[0] else { return }
    let t0 = Date()
    kill(victim, SIGKILL)
    #expect(
      eventually(10) {
        let s = observers[0].statistics
        return s.holderPID != victim && s.holderAlive && s.fenceFresh
      })
    print("near cache: holder SIGKILLed, the role taken over after \(Int(Date().timeIntervalSince(t0) * 1000)) ms")
    let successor = observers[0].statistics.holderPID!
    #expect(workerPIDs.contains(successor) && successor != victim)
    #expect(observers[0].statistics.holderChanges >= 2)
    // Still one tracking connection per host once Redis has seen the dead one's socket close.
    #expect(
      eventually(10) {
        guard let t = try? trackingClients(server) else { return false }
        return t.count == 2 && t.joined().contains("name=mc-near-holder-\(successor)")
      })
    // The new holder's session dropped host 0's old entries (epoch) and invalidates again.
    let b0 = observers[0].statistics.invalidationsReceived
    try observers[1].setObject("p2", forKey: "probe")
    #expect(eventually(10) { observers[0].statistics.invalidationsReceived > b0 })
    #expect(try observers[0].object(forKey: "probe") == "p2")

    // Faults with writes in flight: no value served past maxStaleness + 50 ms after the
    // write that replaced it was acknowledged.
    func staleFor(_ value: String, _ host: NearCache<String>, writer: NearCache<String>) throws -> Double {
      #expect(try host.object(forKey: "probe") != value)
      try writer.setObject(value, forKey: "probe")
      let ack = Date()
      var lastOld = 0.0
      while true {
        let t = Date().timeIntervalSince(ack)  // before the read: when it was served
        guard try host.object(forKey: "probe") != value, t < 2 else { break }
        lastOld = t
      }
      return lastOld
    }
    // The holder SIGSTOPped: it keeps the lock, the fence ages, reads go to Redis.
    let stopped = observers[0].statistics.holderPID!
    #expect(try observers[0].object(forKey: "probe") == "p2")
    // Stopped outside the write lock: inside it, it would hold up host 0's fills as well.
    let stopRetries = ProcessControl.stopOutsideWriteLock(
      stopped, of: try CacheFile(path: hostPaths[0], readOnly: true))
    #expect(stopRetries != nil, "the holder was in the write lock at every try, or is gone")
    #expect(ProcessControl.state(stopped) == "T")
    #expect(try CacheFile(path: hostPaths[0], readOnly: true).writeLockHolder?.pid != Int(stopped))
    let whileStopped = try staleFor("p3", observers[0], writer: observers[1])
    #expect(whileStopped <= 0.3 + 0.05, "served the old value \(whileStopped) s after the write")
    #expect(eventually(1) { !observers[0].statistics.fenceFresh })
    #expect(observers[0].statistics.holderPID == stopped)  // nobody can take a live holder's lock
    kill(stopped, SIGCONT)
    #expect(eventually(10) { observers[0].statistics.fenceFresh })
    #expect(try observers[0].object(forKey: "probe") == "p3")
    // The holder SIGKILLed right before a write.
    let dying = observers[0].statistics.holderPID!
    kill(dying, SIGKILL)
    let afterKill = try staleFor("p4", observers[0], writer: observers[1])
    #expect(afterKill <= 0.3 + 0.05, "served the old value \(afterKill) s after the write")
    #expect(eventually(10) { observers[0].statistics.holderPID != dying && observers[0].statistics.fenceFresh })
    for o in observers { o.close() }
  }

  /// Runs `near-op` in a process of its own and returns what it printed.
  func op(_ args: [String]) throws -> String {
    let r = try ChildProcess.run(Helper.binary, ["near-op"] + args, stderr: .discarded)
    #expect(r.status == 0 && !r.signaled, "near-op \(args)")
    return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
  }

  @Test func getSetAndRemoveFromProcessesOfTwoHosts() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let hosts = (0..<2).map { TestFiles.tempPath("redis-ops\($0)") }
    // Each host's holder: a worker process standing for the role.
    var holders: [ChildProcess] = []
    defer { stopWorkers(holders, removing: hosts) }
    for p in hosts {
      holders.append(try ChildProcess(Helper.binary, ["near-worker", p, server.url, "o:", "30", "none"]))
    }
    #expect(
      eventually(20) {
        hosts.allSatisfy { NearCacheStatistics.read(path: $0, maxStaleness: .seconds(3))?.fenceFresh == true }
      })
    #expect(try op([hosts[0], server.url, "o:", "set", "k", "v1"]) == "ok")
    // That SET's own invalidation first (a late one would remove the fill, conservatively).
    #expect(eventually(10) { (NearCacheStatistics.read(path: hosts[1])?.invalidationsReceived ?? 0) >= 1 })
    #expect(try op([hosts[1], server.url, "o:", "get", "k"]) == "v1")  // a miss on host 1, back-filled
    let file1 = try SharedCache<[UInt8]>(path: hosts[1], policy: OpenPolicy(readOnly: true, create: false))
    #expect(try file1.containsObject(forKey: "k"))  // host 1's file holds it now
    #expect(try op([hosts[1], server.url, "o:", "get", "k"]) == "v1")
    #expect(try op([hosts[0], server.url, "o:", "set", "k", "v2"]) == "ok")  // invalidates host 1 through its holder
    #expect(eventually(10) { (try? file1.containsObject(forKey: "k")) == false })  // removed by host 1's holder
    #expect(try op([hosts[1], server.url, "o:", "get", "k"]) == "v2")
    #expect(try op([hosts[1], server.url, "o:", "remove", "k"]) == "ok")
    #expect(eventually(10) { (try? op([hosts[0], server.url, "o:", "get", "k"])) == "nil" })
    #expect(try op([hosts[1], server.url, "o:", "get", "k"]) == "nil")
  }

  @Test func theAgentSidecarHoldsTheRoleAndStatsShowIt() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let path = TestFiles.tempPath("redis-agent")
    defer { TestFiles.cleanup(path) }
    let agent = try ChildProcess(Helper.tool, ["agent", path, "--redis", server.unixURL, "--prefix", "a:"])
    defer {
      agent.kill()
      agent.wait()
    }
    #expect(eventually(10) { NearCacheStatistics.read(path: path)?.holderPID == agent.pid })
    #expect(eventually(10) { NearCacheStatistics.read(path: path)?.fenceFresh == true })
    #expect(eventually(10) { (try? trackingClients(server).count) == 1 })
    // Workers that do not stand for the role rely on the agent's invalidations.
    let remote = try RedisCache<String>(url: server.url, keyPrefix: "a:")
    let worker = try NearCache<String>(
      path: path, remote: remote, maxStaleness: .milliseconds(500),
      options: NearCacheOptions(standsForHolder: false))
    _ = try server.client().call("SET", "a:k", "1")
    #expect(eventually(10) { worker.statistics.invalidationsReceived >= 1 })
    #expect(try worker.object(forKey: "k") == "1")
    _ = try server.client().call("SET", "a:k", "2")
    #expect(eventually(10) { (try? worker.object(forKey: "k")) == "2" })
    // `mapped-cache stats` shows the tier's figures (JSON and Prometheus).
    let data = try ChildProcess.run(Helper.tool, ["stats", path, "--json"]).stdoutData
    let json = try JSONSerialization.jsonObject(with: data) as? [String: Any]
    let near = json?["near_cache"] as? [String: Any]
    #expect(near?["holder_pid"] as? Int == Int(agent.pid))
    #expect((near?["invalidations_received"] as? Int ?? 0) >= 2)
    let text = try ChildProcess.run(Helper.tool, ["stats", path, "--prometheus"]).stdout
    #expect(text.contains("mappedcache_near_holder_pid{path=\"\(path)\"} \(agent.pid)"))
    // SIGTERM: the agent resigns cleanly.
    agent.kill(SIGTERM)
    #expect(agent.wait().status == 0)
    #expect(NearCacheStatistics.read(path: path)?.holderPID == nil)
    worker.close()
  }
}

import CacheTools
import Foundation
import Glibc
import MappedCache
import MappedCacheRedis
import RedisFaultProxy
import RedisServers
import SystemCalls

/// The faults made during a run (the report's counts).
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

/// What a fault acts on: the run's hosts, its Redis, its workers.
struct RedisFaultTargets {
  let layout: RedisRunLayout
  let fleet: WorkerFleet
  /// Observers of each host's file (they do not stand for the role): holder pids.
  let observers: [NearCache<[UInt8]>]
  let proxies: [FaultProxy]
  let server: RedisServerProcess?
  let cluster: RedisClusterProcesses?
  let direct: RedisClient
}

/// The Redis mode's faults, each on its own period from the run's start (`--kill-holder-every`,
/// `--blackhole-every` for `--blackhole-for`, `--kill-redis-every`, `--reshard-every`,
/// `--failover-every`) and the hidden `--plant-stale` (host 0's holder stopped a third
/// of the way in). `tick` makes those that are due; `waitForFailover` and `lift` end what
/// is still under way (a failover; a black hole, the stopped holder) before the workers
/// are stopped.
final class RedisFaultSchedule {
  private(set) var faults = RedisFaults()
  private let o: StressOptions
  private let t: RedisFaultTargets
  private var nextKill: UInt64?
  private var nextHole: UInt64?
  private var nextRedisKill: UInt64?
  private var nextReshard: UInt64?
  private var nextFailover: UInt64?
  private var failover: FailoverJob? = nil
  private var keyRNG: SplitMix64
  /// When each black-holed host's hole ends.
  private var holeEnds: [Int: UInt64] = [:]
  private var plantAt: UInt64?
  private let plantFile: CacheFile?
  /// The holder `--plant-stale` stopped (continued by `lift`).
  private var stopped: Int32? = nil
  private let progress: (String) -> Void

  init(_ o: StressOptions, _ targets: RedisFaultTargets, start: UInt64, progress: @escaping (String) -> Void) throws {
    self.o = o
    t = targets
    self.progress = progress
    nextKill = Self.period(o.killHolderEvery).map { start + $0 }
    nextHole = Self.period(o.blackholeEvery).map { start + $0 }
    nextRedisKill = Self.period(o.killRedisEvery).map { start + $0 }
    nextReshard = Self.period(o.reshardEvery).map { start + $0 }
    nextFailover = Self.period(o.failoverEvery).map { start + $0 }
    keyRNG = SplitMix64(seed: (o.seed ?? 1) &+ 0x5107)
    plantAt = o.plantStale ? start + UInt64(o.duration * 1e9) / 3 : nil
    plantFile = o.plantStale ? try CacheFile(path: targets.layout.hostPath(0), readOnly: true) : nil
  }

  deinit { if let pid = stopped { try? SystemCall.kill(pid, SIGCONT) } }

  private static func period(_ seconds: Double?) -> UInt64? { seconds.map { UInt64($0 * 1e9) } }

  /// Makes every fault that is due at `now`, and ends the black holes that are over.
  func tick(now: UInt64) {
    for (h, end) in holeEnds where now >= end {
      t.proxies[h].mode = .pass
      holeEnds[h] = nil
    }
    if let at = plantAt, now >= at { plant() }
    if let at = nextKill, now >= at {
      killHolder()
      nextKill = at + Self.period(o.killHolderEvery)!
    }
    if let at = nextHole, now >= at {
      blackHole(now: now)
      nextHole = at + Self.period(o.blackholeEvery)!
    }
    if let at = nextRedisKill, now >= at {
      if let s = t.server { killRedis(s) }
      nextRedisKill = at + Self.period(o.killRedisEvery)!
    }
    if let at = nextReshard, now >= at {
      reshard()
      nextReshard = at + Self.period(o.reshardEvery)!
    }
    // A failover takes seconds (promotion, restart, resync): it runs on a thread of its
    // own while the run goes on sampling, and the next one counts from its end, as the
    // killed node must be a synced replica again before its shard loses another primary.
    if let job = failover, let outcome = job.outcome {
      noteFailover(job, outcome)
      failover = nil
      nextFailover = now + Self.period(o.failoverEvery)!
    }
    if failover == nil, let at = nextFailover, now >= at, let c = t.cluster {
      failover = FailoverJob(c, slot: ClusterSlots.slot(randomKey()))
    }
  }

  /// Waits for a failover still under way (it ends before the nodes are stopped).
  func waitForFailover() {
    if let job = failover {
      job.wait()
      if case .success = job.outcome { faults.failovers += 1 } else { faults.failoversFailed += 1 }
      failover = nil
    }
  }

  /// Ends the faults that last: lifts the black holes, continues the stopped holder.
  func lift() {
    for p in t.proxies { p.mode = .pass }
    if let pid = stopped {
      try? SystemCall.kill(pid, SIGCONT)
      stopped = nil
    }
  }

  /// A random key of the run, as Redis knows it: the slot moves and failovers hit keys
  /// the readers use.
  private func randomKey() -> String {
    t.layout.keyPrefix + t.layout.keys[Int(keyRNG.next() % UInt64(t.layout.keys.count))]
  }

  // MARK: The faults

  /// Stopped inside the write lock, the holder would hold up every writer and fill of
  /// host 0, not make it serve stale entries: stopped outside it.
  private func plant() {
    guard let pid = t.observers[0].statistics.holderPID, let file = plantFile else { return }
    plantAt = nil
    if let retries = ProcessControl.stopOutsideWriteLock(pid, of: file) {
      stopped = pid
      let retried = retries == 0 ? "" : " (after \(retries) tries that found it in the write lock or not yet stopped)"
      progress("plant: host 0's holder (pid \(pid)) stopped\(retried); host 0 serves stale entries")
    } else {
      t.fleet.failures.append("plant: host 0's holder (pid \(pid)) was in the write lock at every try, or is gone")
    }
  }

  /// SIGKILLs the invalidation holder of the next host in turn (one of its worker
  /// processes) and starts that worker's next incarnation.
  private func killHolder() {
    let h = faults.holderKillAttempts % o.hosts
    faults.holderKillAttempts += 1
    guard let pid = t.observers[h].statistics.holderPID, let w = t.fleet.worker(withPID: pid) else {
      faults.holderKillsSkipped += 1
      return
    }
    do { try t.fleet.restart(w) } catch { t.fleet.failures.append("cannot restart worker \(w): \(error)") }
    faults.holderKills += 1
  }

  /// The next host in turn's proxy holds every byte for `--blackhole-for`.
  private func blackHole(now: UInt64) {
    let h = faults.blackholes % o.hosts
    guard holeEnds[h] == nil else { return }
    t.proxies[h].mode = .blackHole
    holeEnds[h] = now + UInt64(o.blackholeFor * 1e9)
    faults.blackholes += 1
  }

  private func killRedis(_ s: RedisServerProcess) {
    do {
      try s.restart()
      faults.redisKills += 1
      progress("fault: redis-server SIGKILLed and restarted empty (pid \(s.pid))")
    } catch {
      t.fleet.failures.append("redis-server did not restart: \(error)")
    }
  }

  /// Moves the slot of a random key of the run, so that the move migrates keys readers use.
  private func reshard() {
    let slot = ClusterSlots.slot(randomKey())
    do {
      let to = try RedisClusterAdmin.moveSlot(slot, t.direct)
      faults.reshards += 1
      if faults.reshards <= 3 || faults.reshards % 20 == 0 {
        progress("fault: slot \(slot) moved to \(to) (\(faults.reshards) moves)")
      }
    } catch {
      faults.reshardsFailed += 1
      progress("fault: moving slot \(slot) failed: \(error)")
    }
  }

  private func noteFailover(_ job: FailoverJob, _ outcome: Result<(UInt16, UInt16), any Error>) {
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
  }
}

/// A failover (`RedisClusterProcesses.failOver`) running on a thread of its own.
final class FailoverJob: @unchecked Sendable {
  let slot: Int
  private let lock = NSCondition()
  private var result: Result<(UInt16, UInt16), any Error>?

  init(_ cluster: RedisClusterProcesses, slot: Int) {
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

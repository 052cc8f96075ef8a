import Foundation
import Glibc
@_spi(Tiers) import MappedCache
import Synchronization

/// The invalidation role in front of a Redis Cluster: the holder (elected as for one
/// server) keeps one tracking connection per primary, each on a thread of its own, and
/// its own thread keeps the slot map and the slot buckets' words (`NearCacheSlots.swift`).
///
/// Every `heartbeatInterval`:
///  1. every `topologyInterval` (at once when a process bumped the topology word after a
///     redirect, or a tracker lost its node): read the slot map, noting the send time t0.
///     Buckets holding a slot whose owner changed get a new epoch (their entries become
///     misses: the tracking state of the old owner does not cover the new one), before
///     the new owners are used; trackers start for new primaries and stop for old ones;
///     t0 becomes the topology fence. A failed read leaves the topology fence where it is.
///  2. each bucket's fence := the oldest of the topology fence and the fences of the
///     primaries that own its slots (0 while one of them has no confirmed heartbeat).
///
/// A tracker (one per primary) runs the single-server session against its node: tracking
/// on, then the epochs of the buckets its node owns are bumped (writes there before now
/// may have been missed), then heartbeats confirm its fence; a null invalidation (a
/// FLUSHALL on that node, or a primary that restarted empty) bumps its buckets. When its
/// connection fails it asks for the slot map (a failover moves its slots) and reconnects
/// with backoff; its fence stops meanwhile, so its buckets go stale after `maxStaleness`.
///
/// Why a served entry is at most `maxStaleness` old: it is served only if its bucket's
/// fence f is younger than that, so the slot map read at some t0 ≥ f and, for the owner X
/// of its slot in that map, a heartbeat sent at some t ≥ f was answered after every
/// invalidation X sent before it was applied. A write to the key acknowledged before f
/// was made on X (if X owned the slot then; otherwise the map read at t0 changed the
/// slot's owner to X after the write, and bumped the bucket's epoch) and X sent its
/// invalidation before acknowledging it, or it was made before X's tracking session
/// started, whose start bumped the bucket's epoch. Either way the entry is gone or a miss.
/// (Caveat: during a migration, keys already moved are written on the importing node
/// through ASK while the map still names the source; their invalidations come from the
/// importing node's tracker, and a broken tracker there is not fenced until the
/// migration ends and the map names it.)
extension NearCacheHolder {
  func clusterSession(_ client: RedisClient) throws {
    guard let router = client.cluster else { return }
    let state = ClusterTrackingState()
    defer { state.stopAll() }
    var old = ClusterSlotMap()
    var nextTopologyNs: UInt64 = 0
    var seenTopology = (try? local.tierWord(NearLayout.topology)) ?? 0
    let intervalNs = UInt64(max(0.001, options.heartbeatInterval) * 1e9)
    let topologyNs = UInt64(max(0.001, options.topologyInterval) * 1e9)
    NearLayout.add(local, NearLayout.sessions, 1)
    while !stopped.load(ordering: .acquiring) {
      let now = Clock.nanoseconds()
      let hint = (try? local.tierWord(NearLayout.topology)) ?? 0
      if now >= nextTopologyNs || hint != seenTopology || state.wantsTopology() {
        seenTopology = hint
        nextTopologyNs = now &+ topologyNs
        if let map = try? readMap(router) {
          if old.nodes.isEmpty || map != old {
            // New owners: their buckets' entries are dropped before the new owners count.
            let changed = old.nodes.isEmpty ? Array(0..<ClusterSlots.count) : map.changedSlots(from: old)
            let words = NearLayout.bucketWords(of: changed)
            for w in words { NearLayout.bumpEpoch(local, w) }
            if !old.nodes.isEmpty { NearLayout.add(local, NearLayout.Cluster.bucketsDropped, UInt64(words.count)) }
            state.install(map)
            for node in map.nodes where !state.isTracking(node) {
              startTracker(node, router.endpoint(node), state)
            }
            state.retire(keeping: Set(map.nodes))
            old = map
          }
          state.confirmTopology(now / 1_000_000)
        }
      }
      state.publish(local)
      let end = now &+ intervalNs
      while !stopped.load(ordering: .acquiring) && Clock.nanoseconds() < end {
        Clock.sleep(nanoseconds: min(5_000_000, end &- min(end, Clock.nanoseconds())))
      }
    }
  }

  private func readMap(_ router: RedisClusterRouter) throws -> ClusterSlotMap {
    try router.refresh()
    NearLayout.add(local, NearLayout.Cluster.slotMapRefreshes, 1)
    return try router.slotMap()
  }

  /// A thread tracking `node` until the state retires it (or the holder stops).
  private func startTracker(_ node: ClusterNode, _ endpoint: RedisEndpoint, _ state: ClusterTrackingState) {
    let stop = state.track(node)
    let t = Thread { [self] in
      defer { state.ended(node) }
      var failures = 0
      var sessions = 0
      let until = { stop.value.load(ordering: .acquiring) || self.stopped.load(ordering: .acquiring) }
      while !until() {
        do {
          try track(
            endpoint,
            started: {
              for w in state.bucketWords(of: node) { NearLayout.bumpEpoch(local, w) }
              // A tracker's later sessions are reconnects (the figures' `reconnects`).
              if sessions > 0 { NearLayout.add(local, NearLayout.sessions, 1) }
              sessions += 1
            },
            confirmed: { state.confirm(node, $0) },
            flushed: {
              for w in state.bucketWords(of: node) { NearLayout.bumpEpoch(local, w) }
              NearLayout.add(local, NearLayout.flushes, 1)
            },
            until: until)
          failures = 0
        } catch {
          failures += 1
          state.lost(node)
        }
        // Capped full-jitter backoff, as the single-server holder's.
        let cap = min(options.reconnectBackoffCap, 0.002 * Double(1 << min(failures, 16)))
        let end = Clock.nanoseconds() &+ UInt64(Double.random(in: 0...max(cap, 0.001)) * 1e9)
        while !until() && Clock.nanoseconds() < end { Clock.sleep(nanoseconds: 2_000_000) }
      }
    }
    t.name = "mc-near-track"
    t.start()
  }
}

/// What the cluster holder's threads share: the slot map in use, each primary's
/// confirmed fence, and the trackers' stop flags.
final class ClusterTrackingState: @unchecked Sendable {
  private let lock = NSLock()
  private var map = ClusterSlotMap()
  /// Owners of each bucket (node indices into `map.nodes`).
  private var bucketOwners: [[Int]] = Array(repeating: [], count: NearLayout.bucketCount)
  private var fences: [ClusterNode: UInt64] = [:]
  private var topologyMs: UInt64 = 0
  private var stops: [ClusterNode: StopFlag] = [:]
  private var running = 0
  private var topologyWanted = false
  private let allEnded = NSCondition()

  func install(_ m: ClusterSlotMap) {
    lock.withLock {
      map = m
      var owners = [Set<Int>](repeating: [], count: NearLayout.bucketCount)
      for (i, n) in m.nodes.enumerated() {
        for s in m.slots(of: n) { owners[s / NearLayout.slotsPerBucket].insert(i) }
      }
      bucketOwners = owners.map { Array($0) }
    }
  }

  func confirmTopology(_ ms: UInt64) { lock.withLock { topologyMs = ms } }

  func wantsTopology() -> Bool {
    lock.withLock {
      defer { topologyWanted = false }
      return topologyWanted
    }
  }

  /// The bucket words holding a slot of `node` in the current map.
  func bucketWords(of node: ClusterNode) -> [Int] {
    lock.withLock {
      guard let i = map.nodes.firstIndex(of: node) else { return [] }
      return (0..<NearLayout.bucketCount).filter { bucketOwners[$0].contains(i) }.map { NearLayout.bucketBase + $0 }
    }
  }

  func confirm(_ node: ClusterNode, _ ms: UInt64) { lock.withLock { fences[node] = ms } }

  /// A tracker lost its node: its fence stops, and the map is read again soon.
  func lost(_ node: ClusterNode) { lock.withLock { topologyWanted = true } }

  func isTracking(_ node: ClusterNode) -> Bool { lock.withLock { stops[node] != nil } }

  /// Registers a tracker of `node`; its stop flag.
  func track(_ node: ClusterNode) -> StopFlag {
    lock.withLock {
      let flag = StopFlag()
      stops[node] = flag
      running += 1
      return flag
    }
  }

  func ended(_ node: ClusterNode) {
    allEnded.lock()
    lock.withLock { running -= 1 }
    allEnded.broadcast()
    allEnded.unlock()
  }

  /// Stops the trackers of nodes that are no longer primaries.
  func retire(keeping: Set<ClusterNode>) {
    lock.withLock {
      for (n, flag) in stops where !keeping.contains(n) {
        flag.value.store(true, ordering: .releasing)
        stops[n] = nil
        fences[n] = nil
      }
    }
  }

  /// Stops every tracker and waits for their threads.
  func stopAll() {
    lock.withLock {
      for flag in stops.values { flag.value.store(true, ordering: .releasing) }
      stops.removeAll()
    }
    allEnded.lock()
    while lock.withLock({ running }) > 0 { allEnded.wait(until: Date(timeIntervalSinceNow: 0.05)) }
    allEnded.unlock()
  }

  /// Stores each bucket's fence (the oldest of its owners' and the topology's) and the
  /// per-node fences for the figures.
  func publish(_ local: SharedCache<[UInt8]>) {
    let (perBucket, perNode): ([UInt64], [(UInt16, UInt64)]) = lock.withLock {
      let nodeFence = map.nodes.map { fences[$0] ?? 0 }
      let b = bucketOwners.map { owners -> UInt64 in
        owners.isEmpty ? 0 : min(topologyMs, owners.map { nodeFence[$0] }.min() ?? 0)
      }
      return (b, zip(map.nodes, nodeFence).map { ($0.port, $1) })
    }
    for (b, f) in perBucket.enumerated() {
      // A fence of 0 (no heartbeat yet) must read as stale, not as "ms 0".
      NearLayout.storeFenceHalf(local, NearLayout.bucketBase + b, f == 0 ? 1 : f)
    }
    for i in 0..<NearLayout.nodeFenceCount {
      let w: UInt64 = i < perNode.count ? UInt64(perNode[i].0) << 48 | (perNode[i].1 & ((1 << 48) - 1)) : 0
      try? local.storeTierWord(NearLayout.nodeFences + i, w)
    }
  }
}

/// A tracker's stop flag.
final class StopFlag: Sendable {
  let value = Atomic<Bool>(false)
}

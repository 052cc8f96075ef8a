import Foundation
@_spi(Tiers) import MappedCache
import Synchronization

/// What the cluster holder's threads share: the slot map in use, the slots in flight,
/// each primary's confirmed fence, and the trackers' stop flags.
final class ClusterTrackingState: @unchecked Sendable {
  private let lock = NSLock()
  private var map = ClusterSlotMap()
  private var migrations = ClusterMigrations()
  /// Owners of each bucket (node indices into `map.nodes`).
  private var bucketOwners: [[Int]] = Array(repeating: [], count: NearLayout.bucketCount)
  /// Nodes importing a slot of each bucket (nil: one whose address is not known).
  private var bucketImporters: [[ClusterNode?]] = Array(repeating: [], count: NearLayout.bucketCount)
  private var fences: [ClusterNode: UInt64] = [:]
  /// Nodes whose tracker lost its connection and has not confirmed a heartbeat since.
  private var down: Set<ClusterNode> = []
  private var topologyMs: UInt64 = 0
  private var stops: [ClusterNode: StopFlag] = [:]
  private var running = 0
  private var topologyWanted = false
  private let allEnded = NSCondition()

  func install(_ m: ClusterSlotMap, _ mig: ClusterMigrations) {
    var owners = [Set<Int>](repeating: [], count: NearLayout.bucketCount)
    for (i, n) in m.nodes.enumerated() {
      for s in m.slots(of: n) { owners[s / NearLayout.slotsPerBucket].insert(i) }
    }
    lock.withLock {
      map = m
      bucketOwners = owners.map { Array($0) }
    }
    install(mig)
  }

  /// The slots in flight (the send times of their queries too).
  func install(_ mig: ClusterMigrations) {
    var importers = [Set<ClusterNode?>](repeating: [], count: NearLayout.bucketCount)
    for p in mig.pairs { importers[p.slot / NearLayout.slotsPerBucket].insert(p.importer) }
    lock.withLock {
      migrations = mig
      bucketImporters = importers.map { Array($0) }
    }
  }

  func currentMigrations() -> ClusterMigrations { lock.withLock { migrations } }

  /// Whether `node`'s tracker is between a lost connection and its next heartbeat (its
  /// fence stands still; the topology thread does not wait for it either).
  func isDown(_ node: ClusterNode) -> Bool { lock.withLock { down.contains(node) } }

  func confirmTopology(_ ms: UInt64) { lock.withLock { topologyMs = ms } }

  func wantsTopology() -> Bool {
    lock.withLock {
      defer { topologyWanted = false }
      return topologyWanted
    }
  }

  /// The bucket words holding a slot `node` owns in the current map or imports.
  func bucketWords(of node: ClusterNode) -> [Int] {
    lock.withLock {
      let i = map.nodes.firstIndex(of: node) ?? -1
      return (0..<NearLayout.bucketCount).filter { bucketOwners[$0].contains(i) || bucketImporters[$0].contains(node) }
        .map { NearLayout.bucketBase + $0 }
    }
  }

  func confirm(_ node: ClusterNode, _ ms: UInt64) {
    lock.withLock {
      fences[node] = ms
      down.remove(node)
    }
  }

  /// A tracker lost its node: its fence stops, and the map is read again soon.
  func lost(_ node: ClusterNode) {
    lock.withLock {
      down.insert(node)
      topologyWanted = true
    }
  }

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

  /// Stops the trackers of nodes that are no longer primaries or importers.
  func retire(keeping: Set<ClusterNode>) {
    lock.withLock {
      for (n, flag) in stops where !keeping.contains(n) {
        flag.value.store(true, ordering: .releasing)
        stops[n] = nil
        fences[n] = nil
        down.remove(n)
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
    while lock.withLock({ running }) > 0 { _ = allEnded.wait(until: Date(timeIntervalSinceNow: 0.05)) }
    allEnded.unlock()
  }

  /// Stores each bucket's fence (the oldest of the topology's, its owners' trackers' and
  /// `CLUSTER NODES` queries', and its importers' trackers') and the per-node fences for
  /// the figures.
  func publish(_ local: SharedCache<[UInt8]>) {
    let (perBucket, perNode): ([UInt64], [(UInt16, UInt64)]) = lock.withLock {
      let nodeFence = map.nodes.map { fences[$0] ?? 0 }
      let ownerFence = map.nodes.enumerated().map { min(nodeFence[$0], migrations.sentMs($1) ?? 0) }
      let b = (0..<NearLayout.bucketCount).map { i -> UInt64 in
        let owners = bucketOwners[i]
        guard !owners.isEmpty else { return 0 }
        var f = min(topologyMs, owners.map { ownerFence[$0] }.min() ?? 0)
        for n in bucketImporters[i] { f = min(f, n.flatMap { fences[$0] } ?? 0) }
        return f
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

import Foundation
@_spi(Tiers) import MappedCache
import Synchronization
import SystemCalls

/// The invalidation role in front of a Redis Cluster: the holder (elected as for one
/// server) keeps one tracking connection per primary, each on a thread of its own, and
/// its own thread keeps the slot map and the slot buckets' words (`NearCacheSlots.swift`).
///
/// Every `heartbeatInterval`:
///  1. every `topologyInterval` (at once when a process bumped the topology word after a
///     redirect, or a tracker lost its node):
///     a. ask each primary of the last map (whose tracker is not down) for `CLUSTER NODES`,
///        noting t0, the send time of the first query, and q(X), that of X's. The
///        `myself` line's markers name the slots X migrates (and where to) and imports:
///        (slot, importer) pairs (`ClusterMigrations.swift`). A primary whose query fails
///        keeps its last pairs and its last q.
///     b. read the slot map. Buckets holding a slot whose owner or whose pairs changed get
///        a new epoch (their entries become misses: the tracking state of one node does
///        not cover another), before the new owners and importers are used; trackers start
///        for new primaries and importers and stop for the others; t0 becomes the topology
///        fence. A failed read changes nothing (the answers of a. are dropped).
///  2. each bucket's fence := the oldest of the topology fence, for each primary owning one
///     of its slots its tracker's fence and its q, and for each importer of one of its
///     slots its tracker's fence (0 while one of these has no confirmed heartbeat).
///
/// A tracker (one per primary or importer) runs the single-server session against its
/// node: tracking on, then the epochs of the buckets its node owns or imports into are
/// bumped (writes there before now may have been missed), then heartbeats confirm its
/// fence; a null invalidation (a FLUSHALL on that node, or a primary that restarted empty)
/// bumps its buckets. When its connection fails it asks for the slot map (a failover moves
/// its slots) and reconnects with backoff; its fence stops meanwhile, so its buckets go
/// stale after `maxStaleness`.
///
/// Why a served entry is at most `maxStaleness` old: it is served only if its bucket's
/// fence f is younger than that. Take a write W to its key, of slot s, acknowledged before
/// f, and X the owner of s in the map in use, read after queries sent at t0 ≥ f.
///  - W was made on X: X's tracker confirmed a heartbeat sent at some t ≥ f, answered after
///    every invalidation X sent before it was applied, W's among them (X sends it before
///    acknowledging W), unless W came before X's tracking session started, whose start
///    bumped the bucket's epoch.
///  - W was made on another owner: the map read after W changed s's owner to X, and bumped
///    the bucket's epoch.
///  - W was made through ASK on an importer I: X was migrating s to I then, and X's query,
///    sent at q(X) ≥ f after W, found it still doing so (then (s, I) is a pair of the
///    bucket, and I's fence ≥ f covers W as in the first case; if W came before the pair
///    was first seen, seeing it bumped the epoch), or done (the map read after it names I:
///    the second case), or undone (the pair went away, which bumped the epoch).
/// Either way the entry is gone or a miss. (Not covered: a migration begun and undone
/// between two queries of its source, whose keys left on the importer are lost to the
/// cluster anyway.)
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
        // Who is moving which slots, asked before the map is read (the argument above).
        let asked = old.nodes.isEmpty ? ((try? router.slotMap().nodes) ?? []) : old.nodes
        let t0 = Clock.nanoseconds()
        var reports: [ClusterNode: (sentMs: UInt64, report: ClusterNodesReport)] = [:]
        for node in asked where !state.isDown(node) {
          let sent = Clock.nanoseconds() / 1_000_000
          if let r = try? queryMigrations(router, node) { reports[node] = (sent, r) }
        }
        if let map = try? readMap(router) {
          var migrations = state.currentMigrations()
          let before = migrations
          migrations.update(reports, primaries: Set(map.nodes))
          let mapChanged = old.nodes.isEmpty || map != old
          if mapChanged || migrations.pairs != before.pairs {
            // New owners or importers: their buckets' entries are dropped before they count.
            var changed = migrations.changedSlots(from: before)
            if mapChanged {
              changed.formUnion(old.nodes.isEmpty ? Array(0..<ClusterSlots.count) : map.changedSlots(from: old))
            }
            let words = NearLayout.bucketWords(of: changed)
            for w in words { NearLayout.bumpEpoch(local, w) }
            if !old.nodes.isEmpty { NearLayout.add(local, NearLayout.Cluster.bucketsDropped, UInt64(words.count)) }
            state.install(map, migrations)
            let tracked = Set(map.nodes).union(migrations.importers)
            for node in map.nodes + migrations.importers.sorted(by: { $0.description < $1.description })
            where !state.isTracking(node) {
              startTracker(node, router.endpoint(node), state)
            }
            state.retire(keeping: tracked)
            old = map
          } else {
            state.install(migrations)
          }
          state.confirmTopology(t0 / 1_000_000)
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

  /// The slots `node` migrates and imports, from its `CLUSTER NODES`.
  private func queryMigrations(_ router: RedisClusterRouter, _ node: ClusterNode) throws -> ClusterNodesReport {
    // An error reply is thrown by `call`; a malformed one by the parser.
    try ClusterNodesReport.parse(router.client(node).call([Array("CLUSTER".utf8), Array("NODES".utf8)]), from: node)
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

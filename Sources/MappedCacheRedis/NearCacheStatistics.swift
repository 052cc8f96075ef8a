import Foundation
@_spi(Tiers) import MappedCache
import SystemCalls

/// The figures of a near cache: the file's (shared by every process of the host) and a
/// few of this process.
public struct NearCacheStatistics: Sendable, Equatable, CustomStringConvertible {
  /// Pid of the process holding the invalidation role (nil: none since it resigned).
  public var holderPID: Int32?
  /// Whether that process is alive.
  public var holderAlive: Bool
  /// Whether this process holds the role.
  public var isHolder: Bool
  /// Milliseconds since the last confirmed heartbeat, per Redis node (nil: never).
  public var heartbeatAgeMilliseconds: [UInt64?]
  /// Whether reads trust the file now (the heartbeat is younger than `maxStaleness`).
  public var fenceFresh: Bool
  /// The file's epoch: tracking sessions started and flushes, counted together.
  public var epoch: UInt64
  /// Keys named by invalidations, and how many of them were in the file and removed.
  public var invalidationsReceived: UInt64
  /// Of those, the keys that were in the file and were removed.
  public var invalidationsApplied: UInt64
  /// Null invalidations (FLUSHALL/FLUSHDB in Redis): each one dropped every entry, lazily.
  public var flushes: UInt64
  /// Tracking sessions started after the first of each holder (reconnects), and times a
  /// process took the role.
  public var reconnects: UInt64
  /// Times a process took the role.
  public var holderChanges: UInt64
  /// Reads served from the file with a stale fence (`serveStale`), and reads that went to
  /// Redis because of it.
  public var staleServes: UInt64
  /// Reads sent to Redis because the fence was older than `maxStaleness`.
  public var fenceMisses: UInt64
  /// Entries found stamped with an earlier epoch (treated as misses).
  public var epochMisses: UInt64
  /// Fetches from Redis (every process) and their mean latency; this process's longest.
  public var remoteFetches: UInt64
  /// Mean latency of a fetch, over every process.
  public var remoteFetchMeanMicroseconds: Double
  /// This process's longest fetch.
  public var remoteFetchMaxMicroseconds: Double
  /// The file's own counters.
  public var local: CacheStatistics
  /// In front of a cluster: the node of each heartbeat age ("port P"; empty for one server).
  public var heartbeatNodes: [String] = []
  /// Cluster redirects followed by the processes of the host: MOVED, and ASK.
  public var movedRedirects: UInt64 = 0
  /// ASK redirects followed.
  public var askRedirects: UInt64 = 0
  /// Slot maps read by the holder.
  public var slotMapRefreshes: UInt64 = 0
  /// Slot buckets whose entries were dropped because a slot of theirs changed owner.
  public var slotBucketsDropped: UInt64 = 0
  /// Fleet-wide computes: leases won at once, waits for another owner's value, leases
  /// taken over after another owner's expired, and stores refused because the lease was lost.
  public var leaseWins: UInt64 = 0
  /// Fleet-wide computes that waited for another owner's value.
  public var leaseWaits: UInt64 = 0
  /// Leases taken after another owner's had expired (it died or ran out of time).
  public var leaseTakeovers: UInt64 = 0
  /// Computed values not stored because the lease was lost meanwhile.
  public var leasesLost: UInt64 = 0
  /// Fleet-wide computes with `serveStale` that found another owner's lease and returned
  /// the stale copy of the last value computed.
  public var leaseStaleServes: UInt64 = 0

  /// The figures as lines of text.
  public var description: String {
    let ages = heartbeatAgeMilliseconds.map { $0.map { "\($0) ms" } ?? "never" }.joined(separator: ", ")
    return """
      holder: \(holderPID.map { "pid \($0)\(holderAlive ? "" : " (dead)")" } ?? "none")\(isHolder ? " (this process)" : "")
      heartbeat age: \(ages)\(fenceFresh ? "" : " (fenced)")
      epoch: \(epoch)
      invalidations: \(invalidationsReceived) received, \(invalidationsApplied) applied; flushes: \(flushes)
      reconnects: \(reconnects); holder changes: \(holderChanges)
      stale serves: \(staleServes); fence misses: \(fenceMisses); epoch misses: \(epochMisses)
      remote fetches: \(remoteFetches), mean \(String(format: "%.1f", remoteFetchMeanMicroseconds)) µs, \
      max here \(String(format: "%.1f", remoteFetchMaxMicroseconds)) µs
      """
        + (heartbeatNodes.isEmpty
          ? ""
          : """

          cluster: nodes \(heartbeatNodes.joined(separator: ", ")); MOVED \(movedRedirects), ASK \(askRedirects); \
          slot maps read \(slotMapRefreshes); slot buckets dropped \(slotBucketsDropped)
          """)
        + (leaseWins + leaseWaits + leaseTakeovers + leasesLost + leaseStaleServes == 0
          ? ""
          : """

          fleet leases: \(leaseWins) won, \(leaseWaits) waits, \(leaseTakeovers) taken over, \(leasesLost) lost, \
          \(leaseStaleServes) served stale
          """)
  }
}

extension NearCacheStatistics {
  /// The figures of the near-cache file at `path`, read without standing for anything
  /// (read-only); nil when it is not a near-cache file (another value type, or no near
  /// cache ever opened it).
  public static func read(path: String, maxStaleness: Duration = .milliseconds(500)) -> NearCacheStatistics? {
    guard let local = try? SharedCache<[UInt8]>(path: path, policy: OpenPolicy(readOnly: true, create: false)),
      (try? local.tierWord(NearLayout.prefixIdentity)) ?? 0 != 0
    else { return nil }
    return NearCacheStatistics(
      local, maxStalenessMs: NearFence.milliseconds(maxStaleness), isHolder: false, fetchMaxNs: 0)
  }

  /// The figures of a near-cache file, from its tier words (`isHolder` and `fetchMaxNs`
  /// are the caller's: this process's).
  init(_ local: SharedCache<[UInt8]>, maxStalenessMs: UInt64, isHolder: Bool, fetchMaxNs: UInt64) {
    func w(_ i: Int) -> UInt64 { (try? local.tierWord(i)) ?? 0 }
    let pid = Int32(truncatingIfNeeded: w(NearLayout.holder))
    let now = Clock.milliseconds()
    let (n, s, h) = (w(NearLayout.fetches), w(NearLayout.sessions), w(NearLayout.holders))
    self.init(
      holderPID: pid == 0 ? nil : pid, holderAlive: SystemCall.isProcessAlive(pid), isHolder: isHolder,
      heartbeatAgeMilliseconds: [], fenceFresh: NearFence.isFresh(local, maxStalenessMs),
      epoch: w(NearLayout.epoch) >> 32, invalidationsReceived: w(NearLayout.received),
      invalidationsApplied: w(NearLayout.applied),
      flushes: w(NearLayout.flushes), reconnects: s &- min(s, h), holderChanges: h,
      staleServes: w(NearLayout.staleServes), fenceMisses: w(NearLayout.fenceMisses),
      epochMisses: w(NearLayout.epochMisses),
      remoteFetches: n,
      remoteFetchMeanMicroseconds: n == 0 ? 0 : Double(w(NearLayout.fetchNanoseconds)) / Double(n) / 1000,
      remoteFetchMaxMicroseconds: Double(fetchMaxNs) / 1000, local: local.statistics)
    // In front of a cluster: one age per primary (its last confirmed heartbeat).
    let nodes = NearLayout.nodeFenceList(local)
    let f = w(NearLayout.fence)
    heartbeatAgeMilliseconds =
      nodes.isEmpty ? [f == 0 ? nil : now &- min(now, f)] : nodes.map { $0.ms == 0 ? nil : now &- min(now, $0.ms) }
    heartbeatNodes = nodes.map { "port \($0.port)" }
    movedRedirects = w(NearLayout.Cluster.moved)
    askRedirects = w(NearLayout.Cluster.ask)
    slotMapRefreshes = w(NearLayout.Cluster.slotMapRefreshes)
    slotBucketsDropped = w(NearLayout.Cluster.bucketsDropped)
    leaseWins = w(NearLayout.Cluster.leaseWins)
    leaseWaits = w(NearLayout.Cluster.leaseWaits)
    leaseTakeovers = w(NearLayout.Cluster.leaseTakeovers)
    leasesLost = w(NearLayout.Cluster.leaseLost)
    leaseStaleServes = w(NearLayout.Cluster.leaseStaleServes)
  }
}

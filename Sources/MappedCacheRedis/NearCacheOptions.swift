/// How a `NearCache` runs its file and its share of the invalidation role.
public struct NearCacheOptions: Sendable, Equatable {
  /// Size of the cache file when it is created.
  public var capacity: Int
  /// How often the holder sends a PING whose reply confirms the fence (seconds).
  public var heartbeatInterval: Double
  /// How often a process that does not hold the role tries to take it (seconds): the
  /// longest gap after a holder dies before another one starts.
  public var electionInterval: Double
  /// Whether this process stands for the role (false: it only reads the file; some
  /// other process, or `mapped-cache agent`, must hold it).
  public var standsForHolder: Bool
  /// Longest pause between the holder's reconnect attempts (seconds).
  public var reconnectBackoffCap: Double
  /// Serve local entries even when the fence is older than `maxStaleness` (each such
  /// read is counted in `staleServes`) instead of reading Redis.
  public var serveStale: Bool
  /// Remember for this many seconds that Redis has no value for a key (nil: do not).
  /// A later write of the key invalidates it like any entry.
  public var cacheMisses: Double?
  /// How long a reader waits for another process's fetch of the same key before
  /// fetching itself (seconds); also the lifetime of a fill's placeholder entry.
  public var fillTimeout: Double
  /// In front of a cluster: how often the holder reads the slot map (seconds). A slot
  /// that moved is noticed within this (or at once after a redirect), and the file's
  /// fences never run ahead of the last map read, so keep it well under `maxStaleness`.
  public var topologyInterval: Double

  /// Options with the defaults described above.
  public init(
    capacity: Int = 64 << 20, heartbeatInterval: Double = 0.02, electionInterval: Double = 0.01,
    standsForHolder: Bool = true, reconnectBackoffCap: Double = 0.5, serveStale: Bool = false,
    cacheMisses: Double? = nil, fillTimeout: Double = 2, topologyInterval: Double = 0.1
  ) {
    self.capacity = capacity
    self.heartbeatInterval = heartbeatInterval
    self.electionInterval = electionInterval
    self.standsForHolder = standsForHolder
    self.reconnectBackoffCap = reconnectBackoffCap
    self.serveStale = serveStale
    self.cacheMisses = cacheMisses
    self.fillTimeout = fillTimeout
    self.topologyInterval = topologyInterval
  }
}

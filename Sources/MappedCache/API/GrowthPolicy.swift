import Foundation

/// Growth by policy: the cache grows itself when it is evicting entries that would have
/// been read again. The signal is the ghost table's: a new key whose ghost a partition
/// still remembers was evicted recently and came back, a miss a larger cache would have
/// served. When, since the last growth, at least `ghostHitRate` of the new keys stored
/// were such keys (and at least `minimumInserts` were stored), and `minimumInterval` has
/// passed, the cache grows by `factor`, never past `CacheOptions.maxCapacity` nor past
/// the file system's free space. Stored in the file (`CacheOptions.growthPolicy`,
/// `SharedCache.setGrowthPolicy`): a writer of any process that sees a ghost hit checks
/// it (at most four times a second per handle) and grows on a thread of its own, so no
/// write waits for it. Off by default. `CacheStatistics` and `mapped-cache stats` show
/// the ghost hits, the growths and the rate that drove each.
public struct GrowthPolicy: Sendable, Equatable, Codable {
  /// The share of new keys that were ghost hits, since the last growth, that makes the
  /// cache grow: 0.001 to 1. Default 0.1.
  public var ghostHitRate: Double = 0.1
  /// Each growth multiplies the capacity by this: 1.1 to 16. Default 2.
  public var factor: Double = 2
  /// The least time between two growths, in seconds: 0.1 to 10^6. Default 60.
  public var minimumInterval: Double = 60
  /// The least new keys stored since the last growth before the rate counts: 1 to 10^9.
  /// Default 10,000.
  public var minimumInserts: Int = 10_000

  /// A policy (checked when it is stored: ``CacheError/invalidArgument(_:)`` for a
  /// value out of its range).
  public init(
    ghostHitRate: Double = 0.1, factor: Double = 2, minimumInterval: Double = 60, minimumInserts: Int = 10_000
  ) {
    self.ghostHitRate = ghostHitRate
    self.factor = factor
    self.minimumInterval = minimumInterval
    self.minimumInserts = minimumInserts
  }

  func validate() throws(CacheError) {
    guard (0.001...1).contains(ghostHitRate) else {
      throw .invalidArgument("GrowthPolicy.ghostHitRate \(ghostHitRate) must be between 0.001 and 1")
    }
    guard (1.1...16).contains(factor) else {
      throw .invalidArgument("GrowthPolicy.factor \(factor) must be between 1.1 and 16")
    }
    guard (0.1...1e6).contains(minimumInterval) else {
      throw .invalidArgument("GrowthPolicy.minimumInterval \(minimumInterval) must be between 0.1 and 10^6 seconds")
    }
    guard (1...1_000_000_000).contains(minimumInserts) else {
      throw .invalidArgument("GrowthPolicy.minimumInserts \(minimumInserts) must be between 1 and 10^9")
    }
  }
}

/// One growth of the file, as `CacheStatistics.growthHistory` keeps it.
public struct GrowthRecord: Sendable, Equatable, Codable {
  /// When it finished.
  public var date: Date
  /// The capacity after it.
  public var capacity: Int
  /// The ghost-hit rate that drove it (`GrowthPolicy`), or nil for a growth by hand.
  public var ghostHitRate: Double?
}

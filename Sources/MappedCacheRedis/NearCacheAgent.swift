import Foundation
@_spi(Tiers) import MappedCache

/// The invalidation role of a near-cache file without a value type: what
/// `mapped-cache agent PATH --redis URL --prefix P` runs, for hosts that prefer a sidecar
/// to electing one of their workers. It stands for the role like any `NearCache` (the
/// same kernel lock: run it beside workers that also stand, or make them
/// `standsForHolder: false`); it never reads or decodes values.
public final class NearCacheAgent: @unchecked Sendable {
  /// The near-cache file.
  public let local: SharedCache<[UInt8]>
  let holder: NearCacheHolder
  let maxStalenessMs: UInt64
  /// Where the keys live, without credentials: `host:port`, or `cluster host:port,…` (seeds).
  public let remoteDescription: String

  /// Opens (or creates) the near-cache file at `path` for the keys under `keyPrefix` of
  /// the Redis at `url`, and starts standing for the role.
  public init(
    path: String, url: String, keyPrefix: String, maxStaleness: Duration = .milliseconds(500),
    options: NearCacheOptions = NearCacheOptions(), redisOptions: RedisOptions = RedisOptions(),
    policy: OpenPolicy = OpenPolicy()
  ) throws {
    let cluster = ClusterURL.isCluster(url) ? try RedisClient(url: url, options: redisOptions) : nil
    let endpoint = try cluster?.endpoint ?? RedisEndpoint(url: url)
    remoteDescription =
      try cluster.map { _ in "cluster " + (try ClusterURL(url)).seeds.map(\.description).joined(separator: ",") }
      ?? endpoint.description
    maxStalenessMs = NearFence.milliseconds(maxStaleness)
    local = try SharedCache<[UInt8]>(path: path, capacity: options.capacity, policy: policy)
    try NearLayout.claim(
      local, NearLayout.prefixIdentity, NearLayout.fingerprint(keyPrefix),
      expected: "a near cache of keys under \"\(keyPrefix)\"", other: "a near cache of another key prefix")
    holder = NearCacheHolder(
      local: local, endpoint: endpoint, redisOptions: redisOptions, prefix: keyPrefix, options: options,
      cluster: cluster)
    holder.start()
  }

  deinit { holder.stop() }

  /// Whether this agent holds the role now.
  public var isHolding: Bool { holder.isHolding }

  /// Stops standing (resigning the role, if held).
  public func stop() { holder.stop() }

  /// The figures of the file, and whether this agent holds the role.
  public var statistics: NearCacheStatistics {
    NearCacheStatistics(local, maxStalenessMs: maxStalenessMs, isHolder: holder.isHolding, fetchMaxNs: 0)
  }
}

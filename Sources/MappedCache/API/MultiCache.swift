import Foundation

/// Several caches used as tiers, fastest first (soffes/Cache's `MultiCache`): reads try
/// each tier in order and, on a hit in a later tier, back-fill the earlier tiers with the
/// value and its remaining lifetime; writes and removals go to every tier.
///
/// ```swift
/// let tiers = MultiCache<String>([MemoryCache<String>(countLimit: 500), try SharedCache<String>(name: "demo")])
/// try tiers.setObject("v", forKey: "k", expires: .seconds(60))
/// ```
public final class MultiCache<Value>: Cache, @unchecked Sendable {
  /// The tiers, read in this order.
  public let tiers: [any Cache<Value>]

  /// Tiers, fastest first (typically a `MemoryCache`, then a `SharedCache`).
  public init(_ tiers: [any Cache<Value>]) { self.tiers = tiers }

  public func object(forKey key: String) throws -> Value? {
    try objectAndExpiry(forKey: key)?.value
  }

  public func objectAndExpiry(forKey key: String) throws -> (value: Value, expires: CacheExpiry)? {
    for (n, tier) in tiers.enumerated() {
      if let hit = try tier.objectAndExpiry(forKey: key) {
        for earlier in tiers[..<n] { try earlier.setObject(hit.value, forKey: key, expires: hit.expires) }
        return hit
      }
    }
    return nil
  }

  public func setObject(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) throws {
    for tier in tiers { try tier.setObject(value, forKey: key, expires: expires) }
  }

  @discardableResult
  public func removeObject(forKey key: String) throws -> Bool {
    var any = false
    for tier in tiers where try tier.removeObject(forKey: key) { any = true }
    return any
  }

  public func removeAllObjects() throws {
    for tier in tiers { try tier.removeAllObjects() }
  }

  /// The first tier's hit, back-filling the earlier tiers (with the entry's remaining lifetime).
  public func get(_ key: String) async throws -> Value? {
    for (n, tier) in tiers.enumerated() {
      if let v = try await tier.get(key) {
        // The async read has no expiry to hand; back-fill through the synchronous path.
        if n > 0, let hit = try tier.objectAndExpiry(forKey: key) {
          for earlier in tiers[..<n] { try await earlier.set(hit.value, forKey: key, expires: hit.expires) }
          return hit.value
        }
        return v
      }
    }
    return nil
  }

  /// Stores the value in every tier, in order.
  public func set(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) async throws {
    for tier in tiers { try await tier.set(value, forKey: key, expires: expires) }
  }

  /// Removes the key from every tier; false when no tier held it.
  @discardableResult
  public func remove(_ key: String) async throws -> Bool {
    var any = false
    for tier in tiers where try await tier.remove(key) { any = true }
    return any
  }

  /// Empties every tier.
  public func removeAll() async throws {
    for tier in tiers { try await tier.removeAll() }
  }
}

import Foundation

/// What every cache tier offers (soffes/Cache's `Cache`, with expiry): get, set with an
/// expiry, remove, remove all, each both synchronous and `async`.
/// `SharedCache`, `MemoryCache` and `MultiCache` conform, so tiers can be combined.
///
/// The `async` forms (`get`, `set`, `remove`, `removeAll`) default to the synchronous
/// ones, which never wait for long (at most for the write lock).
public protocol Cache<Value>: AnyObject, Sendable {
  associatedtype Value

  /// The value for `key`, or nil when missing or expired.
  func object(forKey key: String) throws -> Value?
  /// The value for `key` and when it expires (used by `MultiCache` to back-fill tiers
  /// with the remaining lifetime, not a fresh one).
  func objectAndExpiry(forKey key: String) throws -> (value: Value, expires: CacheExpiry)?
  /// Stores `value`; a nil `expires` means the cache's default expiry.
  func setObject(_ value: Value, forKey key: String, expires: CacheExpiry?) throws
  /// Removes `key`; false when it was not present.
  @discardableResult func removeObject(forKey key: String) throws -> Bool
  /// Removes every entry.
  func removeAllObjects() throws

  func get(_ key: String) async throws -> Value?
  func set(_ value: Value, forKey key: String, expires: CacheExpiry?) async throws
  @discardableResult func remove(_ key: String) async throws -> Bool
  func removeAll() async throws
}

extension Cache {
  public func get(_ key: String) async throws -> Value? { try object(forKey: key) }
  public func set(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) async throws {
    try setObject(value, forKey: key, expires: expires)
  }
  @discardableResult public func remove(_ key: String) async throws -> Bool { try removeObject(forKey: key) }
  public func removeAll() async throws { try removeAllObjects() }
}

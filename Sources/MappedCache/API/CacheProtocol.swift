import Foundation

/// What every cache tier offers (soffes/Cache's `Cache`, with expiry): get, set with an
/// expiry, remove, remove all, each both synchronous and `async`.
/// `SharedCache`, `MemoryCache` and `MultiCache` conform, so tiers can be combined.
///
/// The `async` forms (`get`, `set`, `remove`, `removeAll`) default to the synchronous
/// ones, which never wait for long (at most for the write lock).
public protocol Cache<Value>: AnyObject, Sendable {
  /// The type of the values stored.
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

  /// `object(forKey:)`, for async code.
  func get(_ key: String) async throws -> Value?
  /// `setObject(_:forKey:expires:)`, for async code.
  func set(_ value: Value, forKey key: String, expires: CacheExpiry?) async throws
  /// `removeObject(forKey:)`, for async code.
  @discardableResult func remove(_ key: String) async throws -> Bool
  /// `removeAllObjects()`, for async code.
  func removeAll() async throws
}

extension Cache {
  /// Calls `object(forKey:)`, which never waits for long.
  public func get(_ key: String) async throws -> Value? { try object(forKey: key) }
  /// Calls `setObject(_:forKey:expires:)`, which waits at most for the write lock.
  public func set(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) async throws {
    try setObject(value, forKey: key, expires: expires)
  }
  /// Calls `removeObject(forKey:)`.
  @discardableResult public func remove(_ key: String) async throws -> Bool { try removeObject(forKey: key) }
  /// Calls `removeAllObjects()`.
  public func removeAll() async throws { try removeAllObjects() }
}

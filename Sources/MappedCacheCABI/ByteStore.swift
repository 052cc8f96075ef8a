import Foundation
@_spi(Bindings) import MappedCache

/// How a conditional write decides.
enum WriteCondition {
  /// Only when the key has no live entry (`mc_add`).
  case absent
  /// Only when it has one (`mc_replace`).
  case present
  /// Only when its entry's version is this one (`mc_cas`).
  case version(UInt64)
}

/// An open cache as the C ABI uses it: keys and values as bytes, whatever the file's
/// value type. Every operation is one call of the public `SharedCache` API (and of its
/// `Bindings` SPI for claims), so the ABI follows the engine and the file format with no
/// knowledge of either.
protocol ByteStore: AnyObject, Sendable {
  var typeName: String { get }
  var maxKey: Int { get }
  var maxValue: Int { get }
  var capacity: Int { get }
  var isWritable: Bool { get }
  var statistics: CacheStatistics { get }

  func get(_ key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) throws -> Int?
  func getMany(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    into buffers: UnsafeBufferPointer<UnsafeMutableRawBufferPointer>,
    lengths: UnsafeMutableBufferPointer<Int>
  ) throws -> Int
  /// Calls `body` with the value and version of a live entry; false when there is none.
  func withVersionedValue(_ key: String, _ body: (UnsafeRawBufferPointer, UInt64) throws -> Void) throws -> Bool
  /// Calls `body` with the value of the entry even when it has expired; false when there is none.
  func withValueAllowingExpired(_ key: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool
  func contains(_ key: String) throws -> Bool
  func expiry(_ key: String) throws -> CacheExpiry?

  func set(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expires: CacheExpiry) throws
  func set(_ key: String, _ value: UnsafeRawBufferPointer, expires: CacheExpiry, if condition: WriteCondition) throws
    -> Bool
  func setMany(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    expires: CacheExpiry
  ) throws
  func increment(_ key: String, by delta: Int64, initial: Int64, expires: CacheExpiry?) throws -> Int64
  func delete(_ key: String) throws -> Bool
  func deleteMany(_ keys: [String]) throws -> Int
  func touch(_ key: String, expires: CacheExpiry) throws -> Bool
  func clear() throws
  func sweep() throws -> Int
  func setLimits(count: Int?, cost: Int?) throws
  func verify(repair: Bool) throws -> VerifyReport
  /// Visits live entries (values nil with `keysOnly`) until `body` returns false.
  func forEach(keysOnly: Bool, _ body: (String, UnsafeRawBufferPointer?, CacheExpiry) throws -> Bool) throws

  func claimLock(_ key: String) throws -> ComputeClaimLock
  func throwIfComputeFailureCached(_ key: String) throws
  func isComputing(_ key: String) throws -> Bool
}

/// `ByteStore` over a `SharedCache` of one of the ABI's value types.
final class TypedStore<Value: ABIValue>: ByteStore, @unchecked Sendable {
  let cache: SharedCache<Value>
  let maxKey: Int
  let maxValue: Int

  init(path: String, options: CacheOptions, policy: OpenPolicy, lockMode: LockMode) throws {
    cache = try SharedCache<Value>(
      path: path, capacity: options.capacity, options: options, policy: policy, lockMode: lockMode)
    maxKey = cache.maxKeySize
    maxValue = cache.maxValueSize
  }

  var typeName: String { Value.abiTypeName }
  var capacity: Int { cache.capacity }
  var isWritable: Bool { cache.isWritable }
  var statistics: CacheStatistics { cache.statistics }

  func get(_ key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) throws -> Int? {
    try cache.copyBytes(forKey: key, into: buffer)
  }

  func getMany(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    into buffers: UnsafeBufferPointer<UnsafeMutableRawBufferPointer>,
    lengths: UnsafeMutableBufferPointer<Int>
  ) throws -> Int {
    try cache.copyBytes(forKeys: keys, into: buffers, lengths: lengths)
  }

  func withVersionedValue(_ key: String, _ body: (UnsafeRawBufferPointer, UInt64) throws -> Void) throws -> Bool {
    guard let (value, version) = try cache.objectWithVersion(forKey: key) else { return false }
    try value.withStoredBytes { try body($0, version) }
    return true
  }

  func withValueAllowingExpired(_ key: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
    guard let value = try cache.object(forKey: key, allowingExpired: true) else { return false }
    try value.withStoredBytes(body)
    return true
  }

  func contains(_ key: String) throws -> Bool { try cache.containsObject(forKey: key) }
  func expiry(_ key: String) throws -> CacheExpiry? { try cache.expiry(forKey: key) }

  func set(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expires: CacheExpiry) throws {
    if Value.self == [UInt8].self {
      // Bytes go from the caller's memory to the file with no Array in between.
      return try unsafeBitCast(cache, to: SharedCache<[UInt8]>.self).setBytes(value, forKey: key, expires: expires)
    }
    try Value.withValue(storing: value) { try cache.setObject($0, forKey: key, expires: expires) }
  }

  func set(_ key: String, _ value: UnsafeRawBufferPointer, expires: CacheExpiry, if condition: WriteCondition) throws
    -> Bool
  {
    try Value.withValue(storing: value) { try cache.set($0, forKey: key, expires: expires, if: condition) }
  }

  func setMany(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    expires: CacheExpiry
  ) throws {
    if Value.self == [UInt8].self {
      return try unsafeBitCast(cache, to: SharedCache<[UInt8]>.self).setBytes(values, forKeys: keys, expires: expires)
    }
    // Typed values are checked (and copied) first, so a bad one stores nothing.
    var items: [(key: String, value: Value)] = []
    items.reserveCapacity(keys.count)
    for (key, value) in zip(keys, values) {
      items.append((String(decoding: key, as: UTF8.self), try Value.owned(value)))
    }
    try cache.setObjects(items, expires: expires)
  }

  func increment(_ key: String, by delta: Int64, initial: Int64, expires: CacheExpiry?) throws -> Int64 {
    if Value.self == Int.self {
      let counters = unsafeBitCast(cache, to: SharedCache<Int>.self)
      return Int64(try counters.increment(forKey: key, by: Int(delta), initial: Int(initial), expires: expires))
    }
    return try DecimalCounter<Value>(cache: cache, key: key).add(delta, initial: initial, expires: expires)
  }

  func delete(_ key: String) throws -> Bool { try cache.removeObject(forKey: key) }
  func deleteMany(_ keys: [String]) throws -> Int { try cache.removeObjects(forKeys: keys) }
  func touch(_ key: String, expires: CacheExpiry) throws -> Bool { try cache.touch(key, expires: expires) }
  func clear() throws { try cache.removeAllObjects() }
  func sweep() throws -> Int { try cache.removeExpiredObjects() }
  func setLimits(count: Int?, cost: Int?) throws { try cache.setLimits(count: count, cost: cost) }
  func verify(repair: Bool) throws -> VerifyReport { try cache.verify(repair: repair) }

  func forEach(keysOnly: Bool, _ body: (String, UnsafeRawBufferPointer?, CacheExpiry) throws -> Bool) throws {
    if keysOnly {
      for key in cache.allKeys {
        // A key removed or expired since the walk saw it is skipped.
        guard let expires = try cache.expiry(forKey: key) else { continue }
        if try !body(key, nil, expires) { return }
      }
      return
    }
    try cache.forEachObject { key, value, expires in try value.withStoredBytes { try body(key, $0, expires) } }
  }

  func claimLock(_ key: String) throws -> ComputeClaimLock { try cache.computeClaimLock(forKey: key) }
  func throwIfComputeFailureCached(_ key: String) throws { try cache.throwIfComputeFailureCached(forKey: key) }
  func isComputing(_ key: String) throws -> Bool { try cache.isComputing(forKey: key) }
}

extension SharedCache where Value: ABIValue {
  /// The conditional write `condition` names; false when it did not store.
  func set(_ value: Value, forKey key: String, expires: CacheExpiry, if condition: WriteCondition) throws -> Bool {
    switch condition {
    case .absent: return try add(value, forKey: key, expires: expires)
    case .present: return try replace(value, forKey: key, expires: expires)
    case .version(let version): return try setObject(value, forKey: key, ifVersion: version, expires: expires)
    }
  }
}

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
/// knowledge of either. A class rather than a protocol: a call through the class's table
/// can be made on an unretained reference (`OpenCache.withCurrent`), where a call through
/// an existential retained it, at a third of a read's time.
class ByteStore: @unchecked Sendable {
  /// The longest key and the largest value, checked by the ABI before it reads either.
  let maxKey: Int
  let maxValue: Int
  /// The same cache as the subclass's, for the read paths: `mc_get`'s, the same for every
  /// value type, and the batch read's.
  let bytes: CacheByteReader
  private let reader: Reader

  init(reader: Reader, bytes: CacheByteReader, maxKey: Int, maxValue: Int) {
    self.reader = reader
    self.bytes = bytes
    self.maxKey = maxKey
    self.maxValue = maxValue
  }

  /// The value of `key` copied into `buffer` (its length; nil when missing), as
  /// `SharedCache.copyBytes(forKey:into:)` reads it.
  @inline(__always)
  final func get(_ key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) throws -> Int? {
    try reader.copyBytes(forKey: key, into: buffer)
  }

  /// `get` for a key the caller checked (1 to `maxKey` bytes, UTF-8): the length, or -1
  /// when missing.
  @inline(__always)
  final func get(checkedKey key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    bytes.copyBytes(forCheckedKey: key, into: buffer)
  }

  /// Many keys at once, as `SharedCache.copyBytes(forKeys:into:lengths:)` reads them.
  final func getMany(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    into buffers: UnsafeBufferPointer<UnsafeMutableRawBufferPointer>,
    lengths: UnsafeMutableBufferPointer<Int>
  ) throws -> Int {
    try reader.copyBytes(forKeys: keys, into: buffers, lengths: lengths)
  }

  private func abstract() -> Never { preconditionFailure("ByteStore's operations are TypedStore's") }

  var typeName: String { abstract() }
  var capacity: Int { abstract() }
  var partitionCount: Int { abstract() }
  var isWritable: Bool { abstract() }
  var statistics: CacheStatistics { abstract() }

  /// Calls `body` with the value and version of a live entry; false when there is none.
  func withVersionedValue(_ key: String, _ body: (UnsafeRawBufferPointer, UInt64) throws -> Void) throws -> Bool {
    abstract()
  }
  /// Calls `body` with the value of the entry even when it has expired; false when there is none.
  func withValueAllowingExpired(_ key: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
    abstract()
  }
  func contains(_ key: String) throws -> Bool { abstract() }
  func expiry(_ key: String) throws -> CacheExpiry? { abstract() }

  func set(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expires: CacheExpiry) throws { abstract() }
  func set(_ key: String, _ value: UnsafeRawBufferPointer, expires: CacheExpiry, if condition: WriteCondition) throws
    -> Bool
  { abstract() }
  func setMany(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    expires: CacheExpiry
  ) throws { abstract() }
  func increment(_ key: String, by delta: Int64, initial: Int64, expires: CacheExpiry?) throws -> Int64 { abstract() }
  func delete(_ key: String) throws -> Bool { abstract() }
  func deleteMany(_ keys: [String]) throws -> Int { abstract() }
  func touch(_ key: String, expires: CacheExpiry) throws -> Bool { abstract() }
  func clear() throws { abstract() }
  func sweep() throws -> Int { abstract() }
  func setLimits(count: Int?, cost: Int?) throws { abstract() }
  func verify(repair: Bool) throws -> VerifyReport { abstract() }
  /// `SharedCache.grow(toCapacity:)`: the capacity after.
  func grow(toCapacity capacity: Int) throws -> Int { abstract() }
  /// `SharedCache.setGrowthPolicy`.
  func setGrowthPolicy(_ policy: GrowthPolicy?) throws { abstract() }
  /// Visits live entries (values nil with `keysOnly`) until `body` returns false.
  func forEach(keysOnly: Bool, _ body: (String, UnsafeRawBufferPointer?, CacheExpiry) throws -> Bool) throws {
    abstract()
  }

  func claimLock(_ key: String) throws -> ComputeClaimLock { abstract() }
  func throwIfComputeFailureCached(_ key: String) throws { abstract() }
  func isComputing(_ key: String) throws -> Bool { abstract() }
}

/// `ByteStore` over a `SharedCache` of one of the ABI's value types.
final class TypedStore<Value: ABIValue>: ByteStore, @unchecked Sendable {
  let cache: SharedCache<Value>

  init(path: String, options: CacheOptions, policy: OpenPolicy, lockMode: LockMode) throws {
    cache = try SharedCache<Value>(
      path: path, capacity: options.capacity, options: options, policy: policy, lockMode: lockMode)
    super.init(reader: Reader(cache), bytes: cache.byteReader, maxKey: cache.maxKeySize, maxValue: cache.maxValueSize)
  }

  override var typeName: String { Value.abiTypeName }
  override var capacity: Int { cache.capacity }
  override var partitionCount: Int { cache.partitionCount }
  override var isWritable: Bool { cache.isWritable }
  override var statistics: CacheStatistics { cache.statistics }

  override func withVersionedValue(_ key: String, _ body: (UnsafeRawBufferPointer, UInt64) throws -> Void) throws
    -> Bool
  {
    guard let (value, version) = try cache.objectWithVersion(forKey: key) else { return false }
    try value.withStoredBytes { try body($0, version) }
    return true
  }

  override func withValueAllowingExpired(_ key: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool
  {
    guard let value = try cache.object(forKey: key, allowingExpired: true) else { return false }
    try value.withStoredBytes(body)
    return true
  }

  override func contains(_ key: String) throws -> Bool { try cache.containsObject(forKey: key) }
  override func expiry(_ key: String) throws -> CacheExpiry? { try cache.expiry(forKey: key) }

  @_specialize(where Value == [UInt8])
  @_specialize(where Value == TaggedBytes<PythonFormat>)
  @_specialize(where Value == TaggedBytes<StringFormat>)
  @_specialize(where Value == Int)
  override func set(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, expires: CacheExpiry) throws {
    if Value.self == [UInt8].self {
      // Bytes go from the caller's memory to the file with no Array in between.
      return try unsafeDowncast(cache, to: SharedCache<[UInt8]>.self).setBytes(value, forKey: key, expires: expires)
    }
    try Value.withValue(storing: value) { try cache.setObject($0, forKey: key, expires: expires) }
  }

  override func set(_ key: String, _ value: UnsafeRawBufferPointer, expires: CacheExpiry, if condition: WriteCondition)
    throws
    -> Bool
  {
    try Value.withValue(storing: value) { try cache.set($0, forKey: key, expires: expires, if: condition) }
  }

  override func setMany(
    _ keys: UnsafeBufferPointer<UnsafeRawBufferPointer>, _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    expires: CacheExpiry
  ) throws {
    if Value.self == [UInt8].self {
      return try unsafeDowncast(cache, to: SharedCache<[UInt8]>.self).setBytes(values, forKeys: keys, expires: expires)
    }
    // Typed values are checked (and copied) first, so a bad one stores nothing.
    var items: [(key: String, value: Value)] = []
    items.reserveCapacity(keys.count)
    for (key, value) in zip(keys, values) {
      items.append((String(decoding: key, as: UTF8.self), try Value.owned(value)))
    }
    try cache.setObjects(items, expires: expires)
  }

  override func increment(_ key: String, by delta: Int64, initial: Int64, expires: CacheExpiry?) throws -> Int64 {
    if Value.self == Int.self {
      let counters = unsafeDowncast(cache, to: SharedCache<Int>.self)
      return Int64(try counters.increment(forKey: key, by: Int(delta), initial: Int(initial), expires: expires))
    }
    return try DecimalCounter<Value>(cache: cache, key: key).add(delta, initial: initial, expires: expires)
  }

  override func delete(_ key: String) throws -> Bool { try cache.removeObject(forKey: key) }
  override func deleteMany(_ keys: [String]) throws -> Int { try cache.removeObjects(forKeys: keys) }
  override func touch(_ key: String, expires: CacheExpiry) throws -> Bool { try cache.touch(key, expires: expires) }
  override func clear() throws { try cache.removeAllObjects() }
  override func sweep() throws -> Int { try cache.removeExpiredObjects() }
  override func setLimits(count: Int?, cost: Int?) throws { try cache.setLimits(count: count, cost: cost) }
  override func verify(repair: Bool) throws -> VerifyReport { try cache.verify(repair: repair) }
  override func grow(toCapacity capacity: Int) throws -> Int { try cache.grow(toCapacity: capacity) }
  override func setGrowthPolicy(_ policy: GrowthPolicy?) throws { try cache.setGrowthPolicy(policy) }

  override func forEach(keysOnly: Bool, _ body: (String, UnsafeRawBufferPointer?, CacheExpiry) throws -> Bool) throws {
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

  override func claimLock(_ key: String) throws -> ComputeClaimLock { try cache.computeClaimLock(forKey: key) }
  override func throwIfComputeFailureCached(_ key: String) throws { try cache.throwIfComputeFailureCached(forKey: key) }
  override func isComputing(_ key: String) throws -> Bool { try cache.isComputing(forKey: key) }
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

/// The read path of each value type's cache, each arm specialised for its type: reads
/// are the same bytes whatever the type, and a generic read through `TypedStore` costs a
/// C read a third more instructions than Swift's own `copyBytes` (its type dispatch and
/// calls).
enum Reader {
  case bytes(SharedCache<[UInt8]>)
  case strings(SharedCache<TaggedBytes<StringFormat>>)
  case integers(SharedCache<Int>)
  case python(SharedCache<TaggedBytes<PythonFormat>>)

  init<Value>(_ cache: SharedCache<Value>) {
    if let c = cache as? SharedCache<[UInt8]> {
      self = .bytes(c)
    } else if let c = cache as? SharedCache<TaggedBytes<StringFormat>> {
      self = .strings(c)
    } else if let c = cache as? SharedCache<Int> {
      self = .integers(c)
    } else if let c = cache as? SharedCache<TaggedBytes<PythonFormat>> {
      self = .python(c)
    } else {
      preconditionFailure("\(Value.self) is not a value type of the C ABI")
    }
  }

  @inline(__always)
  func copyBytes(forKey key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) throws -> Int? {
    switch self {
    case .bytes(let c): return try c.copyBytes(forKey: key, into: buffer)
    case .strings(let c): return try c.copyBytes(forKey: key, into: buffer)
    case .integers(let c): return try c.copyBytes(forKey: key, into: buffer)
    case .python(let c): return try c.copyBytes(forKey: key, into: buffer)
    }
  }

  func copyBytes(
    forKeys keys: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    into buffers: UnsafeBufferPointer<UnsafeMutableRawBufferPointer>,
    lengths: UnsafeMutableBufferPointer<Int>
  ) throws -> Int {
    switch self {
    case .bytes(let c): return try c.copyBytes(forKeys: keys, into: buffers, lengths: lengths)
    case .strings(let c): return try c.copyBytes(forKeys: keys, into: buffers, lengths: lengths)
    case .integers(let c): return try c.copyBytes(forKeys: keys, into: buffers, lengths: lengths)
    case .python(let c): return try c.copyBytes(forKeys: keys, into: buffers, lengths: lengths)
    }
  }
}

/// The value codec of `SharedCache<Value>` on its own, for a tier that stores the bytes
/// of values without a typed cache of its own (the Redis tier of `MappedCacheRedis`, whose
/// near cache keeps a frame around them in a byte cache). The same bytes `setObject`
/// stores and `object(forKey:)` decodes. Not for applications: public (not SPI) only so
/// that the near cache's inlinable hit path may decode with it, specialised in the caller
/// as `SharedCache.object(forKey:)` is; hidden from the documentation.
@_documentation(visibility: internal)
public struct TierCodec<Value>: @unchecked Sendable {
  @usableFromInline let codec: ValueCodec<Value>

  /// The codec `SharedCache<Value>` uses.
  public init() where Value: Codable { codec = ValueCodec<Value>.make() }

  /// The name the file's type fingerprint is made from ("string", "codable:Module.User", …).
  public var typeName: String { codec.typeName }
  /// The fingerprint a `SharedCache<Value>` file records for this type.
  public var fingerprint: UInt64 { codec.fingerprint }

  /// The bytes `SharedCache.setObject` would store for `value`.
  public func encode(_ value: Value) throws -> [UInt8] {
    var out: [UInt8] = []
    try codec.withValueBytes(value) { out = Array($0) }
    return out
  }

  /// Calls `body` with the bytes of `value`, without copying where the type allows.
  @inlinable
  public func withBytes(of value: Value, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
    try codec.withValueBytes(value, body)
  }

  /// Decodes bytes as `object(forKey:)` does; a failure is `.decodingFailed` for `key`.
  @inlinable
  public func decode(_ bytes: UnsafeRawBufferPointer, forKey key: String) throws -> Value {
    do { return try codec.decodeValue(bytes) } catch { throw CacheError.decodingFailed(key: key, reason: "\(error)") }
  }
}

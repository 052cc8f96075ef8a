/// What a tier layered on a `SharedCache` needs from it beyond the public API (the Redis
/// near cache in `MappedCacheRedis`): the value codec, so that a remote tier stores the
/// same bytes the file does, and a few shared words in the file's header, so that every
/// process of a host sees one heartbeat and one fence. Not for applications.
@_spi(Tiers)
extension SharedCache {
  /// How many tier words the file has (indices `0 ..< tierWordCount`).
  public static var tierWordCount: Int { Format.HeaderOffset.tierWordCount }

  /// The bytes `setObject` would store for `value`.
  public func encodedBytes(of value: Value) throws -> [UInt8] {
    var out: [UInt8] = []
    try codec.withValueBytes(value) { out = Array($0) }
    return out
  }

  /// Decodes bytes as `object(forKey:)` does (a failure is `.decodingFailed` for `key`).
  public func decodedValue(from bytes: UnsafeRawBufferPointer, forKey key: String) throws -> Value {
    try decode(bytes, key: key)
  }

  /// Tier word `index`, loaded with acquire ordering (no lock; 0 in a new file).
  public func tierWord(_ index: Int) throws -> UInt64 {
    try checkTierIndex(index)
    return engine.tierWord(index)
  }

  /// Stores tier word `index` with release ordering. Throws `.readOnly` on a read-only handle.
  public func storeTierWord(_ index: Int, _ value: UInt64) throws {
    try checkTierIndex(index)
    try engine.storeTierWord(index, value)
  }

  /// Compare-and-swap of tier word `index`; true when it held `expected` and now holds `desired`.
  public func compareExchangeTierWord(_ index: Int, expected: UInt64, desired: UInt64) throws -> Bool {
    try checkTierIndex(index)
    return try engine.compareExchangeTierWord(index, expected: expected, desired: desired)
  }

  private func checkTierIndex(_ index: Int) throws {
    guard (0..<Format.HeaderOffset.tierWordCount).contains(index) else {
      throw CacheError.invalidArgument("tier word \(index) is not in 0..<\(Format.HeaderOffset.tierWordCount)")
    }
  }
}

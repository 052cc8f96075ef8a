/// AwesomeCache's spellings, beside MappedCache's own, so that code written against
/// AwesomeCache's `Cache<T>` ports by renaming the type and adding `try` (README, "Coming
/// from AwesomeCache / soffes/Cache / SKCache", lists what else differs). Each one is the
/// method it names and costs what that method costs.
extension SharedCache {
  /// The value for `key`; with `returnExpiredObjectIfPresent`, an expired entry still in
  /// the file is returned too. AwesomeCache's name for `object(forKey:allowingExpired:)`.
  ///
  /// - Throws: `CacheError` as `object(forKey:)` does: an empty or too long key, a value
  ///   that does not decode as `Value`.
  @inlinable
  public func object(forKey key: String, returnExpiredObjectIfPresent: Bool) throws -> Value? {
    try object(forKey: key, allowingExpired: returnExpiredObjectIfPresent)
  }

  /// Every value in the cache, without its key (AwesomeCache's `allObjects`); with
  /// `includeExpired`, expired entries still in the file too. In no particular order.
  ///
  /// Built by `forEachObject(includeExpired:)`, without the write lock: entries written
  /// or moved while it runs may be missing, none is listed twice. `allObjects()` (no
  /// argument) is MappedCache's own and returns a dictionary keyed by key.
  ///
  /// - Throws: `CacheError.decodingFailed` for a value that does not decode as `Value`.
  public func allObjects(includeExpired: Bool) throws -> [Value] {
    var values: [Value] = []
    try forEachObject(includeExpired: includeExpired) { _, value, _ in
      values.append(value)
      return true
    }
    return values
  }
}

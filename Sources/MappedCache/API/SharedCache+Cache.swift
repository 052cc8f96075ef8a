import Foundation

extension SharedCache: Cache where Value: Codable {
  public func objectAndExpiry(forKey key: String) throws -> (value: Value, expires: CacheExpiry)? {
    try withKey(key) { k in
      try engine.checkKey(k)
      return try engine.withValue(forKey: k) { bytes, info in
        do { return (try codec.decode(bytes), CacheExpiry.from(milliseconds: info.expiryMilliseconds)) } catch {
          throw CacheError.decodingFailed(key: key, reason: "\(error)")
        }
      }
    }
  }
}

import Foundation

extension SharedCache: Cache where Value: Codable {
  public func objectAndExpiry(forKey key: String) throws -> (value: Value, expires: CacheExpiry)? {
    try withKey(key) { k in
      try engine.checkKey(k)
      return try engine.withValue(forKey: k) { bytes, info in
        (try decode(bytes, key: key), CacheExpiry.from(milliseconds: info.expiryMilliseconds))
      }
    }
  }
}

import MappedCache

/// `mc_incr` on a cache whose values are not integers as such (bytes, strings, python
/// values): the counter is ASCII decimal after the format's counter prefix (memcached's
/// and Redis's INCR format), changed by compare-and-swap and tried again while other
/// writers come first. A cache of int64 uses Swift's in-place `increment` instead.
struct DecimalCounter<Value: ABIValue> {
  let cache: SharedCache<Value>
  let key: String

  /// Adds `delta` and returns the new value; a missing or expired counter starts from
  /// `initial`. `expires` nil keeps an existing counter's expiry (a new one never expires).
  func add(_ delta: Int64, initial: Int64, expires: CacheExpiry?) throws -> Int64 {
    while true {
      guard let (value, version) = try cache.objectWithVersion(forKey: key) else {
        let new = try sum(initial, delta)
        if try store(new, expires: expires ?? .never, if: .absent) { return new }
        continue
      }
      guard let old = value.withStoredBytes({ DecimalCounter.parse($0, prefix: Value.counterPrefix) }) else {
        throw CacheError.notAnInteger(key: key)
      }
      let new = try sum(old, delta)
      // The expiry read after the version: a touch in between changes the version, and
      // the compare-and-swap below then fails and reads both again.
      guard let keep = try expires ?? cache.expiry(forKey: key) else { continue }
      if try store(new, expires: keep, if: .version(version)) { return new }
    }
  }

  private func sum(_ a: Int64, _ b: Int64) throws -> Int64 {
    let (r, overflow) = a.addingReportingOverflow(b)
    if overflow {
      throw CacheError.invalidArgument(
        "changing the counter \"\(key)\" (\(a)) by \(b) would overflow a 64-bit integer; reset it")
    }
    return r
  }

  private func store(_ n: Int64, expires: CacheExpiry, if condition: WriteCondition) throws -> Bool {
    try (Value.counterPrefix + Array(String(n).utf8)).withUnsafeBytes { bytes in
      try Value.withValue(storing: bytes) { try cache.set($0, forKey: key, expires: expires, if: condition) }
    }
  }

  /// The integer `bytes` spell after `prefix`: an optional '-' and 1 to 19 digits that fit
  /// in 64 bits; nil for anything else.
  static func parse(_ bytes: UnsafeRawBufferPointer, prefix: [UInt8]) -> Int64? {
    guard bytes.count > prefix.count, bytes.starts(with: prefix) else { return nil }
    var i = prefix.count
    let negative = bytes[i] == UInt8(ascii: "-")
    if negative { i += 1 }
    let digits = bytes.count - i
    guard digits >= 1, digits <= 19 else { return nil }
    var magnitude: UInt64 = 0
    while i < bytes.count {
      let d = bytes[i] &- UInt8(ascii: "0")
      guard d <= 9 else { return nil }
      magnitude = magnitude * 10 + UInt64(d)  // Safe: 19 digits stay below 2^64.
      i += 1
    }
    if negative { return magnitude <= UInt64(Int64.max) + 1 ? Int64(truncatingIfNeeded: 0 &- magnitude) : nil }
    return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
  }
}

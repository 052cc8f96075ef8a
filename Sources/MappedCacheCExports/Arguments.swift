import MappedCache

/// The checks every argument from C passes before it is used. Lengths arrive as `size_t`
/// (`Int` here: a length of 2^63 or more reads as negative), and every length is checked
/// against its limit before the bytes behind it are read, so a wrong length is an error,
/// not a read past the caller's memory.
enum Arguments {
  /// A key: not NULL, 1 to `maxKey` bytes, UTF-8.
  @inline(__always)
  static func key(_ pointer: UnsafeRawPointer?, _ length: Int, maxKey: Int) throws -> UnsafeRawBufferPointer {
    guard let pointer else { throw ABIError.invalidArgument("the key is NULL") }
    guard length > 0 else {
      throw length == 0 ? CacheError.emptyKey : ABIError.invalidArgument("a key length of \(UInt(bitPattern: length))")
    }
    guard length <= maxKey else { throw CacheError.keyTooLarge(size: length, limit: maxKey) }
    let key = UnsafeRawBufferPointer(start: pointer, count: length)
    guard UTF8Check.isValid(key) else {
      throw ABIError.invalidKey("keys are UTF-8 text, as Swift's String keys are; this key of \(length) bytes is not")
    }
    return key
  }

  /// A value: up to `maxValue` bytes; NULL only when empty.
  @inline(__always)
  static func value(_ pointer: UnsafeRawPointer?, _ length: Int, maxValue: Int) throws -> UnsafeRawBufferPointer {
    guard length >= 0 else { throw ABIError.invalidArgument("a value length of \(UInt(bitPattern: length))") }
    guard length <= maxValue else { throw CacheError.valueTooLarge(size: length, limit: maxValue) }
    guard length > 0 else { return UnsafeRawBufferPointer(start: nil, count: 0) }
    guard let pointer else { throw ABIError.invalidArgument("the value is NULL but its length is \(length)") }
    return UnsafeRawBufferPointer(start: pointer, count: length)
  }

  /// A caller's buffer of `capacity` bytes; NULL only with a capacity of 0.
  @inline(__always)
  static func buffer(_ pointer: UnsafeMutableRawPointer?, _ capacity: Int) throws -> UnsafeMutableRawBufferPointer {
    guard capacity >= 0 else { throw ABIError.invalidArgument("a buffer capacity of \(UInt(bitPattern: capacity))") }
    guard capacity > 0 else { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
    guard let pointer else { throw ABIError.invalidArgument("the buffer is NULL but its capacity is \(capacity)") }
    return UnsafeMutableRawBufferPointer(start: pointer, count: capacity)
  }

  /// A required output pointer.
  @inline(__always)
  static func output<T>(_ pointer: UnsafeMutablePointer<T>?, _ name: String) throws -> UnsafeMutablePointer<T> {
    guard let pointer else { throw ABIError.invalidArgument("\(name) is NULL") }
    return pointer
  }

  /// A time-to-live: 0 (or +infinity) never expires, a positive number of seconds expires
  /// that long from now; negative and NaN are refused.
  @inline(__always)
  static func expiry(_ ttl: Double) throws -> CacheExpiry {
    if ttl == 0 || ttl == .infinity { return .never }
    guard ttl > 0 else {
      throw ABIError.invalidArgument("a ttl of \(ttl) seconds; give 0 (never expires) or a positive number")
    }
    return .seconds(ttl)
  }

  /// A batch's count, with its keys, its key lengths and every other array it sizes present.
  static func count(
    _ count: Int, keys: UnsafeRawPointer?, keyLengths: UnsafeRawPointer?, _ others: [(UnsafeRawPointer?, String)] = []
  ) throws -> Int {
    guard count >= 0 else { throw ABIError.invalidArgument("a count of \(UInt(bitPattern: count))") }
    guard count > 0 else { return 0 }
    // Each array checked where it stands: no array of them all built on every batch.
    func present(_ pointer: UnsafeRawPointer?, _ name: String) throws {
      if pointer == nil { throw ABIError.invalidArgument("\(name) is NULL but count is \(count)") }
    }
    try present(keys, "keys")
    try present(keyLengths, "key_lengths")
    for (pointer, name) in others { try present(pointer, name) }
    return count
  }
}

import Foundation
@_spi(Tiers) import MappedCache

/// A `Cache` tier in Redis: every key under `keyPrefix`, every value in the bytes a
/// `SharedCache<Value>` stores (so another client that writes those bytes is read back).
///
/// ```swift
/// let redis = try RedisCache<User>(url: "redis://127.0.0.1:6379/0", keyPrefix: "users:")
/// try redis.setObject(ada, forKey: "1", expires: .seconds(300))   // SET users:1 <bytes> PX 300000
/// ```
///
/// `removeAllObjects()` removes the keys of its prefix only (`SCAN MATCH prefix*` and
/// `UNLINK` in batches), never `FLUSHALL`; with an empty prefix it refuses.
public final class RedisCache<Value: Codable>: Cache, @unchecked Sendable {
  /// The client it sends its commands with.
  public let client: RedisClient
  /// Put before every key in Redis (and tracked by a near cache's holder).
  public let keyPrefix: String
  /// Largest encoded value accepted by `setObject` and read back (default: the client's bulk limit).
  public let maxValueSize: Int
  let codec = TierCodec<Value>()
  let prefixBytes: [UInt8]
  private let defaults = NSLock()
  private var _defaultExpiry: CacheExpiry = .never

  /// The expiry `setObject` uses when it is given none.
  public var defaultExpiry: CacheExpiry {
    get { defaults.withLock { _defaultExpiry } }
    set { defaults.withLock { _defaultExpiry = newValue } }
  }

  /// A tier on `client` under `keyPrefix`.
  public init(client: RedisClient, keyPrefix: String = "", maxValueSize: Int? = nil) {
    self.client = client
    self.keyPrefix = keyPrefix
    self.prefixBytes = Array(keyPrefix.utf8)
    self.maxValueSize = min(maxValueSize ?? client.options.limits.maxBulkLength, client.options.limits.maxBulkLength)
  }

  /// A tier on a new client of the Redis at `url` (see `RedisEndpoint`).
  public convenience init(
    url: String, keyPrefix: String = "", options: RedisOptions = RedisOptions(),
    maxValueSize: Int? = nil
  ) throws {
    self.init(client: try RedisClient(url: url, options: options), keyPrefix: keyPrefix, maxValueSize: maxValueSize)
  }

  /// The Redis key of `key`.
  func redisKey(_ key: String) throws -> [UInt8] {
    guard !key.isEmpty else { throw CacheError.emptyKey }
    return prefixBytes + Array(key.utf8)
  }

  // MARK: Cache

  /// `GET prefix+key`, decoded; nil when missing. A value that fails to decode is
  /// `.decodingFailed` for `key`.
  public func object(forKey key: String) throws -> Value? {
    guard let bytes = try fetchBytes(forKey: key) else { return nil }
    return try decode(bytes, key)
  }

  /// The value and when it expires (`GET` and `PTTL` in one round trip).
  public func objectAndExpiry(forKey key: String) throws -> (value: Value, expires: CacheExpiry)? {
    guard let (bytes, expires) = try fetchBytesAndExpiry(forKey: key) else { return nil }
    return (try decode(bytes, key), expires)
  }

  /// `SET prefix+key <bytes> [PX ms]` (the expiry given, or `defaultExpiry`).
  public func setObject(_ value: Value, forKey key: String, expires: CacheExpiry? = nil) throws {
    let bytes = try codec.encode(value)
    try setBytes(bytes, forKey: key, expires: expires)
  }

  @discardableResult
  public func removeObject(forKey key: String) throws -> Bool {
    let r = try client.call([Array("UNLINK".utf8), try redisKey(key)])
    return r == .integer(1)
  }

  /// Removes every key of the prefix (SCAN + UNLINK in batches of up to 1000); returns when
  /// the scan has gone round once. Keys written meanwhile may survive, as with any SCAN.
  public func removeAllObjects() throws {
    _ = try removeAllKeys()
  }

  /// `removeAllObjects()`, returning how many keys it unlinked.
  @discardableResult
  public func removeAllKeys() throws -> Int {
    guard !prefixBytes.isEmpty else {
      throw CacheError.invalidArgument(
        "removeAllObjects of a RedisCache without a keyPrefix would remove the whole database; give it a prefix")
    }
    let pattern = Self.globEscaped(prefixBytes) + [UInt8(ascii: "*")]
    var removed = 0
    // A cluster's primaries are scanned one by one (each SCANs only its own slots).
    for primary in try client.primaryEndpoints() {
      removed += try removeAllKeys(matching: pattern, scanning: client.client(forPrimary: primary))
    }
    return removed
  }

  private func removeAllKeys(matching pattern: [UInt8], scanning node: RedisClient) throws -> Int {
    var cursor: [UInt8] = [UInt8(ascii: "0")]
    var removed = 0
    repeat {
      let r = try node.call([
        Array("SCAN".utf8), cursor, Array("MATCH".utf8), pattern,
        Array("COUNT".utf8), Array("1000".utf8),
      ])
      guard let parts = r.elements, parts.count == 2, let next = parts[0].bytes, let keys = parts[1].elements else {
        throw CacheError.protocolViolation(
          endpoint: node.endpoint.description,
          reason: "a SCAN reply that is not [cursor, keys]")
      }
      let names = keys.compactMap(\.bytes)
      if !names.isEmpty {
        if case .integer(let n) = try client.call([Array("UNLINK".utf8)] + names) { removed += Int(n) }
      }
      cursor = next
    } while cursor != [UInt8(ascii: "0")]
    return removed
  }

  // MARK: Bytes

  /// The stored bytes of `key`, or nil when missing. A bulk larger than `maxValueSize` is
  /// refused by the parser (`.protocolViolation`) before it is buffered.
  public func fetchBytes(forKey key: String) throws -> [UInt8]? {
    let r = try client.call([Array("GET".utf8), try redisKey(key)])
    return try bytesOf(r)
  }

  /// The stored bytes of `key` and when it expires (`GET` and `PTTL` in one round trip).
  public func fetchBytesAndExpiry(forKey key: String) throws -> ([UInt8], CacheExpiry)? {
    let k = try redisKey(key)
    let rs = try client.pipeline([[Array("GET".utf8), k], [Array("PTTL".utf8), k]])
    for r in rs {
      if let m = r.errorMessage { throw CacheError.remoteError(endpoint: client.endpoint.description, message: m) }
    }
    guard let bytes = try bytesOf(rs[0]) else { return nil }
    switch rs[1] {
    case .integer(let ms) where ms >= 0: return (bytes, .date(Date(timeIntervalSinceNow: Double(ms) / 1000)))
    case .integer(-2): return nil  // expired between the two commands
    default: return (bytes, .never)
    }
  }

  /// Stores encoded bytes under `key` (`SET key bytes [PX ms]`); an expiry already past
  /// removes the key instead.
  public func setBytes(_ bytes: [UInt8], forKey key: String, expires: CacheExpiry? = nil) throws {
    guard bytes.count <= maxValueSize else { throw CacheError.valueTooLarge(size: bytes.count, limit: maxValueSize) }
    let k = try redisKey(key)
    var cmd: [[UInt8]] = [Array("SET".utf8), k, bytes]
    if let ms = Self.milliseconds(expires ?? defaultExpiry) {
      guard ms > 0 else {
        _ = try client.call([Array("UNLINK".utf8), k])
        return
      }
      cmd += [Array("PX".utf8), Array(String(ms).utf8)]
    }
    _ = try client.call(cmd)
  }

  /// Milliseconds from now for `PX`, nil for `.never`.
  static func milliseconds(_ e: CacheExpiry) -> Int64? {
    switch e {
    case .never: return nil
    case .seconds(let s): return s <= 0 ? 0 : Int64(min((s * 1000).rounded(.up), 9e15))
    case .date(let d):
      let s = d.timeIntervalSinceNow
      return s <= 0 ? 0 : Int64(min((s * 1000).rounded(.up), 9e15))
    }
  }

  private func bytesOf(_ r: RESPValue) throws -> [UInt8]? {
    switch r.withoutAttributes {
    case .null: return nil
    case .bulkString(let b): return b
    default:
      throw CacheError.protocolViolation(
        endpoint: client.endpoint.description,
        reason: "a GET reply that is not a bulk string or null")
    }
  }

  func decode(_ bytes: [UInt8], _ key: String) throws -> Value {
    try bytes.withUnsafeBytes { try codec.decode($0, forKey: key) }
  }

  /// `prefix` with the glob characters of `SCAN MATCH` escaped.
  static func globEscaped(_ prefix: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    for b in prefix {
      if b == UInt8(ascii: "*") || b == UInt8(ascii: "?") || b == UInt8(ascii: "[") || b == UInt8(ascii: "]")
        || b == UInt8(ascii: "\\")
      {
        out.append(UInt8(ascii: "\\"))
      }
      out.append(b)
    }
    return out
  }
}

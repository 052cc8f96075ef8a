import MappedCache

/// A value type the C ABI opens a cache of: what it stores for the caller's bytes, and
/// the bytes of a stored value. Each is a `SharedCache` value type with the type name
/// Swift's own types record, so a file is shared with Swift processes typed the same
/// way: "bytes" (`[UInt8]`, `Data`), "string" (`String`), "int64" (`Int`, `Int64`), and
/// "python" (bindings/python's tagged values).
protocol ABIValue: Codable, SendableMetatype {
  /// The type name the file records (the type fingerprint is its hash).
  static var abiTypeName: String { get }
  /// What an ASCII decimal counter's bytes start with (`mc_incr` on a cache that does not
  /// store integers as such): nothing, or the tag of a tagged format.
  static var counterPrefix: [UInt8] { get }
  /// The value whose stored bytes are a copy of `bytes`, once they are checked to be a
  /// value of this type (a string is UTF-8, an int64 has 8 bytes).
  static func owned(_ bytes: UnsafeRawBufferPointer) throws -> Self
  /// Calls `body` with the value whose stored bytes are `bytes`, checked as `owned`
  /// checks them; it may borrow them for the call instead of copying.
  static func withValue<R>(storing bytes: UnsafeRawBufferPointer, _ body: (Self) throws -> R) throws -> R
  /// Calls `body` with the bytes stored for this value.
  func withStoredBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension ABIValue {
  static var counterPrefix: [UInt8] { [] }
  static func withValue<R>(storing bytes: UnsafeRawBufferPointer, _ body: (Self) throws -> R) throws -> R {
    try body(owned(bytes))
  }
}

extension Array: ABIValue where Element == UInt8 {
  static var abiTypeName: String { cacheTypeName }
  static func owned(_ bytes: UnsafeRawBufferPointer) -> [UInt8] { Array(bytes) }
  func withStoredBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try withUnsafeBytes(body) }
}

extension Int: ABIValue {
  static var abiTypeName: String { cacheTypeName }
  static func owned(_ bytes: UnsafeRawBufferPointer) throws -> Int {
    guard bytes.count == 8 else {
      throw ABIError.invalidValue("a cache of int64 stores 8-byte little-endian values, not \(bytes.count) bytes")
    }
    return Int(littleEndian: bytes.loadUnaligned(as: Int.self))
  }
  func withStoredBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try withCacheBytes(body)
  }
}

/// What distinguishes the byte formats that `TaggedBytes` stores.
protocol ByteFormat {
  static var typeName: String { get }
  static var counterPrefix: [UInt8] { get }
  /// Throws `ABIError.invalidValue` for bytes that are not a value of the format.
  static func check(_ bytes: UnsafeRawBufferPointer) throws
}

/// Strings as Swift's `SharedCache<String>` stores them: their UTF-8 bytes.
enum StringFormat: ByteFormat {
  static var typeName: String { String.cacheTypeName }
  static var counterPrefix: [UInt8] { [] }
  static func check(_ bytes: UnsafeRawBufferPointer) throws {
    guard UTF8Check.isValid(bytes) else {
      throw ABIError.invalidValue(
        "a cache of strings stores UTF-8 text; this value of \(bytes.count) bytes is not UTF-8")
    }
  }
}

/// bindings/python's values: a tag byte, then the value's bytes. `B` bytes, `S` UTF-8
/// text, `I` an integer in ASCII decimal (the form `mc_incr` changes), `F` a float (8
/// bytes, little-endian IEEE 754), `P` a pickle (docs/python.md), `J` JSON text (what the
/// Node addon stores for values that are none of those: docs/node.md).
enum PythonFormat: ByteFormat {
  static var typeName: String { "python" }
  static var counterPrefix: [UInt8] { [UInt8(ascii: "I")] }
  static let tags: Set<UInt8> = Set("BSIFPJ".utf8)
  static func check(_ bytes: UnsafeRawBufferPointer) throws {
    guard let tag = bytes.first, tags.contains(tag) else {
      throw ABIError.invalidValue(
        "a cache of python values stores a tag byte (B, S, I, F, P or J) and then the value; see docs/python.md")
    }
  }
}

/// A value of a byte format: the caller's bytes, borrowed for one write, or bytes read
/// from the file. Stored as they are (`CacheValueEncodable`), so a write copies the
/// caller's bytes once, into the file.
struct TaggedBytes<Format: ByteFormat>: ABIValue, CacheValueEncodable, @unchecked Sendable {
  private enum Storage {
    /// Valid only during the `withValue` call that made it.
    case borrowed(UnsafeRawBufferPointer)
    case owned([UInt8])
  }
  private let storage: Storage

  static var abiTypeName: String { Format.typeName }
  static var cacheTypeName: String { Format.typeName }
  static var counterPrefix: [UInt8] { Format.counterPrefix }

  static func owned(_ bytes: UnsafeRawBufferPointer) throws -> TaggedBytes {
    try Format.check(bytes)
    return TaggedBytes(storage: .owned(Array(bytes)))
  }

  static func withValue<R>(storing bytes: UnsafeRawBufferPointer, _ body: (TaggedBytes) throws -> R) throws -> R {
    try Format.check(bytes)
    return try body(TaggedBytes(storage: .borrowed(bytes)))
  }

  private init(storage: Storage) { self.storage = storage }

  init(cacheBytes bytes: UnsafeRawBufferPointer) { storage = .owned(Array(bytes)) }

  func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    switch storage {
    case .borrowed(let b): return try body(b)
    case .owned(let a): return try a.withUnsafeBytes(body)
    }
  }

  func withStoredBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try withCacheBytes(body) }

  // Codable only because `SharedCache` asks for it: the cache stores these values by
  // `CacheValueEncodable` and never calls the coder.
  init(from decoder: Decoder) throws { storage = .owned(try [UInt8](from: decoder)) }
  func encode(to encoder: Encoder) throws { try withCacheBytes { try Array($0).encode(to: encoder) } }
}

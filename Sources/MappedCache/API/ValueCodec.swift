import Foundation
import Glibc

/// A type that supplies its own byte encoding for the cache, skipping `Codable`.
/// `[UInt8]`, `Data`, `String`, the fixed-width integers, `Double`, `Float`, `Bool`,
/// `Date` and `UUID` conform.
public protocol CacheValueEncodable {
  /// A stable name stored in the file (the type fingerprint is its hash).
  static var cacheTypeName: String { get }
  /// Calls `body` with the value's bytes.
  func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
  /// Decodes a value from bytes written by `withCacheBytes`.
  init(cacheBytes: UnsafeRawBufferPointer) throws
}

@usableFromInline
struct CacheDecodingError: Error, CustomStringConvertible {
  @usableFromInline var description: String
  @usableFromInline init(description: String) { self.description = description }
}

extension Array: CacheValueEncodable where Element == UInt8 {
  public static var cacheTypeName: String { "bytes" }
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try withUnsafeBytes(body)
  }
  public init(cacheBytes b: UnsafeRawBufferPointer) { self.init(b) }
}

extension Data: CacheValueEncodable {
  public static var cacheTypeName: String { "bytes" }
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try withUnsafeBytes(body)
  }
  public init(cacheBytes b: UnsafeRawBufferPointer) { self.init(b) }
}

extension String {
  /// The string's UTF-8 bytes: in place where it stores them so (a native string: no
  /// copy, and no retain and release of its storage, which `withUTF8` on a copy costs),
  /// else a contiguous copy. Every key (`SharedCache.withKey`) and every String value
  /// reaches the engine through it.
  @inlinable @inline(__always)
  func withUTF8Bytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    if let r = try utf8.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) { return r }
    var s = self
    return try s.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
  }
}

extension String: CacheValueEncodable {
  public static var cacheTypeName: String { "string" }
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try withUTF8Bytes(body)
  }
  public init(cacheBytes b: UnsafeRawBufferPointer) throws {
    // Built in place (one allocation, one copy); the initializer validates and repairs
    // bad UTF-8 instead of failing, so a value whose stored bytes differ from the
    // string's was not UTF-8. (`String(validating:as:)` costs generic-metadata lookups
    // on every call.)
    var s = String(unsafeUninitializedCapacity: b.count) { buffer in
      UnsafeMutableRawBufferPointer(buffer).copyMemory(from: b)
      return b.count
    }
    // A native string (every string here) is contiguous: `withUTF8` copies nothing.
    let same = s.withUTF8 { u in
      u.count == b.count && (b.count == 0 || memcmp(u.baseAddress!, b.baseAddress!, b.count) == 0)
    }
    guard same else { throw CacheDecodingError(description: "not valid UTF-8") }
    self = s
  }
}

/// Fixed-width little-endian encodings.
public protocol CacheFixedWidthValue: CacheValueEncodable {}

extension CacheFixedWidthValue where Self: FixedWidthInteger {
  // Inlinable so callers specialise them: generic, they would look up metadata per call.
  @inlinable
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try Swift.withUnsafeBytes(of: self.littleEndian, body)
  }
  @inlinable
  public init(cacheBytes b: UnsafeRawBufferPointer) throws {
    guard b.count == MemoryLayout<Self>.size else {
      throw CacheDecodingError(description: "\(b.count) bytes for a \(MemoryLayout<Self>.size)-byte integer")
    }
    self.init(littleEndian: b.loadUnaligned(as: Self.self))
  }
}

extension Int: CacheFixedWidthValue { public static var cacheTypeName: String { "int64" } }
extension Int64: CacheFixedWidthValue { public static var cacheTypeName: String { "int64" } }
extension Int32: CacheFixedWidthValue { public static var cacheTypeName: String { "int32" } }
extension Int16: CacheFixedWidthValue { public static var cacheTypeName: String { "int16" } }
extension Int8: CacheFixedWidthValue { public static var cacheTypeName: String { "int8" } }
extension UInt: CacheFixedWidthValue { public static var cacheTypeName: String { "uint64" } }
extension UInt64: CacheFixedWidthValue { public static var cacheTypeName: String { "uint64" } }
extension UInt32: CacheFixedWidthValue { public static var cacheTypeName: String { "uint32" } }
extension UInt16: CacheFixedWidthValue { public static var cacheTypeName: String { "uint16" } }

extension Double: CacheValueEncodable {
  public static var cacheTypeName: String { "double" }
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try bitPattern.withCacheBytes(body)
  }
  public init(cacheBytes b: UnsafeRawBufferPointer) throws { self.init(bitPattern: try UInt64(cacheBytes: b)) }
}

extension Float: CacheValueEncodable {
  public static var cacheTypeName: String { "float" }
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try bitPattern.withCacheBytes(body)
  }
  public init(cacheBytes b: UnsafeRawBufferPointer) throws { self.init(bitPattern: try UInt32(cacheBytes: b)) }
}

extension Bool: CacheValueEncodable {
  public static var cacheTypeName: String { "bool" }
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try Swift.withUnsafeBytes(of: self ? UInt8(1) : UInt8(0), body)
  }
  public init(cacheBytes b: UnsafeRawBufferPointer) throws {
    guard b.count == 1, b[0] <= 1 else { throw CacheDecodingError(description: "not a Bool") }
    self = b[0] == 1
  }
}

extension Date: CacheValueEncodable {
  public static var cacheTypeName: String { "date" }
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try timeIntervalSinceReferenceDate.withCacheBytes(body)
  }
  public init(cacheBytes b: UnsafeRawBufferPointer) throws {
    self.init(timeIntervalSinceReferenceDate: try Double(cacheBytes: b))
  }
}

extension UUID: CacheValueEncodable {
  public static var cacheTypeName: String { "uuid" }
  public func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try Swift.withUnsafeBytes(of: uuid, body)
  }
  public init(cacheBytes b: UnsafeRawBufferPointer) throws {
    guard b.count == 16 else { throw CacheDecodingError(description: "\(b.count) bytes for a UUID") }
    var u: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    Swift.withUnsafeMutableBytes(of: &u) { $0.copyMemory(from: b) }
    self.init(uuid: u)
  }
}

/// How `SharedCache<Value>` turns values into bytes and back: a `CacheValueEncodable`
/// fast path when the type has one, `Codable` through the compact binary coder otherwise.
@usableFromInline
struct ValueCodec<Value>: @unchecked Sendable {
  let typeName: String
  /// Stored as its own bytes (`CacheValueEncodable`), not through the binary coder:
  /// decoding is a copy, not worth keeping decoded (`DecodedValueCaching.automatic`).
  let isRaw: Bool
  let encode: (Value) throws -> [UInt8]
  /// Calls the closure with the value's bytes without copying where the type allows.
  @usableFromInline let withBytes: (Value, (UnsafeRawBufferPointer) throws -> Void) throws -> Void
  @usableFromInline let decode: (UnsafeRawBufferPointer) throws -> Value

  var fingerprint: UInt64 { KeyHash.bytes(Array(typeName.utf8)) | 1 }

  static func make() -> ValueCodec<Value> where Value: Codable {
    if let fast = Value.self as? any CacheValueEncodable.Type {
      return fastCodec(fast)
    }
    return ValueCodec(
      typeName: "codable:\(String(reflecting: Value.self))", isRaw: false,
      encode: { try BinaryEncoder.encode($0) },
      withBytes: { v, body in try BinaryEncoder.encode(v).withUnsafeBytes(body) },
      decode: { try BinaryDecoder.decode(Value.self, from: $0) })
  }

  private static func fastCodec<T: CacheValueEncodable>(_ t: T.Type) -> ValueCodec<Value> {
    ValueCodec(
      typeName: T.cacheTypeName, isRaw: true,
      // Safe: `make` chose this codec because `Value.self` is `T.self`, so the casts
      // below are between a type and itself.
      encode: { v in unsafeBitCast(v, to: T.self).withCacheBytes { Array($0) } },
      withBytes: { v, body in try unsafeBitCast(v, to: T.self).withCacheBytes(body) },
      decode: { b in unsafeBitCast(try T(cacheBytes: b), to: Value.self) })
  }
}

extension ValueCodec {
  /// Calls `body` with the value's bytes. Inlined into callers, so for the common value
  /// types the type test folds away and no codec closure runs.
  @inlinable @inline(__always)
  func withValueBytes(_ v: Value, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
    if Value.self == [UInt8].self { return try unsafeBitCast(v, to: [UInt8].self).withUnsafeBytes(body) }
    if Value.self == String.self { return try unsafeBitCast(v, to: String.self).withUTF8Bytes(body) }
    if Value.self == Int.self {
      return try Swift.withUnsafeBytes(of: unsafeBitCast(v, to: Int.self).littleEndian, body)
    }
    try withBytes(v, body)
  }

  /// Decodes a value from bytes (the same fast paths as `withValueBytes`).
  @inlinable @inline(__always)
  func decodeValue(_ b: UnsafeRawBufferPointer) throws -> Value {
    if Value.self == [UInt8].self { return unsafeBitCast([UInt8](b), to: Value.self) }
    if Value.self == String.self { return unsafeBitCast(try String(cacheBytes: b), to: Value.self) }
    if Value.self == Int.self {
      guard b.count == 8 else { throw CacheDecodingError(description: "\(b.count) bytes for an 8-byte integer") }
      return unsafeBitCast(Int(littleEndian: b.loadUnaligned(as: Int.self)), to: Value.self)
    }
    return try decode(b)
  }
}

import Foundation

// The compact binary Codable format used for `SharedCache<Value>` when `Value` has no
// `CacheValueEncodable` fast path.
//
//     document := 0xC1 value                      (0xC1: format marker, version 1)
//     value    := tag payload
//       0x00 nil                     0x01 false          0x02 true
//       0x11 0x12 0x13 0x14          signed   int8/16/32/64, 1/2/4/8 bytes little-endian
//       0x21 0x22 0x23 0x24          unsigned int8/16/32/64, 1/2/4/8 bytes little-endian
//       0x33 0x34                    Float, Double: IEEE bits, 4/8 bytes little-endian
//       0x40 varint n, n bytes       String (UTF-8, validated on decode)
//       0x41 varint n, n bytes       [UInt8] and Data (one blob, not n tagged elements)
//       0x50 varint n, n bytes       keyed container: entries until the n bytes end;
//                                    entry := varint k, k bytes of key UTF-8, value
//       0x51 varint n, n bytes       unkeyed container: varint count, count values
//     varint   := LEB128, at most 10 bytes (lengths and counts only)
//
// Keyed containers store their key strings, not positions: decoding does not depend on
// the order keys are written or read, so custom `Codable` code that decodes in another
// order, checks `contains`, or omits nil optionals (`encodeIfPresent`) works as it does
// with JSONEncoder, and adding a field with a default to a type still reads old entries.
// The decoder looks first at the entry after the last one it read (the common in-order
// case costs one key comparison) and scans the container otherwise.
//
// Every length is bounds-checked against the enclosing container before use; every
// integer narrowing uses `init(exactly:)`; nesting is limited to `maxDepth`. Malformed
// input throws `DecodingError`, never traps.

/// The cache's compact binary `Codable` format, for callers who want the same bytes
/// (for example to compare sizes with JSON, or to store them elsewhere).
public enum BinaryCoding {
  /// Encodes `value`; throws `CacheError.encodingFailed` when its `encode(to:)` fails.
  public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] { try BinaryEncoder.encode(value) }
  /// Decodes a `T`; malformed bytes throw `DecodingError`, never trap.
  public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
    try bytes.withUnsafeBytes { try BinaryDecoder.decode(type, from: $0) }
  }
}

enum BinaryEncoder {
  static let marker: UInt8 = 0xC1
  static let maxDepth = 512

  static func encode<T: Encodable>(_ v: T) throws -> [UInt8] {
    var out: [UInt8] = [marker]
    out.reserveCapacity(128)
    let state = BinaryEncodingState()
    do {
      try BinaryEncodingNode.encodeValue(v, into: &out, path: [], state: state, depth: 0)
      if let e = state.error { throw e }
    } catch let e as CacheError {
      throw e
    } catch {
      throw CacheError.encodingFailed(reason: "\(error)")
    }
    return out
  }
}

enum BinaryDecoder {
  static func decode<T: Decodable>(_ t: T.Type, from b: UnsafeRawBufferPointer) throws -> T {
    let input = BinaryDecodingInput(Array(b))
    guard input.bytes.count >= 1, input.bytes[0] == BinaryEncoder.marker else {
      throw DecodingError.dataCorrupted(
        .init(codingPath: [], debugDescription: "not the binary Codable format (no 0xC1 marker)"))
    }
    let (root, next) = try input.value(at: 1, end: input.bytes.count, path: [])
    guard next == input.bytes.count else {
      throw DecodingError.dataCorrupted(
        .init(codingPath: [], debugDescription: "\(input.bytes.count - next) trailing bytes"))
    }
    return try input.decodeValue(T.self, root, path: [], depth: 0)
  }
}

enum BinaryTag {
  static let null: UInt8 = 0x00, no: UInt8 = 0x01, yes: UInt8 = 0x02
  static let i8: UInt8 = 0x11, i16: UInt8 = 0x12, i32: UInt8 = 0x13, i64: UInt8 = 0x14
  static let u8: UInt8 = 0x21, u16: UInt8 = 0x22, u32: UInt8 = 0x23, u64: UInt8 = 0x24
  static let f32: UInt8 = 0x33, f64: UInt8 = 0x34
  static let string: UInt8 = 0x40, bytes: UInt8 = 0x41, keyed: UInt8 = 0x50, unkeyed: UInt8 = 0x51

  /// The tag of an integer of `T`'s width: 0x11...0x14 signed, 0x21...0x24 unsigned, the
  /// low digit counting 1, 2, 4, 8 bytes.
  @inline(__always) static func integer<T: FixedWidthInteger>(_: T.Type) -> UInt8 {
    (T.isSigned ? 0x10 : 0x20) + UInt8(truncatingIfNeeded: (T.bitWidth / 8).trailingZeroBitCount + 1)
  }

  static func name(_ t: UInt8) -> String {
    switch t {
    case null: return "nil"
    case no, yes: return "Bool"
    case i8, i16, i32, i64: return "signed integer"
    case u8, u16, u32, u64: return "unsigned integer"
    case f32, f64: return "floating point"
    case string: return "String"
    case bytes: return "bytes"
    case keyed: return "keyed container"
    case unkeyed: return "unkeyed container"
    default: return "tag \(t)"
    }
  }
}

// MARK: - Writing

extension Array where Element == UInt8 {
  @inline(__always) mutating func binVarint(_ v: UInt64) {
    var v = v
    while v >= 0x80 {
      append(UInt8(truncatingIfNeeded: v) | 0x80)
      v >>= 7
    }
    append(UInt8(truncatingIfNeeded: v))
  }

  @inline(__always) mutating func binFixed<T: FixedWidthInteger>(_ tag: UInt8, _ v: T) {
    append(tag)
    Swift.withUnsafeBytes(of: v.littleEndian) { append(contentsOf: $0) }
  }

  @inline(__always) mutating func binString(_ s: String) {
    var s = s
    s.withUTF8 { u in
      binVarint(UInt64(u.count))
      append(contentsOf: u)
    }
  }

  @inline(__always) mutating func binBlob(_ tag: UInt8, _ b: UnsafeRawBufferPointer) {
    append(tag)
    binVarint(UInt64(b.count))
    append(contentsOf: b)
  }
}

/// The Codable primitives: each writes its own tag and payload, and reads itself from a
/// tagged value, so that every container's fourteen overloads of `encode` and `decode`
/// are one generic path each.
protocol BinaryScalar {
  func write(into out: inout [UInt8])
  static func read(
    _ v: BinaryTaggedValue, from input: BinaryDecodingInput, _ path: @autoclosure () -> [CodingKey]
  ) throws -> Self
}

extension BinaryScalar where Self: FixedWidthInteger {
  @inline(__always) func write(into out: inout [UInt8]) { out.binFixed(BinaryTag.integer(Self.self), self) }
  @inline(__always) static func read(
    _ v: BinaryTaggedValue, from input: BinaryDecodingInput, _ path: @autoclosure () -> [CodingKey]
  ) throws -> Self { try input.integer(Self.self, v, path()) }
}

extension Bool: BinaryScalar {
  @inline(__always) func write(into out: inout [UInt8]) { out.append(self ? BinaryTag.yes : BinaryTag.no) }
  @inline(__always) static func read(
    _ v: BinaryTaggedValue, from input: BinaryDecodingInput, _ path: @autoclosure () -> [CodingKey]
  ) throws -> Bool { try input.bool(v, path()) }
}

extension String: BinaryScalar {
  @inline(__always) func write(into out: inout [UInt8]) {
    out.append(BinaryTag.string)
    out.binString(self)
  }
  @inline(__always) static func read(
    _ v: BinaryTaggedValue, from input: BinaryDecodingInput, _ path: @autoclosure () -> [CodingKey]
  ) throws -> String { try input.string(v, path()) }
}

extension Double: BinaryScalar {
  @inline(__always) func write(into out: inout [UInt8]) { out.binFixed(BinaryTag.f64, bitPattern) }
  @inline(__always) static func read(
    _ v: BinaryTaggedValue, from input: BinaryDecodingInput, _ path: @autoclosure () -> [CodingKey]
  ) throws -> Double { try input.double(v, path()) }
}

extension Float: BinaryScalar {
  @inline(__always) func write(into out: inout [UInt8]) { out.binFixed(BinaryTag.f32, bitPattern) }
  @inline(__always) static func read(
    _ v: BinaryTaggedValue, from input: BinaryDecodingInput, _ path: @autoclosure () -> [CodingKey]
  ) throws -> Float { try input.float(v, path()) }
}

// `Int` and `UInt` are stored as 64 bits whatever the platform's word; the fixed-width
// integers at their own width.
extension Int: BinaryScalar {
  @inline(__always) func write(into out: inout [UInt8]) { out.binFixed(BinaryTag.i64, Int64(self)) }
}
extension UInt: BinaryScalar {
  @inline(__always) func write(into out: inout [UInt8]) { out.binFixed(BinaryTag.u64, UInt64(self)) }
}
extension Int8: BinaryScalar {}
extension Int16: BinaryScalar {}
extension Int32: BinaryScalar {}
extension Int64: BinaryScalar {}
extension UInt8: BinaryScalar {}
extension UInt16: BinaryScalar {}
extension UInt32: BinaryScalar {}
extension UInt64: BinaryScalar {}

/// Errors found where the Encoder API cannot throw (e.g. asking one encoder for two
/// kinds of container); reported when the top-level encode finishes.
final class BinaryEncodingState {
  var error: Error?
  func fail(_ path: [CodingKey], _ why: String) {
    if error == nil { error = EncodingError.invalidValue((), .init(codingPath: path, debugDescription: why)) }
  }
}

/// One value being encoded. Scalars and values encoded through `encode(_:)` are written
/// straight into `out`; containers handed out by `nestedContainer`/`superEncoder` may
/// still be written to later, so they stay nodes (`pending`) spliced in at `at` when
/// this node is serialised.
final class BinaryEncodingNode {
  enum Kind { case none, keyed, unkeyed, single }
  var kind = Kind.none
  var out: [UInt8] = []
  var pending: [(at: Int, node: BinaryEncodingNode)] = []
  var count = 0
  var hasSingle = false

  /// Appends this node as one tagged value.
  func serialize(into w: inout [UInt8]) {
    switch kind {
    case .single:
      if hasSingle { w.append(contentsOf: out) } else { w.append(BinaryTag.null) }
    case .none:
      w.append(BinaryTag.keyed)
      w.append(0)
    case .keyed, .unkeyed:
      if pending.isEmpty {
        // The common case: no deferred nodes, so the body is `out` (after the count).
        var countBytes: [UInt8] = []
        if kind == .unkeyed { countBytes.binVarint(UInt64(count)) }
        w.append(kind == .keyed ? BinaryTag.keyed : BinaryTag.unkeyed)
        w.binVarint(UInt64(countBytes.count + out.count))
        w.append(contentsOf: countBytes)
        w.append(contentsOf: out)
        return
      }
      var body: [UInt8] = []
      if kind == .unkeyed { body.binVarint(UInt64(count)) }
      var from = 0
      for p in pending {
        body.append(contentsOf: out[from..<p.at])
        p.node.serialize(into: &body)
        from = p.at
      }
      body.append(contentsOf: out[from...])
      w.append(kind == .keyed ? BinaryTag.keyed : BinaryTag.unkeyed)
      w.binVarint(UInt64(body.count))
      w.append(contentsOf: body)
    }
  }

  /// Appends `v` as one tagged value.
  static func encodeValue<T: Encodable>(
    _ v: T, into w: inout [UInt8], path: @autoclosure () -> [CodingKey], state: BinaryEncodingState, depth: Int
  ) throws {
    // Exact type checks (pointer compares), not value casts: an empty `[String]` would
    // cast to `[UInt8]`. Safe: each bit cast is between `T` and the type it was just
    // found to be.
    if T.self == String.self {
      w.append(BinaryTag.string)
      w.binString(unsafeBitCast(v, to: String.self))
      return
    }
    if T.self == Int.self {
      w.binFixed(BinaryTag.i64, Int64(unsafeBitCast(v, to: Int.self)))
      return
    }
    if T.self == Bool.self {
      w.append(unsafeBitCast(v, to: Bool.self) ? BinaryTag.yes : BinaryTag.no)
      return
    }
    if T.self == Double.self {
      w.binFixed(BinaryTag.f64, unsafeBitCast(v, to: Double.self).bitPattern)
      return
    }
    if T.self == [UInt8].self {
      unsafeBitCast(v, to: [UInt8].self).withUnsafeBytes { w.binBlob(BinaryTag.bytes, $0) }
      return
    }
    if T.self == Data.self {
      unsafeBitCast(v, to: Data.self).withUnsafeBytes { w.binBlob(BinaryTag.bytes, $0) }
      return
    }
    if encodeArray(v, into: &w) { return }
    let path = path()  // built only for nested values: scalars need no path
    guard depth < BinaryEncoder.maxDepth else {
      throw EncodingError.invalidValue(
        v, .init(codingPath: path, debugDescription: "nested deeper than \(BinaryEncoder.maxDepth) levels"))
    }
    let node = BinaryEncodingNode()
    // Room for a small struct at once: growing from empty reallocated three times.
    node.out.reserveCapacity(64)
    try v.encode(to: BinaryValueEncoder(node: node, codingPath: path, state: state, depth: depth + 1))
    node.serialize(into: &w)
  }
}

struct BinaryValueEncoder: Encoder {
  let node: BinaryEncodingNode
  let codingPath: [CodingKey]
  let state: BinaryEncodingState
  let depth: Int
  var userInfo: [CodingUserInfoKey: Any] { [:] }

  func claim(_ k: BinaryEncodingNode.Kind) -> BinaryEncodingNode {
    if node.kind == .none {
      node.kind = k
      return node
    }
    if node.kind == k && k != .single { return node }
    if node.kind == k && k == .single && !node.hasSingle { return node }
    state.fail(codingPath, "one value asked for two containers (\(node.kind) then \(k))")
    let spare = BinaryEncodingNode()
    spare.kind = k
    return spare
  }

  func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
    KeyedEncodingContainer(
      BinaryKeyedEncodingContainer<Key>(node: claim(.keyed), codingPath: codingPath, state: state, depth: depth))
  }

  func unkeyedContainer() -> UnkeyedEncodingContainer {
    BinaryUnkeyedEncodingContainer(node: claim(.unkeyed), codingPath: codingPath, state: state, depth: depth)
  }

  func singleValueContainer() -> SingleValueEncodingContainer {
    BinarySingleValueEncodingContainer(node: claim(.single), codingPath: codingPath, state: state, depth: depth)
  }
}

struct BinaryKeyedEncodingContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
  let node: BinaryEncodingNode
  let codingPath: [CodingKey]
  let state: BinaryEncodingState
  let depth: Int

  @inline(__always) private func key(_ k: Key) { node.out.binString(k.stringValue) }

  @inline(__always) private func put<T: BinaryScalar>(_ v: T, _ k: Key) {
    key(k)
    v.write(into: &node.out)
  }

  mutating func encodeNil(forKey k: Key) throws {
    key(k)
    node.out.append(BinaryTag.null)
  }
  mutating func encode(_ v: Bool, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: String, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: Double, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: Float, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: Int, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: Int8, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: Int16, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: Int32, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: Int64, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: UInt, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: UInt8, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: UInt16, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: UInt32, forKey k: Key) throws { put(v, k) }
  mutating func encode(_ v: UInt64, forKey k: Key) throws { put(v, k) }
  mutating func encode<T: Encodable>(_ v: T, forKey k: Key) throws {
    key(k)
    try BinaryEncodingNode.encodeValue(v, into: &node.out, path: codingPath + [k], state: state, depth: depth)
  }

  private func child(_ k: Key, _ kind: BinaryEncodingNode.Kind) -> BinaryEncodingNode { child(k.stringValue, kind) }

  private func child(_ name: String, _ kind: BinaryEncodingNode.Kind) -> BinaryEncodingNode {
    node.out.binString(name)
    let c = BinaryEncodingNode()
    c.kind = kind
    node.pending.append((node.out.count, c))
    return c
  }

  mutating func nestedContainer<NK: CodingKey>(keyedBy t: NK.Type, forKey k: Key) -> KeyedEncodingContainer<NK> {
    KeyedEncodingContainer(
      BinaryKeyedEncodingContainer<NK>(
        node: child(k, .keyed), codingPath: codingPath + [k], state: state, depth: depth + 1))
  }
  mutating func nestedUnkeyedContainer(forKey k: Key) -> UnkeyedEncodingContainer {
    BinaryUnkeyedEncodingContainer(
      node: child(k, .unkeyed), codingPath: codingPath + [k], state: state, depth: depth + 1)
  }
  mutating func superEncoder() -> Encoder {
    BinaryValueEncoder(
      node: child("super", .none), codingPath: codingPath + [BinaryCodingKey(stringValue: "super")], state: state,
      depth: depth + 1)
  }
  mutating func superEncoder(forKey k: Key) -> Encoder {
    BinaryValueEncoder(node: child(k, .none), codingPath: codingPath + [k], state: state, depth: depth + 1)
  }
}

/// A key for positions and "super" where the user's key type has none.
struct BinaryCodingKey: CodingKey {
  private let name: String?
  let intValue: Int?
  /// Built on demand: positions are only spelled out in error messages.
  var stringValue: String { name ?? "Index \(intValue ?? 0)" }
  init(stringValue: String) {
    name = stringValue
    intValue = nil
  }
  init(intValue: Int) {
    name = nil
    self.intValue = intValue
  }
}

struct BinaryUnkeyedEncodingContainer: UnkeyedEncodingContainer {
  let node: BinaryEncodingNode
  let codingPath: [CodingKey]
  let state: BinaryEncodingState
  let depth: Int
  var count: Int { node.count }

  @inline(__always) private func append<T: BinaryScalar>(_ v: T) {
    node.count += 1
    v.write(into: &node.out)
  }

  mutating func encodeNil() throws {
    node.count += 1
    node.out.append(BinaryTag.null)
  }
  mutating func encode(_ v: Bool) throws { append(v) }
  mutating func encode(_ v: String) throws { append(v) }
  mutating func encode(_ v: Double) throws { append(v) }
  mutating func encode(_ v: Float) throws { append(v) }
  mutating func encode(_ v: Int) throws { append(v) }
  mutating func encode(_ v: Int8) throws { append(v) }
  mutating func encode(_ v: Int16) throws { append(v) }
  mutating func encode(_ v: Int32) throws { append(v) }
  mutating func encode(_ v: Int64) throws { append(v) }
  mutating func encode(_ v: UInt) throws { append(v) }
  mutating func encode(_ v: UInt8) throws { append(v) }
  mutating func encode(_ v: UInt16) throws { append(v) }
  mutating func encode(_ v: UInt32) throws { append(v) }
  mutating func encode(_ v: UInt64) throws { append(v) }
  mutating func encode<T: Encodable>(_ v: T) throws {
    let i = node.count
    node.count += 1
    try BinaryEncodingNode.encodeValue(
      v, into: &node.out, path: codingPath + [BinaryCodingKey(intValue: i)], state: state, depth: depth)
  }

  private func child(_ kind: BinaryEncodingNode.Kind) -> (BinaryEncodingNode, [CodingKey]) {
    let path = codingPath + [BinaryCodingKey(intValue: node.count)]
    node.count += 1
    let c = BinaryEncodingNode()
    c.kind = kind
    node.pending.append((node.out.count, c))
    return (c, path)
  }

  mutating func nestedContainer<NK: CodingKey>(keyedBy t: NK.Type) -> KeyedEncodingContainer<NK> {
    let (c, p) = child(.keyed)
    return KeyedEncodingContainer(
      BinaryKeyedEncodingContainer<NK>(node: c, codingPath: p, state: state, depth: depth + 1))
  }
  mutating func nestedUnkeyedContainer() -> UnkeyedEncodingContainer {
    let (c, p) = child(.unkeyed)
    return BinaryUnkeyedEncodingContainer(node: c, codingPath: p, state: state, depth: depth + 1)
  }
  mutating func superEncoder() -> Encoder {
    let (c, p) = child(.none)
    return BinaryValueEncoder(node: c, codingPath: p, state: state, depth: depth + 1)
  }
}

struct BinarySingleValueEncodingContainer: SingleValueEncodingContainer {
  let node: BinaryEncodingNode
  let codingPath: [CodingKey]
  let state: BinaryEncodingState
  let depth: Int

  private func put(_ body: (inout [UInt8]) throws -> Void) throws {
    guard !node.hasSingle else {
      throw EncodingError.invalidValue(
        (), .init(codingPath: codingPath, debugDescription: "a single-value container was written twice"))
    }
    try body(&node.out)
    node.hasSingle = true
  }

  @inline(__always) private func put<T: BinaryScalar>(_ v: T) throws { try put { v.write(into: &$0) } }

  mutating func encodeNil() throws { try put { $0.append(BinaryTag.null) } }
  mutating func encode(_ v: Bool) throws { try put(v) }
  mutating func encode(_ v: String) throws { try put(v) }
  mutating func encode(_ v: Double) throws { try put(v) }
  mutating func encode(_ v: Float) throws { try put(v) }
  mutating func encode(_ v: Int) throws { try put(v) }
  mutating func encode(_ v: Int8) throws { try put(v) }
  mutating func encode(_ v: Int16) throws { try put(v) }
  mutating func encode(_ v: Int32) throws { try put(v) }
  mutating func encode(_ v: Int64) throws { try put(v) }
  mutating func encode(_ v: UInt) throws { try put(v) }
  mutating func encode(_ v: UInt8) throws { try put(v) }
  mutating func encode(_ v: UInt16) throws { try put(v) }
  mutating func encode(_ v: UInt32) throws { try put(v) }
  mutating func encode(_ v: UInt64) throws { try put(v) }
  mutating func encode<T: Encodable>(_ v: T) throws {
    try put { try BinaryEncodingNode.encodeValue(v, into: &$0, path: codingPath, state: state, depth: depth) }
  }
}

// MARK: - Reading

/// One tagged value inside the input: its tag and its payload's byte range.
struct BinaryTaggedValue {
  var tag: UInt8
  var start: Int
  var end: Int
}

/// The bytes being decoded (a private copy: a decoder that escapes stays valid) and the
/// bounds-checked primitives every container reads through.
final class BinaryDecodingInput {
  let bytes: [UInt8]
  init(_ b: [UInt8]) { bytes = b }

  func corrupt(_ path: [CodingKey], _ why: String) -> DecodingError {
    .dataCorrupted(.init(codingPath: path, debugDescription: why))
  }

  /// Reads a varint at `pos`, not past `end`.
  func varint(at pos: inout Int, end: Int, path: @autoclosure () -> [CodingKey]) throws -> UInt64 {
    var v: UInt64 = 0
    var shift: UInt64 = 0
    while true {
      guard pos < end else { throw corrupt(path(), "truncated length") }
      let b = bytes[pos]
      pos += 1
      if shift == 63 && b > 1 { throw corrupt(path(), "length overflows 64 bits") }
      v |= UInt64(b & 0x7F) << shift
      if b & 0x80 == 0 { return v }
      shift += 7
      if shift > 63 { throw corrupt(path(), "length longer than 10 bytes") }
    }
  }

  /// A length at `pos` that fits in the bytes left before `end`.
  func length(at pos: inout Int, end: Int, path: @autoclosure () -> [CodingKey]) throws -> Int {
    let n = try varint(at: &pos, end: end, path: path())
    guard n <= UInt64(end - pos) else { throw corrupt(path(), "length \(n) runs past the end of its container") }
    return Int(n)
  }

  /// Parses the tagged value at `pos` (within `..<end`); returns it and the position after it.
  func value(at pos: Int, end: Int, path: @autoclosure () -> [CodingKey]) throws -> (BinaryTaggedValue, Int) {
    guard pos < end else { throw corrupt(path(), "truncated value") }
    let tag = bytes[pos]
    var p = pos + 1
    let size: Int
    switch tag {
    case BinaryTag.null, BinaryTag.no, BinaryTag.yes: size = 0
    case BinaryTag.i8, BinaryTag.u8: size = 1
    case BinaryTag.i16, BinaryTag.u16: size = 2
    case BinaryTag.i32, BinaryTag.u32, BinaryTag.f32: size = 4
    case BinaryTag.i64, BinaryTag.u64, BinaryTag.f64: size = 8
    case BinaryTag.string, BinaryTag.bytes, BinaryTag.keyed, BinaryTag.unkeyed:
      size = try length(at: &p, end: end, path: path())
    default:
      throw corrupt(path(), "unknown tag 0x\(String(tag, radix: 16))")
    }
    guard size <= end - p else { throw corrupt(path(), "truncated \(BinaryTag.name(tag))") }
    return (BinaryTaggedValue(tag: tag, start: p, end: p + size), p + size)
  }

  func mismatch(_ t: Any.Type, _ v: BinaryTaggedValue, _ path: [CodingKey]) -> DecodingError {
    if v.tag == BinaryTag.null {
      return .valueNotFound(t, .init(codingPath: path, debugDescription: "found nil"))
    }
    return .typeMismatch(t, .init(codingPath: path, debugDescription: "found \(BinaryTag.name(v.tag))"))
  }

  @inline(__always) func le<T: FixedWidthInteger>(_ t: T.Type, _ at: Int) -> T {
    // Safe: callers pass a payload whose size `value(at:)` checked against the tag.
    var x: T = 0
    withUnsafeMutableBytes(of: &x) { dst in
      bytes.withUnsafeBytes { src in
        dst.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[at..<(at + MemoryLayout<T>.size)]))
      }
    }
    return T(littleEndian: x)
  }

  func bool(_ v: BinaryTaggedValue, _ path: @autoclosure () -> [CodingKey]) throws -> Bool {
    if v.tag == BinaryTag.yes { return true }
    if v.tag == BinaryTag.no { return false }
    throw mismatch(Bool.self, v, path())
  }

  func integer<T: FixedWidthInteger>(_ t: T.Type, _ v: BinaryTaggedValue, _ path: @autoclosure () -> [CodingKey]) throws
    -> T
  {
    let r: T?
    switch v.tag {
    case BinaryTag.i8: r = T(exactly: le(Int8.self, v.start))
    case BinaryTag.i16: r = T(exactly: le(Int16.self, v.start))
    case BinaryTag.i32: r = T(exactly: le(Int32.self, v.start))
    case BinaryTag.i64: r = T(exactly: le(Int64.self, v.start))
    case BinaryTag.u8: r = T(exactly: le(UInt8.self, v.start))
    case BinaryTag.u16: r = T(exactly: le(UInt16.self, v.start))
    case BinaryTag.u32: r = T(exactly: le(UInt32.self, v.start))
    case BinaryTag.u64: r = T(exactly: le(UInt64.self, v.start))
    default: throw mismatch(T.self, v, path())
    }
    guard let r else { throw corrupt(path(), "stored integer does not fit in \(T.self)") }
    return r
  }

  func double(_ v: BinaryTaggedValue, _ path: @autoclosure () -> [CodingKey]) throws -> Double {
    switch v.tag {
    case BinaryTag.f64: return Double(bitPattern: le(UInt64.self, v.start))
    case BinaryTag.f32: return Double(Float(bitPattern: le(UInt32.self, v.start)))
    default: throw mismatch(Double.self, v, path())
    }
  }

  func float(_ v: BinaryTaggedValue, _ path: @autoclosure () -> [CodingKey]) throws -> Float {
    switch v.tag {
    case BinaryTag.f32: return Float(bitPattern: le(UInt32.self, v.start))
    case BinaryTag.f64: return Float(Double(bitPattern: le(UInt64.self, v.start)))
    default: throw mismatch(Float.self, v, path())
    }
  }

  func string(_ v: BinaryTaggedValue, _ path: @autoclosure () -> [CodingKey]) throws -> String {
    guard v.tag == BinaryTag.string else { throw mismatch(String.self, v, path()) }
    return try stringBytes(v.start, v.end, path())
  }

  func stringBytes(_ start: Int, _ end: Int, _ path: @autoclosure () -> [CodingKey]) throws -> String {
    // `String(cacheBytes:)` builds and checks the string with no generic call
    // (`String(validating:as:)` over a slice looked up generic metadata per string, a
    // visible share of a small struct's decode).
    let s = bytes.withUnsafeBytes { b -> String? in
      guard end > start, let base = b.baseAddress else { return "" }
      return try? String(cacheBytes: UnsafeRawBufferPointer(start: base + start, count: end - start))
    }
    guard let s else { throw corrupt(path(), "string is not valid UTF-8") }
    return s
  }

  func decodeValue<T: Decodable>(_ t: T.Type, _ v: BinaryTaggedValue, path: @autoclosure () -> [CodingKey], depth: Int)
    throws
    -> T
  {
    // Safe: each bit cast is between `T` and the type it was just compared equal to.
    if T.self == String.self { return unsafeBitCast(try string(v, path()), to: T.self) }
    if T.self == Int.self { return unsafeBitCast(try integer(Int.self, v, path()), to: T.self) }
    if T.self == Bool.self { return unsafeBitCast(try bool(v, path()), to: T.self) }
    if T.self == Double.self { return unsafeBitCast(try double(v, path()), to: T.self) }
    if T.self == [UInt8].self || T.self == Data.self {
      guard v.tag == BinaryTag.bytes else { throw mismatch(T.self, v, path()) }
      let slice = bytes[v.start..<v.end]
      return T.self == Data.self ? unsafeBitCast(Data(slice), to: T.self) : unsafeBitCast(Array(slice), to: T.self)
    }
    if let array = try decodeArray(T.self, v, path: path) { return array }
    guard depth < BinaryEncoder.maxDepth else {
      throw corrupt(path(), "nested deeper than \(BinaryEncoder.maxDepth) levels")
    }
    return try T(from: BinaryValueDecoder(input: self, value: v, codingPath: path(), depth: depth + 1))
  }
}

struct BinaryValueDecoder: Decoder {
  let input: BinaryDecodingInput
  let value: BinaryTaggedValue
  let codingPath: [CodingKey]
  let depth: Int
  var userInfo: [CodingUserInfoKey: Any] { [:] }

  func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
    guard value.tag == BinaryTag.keyed else { throw input.mismatch([String: Any].self, value, codingPath) }
    return KeyedDecodingContainer(
      BinaryKeyedDecodingContainer<Key>(
        input: input, start: value.start, end: value.end, cursor: BinaryDecodingCursor(value.start),
        codingPath: codingPath, depth: depth))
  }

  func unkeyedContainer() throws -> UnkeyedDecodingContainer {
    guard value.tag == BinaryTag.unkeyed else { throw input.mismatch([Any].self, value, codingPath) }
    var p = value.start
    let n = try input.varint(at: &p, end: value.end, path: codingPath)
    // Every element takes at least one byte: a larger count is a lie.
    guard n <= UInt64(value.end - p) else {
      throw input.corrupt(codingPath, "element count \(n) exceeds the container's bytes")
    }
    return BinaryUnkeyedDecodingContainer(
      input: input, cursor: p, end: value.end, total: Int(n), codingPath: codingPath, depth: depth)
  }

  func singleValueContainer() throws -> SingleValueDecodingContainer {
    BinarySingleValueDecodingContainer(input: input, value: value, codingPath: codingPath, depth: depth)
  }
}

/// A keyed container's read position, shared by its copies (the protocol's methods are
/// not mutating).
final class BinaryDecodingCursor {
  var pos: Int
  init(_ p: Int) { pos = p }
}

struct BinaryKeyedDecodingContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
  let input: BinaryDecodingInput
  let start: Int
  let end: Int
  /// Where the entry after the last one found starts: the first place to look.
  let cursor: BinaryDecodingCursor
  let codingPath: [CodingKey]
  let depth: Int

  /// Parses the entry at `pos`: key range, value, and where the next entry starts.
  private func entry(at pos: Int) throws -> (keyStart: Int, keyEnd: Int, value: BinaryTaggedValue, next: Int) {
    var p = pos
    let klen = try input.length(at: &p, end: end, path: codingPath)
    let ks = p
    let (v, next) = try input.value(at: ks + klen, end: end, path: codingPath)
    return (ks, ks + klen, v, next)
  }

  private func keyMatches(_ k: String, _ s: Int, _ e: Int) -> Bool {
    var name = k
    return name.withUTF8 { u in
      u.count == e - s
        && input.bytes.withUnsafeBufferPointer { b in
          u.count == 0 || memcmp(u.baseAddress!, b.baseAddress! + s, u.count) == 0
        }
    }
  }

  private func find(_ key: Key) throws -> BinaryTaggedValue? { try find(key.stringValue) }

  private func find(_ k: String) throws -> BinaryTaggedValue? {
    if cursor.pos < end {
      let e = try entry(at: cursor.pos)
      if keyMatches(k, e.keyStart, e.keyEnd) {
        cursor.pos = e.next
        return e.value
      }
    }
    var p = start
    while p < end {
      let e = try entry(at: p)
      if keyMatches(k, e.keyStart, e.keyEnd) {
        cursor.pos = e.next
        return e.value
      }
      p = e.next
    }
    return nil
  }

  private func require(_ k: Key) throws -> BinaryTaggedValue {
    guard let v = try find(k) else {
      throw DecodingError.keyNotFound(
        k, .init(codingPath: codingPath, debugDescription: "no value for key \"\(k.stringValue)\""))
    }
    return v
  }

  var allKeys: [Key] {
    var keys: [Key] = []
    var p = start
    while p < end, let e = try? entry(at: p) {
      if let s = try? input.stringBytes(e.keyStart, e.keyEnd, codingPath), let k = Key(stringValue: s) {
        keys.append(k)
      }
      p = e.next
    }
    return keys
  }

  func contains(_ k: Key) -> Bool { ((try? find(k)) ?? nil) != nil }

  @inline(__always) private func scalar<T: BinaryScalar>(_ k: Key) throws -> T {
    try T.read(require(k), from: input, codingPath + [k])
  }

  func decodeNil(forKey k: Key) throws -> Bool { try require(k).tag == BinaryTag.null }
  func decode(_ t: Bool.Type, forKey k: Key) throws -> Bool { try scalar(k) }
  func decode(_ t: String.Type, forKey k: Key) throws -> String { try scalar(k) }
  func decode(_ t: Double.Type, forKey k: Key) throws -> Double { try scalar(k) }
  func decode(_ t: Float.Type, forKey k: Key) throws -> Float { try scalar(k) }
  func decode(_ t: Int.Type, forKey k: Key) throws -> Int { try scalar(k) }
  func decode(_ t: Int8.Type, forKey k: Key) throws -> Int8 { try scalar(k) }
  func decode(_ t: Int16.Type, forKey k: Key) throws -> Int16 { try scalar(k) }
  func decode(_ t: Int32.Type, forKey k: Key) throws -> Int32 { try scalar(k) }
  func decode(_ t: Int64.Type, forKey k: Key) throws -> Int64 { try scalar(k) }
  func decode(_ t: UInt.Type, forKey k: Key) throws -> UInt { try scalar(k) }
  func decode(_ t: UInt8.Type, forKey k: Key) throws -> UInt8 { try scalar(k) }
  func decode(_ t: UInt16.Type, forKey k: Key) throws -> UInt16 { try scalar(k) }
  func decode(_ t: UInt32.Type, forKey k: Key) throws -> UInt32 { try scalar(k) }
  func decode(_ t: UInt64.Type, forKey k: Key) throws -> UInt64 { try scalar(k) }
  func decode<T: Decodable>(_ t: T.Type, forKey k: Key) throws -> T {
    try input.decodeValue(t, require(k), path: codingPath + [k], depth: depth)
  }

  func nestedContainer<NK: CodingKey>(keyedBy t: NK.Type, forKey k: Key) throws -> KeyedDecodingContainer<NK> {
    try BinaryValueDecoder(input: input, value: require(k), codingPath: codingPath + [k], depth: depth + 1).container(
      keyedBy: t)
  }
  func nestedUnkeyedContainer(forKey k: Key) throws -> UnkeyedDecodingContainer {
    try BinaryValueDecoder(input: input, value: require(k), codingPath: codingPath + [k], depth: depth + 1)
      .unkeyedContainer()
  }
  func superDecoder() throws -> Decoder {
    let v = try find("super") ?? BinaryTaggedValue(tag: BinaryTag.null, start: start, end: start)
    return BinaryValueDecoder(
      input: input, value: v, codingPath: codingPath + [BinaryCodingKey(stringValue: "super")], depth: depth + 1)
  }
  func superDecoder(forKey k: Key) throws -> Decoder {
    let v = try find(k) ?? BinaryTaggedValue(tag: BinaryTag.null, start: start, end: start)
    return BinaryValueDecoder(input: input, value: v, codingPath: codingPath + [k], depth: depth + 1)
  }
}

struct BinaryUnkeyedDecodingContainer: UnkeyedDecodingContainer {
  let input: BinaryDecodingInput
  var cursor: Int
  let end: Int
  let total: Int
  let codingPath: [CodingKey]
  let depth: Int
  var currentIndex = 0

  init(input: BinaryDecodingInput, cursor: Int, end: Int, total: Int, codingPath: [CodingKey], depth: Int) {
    self.input = input
    self.cursor = cursor
    self.end = end
    self.total = total
    self.codingPath = codingPath
    self.depth = depth
  }

  var count: Int? { total }
  var isAtEnd: Bool { currentIndex >= total }
  private var path: [CodingKey] { at(currentIndex) }
  private func at(_ i: Int) -> [CodingKey] { codingPath + [BinaryCodingKey(intValue: i)] }

  private mutating func next() throws -> BinaryTaggedValue {
    guard !isAtEnd else {
      throw DecodingError.valueNotFound(
        Any.self, .init(codingPath: path, debugDescription: "unkeyed container is at its end"))
    }
    let (v, n) = try input.value(at: cursor, end: end, path: path)
    cursor = n
    currentIndex += 1
    return v
  }

  @inline(__always) private mutating func scalar<T: BinaryScalar>() throws -> T {
    let i = currentIndex
    return try T.read(next(), from: input, at(i))
  }

  mutating func decodeNil() throws -> Bool {
    guard !isAtEnd else { return false }
    let (v, n) = try input.value(at: cursor, end: end, path: path)
    guard v.tag == BinaryTag.null else { return false }
    cursor = n
    currentIndex += 1
    return true
  }
  mutating func decode(_ t: Bool.Type) throws -> Bool { try scalar() }
  mutating func decode(_ t: String.Type) throws -> String { try scalar() }
  mutating func decode(_ t: Double.Type) throws -> Double { try scalar() }
  mutating func decode(_ t: Float.Type) throws -> Float { try scalar() }
  mutating func decode(_ t: Int.Type) throws -> Int { try scalar() }
  mutating func decode(_ t: Int8.Type) throws -> Int8 { try scalar() }
  mutating func decode(_ t: Int16.Type) throws -> Int16 { try scalar() }
  mutating func decode(_ t: Int32.Type) throws -> Int32 { try scalar() }
  mutating func decode(_ t: Int64.Type) throws -> Int64 { try scalar() }
  mutating func decode(_ t: UInt.Type) throws -> UInt { try scalar() }
  mutating func decode(_ t: UInt8.Type) throws -> UInt8 { try scalar() }
  mutating func decode(_ t: UInt16.Type) throws -> UInt16 { try scalar() }
  mutating func decode(_ t: UInt32.Type) throws -> UInt32 { try scalar() }
  mutating func decode(_ t: UInt64.Type) throws -> UInt64 { try scalar() }
  mutating func decode<T: Decodable>(_ t: T.Type) throws -> T {
    let i = currentIndex
    return try input.decodeValue(t, next(), path: at(i), depth: depth)
  }

  mutating func nestedContainer<NK: CodingKey>(keyedBy t: NK.Type) throws -> KeyedDecodingContainer<NK> {
    let p = path
    return try BinaryValueDecoder(input: input, value: next(), codingPath: p, depth: depth + 1).container(keyedBy: t)
  }
  mutating func nestedUnkeyedContainer() throws -> UnkeyedDecodingContainer {
    let p = path
    return try BinaryValueDecoder(input: input, value: next(), codingPath: p, depth: depth + 1).unkeyedContainer()
  }
  mutating func superDecoder() throws -> Decoder {
    let p = path
    return BinaryValueDecoder(input: input, value: try next(), codingPath: p, depth: depth + 1)
  }
}

struct BinarySingleValueDecodingContainer: SingleValueDecodingContainer {
  let input: BinaryDecodingInput
  let value: BinaryTaggedValue
  let codingPath: [CodingKey]
  let depth: Int

  @inline(__always) private func scalar<T: BinaryScalar>() throws -> T { try T.read(value, from: input, codingPath) }

  func decodeNil() -> Bool { value.tag == BinaryTag.null }
  func decode(_ t: Bool.Type) throws -> Bool { try scalar() }
  func decode(_ t: String.Type) throws -> String { try scalar() }
  func decode(_ t: Double.Type) throws -> Double { try scalar() }
  func decode(_ t: Float.Type) throws -> Float { try scalar() }
  func decode(_ t: Int.Type) throws -> Int { try scalar() }
  func decode(_ t: Int8.Type) throws -> Int8 { try scalar() }
  func decode(_ t: Int16.Type) throws -> Int16 { try scalar() }
  func decode(_ t: Int32.Type) throws -> Int32 { try scalar() }
  func decode(_ t: Int64.Type) throws -> Int64 { try scalar() }
  func decode(_ t: UInt.Type) throws -> UInt { try scalar() }
  func decode(_ t: UInt8.Type) throws -> UInt8 { try scalar() }
  func decode(_ t: UInt16.Type) throws -> UInt16 { try scalar() }
  func decode(_ t: UInt32.Type) throws -> UInt32 { try scalar() }
  func decode(_ t: UInt64.Type) throws -> UInt64 { try scalar() }
  func decode<T: Decodable>(_ t: T.Type) throws -> T { try input.decodeValue(t, value, path: codingPath, depth: depth) }
}

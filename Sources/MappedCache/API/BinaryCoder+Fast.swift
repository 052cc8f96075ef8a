import Foundation

// Straight-line forms of the binary coder for the commonest nested values, arrays of
// strings, integers, doubles and booleans: the bytes are exactly those the general path
// (`Array.encode(to:)` through an unkeyed container, element by element) writes and
// reads, without a container node, an existential box or a generic call per element.
// In a profile of a small struct with a `[String]` field, the array took a large share
// of the decode and the encode, mostly in generic-metadata lookups and array growth.

extension Array where Element == UInt8 {
  /// Bytes `binVarint(v)` writes.
  @inline(__always) static func binVarintSize(_ v: UInt64) -> Int {
    var n = 1
    var v = v >> 7
    while v != 0 {
      n += 1
      v >>= 7
    }
    return n
  }

  /// An unkeyed container of `count` elements whose encodings take `body` bytes in all,
  /// written by `elements`.
  @inline(__always) mutating func binUnkeyed(count: Int, body: Int, _ elements: (inout [UInt8]) -> Void) {
    let countBytes = Self.binVarintSize(UInt64(count))
    append(BinaryTag.unkeyed)
    binVarint(UInt64(countBytes + body))
    reserveCapacity(self.count + countBytes + body)
    binVarint(UInt64(count))
    elements(&self)
  }
}

extension BinaryEncodingNode {
  /// Writes `v` if it is an array of a type with a straight-line form; false otherwise.
  @inline(__always)
  static func encodeArray<T>(_ v: T, into w: inout [UInt8]) -> Bool {
    // Safe: each bit cast is between `T` and the type it was just compared equal to.
    if T.self == [String].self {
      var strings = unsafeBitCast(v, to: [String].self)
      var body = 0
      for i in strings.indices {
        let n = strings[i].utf8.count
        body += 1 + [UInt8].binVarintSize(UInt64(n)) + n
      }
      w.binUnkeyed(count: strings.count, body: body) { w in
        for i in strings.indices {
          w.append(BinaryTag.string)
          w.binString(strings[i])
        }
      }
      strings = []
      return true
    }
    if T.self == [Int].self {
      let ints = unsafeBitCast(v, to: [Int].self)
      w.binUnkeyed(count: ints.count, body: 9 * ints.count) { w in
        for x in ints { w.binFixed(BinaryTag.i64, Int64(x)) }
      }
      return true
    }
    if T.self == [Double].self {
      let doubles = unsafeBitCast(v, to: [Double].self)
      w.binUnkeyed(count: doubles.count, body: 9 * doubles.count) { w in
        for x in doubles { w.binFixed(BinaryTag.f64, x.bitPattern) }
      }
      return true
    }
    if T.self == [Bool].self {
      let bools = unsafeBitCast(v, to: [Bool].self)
      w.binUnkeyed(count: bools.count, body: bools.count) { w in
        for x in bools { w.append(x ? BinaryTag.yes : BinaryTag.no) }
      }
      return true
    }
    return false
  }
}

extension BinaryDecodingInput {
  /// Reads `v` as an array of a type with a straight-line form (nil for other types),
  /// with the checks and errors of the general path: the container's tag, the count
  /// against its bytes, each element's tag and bounds (`value(at:)`), at its index's path.
  @inline(__always)
  func decodeArray<T>(_ t: T.Type, _ v: BinaryTaggedValue, path: () -> [CodingKey]) throws -> T? {
    // Safe: each bit cast is between `T` and the type it was just compared equal to.
    if T.self == [String].self {
      return unsafeBitCast(try elements(v, T.self, path) { e, p in try string(e, p()) }, to: T.self)
    }
    if T.self == [Int].self {
      return unsafeBitCast(try elements(v, T.self, path) { e, p in try integer(Int.self, e, p()) }, to: T.self)
    }
    if T.self == [Double].self {
      return unsafeBitCast(try elements(v, T.self, path) { e, p in try double(e, p()) }, to: T.self)
    }
    if T.self == [Bool].self {
      return unsafeBitCast(try elements(v, T.self, path) { e, p in try bool(e, p()) }, to: T.self)
    }
    return nil
  }

  @inline(__always)
  private func elements<E>(
    _ v: BinaryTaggedValue, _ t: Any.Type, _ path: () -> [CodingKey],
    _ element: (BinaryTaggedValue, () -> [CodingKey]) throws -> E
  ) throws -> [E] {
    guard v.tag == BinaryTag.unkeyed else { throw mismatch(t, v, path()) }
    var p = v.start
    let n = try varint(at: &p, end: v.end, path: path())
    // Every element takes at least one byte: a larger count is a lie.
    guard n <= UInt64(v.end - p) else { throw corrupt(path(), "element count \(n) exceeds the container's bytes") }
    var out: [E] = []
    out.reserveCapacity(Int(n))
    // The element's path is built only for an error.
    try withoutActuallyEscaping(path) { path in
      for i in 0..<Int(n) {
        let at = { path() + [BinaryCodingKey(intValue: i)] }
        let (e, next) = try value(at: p, end: v.end, path: at())
        out.append(try element(e, at))
        p = next
      }
    }
    return out
  }
}

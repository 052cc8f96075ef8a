import MappedCache

/// What `get` prints and `set` stores, by the file's value type, so that a value reads
/// back in every tool as it was given: an untyped, "bytes" or "string" file holds the
/// bytes themselves; an "int64" file (Swift's `SharedCache<Int>`) 8 bytes little-endian,
/// printed and given in decimal; a "python" file (bindings/python) a tag byte before the
/// value (docs/python.md), which `get` leaves out and `set` puts in. Other types (Swift's
/// Codable values) are their stored bytes, as before.
enum ValueText {
  /// The bytes `get` writes for a stored value.
  static func shown(_ stored: [UInt8], type: String) throws(CLIFailure) -> [UInt8] {
    switch type {
    case "int64":
      guard stored.count == 8 else {
        throw .failed("the value is \(stored.count) bytes, not an int64 (8 bytes), in a cache of int64")
      }
      let bits = stored.reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
      return Array(String(Int64(bitPattern: bits)).utf8)
    case "python": return try python(stored)
    default: return stored
    }
  }

  /// `shown`, or the stored bytes themselves where `get` would refuse them (a listing
  /// shows every entry: a pickle, a malformed value).
  static func readable(_ stored: [UInt8], type: String) -> [UInt8] {
    (try? shown(stored, type: type)) ?? stored
  }

  /// The bytes `set` stores for the bytes it was given.
  static func stored(_ given: [UInt8], type: String) throws(CLIFailure) -> [UInt8] {
    switch type {
    case "int64":
      guard let n = Int64(String(decoding: given, as: UTF8.self)), validUTF8(given) else {
        throw .failed("a cache of int64 stores integers: give one in decimal, \(Int64.min) to \(Int64.max)")
      }
      let bits = UInt64(bitPattern: n)
      return (0..<8).map { UInt8(truncatingIfNeeded: bits >> (8 * $0)) }
    case "string":
      guard validUTF8(given) else { throw .failed("a cache of strings stores UTF-8 text; the value given is not") }
      return given
    case "python":
      // Text as Python's str, anything else as bytes: what Python reads back is what was given.
      return [UInt8(ascii: validUTF8(given) ? "S" : "B")] + given
    default: return given
    }
  }

  /// A python value without its tag: bytes and text as they are, an int in decimal, a
  /// float as Python's repr prints it, JSON text (the Node addon's) as it is.
  private static func python(_ stored: [UInt8]) throws(CLIFailure) -> [UInt8] {
    guard let tag = stored.first else { throw .failed("an empty value in a cache of python values (no tag byte)") }
    let value = Array(stored.dropFirst())
    switch tag {
    case UInt8(ascii: "B"), UInt8(ascii: "S"), UInt8(ascii: "I"), UInt8(ascii: "J"): return value
    case UInt8(ascii: "F"):
      guard value.count == 8 else { throw .failed("a malformed float in a cache of python values") }
      let bits = value.reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
      return Array(floatText(Double(bitPattern: bits)).utf8)
    case UInt8(ascii: "P"):
      throw .failed("the value is a pickled Python object: read it from Python (mappedcache.Cache(path, pickle=True))")
    default:
      throw .failed("an unknown value tag 0x\(String(tag, radix: 16)) in a cache of python values")
    }
  }

  /// Python's repr of a float (Swift's shortest round-trip digits, spelt as Python spells them).
  private static func floatText(_ x: Double) -> String {
    if x.isNaN { return "nan" }
    if x.isInfinite { return x < 0 ? "-inf" : "inf" }
    return x.description
  }

  private static func validUTF8(_ bytes: [UInt8]) -> Bool {
    var iterator = bytes.makeIterator()
    var decoder = UTF8()
    while true {
      switch decoder.decode(&iterator) {
      case .scalarValue: continue
      case .emptyInput: return true
      case .error: return false
      }
    }
  }
}

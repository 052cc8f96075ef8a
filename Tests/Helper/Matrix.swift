import Foundation
import MappedCache

// Swift's cells of the Python package's matrix test (bindings/python/tests/test_matrix.py):
// one operation on one file through a typed SharedCache, as an app would do it.
//
//   matrix PATH TYPE get KEY           prints the value (a string as JSON, bytes as hex, an
//                                      integer in decimal) or MISSING
//   matrix PATH TYPE set KEY VALUE [TTL]   stores VALUE (bytes given as hex), expiring after
//                                      TTL seconds when given
//   matrix PATH int incr KEY DELTA     prints the counter after adding DELTA
//   matrix PATH TYPE ttl KEY           prints the seconds left, "never", or MISSING
//
// TYPE is string, bytes or int (SharedCache<String>, <[UInt8]>, <Int>).
let matrixCommands: [String: HelperCommand] = [
  "matrix": { a in
    guard a.count >= 4 else { return 64 }
    switch a[1] {
    case "string": return try MatrixCell(try SharedCache<String>(path: a[0]), show: json, parse: { $0 }).run(a)
    case "bytes": return try MatrixCell(try SharedCache<[UInt8]>(path: a[0]), show: hex, parse: unhex).run(a)
    case "int":
      let cache = try SharedCache<Int>(path: a[0])
      if a[2] == "incr", a.count == 5, let delta = Int(a[4]) {
        print(try cache.increment(forKey: a[3], by: delta))
        return 0
      }
      return try MatrixCell(cache, show: { String($0) }, parse: { Int($0) }).run(a)
    default: return 64
    }
  }
]

private func json(_ s: String) -> String { String(decoding: try! JSONEncoder().encode(s), as: UTF8.self) }
private func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }
private func unhex(_ s: String) -> [UInt8]? {
  let digits = Array(s.utf8)
  guard digits.count % 2 == 0 else { return nil }
  let bytes = stride(from: 0, to: digits.count, by: 2).map {
    UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)
  }
  return bytes.contains(nil) ? nil : bytes.compactMap { $0 }
}

/// get, set and ttl for one value type.
private struct MatrixCell<Value: Codable & Sendable> {
  let cache: SharedCache<Value>
  let show: (Value) -> String
  let parse: (String) -> Value?

  init(_ cache: SharedCache<Value>, show: @escaping (Value) -> String, parse: @escaping (String) -> Value?) {
    self.cache = cache
    self.show = show
    self.parse = parse
  }

  func run(_ a: [String]) throws -> Int32 {
    let key = a[3]
    switch a[2] {
    case "get":
      print(try cache.object(forKey: key).map(show) ?? "MISSING")
    case "set":
      guard a.count >= 5, let value = parse(a[4]) else { return 64 }
      try cache.setObject(value, forKey: key, expires: a.count > 5 ? .seconds(Double(a[5]) ?? 0) : nil)
    case "ttl":
      switch try cache.expiry(forKey: key) {
      case nil: print("MISSING")
      case .never?: print("never")
      case .date(let d)?: print(d.timeIntervalSinceNow)
      case .seconds(let s)?: print(s)
      }
    default: return 64
    }
    return 0
  }
}

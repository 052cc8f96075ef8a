import Foundation
import MappedCache

// Child-process commands for the Python package's interop tests (bindings/python/tests):
// Swift's typed caches writing values that Python reads, and reading what Python wrote.
//
//   interop-write PATH TYPE   stores the fixed entries of `InteropValues` for TYPE (string,
//                             bytes, data or int) in a SharedCache of that type (created 4 MiB).
//   interop-read PATH TYPE KEY...   prints one line per key: the value (a string as JSON, bytes
//                             as hex, an integer in decimal) or MISSING.
let interopCommands: [String: HelperCommand] = [
  "interop-write": { a in
    guard a.count == 2 else { return 64 }
    switch a[1] {
    case "string":
      let c = try SharedCache<String>(path: a[0], capacity: 4 << 20)
      for (k, v) in InteropValues.strings { try c.setObject(v, forKey: k) }
    case "bytes":
      let c = try SharedCache<[UInt8]>(path: a[0], capacity: 4 << 20)
      for (k, v) in InteropValues.bytes { try c.setObject(v, forKey: k) }
    case "data":
      let c = try SharedCache<Data>(path: a[0], capacity: 4 << 20)
      for (k, v) in InteropValues.bytes { try c.setObject(Data(v), forKey: k) }
    case "int":
      let c = try SharedCache<Int>(path: a[0], capacity: 4 << 20)
      for (k, v) in InteropValues.ints { try c.setObject(v, forKey: k) }
    default: return 64
    }
    return 0
  },
  "interop-read": { a in
    guard a.count >= 3 else { return 64 }
    let keys = a[2...]
    func show(_ value: String?) { print(value ?? "MISSING") }
    switch a[1] {
    case "string":
      let c = try SharedCache<String>(path: a[0], capacity: 4 << 20)
      for k in keys {
        show(try c.object(forKey: k).map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) })
      }
    case "bytes", "data":
      let c = try SharedCache<[UInt8]>(path: a[0], capacity: 4 << 20)
      for k in keys { show(try c.object(forKey: k).map { $0.map { String(format: "%02x", $0) }.joined() }) }
    case "int":
      let c = try SharedCache<Int>(path: a[0], capacity: 4 << 20)
      for k in keys { show(try c.object(forKey: k).map { String($0) }) }
    default: return 64
    }
    return 0
  },
]

/// The entries `interop-write` stores (the Python tests expect the same).
enum InteropValues {
  static let strings: [(String, String)] = [
    ("plain", "hello"), ("accents", "héllo wörld"), ("emoji", "🎉 party"), ("empty", ""), ("nul", "a\u{0}b"),
  ]
  static let bytes: [(String, [UInt8])] = [("zero", [0, 1, 2, 255]), ("empty", []), ("text", Array("abc".utf8))]
  static let ints: [(String, Int)] = [("one", 1), ("negative", -42), ("max", Int.max)]
}

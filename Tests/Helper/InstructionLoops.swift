import Foundation
import MappedCache

// Loops for counting instructions per operation with callgrind (scripts/callgrind.sh):
// the same loop run for N and 2N iterations, the difference divided by N, so that
// setup and teardown cancel out.
let instructionLoopCommands: [String: HelperCommand] = [
  "insn-loop": instructionLoop
]

/// insn-loop read|readb|set|insert|mget|incr N PATH: N hot operations over 1,000 keys of 12 bytes.
/// `read`: `copyBytes(forKey:into:)` of 48-byte values by `String` key; `readb`: the same
/// by byte key. `set`: `setBytes` of 64-byte values by byte key, each
/// an overwrite in place of an inline entry. `mget`: the same reads by byte key, 16 to a
/// `copyBytes(forKeys:into:lengths:)` call (N a multiple of 16). `incr`: `increment` of
/// an `Int` counter, in place (a cache of its own, of `Int` values). `insert`: `setBytes` of
/// 64-byte values by 12-byte key, each a key not yet in the cache, once the cache is full
/// (`insertPrefill` new keys first): each insert evicts an entry from the small log.
@Sendable func instructionLoop(_ a: [String]) throws -> Int32 {
  guard a.count == 3, let n = Int(a[1]), n > 0 else {
    throw CacheError.invalidArgument("insn-loop read|readb|set|insert|mget|incr N PATH")
  }
  var options = CacheOptions(capacity: 16 << 20)
  options.averageEntrySize = 80
  let keys = (0..<1000).map { String(format: "key:%08d", $0) }
  if a[0] == "incr" { return try incrementLoop(n, keys, path: a[2], options) }
  let cache = try SharedCache<[UInt8]>(path: a[2], capacity: 16 << 20, options: options)
  let byteKeys = keys.map { Array($0.utf8) }
  let value48 = [UInt8](repeating: 7, count: 48)
  let value64 = [UInt8](repeating: 9, count: 64)
  for k in keys { try cache.setObject(value48, forKey: k) }
  let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256, alignment: 16)
  defer { buffer.deallocate() }
  var sink = 0
  switch a[0] {
  case "read":
    for i in 0..<n { sink &+= try cache.copyBytes(forKey: keys[i % 1000], into: buffer) ?? 0 }
  case "readb":
    // The same reads by byte key (`copyBytes(forKey:into:)` with a raw buffer), as
    // cache-stress and the C ABI make them: the keys side by side in one buffer, as a
    // caller holding its keys as bytes has them (an array of `[UInt8]` would add a
    // retain and a release of each key's storage to every iteration).
    let flat = byteKeys.flatMap { $0 }
    try flat.withUnsafeBytes { all in
      for i in 0..<n {
        let k = (i % 1000) &* 12
        sink &+= try cache.copyBytes(forKey: UnsafeRawBufferPointer(rebasing: all[k..<k &+ 12]), into: buffer) ?? 0
      }
    }
  case "set":
    // The keys side by side in one buffer, as `readb` reads them (an array of `[UInt8]`
    // would add a retain and a release of each key's storage to every set).
    let flat = byteKeys.flatMap { $0 }
    try flat.withUnsafeBytes { all in
      try value64.withUnsafeBytes { v in
        for i in 0..<n {
          let k = (i % 1000) &* 12
          try cache.setBytes(v, forKey: UnsafeRawBufferPointer(rebasing: all[k..<k &+ 12]))
        }
      }
    }
  case "insert":
    try insertLoop(n, cache, value64)
  case "mget":
    sink = try mgetLoop(n, cache, byteKeys)
  default:
    throw CacheError.invalidArgument("insn-loop: read, readb, set, insert, mget or incr, not \(a[0])")
  }
  print("sink \(sink)")
  return 0
}

/// `insn-loop insert`: N sets of new keys, each "new:" and a number in 8 bytes, made in
/// place (building N keys first would count their making in each insert). The first
/// `insertPrefill` (the same in every run, so not counted) fill the small log: each
/// counted insert then evicts one entry.
private func insertLoop(_ n: Int, _ cache: SharedCache<[UInt8]>, _ value: [UInt8]) throws {
  let key = UnsafeMutableRawBufferPointer.allocate(byteCount: 12, alignment: 8)
  defer { key.deallocate() }
  key.storeBytes(of: 0x3A77_656E, as: UInt32.self)
  try value.withUnsafeBytes { v in
    for i in 0..<(n + insertPrefill) {
      key.storeBytes(of: UInt64(i), toByteOffset: 4, as: UInt64.self)
      try cache.setBytes(v, forKey: UnsafeRawBufferPointer(key))
    }
  }
}

/// New keys `insn-loop insert` sets before the N it counts: enough to fill the small log
/// of a 16 MiB cache with 76-byte entries.
let insertPrefill = 40_000

/// `insn-loop incr`: N increments over 1,000 counters, each rewritten in place.
private func incrementLoop(_ n: Int, _ keys: [String], path: String, _ options: CacheOptions) throws -> Int32 {
  let cache = try SharedCache<Int>(path: path, capacity: options.capacity, options: options)
  for k in keys { try cache.setObject(0, forKey: k) }
  var sink = 0
  for i in 0..<n { sink &+= try cache.increment(forKey: keys[i % 1000]) }
  print("sink \(sink)")
  return 0
}

/// `insn-loop mget`: the reads of `readb`, 16 keys to a `copyBytes(forKeys:into:lengths:)`
/// call; returns the sum of the lengths read.
private func mgetLoop(
  _ n: Int, _ cache: SharedCache<[UInt8]>, _ byteKeys: [[UInt8]]
) throws -> Int {
  var sink = 0
  // Keys 0, 61, 122, ... (61 is prime to 1,000): each call's 16 from all over the table.
  let flat = (0..<1000).flatMap { byteKeys[($0 * 61) % 1000] }
  let out = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 64, alignment: 16)
  defer { out.deallocate() }
  let buffers = (0..<16).map { UnsafeMutableRawBufferPointer(rebasing: out[$0 * 64..<($0 + 1) * 64]) }
  var lengths = [Int](repeating: 0, count: 16)
  var views = [UnsafeRawBufferPointer](repeating: UnsafeRawBufferPointer(start: nil, count: 0), count: 16)
  try flat.withUnsafeBytes { all in
    try buffers.withUnsafeBufferPointer { b in
      try lengths.withUnsafeMutableBufferPointer { l in
        for call in 0..<(n / 16) {
          for j in 0..<16 {
            let k = (call * 16 + j) % 1000
            views[j] = UnsafeRawBufferPointer(rebasing: all[k * 12..<k * 12 + 12])
          }
          sink &+= try views.withUnsafeBufferPointer { try cache.copyBytes(forKeys: $0, into: b, lengths: l) }
        }
      }
    }
  }
  return sink
}

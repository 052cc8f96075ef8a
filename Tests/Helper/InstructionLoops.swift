import Foundation
import MappedCache

// Loops for counting instructions per operation with callgrind (scripts/callgrind.sh):
// the same loop run for N and 2N iterations, the difference divided by N, so that
// setup and teardown cancel out.
let instructionLoopCommands: [String: HelperCommand] = [
  "insn-loop": instructionLoop
]

/// insn-loop read|set N PATH: N hot operations over 1,000 keys of 12 bytes, in a cache
/// whose entries are inline in their slots. `read`: `copyBytes(forKey:into:)` of 48-byte
/// values by `String` key. `set`: `setBytes` of 64-byte values by byte key, each an
/// overwrite in place of an inline entry.
@Sendable func instructionLoop(_ a: [String]) throws -> Int32 {
  guard a.count == 3, let n = Int(a[1]), n > 0 else {
    throw CacheError.invalidArgument("insn-loop read|set N PATH")
  }
  var options = CacheOptions(capacity: 16 << 20)
  options.averageEntrySize = 80
  let cache = try SharedCache<[UInt8]>(path: a[2], capacity: 16 << 20, options: options)
  let keys = (0..<1000).map { String(format: "key:%08d", $0) }
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
  case "set":
    try value64.withUnsafeBytes { v in
      for i in 0..<n {
        try byteKeys[i % 1000].withUnsafeBytes { k in try cache.setBytes(v, forKey: k) }
      }
    }
  default:
    throw CacheError.invalidArgument("insn-loop: read or set, not \(a[0])")
  }
  print("sink \(sink)")
  return 0
}

import AllocCounter
import Foundation
import MappedCache

let batchCommands: [String: HelperCommand] = [
  "count-batch-allocs": { try countBatchAllocations($0) }
]

/// `count-batch-allocs PATH N`: stores 64 entries (inline and in records), then counts
/// heap allocations over N batch reads (`copyBytes(forKeys:into:lengths:)`) of 16 keys
/// each (twelve hits and four misses each), with keys, buffers and lengths made beforehand. Prints
/// `batch=<allocations> hits=<keys found>`, or `unavailable` when malloc is not counted.
func countBatchAllocations(_ args: [String]) throws -> Int32 {
  guard args.count == 2, let n = Int(args[1]) else { return 64 }
  let cache = try SharedCache<[UInt8]>(path: args[0], capacity: 4 << 20)
  let names = (0..<64).map { "key:\($0)" }
  for (i, k) in names.enumerated() {
    try cache.setObject([UInt8](repeating: 7, count: i % 4 == 0 ? 600 : 40), forKey: k)
  }
  // Sixteen keys per batch: twelve present, four absent.
  let keyBytes = (0..<16).map { Array(($0 < 12 ? names[$0 * 5] : "absent:\($0)").utf8) }
  let flat = keyBytes.flatMap { $0 }
  let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 16)
  defer { storage.deallocate() }
  let buffers = (0..<16).map { UnsafeMutableRawBufferPointer(rebasing: storage[$0 * 1024..<($0 + 1) * 1024]) }
  var lengths = [Int](repeating: 0, count: 16)
  var hits = 0
  var allocations = 0
  let available = mc_alloc_count() >= 0
  try flat.withUnsafeBytes { all in
    var start = 0
    let keys = keyBytes.map { k -> UnsafeRawBufferPointer in
      defer { start += k.count }
      return UnsafeRawBufferPointer(rebasing: all[start..<start + k.count])
    }
    try keys.withUnsafeBufferPointer { k in
      try buffers.withUnsafeBufferPointer { b in
        try lengths.withUnsafeMutableBufferPointer { l in
          _ = try cache.copyBytes(forKeys: k, into: b, lengths: l)  // warm up
          let a0 = mc_alloc_count()
          for _ in 0..<n { hits += try cache.copyBytes(forKeys: k, into: b, lengths: l) }
          allocations = Int(mc_alloc_count() - a0)
        }
      }
    }
  }
  if !available {
    print("unavailable")
    return 0
  }
  print("batch=\(allocations) hits=\(hits)")
  return 0
}

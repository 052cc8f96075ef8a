import AllocCounter
import Foundation
import MappedCache

let batchCommands: [String: HelperCommand] = [
  "count-batch-allocs": { try countBatchAllocations($0) }
]

/// `count-batch-allocs PATH N`: stores 64 entries (inline and in records), then counts
/// heap allocations over N batch reads (`copyBytes(forKeys:into:lengths:)`) of 16 keys
/// each (twelve hits and four misses each), with keys, buffers and lengths made beforehand,
/// then over N batch writes (`setBytes(_:forKeys:expires:)`) of the same 16 keys (inline
/// rewrites, records, new keys). Prints `batch=<allocations> hits=<keys found>
/// mset=<allocations> stored=<keys whose last value reads back>`, or `unavailable` when
/// malloc is not counted.
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
  var setAllocations = 0
  var singleAllocations = 0
  var stored = 0
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
          // The batch write: key j gets a value of 40 or 600 bytes whose bytes say
          // which round wrote it, from memory set up before counting.
          let values = UnsafeMutableBufferPointer<UnsafeRawBufferPointer>.allocate(capacity: 16)
          defer { values.deallocate() }
          for j in 0..<16 {
            values[j] = UnsafeRawBufferPointer(
              rebasing: UnsafeRawBufferPointer(storage)[j * 1024..<j * 1024 + (j % 3 == 0 ? 600 : 40)])
          }
          try cache.setBytes(UnsafeBufferPointer(values), forKeys: k)  // warm up
          let s0 = mc_alloc_count()
          for round in 0..<n {
            for j in 0..<16 { storage[j * 1024] = UInt8(truncatingIfNeeded: round) }
            try cache.setBytes(UnsafeBufferPointer(values), forKeys: k)
          }
          setAllocations = Int(mc_alloc_count() - s0)
          let single0 = mc_alloc_count()
          for _ in 0..<n {
            for j in 0..<16 { try cache.setBytes(values[j], forKey: k[j]) }
          }
          singleAllocations = Int(mc_alloc_count() - single0)
          for j in 0..<16 {
            let want = Array(values[j])
            if try cache.object(forKey: String(decoding: keyBytes[j], as: UTF8.self)) == want { stored += 1 }
          }
        }
      }
    }
  }
  if !available {
    print("unavailable")
    return 0
  }
  print("batch=\(allocations) hits=\(hits) mset=\(setAllocations) stored=\(stored) set=\(singleAllocations)")
  return 0
}

import AllocCounter
import Foundation
import MappedCache

/// `count-allocs PATH N`: stores 64-byte values, then counts heap allocations over N
/// closure reads (`withBytes`), N value reads (`object(forKey:)`), N misses, N copy-out
/// reads (`copyBytes`, with a `String` key and with the key's bytes) and N typed `Int`
/// reads. Prints `closure=<a> object=<b> miss=<c> copy=<d> copyBytesKey=<e> int=<f>`
/// (allocation counts over the N calls each).
func countAllocations(_ args: [String]) throws -> Int32 {
  guard args.count == 2, let n = Int(args[1]) else { return 64 }
  let cache = try SharedCache<[UInt8]>(path: args[0], capacity: 4 << 20)
  let keys = (0..<64).map { "key:\($0)" }
  for k in keys { try cache.setObject([UInt8](repeating: 7, count: 64), forKey: k) }
  var sink = 0
  // Warm up (first-use allocations of the runtime, lazily initialised globals).
  for k in keys { sink &+= try cache.withBytes(forKey: k) { Int($0[0]) } ?? 0 }
  for k in keys { sink &+= try cache.object(forKey: k)?.count ?? 0 }
  for k in keys { sink &+= try cache.object(forKey: k + "-missing")?.count ?? 0 }

  if mc_alloc_count() < 0 {
    print("unavailable")
    return 0
  }
  let a0 = mc_alloc_count()
  for i in 0..<n { sink &+= try cache.withBytes(forKey: keys[i & 63]) { Int($0[63]) } ?? 0 }
  let a1 = mc_alloc_count()
  for i in 0..<n { sink &+= try cache.object(forKey: keys[i & 63])?.count ?? 0 }
  let a2 = mc_alloc_count()
  for _ in 0..<n { sink &+= try cache.withBytes(forKey: "absent") { Int($0.count) } ?? 0 }
  let a3 = mc_alloc_count()
  let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256, alignment: 16)
  defer { buffer.deallocate() }
  let keyBytes = keys.map { Array($0.utf8) }
  let ints = try SharedCache<Int>(path: args[0] + ".int", capacity: 1 << 20)
  defer { unlink(args[0] + ".int") }
  for (i, k) in keys.enumerated() { try ints.setObject(i, forKey: k) }
  for k in keys { sink &+= try ints.object(forKey: k) ?? 0 }
  let b0 = mc_alloc_count()
  for i in 0..<n { sink &+= try cache.copyBytes(forKey: keys[i & 63], into: buffer) ?? 0 }
  let b1 = mc_alloc_count()
  for i in 0..<n {
    sink &+= try keyBytes[i & 63].withUnsafeBytes { try cache.copyBytes(forKey: $0, into: buffer) } ?? 0
  }
  let b2 = mc_alloc_count()
  for i in 0..<n { sink &+= try ints.object(forKey: keys[i & 63]) ?? 0 }
  let b3 = mc_alloc_count()
  print(
    "closure=\(a1 - a0) object=\(a2 - a1) miss=\(a3 - a2) copy=\(b1 - b0) copyBytesKey=\(b2 - b1) int=\(b3 - b2) sink=\(sink)"
  )
  return 0
}

import Foundation
import MappedCache

// bench-copybytes PATH KEYS N: Swift's own copyBytes(forKey:into:) over the cache that
// Tests/CABI/bench_get.c fills and reads, the same keys in the same order (xorshift64 from
// the same seed); prints "swift-copybytes NS ns/get", the best of 3 passes of N gets. The
// C ABI's mc_get is measured against it (scripts/python-bench.sh).
let cabiBenchCommands: [String: HelperCommand] = [
  "bench-copybytes": { a in
    guard a.count == 3, let keyCount = Int(a[1]), let n = Int(a[2]), keyCount > 0 else { return 64 }
    let cache = try SharedCache<[UInt8]>(path: a[0], policy: OpenPolicy(create: false))
    let keys = (0..<keyCount).map { "key-" + String(repeating: "0", count: max(0, 8 - String($0).count)) + String($0) }
    var order = [Int](repeating: 0, count: n)
    var x: UInt64 = 0x9E37_79B9_7F4A_7C15
    for i in 0..<n {
      x ^= x << 13
      x ^= x >> 7
      x ^= x << 17
      order[i] = Int(x % UInt64(keyCount))
    }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256, alignment: 16)
    defer { buffer.deallocate() }
    var best = Double.infinity
    var bytes = 0
    for _ in 0..<3 {
      let t0 = DispatchTime.now().uptimeNanoseconds
      for i in order { bytes &+= try cache.copyBytes(forKey: keys[i], into: buffer) ?? 0 }
      best = min(best, Double(DispatchTime.now().uptimeNanoseconds - t0) / Double(n))
    }
    print(String(format: "swift-copybytes %.1f ns/get (%d bytes read)", best, bytes))
    return 0
  }
]

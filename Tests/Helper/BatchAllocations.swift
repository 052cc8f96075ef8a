import AllocCounter
import Foundation
import MappedCache

let batchCommands: [String: HelperCommand] = [
  "count-batch-allocs": { try countBatchAllocations($0) },
  "bench-mget": { try benchBatchReads($0) },
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
          (setAllocations, singleAllocations, stored) = try countBatchWrites(cache, k, storage, keyBytes, n: n)
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

/// The batch write's part of `count-batch-allocs`: key j gets a value of 40 or 600 bytes
/// whose bytes say which round wrote it, from memory set up before counting. The
/// allocations of N batch writes and of N × 16 single writes, and the keys whose last
/// value reads back.
private func countBatchWrites(
  _ cache: SharedCache<[UInt8]>, _ k: UnsafeBufferPointer<UnsafeRawBufferPointer>,
  _ storage: UnsafeMutableRawBufferPointer, _ keyBytes: [[UInt8]], n: Int
) throws -> (batch: Int, single: Int, stored: Int) {
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
  let batch = Int(mc_alloc_count() - s0)
  let single0 = mc_alloc_count()
  for _ in 0..<n {
    for j in 0..<16 { try cache.setBytes(values[j], forKey: k[j]) }
  }
  let single = Int(mc_alloc_count() - single0)
  var stored = 0
  for j in 0..<16 {
    let want = Array(values[j])
    if try cache.object(forKey: String(decoding: keyBytes[j], as: UTF8.self)) == want { stored += 1 }
  }
  return (batch, single, stored)
}

/// `bench-mget [KEYS] [ROUNDS] [BYTES_PER_KEY] [BATCH]`: the batch read against single
/// reads with no harness around them: KEYS entries (12-byte keys, 64-byte values, inline) in a fresh
/// file under /dev/shm of BYTES_PER_KEY (default 320, scripts/bench.sh's sizing; more
/// makes a table of more slots, so fewer keys sit past their home slot), then ROUNDS interleaved rounds, each reading the same 4 M random keys
/// (precomputed, in one array) one by one with `copyBytes(forKey:into:)` and BATCH (default 16) at a
/// time with `copyBytes(forKeys:into:lengths:)`. Prints each round's rates. Release build.
@Sendable func benchBatchReads(_ a: [String]) throws -> Int32 {
  let keyCount = a.count > 0 ? Int(a[0]) ?? 10_000_000 : 10_000_000
  let rounds = a.count > 1 ? Int(a[1]) ?? 3 : 3
  let path = "/dev/shm/mc-bench-mget-\(getpid()).mcache"
  defer { unlink(path) }
  let bytesPerKey = a.count > 2 ? Int(a[2]) ?? 320 : 320
  var options = CacheOptions(capacity: max(keyCount * bytesPerKey, 32 << 20))
  options.averageEntrySize = 76
  let cache = try SharedCache<[UInt8]>(path: path, capacity: options.capacity, options: options)
  try fillBenchKeys(cache, keyCount)
  let batchSize = a.count > 3 ? max(1, min(Int(a[3]) ?? 16, 1024)) : 16
  let reads = 4 << 20
  let keyBytes = UnsafeMutableRawPointer.allocate(byteCount: reads * 12, alignment: 64)
  defer { keyBytes.deallocate() }
  var rng = SystemRandomNumberGenerator()
  for r in 0..<reads { benchKey(Int.random(in: 0..<keyCount, using: &rng), into: keyBytes + r * 12) }
  let out = UnsafeMutableRawPointer.allocate(byteCount: batchSize * 128, alignment: 64)
  defer { out.deallocate() }
  let keys = UnsafeMutableBufferPointer<UnsafeRawBufferPointer>.allocate(capacity: batchSize)
  let buffers = UnsafeMutableBufferPointer<UnsafeMutableRawBufferPointer>.allocate(capacity: batchSize)
  let lengths = UnsafeMutableBufferPointer<Int>.allocate(capacity: batchSize)
  defer {
    keys.deallocate()
    buffers.deallocate()
    lengths.deallocate()
  }
  for j in 0..<batchSize { buffers[j] = UnsafeMutableRawBufferPointer(start: out + j * 128, count: 128) }
  var sink = 0
  let st = cache.statistics
  print(
    "bench-mget: \(keyCount) keys in \(st.slotCount) slots (load \(String(format: "%.2f", Double(st.entries) / Double(st.slotCount)))), \(reads) random reads per row"
  )
  for round in 1...rounds {
    sink &+= try benchBatchRound(
      round, cache, keyBytes: keyBytes, reads: reads, keys: keys, buffers: buffers, lengths: lengths)
  }
  return sink == 42 ? 1 : 0
}

/// Key `i` of `bench-mget`, "k" and 11 decimal digits, written at `p`.
private func benchKey(_ i: Int, into p: UnsafeMutableRawPointer) {
  var v = i
  p.storeBytes(of: UInt8(ascii: "k"), as: UInt8.self)
  for d in stride(from: 11, through: 1, by: -1) {
    p.storeBytes(of: UInt8(48 + v % 10), toByteOffset: d, as: UInt8.self)
    v /= 10
  }
}

/// Stores keys 0..<`keyCount` with 64-byte values.
private func fillBenchKeys(_ cache: SharedCache<[UInt8]>, _ keyCount: Int) throws {
  let value = [UInt8](repeating: 0x61, count: 64)
  let one = UnsafeMutableRawPointer.allocate(byteCount: 12, alignment: 8)
  defer { one.deallocate() }
  try value.withUnsafeBytes { v in
    for i in 0..<keyCount {
      benchKey(i, into: one)
      try cache.setBytes(v, forKey: UnsafeRawBufferPointer(start: one, count: 12))
    }
  }
}

/// One round of `bench-mget`: the reads one by one, then in batches of `keys.count`;
/// prints both rates.
private func benchBatchRound(
  _ round: Int, _ cache: SharedCache<[UInt8]>, keyBytes: UnsafeMutableRawPointer, reads: Int,
  keys: UnsafeMutableBufferPointer<UnsafeRawBufferPointer>,
  buffers: UnsafeMutableBufferPointer<UnsafeMutableRawBufferPointer>, lengths: UnsafeMutableBufferPointer<Int>
) throws -> Int {
  let batchSize = keys.count
  var sink = 0
  var t0 = DispatchTime.now().uptimeNanoseconds
  for r in 0..<reads {
    sink &+=
      try cache.copyBytes(forKey: UnsafeRawBufferPointer(start: keyBytes + r * 12, count: 12), into: buffers[0]) ?? 0
  }
  let single = Double(DispatchTime.now().uptimeNanoseconds - t0) / Double(reads)
  t0 = DispatchTime.now().uptimeNanoseconds
  for g in stride(from: 0, to: reads - batchSize + 1, by: batchSize) {
    for j in 0..<batchSize { keys[j] = UnsafeRawBufferPointer(start: keyBytes + (g + j) * 12, count: 12) }
    sink &+= try cache.copyBytes(
      forKeys: UnsafeBufferPointer(keys), into: UnsafeBufferPointer(buffers), lengths: lengths)
  }
  let batch = Double(DispatchTime.now().uptimeNanoseconds - t0) / Double(reads / batchSize * batchSize)
  print(
    String(
      format: "round %d: single %.1f ns/read (%.2f M/s), mget%d %.1f ns/key (%.2f M/s), %.2fx", round, single,
      1000 / single, batchSize, batch, 1000 / batch, single / batch))
  return sink
}

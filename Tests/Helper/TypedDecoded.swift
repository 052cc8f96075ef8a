import CheckedValues
import Foundation
import Glibc
@_spi(Testing) import MappedCache

// Child-process commands for the decoded-value cache and in-place counter tests.
let decodedCommands: [String: HelperCommand] = [
  "decoded-writer": decodedWriter,
  "incr-die": incrementDie,
  "coder-loop": coderLoop,
  "typed-loop": typedLoop,
]

/// decoded-writer PATH KEY ROUNDS REMOVE_EVERY: writes `CountedRecord`s for KEY with
/// counters 1...ROUNDS in order; after every REMOVE_EVERY-th it removes KEY and then
/// records the removal under "ack:KEY" (a record whose counter is the last one written
/// before the removal), so a reader that has read the ack knows no counter up to it may
/// be read again. Prints "wrote ROUNDS removed R".
@Sendable func decodedWriter(_ a: [String]) throws -> Int32 {
  guard a.count == 4, let rounds = Int(a[2]), let every = Int(a[3]), every > 0 else { return 64 }
  let cache = try SharedCache<CountedRecord>(path: a[0], capacity: 4 << 20)
  let key = a[1]
  var removed = 0
  for c in 1...max(1, rounds) {
    try cache.setObject(CountedRecord(key: key, counter: c), forKey: key)
    if c % every == 0 {
      try cache.removeObject(forKey: key)
      try cache.setObject(CountedRecord(key: "ack:" + key, counter: c), forKey: "ack:" + key)
      removed += 1
    }
  }
  print("wrote \(rounds) removed \(removed)")
  return 0
}

/// incr-die PATH KEY: adds 1 to KEY's counter in place and is killed by SIGKILL
/// inside the slot's seqlock write (the new value stored, the slot still odd, the lock
/// held). Exits 2 if the in-place path did not apply.
@Sendable func incrementDie(_ a: [String]) throws -> Int32 {
  guard a.count == 2 else { return 64 }
  let cache = try SharedCache<Int>(path: a[0], capacity: 4 << 20)
  let applied = try cache._rewriteInPlace(forKey: a[1], by: 1) { kill(getpid(), SIGKILL) }
  return applied ? 0 : 2
}

/// coder-loop decode|encode N: N binary-coder decodes (or encodes) of bench-typed's
/// 5-field struct, for profilers (`valgrind --tool=callgrind`, `perf`). Prints a checksum.
@Sendable func coderLoop(_ a: [String]) throws -> Int32 {
  guard a.count == 2, let n = Int(a[1]) else { return 64 }
  let record = BenchRecord(id: 42, name: "a small record", score: 3.25, tags: ["red", "green"], active: true)
  let bytes = try BinaryCoding.encode(record)
  var sink = 0
  switch a[0] {
  case "decode": for _ in 0..<n { sink &+= try BinaryCoding.decode(BenchRecord.self, from: bytes).id }
  case "encode": for _ in 0..<n { sink &+= try BinaryCoding.encode(record).count }
  default: return 64
  }
  print(sink)
  return 0
}

/// typed-loop OP N PATH: N operations on 1,024 keys of a fresh cache at PATH (removed
/// after), for instruction counts (`scripts/callgrind.sh`'s method: run N and 2N, take
/// the difference). OP: struct-hot (a 5-field struct, decoded values kept),
/// struct-decoding (the same, decoding every read), struct-bytes (its encoded bytes as
/// [UInt8]), set-int and incr-int (inline counters). Prints a checksum.
@Sendable func typedLoop(_ a: [String]) throws -> Int32 {
  guard a.count == 3, let n = Int(a[1]) else { return 64 }
  let path = a[2]
  defer { unlink(path) }
  let keys = (0..<1024).map { "bench-key-\($0)" }
  let record = BenchRecord(id: 42, name: "a small record", score: 3.25, tags: ["red", "green"], active: true)
  var sink = 0
  switch a[0] {
  case "struct-hot", "struct-decoding":
    let caching: DecodedValueCaching = a[0] == "struct-hot" ? .automatic : .off
    let c = try SharedCache<BenchRecord>(path: path, capacity: 16 << 20, policy: OpenPolicy(decodedValues: caching))
    for k in keys { try c.setObject(record, forKey: k) }
    for i in 0..<n { sink &+= try c.object(forKey: keys[i & 1023])?.id ?? 0 }
  case "struct-bytes":
    let c = try SharedCache<[UInt8]>(path: path, capacity: 16 << 20)
    let bytes = try BinaryCoding.encode(record)
    for k in keys { try c.setObject(bytes, forKey: k) }
    for i in 0..<n { sink &+= try c.object(forKey: keys[i & 1023])?.count ?? 0 }
  case "set-int", "incr-int":
    var small = CacheOptions(capacity: 16 << 20)
    small.averageEntrySize = 80
    let c = try SharedCache<Int>(path: path, capacity: 16 << 20, options: small)
    for k in keys { try c.setObject(0, forKey: k) }
    if a[0] == "set-int" {
      for i in 0..<n { try c.setObject(i, forKey: keys[i & 1023]) }
    } else {
      for i in 0..<n { sink &+= try c.increment(forKey: keys[i & 1023]) }
    }
  default: return 64
  }
  print(sink)
  return 0
}

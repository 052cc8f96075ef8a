import CheckedValues
import Foundation
import Glibc
import MappedCache

// Child-process commands for the core multi-process tests (CoreFormatTests,
// CoreConcurrencyTests). Each prints one JSON object on its last line of stdout.
//
//   writer PATH ID SECONDS KEYS MINSIZE MAXSIZE [flock]   sets (and now and then removes) random
//          keys "k<n>" with self-checking values; SECONDS <= 0 runs until killed. Prints
//          "ready" once its first set is stored, then {"sets":N,"removes":M} at the end.
//   reader PATH SECONDS KEYS                    reads random keys until SECONDS pass or the
//          file PATH.stop exists, checking every value it gets (its key and checksum);
//          prints {"reads":N,"hits":H,"corrupt":C}.
//   create-race PATH CAPACITY STARTMS           waits until wall-clock STARTMS, opens (or
//          creates) the cache, stores "pid-<pid>", reads it back;
//          prints {"capacity":N,"existed":true|false,"ok":true}.
let coreCommands: [String: HelperCommand] = [
  "count-allocs": { try countAllocations($0) },
  "ping": { _ in
    print("pong")
    return 0
  },
  "writer": coreWriter,
  "reader": coreReader,
  "create-race": coreCreateRace,
]

/// Writes one line to stdout unbuffered, so it is out even if the process is then killed.
private func say(_ s: String) {
  FileHandle.standardOutput.write((s + "\n").data(using: .utf8)!)
}

/// Ends a command: says its figures as one JSON object (numbers and booleans, in the
/// order given) and returns its exit status, 0 when it `passed`, else 1.
private func finish(_ figures: KeyValuePairs<String, Any>, passed: Bool) -> Int32 {
  say("{" + figures.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",") + "}")
  return passed ? 0 : 1
}

private func intArg(_ a: [String], _ i: Int, _ name: String) throws -> Int {
  guard i < a.count, let v = Int(a[i]) else { throw CacheError.invalidArgument("missing or bad \(name)") }
  return v
}

private func doubleArg(_ a: [String], _ i: Int, _ name: String) throws -> Double {
  guard i < a.count, let v = Double(a[i]) else { throw CacheError.invalidArgument("missing or bad \(name)") }
  return v
}

private func coreWriter(_ a: [String]) throws -> Int32 {
  guard a.count >= 6 else { throw CacheError.invalidArgument("writer PATH ID SECONDS KEYS MINSIZE MAXSIZE") }
  let id = try intArg(a, 1, "ID")
  let seconds = try doubleArg(a, 2, "SECONDS")
  let keys = try intArg(a, 3, "KEYS")
  let minSize = try intArg(a, 4, "MINSIZE")
  let maxSize = try intArg(a, 5, "MAXSIZE")
  let mode: LockMode = a.count > 6 && a[6] == "flock" ? .flock : .sharedWord
  let cache = try SharedCache<[UInt8]>(path: a[0], policy: OpenPolicy(create: false), lockMode: mode)
  var rng = SplitMix(UInt64(id) &* 0x9E37_79B9 &+ UInt64(getpid()))
  let deadline = Date().addingTimeInterval(seconds)
  var sets = 0
  var removes = 0
  var seq = 0
  var badReadBack = 0
  while seconds <= 0 || Date() < deadline {
    seq += 1
    let key = "k\(rng.below(keys))"
    if rng.below(16) == 0 {
      if try cache.removeObject(forKey: key) { removes += 1 }
      continue
    }
    let size = minSize + rng.below(maxSize - minSize + 1)
    let value = CheckedValue.make(key: key, writer: id, seq: seq, size: size)
    try cache.setObject(value, forKey: key)
    sets += 1
    if sets == 1 { say("ready") }
    if rng.below(8) == 0 {
      // Our own write may already be replaced or evicted, but whatever we get must check.
      if try cache.withBytes(forKey: key, { CheckedValue.check($0, key: key) }) == false { badReadBack += 1 }
    }
  }
  return finish(["sets": sets, "removes": removes, "corrupt": badReadBack], passed: badReadBack == 0)
}

private func coreReader(_ a: [String]) throws -> Int32 {
  guard a.count >= 3 else { throw CacheError.invalidArgument("reader PATH SECONDS KEYS") }
  let seconds = try doubleArg(a, 1, "SECONDS")
  let keys = try intArg(a, 2, "KEYS")
  let stopFile = a[0] + ".stop"
  let cache = try SharedCache<[UInt8]>(path: a[0], policy: OpenPolicy(create: false))
  var rng = SplitMix(UInt64(getpid()) &* 7919)
  let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
  defer { buffer.deallocate() }
  let deadline = Date().addingTimeInterval(seconds)
  var reads = 0
  var hits = 0
  var corrupt = 0
  say("ready")
  while true {
    if reads % 512 == 0 && (Date() >= deadline || access(stopFile, F_OK) == 0) { break }
    let key = "k\(rng.below(keys))"
    reads += 1
    // Rotate through the closure read, the copying read and the copy-out read: each must
    // only ever see whole values.
    let ok: Bool?
    switch reads % 3 {
    case 0:
      ok = try cache.withBytes(forKey: key) { CheckedValue.check($0, key: key) }
    case 1:
      ok = try cache.object(forKey: key).map { v in v.withUnsafeBytes { CheckedValue.check($0, key: key) } }
    default:
      let n = try cache.copyBytes(forKey: key, into: buffer)
      ok = n.map { $0 <= buffer.count && CheckedValue.check(UnsafeRawBufferPointer(rebasing: buffer[..<$0]), key: key) }
    }
    guard let ok else { continue }
    hits += 1
    if !ok {
      corrupt += 1
      if corrupt <= 5 { FileHandle.standardError.write("corrupt value for \(key)\n".data(using: .utf8)!) }
    }
  }
  return finish(["reads": reads, "hits": hits, "corrupt": corrupt], passed: corrupt == 0)
}

private func coreCreateRace(_ a: [String]) throws -> Int32 {
  guard a.count >= 3 else { throw CacheError.invalidArgument("create-race PATH CAPACITY STARTMS") }
  let capacity = try intArg(a, 1, "CAPACITY")
  let start = try doubleArg(a, 2, "STARTMS")
  while Date().timeIntervalSince1970 * 1000 < start { usleep(200) }
  let existed = access(a[0], F_OK) == 0
  let cache = try SharedCache<[UInt8]>(path: a[0], capacity: capacity)
  let key = "pid-\(getpid())"
  let value = CheckedValue.make(key: key, writer: Int(getpid()), seq: 1, size: 64)
  try cache.setObject(value, forKey: key)
  let back = try cache.object(forKey: key)
  let ok = back == value
  return finish(["capacity": cache.capacity, "existed": existed, "ok": ok], passed: ok)
}

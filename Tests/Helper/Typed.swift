import Foundation
import Glibc
import MappedCache

// Child-process commands for the typed-API tests (issue 4) and the typed benchmark.
let typedCommands: [String: HelperCommand] = [
  "compute-race": typedComputeRace,
  "compute-hold": typedComputeHold,
  "compute-once": typedComputeOnce,
  "incr": typedIncrement,
  "bench-typed": typedBench,
].merging(decodedCommands) { a, _ in a }

final class ResultBox<T>: @unchecked Sendable { var result: Result<T, Error>? }

/// Runs async work to completion from a synchronous command.
private func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
  let box = ResultBox<T>()
  let done = DispatchSemaphore(value: 0)
  Task {
    do { box.result = .success(try await body()) } catch { box.result = .failure(error) }
    done.signal()
  }
  done.wait()
  return try box.result!.get()
}

/// Appends one line to `path` with O_APPEND: the tests count computes outside the cache.
private func appendLine(_ path: String, _ line: String) {
  let fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o600)
  guard fd >= 0 else { return }
  let bytes = Array((line + "\n").utf8)
  _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
  close(fd)
}

private func wallMs() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1000) }

/// compute-race PATH KEY COUNTER_FILE START_AT_MS COMPUTE_MS: waits for the start
/// moment, then gets-or-computes KEY; the compute appends a line to COUNTER_FILE and
/// sleeps COMPUTE_MS. Prints "VALUE cached|computed on-time|late" (late: it reached the
/// start moment after it had passed, so it did not race).
@Sendable func typedComputeRace(_ a: [String]) throws -> Int32 {
  guard a.count == 5, let start = UInt64(a[3]), let ms = UInt32(a[4]) else { return 64 }
  let cache = try SharedCache<String>(path: a[0], capacity: 4 << 20)
  let key = a[1]
  let counter = a[2]
  let late = wallMs() > start
  while wallMs() < start { usleep(200) }
  let pid = getpid()
  let r = try blocking {
    try await cache.object(forKey: key, options: ComputeOptions(waitTimeout: 30)) {
      appendLine(counter, "computed by \(pid)")
      usleep(ms * 1000)
      return "value-from-\(pid)"
    }
  }
  print("\(r.value) \(r.fromCache ? "cached" : "computed") \(late ? "late" : "on-time")")
  return 0
}

/// compute-hold PATH KEY: claims KEY and computes for ten minutes (the test kills it).
@Sendable func typedComputeHold(_ a: [String]) throws -> Int32 {
  guard a.count == 2 else { return 64 }
  let cache = try SharedCache<String>(path: a[0], capacity: 4 << 20)
  _ = try blocking {
    try await cache.object(forKey: a[1]) {
      FileHandle.standardOutput.write("claimed\n".data(using: .utf8)!)
      sleep(600)
      return "never"
    }
  }
  return 0
}

/// compute-once PATH KEY WAIT_TIMEOUT_S: gets-or-computes KEY (value "computed-by-PID").
/// Prints "VALUE cached|computed".
@Sendable func typedComputeOnce(_ a: [String]) throws -> Int32 {
  guard a.count == 3, let timeout = Double(a[2]) else { return 64 }
  let cache = try SharedCache<String>(path: a[0], capacity: 4 << 20)
  let pid = getpid()
  let r = try blocking {
    try await cache.object(forKey: a[1], options: ComputeOptions(waitTimeout: timeout)) { "computed-by-\(pid)" }
  }
  print("\(r.value) \(r.fromCache ? "cached" : "computed")")
  return 0
}

/// incr PATH KEY N: increments KEY by 1, N times. Prints the last value it saw.
@Sendable func typedIncrement(_ a: [String]) throws -> Int32 {
  guard a.count == 3, let n = Int(a[2]) else { return 64 }
  let cache = try SharedCache<Int>(path: a[0], capacity: 4 << 20)
  var last = 0
  for _ in 0..<n { last = try cache.increment(forKey: a[1]) }
  print(last)
  return 0
}

// MARK: - Benchmark

struct BenchRecord: Codable, Equatable {
  var id: Int
  var name: String
  var score: Double
  var tags: [String]
  var active: Bool
}

/// Nanoseconds per call of `body`, best of three runs of `n` calls.
private func measure(_ n: Int, _ body: (Int) throws -> Void) rethrows -> Double {
  var best = Double.infinity
  for _ in 0..<3 {
    let t0 = DispatchTime.now().uptimeNanoseconds
    for i in 0..<n { try body(i) }
    let t1 = DispatchTime.now().uptimeNanoseconds
    best = min(best, Double(t1 - t0) / Double(n))
  }
  return best
}

/// bench-typed [N]: typed get/set for String, Int and a small Codable struct against raw
/// [UInt8], `withBytes` and `copyBytes` (entries inline in their slots), and the binary
/// coder against JSONEncoder/JSONDecoder.
/// Run it from a release build.
@Sendable func typedBench(_ a: [String]) throws -> Int32 {
  let bench = TypedBench(n: a.first.flatMap { Int($0) } ?? 200_000)
  defer { bench.buffer.deallocate() }
  try bench.bytesRows()
  try bench.stringAndIntRows()
  try bench.structRows()
  try bench.coderRows()
  bench.printRows()
  if bench.sink == 42 { print("") }
  return 0
}

/// `bench-typed`'s rows, in the order they are printed.
private final class TypedBench {
  let n: Int
  let keys = (0..<1024).map { "bench-key-\($0)" }
  let path = "/dev/shm/mc-bench-typed-\(getpid()).mcache"
  let record = BenchRecord(id: 42, name: "a small record", score: 3.25, tags: ["red", "green"], active: true)
  let string = String(repeating: "x", count: 48)
  var rows: [(String, Double)] = []
  var sink = 0
  /// Entries this small are stored inline in their slots (averageEntrySize ≤ 208).
  let small: CacheOptions
  let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256, alignment: 16)

  init(n: Int) {
    self.n = n
    var small = CacheOptions(capacity: 16 << 20)
    small.averageEntrySize = 80
    self.small = small
  }

  // Each method reads the fields it times into locals: the timed loops touch no
  // class property (whose accesses the exclusivity checks would add to every op).
  func bytesRows() throws {
    let (n, keys, buffer, string) = (self.n, self.keys, self.buffer, self.string)
    var sink = 0
    defer { self.sink &+= sink }
    let c = try SharedCache<[UInt8]>(path: path + ".raw", capacity: 16 << 20, options: small)
    defer { unlink(path + ".raw") }
    let raw = Array(string.utf8)
    rows.append(("set [UInt8] (48 B)", try measure(n) { try c.setObject(raw, forKey: keys[$0 & 1023]) }))
    rows.append(("get [UInt8] (48 B)", try measure(n) { sink &+= try c.object(forKey: keys[$0 & 1023])?.count ?? 0 }))
    rows.append(
      ("withBytes (48 B)", try measure(n) { sink &+= try c.withBytes(forKey: keys[$0 & 1023]) { $0.count } ?? 0 }))
    rows.append(
      ("copyBytes (48 B)", try measure(n) { sink &+= try c.copyBytes(forKey: keys[$0 & 1023], into: buffer) ?? 0 }))
  }

  func stringAndIntRows() throws {
    let (n, keys, string) = (self.n, self.keys, self.string)
    var sink = 0
    defer { self.sink &+= sink }
    do {
      let c = try SharedCache<String>(path: path + ".str", capacity: 16 << 20, options: small)
      defer { unlink(path + ".str") }
      rows.append(("set String (48 B)", try measure(n) { try c.setObject(string, forKey: keys[$0 & 1023]) }))
      rows.append(
        ("get String (48 B)", try measure(n) { sink &+= try c.object(forKey: keys[$0 & 1023])?.utf8.count ?? 0 }))
      for k in keys { try c.setObject("hello", forKey: k) }
      rows.append(
        ("get String (5 B)", try measure(n) { sink &+= try c.object(forKey: keys[$0 & 1023])?.utf8.count ?? 0 }))
    }
    do {
      let c = try SharedCache<Int>(path: path + ".int", capacity: 16 << 20, options: small)
      defer { unlink(path + ".int") }
      rows.append(("set Int", try measure(n) { try c.setObject($0, forKey: keys[$0 & 1023]) }))
      rows.append(("get Int", try measure(n) { sink &+= try c.object(forKey: keys[$0 & 1023]) ?? 0 }))
      rows.append(("increment Int", try measure(n) { sink &+= try c.increment(forKey: keys[$0 & 1023]) }))
    }
    do {
      let c = try SharedCache<Int>(path: path + ".intrec", capacity: 16 << 20)
      defer { unlink(path + ".intrec") }
      rows.append(("set Int (record)", try measure(n) { try c.setObject($0, forKey: keys[$0 & 1023]) }))
      rows.append(("increment Int (record)", try measure(n) { sink &+= try c.increment(forKey: keys[$0 & 1023]) }))
    }
  }

  /// The 5-field struct against the same bytes read as [UInt8], in both layouts: entries
  /// in records (the default options) and inline in their slots. "hot" reads keep decoded
  /// values (the default for Codable types); "decoding" reads turn that off, so every
  /// read decodes (the cold path: the binary coder's cost).
  func structRows() throws {
    let (n, keys, record) = (self.n, self.keys, self.record)
    var sink = 0
    defer { self.sink &+= sink }
    let encoded = try BinaryCoding.encode(record)
    for (layout, options) in [("record", CacheOptions(capacity: 16 << 20)), ("inline", small)] {
      let raw = try SharedCache<[UInt8]>(path: path + ".recraw", capacity: 16 << 20, options: options)
      defer { unlink(path + ".recraw") }
      for k in keys { try raw.setObject(encoded, forKey: k) }
      rows.append(
        (
          "get struct bytes [UInt8] (\(layout))",
          try measure(n) { sink &+= try raw.object(forKey: keys[$0 & 1023])?.count ?? 0 }
        ))
      let c = try SharedCache<BenchRecord>(path: path + ".rec", capacity: 16 << 20, options: options)
      defer { unlink(path + ".rec") }
      rows.append(
        ("set Codable struct (\(layout))", try measure(n) { try c.setObject(record, forKey: keys[$0 & 1023]) }))
      rows.append(
        (
          "get Codable struct hot (\(layout))",
          try measure(n) { sink &+= try c.object(forKey: keys[$0 & 1023])?.id ?? 0 }
        )
      )
      let cold = try SharedCache<BenchRecord>(path: path + ".rec", policy: OpenPolicy(decodedValues: .off))
      rows.append(
        (
          "get Codable struct decoding (\(layout))",
          try measure(n) { sink &+= try cold.object(forKey: keys[$0 & 1023])?.id ?? 0 }
        ))
    }
  }

  /// The struct's encoded sizes, binary and JSON.
  var binCount = 0
  var jsonCount = 0

  func coderRows() throws {
    let m = max(n / 4, 1000)
    let record = self.record
    var sink = 0
    defer { self.sink &+= sink }
    let bin = try BinaryCoding.encode(record)
    let jsonEncoder = JSONEncoder()
    let jsonDecoder = JSONDecoder()
    let json = try jsonEncoder.encode(record)
    binCount = bin.count
    jsonCount = json.count
    rows.append(("encode struct: binary coder", try measure(m) { _ in sink &+= try BinaryCoding.encode(record).count }))
    rows.append(("encode struct: JSONEncoder", try measure(m) { _ in sink &+= try jsonEncoder.encode(record).count }))
    rows.append(
      (
        "decode struct: binary coder",
        try measure(m) { _ in sink &+= try BinaryCoding.decode(BenchRecord.self, from: bin).id }
      ))
    rows.append(
      (
        "decode struct: JSONDecoder",
        try measure(m) { _ in sink &+= try jsonDecoder.decode(BenchRecord.self, from: json).id }
      ))
  }

  func printRows() {
    print("bench-typed: \(n) ops per row (best of 3), 1024 keys, one process")
    for (name, ns) in rows {
      print(name.padding(toLength: 40, withPad: " ", startingAt: 0) + String(format: "%9.1f ns/op", ns))
    }
    let get = Dictionary(rows, uniquingKeysWith: { a, _ in a })
    func ratio(_ a: String, _ b: String) -> String { String(format: "%.2f", get[a]! / get[b]!) }
    print(
      "ratios (time): get String / get [UInt8] = \(ratio("get String (48 B)", "get [UInt8] (48 B)")), "
        + "get Int / withBytes = \(ratio("get Int", "withBytes (48 B)")), "
        + "get Int / copyBytes = \(ratio("get Int", "copyBytes (48 B)")), "
        + "get String (5 B) / copyBytes = \(ratio("get String (5 B)", "copyBytes (48 B)")), "
        + "set struct / set [UInt8] = \(ratio("set Codable struct (inline)", "set [UInt8] (48 B)")), "
        + "increment / set Int = \(ratio("increment Int", "set Int")), "
        + "increment / set Int (record) = \(ratio("increment Int (record)", "set Int (record)"))")
    for layout in ["record", "inline"] {
      print(
        "ratios (time, \(layout)): hot struct / [UInt8] of its bytes = "
          + "\(ratio("get Codable struct hot (\(layout))", "get struct bytes [UInt8] (\(layout))")), "
          + "decoding struct / [UInt8] of its bytes = "
          + "\(ratio("get Codable struct decoding (\(layout))", "get struct bytes [UInt8] (\(layout))"))")
    }
    print(
      "coder: encode JSON / binary = \(ratio("encode struct: JSONEncoder", "encode struct: binary coder")), "
        + "decode JSON / binary = \(ratio("decode struct: JSONDecoder", "decode struct: binary coder")); "
        + "sizes: binary \(binCount) B, JSON \(jsonCount) B")
  }
}

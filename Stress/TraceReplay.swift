import CacheTools
import Foundation
import MappedCache
import SystemCalls

/// `cache-stress --trace FILE`: replays a recorded key sequence against one cache, read-
/// through, in this process alone, and reports the hit ratio (the eviction policy's
/// figure on a real workload; `scripts/trace-compare.sh` sets it beside libCacheSim's).
///
/// The trace has one request per line: `KEY`, or `KEY,SIZE` (a decimal value size in
/// bytes). Empty lines are skipped; a trailing `\r` is dropped. Each request is a read;
/// a miss stores the key with a value of SIZE bytes (or `--value-size`'s MIN), so the
/// next request for it can hit. No expiry, no other process: the run is deterministic.
///
/// Cache size: `--count-limit N` caps the entries (the file's bytes then rarely matter);
/// `--capacity-entries N` instead sizes a fresh file so that about N entries of the
/// trace's value size fill it by bytes alone (no count limit); otherwise `--capacity`.
struct TraceReplay {
  /// Largest trace read (it is held in memory whole).
  static let maxTraceBytes = 4 << 30

  struct Result {
    var requests = 0
    var hits = 0
    var misses = 0
    var distinctKeys = 0
    /// Hits whose value had another length than the last one this replay stored for the
    /// key (an entry already in a file given by `--path` counts as a hit).
    var wrongLengths = 0
    var errors = 0
    var firstError: String? = nil
    var hitRatio: Double { requests == 0 ? 0 : Double(hits) / Double(requests) }
    /// Per tenth of the trace: its hit ratio, and the cache's capacity at its end (a
    /// growth policy's effect over time).
    var tenths: [(hitRatio: Double, capacity: Int)] = []
  }

  /// One request of a trace: where its key lies in the trace's bytes, and its value size
  /// (nil: the default).
  struct Request {
    var keyStart: Int
    var keyCount: Int
    var size: Int?
  }

  /// Problems with the trace itself (exit 64 with the line named).
  struct TraceError: Error, CustomStringConvertible {
    var description: String
  }

  /// Splits the trace's bytes into requests, checking every line (keys of 1 to `maxKey`
  /// bytes, sizes of 0 to `maxValue` bytes). Line numbers in errors start at 1.
  static func parse(_ bytes: [UInt8], maxKey: Int, maxValue: Int) throws(TraceError) -> [Request] {
    var requests: [Request] = []
    var start = 0
    var line = 0
    let n = bytes.count
    while start < n {
      line += 1
      var end = start
      while end < n && bytes[end] != 0x0A { end += 1 }
      var stop = end
      if stop > start && bytes[stop - 1] == 0x0D { stop -= 1 }
      defer { start = end + 1 }
      if stop == start { continue }
      var comma = start
      while comma < stop && bytes[comma] != 0x2C { comma += 1 }
      let keyCount = comma - start
      guard keyCount > 0 else { throw TraceError(description: "line \(line): empty key") }
      guard keyCount <= maxKey else {
        throw TraceError(description: "line \(line): key of \(keyCount) bytes (the cache takes up to \(maxKey))")
      }
      var size: Int? = nil
      if comma < stop {
        var v = 0
        var digits = 0
        for i in (comma + 1)..<stop {
          let c = bytes[i]
          guard c >= 0x30 && c <= 0x39, v <= maxValue else {
            throw TraceError(
              description: "line \(line): the size after the comma must be 0 to \(maxValue) bytes (decimal digits)")
          }
          v = v * 10 + Int(c - 0x30)
          digits += 1
        }
        guard digits > 0, v <= maxValue else {
          throw TraceError(
            description: "line \(line): the size after the comma must be 0 to \(maxValue) bytes (decimal digits)")
        }
        size = v
      }
      requests.append(Request(keyStart: start, keyCount: keyCount, size: size))
    }
    return requests
  }

  /// Replays `requests` (keys in `bytes`) read-through against `cache`: a hit counts
  /// when the key is there, a miss stores `size` (or `defaultSize`) bytes under it.
  static func replay(
    _ requests: [Request], bytes: [UInt8], cache: SharedCache<[UInt8]>, defaultSize: Int
  ) -> Result {
    var r = Result()
    var lastSize: [Int: Int] = [:]  // request index of a key's first sight → last size stored
    var firstSight: [ArraySlice<UInt8>: Int] = [:]
    let largest = max(defaultSize, requests.lazy.compactMap(\.size).max() ?? 0)
    let value = [UInt8](repeating: 0x5A, count: largest)
    var scratch = [UInt8](repeating: 0, count: largest + 1)
    bytes.withUnsafeBytes { all in
      value.withUnsafeBytes { v in
        scratch.withUnsafeMutableBytes { out in
          let tenth = max(1, requests.count / 10)
          var tenthHits = 0
          var boundary = 0
          for (n, q) in requests.enumerated() {
            if n > 0 && n % tenth == 0 && r.tenths.count < 9 {
              r.tenths.append((Double(r.hits - tenthHits) / Double(n - boundary), cache.capacity))
              tenthHits = r.hits
              boundary = n
            }
            let key = UnsafeRawBufferPointer(rebasing: all[q.keyStart..<(q.keyStart + q.keyCount)])
            let id = firstSight[bytes[q.keyStart..<(q.keyStart + q.keyCount)], default: n]
            if id == n { firstSight[bytes[q.keyStart..<(q.keyStart + q.keyCount)]] = n }
            let size = q.size ?? defaultSize
            r.requests += 1
            do {
              if let got = try cache.copyBytes(forKey: key, into: out) {
                r.hits += 1
                // A key this replay has not stored may be in a file given by --path.
                if let last = lastSize[id], got != last { r.wrongLengths += 1 }
                if got == size { continue }
              } else {
                r.misses += 1
              }
              try cache.setBytes(UnsafeRawBufferPointer(rebasing: v[0..<size]), forKey: key)
              lastSize[id] = size
            } catch {
              r.errors += 1
              if r.firstError == nil { r.firstError = "request \(n + 1): \(error)" }
            }
          }
          if requests.count > boundary {
            r.tenths.append((Double(r.hits - tenthHits) / Double(requests.count - boundary), cache.capacity))
          }
        }
      }
    }
    r.distinctKeys = firstSight.count
    return r
  }

  /// The capacity (a multiple of 4 KiB, at least 1 MiB) at which a fresh file holds
  /// about `entries` entries of `valueSize`-byte values under `keySize`-byte keys once
  /// full, by bytes alone: found by filling trial files with distinct keys, each read
  /// once (entries held grow with capacity; a few secant steps). Returns the capacity and the entries
  /// the chosen file held.
  static func capacity(
    holding entries: Int, keySize: Int, valueSize: Int, options: StressOptions
  ) throws -> (capacity: Int, held: Int) {
    func held(at capacity: Int) throws -> Int {
      let path = ScratchFiles.path("cache-stress-fit")
      defer { try? SystemCall.unlink(path) }
      var o = options
      o.capacity = capacity
      let cache = try SharedCache<[UInt8]>(path: path, capacity: capacity, options: o.cacheOptions)
      let value = [UInt8](repeating: 0x5A, count: valueSize)
      var key = [UInt8](repeating: 0x30, count: keySize)
      var scratch = [UInt8](repeating: 0, count: valueSize + 1)
      // Three fills' worth of distinct keys: past the first fill, into the steady state.
      let total = 3 * entries
      for i in 0..<total {
        var v = i
        var p = keySize - 1
        while p >= 0 {
          key[p] = UInt8(0x30 + v % 10)
          v /= 10
          p -= 1
        }
        // Each key is read once after it is set, so that eviction treats it as wanted:
        // the file is then full to what its bytes (or slots) hold, as under a trace.
        try key.withUnsafeBytes { k in
          try value.withUnsafeBytes { try cache.setBytes($0, forKey: k) }
          try scratch.withUnsafeMutableBytes { _ = try cache.copyBytes(forKey: k, into: $0) }
        }
      }
      return cache.statistics.entries
    }
    func aligned(_ c: Double) -> Int { max(1 << 20, min(1 << 40, Int(c) & ~4095)) }
    var c = aligned(Double(entries) * Double(keySize + valueSize + 160) * 1.3)
    var best: (capacity: Int, held: Int)? = nil
    for _ in 0..<8 {
      let h = try held(at: c)
      if best == nil || abs(h - entries) < abs(best!.held - entries) { best = (c, h) }
      if abs(h - entries) <= max(1, entries / 500) || (h > entries && c == 1 << 20) { break }
      let next = aligned(Double(c) * Double(entries) / Double(max(1, h)))
      if next == c { break }
      c = next
    }
    return best!
  }

  /// The whole `--trace` run: reads and checks the trace, opens (or sizes and creates)
  /// the cache, replays, reports. Exit status: 0, 1 when a cache operation failed, 64
  /// for a trace that cannot be read or parsed.
  static func run(_ options: StressOptions) -> Int32 {
    var o = options
    guard let tracePath = o.tracePath else { return 64 }
    let bytes: [UInt8]
    switch readTrace(tracePath) {
    case .success(let b): bytes = b
    case .failure(let e): return Coordinator.fail("error: --trace \(tracePath): \(e.description)", status: 64)
    }
    let ownsFile = o.path == nil
    let path = o.path ?? ScratchFiles.path("cache-stress-trace")
    defer { if ownsFile { try? SystemCall.unlink(path) } }
    do {
      // Keys of a trace are usually short: size the index for the trace's own keys.
      let requests0 = try parse(bytes, maxKey: 250, maxValue: 1 << 20)
      let longestKey = requests0.lazy.map(\.keyCount).max() ?? 1
      let total = requests0.reduce(0) { $0 + ($1.size ?? o.valueMin) }
      let meanSize = requests0.isEmpty ? o.valueMin : total / requests0.count
      if o.averageEntrySize == nil { o.averageEntrySize = min(max(16, longestKey + meanSize), 1 << 24) }
      var fitted: (capacity: Int, held: Int)? = nil
      if let n = o.capacityEntries, ownsFile {
        fitted = try capacity(holding: n, keySize: longestKey, valueSize: meanSize, options: o)
        o.capacity = fitted!.capacity
      }
      let cache = try SharedCache<[UInt8]>(path: path, capacity: o.capacity, options: o.cacheOptions)
      let requests = try parse(bytes, maxKey: cache.maxKeySize, maxValue: cache.maxValueSize)
      if let n = o.countLimit { try cache.setLimits(count: n) }
      let before = cache.statistics
      let t0 = Clock.nanoseconds()
      let r = replay(requests, bytes: bytes, cache: cache, defaultSize: min(o.valueMin, cache.maxValueSize))
      let seconds = Double(Clock.nanoseconds() - t0) / 1e9
      let after = cache.statistics
      print(
        report(r, trace: tracePath, after: after, before: before, fitted: fitted, seconds: seconds, json: o.json),
        terminator: "")
      guard r.errors == 0 && r.wrongLengths == 0 else {
        let first = r.firstError.map { "; first: \($0)" } ?? ""
        return Coordinator.fail(
          "cache-stress: FAILED: \(r.errors) errors, \(r.wrongLengths) wrong lengths\(first)", status: 1)
      }
      return 0
    } catch let e as TraceError {
      return Coordinator.fail("error: --trace \(tracePath): \(e.description)", status: 64)
    } catch {
      return Coordinator.fail("error: \(error)", status: 1)
    }
  }

  /// The trace file's bytes, refused past `maxTraceBytes`.
  static func readTrace(_ path: String) -> Swift.Result<[UInt8], TraceError> {
    do {
      let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
      defer { try? handle.close() }
      let size = try handle.seekToEnd()
      guard size <= UInt64(maxTraceBytes) else {
        return .failure(TraceError(description: "\(size) bytes, more than the \(maxTraceBytes) this tool reads"))
      }
      try handle.seek(toOffset: 0)
      return .success([UInt8](try handle.readToEnd() ?? Data()))
    } catch {
      return .failure(TraceError(description: "cannot read it: \(error.localizedDescription)"))
    }
  }

  /// The table (or, with `json`, one JSON object) for a finished replay.
  static func report(
    _ r: Result, trace: String, after: CacheStatistics, before: CacheStatistics,
    fitted: (capacity: Int, held: Int)?, seconds: Double, json: Bool
  ) -> String {
    if json {
      var j = JSONObject()
      j["mode"] = .string("trace")
      j["trace"] = .string(trace)
      j["requests"] = .int(r.requests)
      j["distinct_keys"] = .int(r.distinctKeys)
      j["hits"] = .int(r.hits)
      j["misses"] = .int(r.misses)
      j["hit_ratio"] = .double(r.hitRatio)
      j["capacity"] = .int(after.capacity)
      j["count_limit"] = .int(after.countLimit)
      j["fitted_entries"] = fitted.map { .int($0.held) } ?? .null
      j["entries"] = .int(after.entries)
      j["max_entries"] = .int(after.maxEntries)
      j["evictions"] = .int(after.evictions - before.evictions)
      j["promotions"] = .int(after.promotions - before.promotions)
      j["reinsertions"] = .int(after.reinsertions - before.reinsertions)
      j["wrong_lengths"] = .int(r.wrongLengths)
      j["errors"] = .int(r.errors)
      j["seconds"] = .double(seconds)
      j["hit_ratio_by_tenth"] = .strings(r.tenths.map { String(format: "%.4f", $0.hitRatio) })
      j["capacity_by_tenth"] = .strings(r.tenths.map { String($0.capacity) })
      j["growths"] = .int(after.growths - before.growths)
      return j.rendered + "\n"
    }
    var s = "cache-stress --trace \(trace)\n"
    func row(_ k: String, _ v: String) { s += k.padding(toLength: 14, withPad: " ", startingAt: 0) + v + "\n" }
    row("requests", "\(Fmt.grouped(UInt64(r.requests))) (\(Fmt.grouped(UInt64(r.distinctKeys))) distinct keys)")
    row("hits", "\(Fmt.grouped(UInt64(r.hits))), misses \(Fmt.grouped(UInt64(r.misses)))")
    row("hit ratio", String(format: "%.4f", r.hitRatio))
    var size = "capacity \(Fmt.bytes(after.capacity)), count limit "
    size += after.countLimit == 0 ? "none" : Fmt.grouped(UInt64(after.countLimit))
    if let f = fitted { size += ", sized to hold \(Fmt.grouped(UInt64(f.held))) entries" }
    row("cache", size + "; \(Fmt.grouped(UInt64(after.entries))) entries at the end")
    row(
      "eviction",
      "evictions \(after.evictions - before.evictions), promotions \(after.promotions - before.promotions), reinsertions \(after.reinsertions - before.reinsertions)"
    )
    row("by tenth", "hit ratio " + r.tenths.map { String(format: "%.3f", $0.hitRatio) }.joined(separator: " "))
    if after.growths > before.growths {
      row("", "capacity " + r.tenths.map { Fmt.bytes($0.capacity) }.joined(separator: " "))
      row("growths", "\(after.growths - before.growths)")
    }
    row("time", String(format: "%.2f s", seconds))
    row("checks", "wrong lengths \(r.wrongLengths), errors \(r.errors)")
    return s
  }
}

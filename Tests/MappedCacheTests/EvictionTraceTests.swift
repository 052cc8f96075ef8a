import CheckedValues
import Foundation
import Testing

@testable import MappedCache

// Eviction on traces: `cache-stress --trace` against a reference model of the policy,
// the ghost table's re-admissions, and one-hit wonders kept out of the main log.

/// S3-FIFO as the engine specifies it (`EvictionPolicy`, `GhostTable`), for a cache with
/// a count limit whose logs never fill (so only the count limit evicts): a small FIFO
/// and a main FIFO of keys, a hit count per key (0 to 3), and a ghost of buckets of 16
/// tags, each a FIFO, ceil(0.9 × limit / 16) buckets. Written from the specification,
/// not from the code: a change to either shows here.
private struct ReferencePolicy {
  let limit: Int
  var small: [String] = []  // oldest first
  var main: [String] = []
  var hits: [String: Int] = [:]
  var ghost: [[UInt32]]

  init(limit: Int) {
    self.limit = limit
    ghost = Array(repeating: [], count: Int((Double(limit) * 0.9 / 16).rounded(.up)))
  }

  static func hash(_ key: String) -> UInt64 { Array(key.utf8).withUnsafeBytes { KeyHash.key($0) } }

  func place(_ key: String) -> (bucket: Int, tag: UInt32) {
    let h = Self.hash(key)
    let bucket = Int((((h >> 20) & 0xFFFF_FFFF) * UInt64(ghost.count)) >> 32)
    return (bucket, UInt32(truncatingIfNeeded: h >> 1) | 1)
  }

  mutating func remember(_ key: String) {
    let p = place(key)
    ghost[p.bucket].removeAll { $0 == p.tag }
    ghost[p.bucket].insert(p.tag, at: 0)
    if ghost[p.bucket].count > 16 { ghost[p.bucket].removeLast() }
  }

  mutating func recall(_ key: String) -> Bool {
    let p = place(key)
    guard let i = ghost[p.bucket].firstIndex(of: p.tag) else { return false }
    ghost[p.bucket].remove(at: i)
    return true
  }

  /// One request, read-through: true for a hit.
  mutating func request(_ key: String) -> Bool {
    if let h = hits[key] {
      hits[key] = min(3, h + 1)
      return true
    }
    let toMain = recall(key)
    while small.count + main.count >= limit { evictOne() }
    if toMain { main.append(key) } else { small.append(key) }
    hits[key] = 0
    return false
  }

  /// The small FIFO while it holds a tenth of the entries or more, else main.
  mutating func evictOne() {
    if !small.isEmpty && (main.isEmpty || 10 * small.count >= small.count + main.count) {
      let k = small.removeFirst()
      if hits[k]! > 0 {
        main.append(k)  // promoted, its count spent
        hits[k] = 0
      } else {
        remember(k)
        hits[k] = nil
      }
    } else {
      let k = main.removeFirst()
      if hits[k]! > 0 {
        main.append(k)  // a second chance costs one hit
        hits[k]! -= 1
      } else {
        hits[k] = nil
      }
    }
  }
}

@Suite struct EvictionTraceTests {
  static let stress = Support.binary("cache-stress")

  /// A skewed trace with one-hit keys: 60 % from 150 hot keys, 25 % from 1,500 warm ones,
  /// 15 % keys seen once.
  static func trace(requests: Int, seed: UInt64) -> [String] {
    var rng = SplitMix(seed)
    var fresh = 0
    return (0..<requests).map { _ in
      let r = rng.below(100)
      if r < 60 { return "h\(rng.below(150))" }
      if r < 85 { return "w\(rng.below(1500))" }
      fresh += 1
      return "o\(fresh)"
    }
  }

  /// `cache-stress --trace` with a count limit hits exactly as often as the reference
  /// model, at two cache sizes (the replay is deterministic: one process, no expiry).
  @Test(arguments: [100, 400])
  func theReplayMatchesTheReferenceModel(limit: Int) throws {
    let keys = Self.trace(requests: 20_000, seed: 19)
    let file = Support.tempPath("trace").replacingOccurrences(of: ".mcache", with: ".txt")
    defer { Support.cleanup(file) }
    try (keys.joined(separator: "\n") + "\n").write(toFile: file, atomically: false, encoding: .utf8)
    var model = ReferencePolicy(limit: limit)
    let expected = keys.filter { model.request($0) }.count

    let r = try Support.run(
      Self.stress,
      ["--trace", file, "--count-limit", "\(limit)", "--capacity", "8MiB", "--value-size", "8", "--json"])
    #expect(r.status == 0, "\(r.stderr)")
    let json = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
    func int(_ k: String) -> Int { (json[k] as? NSNumber)?.intValue ?? -1 }
    #expect(int("requests") == keys.count)
    #expect(int("distinct_keys") == Set(keys).count)
    #expect(int("hits") + int("misses") == keys.count)
    #expect(int("hits") == expected, "replay hits \(int("hits")), model \(expected) (limit \(limit))")
    #expect(int("entries") == limit)
    #expect(int("wrong_lengths") == 0 && int("errors") == 0)
  }

  /// A trace the tool refuses names its line; an empty key is refused, a size parsed.
  @Test func aBadTraceLineIsAClearError() throws {
    let file = Support.tempPath("trace-bad").replacingOccurrences(of: ".mcache", with: ".txt")
    defer { Support.cleanup(file) }
    try "a\nb,12\n,5\n".write(toFile: file, atomically: false, encoding: .utf8)
    let r = try Support.run(Self.stress, ["--trace", file])
    #expect(r.status == 64)
    #expect(r.stderr.contains("line 3: empty key"), "\(r.stderr)")
    try "a\nb,x\n".write(toFile: file, atomically: false, encoding: .utf8)
    let r2 = try Support.run(Self.stress, ["--trace", file])
    #expect(r2.status == 64 && r2.stderr.contains("line 2:"), "\(r2.stderr)")
    let r3 = try Support.run(Self.stress, ["--trace", file + ".missing"])
    #expect(r3.status == 64 && r3.stderr.contains("cannot read"), "\(r3.stderr)")
  }

  /// A replay into a file that already holds the trace's keys (`--path`) counts them as
  /// hits, not as wrong values: the second pass over a trace that fits hits every time.
  @Test func aSecondReplayIntoTheSameFileHitsWhatTheFirstStored() throws {
    let file = Support.tempPath("trace-again").replacingOccurrences(of: ".mcache", with: ".txt")
    let path = Support.tempPath("trace-again")
    defer {
      Support.cleanup(file)
      Support.cleanup(path)
    }
    let keys = (0..<300).map { "k\($0 % 100)" }
    try (keys.joined(separator: "\n") + "\n").write(toFile: file, atomically: false, encoding: .utf8)
    var hits: [Int] = []
    for _ in 0..<2 {
      let r = try Support.run(Self.stress, ["--trace", file, "--path", path, "--capacity", "1MiB", "--json"])
      #expect(r.status == 0, "\(r.stderr)")
      let json = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
      #expect((json["wrong_lengths"] as? NSNumber)?.intValue == 0)
      hits.append((json["hits"] as? NSNumber)?.intValue ?? -1)
    }
    #expect(hits == [200, 300], "first pass: 100 misses; second: all hits")
  }

  /// Where `key`'s record lives, or nil when absent.
  private func log(of key: String, in cache: SharedCache<[UInt8]>) throws -> LogID? {
    guard let loc = try Array(key.utf8).withUnsafeBytes({ try cache.engine._find($0)?.entry.loc }) else { return nil }
    return cache.engine.logs.id(containing: loc)
  }

  /// An unread key evicted from the small log is remembered: set again, it goes straight
  /// to main. One evicted long before (far more than the ghost's 0.9 × limit evictions
  /// since) is forgotten and starts in small again.
  @Test func aGhostHitGoesToMainAndAnOldGhostIsForgotten() throws {
    let path = Support.tempPath("ghost-main")
    defer { Support.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
    try c.setLimits(count: 32)
    let v: [UInt8] = [1, 2, 3]
    for i in 0..<32 { try c.setObject(v, forKey: "a\(i)") }
    try c.setObject(v, forKey: "b0")  // evicts a0, unread, from small's tail
    #expect(try c.object(forKey: "a0") == nil)
    #expect(try c.object(forKey: "a1") == v)
    try c.setObject(v, forKey: "a0")
    #expect(try log(of: "a0", in: c) == .main, "the ghost sent a0 to main")
    // a2 is evicted next; then 2,000 other keys pass through the ghost (2 buckets of 16).
    try c.setObject(v, forKey: "b1")
    #expect(try c.object(forKey: "a2") == nil)
    for i in 2..<2002 { try c.setObject(v, forKey: "b\(i)") }
    try c.setObject(v, forKey: "a2")
    #expect(try log(of: "a2", in: c) == .small, "a ghost 2,000 evictions old is forgotten")
    #expect(try c.verify().ok)
  }

  /// One-hit wonders do not pollute main: after read keys earn main, a scan of 5,000
  /// keys nobody reads leaves every read key in place and only its own keys in small;
  /// nothing of the scan is promoted.
  @Test func oneHitWondersStayOutOfMain() throws {
    let path = Support.tempPath("one-hit")
    defer { Support.cleanup(path) }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
    try c.setLimits(count: 200)
    let v: [UInt8] = [9, 9]
    for i in 0..<150 {
      try c.setObject(v, forKey: "hot\(i)")
      for _ in 0..<3 { _ = try c.object(forKey: "hot\(i)") }
    }
    let before = c.statistics
    for i in 0..<5000 { try c.setObject(v, forKey: "scan\(i)") }
    let after = c.statistics
    #expect(after.entries == 200)
    #expect(after.promotions - before.promotions == 150, "the read keys, and only they, were promoted")
    for i in 0..<150 { #expect(try log(of: "hot\(i)", in: c) == .main, "hot\(i)") }
    var inSmall = 0
    for i in 0..<5000 {
      if let l = try log(of: "scan\(i)", in: c) {
        #expect(l == .small, "scan\(i) reached main")
        inSmall += 1
      }
    }
    #expect(inSmall == 50)
    #expect(try c.verify().ok)
  }
}

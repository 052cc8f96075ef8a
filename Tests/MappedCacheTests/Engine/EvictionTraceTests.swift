import CheckedValues
import Foundation
import TestSupport
import Testing

@testable import MappedCache

// Eviction on traces: `cache-stress --trace` against a reference model of the policy,
// the ghost table's re-admissions, and one-hit wonders kept out of the main log.

/// S3-FIFO as the engine specifies it (`EvictionPolicy`, `GhostTable`), for a cache with
/// a count limit whose logs never fill (so only the count limit evicts) and records of
/// one size in one partition whose index keeps its size: a small FIFO and a main FIFO of
/// keys, a hit count per key (0 to 3), the unearned marks, the last reuse, and a ghost of
/// one line per index group (the key's first place's group), each a FIFO of 32 ways of
/// which ceil(0.85 × entries / groups) are used, where a recalled tag leaves a free way
/// that the next shift stops at. Written from the specification, not from the code: a
/// change to either shows here.
private struct ReferencePolicy {
  let limit: Int
  let groups: Int
  var small: [String] = []  // oldest first
  var main: [String] = []
  var hits: [String: Int] = [:]
  var unearned: Set<String> = []
  var ghost: [[UInt16]]
  var evictions = 0
  var lastReuse: Int? = nil  // evictions at the last reuse; nil: never

  init(limit: Int, groups: Int) {
    self.limit = limit
    self.groups = groups
    ghost = Array(repeating: Array(repeating: 0, count: 32), count: groups)
  }

  static func hash(_ key: String) -> UInt64 { Array(key.utf8).withUnsafeBytes { KeyHash.key($0) } }

  func place(_ key: String) -> (line: Int, tag: UInt16) {
    let h = Self.hash(key)
    return (Placement(hash: h, groups: groups).first.group, IndexGeometry.ghostTag(h))
  }

  /// The ways of each line in use with `entries` entries.
  func ways(_ entries: Int) -> Int {
    max(1, min(32, Int((Double(max(entries, 1)) * 0.85 / Double(groups)).rounded(.up))))
  }

  mutating func remember(_ key: String, entries: Int) {
    let p = place(key)
    var carry = p.tag
    for way in 0..<ways(entries) {
      let old = ghost[p.line][way]
      ghost[p.line][way] = carry
      if old == 0 || old == p.tag { return }
      carry = old
    }
  }

  mutating func recall(_ key: String, entries: Int) -> Bool {
    let p = place(key)
    guard let i = ghost[p.line].prefix(ways(entries)).firstIndex(of: p.tag) else { return false }
    ghost[p.line][i] = 0
    return true
  }

  var count: Int { small.count + main.count }

  /// One request, read-through: true for a hit.
  mutating func request(_ key: String) -> Bool {
    if let h = hits[key] {
      hits[key] = min(3, h + 1)
      return true
    }
    let toMain = recall(key, entries: count)
    if toMain { lastReuse = evictions }
    if !toMain {
      // While filling, small keeps a twelfth of the limit: its tail moves on to main
      // with its hits (unearned when unread).
      while !small.isEmpty && count < limit && 12 * small.count > limit {
        let k = small.removeFirst()
        if hits[k]! > 0 { lastReuse = evictions } else { unearned.insert(k) }
        main.append(k)
      }
    }
    while count >= limit { evictOne() }
    if toMain { main.append(key) } else { small.append(key) }
    hits[key] = 0
    return false
  }

  /// The small FIFO while it holds a tenth of the entries or more, else main.
  mutating func evictOne() {
    if !small.isEmpty && (main.isEmpty || 10 * small.count >= count) {
      let k = small.first!
      let h = hits[k]!
      if h > 0 { lastReuse = evictions }
      // Main's tail may be displaced when unread and unearned, or when nothing was ever
      // read, or nothing for ten cache's worths of evictions.
      let t = main.first
      let displaces =
        h < 2 && t != nil && hits[t!]! == 0
        && (unearned.contains(t!) || lastReuse == nil || evictions - lastReuse! >= 10 * count)
      if displaces { evictMain() }
      small.removeFirst()
      if h >= 2 || displaces {
        main.append(k)  // promoted (read twice, or displacing), its count spent
        hits[k] = 0
      } else {
        remember(k, entries: count)
        hits[k] = nil
        evictions += 1
      }
    } else {
      evictMain()
    }
  }

  /// The clock hand: a second chance costs one hit; an unread entry is evicted.
  mutating func evictMain() {
    while true {
      let k = main.removeFirst()
      unearned.remove(k)
      if hits[k]! > 0 {
        lastReuse = evictions
        main.append(k)
        hits[k]! -= 1
        continue
      }
      hits[k] = nil
      evictions += 1
      return
    }
  }
}

@Suite struct EvictionTraceTests {
  static let stress = TestFiles.binary("cache-stress")

  /// A skewed trace with one-hit keys: 60 % from 150 hot keys, 25 % from 1,500 warm ones,
  /// 15 % keys seen once. Every key has 7 bytes, so every record has one size and the
  /// logs' byte shares are their entry shares, as the model counts them.
  static func trace(requests: Int, seed: UInt64) -> [String] {
    var rng = SplitMix(seed)
    var fresh = 0
    func key(_ kind: String, _ n: Int) -> String {
      let digits = String(n)
      return kind + String(repeating: "0", count: 6 - digits.count) + digits
    }
    return (0..<requests).map { _ in
      let r = rng.below(100)
      if r < 60 { return key("h", Int(rng.below(150))) }
      if r < 85 { return key("w", Int(rng.below(1500))) }
      fresh += 1
      return key("o", fresh)
    }
  }

  /// `cache-stress --trace` with a count limit hits exactly as often as the reference
  /// model, at two cache sizes (the replay is deterministic: one process, no expiry).
  @Test(arguments: [100, 400])
  func theReplayMatchesTheReferenceModel(limit: Int) throws {
    let keys = Self.trace(requests: 20_000, seed: 19)
    let file = TestFiles.tempPath("trace").replacingOccurrences(of: ".mcache", with: ".txt")
    defer { TestFiles.cleanup(file) }
    try (keys.joined(separator: "\n") + "\n").write(toFile: file, atomically: false, encoding: .utf8)
    // The index's size, as cache-stress creates the file (sized for the trace's keys).
    var options = CacheOptions(capacity: 8 << 20)
    options.partitionCount = 1
    options.averageEntrySize = max(16, keys.map(\.utf8.count).max()! + 8)
    let groups = try Layout(options: options).initialGroups
    var model = ReferencePolicy(limit: limit, groups: groups)
    let expected = keys.filter { model.request($0) }.count

    let r = try ChildProcess.run(
      Self.stress,
      [
        "--trace", file, "--count-limit", "\(limit)", "--capacity", "8MiB", "--partitions", "1", "--value-size", "8",
        "--json",
      ])
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
    let file = TestFiles.tempPath("trace-bad").replacingOccurrences(of: ".mcache", with: ".txt")
    defer { TestFiles.cleanup(file) }
    try "a\nb,12\n,5\n".write(toFile: file, atomically: false, encoding: .utf8)
    let r = try ChildProcess.run(Self.stress, ["--trace", file])
    #expect(r.status == 64)
    #expect(r.stderr.contains("line 3: empty key"), "\(r.stderr)")
    try "a\nb,x\n".write(toFile: file, atomically: false, encoding: .utf8)
    let r2 = try ChildProcess.run(Self.stress, ["--trace", file])
    #expect(r2.status == 64 && r2.stderr.contains("line 2:"), "\(r2.stderr)")
    let r3 = try ChildProcess.run(Self.stress, ["--trace", file + ".missing"])
    #expect(r3.status == 64 && r3.stderr.contains("cannot read"), "\(r3.stderr)")
  }

  /// A replay into a file that already holds the trace's keys (`--path`) counts them as
  /// hits, not as wrong values: the second pass over a trace that fits hits every time.
  @Test func aSecondReplayIntoTheSameFileHitsWhatTheFirstStored() throws {
    let file = TestFiles.tempPath("trace-again").replacingOccurrences(of: ".mcache", with: ".txt")
    let path = TestFiles.tempPath("trace-again")
    defer { TestFiles.cleanup(file, path) }
    let keys = (0..<300).map { "k\($0 % 100)" }
    try (keys.joined(separator: "\n") + "\n").write(toFile: file, atomically: false, encoding: .utf8)
    var hits: [Int] = []
    for _ in 0..<2 {
      let r = try ChildProcess.run(Self.stress, ["--trace", file, "--path", path, "--capacity", "1MiB", "--json"])
      #expect(r.status == 0, "\(r.stderr)")
      let json = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
      #expect((json["wrong_lengths"] as? NSNumber)?.intValue == 0)
      hits.append((json["hits"] as? NSNumber)?.intValue ?? -1)
    }
    #expect(hits == [200, 300], "first pass: 100 misses; second: all hits")
  }

  /// A new 4 MiB cache at a fresh temporary path that holds at most `count` entries, and
  /// the path, which the test removes when done.
  private func countLimited(_ tag: String, count: Int) throws -> (SharedCache<[UInt8]>, String) {
    let (c, path) = try SharedCache<[UInt8]>.scratch(tag, options: CacheOptions(capacity: 4 << 20))
    do {
      try c.setLimits(count: count)
    } catch {
      TestFiles.cleanup(path)
      throw error
    }
    return (c, path)
  }

  /// Where `key`'s record lives, or nil when absent.
  private func log(of key: String, in cache: SharedCache<[UInt8]>) throws -> LogID? {
    guard let offset = try Array(key.utf8).withUnsafeBytes({ try cache.engine._find($0)?.entry.offset }) else {
      return nil
    }
    return offset < cache.engine.layout.mainBase ? .small : .main
  }

  /// An unread key evicted from the small log is remembered: set again, it goes straight
  /// to main. One evicted long before (far more than the ghost's 0.85 × limit evictions
  /// since) is forgotten and starts in small again. Hot keys read between the sets keep
  /// main's tail read, so small's unread tail is evicted to the ghost, not displacing.
  @Test func aGhostHitGoesToMainAndAnOldGhostIsForgotten() throws {
    let (c, path) = try countLimited("ghost-main", count: 32)
    defer { TestFiles.cleanup(path) }
    let v: [UInt8] = [1, 2, 3]
    let hot = (0..<24).map { "h\($0)" }
    for h in hot {
      try c.setObject(v, forKey: h)
      for _ in 0..<2 { _ = try c.object(forKey: h) }
    }
    func stream(_ range: Range<Int>) throws {
      for i in range {
        try c.setObject(v, forKey: "s\(i)")
        for h in hot { _ = try c.object(forKey: h) }
      }
    }
    try stream(0..<40)
    for h in hot { #expect(try log(of: h, in: c) == .main, "\(h) stays in main") }
    // The stream's early keys are gone, through the ghost.
    #expect(try c.object(forKey: "s30") == nil)
    try c.setObject(v, forKey: "s30")
    #expect(try log(of: "s30", in: c) == .main, "the ghost sent s30 to main")
    #expect(try c.object(forKey: "s31") == nil)
    // 2,000 more keys pass through the ghost (2 buckets of 16): s31's ghost is gone.
    try stream(40..<2040)
    try c.setObject(v, forKey: "s31")
    #expect(try log(of: "s31", in: c) == .small, "a ghost 2,000 evictions old is forgotten")
    #expect(try c.verify().ok)
  }

  /// One-hit wonders do not pollute main: read keys earn main and keep it while a scan
  /// of 5,000 keys nobody reads passes through. Scan keys reach main only while the cache
  /// fills (and while they displace those): after the first 1,000, none is promoted and
  /// every one left is in small.
  @Test func oneHitWondersStayOutOfMain() throws {
    let (c, path) = try countLimited("one-hit", count: 200)
    defer { TestFiles.cleanup(path) }
    let v: [UInt8] = [9, 9]
    for i in 0..<150 {
      try c.setObject(v, forKey: "hot\(i)")
      for _ in 0..<3 { _ = try c.object(forKey: "hot\(i)") }
    }
    for i in 0..<1000 { try c.setObject(v, forKey: "scan\(i)") }
    let before = c.statistics
    for i in 1000..<5000 { try c.setObject(v, forKey: "scan\(i)") }
    let after = c.statistics
    #expect(after.entries == 200)
    #expect(after.promotions == before.promotions, "no scan key was promoted once the cache was full")
    for i in 0..<150 { #expect(try log(of: "hot\(i)", in: c) == .main, "hot\(i)") }
    var late = 0
    for i in 1000..<5000 {
      if let l = try log(of: "scan\(i)", in: c) {
        #expect(l == .small, "scan\(i) reached main")
        late += 1
      }
    }
    #expect(late >= 20, "small holds its tenth of the newest scan keys: \(late)")
    #expect(try c.verify().ok)
  }

  /// A cache nobody reads keeps the newest entries under a count limit too: the first
  /// fill, promoted unread while small held its twelfth, is displaced, and so is every
  /// later generation (no reuse was ever seen, so recency is all there is to go by).
  @Test func aCacheNobodyReadsKeepsTheNewestUnderACountLimit() throws {
    let (c, path) = try countLimited("unread-count", count: 200)
    defer { TestFiles.cleanup(path) }
    for i in 0..<2000 { try c.setObject([5], forKey: "u\(i)") }
    #expect(c.statistics.entries == 200)
    let newest = try (1800..<2000).filter { try c.object(forKey: "u\($0)") != nil }.count
    #expect(newest == 200, "\(newest) of the newest 200 present")
    #expect(try c.verify().ok)
  }
}

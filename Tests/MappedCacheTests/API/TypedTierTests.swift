import Foundation
import TestSupport
import Testing

@testable import MappedCache

// The Cache protocol, MemoryCache, and MultiCache tiers.

@Suite struct TypedTierTests {
  @Test func memoryCacheBasicsAndExpiry() throws {
    let m = MemoryCache<String>()
    #expect(try m.object(forKey: "k") == nil)
    try m.setObject("v", forKey: "k")
    #expect(try m.object(forKey: "k") == "v")
    try m.setObject("old", forKey: "e", expires: .date(Date(timeIntervalSinceNow: -1)))
    #expect(try m.object(forKey: "e") == nil)
    m.defaultExpiry = .seconds(100)
    try m.setObject("d", forKey: "d")
    guard case .date(let when)? = try m.objectAndExpiry(forKey: "d")?.expires else {
      Issue.record("no expiry")
      return
    }
    #expect(abs(when.timeIntervalSinceNow - 100) < 5)
    #expect(try m.removeObject(forKey: "k"))
    #expect(try !m.removeObject(forKey: "k"))
    m["s"] = "sub"
    #expect(m["s"] == "sub")
    try m.removeAllObjects()
    #expect(m.count == 0)
  }

  @Test func memoryCacheCountAndCostLimitsAreLRU() throws {
    let m = MemoryCache<[UInt8]>(countLimit: 3, cost: { $0.count })
    for k in ["a", "b", "c"] { try m.setObject([1], forKey: k) }
    _ = try m.object(forKey: "a")  // a is now the most recent
    try m.setObject([1], forKey: "d")  // evicts b, the least recent
    #expect(try m.object(forKey: "b") == nil)
    #expect(try m.object(forKey: "a") != nil && m.count == 3)
    m.countLimit = 0
    m.totalCostLimit = 10
    try m.setObject([UInt8](repeating: 0, count: 6), forKey: "big1")
    try m.setObject([UInt8](repeating: 0, count: 6), forKey: "big2")
    #expect(m.totalCost <= 10)
    #expect(try m.object(forKey: "big2") != nil && m.object(forKey: "big1") == nil)
    try m.setObject([1, 2], forKey: "explicit", expires: nil, cost: 9)
    #expect(m.totalCost <= 10)
    #expect(throws: CacheError.self) { try m.setObject([1], forKey: "neg", cost: -1) }
  }

  @Test func memoryCacheIsThreadSafe() throws {
    let m = MemoryCache<Int>(countLimit: 100)
    DispatchQueue.concurrentPerform(iterations: 8) { t in
      for i in 0..<5000 {
        let k = "k\((i * 7 + t) % 300)"
        if i % 3 == 0 { try? m.setObject(i, forKey: k) } else { _ = try? m.object(forKey: k) }
        if i % 50 == 0 { _ = try? m.removeObject(forKey: k) }
      }
    }
    #expect(m.count <= 100)
  }

  @Test func multiCacheReadsInOrderBackfillsAndWritesAll() throws {
    let p = TestFiles.tempPath("tt-multi")
    defer { TestFiles.cleanup(p) }
    let memory = MemoryCache<String>()
    let shared = try SharedCache<String>(path: p, capacity: 1 << 20)
    let tiers = MultiCache<String>([memory, shared])
    try shared.setObject("from-shared", forKey: "k", expires: .seconds(50))
    #expect(try memory.object(forKey: "k") == nil)
    #expect(try tiers.object(forKey: "k") == "from-shared")
    // Back-filled, with the shared entry's remaining lifetime rather than a fresh one.
    let filled = try #require(try memory.objectAndExpiry(forKey: "k"))
    #expect(filled.value == "from-shared")
    #expect(filled.expires == (try shared.expiry(forKey: "k")))
    // The first tier answers first.
    try memory.setObject("memory-only", forKey: "k")
    #expect(try tiers.object(forKey: "k") == "memory-only")
    try tiers.setObject("both", forKey: "w", expires: nil)
    #expect(try memory.object(forKey: "w") == "both" && shared.object(forKey: "w") == "both")
    #expect(try tiers.removeObject(forKey: "w"))
    #expect(try memory.object(forKey: "w") == nil && shared.object(forKey: "w") == nil)
    try tiers.removeAllObjects()
    #expect(try memory.object(forKey: "k") == nil && shared.object(forKey: "k") == nil)
  }

  @Test func asyncProtocolAcrossTiers() async throws {
    let p = TestFiles.tempPath("tt-async")
    defer { TestFiles.cleanup(p) }
    let shared = try SharedCache<Int>(path: p, capacity: 1 << 20)
    let memory = MemoryCache<Int>()
    let caches: [any Cache<Int>] = [memory, shared, MultiCache<Int>([MemoryCache<Int>(), shared])]
    for (n, c) in caches.enumerated() {
      try await c.set(n, forKey: "a\(n)", expires: .never)
      #expect(try await c.get("a\(n)") == n)
      #expect(try await c.remove("a\(n)"))
      #expect(try await c.get("a\(n)") == nil)
      try await c.set(1, forKey: "z", expires: nil)
      try await c.removeAll()
      #expect(try await c.get("z") == nil)
    }
    // Async back-fill.
    let front = MemoryCache<Int>()
    try shared.setObject(7, forKey: "deep")
    #expect(try await MultiCache<Int>([front, shared]).get("deep") == 7)
    #expect(try front.object(forKey: "deep") == 7)
  }
}

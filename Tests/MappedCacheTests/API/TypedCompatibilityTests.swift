import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// AwesomeCache's spellings (`SharedCache+Compatibility.swift`) answer exactly what the
/// methods they name answer, for live, expired and missing entries.
@Suite struct TypedCompatibilityTests {
  func withCache(_ body: (SharedCache<String>) throws -> Void) throws {
    let path = TestFiles.tempPath("compat")
    defer { TestFiles.cleanup(path) }
    try body(try SharedCache<String>(path: path, capacity: 1 << 20))
  }

  @Test func objectForKeyReturnExpiredObjectIfPresent() throws {
    try withCache { c in
      try c.setObject("live", forKey: "live", expires: .seconds(600))
      try c.setObject("stale", forKey: "stale", expires: .date(Date(timeIntervalSinceNow: -1)))
      for key in ["live", "stale", "missing"] {
        for flag in [false, true] {
          #expect(
            try c.object(forKey: key, returnExpiredObjectIfPresent: flag)
              == c.object(forKey: key, allowingExpired: flag), "\(key), \(flag)")
        }
      }
      #expect(try c.object(forKey: "live", returnExpiredObjectIfPresent: false) == "live")
      #expect(try c.object(forKey: "stale", returnExpiredObjectIfPresent: false) == nil)
      #expect(try c.object(forKey: "stale", returnExpiredObjectIfPresent: true) == "stale")
      #expect(try c.object(forKey: "missing", returnExpiredObjectIfPresent: true) == nil)
      #expect(throws: CacheError.self) { try c.object(forKey: "", returnExpiredObjectIfPresent: true) }
    }
  }

  @Test func allObjectsIncludeExpired() throws {
    try withCache { c in
      #expect(try c.allObjects(includeExpired: true).isEmpty)
      for i in 0..<40 { try c.setObject("v\(i)", forKey: "k\(i)") }
      for i in 0..<7 { try c.setObject("old\(i)", forKey: "old\(i)", expires: .date(Date(timeIntervalSinceNow: -1))) }
      let live = try c.allObjects(includeExpired: false)
      let all = try c.allObjects(includeExpired: true)
      #expect(live.sorted() == (0..<40).map { "v\($0)" }.sorted())
      #expect(all.sorted() == ((0..<40).map { "v\($0)" } + (0..<7).map { "old\($0)" }).sorted())
      // The same values as our dictionary form, without the keys.
      #expect(live.sorted() == Array(try c.allObjects().values).sorted())
      try c.removeExpiredObjects()
      #expect(try c.allObjects(includeExpired: true).sorted() == live.sorted())
    }
  }

  /// The two spellings that AwesomeCache code uses most, through the `Cache` protocol's
  /// subscript and the default expiry, read the same as in AwesomeCache.
  @Test func awesomeCacheCodeReadsTheSame() throws {
    try withCache { c in
      c["a"] = "1"
      try c.setObject("2", forKey: "b", expires: .seconds(60))
      #expect(c["a"] == "1")
      #expect(try c.object(forKey: "b") == "2")
      c["a"] = nil
      #expect(try c.object(forKey: "a", returnExpiredObjectIfPresent: true) == nil)
      #expect(try c.allObjects(includeExpired: false) == ["2"])
    }
  }
}

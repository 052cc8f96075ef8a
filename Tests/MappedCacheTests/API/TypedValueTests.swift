import Foundation
import TestSupport
import Testing

@testable import MappedCache

// Values, type fingerprints, decoding failures, expiry and limits through the typed API.

struct TVPoint: Codable, Equatable {
  var x: Int
  var y: Int
  var label: String
}
struct TVOther: Codable, Equatable { var name: String }

/// A type with its own byte encoding (no Codable on the hot path).
struct TVRGB: Codable, Equatable, CacheValueEncodable {
  var r: UInt8, g: UInt8, b: UInt8
  static var cacheTypeName: String { "test.rgb" }
  func withCacheBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try [r, g, b].withUnsafeBytes(body)
  }
  init(r: UInt8, g: UInt8, b: UInt8) {
    self.r = r
    self.g = g
    self.b = b
  }
  init(cacheBytes: UnsafeRawBufferPointer) throws {
    guard cacheBytes.count == 3 else { throw CacheError.invalidArgument("rgb needs 3 bytes") }
    r = cacheBytes[0]
    g = cacheBytes[1]
    b = cacheBytes[2]
  }
}

@Suite struct TypedValueTests {
  func roundTrip<V: Codable & Equatable>(_ v: V, _ tag: String) throws {
    let p = TestFiles.tempPath("tv-\(tag)")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<V>(path: p, capacity: 1 << 20)
    try c.setObject(v, forKey: "k")
    #expect(try c.object(forKey: "k") == v)
  }

  @Test func fastPathsAndCodableRoundTrip() throws {
    try roundTrip([UInt8]([0, 1, 2, 255]), "bytes")
    try roundTrip(Data([3, 4]), "data")
    try roundTrip("hé✓", "string")
    try roundTrip(Int.min, "int")
    try roundTrip(Int32(-7), "int32")
    try roundTrip(UInt64.max, "uint64")
    try roundTrip(UInt16(9), "uint16")
    try roundTrip(-0.5, "double")
    try roundTrip(Float(2.5), "float")
    try roundTrip(true, "bool")
    try roundTrip(Date(timeIntervalSince1970: 12345.5), "date")
    try roundTrip(UUID(), "uuid")
    try roundTrip(TVPoint(x: 1, y: -2, label: "p"), "codable")
    try roundTrip([TVPoint(x: 1, y: 2, label: "")], "codable-array")
    try roundTrip(TVRGB(r: 1, g: 2, b: 3), "custom")
  }

  @Test func fastPathsStoreRawBytes() throws {
    let p = TestFiles.tempPath("tv-raw")
    defer { TestFiles.cleanup(p) }
    let s = try SharedCache<String>(path: p, capacity: 1 << 20)
    try s.setObject("abc", forKey: "k")
    #expect(try s.withBytes(forKey: "k") { Array($0) } == Array("abc".utf8))
    let q = TestFiles.tempPath("tv-raw-int")
    defer { TestFiles.cleanup(q) }
    let i = try SharedCache<Int>(path: q, capacity: 1 << 20)
    try i.setObject(0x0102, forKey: "k")
    #expect(try i.withBytes(forKey: "k") { Array($0) } == [2, 1, 0, 0, 0, 0, 0, 0])
    let r = TestFiles.tempPath("tv-raw-rgb")
    defer { TestFiles.cleanup(r) }
    let c = try SharedCache<TVRGB>(path: r, capacity: 1 << 20)
    try c.setObject(TVRGB(r: 7, g: 8, b: 9), forKey: "k")
    #expect(try c.withBytes(forKey: "k") { Array($0) } == [7, 8, 9])
  }

  @Test func openingWithAnotherTypeIsTypeMismatch() throws {
    let p = TestFiles.tempPath("tv-fp")
    defer { TestFiles.cleanup(p) }
    let s = try SharedCache<String>(path: p, capacity: 1 << 20)
    try s.setObject("kept", forKey: "k")
    for attempt in [
      { _ = try SharedCache<TVPoint>(path: p, capacity: 1 << 20) },
      { _ = try SharedCache<Double>(path: p, capacity: 1 << 20) },
      { _ = try SharedCache<[UInt8]>(path: p, capacity: 1 << 20) },
    ] {
      do {
        try attempt()
        Issue.record("opened a String cache as another type")
      } catch let CacheError.typeMismatch(path, expected, found) {
        #expect(path == p)
        #expect(found == "string")
        #expect(expected != found)
      }
    }
    // Two Codable structs differ too; the original handle and data are untouched.
    let q = TestFiles.tempPath("tv-fp2")
    defer { TestFiles.cleanup(q) }
    _ = try SharedCache<TVPoint>(path: q, capacity: 1 << 20)
    #expect(throws: CacheError.self) { _ = try SharedCache<TVOther>(path: q, capacity: 1 << 20) }
    #expect(try SharedCache<TVPoint>(path: q, capacity: 1 << 20).object(forKey: "x") == nil)
    #expect(try s.object(forKey: "k") == "kept")
    #expect(try SharedCache<String>(path: p, capacity: 1 << 20).object(forKey: "k") == "kept")
  }

  /// Strings are stored as their UTF-8 bytes: bytes that are not UTF-8 (short enough
  /// for a small string, or long enough for heap storage) throw `decodingFailed`
  /// rather than come back repaired; valid ones of every length come back unchanged.
  @Test func stringsRoundTripAndBadUTF8Throws() throws {
    let p = TestFiles.tempPath("tv-utf8")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    for v in ["", "a", "héllo wörld", "日本語のテキスト", String(repeating: "x", count: 300), "emoji 👩‍👩‍👧 end"] {
      try c.setObject(v, forKey: "ok")
      #expect(try c.object(forKey: "ok") == v)
    }
    let bad: [[UInt8]] = [
      [0xC3], [0x41, 0xFF, 0x42], [0xED, 0xA0, 0x80],
      Array(repeating: 0x41, count: 40) + [0xC3, 0x28] + Array(repeating: 0x42, count: 40),
    ]
    for (i, bytes) in bad.enumerated() {
      _ = try bytes.withUnsafeBytes { v in
        try Array("bad\(i)".utf8).withUnsafeBytes { k in try c.engine.set(k, v, expiry: 0) }
      }
      #expect(throws: CacheError.self) { _ = try c.object(forKey: "bad\(i)") }
      do {
        _ = try c.object(forKey: "bad\(i)")
      } catch CacheError.decodingFailed(let key, _) {
        #expect(key == "bad\(i)")
      }
    }
    #expect(try c.object(forKey: "ok") == "emoji 👩‍👩‍👧 end")
  }

  @Test func undecodableValueThrowsAndDisturbsNothing() throws {
    let p = TestFiles.tempPath("tv-bad")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<TVPoint>(path: p, capacity: 1 << 20)
    try c.setObject(TVPoint(x: 1, y: 2, label: "ok"), forKey: "good")
    // Write garbage bytes under "bad" through the untyped engine.
    let garbage: [UInt8] = [0xC1, 0x50, 0x7F, 1, 2]
    _ = try garbage.withUnsafeBytes { v in
      try Array("bad".utf8).withUnsafeBytes { k in try c.engine.set(k, v, expiry: 0) }
    }
    do {
      _ = try c.object(forKey: "bad")
      Issue.record("decoded garbage")
    } catch let CacheError.decodingFailed(key, _) {
      #expect(key == "bad")
    }
    #expect(try c.object(forKey: "good") == TVPoint(x: 1, y: 2, label: "ok"))
    #expect(try c.verify().ok)
    #expect(throws: CacheError.self) { _ = try c.allObjects() }
    try c.removeObject(forKey: "bad")
    #expect(try c.allObjects() == ["good": TVPoint(x: 1, y: 2, label: "ok")])
  }

  @Test func defaultExpiryTouchAndExpiryForKey() throws {
    let p = TestFiles.tempPath("tv-exp")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    #expect(try c.expiry(forKey: "none") == nil)
    try c.setObject("a", forKey: "a")
    #expect(try c.expiry(forKey: "a") == .never)
    c.defaultExpiry = .seconds(100)
    try c.setObject("b", forKey: "b")
    guard case .date(let d)? = try c.expiry(forKey: "b") else {
      Issue.record("no date")
      return
    }
    #expect(abs(d.timeIntervalSinceNow - 100) < 5)
    try c.setObject("c", forKey: "c", expires: .never)  // an explicit expiry wins over the default
    #expect(try c.expiry(forKey: "c") == .never)
    let when = Date(timeIntervalSinceNow: 1000)
    #expect(try c.touch("a", expires: .date(when)))
    guard case .date(let t)? = try c.expiry(forKey: "a") else {
      Issue.record("touch lost")
      return
    }
    #expect(abs(t.timeIntervalSince(when)) < 0.01)
    #expect(try c.object(forKey: "a") == "a")
    #expect(try !c.touch("missing", expires: .never))
  }

  @Test func staleReadsOnPurpose() throws {
    let p = TestFiles.tempPath("tv-stale")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    try c.setObject("old", forKey: "k", expires: .date(Date(timeIntervalSinceNow: -1)))
    #expect(try c.object(forKey: "k") == nil)
    #expect(try c.object(forKey: "k", allowingExpired: true) == "old")
    #expect(try !c.containsObject(forKey: "k"))
  }

  @Test func countAndCostLimitsEvict() throws {
    let p = TestFiles.tempPath("tv-limits")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<[UInt8]>(path: p, capacity: 4 << 20)
    c.countLimit = 50
    for i in 0..<200 { try c.setObject([UInt8](repeating: 1, count: 10), forKey: "k\(i)") }
    #expect(c.statistics.entries <= 50)
    #expect(c.allKeys.count <= 50)
    #expect(try c.object(forKey: "k199") != nil)  // the newest survives
    try c.setLimits(count: 0, cost: 2000)
    for i in 0..<200 { try c.setObject([UInt8](repeating: 2, count: 90), forKey: "c\(i)") }
    #expect(c.statistics.liveBytes <= 2000)
    #expect(c.totalCostLimit == 2000)
    // Another handle (another process would be the same) sees the limits stored in the file.
    let d = try SharedCache<[UInt8]>(path: p, capacity: 4 << 20)
    #expect(d.totalCostLimit == 2000 && d.countLimit == 0)
  }

  @Test func errorsAreNamedWithAdvice() throws {
    let p = TestFiles.tempPath("tv-err")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    #expect(throws: CacheError.emptyKey) { try c.setObject("v", forKey: "") }
    #expect(throws: CacheError.keyTooLarge(size: 300, limit: 250)) {
      try c.setObject("v", forKey: String(repeating: "k", count: 300))
    }
    do {
      try c.setObject(String(repeating: "v", count: 2 << 20), forKey: "big")
      Issue.record("stored a value over the limit")
    } catch let e as CacheError {
      guard case .valueTooLarge = e else {
        Issue.record("\(e)")
        return
      }
      #expect(e.description.contains("maxValueSize"))
    }
    #expect(CacheError.computeFailed(key: "k", reason: "r").description.contains("removeCachedFailure"))
  }
}

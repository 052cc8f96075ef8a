import Foundation
import Testing

@testable import MappedCache

// The compact binary Codable coder: round trips, layout choices, and hostile input.

struct TCInner: Codable, Equatable, Hashable {
  var label: String
  var weight: Float
}

enum TCShape: Codable, Equatable {
  case circle(radius: Double)
  case rect(w: Int, h: Int)
  case empty
}

struct TCEverything: Codable, Equatable {
  var i: Int, i8: Int8, i16: Int16, i32: Int32, i64: Int64
  var u: UInt, u8: UInt8, u16: UInt16, u32: UInt32, u64: UInt64
  var f: Float, d: Double, b: Bool, s: String
  var optSome: String?, optNone: Int?
  var list: [Int], nested: [[String]], dict: [String: Int], intKeyed: [Int: String]
  var inner: TCInner, inners: [TCInner], set: Set<TCInner>
  var data: Data, bytes: [UInt8], date: Date, uuid: UUID, url: URL
  var shapes: [TCShape]
  var optList: [Int?]
}

/// Decodes its fields in another order than it encodes them and checks `contains`.
struct TCOutOfOrder: Codable, Equatable {
  var a: Int, b: String, c: Bool?
  enum K: String, CodingKey { case a, b, c, extra }
  init(a: Int, b: String, c: Bool?) {
    self.a = a
    self.b = b
    self.c = c
  }
  init(from d: Decoder) throws {
    let c = try d.container(keyedBy: K.self)
    #expect(!c.contains(.extra))
    self.c = try c.decodeIfPresent(Bool.self, forKey: .c)
    b = try c.decode(String.self, forKey: .b)
    a = try c.decode(Int.self, forKey: .a)
  }
  func encode(to e: Encoder) throws {
    var c = e.container(keyedBy: K.self)
    try c.encode(a, forKey: .a)
    try c.encodeIfPresent(self.c, forKey: .c)
    try c.encode(b, forKey: .b)
  }
}

/// Uses nested containers out of order and a super encoder, as class hierarchies do.
class TCBase: Codable {
  var id: Int
  init(id: Int) { self.id = id }
}

final class TCDerived: TCBase, Equatable {
  var name: String
  var point: (x: Int, y: Int)
  enum K: String, CodingKey { case name, point }
  enum P: String, CodingKey { case x, y }
  init(id: Int, name: String, point: (Int, Int)) {
    self.name = name
    self.point = point
    super.init(id: id)
  }
  required init(from d: Decoder) throws {
    let c = try d.container(keyedBy: K.self)
    let p = try c.nestedContainer(keyedBy: P.self, forKey: .point)
    point = (try p.decode(Int.self, forKey: .x), try p.decode(Int.self, forKey: .y))
    name = try c.decode(String.self, forKey: .name)
    try super.init(from: c.superDecoder())
  }
  override func encode(to e: Encoder) throws {
    var c = e.container(keyedBy: K.self)
    var p = c.nestedContainer(keyedBy: P.self, forKey: .point)
    try c.encode(name, forKey: .name)  // written to the parent while the nested one is open
    try p.encode(point.x, forKey: .x)
    try p.encode(point.y, forKey: .y)
    try super.encode(to: c.superEncoder())
  }
  static func == (l: TCDerived, r: TCDerived) -> Bool { l.id == r.id && l.name == r.name && l.point == r.point }
}

struct TCV1: Codable { var name: String }
struct TCV2: Codable {
  var name: String
  var age: Int?
}

/// Asks one encoder for two kinds of container: must be an error, not garbage.
struct TCMisuse: Encodable {
  func encode(to e: Encoder) throws {
    var k = e.container(keyedBy: TCOutOfOrder.K.self)
    try k.encode(1, forKey: .a)
    var u = e.unkeyedContainer()
    try u.encode(2)
  }
}

indirect enum TCTree: Codable {
  case leaf
  case node(TCTree)
}

@Suite struct TypedCoderTests {
  static let everything = TCEverything(
    i: -5, i8: -8, i16: -16, i32: -32, i64: Int64.min, u: 5, u8: 8, u16: 16, u32: 32, u64: UInt64.max,
    f: 1.5, d: -2.25, b: true, s: "héllo ✓", optSome: "x", optNone: nil,
    list: [1, 2, 3], nested: [["a"], [], ["b", "c"]], dict: ["one": 1, "two": 2], intKeyed: [1: "a", 7: "b"],
    inner: TCInner(label: "in", weight: 0.5), inners: [TCInner(label: "a", weight: 1)],
    set: [TCInner(label: "s", weight: 2)],
    data: Data([0, 1, 255]), bytes: [9, 8, 7], date: Date(timeIntervalSince1970: 1_700_000_000.25),
    uuid: UUID(), url: URL(string: "https://example.com/a?b=c")!,
    shapes: [.circle(radius: 2), .rect(w: 3, h: 4), .empty], optList: [1, nil, 3])

  @Test func roundTripsEveryKindOfValue() throws {
    let bytes = try BinaryCoding.encode(Self.everything)
    #expect(bytes.first == 0xC1)
    #expect(try BinaryCoding.decode(TCEverything.self, from: bytes) == Self.everything)
  }

  /// The binary-coding fuzz target's finding: a NaN `Float` (or a NaN date) decodes to
  /// the same bits, so the round trip holds by bit pattern even where `==` says no.
  @Test func floatingPointValuesComeBackBitForBit() throws {
    let floats: [Float] = [.nan, -.nan, Float(bitPattern: 0x7FC0_1234), -0.0, .infinity, .leastNonzeroMagnitude]
    let back = try BinaryCoding.decode([Float].self, from: BinaryCoding.encode(floats))
    #expect(back.map(\.bitPattern) == floats.map(\.bitPattern))
    let doubles: [Double] = [.nan, Double(bitPattern: 0x7FF8_0000_0000_00AB), -0.0, -.infinity]
    let dback = try BinaryCoding.decode([Double].self, from: BinaryCoding.encode(doubles))
    #expect(dback.map(\.bitPattern) == doubles.map(\.bitPattern))
    let date = Date(timeIntervalSinceReferenceDate: .nan)
    let dateBack = try BinaryCoding.decode(Date.self, from: BinaryCoding.encode(date))
    #expect(dateBack.timeIntervalSinceReferenceDate.bitPattern == date.timeIntervalSinceReferenceDate.bitPattern)
  }

  @Test func topLevelScalarsAndOptionals() throws {
    #expect(try BinaryCoding.decode(Int.self, from: BinaryCoding.encode(42)) == 42)
    #expect(try BinaryCoding.decode(String.self, from: BinaryCoding.encode("s")) == "s")
    #expect(try BinaryCoding.decode([String: [Int]].self, from: BinaryCoding.encode(["k": [1]])) == ["k": [1]])
    let none: Int? = nil
    #expect(try BinaryCoding.decode(Int?.self, from: BinaryCoding.encode(none)) == nil)
    #expect(try BinaryCoding.decode(Int?.self, from: BinaryCoding.encode(Optional(3))) == 3)
  }

  @Test func keyedContainersAreByKeyNotPosition() throws {
    let v = TCOutOfOrder(a: 7, b: "bee", c: nil)
    #expect(try BinaryCoding.decode(TCOutOfOrder.self, from: BinaryCoding.encode(v)) == v)
    let w = TCOutOfOrder(a: 1, b: "", c: false)
    #expect(try BinaryCoding.decode(TCOutOfOrder.self, from: BinaryCoding.encode(w)) == w)
    // A type that gained an optional field reads entries written before.
    let old = try BinaryCoding.encode(TCV1(name: "n"))
    let new = try BinaryCoding.decode(TCV2.self, from: old)
    #expect(new.name == "n" && new.age == nil)
  }

  @Test func nestedContainersOutOfOrderAndSuperEncoders() throws {
    let v = TCDerived(id: 9, name: "derived", point: (3, -4))
    let back = try BinaryCoding.decode(TCDerived.self, from: BinaryCoding.encode(v))
    #expect(back == v)
  }

  @Test func misuseIsAnErrorNotGarbage() {
    #expect(throws: CacheError.self) { try BinaryCoding.encode(TCMisuse()) }
  }

  @Test func typeMismatchInsideAValueThrows() throws {
    let bytes = try BinaryCoding.encode(TCV1(name: "n"))
    struct WrongType: Codable { var name: Int }
    #expect(throws: DecodingError.self) { try BinaryCoding.decode(WrongType.self, from: bytes) }
    struct Missing: Codable { var other: String }
    #expect(throws: DecodingError.self) { try BinaryCoding.decode(Missing.self, from: bytes) }
    // An integer that does not fit the narrower type.
    #expect(throws: DecodingError.self) { try BinaryCoding.decode(Int8.self, from: BinaryCoding.encode(300)) }
  }

  @Test func everyTruncationAndByteFlipThrowsOrDecodes() throws {
    let bytes = try BinaryCoding.encode(Self.everything)
    var thrown = 0
    for n in 0..<bytes.count {
      do { _ = try BinaryCoding.decode(TCEverything.self, from: Array(bytes[..<n])) } catch { thrown += 1 }
    }
    #expect(thrown == bytes.count)  // every strict prefix is incomplete
    var rng = SystemRandomNumberGenerator()
    for _ in 0..<3000 {
      var b = bytes
      for _ in 0..<Int.random(in: 1...4, using: &rng) {
        b[Int.random(in: 0..<b.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
      }
      _ = try? BinaryCoding.decode(TCEverything.self, from: b)  // must not trap
    }
    for _ in 0..<3000 {
      let junk = (0..<Int.random(in: 0..<64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
      _ = try? BinaryCoding.decode(TCEverything.self, from: [0xC1] + junk)
      _ = try? BinaryCoding.decode([String: [Int?]].self, from: [0xC1] + junk)
    }
  }

  @Test func hostileLengthsAndDepthThrow() {
    // A string claiming 2^63 bytes, a varint of 11 bytes, an element count beyond the bytes.
    #expect(throws: DecodingError.self) {
      try BinaryCoding.decode(String.self, from: [0xC1, 0x40, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F])
    }
    #expect(throws: DecodingError.self) {
      try BinaryCoding.decode(String.self, from: [0xC1, 0x40] + [UInt8](repeating: 0x80, count: 11))
    }
    #expect(throws: DecodingError.self) { try BinaryCoding.decode([Int].self, from: [0xC1, 0x51, 0x02, 0x7F, 0x00]) }
    // Bad UTF-8.
    #expect(throws: DecodingError.self) { try BinaryCoding.decode(String.self, from: [0xC1, 0x40, 0x02, 0xC3, 0x28]) }
    #expect(throws: DecodingError.self) { try BinaryCoding.decode(Int.self, from: [0x7B, 0x7D]) }  // JSON, no marker
    // 3,000 levels of a recursive type: refused by the depth limit, no stack overflow.
    func varint(_ v: Int) -> [UInt8] {
      var n = UInt64(v)
      var out: [UInt8] = []
      while n >= 0x80 {
        out.append(UInt8(n & 0x7F) | 0x80)
        n >>= 7
      }
      return out + [UInt8(n)]
    }
    func keyed(_ key: String, _ value: [UInt8]) -> [UInt8] {
      let body = varint(key.utf8.count) + Array(key.utf8) + value
      return [0x50] + varint(body.count) + body
    }
    var deep = keyed("leaf", [0x50, 0x00])
    for _ in 0..<3000 { deep = keyed("node", keyed("_0", deep)) }
    do {
      _ = try BinaryCoding.decode(TCTree.self, from: [0xC1] + deep)
      Issue.record("3,000 levels decoded")
    } catch {
      #expect("\(error)".contains("deeper than"))
    }
    // And a shallow tree of the same shape decodes.
    var ok = keyed("leaf", [0x50, 0x00])
    for _ in 0..<10 { ok = keyed("node", keyed("_0", ok)) }
    #expect(throws: Never.self) { try BinaryCoding.decode(TCTree.self, from: [0xC1] + ok) }
  }

  @Test func smallerThanJSON() throws {
    let json = try JSONEncoder().encode(Self.everything)
    let bin = try BinaryCoding.encode(Self.everything)
    #expect(bin.count < json.count)
  }
}

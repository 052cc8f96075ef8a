// libFuzzer target (b): `BinaryCoding.decode` on arbitrary bytes, for several nested
// `Codable` types (synthesized and hand-written containers). Built by
// scripts/fuzz-guided.sh; see docs/fuzzing.md.
//
// Oracle: decoding never traps, whatever the bytes (malformed input throws); and a value
// that did decode is a fixed point of the coder: encode → decode → encode gives the same
// bytes (for types without dictionaries, whose order is not stable), and the decoded
// copy equals the first (Doubles compared by bit pattern, so NaNs compare equal).
import Foundation

@testable import MappedCache

/// A Double compared by its bits, so that a decoded NaN equals itself.
struct Bits: Codable, Equatable {
  var value: Double
  init(value: Double) { self.value = value }
  init(from decoder: Decoder) throws { value = try decoder.singleValueContainer().decode(Double.self) }
  func encode(to encoder: Encoder) throws {
    var c = encoder.singleValueContainer()
    try c.encode(value)
  }
  static func == (a: Bits, b: Bits) -> Bool { a.value.bitPattern == b.value.bitPattern }
}

enum Shape: Codable, Equatable {
  case point
  case circle(radius: Int32)
  case polygon([Int16], closed: Bool)
  indirect case group(Shape, name: String?)
}

struct Profile: Codable, Equatable {
  var id: Int
  var small: Int8
  var wide: UInt64
  var name: String
  var tags: [String]
  var scores: [Bits]
  var nickname: String?
  var avatar: Data
  var raw: [UInt8]
  var uuid: UUID
  var created: Date
  var ratio: Float
  var shapes: [Shape]
  var nested: [[UInt16]]
  var child: Child?

  /// Synthesized equality would call a decoded NaN `ratio` (or a NaN date) unequal to
  /// itself; the coder's promise is the same bits back, so compare those.
  static func == (a: Profile, b: Profile) -> Bool {
    a.id == b.id && a.small == b.small && a.wide == b.wide && a.name == b.name && a.tags == b.tags
      && a.scores == b.scores && a.nickname == b.nickname && a.avatar == b.avatar && a.raw == b.raw
      && a.uuid == b.uuid && a.ratio.bitPattern == b.ratio.bitPattern
      && a.created.timeIntervalSinceReferenceDate.bitPattern
        == b.created.timeIntervalSinceReferenceDate.bitPattern
      && a.shapes == b.shapes && a.nested == b.nested && a.child == b.child
  }
}

struct Child: Codable, Equatable {
  var flag: Bool
  var level: UInt8
  var next: [Child]
}

/// Hand-written containers: nested keyed and unkeyed containers, `superDecoder`,
/// `contains`, `decodeNil`, `decodeIfPresent`, `allKeys` and an unkeyed `count`.
struct Manual: Codable, Equatable {
  var a: Int64
  var pairs: [[String]]
  var extra: String?
  var keyCount: Int
  var parent: Child?

  enum K: String, CodingKey { case a, inner, extra, parent }
  enum Inner: String, CodingKey { case pairs }

  init(from decoder: Decoder) throws {
    let c = try decoder.container(keyedBy: K.self)
    a = try c.decode(Int64.self, forKey: .a)
    let inner = try c.nestedContainer(keyedBy: Inner.self, forKey: .inner)
    var list = try inner.nestedUnkeyedContainer(forKey: .pairs)
    var pairs: [[String]] = []
    // A hostile count must not be used to allocate: bound it by what is there.
    while !list.isAtEnd {
      if try list.decodeNil() {
        pairs.append([])
        continue
      }
      var pair = try list.nestedUnkeyedContainer()
      var p: [String] = []
      while !pair.isAtEnd { p.append(try pair.decode(String.self)) }
      pairs.append(p)
    }
    self.pairs = pairs
    extra = c.contains(.extra) ? try c.decodeIfPresent(String.self, forKey: .extra) : nil
    keyCount = c.allKeys.count
    parent = c.contains(.parent) ? try Child(from: c.superDecoder(forKey: .parent)) : nil
  }

  func encode(to encoder: Encoder) throws {
    var c = encoder.container(keyedBy: K.self)
    try c.encode(a, forKey: .a)
    var inner = c.nestedContainer(keyedBy: Inner.self, forKey: .inner)
    var list = inner.nestedUnkeyedContainer(forKey: .pairs)
    for p in pairs {
      if p.isEmpty {
        try list.encodeNil()
        continue
      }
      var pair = list.nestedUnkeyedContainer()
      for s in p { try pair.encode(s) }
    }
    try c.encodeIfPresent(extra, forKey: .extra)
    if let parent { try parent.encode(to: c.superEncoder(forKey: .parent)) }
  }

  static func == (x: Manual, y: Manual) -> Bool {
    x.a == y.a && x.pairs == y.pairs && x.extra == y.extra && x.parent == y.parent
  }
}

/// Dictionaries: only "never traps" (their encoding order is not stable).
struct Keyed: Codable {
  var byName: [String: [Int]]
  var byNumber: [Int: String]
  var sets: Set<String>
}

@inline(never)
func roundTrip<T: Codable & Equatable>(_ type: T.Type, _ bytes: [UInt8]) {
  guard let first = try? BinaryCoding.decode(type, from: bytes) else { return }
  let encoded: [UInt8]
  do { encoded = try BinaryCoding.encode(first) } catch {
    fatalError("\(T.self): a decoded value failed to encode: \(error)")
  }
  let second: T
  do { second = try BinaryCoding.decode(type, from: encoded) } catch {
    fatalError("\(T.self): re-encoded bytes failed to decode: \(error)")
  }
  guard second == first else { fatalError("\(T.self): decode(encode(x)) != x") }
  guard let again = try? BinaryCoding.encode(second), again == encoded else {
    fatalError("\(T.self): encoding is not stable")
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
  let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
  roundTrip(Profile.self, bytes)
  roundTrip(Shape.self, bytes)
  roundTrip(Child.self, bytes)
  roundTrip(Manual.self, bytes)
  roundTrip([Bits?].self, bytes)
  roundTrip(String.self, bytes)
  roundTrip([Int8].self, bytes)
  _ = try? BinaryCoding.decode(Keyed.self, from: bytes)
  _ = try? BinaryCoding.decode([String: Profile].self, from: bytes)
  return 0
}

/// Seeds: with MC_FUZZ_WRITE_SEEDS=DIR, writes the encodings of sample values of every
/// type above into DIR and exits (how Fuzz/corpus/binary-coding was made).
@_cdecl("LLVMFuzzerInitialize")
public func initialize(
  _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> CInt {
  guard let dir = ProcessInfo.processInfo.environment["MC_FUZZ_WRITE_SEEDS"] else { return 0 }
  let child = Child(flag: true, level: 3, next: [Child(flag: false, level: 1, next: [])])
  let profile = Profile(
    id: -42, small: -3, wide: .max, name: "Ada Lovelace", tags: ["admin", "é"],
    scores: [Bits(value: 1.5), Bits(value: .nan)], nickname: nil, avatar: Data([1, 2, 3]),
    raw: [9, 8, 7], uuid: UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)),
    created: Date(timeIntervalSince1970: 1_700_000_000), ratio: 0.25,
    shapes: [
      .point, .circle(radius: 7), .polygon([1, -2, 3], closed: true),
      .group(.circle(radius: 1), name: "g"),
    ],
    nested: [[1, 2], [], [65535]], child: child)
  let manual = try! BinaryCoding.decode(Manual.self, from: BinaryCoding.encode(ManualSeed()))
  let seeds: [(String, [UInt8])] = [
    ("profile", try! BinaryCoding.encode(profile)),
    ("shape", try! BinaryCoding.encode(Shape.group(.polygon([4], closed: false), name: nil))),
    ("child", try! BinaryCoding.encode(child)),
    ("manual", try! BinaryCoding.encode(manual)),
    ("bits", try! BinaryCoding.encode([Bits(value: -0.0), nil] as [Bits?])),
    ("string", try! BinaryCoding.encode("héllo")),
    ("int8s", try! BinaryCoding.encode([Int8(-1), 0, 127])),
    ("keyed", try! BinaryCoding.encode(Keyed(byName: ["a": [1, 2]], byNumber: [7: "seven"], sets: ["x"]))),
    ("dict", try! BinaryCoding.encode(["p": profile])),
  ]
  for (name, bytes) in seeds {
    _ = FileManager.default.createFile(atPath: "\(dir)/\(name)", contents: Data(bytes))
  }
  exit(0)
}

/// Encodes what `Manual.init(from:)` reads.
struct ManualSeed: Encodable {
  enum K: String, CodingKey { case a, inner, extra, parent }
  func encode(to encoder: Encoder) throws {
    var c = encoder.container(keyedBy: K.self)
    try c.encode(Int64(5), forKey: .a)
    var inner = c.nestedContainer(keyedBy: Manual.Inner.self, forKey: .inner)
    var list = inner.nestedUnkeyedContainer(forKey: .pairs)
    var pair = list.nestedUnkeyedContainer()
    try pair.encode("x")
    try pair.encode("y")
    try list.encodeNil()
    try c.encode("more", forKey: .extra)
    try Child(flag: true, level: 1, next: []).encode(to: c.superEncoder(forKey: .parent))
  }
}

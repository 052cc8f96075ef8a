import CheckedValues
import Foundation
import MappedCache
import TestSupport
import Testing

@testable import MappedCacheRedis

// The RESP3/RESP2 parser: every type at every byte split, limits, and garbage.

@Suite struct RESPParserTests {
  /// One reply of every type, as a server writes it, with the value it must parse to.
  static let samples: [(String, RESPValue)] = [
    ("+OK\r\n", .simpleString("OK")),
    ("-ERR unknown command 'FOO'\r\n", .error("ERR unknown command 'FOO'")),
    (":1000\r\n", .integer(1000)),
    (":-9223372036854775808\r\n", .integer(Int64.min)),
    ("$5\r\nhello\r\n", .bulkString(Array("hello".utf8))),
    ("$0\r\n\r\n", .bulkString([])),
    ("$4\r\na\r\nb\r\n", .bulkString(Array("a\r\nb".utf8))),
    ("$-1\r\n", .null),
    ("*-1\r\n", .null),
    ("_\r\n", .null),
    ("#t\r\n", .boolean(true)),
    ("#f\r\n", .boolean(false)),
    (",3.25\r\n", .double(3.25)),
    (",-inf\r\n", .double(-.infinity)),
    (",1e3\r\n", .double(1000)),
    ("(3492890328409238509324850943850943825024385\r\n", .bigNumber("3492890328409238509324850943850943825024385")),
    ("!21\r\nSYNTAX invalid syntax\r\n", .blobError(Array("SYNTAX invalid syntax".utf8))),
    ("=15\r\ntxt:Some string\r\n", .verbatim(format: "txt", text: Array("Some string".utf8))),
    ("*0\r\n", .array([])),
    ("*3\r\n:1\r\n$1\r\nx\r\n_\r\n", .array([.integer(1), .bulkString([120]), .null])),
    ("*2\r\n*1\r\n+a\r\n*0\r\n", .array([.array([.simpleString("a")]), .array([])])),
    (
      "%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n",
      .map([RESPPair(.simpleString("first"), .integer(1)), RESPPair(.simpleString("second"), .integer(2))])
    ),
    ("~2\r\n+a\r\n#f\r\n", .set([.simpleString("a"), .boolean(false)])),
    (
      ">2\r\n$10\r\ninvalidate\r\n*2\r\n$3\r\nk:1\r\n$3\r\nk:2\r\n",
      .push([
        .bulkString(Array("invalidate".utf8)),
        .array([.bulkString(Array("k:1".utf8)), .bulkString(Array("k:2".utf8))]),
      ])
    ),
    (">2\r\n$10\r\ninvalidate\r\n_\r\n", .push([.bulkString(Array("invalidate".utf8)), .null])),
    (
      "|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*1\r\n:2\r\n",
      .attributed(
        attributes: [RESPPair(.simpleString("key-popularity"), .map([RESPPair(.bulkString([97]), .double(0.19))]))],
        value: .array([.integer(2)]))
    ),
  ]

  @Test func everySampleParsesAtEveryByteSplit() throws {
    for (wire, want) in Self.samples {
      let bytes = Array(wire.utf8)
      #expect(try RESPParser.parseAll(bytes) == [want], "whole: \(wire.debugDescription)")
      for cut in 0...bytes.count {
        var p = RESPParser()
        p.append(bytes[0..<cut])
        var got: [RESPValue] = []
        while let v = try p.next() { got.append(v) }
        p.append(bytes[cut...])
        while let v = try p.next() { got.append(v) }
        #expect(got == [want], "split at \(cut) of \(wire.debugDescription)")
        #expect(!p.isMidValue)
      }
    }
  }

  @Test func allSamplesConcatenatedFedOneByteAtATimeAndInRandomPieces() throws {
    let wire = Self.samples.flatMap { Array($0.0.utf8) }
    let want = Self.samples.map(\.1)
    var p = RESPParser()
    var got: [RESPValue] = []
    for b in wire {
      p.append([b])
      while let v = try p.next() { got.append(v) }
    }
    #expect(got == want)
    var rng = SplitMix(17)
    for _ in 0..<200 {
      var q = RESPParser()
      var out: [RESPValue] = []
      var i = 0
      while i < wire.count {
        let n = Int.random(in: 1...40, using: &rng)
        q.append(wire[i..<min(wire.count, i + n)])
        i += n
        while let v = try q.next() { out.append(v) }
      }
      #expect(out == want)
    }
  }

  /// A random reply of every kind, nested up to `depth`.
  static func randomValue(_ rng: inout SplitMix, depth: Int) -> RESPValue {
    let kind = Int.random(in: 0..<(depth > 0 ? 15 : 10), using: &rng)
    func bytes() -> [UInt8] {
      (0..<Int.random(in: 0..<20, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }
    func word() -> String {
      String((0..<Int.random(in: 1..<12, using: &rng)).map { _ in "abcxyz 019:_".randomElement(using: &rng)! })
    }
    func items() -> [RESPValue] {
      (0..<Int.random(in: 0..<5, using: &rng)).map { _ in randomValue(&rng, depth: depth - 1) }
    }
    switch kind {
    case 0: return .simpleString(word())
    case 1: return .error("ERR " + word())
    case 2: return .integer(Int64.random(in: Int64.min...Int64.max, using: &rng))
    case 3: return .bulkString(bytes())
    case 4: return .null
    case 5: return .boolean(Bool.random(using: &rng))
    case 6: return .double(Double(Int.random(in: -1_000_000...1_000_000, using: &rng)) / 64)
    case 7: return .bigNumber(String(UInt64.random(in: 0...UInt64.max, using: &rng)) + "12345678901234567890")
    case 8: return .blobError(bytes())
    case 9: return .verbatim(format: "txt", text: bytes())
    case 10: return .array(items())
    case 11: return .map(items().map { RESPPair($0, randomValue(&rng, depth: depth - 1)) })
    case 12: return .set(items())
    case 13: return .push([.bulkString(Array("message".utf8))] + items())
    default:
      return .attributed(
        attributes: [RESPPair(.simpleString(word()), .integer(1))], value: randomValue(&rng, depth: depth - 1))
    }
  }

  @Test func randomNestedRepliesRoundTripAtEveryByteSplit() throws {
    var rng = SplitMix(0x5EED)
    for _ in 0..<60 {
      let v = Self.randomValue(&rng, depth: 4)
      let wire = v.encoded()
      for cut in 0...wire.count {
        var p = RESPParser()
        p.append(wire[0..<cut])
        let early = try p.next()
        p.append(wire[cut...])
        let got = try early ?? p.next()
        #expect(got == v)
        #expect(try p.next() == nil)
      }
    }
  }

  @Test func resp2RepliesParse() throws {
    let v: RESPValue = .array([.bulkString([1, 2]), .null, .integer(-3), .simpleString("PONG")])
    let wire = v.encoded(resp2: true)
    #expect(String(decoding: wire, as: UTF8.self).contains("$-1\r\n"))
    #expect(try RESPParser.parseAll(wire) == [v])
  }

  @Test func limitsAreThrownAsProtocolViolationsBeforeAllocating() throws {
    func violation(_ wire: String, _ limits: RESPLimits = RESPLimits(), contains: String) {
      do {
        _ = try RESPParser.parseAll(Array(wire.utf8), limits: limits)
        Issue.record("no error for \(wire.debugDescription)")
      } catch let CacheError.protocolViolation(_, reason) {
        #expect(reason.contains(contains), "\(reason) for \(wire.debugDescription)")
      } catch {
        Issue.record("wrong error \(error)")
      }
    }
    let small = RESPLimits(maxDepth: 3, maxAggregateCount: 10, maxBulkLength: 100, maxLineLength: 64)
    violation("$101\r\n", small, contains: "exceeds the limit")
    violation("$9999999999999\r\n", contains: "exceeds the limit")  // no 9 TB buffer reserved
    violation("*11\r\n", small, contains: "exceeds the limit")
    violation("%6\r\n", small, contains: "exceeds the limit")  // 6 pairs = 12 elements
    violation("*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", small, contains: "nesting deeper")
    violation("+" + String(repeating: "a", count: 100), small, contains: "longer than")
    violation("$-2\r\n", contains: "negative")
    violation("*-5\r\n", contains: "negative")
    violation("$3\r\nabcd\r\n", contains: "not followed by CRLF")
    violation(":12a\r\n", contains: "non-digit")
    violation(":99999999999999999999\r\n", contains: "too long")
    violation(":9223372036854775808\r\n", contains: "out of 64-bit range")
    violation("#x\r\n", contains: "boolean")
    violation(",abc\r\n", contains: "double")
    violation("(12x\r\n", contains: "big number")
    violation("=2\r\nab\r\n", contains: "verbatim")
    // Found by the libFuzzer target: a format that is not ASCII did not round-trip.
    violation("=7\r\nt\u{93}:abc\r\n", contains: "printable ASCII")
    violation("_x\r\n", contains: "null")
    violation("?\r\n", contains: "unknown type")
    violation("+a\rb\r\n", contains: "CR not followed by LF")
    violation("+a\nb\r\n", contains: "LF without CR")
    violation("$?\r\n", contains: "streamed")
    violation("*2\r\n:1\r\n", contains: "ends inside")
    // Nested aggregates within the per-aggregate limits still meet the per-reply ones.
    let perReply = RESPLimits(maxAggregateCount: 100, maxBulkLength: 100, maxReplyElements: 50, maxReplyBytes: 0)
    violation(
      "*10\r\n" + String(repeating: "*10\r\n" + String(repeating: ":1\r\n", count: 10), count: 10), perReply,
      contains: "more than 50 values")
    let bytesLimit = RESPLimits(maxAggregateCount: 100, maxBulkLength: 100, maxReplyElements: 1 << 20, maxReplyBytes: 0)
    let bulks = String(repeating: "$100\r\n" + String(repeating: "x", count: 100) + "\r\n", count: 100)
    violation(
      "*100\r\n" + String(repeating: "*100\r\n" + bulks, count: 100), bytesLimit,
      contains: "more than \(bytesLimit.maxReplyBytes) bytes")
    // ...and count one reply at a time.
    #expect(
      try RESPParser.parseAll(Array(String(repeating: "*3\r\n:1\r\n:2\r\n:3\r\n", count: 100).utf8), limits: perReply)
        .count == 100)
    // A poisoned parser keeps failing.
    var p = RESPParser()
    p.append(Array("?\r\n+OK\r\n".utf8))
    #expect(throws: CacheError.self) { try p.next() }
    #expect(throws: CacheError.self) { try p.next() }
  }

  @Test func randomGarbageAndTruncationsNeverCrash() throws {
    var rng = SplitMix(99)
    let limits = RESPLimits(maxDepth: 8, maxAggregateCount: 1000, maxBulkLength: 4096, maxLineLength: 256)
    let alphabet = Array("+-:$*%~>|_#,(!=\r\n0123456789-?tfx".utf8)
    var outcomes = [0, 0, 0]  // values, errors, incomplete
    for round in 0..<3000 {
      var bytes: [UInt8]
      if round % 4 == 0 {
        bytes = Self.randomValue(&rng, depth: 3).encoded()
      } else if round % 4 == 1 {
        // A valid reply, truncated and with a few bytes flipped.
        bytes = Self.randomValue(&rng, depth: 3).encoded()
        bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &rng)))
        for _ in 0..<Int.random(in: 0...2, using: &rng) where !bytes.isEmpty {
          bytes[Int.random(in: 0..<bytes.count, using: &rng)] = alphabet.randomElement(using: &rng)!
        }
      } else {
        bytes = (0..<Int.random(in: 0..<64, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }
      }
      var p = RESPParser(limits: limits)
      var i = 0
      do {
        while i < bytes.count {
          let n = Int.random(in: 1...8, using: &rng)
          p.append(bytes[i..<min(bytes.count, i + n)])
          i += n
          while (try p.next()) != nil { outcomes[0] += 1 }
        }
        if p.isMidValue { outcomes[2] += 1 }
        #expect(p.bufferedByteCount <= bytes.count)
      } catch let e as CacheError {
        guard case .protocolViolation = e else {
          Issue.record("unexpected \(e)")
          continue
        }
        outcomes[1] += 1
      }
    }
    // The mix really exercised all three outcomes.
    #expect(outcomes.allSatisfy { $0 > 100 }, "\(outcomes)")
  }

  @Test func commandsEncodeAsArraysOfBulkStrings() throws {
    let wire = RESPEncoder.command("SET", "k", "a b", "PX", "100")
    #expect(
      String(decoding: wire, as: UTF8.self) == "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\na b\r\n$2\r\nPX\r\n$3\r\n100\r\n")
    let binary = RESPEncoder.command([[0, 13, 10, 255], []])
    // The encoded command is itself valid RESP: an array of the same bulks.
    #expect(try RESPParser.parseAll(binary) == [.array([.bulkString([0, 13, 10, 255]), .bulkString([])])])
  }

  @Test func urlsParse() throws {
    let a = try RedisEndpoint(url: "redis://alice:p%40ss@127.0.0.1:7001/3")
    #expect(a.address == .tcp(host: "127.0.0.1", port: 7001))
    #expect(a.username == "alice" && a.password == "p@ss" && a.database == 3)
    let b = try RedisEndpoint(url: "redis://:secret@localhost")
    #expect(
      b.address == .tcp(host: "localhost", port: 6379) && b.username == nil && b.password == "secret" && b.database == 0
    )
    let c = try RedisEndpoint(url: "unix:///tmp/r.sock?db=2")
    #expect(c.address == .unix(path: "/tmp/r.sock") && c.database == 2)
    for bad in ["redis://", "http://x:1", "redis://h:1/x", "unix://relative", "rediss://h:1", "no url"] {
      #expect(throws: CacheError.self, "\(bad)") { try RedisEndpoint(url: bad) }
    }
  }
}

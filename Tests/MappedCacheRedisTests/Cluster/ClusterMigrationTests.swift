import CheckedValues
import Foundation
import MappedCache
import TestSupport
import Testing

@testable import MappedCacheRedis

/// The `CLUSTER NODES` markers of slots in flight, and how the holder combines what each
/// primary says of them (no server).
@Suite struct ClusterMigrationTests {
  static let idA = String(repeating: "a", count: 40)
  static let idB = String(repeating: "b", count: 38) + "01"
  static let idC = "0123456789abcdef0123456789abcdef01234567"
  static let idR = String(repeating: "e", count: 40)
  static let idX = String(repeating: "9", count: 40)
  let from = ClusterNode(host: "10.0.0.1", port: 7000)

  func parse(_ text: String) throws -> ClusterNodesReport {
    try ClusterNodesReport.parse(.bulkString(Array(text.utf8)), from: from)
  }

  /// A reply as Redis 7 writes it: the answering node (A) migrates 100 to B and imports
  /// 9000 from C; B has a hostname, C an address on the answering node's host; a replica.
  var sample: String {
    [
      "\(Self.idB) 127.0.0.1:7001@17001,host-b master - 0 1700000000000 2 connected 5461-10922",
      "\(Self.idA) 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-99 101-5460 [100->-\(Self.idB)]"
        + " [9000-<-\(Self.idC)]",
      "\(Self.idC) :7002@17002 master - 0 1700000000001 3 connected 10923-16383",
      "\(Self.idR) [::1]:7003@17003 slave \(Self.idA) 0 1700000000002 1 connected",
    ].joined(separator: "\n") + "\n"
  }

  @Test func markersOfTheMyselfLineAndEveryAddressAreRead() throws {
    let r = try parse(sample)
    #expect(r.myID == Self.idA)
    #expect(r.migrating == [ClusterNodesReport.Marker(slot: 100, peer: Self.idB)])
    #expect(r.importing == [ClusterNodesReport.Marker(slot: 9000, peer: Self.idC)])
    #expect(r.addresses[Self.idB] == ClusterNode(host: "127.0.0.1", port: 7001))
    #expect(r.addresses[Self.idC] == ClusterNode(host: "10.0.0.1", port: 7002), "an empty host is the sender's")
    #expect(r.addresses[Self.idR] == ClusterNode(host: "::1", port: 7003))
    // A verbatim string (RESP3) and CRLF line ends read the same.
    let crlf = sample.replacingOccurrences(of: "\n", with: "\r\n")
    #expect(try ClusterNodesReport.parse(.verbatim(format: "txt", text: Array(crlf.utf8)), from: from) == r)
  }

  /// Every line's role, primary and slot ranges, as `RedisClusterAdmin.nodes` returns
  /// them to tools.
  @Test func everyLinesRoleAndSlotsAreRead() throws {
    let lines = try parse(sample + "\(Self.idX) 127.0.0.1:7004@17004 slave,fail? \(Self.idB) 0 0 2 connected\n").lines
    #expect(lines.map(\.id) == [Self.idB, Self.idA, Self.idC, Self.idR, Self.idX])
    #expect(lines.map(\.isPrimary) == [true, true, true, false, false])
    #expect(lines.map(\.isFailing) == [false, false, false, false, true])
    #expect(lines.map(\.primaryID) == [nil, nil, nil, Self.idA, Self.idB])
    #expect(lines[0].slots == [5461...10922])
    #expect(lines[1].slots == [0...99, 101...5460], "the markers are not ranges")
    #expect(lines[1].serves(slot: 5460) && !lines[1].serves(slot: 100) && !lines[1].serves(slot: 9000))
    #expect(lines[2].address == ClusterNode(host: "10.0.0.1", port: 7002))
    #expect(lines[3].slots.isEmpty && lines[3].address == ClusterNode(host: "::1", port: 7003))
    // A single slot, and the whole range.
    let one = try parse("\(Self.idA) 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 7 9-9 0-5 10-16383\n")
    #expect(one.lines[0].slots == [7...7, 9...9, 0...5, 10...16383])
  }

  @Test func aNodeWithoutMarkersOrAddressIsFine() throws {
    let r = try parse(
      "\(Self.idA) 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-16383\n"
        + "\(Self.idB) :0@0 handshake - 0 0 0 disconnected\n")
    #expect(r.migrating.isEmpty && r.importing.isEmpty)
    #expect(r.addresses[Self.idB] == nil, "port 0: no address yet")
    // A replica answering: no slots at all.
    let s = try parse("\(Self.idR) 127.0.0.1:7003@17003 myself,slave \(Self.idA) 0 0 1 connected\n")
    #expect(s.myID == Self.idR && s.migrating.isEmpty)
  }

  @Test func malformedRepliesAreProtocolViolations() throws {
    let me = "\(Self.idA) 127.0.0.1:7000@17000 myself,master - 0 0 1 connected"
    let other = "\(Self.idB) 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922"
    let hostile: [String] = [
      "",  // no myself line
      other,  // no myself line
      me + "\n" + me,  // two
      "\(Self.idA) 127.0.0.1:7000@17000 myself,master - 0 0",  // 7 fields
      "xyz 127.0.0.1:7000@17000 myself,master - 0 0 1 connected",  // not an id
      String(Self.idA.dropLast()) + " 127.0.0.1:7000@17000 myself,master - 0 0 1 connected",  // 39 digits
      me.uppercased(),  // ids are lower-case hex (and the flags no longer say myself)
      me + " [16384->-\(Self.idB)]",  // slot out of range
      me + " [-1->-\(Self.idB)]",
      me + " [x->-\(Self.idB)]",
      me + " [100-\(Self.idB)]",  // no arrow
      me + " [100->-\(Self.idB)",  // not closed
      me + " [100->-\(Self.idB.dropLast())]",  // short id
      me + " [100->-\(Self.idB)zz]",
      me + " [100-<-]",
      me + " [" + String(repeating: "9", count: 80) + "]",
      me + " 16384",  // slot ranges: out of range, backwards, not numbers, too long
      me + " 10-5",
      me + " -1",
      me + " 5-",
      me + " 1-2-3",
      me + " a-b",
      me + " " + String(repeating: "1", count: 30),
      "\(Self.idR) 127.0.0.1:7003@17003 myself,slave primary 0 0 1 connected",  // not an id
    ]
    for text in hostile {
      #expect(throws: CacheError.self, "\(text.prefix(80))") { try parse(text) }
    }
    // Not a string at all.
    #expect(throws: CacheError.self) { try ClusterNodesReport.parse(.integer(3), from: from) }
    #expect(throws: CacheError.self) { try ClusterNodesReport.parse(.array([]), from: from) }
    // More lines than any cluster has, refused before they are read.
    let many = (0...ClusterNodesReport.maxLines).map { _ in other }.joined(separator: "\n")
    #expect(throws: CacheError.self) { try parse(me + "\n" + many) }
    // More ranges than slots (each line's own, summed).
    let ranges = (0...ClusterSlots.count).map { " \($0 % ClusterSlots.count)" }.joined()
    #expect(throws: CacheError.self) { try parse(me + ranges) }
    // More markers than slots.
    let markers = (0...ClusterSlots.count).map { " [\($0 % ClusterSlots.count)->-\(Self.idB)]" }.joined()
    #expect(throws: CacheError.self) { try parse(me + markers) }
  }

  @Test func randomBytesNeverTrap() {
    // Seeded: the same inputs every run.
    var rng = SplitMix(18)
    let alphabet = Array("0123456789abcdef []-<>:@,myselfmaster\n".utf8)
    var parsed = 0
    for round in 0..<3000 {
      var text = Array(sample.utf8)
      // Mutate a few bytes of a good reply, or make one up from its alphabet.
      if round % 2 == 0 {
        for _ in 0..<(1 + rng.below(4)) {
          text[rng.below(text.count)] = alphabet[rng.below(alphabet.count)]
        }
      } else {
        text = (0..<rng.below(300)).map { _ in alphabet[rng.below(alphabet.count)] }
      }
      do {
        let r = try ClusterNodesReport.parse(.bulkString(text), from: from)
        parsed += 1
        #expect(r.migrating.allSatisfy { (0..<ClusterSlots.count).contains($0.slot) })
        #expect(r.importing.allSatisfy { ClusterNodesReport.isNodeID(Substring($0.peer)) })
      } catch {
        #expect(error is CacheError)
      }
    }
    #expect(parsed > 0, "some mutations leave a valid reply")
  }

  @Test func pairsNameTheImporterAndAFailedQueryKeepsTheLastAnswer() throws {
    let a = ClusterNode(host: "127.0.0.1", port: 7000)
    let b = ClusterNode(host: "127.0.0.1", port: 7001)
    let c = ClusterNode(host: "127.0.0.1", port: 7002)
    let fresh = ClusterNode(host: "127.0.0.1", port: 7009)
    let idF = String(repeating: "f", count: 40)
    func report(_ id: String, port: Int, _ markers: String, extra: String = "") throws -> ClusterNodesReport {
      try ClusterNodesReport.parse(
        .bulkString(
          Array(("\(id) 127.0.0.1:\(port)@1\(port) myself,master - 0 0 1 connected \(markers)\n" + extra).utf8)),
        from: ClusterNode(host: "127.0.0.1", port: UInt16(port)))
    }
    var m = ClusterMigrations()
    let primaries: Set = [a, b, c]
    // A migrates 100 to B (B says it imports it) and 200 to a node that owns nothing yet,
    // found by the address in A's reply; 300 to a node A has no address for.
    let ra = try report(
      Self.idA, port: 7000, "0-5460 [100->-\(Self.idB)] [200->-\(idF)] [300->-\(Self.idX)]",
      extra: "\(idF) 127.0.0.1:7009@17009 master - 0 0 4 connected\n")
    let rb = try report(Self.idB, port: 7001, "5461-10922 [100-<-\(Self.idA)]")
    let rc = try report(Self.idC, port: 7002, "10923-16383")
    m.update([a: (10, ra), b: (11, rb), c: (12, rc)], primaries: primaries)
    #expect(
      m.pairs == [
        .init(slot: 100, importer: b), .init(slot: 200, importer: fresh), .init(slot: 300, importer: nil),
      ])
    #expect(m.importers == [b, fresh])
    #expect(m.sentMs(a) == 10 && m.sentMs(c) == 12)
    let before = m
    // A round where A's query failed and B's migration ended: A keeps its answer and its
    // older time, so its buckets' fences stop there.
    m.update([b: (21, try report(Self.idB, port: 7001, "5461-10922")), c: (22, rc)], primaries: primaries)
    #expect(m.sentMs(a) == 10 && m.sentMs(b) == 21)
    #expect(m.pairs == before.pairs, "B no longer says it imports 100, but A still does")
    // A answers again: it no longer migrates 100 (B still says it imports it), 200 is
    // undone, and 300 goes to C now: only 200 and 300 changed.
    let after = m
    m.update(
      [a: (30, try report(Self.idA, port: 7000, "0-5460 [300->-\(Self.idC)]")), b: (31, rb)], primaries: primaries)
    #expect(m.changedSlots(from: after) == [200, 300])
    #expect(m.pairs == [.init(slot: 100, importer: b), .init(slot: 300, importer: c)])
    // A primary that leaves the map takes its answer with it.
    m.update([:], primaries: [a, c])
    #expect(m.sentMs(b) == nil)
    #expect(m.pairs == [.init(slot: 300, importer: c)])
  }
}

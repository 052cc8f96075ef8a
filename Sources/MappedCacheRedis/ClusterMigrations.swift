import MappedCache

/// What one node says of the slots it is moving, from the `myself` line of its
/// `CLUSTER NODES` reply:
///
///     <id> <ip:port@cport[,hostname…]> <flags> <primary> <ping> <pong> <epoch> <link> <slot>…
///     slot = N | N-M | [N->-<id>]  (migrating N to node id)
///                    | [N-<-<id>]  (importing N from node id)
///
/// Redis writes the bracketed markers on the `myself` line only (`clusterGenNodeDescription`,
/// src/cluster_legacy.c). Every line is kept too (`lines`: id, address, flags, primary,
/// slot ranges), so that the other end of a migration can be found by its id, and tools
/// can see the cluster's roles (`RedisClusterAdmin.nodes`). Nothing is used unchecked: ids
/// are 40 hex digits, slots 0-16383 (a range's ends in order), addresses as
/// `ClusterNode.parse` allows, at most `maxLines` lines, `ClusterSlots.count` markers and
/// as many ranges; a reply without exactly one `myself` line, a line of fewer than 8
/// fields, a malformed range or marker is a `protocolViolation` naming the node.
struct ClusterNodesReport: Equatable {
  /// A slot in flight and the node at its other end.
  struct Marker: Hashable {
    let slot: Int
    let peer: String
  }

  /// The id of the node that answered.
  var myID: String
  /// Slots it is migrating, to `peer`.
  var migrating: [Marker] = []
  /// Slots it is importing, from `peer`.
  var importing: [Marker] = []
  /// The address of every node it knows one of, by id.
  var addresses: [String: ClusterNode] = [:]
  /// Every line, in the reply's order.
  var lines: [ClusterNodeLine] = []

  /// Most lines a reply may have (nodes the answering one knows, replicas included).
  static let maxLines = 4 * ClusterSlotMap.maxNodes

  /// Parses a `CLUSTER NODES` reply sent by `from` (its host stands in for an empty one).
  static func parse(_ reply: RESPValue, from: ClusterNode) throws -> ClusterNodesReport {
    let bad = { (why: String) in violation(from, why) }
    guard let bytes = reply.withoutAttributes.bytes else { throw bad("the reply is not a string") }
    let lines = bytes.split(maxSplits: maxLines, omittingEmptySubsequences: true) { $0 == 10 || $0 == 13 }
    guard lines.count <= maxLines else { throw bad("more than \(maxLines) lines") }
    var mine: [Substring]? = nil
    var addresses: [String: ClusterNode] = [:]
    var parsed: [ClusterNodeLine] = []
    var ranges = 0
    for raw in lines {
      let line = String(decoding: raw, as: UTF8.self)
      let fields = line.split(separator: " ", omittingEmptySubsequences: true)
      if fields.isEmpty { continue }
      guard fields.count >= 8 else { throw bad("a line of \(fields.count) fields (8 at least)") }
      guard isNodeID(fields[0]) else { throw bad("a node id that is not 40 hex digits") }
      // `ip:port@cport[,hostname…]`; a node whose address is not known yet (`:0@0`) has none.
      let address = fields[1].split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false)[0]
      let hostPort = address.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false)[0]
      let node = ClusterNode.parse(hostPort, defaultHost: from.host)
      if let node { addresses[String(fields[0])] = node }
      let flags = fields[2].split(separator: ",").map(String.init)
      if flags.contains("myself") {
        guard mine == nil else { throw bad("two lines flagged myself") }
        mine = fields
      }
      // The primary's id, or "-" for a primary.
      guard fields[3] == "-" || isNodeID(fields[3]) else { throw bad("a primary id that is not 40 hex digits") }
      let slots = try slotRanges(fields[8...], counted: &ranges, from: from)
      parsed.append(
        ClusterNodeLine(
          id: String(fields[0]), address: node, flags: flags,
          primaryID: fields[3] == "-" ? nil : String(fields[3]), slots: slots))
    }
    guard let mine else { throw bad("no line flagged myself") }
    var report = ClusterNodesReport(myID: String(mine[0]), addresses: addresses, lines: parsed)
    try report.addMarkers(mine[8...], from: from)
    return report
  }

  /// The slot ranges of a line (`N` or `N-M`; markers are skipped), adding them to the
  /// reply's `count`.
  private static func slotRanges(_ tokens: ArraySlice<Substring>, counted count: inout Int, from: ClusterNode) throws
    -> [ClosedRange<Int>]
  {
    var slots: [ClosedRange<Int>] = []
    for token in tokens where !token.hasPrefix("[") {
      let ends = token.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
      guard token.utf8.count <= 11, let lo = Int(ends[0]), let hi = ends.count == 2 ? Int(ends[1]) : lo,
        lo >= 0, lo <= hi, hi < ClusterSlots.count
      else { throw violation(from, "a malformed slot range \(token.prefix(16))") }
      count += 1
      guard count <= ClusterSlots.count else { throw violation(from, "more slot ranges than slots") }
      slots.append(lo...hi)
    }
    return slots
  }

  /// The `myself` line's markers: `[N->-<id>]` (migrating) and `[N-<-<id>]` (importing).
  private mutating func addMarkers(_ tokens: ArraySlice<Substring>, from: ClusterNode) throws {
    for token in tokens where token.hasPrefix("[") {
      guard token.hasSuffix("]"), token.count <= 64 else { throw Self.violation(from, "a malformed slot marker") }
      let body = token.dropFirst().dropLast()
      let isMigrating = body.firstRange(of: "->-")
      guard let arrow = isMigrating ?? body.firstRange(of: "-<-"), let slot = Int(body[..<arrow.lowerBound]),
        slot >= 0 && slot < ClusterSlots.count, Self.isNodeID(body[arrow.upperBound...])
      else { throw Self.violation(from, "a malformed slot marker \(token)") }
      let marker = Marker(slot: slot, peer: String(body[arrow.upperBound...]))
      if isMigrating != nil { migrating.append(marker) } else { importing.append(marker) }
      guard migrating.count + importing.count <= ClusterSlots.count else {
        throw Self.violation(from, "more slot markers than slots")
      }
    }
  }

  private static func violation(_ from: ClusterNode, _ why: String) -> CacheError {
    .protocolViolation(endpoint: from.description, reason: "CLUSTER NODES: \(why)")
  }

  static func isNodeID(_ s: Substring) -> Bool {
    s.utf8.count == 40 && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
  }
}

/// One line of a `CLUSTER NODES` reply: a node as the answering node sees it.
public struct ClusterNodeLine: Sendable, Equatable {
  /// The node's id (40 hex digits).
  public var id: String
  /// Its address; nil while the answering node does not know it yet (`:0@0`).
  public var address: ClusterNode?
  /// Its flags (`myself`, `master`, `slave`, `fail?`, `fail`, `handshake`, `noaddr`, ...).
  public var flags: [String]
  /// The id of its primary, for a replica; nil for a primary.
  public var primaryID: String?
  /// The slot ranges it serves (a primary's; a replica lists none).
  public var slots: [ClosedRange<Int>]

  /// Whether it is a primary (`master`).
  public var isPrimary: Bool { flags.contains("master") }
  /// Whether the answering node believes it failing (`fail?`) or failed (`fail`).
  public var isFailing: Bool { flags.contains("fail") || flags.contains("fail?") }
  /// Whether it serves `slot`.
  public func serves(slot: Int) -> Bool { slots.contains { $0.contains(slot) } }
}

/// The slots in flight as the cluster holder last learned them: for each primary asked,
/// when its `CLUSTER NODES` was sent and which (slot, importer) pairs it named (a slot it
/// migrates, with the node it goes to; a slot it imports, with itself).
///
/// A primary whose query failed keeps what it said last, and the send time of that older
/// query: its buckets' fences stop there, so they go stale instead of trusting an unknown.
struct ClusterMigrations: Equatable {
  /// A slot and a node that may take writes of its keys through ASK (nil: a node whose
  /// address is not known, which fences the slot's bucket until it is).
  struct Pair: Hashable {
    let slot: Int
    let importer: ClusterNode?
  }

  struct Report: Equatable {
    var sentMs: UInt64
    var id: String
    var pairs: Set<Pair>
  }

  private(set) var reports: [ClusterNode: Report] = [:]

  /// Takes the answers of one round (`fresh`: node → send time, report); primaries whose
  /// query failed keep their last report; nodes no longer primaries are dropped.
  mutating func update(
    _ fresh: [ClusterNode: (sentMs: UInt64, report: ClusterNodesReport)], primaries: Set<ClusterNode>
  ) {
    reports = reports.filter { primaries.contains($0.key) }
    // The ids of the primaries, as each says of itself, find the node a marker names.
    var byID: [String: ClusterNode] = [:]
    for (n, r) in reports { byID[r.id] = n }
    for (n, f) in fresh { byID[f.report.myID] = n }
    for (node, f) in fresh where primaries.contains(node) {
      var pairs = Set<Pair>()
      for m in f.report.migrating {
        pairs.insert(Pair(slot: m.slot, importer: byID[m.peer] ?? f.report.addresses[m.peer]))
      }
      for m in f.report.importing { pairs.insert(Pair(slot: m.slot, importer: node)) }
      reports[node] = Report(sentMs: f.sentMs, id: f.report.myID, pairs: pairs)
    }
  }

  /// Every (slot, importer) pair named.
  var pairs: Set<Pair> { reports.values.reduce(into: Set<Pair>()) { $0.formUnion($1.pairs) } }

  /// The nodes named as importers (those with a known address).
  var importers: Set<ClusterNode> { Set(pairs.compactMap(\.importer)) }

  /// When the last answered query of `node` was sent (nil: never answered).
  func sentMs(_ node: ClusterNode) -> UInt64? { reports[node]?.sentMs }

  /// The slots whose pairs differ between the two.
  func changedSlots(from other: ClusterMigrations) -> Set<Int> {
    Set(pairs.symmetricDifference(other.pairs).map(\.slot))
  }
}

import MappedCache

/// Redis Cluster's key space: 16384 hash slots, each owned by one primary.
///
///     slot(key) = CRC16-XMODEM(tag(key)) mod 16384
///     tag(key)  = the bytes between the first `{` and the next `}` after it, when that
///                 is not empty; otherwise the whole key
///
/// (CRC16-XMODEM: polynomial 0x1021, initial value 0, no reflection, no final XOR; the
/// check value of "123456789" is 0x31C3.) Keys that share a hash tag share a slot, which
/// is what lets a Lua script or a multi-key command touch several of them.
public enum ClusterSlots {
  /// Number of hash slots.
  public static let count = 16384

  /// CRC16-XMODEM of `bytes`.
  public static func crc16<C: Collection>(_ bytes: C) -> UInt16 where C.Element == UInt8 {
    var crc: UInt16 = 0
    for b in bytes {
      crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ b)]
    }
    return crc
  }

  /// The hash slot of `key` (hash tags honoured).
  public static func slot(_ key: [UInt8]) -> Int {
    key.withUnsafeBufferPointer { slot($0) }
  }

  /// The hash slot of `key` (hash tags honoured).
  public static func slot(_ key: String) -> Int { slot(Array(key.utf8)) }

  /// The hash slot of the bytes of `key`.
  public static func slot(_ key: UnsafeBufferPointer<UInt8>) -> Int {
    if let open = key.firstIndex(of: UInt8(ascii: "{")),
      let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1
    {
      return Int(crc16(key[(open + 1)..<close]) & 0x3fff)
    }
    return Int(crc16(key) & 0x3fff)
  }

  static let table: [UInt16] = (0..<256).map { i -> UInt16 in
    var c = UInt16(i) << 8
    for _ in 0..<8 { c = c & 0x8000 != 0 ? (c << 1) ^ 0x1021 : c << 1 }
    return c
  }
}

/// A node of a cluster, as the slot map and redirects name it.
public struct ClusterNode: Sendable, Hashable, CustomStringConvertible {
  /// Host name or address.
  public var host: String
  /// TCP port.
  public var port: UInt16

  /// A node at `host:port`.
  public init(host: String, port: UInt16) {
    self.host = host
    self.port = port
  }

  /// `host:port` (`[v6]:port` for an IPv6 address).
  public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

  /// Parses `host:port` from a reply; nil unless the host is a plausible name
  /// (1-255 bytes, no spaces or control characters) and the port 1...65535. An empty host
  /// means "the node that sent the reply" (`defaultHost`).
  static func parse(_ text: Substring, defaultHost: String) -> ClusterNode? {
    guard let colon = text.lastIndex(of: ":") else { return nil }
    var host = String(text[..<colon])
    guard let port = UInt16(text[text.index(after: colon)...]), port > 0 else { return nil }
    if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    if host.isEmpty || host == "?" { host = defaultHost }
    guard isPlausibleHost(host) else { return nil }
    return ClusterNode(host: host, port: port)
  }

  static func isPlausibleHost(_ host: String) -> Bool {
    let u = host.utf8
    return !u.isEmpty && u.count <= 255 && u.allSatisfy { $0 > 0x20 && $0 < 0x7f }
  }
}

/// Which primary owns each hash slot: 16384 node numbers into `nodes` (`unassigned`
/// for a slot no primary serves). Built from `CLUSTER SHARDS` (Redis 7) or
/// `CLUSTER SLOTS`; a reply that does not have their shape is a `protocolViolation`,
/// never a trap: every slot number, port and host is checked before it is used.
public struct ClusterSlotMap: Sendable, Equatable {
  /// The primaries that own at least one slot, in the order first seen.
  public private(set) var nodes: [ClusterNode] = []
  /// Owner of each slot: an index into `nodes`, or `unassigned`.
  private(set) var owners: [UInt16] = Array(repeating: ClusterSlotMap.unassigned, count: ClusterSlots.count)
  /// The owner number of a slot nobody serves.
  static let unassigned = UInt16.max
  /// Most primaries a map may name (a bound on what a hostile reply can make us open).
  static let maxNodes = 1000

  /// An empty map (every slot unassigned).
  public init() {}

  /// The primary of `slot`, nil when unassigned (or `slot` is out of range).
  public func owner(ofSlot slot: Int) -> ClusterNode? {
    guard slot >= 0 && slot < ClusterSlots.count else { return nil }
    let i = owners[slot]
    return i == Self.unassigned ? nil : nodes[Int(i)]
  }

  /// The slots `node` owns.
  public func slots(of node: ClusterNode) -> [Int] {
    guard let i = nodes.firstIndex(of: node) else { return [] }
    return (0..<ClusterSlots.count).filter { owners[$0] == UInt16(i) }
  }

  /// Whether both maps give every slot the same owner (the order of `nodes` aside).
  public static func == (a: ClusterSlotMap, b: ClusterSlotMap) -> Bool { a.changedSlots(from: b).isEmpty }

  /// Whether every slot has an owner.
  public var isComplete: Bool { !owners.contains(Self.unassigned) }

  /// The slots whose owner differs between the two maps.
  public func changedSlots(from other: ClusterSlotMap) -> [Int] {
    // Node numbers translated once, then compared slot by slot.
    let translate = nodes.map { n in other.nodes.firstIndex(of: n).map(UInt16.init) ?? Self.unassigned - 1 }
    return (0..<ClusterSlots.count).filter { s in
      let mine = owners[s]
      return (mine == Self.unassigned ? Self.unassigned : translate[Int(mine)]) != other.owners[s]
    }
  }

  /// Makes `node` the owner of `slot` (a MOVED redirect).
  mutating func assign(_ slot: Int, to node: ClusterNode) throws {
    guard slot >= 0 && slot < ClusterSlots.count else { return }
    owners[slot] = try index(of: node)
  }

  private mutating func index(of node: ClusterNode) throws -> UInt16 {
    if let i = nodes.firstIndex(of: node) { return UInt16(i) }
    guard nodes.count < Self.maxNodes else {
      throw CacheError.protocolViolation(
        endpoint: node.description, reason: "a slot map naming more than \(Self.maxNodes) primaries")
    }
    nodes.append(node)
    return UInt16(nodes.count - 1)
  }

  private mutating func assign(_ lo: Int64, _ hi: Int64, to node: ClusterNode, from: String) throws {
    guard lo >= 0, hi >= lo, hi < ClusterSlots.count else {
      throw CacheError.protocolViolation(endpoint: from, reason: "a slot range \(lo)-\(hi) outside 0-16383")
    }
    let i = try index(of: node)
    for s in Int(lo)...Int(hi) { owners[s] = i }
  }

  /// A map from a `CLUSTER SHARDS` reply (a map or a flat key/value array per shard;
  /// the primary is the node whose role is "master"). `from` names the node that sent it
  /// (for messages, and as the host of a node that reports none).
  package static func fromShards(_ reply: RESPValue, from: ClusterNode) throws -> ClusterSlotMap {
    let name = from.description
    func bad(_ why: String) -> CacheError { .protocolViolation(endpoint: name, reason: "CLUSTER SHARDS: \(why)") }
    guard let shards = reply.withoutAttributes.elements else { throw bad("the reply is not an array") }
    var map = ClusterSlotMap()
    var ranges = 0
    for shard in shards {
      let fields = try pairs(shard.withoutAttributes, bad)
      guard let slots = fields["slots"]?.elements, slots.count % 2 == 0 else {
        throw bad("a shard without an even list of slots")
      }
      if slots.isEmpty { continue }
      var primary: ClusterNode? = nil
      for n in fields["nodes"]?.elements ?? [] {
        let f = try pairs(n.withoutAttributes, bad)
        guard f["role"]?.string == "master" else { continue }
        if let health = f["health"]?.string, health != "online" { continue }
        guard case .integer(let port)? = f["port"]?.withoutAttributes ?? f["tls-port"]?.withoutAttributes,
          port > 0 && port <= 65535
        else { throw bad("a primary without a port in 1-65535") }
        let ip = f["endpoint"]?.string ?? f["ip"]?.string ?? ""
        var host = ip.isEmpty || ip == "?" ? (f["ip"]?.string ?? "") : ip
        if host.isEmpty || host == "?" { host = from.host }
        guard ClusterNode.isPlausibleHost(host) else { throw bad("a primary with a malformed host") }
        primary = ClusterNode(host: host, port: UInt16(port))
        break
      }
      guard let primary else { continue }  // a shard whose primary is down: its slots stay unassigned
      // More ranges than slots: garbage, refused before it costs a pass over each.
      ranges += slots.count / 2
      guard ranges <= ClusterSlots.count else { throw bad("more slot ranges than slots") }
      var i = 0
      while i < slots.count {
        guard case .integer(let lo) = slots[i].withoutAttributes, case .integer(let hi) = slots[i + 1].withoutAttributes
        else { throw bad("a slot bound that is not an integer") }
        try map.assign(lo, hi, to: primary, from: name)
        i += 2
      }
    }
    return map
  }

  /// A map from a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …], replicas…], …]`.
  static func fromSlots(_ reply: RESPValue, from: ClusterNode) throws -> ClusterSlotMap {
    let name = from.description
    func bad(_ why: String) -> CacheError { .protocolViolation(endpoint: name, reason: "CLUSTER SLOTS: \(why)") }
    guard let ranges = reply.withoutAttributes.elements, ranges.count <= ClusterSlots.count else {
      throw bad("the reply is not an array of at most 16384 ranges")
    }
    var map = ClusterSlotMap()
    for r in ranges {
      guard let e = r.withoutAttributes.elements, e.count >= 3,
        case .integer(let lo) = e[0].withoutAttributes, case .integer(let hi) = e[1].withoutAttributes,
        let n = e[2].withoutAttributes.elements, n.count >= 2,
        case .integer(let port) = n[1].withoutAttributes, port > 0 && port <= 65535
      else { throw bad("a range that is not [start, end, [host, port, …], …]") }
      var host = n[0].string ?? ""
      if host.isEmpty || host == "?" { host = from.host }
      guard ClusterNode.isPlausibleHost(host) else { throw bad("a primary with a malformed host") }
      try map.assign(lo, hi, to: ClusterNode(host: host, port: UInt16(port)), from: name)
    }
    return map
  }

  /// The fields of a RESP3 map, or of a RESP2 flat array of name/value pairs.
  private static func pairs(_ v: RESPValue, _ bad: (String) -> CacheError) throws -> [String: RESPValue] {
    var out: [String: RESPValue] = [:]
    switch v {
    case .map(let kv):
      for pair in kv { if let s = pair.key.string { out[s] = pair.value } }
    case .array(let a) where a.count % 2 == 0:
      var i = 0
      while i < a.count {
        if let s = a[i].string { out[s] = a[i + 1] }
        i += 2
      }
    default:
      throw bad("an entry that is neither a map nor a list of name/value pairs")
    }
    return out
  }
}

/// A cluster redirect: `-MOVED slot host:port` (the slot has a new owner) or
/// `-ASK slot host:port` (this one request goes there, after `ASKING`).
struct ClusterRedirect: Equatable {
  enum Kind { case moved, ask }
  let kind: Kind
  let slot: Int
  let node: ClusterNode

  /// The redirect an error message states; nil when it is not one. A message that starts
  /// like one but is malformed (slot out of range, bad address) throws `protocolViolation`.
  static func parse(_ message: String, from: ClusterNode) throws -> ClusterRedirect? {
    let kind: Kind
    if message.hasPrefix("MOVED ") {
      kind = .moved
    } else if message.hasPrefix("ASK ") {
      kind = .ask
    } else {
      return nil
    }
    let parts = message.split(separator: " ", omittingEmptySubsequences: true)
    guard parts.count == 3, let slot = Int(parts[1]), slot >= 0 && slot < ClusterSlots.count,
      let node = ClusterNode.parse(parts[2], defaultHost: from.host)
    else {
      throw CacheError.protocolViolation(
        endpoint: from.description, reason: "a malformed redirect \"\(message.prefix(200))\"")
    }
    return ClusterRedirect(kind: kind, slot: slot, node: node)
  }
}

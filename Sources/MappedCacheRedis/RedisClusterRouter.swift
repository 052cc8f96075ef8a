import Foundation
import MappedCache
import Synchronization
import SystemCalls

/// Counters of a cluster client (every thread of this process).
public struct RedisClusterStatistics: Sendable, Equatable {
  /// `-MOVED` replies followed (the slot map updated, the command sent again).
  public var moved: Int
  /// `-ASK` replies followed (`ASKING` and the command sent to the importing node once).
  public var ask: Int
  /// Slot maps read from the cluster (`CLUSTER SHARDS` or `CLUSTER SLOTS`).
  public var slotMapRefreshes: Int
  /// Primaries in the current slot map.
  public var primaries: Int
}

/// The cluster side of a `RedisClient` made from a `redis-cluster://` URL: it routes each
/// command to the primary of its key's slot, through one `RedisClient` (a small pool) per
/// primary.
///
/// - **Slot map.** Read from `CLUSTER SHARDS` (`CLUSTER SLOTS` on servers without it),
///   asking the known primaries first, then the seeds. Read again when a command is
///   redirected, when a node cannot be reached, when a slot has no owner, and every
///   `topologyRefreshInterval` seconds.
/// - **Redirects.** `-MOVED slot node`: the slot's owner is set to `node` at once (the
///   refresh follows) and the command is sent there. `-ASK slot node`: `ASKING` then the
///   command, on one connection of `node`, once; the map is not changed (the slot is being
///   migrated and only keys already moved are there). At most `maxRedirects` per command.
/// - **"Not now"** (`-TRYAGAIN` during a migration, `-CLUSTERDOWN`, `-LOADING`): retried with
///   capped jittered backoff by the node's client; `-CLUSTERDOWN` also reads the map again.
/// - **Pipelines** are split by node (each part one round trip to its primary, replies put
///   back in order); a multi-key `DEL`/`UNLINK`/`EXISTS`/`TOUCH`/`MGET`/`MSET` over several
///   slots is sent as one command per key and its replies combined (a sum, a concatenation, or `OK`).
final class RedisClusterRouter: @unchecked Sendable {
  let seeds: [ClusterNode]
  let username: String?
  let password: String?
  let options: RedisOptions
  static let maxRedirects = 5

  /// Guards `map`, `clients`, `lastRefreshNs`, `refreshWanted`.
  private let lock = NSLock()
  /// Held by the one thread reading the map.
  private let refreshing = NSLock()
  private var map = ClusterSlotMap()
  private var clients: [ClusterNode: RedisClient] = [:]
  private var lastRefreshNs: UInt64 = 0
  private var refreshWanted = true
  /// When each node last could not be reached: the map is asked of the others first
  /// (a dead primary would cost a connect timeout per read of the map).
  private var unreachableSince: [ClusterNode: UInt64] = [:]
  private let movedCount = Atomic<Int>(0)
  private let askCount = Atomic<Int>(0)
  private let refreshCount = Atomic<Int>(0)

  init(url: ClusterURL, options: RedisOptions) {
    seeds = url.seeds
    username = url.username
    password = url.password
    self.options = options
  }

  var statistics: RedisClusterStatistics {
    RedisClusterStatistics(
      moved: movedCount.load(ordering: .relaxed), ask: askCount.load(ordering: .relaxed),
      slotMapRefreshes: refreshCount.load(ordering: .relaxed), primaries: lock.withLock { map.nodes.count })
  }

  /// MOVED and ASK replies followed so far (two loads, no lock).
  var redirectCounts: (moved: Int, ask: Int) {
    (movedCount.load(ordering: .relaxed), askCount.load(ordering: .relaxed))
  }

  /// The endpoint of `node`, with the cluster's login.
  func endpoint(_ node: ClusterNode) -> RedisEndpoint {
    RedisEndpoint(address: .tcp(host: node.host, port: node.port), username: username, password: password)
  }

  /// The client of `node` (made on first use; at most `ClusterSlotMap.maxNodes` are kept).
  func client(_ node: ClusterNode) -> RedisClient {
    lock.withLock {
      if let c = clients[node] { return c }
      if clients.count >= ClusterSlotMap.maxNodes {
        // Drop clients of nodes that own nothing (targets of old redirects).
        let keep = Set(map.nodes)
        for (n, c) in clients where !keep.contains(n) {
          c.disconnect()
          clients[n] = nil
        }
      }
      let c = RedisClient(endpoint: endpoint(node), options: options)
      clients[node] = c
      return c
    }
  }

  func disconnect() {
    let all = lock.withLock { Array(clients.values) }
    for c in all { c.disconnect() }
  }

  // MARK: The slot map

  /// The current map, read first when there is none yet or a refresh is due.
  func slotMap() throws -> ClusterSlotMap {
    try refreshIfDue()
    return lock.withLock { map }
  }

  /// Reads the map now (waiting for a refresh another thread is making).
  func refresh() throws {
    refreshing.lock()
    defer { refreshing.unlock() }
    try readMap()
  }

  private func refreshIfDue() throws {
    let (due, empty) = lock.withLock { () -> (Bool, Bool) in
      let interval = UInt64(max(0.001, options.topologyRefreshInterval) * 1e9)
      return (refreshWanted || Clock.nanoseconds() &- lastRefreshNs > interval, map.nodes.isEmpty)
    }
    guard due else { return }
    if empty {
      // No map at all: every caller needs this one.
      refreshing.lock()
      defer { refreshing.unlock() }
      if lock.withLock({ !map.nodes.isEmpty }) { return }
      try readMap()
    } else if refreshing.try() {
      // A map is there: one caller refreshes, the others go on with the one they have.
      defer { refreshing.unlock() }
      try? readMap()
    }
  }

  /// Asks the known primaries, then the seeds, for the slot map; the first complete
  /// answer wins (else the first partial one: slots being failed over stay unassigned).
  private func readMap() throws {
    let (known, down) = lock.withLock { (map.nodes, unreachableSince) }
    let now = Clock.nanoseconds()
    let recentlyDown = { (n: ClusterNode) in down[n].map { now &- $0 < 10_000_000_000 } ?? false }
    let order = (known + seeds).filter { !recentlyDown($0) } + (known + seeds).filter(recentlyDown)
    var tried = Set<ClusterNode>()
    var lastError: Error = CacheError.remoteUnavailable(
      endpoint: seeds.map(\.description).joined(separator: ","), reason: "no cluster node answered")
    var partial: ClusterSlotMap? = nil
    for node in order where tried.insert(node).inserted {
      do {
        let m = try readMap(from: node)
        lock.withLock { unreachableSince[node] = nil }
        if m.isComplete {
          install(m)
          return
        }
        if partial == nil && !m.nodes.isEmpty { partial = m }
      } catch {
        if case CacheError.remoteUnavailable = error { lock.withLock { unreachableSince[node] = Clock.nanoseconds() } }
        lastError = error
      }
    }
    if let partial {
      install(partial)
      return
    }
    lock.withLock { refreshWanted = true }
    throw lastError
  }

  private func install(_ m: ClusterSlotMap) {
    refreshCount.add(1, ordering: .relaxed)
    lock.withLock {
      map = m
      lastRefreshNs = Clock.nanoseconds()
      refreshWanted = false
    }
  }

  private func readMap(from node: ClusterNode) throws -> ClusterSlotMap {
    let c = client(node)
    let r = try c.pipeline([[Array("CLUSTER".utf8), Array("SHARDS".utf8)]])[0]
    if let m = r.errorMessage {
      // Before Redis 7: no CLUSTER SHARDS.
      guard m.uppercased().contains("UNKNOWN") else {
        throw CacheError.remoteError(endpoint: node.description, message: m)
      }
      let s = try c.call([Array("CLUSTER".utf8), Array("SLOTS".utf8)])
      return try ClusterSlotMap.fromSlots(s, from: node)
    }
    return try ClusterSlotMap.fromShards(r, from: node)
  }

  /// The primaries of the current map (read first if there is none).
  func primaries() throws -> [ClusterNode] { try slotMap().nodes }

  // MARK: Routing

  /// A command bound for one slot (nil: any node), and where its reply goes.
  private struct Part {
    var command: [[UInt8]]
    var slot: Int?
    var origin: Int
  }

  /// How the replies of a command split by slot are put back together.
  private enum Combine { case single, sum, concat, ok }

  /// Sends the commands, each to the primary of its slot, and returns one reply per
  /// command in order (error replies as values, as `RedisClient.pipeline` does).
  func pipeline(_ commands: [[[UInt8]]], idempotent: Bool) throws -> [RESPValue] {
    var parts: [Part] = []
    var combine: [Combine] = []
    for (i, c) in commands.enumerated() {
      let (split, how) = Self.split(c)
      combine.append(how)
      for (cmd, slot) in split { parts.append(Part(command: cmd, slot: slot, origin: i)) }
    }
    var replies: [RESPValue]
    do {
      replies = try send(parts, idempotent: idempotent)
    } catch CacheError.remoteUnavailable(let ep, let why) {
      // A primary that cannot be reached may have been replaced (a failover): read the
      // map again and, when the request may be repeated, send it once more.
      guard idempotent else { throw CacheError.remoteUnavailable(endpoint: ep, reason: why) }
      try? refresh()
      replies = try send(parts, idempotent: idempotent)
    }
    // Put the split commands back together.
    var out: [RESPValue] = []
    out.reserveCapacity(commands.count)
    var j = 0
    for (i, how) in combine.enumerated() {
      var mine: [RESPValue] = []
      while j < parts.count && parts[j].origin == i {
        mine.append(replies[j])
        j += 1
      }
      out.append(Self.combined(mine, how))
    }
    replies.removeAll()
    return out
  }

  /// Sends each part to its node (one pipeline per node), following redirects.
  private func send(_ parts: [Part], idempotent: Bool) throws -> [RESPValue] {
    var map = try slotMap()
    var owners: [ClusterNode] = []
    for p in parts {
      if let node = p.slot.flatMap({ map.owner(ofSlot: $0) }) ?? (p.slot == nil ? map.nodes.first : nil) {
        owners.append(node)
        continue
      }
      // A slot nobody serves (a failover under way): read the map once more.
      try refresh()
      map = lock.withLock { self.map }
      guard let node = p.slot.flatMap({ map.owner(ofSlot: $0) }) ?? map.nodes.first else {
        throw CacheError.remoteUnavailable(
          endpoint: seeds.map(\.description).joined(separator: ","),
          reason: "slot \(p.slot ?? -1) has no primary in the cluster's slot map")
      }
      owners.append(node)
    }
    var replies = [RESPValue](repeating: .null, count: parts.count)
    var byNode: [ClusterNode: [Int]] = [:]
    var order: [ClusterNode] = []
    for (i, n) in owners.enumerated() {
      if byNode[n] == nil { order.append(n) }
      byNode[n, default: []].append(i)
    }
    for node in order {
      let idx = byNode[node]!
      let got = try sendTo(node, idx.map { parts[$0].command }, idempotent: idempotent)
      for (k, i) in idx.enumerated() { replies[i] = got[k] }
    }
    for i in parts.indices {
      replies[i] = try follow(replies[i], parts[i].command, from: owners[i], idempotent: idempotent)
    }
    return replies
  }

  /// One pipeline to `node`; a node that cannot be reached makes the map be read again
  /// (its slots may have a new primary) and, for idempotent requests, one more try there.
  private func sendTo(_ node: ClusterNode, _ commands: [[[UInt8]]], idempotent: Bool) throws -> [RESPValue] {
    do {
      return try client(node).pipeline(commands, idempotent: idempotent)
    } catch let e as CacheError {
      guard case .remoteUnavailable = e else { throw e }
      lock.withLock {
        refreshWanted = true
        unreachableSince[node] = Clock.nanoseconds()
      }
      throw e
    }
  }

  /// Follows the redirects of one reply (at most `maxRedirects`).
  private func follow(_ first: RESPValue, _ command: [[UInt8]], from: ClusterNode, idempotent: Bool) throws
    -> RESPValue
  {
    var reply = first
    var node = from
    for _ in 0..<Self.maxRedirects {
      guard let message = reply.errorMessage else { return reply }
      if message.hasPrefix("CLUSTERDOWN") { lock.withLock { refreshWanted = true } }
      guard let r = try ClusterRedirect.parse(message, from: node) else { return reply }
      switch r.kind {
      case .moved:
        movedCount.add(1, ordering: .relaxed)
        try lock.withLock {
          try map.assign(r.slot, to: r.node)
          refreshWanted = true
        }
        reply = try sendTo(r.node, [command], idempotent: idempotent)[0]
      case .ask:
        askCount.add(1, ordering: .relaxed)
        let rs = try sendTo(r.node, [[Array("ASKING".utf8)], command], idempotent: idempotent)
        reply = rs[1]
      }
      node = r.node
    }
    if let m = reply.errorMessage, try ClusterRedirect.parse(m, from: node) != nil {
      throw CacheError.remoteError(
        endpoint: node.description, message: "still redirected after \(Self.maxRedirects) redirects: \(m)")
    }
    return reply
  }

  // MARK: Keys of a command

  private static func name(_ c: [[UInt8]]) -> String { String(decoding: c.first ?? [], as: UTF8.self).uppercased() }

  /// Commands without a key: they go to any primary.
  private static let keyless: Set<String> = [
    "PING", "INFO", "CLUSTER", "HELLO", "CLIENT", "SCAN", "FLUSHALL", "FLUSHDB", "DBSIZE", "ECHO", "TIME",
    "SCRIPT", "FUNCTION", "CONFIG", "WAIT", "ASKING", "READONLY", "READWRITE", "COMMAND", "ACL", "KEYS", "LASTSAVE",
    "MEMORY", "SLOWLOG", "LATENCY", "AUTH", "SELECT", "QUIT", "RESET", "MULTI", "EXEC", "DISCARD",
  ]

  /// `c` as commands of one slot each, and how to combine their replies.
  private static func split(_ c: [[UInt8]]) -> ([([[UInt8]], Int?)], Combine) {
    let n = name(c)
    if keyless.contains(n) || c.count < 2 { return ([(c, nil)], .single) }
    switch n {
    case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO":
      // EVAL script numkeys key… arg…: the first key decides (all must share a slot).
      guard c.count >= 4, let k = Int(String(decoding: c[2], as: UTF8.self)), k > 0 else {
        return ([(c, nil)], .single)
      }
      return ([(c, ClusterSlots.slot(c[3]))], .single)
    case "DEL", "UNLINK", "EXISTS", "TOUCH", "MGET":
      // Keys of several slots: one command per key, in order (MGET's replies concatenate
      // back in the order asked).
      let slots = c[1...].map { ClusterSlots.slot($0) }
      if Set(slots).count == 1 { return ([(c, slots[0])], .single) }
      return (zip(c[1...], slots).map { ([c[0], $0.0], $0.1) }, n == "MGET" ? .concat : .sum)
    case "MSET":
      guard c.count % 2 == 1 else { return ([(c, ClusterSlots.slot(c[1]))], .single) }
      let pairs = stride(from: 1, to: c.count, by: 2).map { (c[$0], c[$0 + 1]) }
      let slots = pairs.map { ClusterSlots.slot($0.0) }
      if Set(slots).count == 1 { return ([(c, slots[0])], .single) }
      return (zip(pairs, slots).map { ([c[0], $0.0.0, $0.0.1], $0.1) }, .ok)
    default:
      return ([(c, ClusterSlots.slot(c[1]))], .single)
    }
  }

  private static func combined(_ rs: [RESPValue], _ how: Combine) -> RESPValue {
    if how == .single || rs.count == 1 { return rs.first ?? .null }
    if let e = rs.first(where: { $0.errorMessage != nil }) { return e }
    switch how {
    case .sum:
      var total: Int64 = 0
      for r in rs { if case .integer(let n) = r.withoutAttributes { total &+= n } }
      return .integer(total)
    case .concat: return .array(rs.flatMap { $0.elements ?? [] })
    case .ok, .single: return .simpleString("OK")
    }
  }
}

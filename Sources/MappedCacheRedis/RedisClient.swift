import Foundation
import MappedCache
import Synchronization
import SystemCalls

/// How a `RedisClient` connects, waits and retries.
public struct RedisOptions: Sendable, Equatable {
  /// Longest wait for a connection (and its handshake), reconnect attempts included, in seconds.
  public var connectTimeout: Double
  /// Longest wait for the replies of one request (or pipeline), in seconds.
  public var commandTimeout: Double
  /// How many times a command refused with `-LOADING`, `-BUSY`, `-TRYAGAIN` or
  /// `-CLUSTERDOWN` is sent again (after a jittered backoff) before the error is returned.
  public var maxRetries: Int
  /// First pause between reconnect attempts or retries, in seconds (full jitter: each
  /// pause is uniform in 0 ... min(cap, base·2^attempt)).
  public var backoffBase: Double
  /// Longest pause between reconnect attempts or retries, in seconds.
  public var backoffCap: Double
  /// Ask for RESP3 with `HELLO 3` (falls back to RESP2 when the server refuses).
  public var useRESP3: Bool
  /// `CLIENT SETNAME` for the connection (shown by `CLIENT LIST`).
  public var clientName: String?
  /// What a reply may hold; `maxBulkLength` should be at least the largest value.
  public var limits: RESPLimits
  /// Most connections the client opens: requests from that many threads run at once,
  /// further ones wait for a connection to come back.
  public var poolSize: Int
  /// A cluster client reads the slot map again at least this often (seconds), beside the
  /// reads that redirects and unreachable nodes cause. Per primary, the pool is `poolSize`.
  public var topologyRefreshInterval: Double

  /// Options with the defaults shown.
  public init(
    connectTimeout: Double = 1, commandTimeout: Double = 1, maxRetries: Int = 5,
    backoffBase: Double = 0.005, backoffCap: Double = 0.5, useRESP3: Bool = true,
    clientName: String? = nil, limits: RESPLimits = RESPLimits(), poolSize: Int = 4,
    topologyRefreshInterval: Double = 5
  ) {
    self.connectTimeout = connectTimeout
    self.commandTimeout = commandTimeout
    self.maxRetries = maxRetries
    self.backoffBase = backoffBase
    self.backoffCap = backoffCap
    self.useRESP3 = useRESP3
    self.clientName = clientName
    self.limits = limits
    self.poolSize = max(1, poolSize)
    self.topologyRefreshInterval = topologyRefreshInterval
  }
}

/// A Redis client: RESP3 (RESP2 fallback) over TCP or a unix socket, pipelining,
/// AUTH, SELECT, timeouts, reconnect with capped jittered backoff, and retries of the
/// replies that mean "not now" (`-LOADING`, `-BUSY`, `-TRYAGAIN`, `-CLUSTERDOWN`).
///
/// Thread-safe: a small pool of connections (`poolSize`, opened on demand); each request
/// or pipeline has one to itself for its round trip, so replies always match requests.
/// A connection that failed is dropped and a new one opened. A request whose connection
/// broke after it was sent is sent again once on a new connection only when marked
/// `idempotent` (the default, right for the reads and plain writes the caches make);
/// otherwise the error is thrown.
///
/// A `redis-cluster://host:port,host:port` URL makes a cluster client: each command goes
/// to the primary of its key's slot (`RedisClusterRouter`: slot map, MOVED/ASK, one pool
/// per primary); `endpoint` is then the first seed, for messages.
///
/// ```swift
/// let r = try RedisClient(url: "redis://127.0.0.1:6379/0")
/// try r.call("SET", "k", "v")
/// let v = try r.call("GET", "k").string      // "v"
/// ```
public final class RedisClient: @unchecked Sendable {
  /// Where it connects.
  public let endpoint: RedisEndpoint
  /// How it connects, waits and retries.
  public let options: RedisOptions
  /// Guards `idle`, `opened`, `failures`, `generation`, `resp3`.
  private let cond = NSCondition()
  private var idle: [(connection: RedisConnection, generation: Int)] = []
  private var opened = 0
  private var failures = 0
  private var generation = 0
  private var resp3 = false
  /// Called (on the requesting thread) with every push received.
  private let pushHandler: (@Sendable (RESPValue) -> Void)?
  private let counters = Counters()
  /// Set for a `redis-cluster://` client (before first use, never changed after).
  private(set) var cluster: RedisClusterRouter?

  final class Counters: Sendable {
    let connects = Atomic<Int>(0)
    let retries = Atomic<Int>(0)
  }

  /// A client of `endpoint`; it connects on first use. `pushHandler` gets every push
  /// (RESP3) received while waiting for a reply.
  public init(
    endpoint: RedisEndpoint, options: RedisOptions = RedisOptions(),
    pushHandler: (@Sendable (RESPValue) -> Void)? = nil
  ) {
    self.endpoint = endpoint
    self.options = options
    self.pushHandler = pushHandler
  }

  /// A client of the server at `url` (see `RedisEndpoint`), or of the cluster at a
  /// `redis-cluster://[user:password@]host:port[,host:port…]` URL (any subset of its nodes
  /// as seeds; pushes are not delivered by a cluster client).
  public convenience init(
    url: String, options: RedisOptions = RedisOptions(),
    pushHandler: (@Sendable (RESPValue) -> Void)? = nil
  ) throws {
    if ClusterURL.isCluster(url) {
      let parsed = try ClusterURL(url)
      let router = RedisClusterRouter(url: parsed, options: options)
      self.init(endpoint: router.endpoint(parsed.seeds[0]), options: options, pushHandler: pushHandler)
      cluster = router
      return
    }
    self.init(endpoint: try RedisEndpoint(url: url), options: options, pushHandler: pushHandler)
  }

  /// Whether this is a cluster client (`redis-cluster://`).
  public var isCluster: Bool { cluster != nil }

  /// A cluster client's redirect and slot-map counters (nil for a single server).
  public var clusterStatistics: RedisClusterStatistics? { cluster?.statistics }

  /// A cluster client's slot map (read from the cluster first if due); nil for a single server.
  public func clusterSlotMap() throws -> ClusterSlotMap? { try cluster?.slotMap() }

  /// A cluster client's slot map read from the cluster now; nil for a single server.
  public func refreshClusterSlotMap() throws -> ClusterSlotMap? {
    guard let cluster else { return nil }
    try cluster.refresh()
    return try cluster.slotMap()
  }

  /// The endpoints of the servers that own the data: the primaries of a cluster's slot
  /// map (read first if due), or this client's one server.
  public func primaryEndpoints() throws -> [RedisEndpoint] {
    guard let cluster else { return [endpoint] }
    return try cluster.primaries().map { cluster.endpoint($0) }
  }

  /// A client of one primary of a cluster (the cluster's own pool of it), or self for a
  /// single server: for commands that each node answers for itself (SCAN).
  public func client(forPrimary e: RedisEndpoint) -> RedisClient {
    guard let cluster, case .tcp(let h, let p) = e.address else { return self }
    return cluster.client(ClusterNode(host: h, port: p))
  }

  /// Connections opened so far (the first ones and every reconnect).
  public var connectCount: Int { counters.connects.load(ordering: .relaxed) }
  /// Commands sent again after a "not now" reply.
  public var retryCount: Int { counters.retries.load(ordering: .relaxed) }

  /// Whether the last connection opened speaks RESP3 (false before the first request).
  public var isRESP3: Bool { cond.withLock { resp3 } }

  /// Closes every connection (idle ones now, busy ones when their request ends).
  public func disconnect() {
    cluster?.disconnect()
    let closing: [RedisConnection] = cond.withLock {
      generation += 1
      let all = idle.map(\.connection)
      opened -= idle.count
      idle.removeAll()
      cond.broadcast()
      return all
    }
    for c in closing { c.close() }
  }

  // MARK: Requests

  /// Sends one command and returns its reply; an error reply is thrown as `.remoteError`.
  @discardableResult
  public func call(_ args: String..., idempotent: Bool = true) throws -> RESPValue {
    try call(args.map { Array($0.utf8) }, idempotent: idempotent)
  }

  /// Sends one command given as byte strings; an error reply is thrown as `.remoteError`.
  @discardableResult
  public func call(_ args: [[UInt8]], idempotent: Bool = true) throws -> RESPValue {
    let r = try pipeline([args], idempotent: idempotent)[0]
    if let msg = r.errorMessage { throw CacheError.remoteError(endpoint: endpoint.description, message: msg) }
    return r
  }

  /// Sends the commands in one write and returns one reply per command, in order (error
  /// replies as values, for the caller to look at one by one). A pipeline in which some
  /// reply is a "not now" error is sent again whole after a backoff (at most `maxRetries`
  /// times) when it is `idempotent` or when every reply was "not now" (nothing ran).
  public func pipeline(_ commands: [[[UInt8]]], idempotent: Bool = true) throws -> [RESPValue] {
    guard !commands.isEmpty else { return [] }
    if let cluster { return try cluster.pipeline(commands, idempotent: idempotent) }
    var attempt = 0
    var resent = false
    while true {
      let (c, gen) = try checkOut()
      let replies: [RESPValue]
      do {
        replies = try c.roundTrip(commands)
      } catch let e as CacheError {
        drop(c)
        if case .remoteUnavailable = e, idempotent, !resent {
          resent = true
          continue
        }
        throw e
      }
      checkIn(c, gen)
      // Sent again whole: only if it may be repeated, or if nothing in it was executed.
      guard attempt < options.maxRetries, replies.contains(where: { Self.isRetryable($0) }),
        idempotent || replies.allSatisfy({ Self.isRetryable($0) })
      else { return replies }
      attempt += 1
      counters.retries.add(1, ordering: .relaxed)
      Clock.sleep(nanoseconds: backoff(attempt))
    }
  }

  /// Whether a reply is an error that means "not now, try again".
  static func isRetryable(_ r: RESPValue) -> Bool {
    guard let m = r.errorMessage else { return false }
    return m.hasPrefix("LOADING") || m.hasPrefix("BUSY") || m.hasPrefix("TRYAGAIN") || m.hasPrefix("CLUSTERDOWN")
  }

  /// A pause of full jitter: uniform in 0 ... min(cap, base·2^attempt), in nanoseconds.
  private func backoff(_ attempt: Int) -> UInt64 {
    let ceiling = min(options.backoffCap, options.backoffBase * Double(1 << min(attempt, 20)))
    return UInt64(Double.random(in: 0...max(ceiling, 1e-6)) * 1e9)
  }

  // MARK: The pool

  /// An idle connection, or a new one when fewer than `poolSize` are open (waiting for
  /// one to come back otherwise, up to the connect timeout).
  private func checkOut() throws -> (RedisConnection, Int) {
    let deadline = Clock.nanoseconds() &+ UInt64(max(0.001, options.connectTimeout) * 1e9)
    cond.lock()
    while true {
      while let (c, gen) = idle.popLast() {
        if c.isOpen && gen == generation {
          cond.unlock()
          return (c, gen)
        }
        opened -= 1
        c.close()
      }
      if opened < options.poolSize {
        opened += 1
        let gen = generation
        cond.unlock()
        do {
          return (try connect(deadline: deadline), gen)
        } catch {
          cond.withLock {
            opened -= 1
            cond.signal()
          }
          throw error
        }
      }
      let now = Clock.nanoseconds()
      guard now < deadline,
        cond.wait(until: Date(timeIntervalSinceNow: Double(deadline - now) / 1e9)) || Clock.nanoseconds() < deadline
      else {
        cond.unlock()
        throw CacheError.remoteUnavailable(
          endpoint: endpoint.description,
          reason: "every pooled connection stayed busy for the connect timeout")
      }
    }
  }

  private func checkIn(_ c: RedisConnection, _ gen: Int) {
    cond.lock()
    if c.isOpen && gen == generation {
      idle.append((c, gen))
    } else {
      opened -= 1
      c.close()
    }
    cond.signal()
    cond.unlock()
  }

  private func drop(_ c: RedisConnection) {
    c.close()
    cond.withLock {
      opened -= 1
      cond.signal()
    }
  }

  /// Opens a connection, with backoff between attempts until `deadline`. The failure
  /// count is shared: the attempts of a long outage wait longer, whoever makes them.
  private func connect(deadline: UInt64) throws -> RedisConnection {
    while true {
      let failed = cond.withLock { failures }
      if failed > 0 {
        let now = Clock.nanoseconds()
        guard now < deadline else {
          throw CacheError.remoteUnavailable(
            endpoint: endpoint.description,
            reason: "no connection within the connect timeout (\(failed) attempts failed)")
        }
        Clock.sleep(nanoseconds: min(backoff(failed), (deadline - now) / 2))
      }
      do {
        let handler = pushHandler
        let c = try RedisConnection.open(endpoint, options, pushHandler: handler.map { h in { h($0) } })
        cond.withLock {
          failures = 0
          resp3 = c.resp3
        }
        counters.connects.add(1, ordering: .relaxed)
        return c
      } catch let e as CacheError {
        cond.withLock { failures += 1 }
        // A refused login or a bad reply will not mend by retrying.
        if case .remoteError = e { throw e }
        if case .protocolViolation = e { throw e }
        if Clock.nanoseconds() >= deadline { throw e }
      }
    }
  }
}

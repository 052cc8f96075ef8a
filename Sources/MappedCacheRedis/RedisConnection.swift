import Glibc
import MappedCache
import SystemCalls

/// One connection to a Redis server, owned by one thread at a time (`RedisClient` locks
/// around it). Blocking socket I/O with `SO_RCVTIMEO`/`SO_SNDTIMEO` set to the command
/// timeout: a request costs one `send` and usually one `recv`, with no `poll` in between
/// (non-blocking sockets would add a `poll` per reply); the connect alone is non-blocking
/// so that its own timeout holds, and `waitForPushes` polls first so that an idle holder
/// can wake on time. A reply that trickles in past the command's deadline is a timeout
/// too: the deadline is checked after every partial read.
///
/// Any I/O error, timeout or protocol violation closes the connection (`isOpen` false):
/// after a lost reply the stream can no longer be matched to requests.
final class RedisConnection {
  let endpoint: RedisEndpoint
  let options: RedisOptions
  private var fd: Int32
  private var parser: RESPParser
  /// Whether `HELLO 3` succeeded (pushes arrive in-band).
  private(set) var resp3 = false
  /// Called with every push (`>`) read while waiting for a reply or in `waitForPushes`.
  var pushHandler: ((RESPValue) -> Void)?
  private var readBuffer = [UInt8](repeating: 0, count: 64 << 10)

  var isOpen: Bool { fd >= 0 }
  private var name: String { endpoint.description }

  private init(endpoint: RedisEndpoint, options: RedisOptions, fd: Int32) {
    self.endpoint = endpoint
    self.options = options
    self.fd = fd
    self.parser = RESPParser(limits: options.limits, endpoint: endpoint.description)
  }

  deinit { close() }

  func close() {
    if fd >= 0 { SystemCall.close(fd) }
    fd = -1
  }

  // MARK: Connecting

  /// Connects, then `HELLO 3` (with AUTH and SETNAME), falling back to RESP2 (`AUTH`,
  /// `CLIENT SETNAME`) when the server does not know `HELLO`; then `SELECT`.
  static func open(
    _ endpoint: RedisEndpoint, _ options: RedisOptions,
    pushHandler: ((RESPValue) -> Void)? = nil
  ) throws -> RedisConnection {
    let deadline = Clock.nanoseconds() &+ UInt64(max(0.001, options.connectTimeout) * 1e9)
    let fd = try connectSocket(endpoint, deadline: deadline)
    let c = RedisConnection(endpoint: endpoint, options: options, fd: fd)
    c.pushHandler = pushHandler
    try c.setTimeouts(options.commandTimeout)
    try c.handshake()
    return c
  }

  private func handshake() throws {
    let e = endpoint
    if options.useRESP3 {
      var hello = ["HELLO", "3"]
      if let p = e.password { hello += ["AUTH", e.username ?? "default", p] }
      if let n = options.clientName { hello += ["SETNAME", n] }
      let r = try roundTrip([hello.map { Array($0.utf8) }])[0]
      if let msg = r.errorMessage {
        // Servers before 6 answer "unknown command"; a server without RESP3 "NOPROTO".
        let upper = msg.uppercased()
        guard upper.hasPrefix("ERR UNKNOWN COMMAND") || upper.hasPrefix("NOPROTO") else {
          close()
          throw CacheError.remoteError(endpoint: name, message: msg)
        }
      } else {
        resp3 = true
      }
    }
    var setup: [[String]] = []
    if !resp3 {
      if let p = e.password { setup.append(e.username.map { ["AUTH", $0, p] } ?? ["AUTH", p]) }
      if let n = options.clientName { setup.append(["CLIENT", "SETNAME", n]) }
    }
    if e.database != 0 { setup.append(["SELECT", String(e.database)]) }
    guard !setup.isEmpty else { return }
    for r in try roundTrip(setup.map { $0.map { Array($0.utf8) } }) {
      if let msg = r.errorMessage {
        close()
        throw CacheError.remoteError(endpoint: name, message: msg)
      }
    }
  }

  private static func connectSocket(_ endpoint: RedisEndpoint, deadline: UInt64) throws -> Int32 {
    let name = endpoint.description
    switch endpoint.address {
    case .unix(let path):
      guard let address = SocketAddress.unix(path) else {
        throw CacheError.invalidArgument("unix socket path \(path) is too long")
      }
      return try connect(to: address, family: AF_UNIX, name: name, deadline: deadline)
    case .tcp(let host, let port):
      let addresses: [ResolvedAddress]
      switch SystemCall.resolve(host, port: port) {
      case .success(let a): addresses = a
      case .failure(let e):
        throw CacheError.remoteUnavailable(endpoint: name, reason: "cannot resolve \(host): \(e.message)")
      }
      var lastError: Error = CacheError.remoteUnavailable(endpoint: name, reason: "no address")
      for a in addresses {
        do {
          return try connect(
            to: a.address, family: a.family, protocol: a.protocol, noDelay: true, name: name, deadline: deadline)
        } catch {
          lastError = error
        }
      }
      throw lastError
    }
  }

  /// A non-blocking socket connected to `address` by `deadline`, then made blocking.
  private static func connect(
    to address: SocketAddress, family: Int32, protocol: Int32 = 0, noDelay: Bool = false, name: String,
    deadline: UInt64
  ) throws -> Int32 {
    let fd: Int32
    do { fd = try SystemCall.socket(family: family, protocol: `protocol`, nonBlocking: true) } catch {
      throw unavailable(name, error)
    }
    do {
      if noDelay { try? SystemCall.setOption(fd, level: Int32(IPPROTO_TCP), TCP_NODELAY, 1) }
      if try !SystemCall.connect(fd, to: address) { try waitForConnect(fd, name, deadline) }
      try SystemCall.setBlocking(fd, true)
      return fd
    } catch {
      SystemCall.close(fd)
      if let e = error as? SystemError { throw unavailable(name, e) }
      throw error
    }
  }

  /// Waits for a non-blocking connect to finish by `deadline`.
  private static func waitForConnect(_ fd: Int32, _ name: String, _ deadline: UInt64) throws {
    while true {
      let now = Clock.nanoseconds()
      guard now < deadline else { throw CacheError.remoteUnavailable(endpoint: name, reason: "connect timed out") }
      let ms = Int32(min(UInt64(Int32.max), (deadline - now) / 1_000_000 + 1))
      if try SystemCall.poll(fd, events: Int32(POLLOUT), milliseconds: ms) != 0 { break }
    }
    let e = try SystemCall.socketError(fd)
    guard e == 0 else { throw SystemError(errno: e, operation: "connect") }
  }

  /// A failed system call as the error of an unreachable server ("connect: Connection refused").
  static func unavailable(_ name: String, _ e: SystemError) -> CacheError {
    .remoteUnavailable(endpoint: name, reason: "\(e.operation): \(e.code.message)")
  }

  private func setTimeouts(_ seconds: Double) throws {
    do { try SystemCall.setTimeouts(fd, seconds: seconds) } catch {
      close()
      throw Self.unavailable(name, error)
    }
  }

  // MARK: Requests

  /// Sends the commands in one write (a pipeline) and reads one reply per command, in
  /// order. Error replies are returned as values; pushes go to `pushHandler`.
  func roundTrip(_ commands: [[[UInt8]]]) throws -> [RESPValue] {
    guard isOpen else { throw CacheError.remoteUnavailable(endpoint: name, reason: "connection closed") }
    var out: [UInt8] = []
    for c in commands { RESPEncoder.appendCommand(c, to: &out) }
    try send(out)
    let deadline = Clock.nanoseconds() &+ UInt64(max(0.001, options.commandTimeout) * 1e9)
    var replies: [RESPValue] = []
    replies.reserveCapacity(commands.count)
    for _ in commands { replies.append(try readReply(deadline: deadline)) }
    return replies
  }

  /// Sends bytes already encoded (commands whose replies `readReply` will read).
  func send(_ bytes: [UInt8]) throws {
    guard isOpen else { throw CacheError.remoteUnavailable(endpoint: name, reason: "connection closed") }
    do { try SystemCall.sendAll(fd, bytes) } catch {
      close()
      throw error.code == .resourceTemporarilyUnavailable
        ? CacheError.remoteUnavailable(endpoint: name, reason: "send timed out")
        : Self.unavailable(name, error)
    }
  }

  /// The next reply that is not a push (pushes go to `pushHandler` on the way).
  func readReply(deadline: UInt64) throws -> RESPValue {
    while true {
      if let v = try nextValue() {
        if case .push = v.withoutAttributes, resp3 {
          pushHandler?(v.withoutAttributes)
          continue
        }
        return v
      }
      guard Clock.nanoseconds() < deadline else {
        close()
        throw CacheError.remoteUnavailable(endpoint: name, reason: "no reply within the command timeout")
      }
      try fill()
    }
  }

  /// Waits up to `timeout` seconds for data and hands every push that arrived to
  /// `pushHandler`; returns how many pushes it delivered. A reply that is not a push is
  /// a protocol violation here (nothing was asked).
  @discardableResult
  func waitForPushes(timeout: Double) throws -> Int {
    guard isOpen else { throw CacheError.remoteUnavailable(endpoint: name, reason: "connection closed") }
    var delivered = 0
    func drain() throws {
      while let v = try nextValue() {
        guard case .push = v.withoutAttributes else {
          close()
          throw CacheError.protocolViolation(endpoint: name, reason: "a reply nobody asked for")
        }
        pushHandler?(v.withoutAttributes)
        delivered += 1
      }
    }
    // Pushes already buffered (read with the last reply) are delivered at once: waiting
    // for more data first would hold them until the timeout.
    try drain()
    if delivered > 0 { return delivered }
    let ready: Int16
    do {
      ready = try SystemCall.poll(
        fd, events: Int32(POLLIN), milliseconds: Int32(max(0, min(Double(Int32.max), timeout * 1000))))
    } catch {
      close()
      throw Self.unavailable(name, error)
    }
    if ready != 0 {
      try fill()
      try drain()
    }
    return delivered
  }

  private func nextValue() throws -> RESPValue? {
    do { return try parser.next() } catch {
      close()
      throw error
    }
  }

  /// One `recv` into the parser (blocking up to SO_RCVTIMEO).
  private func fill() throws {
    let n: Int
    do { n = try SystemCall.receive(fd, into: &readBuffer) } catch {
      close()
      throw error.code == .wouldBlock
        ? CacheError.remoteUnavailable(endpoint: name, reason: "no reply within the command timeout")
        : Self.unavailable(name, error)
    }
    if n == 0 {
      close()
      throw CacheError.remoteUnavailable(endpoint: name, reason: "the server closed the connection")
    }
    readBuffer.withUnsafeBytes { parser.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
  }
}

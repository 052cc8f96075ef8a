import Glibc
import MappedCache

/// Monotonic clocks of this host (shared by every process: the near cache's fence).
@usableFromInline
enum Clock {
  /// CLOCK_MONOTONIC in nanoseconds.
  static func nanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
  }

  /// CLOCK_MONOTONIC in milliseconds.
  static func milliseconds() -> UInt64 { nanoseconds() / 1_000_000 }

  /// CLOCK_MONOTONIC_COARSE in milliseconds: the last tick's time (vDSO, no clock read:
  /// a few ns; behind the precise clock by at most one tick, 1-10 ms).
  @inlinable @inline(__always)
  static func coarseMilliseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
    return UInt64(ts.tv_sec) &* 1000 &+ UInt64(ts.tv_nsec) / 1_000_000
  }

  static func sleep(nanoseconds ns: UInt64) {
    var ts = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
    var left = timespec()
    while nanosleep(&ts, &left) == -1 && errno == EINTR { ts = left }
  }
}

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
    if fd >= 0 { Glibc.close(fd) }
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
      let fd = socket(
        AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
      guard fd >= 0 else { throw unavailable(name, "socket", errno) }
      var addr = sockaddr_un()
      addr.sun_family = sa_family_t(AF_UNIX)
      let bytes = Array(path.utf8)
      guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
        Glibc.close(fd)
        throw CacheError.invalidArgument("unix socket path \(path) is too long")
      }
      withUnsafeMutableBytes(of: &addr.sun_path) { p in
        p.copyBytes(from: bytes)
        p[bytes.count] = 0
      }
      let rc = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
      }
      return try finishConnect(fd, rc, name, deadline)
    case .tcp(let host, let port):
      var hints = addrinfo()
      hints.ai_family = AF_UNSPEC
      hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
      var list: UnsafeMutablePointer<addrinfo>? = nil
      let gai = getaddrinfo(host, String(port), &hints, &list)
      guard gai == 0, let first = list else {
        throw CacheError.remoteUnavailable(
          endpoint: name,
          reason: "cannot resolve \(host): \(String(cString: gai_strerror(gai)))")
      }
      defer { freeaddrinfo(list) }
      var lastError: Error = CacheError.remoteUnavailable(endpoint: name, reason: "no address")
      var ai: UnsafeMutablePointer<addrinfo>? = first
      while let a = ai {
        ai = a.pointee.ai_next
        let fd = socket(
          a.pointee.ai_family, a.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
          a.pointee.ai_protocol)
        guard fd >= 0 else {
          lastError = unavailable(name, "socket", errno)
          continue
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let rc = Glibc.connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen)
        do { return try finishConnect(fd, rc, name, deadline) } catch { lastError = error }
      }
      throw lastError
    }
  }

  /// Waits for a non-blocking connect to finish by `deadline`, then makes the socket blocking.
  private static func finishConnect(_ fd: Int32, _ rc: Int32, _ name: String, _ deadline: UInt64) throws -> Int32 {
    if rc != 0 {
      let e = errno
      guard e == EINPROGRESS || e == EAGAIN || e == EINTR else {
        Glibc.close(fd)
        throw unavailable(name, "connect", e)
      }
      while true {
        let now = Clock.nanoseconds()
        guard now < deadline else {
          Glibc.close(fd)
          throw CacheError.remoteUnavailable(endpoint: name, reason: "connect timed out")
        }
        var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        let n = poll(&p, 1, Int32(min(UInt64(Int32.max), (deadline - now) / 1_000_000 + 1)))
        if n < 0 && errno == EINTR { continue }
        if n > 0 { break }
        if n < 0 {
          let e = errno
          Glibc.close(fd)
          throw unavailable(name, "poll", e)
        }
      }
      var soError: Int32 = 0
      var len = socklen_t(MemoryLayout<Int32>.size)
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len)
      guard soError == 0 else {
        Glibc.close(fd)
        throw unavailable(name, "connect", soError)
      }
    }
    let flags = fcntl(fd, F_GETFL)
    _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)
    return fd
  }

  static func unavailable(_ name: String, _ op: String, _ e: Int32) -> CacheError {
    .remoteUnavailable(endpoint: name, reason: "\(op): \(String(cString: strerror(e)))")
  }

  private func setTimeouts(_ seconds: Double) throws {
    let s = max(0.001, seconds)
    var tv = timeval(tv_sec: Int(s), tv_usec: Int((s - Double(Int(s))) * 1e6))
    for opt in [SO_RCVTIMEO, SO_SNDTIMEO] {
      guard setsockopt(fd, SOL_SOCKET, opt, &tv, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
        let e = errno
        close()
        throw Self.unavailable(name, "setsockopt", e)
      }
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
    var offset = 0
    while offset < bytes.count {
      let n = bytes.withUnsafeBytes { p in
        Glibc.send(fd, p.baseAddress! + offset, p.count - offset, Int32(MSG_NOSIGNAL))
      }
      if n < 0 {
        let e = errno
        if e == EINTR { continue }
        close()
        throw e == EAGAIN
          ? CacheError.remoteUnavailable(endpoint: name, reason: "send timed out")
          : Self.unavailable(name, "send", e)
      }
      offset += n
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
    var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    let n = poll(&p, 1, Int32(max(0, min(Double(Int32.max), timeout * 1000))))
    if n > 0 {
      try fill()
      try drain()
    } else if n < 0 && errno != EINTR {
      let e = errno
      close()
      throw Self.unavailable(name, "poll", e)
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
    while true {
      let n = readBuffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
      if n > 0 {
        readBuffer.withUnsafeBytes { parser.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        return
      }
      if n == 0 {
        close()
        throw CacheError.remoteUnavailable(endpoint: name, reason: "the server closed the connection")
      }
      let e = errno
      if e == EINTR { continue }
      close()
      throw e == EAGAIN || e == EWOULDBLOCK
        ? CacheError.remoteUnavailable(endpoint: name, reason: "no reply within the command timeout")
        : Self.unavailable(name, "recv", e)
    }
  }
}

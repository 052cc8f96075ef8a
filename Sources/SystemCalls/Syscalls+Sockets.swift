import Glibc

/// A socket address: an IPv4 or IPv6 address and port, or a unix socket path, as the
/// kernel takes it (`sockaddr_storage` and its length).
package struct SocketAddress: Sendable {
  package var storage = sockaddr_storage()
  package var length: socklen_t

  /// An empty address of `length` bytes, for the calls that fill one in.
  init(length: socklen_t = socklen_t(MemoryLayout<sockaddr_storage>.size)) { self.length = length }

  /// The address family (`AF_INET`, `AF_INET6`, `AF_UNIX`).
  package var family: Int32 { Int32(storage.ss_family) }

  /// `host:port` for a numeric IPv4 address; nil when `host` is not one. The
  /// corresponding C function is `inet_pton`.
  package static func ipv4(_ host: String, port: UInt16) -> SocketAddress? {
    filled(sockaddr_in.self) { sa in
      sa.sin_family = sa_family_t(AF_INET)
      sa.sin_port = port.bigEndian
      return inet_pton(AF_INET, host, &sa.sin_addr) == 1
    }
  }

  /// `[host]:port` for a numeric IPv6 address (no brackets); nil when `host` is not one.
  /// The corresponding C function is `inet_pton`.
  package static func ipv6(_ host: String, port: UInt16) -> SocketAddress? {
    filled(sockaddr_in6.self) { sa in
      sa.sin6_family = sa_family_t(AF_INET6)
      sa.sin6_port = port.bigEndian
      return inet_pton(AF_INET6, host, &sa.sin6_addr) == 1
    }
  }

  /// 127.0.0.1:`port`.
  package static func loopback(port: UInt16) -> SocketAddress { ipv4("127.0.0.1", port: port)! }

  /// The unix socket at `path`; nil when the path does not fit `sun_path` (107 bytes).
  package static func unix(_ path: String) -> SocketAddress? {
    let bytes = Array(path.utf8)
    return filled(sockaddr_un.self) { sa in
      sa.sun_family = sa_family_t(AF_UNIX)
      return withUnsafeMutableBytes(of: &sa.sun_path) { p in
        guard bytes.count < p.count else { return false }
        p.copyBytes(from: bytes)
        p[bytes.count] = 0
        return true
      }
    }
  }

  /// An address of type `T` (`sockaddr_in`, ...) that `fill` sets; nil when it says no.
  private static func filled<T>(_ type: T.Type, _ fill: (inout T) -> Bool) -> SocketAddress? {
    var a = SocketAddress(length: socklen_t(MemoryLayout<T>.size))
    return a.withPointer(as: T.self) { fill(&$0.pointee) } ? a : nil
  }

  /// The port of an IPv4 or IPv6 address (0 for a unix socket).
  package var port: UInt16 {
    var copy = self
    switch family {
    case AF_INET: return copy.withPointer(as: sockaddr_in.self) { UInt16(bigEndian: $0.pointee.sin_port) }
    case AF_INET6: return copy.withPointer(as: sockaddr_in6.self) { UInt16(bigEndian: $0.pointee.sin6_port) }
    default: return 0
    }
  }

  mutating func withPointer<T, R>(as type: T.Type, _ body: (UnsafeMutablePointer<T>) -> R) -> R {
    withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: T.self, capacity: 1, body) }
  }

  mutating func withSockaddr<R>(_ body: (UnsafeMutablePointer<sockaddr>, inout socklen_t) -> R) -> R {
    var len = length
    let r = withUnsafeMutablePointer(to: &storage) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, &len) }
    }
    length = len
    return r
  }
}

/// One address `getaddrinfo` gave for a host: how to make its socket, and where to connect.
package struct ResolvedAddress: Sendable {
  package var family: Int32
  package var type: Int32
  package var `protocol`: Int32
  package var address: SocketAddress
}

extension SystemCall {
  /// A socket, close-on-exec, non-blocking when asked. The corresponding C function is `socket`.
  package static func socket(
    family: Int32, type: Int32 = Int32(SOCK_STREAM.rawValue), protocol: Int32 = 0, nonBlocking: Bool = false
  ) throws(SystemError) -> Int32 {
    let flags = Int32(SOCK_CLOEXEC.rawValue) | (nonBlocking ? Int32(SOCK_NONBLOCK.rawValue) : 0)
    let fd = Glibc.socket(family, type | flags, `protocol`)
    if fd < 0 { throw SystemError(errno: Glibc.errno, operation: "socket") }
    return fd
  }

  /// The addresses of `host` for a TCP connection to `port`, in the resolver's order; a
  /// failure is the resolver's own message. The corresponding C functions are
  /// `getaddrinfo`, `freeaddrinfo` and `gai_strerror`.
  package static func resolve(_ host: String, port: UInt16) -> Result<[ResolvedAddress], ResolverError> {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var list: UnsafeMutablePointer<addrinfo>? = nil
    let rc = getaddrinfo(host, String(port), &hints, &list)
    guard rc == 0, let first = list else { return .failure(ResolverError(message: String(cString: gai_strerror(rc)))) }
    defer { freeaddrinfo(list) }
    var out: [ResolvedAddress] = []
    var next: UnsafeMutablePointer<addrinfo>? = first
    while let a = next {
      next = a.pointee.ai_next
      guard let sa = a.pointee.ai_addr, Int(a.pointee.ai_addrlen) <= MemoryLayout<sockaddr_storage>.size else {
        continue
      }
      var address = SocketAddress(length: a.pointee.ai_addrlen)
      withUnsafeMutableBytes(of: &address.storage) {
        $0.copyMemory(from: UnsafeRawBufferPointer(start: sa, count: Int(a.pointee.ai_addrlen)))
      }
      out.append(
        ResolvedAddress(
          family: a.pointee.ai_family, type: a.pointee.ai_socktype, protocol: a.pointee.ai_protocol, address: address))
    }
    return .success(out)
  }

  /// Why a host name could not be resolved (`gai_strerror`'s text).
  package struct ResolverError: Error, Sendable {
    package var message: String
  }

  /// Connects `fd` to `address`. True when connected; false when a non-blocking connect
  /// goes on in the background (`EINPROGRESS`, or `EINTR`: an interrupted connect is not
  /// retried, it carries on by itself), to be waited for with `poll` and judged with
  /// `socketError`. The corresponding C function is `connect`.
  package static func connect(_ fd: Int32, to address: SocketAddress) throws(SystemError) -> Bool {
    var a = address
    if a.withSockaddr({ p, len in Glibc.connect(fd, p, len) }) == 0 { return true }
    let e = Glibc.errno
    if e == EINPROGRESS || e == EAGAIN || e == EINTR { return false }
    throw SystemError(errno: e, operation: "connect")
  }

  /// Binds `fd` to `address`, then returns the address it got (a port-0 request learns
  /// its port). The corresponding C functions are `bind` and `getsockname`.
  package static func bind(_ fd: Int32, to address: SocketAddress) throws(SystemError) -> SocketAddress {
    var a = address
    if a.withSockaddr({ p, len in Glibc.bind(fd, p, len) }) != 0 {
      throw SystemError(errno: Glibc.errno, operation: "bind")
    }
    return try localAddress(fd)
  }

  /// The address `fd` is bound to. The corresponding C function is `getsockname`.
  package static func localAddress(_ fd: Int32) throws(SystemError) -> SocketAddress {
    var a = SocketAddress()
    if a.withSockaddr({ p, len in getsockname(fd, p, &len) }) != 0 {
      throw SystemError(errno: Glibc.errno, operation: "getsockname")
    }
    return a
  }

  /// The corresponding C function is `listen`.
  package static func listen(_ fd: Int32, backlog: Int32) throws(SystemError) {
    if Glibc.listen(fd, backlog) != 0 { throw SystemError(errno: Glibc.errno, operation: "listen") }
  }

  /// A connection waiting on the listening socket `fd`, close-on-exec and non-blocking
  /// when asked; nil when none is waiting (`EAGAIN` on a non-blocking listener). The
  /// corresponding C function is `accept` (then `fcntl`: Glibc's module does not export
  /// `accept4`, and the flags may come second in a process that never execs while it
  /// accepts).
  package static func accept(_ fd: Int32, nonBlocking: Bool = false) throws(SystemError) -> Int32? {
    let c = retrying { Glibc.accept(fd, nil, nil) }
    if c < 0 {
      if Errno.current == .wouldBlock { return nil }
      throw SystemError(errno: Glibc.errno, operation: "accept")
    }
    _ = fcntl(c, F_SETFD, FD_CLOEXEC)
    if nonBlocking {
      do { try setBlocking(c, false) } catch {
        Glibc.close(c)
        throw error
      }
    }
    return c
  }

  /// Makes `fd` blocking or not (`O_NONBLOCK`). The corresponding C function is `fcntl`.
  package static func setBlocking(_ fd: Int32, _ blocking: Bool) throws(SystemError) {
    let flags = retrying { fcntl(fd, F_GETFL) }
    let wanted = blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK
    if flags < 0 || retrying({ fcntl(fd, F_SETFL, wanted) }) != 0 {
      throw SystemError(errno: Glibc.errno, operation: "fcntl(F_SETFL)")
    }
  }

  /// Sends from `bytes` (`MSG_NOSIGNAL`: a closed peer is `EPIPE`, not SIGPIPE); returns
  /// how many bytes went, which may be fewer. `EAGAIN` (a send timeout, or a full buffer
  /// of a non-blocking socket) is thrown for the caller to tell apart. The corresponding
  /// C function is `send`.
  package static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(SystemError) -> Int {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
    let n = retrying { Glibc.send(fd, base, bytes.count, Int32(MSG_NOSIGNAL)) }
    if n < 0 { throw SystemError(errno: Glibc.errno, operation: "send") }
    return n
  }

  /// Sends from `bytes[offset...]`; returns how many bytes went (see `send`).
  package static func send(_ fd: Int32, _ bytes: [UInt8], from offset: Int) throws(SystemError) -> Int {
    try bytes.withUnsafeBytes { p in
      Result { () throws(SystemError) in try send(fd, UnsafeRawBufferPointer(rebasing: p[offset...])) }
    }.get()
  }

  /// Sends all of `bytes`, however many calls it takes (see `send`).
  package static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws(SystemError) {
    var offset = 0
    while offset < bytes.count { offset += try send(fd, bytes, from: offset) }
  }

  /// Receives into `buffer`; returns how many bytes came, 0 when the peer closed.
  /// `EAGAIN` (a receive timeout, or nothing waiting on a non-blocking socket) is
  /// thrown for the caller to tell apart. The corresponding C function is `recv`.
  package static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int {
    let n = retrying { Glibc.recv(fd, buffer.baseAddress, buffer.count, 0) }
    if n < 0 { throw SystemError(errno: Glibc.errno, operation: "recv") }
    return n
  }

  /// Receives into the whole of `buffer` (see `receive(_:into:)` for a raw buffer).
  package static func receive(_ fd: Int32, into buffer: inout [UInt8]) throws(SystemError) -> Int {
    try buffer.withUnsafeMutableBytes { b in Result { () throws(SystemError) in try receive(fd, into: b) } }.get()
  }

  /// Waits up to `milliseconds` (-1: no limit) for the events asked in `fds`; returns
  /// how many descriptors have some. A wait that a signal interrupts returns 0, as a
  /// timeout does, rather than waiting again: callers loop with their own deadline and
  /// may have a flag to check that the signal set. The corresponding C function is `poll`.
  package static func poll(_ fds: inout [pollfd], milliseconds: Int32) throws(SystemError) -> Int {
    let n = Glibc.poll(&fds, nfds_t(fds.count), milliseconds)
    if n < 0 {
      if Errno.current == .interrupted { return 0 }
      throw SystemError(errno: Glibc.errno, operation: "poll")
    }
    return Int(n)
  }

  /// Waits up to `milliseconds` for `events` on one descriptor; its `revents` (0 when
  /// the time ran out or a signal came). The corresponding C function is `poll`.
  package static func poll(_ fd: Int32, events: Int32, milliseconds: Int32) throws(SystemError) -> Int16 {
    var fds = [pollfd(fd: fd, events: Int16(events), revents: 0)]
    return try poll(&fds, milliseconds: milliseconds) > 0 ? fds[0].revents : 0
  }

  /// Shuts the socket down for writing (`SHUT_WR`), or both ways. Errors are ignored:
  /// a socket already reset is shut either way. The corresponding C function is `shutdown`.
  package static func shutdown(_ fd: Int32, writesOnly: Bool) {
    _ = Glibc.shutdown(fd, Int32(writesOnly ? SHUT_WR : SHUT_RDWR))
  }

  /// Sets an `Int32` socket option (`SO_REUSEADDR`, `TCP_NODELAY`, ...). The
  /// corresponding C function is `setsockopt`.
  package static func setOption(_ fd: Int32, level: Int32, _ option: Int32, _ value: Int32) throws(SystemError) {
    try setOption(fd, level: level, option, value, name: "setsockopt")
  }

  /// Sets the send and receive timeouts of a blocking socket (`SO_SNDTIMEO`,
  /// `SO_RCVTIMEO`): a call that waits longer fails with `EAGAIN`. The corresponding C
  /// function is `setsockopt`.
  package static func setTimeouts(_ fd: Int32, seconds: Double) throws(SystemError) {
    let s = max(0.001, seconds)
    let tv = timeval(tv_sec: Int(s), tv_usec: Int((s - Double(Int(s))) * 1e6))
    for opt in [SO_RCVTIMEO, SO_SNDTIMEO] { try setOption(fd, level: SOL_SOCKET, opt, tv, name: "setsockopt") }
  }

  /// Makes `close` reset the connection (RST) instead of ending it (`SO_LINGER` with a
  /// zero timeout). The corresponding C function is `setsockopt`.
  package static func setResetOnClose(_ fd: Int32) {
    try? setOption(fd, level: SOL_SOCKET, SO_LINGER, linger(l_onoff: 1, l_linger: 0), name: "setsockopt")
  }

  private static func setOption<T: BitwiseCopyable>(
    _ fd: Int32, level: Int32, _ option: Int32, _ value: T, name: String
  )
    throws(SystemError)
  {
    var v = value
    if Glibc.setsockopt(fd, level, option, &v, socklen_t(MemoryLayout<T>.size)) != 0 {
      throw SystemError(errno: Glibc.errno, operation: name)
    }
  }

  /// The error a non-blocking connect ended with (0: connected). The corresponding C
  /// function is `getsockopt(SO_ERROR)`.
  package static func socketError(_ fd: Int32) throws(SystemError) -> Int32 {
    var value: Int32 = 0
    var len = socklen_t(MemoryLayout<Int32>.size)
    if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &len) != 0 {
      throw SystemError(errno: Glibc.errno, operation: "getsockopt(SO_ERROR)")
    }
    return value
  }
}

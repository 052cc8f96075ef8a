import Glibc
import SystemCalls

/// Where `stats --serve` listens: a numeric IPv4 or IPv6 address and a TCP port.
struct ListenAddress: Equatable, CustomStringConvertible {
  /// The numeric address, without brackets ("127.0.0.1", "::1").
  var host: String
  var port: UInt16
  var isIPv6: Bool

  var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

  /// Parses `HOST:PORT`, `[IPV6]:PORT` or `:PORT`. HOST is a numeric address or
  /// `localhost`; it defaults to 127.0.0.1 (loopback: only this host can scrape), so
  /// exposing the figures to other hosts takes an explicit `0.0.0.0:PORT` or `[::]:PORT`.
  /// Names other than localhost are refused rather than looked up. PORT 0 picks a free
  /// port (the tool prints the one it got). Returns a message saying what is wrong.
  static func parse(_ text: String) -> Result<ListenAddress, Message> {
    let host: String
    let portText: Substring
    if text.hasPrefix("[") {
      guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
        return .failure(Message("an IPv6 address needs brackets and a port, like [::1]:9464"))
      }
      host = String(text[text.index(after: text.startIndex)..<close])
      portText = text[text.index(close, offsetBy: 2)...]
    } else {
      guard let colon = text.lastIndex(of: ":") else {
        return .failure(Message("the port is missing (HOST:PORT or :PORT)"))
      }
      host = String(text[..<colon])
      portText = text[text.index(after: colon)...]
      if host.contains(":") { return .failure(Message("put an IPv6 address in brackets, like [::1]:9464")) }
    }
    guard !portText.isEmpty, portText.allSatisfy({ $0.isASCII && $0.isNumber }), let port = UInt16(portText) else {
      return .failure(Message("the port must be a number from 0 to 65535, not '\(portText)'"))
    }
    if host.isEmpty || host == "localhost" {
      return .success(ListenAddress(host: "127.0.0.1", port: port, isIPv6: false))
    }
    if !text.hasPrefix("["), SocketAddress.ipv4(host, port: port) != nil {
      return .success(ListenAddress(host: host, port: port, isIPv6: false))
    }
    if text.hasPrefix("["), SocketAddress.ipv6(host, port: port) != nil {
      return .success(ListenAddress(host: host, port: port, isIPv6: true))
    }
    return .failure(Message("'\(host)' is not a numeric IPv4 address, a bracketed IPv6 address or localhost"))
  }

  struct Message: Error {
    var text: String
    init(_ t: String) { text = t }
  }

  /// The socket address (the host was checked by `parse`).
  var socketAddress: SocketAddress? {
    isIPv6 ? SocketAddress.ipv6(host, port: port) : SocketAddress.ipv4(host, port: port)
  }
}

/// A small HTTP/1.1 server for a few read-only pages: one request per connection
/// (`Connection: close`), every connection served concurrently from one thread with
/// `poll(2)`, so a slow or stalled client never holds up a scrape.
///
/// What it guarantees, whatever a client sends:
/// - a request head (request line and headers) is at most `maxHeadBytes`; a longer one
///   gets `431 Request Header Fields Too Large` without reading the rest;
/// - a head must arrive within `headTimeout` seconds of the connection (else `408`), and
///   a response must be taken within `writeTimeout` seconds (else the connection is closed);
/// - at most `maxConnections` are open at once: a new one beyond that closes the oldest
///   still sending its head;
/// - a malformed request gets `400`, a version other than 1.0/1.1 `505`, a method other
///   than GET or HEAD `405` with `Allow: GET, HEAD`, an unknown path `404`;
/// - after its response, a connection is shut down for writing and drained briefly, so
///   unread request bytes (a body) cannot turn the close into a reset that loses the response.
final class HTTPServer {
  struct Request {
    var method: String
    /// The path, without the query.
    var path: String
  }

  struct Response {
    var status: Int
    var contentType = "text/plain; charset=utf-8"
    var extraHeaders: [(String, String)] = []
    var body: [UInt8]

    init(
      status: Int, contentType: String = "text/plain; charset=utf-8", extraHeaders: [(String, String)] = [],
      body: String
    ) {
      self.status = status
      self.contentType = contentType
      self.extraHeaders = extraHeaders
      self.body = Array(body.utf8)
    }
  }

  static let maxHeadBytes = 8 << 10
  static let headTimeout = 5.0
  static let writeTimeout = 10.0
  static let lingerTimeout = 1.0
  static let maxConnections = 64

  private enum Phase { case reading, writing, draining }

  private struct Connection {
    var fd: Int32
    var phase = Phase.reading
    var input: [UInt8] = []
    var output: [UInt8] = []
    var sent = 0
    var deadline: Double
    var opened: Double
  }

  private let listener: Int32
  let address: ListenAddress
  private let routes: (Request) -> Response?
  private var connections: [Connection] = []
  /// Set when `accept` ran out of descriptors: the listener is left out of `poll` until
  /// then, instead of waking it at once again and again while none is free.
  private var acceptPausedUntil = 0.0

  /// Binds and listens on `address`; `routes` answers GET and HEAD requests (nil: 404).
  init(address: ListenAddress, routes: @escaping (Request) -> Response?) throws(CLIFailure) {
    let fd: Int32
    do { fd = try SystemCall.socket(family: address.isIPv6 ? AF_INET6 : AF_INET, nonBlocking: true) } catch {
      throw .failed("cannot make a socket: \(error.code.message)")
    }
    try? SystemCall.setOption(fd, level: SOL_SOCKET, SO_REUSEADDR, 1)
    var bound = address
    do {
      // A port-0 request learns the port it got from the address bound.
      bound.port = try SystemCall.bind(fd, to: address.socketAddress ?? SocketAddress.loopback(port: address.port)).port
      try SystemCall.listen(fd, backlog: 128)
    } catch {
      SystemCall.close(fd)
      throw .failed("cannot listen on \(address): \(error.code.message)")
    }
    listener = fd
    self.address = bound
    self.routes = routes
  }

  deinit {
    for c in connections { SystemCall.close(c.fd) }
    SystemCall.close(listener)
  }

  /// Serves until `stop()` returns true; it is checked at least every 200 ms and right
  /// after a signal interrupts `poll`.
  func run(until stop: () -> Bool) throws(CLIFailure) {
    while !stop() {
      var now = Clock.seconds()
      var fds = [pollfd(fd: now < acceptPausedUntil ? -1 : listener, events: Int16(POLLIN), revents: 0)]
      for c in connections {
        fds.append(pollfd(fd: c.fd, events: Int16(c.phase == .writing ? POLLOUT : POLLIN), revents: 0))
      }
      let soonest = connections.map(\.deadline).min() ?? now + 0.2
      let timeout = Int32(max(0, min(0.2, soonest - now)) * 1000) + 1
      // A signal makes `poll` return with nothing ready: `stop()` is checked next.
      do { _ = try SystemCall.poll(&fds, milliseconds: timeout) } catch {
        throw .failed("poll failed: \(error.code.message)")
      }
      now = Clock.seconds()
      // Connections first (their indexes match `fds` until the list changes), then new ones.
      for i in connections.indices.reversed() where fds[i + 1].revents != 0 || connections[i].deadline <= now {
        if !service(&connections[i], events: fds[i + 1].revents, now: now) {
          SystemCall.close(connections[i].fd)
          connections.remove(at: i)
        }
      }
      if fds[0].revents != 0 { acceptNew(now: now) }
    }
  }

  private func acceptNew(now: Double) {
    while true {
      let fd: Int32
      do {
        // nil: no more waiting.
        guard let accepted = try SystemCall.accept(listener) else { return }
        fd = accepted
      } catch {
        // Out of descriptors: wait for some to close.
        if error.code == .tooManyOpenFiles || error.code == .tooManyOpenFilesInSystem { acceptPausedUntil = now + 0.1 }
        return
      }
      do { try SystemCall.setBlocking(fd, false) } catch {
        SystemCall.close(fd)
        continue
      }
      if connections.count >= Self.maxConnections {
        // Full: give up on the oldest client still sending its head (the likeliest to be stalled).
        if let oldest = connections.indices.filter({ connections[$0].phase == .reading })
          .min(by: { connections[$0].opened < connections[$1].opened })
        {
          SystemCall.close(connections[oldest].fd)
          connections.remove(at: oldest)
        } else {
          SystemCall.close(fd)
          continue
        }
      }
      connections.append(Connection(fd: fd, deadline: now + Self.headTimeout, opened: now))
    }
  }

  /// Moves one connection along; false when it is finished and must be closed.
  private func service(_ c: inout Connection, events: Int16, now: Double) -> Bool {
    switch c.phase {
    case .reading:
      if c.deadline > now {
        var chunk = [UInt8](repeating: 0, count: 4096)
        let n: Int
        do { n = try SystemCall.receive(c.fd, into: &chunk) } catch { return error.code == .wouldBlock }
        if n == 0 {
          // The client half-closed (or closed) before a whole head arrived.
          if c.input.isEmpty { return false }
          respond(&c, Response(status: 400, body: "the request ended before its headers did\n"), head: false, now: now)
          return true
        }
        let searchFrom = max(0, c.input.count - 3)
        c.input.append(contentsOf: chunk[0..<n])
        if let end = Self.endOfHead(c.input, from: searchFrom), end <= Self.maxHeadBytes {
          let (response, isHead) = answer(c.input[0..<end])
          respond(&c, response, head: isHead, now: now)
        } else if c.input.count > Self.maxHeadBytes {
          respond(
            &c, Response(status: 431, body: "the request head is longer than \(Self.maxHeadBytes) bytes\n"),
            head: false, now: now)
        }
        return true
      }
      respond(
        &c, Response(status: 408, body: "the request took longer than \(Int(Self.headTimeout)) seconds\n"),
        head: false, now: now)
      return true
    case .writing:
      // A client that takes longer than the deadline to read its answer loses it, however
      // little it reads at a time.
      if c.deadline <= now { return false }
      if events & Int16(POLLERR | POLLHUP) != 0 && events & Int16(POLLOUT) == 0 { return false }
      do { c.sent += try SystemCall.send(c.fd, c.output, from: c.sent) } catch { return error.code == .wouldBlock }
      if c.sent == c.output.count {
        SystemCall.shutdown(c.fd, writesOnly: true)
        c.phase = .draining
        c.output = []
        c.input = []
        c.deadline = now + Self.lingerTimeout
      }
      return true
    case .draining:
      if c.deadline <= now { return false }
      var chunk = [UInt8](repeating: 0, count: 4096)
      do { return try SystemCall.receive(c.fd, into: &chunk) > 0 } catch { return error.code == .wouldBlock }
    }
  }

  private func respond(_ c: inout Connection, _ r: Response, head: Bool, now: Double) {
    var text = "HTTP/1.1 \(r.status) \(Self.reason(r.status))\r\n"
    text += "Content-Type: \(r.contentType)\r\nContent-Length: \(r.body.count)\r\n"
    for (name, value) in r.extraHeaders { text += "\(name): \(value)\r\n" }
    text += "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    c.output = Array(text.utf8) + (head ? [] : r.body)
    c.sent = 0
    c.phase = .writing
    c.deadline = now + Self.writeTimeout
  }

  /// The index just past the blank line ending the head (CRLF CRLF, or a bare LF LF).
  static func endOfHead(_ b: [UInt8], from start: Int) -> Int? {
    var i = start
    while i < b.count {
      if b[i] == 10 {
        if i + 1 < b.count, b[i + 1] == 10 { return i + 2 }
        if i + 2 < b.count, b[i + 1] == 13, b[i + 2] == 10 { return i + 3 }
      }
      i += 1
    }
    return nil
  }

  /// Parses a whole request head and picks the response; the flag says whether it was a
  /// HEAD request (the body is then left out, its length kept).
  func answer(_ head: ArraySlice<UInt8>) -> (Response, Bool) {
    func bad(_ why: String) -> (Response, Bool) { (Response(status: 400, body: why + "\n"), false) }
    // Visible ASCII, spaces and tabs only (plus the line ends): no NULs, no other control bytes.
    guard head.allSatisfy({ $0 == 9 || $0 == 10 || $0 == 13 || (32...126).contains($0) }) else {
      return bad("the request head holds bytes that are not printable ASCII")
    }
    // Split on LF bytes, not Characters: Swift reads CR LF as one Character.
    var lines = head.split(separator: 10, omittingEmptySubsequences: false).map { line in
      String(decoding: line.last == 13 ? line.dropLast() : line, as: UTF8.self)
    }
    while lines.last?.isEmpty == true { lines.removeLast() }
    guard let requestLine = lines.first else { return bad("the request line is missing") }
    let parts = requestLine.split(separator: " ", omittingEmptySubsequences: false)
    guard parts.count == 3, !parts[0].isEmpty, parts[0].allSatisfy(Self.isTokenCharacter), !parts[1].isEmpty else {
      return bad("the request line must be METHOD TARGET HTTP/1.1")
    }
    let method = String(parts[0])
    let target = parts[1]
    let version = parts[2]
    guard version.wholeMatch(of: /HTTP\/[0-9]\.[0-9]/) != nil else { return bad("'\(version)' is not an HTTP version") }
    guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
      return (Response(status: 505, body: "this server speaks HTTP/1.1 and HTTP/1.0 only\n"), false)
    }
    var hasHost = false
    for line in lines.dropFirst() {
      guard let colon = line.firstIndex(of: ":"), colon != line.startIndex,
        line[..<colon].allSatisfy(Self.isTokenCharacter)
      else {
        return bad("malformed header line")
      }
      if line[..<colon].lowercased() == "host" {
        if hasHost { return bad("more than one Host header") }
        hasHost = true
      }
    }
    if version == "HTTP/1.1" && !hasHost { return bad("an HTTP/1.1 request needs a Host header") }
    guard method == "GET" || method == "HEAD" else {
      return (
        Response(status: 405, extraHeaders: [("Allow", "GET, HEAD")], body: "only GET and HEAD are served\n"), false
      )
    }
    // The absolute form (http://host/path, which proxies send) names the same path.
    var pathPart = target
    if target.lowercased().hasPrefix("http://") {
      let afterScheme = target.dropFirst(7)
      pathPart = afterScheme.firstIndex(of: "/").map { afterScheme[$0...] } ?? "/"
    }
    guard pathPart.hasPrefix("/") else { return bad("the target must be a path starting with /") }
    let path = String(pathPart.prefix { $0 != "?" && $0 != "#" })
    let response =
      routes(Request(method: method, path: path))
      ?? Response(status: 404, body: "no page at \(path)\n")
    return (response, method == "HEAD")
  }

  /// RFC 9110 token characters: letters, digits and !#$%&'*+-.^_`|~
  static func isTokenCharacter(_ c: Character) -> Bool {
    guard let a = c.asciiValue else { return false }
    return (a >= 48 && a <= 57) || (a >= 65 && a <= 90) || (a >= 97 && a <= 122) || "!#$%&'*+-.^_`|~".utf8.contains(a)
  }

  static func reason(_ status: Int) -> String {
    switch status {
    case 200: return "OK"
    case 400: return "Bad Request"
    case 404: return "Not Found"
    case 405: return "Method Not Allowed"
    case 408: return "Request Timeout"
    case 431: return "Request Header Fields Too Large"
    case 500: return "Internal Server Error"
    case 503: return "Service Unavailable"
    case 505: return "HTTP Version Not Supported"
    default: return "Status"
    }
  }
}

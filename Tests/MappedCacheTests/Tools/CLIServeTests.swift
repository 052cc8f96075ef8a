import CheckedValues
import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// `mapped-cache stats PATH --serve ADDRESS`, run as a child process on a free port of
/// the loopback interface: what Prometheus scrapes, and what the server answers to
/// requests that are malformed, oversized, slow, half-closed or not GET.
@Suite(.serialized) struct CLIServeTests {
  // MARK: The server as a child process

  /// A running `stats --serve` and the port it reported on its first line of output.
  final class Server {
    let child: ChildProcess
    let port: UInt16
    let host: String

    init(_ path: String, address: String = "127.0.0.1:0") throws {
      child = try ChildProcess(
        TestFiles.binary("mapped-cache"), ["stats", path, "--serve", address], stderr: .discarded)
      // "serving http://127.0.0.1:PORT/metrics for PATH (Ctrl-C to stop)"
      _ = child.waitForOutput(timeout: 30) { $0.contains("\n") }
      let text = child.stdout
      guard let m = text.firstMatch(of: #/serving http://(\[[0-9a-f:]+\]|[0-9.]+):([0-9]+)/metrics for /#),
        let port = UInt16(m.2)
      else {
        child.kill(SIGTERM)
        throw ServeError("the server did not announce its port: '\(text)'")
      }
      self.port = port
      self.host = String(m.1).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
    }

    /// Stops it with `signal`; true when it then exited 0 (not by the signal).
    func stop(_ signal: Int32 = SIGTERM) -> Bool {
      child.kill(signal)
      return child.finish(timeout: 10).ok
    }

    deinit {
      child.kill()
      child.wait()
    }
  }

  struct ServeError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
  }

  // MARK: A raw HTTP client

  /// A TCP connection to the server, with a receive timeout so no test can hang.
  final class Connection {
    let fd: Int32

    init(host: String = "127.0.0.1", port: UInt16) throws {
      // A numeric host of either family (`127.0.0.1`, `::1`), no name lookup.
      var hints = addrinfo()
      hints.ai_family = AF_UNSPEC
      hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
      hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV
      var found: UnsafeMutablePointer<addrinfo>?
      let looked = getaddrinfo(host, String(port), &hints, &found)
      guard looked == 0, let address = found?.pointee else { throw ServeError("address \(host): \(looked)") }
      defer { freeaddrinfo(found) }
      fd = socket(address.ai_family, address.ai_socktype, address.ai_protocol)
      guard fd >= 0 else { throw ServeError("socket: \(errno)") }
      var tv = timeval(tv_sec: 15, tv_usec: 0)
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
      guard connect(fd, address.ai_addr, address.ai_addrlen) == 0 else {
        close(fd)
        throw ServeError("connect to port \(port): errno \(errno)")
      }
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) {
      var done = 0
      while done < bytes.count {
        let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + done, $0.count - done, Int32(MSG_NOSIGNAL)) }
        if n <= 0 { return }  // the server may close early (e.g. after a 431); what it answered is what counts
        done += n
      }
    }

    func send(_ s: String) { send(Array(s.utf8)) }

    func halfClose() { shutdown(fd, Int32(SHUT_WR)) }

    /// Everything until the server closes (or the timeout).
    func receiveAll() -> [UInt8] {
      var out: [UInt8] = []
      var chunk = [UInt8](repeating: 0, count: 16384)
      while true {
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n <= 0 { return out }
        out += chunk[0..<n]
      }
    }
  }

  struct Reply {
    var status: Int
    var headers: [String: String]  // lowercased names
    var body: String
  }

  /// Parses a whole HTTP/1.1 response, checking its framing: the status line, one header
  /// per line, and a body exactly `Content-Length` long (empty after HEAD).
  static func parseReply(_ bytes: [UInt8], head: Bool = false) throws -> Reply {
    let text = String(decoding: bytes, as: UTF8.self)
    guard let split = text.range(of: "\r\n\r\n") else { throw ServeError("no end of head in '\(text)'") }
    let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
    guard let m = lines[0].wholeMatch(of: /HTTP\/1\.1 ([0-9]{3}) [A-Za-z ]+/), let status = Int(m.1) else {
      throw ServeError("bad status line '\(lines[0])'")
    }
    var headers: [String: String] = [:]
    for l in lines.dropFirst() {
      guard let colon = l.firstIndex(of: ":") else { throw ServeError("bad header '\(l)'") }
      headers[l[..<colon].lowercased()] = l[l.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    let body = String(text[split.upperBound...])
    guard let length = headers["content-length"].flatMap({ Int($0) }) else { throw ServeError("no Content-Length") }
    #expect(body.utf8.count == (head ? 0 : length), "body length vs Content-Length \(length)")
    #expect(headers["connection"] == "close")
    return Reply(status: status, headers: headers, body: body)
  }

  static func exchange(_ port: UInt16, _ request: String, host: String = "127.0.0.1") throws -> Reply {
    let c = try Connection(host: host, port: port)
    c.send(request)
    return try parseReply(c.receiveAll(), head: request.hasPrefix("HEAD "))
  }

  static func get(_ port: UInt16, _ path: String, host: String = "127.0.0.1") throws -> Reply {
    try exchange(port, "GET \(path) HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n", host: host)
  }

  // MARK: The Prometheus text format

  /// Checks every line of an exposition against the text format 0.0.4: `# HELP name
  /// text`, `# TYPE name type` (once per name, before its samples), and samples
  /// `name{label="value",...} value` with valid names, escaped label values and a float
  /// value; a counter's samples end in `_total` here. Returns each sample's value by
  /// name (labels ignored: every series here has just the `path` label).
  static func parsePrometheus(_ text: String, path: String) throws -> [String: Double] {
    #expect(text.hasSuffix("\n"), "the exposition ends with a newline")
    let name = /[a-zA-Z_:][a-zA-Z0-9_:]*/
    var typed: [String: String] = [:]
    var helped: Set<String> = []
    var samples: [String: Double] = [:]
    for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
      let l = String(line)
      if let m = l.wholeMatch(of: /# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) ((?:[^\\\n]|\\\\|\\n)*)/) {
        #expect(helped.insert(String(m.1)).inserted, "HELP twice for \(m.1)")
        #expect(!m.2.isEmpty, "empty HELP for \(m.1)")
      } else if let m = l.wholeMatch(of: /# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)/)
      {
        #expect(typed[String(m.1)] == nil, "TYPE twice for \(m.1)")
        #expect(samples[String(m.1)] == nil, "TYPE after the samples of \(m.1)")
        typed[String(m.1)] = String(m.2)
      } else if l.hasPrefix("#") {
        throw ServeError("a comment that is neither HELP nor TYPE: '\(l)'")
      } else {
        guard let m = l.wholeMatch(of: /([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)( -?[0-9]+)?/) else {
          throw ServeError("not a sample line: '\(l)'")
        }
        let metric = String(m.1)
        #expect(metric.wholeMatch(of: name) != nil)
        if let labels = m.2 {
          let inner = labels.dropFirst().dropLast()
          let pairs = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)",?/
          var rest = Substring(inner)
          var seen: [String: String] = [:]
          while !rest.isEmpty {
            guard let p = rest.prefixMatch(of: pairs) else { throw ServeError("bad labels in '\(l)'") }
            seen[String(p.1)] = String(p.2)
            rest = rest[p.range.upperBound...]
          }
          #expect(seen == ["path": path], "labels of \(metric)")
        }
        let valueText = String(m.3)
        let value: Double
        switch valueText {
        case "NaN": value = .nan
        case "+Inf": value = .infinity
        case "-Inf": value = -.infinity
        default:
          guard valueText.wholeMatch(of: /[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?/) != nil,
            let v = Double(valueText)
          else { throw ServeError("bad value in '\(l)'") }
          value = v
        }
        guard let type = typed[metric] else { throw ServeError("sample before its TYPE: '\(l)'") }
        #expect(helped.contains(metric), "no HELP for \(metric)")
        if type == "counter" { #expect(metric.hasSuffix("_total") && value >= 0, "counter \(metric)") }
        #expect(samples[metric] == nil, "two samples of \(metric) with the same labels")
        samples[metric] = value
      }
    }
    #expect(Set(typed.keys) == Set(samples.keys), "every TYPE has a sample")
    return samples
  }

  // MARK: Tests

  @Test func scrapesParseAsPrometheusAndFollowWrites() throws {
    let path = TestFiles.tempPath("serve")
    defer { TestFiles.cleanup(path) }
    let cache = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
    try cache.setObject([1], forKey: "warm")
    let server = try Server(path)

    let first = try Self.get(server.port, "/metrics")
    #expect(first.status == 200)
    #expect(first.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
    let before = try Self.parsePrometheus(first.body, path: path)
    #expect(before["mappedcache_entries"] == 1)
    #expect(before["mappedcache_capacity_bytes"] == Double(4 << 20))
    for name in ["hits_total", "misses_total", "sets_total", "evictions_total", "hit_ratio", "processes"] {
      #expect(before["mappedcache_" + name] != nil, "\(name) is served")
    }
    #expect(before["mappedcache_write_lock_holder_pid"] == 0, "nobody holds the lock between writes")

    // Figures are read afresh at each scrape.
    for i in 0..<7 { try cache.setObject([UInt8](repeating: UInt8(i), count: 100), forKey: "k\(i)") }
    for i in 0..<3 { _ = try cache.object(forKey: "k\(i)") }
    _ = try cache.object(forKey: "absent")
    let after = try Self.parsePrometheus(try Self.get(server.port, "/metrics").body, path: path)
    #expect(after["mappedcache_entries"] == 8)
    #expect(after["mappedcache_sets_total"] == before["mappedcache_sets_total"]! + 7)
    #expect(after["mappedcache_hits_total"] == before["mappedcache_hits_total"]! + 3)
    #expect(after["mappedcache_misses_total"] == before["mappedcache_misses_total"]! + 1)
    #expect(after["mappedcache_live_bytes"]! > before["mappedcache_live_bytes"]! + 700)

    // HEAD: the same headers, no body; a query string is ignored; / is a short page.
    let head = try Self.exchange(server.port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    #expect(head.status == 200 && head.body.isEmpty)
    #expect(Int(head.headers["content-length"] ?? "") ?? 0 > 1000)
    #expect(try Self.get(server.port, "/metrics?x=1").status == 200)
    let index = try Self.get(server.port, "/")
    #expect(index.status == 200 && index.headers["content-type"] == "text/plain; charset=utf-8")
    #expect(index.body.contains("/metrics") && index.body.contains(path))
    // HTTP/1.0 needs no Host header.
    #expect(try Self.exchange(server.port, "GET /metrics HTTP/1.0\r\n\r\n").status == 200)

    // A file removed and created again is followed; while the path holds none, 503.
    #expect(cache.statistics.entries == 8)  // the server left the file as it was
    unlink(path)
    let gone = try Self.get(server.port, "/metrics")
    #expect(gone.status == 503 && gone.body.contains("no longer exists"), "\(gone.status) \(gone.body)")
    let again = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    try again.setObject([1, 2], forKey: "only")
    let renewed = try Self.parsePrometheus(try Self.get(server.port, "/metrics").body, path: path)
    #expect(renewed["mappedcache_entries"] == 1 && renewed["mappedcache_capacity_bytes"] == Double(2 << 20))

    #expect(server.stop(SIGTERM), "SIGTERM stops the server with exit 0")
  }

  @Test func malformedRequestsGetClearAnswersAndServingGoesOn() throws {
    let path = TestFiles.tempPath("serve-bad")
    defer { TestFiles.cleanup(path) }
    _ = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
    let server = try Server(path)
    let port = server.port
    func servesMetrics(_ after: String) throws {
      let r = try Self.get(port, "/metrics")
      #expect(r.status == 200 && r.body.contains("mappedcache_entries"), "after \(after)")
    }

    // A stalled client (slowloris) that never finishes its head: it must not block scrapes,
    // and it is answered 408 when its time is up.
    let stalled = try Connection(port: port)
    stalled.send("GET /metrics HTTP/1.1\r\nHost: loc")
    try servesMetrics("a stalled client")

    let cases: [(String, [UInt8], Int)] = [
      ("garbage", Array("hello there\r\n\r\n".utf8), 400),
      ("no target", Array("GET\r\n\r\n".utf8), 400),
      ("three spaces", Array("GET  /metrics HTTP/1.1\r\nHost: x\r\n\r\n".utf8), 400),
      ("no Host", Array("GET /metrics HTTP/1.1\r\n\r\n".utf8), 400),
      ("two Hosts", Array("GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".utf8), 400),
      ("bad header", Array("GET /metrics HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n".utf8), 400),
      ("folded header", Array("GET /metrics HTTP/1.1\r\nHost: x\r\n continued\r\n\r\n".utf8), 400),
      ("NUL bytes", Array("GET /me".utf8) + [0, 0xFF] + Array("trics HTTP/1.1\r\nHost: x\r\n\r\n".utf8), 400),
      ("absolute target", Array("GET http://x/metrics HTTP/1.1\r\nHost: x\r\n\r\n".utf8), 200),
      ("relative target", Array("GET metrics HTTP/1.1\r\nHost: x\r\n\r\n".utf8), 400),
      ("HTTP/2.0", Array("GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n".utf8), 505),
      ("bad version", Array("GET /metrics HTTQ/1.1\r\nHost: x\r\n\r\n".utf8), 400),
      ("POST", Array("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello".utf8), 405),
      ("PUT", Array("PUT / HTTP/1.1\r\nHost: x\r\n\r\n".utf8), 405),
      ("OPTIONS *", Array("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n".utf8), 405),
      ("unknown path", Array("GET /metricsx HTTP/1.1\r\nHost: x\r\n\r\n".utf8), 404),
      (
        "huge header",
        Array("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 20_000))\r\n\r\n".utf8), 431
      ),
      ("endless line", Array(String(repeating: "G", count: 100_000).utf8), 431),
      ("bare LF", Array("GET /metrics HTTP/1.1\nHost: x\n\n".utf8), 200),
    ]
    for (name, bytes, status) in cases {
      let c = try Connection(port: port)
      c.send(bytes)
      let r = try Self.parseReply(c.receiveAll())
      #expect(r.status == status, "\(name): \(r.status) \(r.body)")
      if status == 405 { #expect(r.headers["allow"] == "GET, HEAD", "\(name)") }
      if status != 200 {
        #expect(!r.body.isEmpty && r.headers["content-type"] == "text/plain; charset=utf-8", "\(name)")
      }
    }
    try servesMetrics("the malformed requests")

    // A request split across slow writes is one request.
    let slow = try Connection(port: port)
    for piece in ["GE", "T /metr", "ics HTTP/1.1\r", "\nHost: x\r\n", "\r\n"] {
      slow.send(piece)
      usleep(150_000)
    }
    let slowReply = try Self.parseReply(slow.receiveAll())
    #expect(slowReply.status == 200 && slowReply.body.contains("mappedcache_hits_total"))

    // Half-closed after a whole request: still answered. Half-closed mid-head: 400.
    let half = try Connection(port: port)
    half.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    half.halfClose()
    #expect(try Self.parseReply(half.receiveAll()).status == 200)
    let cut = try Connection(port: port)
    cut.send("GET /metrics HTTP/1.1\r\nHo")
    cut.halfClose()
    #expect(try Self.parseReply(cut.receiveAll()).status == 400)
    // Connections that send nothing and go, and a client that vanishes mid-head.
    for _ in 0..<20 { _ = try Connection(port: port) }
    do {
      let gone = try Connection(port: port)
      gone.send("GET /metr")
    }
    try servesMetrics("clients that went away")

    // Random bytes: always an answer with a status from the list, never a crash.
    var rng = SplitMix(7)
    for round in 0..<40 {
      let count = Int(rng.next() % 300) + 1
      var bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
      if round % 2 == 0 { bytes = Array("GET /metrics HTTP/1.1\r\n".utf8) + bytes }
      bytes += Array("\r\n\r\n".utf8)
      let c = try Connection(port: port)
      c.send(bytes)
      let r = try Self.parseReply(c.receiveAll())
      #expect([400, 404, 405, 505].contains(r.status), "random round \(round): \(r.status)")
    }
    try servesMetrics("random requests")

    // The stalled client's deadline (5 s from its connection) has passed or soon will.
    let timedOut = try Self.parseReply(stalled.receiveAll())
    #expect(timedOut.status == 408)
    try servesMetrics("the timeout")

    // More stalled clients than the server keeps (64): the oldest are dropped, scrapes go on.
    let crowd = try (0..<80).map { _ in
      let c = try Connection(port: port)
      c.send("GET /metrics HTTP/1.1\r\n")
      return c
    }
    try servesMetrics("80 stalled clients")
    #expect(crowd[0].receiveAll().isEmpty, "the oldest stalled client was closed without an answer")
    #expect(server.stop(SIGINT), "SIGINT stops the server with exit 0")
  }

  @Test func listenAddresses() throws {
    let path = TestFiles.tempPath("serve-addr")
    defer { TestFiles.cleanup(path) }
    _ = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20)
    for bad in [
      "9464", "localhost", ":", ":port", ":65536", ":-1", "example.com:80", "::1:80", "[::1]", "[::1]80",
      "[nonsense]:80", "300.1.1.1:80", "127.0.0.1:80x",
    ] {
      let r = try CLITests.cli(["stats", path, "--serve", bad])
      #expect(r.status == 64 && r.err.contains("--serve"), "'\(bad)': \(r.status) \(r.err)")
    }
    for combo in [["--json"], ["--prometheus"], ["--watch", "1"]] {
      #expect(try CLITests.cli(["stats", path, "--serve", ":0"] + combo).status == 64, "\(combo)")
    }
    // ":PORT" means loopback, and a port in use is a clear failure (exit 3).
    let a = try Server(path, address: ":0")
    #expect(a.host == "127.0.0.1")
    let busy = try CLITests.cli(["stats", path, "--serve", "127.0.0.1:\(a.port)"])
    #expect(busy.status == 3 && busy.err.contains("cannot listen"), "\(busy.err)")
    #expect(a.stop())
    // IPv6 loopback, where the host has it.
    if let b = try? Server(path, address: "[::1]:0") {
      #expect(b.host == "::1")
      #expect(try Self.get(b.port, "/metrics", host: "::1").status == 200)
      #expect(b.stop())
    } else {
      print("[::1]: no IPv6 loopback on this host; skipped")
    }
  }
}

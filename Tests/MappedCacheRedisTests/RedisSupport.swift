import Foundation
import Glibc
import MappedCache
import Synchronization
import Testing

@testable import MappedCacheRedis

/// A `redis-server` of the test's own: a free loopback port and a unix socket in a
/// temporary directory, no persistence; killed by `stop()` (and on deinit).
final class RedisServer: @unchecked Sendable {
  static let binary: String? = {
    for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/usr/local/bin").split(separator: ":") + [
      "/usr/bin", "/usr/sbin",
    ] {
      let p = "\(dir)/redis-server"
      if access(p, X_OK) == 0 { return p }
    }
    return nil
  }()

  /// Whether the Redis tests run: redis-server is installed. With MC_REQUIRE_REDIS=1 a
  /// missing server fails `RedisAvailabilityTests` instead of skipping quietly.
  static var available: Bool {
    if binary == nil {
      print("note: redis-server not found on PATH: the Redis tests are skipped (apt-get install redis-server)")
      return false
    }
    return true
  }

  private(set) var port: UInt16
  let dir: String
  var socketPath: String { dir + "/redis.sock" }
  private var process: Process?
  private let extraArgs: [String]

  var url: String { "redis://127.0.0.1:\(port)/0" }
  var unixURL: String { "unix://\(socketPath)" }
  var pid: Int32 { process?.processIdentifier ?? 0 }

  init(port: UInt16? = nil, args: [String] = []) throws {
    self.port = try port ?? Self.freePort()
    dir = NSTemporaryDirectory() + "mc-redis-\(getpid())-\(UUID().uuidString.prefix(8))"
    extraArgs = args
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    // A free port can be taken by another test (or another user of the machine) between
    // the probe and redis-server's bind: then try another one.
    for attempt in 0..<8 {
      do {
        try start()
        return
      } catch CacheError.invalidArgument(let why) where why.hasPrefix("port taken") && port == nil && attempt < 7 {
        self.port = try Self.freePort()
      }
    }
  }

  /// Starts (or restarts, with an empty dataset) the server and waits until it answers.
  func start() throws {
    guard let binary = Self.binary else { throw CacheError.invalidArgument("redis-server is not installed") }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: binary)
    p.arguments =
      [
        "--port", String(port), "--bind", "127.0.0.1", "--unixsocket", socketPath, "--unixsocketperm", "700",
        "--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning",
      ] + extraArgs
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    try p.run()
    process = p
    let c = RedisClient(
      endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: port)),
      options: RedisOptions(connectTimeout: 0.2))
    for _ in 0..<1000 {
      if let info = try? c.call("INFO", "server").string {
        // The server that answers must be ours: another one may own the port.
        if info.contains("process_id:\(p.processIdentifier)\r") { return }
        kill()
        throw CacheError.invalidArgument("port taken: \(port) is another server's")
      }
      if !p.isRunning {
        process = nil
        throw CacheError.invalidArgument("port taken: redis-server could not listen on \(port)")
      }
      usleep(10_000)
    }
    throw CacheError.timedOut(operation: "redis-server on port \(port) did not start")
  }

  /// SIGKILLs the server (no shutdown: its clients see a reset).
  func kill() {
    guard let p = process else { return }
    Glibc.kill(p.processIdentifier, SIGKILL)
    p.waitUntilExit()
    process = nil
    unlink(socketPath)
  }

  func stop() {
    kill()
    try? FileManager.default.removeItem(atPath: dir)
  }

  deinit { stop() }

  /// A client of this server for the test's own commands.
  func client(_ options: RedisOptions = RedisOptions()) -> RedisClient {
    RedisClient(endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: port)), options: options)
  }

  /// A port nobody listens on now (bound to port 0, then closed; a collision with a port
  /// taken meanwhile fails `start`, which the caller may retry).
  private static let handedOut = Mutex<Set<UInt16>>([])

  static func freePort() throws -> UInt16 {
    for _ in 0..<100 {
      let p = try probePort()
      if handedOut.withLock({ $0.insert(p).inserted }) { return p }
    }
    return try probePort()
  }

  private static func probePort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw CacheError.invalidArgument("socket failed") }
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = 0
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let rc = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard rc == 0 else { throw CacheError.invalidArgument("bind failed") }
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    withUnsafeMutablePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(fd, $0, &len) }
    }
    return UInt16(bigEndian: addr.sin_port)
  }
}

/// Polls `condition` every millisecond for up to `timeout` seconds.
/// `eventually` for async tests: it sleeps as a task, so that the tasks it waits for get
/// the cooperative pool's threads (a blocking wait can hold one of only two).
func eventuallyAsync(_ timeout: Double = 5, _ condition: () throws -> Bool) async throws -> Bool {
  let end = Date().addingTimeInterval(timeout)
  while Date() < end {
    if try condition() { return true }
    try await Task.sleep(nanoseconds: 1_000_000)
  }
  return try condition()
}

func eventually(_ timeout: Double = 5, _ condition: () throws -> Bool) rethrows -> Bool {
  let end = Date().addingTimeInterval(timeout)
  while Date() < end {
    if try condition() { return true }
    usleep(1000)
  }
  return try condition()
}

/// A fake server on a loopback port for replies no real server sends: it reads commands
/// and answers each with what `respond` returns (nil: no answer, to test timeouts).
final class FakeServer: @unchecked Sendable {
  let port: UInt16
  private let listener: Int32
  private let respond: @Sendable (RESPValue) -> [UInt8]?
  private let stopped = Mutex(false)
  private let accepted = DispatchSemaphore(value: 0)

  init(respond: @escaping @Sendable (RESPValue) -> [UInt8]?) throws {
    self.respond = respond
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var one: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    listen(fd, 16)
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    withUnsafeMutablePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(fd, $0, &len) }
    }
    port = UInt16(bigEndian: addr.sin_port)
    listener = fd
    Thread.detachNewThread { [self] in serve() }
  }

  var url: String { "redis://127.0.0.1:\(port)" }

  private func serve() {
    while !stopped.withLock({ $0 }) {
      var p = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
      guard poll(&p, 1, 50) > 0 else { continue }
      let c = accept(listener, nil, nil)
      guard c >= 0 else { continue }
      Thread.detachNewThread { [self] in handle(c) }
    }
    close(listener)
  }

  private func handle(_ c: Int32) {
    defer { close(c) }
    var parser = RESPParser()
    var buf = [UInt8](repeating: 0, count: 4096)
    while !stopped.withLock({ $0 }) {
      var p = pollfd(fd: c, events: Int16(POLLIN), revents: 0)
      guard poll(&p, 1, 50) > 0 else { continue }
      let n = buf.withUnsafeMutableBytes { recv(c, $0.baseAddress, $0.count, 0) }
      guard n > 0 else { return }
      parser.append(buf[0..<n])
      while let cmd = try? parser.next() {
        guard let out = respond(cmd) else { continue }
        if out.isEmpty { return }  // an empty answer: close the connection
        _ = out.withUnsafeBytes { send(c, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
      }
    }
  }

  func stop() { stopped.withLock { $0 = true } }
  deinit { stop() }
}

extension RESPValue {
  /// The command name of a request (upper-cased).
  var commandName: String { (elements?.first?.string ?? "").uppercased() }
}

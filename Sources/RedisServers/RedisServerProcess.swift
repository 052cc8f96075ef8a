import Foundation
import Glibc
import MappedCache
import MappedCacheRedis
import SystemCalls

// (A target of its own: `cache-stress --redis-spawn` and `--redis-spawn-cluster` start
// their servers with it, and the tests, through TestSupport, theirs.)

/// Why a redis-server of our own could not be had.
public struct RedisServerError: Error, CustomStringConvertible, Sendable {
  /// What went wrong, in words.
  public var description: String
  /// The port was another server's, or redis-server could not listen on it: another port
  /// may do (the free port found was taken meanwhile).
  public var portTaken = false

  init(_ description: String, portTaken: Bool = false) {
    self.description = description
    self.portTaken = portTaken
  }
}

/// A redis-server of a run's or a test's own: a free loopback port (and a unix socket in
/// its directory, when asked), no persistence, its files in its directory. Killed by
/// `stop()`, and on deinit.
public final class RedisServerProcess: @unchecked Sendable {
  /// The redis-server on PATH (or in /usr/bin, /usr/sbin); nil when none is installed.
  public static let binary: String? = installed("redis-server")
  /// The redis-cli beside it; nil when none is installed (redis-tools).
  public static let cli: String? = installed("redis-cli")

  /// Where it listens on 127.0.0.1.
  public private(set) var port: UInt16
  /// Its working directory (its dump and cluster node files, its socket).
  public let dir: String
  /// Its unix socket, when it has one.
  public let socketPath: String?
  private let ownsDirectory: Bool
  private let extraArguments: [String]
  private let clusterNode: Bool
  private var process: Process?

  /// `redis://127.0.0.1:PORT/0`.
  public var url: String { "redis://127.0.0.1:\(port)/0" }
  /// `unix://SOCKET` (empty without a socket).
  public var unixURL: String { socketPath.map { "unix://\($0)" } ?? "" }
  /// Its pid, 0 while it is not running.
  public var pid: Int32 { process?.processIdentifier ?? 0 }

  /// Starts a server on `port` (nil: a free one, another if it was taken meanwhile), in
  /// `dir` (nil: a fresh temporary directory of its own, removed by `stop()`); with a
  /// unix socket there when asked, as a cluster node (`--cluster-enabled`, its node file
  /// named after its port) when asked, with `arguments` added.
  public init(
    dir: String? = nil, port: UInt16? = nil, unixSocket: Bool = false, clusterNode: Bool = false,
    arguments: [String] = []
  ) throws {
    let d = dir ?? NSTemporaryDirectory() + "mc-redis-\(SystemCall.processID())-\(UUID().uuidString.prefix(8))"
    if dir == nil { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
    self.dir = d
    ownsDirectory = dir == nil
    socketPath = unixSocket ? d + "/redis.sock" : nil
    self.clusterNode = clusterNode
    extraArguments = arguments
    self.port = try port ?? Self.freePort()
    for attempt in 0..<8 {
      do {
        try start()
        return
      } catch let e as RedisServerError where e.portTaken && port == nil && attempt < 7 {
        self.port = try Self.freePort()
      }
    }
  }

  deinit { stop() }

  /// Starts (or starts again, with an empty dataset) the server on its port, and waits
  /// until it answers, as itself: another server may own the port.
  public func start() throws {
    guard let binary = Self.binary else { throw RedisServerError("redis-server is not on PATH") }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: binary)
    p.arguments = arguments()
    p.standardInput = FileHandle.nullDevice
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    try p.run()
    process = p
    let c = client(RedisOptions(connectTimeout: 0.2, commandTimeout: 1))
    for _ in 0..<1000 {
      if let info = try? c.call("INFO", "server").string {
        if info.contains("process_id:\(p.processIdentifier)\r") { return }
        kill()
        throw RedisServerError("port \(port) is another server's", portTaken: true)
      }
      if !p.isRunning {
        process = nil
        throw RedisServerError("redis-server could not listen on port \(port)", portTaken: true)
      }
      SystemCall.sleep(microseconds: 10_000)
    }
    kill()
    throw RedisServerError("redis-server on port \(port) did not answer within 10 s")
  }

  private func arguments() -> [String] {
    var args = [
      "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
      "--daemonize", "no", "--loglevel", "warning",
    ]
    if let socketPath { args += ["--unixsocket", socketPath, "--unixsocketperm", "700"] }
    if clusterNode { args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes-\(port).conf"] }
    return args + extraArguments
  }

  /// SIGKILLs the server (no shutdown: its clients see a reset) and waits for it.
  public func kill() {
    guard let p = process else { return }
    try? SystemCall.kill(p.processIdentifier, SIGKILL)
    p.waitUntilExit()
    process = nil
    if let socketPath { try? SystemCall.unlink(socketPath) }
  }

  /// SIGKILLs the server and starts it again, empty, on the same port.
  public func restart() throws {
    kill()
    try start()
  }

  /// Kills the server; removes its directory when it made its own.
  public func stop() {
    kill()
    if ownsDirectory { try? FileManager.default.removeItem(atPath: dir) }
  }

  /// A client of this server.
  public func client(_ options: RedisOptions = RedisOptions()) -> RedisClient {
    RedisClient(endpoint: RedisEndpoint(address: .tcp(host: "127.0.0.1", port: port)), options: options)
  }

  /// Ports handed out by `freePort` in this process: never twice, so that servers
  /// started at once do not race for one.
  private static let handedOut = SeenMutex<Set<UInt16>>([])

  /// A loopback port nobody listens on now (bound to port 0, then closed); a port taken
  /// meanwhile fails `start`, which tries another.
  public static func freePort() throws -> UInt16 {
    for _ in 0..<100 {
      let p = try probePort()
      if handedOut.withLock({ $0.insert(p).inserted }) { return p }
    }
    return try probePort()
  }

  private static func probePort() throws -> UInt16 {
    let fd = try SystemCall.socket(family: AF_INET)
    defer { SystemCall.close(fd) }
    return try SystemCall.bind(fd, to: .loopback(port: 0)).port
  }

  private static func installed(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    return (path.split(separator: ":") + ["/usr/bin", "/usr/sbin"]).map { "\($0)/\(name)" }.first {
      SystemCall.isAccessible($0, X_OK)
    }
  }
}

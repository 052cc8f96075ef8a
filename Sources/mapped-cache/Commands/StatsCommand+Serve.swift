import Glibc
import MappedCache
import SystemCalls

/// `mapped-cache stats PATH --serve ADDRESS`: the Prometheus endpoint. Every scrape of
/// `/metrics` takes a fresh `Snapshot` (atomic counter words and a lock-free scan of the
/// index, through a read-only mapping: serving never changes the file or slows its writers).
extension StatsCommand {
  static let prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

  static func serve(_ opened: CacheFile, at address: ListenAddress) throws(CLIFailure) -> Int32 {
    Signals.installInterruptHandler()
    let source = Source(opened)
    let server = try HTTPServer(address: address) { request in
      switch request.path {
      case "/metrics":
        switch source.current() {
        case .success(let file):
          return HTTPServer.Response(
            status: 200, contentType: prometheusContentType,
            body: Prometheus.exposition(Snapshot(file)))
        case .failure(let why):
          return HTTPServer.Response(status: 503, body: why.description + "\n")
        }
      case "/":
        return HTTPServer.Response(
          status: 200,
          body: """
            mapped-cache metrics for \(opened.path)

            GET /metrics  the cache's figures in the Prometheus text format (version 0.0.4),
                          read afresh at each scrape without locking the cache

            """)
      default:
        return nil
      }
    }
    let url = "http://\(server.address)/metrics"
    Output.line("serving \(url) for \(opened.path) (Ctrl-C to stop)")
    Output.flush()
    try server.run { Signals.interrupted.load(ordering: .relaxed) }
    return ExitCode.ok
  }

  /// The cache being served. A cache file that is removed and created again (a new
  /// inode at the path) is reopened at the next scrape, so a long-running exporter never
  /// serves the figures of a file nobody uses any more; while the path holds no
  /// readable cache, scrapes get 503 with the reason.
  final class Source {
    private var file: CacheFile
    private var identity: (dev: UInt64, ino: UInt64)?

    init(_ file: CacheFile) {
      self.file = file
      identity = Self.identity(of: file.path)
    }

    func current() -> Result<CacheFile, CacheError> {
      let now = Self.identity(of: file.path)
      guard let now else { return .failure(.invalidArgument("\(file.path) no longer exists")) }
      if let known = identity, known == now { return .success(file) }
      do {
        file = try CacheFile(
          path: file.path, readOnly: true,
          policy: OpenPolicy(allowOtherOwner: true, allowGroupOrWorldWritable: true))
        identity = now
        return .success(file)
      } catch {
        return .failure(error)
      }
    }

    private static func identity(of path: String) -> (dev: UInt64, ino: UInt64)? {
      SystemCall.statIfPresent(path).map { (UInt64($0.st_dev), UInt64($0.st_ino)) }
    }
  }
}

import Glibc
import MappedCache

/// `mapped-cache stats PATH --serve ADDRESS`: the Prometheus endpoint. Every scrape of
/// `/metrics` takes a fresh `Snapshot` (atomic counter words and a lock-free scan of the
/// index, through a read-only mapping: serving never changes the file or slows its writers).
extension StatsCommand {
  static let prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

  static func serve(_ file: CacheFile, at address: ListenAddress) throws(CLIFailure) -> Int32 {
    Signals.installInterruptHandler()
    let server = try HTTPServer(address: address) { request in
      switch request.path {
      case "/metrics":
        return HTTPServer.Response(status: 200, contentType: prometheusContentType,
                                   body: Prometheus.exposition(Snapshot(file)))
      case "/":
        return HTTPServer.Response(status: 200, body: """
          mapped-cache metrics for \(file.path)

          GET /metrics  the cache's figures in the Prometheus text format (version 0.0.4),
                        read afresh at each scrape without locking the cache

          """)
      default:
        return nil
      }
    }
    let url = "http://\(server.address)/metrics"
    Output.line("serving \(url) for \(file.path) (Ctrl-C to stop)")
    Output.flush()
    try server.run { Signals.interrupted.load(ordering: .relaxed) }
    return ExitCode.ok
  }
}

import Foundation
import MappedCache

/// The seeds and login of a cluster URL:
/// `redis-cluster://[user:password@]host:port[,host:port…]` (any subset of the nodes;
/// port 6379 when omitted). Percent-escapes in user and password are decoded.
struct ClusterURL: Equatable {
  var seeds: [ClusterNode]
  var username: String?
  var password: String?

  static let scheme = "redis-cluster://"

  static func isCluster(_ url: String) -> Bool { url.lowercased().hasPrefix(scheme) }

  init(_ url: String) throws {
    func bad(_ why: String) -> CacheError { .invalidArgument("Redis cluster URL \"\(url)\": \(why)") }
    guard Self.isCluster(url) else { throw bad("it does not start with \(Self.scheme)") }
    var rest = Substring(url.dropFirst(Self.scheme.count))
    while rest.hasSuffix("/") { rest = rest.dropLast() }
    if let at = rest.lastIndex(of: "@") {
      let login = rest[..<at]
      rest = rest[rest.index(after: at)...]
      if let colon = login.firstIndex(of: ":") {
        username = String(login[..<colon]).removingPercentEncoding.flatMap { $0.isEmpty ? nil : $0 }
        password = String(login[login.index(after: colon)...]).removingPercentEncoding
      } else {
        password = String(login).removingPercentEncoding
      }
    }
    guard !rest.contains("/"), !rest.contains("?") else {
      throw bad("a cluster has one database (0): give only host:port,host:port")
    }
    seeds = []
    for part in rest.split(separator: ",", omittingEmptySubsequences: true) {
      let hasPort = part.hasPrefix("[") ? part.contains("]:") : part.contains(":")
      guard let node = ClusterNode.parse(hasPort ? part : part + ":6379", defaultHost: "") else {
        throw bad("\"\(part)\" is not host:port with a port in 1-65535")
      }
      seeds.append(node)
    }
    guard !seeds.isEmpty else { throw bad("no seed node") }
  }
}

import Foundation
import MappedCache

/// Where a Redis server listens and how to log in, parsed from a URL:
/// `redis://[user:password@]host:port[/db]` or `unix:///path/redis.sock[?db=N]`
/// (also `unix://user:password@/path?db=N`). Percent-escapes in user and password are decoded.
public struct RedisEndpoint: Sendable, Equatable, CustomStringConvertible {
  /// A TCP host and port, or a unix socket path.
  public enum Address: Sendable, Equatable {
    /// A host name or address, and a port.
    case tcp(host: String, port: UInt16)
    /// The path of a unix socket.
    case unix(path: String)
  }

  /// Where the server listens.
  public var address: Address
  /// ACL user for `AUTH user password` (nil: `default`, or the RESP2 one-argument `AUTH`).
  public var username: String?
  /// The password for `AUTH` (nil: no AUTH).
  public var password: String?
  /// The database `SELECT`ed after connecting (0: none sent).
  public var database: Int

  /// An endpoint from its parts.
  public init(address: Address, username: String? = nil, password: String? = nil, database: Int = 0) {
    self.address = address
    self.username = username
    self.password = password
    self.database = database
  }

  /// Parses a URL; throws `.invalidArgument` saying what is wrong with it.
  public init(url: String) throws {
    func bad(_ why: String) -> CacheError { .invalidArgument("Redis URL \"\(url)\": \(why)") }
    guard let comps = URLComponents(string: url), let scheme = comps.scheme?.lowercased() else {
      throw bad("not a URL; use redis://host:port/db or unix:///path/redis.sock")
    }
    let user = comps.percentEncodedUser.flatMap { $0.removingPercentEncoding }.flatMap { $0.isEmpty ? nil : $0 }
    let pass = comps.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
    var db = 0
    if let q = comps.queryItems?.first(where: { $0.name == "db" })?.value {
      guard let n = Int(q), n >= 0 else { throw bad("db must be a number ≥ 0") }
      db = n
    }
    switch scheme {
    case "redis":
      guard let host = comps.host, !host.isEmpty else { throw bad("no host") }
      let port = comps.port ?? 6379
      guard (1...65535).contains(port) else { throw bad("port \(port) out of range") }
      let path = comps.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
      if !path.isEmpty {
        guard let n = Int(path), n >= 0 else { throw bad("the path must be a database number, not \"\(path)\"") }
        db = n
      }
      let h = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
      self.init(address: .tcp(host: h, port: UInt16(port)), username: user, password: pass, database: db)
    case "unix":
      let path = comps.path
      guard path.hasPrefix("/"), path.count > 1 else { throw bad("a unix URL needs an absolute socket path") }
      guard path.utf8.count < 108 else { throw bad("the socket path is longer than 107 bytes") }
      self.init(address: .unix(path: path), username: user, password: pass, database: db)
    case "rediss":
      throw bad("TLS (rediss://) is not supported; use redis:// on a trusted network or a unix socket")
    default:
      throw bad("unknown scheme \(scheme); use redis:// or unix://")
    }
  }

  /// The address without credentials, for messages.
  public var description: String {
    switch address {
    case .tcp(let h, let p): return h.contains(":") ? "[\(h)]:\(p)" : "\(h):\(p)"
    case .unix(let path): return "unix:\(path)"
    }
  }
}

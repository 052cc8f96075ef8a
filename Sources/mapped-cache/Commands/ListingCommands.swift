import Foundation
import MappedCache

/// `keys` and `dump`: scans of the index without the lock (`CacheFile.forEachEntry`).
enum ListingCommands {
  /// `mapped-cache keys PATH [--prefix P] [--limit N] [--json]`
  static func keys(_ inv: Invocation) throws -> Int32 {
    try list(inv, detailed: false)
  }

  /// `mapped-cache dump PATH [--json] [--values] [--prefix P] [--limit N]`
  static func dump(_ inv: Invocation) throws -> Int32 {
    try list(inv, detailed: true)
  }

  private static func list(_ inv: Invocation, detailed: Bool) throws -> Int32 {
    let prefix = Array((inv.value("--prefix") ?? "").utf8)
    let limit = try inv.integer("--limit", in: 0...Int.max) ?? Int.max
    let values = inv.flag("--values")
    let file = try Opening.forReading(inv)
    let type = file.valueTypeName
    let now = Date()
    var shown = 0

    if inv.flag("--json") {
      var writer = JSON.ArrayWriter()
      if limit > 0 {
        file.forEachEntry(prefix: prefix, values: values) { e in
          writer.append(jsonObject(e, now: now, detailed: detailed, type: type))
          shown += 1
          return shown < limit
        }
      }
      writer.finish()
      return ExitCode.ok
    }

    // For people: an aligned table (so rows are collected first), then a total.
    var table =
      detailed
      ? TextTable(
        header: ["KEY", "SIZE", "TTL", "EXPIRES", "VERSION", "LOG"] + (values ? ["VALUE"] : []),
        align: [.left, .right, .right, .left, .right, .left, .left])
      : TextTable(header: ["KEY", "SIZE", "TTL"], align: [.left, .right, .right])
    var bytes = 0
    if limit > 0 {
      file.forEachEntry(prefix: prefix, values: values) { e in
        var row = [Units.printable(e.key), Units.bytes(e.valueCount), ttlText(e, now: now)]
        if detailed {
          row += [e.expiry.map(Units.date) ?? "never", "\(e.version)", e.inMainLog ? "main" : "small"]
          if values { row.append(Units.printable(ValueText.readable(e.value ?? [], type: type))) }
        }
        table.add(row)
        bytes += e.valueCount
        shown += 1
        return shown < limit
      }
    }
    Output.out(table.render())
    Output.line(
      "\(Units.count(shown)) \(shown == 1 ? "entry" : "entries"), \(Units.bytes(bytes)) of values"
        + (shown == limit ? " (limit reached)" : ""))
    return ExitCode.ok
  }

  static func ttlText(_ e: CacheFile.Entry, now: Date) -> String {
    guard let ttl = e.timeToLive(now: now) else { return "never" }
    return ttl <= 0 ? "expired" : Units.seconds(ttl)
  }

  /// Fields: key (or key_base64), value_bytes, ttl_seconds (null = never);
  /// dump adds expires (ISO 8601 or null), expires_ms, version, log, and value (or
  /// value_base64) with --values, as `get` prints it (`ValueText`).
  static func jsonObject(_ e: CacheFile.Entry, now: Date, detailed: Bool, type: String) -> [String: Any] {
    var o: [String: Any] = ["value_bytes": e.valueCount]
    JSON.bytesField("key", e.key, into: &o)
    o["ttl_seconds"] = e.timeToLive(now: now).map { JSON.number(max(0, $0), digits: 3) } ?? NSNull()
    if detailed {
      o["expires"] = e.expiry.map(Units.date) ?? NSNull()
      o["expires_ms"] = e.expiryMilliseconds.map { Int(truncatingIfNeeded: $0) } ?? NSNull()
      o["version"] = Int(truncatingIfNeeded: e.version)
      o["log"] = e.inMainLog ? "main" : "small"
      if let v = e.value { JSON.bytesField("value", ValueText.readable(v, type: type), into: &o) }
    }
    return o
  }
}

import MappedCache

/// The tools' spelling of a growth policy: `RATE[:FACTOR[:SECONDS[:INSERTS]]]`
/// (`mapped-cache grow --policy`, `cache-stress --growth-policy`), the fields of
/// `GrowthPolicy` in order, defaults for those left out. Values out of range are left for
/// `GrowthPolicy`'s own check (the library's error names the field).
public enum GrowthPolicySpec {
  public static let syntax = "RATE[:FACTOR[:SECONDS[:INSERTS]]]"

  /// The policy `text` spells, or nil when it is not of that shape.
  public static func parse(_ text: String) -> GrowthPolicy? {
    let f = text.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
    guard (1...4).contains(f.count), let rate = Double(f[0]) else { return nil }
    var p = GrowthPolicy(ghostHitRate: rate)
    if f.count > 1 { p.factor = Double(f[1]) ?? -1 }
    if f.count > 2 { p.minimumInterval = Double(f[2]) ?? -1 }
    if f.count > 3 { p.minimumInserts = Int(f[3]) ?? -1 }
    return p
  }

  /// `p` spelled so that `parse` gives it back.
  public static func text(_ p: GrowthPolicy) -> String {
    "\(p.ghostHitRate):\(p.factor):\(p.minimumInterval):\(p.minimumInserts)"
  }
}

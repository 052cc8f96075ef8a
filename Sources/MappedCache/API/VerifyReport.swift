/// What `verify` found. `problems` is empty for a consistent file.
public struct VerifyReport: Sendable, Equatable, Codable {
  /// Each problem found, in words (with `repair`, what was found before repairing).
  public var problems: [String] = []
  /// Problems fixed (only with repair).
  public var repaired = 0
  /// Entries found.
  public var entries = 0
  /// Key and value bytes of those entries.
  public var liveBytes = 0
  /// Index slots checked.
  public var slotsChecked = 0
  /// Records checked in the logs (each one's header, key and value checksum).
  public var recordsChecked = 0
  /// Bytes of the logs' records, from each tail to its head: the entries' records
  /// (headers, keys, values, padding) and the dead ones.
  public var logBytes = 0
  /// Bytes of those records that no entry names (overwritten, removed, or the leftover
  /// of a record rewritten smaller): free only once the log's tail passes them.
  public var deadBytes = 0
  /// Bytes of those dead records that are on their main log's free lists: records bound
  /// for main take them before the tail passes them.
  public var freeBytes = 0
  /// 1 when some entry sits in its key's second place (its first was full), else 0.
  public var maxProbe = 0
  /// Share of the entries that sit in their key's second place.
  public var meanProbe = 0.0
  /// Whether the file is consistent: no problems.
  public var ok: Bool { problems.isEmpty }

  /// Adds partition `p`'s report (of `count` partitions) to this one: its problems named
  /// with the partition when there are several.
  mutating func merge(_ r: VerifyReport, partition p: Int, of count: Int) {
    for problem in r.problems where problems.count <= 100 {
      problems.append(count > 1 ? "partition \(p): \(problem)" : problem)
    }
    let before = entries
    repaired += r.repaired
    entries += r.entries
    liveBytes += r.liveBytes
    slotsChecked += r.slotsChecked
    recordsChecked += r.recordsChecked
    logBytes += r.logBytes
    deadBytes += r.deadBytes
    freeBytes += r.freeBytes
    maxProbe = max(maxProbe, r.maxProbe)
    meanProbe = entries == 0 ? 0 : (meanProbe * Double(before) + r.meanProbe * Double(r.entries)) / Double(entries)
  }
}

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
  /// Longest probe distance of any entry from its home slot.
  public var maxProbe = 0
  /// Mean probe distance of the entries from their home slots.
  public var meanProbe = 0.0
  /// Whether the file is consistent: no problems.
  public var ok: Bool { problems.isEmpty }
}

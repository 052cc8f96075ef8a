/// What `verify` found. `problems` is empty for a consistent file.
public struct VerifyReport: Sendable, Equatable, Codable {
  public var problems: [String] = []
  /// Problems fixed (only with repair).
  public var repaired = 0
  public var entries = 0
  public var liveBytes = 0
  public var slotsChecked = 0
  public var recordsChecked = 0
  /// Longest probe distance of any entry from its home slot, and the mean.
  public var maxProbe = 0
  public var meanProbe = 0.0
  public var ok: Bool { problems.isEmpty }
}

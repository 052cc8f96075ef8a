/// What a read learned about the entry besides its bytes.
public struct EntryInfo: Sendable, Equatable {
  /// Length of the value in bytes.
  public var valueCount: Int
  /// Absolute expiry in milliseconds since 1970, or nil for never.
  public var expiryMilliseconds: UInt64?
  /// The version for compare-and-swap: changes on every write of the key.
  public var version: UInt64
  /// Whether the entry has expired (only returned when expired entries were asked for).
  public var isExpired: Bool
}

import Foundation

/// When an entry expires. Stored in the file as absolute wall-clock milliseconds since
/// 1970, so every process and every restart agrees on it.
public enum CacheExpiry: Sendable, Equatable {
  /// Never expires (it can still be evicted for room).
  case never
  /// Expires this many seconds from now.
  case seconds(TimeInterval)
  /// Expires at this moment.
  case date(Date)

  /// Absolute expiry in milliseconds since 1970; 0 means never. A moment already
  /// past maps to 1 (expired). The clock is read only for `.seconds`.
  @inline(__always)
  func milliseconds(now: @autoclosure () -> UInt64) -> UInt64 {
    switch self {
    case .never:
      return 0
    case .seconds(let s):
      guard s.isFinite else { return s > 0 ? 0 : 1 }
      if s <= 0 { return 1 }
      let ms = min(s * 1000, Double(Format.expiryMask / 2))
      return min(now() &+ UInt64(ms.rounded(.up)), Format.expiryMask)
    case .date(let d):
      let ms = d.timeIntervalSince1970 * 1000
      guard ms.isFinite else { return ms > 0 ? 0 : 1 }
      if ms <= 1 { return 1 }
      // Clamp as a Double first: converting a value past UInt64.max would trap.
      return UInt64(min(ms.rounded(.up), Double(Format.expiryMask)))
    }
  }

  /// The expiry an entry's stored milliseconds stand for.
  static func from(milliseconds ms: UInt64?) -> CacheExpiry {
    guard let ms, ms != 0 else { return .never }
    return .date(Date(timeIntervalSince1970: Double(ms) / 1000))
  }
}

extension Date {
  /// Milliseconds since 1970, clamped to the file's 48-bit expiry field (0 for dates before 1970).
  var milliseconds: UInt64 {
    let ms = timeIntervalSince1970 * 1000
    guard ms.isFinite, ms > 0 else { return 0 }
    return UInt64(min(ms.rounded(.up), Double(Format.expiryMask)))
  }
}

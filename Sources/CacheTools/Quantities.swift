// The quantities both command-line tools read: sizes in bytes and durations in seconds.
// One parser for each, so that `mapped-cache create --capacity 64M` and
// `cache-stress --capacity 64M` mean the same file size.
//
// Sizes are powers of 1024 only: `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (any case).
// `KB`, `MB`, `GB` and `TB` are refused with an error that names both readings, because
// tools disagree on them (1000-based in SI and in disk sizes, 1024-based in `free` and
// in JEDEC memory sizes) and a cache sized 5 % off is a silent surprise.

/// Why a quantity was refused; the text names what was wrong and what is accepted, and
/// the caller puts the option's name in front of it.
public struct QuantityError: Error, Equatable, CustomStringConvertible {
  public let description: String
  public init(_ description: String) { self.description = description }
}

/// Sizes in bytes, as both tools read them: a number and an optional unit that is a
/// power of 1024.
public enum ByteSize {
  /// The accepted units, as error messages and help texts name them.
  public static let units = "B, K or KiB, M or MiB, G or GiB, T or TiB, all powers of 1024"

  /// The largest size accepted: sizes are used as `Int` byte counts and offsets, and
  /// anything near `Int.max` is a typo, not a file.
  public static let maximum = 1 << 60

  private static let powers: [String: Int] = [
    "": 0, "B": 0, "K": 1, "KIB": 1, "M": 2, "MIB": 2, "G": 3, "GIB": 3,
    "T": 4, "TIB": 4,
  ]
  private static let decimal: [String: String] = ["KB": "KiB", "MB": "MiB", "GB": "GiB", "TB": "TiB"]

  /// "4096", "512K", "64MiB", "1.5G", "2 TiB" → bytes. A fraction is allowed with a unit
  /// and rounds to the nearest byte.
  ///
  /// - Throws: `QuantityError` for an empty, negative, malformed or too large size, an
  ///   unknown unit, and the ambiguous `KB`/`MB`/`GB`/`TB`.
  public static func parse(_ text: String) throws(QuantityError) -> Int {
    let (number, rawUnit) = try split(text, what: "a size such as 4096, 512K, 64MiB or 1.5G")
    let unit = rawUnit.uppercased()
    if let binary = decimal[unit] {
      let value = Double(number) ?? 0
      let bytes = value * pow1000(unit == "KB" ? 1 : unit == "MB" ? 2 : unit == "GB" ? 3 : 4)
      throw QuantityError(
        "'\(text.trimmed)' is ambiguous: write \(number)\(binary) for powers of 1024 or "
          + "\(bytes < 1e18 ? String(Int(bytes)) : "the number of bytes") for powers of 1000 (units: \(units))")
    }
    guard let power = powers[unit] else {
      throw QuantityError("unknown unit '\(rawUnit)' in '\(text.trimmed)' (units: \(units))")
    }
    guard let value = Double(number) else {
      throw QuantityError("'\(text.trimmed)' is not a size such as 4096, 512K, 64MiB or 1.5G")
    }
    if power == 0 && number.contains(".") {
      throw QuantityError("'\(text.trimmed)' is a fraction of a byte: give whole bytes or a unit (\(units))")
    }
    var scale = 1.0
    for _ in 0..<power { scale *= 1024 }
    let bytes = (value * scale).rounded()
    guard bytes <= Double(maximum) else {
      throw QuantityError("'\(text.trimmed)' is too large (at most 2^60 bytes)")
    }
    return Int(bytes)
  }

  private static func pow1000(_ n: Int) -> Double {
    var s = 1.0
    for _ in 0..<n { s *= 1000 }
    return s
  }
}

/// Durations in seconds, as both tools read them: a number and an optional unit.
public enum DurationText {
  /// The accepted units, as error messages and help texts name them.
  public static let units = "ms, s, m, h, d; no unit means seconds"

  /// The longest duration accepted, in seconds (about 31,700 years: beyond it a number
  /// is a typo, and every product stays far inside `Double`'s and `Int64`'s ranges).
  public static let maximum = 1e12

  /// "30", "1.5", "250ms", "30s", "10m", "2h", "1d" → seconds.
  ///
  /// - Throws: `QuantityError` for an empty, negative, malformed or too long duration and
  ///   an unknown unit.
  public static func parse(_ text: String) throws(QuantityError) -> Double {
    let (number, rawUnit) = try split(text, what: "a duration such as 30, 1.5s, 250ms, 10m or 2h")
    let scale: Double
    switch rawUnit.lowercased() {
    case "", "s": scale = 1
    case "ms": scale = 0.001
    case "m", "min": scale = 60
    case "h": scale = 3600
    case "d": scale = 86_400
    default: throw QuantityError("unknown unit '\(rawUnit)' in '\(text.trimmed)' (units: \(units))")
    }
    guard let value = Double(number) else {
      throw QuantityError("'\(text.trimmed)' is not a duration such as 30, 1.5s, 250ms, 10m or 2h")
    }
    let seconds = value * scale
    guard seconds <= maximum else { throw QuantityError("'\(text.trimmed)' is too long (at most 10^12 seconds)") }
    return seconds
  }
}

/// Splits "1.5 GiB" into ("1.5", "GiB"): ASCII digits with at most one point (no sign, no
/// exponent, no hexadecimal: `Double("1e3")` and `Double("inf")` would read those), then
/// optional spaces, then letters.
private func split(_ text: String, what: String) throws(QuantityError) -> (number: String, unit: String) {
  let t = text.trimmed
  guard !t.isEmpty else { throw QuantityError("wants \(what), not nothing") }
  if t.hasPrefix("-") { throw QuantityError("'\(t)' is negative") }
  let bytes = Array(t.utf8)
  var i = 0
  var points = 0
  var digits = 0
  while i < bytes.count, bytes[i] == UInt8(ascii: ".") || (bytes[i] >= 0x30 && bytes[i] <= 0x39) {
    if bytes[i] == UInt8(ascii: ".") { points += 1 } else { digits += 1 }
    i += 1
  }
  let number = String(decoding: bytes[..<i], as: UTF8.self)
  while i < bytes.count, bytes[i] == UInt8(ascii: " ") { i += 1 }
  let unit = String(decoding: bytes[i...], as: UTF8.self)
  let letters = unit.utf8.allSatisfy { ($0 | 0x20) >= UInt8(ascii: "a") && ($0 | 0x20) <= UInt8(ascii: "z") }
  guard digits > 0, points <= 1, letters else { throw QuantityError("'\(t)' is not \(what)") }
  return (number, unit)
}

extension String {
  fileprivate var trimmed: String {
    var s = Substring(self)
    while let f = s.first, f.isWhitespace { s.removeFirst() }
    while let l = s.last, l.isWhitespace { s.removeLast() }
    return String(s)
  }
}
